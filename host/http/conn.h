/*
** The HTTP/1.1 server's connections, in C: reading and framing requests,
** their bodies, keep-alive, lingering close and the drain. A connection
** spends its idle time with no coroutine at all (a watch on its fd and a
** weak timer); a request binds one, reads the head, hands the request to
** its server's run callback (lib_http.c runs the Lua handler there) and
** finishes what the handler left of the response and of the body.
**
** A connection's life:
**   accept -> IDLE: an fd in epoll (a ch_watch) and a weak timer, no
**             coroutine, no stack, no Lua thread, no buffer (~250 bytes)
**   input  -> ACTIVE: a coroutine reads the head (absolute header
**             deadline), runs the request, and loops while pipelined
**             bytes are buffered
**   EAGAIN with nothing buffered -> IDLE again (the coroutine ends)
**   the HTTP/2 preface first, or ALPN "h2" -> http/h2.c serves it until
**             it ends (its coroutine stays: ACTIVE throughout)
** Framing errors answer 400/413/414/431/501/505 with Connection: close and
** never reach a handler, nor does anything pipelined behind them.
*/
#ifndef CH_HTTP_CONN_H
#define CH_HTTP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "cohost.h"
#include "http/parse.h"
#include "net/addr.h"
#include "net/listener.h"
#include "net/stream.h"

struct ch_worker;
struct ch_http_req;
struct ch_h2_stream;

/* One http.listen's settings and handler. Connections hold references,
** so closing the listener does not pull it from under them. */
struct ch_http_server {
  int handler;                    /* registry ref of handler(req, res);
                                  ** lib_http.c's, opaque here */
  int on_error;                   /* registry ref of on_error(req, res), run
                                  ** instead of the handler for a declared
                                  ** body over max_body; 0: none */
  int refs;                       /* the Lua object, each connection */
  struct ch_http_limits lim;
  uint64_t max_body;              /* bytes */
  int header_ms, body_ms, send_ms, keepalive_ms;
  uint32_t keepalive_requests;
  int debug;                      /* 500 bodies carry the error */
  int log_fd;                     /* access log, or -1 */
  int log_owned;                  /* log_fd is ours to close */
  uint8_t log_json;               /* access log lines are JSON objects */
  uint8_t uncounted;              /* not in cohost_http_* (opts.metrics =
                                  ** false: the status endpoint's own) */
  char server_hdr[64];            /* "Server: cohost\r\n" or "" */
  uint8_t http2;                  /* HTTP/2 allowed (opts.http2) */
  int slow_ms;                    /* log requests slower than this
                                  ** (opts.slow_request_ms, else
                                  ** --slow-request-ms); 0: never */
  uint32_t h2_max_streams;        /* concurrent streams per connection */
  /* Yields. Runs the handler on request rq (lib_http.c: everything that
  ** needs Lua happens in it, so the connection never needs the Lua
  ** thread again); sets rq->failed, rq->status if unsent, rq->err. */
  void (*run)(struct ch_http_server *s, struct ch_http_req *rq);
  /* The last reference went: lib_http.c drops the handler ref the next
  ** time it is in Lua. Never calls Lua. */
  void (*on_free)(struct ch_http_server *s);
};

/* Drops a reference; the last one frees s. */
void ch_http_server_unref(struct ch_http_server *s);

struct ch_http_conn {
  struct ch_watch watch;          /* IDLE: waits for input */
  struct ch_timer timer;          /* IDLE: keep-alive or first-request expiry */
  struct ch_stream s;             /* the connection; its buffer holds the
                                  ** current request's head from s.start on
                                  ** (req.headers point into it), and is given
                                  ** back while IDLE */
  struct ch_http_server *srv;
  struct ch_listener *l;
  struct ch_worker *w;
  struct ch_coro *head_wait;      /* its coroutine while it waits for the
                                  ** rest of a head (shutdown cancels it) */
  struct ch_http_conn *prev, *next;   /* this worker's connections */
  struct ch_h2_conn *h2;          /* its HTTP/2 state, kept while IDLE with
                                  ** no coroutine (http/h2.c), or NULL */
  uint32_t nreq;                  /* requests served */
  uint32_t pos;                   /* parsed up to s.start + pos */
  uint8_t tls_ready;              /* its TLS handshake is done */
  uint8_t active;                 /* a coroutine serves it */
  uint8_t family;                 /* the peer's address, compact (an idle
                                  ** connection is ~220 bytes): for req.peer
                                  ** and the access log */
  uint8_t proxied;                /* its PROXY header was read */
  uint16_t port;
  uint8_t addr[16];
  uint8_t held;                   /* complete responses are held back
                                  ** (conn.c's held list has them) */
  uint64_t idle_until;            /* IDLE: when it expires, ns (the timer
                                  ** may fire earlier: conn.c, go_idle);
                                  ** the struct stays one 240-byte malloc
                                  ** chunk with it */
};

