/*
** Listeners. See listener.h. Each has one acceptor coroutine, a plain C
** coroutine that never touches Lua (it may not run finalizers): it
** accepts until the listener is closed or the worker stops, and yields
** every ACCEPT_BATCH connections so a flood cannot starve the handlers.
*/
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohost.h"
#include "log.h"
#include "net/activation.h"
#include "net/listen.h"
#include "net/listener.h"
#include "net/stream.h"

#define BACKLOG      511          /* nginx's default listen backlog */
#define ACCEPT_BATCH 64           /* accepts before the acceptor yields */
#define BUSY_MAX     64           /* 503 answers in flight per worker; past
                                  ** it, a connection over the limit is closed */
#define BUSY_LINGER_MS 1000       /* a 503 waits this long for the client's
                                  ** close, reading what it sends */
#define BUSY_DRAIN   (64 * 1024)  /* and reads at most this much */
#define QUEUED_MAX   4096         /* taken off all listeners at a drain at
                                  ** most; the rest are reset with them */

/* -- Process-wide coordination --------------------------------------------- */

/* Where sockets come from: NULL, made here; with --processes, the
** master's (host/proc/master_listen.h), which may say -ENOSYS. */
static const struct ch_listen_ops *ops;

void ch_listener_set_ops(const struct ch_listen_ops *o)
{
  ops = o;
}

