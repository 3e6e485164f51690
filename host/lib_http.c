/*
** cohost.core.http: the HTTP/1.1 server. Connections live here in C; Lua
** sees one (req, res) pair per request, on a task bound to the
** connection's coroutine only while that request is received and handled.
**
** A connection's life:
**   accept -> IDLE: an fd in epoll (a ch_watch) and a weak timer, no
**             coroutine, no stack, no Lua thread, no buffer (~250 bytes)
**   input  -> ACTIVE: a coroutine reads the head (absolute header
**             deadline), makes a task, runs handler(req, res), finishes
**             the response, and loops while pipelined bytes are buffered
**   EAGAIN with nothing buffered -> IDLE again (the coroutine ends)
** Framing errors answer 400/413/414/431/501/505 with Connection: close and
** never reach a handler, nor does anything pipelined behind them.
*/
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "http/parse.h"
#include "lib.h"
#include "lib_http.h"
#include "lib_socket.h"
#include "proc/stats.h"
#include "net/tls.h"

#ifndef __EXCEPTIONS
#error "lib_http.c must be built with -fexceptions"
#endif

#define SERVER_MT  "cohost.http.server"
#define RBOX_MT    "cohost.http.rbox"

#define BUF_SIZE      16384       /* input buffer; grows to fit the limits */
#define BUF_CACHE     32          /* input buffers kept per worker */
#define OUT_DIRECT    16384       /* bodies this big are written from the
                                  ** Lua string, not copied */
#define DRAIN_MAX     (1 << 20)   /* unread body bytes drained to keep a
                                  ** connection; more closes it */
#define DRAIN_IDLE_MS 1000        /* a drain gives idle connections this
                                  ** long to send one more request */
#define LINGER_MS     2000        /* lingering close: how long to read and
                                  ** discard so the client sees our answer */

/* -- Servers -------------------------------------------------------------- */

/* One http.listen: the handler and the limits. Connections hold
** references, so closing the listener does not pull it from under them. */
struct server {
  int handler;                    /* registry ref of handler(req, res) */
  int refs;                       /* the Lua object, each connection */
  struct ch_http_limits lim;
  uint64_t max_body;              /* bytes */
  int header_ms, body_ms, send_ms, keepalive_ms;
  uint32_t keepalive_requests;
  int debug;                      /* 500 bodies carry the error */
  int log_fd;                     /* access log, or -1 */
  int log_owned;                  /* log_fd is ours to close */
  char server_hdr[64];            /* "Server: cohost\r\n" or "" */
};

struct server_ud { struct server *s; };

static __thread int *dead_refs;   /* handler refs to drop when next in Lua */
static __thread int ndead, dead_cap;

static void drain_dead(lua_State *L)
{
  while (ndead > 0) luaL_unref(L, LUA_REGISTRYINDEX, dead_refs[--ndead]);
}

/* Drops a reference; the last one frees s. Never calls Lua: the handler
** ref is dropped the next time a request runs. */
static void server_unref(struct server *s)
{
  if (--s->refs > 0) return;
  if (ndead == dead_cap) {
    int cap = dead_cap ? dead_cap * 2 : 8;
    int *d = realloc(dead_refs, (size_t)cap * sizeof *d);
    if (d) { dead_refs = d; dead_cap = cap; }
  }
  if (ndead < dead_cap) dead_refs[ndead++] = s->handler;
  if (s->log_owned) close(s->log_fd);
  free(s);
}

/* -- Connections ---------------------------------------------------------- */

struct conn {
  struct ch_watch watch;          /* IDLE: waits for input */
  struct ch_timer timer;          /* IDLE: keep-alive or first-request expiry */
  struct server *srv;
  struct ch_listener *l;
  struct ch_worker *w;
  int fd;                         /* -1 once closed or handed over */
  SSL *ssl;                       /* a TLS listener's: every byte in and
                                  ** out goes through it; kept while IDLE */
  uint8_t tls_ready;              /* its handshake is done */
  uint8_t ssl_ev;                 /* what the last SSL_read waits for */
  uint32_t nreq;                  /* requests served */
  char *buf;                      /* input; NULL while IDLE with nothing */
  uint32_t cap;                   /* buf's size */
  uint32_t rq;                    /* start of the current request in buf */
  uint32_t pos;                   /* parsed up to here */
  uint32_t len;                   /* bytes in buf */
  uint8_t active;                 /* a coroutine serves it */
  struct ch_coro *head_wait;      /* its coroutine while it waits for the
                                  ** rest of a head (shutdown cancels it) */
  uint8_t family;                 /* peer address, for req.peer and logs */
  uint16_t port;
  uint8_t addr[16];
  struct conn *prev, *next;       /* this worker's connections */
};

static __thread struct conn *conns;
static __thread struct { char *p; uint32_t cap; } buf_cache[BUF_CACHE];
static __thread int buf_cached;

static int buf_take(struct conn *c)
{
  uint32_t want = c->srv->lim.max_line + c->srv->lim.max_header + 4096;
  if (want < BUF_SIZE) want = BUF_SIZE;
  for (int i = buf_cached; i-- > 0;)
    if (buf_cache[i].cap >= want) {
      c->buf = buf_cache[i].p;
      c->cap = buf_cache[i].cap;
      buf_cache[i] = buf_cache[--buf_cached];
      return 0;
    }
  if (!(c->buf = malloc(want))) return -ENOMEM;
  c->cap = want;
  return 0;
}

static void buf_drop(struct conn *c)
{
  if (!c->buf) return;
  if (buf_cached < BUF_CACHE) {
    buf_cache[buf_cached].p = c->buf;
    buf_cache[buf_cached].cap = c->cap;
    buf_cached++;
  } else {
    free(c->buf);
  }
  c->buf = NULL;
  c->cap = c->rq = c->pos = c->len = 0;
}

static void conn_free(struct conn *c)
{
  ch_unwatch_fd(&c->watch);
  ch_timer_stop(&c->timer);
  ch_tls_free(c->ssl, c->fd >= 0);
  c->ssl = NULL;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  buf_drop(c);
  if (c->prev) c->prev->next = c->next;
  else if (conns == c) conns = c->next;
  if (c->next) c->next->prev = c->prev;
  struct ch_listener *l = c->l;
  server_unref(c->srv);
  free(c);
  ch_listener_conn_end(l);
}

static void conn_main(void *arg);

static void on_idle_expired(struct ch_timer *t)
{
  struct conn *c = (struct conn *)((char *)t - offsetof(struct conn, timer));
  conn_free(c);
}

