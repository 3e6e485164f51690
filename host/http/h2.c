/*
** HTTP/2 connections: the nghttp2 session over the connection's stream,
** its reader and writer, the streams' life and their request bodies, the
** drain. See h2.h. Everything here runs on one worker thread, and nghttp2
** is only ever called between two yields, so no call into the session
** overlaps another.
*/
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/ssl.h>

#include "log.h"
#include "http/metrics.h"
#include "worker.h"
#include "http/h2.h"
#include "http/h2_writer.h"
#include "http/response.h"

#define PREFACE       "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define PREFACE_LEN   24
#define READ_WANT     16384       /* room asked of the stream per read: a
                                  ** full frame at the default frame size */
#define CONN_WINDOW   (1 << 20)   /* connection receive window: DATA is
                                  ** acknowledged at once on the connection
                                  ** (per stream only as handlers read), so
                                  ** this only bounds bytes in flight */
#define STREAM_WINDOW 65535       /* per stream: RFC 9113's default, and
                                  ** the most a stream buffers unread */
#define DRAIN_MS      1000        /* shutdown notice to the real GOAWAY */
#define DRAIN_IDLE_MS 500         /* a draining connection with no stream
                                  ** this long gets its GOAWAY: a busy
                                  ** client sends its next request sooner,
                                  ** even on a loaded machine, and an idle
                                  ** one costs the old worker half a second */
#define LINGER_MS     2000        /* lingering close after GOAWAY */
#define FLUSH_MS      1000        /* the writer's time to send what is left
                                  ** once the connection is over */
#define DRAIN_MAX     (1 << 20)   /* request body bytes thrown away after
                                  ** the answer before RST_STREAM */
#define LIMIT_ACK     2           /* the client's ACK of the SETTINGS
                                  ** frame with the stream limit (its 2nd) */
#define HIDDEN_TYPE   0xfe        /* what that ACK becomes: a frame type
                                  ** nghttp2 does not know, and ignores */
#define RESET_BURST   200         /* rapid reset (CVE-2023-44487): streams
                                  ** a client may reset before their answer
                                  ** is out, at once, then */
#define RESET_RATE    50          /* per second; past it GOAWAY
                                  ** ENHANCE_YOUR_CALM. nghttp2's own
                                  ** limiter, which counts every RST_STREAM
                                  ** and says INTERNAL_ERROR, is set 4x
                                  ** looser as a backstop. */

struct ch_h2_conn {
  struct ch_http_conn *c;         /* the HTTP connection it rides */
  nghttp2_session *sess;
  uint8_t writer_alive;           /* the writer has not ended */
  uint8_t closing;                /* the reader is done: the writer sends
                                  ** what is left and ends */
  uint8_t writer_stop;            /* the connection goes idle: the writer
                                  ** ends (nothing is left to send) */
  uint8_t idle;                   /* idle with no coroutine: conn.c's watch
                                  ** brings it back (ch_h2_serve) */
  struct ch_waitq writer_wq;      /* the writer while it waits for work */
  struct ch_waitq reader_wq;      /* the reader while it waits: for input
                                  ** (with watch armed), for the writer, or
                                  ** for the streams to end */
  struct ch_watch watch;          /* input for the parked reader */
  struct ch_h2_stream *streams;   /* live streams (nghttp2's or a task's) */
  int nstreams;
  int ntasks;                     /* streams whose coroutine runs */
  uint8_t dead;                   /* the writer ended and the streams are
                                  ** closed: no more calls into sess */
  uint8_t draining;               /* the worker drains: 1 still serving
                                  ** new streams, 2 the notice is sent, 3
                                  ** the final GOAWAY is */
  struct ch_timer drain_timer;    /* while draining: the drain deadline,
                                  ** then the notice's second step */
  struct ch_timer idle_timer;     /* while draining: DRAIN_IDLE_MS without
                                  ** a stream */
  uint32_t scan_at;               /* the next frame header's offset in
                                  ** the unread input, while feed looks
                                  ** for the limit's ACK */
  uint8_t acks;                   /* SETTINGS ACKs from the client so far,
                                  ** up to the limit's (LIMIT_ACK) */
  double reset_tokens;            /* early resets still allowed */
  uint64_t reset_ns;              /* when reset_tokens was last refilled */
  struct ch_h2_conn *prev, *next; /* this worker's HTTP/2 connections */
};

static __thread struct ch_h2_conn *h2conns;
static __thread uint64_t drain_end_ns;   /* this worker's drain deadline */

static void drain_idle(struct ch_h2_conn *h);

/* -- Detection and ALPN ---------------------------------------------------- */

