/*
** Growable buffers (Redis's sds, nginx's ngx_array_t). The one growth
** rule and the one overflow check are ch_buf_grow's, inline in cohost.h;
** struct ch_buf's functions are here.
*/
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohost.h"

int ch_buf_expand(struct ch_buf *b, size_t n, size_t first)
{
  if (n > SIZE_MAX - b->len) return -ENOMEM;
  if (b->len + n <= b->cap) return 0;
  char *p = ch_buf_grow(b->p, 1, &b->cap, b->len + n, first);
  if (!p) return -ENOMEM;
  b->p = p;
  return 0;
}

int ch_buf_add(struct ch_buf *b, const void *s, size_t n, size_t first)
{
  if (ch_buf_reserve(b, n, first) < 0) return -ENOMEM;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  return 0;
}

void ch_buf_free(struct ch_buf *b)
{
  free(b->p);
  *b = (struct ch_buf){ NULL, 0, 0 };
}
