/*
** A buffered connection, plain or TLS: the one read and write path of
** cosockets, HTTP and WebSocket. Reads go into a buffer the protocol
** parses in place; writes go out whole. Every wait is io.c's, so a stream
** parks only its coroutine (or blocks the thread in poll(2) where the
** coroutine may not park) and keeps io.c's readiness judgement.
**
** Results follow the runtime: a count (> 0), 0 at EOF, or -errno:
** -ETIMEDOUT, -ECANCELED, -EBADF (the stream was closed meanwhile, by
** another coroutine), -ENOMEM, -ENOBUFS (the buffer is at its limit),
** -EPROTO (a TLS error), or the system call's error.
*/
#ifndef CH_STREAM_H
#define CH_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <openssl/ssl.h>

struct ch_stream {
  int fd;                   /* -1 once closed */
  uint32_t start, end, cap; /* unread data is buf[start, end); 32 bits:
                            ** a Lua string is under 2 GiB anyway, and an
                            ** idle HTTP connection embeds a stream */
  uint32_t max;             /* most bytes buf may grow to; 0: no limit */
  uint8_t eof;              /* a read said EOF */
  uint8_t filling;          /* coroutines parked on it: a close meanwhile
                            ** leaves the buffer to them */
  uint8_t want_ev;          /* what the last read that found nothing waits
                            ** for: POLLIN, or POLLOUT for a TLS read that
                            ** must write first */
  SSL *ssl;                 /* NULL: plain; owned */
  char *buf;                /* NULL while empty: an idle connection holds
                            ** no buffer; owned */
};

/* A stream on connected, non-blocking fd (ssl NULL for plain, else owned
** from here on). No buffer yet. */
void ch_stream_init(struct ch_stream *s, int fd, SSL *ssl);

/* Closes fd and frees the SSL (with notify, after one close_notify
** attempt that never waits) and the buffer, unless a fill is parked on
** it (that fill then frees it and returns -EBADF). A reader or writer
** parked on the stream wakes with -EBADF. Never yields. */
void ch_stream_close(struct ch_stream *s, int notify);

/* Unread bytes, and where they are (never NULL). */
static inline size_t ch_stream_avail(const struct ch_stream *s) { return s->end - s->start; }
extern char ch_stream_none[1];
static inline char *ch_stream_data(const struct ch_stream *s)
{
  return s->buf ? s->buf + s->start : ch_stream_none;
}

/* Drops n unread bytes; an emptied buffer goes back to the worker's
** cache when it is large (so a parked idle connection holds no buffer). */
void ch_stream_consume(struct ch_stream *s, size_t n);

/* Gives the buffer back if nothing is unread: call before parking. */
void ch_stream_release(struct ch_stream *s);

/* Discards what is unread and gives the buffer back (a read side that
** closed), unless coroutines are parked on the stream. */
void ch_stream_drop(struct ch_stream *s);

/* Room for want more bytes after end: compacts, then grows (doubling, up
** to max). Returns 0, -ENOMEM, or -ENOBUFS at max. Inline when the room is
** there: a fill asks every time. */
int ch_stream_grow(struct ch_stream *s, size_t want);
static inline int ch_stream_reserve(struct ch_stream *s, size_t want)
{
  if (s->buf && (size_t)(s->cap - s->end) >= want) return 0;
  return ch_stream_grow(s, want);
}

/* Puts n bytes at the end of the buffer (bytes read before the stream
** existed, such as a protocol upgrade's first bytes). 0 or -ENOMEM. */
int ch_stream_put(struct ch_stream *s, const void *p, size_t n);

/* Yields. Reads what has arrived into the buffer after making room for
** want bytes, waiting up to timeout_ms for at least one (0: never waits,
** -EAGAIN when nothing is there; the stream gives its empty buffer back
** before it parks). A TLS stream always asks SSL first: it may hold
** decrypted bytes no input edge will announce. Returns bytes read, 0 at
** EOF (eof set), or -errno. */
ssize_t ch_stream_fill(struct ch_stream *s, size_t want, int timeout_ms);

/* Yields. Waits up to timeout_ms for what the last fill that found nothing
** waits for. Returns > 0 ready, or -errno. */
int ch_stream_wait(struct ch_stream *s, int timeout_ms);

/* Yields. Fills until a LF is buffered: returns 1 with *len the bytes up
** to and including it, 0 at EOF, or -errno; the data stays buffered. */
int ch_stream_line(struct ch_stream *s, int timeout_ms, size_t *len);

/* Yields. Fills until pattern pat (plen > 0) is buffered: returns 1 with
** *pos its offset in the unread data, or 2 when limit (0: none) bytes
** that cannot be part of the pattern are buffered first, or 0 at EOF, or
** -errno. *safe is always how many unread bytes cannot start the
** pattern (a possible head of it at the end is held back). */
int ch_stream_until(struct ch_stream *s, const char *pat, size_t plen, size_t limit,
                    int timeout_ms, size_t *pos, size_t *safe);

/* Yields. Writes every byte of iov[0..n) (advancing the array), waiting
** up to timeout_ms between writes that make progress (nginx's
** send_timeout); on TLS, small pieces go out as one record. Returns 0 or
** -errno. */
int ch_stream_writev(struct ch_stream *s, struct iovec *iov, int n, int timeout_ms);

/* Yields. ch_stream_writev of one piece. */
int ch_stream_write(struct ch_stream *s, const void *p, size_t n, int timeout_ms);

/* Yields. A lingering close's first part, after an answer the peer may
** still be sending into: a close with unread input sends RST, which can
** destroy the answer in the peer's receive queue before it is read
** (nginx's lingering_close). So it shuts its side down (after one TLS
** close_notify attempt), then reads and throws away what comes, up to max
** bytes, until EOF or for ms. The caller closes. */
void ch_stream_linger(struct ch_stream *s, int ms, size_t max);

/* Yields. Runs the TLS handshake within timeout_ms: 0, -ETIMEDOUT,
** -EBADF, -ECANCELED or -EPROTO (the reason is logged at info). */
int ch_stream_handshake(struct ch_stream *s, int timeout_ms);

#endif
