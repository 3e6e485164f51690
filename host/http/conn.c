/*
** HTTP connections. See conn.h for their life. Bytes come in through the
** connection's stream (net/stream.c): its buffer holds the current
** request from s.start on, its head kept there while the handler runs
** (req.headers and the parsed spans point into it), its parsed body bytes
** dropped as they are decoded.
*/
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"
#include "http/conn.h"
#include "http/h2.h"
#include "http/response.h"
#include "net/proxy.h"
#include "http/metrics.h"
#include "net/tls.h"

#define BUF_SIZE      16384       /* input buffer, at least; grows to fit
                                  ** the limits */
#define DRAIN_MAX     (1 << 20)   /* unread body bytes drained to keep a
                                  ** connection; more closes it */
#define DRAIN_IDLE_MS 1000        /* a drain gives idle connections this
                                  ** long to send one more request */
#define LINGER_MS     2000        /* lingering close: how long to read and
                                  ** discard so the client sees our answer */

static __thread struct ch_http_conn *conns;   /* this worker's */

/* -- Servers --------------------------------------------------------------- */

void ch_http_server_unref(struct ch_http_server *s)
{
  if (--s->refs > 0) return;
  if (s->log_owned) ch_log_file_close(s->log_fd);
  s->on_free(s);   /* frees s (lib_http.c) */
}

/* -- Connections ----------------------------------------------------------- */

const char *ch_http_req_base(const struct ch_http_req *rq)
{
  if (rq->h2) return rq->h.base;   /* the stream's own header bytes */
  return ch_stream_data(&rq->c->s);
}

int ch_http_peer(const struct ch_http_conn *c, char *out, size_t n)
{
  char ip[INET6_ADDRSTRLEN];
  if (c->family == AF_INET) {
    inet_ntop(AF_INET, c->addr, ip, sizeof ip);
    return snprintf(out, n, "%s:%u", ip, c->port);
  }
  if (c->family == AF_INET6) {
    inet_ntop(AF_INET6, c->addr, ip, sizeof ip);
    return snprintf(out, n, "[%s]:%u", ip, c->port);
  }
  return snprintf(out, n, "unix:");
}

static void held_drop(struct ch_http_conn *c);

static void conn_free(struct ch_http_conn *c)
{
  if (c->held) held_drop(c);   /* its writes failed, or it was cut short */
  ch_unwatch_fd(&c->watch);
  ch_timer_stop(&c->timer);
  if (c->h2) ch_h2_free(c);   /* an idle HTTP/2 connection: GOAWAY first */
  ch_stream_close(&c->s, 1);
  if (c->prev) c->prev->next = c->next;
  else if (conns == c) conns = c->next;
  if (c->next) c->next->prev = c->prev;
  struct ch_listener *l = c->l;
  ch_http_server_unref(c->srv);
  free(c);
  ch_listener_conn_end(l);
}

static void conn_main(void *arg);

/* The idle expiry is lazy, as the coroutines' park timers are
** (runtime/sched.c): stopped at every request and started again after
** it, it cost a heap delete and insert per request (a few percent of a
** keep-alive hello, docs/benchmarks.md, and at 1,000 connections the
** heap's cold lines). So the timer stays
** armed while a coroutine serves the connection, and go_idle only moves
** idle_until on, arming the timer if it is not armed or would fire
** late. When it fires early it sets itself for idle_until: one heap
** operation per idle period, not two per request. */
static void on_idle_expired(struct ch_timer *t)
{
  struct ch_http_conn *c = (struct ch_http_conn *)((char *)t - offsetof(struct ch_http_conn, timer));
  if (c->active) return;   /* served meanwhile: go_idle arms it again */
  uint64_t now = ch_now_ns();
  if (now < c->idle_until) {
    int64_t ms = (int64_t)((c->idle_until - now + 999999) / 1000000u);
    if (ch_timer_start(&c->timer, ms, on_idle_expired) == 0) return;
  }
  conn_free(c);
}

