/*
** The CPU watchdog. See watchdog.h and docs/limits.md.
**
** Progress is the scheduler's switch counter: a worker whose counter has
** not moved while a coroutine is current has been running that coroutine
** all along. The watchdog thread reads the counter and the current
** coroutine with relaxed atomic loads (the worker writes them with plain
** stores; 64-bit aligned, so a read is never torn). The limit is wall
** time, what the worker's other connections wait, but only a thread that
** is running is stopped: its CPU clock (pthread_getcpuclockid) must have
** moved since the last look. A worker blocked in a call that cannot park
** (a system call out of the hooks' reach, a lock) is only reported.
**
** Stopping takes two steps. First a signal to the worker's thread, whose
** handler, if the same coroutine still runs, arms the worker's shared
** debug hook (host/vm/vmhook.c: LuaJIT keeps one hook per universe, and
** the profiler wants it too). The hook raises "cpu watchdog: ..." at the
** next interpreted instruction, a plain Lua error that the task logs with
** its traceback. Compiled code never checks hooks, so a JIT-compiled loop
** runs on: if the switch counter still has not moved as long again, the
** watchdog logs and ends the process with CH_WATCHDOG_EXIT.
** Nothing else can stop a thread mid-trace safely.
*/
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc/watchdog.h"
#include "vm/task.h"
#include "vm/vmhook.h"

static int limit_ms = CH_WATCHDOG_DEFAULT_MS;
static char limit_text[32] = "10";   /* limit_ms as seconds, for messages */

