/*
** The per-fd table: 2^14 chunk pointers x 2^10 entries. A chunk is
** allocated on the first use of an fd in its range and kept for the life of
** the process; the top level is static and costs no memory until touched.
** Lookups are inline in fd.h.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "cohost.h"
#include "fd.h"
#include "libc.h"

_Atomic(struct ch_fd *) ch_fd_chunks[CH_FD_CHUNKS];

struct ch_fd *ch_fd_get_chunk(int fd)
{
  if ((unsigned)fd >= (unsigned)(CH_FD_CHUNKS * CH_FD_CHUNK_SIZE)) return NULL;
  struct ch_fd *c = calloc(CH_FD_CHUNK_SIZE, sizeof *c);
  if (!c) return NULL;
  struct ch_fd *expect = NULL;
  /* Two threads may race to allocate the same chunk: one wins. */
  if (!atomic_compare_exchange_strong(&ch_fd_chunks[fd >> CH_FD_CHUNK_BITS], &expect, c)) {
    free(c);
    c = expect;
  }
  return &c[fd & (CH_FD_CHUNK_SIZE - 1)];
}

void ch_fd_reset(struct ch_fd *f)
{
  uint32_t gen = f->gen + 1;
  memset(f, 0, sizeof *f);
  f->gen = gen;
}

/* A socket timeout as whole ms, rounded up and clamped to INT_MAX. */
static int timeo_ms(int fd, int name)
{
  struct timeval tv;
  socklen_t len = sizeof tv;
  if (getsockopt(fd, SOL_SOCKET, name, &tv, &len) < 0) return 0;
  int64_t ms = (int64_t)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
  return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

int ch_fd_classify(int fd, struct ch_fd *f)
{
  struct stat st;
  if (fstat(fd, &st) < 0) return -errno;
  int fl = ch_libc.fcntl(fd, F_GETFL);
  if (fl < 0) return -errno;
  f->user_nonblock = (fl & O_NONBLOCK) != 0;
  if (S_ISSOCK(st.st_mode)) {
    int type = 0;
    socklen_t len = sizeof type;
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
    f->kind = CH_FD_SOCKET;
    f->stream = type == SOCK_STREAM;
    f->rcvtimeo_ms = timeo_ms(fd, SO_RCVTIMEO);
    f->sndtimeo_ms = timeo_ms(fd, SO_SNDTIMEO);
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    f->kind = CH_FD_WAITFIRST;   /* maybe shared with other processes */
    f->stream = 1;
  } else {
    f->kind = CH_FD_OTHER;       /* regular files never go to epoll */
  }
  return 0;
}
