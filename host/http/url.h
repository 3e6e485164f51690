/*
** Request targets: percent-decoding, dot-segment removal (RFC 3986
** 5.2.4) and query strings. No allocation beyond the caller's buffers.
*/
#ifndef CH_HTTP_URL_H
#define CH_HTTP_URL_H

#include <stddef.h>

/* Splits target t[0..n) into its path, decoded and without dot segments,
** written to out (room for n bytes), and its raw query (*q, *qlen; *q
** NULL when there is none). Handles origin-form, absolute-form
** ("http://host/path") and "*" (OPTIONS). Returns the path's length, or
** -1 for a target that is no path or climbs above the root; *same is 1
** when the path is t itself, unchanged (no escapes, dots or query: most
** requests, which then need no string of their own; out is not written
** then). */
int ch_http_url_path(const char *t, size_t n, char *out, const char **q, size_t *qlen,
                     int *same);

/* Calls pair(ud, key, klen, value, vlen) for each "k=v" of query string
** q[0..n), split on '&' only (not ';', CVE-2021-23336), each decoded with
** '+' as a space; a piece that does not decode is passed raw. scratch has
** room for n bytes. */
void ch_http_url_query(const char *q, size_t n, char *scratch,
                       void (*pair)(void *ud, const char *k, size_t kl, const char *v, size_t vl),
                       void *ud);

#endif