static void on_input(struct ch_watch *wt, int revents)
{
  struct ch_http_conn *c = wt->data;
  if (revents & POLLNVAL) {   /* closed behind our back */
    c->s.fd = -1;
    conn_free(c);
    return;
  }
  c->active = 1;
  /* The listener's class (opts.priority) orders its requests against
  ** other work on this worker. */
  if (ch_spawn_prio(conn_main, c, ch_listener_prio(c->l)) < 0) conn_free(c);   /* no stack: shed it */
}

/* Waits for the next request with no coroutine. Call with nothing
** buffered, right after a read said EAGAIN (the watch is edge-triggered). */
static void go_idle(struct ch_http_conn *c, int ms)
{
  ch_stream_release(&c->s);
  c->active = 0;
  c->watch.data = c;
  if (ch_watch_fd(&c->watch, c->s.fd, POLLIN, on_input) < 0) {
    conn_free(c);
    return;
  }
  c->timer.weak = 1;   /* an idle connection never keeps a worker alive */
  c->idle_until = ch_now_ns() + (uint64_t)(ms < 0 ? 0 : ms) * 1000000u;
  if (c->timer.heap_index && c->timer.when_ns <= c->idle_until) return;   /* fires first */
  if (ch_timer_start(&c->timer, ms, on_idle_expired) < 0) conn_free(c);
}

static void set_peer(struct ch_http_conn *c, const union ch_addr *peer)
{
  c->family = (uint8_t)peer->sa.sa_family;
  if (peer->sa.sa_family == AF_INET) {
    c->port = ntohs(peer->in.sin_port);
    memcpy(c->addr, &peer->in.sin_addr, 4);
  } else if (peer->sa.sa_family == AF_INET6) {
    c->port = ntohs(peer->in6.sin6_port);
    memcpy(c->addr, &peer->in6.sin6_addr, 16);
  }
}

void ch_http_admit(void *ud, struct ch_listener *l, int fd, const union ch_addr *peer)
{
  struct ch_http_server *srv = ud;
  struct ch_http_conn *c = calloc(1, sizeof *c);
  SSL_CTX *ctx = ch_listener_ssl_ctx(l);
  SSL *ssl = c && ctx ? ch_tls_new(ctx, fd, 1) : NULL;
  if (!c || (ctx && !ssl)) {
    free(c);
    close(fd);
    ch_listener_conn_end(l);
    return;
  }
  ch_stream_init(&c->s, fd, ssl);
  /* The buffer never grows past what the limits need: a head that does
  ** not fit is a 431. */
  size_t most = (size_t)srv->lim.max_line + srv->lim.max_header + 4096;
  c->s.max = most > BUF_SIZE ? most : BUF_SIZE;
  c->srv = srv;
  srv->refs++;
  c->l = l;
  c->w = ch_worker_self;
  set_peer(c, peer);
  c->next = conns;
  if (conns) conns->prev = c;
  conns = c;
  /* A new socket's first registration reports its current state, so a
  ** request already there wakes us at once. */
  go_idle(c, srv->header_ms);
}

/* Yields. Keeps the worker running for the last DRAIN_IDLE_MS of its idle
** connections (their timers are weak), then closes those still idle. */
static void drain_grace(void *arg)
{
  (void)arg;
  ch_sleep_ms(DRAIN_IDLE_MS);
  for (struct ch_http_conn *c = conns, *next; c; c = next) {
    next = c->next;
    if (!c->active) conn_free(c);
  }
}

/* A drain does not close an idle connection at once: its client may be
** sending the next request (a keep-alive client under load always is) or,
** just accepted, its first, and a close with it unread resets the
** connection. Each gets DRAIN_IDLE_MS: a request that comes is served
** with Connection: close (decide_keep in response.c), and the rest are
** closed. It costs no coroutine per connection: the idle watch and timer
** stay, and one coroutine keeps the worker running meanwhile. */
void ch_http_close_idle(struct ch_worker *w)
{
  (void)w;   /* the list is this thread's */
  int idle = 0;
  for (struct ch_http_conn *c = conns, *next; c; c = next) {
    next = c->next;
    if (!c->active) {
      c->idle_until = ch_now_ns() + (uint64_t)DRAIN_IDLE_MS * 1000000u;
      if (ch_timer_start(&c->timer, DRAIN_IDLE_MS, on_idle_expired) < 0) conn_free(c);
      else idle++;
    } else if (c->head_wait) {
      ch_cancel(c->head_wait);   /* a half-sent head */
    }
  }
  ch_h2_close_idle(w);   /* GOAWAY on HTTP/2 connections */
  if (idle && ch_spawn(drain_grace, NULL) < 0)
    for (struct ch_http_conn *c = conns, *next; c; c = next) {   /* no stack: close now */
      next = c->next;
      if (!c->active) conn_free(c);
    }
}

