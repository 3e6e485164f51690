/*
** Cosockets: what the rest of the host needs from lib_socket.c, which
** owns every worker's listeners and keepalive connection pools.
*/
#ifndef CH_LIB_SOCKET_H
#define CH_LIB_SOCKET_H

#include <stddef.h>
#include <sys/socket.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"

/* A listener, as C protocol code sees it (opaque). */
struct ch_listener;

/* A C protocol's hand-off of an accepted connection: fd is non-blocking
** and owned by the callee, which calls ch_listener_conn_end(l) once it has
** closed fd (the listener counts the connection against
** --max-connections until then). Runs on the acceptor's coroutine: it
** must not call Lua and should not yield. */
typedef void (*ch_admit_fn)(void *ud, struct ch_listener *l, int fd,
                            const struct sockaddr *peer);

/* Yields (name lookup). cohost.listen's body with the arguments on L's
** stack (addr, value, opts): the listener hands connections to admit(ud,
** ...) instead of running a Lua handler; the value at index 2 is anchored
** while the listener lives. Returns lua results (the listener, or nil,
** err). */
int ch_socket_listen_with(lua_State *L, ch_admit_fn admit, void *ud);

/* A connection admit took has been closed. Never calls Lua. */
void ch_listener_conn_end(struct ch_listener *l);

/* The scheduling class (CH_PRIO_*) of l's connections. */
int ch_listener_prio(const struct ch_listener *l);

/* Pushes a cosocket (the cohost.tcp object) owning connected fd, with the
** n bytes at pre already read into its buffer: a connection handed over
** after a protocol upgrade. Raises on memory shortage (fd closed then). */
void ch_socket_push_conn(lua_State *L, int fd, const char *pre, size_t n);

/* Closes the cosocket at idx if it is one and still open. */
void ch_socket_close_at(lua_State *L, int idx);

/* Closes w's listeners: their acceptors wake, stop, and no connection is
** accepted any more; handlers already running are left alone. Never calls
** Lua and never yields. Call on w's own thread (the lists are per thread). */
void ch_socket_close_listeners(struct ch_worker *w);

/* ch_socket_close_listeners, then closes every idle connection in w's
** keepalive pools (their idle timers are weak: they never keep a worker
** running, but their fds stay open until this or the timeout). Same
** rules. */
void ch_socket_close_all(struct ch_worker *w);

#endif
