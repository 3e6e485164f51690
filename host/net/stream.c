/*
** Buffered connections. See stream.h. A plain stream's bytes come in
** through one call, ch_io_recv (the runtime's receive with an allocation
** callback, libuv's uv_read_start shape): the buffer is asked for only
** when bytes are there, so a parked stream holds none, whichever I/O
** backend runs. A TLS stream reads through SSL_read (fill_tls), whose
** socket reads are io.c's, and waits in ch_stream_wait. Writes of a plain
** stream are one ch_io_send.
*/
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohost.h"
#include "net/stream.h"
#include "net/tls.h"

#define BUF_MIN    4096           /* first buffer: a 4 KiB page, as nginx's
                                  ** lua_socket_buffer_size */
#define BUF_KEEP   (64 * 1024)    /* larger ones are freed once drained */
#define BUF_CACHE  32             /* drained buffers kept per thread */
#define READ_CHUNK 1024           /* least room worth a read when scanning */
#define COALESCE   16384          /* iovecs this small in total go out as
                                  ** one TLS record */

/* -- Buffers ------------------------------------------------------------------ */

/* Buffers a drained stream let go of, kept for the next reader on this
** thread: every echoed message parks without its buffer (so an idle
** connection holds none) and needs one back, and the cache spares a
** malloc and free per message. Bounded: BUF_CACHE buffers of at most
** BUF_KEEP bytes. */
static __thread struct { char *buf; size_t cap; } cache[BUF_CACHE];
static __thread int ncached;

static void give_back(struct ch_stream *s)
{
  if (s->buf && s->cap <= BUF_KEEP && ncached < BUF_CACHE) {
    cache[ncached].buf = s->buf;
    cache[ncached].cap = s->cap;
    ncached++;
  } else {
    free(s->buf);
  }
  s->buf = NULL;
  s->start = s->end = s->cap = 0;
}

/* A cached buffer of at least want bytes (and at most s->max), or a new
** one of *cap bytes. */
static char *take(const struct ch_stream *s, size_t want, size_t *cap)
{
  for (int i = ncached; i-- > 0;)
    if (cache[i].cap >= want && (!s->max || cache[i].cap <= s->max)) {
      char *b = cache[i].buf;
      *cap = cache[i].cap;
      cache[i] = cache[--ncached];
      return b;
    }
  return malloc(*cap);
}

int ch_stream_grow(struct ch_stream *s, size_t want)
{
  size_t used = s->end - s->start;
  size_t most = s->max ? s->max : UINT32_MAX;
  if (want > most - used) return -ENOBUFS;
  if (!s->buf) {
    size_t cap = want > BUF_MIN ? want : BUF_MIN;
    if (cap > most) cap = most;
    if (!(s->buf = take(s, want, &cap))) return -ENOMEM;
    s->start = s->end = 0;
    s->cap = (uint32_t)cap;
    return 0;
  }
  if (s->cap - s->end >= want) return 0;
  if (s->start > 0) {   /* O(unread) */
    memmove(s->buf, s->buf + s->start, used);
    s->start = 0;
    s->end = (uint32_t)used;
    if (s->cap - s->end >= want) return 0;
  }
  size_t cap = (size_t)s->cap * 2;
  while (cap - used < want) cap *= 2;
  if (cap > most) cap = most;
  char *b = realloc(s->buf, cap);
  if (!b) return -ENOMEM;
  s->buf = b;
  s->cap = (uint32_t)cap;
  return 0;
}

char ch_stream_none[1];   /* the unread data of a stream with no buffer */

void ch_stream_consume(struct ch_stream *s, size_t n)
{
  s->start += (uint32_t)n;
  if (s->start == s->end) {
    s->start = s->end = 0;
    if (s->cap > BUF_KEEP) give_back(s);
  }
}

void ch_stream_release(struct ch_stream *s)
{
  if (s->start == s->end) give_back(s);
}

void ch_stream_drop(struct ch_stream *s)
{
  if (!s->filling) give_back(s);
}

int ch_stream_put(struct ch_stream *s, const void *p, size_t n)
{
  if (n == 0) return 0;
  int r = ch_stream_reserve(s, n);
  if (r < 0) return r;
  memcpy(s->buf + s->end, p, n);
  s->end += (uint32_t)n;
  return 0;
}

/* -- Life --------------------------------------------------------------------- */

void ch_stream_init(struct ch_stream *s, int fd, SSL *ssl)
{
  memset(s, 0, sizeof *s);
  s->fd = fd;
  s->ssl = ssl;
  s->want_ev = POLLIN;
}

