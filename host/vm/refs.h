/*
** Registry references dropped later. The last reference to a C object
** that anchors a Lua value (an HTTP server's handler, a listener's) may go
** where Lua must not be called: on an acceptor, in a finalizer, from the
** loop. Its registry refs wait in this thread's list and are dropped the
** next time the thread's worker runs Lua.
*/
#ifndef CH_REFS_H
#define CH_REFS_H

#include <lua.h>

/* Queues registry ref ref to be unref'd by the next ch_refs_flush on this
** thread. Never calls Lua. Without memory for the list the ref leaks (one
** registry slot), which is better than calling Lua here. */
void ch_refs_defer(int ref);

/* Drops every queued ref from L's registry (a state of this thread's
** worker: the one the refs were made in). O(queued). */
void ch_refs_flush(lua_State *L);

#endif
