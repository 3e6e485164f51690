/*
** HTTP/2 client connections on libnghttp2: one connection over a
** net/stream.c stream (plain h2c or TLS that chose "h2" by ALPN) carries
** the requests of many tasks at once. Framing, HPACK and flow control are
** nghttp2's; the I/O and the waits are ours.
**
** A connection's coroutines:
**   reader   fills the stream (ch_stream_fill, never a read loop of its
**            own) and feeds nghttp2, whose callbacks store heads, body
**            bytes and trailers in the streams and wake their waiters
**   writer   takes nghttp2's frames and writes them; parks when there is
**            nothing to send
**   requests the callers' own: a task opens a stream, writes its body,
**            waits for the head and reads the body, each wait parking that
**            task only, on its own stream
** nghttp2 is only called between two yields, never from inside a wait,
** and its callbacks never yield (they only copy and wake).
**
** Backpressure is flow control: response bytes are acknowledged
** (WINDOW_UPDATE) as the caller reads them, so an unread stream stalls
** only itself; a request body waits in a bounded queue per stream that
** nghttp2 empties as the server's window allows.
**
** Results are the runtime's: 0 or a count, or -errno: -ETIMEDOUT,
** -ECANCELED (the task was cancelled), -EPIPE (the connection is gone),
** -EPROTONOSUPPORT (it ended after bytes that were no SETTINGS frame:
** the server is not HTTP/2),
** -ECONNREFUSED (the server refused the stream, by RST_STREAM
** REFUSED_STREAM or a GOAWAY below it: it did not process the request,
** which may be sent again), -ECONNRESET (another reset: the stream's
** close_code says which), -ENOMEM.
*/
#ifndef CH_H2_CLIENT_H
#define CH_H2_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nghttp2/nghttp2.h>

#include "net/stream.h"

struct ch_h2c;

/* One request. Owned by the caller (ch_h2c_stream_free) and by nghttp2
** until it closes the stream. */
struct ch_h2c_stream {
  struct ch_h2c *h;               /* its connection (holds a ref on it) */
  int32_t id;                     /* the HTTP/2 stream id; -1 if refused
                                  ** before it got one */
  int refs;                       /* the caller's, nghttp2's */
  /* Response head and trailers: "name\0value\0" pairs in hb */
  char *hb;
  uint32_t hlen, hcap;            /* bytes used, allocated */
  uint32_t head_end;              /* hb[0, head_end) is the final head;
                                  ** what follows is trailers */
  int status;                     /* :status of the final head; 0 before */
  uint8_t head_done;              /* the final head is complete */
  uint8_t bad_head;               /* a :status missing or not 3 digits */
  /* Response body: received, not yet read */
  char *ib;
  uint32_t ioff, ilen, icap;      /* ib[ioff, ilen) unread */
  uint8_t remote_done;            /* END_STREAM from the server */
  uint8_t closed;                 /* nghttp2 closed it, or the connection
                                  ** ended */
  uint32_t close_code;            /* RST_STREAM / closing code (0: none) */
  uint8_t gone;                   /* closed because the connection ended */
  uint8_t dropped;                /* the caller let go: body bytes that
                                  ** still come are thrown away */
  /* Request body: queued bytes nghttp2 takes as the window allows */
  char *ob;
  uint32_t ooff, olen, ocap;      /* ob[ooff, olen) unsent */
  uint8_t oend;                   /* no more body after the queue */
  uint8_t deferred;               /* the data source said DEFERRED */
  struct ch_waitq rwait;          /* tasks waiting for head or body */
  struct ch_waitq wwait;          /* tasks waiting for queue room */
  struct ch_h2c_stream *prev, *next;   /* the connection's open streams */
};

/* A client connection over s, whose contents it takes (s is left closed
** and empty). idle_ms: an idle connection (no stream) ends after it,
** with GOAWAY. Starts the reader and the writer and queues the preface
** and SETTINGS. NULL when out of memory (s then closed). Never yields. */
struct ch_h2c *ch_h2c_new(struct ch_stream *s, int idle_ms);

/* The owner lets go: GOAWAY, then the connection ends once its streams
** have (each stream holds the connection). Never yields. */
void ch_h2c_free(struct ch_h2c *h);

/* 1 when new streams may go on h: connected, no GOAWAY either way. */
int ch_h2c_usable(const struct ch_h2c *h);

/* Streams open on h (the caller's and nghttp2's). */
int ch_h2c_streams(const struct ch_h2c *h);

/* Opens a request stream with header fields nv[0..n) (pseudo-headers
** first). body: a body follows (ch_h2c_write), else END_STREAM goes with
** the HEADERS. NULL with *err -ENOMEM or -EPIPE. Never yields. */
struct ch_h2c_stream *ch_h2c_open(struct ch_h2c *h, const nghttp2_nv *nv, size_t n, int body,
                                  int *err);

/* Yields. Queues p[0..n) of the request body (last: it ends there),
** waiting up to ms (< 0: forever) for room while the queue is full.
** 0 or -errno. */
int ch_h2c_write(struct ch_h2c_stream *st, const char *p, size_t n, int last, int ms);

/* Yields. Waits up to ms for the final response head (1xx skipped):
** 0 (st->status, hb[0, head_end)), or -errno; -EPROTO for a bad
** :status. */
int ch_h2c_head(struct ch_h2c_stream *st, int ms);

/* Yields. Waits up to ms for body bytes: their count with *p pointing at
** them (drop them with ch_h2c_consume), 0 at the end of the body (the
** trailers, if any, are in hb after head_end), or -errno. */
ssize_t ch_h2c_read(struct ch_h2c_stream *st, const char **p, int ms);

/* Drops n bytes ch_h2c_read gave and lets the server send as many more
** (WINDOW_UPDATE). Never yields. */
void ch_h2c_consume(struct ch_h2c_stream *st, size_t n);

/* Resets st if it is still open (RST_STREAM CANCEL): its waiters wake
** with -ECONNRESET. Never yields. */
void ch_h2c_reset(struct ch_h2c_stream *st);

/* The caller is done with st: an open stream is reset (CANCEL), and a
** task parked on it (another task of the caller's) wakes with -EPIPE.
** Never yields. */
void ch_h2c_stream_free(struct ch_h2c_stream *st);

/* One more reference to st, for a call that parks on it while another
** task may free it; unref gives it back (and frees st at the last). */
void ch_h2c_stream_ref(struct ch_h2c_stream *st);
void ch_h2c_stream_unref(struct ch_h2c_stream *st);

#endif