/* Yields. Closes after an answer the client may still be sending into:
** see ch_stream_linger. */
static void linger_close(struct ch_http_conn *c)
{
  ch_stream_linger(&c->s, LINGER_MS, DRAIN_MAX);
}

/* -- Held output: pipelined responses ----------------------------------------- */

/* A client that pipelines (wrk's 16 deep in TechEmpower's plaintext)
** sends many requests in one packet. Each response written on its own
** costs a send and a TCP segment, the most of the CPU such a request
** takes (docs/benchmarks.md); held back while the next request is
** buffered already, the batch goes out in one. The held bytes of a
** connection live in a list of this worker's, found by a scan (they are
** few: one a connection in the middle of a batch), so an idle connection
** pays one byte (c->held) for it. */
#define HOLD_MAX 65536            /* held bytes a connection at most: more are
                                  ** written at once */

struct held {
  struct held *next;              /* this worker's list */
  struct ch_http_conn *c;
  char *p;                        /* the bytes (malloc) */
  size_t len, cap;
};

static __thread struct held *helds;       /* connections holding output */
static __thread struct held *held_spare;  /* one kept with its buffer */
static __thread struct ch_timer held_timer;

static struct held *held_find(const struct ch_http_conn *c)
{
  struct held *h = helds;
  while (h && h->c != c) h = h->next;
  return h;
}

/* Takes c's held bytes off the list: the caller writes or drops them,
** then gives h back with held_put. */
static struct held *held_take(struct ch_http_conn *c)
{
  struct held **pp = &helds;
  while (*pp && (*pp)->c != c) pp = &(*pp)->next;
  struct held *h = *pp;
  if (h) *pp = h->next;
  c->held = 0;
  return h;
}

static void held_put(struct held *h)
{
  h->len = 0;
  if (!held_spare && h->cap <= HOLD_MAX) {
    held_spare = h;
  } else {
    free(h->p);
    free(h);
  }
}

static void held_drop(struct ch_http_conn *c)
{
  struct held *h = held_take(c);
  if (h) held_put(h);
}

/* The end of a scheduler turn: the responses held while their batch's
** later handlers parked go out now. A socket that takes only part keeps
** the rest for the connection's next write, or another try in 10 ms. */
static void held_expired(struct ch_timer *t)
{
  (void)t;
  for (struct held *h = helds, *next; h; h = next) {
    next = h->next;
    ch_http_conn_push(h->c);
  }
  if (helds) ch_timer_start(&held_timer, 10, held_expired);
}

int ch_http_conn_hold(struct ch_http_req *rq, const char *p, size_t n)
{
  struct ch_http_conn *c = rq->c;
  /* Only a plain connection that keeps, with the next request here (the
  ** bytes after this message's end) and no write of its own parked:
  ** TLS writes want SSL_write's retries of the same bytes. */
  if (c->s.ssl || !rq->keep || !rq->h.body_done || c->pos >= ch_stream_avail(&c->s))
    return 0;
  struct held *h = c->held ? held_find(c) : NULL;
  if (!h) {
    if ((h = held_spare)) held_spare = NULL;
    else if (!(h = calloc(1, sizeof *h))) return 0;
    h->c = c;
    h->next = helds;
    helds = h;
    c->held = 1;
    if (!held_timer.heap_index && ch_timer_start(&held_timer, 0, held_expired) < 0) {
      held_drop(c);
      return 0;
    }
  }
  if (h->len + n > HOLD_MAX) return 0;   /* the caller's write takes all */
  if (h->len + n > h->cap) {
    char *q = ch_buf_grow(h->p, 1, &h->cap, h->len + n, 4096);
    if (!q) return 0;
    h->p = q;
  }
  memcpy(h->p + h->len, p, n);
  h->len += n;
  return 1;
}

