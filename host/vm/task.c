/*
** Tasks: one Lua thread on one native coroutine. Every task runs its
** function under lua_pcall on its own lua_newthread, so a Lua error never
** unwinds across a stack switch; an uncaught one is logged with its
** traceback and ends that task only. Lua threads are recycled through a
** per-worker pool: a thread whose pcall returned is as good as new.
*/
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "vm/lua_alloc.h"

#define IDLE_MAX 1024   /* Lua threads kept for reuse per worker */

/* -- The live list -------------------------------------------------------- */

static void link_task(struct ch_worker *w, struct ch_task *t)
{
  t->prev = NULL;
  t->next = w->tasks;
  if (w->tasks) w->tasks->prev = t;
  w->tasks = t;
}

static void unlink_task(struct ch_worker *w, struct ch_task *t)
{
  if (t->prev) t->prev->next = t->next;
  else if (w->tasks == t) w->tasks = t->next;
  if (t->next) t->next->prev = t->prev;
  t->prev = t->next = NULL;
}

/* -- Creation ------------------------------------------------------------- */

/* Freed task structs kept for reuse, per worker thread: a calloc and free
** per HTTP request cost more than keeping them (docs/benchmarks.md). Not
** under ASan, which then
** keeps catching a use of a freed task (and would report the structs a
** finished thread leaves here as leaks). */
#ifdef CH_ASAN
#define SPARE_MAX 0
#else
#define SPARE_MAX 64
#endif
static __thread struct ch_task *spare[SPARE_MAX > 0 ? SPARE_MAX : 1];
static __thread int nspare;

struct ch_task *ch_task_new(struct ch_worker *w, const char *name)
{
  struct ch_task *t;
  if (nspare > 0) {
    t = spare[--nspare];
    memset(t, 0, sizeof *t);
  } else if (!(t = calloc(1, sizeof *t))) {
    return NULL;
  }
  lua_State *L = w->L;
  if (w->nidle) {
    t->ref = w->idle[--w->nidle];
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref);
    t->T = lua_tothread(L, -1);
    lua_pop(L, 1);
  } else {
    /* On w->L, which no pcall protects: never refused by the memory cap,
    ** even when the running task that asked is over it. */
    ch_lua_alloc_unrefusable(1);
    t->T = lua_newthread(L);
    t->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    ch_lua_alloc_unrefusable(-1);
  }
  t->w = w;
  t->fd = -1;
  t->status = CH_TASK_NEW;
  t->refs = 1;   /* the runner's */
  ch_ljvm_coro_init(&t->vm, t->T);
  t->vm.name = name;
  link_task(w, t);
  return t;
}

_Static_assert(sizeof(struct ch_task) <= 120, "a task record is one 128-byte malloc chunk");

struct ch_task_ext *ch_task_ext(struct ch_task *t)
{
  if (!t->ext) t->ext = calloc(1, sizeof *t->ext);
  return t->ext;
}

const char *ch_task_kind_name(int kind)
{
  static const char *const names[CH_TASK_KINDS] = {
    "other", "main", "http", "http2", "grpc", "websocket", "tcp", "timer", "spawned"
  };
  return kind >= 0 && kind < CH_TASK_KINDS ? names[kind] : "other";
}

static void task_free(struct ch_task *t)
{
  struct ch_worker *w = t->w;
  unlink_task(w, t);   /* a task that never ran is still linked */
  free(t->ext);   /* its queue is empty: a waiter holds a reference;
                  ** spares are zeroed when reused */
  t->ext = NULL;
  lua_settop(t->T, 0);
  if (w->nidle == w->idle_cap && w->idle_cap < IDLE_MAX) {
    size_t cap = (size_t)w->idle_cap;
    int *idle = ch_buf_grow(w->idle, sizeof *idle, &cap, cap + 1, 64);
    if (idle) { w->idle = idle; w->idle_cap = (int)cap; }   /* cap <= 2 * IDLE_MAX */
  }
  if (w->nidle < w->idle_cap) w->idle[w->nidle++] = t->ref;
  else luaL_unref(w->L, LUA_REGISTRYINDEX, t->ref);
  if (nspare < SPARE_MAX) spare[nspare++] = t;
  else free(t);
}

