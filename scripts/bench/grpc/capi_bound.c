/*
** make bench's protobuf section: a lower bound for a protobuf decoder
** written in C. luaopen_capi_bound returns build(bytes), which makes the
** table cohost.protobuf's decoder makes of record.proto's Record (the same
** 20 keys, value kinds, strings of the same lengths, the two arrays and
** the nested message) through the Lua C API, parsing nothing: the values
** are constants and the strings are cut from the input at fixed places.
** Any C decoder does at least this, and parses besides. Keys are
** interned once (an upvalue); fields are set with lua_rawset, the
** cheapest store the API has.
*/
#include <lauxlib.h>
#include <lua.h>

static const char *KEYS[] = {
  "id", "created", "count", "total", "delta", "offset", "crc", "hash", "score", "ratio",
  "active", "name", "email", "city", "note", "token", "level", "samples", "tags", "origin",
  "x", "y",
};
#define NKEYS (int)(sizeof KEYS / sizeof KEYS[0])

/* Pushes key i (0-based) from the interned keys. */
static void key(lua_State *L, int i)
{
  lua_rawgeti(L, lua_upvalueindex(1), i + 1);
}

static int build(lua_State *L)
{
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n >= 120, 1, "the encoded Record expected");
  lua_createtable(L, 0, 20);
  int t = lua_gettop(L);
  for (int i = 0; i < 10; i++) {   /* the ten numbers */
    key(L, i);
    lua_pushnumber(L, 12345 + i);
    lua_rawset(L, t);
  }
  key(L, 10);
  lua_pushboolean(L, 1);
  lua_rawset(L, t);
  static const int len[] = { 12, 15, 6, 16, 8 };   /* name, email, city, note, token */
  for (int i = 0; i < 5; i++) {
    key(L, 11 + i);
    lua_pushlstring(L, s + 10 * i, len[i]);
    lua_rawset(L, t);
  }
  key(L, 16);
  lua_pushliteral(L, "HIGH");
  lua_rawset(L, t);
  key(L, 17);   /* samples: 5 numbers */
  lua_createtable(L, 5, 0);
  for (int i = 1; i <= 5; i++) {
    lua_pushnumber(L, i);
    lua_rawseti(L, -2, i);
  }
  lua_rawset(L, t);
  key(L, 18);   /* tags: 3 strings */
  lua_createtable(L, 3, 0);
  for (int i = 1; i <= 3; i++) {
    lua_pushlstring(L, s + 60 + 10 * i, 4 + i);
    lua_rawseti(L, -2, i);
  }
  lua_rawset(L, t);
  key(L, 19);   /* origin: { x, y } */
  lua_createtable(L, 0, 2);
  key(L, 20);
  lua_pushnumber(L, 3);
  lua_rawset(L, -3);
  key(L, 21);
  lua_pushnumber(L, -4);
  lua_rawset(L, -3);
  lua_rawset(L, t);
  return 1;
}

int luaopen_capi_bound(lua_State *L);

int luaopen_capi_bound(lua_State *L)
{
  lua_createtable(L, NKEYS, 0);
  for (int i = 0; i < NKEYS; i++) {
    lua_pushstring(L, KEYS[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushcclosure(L, build, 1);
  return 1;
}
