/*
** cohost.core.shdict: shared dictionaries (ngx.shared.DICT's API), one
** fixed-size store per name, shared by every worker thread. The stores,
** their lock and their allocator are host/shdict/ (store.h); this file
** checks the arguments, calls the store and turns its results into Lua
** values.
**
** The store's lock is taken and released inside each ch_shdict_* call, so
** no Lua API function runs while it is held: anything that can raise
** (luaL_check*, pushing a string) comes before the call or after it,
** working on a copy of the value (struct ch_shdict_out).
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "lib.h"
#include "shdict/store.h"

#define SHDICT_MT "cohost.shdict"

/* -- Arguments and results -------------------------------------------------- */

/* This worker's dict metatable, for a check cheaper than luaL_checkudata
** (which interns the name and reads the registry on every call); one
** lua_State per worker thread, and LuaJIT never moves objects. */
static __thread const void *dict_mt;

static struct ch_shdict *check_dict(lua_State *L)
{
  struct ch_shdict **u = lua_touserdata(L, 1);
  if (u && lua_getmetatable(L, 1)) {
    int ok = lua_topointer(L, -1) == dict_mt;
    lua_pop(L, 1);
    if (ok) return *u;
  }
  return *(struct ch_shdict **)luaL_checkudata(L, 1, SHDICT_MT);
}

/* Pushes nil, msg (or false, msg): a soft failure, as OpenResty returns. */
static int fail(lua_State *L, int falsy, const char *msg)
{
  if (falsy) lua_pushboolean(L, 0);
  else lua_pushnil(L);
  lua_pushstring(L, msg);
  return 2;
}

/* OpenResty's strings for the store's error codes. */
static const char *const errstr[] = {
  [CH_SHDICT_NOT_FOUND] = "not found",
  [CH_SHDICT_EXISTS] = "exists",
  [CH_SHDICT_NO_MEMORY] = "no memory",
  [CH_SHDICT_NOT_NUMBER] = "not a number",
  [CH_SHDICT_NOT_LIST] = "value not a list",
  [CH_SHDICT_IS_LIST] = "value is a list",
  [CH_SHDICT_NO_BUFFER] = "no memory",
};

/* Pushes nil, err for a store's error code; a copy-out buffer the heap
** refused is not the store's failure, and raises. */
static int fail_rc(lua_State *L, int rc)
{
  if (rc == CH_SHDICT_NO_BUFFER) return luaL_error(L, "no memory");
  return fail(L, 0, errstr[rc]);
}

struct key {
  const char *p;
  size_t n;
};

/* Reads the key at i. A nil, empty or over-long key is a soft failure
** (OpenResty's "nil key", "empty key", "key too long"): returns the error
** string. Keys that are neither strings nor numbers raise. */
static const char *check_key(lua_State *L, int i, struct key *k)
{
  int t = lua_type(L, i);
  if (t == LUA_TNIL || t == LUA_TNONE) return "nil key";
  if (t != LUA_TSTRING && t != LUA_TNUMBER) luaL_typerror(L, i, "string");
  k->p = lua_tolstring(L, i, &k->n);
  if (k->n == 0) return "empty key";
  if (k->n > CH_SHDICT_KEY_MAX) return "key too long";
  return NULL;
}

/* An optional TTL in seconds at i: 0 when absent; negative raises. */
static double opt_ttl(lua_State *L, int i, const char *what)
{
  if (lua_isnoneornil(L, i)) return 0;
  double t = luaL_checknumber(L, i);
  if (!(t >= 0)) luaL_argerror(L, i, what);
  return t;
}

/* A value read from the stack, with room for the bytes of a number or a
** boolean, which ch_shdict_val points at. */
struct val {
  struct ch_shdict_val v;
  double num;
  char b;
};

/* Reads the value at i into *v; 0 if its type cannot be stored. */
static int check_val(lua_State *L, int i, struct val *v)
{
  switch (lua_type(L, i)) {
  case LUA_TNIL: case LUA_TNONE:
    v->v.type = CH_SHDICT_NIL; v->v.p = NULL; v->v.n = 0;
    return 1;
  case LUA_TBOOLEAN:
    v->v.type = CH_SHDICT_BOOL; v->b = (char)lua_toboolean(L, i); v->v.p = &v->b; v->v.n = 1;
    return 1;
  case LUA_TNUMBER:
    v->v.type = CH_SHDICT_NUM; v->num = lua_tonumber(L, i); v->v.p = (const char *)&v->num; v->v.n = 8;
    return 1;
  case LUA_TSTRING:
    v->v.type = CH_SHDICT_STR; v->v.p = lua_tolstring(L, i, &v->v.n);
    return 1;
  default:
    return 0;
  }
}