static void on_input(struct ch_watch *wt, int revents)
{
  struct conn *c = wt->data;
  ch_timer_stop(&c->timer);
  if (revents & POLLNVAL) {   /* closed behind our back */
    c->fd = -1;
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
static void go_idle(struct conn *c, int ms)
{
  buf_drop(c);
  c->active = 0;
  c->watch.data = c;
  if (ch_watch_fd(&c->watch, c->fd, POLLIN, on_input) < 0) {
    conn_free(c);
    return;
  }
  c->timer.weak = 1;   /* an idle connection never keeps a worker alive */
  if (ch_timer_start(&c->timer, ms, on_idle_expired) < 0) conn_free(c);
}

static void admit(void *ud, struct ch_listener *l, int fd, const struct sockaddr *peer)
{
  struct server *srv = ud;
  struct conn *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    ch_listener_conn_end(l);
    return;
  }
  c->srv = srv;
  srv->refs++;
  c->l = l;
  c->w = ch_worker_self;
  c->fd = fd;
  SSL_CTX *ctx = ch_listener_ssl_ctx(l);
  if (ctx && !(c->ssl = ch_tls_new(ctx, fd, 1))) {
    close(fd);
    server_unref(srv);
    free(c);
    ch_listener_conn_end(l);
    return;
  }
  c->family = (uint8_t)peer->sa_family;
  if (peer->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
    c->port = ntohs(in->sin_port);
    memcpy(c->addr, &in->sin_addr, 4);
  } else if (peer->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
    c->port = ntohs(in6->sin6_port);
    memcpy(c->addr, &in6->sin6_addr, 16);
  }
  if (peer->sa_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
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
  for (struct conn *c = conns, *next; c; c = next) {
    next = c->next;
    if (!c->active) conn_free(c);
  }
}

/* A drain does not close an idle connection at once: its client may be
** sending the next request (a keep-alive client under load always is) or,
** just accepted, its first, and a close with it unread resets the
** connection. Each gets DRAIN_IDLE_MS: a request that comes is served
** with Connection: close (decide_keep), and the rest are closed. It costs
** no coroutine per connection: the idle watch and timer stay, and one
** coroutine keeps the worker running meanwhile. */
void ch_http_close_idle(struct ch_worker *w)
{
  (void)w;   /* the list is this thread's */
  int idle = 0;
  for (struct conn *c = conns, *next; c; c = next) {
    next = c->next;
    if (!c->active) {
      ch_timer_stop(&c->timer);
      if (ch_timer_start(&c->timer, DRAIN_IDLE_MS, on_idle_expired) < 0) conn_free(c);
      else idle++;
    } else if (c->head_wait) {
      ch_cancel(c->head_wait);   /* a half-sent head */
    }
  }
  if (idle && ch_spawn(drain_grace, NULL) < 0)
    for (struct conn *c = conns, *next; c; c = next) {   /* no stack: close now */
      next = c->next;
      if (!c->active) conn_free(c);
    }
}

static int peer_string(const struct conn *c, char *out, size_t n)
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

/* -- Input ---------------------------------------------------------------- */

/* Reads what the kernel has after c->len without waiting. Returns bytes
** (> 0), 0 at EOF, -EAGAIN, or -errno. Compacts or fails with -ENOBUFS
** when the buffer is full. */
static ssize_t read_some(struct conn *c, uint32_t keep_from)
{
  if (c->len == c->cap) {
    if (keep_from == 0) return -ENOBUFS;
    memmove(c->buf, c->buf + keep_from, c->len - keep_from);
    c->len -= keep_from;
    c->pos -= keep_from;
    c->rq -= keep_from > c->rq ? c->rq : keep_from;
  }
  size_t want = c->cap - c->len;
  ssize_t n;
  if (c->ssl) {
    /* Always SSL_read: decrypted bytes it holds (SSL_pending) come with
    ** no input edge, so ch_fd_try_read's bookkeeping does not apply. */
    int ev = POLLIN;
    n = ch_tls_read(c->ssl, c->buf + c->len, want, &ev);
    c->ssl_ev = (uint8_t)ev;
    if (n > 0) c->len += (uint32_t)n;
    return n;
  }
  if (!ch_fd_try_read(c->fd)) return -EAGAIN;
  while ((n = read(c->fd, c->buf + c->len, want)) < 0 && errno == EINTR) {}
  if (n < 0) {
    int e = errno;
    if (e == EAGAIN) ch_fd_read_result(c->fd, 1);
    return -e;
  }
  ch_fd_read_result(c->fd, (size_t)n < want);
  c->len += (uint32_t)n;
  return n;
}

/* Yields. Waits for input until deadline_ns (0: ms from now). Returns > 0
** ready, 0 on timeout, < 0 closed or cancelled. With L, waits as a task
** (raising "cancelled" when killed). */
static int wait_input(lua_State *L, struct conn *c, int ms)
{
  int ev = c->ssl ? c->ssl_ev : POLLIN;
  if (L) return ch_task_wait_fd(L, c->fd, ev, ms);
  int r = ch_wait_fd_again(c->fd, ev, ms);
  return r;
}

/* -- Output --------------------------------------------------------------- */

/* Yields. Writes every byte of iov[0..n) with sendmsg (MSG_NOSIGNAL: a
** client gone away is EPIPE, never SIGPIPE), waiting up to ms between
** writes that make progress. Returns 0, -ETIMEDOUT, or -errno. */
static int write_all(lua_State *L, struct conn *c, struct iovec *iov, int n, int ms)
{
  if (c->ssl) return ch_tls_write_all(L, c->ssl, &c->fd, iov, n, ms);
  int fd = c->fd;
  while (n > 0) {
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return -errno;
      int r = L ? ch_task_wait_fd(L, fd, POLLOUT, ms) : ch_wait_fd_again(fd, POLLOUT, ms);
      if (r == 0) return -ETIMEDOUT;
      if (r < 0 || (r & POLLNVAL)) return -EBADF;
      continue;
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

/* A growable byte buffer for response heads. It may start in an array on
** the caller's stack (OB_STACK): a head with a small body then costs no
** malloc and free (~250 instructions a response). */
struct obuf {
  char *p;
  size_t len, cap;
  char *stack;                    /* the caller's array p starts in, or NULL */
  int oom;                        /* a reserve failed: the contents are cut */
};

#define OB_STACK_SIZE 1024        /* a hello-sized response: ~150 bytes of
                                  ** head, the rest for the body */
#define OB_STACK(arr) { (arr), 0, sizeof (arr), (arr), 0 }

static int ob_reserve(struct obuf *b, size_t more)
{
  if (b->len + more <= b->cap) return 0;
  size_t cap = b->cap ? b->cap * 2 : 512;
  while (cap < b->len + more) cap *= 2;
  int on_stack = b->stack && b->p == b->stack;
  char *p = on_stack ? malloc(cap) : realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return -ENOMEM;
  }
  if (on_stack) memcpy(p, b->p, b->len);
  b->p = p;
  b->cap = cap;
  return 0;
}

static void ob_add(struct obuf *b, const char *s, size_t n)
{
  if (ob_reserve(b, n) < 0) return;   /* the caller checks b->oom */
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void ob_free(struct obuf *b)
{
  if (b->p != b->stack) free(b->p);
}


/* "Date: ...\r\n", formatted once a second per worker. */
static const char *date_line(void)
{
  static __thread time_t last;
  static __thread char line[48];
  time_t now = time(NULL);
  if (now != last) {
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(line, sizeof line, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    last = now;
  }
  return line;
}

static const char *reason(int status)
{
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Content";
  case 426: return "Upgrade Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "Unknown";
  }
}

/* Yields. An answer the server makes itself (framing errors, timeouts),
** always with Connection: close. */
static void answer_error(struct conn *c, int status)
{
  char b[512];
  const char *r = reason(status);
  int n = snprintf(b, sizeof b,
                   "HTTP/1.1 %d %s\r\n%s%sContent-Type: text/plain\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%d %s\n",
                   status, r, c->srv->server_hdr, date_line(),
                   strlen(r) + 5, status, r);
  struct iovec iov = { b, (size_t)n };
  write_all(NULL, c, &iov, 1, c->srv->send_ms);
}

/* Yields. Closes after an answer the client may still be sending into:
** a close with unread input sends RST, which can destroy our answer in
** the client's receive queue before it is read (nginx's lingering_close).
** So shut down our side, read and discard for a while, then close. */
static void linger_close(struct conn *c)
{
  if (c->fd < 0) return;
  if (c->ssl) SSL_shutdown(c->ssl);   /* close_notify, once; the rest is raw */
  shutdown(c->fd, SHUT_WR);
  char junk[4096];
  uint64_t end = ch_now_ns() + (uint64_t)LINGER_MS * 1000000u;
  size_t total = 0;
  for (;;) {
    ssize_t n = read(c->fd, junk, sizeof junk);
    if (n > 0) {
      if ((total += (size_t)n) > DRAIN_MAX) break;
      continue;
    }
    if (n == 0 || errno != EAGAIN) break;
    uint64_t now = ch_now_ns();
    if (now >= end) break;
    if (ch_wait_fd_again(c->fd, POLLIN, (int64_t)((end - now) / 1000000u) + 1) <= 0) break;
  }
}

/* -- Request state -------------------------------------------------------- */

/* One request. It lives on the connection coroutine's stack; Lua's req
** and res reach it through a box (a userdata both tables hold at key 0)
** that is emptied when the handler returns, so a req or res kept past its
** handler fails cleanly instead of touching a reused connection, and the
** server never needs the Lua thread again once the handler is done. */
struct rstate {
  struct conn *c;                 /* NULL when the request is over */
  struct ch_http_head *h;         /* on the connection coroutine's stack */
  /* Body */
  char *pend;                     /* decoded body bytes not yet handed out */
  size_t plen, pcap;
  uint64_t body_total;            /* decoded bytes so far */
  int body_status;                /* 413 or 400 once the body failed */
  uint8_t continue_sent;
  /* Response */
  uint8_t started;                /* head written (or buffered) */
  uint8_t finished;               /* the whole response is out */
  uint8_t chunked;                /* body in chunked encoding */
  uint8_t until_close;            /* HTTP/1.0 stream: ends by closing */
  uint8_t head_only;              /* HEAD: no body bytes */
  uint8_t nobody;                 /* 1xx, 204, 304: no body bytes */
  uint8_t keep;                   /* keep-alive, decided with the head */
  uint8_t hijacked;               /* res:hijack() took the connection */
  uint8_t user_close;             /* the handler set Connection: close */
  int status;                     /* as sent */
  int64_t clen;                   /* Content-Length sent, or -1 */
  uint64_t sent;                  /* body bytes written */
  struct obuf hdrs;               /* the handler's header lines */
  struct { uint32_t off, len, nlen; } *hx;   /* index of hdrs' lines */
  int nhx, hxcap;
  uint64_t start_ns;              /* for the access log */
};

struct rbox {
  struct rstate *rs;              /* NULL once the handler has returned */
};

static __thread const void *rbox_mt;
/* Registry refs of the box, req and res metatables: lua_rawgeti by number
** instead of luaL_getmetatable's interning of a name, per request. */
static __thread int rbox_mt_ref, res_mt_ref;
/* Registry ref of dispatch(handler, res, method, target, version, path,
** query_string [, current]): makes req and tail-calls handler(req, res),
** so the handler's frames and error levels are as if C called it. A
** table constructor copies a template of the keys: ~3x cheaper than
** lua_createtable and a lua_setfield per field, and JIT-compiled. A nil
** path is the target; a nil query string is "". With current (the
** http.current() table), files thread -> {req, res} there. */
static __thread int dispatch_ref;
#define DISPATCH_SRC \
  "local req_mt = ...\n" \
  "local setmetatable, running = setmetatable, coroutine.running\n" \
  "return function(handler, res, method, target, version, path, query_string, current)\n" \
  "  local req = setmetatable({ [0] = res[0], method = method, target = target,\n" \
  "    version = version, path = path or target, query_string = query_string or '' }, req_mt)\n" \
  "  if current then current[running()] = { req, res } end\n" \
  "  return handler(req, res)\n" \
  "end\n"

static void rstate_release(struct rstate *rs)
{
  free(rs->pend);
  rs->pend = NULL;
  rs->plen = rs->pcap = 0;
  free(rs->hdrs.p);
  rs->hdrs.p = NULL;
  rs->hdrs.len = rs->hdrs.cap = 0;
  free(rs->hx);
  rs->hx = NULL;
  rs->nhx = rs->hxcap = 0;
}

/* The request state of req or res at idx; raises for a finished request. */
static struct rstate *check_rs(lua_State *L, int idx)
{
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_rawgeti(L, idx, 0);
  struct rbox *box = lua_touserdata(L, -1);
  int ok = box && lua_getmetatable(L, -1) && lua_topointer(L, -1) == rbox_mt;
  lua_pop(L, ok ? 2 : 1);
  if (!ok) luaL_argerror(L, idx, "not a request or response");
  if (!box->rs) luaL_error(L, "request is finished (req and res work only while its handler runs)");
  return box->rs;
}

/* -- Request body ---------------------------------------------------------- */

static void sink_pend(void *ud, const char *p, size_t n)
{
  struct rstate *rs = ud;
  if (rs->plen + n > rs->pcap) {
    size_t cap = rs->pcap ? rs->pcap * 2 : 4096;
    while (cap < rs->plen + n) cap *= 2;
    char *q = realloc(rs->pend, cap);
    if (!q) { rs->body_status = 500; return; }
    rs->pend = q;
    rs->pcap = cap;
  }
  memcpy(rs->pend + rs->plen, p, n);
  rs->plen += n;
  rs->body_total += n;
}

static void sink_discard(void *ud, const char *p, size_t n)
{
  (void)p;
  ((struct rstate *)ud)->body_total += n;
}

/* Yields. Decodes more of the body into rs->pend (or discards it): at
** least one byte, or the end. Returns 1 if bytes came, 0 at the end of
** the body, or -errno / -status: -ETIMEDOUT, -ECONNRESET (the client
** closed), -400 (bad chunked body), -413 (past max_body). With L, waits
** as a task. */
static int body_more(lua_State *L, struct rstate *rs, ch_http_body_fn sink)
{
  struct conn *c = rs->c;
  struct ch_http_head *h = rs->h;
  if (rs->body_status) return -rs->body_status;
  if (h->expect_continue && !rs->continue_sent && !rs->started) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct iovec iov = { (void *)cont, sizeof cont - 1 };
    rs->continue_sent = 1;
    int r = write_all(L, c, &iov, 1, c->srv->send_ms);
    if (r < 0) return r;
  }
  uint64_t before = rs->body_total;
  while (!h->body_done) {
    if (c->pos < c->len) {
      h->body_limit = c->srv->max_body;
      long n = ch_http_body_parse(h, c->buf + c->pos, c->len - c->pos, sink, rs);
      if (n < 0) {
        rs->body_status = (int)-n;   /* 400, or 413 for a chunk declared too big */
        return (int)n;
      }
      c->pos += (uint32_t)n;
      if (rs->body_total > c->srv->max_body && sink == sink_pend) {
        rs->body_status = 413;
        return -413;
      }
      if (rs->body_status == 500) return -ENOMEM;
      if (rs->body_total > before) return 1;
      continue;
    }
    /* All parsed: drop the parsed body bytes, keep the head (req.headers
    ** points into it), moved to the buffer's start if it must make room. */
    uint32_t head_end = c->rq + h->head_len;
    if (c->pos > head_end) c->len = c->pos = head_end;
    if (c->len == c->cap && c->rq > 0) {
      memmove(c->buf, c->buf + c->rq, c->len - c->rq);
      c->len -= c->rq;
      c->pos -= c->rq;
      c->rq = 0;
    }
    ssize_t n = read_some(c, 0);
    if (n > 0) continue;
    if (n == 0) return -ECONNRESET;
    if (n != -EAGAIN) return (int)n;
    int r = wait_input(L, c, c->srv->body_ms);
    if (r == 0) return -ETIMEDOUT;
    if (r < 0 || (r & POLLNVAL)) return -ECONNRESET;
  }
  return rs->body_total > before ? 1 : 0;
}

static const char *body_err(int r)
{
  switch (r) {
  case -413: return "too large";
  case -400: return "bad request";
  case -ETIMEDOUT: return "timeout";
  case -ENOMEM: return "no memory";
  default: return "closed";
  }
}

/* req:read(n) -> up to n body bytes, nil at the end, or nil, err. */
static int req_read(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  lua_Integer want = luaL_optinteger(L, 2, 65536);
  luaL_argcheck(L, want > 0, 2, "positive size expected");
  if (rs->plen == 0) {
    int r = body_more(L, rs, sink_pend);
    if (r == 0) { lua_pushnil(L); return 1; }
    if (r < 0) {
      lua_pushnil(L);
      lua_pushstring(L, body_err(r));
      return 2;
    }
  }
  size_t n = rs->plen < (size_t)want ? rs->plen : (size_t)want;
  lua_pushlstring(L, rs->pend, n);
  memmove(rs->pend, rs->pend + n, rs->plen - n);
  rs->plen -= n;
  return 1;
}

/* req:body() -> the whole body, or nil, err. */
static int req_body(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  int r;
  while ((r = body_more(L, rs, sink_pend)) > 0) {}
  if (r < 0) {
    lua_pushnil(L);
    lua_pushstring(L, body_err(r));
    return 2;
  }
  lua_pushlstring(L, rs->pend ? rs->pend : "", rs->plen);
  rs->plen = 0;
  return 1;
}

/* -- Request fields --------------------------------------------------------- */

static int hexval(int ch)
{
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into out (n bytes fit); plus: '+' is a space.
** Returns the length, or -1 for a bad escape or a NUL. */
static int unescape(const char *s, size_t n, char *out, int plus)
{
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (ch == '%') {
      if (i + 2 >= n) return -1;
      int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
      if (hi < 0 || lo < 0) return -1;
      ch = (char)(hi * 16 + lo);
      if (ch == 0) return -1;
      i += 2;
    } else if (plus && ch == '+') {
      ch = ' ';
    }
    out[o++] = ch;
  }
  return (int)o;
}

/* Removes dot segments (RFC 3986 5.2.4) from the absolute path p[0..n) in
** place. Returns the new length, or -1 if it climbs above the root. */
static int remove_dots(char *p, int n)
{
  int o = 0, i = 0;
  while (i < n) {
    /* p[i] is '/' here: the start of a segment. */
    int j = i + 1;
    while (j < n && p[j] != '/') j++;
    int seg = j - i - 1;
    if (seg == 1 && p[i + 1] == '.') {
      if (j == n) p[o++] = '/';
    } else if (seg == 2 && p[i + 1] == '.' && p[i + 2] == '.') {
      if (o == 0) return -1;
      while (o > 0 && p[o - 1] != '/') o--;   /* drop the last segment */
      if (o > 0) o--;
      if (j == n) p[o++] = '/';
    } else {
      memmove(p + o, p + i, (size_t)(j - i));
      o += j - i;
    }
    i = j;
  }
  if (o == 0) p[o++] = '/';
  return o;
}

/* Pushes req.path and req.query_string from the target, each as nil when
** the dispatcher can make it without a string of ours: the path when it is
** the target itself (no escapes, dots or query: most requests), the query
** string when there is none (""). Returns 0, or -1 for a target that is no
** path (the caller answers 400) with nothing pushed. */
static int push_path(lua_State *L, const char *t, size_t n)
{
  const char *path = t, *q = memchr(t, '?', n);
  size_t plen = q ? (size_t)(q - t) : n;
  if (plen > 0 && t[0] != '/') {
    if (plen == 1 && t[0] == '*') {           /* OPTIONS * */
      lua_pushliteral(L, "*");
      lua_pushnil(L);
      return 0;
    }
    /* absolute-form: http://host[:port]/path */
    const char *ss = plen > 3 ? memchr(t, ':', plen) : NULL;
    if (!ss || ss + 2 >= t + plen || ss[1] != '/' || ss[2] != '/') return -1;
    const char *slash = memchr(ss + 3, '/', (size_t)(t + plen - ss - 3));
    if (!slash) { path = "/"; plen = 1; }
    else { path = slash; plen = (size_t)(t + plen - slash); }
  }
  if (plen == 0) return -1;
  char small[512], *d = plen <= sizeof small ? small : malloc(plen);
  if (!d) return -1;
  int m = unescape(path, plen, d, 0);
  if (m >= 0) m = remove_dots(d, m);
  if (m >= 0) {
    if (path == t && !q && (size_t)m == n && memcmp(d, t, n) == 0) lua_pushnil(L);
    else lua_pushlstring(L, d, (size_t)m);
  }
  if (d != small) free(d);
  if (m < 0) return -1;
  if (q) lua_pushlstring(L, q + 1, n - (size_t)(q - t) - 1);
  else lua_pushnil(L);
  return 0;
}

/* Pushes a lower-case copy of s[0..n). */
static void push_lower(lua_State *L, const char *s, size_t n)
{
  char small[128], *d = n <= sizeof small ? small : malloc(n);
  if (!d) { lua_pushlstring(L, s, n); return; }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    d[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
  }
  lua_pushlstring(L, d, n);
  if (d != small) free(d);
}

/* Adds value (on top) under key (below it) to table t: a second value
** turns the entry into an array. Pops both. */
static void add_multi(lua_State *L, int t)
{
  lua_pushvalue(L, -2);
  lua_rawget(L, t);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_rawset(L, t);
    return;
  }
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_createtable(L, 2, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
  }
  /* stack: key value array */
  lua_insert(L, -2);
  lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
  lua_rawset(L, t);
}

/* Metatable of req.headers: lookups fold case and '_' to '-'. */
static int headers_index(lua_State *L)
{
  size_t n;
  const char *k = lua_tolstring(L, 2, &n);
  if (!k || n > 256) return 0;
  char d[256];
  int changed = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)k[i];
    if (ch >= 'A' && ch <= 'Z') { ch = (unsigned char)(ch + 32); changed = 1; }
    else if (ch == '_') { ch = '-'; changed = 1; }
    d[i] = (char)ch;
  }
  if (!changed) return 0;
  lua_pushlstring(L, d, n);
  lua_rawget(L, 1);
  return 1;
}

