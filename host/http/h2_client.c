/*
** HTTP/2 client connections: the nghttp2 client session over a stream,
** its reader and writer, and the request streams' waits. See
** h2_client.h. Everything runs on one worker thread, and nghttp2 is only
** called between two yields, so no call into a session overlaps another.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cohost.h"
#include "log.h"
#include "http/h2_writer.h"
#include "http/h2_client.h"

#define READ_WANT     16384       /* room asked of the stream per read: a
                                  ** full frame at the default frame size */
#define WRITE_MS      60000       /* a write that makes no progress for
                                  ** this long ends the connection */
#define FLUSH_MS      1000        /* the writer's time to send what is left
                                  ** once the connection is over */
#define CONN_WINDOW   (16 << 20)  /* connection receive window: DATA is
                                  ** acknowledged at once on the connection
                                  ** (per stream only as callers read), so
                                  ** this only bounds bytes in flight */
#define STREAM_WINDOW (256 << 10) /* per stream: the most a response
                                  ** buffers unread */
#define OQ_MAX        65536       /* request body bytes queued per stream
                                  ** before a writer waits */

struct ch_h2c {
  struct ch_stream s;             /* the connection; owned */
  nghttp2_session *sess;
  int refs;                       /* the owner's, the reader's, the
                                  ** writer's, one per stream */
  int idle_ms;                    /* no stream for this long: GOAWAY */
  int nstreams;                   /* streams nghttp2 has not closed */
  struct ch_h2c_stream *streams;  /* those streams */
  uint8_t writer_alive;
  uint8_t closing;                /* the reader ended: no new I/O; the
                                  ** writer sends what is left and ends */
  uint8_t goaway;                 /* GOAWAY sent or received: no new
                                  ** streams */
  uint8_t released;               /* the owner let go: GOAWAY once the
                                  ** last stream closes */
  uint8_t bytes_in;               /* the server sent something */
  uint8_t settings_in;            /* ... and its SETTINGS came: it speaks
                                  ** HTTP/2 (what it sends first) */
  struct ch_waitq writer_wq;      /* the writer while it waits for work */
  struct ch_waitq reader_wq;      /* the reader while it waits for the
                                  ** writer to end */
};

/* -- References and waking -------------------------------------------------- */

static void conn_unref(struct ch_h2c *h)
{
  if (--h->refs > 0) return;
  nghttp2_session_del(h->sess);
  free(h);
}

static void kick(struct ch_h2c *h)
{
  ch_waitq_wake_one(&h->writer_wq);
}

/* Yields. Parks the caller on q up to ms: 0, -ETIMEDOUT, -ECANCELED. */
static int wait_on(struct ch_waitq *q, int ms)
{
  int r = ch_waitq_wait(q, ms);
  return r < 0 ? r : 0;
}

/* The session st may still use, or NULL. */
static nghttp2_session *sess_of(const struct ch_h2c_stream *st)
{
  return st->closed || st->h->closing ? NULL : st->h->sess;
}

/* The owner let go and nothing is left: GOAWAY, after which the session
** wants neither to read nor to write and the writer ends the connection. */
static void maybe_end(struct ch_h2c *h)
{
  if (!h->released || h->nstreams > 0 || h->closing) return;
  nghttp2_session_terminate_session(h->sess, NGHTTP2_NO_ERROR);
  h->goaway = 1;
  kick(h);
}

/* -- Streams ---------------------------------------------------------------- */

static void stream_unref(struct ch_h2c_stream *st)
{
  if (--st->refs > 0) return;
  struct ch_h2c *h = st->h;
  free(st->hb);
  free(st->ib);
  free(st->ob);
  free(st);
  conn_unref(h);
}

/* nghttp2 is done with st (or the connection went): its waiters wake to
** find it closed. */
static void stream_closed(struct ch_h2c_stream *st, uint32_t code)
{
  if (st->closed) return;
  struct ch_h2c *h = st->h;
  st->closed = 1;
  st->close_code = code;
  if (st->prev) st->prev->next = st->next;
  else h->streams = st->next;
  if (st->next) st->next->prev = st->prev;
  h->nstreams--;
  ch_waitq_wake_all(&st->rwait);
  ch_waitq_wake_all(&st->wwait);
  stream_unref(st);
  maybe_end(h);
}

