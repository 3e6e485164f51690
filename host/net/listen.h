/*
** Listening sockets: how a listener's are made, here (ch_listen_tcp,
** ch_listen_unix) or by whoever installed listen operations (a
** --processes master: host/proc/master_listen.h), and the worker's
** context its listeners count connections in. What a layer above tells
** net/ goes through these two structs, installed from above
** (net/listener.h): net/ never includes the worker's or the master's
** headers.
*/
#ifndef CH_LISTEN_H
#define CH_LISTEN_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Binds (SO_REUSEADDR, SO_REUSEPORT, IPV6_V6ONLY) and listens on TCP
** address a, non-blocking and close-on-exec. Returns the fd or -errno. */
int ch_listen_tcp(const struct sockaddr *a, socklen_t alen, int backlog);

/* Whether any process listens on TCP address a now: 0 if none, else
** -EADDRINUSE (or another -errno). What a claim checks. */
int ch_listen_probe(const struct sockaddr *a, socklen_t alen);

/* Binds and listens on unix address a (non-blocking, close-on-exec),
** first removing a stale socket file there (one nobody accepts on).
** Returns the fd or -errno. */
int ch_listen_unix(const struct sockaddr_un *a, socklen_t alen, int backlog);

/* Where a process's listening sockets come from when another process
** owns them (the --processes master, which hands them to every
** generation). key is the address as the script gave it and nth which
** listen() call with that key it was on its worker. Each returns -ENOSYS
** for "nobody to ask" (the master is gone): the listener then does it
** itself, as without operations. None may yield: they block the thread
** for one round trip at most. */
struct ch_listen_ops {
  /* May this cohost listen on TCP address a with its fixed port? The
  ** first ask of all its processes checks that nobody else listens
  ** there (-EADDRINUSE); the others join with SO_REUSEPORT. 0 or -errno. */
  int (*claim)(const char *key, int nth, const struct sockaddr *a, socklen_t alen);
  /* The port every process binds for TCP address a whose port is 0:
  ** > 0, or -errno. */
  int (*reserve)(const char *key, int nth, const struct sockaddr *a, socklen_t alen);
  /* The listening socket of worker id worker for TCP address a, its port
  ** claimed or reserved first: a new fd, or -errno. */
  int (*open_tcp)(const char *key, int nth, int worker, const struct sockaddr *a,
                  socklen_t alen, int backlog);
  /* The listening socket for unix address a, one for all: a new fd, or
  ** -errno. */
  int (*open_unix)(const char *key, int nth, const struct sockaddr_un *a, socklen_t alen,
                   int backlog);
};

/* A worker's side of its listeners: what the worker above owns and its
** thread's listeners read and count in (ch_listener_set_ctx), so that
** net/ needs no worker. One per worker thread. */
struct ch_listen_ctx {
  int worker;                   /* the worker's id (open_tcp: a socket per
                                ** id); read-only */
  int max_connections;          /* open connections allowed
                                ** (--max-connections); 0: no limit;
                                ** read-only */
  int stopping;                 /* set by ch_listener_drain: the acceptors
                                ** end */
  uint64_t connections;         /* open: admitted, not yet ended
                                ** (ch_listener_conn_end) */
  _Atomic uint64_t *accepted;   /* counts each accepted connection (one
                                ** writer, the worker's thread; others read
                                ** it); NULL: not counted */
};

#endif