static void push_headers(lua_State *L, struct rstate *rs)
{
  struct ch_http_head *h = rs->h;
  const char *base = rs->c->buf + rs->c->rq;
  lua_createtable(L, 0, h->nheaders);
  int t = lua_gettop(L);
  for (int i = 0; i < h->nheaders; i++) {
    push_lower(L, base + h->name[i].off, h->name[i].len);
    lua_pushlstring(L, base + h->value[i].off, h->value[i].len);
    add_multi(L, t);
  }
  lua_pushvalue(L, lua_upvalueindex(2));   /* the headers metatable */
  lua_setmetatable(L, t);
}

/* Decodes "a=1&b=2&a=3" into a table on top. */
static void push_query(lua_State *L, const char *q, size_t n)
{
  lua_newtable(L);
  int t = lua_gettop(L);
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && q[j] != '&') j++;   /* not ';' (CVE-2021-23336) */
    if (j > i) {
      const char *eq = memchr(q + i, '=', j - i);
      size_t kl = eq ? (size_t)(eq - q - i) : j - i;
      size_t vl = eq ? j - i - kl - 1 : 0;
      char small[256], *d = (kl + vl) <= sizeof small ? small : malloc(kl + vl);
      if (d) {
        int a = unescape(q + i, kl, d, 1);
        if (a < 0) { memcpy(d, q + i, kl); a = (int)kl; }   /* keep raw */
        lua_pushlstring(L, d, (size_t)a);
        int b = eq ? unescape(eq + 1, vl, d, 1) : 0;
        if (b < 0) { memcpy(d, eq + 1, vl); b = (int)vl; }
        lua_pushlstring(L, d, (size_t)b);
        add_multi(L, t);
        if (d != small) free(d);
      }
    }
    i = j + 1;
  }
}

