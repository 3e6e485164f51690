/*
** Registry references dropped later (refs.h): one list per thread, since
** a worker's Lua universe is used by its own thread only.
*/
#include <lauxlib.h>

#include "cohost.h"
#include "vm/refs.h"

static __thread int *dead;      /* refs to drop; grown by ch_buf_grow */
static __thread size_t ndead, dead_cap;

void ch_refs_defer(int ref)
{
  if (ndead == dead_cap) {
    int *d = ch_buf_grow(dead, sizeof *d, &dead_cap, ndead + 1, 8);
    if (!d) return;   /* leak the ref */
    dead = d;
  }
  dead[ndead++] = ref;
}

void ch_refs_flush(lua_State *L)
{
  while (ndead > 0) luaL_unref(L, LUA_REGISTRYINDEX, dead[--ndead]);
}
