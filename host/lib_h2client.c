/*
** cohost.core.h2client: the HTTP/2 client connections of http/h2_client.c
** as Lua objects, for lua/cohost/http/client.lua (the documented
** surface). A connection takes over a connected cosocket's stream; its
** request streams are objects of their own that keep it alive.
**
**   new(sock [, idle_ms]) -> conn, or nil, err
**   conn:usable() -> bool; conn:streams() -> n; conn:close()
**   conn:open(fields, body) -> st, or nil, err   fields: { name, value, ... }
**   st:write(data, last, ms) -> true, or nil, err
**   st:head(ms) -> status, { name, value, ... }, or nil, err
**   st:read(max, ms) -> data, or nil at the end, or nil, err
**   st:trailers() -> { name, value, ... }
**   st:reset(); st:close()
** Errors: "timeout", "closed" (the connection is gone), "refused" (the
** server did not process the request: it may be sent again), "reset:
** <HTTP/2 error code>", "bad response head", "no memory", "the server
** does not speak HTTP/2" (its first bytes were no SETTINGS frame).
*/
#include <errno.h>
#include <string.h>

#include <lauxlib.h>

#include "vm/task.h"
#include "http/h2_client.h"
#include "lib.h"
#include "lib_socket.h"

#define CONN_MT    "cohost.h2client.conn"
#define STREAM_MT  "cohost.h2client.stream"
#define MAX_FIELDS 256   /* request header fields, pseudo-headers included */

struct conn_ud { struct ch_h2c *h; };          /* NULL once closed */
struct stream_ud { struct ch_h2c_stream *st; };  /* NULL once closed */

/* Pushes nil, err for -errno r (st gives a reset's code) and returns 2;
** a cancelled task raises instead. */
static int fail(lua_State *L, int r, const struct ch_h2c_stream *st)
{
  if (r == -ECANCELED) ch_task_check_cancel(L);
  switch (r) {
  case -ETIMEDOUT: return ch_lib_fail(L, "timeout");
  case -ECONNREFUSED: return ch_lib_fail(L, "refused");
  case -EPROTO: return ch_lib_fail(L, "bad response head");
  case -ENOMEM: return ch_lib_fail(L, "no memory");
  case -EPROTONOSUPPORT: return ch_lib_fail(L, "the server does not speak HTTP/2");
  case -ECONNRESET:
    lua_pushnil(L);
    lua_pushfstring(L, "reset: %s", nghttp2_http2_strerror(st ? st->close_code : 0));
    return 2;
  default: return ch_lib_fail(L, "closed");
  }
}

/* The coroutine must be one that may park (not a finalizer). */
static void check_park(lua_State *L)
{
  struct ch_coro *c = ch_current();
  if (!c || !ch_task_may_park(c)) luaL_error(L, "cannot wait here (finalizer or FFI callback)");
  ch_task_check_cancel(L);
}

static int ms_arg(lua_State *L, int idx)
{
  lua_Number ms = luaL_optnumber(L, idx, -1);
  return ms > 0 && ms < 2147483647 ? (int)ms : -1;
}

/* -- Connections ------------------------------------------------------------ */

static struct conn_ud *check_conn(lua_State *L)
{
  return luaL_checkudata(L, 1, CONN_MT);
}

/* new(sock [, idle_ms]): sock is connected (and, for TLS, handshaked with
** "h2" chosen); its connection moves to the new object and sock is left
** closed. */
static int h2_new(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int idle = ms_arg(L, 2);
  if (u->s.fd < 0) return ch_lib_fail(L, "closed");
  if (u->reading || u->writing || u->connecting) return ch_lib_fail(L, "socket busy");
  struct conn_ud *c = lua_newuserdata(L, sizeof *c);
  c->h = NULL;
  luaL_getmetatable(L, CONN_MT);
  lua_setmetatable(L, -2);
  c->h = ch_h2c_new(&u->s, idle);   /* leaves u's stream closed */
  if (!c->h) return ch_lib_fail(L, "no memory");
  return 1;
}

static int conn_usable(lua_State *L)
{
  struct conn_ud *c = check_conn(L);
  lua_pushboolean(L, c->h && ch_h2c_usable(c->h));
  return 1;
}

static int conn_streams(lua_State *L)
{
  struct conn_ud *c = check_conn(L);
  lua_pushinteger(L, c->h ? ch_h2c_streams(c->h) : 0);
  return 1;
}

/* close(), and __gc: GOAWAY once the streams in flight are done. */
static int conn_close(lua_State *L)
{
  struct conn_ud *c = check_conn(L);
  if (c->h) ch_h2c_free(c->h);
  c->h = NULL;
  return 0;
}