/* req's __index: methods first, then the fields built on first use
** (headers, query, peer), cached in req. Upvalues: methods, headers mt. */
static int req_index(lua_State *L)
{
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (!lua_isnil(L, -1)) return 1;
  size_t n;
  const char *k = lua_tolstring(L, 2, &n);
  if (!k) return 1;
  if (n == 7 && memcmp(k, "headers", 7) == 0) {
    push_headers(L, check_rs(L, 1));
  } else if (n == 5 && memcmp(k, "query", 5) == 0) {
    lua_getfield(L, 1, "query_string");
    size_t ql;
    const char *q = lua_tolstring(L, -1, &ql);
    push_query(L, q ? q : "", q ? ql : 0);
  } else if (n == 4 && memcmp(k, "peer", 4) == 0) {
    char b[80];
    int m = peer_string(check_rs(L, 1)->c, b, sizeof b);
    lua_pushlstring(L, b, (size_t)m);
  } else {
    return 1;   /* nil */
  }
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 1;
}

/* req:header(name) -> its first value, case-insensitive, or nil. */
static int req_header(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  size_t n;
  const char *name = luaL_checklstring(L, 2, &n);
  struct ch_http_head *h = rs->h;
  const char *base = rs->c->buf + rs->c->rq;
  for (int i = 0; i < h->nheaders; i++)
    if (h->name[i].len == n && strncasecmp(base + h->name[i].off, name, n) == 0) {
      lua_pushlstring(L, base + h->value[i].off, h->value[i].len);
      return 1;
    }
  lua_pushnil(L);
  return 1;
}

/* -- Response headers ------------------------------------------------------ */

static int hx_find(struct rstate *rs, const char *name, size_t n, int from)
{
  for (int i = from; i < rs->nhx; i++)
    if (rs->hx[i].len && rs->hx[i].nlen == n &&
        strncasecmp(rs->hdrs.p + rs->hx[i].off, name, n) == 0)
      return i;
  return -1;
}

static int valid_name(const char *s, size_t n)
{
  if (n == 0 || n > 256) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch <= ' ' || ch >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", ch)) return 0;
  }
  return 1;
}

static int valid_value(const char *s, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if ((ch < ' ' && ch != '\t') || ch == 0x7f) return 0;   /* no CR/LF: no splitting */
  }
  return 1;
}

static void hx_add(lua_State *L, struct rstate *rs, const char *name, size_t nl,
                   const char *v, size_t vl)
{
  if (!valid_value(v, vl)) luaL_error(L, "bad header value for %s (control characters)", name);
  if (rs->nhx == rs->hxcap) {
    int cap = rs->hxcap ? rs->hxcap * 2 : 8;
    void *p = realloc(rs->hx, (size_t)cap * sizeof *rs->hx);
    if (!p) luaL_error(L, "no memory");
    rs->hx = p;
    rs->hxcap = cap;
  }
  size_t off = rs->hdrs.len;
  if (ob_reserve(&rs->hdrs, nl + vl + 4) < 0) luaL_error(L, "no memory");
  ob_add(&rs->hdrs, name, nl);
  ob_add(&rs->hdrs, ": ", 2);
  ob_add(&rs->hdrs, v, vl);
  ob_add(&rs->hdrs, "\r\n", 2);
  rs->hx[rs->nhx].off = (uint32_t)off;
  rs->hx[rs->nhx].len = (uint32_t)(rs->hdrs.len - off);
  rs->hx[rs->nhx].nlen = (uint32_t)nl;
  rs->nhx++;
}

/* res:header(name, value): set, replace (case-insensitive), an array for
** repeats, nil to remove. */
static int res_header(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  size_t nl;
  const char *name = luaL_checklstring(L, 2, &nl);
  if (!valid_name(name, nl)) return luaL_argerror(L, 2, "bad header name");
  if (rs->started) return luaL_error(L, "headers already sent");
  for (int i = 0; (i = hx_find(rs, name, nl, i)) >= 0; i++) rs->hx[i].len = 0;
  if (nl == 10 && strncasecmp(name, "connection", 10) == 0) rs->user_close = 0;
  int t = lua_type(L, 3);
  if (t == LUA_TTABLE) {
    int n = (int)lua_objlen(L, 3);
    for (int i = 1; i <= n; i++) {
      lua_rawgeti(L, 3, i);
      size_t vl;
      const char *v = luaL_checklstring(L, -1, &vl);
      hx_add(L, rs, name, nl, v, vl);
      lua_pop(L, 1);
    }
  } else if (t != LUA_TNIL && t != LUA_TNONE) {
    size_t vl;
    const char *v = luaL_checklstring(L, 3, &vl);
    hx_add(L, rs, name, nl, v, vl);
    if (nl == 10 && strncasecmp(name, "connection", 10) == 0 &&
        vl == 5 && strncasecmp(v, "close", 5) == 0)
      rs->user_close = 1;
  }
  lua_settop(L, 1);
  return 1;
}

/* res:get_header(name) -> value (the first) or nil. */
static int res_get_header(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  size_t nl;
  const char *name = luaL_checklstring(L, 2, &nl);
  int i = hx_find(rs, name, nl, 0);
  if (i < 0) {
    lua_pushnil(L);
    return 1;
  }
  const char *line = rs->hdrs.p + rs->hx[i].off;
  lua_pushlstring(L, line + nl + 2, rs->hx[i].len - nl - 4);
  return 1;
}

/* -- Response writing ------------------------------------------------------ */

/* Raises the quiet error for a client gone away. */
static void raise_io(lua_State *L, int err)
{
  ch_task_raise_quiet(L, err == -ETIMEDOUT ? "timeout" : "closed");
}

/* Whether the connection is kept after this response. */
static int decide_keep(struct rstate *rs)
{
  struct conn *c = rs->c;
  struct ch_http_head *h = rs->h;
  if (!h->keepalive || rs->user_close || c->w->stopping) return 0;
  if (rs->body_status) return 0;   /* the body broke: its end is unknown */
  if (c->nreq + 1 >= c->srv->keepalive_requests) return 0;
  /* A body the client holds back for our 100 Continue never comes. */
  if (!h->body_done && h->expect_continue && !rs->continue_sent) return 0;
  return 1;
}

