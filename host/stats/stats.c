/*
** Per-worker statistics shared between workers. See stats.h.
**
** Why snapshots on demand: a scheduler's counters and a lua_State may only
** be read on their own thread, so a worker answering /status posts a
** refresh to every other worker and waits for them. Nothing runs while
** nobody asks (no periodic timer waking idle workers), and an answer is at
** most the wait old, except from a worker whose thread is held by a
** handler that never yields: it keeps its previous snapshot.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "stats/stats.h"
#include "vm/task.h"

struct slot {
  _Alignas(64) pthread_mutex_t lock; /* guards the fields below */
  struct ch_worker *w;          /* set by ch_stats_worker_start */
  struct ch_sched *sched;       /* while the worker runs, else NULL */
  struct ch_stats_worker snap;  /* the last refresh */
};

static struct slot *slots;      /* ch_opts.workers of them, never freed */
static pthread_once_t slots_once = PTHREAD_ONCE_INIT;

static void slots_init(void)
{
  slots = calloc((size_t)ch_opts.workers, sizeof *slots);
  if (!slots) return;   /* every entry point checks: stats off, not fatal */
  for (int i = 0; i < ch_opts.workers; i++) pthread_mutex_init(&slots[i].lock, NULL);
}

static struct slot *mine(void)
{
  struct ch_worker *w = ch_worker_self;
  return w && slots ? &slots[w->id] : NULL;
}

/* -- Snapshots ------------------------------------------------------------ */

/* What only the worker's own thread may read. */
static void read_own(struct ch_stats_worker *out)
{
  struct ch_worker *w = ch_worker_self;
  if (ch_stats(&out->sched) < 0) memset(&out->sched, 0, sizeof out->sched);
  out->connections = w ? w->listen.connections : 0;
  /* LUA_GCCOUNT is KiB, LUA_GCCOUNTB the bytes beyond; a read of
  ** g->gc.total, safe between coroutines since no Lua runs then. */
  out->lua_bytes = w && w->L ? (uint64_t)lua_gc(w->L, LUA_GCCOUNT, 0) * 1024 +
                                   (uint64_t)lua_gc(w->L, LUA_GCCOUNTB, 0) : 0;
  out->taken_ns = ch_now_ns();
  out->running = 1;
}

/* The worker's live counters (struct ch_worker), readable from anywhere. */
static void add_live(struct ch_stats_worker *out, struct slot *s)
{
  if (!s->w) return;
  out->requests = atomic_load_explicit(&s->w->requests, memory_order_relaxed);
  out->accepted = atomic_load_explicit(&s->w->accepted, memory_order_relaxed);
}

void ch_stats_self(struct ch_stats_worker *out)
{
  memset(out, 0, sizeof *out);
  read_own(out);
  struct slot *s = mine();
  if (s) add_live(out, s);
}

/* Runs on the worker's own loop (ch_post): takes its snapshot. */
static void refresh(void *arg)
{
  struct slot *s = arg;
  struct ch_stats_worker snap;
  memset(&snap, 0, sizeof snap);
  read_own(&snap);
  pthread_mutex_lock(&s->lock);
  s->snap = snap;
  pthread_mutex_unlock(&s->lock);
}

void ch_stats_worker_start(struct ch_worker *w)
{
  pthread_once(&slots_once, slots_init);
  if (!slots) return;
  struct slot *s = &slots[w->id];
  pthread_mutex_lock(&s->lock);
  s->w = w;
  s->sched = w->sched;
  pthread_mutex_unlock(&s->lock);
}

void ch_stats_worker_stop(struct ch_worker *w)
{
  if (!slots) return;
  struct slot *s = &slots[w->id];
  pthread_mutex_lock(&s->lock);
  s->sched = NULL;   /* no more posts: the scheduler ends with the thread */
  s->snap.running = 0;
  pthread_mutex_unlock(&s->lock);
}

int ch_stats_gather(struct ch_stats_worker *out, int n, int timeout_ms)
{
  int count = ch_opts.workers;
  if (!slots) {
    if (n > 0) ch_stats_self(&out[0]);
    return 1;
  }
  if (n > count) n = count;
  struct slot *self = mine();
  /* A snapshot taken after this moment is fresh: the monotonic clock is
  ** the same on every thread. */
  uint64_t asked_ns = ch_now_ns();
  /* Ask every other running worker; posting under the slot's lock keeps
  ** the scheduler alive (ch_stats_worker_stop takes the same lock). */
  for (int i = 0; i < n; i++) {
    struct slot *s = &slots[i];
    if (s == self) continue;
    pthread_mutex_lock(&s->lock);
    if (s->sched) ch_post(s->sched, refresh, s);   /* -ENOMEM: stale answer */
    pthread_mutex_unlock(&s->lock);
  }
  if (self) refresh(self);
  /* Wait for the answers: O(workers) per millisecond, only while a scrape
  ** waits. */
  struct ch_coro *c = ch_current();
  uint64_t deadline = asked_ns + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
  for (;;) {
    int missing = 0;
    for (int i = 0; i < n; i++) {
      pthread_mutex_lock(&slots[i].lock);
      if (slots[i].sched && slots[i].snap.taken_ns < asked_ns) missing++;
      pthread_mutex_unlock(&slots[i].lock);
    }
    if (!missing || ch_now_ns() >= deadline) break;
    /* Outside a coroutine, or where it may not park: what is there. */
    if (!c || !ch_task_may_park(c) || ch_sleep_ms(1) < 0) break;
  }
  for (int i = 0; i < n; i++) {
    struct slot *s = &slots[i];
    pthread_mutex_lock(&s->lock);
    out[i] = s->snap;
    pthread_mutex_unlock(&s->lock);
    add_live(&out[i], s);
  }
  return count;
}

/* -- The endpoint --------------------------------------------------------- */

int ch_stats_endpoint_start(struct ch_worker *w, const char *addr)
{
  struct ch_task *t = ch_task_new(w, "status");
  if (!t) return -1;
  t->start_ns = ch_now_ns();
  lua_State *T = t->T;
  static const char chunk[] = "return require('cohost.status').start(...)";
  if (luaL_loadbuffer(T, chunk, sizeof chunk - 1, "=status")) {
    ch_log(CH_LOG_ERR, "%s", lua_tostring(T, -1));
    ch_task_release(t);
    return -1;
  }
  lua_pushstring(T, addr);
  ch_task_run(t, 1);
  int ok = t->status == CH_TASK_DONE;
  ch_task_release(t);
  return ok ? 0 : -1;
}
