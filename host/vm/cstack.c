/*
** The C-stack check for LuaJIT's built-ins. See cstack.h.
**
** LuaJIT 2.1 counts no C-call depth (Lua 5.1's "C stack overflow" at 200
** nested calls does not exist there): a handler recursing through a gsub
** callback ends only when its Lua stack reaches 65,500 slots, thousands of
** levels and tens of MiB of C stack down, far past a coroutine's stack.
** Every classic C function goes through ch_ljvm_wrap, which raises "C stack
** overflow" when less than CH_LJVM_STACK_MARGIN is left (require, C
** modules, cohost's own bindings); the built-ins are fast functions that
** never do, so the ones that call Lua from C get a Lua wrapper that asks
** ch_ljvm_stack_low first. Metamethods run by the interpreter,
** tostring's __tostring and pcall/xpcall recurse on the Lua stack only,
** and end with LuaJIT's own "stack overflow": they are left alone.
**
** The question goes through the FFI, not a classic C function: the JIT
** compiles an FFI call to a plain call, where a classic one ends the trace
** (string.format is compiled: 77 ns a call in a loop stayed 77 ns, where a
** classic check took it to 121). Interpreted, either costs about 15 ns.
*/
#include <lauxlib.h>

#include "vm/cstack.h"

/* Tail calls: the wrapper's frame is gone when the built-in runs, so its
** errors name the script's line and call ("bad argument #1 to 'gsub'"),
** as without the wrapper. */
static const char WRAP[] =
  "local string, table, coroutine, G = ...\n"
  "local ffi = require 'ffi'\n"
  "ffi.cdef 'int ch_ljvm_stack_low(void);'\n"
  "local low = ffi.C.ch_ljvm_stack_low\n"
  "local error = error\n"
  "local function check() if low() ~= 0 then error('C stack overflow', 0) end end\n"
  "local gsub, format, sort = string.gsub, string.format, table.sort\n"
  "local load, dofile, print = G.load, G.dofile, G.print\n"
  "local resume, wrap = coroutine.resume, coroutine.wrap\n"
  "string.gsub = function(...) check() return gsub(...) end\n"
  "string.format = function(...) check() return format(...) end\n"
  "table.sort = function(...) check() return sort(...) end\n"
  "G.load = function(...) check() return load(...) end\n"
  "G.dofile = function(...) check() return dofile(...) end\n"
  "G.print = function(...) check() return print(...) end\n"
  "coroutine.resume = function(...) check() return resume(...) end\n"
  /* wrap's check runs first thing in the new coroutine, which nests on
  ** the C stack of its caller: the caller's position stays in the errors
  ** wrap passes on. */
  "coroutine.wrap = function(f, ...)\n"
  "  if type(f) ~= 'function' then return wrap(f, ...) end\n"
  "  return wrap(function(...) check() return f(...) end)\n"
  "end\n";

int ch_cstack_init(lua_State *L)
{
  int top = lua_gettop(L);
  if (luaL_loadbuffer(L, WRAP, sizeof WRAP - 1, "=cohost.cstack")) goto fail;
  lua_getglobal(L, "string");
  lua_getglobal(L, "table");
  lua_getglobal(L, "coroutine");
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  if (lua_pcall(L, 4, 0, 0)) goto fail;
  return 0;
fail:
  lua_settop(L, top);
  return -1;
}
