/*
** What cohost.http needs from lib_listen.c: a listener whose connections
** go to a C protocol instead of a Lua handler.
*/
#ifndef CH_LIB_LISTEN_H
#define CH_LIB_LISTEN_H

#include <lua.h>

#include "net/listener.h"

/* Yields (name lookup). listen's body with its arguments on L's stack
** (addr, value, opts): connections go to admit(ud, ...), over
** --max-connections they get a fixed 503, and the value at index 2 is
** anchored while the listener lives. Returns Lua results (the listener,
** or nil, err). */
int ch_listen_with(lua_State *L, ch_admit_fn admit, void *ud);

/* The listener of the listener object at idx (what ch_listen_with
** returned), or NULL if that is none (nil). */
struct ch_listener *ch_listen_at(lua_State *L, int idx);

#endif
