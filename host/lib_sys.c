/* cohost.core.sys: time, logging, worker identity, exit and statistics. */
#include <sched.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <stdio.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "lib.h"
#include "stats/stats.h"
#include "stats/stats_procs.h"

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

/* The level argument at idx: a number (1 ERR .. 5 DEBUG) or a name. */
static int check_level(lua_State *L, int idx)
{
  int level;
  if (lua_type(L, idx) == LUA_TNUMBER) level = (int)lua_tointeger(L, idx);
  else if (!(level = ch_log_level(luaL_checkstring(L, idx))))
    return luaL_argerror(L, idx, "unknown log level");
  if (level < CH_LOG_ERR || level > CH_LOG_DEBUG) return luaL_argerror(L, idx, "log level out of range");
  return level;
}

/* The fields table at idx as a JSON object's text into out (cap bytes):
** string keys only, numbers and booleans as themselves, anything else
** through tostring. Cut short (still valid JSON) if it does not fit. */
static void fields_json(lua_State *L, int idx, char *out, int cap)
{
  int n = 0, first = 1;
  out[n++] = '{';
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING && n < cap - 64) {
      int mark = n;
      n += snprintf(out + n, (size_t)(cap - n), "%s\"", first ? "" : ",");
      n = ch_log_json_escape(out, n, cap - 40, lua_tostring(L, -2));
      n += snprintf(out + n, (size_t)(cap - n), "\":");
      int t = lua_type(L, -1);
      if (t == LUA_TNUMBER) {
        n += snprintf(out + n, (size_t)(cap - n), "%.14g", lua_tonumber(L, -1));
      } else if (t == LUA_TBOOLEAN) {
        n += snprintf(out + n, (size_t)(cap - n), "%s", lua_toboolean(L, -1) ? "true" : "false");
      } else {
        lua_getglobal(L, "tostring");
        lua_pushvalue(L, -2);
        lua_call(L, 1, 1);
        out[n++] = '"';
        n = ch_log_json_escape(out, n, cap - 4, lua_tostring(L, -1));
        out[n++] = '"';
        lua_pop(L, 1);
      }
      if (n >= cap - 2) n = mark;   /* did not fit: left out */
      else first = 0;
    }
    lua_pop(L, 1);
  }
  out[n++] = '}';
  out[n] = '\0';
}

/* Logs the arguments from first on, concatenated with tostring, at
** where:line (a JSON line's "file" and "line"). A table as the last
** argument holds fields: a JSON line (--log-format json) carries them as
** "fields", a text line ends with " key=value" for each. */
static void log_args(lua_State *L, int level, int first, const char *where, int line)
{
  int n = lua_gettop(L);
  int fields = n >= first && lua_type(L, n) == LUA_TTABLE ? n : 0;
  if (fields) n--;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = first; i <= n; i++) {
    lua_getglobal(L, "tostring");
    lua_pushvalue(L, i);
    lua_call(L, 1, 1);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  if (fields && !ch_log_is_json()) {   /* the message, then " k=v" each */
    int parts = 1;
    lua_pushnil(L);
    while (lua_next(L, fields)) {
      if (lua_type(L, -2) == LUA_TSTRING) {
        lua_getglobal(L, "tostring");
        lua_pushvalue(L, -2);
        lua_call(L, 1, 1);
        lua_pushfstring(L, " %s=%s", lua_tostring(L, -3), lua_tostring(L, -1));
        lua_insert(L, -4);   /* below the key, the value and its string */
        lua_pop(L, 2);       /* the string and the value: the key stays */
        parts++;
      } else {
        lua_pop(L, 1);
      }
    }
    lua_concat(L, parts);
  }
  char json[2048];
  if (fields && ch_log_is_json()) fields_json(L, fields, json, sizeof json);
  ch_log_at(level, where, line, fields && ch_log_is_json() ? json : NULL, "%s", lua_tostring(L, -1));
}

/* log(level, ...): the arguments concatenated with tostring, like
** ngx.log, at the caller's line. */
static int l_log(lua_State *L)
{
  int level = check_level(L, 1);
  if (level > ch_log_get_level()) return 0;
  lua_Debug ar;
  const char *where = "?";
  int line = 0;
  if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar)) {
    where = ar.short_src;
    line = ar.currentline;
  }
  log_args(L, level, 2, where, line);
  return 0;
}

/* log_at(level, where, line, ...): log at a line of the caller's choice,
** for a library that reports an error raised elsewhere (the router logs
** a handler's error at the handler's line, not its own). */
static int l_log_at(lua_State *L)
{
  int level = check_level(L, 1);
  const char *where = luaL_checkstring(L, 2);
  int line = (int)luaL_checkinteger(L, 3);
  if (level <= ch_log_get_level()) log_args(L, level, 4, where, line);
  return 0;
}

