/*
** The Lua heap cap: an allocator wrapped around the state's own that counts
** every byte of one lua_State universe (the same figure as LuaJIT's
** g->gc.total, hence lua_gc(L, LUA_GCCOUNT) and cohost.stats' lua_bytes)
** and refuses growth past --lua-memory-limit, which LuaJIT turns into a
** "not enough memory" error in the allocating Lua code. See docs/limits.md.
*/
#ifndef CH_LUA_ALLOC_H
#define CH_LUA_ALLOC_H

#include <stddef.h>

#include <lua.h>

/* The default cap per worker lua_State, bytes: 1 GiB (docs/limits.md). */
#define CH_LUA_ALLOC_DEFAULT ((size_t)1 << 30)

/* The smallest cap accepted: a worker's state with LuaJIT's libraries
** takes about 170 KiB before any script runs, cohost's modules a few
** hundred more. */
#define CH_LUA_ALLOC_MIN ((size_t)4 << 20)

/* Sets the cap of every state wrapped from now on from a command-line
** value: bytes, or a number with a k, m or g suffix ("512m", "1.5g"); "0"
** turns the cap off. Returns 0, or -1 for a value that is not a size or is
** under CH_LUA_ALLOC_MIN (the setting is unchanged then). Call before the
** workers start. */
int ch_lua_alloc_set_limit(const char *arg);

/* The cap in force, bytes; 0: none. */
size_t ch_lua_alloc_limit(void);

/* Puts the counting allocator under L's universe. Call on the thread that
** will own L, right after it was made (ch_heap_newstate, luaL_newstate),
** before anything else allocates.
** Does nothing when the cap is off. Returns 0, or -1 when no memory is
** left for the wrapper's bookkeeping. The wrapper lives as long as the
** process (cohost never closes a worker's state). */
int ch_lua_alloc_wrap(lua_State *L);

/* Opens (+1) or closes (-1) a section in which no allocation is refused:
** C code allocating on a state no pcall protects (a worker's w->L) while
** a task runs. The section must not yield. */
void ch_lua_alloc_unrefusable(int delta);

/* After a task's pcall returned (its garbage is unreachable now): when a
** growth of L's universe was refused since the last call, runs one full
** collection, so the heap is back at its live size and LuaJIT's next
** cycle is paced from there, below the limit. Does nothing otherwise.
** Never inside the allocator, a finalizer or a hook. Does not yield. */
void ch_lua_alloc_recover(lua_State *L);

/* Bytes L's universe holds now, as counted by the wrapper; lua_gc's count
** when L is not wrapped. Only on L's own thread. */
size_t ch_lua_alloc_bytes(lua_State *L);

#endif