void ch_task_release(struct ch_task *t)
{
  if (--t->refs == 0) task_free(t);
}

/* -- Running -------------------------------------------------------------- */

struct ch_task *ch_task_current(void)
{
  struct ch_coro *c = ch_current();
  return c ? ch_coro_udata(c) : NULL;
}

#define QUIET_MT "cohost.quiet_error"

static int quiet_tostring(lua_State *L)
{
  lua_rawgeti(L, 1, 1);
  return 1;
}

void ch_task_raise_quiet(lua_State *L, const char *msg)
{
  lua_createtable(L, 1, 0);
  lua_pushstring(L, msg);
  lua_rawseti(L, -2, 1);
  if (luaL_newmetatable(L, QUIET_MT)) {
    lua_pushcfunction(L, quiet_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
  lua_error(L);
  __builtin_unreachable();   /* lua_error longjmps or unwinds */
}

/* Where the error msg was raised, for a JSON line's "file" and "line":
** the "file:line: " Lua put in front of msg when it names a frame on the
** stack (error's level chose which), else the first Lua frame. Fills file
** (n bytes) and *line, or leaves file "" when no Lua frame is there;
** returns the length of msg's prefix to drop (0: msg has none). */
static size_t error_place(lua_State *L, const char *msg, char *file, size_t n, int *line)
{
  lua_Debug ar;
  file[0] = '\0';
  *line = 0;
  /* Level 0 is this handler; 1 is error() or the Lua function that
  ** faulted. 20 levels: error(msg, level) names one of the nearest. */
  for (int level = 1; level <= 20 && lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue;   /* a C function */
    char pfx[LUA_IDSIZE + 24];
    int k = snprintf(pfx, sizeof pfx, "%s:%d: ", ar.short_src, ar.currentline);
    int named = k > 0 && (size_t)k < sizeof pfx && strncmp(msg, pfx, (size_t)k) == 0;
    if (named || !file[0]) {
      snprintf(file, n, "%s", ar.short_src);
      *line = ar.currentline;
    }
    if (named) return (size_t)k;
  }
  return 0;
}

/* Message handler of every task's pcall: runs where the error was raised,
** with the stack intact, so the traceback names the real frames. It logs
** and returns the error value unchanged, for cohost.wait. */
static int on_error(lua_State *L)
{
  struct ch_task *t = ch_task_current();
  if (t && t->coro && ch_cancelled(t->coro)) {
    ch_log(CH_LOG_INFO, "%s cancelled", t->vm.name);
    return 1;
  }
  if (lua_getmetatable(L, 1)) {
    luaL_getmetatable(L, QUIET_MT);
    int quiet = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (quiet) {
      lua_rawgeti(L, 1, 1);
      ch_log(CH_LOG_INFO, "%s ended: %s", t ? t->vm.name : "lua", lua_tostring(L, -1));
      lua_pop(L, 1);
      return 1;
    }
  }
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_isstring(L, -1)) msg = lua_tostring(L, -1);
    else msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  const char *name = t ? t->vm.name : "lua";
  if (ch_log_is_json()) {   /* the place as fields, the message without it */
    char file[LUA_IDSIZE];
    int line;
    size_t skip = error_place(L, msg, file, sizeof file, &line);
    luaL_traceback(L, L, msg + skip, 1);
    if (file[0]) ch_log_at(CH_LOG_ERR, file, line, NULL, "%s error: %s", name, lua_tostring(L, -1));
    else ch_log(CH_LOG_ERR, "%s error: %s", name, lua_tostring(L, -1));
  } else {
    luaL_traceback(L, L, msg, 1);
    ch_log(CH_LOG_ERR, "%s error: %s", name, lua_tostring(L, -1));
  }
  lua_settop(L, 1);
  return 1;
}

/* ch_task_run's parts before and after the pcall are out of line (as
** are conn_main's): the pcall lies under the task's Lua code for its whole
** life, and in COPY mode a parked task's frames are its saved image, so
** only t and base stay in ch_task_run's frame (docs/stacks.md, idle
** memory). Returns the stack index below the function, or -1 if the task
** was killed before it ever ran. */
static __attribute__((noinline)) int run_begin(struct ch_task *t, int nargs)
{
  struct ch_coro *c = ch_current();
  lua_State *T = t->T;
  int base = lua_gettop(T) - nargs - 1;   /* below the function */
  t->coro = c;
  ch_coro_set_udata(c, t);
  if (t->status == CH_TASK_KILLED) {   /* killed before it ever ran */
    lua_settop(T, base);
    t->nresults = 0;
    return -1;
  }
  t->status = CH_TASK_RUNNING;
  /* One closure of on_error per Lua state (in its registry), not one
  ** per run: lua_pushcfunction allocates a new one each time. */
  lua_pushlightuserdata(T, (void *)on_error);
  lua_rawget(T, LUA_REGISTRYINDEX);
  if (lua_isnil(T, -1)) {
    lua_pop(T, 1);
    lua_pushcfunction(T, on_error);
    lua_pushlightuserdata(T, (void *)on_error);
    lua_pushvalue(T, -2);
    lua_rawset(T, LUA_REGISTRYINDEX);
  }
  lua_insert(T, base + 1);
  return base;
}

static __attribute__((noinline)) void run_end(struct ch_task *t, int base, int r)
{
  lua_State *T = t->T;
  lua_remove(T, base + 1);
  /* LuaJIT calls no message handler for memory errors: say it here. */
  if (r == LUA_ERRMEM)
    ch_log(CH_LOG_ERR, "%s error: not enough memory (no traceback for memory errors)", t->vm.name);
  t->nresults = lua_gettop(T) - base;
  ch_lua_alloc_recover(T);
  /* Killed is killed, even if the function caught every "cancelled"
  ** and returned normally. */
  t->status = ch_cancelled(ch_current()) ? CH_TASK_KILLED : r == 0 ? CH_TASK_DONE : CH_TASK_FAILED;
}

static __attribute__((noinline)) void run_done(struct ch_task *t)
{
  struct ch_coro *c = ch_current();
  if (t->ext) ch_waitq_wake_all(&t->ext->joiners);
  ch_coro_set_udata(c, NULL);
  t->coro = NULL;
  unlink_task(t->w, t);
}

void ch_task_run(struct ch_task *t, int nargs)
{
  int base = run_begin(t, nargs);
  if (base >= 0) {
    t->vm.in_pcall = 1;
    int r = lua_pcall(t->T, nargs, LUA_MULTRET, base + 1);
    t->vm.in_pcall = 0;
    run_end(t, base, r);
  }
  run_done(t);
}

static void task_main(void *p)
{
  struct ch_task *t = p;
  ch_task_run(t, t->nargs);
  ch_task_release(t);
}

int ch_task_spawn(struct ch_task *t, int nargs)
{
  t->nargs = nargs;
  int id = ch_spawn(task_main, t);
  if (id < 0) {
    unlink_task(t->w, t);
    t->status = CH_TASK_FAILED;
    task_free(t);
  }
  return id;
}

/* -- Waiting -------------------------------------------------------------- */

int ch_task_may_park(struct ch_coro *c)
{
  if (ch_ljvm_may_park(c)) return 1;
  const char *why = ch_ljvm_refusal(c);
  if (why) ch_log(CH_LOG_WARN, "a blocking call cannot park here and blocks the worker: %s", why);
  return 0;
}

void ch_task_check_cancel(lua_State *L)
{
  struct ch_coro *c = ch_current();
  if (c && ch_cancelled(c)) {
    lua_pushliteral(L, "cancelled");
    lua_error(L);
  }
}
