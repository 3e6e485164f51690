/*
** The per-fd table: 2^14 chunk pointers x 2^10 entries. A chunk is
** allocated on the first use of an fd in its range and kept for the life of
** the process; the top level is static and costs no memory until touched.
*/
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cohost.h"
#include "fd.h"

#define CHUNK_BITS 10
#define CHUNK_SIZE (1 << CHUNK_BITS)
#define CHUNKS     (1 << 14)

static _Atomic(struct ch_fd *) chunks[CHUNKS];

struct ch_fd *ch_fd_peek(int fd)
{
  if (fd < 0 || fd >= CHUNKS * CHUNK_SIZE) return NULL;
  struct ch_fd *c = atomic_load_explicit(&chunks[fd >> CHUNK_BITS], memory_order_acquire);
  return c ? &c[fd & (CHUNK_SIZE - 1)] : NULL;
}

struct ch_fd *ch_fd_get(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  if (f || fd < 0 || fd >= CHUNKS * CHUNK_SIZE) return f;
  struct ch_fd *c = calloc(CHUNK_SIZE, sizeof *c);
  if (!c) return NULL;
  struct ch_fd *expect = NULL;
  /* Two threads may race to allocate the same chunk: one wins. */
  if (!atomic_compare_exchange_strong(&chunks[fd >> CHUNK_BITS], &expect, c)) {
    free(c);
    c = expect;
  }
  return &c[fd & (CHUNK_SIZE - 1)];
}

void ch_fd_reset(struct ch_fd *f)
{
  uint32_t gen = f->gen + 1;
  memset(f, 0, sizeof *f);
  f->gen = gen;
}

int ch_fd_try_read(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  if (!f) return 1;
  int r = !f->in_drained || f->in_edge || f->in_eof;
  f->in_edge = 0;   /* before the read: an edge during it sets it again */
  return r;
}

void ch_fd_read_result(int fd, int drained)
{
  struct ch_fd *f = ch_fd_peek(fd);
  if (f) f->in_drained = drained != 0;
}