/* Writes the decimal digits of v at out; returns how many. printf costs
** ~300 instructions a call, and a response head needs two numbers. */
static int utoa(uint64_t v, char *out)
{
  char tmp[24];
  int n = 0;
  do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

/* "HTTP/1.1 <status> <reason>\r\n" into out (96 bytes); returns length. */
static int status_line(int status, char *out)
{
  const char *r = reason(status);
  size_t rl = strlen(r);
  memcpy(out, "HTTP/1.1 ", 9);
  int n = 9 + utoa((uint64_t)status, out + 9);
  out[n++] = ' ';
  memcpy(out + n, r, rl);
  n += (int)rl;
  out[n++] = '\r';
  out[n++] = '\n';
  return n;
}

/* Builds the response head into out. clen >= 0: Content-Length; -1:
** chunked (HTTP/1.1) or until close (HTTP/1.0). One reserve for the
** whole head, then plain copies: this runs once per response. */
static void build_head(struct rstate *rs, struct obuf *out, int64_t clen, int default_ctype)
{
  struct conn *c = rs->c;
  static const char ctype[] = "Content-Type: text/plain; charset=utf-8\r\n";
  static const char te[] = "Transfer-Encoding: chunked\r\n";
  static const char cclose[] = "Connection: close\r\n";
  static const char ckeep[] = "Connection: keep-alive\r\n";
  const char *date = date_line();
  size_t srvl = strlen(c->srv->server_hdr), datel = strlen(date);
  /* Status line 96, Content-Length 40, the longest Connection line, CRLF. */
  size_t most = 96 + srvl + datel + rs->hdrs.len + sizeof ctype + 40 + sizeof ckeep + 2;
  if (ob_reserve(out, most) < 0) return;
  char *p = out->p + out->len;
#define PUT(s, n) (memcpy(p, (s), (n)), p += (n))
  p += status_line(rs->status, p);
  if (srvl && hx_find(rs, "server", 6, 0) < 0) PUT(c->srv->server_hdr, srvl);
  PUT(date, datel);
  for (int i = 0; i < rs->nhx; i++)
    if (rs->hx[i].len) PUT(rs->hdrs.p + rs->hx[i].off, rs->hx[i].len);
  int nobody = rs->status == 204 || rs->status == 304 || rs->status < 200;
  rs->nobody = (uint8_t)nobody;
  if (default_ctype && !nobody && hx_find(rs, "content-type", 12, 0) < 0)
    PUT(ctype, sizeof ctype - 1);
  rs->keep = (uint8_t)decide_keep(rs);
  if (nobody) {
    clen = 0;
  } else if (clen >= 0) {
    if (hx_find(rs, "content-length", 14, 0) < 0) {
      PUT("Content-Length: ", 16);
      p += utoa((uint64_t)clen, p);
      PUT("\r\n", 2);
    }
  } else if (rs->h->version_minor >= 1) {
    PUT(te, sizeof te - 1);
    rs->chunked = 1;
  } else {
    rs->until_close = 1;
    rs->keep = 0;
  }
  if (!rs->keep) {
    if (hx_find(rs, "connection", 10, 0) < 0) PUT(cclose, sizeof cclose - 1);
  } else if (rs->h->version_minor == 0) {
    PUT(ckeep, sizeof ckeep - 1);
  }
  PUT("\r\n", 2);
#undef PUT
  out->len = (size_t)(p - out->p);
  rs->clen = clen;
  rs->started = 1;
}

/* The status the handler set in res.status (index res). */
static int res_status(lua_State *L, int res)
{
  lua_getfield(L, res, "status");
  int st = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  if (st < 100 || st > 999) luaL_error(L, "bad res.status (a number from 100 to 999 expected)");
  return st;
}

/* Raises unless n more body bytes fit the Content-Length sent (clen):
** the excess would be read as the next response. */
static void check_room(lua_State *L, struct rstate *rs, int64_t clen, size_t n)
{
  if (clen >= 0 && !rs->head_only && rs->sent + n > (uint64_t)clen)
    luaL_error(L, "body longer than its Content-Length (%lld)", (long long)clen);
}

/* Yields. Writes head (if any) and a body piece. */
static int emit(lua_State *L, struct rstate *rs, struct obuf *head, const char *body, size_t n)
{
  struct iovec iov[4];
  int k = 0;
  char hex[24];
  if (head && head->len) iov[k++] = (struct iovec){ head->p, head->len };
  if (!rs->head_only && !rs->nobody && n > 0) {
    if (rs->chunked) {
      int hl = snprintf(hex, sizeof hex, "%zx\r\n", n);
      iov[k++] = (struct iovec){ hex, (size_t)hl };
      iov[k++] = (struct iovec){ (void *)body, n };
      iov[k++] = (struct iovec){ "\r\n", 2 };
    } else {
      iov[k++] = (struct iovec){ (void *)body, n };
    }
    rs->sent += n;
  }
  if (k == 0) return 0;
  return write_all(L, rs->c, iov, k, rs->c->srv->send_ms);
}

/* res:send([body]): ends the response. */
static int res_send(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  size_t n = 0;
  const char *body = lua_isnoneornil(L, 2) ? "" : luaL_checklstring(L, 2, &n);
  if (rs->finished || rs->hijacked) return luaL_error(L, "response already sent");
  int r;
  if (!rs->started) {
    rs->status = res_status(L, 1);
    char sb[OB_STACK_SIZE];
    struct obuf head = OB_STACK(sb);
    int64_t clen = (int64_t)n;
    int uclen = hx_find(rs, "content-length", 14, 0);
    if (uclen >= 0) {   /* the handler's own length must match the body */
      const char *line = rs->hdrs.p + rs->hx[uclen].off;
      if (strtoll(line + 16, NULL, 10) != clen && !rs->head_only)
        return luaL_error(L, "Content-Length header disagrees with the body's length");
    }
    build_head(rs, &head, clen, 1);
    if (head.oom) {
      ob_free(&head);
      return luaL_error(L, "no memory");
    }
    if (!rs->head_only && rs->status != 204 && rs->status != 304 && n <= OUT_DIRECT) {
      ob_add(&head, body, n);   /* one buffer, one write */
      rs->sent += n;
      n = 0;
    } else if (rs->head_only || rs->status == 204 || rs->status == 304) {
      n = 0;
    }
    if (head.oom) {
      ob_free(&head);
      return luaL_error(L, "no memory");
    }
    rs->finished = 1;
    r = emit(L, rs, &head, body, n);
    ob_free(&head);
  } else {
    check_room(L, rs, rs->clen, n);
    rs->finished = 1;
    if (rs->chunked) {
      r = emit(L, rs, NULL, body, n);
      if (r == 0 && !rs->head_only) {
        struct iovec end = { "0\r\n\r\n", 5 };
        r = write_all(L, rs->c, &end, 1, rs->c->srv->send_ms);
      }
    } else {
      r = emit(L, rs, NULL, body, n);
    }
  }
  if (r < 0) raise_io(L, r);
  lua_settop(L, 1);
  return 1;
}

/* res:write(chunk): streams a body piece. */
static int res_write(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  size_t n;
  const char *body = luaL_checklstring(L, 2, &n);
  if (rs->finished || rs->hijacked) return luaL_error(L, "response already sent");
  int r;
  if (!rs->started) {
    rs->status = res_status(L, 1);
    char sb[OB_STACK_SIZE];
    struct obuf head = OB_STACK(sb);
    int uclen = hx_find(rs, "content-length", 14, 0);
    int64_t clen = -1;
    if (uclen >= 0) clen = strtoll(rs->hdrs.p + rs->hx[uclen].off + 16, NULL, 10);
    check_room(L, rs, clen, n);
    build_head(rs, &head, clen, 1);
    if (head.oom) {
      ob_free(&head);
      return luaL_error(L, "no memory");
    }
    r = emit(L, rs, &head, body, n);
    ob_free(&head);
  } else {
    if (n == 0) { lua_settop(L, 1); return 1; }
    check_room(L, rs, rs->clen, n);
    r = emit(L, rs, NULL, body, n);
  }
  if (r < 0) raise_io(L, r);
  lua_settop(L, 1);
  return 1;
}

/* res:sent() -> whether the response has started. */
static int res_sent(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  lua_pushboolean(L, rs->started || rs->hijacked);
  return 1;
}

/* -- sendfile ------------------------------------------------------------- */

static void http_date(char *out, size_t n, time_t t)
{
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* Parses a single "bytes=a-b" range against size. Returns 1 with *from,
** *to (inclusive), 0 to serve the whole file (absent, several ranges or
** not bytes), -1 when unsatisfiable. */
static int parse_range(const char *v, size_t n, int64_t size, int64_t *from, int64_t *to)
{
  if (n < 7 || strncasecmp(v, "bytes=", 6) != 0) return 0;
  v += 6; n -= 6;
  if (memchr(v, ',', n)) return 0;
  char tmp[64];
  if (n >= sizeof tmp) return 0;
  memcpy(tmp, v, n);
  tmp[n] = 0;
  char *dash = strchr(tmp, '-'), *end;
  if (!dash) return 0;
  *dash = 0;
  if (tmp[0] == 0) {                       /* bytes=-N: the last N */
    long long last = strtoll(dash + 1, &end, 10);
    if (*end || dash[1] == 0 || last < 0) return 0;
    if (last == 0 || size == 0) return -1;
    *from = last >= size ? 0 : size - last;
    *to = size - 1;
    return 1;
  }
  long long a = strtoll(tmp, &end, 10);
  if (*end || a < 0) return 0;
  long long b = size - 1;
  if (dash[1]) {
    b = strtoll(dash + 1, &end, 10);
    if (*end || b < a) return 0;
    if (b >= size) b = size - 1;
  }
  if (a >= size) return -1;
  *from = a;
  *to = b;
  return 1;
}

/* res:sendfile(path [, content_type]) -> true, or nil, err ("not found":
** nothing sent, no header set). content_type is set unless the handler
** set one. */
static int res_sendfile(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  const char *path = luaL_checkstring(L, 2);
  if (rs->started || rs->hijacked) return luaL_error(L, "response already sent");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) close(fd);
    lua_pushnil(L);
    lua_pushliteral(L, "not found");
    return 2;
  }
  size_t tl = 0;
  const char *ctype = luaL_optlstring(L, 3, NULL, &tl);
  if (ctype && hx_find(rs, "content-type", 12, 0) < 0) hx_add(L, rs, "Content-Type", 12, ctype, tl);
  char etag[64], lm[40];
  snprintf(etag, sizeof etag, "\"%llx-%llx\"", (unsigned long long)st.st_mtime,
           (unsigned long long)st.st_size);
  http_date(lm, sizeof lm, st.st_mtime);
  int64_t size = st.st_size, from = 0, to = size - 1;
  int status = res_status(L, 1), ranged = 0;
  struct ch_http_head *h = rs->h;
  const char *base = rs->c->buf + rs->c->rq;
  const char *inm = NULL, *ims = NULL, *range = NULL, *ifr = NULL;
  size_t inml = 0, imsl = 0, rangel = 0, ifrl = 0;
  for (int i = 0; i < h->nheaders; i++) {
    struct ch_http_span nm = h->name[i], vl = h->value[i];
    if (ch_http_name_is(base, nm, "if-none-match")) { inm = base + vl.off; inml = vl.len; }
    else if (ch_http_name_is(base, nm, "if-modified-since")) { ims = base + vl.off; imsl = vl.len; }
    else if (ch_http_name_is(base, nm, "range")) { range = base + vl.off; rangel = vl.len; }
    else if (ch_http_name_is(base, nm, "if-range")) { ifr = base + vl.off; ifrl = vl.len; }
  }
  int not_modified = 0;
  if (inm) {
    size_t el = strlen(etag);
    not_modified = (inml == 1 && inm[0] == '*') ||
                   (inml >= el && memmem(inm, inml, etag, el) != NULL);
  } else if (ims) {
    not_modified = imsl == strlen(lm) && memcmp(ims, lm, imsl) == 0;   /* nginx's exact */
  }
  if (status == 200 && not_modified) {
    status = 304;
  } else if (status == 200 && range &&
             (!ifr || (ifrl == strlen(etag) && memcmp(ifr, etag, ifrl) == 0) ||
              (ifrl == strlen(lm) && memcmp(ifr, lm, ifrl) == 0))) {
    int r = parse_range(range, rangel, size, &from, &to);
    if (r < 0) {
      close(fd);
      char cr[64];
      snprintf(cr, sizeof cr, "bytes */%lld", (long long)size);
      lua_pushinteger(L, 416);
      lua_setfield(L, 1, "status");
      lua_settop(L, 1);
      lua_pushcfunction(L, res_header);
      lua_pushvalue(L, 1);
      lua_pushliteral(L, "Content-Range");
      lua_pushstring(L, cr);
      lua_call(L, 3, 0);
      lua_pushcfunction(L, res_send);
      lua_pushvalue(L, 1);
      lua_pushliteral(L, "416 Range Not Satisfiable\n");
      lua_call(L, 2, 0);
      lua_pushboolean(L, 1);
      return 1;
    }
    if (r > 0) { status = 206; ranged = 1; }
  }
  rs->status = status;
  /* Headers through the same path as res:header, for validation. */
  hx_add(L, rs, "ETag", 4, etag, strlen(etag));
  hx_add(L, rs, "Last-Modified", 13, lm, strlen(lm));
  if (hx_find(rs, "accept-ranges", 13, 0) < 0) hx_add(L, rs, "Accept-Ranges", 13, "bytes", 5);
  if (ranged) {
    char cr[96];
    int m = snprintf(cr, sizeof cr, "bytes %lld-%lld/%lld", (long long)from, (long long)to,
                     (long long)size);
    hx_add(L, rs, "Content-Range", 13, cr, (size_t)m);
  }
  int64_t len = status == 304 ? 0 : to - from + 1;
  struct obuf head = { 0 };
  build_head(rs, &head, len, 0);
  if (head.oom) {
    ob_free(&head);
    close(fd);
    return luaL_error(L, "no memory");
  }
  rs->finished = 1;
  int r = emit(L, rs, &head, NULL, 0);
  free(head.p);
  off_t off = (off_t)from;
  int64_t left = rs->head_only || status == 304 ? 0 : len;
  while (r == 0 && left > 0 && rs->c->ssl) {
    /* TLS: no sendfile(2); the file goes through SSL_write in 64 KiB
    ** pieces (pread of a regular file does not park: page cache). */
    static __thread char piece[65536];
    ssize_t got = pread(fd, piece, left > (int64_t)sizeof piece ? sizeof piece : (size_t)left, off);
    if (got <= 0) { r = got < 0 ? -errno : -EIO; break; }
    struct iovec iov = { piece, (size_t)got };
    r = write_all(L, rs->c, &iov, 1, rs->c->srv->send_ms);
    off += got;
    left -= got;
    rs->sent += (uint64_t)got;
  }
  while (r == 0 && left > 0) {
    ssize_t w = sendfile(rs->c->fd, fd, &off, left > (1 << 30) ? (1 << 30) : (size_t)left);
    if (w > 0) { left -= w; rs->sent += (uint64_t)w; continue; }
    if (w == 0) { r = -EIO; break; }   /* the file shrank under us */
    if (errno == EINTR) continue;
    if (errno != EAGAIN) { r = -errno; break; }
    int ready = ch_task_wait_fd(L, rs->c->fd, POLLOUT, rs->c->srv->send_ms);
    if (ready == 0) r = -ETIMEDOUT;
    else if (ready & POLLNVAL) r = -EBADF;
  }
  close(fd);
  if (r == -EIO) rs->keep = 0;
  if (r < 0) raise_io(L, r);
  lua_pushboolean(L, 1);
  return 1;
}

