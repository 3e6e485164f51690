/*
** The HTTP/2 writers' batch (h2_batch.h). nghttp2_session_mem_send hands
** out one frame (or a part of one) at a time, valid until its next call,
** so frames are copied into the batch as they come.
*/
#include <stdlib.h>
#include <string.h>

#include "http/h2_batch.h"

static int grow(struct ch_h2_batch *b, size_t need)
{
  size_t cap = b->cap;
  while (cap < need) cap *= 2;
  char *p = realloc(b->buf, cap);
  if (!p) return -1;
  b->buf = p;
  b->cap = cap;
  return 0;
}

ssize_t ch_h2_batch_fill(struct ch_h2_batch *b, nghttp2_session *s)
{
  if (!b->buf) {
    if (!(b->buf = malloc(CH_H2_BATCH_SIZE))) return NGHTTP2_ERR_NOMEM;
    b->cap = CH_H2_BATCH_SIZE;
    b->len = 0;
  }
  while (b->len < b->cap / 2) {
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(s, &p);
    if (n < 0) return n;
    if (n == 0) break;
    if (b->len + (size_t)n > b->cap && grow(b, b->len + (size_t)n) < 0)
      return NGHTTP2_ERR_NOMEM;
    memcpy(b->buf + b->len, p, (size_t)n);
    b->len += (size_t)n;
  }
  return (ssize_t)b->len;
}

void ch_h2_batch_release(struct ch_h2_batch *b)
{
  free(b->buf);
  b->buf = NULL;
  b->cap = b->len = 0;
}