/* Every worker runs the script's main chunk, so each calls listen() with
** the same arguments and gets its own socket (SO_REUSEPORT spreads
** connections between them), bound by itself or, with --processes, by the
** master, which hands it to the next generation too. Two things need
** agreement between workers: the port a "port 0" listen got, and, for
** unix sockets, which cannot be bound twice, the one socket they all
** accept on (each worker gets a dup).
** Entries are keyed by the address string and by which listen() call with
** that string this was on its worker. */
struct shared {
  struct shared *next;
  int nth;                  /* nth listen() with addr on a worker */
  int port;                 /* the port the first worker got */
  int fd;                   /* unix: the socket every worker dups; or -1 */
  int users;                /* unix: listeners open on fd */
  int from_master;          /* unix: fd is the master's socket (--processes),
                            ** whose path the master unlinks, not us */
  char addr[];              /* the address as given */
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared *shared_list;   /* guarded by shared_lock; never shrinks */

/* Finds or makes (addr, nth). Call with shared_lock held. NULL on ENOMEM. */
static struct shared *shared_get(const char *addr, int nth, int *made)
{
  struct shared *s;
  for (s = shared_list; s; s = s->next)
    if (s->nth == nth && strcmp(s->addr, addr) == 0) {
      *made = 0;
      return s;
    }
  size_t n = strlen(addr);
  if (!(s = calloc(1, sizeof *s + n + 1))) return NULL;
  memcpy(s->addr, addr, n + 1);
  s->nth = nth;
  s->fd = -1;
  s->next = shared_list;
  shared_list = s;
  *made = 1;
  return s;
}

/* Per worker: how many times listen() saw each address string. */
struct seen {
  struct seen *next;
  int count;
  char addr[];
};
static __thread struct seen *seen_list;

static int seen_next(const char *addr)
{
  struct seen *s;
  for (s = seen_list; s; s = s->next)
    if (strcmp(s->addr, addr) == 0) return s->count++;
  size_t n = strlen(addr);
  if (!(s = malloc(sizeof *s + n + 1))) return 0;
  memcpy(s->addr, addr, n + 1);
  s->count = 1;
  s->next = seen_list;
  seen_list = s;
  return 0;
}

/* The first listen() on a fixed port in this cohost checks that no other
** process listens there (SO_REUSEPORT would let it join ours silently):
** asked of the master with --processes (ops->claim), else probed here.
** Returns 0 or -errno (-EADDRINUSE). */
static int claim_port(const char *spec, int nth, const union ch_addr *a, socklen_t alen)
{
  int r = ops ? ops->claim(spec, nth, &a->sa, alen) : -ENOSYS;
  return r == -ENOSYS ? ch_listen_probe(&a->sa, alen) : r;
}

/* Opens, binds and listens on a TCP socket for a; with port 0, agrees on
** the port with the other workers; with a fixed one, claims it first.
** Returns the fd or -errno. Never yields and never calls Lua while
** holding shared_lock. */
static int open_tcp(const char *spec, int nth, int worker, union ch_addr *a, socklen_t alen,
                    int backlog)
{
  int err = 0, made = 0;
  int zero_port = (a->sa.sa_family == AF_INET ? a->in.sin_port : a->in6.sin6_port) == 0;
  pthread_mutex_lock(&shared_lock);
  struct shared *s = shared_get(spec, nth, &made);
  if (!s) {
    pthread_mutex_unlock(&shared_lock);
    return -ENOMEM;
  }
  if (zero_port) {
    /* A worker before us got the port; or, with --processes, the master
    ** reserved it for every process (ops->reserve). */
    int port = !made ? s->port : ops ? ops->reserve(spec, nth, &a->sa, alen) : -ENOSYS;
    if (port < 0 && port != -ENOSYS) {
      s->nth = -1;   /* the next worker asks afresh */
      pthread_mutex_unlock(&shared_lock);
      return port;
    }
    if (port > 0) {
      if (a->sa.sa_family == AF_INET) a->in.sin_port = htons((uint16_t)port);
      else a->in6.sin6_port = htons((uint16_t)port);
    }
  } else if (made && (err = -claim_port(spec, nth, a, alen)) != 0) {
    s->nth = -1;
    pthread_mutex_unlock(&shared_lock);
    return -err;
  }
  /* With --processes the master owns the socket (a reload's workers take
  ** it over, queue and all: ops->open_tcp); else it is ours. */
  int fd = ops ? ops->open_tcp(spec, nth, worker, &a->sa, alen, backlog) : -ENOSYS;
  if (fd == -ENOSYS) fd = ch_listen_tcp(&a->sa, alen, backlog);
  if (fd < 0) {
    err = -fd;
    fd = -1;
  } else {
    socklen_t len = sizeof *a;
    getsockname(fd, &a->sa, &len);
  }
  if (made && !err)
    s->port = ntohs(a->sa.sa_family == AF_INET ? a->in.sin_port : a->in6.sin6_port);
  else if (made)   /* nobody got it: the next worker tries afresh */
    s->nth = -1;
  pthread_mutex_unlock(&shared_lock);
  if (err) {
    if (fd >= 0) close(fd);
    return -err;
  }
  return fd;
}

/* Binds the unix socket path once per process (with --processes, the
** master binds it once for all: ops->open_unix); every other worker gets
** a dup of it. A stale socket file (nobody accepting) is removed first.
** Returns the fd or -errno. Never parks: the lock is held throughout. */
static int open_unix(const char *spec, int nth, const union ch_addr *a, socklen_t alen, int backlog,
                     struct shared **sp)
{
  int made, err = 0, fd = -1;
  pthread_mutex_lock(&shared_lock);
  struct shared *s = shared_get(spec, nth, &made);
  if (!s) {
    err = ENOMEM;
  } else if (s->fd >= 0) {
    if ((fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0)) < 0) err = errno;
  } else {
    fd = ops ? ops->open_unix(spec, nth, &a->un, alen, backlog) : -ENOSYS;
    if (fd == -ENOSYS) fd = ch_listen_unix(&a->un, alen, backlog);   /* no master */
    else s->from_master = fd >= 0;
    if (fd < 0) err = -fd;
    else if ((s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) err = errno;
  }
  if (!err) {
    s->users++;
    *sp = s;
  }
  pthread_mutex_unlock(&shared_lock);
  if (err) {
    if (fd >= 0) close(fd);
    return -err;
  }
  return fd;
}


/* -- Listeners ------------------------------------------------------------ */

struct ch_listener {
  int fd;                   /* listening socket; -1 once closed */
  int reserve;              /* /dev/null, given up to shed a connection
                            ** when accept says EMFILE; -1 if we have none */
  int refs;                 /* the opener's, the acceptor, each connection */
  struct ch_listen_ctx *ctx;   /* its thread's: counters, limit, stopping */
  struct shared *shared;    /* unix: the process-wide socket; else NULL */
  union ch_addr addr;       /* bound address, for addr() */
  struct ch_listener_opts o;   /* as opened; o.ssl_ctx owned */
  struct ch_listener *next; /* this worker's open listeners */
};

static __thread struct ch_listener *listeners;   /* open ones */
static __thread int busy_n;           /* busy_main coroutines running */
static __thread struct ch_listen_ctx *ctx;   /* the worker's, or NULL */
static __thread struct ch_listen_ctx own_ctx;   /* a thread without one */

void ch_listener_set_ctx(struct ch_listen_ctx *c)
{
  ctx = c;
}

static struct ch_listen_ctx *this_ctx(void)
{
  return ctx ? ctx : &own_ctx;
}

static void release(struct ch_listener *l)
{
  if (--l->refs > 0) return;
  if (l->o.on_free) l->o.on_free(l->o.free_ud);
  SSL_CTX_free(l->o.ssl_ctx);   /* live SSLs hold their own reference */
  free(l);
}

void ch_listener_unref(struct ch_listener *l) { release(l); }

void ch_listener_close(struct ch_listener *l)
{
  if (l->fd < 0) return;
  for (struct ch_listener **p = &listeners; *p; p = &(*p)->next)
    if (*p == l) { *p = l->next; break; }
  int fd = l->fd;
  l->fd = -1;
  close(fd);   /* wakes the acceptor with EBADF */
  if (l->reserve >= 0) close(l->reserve);
  l->reserve = -1;
  if (l->shared) {
    pthread_mutex_lock(&shared_lock);
    if (--l->shared->users == 0) {
      close(l->shared->fd);
      l->shared->fd = -1;
      if (!l->shared->from_master) unlink(l->addr.un.sun_path);
    }
    pthread_mutex_unlock(&shared_lock);
    l->shared = NULL;
  }
}

void ch_listener_conn_end(struct ch_listener *l)
{
  l->ctx->connections--;
  release(l);
}

const union ch_addr *ch_listener_addr(const struct ch_listener *l) { return &l->addr; }
int ch_listener_fd(const struct ch_listener *l) { return l->fd; }
int ch_listener_prio(const struct ch_listener *l) { return l->o.prio; }
SSL_CTX *ch_listener_ssl_ctx(const struct ch_listener *l) { return l->o.ssl_ctx; }
int ch_listener_proxy(const struct ch_listener *l) { return l->o.proxy_protocol; }

/* A flood of connections makes these once per connection: each is a
** kind of event, logged at once and then counted (log.h). */
static struct ch_log_kind busy_kind =
  CH_LOG_KIND_INIT("connections over --max-connections refused");
static struct ch_log_kind shed_kind =
  CH_LOG_KIND_INIT("accept: out of descriptors: new connections closed");
static struct ch_log_kind accept_kind =
  CH_LOG_KIND_INIT("accept failed; each retried after 100 ms");

/* -- Over the limit --------------------------------------------------------- */

static const char busy_reply[] =
  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
  "Content-Length: 24\r\nConnection: close\r\n\r\n503 Service Unavailable\n";

/* The same refusal to an HTTP/2 client (h2c with prior knowledge), which
** could not parse the one above: the server's SETTINGS (empty: the
** defaults), then GOAWAY (RFC 9113 6.8) with last stream 0 (no stream
** was processed, so the client may retry them elsewhere), REFUSED_STREAM
** and "--max-connections" as its debug data. Fixed bytes, as the 503 is:
** no HTTP/2 session for a connection we refuse. */
static const char busy_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
static const char busy_goaway[] =
  "\0\0\0\x04\0\0\0\0\0"                 /* SETTINGS, 0 bytes, stream 0 */
  "\0\0\x19\x07\0\0\0\0\0"               /* GOAWAY, 25 bytes, stream 0 */
  "\0\0\0\0" "\0\0\0\x07" "--max-connections";  /* last 0, REFUSED_STREAM */
_Static_assert(sizeof busy_goaway - 1 == 9 + 9 + 8 + 17, "busy_goaway's lengths");

/* Yields. Answers a connection over --max-connections on an HTTP listener
** with a fixed 503 (or busy_goaway to a client whose first bytes are the
** HTTP/2 preface), without parsing anything or running Lua, and closes
** it. It waits up to BUSY_LINGER_MS for the first bytes to tell the two
** apart (a client that sends nothing gets the 503 then). The answer fits
** an empty send buffer, so one send does. Then a lingering close
** (ch_stream_linger, at most BUSY_LINGER_MS and BUSY_DRAIN), so that the
** client reads the answer before our close. */
static void busy_main(void *arg)
{
  int fd = (int)(intptr_t)arg;
  struct ch_stream s;
  ch_stream_init(&s, fd, NULL);
  /* Reads while what came is a head of the preface, shorter than it. */
  size_t n = 0, plen = sizeof busy_preface - 1;
  while ((n = ch_stream_avail(&s)) < plen &&
         memcmp(ch_stream_data(&s), busy_preface, n) == 0 &&
         ch_stream_fill(&s, plen - n, BUSY_LINGER_MS) > 0) {}
  int h2 = n >= plen && memcmp(ch_stream_data(&s), busy_preface, plen) == 0;
  const char *reply = h2 ? busy_goaway : busy_reply;
  size_t rlen = h2 ? sizeof busy_goaway - 1 : sizeof busy_reply - 1;
  ch_stream_consume(&s, ch_stream_avail(&s));
  ch_stream_release(&s);   /* the linger reads raw */
  if (ch_io_write(fd, reply, rlen, 0) > 0) ch_stream_linger(&s, BUSY_LINGER_MS, BUSY_DRAIN);
  close(fd);
  busy_n--;
}

/* A connection over --max-connections: HTTP listeners answer 503 on a
** small coroutine, unless they speak TLS (the answer would need a
** handshake first) or BUSY_MAX answers are under way; everything else is
** closed at once. Logged as busy_kind. */
static void refuse(struct ch_listener *l, int fd)
{
  int answered = 0;
  if (l->o.answer_503 && !l->o.ssl_ctx && busy_n < BUSY_MAX) {
    busy_n++;
    if (ch_spawn_prio(busy_main, (void *)(intptr_t)fd, l->o.prio) >= 0) answered = 1;
    else busy_n--;
  }
  if (!answered) close(fd);
  ch_log_event(&busy_kind, CH_LOG_WARN, "%d connections reached (--max-connections): %s new ones",
               l->ctx->max_connections, l->o.answer_503 ? "answering 503 to" : "closing");
}

/* Counts one accepted connection in c, from its own thread. One writer:
** a load and a store, not a locked add (what that saves:
** docs/benchmarks.md). */
static void count_accept(struct ch_listen_ctx *c)
{
  if (!c->accepted) return;
  atomic_store_explicit(c->accepted, atomic_load_explicit(c->accepted, memory_order_relaxed) + 1,
                        memory_order_relaxed);
}

/* Hands a new connection to the protocol, or refuses it when the worker
** is at --max-connections. */
static void admit(struct ch_listener *l, int fd, const union ch_addr *peer)
{
  struct ch_listen_ctx *c = l->ctx;
  count_accept(c);
  if (c->max_connections > 0 && c->connections >= (uint64_t)c->max_connections) {
    refuse(l, fd);
    return;
  }
  if (peer->sa.sa_family != AF_UNIX) {
    int one = 1;   /* small answers go out at once */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  l->refs++;
  c->connections++;
  l->o.admit(l->o.admit_ud, l, fd, peer);
}

/* -- The acceptor ----------------------------------------------------------- */

/* Yields (backing off). Out of fds: accept and close one pending
** connection with the fd kept for the purpose, as libev and libuv do.
** Linux says EMFILE before it looks for a connection, so at the limit
** accept never says EAGAIN and a plain retry would spin. Returns 1 if a
** connection was shed, 0 if none is pending. Without a reserve it backs
** off 100 ms. */
static int shed(struct ch_listener *l, int err)
{
  ch_log_event(&shed_kind, CH_LOG_ERR, "accept: %s; closing new connections", strerror(err));
  if (l->reserve < 0) {
    ch_sleep_ms(100);
    l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 1;
  }
  close(l->reserve);
  int fd = ch_io_accept(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) close(fd);
  l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0;
}

/* Yields. The acceptor's coroutine. */
static void acceptor(void *arg)
{
  struct ch_listener *l = arg;
  int batch = 0;
  while (l->fd >= 0 && !l->ctx->stopping) {
    if (++batch == ACCEPT_BATCH) {
      batch = 0;
      ch_yield();
      continue;
    }
    union ch_addr peer;
    socklen_t plen = sizeof peer;
    memset(&peer, 0, sizeof peer);   /* unnamed unix peers fill no path */
    int fd = ch_io_accept(l->fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      admit(l, fd, &peer);
      continue;
    }
    switch (fd) {
    case -EMFILE:
    case -ENFILE:
      if (shed(l, -fd)) break;
      /* Nothing pending: wait for the next connection. */
      /* fallthrough */
    case -EAGAIN:
      batch = 0;
      if (ch_io_wait(l->fd, POLLIN, -1) < 0) goto done;   /* -EBADF: closed */
      break;
    case -ECONNABORTED:
    case -EPROTO:
    case -EPERM:   /* a firewall said no to this one */
      break;
    case -EBADF:
    case -EINVAL:
    case -ENOTSOCK:
      goto done;
    default:   /* ENOBUFS, ENOMEM: wait for memory */
      ch_log_event(&accept_kind, CH_LOG_ERR, "accept: %s", strerror(-fd));
      ch_sleep_ms(100);
    }
  }
done:
  ch_listener_close(l);
  release(l);
}

/* -- Opening ---------------------------------------------------------------- */

int ch_listener_open(const char *spec, union ch_addr *a, socklen_t alen,
                     const struct ch_listener_opts *o, struct ch_listener **out)
{
  struct ch_listen_ctx *c = this_ctx();
  int backlog = o->backlog > 0 ? o->backlog : BACKLOG;
  struct ch_listener *l = calloc(1, sizeof *l);
  if (!l) {
    SSL_CTX_free(o->ssl_ctx);
    return -ENOMEM;
  }
  int nth = seen_next(spec);
  struct shared *shared = NULL;
  int fd, passed = ch_activation_match(a);
  if (passed >= 0) {   /* systemd's socket: adopted, never bound again */
    socklen_t len = sizeof *a;
    if ((fd = fcntl(passed, F_DUPFD_CLOEXEC, 0)) < 0) fd = -errno;
    else getsockname(fd, &a->sa, &len);
  } else {
    fd = a->sa.sa_family == AF_UNIX ? open_unix(spec, nth, a, alen, backlog, &shared)
                                    : open_tcp(spec, nth, c->worker, a, alen, backlog);
  }
  if (fd < 0) {
    SSL_CTX_free(o->ssl_ctx);
    free(l);
    return fd;
  }
  l->fd = fd;
  l->ctx = c;
  l->shared = shared;
  l->addr = *a;
  l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  l->o = *o;
  l->refs = 2;   /* the opener's and the acceptor's */
  int id = ch_spawn_prio(acceptor, l, l->o.prio);   /* a high listener accepts first too */
  if (id < 0) {
    l->o.on_free = NULL;   /* the caller gets the error, and keeps its own */
    l->refs = 1;
    ch_listener_close(l);
    release(l);
    return id;
  }
  l->next = listeners;
  listeners = l;
  *out = l;
  return 0;
}

/* -- Drain ------------------------------------------------------------------ */

/* Connections the kernel queued on a listener that is about to close. */
struct queued {
  struct ch_listener *l;    /* holds a reference until admitted */
  int fd;
  union ch_addr peer;
};

/* Accepts what is already queued on this thread's listeners, each
** holding a ref on its listener; returns how many (q grows as needed, *q may be NULL). A
** listener that shares its port with other sockets (SO_REUSEPORT) resets
** its queued connections when it is closed for good (at a stop; a reload
** hands the socket on instead):
** Linux does not move them to the other sockets (unless the
** net.ipv4.tcp_migrate_req sysctl is on), so a drain serves them here. */
static int take_queued(struct queued **q)
{
  int n = 0;
  size_t cap = 0;
  for (struct ch_listener *l = listeners; l; l = l->next) {
    while (n < QUEUED_MAX) {
      union ch_addr peer;
      socklen_t plen = sizeof peer;
      memset(&peer, 0, sizeof peer);
      int fd = ch_io_accept(l->fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) break;   /* -EAGAIN: none left; anything else: give up */
      if ((size_t)n == cap) {
        struct queued *g = ch_buf_grow(*q, sizeof *g, &cap, cap + 1, 16);
        if (!g) { close(fd); break; }
        *q = g;
      }
      (*q)[n].l = l;
      (*q)[n].fd = fd;
      (*q)[n].peer = peer;
      l->refs++;
      n++;
    }
  }
  return n;
}


void ch_listener_drain(void)
{
  struct queued *q = NULL;
  this_ctx()->stopping = 1;
  int n = take_queued(&q);
  while (listeners) ch_listener_close(listeners);
  /* Each is served like any other during a drain (HTTP: the idle grace of
  ** ch_http_close_idle, one request, then Connection: close). */
  for (int i = 0; i < n; i++) {
    admit(q[i].l, q[i].fd, &q[i].peer);
    release(q[i].l);
  }
  free(q);
}