/* Why st ended before what its caller waits for. A connection that
** ended after bytes that were no SETTINGS frame was not HTTP/2 (an
** HTTP/1.1 server answering h2c's preface with a 400 or a 505). */
static int stream_err(const struct ch_h2c_stream *st)
{
  if (st->gone) return st->h->bytes_in && !st->h->settings_in ? -EPROTONOSUPPORT : -EPIPE;
  if (st->close_code == NGHTTP2_REFUSED_STREAM) return -ECONNREFUSED;
  return -ECONNRESET;
}

/* Grows buffer *b (capacity *cap, used from 0 to *len) to hold n more
** bytes. 0 or -1 (no memory, or past the 32 bits of the fields). */
static int room(char **b, uint32_t *cap, uint32_t len, size_t n)
{
  size_t need = (size_t)len + n, c = *cap;
  if (need <= c) return 0;
  if (need > UINT32_MAX) return -1;
  char *p = ch_buf_grow(*b, 1, &c, need, 512);
  if (!p) return -1;
  *b = p;
  *cap = c < UINT32_MAX ? (uint32_t)c : UINT32_MAX;
  return 0;
}

/* -- nghttp2's callbacks (never yield: they copy and wake) ----------------- */

static struct ch_h2c_stream *stream_of(nghttp2_session *s, int32_t id)
{
  return nghttp2_session_get_stream_user_data(s, id);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t nl, const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
  (void)flags; (void)ud;
  struct ch_h2c_stream *st = stream_of(s, f->hd.stream_id);
  if (!st || f->hd.type != NGHTTP2_HEADERS) return 0;
  if (nl == 7 && memcmp(name, ":status", 7) == 0) {
    /* nghttp2 checked it is there once and first; 3 digits it leaves to us */
    if (vl == 3 && value[0] >= '1' && value[0] <= '9' && value[1] >= '0' && value[1] <= '9' &&
        value[2] >= '0' && value[2] <= '9')
      st->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    else
      st->bad_head = 1;
    return 0;
  }
  if (room(&st->hb, &st->hcap, st->hlen, nl + vl + 2) < 0)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* RST_STREAM */
  memcpy(st->hb + st->hlen, name, nl);
  st->hb[st->hlen + nl] = 0;
  memcpy(st->hb + st->hlen + nl + 1, value, vl);
  st->hb[st->hlen + nl + 1 + vl] = 0;
  st->hlen += (uint32_t)(nl + vl + 2);
  return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
  struct ch_h2c *h = ud;
  if (f->hd.type == NGHTTP2_SETTINGS) h->settings_in = 1;
  if (f->hd.type == NGHTTP2_GOAWAY) {
    /* Streams above its last id are closed by nghttp2 as REFUSED_STREAM:
    ** the server did not process them. */
    h->goaway = 1;
    return 0;
  }
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
  struct ch_h2c_stream *st = stream_of(s, f->hd.stream_id);
  if (!st) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && !st->head_done) {
    if (st->bad_head || st->status == 0) {
      st->bad_head = 1;
    } else if (st->status >= 200) {
      st->head_done = 1;
      st->head_end = st->hlen;
    } else {   /* 1xx: an interim head, forgotten */
      st->status = 0;
      st->hlen = 0;
    }
  }
  if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) st->remote_done = 1;
  ch_waitq_wake_all(&st->rwait);
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
  (void)flags; (void)ud;
  /* The connection's window never waits for a caller: only the stream's
  ** does, so a stream nobody reads stalls nothing else. */
  nghttp2_session_consume_connection(s, len);
  struct ch_h2c_stream *st = stream_of(s, id);
  if (!st) return 0;
  if (st->dropped) {
    nghttp2_session_consume_stream(s, id, len);
    return 0;
  }
  if (st->ioff == st->ilen) st->ioff = st->ilen = 0;
  if (room(&st->ib, &st->icap, st->ilen, len) < 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  memcpy(st->ib + st->ilen, data, len);
  st->ilen += (uint32_t)len;
  ch_waitq_wake_all(&st->rwait);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
  (void)ud;
  struct ch_h2c_stream *st = stream_of(s, id);
  if (st) stream_closed(st, code);
  return 0;
}

