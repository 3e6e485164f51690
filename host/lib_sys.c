/* cohost.core.sys: time, logging, worker identity, exit and statistics. */
#include <sched.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <stdio.h>
#include <unistd.h>

#include <lauxlib.h>

#include "host.h"
#include "lib.h"
#include "stats.h"

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

/* -- Statistics ----------------------------------------------------------- */

static const char *const classes[3] = { "high", "normal", "low" };

/* Sets t[name] = v on the table at the top. */
static void set(lua_State *L, const char *name, uint64_t v)
{
  lua_pushnumber(L, (lua_Number)v);
  lua_setfield(L, -2, name);
}

/* Pushes one worker's figures as a table. age: seconds since its snapshot
** was taken (0 for the caller's own). */
static void push_worker(lua_State *L, int id, const struct ch_stats_worker *st, uint64_t now)
{
  lua_createtable(L, 0, 32);
  set(L, "worker", (uint64_t)id);
#define FIELD(name) set(L, #name, st->sched.name)
  FIELD(coros); FIELD(ready); FIELD(waiting); FIELD(sleeping); FIELD(spawned);
  FIELD(switches); FIELD(timers); FIELD(stacks_free); FIELD(stack_bytes);
  FIELD(saved_bytes); FIELD(saved_alloc); FIELD(copied_bytes);
#undef FIELD
  lua_pushstring(L, st->sched.stack_mode == CH_STACK_COPY ? "copy" : "separate");
  lua_setfield(L, -2, "stack_mode");
  for (int p = 0; p < 3; p++) {
    char key[16];
    snprintf(key, sizeof key, "ready_%s", classes[p]);
    set(L, key, st->sched.prio_ready[p]);
    snprintf(key, sizeof key, "runs_%s", classes[p]);
    set(L, key, st->sched.prio_runs[p]);
  }
  set(L, "connections", st->connections);
  set(L, "accepted", st->accepted);
  set(L, "requests", st->requests);
  set(L, "lua_bytes", st->lua_bytes);
  lua_pushnumber(L, st->taken_ns && now > st->taken_ns ? (lua_Number)(now - st->taken_ns) / 1e9 : 0);
  lua_setfield(L, -2, "age");
  lua_pushboolean(L, st->running);
  lua_setfield(L, -2, "running");
}

/* Resident set of the whole process from /proc/self/statm (one read of a
** short file), or 0 if it cannot be read. */
static uint64_t rss_bytes(void)
{
  FILE *f = fopen("/proc/self/statm", "re");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = fscanf(f, "%lu %lu", &size, &resident);
  fclose(f);
  return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Fields summed into the totals: every number of a worker's table but its
** id and its age. */
static int summed(const char *k)
{
  return strcmp(k, "worker") && strcmp(k, "age");
}

/* stats() -> this worker's figures, read now: its scheduler's counters
** (coros, ready, waiting, sleeping, spawned, switches, timers, stacks_free,
** stack_bytes; per priority class ready_<class> and runs_<class>), its
** connections (open) and accepted (total), requests (served by
** cohost.http), lua_bytes (its Lua heap).
** stats("all" [, timeout]) yields: { workers = { [1] = worker 0's, ... },
** totals = sums, plus workers and rss_bytes (the process's) }, each
** worker's fresh unless it did not answer within timeout seconds (default
** 0.2; see its age). */
static int l_stats(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) {
    struct ch_stats_worker st;
    ch_stats_self(&st);
    push_worker(L, ch_worker_self ? ch_worker_self->id : 0, &st, 0);
    return 1;
  }
  if (strcmp(luaL_checkstring(L, 1), "all") != 0) return luaL_argerror(L, 1, "\"all\" or nothing expected");
  lua_Number timeout = luaL_optnumber(L, 2, 0.2);
  if (timeout < 0 || timeout != timeout) return luaL_argerror(L, 2, "non-negative number expected");
  int n = ch_worker_count();
  struct ch_stats_worker *all = lua_newuserdata(L, (size_t)n * sizeof *all);  /* freed by the GC */
  memset(all, 0, (size_t)n * sizeof *all);
  n = ch_stats_gather(all, n, (int)(timeout * 1000));
  ch_task_check_cancel(L);
  if (n < 0) return luaL_error(L, "no memory");
  uint64_t now = ch_now_ns();
  lua_createtable(L, 0, 2);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_worker(L, i, &all[i], now);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "workers");
  /* totals: sum every summed number field over the workers. */
  lua_newtable(L);
  lua_getfield(L, -2, "workers");
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, i);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (lua_type(L, -1) == LUA_TNUMBER && summed(lua_tostring(L, -2))) {
        lua_pushvalue(L, -2);
        lua_rawget(L, -6);
        lua_Number sum = lua_tonumber(L, -1) + lua_tonumber(L, -2);
        lua_pop(L, 1);
        lua_pushvalue(L, -2);
        lua_pushnumber(L, sum);
        lua_rawset(L, -7);
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  set(L, "workers", (uint64_t)n);
  set(L, "rss_bytes", rss_bytes());
  lua_setfield(L, -2, "totals");
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