int ch_h2_detect(struct ch_http_conn *c)
{
  if (!c->srv->http2) return 0;
  if (c->s.ssl) {
    const unsigned char *p;
    unsigned n;
    SSL_get0_alpn_selected(c->s.ssl, &p, &n);
    return n == 2 && memcmp(p, "h2", 2) == 0;
  }
  uint64_t deadline = ch_now_ns() + (uint64_t)c->srv->header_ms * 1000000u;
  for (;;) {
    size_t have = ch_stream_avail(&c->s);
    size_t cmp = have < PREFACE_LEN ? have : PREFACE_LEN;
    if (memcmp(ch_stream_data(&c->s), PREFACE, cmp) != 0) return 0;
    if (have >= PREFACE_LEN) return 1;
    ssize_t n = ch_stream_fill(&c->s, PREFACE_LEN, 0);
    if (n > 0) continue;
    if (n != -EAGAIN) return -1;
    if (have == 0) return 0;   /* nothing yet: HTTP/1.1's idle path */
    uint64_t now = ch_now_ns();
    if (now >= deadline) return -1;
    c->head_wait = ch_current();   /* a drain cancels a half-sent preface */
    int r = ch_stream_wait(&c->s, (int)((deadline - now + 999999) / 1000000u));
    c->head_wait = NULL;
    if (r < 0) return -1;
  }
}