int ch_http_conn_writev(struct ch_http_conn *c, struct iovec *iov, int n, int timeout_ms)
{
  if (!c->held) return n ? ch_stream_writev(&c->s, iov, n, timeout_ms) : 0;
  struct held *h = held_take(c);
  int r = 0;
  if (n < 8) {
    struct iovec all[8];
    all[0] = (struct iovec){ h->p, h->len };
    if (n) memcpy(all + 1, iov, (size_t)n * sizeof *iov);   /* iov is NULL when n is 0 */
    r = ch_stream_writev(&c->s, all, n + 1, timeout_ms);
  } else {
    struct iovec one = { h->p, h->len };
    r = ch_stream_writev(&c->s, &one, 1, timeout_ms);
    if (r == 0) r = ch_stream_writev(&c->s, iov, n, timeout_ms);
  }
  held_put(h);
  return r;
}

void ch_http_conn_push(struct ch_http_conn *c)
{
  struct held *h = c->held ? held_find(c) : NULL;
  if (!h) return;
  /* Outside any coroutine (the timer) or in a call that must not park:
  ** a plain non-blocking send; the hooks pass it straight through. */
  ssize_t w = c->s.fd < 0 ? -1 : send(c->s.fd, h->p, h->len, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (w < 0 || (size_t)w == h->len) {   /* all sent, or the connection broke */
    held_drop(c);
    return;
  }
  memmove(h->p, h->p + w, h->len - (size_t)w);
  h->len -= (size_t)w;
}

/* -- Request bodies ----------------------------------------------------------- */

static void sink_pend(void *ud, const char *p, size_t n)
{
  struct ch_http_req *rq = ud;
  if (rq->plen + n > rq->pcap) {
    char *q = ch_buf_grow(rq->pend, 1, &rq->pcap, rq->plen + n, 4096);
    if (!q) { rq->body_status = 500; return; }
    rq->pend = q;
  }
  memcpy(rq->pend + rq->plen, p, n);
  rq->plen += n;
  rq->body_total += n;
}

static void sink_discard(void *ud, const char *p, size_t n)
{
  (void)p;
  ((struct ch_http_req *)ud)->body_total += n;
}

int ch_http_body_more(struct ch_http_req *rq, int discard)
{
  struct ch_http_conn *c = rq->c;
  struct ch_http_head *h = &rq->h;
  ch_http_body_fn sink = discard ? sink_discard : sink_pend;
  if (rq->h2) return ch_h2_body_more(rq, discard);
  if (rq->body_status) return -rq->body_status;
  if (h->expect_continue && !rq->continue_sent && !rq->started) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    rq->continue_sent = 1;
    struct iovec iov = { (void *)cont, sizeof cont - 1 };
    int r = ch_http_conn_writev(c, &iov, 1, c->srv->send_ms);
    if (r < 0) return r;
  }
  uint64_t before = rq->body_total;
  while (!h->body_done) {
    size_t avail = ch_stream_avail(&c->s);
    if (c->pos < avail) {
      h->body_limit = c->srv->max_body;
      long n = ch_http_body_parse(h, ch_stream_data(&c->s) + c->pos, avail - c->pos, sink, rq);
      if (n < 0) {
        rq->body_status = (int)-n;   /* 400, or 413 for a chunk declared too big */
        return (int)n;
      }
      c->pos += (uint32_t)n;
      if (rq->body_total > c->srv->max_body && !discard) {
        rq->body_status = 413;
        return -413;
      }
      if (rq->body_status == 500) return -ENOMEM;
      if (rq->body_total > before) return 1;
      continue;
    }
    /* All parsed: drop the parsed body bytes, keep the head (req.headers
    ** points into it); the fill moves it to the buffer's start if it must
    ** make room. */
    if (c->pos > h->head_len) {
      c->s.end = c->s.start + h->head_len;
      c->pos = h->head_len;
    }
    ssize_t n = ch_stream_fill(&c->s, 1, ch_http_body_ms(rq));
    if (n > 0) continue;
    if (n == 0) return -ECONNRESET;
    if (n == -EBADF) return -ECONNRESET;
    return (int)n;   /* -ETIMEDOUT, -ECANCELED, -ENOMEM, a read error */
  }
  return rq->body_total > before ? 1 : 0;
}

