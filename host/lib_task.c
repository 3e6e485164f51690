/*
** cohost.core.task: light threads and the wait queue that semaphores and
** channels (the lua/cohost modules) are built on. Internal: lua/cohost/init.lua
** is the documented face.
*/
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "lib.h"

#define THREAD_MT "cohost.thread"
#define WAITQ_MT  "cohost.waitq"

/* -- Threads -------------------------------------------------------------- */

struct handle {
  struct ch_task *t;            /* NULL once waited for or collected */
};

static struct handle *check_handle(lua_State *L, int i)
{
  return luaL_checkudata(L, i, THREAD_MT);
}

static struct ch_worker *worker(lua_State *L)
{
  struct ch_worker *w = ch_worker_self;
  if (!w) luaL_error(L, "cohost: not inside a cohost worker");
  return w;
}

/* Priority class names, indexed by CH_PRIO_*. */
static const char *const prio_names[] = { "high", "normal", "low", NULL };

/* The class named by the string at idx; raises an argument error naming
** argument argn of the calling function for anything else. */
static int check_prio(lua_State *L, int idx, int argn)
{
  const char *name = lua_tostring(L, idx);
  for (int i = 0; name && prio_names[i]; i++)
    if (strcmp(name, prio_names[i]) == 0) return i;
  return luaL_argerror(L, argn, lua_pushfstring(L, "priority must be \"high\", \"normal\" or \"low\", got %s",
                                                name ? name : luaL_typename(L, idx)));
}

/* A task's coroutine, as ch_task_spawn's own (task.c), started with a
** class: ch_task_spawn has no class argument. */
static void task_entry(void *p)
{
  struct ch_task *t = p;
  ch_task_run(t, t->nargs);
  ch_task_release(t);
}

/* Spawns fn(...) as a task; daemon tasks are cancelled when shutdown
** starts (timers), the others get the shutdown timeout. An options table
** may come first: spawn({priority = "high"}, fn, ...). */
static int spawn(lua_State *L, int daemon)
{
  int prio = CH_PRIO_NORMAL;
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_getfield(L, 1, "priority");
    if (!lua_isnil(L, -1)) prio = check_prio(L, -1, 1);
    lua_pop(L, 1);
    lua_remove(L, 1);
  }
  luaL_checktype(L, 1, LUA_TFUNCTION);
  struct ch_worker *w = worker(L);
  int nargs = lua_gettop(L) - 1;
  struct handle *h = lua_newuserdata(L, sizeof *h);
  h->t = NULL;
  luaL_getmetatable(L, THREAD_MT);
  lua_setmetatable(L, -2);
  lua_insert(L, 1);   /* handle below fn and args */
  struct ch_task *t = ch_task_new(w, daemon ? "timer" : "thread");
  if (!t) return luaL_error(L, "no memory");
  t->daemon = (uint8_t)daemon;
  t->kind = daemon ? CH_TASK_TIMER : CH_TASK_SPAWNED;
  t->start_ns = ch_now_ns();
  lua_xmove(L, t->T, nargs + 1);
  if (w->stopping && daemon) t->status = CH_TASK_KILLED;
  t->nargs = nargs;
  if (ch_spawn_prio(task_entry, t, prio) < 0) {
    t->status = CH_TASK_FAILED;
    ch_task_release(t);   /* never ran: frees it */
    lua_pushnil(L);
    lua_pushliteral(L, "no memory");
    return 2;
  }
  t->refs++;
  h->t = t;
  return 1;   /* the handle */
}

static int l_spawn(lua_State *L) { return spawn(L, 0); }
static int l_spawn_daemon(lua_State *L) { return spawn(L, 1); }

static int handle_gc(lua_State *L)
{
  struct handle *h = check_handle(L, 1);
  if (h->t) { ch_task_release(h->t); h->t = NULL; }
  return 0;
}

static int finished(const struct ch_task *t)
{
  return t->status >= CH_TASK_DONE;
}

/* Pushes ok, results... of a finished task and lets go of it. */
static int collect(lua_State *L, struct handle *h)
{
  struct ch_task *t = h->t;
  int n = t->nresults;
  luaL_checkstack(L, n + 1, "too many results");
  if (t->status == CH_TASK_DONE) {
    lua_pushboolean(L, 1);
    lua_xmove(t->T, L, n);
  } else {
    lua_pushboolean(L, 0);
    if (t->status == CH_TASK_KILLED) lua_pushliteral(L, "killed");
    else if (n > 0) lua_xmove(t->T, L, 1);   /* the error value, unchanged */
    else lua_pushnil(L);
    n = 1;
  }
  h->t = NULL;
  ch_task_release(t);
  return n + 1;
}

