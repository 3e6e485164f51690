/*
** Standalone proof for host/vm/ljvm.c: one lua_State, the C call wrapper
** on, N native coroutines each running a Lua function under lua_pcall with
** a traceback handler on its own lua_newthread (anchored in the registry).
** Built with host/vm/ljvm.c alone, no rest of the host:
** make build/spec/ljvm_probe.
**
** Run: build/spec/ljvm_probe [-n N] [--no-resume-hook | --resume-by-call] [scenario ...]
** Scenarios (all when none named):
**   a  a classic C function's read() on a socketpair parks; data in 50 ms
**   b  ffi.C.read that would block, JIT-hot, never parks (data from a pthread)
**   c  blocking I/O in __gc finalizers (classic C and FFI) does not park
**   d  classic C: usleep (parks) then luaL_error, under pcall, hot loops
**   e  a classic C function called inside an FFI callback does not park
**   f  classic C read inside a Lua coroutine parks; inside an FFI callback
**      that resumed a Lua coroutine it does not
**   g  a classic C function's read() inside a debug hook does not park
**   h  one classic C function: after lua_pcall caught an error, a nested
**      classic read (parks), after lua_resume returned (parks), an FFI
**      read inside a coroutine it resumed (does not)
** Benchmarks for callgrind (one count each run; diff two counts):
**   bench-call K [off]  K calls of a no-op classic C function (off: no wrapper)
**   bench-park K [D]    K may_park decisions that say yes, D+3 Lua frames deep (D=5)
**   bench-refuse K      K decisions that say no (inside a finalizer)
**   bench-resume K      K resume hooks: store to cur_L
**   bench-resume-call K K resume hooks done as lua_call of a no-op
** Exit status 0 when every check passed.
*/
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <luajit.h>

#include "cohost.h"
#include "vm/ljvm.h"

#define MAXN 1000

struct task {
  struct ch_ljvm_coro vm;   /* first: ch_coro_udata points here */
  int idx;
  lua_State *T;
  int fd;                   /* the coroutine's end of its socketpair */
  int yes, no;              /* decisions while it ran */
  int why[8];               /* refusals by enum ch_ljvm_why */
  int done, failed;
  char result[64];
};

static lua_State *L;
static int N = 100;
static int failures;
static struct task tasks[MAXN];
static int peer[MAXN];      /* the other ends, written by writers */
static const char *scenario;