/* open(fields, body): fields is { name, value, ... } with the
** pseudo-headers first; body true: ch_h2c_write follows. */
static int conn_open(lua_State *L)
{
  struct conn_ud *c = check_conn(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  int body = lua_toboolean(L, 3);
  if (!c->h) return ch_lib_fail(L, "closed");
  int n = (int)lua_objlen(L, 2);
  if (n % 2 || n / 2 > MAX_FIELDS) return luaL_argerror(L, 2, "bad header list");
  nghttp2_nv nv[MAX_FIELDS];
  for (int i = 0; i < n / 2; i++) {
    size_t nl, vl;
    lua_rawgeti(L, 2, 2 * i + 1);
    lua_rawgeti(L, 2, 2 * i + 2);
    /* The strings stay referenced by the table until open returns, and
    ** nghttp2 copies them (no NO_COPY flags). */
    const char *name = luaL_checklstring(L, -2, &nl);
    const char *value = luaL_checklstring(L, -1, &vl);
    lua_pop(L, 2);
    nv[i] = (nghttp2_nv){ (uint8_t *)name, (uint8_t *)value, nl, vl, NGHTTP2_NV_FLAG_NONE };
  }
  struct stream_ud *s = lua_newuserdata(L, sizeof *s);
  s->st = NULL;
  luaL_getmetatable(L, STREAM_MT);
  lua_setmetatable(L, -2);
  lua_createtable(L, 1, 0);   /* the stream keeps its connection alive */
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  lua_setfenv(L, -2);
  int err = 0;
  s->st = ch_h2c_open(c->h, nv, (size_t)(n / 2), body, &err);
  if (!s->st) return fail(L, err, NULL);
  return 1;
}

/* -- Streams ------------------------------------------------------------------ */

static struct ch_h2c_stream *check_stream(lua_State *L)
{
  struct stream_ud *s = luaL_checkudata(L, 1, STREAM_MT);
  if (!s->st) luaL_error(L, "cohost.h2client: stream used after close");
  return s->st;
}

/* Held for the length of a call that parks: another task may close the
** stream meanwhile (a request body's sender and the response's reader). */
static void drop_held(struct ch_h2c_stream **st)
{
  if (*st) ch_h2c_stream_unref(*st);
}
#define HOLD(st) \
  struct ch_h2c_stream *held_ __attribute__((cleanup(drop_held))) = (st); \
  ch_h2c_stream_ref(held_)

/* Yields. write(data, last, ms) */
static int st_write(lua_State *L)
{
  struct ch_h2c_stream *st = check_stream(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  int last = lua_toboolean(L, 3);
  int ms = ms_arg(L, 4);
  check_park(L);
  HOLD(st);
  /* p stays referenced on this coroutine's Lua stack while it parks. */
  int r = ch_h2c_write(st, p, n, last, ms);
  if (r < 0) return fail(L, r, st);
  lua_pushboolean(L, 1);
  return 1;
}

/* Pushes hb[from, to) as { name, value, ... }. */
static void push_fields(lua_State *L, const struct ch_h2c_stream *st, uint32_t from, uint32_t to)
{
  lua_newtable(L);
  int i = 0;
  for (uint32_t off = from; off < to;) {
    size_t len = strlen(st->hb + off);
    lua_pushlstring(L, st->hb + off, len);
    lua_rawseti(L, -2, ++i);
    off += (uint32_t)len + 1;
  }
}

/* Yields. head(ms) */
static int st_head(lua_State *L)
{
  struct ch_h2c_stream *st = check_stream(L);
  int ms = ms_arg(L, 2);
  check_park(L);
  HOLD(st);
  int r = ch_h2c_head(st, ms);
  if (r < 0) return fail(L, r, st);
  lua_pushinteger(L, st->status);
  push_fields(L, st, 0, st->head_end);
  return 2;
}

/* Yields. read(max, ms) */
static int st_read(lua_State *L)
{
  struct ch_h2c_stream *st = check_stream(L);
  lua_Integer max = luaL_checkinteger(L, 2);
  int ms = ms_arg(L, 3);
  luaL_argcheck(L, max > 0, 2, "must be positive");
  check_park(L);
  HOLD(st);
  const char *p;
  ssize_t n = ch_h2c_read(st, &p, ms);
  if (n < 0) return fail(L, (int)n, st);
  if (n == 0) {
    lua_pushnil(L);
    return 1;
  }
  size_t k = (size_t)n < (size_t)max ? (size_t)n : (size_t)max;
  lua_pushlstring(L, p, k);
  ch_h2c_consume(st, k);
  return 1;
}

/* trailers(): what came after the body (empty until it has ended). */
static int st_trailers(lua_State *L)
{
  struct ch_h2c_stream *st = check_stream(L);
  if (st->head_done) push_fields(L, st, st->head_end, st->hlen);
  else lua_newtable(L);
  return 1;
}

/* reset(): RST_STREAM CANCEL if still open; the object stays. */
static int st_reset(lua_State *L)
{
  ch_h2c_reset(check_stream(L));
  return 0;
}

/* close(), and __gc: an open stream is reset (CANCEL). */
static int st_close(lua_State *L)
{
  struct stream_ud *s = luaL_checkudata(L, 1, STREAM_MT);
  if (s->st) ch_h2c_stream_free(s->st);
  s->st = NULL;
  return 0;
}

static const luaL_Reg conn_methods[] = {
  { "usable", conn_usable },
  { "streams", conn_streams },
  { "open", conn_open },
  { "close", conn_close },
  { NULL, NULL },
};

static const luaL_Reg stream_methods[] = {
  { "write", st_write },
  { "head", st_head },
  { "read", st_read },
  { "trailers", st_trailers },
  { "reset", st_reset },
  { "close", st_close },
  { NULL, NULL },
};

static const luaL_Reg h2client_funcs[] = {
  { "new", h2_new },
  { NULL, NULL },
};

static void new_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc)
{
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_register(L, NULL, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
}

int luaopen_cohost_core_h2client(lua_State *L)
{
  new_mt(L, CONN_MT, conn_methods, conn_close);
  new_mt(L, STREAM_MT, stream_methods, st_close);
  lua_newtable(L);
  luaL_register(L, NULL, h2client_funcs);
  return 1;
}
