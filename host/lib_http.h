/*
** The HTTP server: what the rest of the host needs from lib_http.c, which
** owns every worker's HTTP connections.
*/
#ifndef CH_LIB_HTTP_H
#define CH_LIB_HTTP_H

#include "log.h"
#include "worker.h"

/* Gives w's idle HTTP connections one second for one more request
** (answered with Connection: close), then closes them (they hold no
** coroutine, so nothing else would); connections in a request finish it
** and close. Never calls Lua, never yields. Call on w's own thread. */
void ch_http_close_idle(struct ch_worker *w);

#endif
