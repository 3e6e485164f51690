/*
** Keepalive pools: client connections kept per worker thread under a key
** ("host:port", "unix:/path" or the user's pool name), idle ones most
** recently used first, each closed by a weak timer after its idle timeout
** (named keepalive, not pool: the runtime's thread pool owns ch_pool_*).
** A pool also counts the connections of its key that are out in use, and
** with a backlog it bounds them, queueing the connects past its size
** (OpenResty's pool_size and backlog options of connect).
*/
#ifndef CH_KEEPALIVE_H
#define CH_KEEPALIVE_H

#include <openssl/ssl.h>

/* One key's pool on one thread. It lives as long as the thread, so a
** pointer to it stays valid; one with no connection, idle or out, and no
** connect waiting counts as gone (OpenResty frees such a pool), and the
** next connect or put that names sizes makes it anew. */
struct ch_keepalive;

/* The pool of key for a connect. size > 0 makes it, or makes an empty one
** anew, with size and backlog (connects that may wait when size
** connections are out; < 0: none wait and none are refused); a live pool
** keeps the sizes it was made with. size 0 only finds a live pool.
** Returns NULL when there is none (a connection made then is not counted
** until ch_keepalive_put) or, for size > 0, when memory ran out. Never
** yields. */
struct ch_keepalive *ch_keepalive_get(const char *key, int size, int backlog);

/* Yields. Takes a connection of p for the caller, counted in p until it
** goes back with ch_keepalive_put or ch_keepalive_drop: the most recently
** used healthy idle one (*fd, with *reused, the times it was reused so
** far, and *ssl, its TLS state or NULL), or room for a new one (*fd -1:
** the caller connects). With a backlog, when size connections are out or
** others wait already, it waits its turn (first come, first served) up
** to timeout_ms. Returns 0, -EAGAIN when backlog connects wait already,
** -ETIMEDOUT, or -ECANCELED (the task was cancelled); off the queue
** however it returns. Idle connections the peer closed, or with stray
** data, are closed on the way. */
int ch_keepalive_take(struct ch_keepalive *p, int timeout_ms, int *fd, int *reused, SSL **ssl);

/* A connection that p counted is closed, or never got connected: its
** place goes to the longest waiting connect. Never yields. */
void ch_keepalive_drop(struct ch_keepalive *p);

/* Puts connection fd (and ssl, or NULL) in key's pool as idle; counted is
** the pool it was taken from (it was counted there), or NULL. A pool that
** is gone is made anew with size; past its size the least recently used
** idle connection is closed. idle_ms 0 keeps it without limit. The pool
** owns fd and ssl from here on, on success and failure alike. Returns 0
** or -ENOMEM (closed then). Never yields. */
int ch_keepalive_put(const char *key, struct ch_keepalive *counted, int size, int idle_ms,
                     int fd, SSL *ssl, int reused);

/* True if fd has nothing to read and no EOF: fit for a pool. */
int ch_keepalive_quiet(int fd);

/* Closes every idle connection of key's pool on this thread (a client's
** close). Never yields. */
void ch_keepalive_close(const char *key);

/* Closes every idle connection of this thread's pools (worker shutdown).
** Never yields. */
void ch_keepalive_close_all(void);

#endif
