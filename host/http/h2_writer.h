/*
** The HTTP/2 session writer, shared by the server's connections (h2.c)
** and the client's (h2_client.c): one loop that takes what nghttp2 has to
** send, gathers it into one buffer so that a burst of frames (ten
** responses' HEADERS and DATA, the WINDOW_UPDATEs) leaves in one write,
** one TLS record and one syscall, writes it to the connection's stream,
** and parks when there is nothing to send.
*/
#ifndef CH_HTTP_H2_WRITER_H
#define CH_HTTP_H2_WRITER_H

#include <nghttp2/nghttp2.h>

#include "cohost.h"
#include "net/stream.h"

#define CH_H2_BATCH_SIZE 32768   /* the usual buffer; a large HEADERS grows it */

/* Yields. Runs a session's writer on the calling coroutine: sends what
** sess has to s (each batch one ch_stream_write within send_ms) until
** nghttp2 has nothing more, then asks idle(arg): non-zero ends the loop,
** 0 parks the writer on wq until a wake (ch_waitq_wake_one(wq), the
** session's "kick": something to send). Also ends when a write fails,
** nghttp2 fails (logged at info, after who: "http2: ...") or the
** coroutine is cancelled. A parked writer holds no batch buffer. The
** caller tears down after it returns. */
void ch_h2_writer_run(nghttp2_session *sess, struct ch_stream *s, int send_ms,
                      struct ch_waitq *wq, int (*idle)(void *arg), void *arg,
                      const char *who);

#endif
