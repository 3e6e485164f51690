/*
** Cosockets: what the rest of the host needs from lib_socket.c, which
** owns every worker's listeners and keepalive connection pools.
*/
#ifndef CH_LIB_SOCKET_H
#define CH_LIB_SOCKET_H

#include "host.h"

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