#define CHECK(cond, ...) do { if (!(cond)) { failures++; \
  printf("  FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static double now_ms(void) { return (double)ch_now_ns() / 1e6; }

/* -- The yield check and resume hook under test --------------------------- */

static int check(struct ch_coro *c)
{
  int ok = ch_ljvm_may_park(c);
  struct task *t = ch_coro_udata(c);
  if (!t) return ok;
  if (ok) {
    t->yes++;
  } else {
    t->no++;
    t->why[t->vm.refused & 7]++;
    const char *m = ch_ljvm_refusal(c);
    if (m) printf("  refusal (logged once): %s\n", m);
  }
  return ok;
}

static int noop(lua_State *l) { (void)l; return 0; }

/* The alternative resume hook measured against the store: re-enter the VM
** once with a cached no-op C function on the resumed thread. */
static void resumed_by_call(struct ch_coro *c)
{
  struct task *t = ch_coro_udata(c);
  if (t && t->vm.top) {
    lua_State *T = t->T;   /* the probe never parks on another thread */
    lua_pushcfunction(T, noop);
    lua_call(T, 0, 0);
  }
}

/* -- Classic C functions the scenarios call ------------------------------- */

/* cread(fd, n) -> string | nil, err: a blocking read through the hook. */
static int l_cread(lua_State *l)
{
  int fd = (int)luaL_checkinteger(l, 1);
  char buf[256];
  size_t n = (size_t)luaL_optinteger(l, 2, sizeof buf);
  if (n > sizeof buf) n = sizeof buf;
  ssize_t r = read(fd, buf, n);
  if (r < 0) {
    lua_pushnil(l);
    lua_pushstring(l, strerror(errno));
    return 2;
  }
  lua_pushlstring(l, buf, (size_t)r);
  return 1;
}

/* cusleep(us): parks through the usleep hook where allowed. */
static int l_cusleep(lua_State *l)
{
  usleep((useconds_t)luaL_checkinteger(l, 1));
  return 0;
}

/* csleep_error(us): parks, then raises: the cur_L regression pattern. */
static int l_csleep_error(lua_State *l)
{
  usleep((useconds_t)luaL_checkinteger(l, 1));
  return luaL_error(l, "boom after sleep");
}

/* cdecide(reps): asks may_park reps times from inside a classic C
** function and returns the last answer (for bench-park). */
static int l_cdecide(lua_State *l)
{
  int reps = (int)luaL_checkinteger(l, 1), r = 0;
  struct ch_coro *c = ch_current();
  for (int i = 0; i < reps; i++) r = ch_ljvm_may_park(c);
  lua_pushinteger(l, r);
  return 1;
}

/* cresume(reps, by_call): runs a resume hook reps times (for bench-resume). */
static int l_cresume(lua_State *l)
{
  int reps = (int)luaL_checkinteger(l, 1), by_call = lua_toboolean(l, 2);
  struct ch_coro *c = ch_current();
  for (int i = 0; i < reps; i++) {
    if (by_call) resumed_by_call(c);
    else ch_ljvm_resumed(c);
  }
  return 0;
}

/* cnest(fd, bad, good, co), all from one classic C function: lua_pcall of
** bad, which raises; lua_call of good, whose classic cread parks (nested
** marks); lua_resume of co, which yields at once (leaving cur_L on it);
** its own read, which parks; lua_resume of co again, whose FFI read would
** block and must not park. Returns the three reads concatenated. */
static int l_cnest(lua_State *l)
{
  int fd = (int)luaL_checkinteger(l, 1);
  lua_State *co = lua_tothread(l, 4);
  char buf[2];
  lua_pushvalue(l, 2);
  if (lua_pcall(l, 0, 0, 0) == 0) return luaL_error(l, "bad did not raise");
  lua_pop(l, 1);
  lua_pushvalue(l, 3);
  lua_pushinteger(l, fd);
  lua_call(l, 1, 1);
  if (!co || lua_resume(co, 0) != LUA_YIELD) return luaL_error(l, "co did not yield");
  ssize_t r = read(fd, buf, 2);
  if (r < 0) return luaL_error(l, "read: %s", strerror(errno));
  lua_pushlstring(l, buf, (size_t)r);
  lua_pushinteger(co, fd);
  if (lua_resume(co, 1) != 0) return luaL_error(l, "co failed: %s", lua_tostring(co, -1));
  lua_xmove(co, l, 1);
  lua_concat(l, 3);
  return 1;
}

static int l_switches(lua_State *l)
{
  struct ch_stats st;
  ch_stats(&st);
  lua_pushnumber(l, (lua_Number)st.switches);
  return 1;
}

/* The C function an FFI callback is called from (scenario e, f). */
static int call_back(int (*cb)(int), int x)
{
  return cb(x);
}

static int traceback(lua_State *l)
{
  const char *msg = lua_tostring(l, 1);
  luaL_traceback(l, l, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

/* -- Lua side ------------------------------------------------------------- */

static const char script[] =
  "local ffi = require('ffi')\n"
  "local jit = require('jit')\n"
  "ffi.cdef[[ long read(int fd, void *buf, unsigned long n); ]]\n"
  "local C = ffi.C\n"
  "local call_back = ffi.cast('int (*)(int (*)(int), int)', CALL_BACK)\n"
  "S = {}\n"
  "function S.a(fd, i)\n"
  "  local s = assert(cread(fd, 64))\n"
  "  return s\n"
  "end\n"
  "function S.b(fd, i)\n"
  "  local buf = ffi.new('char[1]')\n"
  "  local got = 0\n"
  "  for k = 1, 300 do\n"
  "    if C.read(fd, buf, 1) == 1 then got = got + 1 end\n"
  "    if k % 20 == 0 then cusleep(200) end\n"
  "  end\n"
  "  return tostring(got)\n"
  "end\n"
  "function S.c(fd, i)\n"
  "  local res = {}\n"
  "  local u = newproxy(true)\n"
  "  getmetatable(u).__gc = function() res[1] = cread(fd, 5) end\n"
  "  u = nil\n"
  "  local sw = switches()\n"
  "  collectgarbage()\n"
  "  local buf = ffi.new('char[5]')\n"
  "  local cd = ffi.gc(ffi.new('int[1]'), function() res[2] = tonumber(C.read(fd, buf, 5)) end)\n"
  "  cd = nil\n"
  "  collectgarbage()\n"
  "  assert(switches() == sw, 'a finalizer switched coroutines')\n"
  "  return tostring(res[1]) .. '+' .. tostring(res[2])\n"
  "end\n"
  "local function spin(n)\n"
  "  local s = 0\n"
  "  for j = 1, n do s = s + j % 3 end\n"
  "  return s\n"
  "end\n"
  "function S.d(fd, i)\n"
  "  local x, errs = 0, 0\n"
  "  for k = 1, 200 do\n"
  "    local ok, err = pcall(csleep_error, 1000)\n"
  "    x = x + spin(20 + k % 7)   -- a trace exit before any C call resets cur_L\n"
  "    if not ok and err:find('boom after sleep', 1, true) then errs = errs + 1 end\n"
  "  end\n"
  "  return tostring(errs)\n"
  "end\n"
  "function S.e(fd, i)\n"
  "  local got\n"
  "  local cb = ffi.cast('int (*)(int)', function(f) got = cread(f, 64) return 0 end)\n"
  "  call_back(cb, fd)\n"
  "  cb:free()\n"
  "  return got\n"
  "end\n"
  "jit.off(S.e)\n"
  "function S.f(fd, i)\n"
  "  local first = coroutine.wrap(function() return cread(fd, #('d' .. i)) end)()\n"
  "  local second\n"
  "  local cb = ffi.cast('int (*)(int)', function(f)\n"
  "    second = coroutine.wrap(function() return cread(f, 64) end)()\n"
  "    return 0 end)\n"
  "  call_back(cb, fd)\n"
  "  cb:free()\n"
  "  return first .. '|' .. second\n"
  "end\n"
  "jit.off(S.f)\n"
  "function S.g(fd, i)\n"
  "  local got\n"
  "  debug.sethook(function() debug.sethook() got = cread(fd, 64) end, '', 1)\n"
  "  local x = 0\n"
  "  for k = 1, 10 do x = x + k end\n"
  "  return got\n"
  "end\n"
  "function S.h(fd, i)\n"
  "  local co = coroutine.create(function()\n"
  "    local f = coroutine.yield()\n"
  "    local buf = ffi.new('char[2]')\n"
  "    local n = C.read(f, buf, 2)\n"
  "    return ffi.string(buf, n)\n"
  "  end)\n"
  "  return cnest(fd, function() error('x') end, function(f) return cread(f, 2) end, co)\n"
  "end\n"
  "function S.bench_call(k)\n"
  "  local f = noop\n"
  "  for i = 1, k do f() end\n"
  "end\n"
  "jit.off(S.bench_call)\n"
  "local function deep(n, k)\n"
  "  if n == 0 then local r = cdecide(k) return r end\n"
  "  local r = deep(n - 1, k) return r\n"
  "end\n"
  "function S.bench_park(k, depth) return tostring(deep(depth, k)) end\n"
  "function S.bench_refuse(k)\n"
  "  local u = newproxy(true)\n"
  "  getmetatable(u).__gc = function() cdecide(k) end\n"
  "  u = nil\n"
  "  collectgarbage()\n"
  "end\n"
  "function S.bench_resume(k, by_call) cresume(k, by_call) end\n";

/* -- Running tasks --------------------------------------------------------- */

static int bench_k;        /* argument of a bench scenario */
static int bench_by_call;

static void run_task(void *p)
{
  struct task *t = p;
  struct ch_coro *c = ch_current();
  lua_State *T = t->T;
  ch_ljvm_coro_init(&t->vm, T);
  ch_coro_set_udata(c, t);
  lua_pushcfunction(T, traceback);
  lua_getglobal(T, "S");
  lua_getfield(T, -1, scenario);
  lua_remove(T, -2);
  int nargs = 2;
  if (bench_k) {
    lua_pushinteger(T, bench_k);
    if (!strcmp(scenario, "bench_park")) lua_pushinteger(T, bench_by_call);
    else lua_pushboolean(T, bench_by_call);
  } else {
    lua_pushinteger(T, t->fd);
    lua_pushinteger(T, t->idx);
  }
  int r = lua_pcall(T, nargs, 1, 1);
  if (r) {
    t->failed = 1;
    printf("  task %d error: %s\n", t->idx, lua_tostring(T, -1));
  } else if (lua_isstring(T, -1)) {
    snprintf(t->result, sizeof t->result, "%s", lua_tostring(T, -1));
  }
  lua_settop(T, 0);
  ch_coro_set_udata(c, NULL);
  t->done = 1;
}

static void new_tasks(int n, int with_fds)
{
  for (int i = 0; i < n; i++) {
    struct task *t = &tasks[i];
    lua_State *T = t->T;
    memset(t, 0, sizeof *t);
    t->idx = i;
    if (!T) {
      T = lua_newthread(L);
      luaL_ref(L, LUA_REGISTRYINDEX);   /* anchored for the program's life */
    }
    t->T = T;
    t->fd = -1;
    if (with_fds) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) { perror("socketpair"); exit(2); }
      t->fd = sv[0];
      peer[i] = sv[1];
    }
  }
}

static void close_fds(int n)
{
  for (int i = 0; i < n; i++) {
    if (tasks[i].fd >= 0) close(tasks[i].fd);
    if (peer[i] >= 0) close(peer[i]);
    tasks[i].fd = peer[i] = -1;
  }
}

static void spawn_all(int n)
{
  for (int i = 0; i < n; i++)
    if (ch_spawn(run_task, &tasks[i]) < 0) { printf("spawn failed\n"); exit(2); }
}

static int sum(int n, size_t field_ofs)
{
  int s = 0;
  for (int i = 0; i < n; i++) s += *(int *)((char *)&tasks[i] + field_ofs);
  return s;
}
#define SUM(n, f) sum(n, offsetof(struct task, f))

static int sum_why(int n, int why)
{
  int s = 0;
  for (int i = 0; i < n; i++) s += tasks[i].why[why];
  return s;
}

static void report(int n)
{
  printf("  decisions: %d yes, %d no (not-cfunc %d, trace %d, busy %d, gc %d, hook %d, callback %d, stack %d); failed tasks %d\n",
         SUM(n, yes), SUM(n, no), sum_why(n, CH_LJVM_NOT_CFUNC), sum_why(n, CH_LJVM_TRACE),
         sum_why(n, CH_LJVM_BUSY), sum_why(n, CH_LJVM_GC), sum_why(n, CH_LJVM_HOOK),
         sum_why(n, CH_LJVM_CALLBACK), sum_why(n, CH_LJVM_STACK), SUM(n, failed));
}

/* -- Writers ---------------------------------------------------------------- */

/* A coroutine that runs no Lua: sleeps ms, then writes "d<i>" to every peer. */
static int writer_ms;
static double written_at;
static void write_later(void *p)
{
  int n = (int)(intptr_t)p;
  ch_sleep_ms(writer_ms);
  written_at = now_ms();
  for (int i = 0; i < n; i++) {
    char b[16];
    int len = snprintf(b, sizeof b, "d%d", i);
    if (write(peer[i], b, (size_t)len) != len) perror("write");
  }
}

static int ticks;
static void ticker(void *p)
{
  int ms = (int)(intptr_t)p;
  for (int i = 0; i < ms; i++) { ch_sleep_ms(1); ticks++; }
}

/* A pthread: for rounds, writes one byte to every peer, then pauses us. */
struct drip { int n, rounds, pause_us, start_us, step_us; const char *payload, *payload2; };

static void *drip_thread(void *p)
{
  struct drip *d = p;
  if (d->start_us) usleep((useconds_t)d->start_us);
  if (d->payload) {   /* one payload per peer, step_us apart */
    for (int i = 0; i < d->n; i++) {
      if (write(peer[i], d->payload, strlen(d->payload)) < 0) perror("write");
      if (d->step_us) usleep((useconds_t)d->step_us);
      if (!d->payload2) continue;
      if (write(peer[i], d->payload2, strlen(d->payload2)) < 0) perror("write");
      if (d->step_us) usleep((useconds_t)d->step_us);
    }
    return NULL;
  }
  for (int r = 0; r < d->rounds; r++) {
    for (int i = 0; i < d->n; i++)
      if (write(peer[i], "x", 1) != 1) perror("write");
    usleep((useconds_t)d->pause_us);
  }
  return NULL;
}

/* -- Scenarios ------------------------------------------------------------- */

static void scen_a(void)
{
  printf("a: classic C read() that would block parks; data arrives 50 ms later\n");
  new_tasks(N, 1);
  spawn_all(N);
  writer_ms = 50;
  ch_spawn(write_later, (void *)(intptr_t)N);
  ticks = 0;
  ch_spawn(ticker, (void *)(intptr_t)40);
  double t0 = now_ms();
  ch_run();
  double el = now_ms() - t0;
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) {
    char want[16];
    snprintf(want, sizeof want, "d%d", i);
    ok += tasks[i].done && !strcmp(tasks[i].result, want);
  }
  printf("  %d/%d got their data; elapsed %.1f ms; ticker ran %d times while they waited\n", ok, N, el, ticks);
  CHECK(ok == N, "every handler gets its data");
  CHECK(SUM(N, yes) == N && SUM(N, no) == 0, "every would-block read parks");
  CHECK(el < 500, "handlers wait together, not in turn");
  CHECK(ticks >= 30, "other coroutines run meanwhile");
  close_fds(N);
}

