/*
** A worker's life: its thread, its CPU, its scheduler and lua_State, the
** per-worker parts of the statistics and the watchdog, started before the
** first coroutine and stopped after the scheduler returns. And its
** shutdown, in one place and in order: the drain's beginning (the Lua's
** on_shutdown functions, through the drain hook), then the listeners
** (what the kernel already queued is still served), the idle HTTP
** connections (given a moment for one more request), the keepalive
** pools, the daemon tasks, and last the Lua's closers (gRPC streams,
** WebSockets), again through the hook; the rest have --shutdown-timeout
** to end. Each module only closes its own things when asked: none calls
** up into another's shutdown.
*/
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"
#include "vm/heap.h"
#include "vm/task.h"
#include "http/conn.h"
#include "net/keepalive.h"
#include "net/listener.h"
#include "stats/stats.h"
#include "stats/stats_procs.h"
#include "proc/watchdog.h"
#include "stats/debug.h"

__thread struct ch_worker *ch_worker_self;

static struct ch_worker *workers;   /* this process's ch_opts.threads */
/* Guards workers[i].sched: a worker whose ch_run returned lets its thread
** end, which frees its scheduler; ch_workers_shutdown must not post to it. */
static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lua_State *(*new_state)(void);
static void (*start)(void *);

static void fatal(const char *what, int id)
{
  fprintf(stderr, "cohost: worker %d: %s\n", id, what);
  exit(2);
}

/* Pins the calling worker thread to its CPU, if --cpu-affinity asked. */
static void pin(int id)
{
  if (!ch_opts.cpus) return;
  int cpu = ch_opts.cpus[id % ch_opts.ncpus];
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int r = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (r != 0) {
    fprintf(stderr, "cohost: cannot pin worker %d to CPU %d: %s\n", id, cpu, strerror(r));
    exit(2);
  }
}

/* The I/O backend asked for (--io-backend, else CH_IO_BACKEND, which the
** scheduler read when it was made). A kernel that refuses io_uring leaves
** the worker on epoll, said once per process. */
static void io_backend(void)
{
  static atomic_int said;
  if (ch_opts.io_backend >= 0) ch_sched_set_io_backend(ch_opts.io_backend);
  int why = 0;
  if (ch_sched_io_backend(&why) == CH_IO_EPOLL && why < 0 && !atomic_exchange(&said, 1))
    ch_log(CH_LOG_NOTICE, "io_uring is not available here (%s): the workers use epoll",
           strerror(-why));
}

/* The idle trim's host part (runtime/sched.c runs it first, in the loop,
** a second after a burst has ended): the Lua heap's garbage and free
** pages, which nothing else would give back with no new traffic. */
static void worker_idle(void)
{
  struct ch_worker *w = ch_worker_self;
  if (w && w->L) ch_heap_trim(w->L);
}

static void *worker_main(void *p)
{
  struct ch_worker *w = p;
  ch_worker_self = w;
  ch_log_set_worker(w->id);
  w->listen.worker = w->id;
  w->listen.max_connections = ch_opts.max_connections;
  w->listen.accepted = &w->accepted;
  ch_listener_set_ctx(&w->listen);
  pin(w->id);
  struct ch_sched *s = ch_sched_self();
  if (!s) fatal("cannot create a scheduler", w->id);
  if (ch_sched_set_fairness(ch_opts.fair_switches, ch_opts.fair_usec) < 0)
    fatal("bad fairness settings", w->id);
  pthread_mutex_lock(&workers_lock);
  w->sched = s;
  pthread_mutex_unlock(&workers_lock);
  if (ch_set_stack_size(ch_opts.stack_size ? ch_opts.stack_size : CH_WORKER_STACK_DEFAULT) < 0)
    fatal("bad stack size", w->id);
  if (ch_opts.stack_mode >= 0 && ch_sched_set_stack_mode(ch_opts.stack_mode) < 0)
    fatal("--stack-mode copy is not available in this build (ASan)", w->id);
  io_backend();
  w->L = new_state();
  if (!w->L) fatal("cannot create a Lua state", w->id);
  ch_sched_set_idle_hook(worker_idle);
  ch_stats_worker_start(w);
  ch_stats_procs_worker_start(w);
  ch_watchdog_worker_start(w);
  ch_debug_worker_start(w);
  if (ch_spawn(start, w) < 0) fatal("cannot spawn the main task", w->id);
  int r = ch_run();
  ch_debug_worker_stop(w);
  ch_watchdog_worker_stop(w);
  ch_stats_procs_worker_stop(w);
  ch_stats_worker_stop(w);
  if (r < 0) ch_log(CH_LOG_ERR, "scheduler: %s", strerror(-r));
  pthread_mutex_lock(&workers_lock);
  w->sched = NULL;   /* freed when this thread ends */
  pthread_mutex_unlock(&workers_lock);
  return NULL;
}