/* The request body's source: what the queue holds; DEFERRED when it is
** empty and more is to come (ch_h2c_write resumes it). */
static ssize_t on_read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                            uint32_t *flags, nghttp2_data_source *src, void *ud)
{
  (void)s; (void)id; (void)ud;
  struct ch_h2c_stream *st = src->ptr;
  size_t have = st->olen - st->ooff;
  if (have == 0 && !st->oend) {
    st->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  size_t n = have < len ? have : len;
  memcpy(buf, st->ob + st->ooff, n);
  st->ooff += (uint32_t)n;
  if (st->ooff == st->olen) {
    st->ooff = st->olen = 0;
    if (st->oend) *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  ch_waitq_wake_all(&st->wwait);   /* room in the queue */
  return (ssize_t)n;
}

static int on_error(nghttp2_session *s, int code, const char *msg, size_t len, void *ud)
{
  (void)s; (void)code; (void)ud;
  ch_log(CH_LOG_INFO, "http2 client: %.*s", (int)len, msg);
  return 0;
}

static nghttp2_session_callbacks *callbacks(void)
{
  static __thread nghttp2_session_callbacks *cbs;
  if (cbs || nghttp2_session_callbacks_new(&cbs) != 0) return cbs;
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_session_callbacks_set_error_callback2(cbs, on_error);
  return cbs;
}

/* -- The writer and the reader ---------------------------------------------- */

/* Nothing left to send: the writer ends when the reader is closing, else
** parks (ch_h2_writer_run). When the session wants neither to read nor
** to write (GOAWAY done, no streams) it shuts the socket, which ends the
** reader's fill. */
static int writer_idle(void *arg)
{
  struct ch_h2c *h = arg;
  if (h->closing) return 1;
  if (!nghttp2_session_want_read(h->sess) && !nghttp2_session_want_write(h->sess) &&
      h->s.fd >= 0)
    shutdown(h->s.fd, SHUT_RDWR);
  return 0;
}

/* Yields. The connection's writer; ends when the reader is closing or a
** write fails. */
static void writer_main(void *arg)
{
  struct ch_h2c *h = arg;
  ch_coro_set_weak(ch_current(), 1);   /* see reader_main */
  ch_h2_writer_run(h->sess, &h->s, WRITE_MS, &h->writer_wq, writer_idle, h, "http2 client");
  h->writer_alive = 0;
  if (h->s.fd >= 0) shutdown(h->s.fd, SHUT_RDWR);   /* ends the reader's fill */
  ch_waitq_wake_one(&h->reader_wq);
  conn_unref(h);
}

/* Feeds what the stream has buffered to nghttp2. 0, or -1 when the
** connection is to end. */
static int feed(struct ch_h2c *h)
{
  size_t n = ch_stream_avail(&h->s);
  h->bytes_in = 1;
  ssize_t r = nghttp2_session_mem_recv(h->sess, (const uint8_t *)ch_stream_data(&h->s), n);
  if (r < 0) {
    ch_log(CH_LOG_INFO, "http2 client: a server's connection failed: %s",
           nghttp2_strerror((int)r));
    return -1;
  }
  ch_stream_consume(&h->s, (size_t)r);
  kick(h);   /* SETTINGS ACK, WINDOW_UPDATE, PING ACK, or what was freed */
  return 0;
}

/* Yields. The reader: input into nghttp2 until EOF, an error, or the end
** of the session; then the teardown. */
static void reader_main(void *arg)
{
  struct ch_h2c *h = arg;
  /* Weak, as an idle pooled HTTP/1.1 connection's timer: the tasks with
  ** requests on the connection keep the worker running, its reader and
  ** writer never do, so a script whose tasks are done exits (and a
  ** worker shutting down ends) though the connection is still open. */
  ch_coro_set_weak(ch_current(), 1);
  for (;;) {
    if (!h->writer_alive) break;
    if (!nghttp2_session_want_read(h->sess) && !nghttp2_session_want_write(h->sess)) break;
    ssize_t n = ch_stream_fill(&h->s, READ_WANT, h->idle_ms);
    if (n > 0) {
      if (feed(h) < 0) break;
      continue;
    }
    if (n == -ETIMEDOUT) {
      /* Streams have their callers' timeouts; an idle connection ends. */
      if (h->nstreams == 0 && !h->goaway) {
        nghttp2_session_terminate_session(h->sess, NGHTTP2_NO_ERROR);
        h->goaway = 1;
        kick(h);
      }
      continue;
    }
    break;   /* EOF, a read error, the worker going */
  }
  /* Over: the writer sends what is left and ends (a write stuck that long
  ** is cut by shutting the socket); then the streams fail. */
  h->closing = 1;
  h->goaway = 1;
  kick(h);
  uint64_t give_up = ch_now_ns() + (uint64_t)FLUSH_MS * 1000000u;
  while (h->writer_alive) {
    uint64_t now = ch_now_ns();
    int left = now < give_up ? (int)((give_up - now) / 1000000u) + 1 : -1;
    int r = wait_on(&h->reader_wq, left);
    if (r == -ETIMEDOUT && h->s.fd >= 0) shutdown(h->s.fd, SHUT_RDWR);
    if (r == -ECANCELED) ch_yield();   /* the worker is going: it ends soon */
  }
  while (h->streams) {
    h->streams->gone = 1;
    stream_closed(h->streams, NGHTTP2_CANCEL);
  }
  ch_stream_close(&h->s, 1);
  conn_unref(h);
}

/* -- The connection --------------------------------------------------------- */

static int session_new(struct ch_h2c *h)
{
  nghttp2_session_callbacks *cbs = callbacks();
  nghttp2_option *opt;
  if (!cbs || nghttp2_option_new(&opt) != 0) return -1;
  nghttp2_option_set_no_auto_window_update(opt, 1);
  /* Until the server's SETTINGS arrive its stream limit is unknown, and
  ** nghttp2 would assume 100: a burst of requests on a new connection
  ** to a server allowing fewer would be partly refused, and a request
  ** with a function body cannot be sent again. One stream goes at once;
  ** the rest wait in nghttp2's queue for the SETTINGS (sent with the
  ** server's preface, so about one round trip), then for free slots. */
  nghttp2_option_set_peer_max_concurrent_streams(opt, 1);
  int r = nghttp2_session_client_new2(&h->sess, cbs, h, opt);
  nghttp2_option_del(opt);
  if (r != 0) return -1;
  nghttp2_settings_entry iv[] = {
    { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
    { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW },
  };
  if (nghttp2_submit_settings(h->sess, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
      nghttp2_session_set_local_window_size(h->sess, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
    return -1;
  return 0;
}

struct ch_h2c *ch_h2c_new(struct ch_stream *s, int idle_ms)
{
  struct ch_h2c *h = calloc(1, sizeof *h);
  if (!h) {
    ch_stream_close(s, 0);
    return NULL;
  }
  h->s = *s;   /* the stream moves here, buffer and TLS state with it */
  ch_stream_init(s, -1, NULL);
  h->idle_ms = idle_ms > 0 ? idle_ms : -1;
  h->refs = 1;   /* the owner's */
  if (session_new(h) < 0) goto fail;
  h->refs++;
  h->writer_alive = 1;
  if (ch_spawn(writer_main, h) < 0) {
    h->refs--;
    h->writer_alive = 0;
    goto fail;
  }
  h->refs++;
  if (ch_spawn(reader_main, h) < 0) {
    /* The writer, parked or about to be, ends on closing. */
    h->refs--;
    h->closing = 1;
    kick(h);
    h->released = 1;
    conn_unref(h);
    return NULL;
  }
  return h;
fail:
  if (h->sess) nghttp2_session_del(h->sess);
  ch_stream_close(&h->s, 0);
  free(h);
  return NULL;
}

void ch_h2c_free(struct ch_h2c *h)
{
  h->released = 1;
  maybe_end(h);
  conn_unref(h);
}

int ch_h2c_usable(const struct ch_h2c *h)
{
  return !h->closing && !h->goaway && !h->released;
}

int ch_h2c_streams(const struct ch_h2c *h)
{
  return h->nstreams;
}

/* -- Requests ---------------------------------------------------------------- */

struct ch_h2c_stream *ch_h2c_open(struct ch_h2c *h, const nghttp2_nv *nv, size_t n, int body,
                                  int *err)
{
  if (!ch_h2c_usable(h)) {
    *err = -EPIPE;
    return NULL;
  }
  struct ch_h2c_stream *st = calloc(1, sizeof *st);
  if (!st) {
    *err = -ENOMEM;
    return NULL;
  }
  st->h = h;
  nghttp2_data_provider prd = { .source.ptr = st, .read_callback = on_read_body };
  int32_t id = nghttp2_submit_request(h->sess, NULL, nv, n, body ? &prd : NULL, st);
  if (id < 0) {
    free(st);
    *err = id == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPIPE;   /* ids used up */
    return NULL;
  }
  st->id = id;
  st->refs = 2;   /* the caller's, nghttp2's */
  h->refs++;
  st->next = h->streams;
  if (h->streams) h->streams->prev = st;
  h->streams = st;
  h->nstreams++;
  kick(h);
  return st;
}

int ch_h2c_write(struct ch_h2c_stream *st, const char *p, size_t n, int last, int ms)
{
  for (;;) {
    if (st->dropped) return -EPIPE;
    if (st->oend) return -EINVAL;   /* a body already ended */
    if (!sess_of(st)) return st->closed ? stream_err(st) : -EPIPE;
    if (st->olen - st->ooff < OQ_MAX) break;
    int r = wait_on(&st->wwait, ms);
    if (r < 0) return r;
  }
  if (n) {
    if (st->ooff && st->ooff == st->olen) st->ooff = st->olen = 0;
    if (room(&st->ob, &st->ocap, st->olen, n) < 0) return -ENOMEM;
    memcpy(st->ob + st->olen, p, n);
    st->olen += (uint32_t)n;
  }
  if (last) st->oend = 1;
  if (st->deferred) {
    st->deferred = 0;
    nghttp2_session_resume_data(st->h->sess, st->id);
  }
  kick(st->h);
  return 0;
}

int ch_h2c_head(struct ch_h2c_stream *st, int ms)
{
  for (;;) {
    if (st->dropped) return -EPIPE;
    if (st->head_done) return 0;
    if (st->bad_head) return -EPROTO;
    if (st->closed) return stream_err(st);
    int r = wait_on(&st->rwait, ms);
    if (r < 0) return r;
  }
}

ssize_t ch_h2c_read(struct ch_h2c_stream *st, const char **p, int ms)
{
  for (;;) {
    if (st->dropped) return -EPIPE;
    if (st->ilen > st->ioff) {
      *p = st->ib + st->ioff;
      return st->ilen - st->ioff;
    }
    if (st->remote_done) return 0;
    if (st->closed) return stream_err(st);
    int r = wait_on(&st->rwait, ms);
    if (r < 0) return r;
  }
}

void ch_h2c_consume(struct ch_h2c_stream *st, size_t n)
{
  st->ioff += (uint32_t)n;
  if (st->ioff == st->ilen) st->ioff = st->ilen = 0;
  nghttp2_session *s = sess_of(st);
  if (s) {
    nghttp2_session_consume_stream(s, st->id, n);
    kick(st->h);
  }
}

void ch_h2c_reset(struct ch_h2c_stream *st)
{
  nghttp2_session *s = sess_of(st);
  if (!s) return;
  /* nghttp2 closes it once the RST is out (on_stream_close wakes the
  ** waiters then). */
  nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
  kick(st->h);
}

void ch_h2c_stream_free(struct ch_h2c_stream *st)
{
  st->dropped = 1;   /* body bytes that still come are thrown away */
  ch_h2c_reset(st);
  ch_waitq_wake_all(&st->rwait);
  ch_waitq_wake_all(&st->wwait);
  stream_unref(st);
}

void ch_h2c_stream_ref(struct ch_h2c_stream *st)
{
  st->refs++;
}

void ch_h2c_stream_unref(struct ch_h2c_stream *st)
{
  stream_unref(st);
}