static void scen_b(void)
{
  printf("b: ffi.C.read that would block, in a JIT-hot loop, in %d handlers\n", N);
  new_tasks(N, 1);
  spawn_all(N);
  /* The drip is kept slower than the readers (1 ms a round), so reads
  ** would block often after the loop is hot: with 200 us a loaded machine
  ** let the drip run ahead, and no refusal landed on a trace. */
  struct drip d = { .n = N, .rounds = 300, .pause_us = 1000 };
  pthread_t th;
  pthread_create(&th, NULL, drip_thread, &d);
  double t0 = now_ms();
  ch_run();
  double el = now_ms() - t0;
  pthread_join(th, NULL);
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += !strcmp(tasks[i].result, "300");
  printf("  %d/%d read all 300 bytes; elapsed %.1f ms\n", ok, N, el);
  CHECK(ok == N, "every handler reads every byte");
  CHECK(SUM(N, yes) == 15 * N, "only the classic cusleep calls park (got %d yes)", SUM(N, yes));
  CHECK(SUM(N, no) > 0, "some FFI reads would block");
  CHECK(sum_why(N, CH_LJVM_TRACE) > 0, "some refusals are on a trace");
  CHECK(sum_why(N, CH_LJVM_TRACE) + sum_why(N, CH_LJVM_NOT_CFUNC) == SUM(N, no), "refusals are trace or FFI");
  close_fds(N);
}