static void push_out(lua_State *L, struct ch_shdict_out *o)
{
  if (o->type == CH_SHDICT_NUM) lua_pushnumber(L, o->num);
  else if (o->type == CH_SHDICT_BOOL) lua_pushboolean(L, o->b);
  else {
    lua_pushlstring(L, o->p, o->n);
    ch_shdict_trim();
  }
}

/* -- Lua: get, set and friends --------------------------------------------- */

/* get(key) -> value, flags (flags only when non-zero), or nil; nil, err.
** get_stale(key) -> value, flags or nil, stale: expired entries that are
** still in the store come back with stale true. */
static int get_common(lua_State *L, int stale)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  struct ch_shdict_out o;
  int rc = ch_shdict_get(d, k.p, k.n, stale, &o);
  if (rc == CH_SHDICT_NOT_FOUND) {
    lua_pushnil(L);
    return 1;
  }
  if (rc) return fail_rc(L, rc);
  push_out(L, &o);
  if (!stale && !o.flags) return 1;
  if (o.flags) lua_pushnumber(L, o.flags);
  else lua_pushnil(L);
  if (!stale) return 2;
  lua_pushboolean(L, o.stale);
  return 3;
}

static int l_get(lua_State *L) { return get_common(L, 0); }
static int l_get_stale(lua_State *L) { return get_common(L, 1); }

/* set/add/replace and their safe_ forms: (key, value [, ttl [, flags]])
** -> true, nil, forcible, or false, err, forcible. A nil value deletes. */
static int store_op(lua_State *L, int mode)
{
  struct ch_shdict *d = check_dict(L);
  double ttl = opt_ttl(L, 4, "bad \"exptime\" argument");
  lua_Number fl = luaL_optnumber(L, 5, 0);
  luaL_argcheck(L, fl >= 0 && fl <= UINT32_MAX && fl == floor(fl), 5, "flags must be an integer in 0..2^32-1");
  struct key k;
  struct val v;
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  if (!check_val(L, 3, &v)) return fail(L, 0, "bad value type");
  if (v.v.type == CH_SHDICT_NIL && (mode & (CH_SHDICT_ADD | CH_SHDICT_REPLACE)))
    return fail(L, 1, "attempt to add or replace nil values");
  int forcible = 0;
  int rc = ch_shdict_set(d, k.p, k.n, &v.v, ttl, (uint32_t)fl, mode, &forcible);
  lua_pushboolean(L, rc == CH_SHDICT_OK);
  if (rc) lua_pushstring(L, errstr[rc]);
  else lua_pushnil(L);
  lua_pushboolean(L, forcible);
  return 3;
}

static int l_set(lua_State *L) { return store_op(L, CH_SHDICT_SET); }
static int l_safe_set(lua_State *L) { return store_op(L, CH_SHDICT_SET | CH_SHDICT_SAFE); }
static int l_add(lua_State *L) { return store_op(L, CH_SHDICT_ADD); }
static int l_safe_add(lua_State *L) { return store_op(L, CH_SHDICT_ADD | CH_SHDICT_SAFE); }
static int l_replace(lua_State *L) { return store_op(L, CH_SHDICT_REPLACE); }

/* delete(key) -> true: set(key, nil). */
static int l_delete(lua_State *L)
{
  lua_settop(L, 2);
  lua_pushnil(L);
  return store_op(L, CH_SHDICT_SET);
}

/* incr(key, value [, init [, init_ttl]]) -> new value (plus nil, forcible
** when init is given), or nil, err ("not found", "not a number", "no
** memory"). Without init a missing key is "not found"; with it the key is
** created as init + value, expiring after init_ttl. */
static int l_incr(lua_State *L)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  double delta = luaL_checknumber(L, 3);
  int has_init = !lua_isnoneornil(L, 4);
  double init = has_init ? luaL_checknumber(L, 4) : 0;
  double ttl = opt_ttl(L, 5, "bad \"init_ttl\" argument");
  if (!lua_isnoneornil(L, 5) && !has_init) luaL_argerror(L, 5, "must provide \"init\" when providing \"init_ttl\"");
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  int forcible = 0;
  double num;
  int rc = ch_shdict_incr(d, k.p, k.n, delta, has_init ? &init : NULL, ttl, &num, &forcible);
  if (rc) return fail_rc(L, rc);
  lua_pushnumber(L, num);
  if (!has_init) return 1;
  lua_pushnil(L);
  lua_pushboolean(L, forcible);
  return 3;
}