static const unsigned char alpn_h2[] = "\x02h2\x08http/1.1";
static const unsigned char alpn_h1[] = "\x08http/1.1";

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned inlen, void *arg)
{
  (void)ssl;
  const unsigned char *ours = arg;
  unsigned ol = ours == alpn_h2 ? sizeof alpn_h2 - 1 : sizeof alpn_h1 - 1;
  /* Our order wins: h2 when the client offers it. */
  if (SSL_select_next_proto((unsigned char **)out, outlen, ours, ol, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;   /* no common protocol: go on without ALPN */
  return SSL_TLSEXT_ERR_OK;
}

void ch_h2_alpn(SSL_CTX *ctx, int h2)
{
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select, (void *)(h2 ? alpn_h2 : alpn_h1));
}

/* -- Waking ----------------------------------------------------------------- */

nghttp2_session *ch_h2_session(struct ch_h2_stream *st)
{
  return st->closed || st->conn->dead ? NULL : st->conn->sess;
}

static void kick(struct ch_h2_conn *h)
{
  ch_waitq_wake_one(&h->writer_wq);
}

void ch_h2_kick(struct ch_h2_stream *st)
{
  kick(st->conn);
}

int ch_h2_wait(struct ch_h2_stream *st, int ms)
{
  int r = ch_waitq_wait(&st->waiters, ms);
  return r < 0 ? r : 0;
}

void ch_h2_wake(struct ch_h2_stream *st)
{
  ch_waitq_wake_all(&st->waiters);
}

/* -- Streams ---------------------------------------------------------------- */

/* Zeroes st but for the header spans and the error text, 2.6 KB of its
** 3: spans are written before they are read (below nheaders) and the
** text is a C string. calloc's memset of all of it was the largest single
** cost of a request on an h2 connection (docs/benchmarks.md). */
_Static_assert(offsetof(struct ch_http_head, value) ==
               offsetof(struct ch_http_head, name) + sizeof ((struct ch_http_head *)0)->name &&
               offsetof(struct ch_http_head, content_length) ==
               offsetof(struct ch_http_head, value) + sizeof ((struct ch_http_head *)0)->value,
               "stream_clear skips name[] and value[] as one run");

static void stream_clear(struct ch_h2_stream *st)
{
  char *p = (char *)st;
  size_t spans = offsetof(struct ch_h2_stream, rq.h.name);
  size_t after_spans = offsetof(struct ch_h2_stream, rq.h.content_length);
  size_t err = offsetof(struct ch_h2_stream, rq.err);
  size_t after_err = err + sizeof st->rq.err;
  memset(p, 0, spans);
  memset(p + after_spans, 0, err - after_spans);
  memset(p + after_err, 0, sizeof *st - after_err);
  st->rq.err[0] = '\0';
}

static struct ch_h2_stream *stream_new(struct ch_h2_conn *h, int32_t id)
{
  struct ch_h2_stream *st = malloc(sizeof *st);
  if (!st) return NULL;
  stream_clear(st);
  st->conn = h;
  st->id = id;
  st->refs = 1;   /* nghttp2's, until on_stream_close */
  struct ch_http_req *rq = &st->rq;
  rq->c = h->c;
  rq->h2 = st;
  rq->clen = -1;
  rq->status = 200;
  rq->h.content_length = -1;
  rq->h.version_minor = 1;   /* what HTTP/1.1 code reads as "not 1.0" */
  rq->h.keepalive = 1;
  st->next = h->streams;
  if (h->streams) h->streams->prev = st;
  h->streams = st;
  h->nstreams++;
  ch_timer_stop(&h->idle_timer);   /* a draining connection is busy again */
  return st;
}

static void stream_unref(struct ch_h2_stream *st)
{
  if (--st->refs > 0) return;
  struct ch_h2_conn *h = st->conn;
  if (st->prev) st->prev->next = st->next;
  else h->streams = st->next;
  if (st->next) st->next->prev = st->prev;
  h->nstreams--;
  ch_http_req_release(&st->rq);
  free(st->hb);
  free(st->ob);
  free(st);
  if (h->nstreams == 0 && !h->dead) drain_idle(h);
  if (h->nstreams == 0) ch_waitq_wake_one(&h->reader_wq);   /* the teardown waits for this */
}

/* The stream is over for nghttp2 (or the connection went): no more I/O on
** it; its handler, if parked on req/res, wakes to find it closed. A close
** before the response is done (the client's RST_STREAM, a cancelled gRPC
** call) also cancels the handler's task, so a handler parked elsewhere
** (cohost.sleep, a cosocket) stops too: its wait raises "cancelled". */
static void stream_closed(struct ch_h2_stream *st, uint32_t code)
{
  if (st->closed) return;
  st->closed = 1;
  st->close_code = code;
  ch_h2_wake(st);
  if (st->handler && !st->local_done) ch_cancel(st->handler);
  stream_unref(st);
}

/* Makes room for n more header bytes: 0, or -1 (no memory). They stay
** far below 32 bits: on_header holds a head to the server's limits. */
static int hb_room(struct ch_h2_stream *st, size_t n)
{
  size_t need = (size_t)st->hlen + n, cap = st->hcap;
  if (need <= cap) return 0;
  char *p = ch_buf_grow(st->hb, 1, &cap, need, 512);
  if (!p) return -1;
  st->hb = p;
  st->hcap = cap < UINT32_MAX ? (uint32_t)cap : UINT32_MAX;
  return 0;
}

/* Appends s[0..n) to st's header bytes; its offset, or -1 (no memory). */
static long hb_add(struct ch_h2_stream *st, const uint8_t *s, size_t n)
{
  if (hb_room(st, n) < 0) return -1;
  memcpy(st->hb + st->hlen, s, n);
  long off = st->hlen;
  st->hlen += (uint32_t)n;
  return off;
}

static int span(struct ch_h2_stream *st, const uint8_t *s, size_t n, struct ch_http_span *out)
{
  long off = hb_add(st, s, n);
  if (off < 0) return -1;
  out->off = (uint32_t)off;
  out->len = (uint32_t)n;
  return 0;
}

/* Yields. A stream's coroutine: the handler on its task, then what it
** left of the response (the HTTP/1.1 serve's part for one stream). */
static void stream_main(void *arg)
{
  struct ch_h2_stream *st = arg;
  struct ch_http_req *rq = &st->rq;
  struct ch_http_conn *c = st->conn->c;
  struct ch_http_server *srv = c->srv;
  ch_worker_count_request(c->w);
  rq->start_ns = ch_now_ns();
  rq->h.base = st->hb;
  const char *m = st->hb ? st->hb + rq->h.method.off : "";
  rq->head_only = rq->h.method.len == 4 && memcmp(m, "HEAD", 4) == 0;
  if (!st->head_status && (!rq->h.method.len || !rq->h.target.len)) st->head_status = 400;
  if (!st->head_status && rq->h.content_length > 0 &&
      (uint64_t)rq->h.content_length > srv->max_body)
    st->head_status = 413;
  if (st->head_status) {
    rq->status = st->head_status;
    rq->body_status = st->head_status;   /* finish answers it */
  } else if (!st->closed) {
    st->handler = ch_current();
    srv->run(srv, rq);
    st->handler = NULL;
    if (rq->failed < 0) {   /* a target that is no path */
      rq->failed = 0;
      rq->body_status = 400;
    }
  }
  ch_h2_response_finish(rq);
  ch_http_access_log(c, rq);
  /* Counted as HTTP/1.1's serve counts a response (the same series). */
  if (!srv->uncounted)
    ch_http_metrics_count(rq->status, m, rq->h.method.len, rq->route, (double)(ch_now_ns() - rq->start_ns) / 1e9);
  nghttp2_session *s = ch_h2_session(st);
  if (s && !st->remote_done) {
    /* A complete answer before the whole request: what is left of the
    ** body is thrown away as it comes, and past DRAIN_MAX the client is
    ** told to stop (RST_STREAM NO_ERROR, RFC 9113 8.1); some clients
    ** (curl 7.88) report that as an error, so small bodies are drained. */
    st->drain = 1;
    if (rq->body_total > st->consumed)
      nghttp2_session_consume_stream(s, st->id, (size_t)(rq->body_total - st->consumed));
    st->consumed = rq->body_total;
    ch_h2_kick(st);
  }
  st->conn->ntasks--;
  stream_unref(st);
}

/* -- Request bodies ---------------------------------------------------------- */

int ch_h2_body_more(struct ch_http_req *rq, int discard)
{
  struct ch_h2_stream *st = rq->h2;
  if (rq->body_status) return -rq->body_status;
  if (discard) rq->plen = 0;
  for (;;) {
    /* The handler asks for more: what came so far is acknowledged, and
    ** the client may send as much again (its window). */
    nghttp2_session *s = ch_h2_session(st);
    if (s && rq->body_total > st->consumed) {
      nghttp2_session_consume_stream(s, st->id, (size_t)(rq->body_total - st->consumed));
      st->consumed = rq->body_total;
      ch_h2_kick(st);
    }
    if (rq->body_status) return -rq->body_status;
    if (st->fresh) {
      st->fresh = 0;
      if (discard) rq->plen = 0;
      return 1;
    }
    if (st->remote_done) {
      rq->h.body_done = 1;
      return 0;
    }
    if (st->closed) return -ECONNRESET;
    int r = ch_h2_wait(st, ch_http_body_ms(rq));
    if (r < 0) return r;
  }
}

/* -- nghttp2's callbacks ---------------------------------------------------- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
  struct ch_h2_conn *h = ud;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  struct ch_h2_stream *st = stream_new(h, f->hd.stream_id);
  if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* RST_STREAM */
  nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st);
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t nl, const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
  (void)flags;
  struct ch_h2_conn *h = ud;
  struct ch_h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!st || st->head_done || st->head_status) return 0;   /* trailers: not kept */
  struct ch_http_head *hd = &st->rq.h;
  st->hsize += (uint32_t)(nl + vl + 32);
  if (st->hsize > h->c->srv->lim.max_line + h->c->srv->lim.max_header) {
    st->head_status = 431;
    return 0;
  }
  int r = 0;
  if (nl > 0 && name[0] == ':') {
    if (nl == 7 && memcmp(name, ":method", 7) == 0) r = span(st, value, vl, &hd->method);
    else if (nl == 5 && memcmp(name, ":path", 5) == 0) r = span(st, value, vl, &hd->target);
    else if (nl == 10 && memcmp(name, ":authority", 10) == 0) r = span(st, value, vl, &st->authority);
    return r < 0 ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
  }
  if (hd->nheaders == CH_HTTP_MAX_HEADERS) {
    st->head_status = 431;
    return 0;
  }
  int i = hd->nheaders;
  if (span(st, name, nl, &hd->name[i]) < 0 || span(st, value, vl, &hd->value[i]) < 0)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  hd->nheaders++;
  if (nl == 14 && memcmp(name, "content-length", 14) == 0) {
    /* nghttp2 checked it is digits and that DATA will agree */
    char tmp[24];
    size_t k = vl < sizeof tmp - 1 ? vl : sizeof tmp - 1;
    memcpy(tmp, value, k);
    tmp[k] = 0;
    hd->content_length = strtoll(tmp, NULL, 10);
  }
  return 0;
}