static void scen_c(void)
{
  printf("c: blocking I/O inside __gc finalizers (classic C and FFI)\n");
  new_tasks(N, 1);
  spawn_all(N);
  /* Peer i gets "gc-1|", then 1 ms later "gc-2": each finalizer's read
  ** blocks until its part comes round. */
  struct drip d1 = { .n = N, .payload = "gc-1|", .payload2 = "gc-2", .start_us = 2000, .step_us = 1000 };
  pthread_t th;
  pthread_create(&th, NULL, drip_thread, &d1);
  double t0 = now_ms();
  ch_run();
  double el = now_ms() - t0;
  pthread_join(th, NULL);
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += tasks[i].done && !tasks[i].failed;
  int right = 0;
  for (int i = 0; i < N; i++) right += !strcmp(tasks[i].result, "gc-1|+4");
  printf("  %d/%d finished, %d read both parts (\"gc-1|\" in the classic C finalizer, 4 bytes in the FFI one); elapsed %.1f ms\n", ok, N, right, el);
  CHECK(ok == N && right == N, "every handler finishes with its data");
  CHECK(SUM(N, yes) == 0, "no finalizer parks");
  CHECK(SUM(N, no) > 0, "finalizers would block");
  CHECK(sum_why(N, CH_LJVM_GC) + sum_why(N, CH_LJVM_NOT_CFUNC) == SUM(N, no), "refused as finalizer or FFI");
  close_fds(N);
}