/* Yields. wait(t1, ...) -> ok, results... of the first to finish. Parks
** on the joiners' queues of every live one at once (ch_waitq_wait_any). */
static int l_wait(lua_State *L)
{
  int n = lua_gettop(L);
  if (n == 0) return luaL_error(L, "bad argument #1 to 'wait' (thread expected)");
  struct ch_coro *self = ch_current();
  struct ch_waitq *few[8], **qs = few;
  for (;;) {
    int live = 0;
    for (int i = 1; i <= n; i++) {
      struct handle *h = check_handle(L, i);
      if (!h->t) continue;
      if (finished(h->t)) return collect(L, h);
      if (h->t->coro == self) return luaL_error(L, "cannot wait for the current thread");
      live++;
    }
    if (!live) {
      lua_pushnil(L);
      lua_pushliteral(L, "already waited or killed");
      return 2;
    }
    if (!self) return luaL_error(L, "cohost.wait outside a coroutine");
    ch_task_check_cancel(L);
    /* Past 8 the list is a userdata above the arguments, kept by this
    ** Lua stack while the coroutine parks. */
    if (live > 8 && qs == few) qs = lua_newuserdata(L, (size_t)n * sizeof *qs);
    int nq = 0;
    for (int i = 1; i <= n; i++) {
      struct ch_task *t = check_handle(L, i)->t;
      if (!t) continue;
      struct ch_task_ext *ext = ch_task_ext(t);
      if (!ext) break;
      qs[nq++] = &ext->joiners;
    }
    /* No memory for a queue or the waiters' nodes: poll at 1 ms rather
    ** than fail. */
    struct ch_task *me = ch_task_current();
    if (me) me->on = CH_TASK_ON_THREAD;
    int r = nq == live ? ch_waitq_wait_any(qs, nq, -1) : -ENOMEM;
    if (me) me->on = CH_TASK_ON_NOTHING;
    if (r == -ENOMEM) r = ch_park(1);
    if (r == -ECANCELED) ch_task_check_cancel(L);
  }
}

/* kill(t) -> true, or nil, err. The thread sees a "cancelled" error raised
** from the call it is blocked in (or its next blocking call). */
static int l_kill(lua_State *L)
{
  struct handle *h = check_handle(L, 1);
  struct ch_task *t = h->t;
  if (!t || finished(t)) {
    lua_pushnil(L);
    lua_pushliteral(L, "already waited or killed");
    return 2;
  }
  if (t->coro == ch_current()) return luaL_error(L, "cannot kill the current thread");
  if (t->status == CH_TASK_NEW) t->status = CH_TASK_KILLED;
  else ch_cancel(t->coro);
  lua_pushboolean(L, 1);
  return 1;
}

/* cancelled() -> whether the running task was cancelled (cohost.kill, a
** client that reset its HTTP/2 stream): its blocking calls raise
** "cancelled" and its end is logged at info. For an xpcall message handler
** that must tell that "cancelled" from a bug's error. */
static int l_cancelled(lua_State *L)
{
  struct ch_coro *c = ch_current();
  lua_pushboolean(L, c && ch_cancelled(c));
  return 1;
}

static int handle_tostring(lua_State *L)
{
  struct handle *h = check_handle(L, 1);
  lua_pushfstring(L, "cohost.thread: %p", (void *)h);
  return 1;
}

/* -- Sleeping ------------------------------------------------------------- */

/* Yields. sleep(seconds): 0 yields to the others. */
static int l_sleep(lua_State *L)
{
  lua_Number s = luaL_checknumber(L, 1);
  if (s < 0 || s != s) return luaL_argerror(L, 1, "non-negative number expected");
  ch_task_check_cancel(L);
  struct ch_coro *c = ch_current();
  int64_t ms = (int64_t)ceil(s * 1000);
  if (c && !ch_task_may_park(c)) {   /* a finalizer or FFI callback */
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    return 0;
  }
  int r = ch_sleep_ms(ms);
  if (r == -ECANCELED) ch_task_check_cancel(L);
  return 0;
}

/* -- Priority ------------------------------------------------------------- */

static struct ch_coro *current(lua_State *L)
{
  struct ch_coro *c = ch_current();
  if (!c) luaL_error(L, "cohost: not inside a coroutine");
  return c;
}

/* setpriority(class): the calling thread's class from its next wakeup on;
** it keeps running until it yields or blocks. */
static int l_setpriority(lua_State *L)
{
  luaL_checkstring(L, 1);
  int prio = check_prio(L, 1, 1);
  ch_coro_set_priority(current(L), prio);
  return 0;
}