static int is_cookie(const struct ch_h2_stream *st, int i)
{
  struct ch_http_span nm = st->rq.h.name[i];
  return nm.len == 6 && memcmp(st->hb + nm.off, "cookie", 6) == 0;
}

/* HTTP/2 may split Cookie into one field per cookie; HTTP/1.1 handlers
** expect one header (RFC 9113 8.2.3: joined with "; "). O(headers). */
static void join_cookies(struct ch_h2_stream *st)
{
  struct ch_http_head *hd = &st->rq.h;
  int n = 0;
  size_t total = 0;
  for (int i = 0; i < hd->nheaders; i++)
    if (is_cookie(st, i)) { n++; total += hd->value[i].len + 2; }
  if (n < 2) return;
  if (hb_room(st, total) < 0) return;   /* room first: the copies below read hb */
  uint32_t start = st->hlen;
  int k = 0, first = -1;
  for (int i = 0; i < hd->nheaders; i++) {
    struct ch_http_span v = hd->value[i];
    if (!is_cookie(st, i)) {
      hd->name[k] = hd->name[i];
      hd->value[k++] = v;
      continue;
    }
    if (first >= 0) {
      memcpy(st->hb + st->hlen, "; ", 2);
      st->hlen += 2;
    } else {
      first = k;
      hd->name[k++] = hd->name[i];
    }
    memcpy(st->hb + st->hlen, st->hb + v.off, v.len);   /* from below start: no overlap */
    st->hlen += v.len;
  }
  hd->value[first] = (struct ch_http_span){ start, st->hlen - start };
  hd->nheaders = k;
}

/* The head is complete: an HTTP/2 request has :authority where HTTP/1.1
** has Host, and handlers look for Host. */
static void head_done(struct ch_h2_stream *st)
{
  struct ch_http_head *hd = &st->rq.h;
  st->head_done = 1;
  join_cookies(st);
  if (!st->authority.len || hd->nheaders == CH_HTTP_MAX_HEADERS) return;
  for (int i = 0; i < hd->nheaders; i++)
    if (hd->name[i].len == 4 && memcmp(st->hb + hd->name[i].off, "host", 4) == 0) return;
  int i = hd->nheaders;
  if (span(st, (const uint8_t *)"host", 4, &hd->name[i]) < 0) return;
  hd->value[i] = st->authority;
  hd->nheaders++;
}

/* One line per attacking connection, rate-limited (log.h). */
static struct ch_log_kind rapid_reset_kind =
  CH_LOG_KIND_INIT("http2: a client resets streams too fast (rapid reset): GOAWAY");