int ch_http_body_ms(const struct ch_http_req *rq)
{
  return rq->body_ms ? rq->body_ms : rq->c->srv->body_ms;
}

const char *ch_http_body_error(int r)
{
  switch (r) {
  case -413: return "too large";
  case -400: return "bad request";
  case -ETIMEDOUT: return "timeout";
  case -ENOMEM: return "no memory";
  default: return "closed";
  }
}

int ch_http_hijack(struct ch_http_req *rq, SSL **ssl, const char **pre, size_t *n)
{
  struct ch_http_conn *c = rq->c;
  /* The answers before this request go first: the new protocol's owner
  ** writes on the socket directly. */
  if (c->held) ch_http_conn_writev(c, NULL, 0, c->srv->send_ms);   /* a failure shows on the socket */
  /* Bytes after the request head: the new protocol's first bytes. */
  size_t from = c->pos;
  if (!rq->h.chunked && rq->h.body_left == 0 && from < rq->h.head_len) from = rq->h.head_len;
  size_t avail = ch_stream_avail(&c->s);
  if (from > avail) from = avail;
  *pre = ch_stream_data(&c->s) + from;
  *n = avail - from;
  int fd = c->s.fd;
  *ssl = c->s.ssl;
  c->s.fd = -1;   /* the buffer stays until the connection ends: *pre */
  c->s.ssl = NULL;
  rq->hijacked = 1;
  rq->keep = 0;
  return fd;
}

/* -- The connection coroutine ------------------------------------------------- */

/* The Referer and User-Agent of rq: pointers into its head and lengths,
** NULL when it has none. */
static void log_headers(const struct ch_http_req *rq, const char *base, const char **ref, int *refl,
                        const char **ua, int *ual)
{
  const struct ch_http_head *h = &rq->h;
  *ref = *ua = NULL;
  *refl = *ual = 0;
  for (int i = 0; i < h->nheaders; i++) {
    if (ch_http_name_is(base, h->name[i], "referer")) {
      *ref = base + h->value[i].off;
      *refl = (int)h->value[i].len;
    } else if (ch_http_name_is(base, h->name[i], "user-agent")) {
      *ua = base + h->value[i].off;
      *ual = (int)h->value[i].len;
    }
  }
}

/* Appends ,"key":"value" at line + n, the value escaped into at most max
** bytes (cut there: the escape never splits a sequence); returns the new
** length. */
static int json_str(char *line, int n, const char *key, const char *v, size_t len, int max)
{
  n += sprintf(line + n, ",\"%s\":\"", key);
  n = ch_log_json_escape_n(line, n, n + max, v, len);
  line[n++] = '"';
  return n;
}

/* The JSON access line's bound: its strings' escaped caps below (100 +
** 64 + 2000 + 20 + 400 + 600 + 600) and the rest (keys, time, numbers:
** under 400), so no cap needs checking against the buffer. */
#define ACCESS_JSON_MAX 4800

/* rq's access log line as one JSON object (access_log_format "json", or
** --log-format json): the combined format's fields, by name, plus the
** protocol, the duration and the router's pattern. Returns its length. */
static int access_json(struct ch_http_req *rq, const char *peer, char *line)
{
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  int n = (int)strftime(line, 64, "{\"time\":\"%Y-%m-%dT%H:%M:%SZ\"", &tm);
  n = json_str(line, n, "remote_addr", peer, strlen(peer), 100);
  n = json_str(line, n, "method", base + h->method.off, h->method.len, 64);
  n = json_str(line, n, "target", base + h->target.off, h->target.len, 2000);
  const char *proto = rq->h2 ? "HTTP/2.0" : h->version_minor ? "HTTP/1.1" : "HTTP/1.0";
  n = json_str(line, n, "protocol", proto, 8, 20);
  n += sprintf(line + n, ",\"status\":%d,\"bytes\":%llu,\"duration\":%.6f", rq->status,
               (unsigned long long)rq->sent, (double)(ch_now_ns() - rq->start_ns) / 1e9);
  if (rq->route) {
    const char *r = ch_http_metrics_route_name(rq->route);
    n = json_str(line, n, "route", r, strlen(r), 400);
  }
  const char *ref, *ua;
  int refl, ual;
  log_headers(rq, base, &ref, &refl, &ua, &ual);
  if (ref) n = json_str(line, n, "referer", ref, (size_t)refl, 600);
  if (ua) n = json_str(line, n, "user_agent", ua, (size_t)ual, 600);
  line[n++] = '}';
  line[n++] = '\n';
  return n;
}