void ch_stream_close(struct ch_stream *s, int notify)
{
  if (s->fd >= 0) {
    int fd = s->fd;
    s->fd = -1;
    ch_tls_free(s->ssl, notify);
    close(fd);   /* wakes whoever waits on it with EBADF */
  } else {
    ch_tls_free(s->ssl, 0);
  }
  s->ssl = NULL;
  s->eof = 0;
  if (!s->filling) give_back(s);
}

/* -- Reading ------------------------------------------------------------------ */

/* ch_io_recv's allocation callback: room for what came, at the end of
** the buffer, which is taken now if the stream has none; with no buffer
** asked for, the read found nothing after all and an empty buffer goes
** back (a parked stream holds none). */
static int room(void *ctx, size_t hint, struct iovec *b)
{
  struct ch_stream *s = ctx;
  if (!b) {
    ch_stream_release(s);
    return 0;
  }
  int r = ch_stream_reserve(s, hint);
  if (r < 0) return r;
  b->iov_base = s->buf + s->end;
  b->iov_len = s->cap - s->end;
  return 0;
}

/* Yields. A TLS stream's fill: SSL_read first, always (it may hold
** decrypted bytes, SSL_pending, that no input edge will announce), then
** the wait its WANT_* asks for. Its socket reads are io.c's (the BIO in
** tls.c), so a WANT_* means they said EAGAIN. */
static __attribute__((noinline)) ssize_t fill_tls(struct ch_stream *s, size_t want, int timeout_ms)
{
  for (;;) {
    if (s->fd < 0) return -EBADF;
    int r = ch_stream_reserve(s, want);
    if (r < 0) return r;
    int ev = POLLIN;
    ssize_t n = ch_tls_read(s->ssl, s->buf + s->end, s->cap - s->end, &ev);
    if (n > 0) s->end += (uint32_t)n;
    else if (n == 0) s->eof = 1;
    if (n != -EAGAIN) return n;
    s->want_ev = (uint8_t)ev;
    if (timeout_ms == 0) return n;
    ch_stream_release(s);   /* park without a buffer */
    if ((r = ch_stream_wait(s, timeout_ms)) < 0) return r;
  }
}

int ch_stream_wait(struct ch_stream *s, int timeout_ms)
{
  int fd = s->fd;
  if (fd < 0) return -EBADF;
  s->filling++;
  int r = ch_io_wait(fd, s->want_ev, timeout_ms);
  s->filling--;
  if (s->fd != fd) return -EBADF;   /* closed meanwhile */
  return r;
}

/* A plain stream gives its empty buffer back before the receive: if it
** parks, it parks without one, and the runtime asks for room again once
** bytes are there. filling keeps a close by another coroutine meanwhile
** from freeing what the reader may still hold (a part of a line). */
ssize_t ch_stream_fill(struct ch_stream *s, size_t want, int timeout_ms)
{
  if (s->ssl) return fill_tls(s, want, timeout_ms);
  int fd = s->fd;
  if (fd < 0) return -EBADF;
  ch_stream_release(s);
  s->filling++;
  ssize_t n = ch_io_recv(fd, want, room, s, timeout_ms);
  s->filling--;
  if (s->fd != fd) return -EBADF;   /* closed meanwhile */
  if (n > 0) s->end += (uint32_t)n;
  else if (n == 0) s->eof = 1;
  return n;
}

int ch_stream_line(struct ch_stream *s, int timeout_ms, size_t *len)
{
  size_t scanned = 0;
  for (;;) {
    char *p = ch_stream_data(s);
    size_t avail = ch_stream_avail(s);
    char *nl = avail > scanned ? memchr(p + scanned, '\n', avail - scanned) : NULL;
    if (nl) {
      *len = (size_t)(nl - p) + 1;
      return 1;
    }
    scanned = avail;   /* offsets from start survive a compaction */
    if (s->eof) return 0;
    ssize_t r = ch_stream_fill(s, READ_CHUNK, timeout_ms);
    if (r <= 0) return (int)r;
  }
}

/* Length of the longest tail of p[0, n) that is a head of the pattern:
** those bytes may still turn out to be the pattern. O(plen^2), and plen is
** a boundary string. */
static size_t pattern_tail(const char *p, size_t n, const char *pat, size_t plen)
{
  size_t k = n < plen - 1 ? n : plen - 1;
  for (; k > 0; k--)
    if (memcmp(p + n - k, pat, k) == 0) return k;
  return 0;
}