/* log_raw(level, msg): msg as it is, without the caller's file:line
** (ngx.errlog.raw_log). */
static int l_log_raw(lua_State *L)
{
  int level = (int)luaL_checkinteger(L, 1);
  size_t n;
  const char *msg = luaL_checklstring(L, 2, &n);
  if (level < CH_LOG_ERR || level > CH_LOG_DEBUG) return luaL_argerror(L, 1, "log level out of range");
  if (level <= ch_log_get_level()) ch_log(level, "%.*s", (int)n, msg);
  return 0;
}

/* log_level() -> --log-level, 1 (err) .. 5 (debug). */
static int l_log_level(lua_State *L)
{
  lua_pushinteger(L, ch_log_get_level());
  return 1;
}

/* processes() -> --processes (0 without a master), and this worker
** process's index under it. */
static int l_processes(lua_State *L)
{
  lua_pushinteger(L, ch_opts.processes);
  lua_pushinteger(L, ch_opts.process);
  return 2;
}

static int l_log_enabled(lua_State *L)
{
  lua_pushboolean(L, luaL_checkinteger(L, 1) <= ch_log_get_level());
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

/* draining() -> whether this process is being stopped (SIGTERM,
** cohost.shutdown): what /healthz reports. */
static int l_draining(lua_State *L)
{
  lua_pushboolean(L, ch_workers_draining());
  return 1;
}

/* exiting() -> true once this worker's shutdown started: its listeners
** closed (ngx.worker.exiting). */
static int l_exiting(lua_State *L)
{
  lua_pushboolean(L, ch_worker_self && ch_worker_self->stopping);
  return 1;
}

/* shutdown() starts the graceful stop a SIGTERM would, on this worker. */
static int l_shutdown(lua_State *L)
{
  (void)L;
  if (!ch_worker_self) return 0;
  ch_workers_set_draining();
  ch_worker_shutdown(ch_worker_self);
  return 0;
}

/* xpcall(f, msgh, ...) -> what the builtin xpcall returns, but called
** from C. The builtin is recorded into its caller's trace, and LuaJIT
** cannot compile a trace that begins in f and returns through the pcall
** frame below it (lj_record_ret: "NYI: return to lower frame"): f, hot
** on its own, is retried and blacklisted, and then so is every trace that
** reaches it. From C, f's traces end at its return (to the interpreter),
** and the caller's trace stops at this call (stitched) rather than taking
** f in: a loop that calls a different f each time (a dispatcher) keeps
** one trace, and each f has its own. Yields in f are native switches, as
** everywhere in a task. */
static int l_xpcall(lua_State *L)
{
  int nargs = lua_gettop(L) - 2;
  luaL_checkany(L, 2);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_replace(L, 1);   /* msgh, below f */
  lua_replace(L, 2);
  int status = lua_pcall(L, nargs, LUA_MULTRET, 1);
  lua_pushboolean(L, status == 0);
  lua_replace(L, 1);   /* over msgh: ok, results... or false, the error */
  return lua_gettop(L);
}

/* -- The drain's Lua ------------------------------------------------------ */

/* cohost.drain (lua/cohost/drain.lua) leaves its entry point here when a
** script loads it: fn(phase, shutdown_timeout_s). */
#define DRAIN_KEY "cohost.drain"

/* A coroutine's body: a task that calls the entry point with phase. */
static void drain_run(struct ch_worker *w, int phase)
{
  struct ch_task *t = ch_task_new(w, "shutdown");
  if (!t) {
    ch_log(CH_LOG_ERR, "shutdown: no memory for the on_shutdown task");
    return;
  }
  t->start_ns = ch_now_ns();
  lua_State *T = t->T;
  lua_getfield(T, LUA_REGISTRYINDEX, DRAIN_KEY);
  lua_pushinteger(T, phase);
  lua_pushnumber(T, ch_opts.shutdown_timeout_ms / 1000.0);
  ch_task_run(t, 2);
  ch_task_release(t);
}

static void drain_begin_main(void *p)
{
  drain_run(p, CH_DRAIN_BEGIN);
}

static void drain_stop_main(void *p)
{
  drain_run(p, CH_DRAIN_STOP);
}

void ch_sys_drain(struct ch_worker *w, int phase)
{
  /* A script that never loaded cohost.drain has nothing to run: no
  ** coroutine, no task. */
  lua_getfield(w->L, LUA_REGISTRYINDEX, DRAIN_KEY);
  int any = lua_isfunction(w->L, -1);
  lua_pop(w->L, 1);
  if (!any) return;
  if (ch_spawn(phase == CH_DRAIN_BEGIN ? drain_begin_main : drain_stop_main, w) < 0)
    ch_log(CH_LOG_ERR, "shutdown: no memory for the on_shutdown coroutine");
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
  lua_pushstring(L, st->sched.io_backend == CH_IO_URING ? "uring" : "epoll");
  lua_setfield(L, -2, "io_backend");
  set(L, "ring_inflight", st->sched.ring_inflight);
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

/* Fields summed into the totals: every number of a worker's table but its
** ids and its age. */
static int summed(const char *k)
{
  return strcmp(k, "worker") && strcmp(k, "age") && strcmp(k, "process") && strcmp(k, "pid");
}

/* stats() -> this worker's figures, read now: its scheduler's counters
** (coros, ready, waiting, sleeping, spawned, switches, timers, stacks_free,
** stack_bytes; per priority class ready_<class> and runs_<class>), its
** connections (open) and accepted (total), requests (served by
** cohost.http), lua_bytes (its Lua heap).
** stats("all" [, timeout]) yields: { workers = { [1] = worker 0's, ... },
** totals = sums, plus workers, processes and rss_bytes, processes = { per
** worker process: process, pid, rss_bytes, age } }, every worker of every
** worker process (--processes), each worker's fresh unless it did not
** answer within timeout seconds (default 0.2; see its age). A worker's
** table also says its process and pid. */
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
  if (timeout > 3600) timeout = 3600;
  int n = ch_worker_count();
  struct ch_stats_worker *all = lua_newuserdata(L, (size_t)n * sizeof *all);  /* freed by the GC */
  memset(all, 0, (size_t)n * sizeof *all);
  int np = ch_stats_procs_active() ? ch_opts.processes : 1;
  struct ch_stats_proc *procs = lua_newuserdata(L, (size_t)np * sizeof *procs);
  memset(procs, 0, (size_t)np * sizeof *procs);
  /* Other processes first, so they gather while this one does. */
  uint64_t asked = ch_stats_procs_ask();
  n = ch_stats_gather(all, n, (int)(timeout * 1000));
  ch_stats_procs_collect(all, n, asked, asked + (uint64_t)(timeout * 1e9), procs);
  ch_task_check_cancel(L);
  if (n < 0) return luaL_error(L, "no memory");
  if (np == 1) {
    procs[0].pid = getpid();
    procs[0].rss_bytes = ch_stats_rss_bytes();
    procs[0].taken_ns = asked;
  }
  uint64_t now = ch_now_ns();
  int threads = ch_opts.threads > 0 ? ch_opts.threads : 1;
  lua_createtable(L, 0, 3);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    int p = np > 1 ? i / threads : 0;
    push_worker(L, i, &all[i], now);
    set(L, "process", (uint64_t)p);
    set(L, "pid", (uint64_t)procs[p].pid);
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
  uint64_t rss = 0;
  for (int p = 0; p < np; p++) rss += procs[p].rss_bytes;
  set(L, "workers", (uint64_t)n);
  set(L, "processes", (uint64_t)np);
  set(L, "rss_bytes", rss);
  lua_setfield(L, -2, "totals");
  /* processes: per worker process, who answered, its memory and age. */
  lua_createtable(L, np, 0);
  for (int p = 0; p < np; p++) {
    lua_createtable(L, 0, 4);
    set(L, "process", (uint64_t)p);
    set(L, "pid", (uint64_t)procs[p].pid);
    set(L, "rss_bytes", procs[p].rss_bytes);
    lua_pushnumber(L, procs[p].taken_ns && now > procs[p].taken_ns && !procs[p].fresh
                        ? (lua_Number)(now - procs[p].taken_ns) / 1e9 : 0);
    lua_setfield(L, -2, "age");
    lua_rawseti(L, -2, p + 1);
  }
  lua_setfield(L, -2, "processes");
  return 1;
}

static const luaL_Reg sys_funcs[] = {
  { "now", l_now },
  { "time", l_time },
  { "monotonic", l_monotonic },
  { "log", l_log },
  { "log_at", l_log_at },
  { "log_enabled", l_log_enabled },
  { "log_raw", l_log_raw },
  { "log_level", l_log_level },
  { "processes", l_processes },
  { "worker_id", l_worker_id },
  { "worker_count", l_worker_count },
  { "worker_cpu", l_worker_cpu },
  { "exit", l_exit },
  { "shutdown", l_shutdown },
  { "draining", l_draining },
  { "exiting", l_exiting },
  { "stats", l_stats },
  { "xpcall", l_xpcall },
  { NULL, NULL }
};

int luaopen_cohost_core_sys(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, sys_funcs);
  return 1;
}
