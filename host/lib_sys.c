/* cohost.core.sys: time, logging, worker identity and exit. */
#include <sched.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <lauxlib.h>

#include "host.h"
#include "lib.h"

/* now() -> seconds since the epoch with microseconds, like ngx.now (which
** caches to ms; we read the clock, which costs ~20 ns through the vDSO). */
static int l_now(lua_State *L)
{
  struct timeval tv;
  gettimeofday(&tv, NULL);
  lua_pushnumber(L, (lua_Number)tv.tv_sec + (lua_Number)tv.tv_usec / 1e6);
  return 1;
}

/* time() -> whole seconds since the epoch. */
static int l_time(lua_State *L)
{
  struct timeval tv;
  gettimeofday(&tv, NULL);
  lua_pushnumber(L, (lua_Number)tv.tv_sec);
  return 1;
}

/* monotonic() -> seconds on a clock that never jumps, for measuring. */
static int l_monotonic(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)ch_now_ns() / 1e9);
  return 1;
}

/* log(level, ...) with level a number (1 ERR .. 5 DEBUG) or a name. The
** arguments are concatenated with tostring, like ngx.log. */
static int l_log(lua_State *L)
{
  int level;
  if (lua_type(L, 1) == LUA_TNUMBER) level = (int)lua_tointeger(L, 1);
  else if (!(level = ch_log_level(luaL_checkstring(L, 1))))
    return luaL_argerror(L, 1, "unknown log level");
  if (level < CH_LOG_ERR || level > CH_LOG_DEBUG) return luaL_argerror(L, 1, "log level out of range");
  if (level > ch_opts.log_level) return 0;
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 2; i <= n; i++) {
    lua_getglobal(L, "tostring");
    lua_pushvalue(L, i);
    lua_call(L, 1, 1);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  lua_Debug ar;
  const char *where = "?";
  int line = 0;
  if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar)) {
    where = ar.short_src;
    line = ar.currentline;
  }
  ch_log(level, "%s:%d: %s", where, line, lua_tostring(L, -1));
  return 0;
}

static int l_log_enabled(lua_State *L)
{
  lua_pushboolean(L, luaL_checkinteger(L, 1) <= ch_opts.log_level);
  return 1;
}

static int l_worker_id(lua_State *L)
{
  struct ch_worker *w = ch_worker_self;
  lua_pushinteger(L, w ? w->id : 0);
  return 1;
}

static int l_worker_count(lua_State *L)
{
  lua_pushinteger(L, ch_worker_count());
  return 1;
}

/* worker_cpu() -> the CPU this worker's thread runs on right now (pinned
** with --cpu-affinity, it stays there), or nil, err. */
static int l_worker_cpu(lua_State *L)
{
  int cpu = sched_getcpu();
  if (cpu < 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushinteger(L, cpu);
  return 1;
}

/* exit([code]) ends the process now (flushing stdio), like os.exit. */
static int l_exit(lua_State *L)
{
  ch_worker_exit((int)luaL_optinteger(L, 1, 0));
}

/* shutdown() starts the graceful stop a SIGTERM would. */
static int l_shutdown(lua_State *L)
{
  (void)L;
  if (ch_worker_self) ch_worker_shutdown(ch_worker_self);
  return 0;
}

/* stats() -> table of this worker's scheduler counters; per priority
** class, ready_<class> (queued now) and runs_<class> (switched into). */
static int l_stats(lua_State *L)
{
  static const char *const classes[3] = { "high", "normal", "low" };
  struct ch_stats st;
  if (ch_stats(&st) < 0) return 0;
  lua_createtable(L, 0, 16);
#define FIELD(name) (lua_pushnumber(L, (lua_Number)st.name), lua_setfield(L, -2, #name))
  FIELD(coros); FIELD(ready); FIELD(waiting); FIELD(sleeping); FIELD(spawned);
  FIELD(switches); FIELD(timers); FIELD(stacks_free); FIELD(stack_bytes);
#undef FIELD
  for (int p = 0; p < 3; p++) {
    char key[16];
    snprintf(key, sizeof key, "ready_%s", classes[p]);
    lua_pushnumber(L, (lua_Number)st.prio_ready[p]);
    lua_setfield(L, -2, key);
    snprintf(key, sizeof key, "runs_%s", classes[p]);
    lua_pushnumber(L, (lua_Number)st.prio_runs[p]);
    lua_setfield(L, -2, key);
  }
  lua_pushnumber(L, ch_worker_self ? (lua_Number)ch_worker_self->connections : 0);
  lua_setfield(L, -2, "connections");
  return 1;
}

static const luaL_Reg sys_funcs[] = {
  { "now", l_now },
  { "time", l_time },
  { "monotonic", l_monotonic },
  { "log", l_log },
  { "log_enabled", l_log_enabled },
  { "worker_id", l_worker_id },
  { "worker_count", l_worker_count },
  { "worker_cpu", l_worker_cpu },
  { "exit", l_exit },
  { "shutdown", l_shutdown },
  { "stats", l_stats },
  { NULL, NULL }
};

int luaopen_cohost_core_sys(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, sys_funcs);
  return 1;
}
