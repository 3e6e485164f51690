/*
** cohost_testmod: a classic Lua C module for spec/capi_spec.lua. Its
** functions call the plain libc names (the hooked ones), as third-party
** C modules do, so the specs can check what happens when a classic
** lua_CFunction blocks: it parks the calling coroutine, and an error it
** raises after it resumed is caught by the caller's pcall. Built by the
** Makefile into build/spec/mod/cohost_testmod.so; the lua_* API comes
** from build/cohost (-rdynamic).
*/
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

int luaopen_cohost_testmod(lua_State *L);

/* sleep_then_error(us): usleep(us) (hooked: parks the coroutine), then
** raises "testmod: failed after sleeping". The regression pattern for
** LuaJIT's current-thread pointer: a C function that parks, resumes and
** raises into a Lua pcall while traces are hot. */
static int sleep_then_error(lua_State *L)
{
  lua_Integer us = luaL_checkinteger(L, 1);
  usleep((useconds_t)us);
  return luaL_error(L, "testmod: failed after sleeping");
}

/* usleep(us) -> true: a plain C sleep, nothing else. */
static int l_usleep(lua_State *L)
{
  usleep((useconds_t)luaL_checkinteger(L, 1));
  lua_pushboolean(L, 1);
  return 1;
}

/* socketpair() -> fd1, fd2: a blocking AF_UNIX stream pair. */
static int l_socketpair(lua_State *L)
{
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushinteger(L, sv[0]);
  lua_pushinteger(L, sv[1]);
  return 2;
}

/* read(fd, max) -> data ("" at EOF) or nil, err: one blocking read(2). */
static int l_read(lua_State *L)
{
  int fd = (int)luaL_checkinteger(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, 4096);
  char buf[4096];
  if (max < 1 || max > (lua_Integer)sizeof buf) return luaL_argerror(L, 2, "1..4096 expected");
  ssize_t n = read(fd, buf, (size_t)max);
  if (n < 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushlstring(L, buf, (size_t)n);
  return 1;
}

/* write(fd, data) -> bytes or nil, err: one blocking write(2). */
static int l_write(lua_State *L)
{
  int fd = (int)luaL_checkinteger(L, 1);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  ssize_t n = write(fd, s, len);
  if (n < 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int l_close(lua_State *L)
{
  lua_pushboolean(L, close((int)luaL_checkinteger(L, 1)) == 0);
  return 1;
}

static const luaL_Reg funcs[] = {
  { "sleep_then_error", sleep_then_error },
  { "usleep", l_usleep },
  { "socketpair", l_socketpair },
  { "read", l_read },
  { "write", l_write },
  { "close", l_close },
  { NULL, NULL }
};

int luaopen_cohost_testmod(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  return 1;
}