/* One watched worker. */
struct slot {
  struct ch_worker *w;          /* read-only */
  struct ch_sched *sched;       /* the worker's; alive while listed */
  lua_State *L;                 /* the worker's universe; read-only */
  pthread_t thread;             /* the worker's thread; read-only */
  clockid_t cpu;                /* that thread's CPU clock; read-only */
  struct slot *next;            /* the list, under lock */
  /* The watchdog thread's view, under lock. */
  uint64_t switches;            /* the counter when last seen moving */
  uint64_t since;               /* ch_now_ns then, or when the hook went */
  uint64_t busy_since;          /* since when every look found it busy */
  uint64_t cpu_prev;            /* thread CPU ns at the last look */
  int hooked;                   /* the hook was sent for this stall */
  int warned;                   /* "blocked" was logged for this stall */
  /* From the watchdog thread to the signal handler. */
  _Atomic(struct ch_coro *) target;    /* the coroutine to stop */
  _Atomic uint64_t target_switches;    /* the counter it was stuck at */
  /* The worker thread's own: the signal handler and the hook. */
  struct ch_coro *victim;       /* whom the armed hook is for */
  uint64_t victim_switches;     /* the switch counter when it was armed */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot *slots;      /* watched workers, under lock */
static pid_t running_in;        /* pid whose watchdog thread runs; a fork
                                ** (worker processes) starts its own */
static __thread struct slot *self;   /* the calling worker's slot */

/* -- Settings ------------------------------------------------------------- */

int ch_watchdog_set_seconds(const char *arg)
{
  char *end;
  double v = strtod(arg, &end);
  if (end == arg || *end || !(v >= 0 && v <= 86400)) return -1;
  limit_ms = (int)(v * 1000 + 0.5);
  if (v > 0 && limit_ms == 0) limit_ms = 1;
  snprintf(limit_text, sizeof limit_text, "%g", limit_ms / 1000.0);
  return 0;
}

int ch_watchdog_ms(void)
{
  return limit_ms;
}

/* -- On the worker's thread ----------------------------------------------- */

/* The hook's work (vmhook.c runs it): raises the watchdog's error in the
** coroutine it was armed for, once. Runs between two Lua instructions;
** never yields. */
static void on_hook(lua_State *L)
{
  struct slot *s = self;
  if (!s) return;   /* the worker is off watch */
  struct ch_coro *victim = s->victim;
  s->victim = NULL;
  /* A switch since the hook went in (the stall ended inside C code)
  ** makes whoever runs now innocent, the victim included. */
  if (!victim || ch_current() != victim || ch_sched_switches(s->sched) != s->victim_switches)
    return;
  lua_pushfstring(L, "cpu watchdog: ran %ss without yielding", limit_text);
  lua_error(L);
}

/* CH_WATCHDOG_SIGNAL's handler: arms the hook if the coroutine the
** watchdog saw stuck is still running, without a switch since. Reads only
** this thread's scheduler (plain loads) and arms (lua_sethook's work). */
static void on_signal(int sig)
{
  (void)sig;
  int saved = errno;
  struct slot *s = self;
  struct ch_coro *target = s ? atomic_exchange(&s->target, NULL) : NULL;
  if (target && ch_sched_running(s->sched) == target && !s->victim &&
      ch_sched_switches(s->sched) == atomic_load_explicit(&s->target_switches, memory_order_relaxed)) {
    s->victim = target;
    s->victim_switches = ch_sched_switches(s->sched);
    ch_vmhook_arm(s->L, CH_VMHOOK_WATCHDOG);
  }
  errno = saved;
}

/* -- The watchdog thread -------------------------------------------------- */

static uint64_t cpu_ns(struct slot *s)
{
  struct timespec ts;
  if (clock_gettime(s->cpu, &ts) < 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One look at worker s, period_ns after the last. O(1): two loads and a
** clock read. */
static void check(struct slot *s, uint64_t now, uint64_t period_ns)
{
  uint64_t sw = ch_sched_switches(s->sched);
  struct ch_coro *cur = ch_sched_running(s->sched);
  uint64_t cpu = cpu_ns(s);
  /* Busy: the thread got at least 1% of a CPU since the last look. A
  ** spinning thread on a machine with 50 times more runnable threads than
  ** CPUs still does; one asleep in the kernel does not. */
  int busy = (cpu - s->cpu_prev) * 100 >= period_ns;
  s->cpu_prev = cpu;
  if (sw != s->switches || !cur) {   /* it moved, or sits in its loop */
    s->switches = sw;
    s->since = s->busy_since = now;
    s->hooked = s->warned = 0;
    return;
  }
  if (!busy) s->busy_since = now;
  uint64_t limit = (uint64_t)limit_ms * 1000000u;
  if (now - s->since < limit) return;
  int id = s->w->id, coro = ch_coro_id(cur);
  if (!busy) {   /* held but asleep: say so once, and leave it be */
    if (!s->warned)
      ch_log(CH_LOG_WARN, "worker %d: coroutine %d has held the thread %ss without yielding, "
             "blocked in a call that cannot park (the cpu watchdog stops running code only)",
             id, coro, limit_text);
    s->warned = 1;
    return;
  }
  /* Running for less than the limit after a block (a long poll that
  ** just returned): not a runaway, yet. */
  if (!s->hooked && now - s->busy_since < limit) return;
  if (!s->hooked) {
    s->hooked = 1;
    s->since = now;
    ch_log(CH_LOG_ERR, "worker %d: coroutine %d has run %ss without yielding; "
           "raising a \"cpu watchdog\" error in it", id, coro, limit_text);
    atomic_store_explicit(&s->target_switches, sw, memory_order_relaxed);
    atomic_store(&s->target, cur);
    pthread_kill(s->thread, CH_WATCHDOG_SIGNAL);
    return;
  }
  /* No stdio flush: the stuck thread may hold a FILE lock forever. */
  ch_log(CH_LOG_ERR, "worker %d: coroutine %d still runs %ss later without yielding "
         "(JIT-compiled code does not check hooks); exiting with status %d",
         id, coro, limit_text, CH_WATCHDOG_EXIT);
  _exit(CH_WATCHDOG_EXIT);
}

static void *watch_main(void *arg)
{
  (void)arg;
  /* Ten looks per limit, at most one a second and at least one per 10 ms:
  ** a stall is caught within 10% of the limit late. */
  long ms = limit_ms / 10;
  if (ms > 1000) ms = 1000;
  if (ms < 10) ms = 10;
  struct timespec period = { ms / 1000, (ms % 1000) * 1000000L };
  uint64_t last = ch_now_ns();
  for (;;) {
    clock_nanosleep(CLOCK_MONOTONIC, 0, &period, NULL);
    pthread_mutex_lock(&lock);
    uint64_t now = ch_now_ns();
    for (struct slot *s = slots; s; s = s->next) check(s, now, now - last);
    last = now;
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

/* Called with lock held. Returns 0 or an errno. */
static int start_thread(void)
{
  if (running_in == getpid()) return 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  /* SA_ONSTACK: the signal lands on a coroutine's stack otherwise. */
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sa.sa_handler = on_signal;
  if (sigaction(CH_WATCHDOG_SIGNAL, &sa, NULL) < 0) return errno;
  /* Its own signal mask blocks everything: signals go to the workers. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int r = pthread_create(&t, NULL, watch_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (r != 0) return r;
  pthread_detach(t);
  running_in = getpid();
  return 0;
}

/* -- Registration --------------------------------------------------------- */

void ch_watchdog_worker_start(struct ch_worker *w)
{
  if (!limit_ms || !w->sched || !w->L) return;
  ch_vmhook_set(CH_VMHOOK_WATCHDOG, on_hook);
  struct slot *s = calloc(1, sizeof *s);
  if (!s) {
    ch_log(CH_LOG_ERR, "cpu watchdog: no memory; worker %d is not watched", w->id);
    return;
  }
  s->w = w;
  s->sched = w->sched;
  s->L = w->L;
  s->thread = pthread_self();
  if (pthread_getcpuclockid(s->thread, &s->cpu) != 0) {
    ch_log(CH_LOG_ERR, "cpu watchdog: no CPU clock; worker %d is not watched", w->id);
    free(s);
    return;
  }
  s->cpu_prev = cpu_ns(s);
  s->since = s->busy_since = ch_now_ns();
  pthread_mutex_lock(&lock);
  int err = start_thread();
  if (err) {
    pthread_mutex_unlock(&lock);
    ch_log(CH_LOG_ERR, "cpu watchdog: cannot start its thread: %s", strerror(err));
    free(s);
    return;
  }
  s->next = slots;
  slots = s;
  self = s;
  pthread_mutex_unlock(&lock);
}

void ch_watchdog_worker_stop(struct ch_worker *w)
{
  struct slot *s = self;
  if (!s || s->w != w) return;
  pthread_mutex_lock(&lock);
  for (struct slot **pp = &slots; *pp; pp = &(*pp)->next) {
    if (*pp == s) { *pp = s->next; break; }
  }
  self = NULL;   /* a signal still pending finds no slot */
  pthread_mutex_unlock(&lock);
  /* A hook still armed finds no slot and does nothing once it fires;
  ** the state is not used again anyway. */
  free(s);
}
