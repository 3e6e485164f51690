/*
** Files as responses: ETag and Last-Modified, If-Match and
** If-Unmodified-Since (412), If-None-Match and If-Modified-Since (304),
** Range (206, several ranges as multipart/byteranges, or 416), and the
** bytes by
** sendfile(2), or by 64 KiB pieces through TLS.
*/
#ifndef CH_HTTP_SENDFILE_H
#define CH_HTTP_SENDFILE_H

#include <stddef.h>

#include "http/conn.h"

/* What ch_http_sendfile did besides sending the file. */
enum { CH_HTTP_SENT = 0, CH_HTTP_NOT_FOUND = 1, CH_HTTP_REFUSED = 2 };

/* Yields. Answers rq with the regular file at path; ctype (ctl bytes, or
** NULL) is its Content-Type unless the handler set one. rq->status is the
** handler's: conditionals and ranges apply to a 200. Returns CH_HTTP_SENT,
** CH_HTTP_NOT_FOUND (no regular file there: nothing sent, no header set),
** CH_HTTP_REFUSED (a 412 or 416 was sent, rq->status says which), or -errno
** (-EALREADY: the response already started; -EINVAL: a bad ctype). */
int ch_http_sendfile(struct ch_http_req *rq, const char *path, const char *ctype, size_t ctl);

#endif
