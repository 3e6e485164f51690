/*
** Listeners: bind (shared between the worker threads of a process, and
** with --processes between processes through the listen operations the
** master installs, see net/listen.h), one acceptor coroutine each that
** never touches Lua, --max-connections with a fixed 503 for HTTP,
** shedding when the fd table is full, and the drain at shutdown. A
** protocol gets each connection through its admit callback; the Lua face
** is lib_listen.c. The lists, and the context they count in, are per
** worker thread.
*/
#ifndef CH_LISTENER_H
#define CH_LISTENER_H

#include <openssl/ssl.h>

#include "net/addr.h"
#include "net/listen.h"

struct ch_listener;

/* A protocol's hand-off of an accepted connection: fd is non-blocking and
** owned by the callee, which calls ch_listener_conn_end(l) once it has
** closed fd (the listener counts the connection against
** --max-connections until then). Runs on the acceptor's coroutine: it
** must not call Lua and should not yield. */
typedef void (*ch_admit_fn)(void *ud, struct ch_listener *l, int fd, const union ch_addr *peer);

struct ch_listener_opts {
  int backlog;              /* listen(2)'s; 0: 511, nginx's default */
  int prio;                 /* CH_PRIO_* of the acceptor and connections */
  SSL_CTX *ssl_ctx;         /* TLS on every connection, or NULL; the
                            ** listener owns it from ch_listener_open on */
  int proxy_protocol;       /* each connection starts with a PROXY header
                            ** (net/proxy.h), which the protocol reads */
  int answer_503;           /* over --max-connections: a fixed HTTP 503
                            ** (else the connection is closed at once) */
  ch_admit_fn admit;        /* where connections go */
  void *admit_ud;           /* admit's first argument */
  void (*on_free)(void *free_ud);   /* called when the last reference goes
                            ** (never where Lua may not run: it only
                            ** notes what to release later) */
  void *free_ud;
};

/* Installs where this process's listening sockets come from (a
** --processes master's operations); NULL, the default: made here. Call
** before any listener opens; the operations live as long as the process. */
void ch_listener_set_ops(const struct ch_listen_ops *ops);

/* Installs the calling thread's context (net/listen.h): its worker's id,
** limit and counters, which its listeners from now on read and count in.
** ctx lives as long as they do. A thread without one (no worker) counts
** in a context of its own: worker id 0, no limit. */
void ch_listener_set_ctx(struct ch_listen_ctx *ctx);

/* Binds and listens on a (alen bytes) for spec, the address as the script
** gave it (with port 0, the workers agree on one port; a unix path is
** bound once per process and each worker gets a dup), and starts its
** acceptor on the calling thread. One reference is the caller's (drop it
** with ch_listener_unref). Returns 0 with *out, or -errno (o->ssl_ctx is
** freed then). Never yields. */
int ch_listener_open(const char *spec, union ch_addr *a, socklen_t alen,
                     const struct ch_listener_opts *o, struct ch_listener **out);

/* Stops accepting: the acceptor wakes and ends; connections go on. */
void ch_listener_close(struct ch_listener *l);

/* Drops the reference ch_listener_open gave (a Lua object's). */
void ch_listener_unref(struct ch_listener *l);

/* A connection admit took has been closed. */
void ch_listener_conn_end(struct ch_listener *l);

/* The bound address (the real port when 0 was asked). */
const union ch_addr *ch_listener_addr(const struct ch_listener *l);

/* The listening fd, -1 once closed. */
int ch_listener_fd(const struct ch_listener *l);

/* The scheduling class (CH_PRIO_*) of l's connections. */
int ch_listener_prio(const struct ch_listener *l);

/* Whether l's connections start with a PROXY protocol header. */
int ch_listener_proxy(const struct ch_listener *l);

/* l's TLS context, or NULL for a plain listener. */
SSL_CTX *ch_listener_ssl_ctx(const struct ch_listener *l);

/* Shutdown, first step: marks the calling thread's context stopping,
** takes what the kernel already queued on its listeners, closes them
** all, then admits those connections (a listener that shares its port
** with another process resets its queue when it closes). Never yields or
** calls Lua. */
void ch_listener_drain(void);

#endif
