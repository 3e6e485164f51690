/*
** HTTP responses: the handler's header lines, the head (status line,
** Server, Date, Content-Length or chunked, Connection), and the body,
** written through the connection's stream. What a handler leaves
** unanswered or unfinished is completed by ch_http_response_finish.
** Results are 0 or -errno; misuse has its own codes, which lib_http.c
** turns into Lua errors: -EALREADY (the response already started),
** -EINVAL (a header value with control characters), -EMSGSIZE (more body
** than the Content-Length sent), -ERANGE (a Content-Length header that
** disagrees with the body).
*/
#ifndef CH_HTTP_RESPONSE_H
#define CH_HTTP_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "http/conn.h"

/* Whether name is a token fit for a header name (1..256 bytes). */
int ch_http_valid_name(const char *s, size_t n);

/* Whether value has no control characters (no CR or LF: no splitting). */
int ch_http_valid_value(const char *s, size_t n);

/* Removes every header line named name (case-insensitive). */
void ch_http_header_del(struct ch_http_req *rq, const char *name, size_t nl);

/* Adds a header line. 0, -EINVAL for a bad value, -ENOMEM. */
int ch_http_header_add(struct ch_http_req *rq, const char *name, size_t nl,
                       const char *v, size_t vl);

/* Adds a trailer line (res:trailer): sent after a chunked HTTP/1.1 body,
** or as HTTP/2 trailers. 0, -EINVAL for a bad value, -ENOMEM. */
int ch_http_trailer_add(struct ch_http_req *rq, const char *name, size_t nl,
                        const char *v, size_t vl);

/* The first value of header name, with its length, or NULL. */
const char *ch_http_header_get(const struct ch_http_req *rq, const char *name, size_t nl,
                               size_t *vl);

/* Yields. Ends the response with body (the head first if not sent, with
** rq->status). */
int ch_http_response_send(struct ch_http_req *rq, const char *body, size_t n);

/* Yields. Streams a body piece (the head first if not sent). */
int ch_http_response_write(struct ch_http_req *rq, const char *body, size_t n);

/* Yields. Sends the head for a body of clen bytes (-1: chunked, or until
** close on HTTP/1.0) and marks the response finished but for the body
** bytes the caller writes itself (sendfile). */
int ch_http_response_head(struct ch_http_req *rq, int64_t clen);

/* Ends the response at once without completing it (res:reset): HTTP/2
** resets the stream with code (RST_STREAM), the connection going on;
** HTTP/1.1 shuts the connection down (nothing more is sent, it closes
** after the handler). Logged at info. Never yields. 0, or -EALREADY
** once the response is finished or hijacked. */
int ch_http_response_reset(struct ch_http_req *rq, uint32_t code);

/* Yields. After the handler: answers what it left unanswered (its 500 if
** it failed, a 413 or 400 the body earned), ends a chunked body, and says
** whether the connection may be kept (1) or must close (0). */
int ch_http_response_finish(struct ch_http_req *rq);

/* Yields. A response the server makes itself (framing errors, timeouts),
** always with Connection: close. */
void ch_http_answer_error(struct ch_http_conn *c, int status);

/* The reason phrase of status ("Not Found"), "Unknown" for others. */
const char *ch_http_reason(int status);
/* Writes the decimal digits of v at out (20 bytes suffice), no NUL;
** returns how many. */
int ch_http_utoa(uint64_t v, char *out);

/* Frees rq's header lines and pending body. */
void ch_http_req_release(struct ch_http_req *rq);

#endif
