/*
** cohost.core.debug: task dumps and CPU profiles across the workers and
** worker processes (host/stats/debug.c), for lua/cohost/debug.lua
** (cohost.tasks, cohost.profile) and the status endpoint's debug paths. The
** answers come as text: JSON objects joined by commas, or folded stack
** lines, which the Lua side decodes, sums and renders.
*/
#include <errno.h>
#include <string.h>

#include <lauxlib.h>

#include "lib.h"
#include "proc/profile.h"
#include "stats/debug.h"
#include "vm/task.h"

/* Raises unless the caller may park here (a task, in a classic C call). */
static void check_park(lua_State *L)
{
  struct ch_coro *c = ch_current();
  if (!c) luaL_error(L, "cohost.debug: not inside a coroutine");
  ch_task_check_cancel(L);
  if (!ch_task_may_park(c)) luaL_error(L, "cohost.debug: cannot wait here (finalizer or FFI callback)");
}

static void opt_string(lua_State *L, int idx, const char *k, char *out, size_t n)
{
  lua_getfield(L, idx, k);
  size_t len = 0;
  const char *s = lua_isnil(L, -1) ? NULL : lua_tolstring(L, -1, &len);
  if (!lua_isnil(L, -1) && !s) luaL_error(L, "bad %s: a string expected", k);
  if (s && len >= n) luaL_error(L, "bad %s: too long", k);
  snprintf(out, n, "%s", s ? s : "");
  lua_pop(L, 1);
}

static double opt_number(lua_State *L, int idx, const char *k, double def)
{
  lua_getfield(L, idx, k);
  double v = lua_isnil(L, -1) ? def : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  return v;
}

static int opt_bool(lua_State *L, int idx, const char *k)
{
  lua_getfield(L, idx, k);
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Pushes items and workers' text and frees them: 2 results, or nil, err
** (busy names what was busy: a profile, or the processes' mailboxes). */
static int results(lua_State *L, int r, struct ch_buf *items, struct ch_buf *workers, const char *busy)
{
  if (r < 0) {
    ch_buf_free(items);
    ch_buf_free(workers);
    lua_pushnil(L);
    if (r == -EBUSY) lua_pushfstring(L, "busy: %s", busy);
    else lua_pushstring(L, r == -ESRCH ? "no profile runs" : r == -ECANCELED ? "cancelled" : strerror(-r));
    return 2;
  }
  lua_pushlstring(L, items->p ? items->p : "", items->len);
  lua_pushlstring(L, workers->p ? workers->p : "", workers->len);
  ch_buf_free(items);
  ch_buf_free(workers);
  return 2;
}

/* Yields. tasks({state=, route=, min_age=, text=}) -> items, workers:
** every task of every worker (and worker process) that the filters let
** through. */
static int l_tasks(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  struct ch_debug_ask ask = { .op = CH_DEBUG_TASKS };
  opt_string(L, 1, "state", ask.state, sizeof ask.state);
  opt_string(L, 1, "route", ask.route, sizeof ask.route);
  ask.min_age = opt_number(L, 1, "min_age", 0);
  ask.text = opt_bool(L, 1, "text");
  check_park(L);
  struct ch_buf items = { 0 }, workers = { 0 };
  int r = ch_debug_run(&ask, &items, &workers);
  if (r == -ECANCELED) ch_task_check_cancel(L);
  return results(L, r, &items, &workers, "another dump or profile crosses the processes");
}

static int check_hz(lua_State *L, int idx)
{
  double hz = opt_number(L, idx, "hz", 99);
  if (!(hz >= 1 && hz <= CH_PROFILE_HZ_MAX)) luaL_error(L, "bad hz: 1 to %d expected", CH_PROFILE_HZ_MAX);
  return (int)hz;
}

/* Yields. profile({seconds=, hz=, by_route=}) -> folded, workers: every
** worker of every worker process sampled for seconds. */
static int l_profile(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  struct ch_debug_ask ask = { .op = CH_DEBUG_PROFILE };
  double s = opt_number(L, 1, "seconds", 10);
  if (!(s > 0 && s <= 3600)) luaL_error(L, "bad seconds: more than 0, at most 3600 expected");
  ask.ms = (int)(s * 1000);
  ask.hz = check_hz(L, 1);
  ask.by_route = opt_bool(L, 1, "by_route");
  check_park(L);
  struct ch_buf items = { 0 }, workers = { 0 };
  int r = ch_debug_run(&ask, &items, &workers);
  if (r == -ECANCELED) ch_task_check_cancel(L);
  return results(L, r, &items, &workers, "another profile runs");
}

/* Yields. profile_start({hz=, by_route=}) -> workers, or nil, err: every
** worker of this process starts sampling. */
static int l_profile_start(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  int hz = check_hz(L, 1), by_route = opt_bool(L, 1, "by_route");
  check_park(L);
  struct ch_buf items = { 0 }, workers = { 0 };
  int r = ch_debug_profile_start(hz, by_route, &workers);
  int n = results(L, r, &items, &workers, "another profile runs");
  if (r >= 0) lua_remove(L, -2);   /* the empty items */
  return r >= 0 ? 1 : n;
}

/* Yields. profile_stop() -> folded, workers, or nil, err. */
static int l_profile_stop(lua_State *L)
{
  check_park(L);
  struct ch_buf items = { 0 }, workers = { 0 };
  int r = ch_debug_profile_stop(&items, &workers);
  return results(L, r, &items, &workers, "another profile runs");
}

/* options() -> { debug_endpoints = bool, slow_request_ms = n }. */
static int l_options(lua_State *L)
{
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, ch_opts.debug_endpoints);
  lua_setfield(L, -2, "debug_endpoints");
  lua_pushinteger(L, ch_opts.slow_request_ms);
  lua_setfield(L, -2, "slow_request_ms");
  return 1;
}

static const luaL_Reg funcs[] = {
  { "tasks", l_tasks },
  { "profile", l_profile },
  { "profile_start", l_profile_start },
  { "profile_stop", l_profile_stop },
  { "options", l_options },
  { NULL, NULL }
};

int luaopen_cohost_core_debug(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  return 1;
}