static int no_resume_hook, resume_by_call;

static void scen_d(void)
{
  printf("d: usleep (parks) then luaL_error under pcall, hot loops, %d threads%s\n", N,
         no_resume_hook ? " (resume hook OFF: expected to crash)" : "");
  new_tasks(N, 0);
  spawn_all(N);
  double t0 = now_ms();
  ch_run();
  double el = now_ms() - t0;
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += !strcmp(tasks[i].result, "200");
  printf("  %d/%d caught 200 errors each; elapsed %.1f ms\n", ok, N, el);
  CHECK(ok == N, "every handler catches every error");
  CHECK(SUM(N, yes) == 200 * N && SUM(N, no) == 0, "every usleep parks");
}

static void scen_e(void)
{
  printf("e: classic C read() inside an FFI callback\n");
  new_tasks(N, 1);
  spawn_all(N);
  struct drip d = { .n = N, .payload = "cb", .start_us = 2000, .step_us = 1000 };
  pthread_t th;
  pthread_create(&th, NULL, drip_thread, &d);
  ch_run();
  pthread_join(th, NULL);
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += !strcmp(tasks[i].result, "cb");
  printf("  %d/%d got their data\n", ok, N);
  CHECK(ok == N, "every handler gets its data");
  CHECK(SUM(N, yes) == 0, "nothing parks in a callback");
  CHECK(sum_why(N, CH_LJVM_CALLBACK) == SUM(N, no) && SUM(N, no) > 0, "refused as callback");
  close_fds(N);
}