/* expire(key, ttl) -> true, or nil, "not found". ttl 0: never expires. */
static int l_expire(lua_State *L)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  luaL_checknumber(L, 3);
  double ttl = opt_ttl(L, 3, "bad \"exptime\" argument");
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  int rc = ch_shdict_expire(d, k.p, k.n, ttl);
  if (rc) return fail_rc(L, rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* ttl(key) -> seconds left (0: never expires), or nil, "not found". */
static int l_ttl(lua_State *L)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  uint64_t left;
  int rc = ch_shdict_ttl(d, k.p, k.n, &left);
  if (rc) return fail_rc(L, rc);
  lua_pushnumber(L, (lua_Number)left / 1000);
  return 1;
}

/* -- Lua: lists ------------------------------------------------------------ */

/* lpush/rpush(key, value) -> new length, or nil, err ("value not a list",
** "bad value type", "no memory"). Values are strings or numbers. */
static int push_common(lua_State *L, int left)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  struct val v;
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  if (!check_val(L, 3, &v) || (v.v.type != CH_SHDICT_STR && v.v.type != CH_SHDICT_NUM))
    return fail(L, 0, "bad value type");
  uint32_t len;
  int rc = ch_shdict_push(d, k.p, k.n, left, &v.v, &len);
  if (rc) return fail_rc(L, rc);
  lua_pushnumber(L, len);
  return 1;
}

static int l_lpush(lua_State *L) { return push_common(L, 1); }
static int l_rpush(lua_State *L) { return push_common(L, 0); }

/* lpop/rpop(key) -> value, or nil when the list is empty or missing, or
** nil, "value not a list". The key goes when its last element does. */
static int pop_common(lua_State *L, int left)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  struct ch_shdict_out o;
  int rc = ch_shdict_pop(d, k.p, k.n, left, &o);
  if (rc == CH_SHDICT_NOT_FOUND) lua_pushnil(L);
  else if (rc) return fail_rc(L, rc);
  else push_out(L, &o);
  return 1;
}

static int l_lpop(lua_State *L) { return pop_common(L, 1); }
static int l_rpop(lua_State *L) { return pop_common(L, 0); }

/* llen(key) -> length (0 when missing), or nil, "value not a list". */
static int l_llen(lua_State *L)
{
  struct ch_shdict *d = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, &k);
  if (err) return fail(L, 0, err);
  uint32_t len;
  int rc = ch_shdict_llen(d, k.p, k.n, &len);
  if (rc) return fail_rc(L, rc);
  lua_pushnumber(L, len);
  return 1;
}

/* -- Lua: the whole store --------------------------------------------------- */

/* flush_all(): marks every entry expired (get_stale still sees them); the
** memory comes back through flush_expired or when a store needs room. O(n). */
static int l_flush_all(lua_State *L)
{
  ch_shdict_flush_all(check_dict(L));
  return 0;
}

/* flush_expired([max]) -> how many expired entries were freed, at most max
** (0 or absent: all). Walks from the LRU tail; O(n). */
static int l_flush_expired(lua_State *L)
{
  struct ch_shdict *d = check_dict(L);
  lua_Integer max = luaL_optinteger(L, 2, 0);
  luaL_argcheck(L, max >= 0, 2, "must not be negative");
  lua_pushnumber(L, (lua_Number)ch_shdict_flush_expired(d, (size_t)max));
  return 1;
}

/* get_keys([max]) -> array of unexpired keys, least recently used first, at
** most max (default 1024; 0: all). The store copies them out under its
** lock (2 bytes of length each, then the bytes); they are pushed here. O(n). */
static int l_get_keys(lua_State *L)
{
  struct ch_shdict *d = check_dict(L);
  lua_Integer max = luaL_optinteger(L, 2, 1024);
  luaL_argcheck(L, max >= 0, 2, "must not be negative");
  size_t n;
  const char *p = ch_shdict_keys(d, (size_t)max, &n);
  if (!p) return luaL_error(L, "no memory");
  lua_createtable(L, (int)n, 0);
  for (size_t i = 1; i <= n; i++) {
    uint16_t kl;
    memcpy(&kl, p, 2);
    lua_pushlstring(L, p + 2, kl);
    lua_rawseti(L, -2, (int)i);
    p += 2 + kl;
  }
  ch_shdict_trim();
  return 1;
}

