/*
** The HTTP/2 session writer (h2_writer.h). nghttp2_session_mem_send hands
** out one frame (or a part of one) at a time, valid until its next call,
** so frames are copied into the batch as they come.
*/
#include <errno.h>
#include <string.h>

#include "log.h"
#include "http/h2_writer.h"

/* Appends what s has to send to b until b is half full or s has nothing
** more. Returns the bytes b holds (0: nothing to send), or < 0: an
** nghttp2 error code (nghttp2_strerror), or NGHTTP2_ERR_NOMEM. */
static ssize_t fill(struct ch_buf *b, nghttp2_session *s)
{
  if (!b->p && ch_buf_reserve(b, CH_H2_BATCH_SIZE, CH_H2_BATCH_SIZE) < 0) return NGHTTP2_ERR_NOMEM;
  while (b->len < b->cap / 2) {
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(s, &p);
    if (n < 0) return n;
    if (n == 0) break;
    if (ch_buf_reserve(b, (size_t)n, CH_H2_BATCH_SIZE) < 0) return NGHTTP2_ERR_NOMEM;
    memcpy(b->p + b->len, p, (size_t)n);
    b->len += (size_t)n;
  }
  return (ssize_t)b->len;
}

void ch_h2_writer_run(nghttp2_session *sess, struct ch_stream *s, int send_ms,
                      struct ch_waitq *wq, int (*idle)(void *arg), void *arg,
                      const char *who)
{
  struct ch_buf b = { 0 };
  for (;;) {
    ssize_t n = fill(&b, sess);
    if (n < 0) {
      ch_log(CH_LOG_INFO, "%s: %s", who, nghttp2_strerror((int)n));
      break;
    }
    if (n > 0) {
      int r = ch_stream_write(s, b.p, b.len, send_ms);
      b.len = 0;
      if (r < 0) break;
      continue;
    }
    if (idle(arg)) break;
    ch_buf_free(&b);   /* an idle connection holds no batch buffer */
    if (ch_waitq_wait(wq, -1) == -ECANCELED) break;
  }
  ch_buf_free(&b);
}
