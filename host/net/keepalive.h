/*
** Keepalive pools: idle client connections kept per worker thread under a
** key ("host:port", "unix:/path" or the user's pool name), most recently
** used first, each closed by a weak timer after its idle timeout (named
** keepalive, not pool: the runtime's thread pool owns ch_pool_*).
*/
#ifndef CH_KEEPALIVE_H
#define CH_KEEPALIVE_H

#include <openssl/ssl.h>

/* Takes the most recently used healthy connection of key's pool: its fd,
** with *reused (times it was reused so far) and *ssl (its TLS state or
** NULL), or -1 if there is none. Connections the peer closed, or with
** stray data, are closed on the way. Never yields. */
int ch_keepalive_take(const char *key, int *reused, SSL **ssl);

/* Puts connection fd (and ssl, or NULL) in key's pool, which keeps at
** most size (an empty pool takes the size it is given). idle_ms 0 keeps
** it without limit. The pool owns fd and ssl from here on, on success
** and failure alike. Returns 0 or -ENOMEM (closed then). */
int ch_keepalive_put(const char *key, int size, int idle_ms, int fd, SSL *ssl, int reused);

/* True if fd has nothing to read and no EOF: fit for a pool. */
int ch_keepalive_quiet(int fd);

/* Closes every idle connection of key's pool on this thread (a client's
** close). Never yields. */
void ch_keepalive_close(const char *key);

/* Closes every idle connection of this thread's pools (worker shutdown).
** Never yields. */
void ch_keepalive_close_all(void);

#endif