/* capacity() -> the size the store was made with, in bytes. */
static int l_capacity(lua_State *L)
{
  lua_pushnumber(L, ch_shdict_capacity(check_dict(L)));
  return 1;
}

/* free_space() -> bytes in free blocks. An entry needs 48 + value + key
** bytes rounded up to 8, which may not be contiguous. */
static int l_free_space(lua_State *L)
{
  lua_pushnumber(L, ch_shdict_free_space(check_dict(L)));
  return 1;
}

static int l_tostring(lua_State *L)
{
  struct ch_shdict **u = luaL_checkudata(L, 1, SHDICT_MT);
  lua_pushfstring(L, "cohost.shared: %s", ch_shdict_name(*u));
  return 1;
}

/* -- Lua: the module -------------------------------------------------------- */

static void push_dict(lua_State *L, struct ch_shdict *d)
{
  struct ch_shdict **u = lua_newuserdata(L, sizeof *u);
  *u = d;
  luaL_getmetatable(L, SHDICT_MT);
  lua_setmetatable(L, -2);
}

/* open(name, bytes) -> dict: the store called name, made with bytes of
** capacity on first use (one --shdict made is returned whatever bytes
** says); or nil, err if it exists with another size, or if the size is
** out of range or cannot be mapped (the Lua face raises). */
static int l_open(lua_State *L)
{
  size_t nlen;
  const char *name = luaL_checklstring(L, 1, &nlen);
  lua_Number size = luaL_checknumber(L, 2);
  luaL_argcheck(L, nlen > 0 && strlen(name) == nlen, 1, "bad name");
  if (!(size >= CH_SHDICT_MIN_SIZE && size <= CH_SHDICT_MAX_SIZE)) {
    lua_pushnil(L);
    lua_pushfstring(L, "shared dict '%s': size must be between 8k and 4095m bytes", name);
    return 2;
  }
  const char *err = NULL;
  int made = 0;
  struct ch_shdict *d = ch_shdict_open(name, (uint32_t)size, &made, &err);
  /* In a worker process a script's own dict is not seen by the others:
  ** say so once, where it is made. */
  if (made && ch_opts.processes)
    ch_log(CH_LOG_WARN, "shared dict '%s' is this worker process's own: pass --shdict %s:SIZE "
           "to share it between processes", name, name);
  if (err) {
    lua_pushnil(L);
    lua_pushfstring(L, "shared dict '%s': %s", name, err);
    return 2;
  }
  push_dict(L, d);
  return 1;
}

/* find(name) -> dict, or nil if no worker has made it. */
static int l_find(lua_State *L)
{
  struct ch_shdict *d = ch_shdict_find(luaL_checkstring(L, 1));
  if (d) push_dict(L, d);
  else lua_pushnil(L);
  return 1;
}

/* check(dict) -> true, or false, what: walks the arena, the free lists, the
** LRU list and the buckets and checks their invariants. For the specs;
** O(n) under the lock. */
static int l_check(lua_State *L)
{
  const char *bad = ch_shdict_check(check_dict(L));
  if (bad) return fail(L, 1, bad);
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg dict_methods[] = {
  { "get", l_get },
  { "get_stale", l_get_stale },
  { "set", l_set },
  { "safe_set", l_safe_set },
  { "add", l_add },
  { "safe_add", l_safe_add },
  { "replace", l_replace },
  { "delete", l_delete },
  { "incr", l_incr },
  { "expire", l_expire },
  { "ttl", l_ttl },
  { "lpush", l_lpush },
  { "rpush", l_rpush },
  { "lpop", l_lpop },
  { "rpop", l_rpop },
  { "llen", l_llen },
  { "flush_all", l_flush_all },
  { "flush_expired", l_flush_expired },
  { "get_keys", l_get_keys },
  { "capacity", l_capacity },
  { "free_space", l_free_space },
  { NULL, NULL }
};

static const luaL_Reg shdict_funcs[] = {
  { "open", l_open },
  { "find", l_find },
  { "check", l_check },
  { NULL, NULL }
};

int luaopen_cohost_core_shdict(lua_State *L)
{
  luaL_newmetatable(L, SHDICT_MT);
  dict_mt = lua_topointer(L, -1);
  lua_newtable(L);
  luaL_register(L, NULL, dict_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, shdict_funcs);
  return 1;
}