/* Out of line: its line buffer stays out of serve's frame, which lies
** under the handler (copy-stack mode saves it while the handler parks). */
__attribute__((noinline)) void ch_http_access_log(struct ch_http_conn *c, struct ch_http_req *rq)
{
  struct ch_http_server *s = c->srv;
  if (s->log_fd < 0) return;
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  char peer[80], when[40], line[ACCESS_JSON_MAX];
  ch_http_peer(c, peer, sizeof peer);
  char *colon = strrchr(peer, ':');
  if (colon && peer[0] != '[') *colon = 0;
  int n;
  if (s->log_json) {
    n = access_json(rq, peer, line);
  } else {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%d/%b/%Y:%H:%M:%S %z", &tm);
    const char *ref, *ua;
    int refl, ual;
    log_headers(rq, base, &ref, &refl, &ua, &ual);
    if (!ref) ref = "-", refl = 1;
    if (!ua) ua = "-", ual = 1;
    int reql = (int)(h->line_end - h->start - 2);
    const char *reqp = base + h->start;
    char h2line[1024];
    if (rq->h2) {   /* no request line: one made of its parts */
      reql = snprintf(h2line, sizeof h2line, "%.*s %.*s HTTP/2.0", (int)h->method.len,
                      base + h->method.off, h->target.len > 900 ? 900 : (int)h->target.len,
                      base + h->target.off);
      reqp = h2line;
    }
    n = snprintf(line, sizeof line, "%s - - [%s] \"%.*s\" %d %llu \"%.*s\" \"%.*s\"\n", peer,
                 when, reql > 1000 ? 1000 : reql, reqp, rq->status,
                 (unsigned long long)rq->sent, refl > 300 ? 300 : refl, ref,
                 ual > 300 ? 300 : ual, ua);
    if (n > (int)sizeof line) n = sizeof line;
  }
  ssize_t w = write(s->log_fd, line, (size_t)n);
  (void)w;
}

/* One spare request per worker: a keep-alive client that waits for each
** answer makes every request an active spell of its own, and a malloc and
** free of these 2.7 KB per request cost more than keeping one
** (docs/benchmarks.md). */
static __thread struct ch_http_req *rq_spare;

static struct ch_http_req *rq_take(void)
{
  struct ch_http_req *rq = rq_spare;
  if (rq) rq_spare = NULL;
  else rq = malloc(sizeof *rq);
  return rq;
}

static void rq_drop(struct ch_http_req *rq)
{
  if (!rq) return;
  if (!rq_spare) rq_spare = rq;
  else free(rq);
}