void ch_workers_run(struct lua_State *(*make_state)(void), void (*first)(void *))
{
  new_state = make_state;
  start = first;
  int n = ch_opts.threads;
  /* Worker ids run on across processes: process p's thread j is
  ** p * threads + j, so ids (and --cpu-affinity's CPUs) are distinct. */
  struct ch_worker *all = calloc((size_t)n, sizeof *all);
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  if (!all || !threads) fatal("no memory", 0);
  for (int i = 0; i < n; i++) all[i].id = ch_opts.process * n + i;
  pthread_mutex_lock(&workers_lock);
  workers = all;
  pthread_mutex_unlock(&workers_lock);
  for (int i = 1; i < n; i++)
    if (pthread_create(&threads[i], NULL, worker_main, &all[i]) != 0)
      fatal("cannot start its thread", all[i].id);
  worker_main(&all[0]);
  for (int i = 1; i < n; i++) pthread_join(threads[i], NULL);
  free(threads);
  /* The workers themselves stay: their states and parked coroutines may
  ** still be referenced until the process ends. */
}

static _Atomic int draining;   /* ch_workers_draining */
static void (*drain_hook)(struct ch_worker *, int);   /* lib_sys.c's */

int ch_workers_draining(void)
{
  return atomic_load_explicit(&draining, memory_order_relaxed);
}

void ch_workers_set_draining(void)
{
  atomic_store_explicit(&draining, 1, memory_order_relaxed);
}

static void post_shutdown(void *p)
{
  ch_worker_shutdown(p);
}

void ch_workers_shutdown(void)
{
  pthread_mutex_lock(&workers_lock);
  for (int i = 0; workers && i < ch_opts.threads; i++)
    if (workers[i].sched) ch_post(workers[i].sched, post_shutdown, &workers[i]);
  pthread_mutex_unlock(&workers_lock);
}

static void post_drain_begin(void *p)
{
  (void)p;
  ch_worker_drain_begin(ch_worker_self);
}

void ch_workers_drain_begin(void)
{
  ch_workers_post(post_drain_begin, NULL);
}

void ch_workers_set_drain_hook(void (*hook)(struct ch_worker *w, int phase))
{
  drain_hook = hook;
}

int ch_workers_post(void (*fn)(void *), void *arg)
{
  int n = 0;
  pthread_mutex_lock(&workers_lock);
  for (int i = 0; workers && i < ch_opts.threads; i++)
    if (workers[i].sched && ch_post(workers[i].sched, fn, arg) == 0) n++;
  pthread_mutex_unlock(&workers_lock);
  return n;
}

int ch_worker_count(void)
{
  return ch_opts.workers;
}

void ch_worker_exit(int code)
{
  fflush(NULL);
  _exit(code);
}

/* Kills what the shutdown timeout left running. */
static void kill_tasks(struct ch_worker *w, int daemons_only)
{
  for (struct ch_task *t = w->tasks; t; t = t->next) {
    if (daemons_only && !t->daemon) continue;
    if (t->coro) ch_cancel(t->coro);
    else if (t->status == CH_TASK_NEW) t->status = CH_TASK_KILLED;
  }
}

static void stop_expired(struct ch_timer *tm)
{
  struct ch_worker *w = (struct ch_worker *)((char *)tm - offsetof(struct ch_worker, stop_timer));
  int n = 0;
  for (struct ch_task *t = w->tasks; t; t = t->next) n++;
  kill_tasks(w, 0);
  if (n) ch_log(CH_LOG_WARN, "shutdown timeout: cancelling %d task%s", n, n == 1 ? "" : "s");
}

void ch_worker_drain_begin(struct ch_worker *w)
{
  if (w->drain_begun) return;
  w->drain_begun = 1;
  if (drain_hook) drain_hook(w, CH_DRAIN_BEGIN);
}

void ch_worker_shutdown(struct ch_worker *w)
{
  if (w->stopping) return;
  w->stopping = 1;
  ch_worker_drain_begin(w);   /* cohost.shutdown(), a failed main chunk */
  ch_log(CH_LOG_INFO, "shutting down");
  ch_listener_drain();
  ch_http_close_idle(w);
  ch_keepalive_close_all();
  kill_tasks(w, 1);
  /* Weak: once the last task and coroutine have ended, the scheduler
  ** returns without waiting for it; until then it cancels the rest at the
  ** deadline. Started even with no task now: the drain hook's coroutines
  ** make theirs in a moment. */
  w->stop_timer.weak = 1;
  ch_timer_start(&w->stop_timer, ch_opts.shutdown_timeout_ms, stop_expired);
  if (drain_hook) drain_hook(w, CH_DRAIN_STOP);
}