/* res:hijack() -> a cosocket on the connection (protocol upgrades). */
static int res_hijack(lua_State *L)
{
  struct rstate *rs = check_rs(L, 1);
  if (rs->started || rs->hijacked) return luaL_error(L, "response already started");
  struct conn *c = rs->c;
  /* Bytes after the request head: the new protocol's first bytes. */
  uint32_t from = c->pos;
  if (!rs->h->chunked && rs->h->body_left == 0) from = c->rq + rs->h->head_len;
  if (from < c->pos) from = c->pos;
  ch_socket_push_tls(L, c->fd, c->ssl, c->buf + from, c->len - from);
  c->fd = -1;
  c->ssl = NULL;
  c->len = c->pos = c->rq = 0;
  rs->hijacked = 1;
  rs->keep = 0;
  lua_pushvalue(L, -1);
  lua_setfield(L, 1, "_hijacked");   /* closed when the handler returns */
  return 1;
}

/* -- The connection coroutine ----------------------------------------------- */

static void access_log(struct conn *c, struct rstate *rs, const char *base)
{
  struct server *s = c->srv;
  if (s->log_fd < 0) return;
  struct ch_http_head *h = rs->h;
  char peer[80], when[40], line[2048];
  peer_string(c, peer, sizeof peer);
  char *colon = strrchr(peer, ':');
  if (colon && peer[0] != '[') *colon = 0;
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(when, sizeof when, "%d/%b/%Y:%H:%M:%S %z", &tm);
  const char *ref = "-", *ua = "-";
  int refl = 1, ual = 1;
  for (int i = 0; i < h->nheaders; i++) {
    if (ch_http_name_is(base, h->name[i], "referer")) {
      ref = base + h->value[i].off;
      refl = (int)h->value[i].len;
    } else if (ch_http_name_is(base, h->name[i], "user-agent")) {
      ua = base + h->value[i].off;
      ual = (int)h->value[i].len;
    }
  }
  int reql = (int)(h->line_end - h->start - 2);
  int n = snprintf(line, sizeof line, "%s - - [%s] \"%.*s\" %d %llu \"%.*s\" \"%.*s\"\n", peer,
                   when, reql > 1000 ? 1000 : reql, base + h->start, rs->status,
                   (unsigned long long)rs->sent, refl > 300 ? 300 : refl, ref,
                   ual > 300 ? 300 : ual, ua);
  if (n > (int)sizeof line) n = sizeof line;
  ssize_t w = write(s->log_fd, line, (size_t)n);
  (void)w;
}