/* Yields. Serves the request whose head rq->h is parsed: the handler,
** then whatever it left of the response and of the body. Returns 1 to
** keep the connection, 0 to close it. */
static int serve(struct ch_http_conn *c, struct ch_http_req *rq)
{
  struct ch_http_server *srv = c->srv;
  struct ch_http_head *h = &rq->h;
  ch_worker_count_request(c->w);
  int too_large = h->content_length > 0 && (uint64_t)h->content_length > srv->max_body;
  if (too_large && !srv->on_error) {
    uint64_t t0 = ch_now_ns();
    /* The head's bytes are in the connection's stream buffer (rq is not
    ** set up yet: ch_http_req_base would read its stale fields, as ASan
    ** saw), and answering may give that buffer back: copy the method. */
    char method[12];
    size_t mlen = h->method.len < sizeof method ? h->method.len : sizeof method - 1;
    memcpy(method, ch_stream_data(&c->s) + h->method.off, mlen);
    ch_http_answer_error(c, 413);
    if (!srv->uncounted) ch_http_metrics_count(413, method, mlen, 0, (double)(ch_now_ns() - t0) / 1e9);
    linger_close(c);
    return 0;
  }
  /* The state after the head, up to the error text (1 KiB nobody reads
  ** unless the handler fails). */
  memset(&rq->pend, 0, offsetof(struct ch_http_req, err) - offsetof(struct ch_http_req, pend));
  rq->err[0] = '\0';
  /* A declared length over the limit, with an on_error: the body is
  ** never read (reading it says "too large" at once), and on_error runs
  ** instead of the handler, so it may answer in its own format; if it
  ** does not, the plain 413. The connection closes after the answer
  ** either way (its body is unread). */
  if (too_large) rq->body_status = 413;
  rq->c = c;
  rq->clen = -1;
  rq->start_ns = ch_now_ns();
  const char *base = ch_http_req_base(rq);
  rq->head_only = h->method.len == 4 && memcmp(base + h->method.off, "HEAD", 4) == 0;
  srv->run(srv, rq);
  if (rq->failed < 0) {   /* a target that is no path */
    ch_http_answer_error(c, 400);
    linger_close(c);
    ch_http_req_release(rq);
    return 0;
  }
  int keep = ch_http_response_finish(rq);
  if (!rq->hijacked) {
    ch_http_access_log(c, rq);
    if (!srv->uncounted)
      ch_http_metrics_count(rq->status, base + h->method.off, h->method.len, rq->route,
                      (double)(ch_now_ns() - rq->start_ns) / 1e9);
  }
  /* What the handler left of the body: drain a little to keep the
  ** connection, else close. */
  if (keep && !h->body_done) {
    if (rq->body_status) {
      keep = 0;
    } else {
      int r;
      while ((r = ch_http_body_more(rq, 1)) > 0)
        if (rq->body_total > DRAIN_MAX) { keep = 0; break; }
      if (r < 0) keep = 0;
    }
  }
  if (rq->body_status == 413 && !rq->hijacked) linger_close(c);   /* let it read the 413 */
  ch_http_req_release(rq);
  return keep;
}

/* Yields. The PROXY header a load balancer sends first (net/proxy.h),
** within the header timeout: req.peer and the access log get the client
** it names. A bad one or none closes the connection, logged. Returns 0 or
** -1. Out of line, as handshake is. */
static __attribute__((noinline)) int proxy_header(struct ch_http_conn *c)
{
  union ch_addr peer;
  memset(&peer, 0, sizeof peer);
  peer.sa.sa_family = AF_UNSPEC;
  c->head_wait = ch_current();
  int r = ch_proxy_read(&c->s, &peer, c->srv->header_ms);
  c->head_wait = NULL;
  if (r < 0) {
    char who[80];
    ch_http_peer(c, who, sizeof who);
    ch_proxy_log_bad(who, r);
    return -1;
  }
  if (peer.sa.sa_family != AF_UNSPEC) set_peer(c, &peer);
  c->proxied = 1;
  return 0;
}

/* Yields. The TLS handshake, within the header timeout; a failed one
** closes quietly (its reason is logged at info). Returns 0 or -1. Out of
** line: conn_main's frame lies under every request's handler. */
static __attribute__((noinline)) int handshake(struct ch_http_conn *c)
{
  c->head_wait = ch_current();
  int r = ch_stream_handshake(&c->s, c->srv->header_ms);
  c->head_wait = NULL;
  if (r < 0) {
    ch_log(CH_LOG_INFO, "tls: handshake with a client failed: %s",
           r == -EPROTO ? "see above" : strerror(-r));
    return -1;
  }
  c->tls_ready = 1;
  return 0;
}

