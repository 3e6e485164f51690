/*
** Growable buffers (Redis's sds, nginx's ngx_array_t): the one growth
** rule and the one overflow check of every buffer and array in cohost
** that grows. See cohost.h.
*/
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohost.h"

/* The rule: cap doubled (first when there is none yet) until need fits.
** Doubling makes n appends cost O(n) copying in all. */
static size_t next_cap(size_t cap, size_t need, size_t first)
{
  size_t c = cap ? cap : (first ? first : 1);
  if (cap) c = c <= SIZE_MAX / 2 ? c * 2 : SIZE_MAX;
  while (c < need) c = c <= SIZE_MAX / 2 ? c * 2 : SIZE_MAX;
  return c;
}

void *ch_buf_grow(void *p, size_t size, size_t *cap, size_t need, size_t first)
{
  assert(size > 0 && need > *cap);
  size_t c = next_cap(*cap, need, first), bytes;
  /* The check every caller used to write (or forget): elements times size
  ** within a size_t. A doubling past it falls back to need itself. */
  if (__builtin_mul_overflow(c, size, &bytes) &&
      __builtin_mul_overflow(c = need, size, &bytes))
    return NULL;
  void *q = realloc(p, bytes);
  if (!q) return NULL;
  *cap = c;
  return q;
}

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