/* A RST_STREAM from the client on a stream not yet answered: rapid reset
** (CVE-2023-44487) makes the server start work for streams it cancels at
** once, so they are rationed by a token bucket (RESET_BURST, RESET_RATE
** a second); past it the connection ends with ENHANCE_YOUR_CALM, once:
** the resets nghttp2 still parses after that (the rest of the read) are
** neither counted nor logged. */
static void early_reset(struct ch_h2_conn *h, nghttp2_session *s)
{
  if (!nghttp2_session_want_read(s)) return;   /* terminated already */
  uint64_t now = ch_now_ns();
  h->reset_tokens += (double)(now - h->reset_ns) * RESET_RATE / 1e9;
  if (h->reset_tokens > RESET_BURST) h->reset_tokens = RESET_BURST;
  h->reset_ns = now;
  if (h->reset_tokens >= 1) {
    h->reset_tokens -= 1;
    return;
  }
  char peer[80];
  ch_http_peer(h->c, peer, sizeof peer);
  ch_log_event(&rapid_reset_kind, CH_LOG_WARN, "http2: %s resets streams too fast (rapid reset): GOAWAY", peer);
  nghttp2_session_terminate_session(s, NGHTTP2_ENHANCE_YOUR_CALM);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
  struct ch_h2_conn *h = ud;
  if (f->hd.type == NGHTTP2_RST_STREAM) {
    struct ch_h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st && !st->local_done) early_reset(h, s);
    return 0;
  }
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
  struct ch_h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!st) return 0;
  if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    st->remote_done = 1;
    ch_h2_wake(st);
  }
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
    head_done(st);
    st->refs++;   /* the coroutine's */
    h->ntasks++;
    if (ch_spawn_prio(stream_main, st, ch_listener_prio(h->c->l)) < 0) {
      st->refs--;
      h->ntasks--;
      nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_REFUSED_STREAM);
    }
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
  (void)flags;
  struct ch_h2_conn *h = ud;
  /* The connection's window never waits for a handler: only the
  ** stream's does, so a stream nobody reads stalls nothing else. */
  nghttp2_session_consume_connection(s, len);
  struct ch_h2_stream *st = nghttp2_session_get_stream_user_data(s, id);
  if (!st) return 0;
  struct ch_http_req *rq = &st->rq;
  if (st->drain) {   /* the answer is out: thrown away, up to a point */
    nghttp2_session_consume_stream(s, id, len);
    st->drained += len;
    if (st->drained > DRAIN_MAX)
      nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
    return 0;
  }
  if (rq->body_status) {   /* past the limit: thrown away */
    nghttp2_session_consume_stream(s, id, len);
    return 0;
  }
  if (rq->body_total + len > h->c->srv->max_body) {
    rq->body_status = 413;
    nghttp2_session_consume_stream(s, id, len);
    ch_h2_wake(st);
    return 0;
  }
  if (rq->plen + len > rq->pcap) {
    char *p = ch_buf_grow(rq->pend, 1, &rq->pcap, rq->plen + len, 16384);
    if (!p) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    rq->pend = p;
  }
  memcpy(rq->pend + rq->plen, data, len);
  rq->plen += len;
  rq->body_total += len;
  st->fresh = 1;
  ch_h2_wake(st);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
  (void)ud;
  struct ch_h2_stream *st = nghttp2_session_get_stream_user_data(s, id);
  if (st) stream_closed(st, code);
  return 0;
}

static int on_error(nghttp2_session *s, int code, const char *msg, size_t len, void *ud)
{
  (void)s; (void)code; (void)ud;
  ch_log(CH_LOG_INFO, "http2: %.*s", (int)len, msg);
  return 0;
}

/* -- The writer ------------------------------------------------------------- */

static void wake_reader(struct ch_h2_conn *h)
{
  ch_waitq_wake_one(&h->reader_wq);
}

/* Nothing left to send: the writer ends once the reader is closing or
** the connection goes idle, else parks (ch_h2_writer_run). When the
** session wants neither to read nor to write (GOAWAY done, no streams
** left) it wakes the reader, which ends the connection. */
static int writer_idle(void *arg)
{
  struct ch_h2_conn *h = arg;
  if (h->closing || h->writer_stop) return 1;
  if (!nghttp2_session_want_read(h->sess) && !nghttp2_session_want_write(h->sess))
    wake_reader(h);
  /* No stream and nothing to send: the reader, parked on input, may
  ** now let the connection go idle with no coroutine (read_loop). */
  if (h->nstreams == 0) wake_reader(h);
  return 0;
}

/* Yields. The connection's writer. */
static void writer_main(void *arg)
{
  struct ch_h2_conn *h = arg;
  struct ch_http_conn *c = h->c;
  ch_h2_writer_run(h->sess, &c->s, c->srv->send_ms, &h->writer_wq, writer_idle, h, "http2");
  h->writer_alive = 0;
  wake_reader(h);   /* a write that failed ends the reader too */
}

/* -- The connection ----------------------------------------------------------- */

static nghttp2_session_callbacks *callbacks(void)
{
  static __thread nghttp2_session_callbacks *cbs;
  if (cbs || nghttp2_session_callbacks_new(&cbs) != 0) return cbs;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_session_callbacks_set_error_callback2(cbs, on_error);
  return cbs;
}

