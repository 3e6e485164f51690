/*
** Lua recursion through LuaJIT's own C code: the built-ins that call back
** into Lua from C (string.gsub, string.format, table.sort, load, dofile,
** print, coroutine.resume and coroutine.wrap) made to pass through one
** classic C function first, where ch_ljvm_wrap checks the C stack left.
** See docs/limits.md ("Recursion") and docs/stacks.md.
*/
#ifndef CH_CSTACK_H
#define CH_CSTACK_H

#include <lua.h>

/* Replaces those built-ins in L's universe (the string, table, coroutine
** and base tables; strings' methods follow string) by Lua functions that
** check first, then call the original; names in error messages ("bad
** argument #1 to 'gsub'") stay. Call once per universe, after
** ch_ljvm_init and before any script runs. Returns 0, or -1 if the chunk
** could not be run (no memory). */
int ch_cstack_init(lua_State *L);

#endif