int ch_stream_until(struct ch_stream *s, const char *pat, size_t plen, size_t limit,
                    int timeout_ms, size_t *pos, size_t *safe)
{
  size_t from = 0;   /* no match starts before this offset */
  *safe = 0;
  for (;;) {
    const char *p = ch_stream_data(s);
    size_t avail = ch_stream_avail(s);
    const char *hit = avail - from >= plen ? memmem(p + from, avail - from, pat, plen) : NULL;
    if (hit) {
      *pos = (size_t)(hit - p);
      *safe = *pos;
      return 1;
    }
    from = avail - pattern_tail(p, avail, pat, plen);
    *safe = from;
    if (limit && from >= limit) return 2;
    if (s->eof) return 0;
    ssize_t r = ch_stream_fill(s, READ_CHUNK, timeout_ms);
    if (r <= 0) return (int)r;
  }
}

/* -- Writing ------------------------------------------------------------------ */

static void advance(struct iovec **iov, int *n, size_t w)
{
  while (*n > 0 && w >= (*iov)->iov_len) {
    w -= (*iov)->iov_len;
    (*iov)++;
    (*n)--;
  }
  if (*n > 0) {
    (*iov)->iov_base = (char *)(*iov)->iov_base + w;
    (*iov)->iov_len -= w;
  }
}

static int write_tls(struct ch_stream *s, struct iovec *iov, int n, int timeout_ms)
{
  /* Pieces written one by one would each make a record (a head and a
  ** short body: two records, two packets); small totals go as one. */
  char one[COALESCE];
  struct iovec single;
  size_t total = 0;
  for (int i = 0; i < n; i++) total += iov[i].iov_len;
  if (n > 1 && total <= sizeof one) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      memcpy(one + off, iov[i].iov_base, iov[i].iov_len);
      off += iov[i].iov_len;
    }
    single.iov_base = one;
    single.iov_len = total;
    iov = &single;
    n = 1;
  }
  while (n > 0) {
    if (s->fd < 0) return -EBADF;
    if (iov->iov_len == 0) { iov++; n--; continue; }
    int ev = POLLOUT;
    ssize_t w = ch_tls_write(s->ssl, iov->iov_base, iov->iov_len, &ev);
    if (w > 0) {
      advance(&iov, &n, (size_t)w);
      continue;
    }
    if (w != -EAGAIN) return (int)w;
    s->want_ev = (uint8_t)ev;
    int r = ch_stream_wait(s, timeout_ms);
    if (r < 0) return r;
  }
  return 0;
}

/* A plain stream's bytes go out through ch_io_send, which may queue them
** (io_uring's write-behind) and return before the kernel has them. */
int ch_stream_writev(struct ch_stream *s, struct iovec *iov, int n, int timeout_ms)
{
  if (s->ssl) return write_tls(s, iov, n, timeout_ms);
  int fd = s->fd;
  if (fd < 0) return -EBADF;
  int r = ch_io_send(fd, iov, n, timeout_ms);
  if (r == 0 && s->fd != fd) return -EBADF;   /* closed while it waited */
  return r;
}

int ch_stream_write(struct ch_stream *s, const void *p, size_t n, int timeout_ms)
{
  struct iovec iov = { (void *)p, n };
  return ch_stream_writev(s, &iov, 1, timeout_ms);
}

void ch_stream_linger(struct ch_stream *s, int ms, size_t max)
{
  int fd = s->fd;
  if (fd < 0) return;
  if (s->ssl) SSL_shutdown(s->ssl);   /* close_notify, once; the rest is raw */
  shutdown(fd, SHUT_WR);
  char junk[4096];
  uint64_t end = ch_now_ns() + (uint64_t)ms * 1000000u;
  size_t total = 0;
  for (;;) {
    uint64_t now = ch_now_ns();
    if (now >= end) break;
    ssize_t n = ch_io_read(fd, junk, sizeof junk, (int64_t)((end - now) / 1000000u) + 1);
    if (n <= 0 || (total += (size_t)n) > max) break;
  }
}

/* -- TLS handshake --------------------------------------------------------------- */

int ch_stream_handshake(struct ch_stream *s, int timeout_ms)
{
  uint64_t deadline = ch_now_ns() + (uint64_t)timeout_ms * 1000000u;
  for (;;) {
    if (s->fd < 0) return -EBADF;
    int ev = POLLIN;
    int r = ch_tls_handshake_step(s->ssl, &ev);
    if (r != -EAGAIN) return r;
    uint64_t now = ch_now_ns();
    if (now >= deadline) return -ETIMEDOUT;
    s->want_ev = (uint8_t)ev;
    r = ch_stream_wait(s, (int)((deadline - now + 999999) / 1000000u));
    if (r < 0) return r;
  }
}
