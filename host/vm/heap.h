/*
** The allocator under every worker's Lua heap, and the idle step that
** gives the heap's free pages back: jemalloc, linked privately (its public
** names renamed, host/vm/jemalloc.syms), so that it serves the Lua heaps
** alone and every other malloc in the process stays glibc's. See
** docs/limits.md ("What a handler can take down") and docs/stacks.md.
*/
#ifndef CH_HEAP_H
#define CH_HEAP_H

#include <lua.h>

/* A new Lua universe on this allocator (lua_newstate), with the panic
** handler luaL_newstate installs. NULL without memory. Only Lua's own
** calls to its allocator function may allocate or free its blocks. */
lua_State *ch_heap_newstate(void);

/* The idle trim's step for L's universe, on L's thread: unless the heap
** is over 64 MiB and Lua allocated less than half of it since the last
** time, drops the registry refs waiting in vm/refs.c and starts a
** collection that runs in slices of about a millisecond, one a
** millisecond on a weak timer, until three cycles of LuaJIT's collector
** have ended; then gives the free pages of the thread's arena back to the
** kernel. Only between tasks (the scheduler's loop): never inside the
** allocator, a finalizer or a running task. Does not yield. */
void ch_heap_trim(lua_State *L);

#endif
