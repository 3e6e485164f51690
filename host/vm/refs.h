/*
** Registry references dropped later. The last reference to a C object
** that anchors a Lua value (an HTTP server's handler, a listener's) may go
** where Lua must not be called: on an acceptor, in a finalizer, from the
** loop. Its registry refs wait in this thread's list and are dropped the
** next time the thread's worker runs Lua.
*/
#ifndef CH_REFS_H
#define CH_REFS_H

#include <stddef.h>

#include <lua.h>

/* Queues registry ref ref to be unref'd by the next ch_refs_flush on this
** thread. Never calls Lua. Without memory for the list the ref leaks (one
** registry slot), which is better than calling Lua here. */
void ch_refs_defer(int ref);

/* Refs queued on this thread; read by ch_refs_flush inline. */
extern __thread size_t ch_refs_queued;

/* ch_refs_flush's work, out of line. */
void ch_refs_drop(lua_State *L);

/* Drops every queued ref from L's registry (a state of this thread's
** worker: the one the refs were made in). O(queued); a load and a branch
** when none is, as on every request. */
static inline void ch_refs_flush(lua_State *L)
{
  if (ch_refs_queued) ch_refs_drop(L);
}

#endif