/* http.current() support, off until a module asks (cohost.ngx does): a
** weak-keyed registry table from the handler's Lua thread to {req, res}.
** Per worker (each has its own Lua state). */
#define CURRENT_KEY "cohost.http.current"
static __thread int track_current;

/* track_current(on): starts (or stops) recording the running request. */
static int l_track_current(lua_State *L)
{
  track_current = lua_toboolean(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  if (lua_isnil(L, -1)) {
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  }
  return 0;
}

/* current([thread]) -> req, res of the handler running on thread (default:
** the caller's), or nothing. Needs track_current(true). */
static int l_current(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  if (!lua_istable(L, -1)) return 0;
  if (lua_isthread(L, 1)) lua_pushvalue(L, 1);
  else lua_pushthread(L);
  lua_rawget(L, -2);
  if (!lua_istable(L, -1)) return 0;
  lua_rawgeti(L, -1, 1);
  lua_rawgeti(L, -2, 2);
  return 2;
}

/* Yields. Runs handler(req, res) for head h on a task. Everything that
** needs Lua happens here, before any later wait: once the handler has
** returned, the server touches the Lua thread no more. Sets *failed and
** the status the handler left in res.status; copies an error message for
** debug 500s into err. */
static void run_handler(struct conn *c, struct ch_http_head *h, struct rstate *rs,
                        int *failed, char *err, size_t errsz)
{
  struct server *srv = c->srv;
  const char *base = c->buf + c->rq;
  struct ch_task *t = ch_task_new(c->w, "handler");
  if (!t) {
    *failed = 1;
    return;
  }
  lua_State *T = t->T;
  drain_dead(T);
  /* Slot 1 keeps res past the call (ch_task_run keeps what lies below the
  ** function); slot 2 is the dispatcher, which makes req from the
  ** arguments (lua_setfield per field costs ~3x its table constructor). */
  lua_pushnil(T);
  lua_rawgeti(T, LUA_REGISTRYINDEX, dispatch_ref);
  lua_rawgeti(T, LUA_REGISTRYINDEX, srv->handler);
  /* res: the box at [0], in the array part, and no hash part until the
  ** handler sets a field (status reads 200 from the metatable). */
  lua_createtable(T, 1, 0);
  int res = lua_gettop(T);
  struct rbox *box = lua_newuserdata(T, sizeof *box);
  box->rs = rs;
  lua_rawgeti(T, LUA_REGISTRYINDEX, rbox_mt_ref);
  lua_setmetatable(T, -2);
  lua_rawseti(T, res, 0);
  lua_rawgeti(T, LUA_REGISTRYINDEX, res_mt_ref);
  lua_setmetatable(T, res);
  lua_pushvalue(T, res);
  lua_replace(T, 1);
  lua_pushlstring(T, base + h->method.off, h->method.len);
  lua_pushlstring(T, base + h->target.off, h->target.len);
  lua_pushnumber(T, h->version_minor ? 1.1 : 1.0);
  if (push_path(T, base + h->target.off, h->target.len) < 0) {
    box->rs = NULL;
    lua_settop(T, 0);
    ch_task_release(t);
    rs->body_status = 400;   /* a target that is no path */
    *failed = -1;
    return;
  }
  int nargs = 7;
  if (track_current) {   /* http.current(): the dispatcher files thread -> req, res */
    lua_getfield(T, LUA_REGISTRYINDEX, CURRENT_KEY);
    nargs++;
  }
  ch_task_run(t, nargs);
  if (track_current) {
    lua_getfield(T, LUA_REGISTRYINDEX, CURRENT_KEY);
    lua_pushthread(T);
    lua_pushnil(T);
    lua_rawset(T, -3);
    lua_pop(T, 1);
  }
  *failed = t->status != CH_TASK_DONE;
  if (*failed && srv->debug && t->nresults > 0 && lua_isstring(T, 2))
    snprintf(err, errsz, "%s", lua_tostring(T, 2));   /* the error, above res */
  if (rs->hijacked) {
    lua_getfield(T, 1, "_hijacked");
    if (!lua_isnil(T, -1)) ch_socket_close_at(T, -1);
    lua_pop(T, 1);
  }
  if (!rs->started) {
    lua_getfield(T, 1, "status");
    rs->status = (int)lua_tointeger(T, -1);
    if (rs->status < 100 || rs->status > 999) rs->status = 500;
  }
  box->rs = NULL;   /* req and res kept past here fail cleanly */
  lua_settop(T, 0);
  ch_task_release(t);
}

/* A request's head and state. On the heap, not on the connection
** coroutine's stack: req and res reach them from any coroutine (threads
** the handler spawns), and in copy-stack mode that stack holds another
** coroutine's frames while the handler is parked. conn_main keeps one for
** as long as the connection is active (pipelined requests reuse it). */
struct request {
  struct rstate rs;
  struct ch_http_head h;
};

/* One spare request per worker: a keep-alive client that waits for each
** answer makes every request an active spell of its own, and a malloc and
** free of these 1.7 KB cost ~300 instructions a request. */
static __thread struct request *rq_spare;

static struct request *rq_take(void)
{
  struct request *rq = rq_spare;
  if (rq) rq_spare = NULL;
  else rq = malloc(sizeof *rq);
  return rq;
}

static void rq_drop(struct request *rq)
{
  if (!rq) return;
  if (!rq_spare) rq_spare = rq;
  else free(rq);
}

/* Yields. Serves the request whose head rq->h is parsed: the handler,
** then whatever it left of the response and of the body. Returns 1 to
** keep the connection, 0 to close it. */
static int serve(struct conn *c, struct request *rq)
{
  struct server *srv = c->srv;
  struct rstate *rs = &rq->rs;
  struct ch_http_head *h = &rq->h;
  ch_stats_count_request();
  if (h->content_length > 0 && (uint64_t)h->content_length > srv->max_body) {
    answer_error(c, 413);
    linger_close(c);
    return 0;
  }
  memset(rs, 0, sizeof *rs);
  rs->c = c;
  rs->h = h;
  rs->clen = -1;
  rs->start_ns = ch_now_ns();
  rs->head_only = h->method.len == 4 && memcmp(c->buf + c->rq + h->method.off, "HEAD", 4) == 0;
  int failed = 0;
  char err[1024];
  err[0] = 0;
  run_handler(c, h, rs, &failed, err, sizeof err);
  if (failed < 0) {
    answer_error(c, 400);
    linger_close(c);
    rstate_release(rs);
    return 0;
  }
  int keep = 0;
  if (rs->hijacked) {
    keep = 0;
  } else if (!rs->started) {
    /* The handler answered nothing, or failed first. */
    char sb[OB_STACK_SIZE];
    struct obuf head = OB_STACK(sb);
    const char *body = "";
    char msg[1100];
    if (failed) {
      rs->status = 500;
      rs->nhx = 0;
      rs->hdrs.len = 0;
      body = "500 Internal Server Error\n";
      if (err[0]) {
        snprintf(msg, sizeof msg, "500 Internal Server Error\n%s\n", err);
        body = msg;
      }
    } else if (rs->body_status == 413 || rs->body_status == 400) {
      rs->status = rs->body_status;
      body = rs->status == 413 ? "413 Content Too Large\n" : "400 Bad Request\n";
    }
    size_t bl = rs->head_only ? 0 : strlen(body);
    build_head(rs, &head, (int64_t)strlen(body), strlen(body) > 0);
    ob_add(&head, body, bl);
    if (!head.oom) {
      rs->sent += bl;
      struct iovec iov = { head.p, head.len };
      keep = write_all(NULL, c, &iov, 1, srv->send_ms) == 0 && rs->keep;
    }
    ob_free(&head);
  } else if (!rs->finished) {
    if (rs->head_only && !failed && !rs->until_close) {
      keep = rs->keep;
    } else if (rs->chunked && !failed) {
      struct iovec end = { "0\r\n\r\n", 5 };
      keep = write_all(NULL, c, &end, 1, srv->send_ms) == 0 && rs->keep;
    } else if (rs->clen >= 0 && rs->sent == (uint64_t)rs->clen && !failed) {
      keep = rs->keep;
    }
  } else {
    keep = rs->keep && !failed;   /* a send that timed out cut the response */
  }
  if (!rs->hijacked) access_log(c, rs, c->buf + c->rq);
  /* What the handler left of the body: drain a little to keep the
  ** connection, else close. */
  if (keep && !h->body_done) {
    if (rs->body_status) {
      keep = 0;
    } else {
      int r;
      while ((r = body_more(NULL, rs, sink_discard)) > 0)
        if (rs->body_total > DRAIN_MAX) { keep = 0; break; }
      if (r < 0) keep = 0;
    }
  }
  if (rs->body_status == 413 && !rs->hijacked) linger_close(c);   /* let it read the 413 */
  rstate_release(rs);
  return keep;
}

/* Yields. The connection's coroutine: requests until the input runs dry
** (then IDLE with no coroutine) or the connection must close. */
static void conn_main(void *arg)
{
  struct conn *c = arg;
  struct server *srv = c->srv;
  int idle_ms = c->nreq ? srv->keepalive_ms : srv->header_ms;
  struct request *rq = NULL;   /* freed when this active spell ends */
  if (c->ssl && !c->tls_ready) {
    /* The TLS handshake, within the header timeout; a failed one closes
    ** quietly (its reason is logged at info). */
    c->head_wait = ch_current();
    int r = ch_tls_handshake(NULL, c->ssl, &c->fd, srv->header_ms);
    c->head_wait = NULL;
    if (r < 0) {
      ch_log(CH_LOG_INFO, "tls: handshake with a client failed: %s",
             r == -EPROTO ? "see above" : strerror(-r));
      goto close;
    }
    c->tls_ready = 1;
  }
  for (;;) {
    if (!c->buf && buf_take(c) < 0) break;
    if (!rq && !(rq = rq_take())) break;
    struct ch_http_head *h = &rq->h;
    ch_http_head_init(h);
    uint64_t deadline = 0;
    int r;
    c->pos = c->rq;
    for (;;) {
      r = ch_http_head_parse(h, c->buf + c->rq, c->len - c->rq, &srv->lim);
      if (r != 0) break;
      if (c->len > c->rq && !deadline)   /* the first byte: the clock starts */
        deadline = ch_now_ns() + (uint64_t)srv->header_ms * 1000000u;
      ssize_t n = read_some(c, c->rq);
      if (n > 0) continue;
      if (n == 0 || (n != -EAGAIN && n != -ENOBUFS)) goto close;
      if (n == -ENOBUFS) { r = -431; break; }
      if (c->len == c->rq) {   /* nothing of a new request: go idle */
        /* read_some says -EAGAIN for TLS only after SSL_read found
        ** nothing decrypted either; this states it. */
        assert(!c->ssl || SSL_pending(c->ssl) == 0);
        if (c->w->stopping) goto close;   /* draining: idle is over */
        rq_drop(rq);
        go_idle(c, idle_ms);
        return;
      }
      uint64_t now = ch_now_ns();
      if (now >= deadline) { r = -408; break; }
      c->head_wait = ch_current();
      int w = wait_input(NULL, c, (int)((deadline - now + 999999) / 1000000u));
      c->head_wait = NULL;
      if (w < 0 || (w & POLLNVAL)) goto close;
    }
    if (r < 0) {
      if (c->w->stopping) goto close;
      answer_error(c, -r);
      linger_close(c);
      goto close;
    }
    c->pos = c->rq + (uint32_t)r;
    int keep = serve(c, rq);
    c->nreq++;
    if (!keep || c->fd < 0) goto close;
    /* The next request starts where this message ended. */
    c->rq = c->pos;
    if (c->rq == c->len) c->rq = c->pos = c->len = 0;
    idle_ms = srv->keepalive_ms;
  }
close:
  rq_drop(rq);
  c->active = 0;
  conn_free(c);
}

/* -- Lua API -------------------------------------------------------------- */

static int opt_int(lua_State *L, int idx, const char *k, int def)
{
  lua_getfield(L, idx, k);
  int v = lua_isnil(L, -1) ? def : (int)luaL_checkinteger(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Seconds (a number) to ms. */
static int opt_secs(lua_State *L, int idx, const char *k, int def_s)
{
  lua_getfield(L, idx, k);
  double v = lua_isnil(L, -1) ? def_s : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  if (v < 0.001) v = 0.001;
  return (int)(v * 1000);
}

/* server(handler, opts) -> a server object for listen(). */
static int l_server(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (lua_isnoneornil(L, 2)) {
    lua_settop(L, 1);
    lua_newtable(L);
  }
  luaL_checktype(L, 2, LUA_TTABLE);
  struct server_ud *ud = lua_newuserdata(L, sizeof *ud);
  ud->s = NULL;
  luaL_getmetatable(L, SERVER_MT);
  lua_setmetatable(L, -2);
  struct server *s = calloc(1, sizeof *s);
  if (!s) return luaL_error(L, "no memory");
  s->log_fd = -1;
  s->lim.max_line = (uint32_t)opt_int(L, 2, "max_request_line", 8192);
  s->lim.max_header = (uint32_t)opt_int(L, 2, "max_header_size", 8192);
  lua_getfield(L, 2, "max_body_size");
  s->max_body = lua_isnil(L, -1) ? 1024 * 1024 : (uint64_t)luaL_checknumber(L, -1);
  lua_pop(L, 1);
  s->header_ms = opt_secs(L, 2, "header_timeout", 60);
  s->body_ms = opt_secs(L, 2, "body_timeout", 60);
  s->send_ms = opt_secs(L, 2, "send_timeout", 60);
  s->keepalive_ms = opt_secs(L, 2, "keepalive_timeout", 75);
  s->keepalive_requests = (uint32_t)opt_int(L, 2, "keepalive_requests", 1000);
  lua_getfield(L, 2, "debug");
  s->debug = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 2, "server");
  if (lua_isnil(L, -1)) snprintf(s->server_hdr, sizeof s->server_hdr, "Server: cohost\r\n");
  else if (lua_isstring(L, -1) && valid_value(lua_tostring(L, -1), lua_objlen(L, -1)))
    snprintf(s->server_hdr, sizeof s->server_hdr, "Server: %.40s\r\n", lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 2, "access_log");
  if (lua_toboolean(L, -1)) {
    if (lua_isstring(L, -1)) {
      s->log_fd = open(lua_tostring(L, -1), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (s->log_fd < 0) {
        int e = errno;
        free(s);
        return luaL_error(L, "access_log %s: %s", lua_tostring(L, -1), strerror(e));
      }
      s->log_owned = 1;
    } else {
      s->log_fd = 2;
    }
  }
  lua_pop(L, 1);
  if (s->lim.max_line < 64 || s->lim.max_header < 64 || s->keepalive_requests < 1) {
    free(s);
    return luaL_error(L, "bad limits (max_request_line, max_header_size >= 64; "
                         "keepalive_requests >= 1)");
  }
  lua_pushvalue(L, 1);
  s->handler = luaL_ref(L, LUA_REGISTRYINDEX);
  s->refs = 1;
  ud->s = s;
  return 1;
}

static int server_gc(lua_State *L)
{
  struct server_ud *ud = lua_touserdata(L, 1);
  if (ud->s) server_unref(ud->s);
  ud->s = NULL;
  return 0;
}

/* listen(addr, server, opts) -> listener | nil, err. */
static int l_listen(lua_State *L)
{
  luaL_checkstring(L, 1);
  struct server_ud *ud = luaL_checkudata(L, 2, SERVER_MT);
  if (!ud->s) return luaL_argerror(L, 2, "dead server");
  lua_settop(L, 3);
  return ch_socket_listen_with(L, admit, ud->s);
}

static const luaL_Reg req_methods[] = {
  { "body", req_body },
  { "read", req_read },
  { "header", req_header },
  { NULL, NULL }
};

static const luaL_Reg res_methods[] = {
  { "header", res_header },
  { "get_header", res_get_header },
  { "send", res_send },
  { "write", res_write },
  { "sendfile", res_sendfile },
  { "sent", res_sent },
  { "hijack", res_hijack },
  { NULL, NULL }
};

static const luaL_Reg funcs[] = {
  { "track_current", l_track_current },
  { "current", l_current },
  { "server", l_server },
  { "listen", l_listen },
  { NULL, NULL }
};

int luaopen_cohost_core_http(lua_State *L)
{
  luaL_newmetatable(L, SERVER_MT);
  lua_pushcfunction(L, server_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, RBOX_MT);
  rbox_mt = lua_topointer(L, -1);
  rbox_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  lua_newtable(L);   /* the module */
  luaL_register(L, NULL, funcs);

  /* Request: methods table (extensible from Lua) and metatable. */
  lua_newtable(L);
  luaL_register(L, NULL, req_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "Request");
  luaL_newmetatable(L, "cohost.http.req");
  lua_pushvalue(L, -2);          /* methods */
  lua_newtable(L);               /* headers metatable */
  lua_pushcfunction(L, headers_index);
  lua_setfield(L, -2, "__index");
  lua_pushcclosure(L, req_index, 2);
  lua_setfield(L, -2, "__index");
  /* The dispatcher, over the req metatable. */
  if (luaL_loadbuffer(L, DISPATCH_SRC, sizeof DISPATCH_SRC - 1, "=cohost.core.http") != 0)
    return lua_error(L);
  lua_pushvalue(L, -2);
  lua_call(L, 1, 1);
  dispatch_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 2);

  /* Response */
  lua_newtable(L);
  luaL_register(L, NULL, res_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "Response");
  luaL_newmetatable(L, "cohost.http.res");
  lua_pushvalue(L, -1);
  res_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  /* res's __index: the defaults, then the methods. A default in the
  ** metatable costs res no hash part (~450 instructions a request). */
  lua_createtable(L, 0, 1);
  lua_pushinteger(L, 200);
  lua_setfield(L, -2, "status");
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, -4);          /* methods */
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 2);
  return 1;
}