/* A request's head and state. On the heap, not on the connection
** coroutine's stack: req and res reach them from any coroutine (threads
** the handler spawns), and in copy-stack mode that stack holds another
** coroutine's frames while the handler is parked. */
struct ch_http_req {
  struct ch_http_conn *c;         /* NULL when the request is over */
  struct ch_http_head h;
  /* Body */
  char *pend;                     /* decoded body bytes not yet handed out */
  size_t plen, pcap;
  uint64_t body_total;            /* decoded bytes so far */
  int body_status;                /* 413 or 400 once the body failed */
  uint8_t continue_sent;
  int body_ms;                    /* req:settimeout: each body wait's limit
                                  ** in ms; 0: the server's body_timeout,
                                  ** < 0: none */
  /* Response (http/response.c) */
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
  uint32_t head_sent;             /* bytes of the response head built */
  char *hdrs;                     /* the handler's header lines */
  size_t hdrs_len, hdrs_cap;
  struct { uint32_t off, len, nlen; } *hx;   /* index of hdrs' lines */
  int nhx, hxcap;
  char *trl;                      /* res:trailer's lines, "name: value\r\n" */
  uint32_t trl_len, trl_cap;
  struct ch_h2_stream *h2;        /* the HTTP/2 stream this request is, or
                                  ** NULL for HTTP/1.1 (http/h2.h) */
  uint64_t start_ns;              /* for the access log */
  int route;                      /* the router's pattern, as an id of
                                  ** ch_http_metrics_route (0: none), for
                                  ** the metrics' route label and the log */
  /* What the run callback says */
  int failed;                     /* the handler raised; -1: a target that
                                  ** is no path (400) */
  char err[1024];                 /* the error, for debug 500s */
};

/* How long rq's next body wait may last in ms (< 0: no limit): its
** req:settimeout, else the server's body_timeout. */
int ch_http_body_ms(const struct ch_http_req *rq);

/* The bytes of rq's head (s.start of its connection's buffer). */
const char *ch_http_req_base(const struct ch_http_req *rq);

/* The listener's admit for an HTTP server (ud is the server). */
void ch_http_admit(void *ud, struct ch_listener *l, int fd, const union ch_addr *peer);

/* Gives w's idle HTTP connections one second for one more request
** (answered with Connection: close), then closes them (they hold no
** coroutine, so nothing else would); connections in a request finish it
** and close. Never yields. Call on w's own thread. */
void ch_http_close_idle(struct ch_worker *w);

/* Yields. Decodes more of rq's body into rq->pend (or, with discard,
** throws it away): at least one byte, or the end. Returns 1 if bytes
** came, 0 at the end of the body, or -errno / -status: -ETIMEDOUT,
** -ECONNRESET (the client closed), -ECANCELED, -ENOMEM, -400 (bad chunked
** body), -413 (past max_body). */
int ch_http_body_more(struct ch_http_req *rq, int discard);

/* The text of a ch_http_body_more failure: "too large", "bad request",
** "timeout", "no memory", "closed". */
const char *ch_http_body_error(int r);

/* Writes rq's access log line if its server has a log: the combined
** format, or a JSON object (log_json). */
void ch_http_access_log(struct ch_http_conn *c, struct ch_http_req *rq);

/* Writes rq's peer as "ip:port", "[ip]:port" or "unix:". */
int ch_http_peer(const struct ch_http_conn *c, char *out, size_t n);

/* Yields. Hands rq's connection over (res:hijack), after writing the
** responses held back: returns its fd, TLS state and the bytes after the
** request head (the new protocol's first bytes) at *pre; the connection
** keeps nothing. */
int ch_http_hijack(struct ch_http_req *rq, SSL **ssl, const char **pre, size_t *n);

/* Holds back the n bytes at p, rq's whole response, instead of writing
** them, when the client sent the next request already (pipelining) and
** rq's connection is plain and keeps: the responses of one batch then go
** out in one write, at the next write on the connection, before it waits
** for input, or at the end of this turn of the scheduler (a handler that
** parks does not hold back the answers before it). Returns 1 if held, 0
** if the caller is to write them. Never yields. */
int ch_http_conn_hold(struct ch_http_req *rq, const char *p, size_t n);

/* Yields. Writes what c holds back, then iov[0..n) (n may be 0), in one
** writev if they fit: every HTTP/1 write goes through here. Returns 0 or
** -errno. */
int ch_http_conn_writev(struct ch_http_conn *c, struct iovec *iov, int n, int timeout_ms);

/* Writes what c holds back, as far as the socket takes it now; the rest
** stays held. Never yields. */
void ch_http_conn_push(struct ch_http_conn *c);

#endif