static void scen_f(void)
{
  printf("f: classic C read() in a Lua coroutine (parks) and in one resumed by an FFI callback (does not)\n");
  new_tasks(N, 1);
  spawn_all(N);
  writer_ms = 20;
  ch_spawn(write_later, (void *)(intptr_t)N);
  struct drip d = { .n = N, .payload = "cb", .start_us = 60000, .step_us = 500 };
  pthread_t th;
  pthread_create(&th, NULL, drip_thread, &d);
  ch_run();
  pthread_join(th, NULL);
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) {
    char want[32];
    snprintf(want, sizeof want, "d%d|cb", i);
    ok += !strcmp(tasks[i].result, want);
  }
  printf("  %d/%d got both\n", ok, N);
  CHECK(ok == N, "every handler gets both");
  CHECK(SUM(N, yes) == N, "the plain coroutine read parks (%d)", SUM(N, yes));
  CHECK(sum_why(N, CH_LJVM_CALLBACK) == SUM(N, no) && SUM(N, no) > 0, "the callback one is refused");
  close_fds(N);
}

static void scen_g(void)
{
  printf("g: classic C read() inside a debug hook\n");
  new_tasks(N, 1);
  spawn_all(N);
  struct drip d = { .n = N, .payload = "hk", .start_us = 2000, .step_us = 500 };
  pthread_t th;
  pthread_create(&th, NULL, drip_thread, &d);
  ch_run();
  pthread_join(th, NULL);
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += !strcmp(tasks[i].result, "hk");
  printf("  %d/%d got their data\n", ok, N);
  CHECK(ok == N, "every handler gets its data");
  CHECK(SUM(N, yes) == 0, "nothing parks in a hook");
  CHECK(sum_why(N, CH_LJVM_HOOK) == SUM(N, no) && SUM(N, no) > 0, "refused as hook");
  close_fds(N);
}

static void scen_h(void)
{
  printf("h: one classic C function: lua_pcall error, nested classic read, lua_resume, own read, FFI read in a resumed coroutine\n");
  new_tasks(N, 1);
  spawn_all(N);
  struct drip d1 = { .n = N, .payload = "aa", .start_us = 10000 };
  struct drip d2 = { .n = N, .payload = "bb", .start_us = 20000 };
  struct drip d3 = { .n = N, .payload = "cc", .start_us = 30000, .step_us = 500 };
  pthread_t t1, t2, t3;
  pthread_create(&t1, NULL, drip_thread, &d1);
  pthread_create(&t2, NULL, drip_thread, &d2);
  pthread_create(&t3, NULL, drip_thread, &d3);
  ch_run();
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  pthread_join(t3, NULL);
  report(N);
  int ok = 0;
  for (int i = 0; i < N; i++) ok += !strcmp(tasks[i].result, "aabbcc");
  printf("  %d/%d read aabbcc\n", ok, N);
  CHECK(ok == N, "every handler reads all three");
  CHECK(SUM(N, yes) == 2 * N, "the nested read and the read after lua_resume park (%d)", SUM(N, yes));
  CHECK(SUM(N, no) > N / 2 && sum_why(N, CH_LJVM_NOT_CFUNC) + sum_why(N, CH_LJVM_TRACE) == SUM(N, no),
        "the FFI read in the resumed coroutine is refused");
  close_fds(N);
}