static int session_new(struct ch_h2_conn *h)
{
  struct ch_http_server *srv = h->c->srv;
  nghttp2_session_callbacks *cbs = callbacks();
  nghttp2_option *opt;
  if (!cbs || nghttp2_option_new(&opt) != 0) return -1;
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_stream_reset_rate_limit(opt, 4 * RESET_BURST, 4 * RESET_RATE);
  nghttp2_option_set_max_settings(opt, 32);
  int r = nghttp2_session_server_new2(&h->sess, cbs, h, opt);
  nghttp2_option_del(opt);
  if (r != 0) return -1;
  nghttp2_settings_entry iv[] = {
    { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW },
    { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, srv->lim.max_line + srv->lim.max_header },
    { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
  };
  /* The stream limit in a SETTINGS frame of its own, the second (see
  ** hide_limit_ack). */
  nghttp2_settings_entry limit = { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, srv->h2_max_streams };
  if (nghttp2_submit_settings(h->sess, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
      nghttp2_submit_settings(h->sess, NGHTTP2_FLAG_NONE, &limit, 1) != 0 ||
      nghttp2_session_set_local_window_size(h->sess, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
    return -1;
  h->scan_at = PREFACE_LEN;
  return 0;
}

/* A stream past the limit is refused, and the connection goes on. nghttp2
** refuses one (RST_STREAM REFUSED_STREAM) only while the SETTINGS frame
** with the limit is unacknowledged; once the client's ACK is in, it ends
** the whole connection for it instead (GOAWAY PROTOCOL_ERROR), losing
** every stream in flight. RFC 9113 5.1.2 allows both; clients retry a
** refused stream. So the limit goes out in a SETTINGS frame of its own,
** the second, and the client's second ACK never reaches nghttp2: its type
** byte becomes HIDDEN_TYPE, which nghttp2 skips, and the limit stays
** pending there (the refusing kind) for the connection's life. Until that
** ACK has passed, this walks the frame headers of the n unread bytes at
** p; it returns how many nghttp2 may have: all but a frame header cut
** short, whose type must be seen before nghttp2 reads it. O(frames), and
** only at the start of a connection (a client ACKs at once). */
static size_t hide_limit_ack(struct ch_h2_conn *h, unsigned char *p, size_t n)
{
  size_t at = h->scan_at;
  while (h->acks < LIMIT_ACK && at + 9 <= n) {
    size_t len = (size_t)p[at] << 16 | (size_t)p[at + 1] << 8 | p[at + 2];
    if (p[at + 3] == NGHTTP2_SETTINGS && (p[at + 4] & NGHTTP2_FLAG_ACK) && ++h->acks == LIMIT_ACK)
      p[at + 3] = HIDDEN_TYPE;
    at += 9 + len;
  }
  if (h->acks == LIMIT_ACK) return n;
  if (at < n) {   /* a header cut short: it waits for its last bytes */
    h->scan_at = 0;
    return at;
  }
  h->scan_at = (uint32_t)(at - n);
  return n;
}

/* Feeds what the stream has buffered to nghttp2. 0, or -1 when the
** connection is to end (a fatal error: bad preface, flood, no memory). */
static int feed(struct ch_h2_conn *h)
{
  struct ch_http_conn *c = h->c;
  size_t n = ch_stream_avail(&c->s);
  if (n && h->acks < LIMIT_ACK) n = hide_limit_ack(h, (unsigned char *)ch_stream_data(&c->s), n);
  if (n == 0) return 0;
  ssize_t r = nghttp2_session_mem_recv(h->sess, (const uint8_t *)ch_stream_data(&c->s), n);
  if (r < 0) {
    ch_log(CH_LOG_INFO, "http2: a client's connection failed: %s", nghttp2_strerror((int)r));
    if (r == NGHTTP2_ERR_FLOODED || r == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
      nghttp2_session_terminate_session(h->sess, r == NGHTTP2_ERR_FLOODED
                                                     ? NGHTTP2_ENHANCE_YOUR_CALM
                                                     : NGHTTP2_PROTOCOL_ERROR);
    return -1;
  }
  ch_stream_consume(&c->s, (size_t)r);
  kick(h);
  return 0;
}

/* -- The drain ------------------------------------------------------------------
**
** A draining worker (a reload, SIGTERM) keeps serving the streams its
** HTTP/2 connections open, as nginx does with an old worker's busy
** connection: any GOAWAY, even RFC 9113 6.8's shutdown notice, makes a
** client such as nghttp2's stop starting the streams it queued, and
** h2load does not resend those on its next connection. So a connection
** gets its GOAWAY (the last stream served, then the close) once it has
** had no stream for DRAIN_IDLE_MS; a request that races with it is
** refused, which a client may retry. At the drain deadline (half of
** --shutdown-timeout: the other half is for the streams in flight) the
** connections still busy get the two-step GOAWAY: the notice, then
** DRAIN_MS later the last stream id. */

static void final_goaway(struct ch_h2_conn *h)
{
  h->draining = 3;
  nghttp2_submit_goaway(h->sess, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(h->sess), NGHTTP2_NO_ERROR,
                        NULL, 0);
  kick(h);
}

static void on_drain_timer(struct ch_timer *t)
{
  struct ch_h2_conn *h = (struct ch_h2_conn *)((char *)t - offsetof(struct ch_h2_conn, drain_timer));
  if (h->dead) return;
  if (h->draining == 1) {   /* the deadline: a notice first */
    h->draining = 2;
    nghttp2_submit_shutdown_notice(h->sess);
    kick(h);
    if (ch_timer_start(&h->drain_timer, DRAIN_MS, on_drain_timer) == 0) return;
  }
  if (h->draining == 2) final_goaway(h);
}

static void on_idle_timer(struct ch_timer *t)
{
  struct ch_h2_conn *h = (struct ch_h2_conn *)((char *)t - offsetof(struct ch_h2_conn, idle_timer));
  if (h->dead || h->nstreams > 0 || h->draining == 3) return;
  ch_timer_stop(&h->drain_timer);
  /* The session ends once this GOAWAY is out (no stream is left). */
  h->draining = 3;
  nghttp2_session_terminate_session2(h->sess, nghttp2_session_get_last_proc_stream_id(h->sess),
                                     NGHTTP2_NO_ERROR);
  kick(h);
}

void ch_h2_goaway(struct ch_h2_stream *st)
{
  struct ch_h2_conn *h = st->conn;
  if (h->dead || h->draining >= 2) return;
  /* What the drain deadline does, now: a stream that never ends on its
  ** own (gRPC's) must not keep its client on a worker that goes. */
  h->draining = 2;
  ch_timer_stop(&h->drain_timer);
  nghttp2_submit_shutdown_notice(h->sess);
  kick(h);
  if (ch_timer_start(&h->drain_timer, DRAIN_MS, on_drain_timer) < 0) final_goaway(h);
}

/* A draining connection has no stream: its GOAWAY in DRAIN_IDLE_MS. */
static void drain_idle(struct ch_h2_conn *h)
{
  if (!h->draining || h->draining == 3) return;
  ch_timer_stop(&h->idle_timer);
  if (ch_timer_start(&h->idle_timer, DRAIN_IDLE_MS, on_idle_timer) < 0) on_idle_timer(&h->idle_timer);
}

void ch_h2_close_idle(struct ch_worker *w)
{
  (void)w;   /* the list is this thread's */
  uint64_t now = ch_now_ns();
  if (!drain_end_ns) drain_end_ns = now + (uint64_t)ch_opts.shutdown_timeout_ms * 500000u;
  int64_t left = drain_end_ns > now ? (int64_t)((drain_end_ns - now) / 1000000u) : 0;
  for (struct ch_h2_conn *h = h2conns; h; h = h->next) {
    /* An idle one is conn.c's (its drain closes it, ch_h2_free). */
    if (h->dead || h->draining || h->idle) continue;
    h->draining = 1;
    ch_timer_stop(&h->drain_timer);
    if (ch_timer_start(&h->drain_timer, left, on_drain_timer) < 0) on_drain_timer(&h->drain_timer);
    if (h->nstreams == 0) drain_idle(h);
  }
}

static void on_readable(struct ch_watch *w, int revents)
{
  (void)revents;
  wake_reader(w->data);
}

/* Yields. Parks the reader until cond holds (the writer and the stream
** tasks wake it as they end). */
#define WAIT_UNTIL(h, cond) \
  while (!(cond)) { \
    if (ch_waitq_wait(&(h)->reader_wq, -1) == -ECANCELED) \
      ch_yield();   /* the worker is going: they end soon */ \
  }

static int start_writer(struct ch_h2_conn *h)
{
  h->writer_alive = 1;
  h->writer_stop = 0;
  if (ch_spawn_prio(writer_main, h, ch_listener_prio(h->c->l)) >= 0) return 0;
  h->writer_alive = 0;
  return -1;
}

/* A connection that may go idle with no coroutine: no stream, nothing to
** send, not ending, the worker not draining (a drain GOAWAYs it from
** here), the input a plain POLLIN wait. */
static int quiet(struct ch_h2_conn *h)
{
  struct ch_http_conn *c = h->c;
  return h->nstreams == 0 && !h->draining && !c->w->stopping && !h->closing &&
         c->s.want_ev == POLLIN && nghttp2_session_want_read(h->sess) &&
         !nghttp2_session_want_write(h->sess);
}

/* Yields. Ends the writer of an idle connection; 1 when the connection is
** still idle after (no yield between its last EAGAIN and the return), 0
** when it is not (a new writer runs then). */
static int park_idle(struct ch_h2_conn *h)
{
  h->writer_stop = 1;
  kick(h);
  WAIT_UNTIL(h, !h->writer_alive);
  if (quiet(h) && ch_stream_fill(&h->c->s, READ_WANT, 0) == -EAGAIN) return 1;
  return start_writer(h) < 0 ? -1 : 0;
}

/* Yields. The reader: input into nghttp2 until the connection ends (0) or
** goes idle (1). It parks on a one-shot watch rather than in the stream's
** wait, so that the writer can wake it too (the session may end on the
** writer's side). */
static int read_loop(struct ch_h2_conn *h)
{
  struct ch_http_conn *c = h->c;
  if (feed(h) < 0) return 0;   /* the preface and what came with it */
  h->watch.data = h;
  for (;;) {
    if (!h->writer_alive) return 0;
    if (!nghttp2_session_want_read(h->sess) && !nghttp2_session_want_write(h->sess)) return 0;
    ssize_t n = ch_stream_fill(&c->s, READ_WANT, 0);
    if (n > 0) {
      if (feed(h) < 0) return 0;
      continue;
    }
    if (n != -EAGAIN) return 0;   /* EOF, a read error */
    if (!ch_waitq_empty(&h->writer_wq) && quiet(h)) {
      int r = park_idle(h);
      if (r != 0) return r > 0;
      if (feed(h) < 0) return 0;   /* input came meanwhile: it is buffered */
      continue;
    }
    ch_stream_release(&c->s);   /* park without a buffer */
    if (ch_watch_fd(&h->watch, c->s.fd, c->s.want_ev, on_readable) < 0) return 0;
    n = ch_waitq_wait(&h->reader_wq, c->srv->keepalive_ms);
    ch_unwatch_fd(&h->watch);
    if (n == -ETIMEDOUT) {
      /* Running streams have their own timeouts; streams a client left
      ** half open (no task) keep nothing alive. */
      if (h->ntasks > 0) continue;
      /* Idle past keepalive_timeout: GOAWAY, then the writer ends it. */
      nghttp2_session_terminate_session(h->sess, NGHTTP2_NO_ERROR);
      kick(h);
      continue;
    }
    if (n == -ECANCELED) return 0;
  }
}


int ch_h2_serve(struct ch_http_conn *c)
{
  struct ch_h2_conn *h = c->h2;
  if (h) {   /* back from idle: input came */
    h->idle = 0;
  } else {
    if (!(h = calloc(1, sizeof *h))) return 0;
    h->c = c;
    h->reset_tokens = RESET_BURST;
    h->reset_ns = ch_now_ns();
    if (session_new(h) < 0) {
      if (h->sess) nghttp2_session_del(h->sess);
      free(h);
      return 0;
    }
    h->next = h2conns;
    if (h2conns) h2conns->prev = h;
    h2conns = h;
    c->h2 = h;
  }
  if (start_writer(h) == 0) {
    if (c->w->stopping) ch_h2_close_idle(c->w);
    if (read_loop(h) > 0) {
      h->idle = 1;
      return 1;
    }
  }
  /* Over. The writer sends what is left (a GOAWAY) and ends; only then do
  ** the streams close, since nghttp2 reads their bodies while it sends. */
  h->closing = 1;
  kick(h);
  /* A client that does not read gets FLUSH_MS for that, then the socket
  ** is shut both ways, which ends a write parked on it. */
  uint64_t give_up = ch_now_ns() + (uint64_t)FLUSH_MS * 1000000u;
  while (h->writer_alive) {
    uint64_t now = ch_now_ns();
    int64_t left = now < give_up ? (int64_t)((give_up - now) / 1000000u) + 1 : -1;
    int r = ch_waitq_wait(&h->reader_wq, left);
    if (r == -ETIMEDOUT && c->s.fd >= 0) shutdown(c->s.fd, SHUT_RDWR);
    if (r == -ECANCELED) ch_yield();
  }
  h->dead = 1;
  for (struct ch_h2_stream *st = h->streams, *next; st; st = next) {
    st->refs++;   /* stream_closed may free it: keep it until next is read */
    stream_closed(st, NGHTTP2_CANCEL);
    next = st->next;
    stream_unref(st);
  }
  /* The stream tasks point at h: wait for them. */
  WAIT_UNTIL(h, h->nstreams == 0);
  ch_timer_stop(&h->drain_timer);
  ch_timer_stop(&h->idle_timer);
  if (h->prev) h->prev->next = h->next;
  else h2conns = h->next;
  if (h->next) h->next->prev = h->prev;
  nghttp2_session_del(h->sess);
  free(h);
  c->h2 = NULL;
  ch_stream_linger(&c->s, LINGER_MS, 1 << 20);
  return 0;
}

void ch_h2_free(struct ch_http_conn *c)
{
  struct ch_h2_conn *h = c->h2;
  assert(h->idle && h->nstreams == 0 && !h->writer_alive);
  /* One non-blocking try: an idle connection's send buffer is empty. */
  nghttp2_session_terminate_session(h->sess, NGHTTP2_NO_ERROR);
  const uint8_t *p;
  ssize_t n = nghttp2_session_mem_send(h->sess, &p);
  if (n > 0 && c->s.fd >= 0 && !c->s.ssl) (void)send(c->s.fd, p, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
  ch_timer_stop(&h->drain_timer);
  ch_timer_stop(&h->idle_timer);
  if (h->prev) h->prev->next = h->next;
  else h2conns = h->next;
  if (h->next) h->next->prev = h->prev;
  nghttp2_session_del(h->sess);
  free(h);
  c->h2 = NULL;
}