/* getpriority() -> "high", "normal" or "low". */
static int l_getpriority(lua_State *L)
{
  lua_pushstring(L, prio_names[ch_coro_priority(current(L))]);
  return 1;
}

/* -- Wait queues ---------------------------------------------------------- */

/* A Lua face on the runtime's wait queue (ch_waitq), which keeps its
** nodes in the waiting coroutines' own structs: nothing is allocated per
** wait, and nothing lies on a parked stack. The queue knows what it was
** made for, which a task dump says of a task parked on it. */
struct waitq {
  struct ch_waitq q;
  uint8_t on;                   /* enum ch_task_on */
};

static struct waitq *check_waitq(lua_State *L, int i)
{
  return luaL_checkudata(L, i, WAITQ_MT);
}

/* waitq([kind]) -> a wait queue; kind ("semaphore", "channel",
** "broadcast", "pool", "dns", "postgres") names what a task parked on it
** waits for in task dumps; another or none says "queue". */
static int l_waitq(lua_State *L)
{
  static const char *const kinds[] = { "", "queue", "semaphore", "channel", "broadcast", "pool",
                                       "dns", "postgres", NULL };
  const char *kind = luaL_optstring(L, 1, "queue");
  int on = CH_TASK_ON_QUEUE;
  for (int i = 1; kinds[i]; i++)
    if (strcmp(kind, kinds[i]) == 0) on = i;
  struct waitq *q = lua_newuserdata(L, sizeof *q);
  q->q = (struct ch_waitq){ NULL, NULL };
  q->on = (uint8_t)on;
  luaL_getmetatable(L, WAITQ_MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* Yields. q:wait([timeout_s]) -> true, or nil, "timeout". The queue stays
** referenced from this coroutine's Lua stack while it waits. */
static int waitq_wait(lua_State *L)
{
  struct waitq *q = check_waitq(L, 1);
  lua_Number s = luaL_optnumber(L, 2, -1);
  struct ch_coro *c = ch_current();
  if (!c) return luaL_error(L, "wait outside a coroutine");
  ch_task_check_cancel(L);
  if (!ch_task_may_park(c)) return luaL_error(L, "cannot wait here (finalizer or FFI callback)");
  struct ch_task *t = ch_task_current();
  if (t) t->on = q->on;
  int r = ch_waitq_wait(&q->q, s < 0 ? -1 : (int64_t)ceil(s * 1000));
  if (t) t->on = CH_TASK_ON_NOTHING;
  if (r == 0) { lua_pushboolean(L, 1); return 1; }
  if (r == -ECANCELED) ch_task_check_cancel(L);
  lua_pushnil(L);
  lua_pushliteral(L, "timeout");
  return 2;
}

/* q:signal() wakes the longest waiter; returns true if there was one (a
** waiter that timed out or was cancelled meanwhile does not count: it
** returns what woke it, and the next one gets the signal). */
static int waitq_signal(lua_State *L)
{
  lua_pushboolean(L, ch_waitq_wake_one(&check_waitq(L, 1)->q));
  return 1;
}

/* q:broadcast() wakes all; returns how many. */
static int waitq_broadcast(lua_State *L)
{
  lua_pushinteger(L, ch_waitq_wake_all(&check_waitq(L, 1)->q));
  return 1;
}

/* -- Module --------------------------------------------------------------- */

static const luaL_Reg thread_methods[] = {
  { "__gc", handle_gc },
  { "__tostring", handle_tostring },
  { NULL, NULL }
};

static const luaL_Reg waitq_methods[] = {
  { "wait", waitq_wait },
  { "signal", waitq_signal },
  { "broadcast", waitq_broadcast },
  { NULL, NULL }
};

static const luaL_Reg task_funcs[] = {
  { "spawn", l_spawn },
  { "spawn_daemon", l_spawn_daemon },
  { "wait", l_wait },
  { "kill", l_kill },
  { "cancelled", l_cancelled },
  { "sleep", l_sleep },
  { "setpriority", l_setpriority },
  { "getpriority", l_getpriority },
  { "waitq", l_waitq },
  { NULL, NULL }
};

int luaopen_cohost_core_task(lua_State *L)
{
  luaL_newmetatable(L, THREAD_MT);
  luaL_register(L, NULL, thread_methods);
  lua_pop(L, 1);
  luaL_newmetatable(L, WAITQ_MT);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  luaL_register(L, NULL, waitq_methods);
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, task_funcs);
  return 1;
}