/* Yields. Reads the next request's head into rq->h: its length (> 0),
** -status for a framing error to answer (400, 408, 414, 431, 501, 505),
** 0 when the connection went idle (nothing of a new request came: the
** coroutine is to end), or -1 when it is to close. */
static int read_head(struct ch_http_conn *c, struct ch_http_req *rq, int idle_ms)
{
  struct ch_http_server *srv = c->srv;
  struct ch_http_head *h = &rq->h;
  ch_http_head_init(h);
  uint64_t deadline = 0;
  int drain_waited = 0;
  c->pos = 0;
  for (;;) {
    int r = ch_http_head_parse(h, ch_stream_data(&c->s), ch_stream_avail(&c->s), &srv->lim);
    if (r != 0) return r;
    size_t have = ch_stream_avail(&c->s);
    if (have && !deadline)   /* the first byte: the clock starts */
      deadline = ch_now_ns() + (uint64_t)srv->header_ms * 1000000u;
    ssize_t n = ch_stream_fill(&c->s, 1, 0);
    if (n > 0) continue;
    if (n == -ENOBUFS) return -431;
    if (n != -EAGAIN) return -1;   /* EOF, or an error */
    /* Nothing more to serve now: what the batch held back goes out
    ** before the wait (or the idle spell) begins. */
    if (c->held && ch_http_conn_writev(c, NULL, 0, srv->send_ms) < 0) return -1;
    if (!have) {   /* nothing of a new request: go idle */
      /* ch_stream_fill says -EAGAIN for TLS only after SSL_read found
      ** nothing decrypted either; this states it. */
      assert(!c->s.ssl || SSL_pending(c->s.ssl) == 0);
      if (c->w->stopping) {
        /* Draining, and this connection's last answer may have said
        ** keep-alive (the drain began after it was decided): its client
        ** may be sending the next request now, and a close with it unread
        ** resets the connection (a write error in wrk, seen under ASan).
        ** Wait for it as ch_http_close_idle's idle connections do; it is
        ** served with Connection: close. */
        if (drain_waited) return -1;
        drain_waited = 1;
        int w = ch_stream_wait(&c->s, DRAIN_IDLE_MS);
        if (w < 0) return -1;   /* no request came (or an error): close */
        continue;
      }
      go_idle(c, idle_ms);
      return 0;
    }
    uint64_t now = ch_now_ns();
    if (now >= deadline) return -408;
    c->head_wait = ch_current();
    int w = ch_stream_wait(&c->s, (int)((deadline - now + 999999) / 1000000u));
    c->head_wait = NULL;
    if (w == -ETIMEDOUT) return -408;
    if (w < 0) return -1;
  }
}

/* Yields. The connection's coroutine: requests until the input runs dry
** (then IDLE with no coroutine) or the connection must close. */
static void conn_main(void *arg)
{
  struct ch_http_conn *c = arg;
  struct ch_http_server *srv = c->srv;
  int idle_ms = c->nreq ? srv->keepalive_ms : srv->header_ms;
  struct ch_http_req *rq = NULL;   /* freed when this active spell ends */
  if (!c->proxied && ch_listener_proxy(c->l) && proxy_header(c) < 0) goto close;
  if (c->s.ssl && !c->tls_ready && handshake(c) < 0) goto close;
  if (c->nreq == 0) {   /* the first bytes may be HTTP/2's preface (h2.c) */
    int h2 = c->h2 ? 1 : ch_h2_detect(c);   /* c->h2: back from IDLE */
    if (h2 < 0) goto close;
    if (h2 > 0) {
      if (ch_h2_serve(c) > 0) {   /* idle: no coroutine until input */
        go_idle(c, srv->keepalive_ms);
        return;
      }
      goto close;
    }
  }
  for (;;) {
    if (!c->s.buf && ch_stream_reserve(&c->s, c->s.max) < 0) break;
    if (!rq && !(rq = rq_take())) break;
    rq->c = c;
    int r = read_head(c, rq, idle_ms);
    if (r == 0) {
      rq_drop(rq);
      return;   /* idle: a watch waits for the next request */
    }
    if (r == -1) goto close;
    if (r < 0) {
      if (c->w->stopping) goto close;
      ch_http_answer_error(c, -r);
      linger_close(c);
      goto close;
    }
    c->pos = (uint32_t)r;
    int keep = serve(c, rq);
    c->nreq++;
    if (!keep || c->s.fd < 0) goto close;
    /* The next request starts where this message ended. */
    ch_stream_consume(&c->s, c->pos);
    idle_ms = srv->keepalive_ms;
  }
close:
  rq_drop(rq);
  /* Answers held back before a close (the client half-closed after its
  ** batch, or an error): sent if the socket takes them. */
  if (c->held && c->s.fd >= 0) ch_http_conn_writev(c, NULL, 0, srv->send_ms);
  c->active = 0;
  conn_free(c);
}
