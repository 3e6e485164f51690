/*
** Registry references dropped later (refs.h): one list per thread, since
** a worker's Lua universe is used by its own thread only.
*/
#include <lauxlib.h>

#include "cohost.h"
#include "vm/refs.h"

static __thread int *dead;      /* refs to drop; grown by ch_buf_grow */
static __thread size_t dead_cap;
__thread size_t ch_refs_queued;  /* refs in dead */

void ch_refs_defer(int ref)
{
  if (ch_refs_queued == dead_cap) {
    int *d = ch_buf_grow(dead, sizeof *d, &dead_cap, ch_refs_queued + 1, 8);
    if (!d) return;   /* leak the ref */
    dead = d;
  }
  dead[ch_refs_queued++] = ref;
}

void ch_refs_drop(lua_State *L)
{
  while (ch_refs_queued > 0) luaL_unref(L, LUA_REGISTRYINDEX, dead[--ch_refs_queued]);
}