static void bench(const char *which, int k, int by_call)
{
  new_tasks(1, 0);
  bench_k = k;
  bench_by_call = by_call;
  scenario = which;
  spawn_all(1);
  ch_run();
  CHECK(!tasks[0].failed, "bench ran");
  if (!strcmp(which, "bench_park")) CHECK(!strcmp(tasks[0].result, "1"), "bench-park decides yes");
}

int main(int argc, char **argv)
{
  const char *only[16];
  int nonly = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-resume-hook")) no_resume_hook = 1;
    else if (!strcmp(argv[i], "--resume-by-call")) resume_by_call = 1;
    else if (nonly < 16) only[nonly++] = argv[i];
  }
  if (N < 1 || N > MAXN) N = 100;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < MAXN; i++) peer[i] = -1;

  L = luaL_newstate();
  luaL_openlibs(L);
  const char *why = NULL;
  if (ch_ljvm_init(L, &why) < 0) {
    printf("ch_ljvm_init failed: %s\n", why);
    return 1;
  }
  printf("ch_ljvm_init: offsets verified\n");
  ch_set_yield_check(check);
  if (!no_resume_hook) ch_set_resume_hook(resume_by_call ? resumed_by_call : ch_ljvm_resumed);
  lua_register(L, "cread", l_cread);
  lua_register(L, "cusleep", l_cusleep);
  lua_register(L, "csleep_error", l_csleep_error);
  lua_register(L, "cdecide", l_cdecide);
  lua_register(L, "cresume", l_cresume);
  lua_register(L, "switches", l_switches);
  lua_register(L, "cnest", l_cnest);
  lua_register(L, "noop", noop);
  lua_pushlightuserdata(L, (void *)(uintptr_t)call_back);
  lua_setglobal(L, "CALL_BACK");
  if (luaL_dostring(L, script)) {
    printf("script: %s\n", lua_tostring(L, -1));
    return 1;
  }

  if (nonly >= 2 && !strncmp(only[0], "bench-", 6)) {
    int k = atoi(only[1]);
    int off = nonly >= 3 && !strcmp(only[2], "off");
    if (off) {
      lua_pushlightuserdata(L, (void *)(uintptr_t)ch_ljvm_wrap);
      luaJIT_setmode(L, -1, LUAJIT_MODE_WRAPCFUNC | LUAJIT_MODE_OFF);
      lua_pop(L, 1);
    }
    if (!strcmp(only[0], "bench-call")) bench("bench_call", k, 0);
    else if (!strcmp(only[0], "bench-park")) bench("bench_park", k, nonly >= 3 ? atoi(only[2]) : 5);
    else if (!strcmp(only[0], "bench-refuse")) bench("bench_refuse", k, 0);
    else if (!strcmp(only[0], "bench-resume")) bench("bench_resume", k, 0);
    else if (!strcmp(only[0], "bench-resume-call")) bench("bench_resume", k, 1);
    return failures ? 1 : 0;
  }

  static const struct { const char *name; void (*fn)(void); } all[] = {
    { "a", scen_a }, { "b", scen_b }, { "c", scen_c },
    { "d", scen_d }, { "e", scen_e }, { "f", scen_f }, { "g", scen_g },
    { "h", scen_h },
  };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    int want = nonly == 0;
    for (int j = 0; j < nonly; j++) want |= !strcmp(only[j], all[i].name);
    if (!want) continue;
    scenario = all[i].name;
    int before = failures;
    all[i].fn();
    printf("  => %s\n", failures == before ? "PASS" : "FAIL");
  }
  printf(failures ? "FAILED (%d)\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
