/*
** The debug endpoints' data across workers and processes. See debug.h.
**
** Within a process: a worker's tasks and its profile may only be read on
** its own thread, so the asker posts a job to every worker (ch_post) and
** parks; each job does its part on its worker's loop and posts its answer
** back to the asker's scheduler, whose loop wakes the asker when the last
** one is in, or its wait runs out (a worker held by a handler that never
** yields cannot answer). The asker's bookkeeping (struct gather) lives
** until the last late answer is in: answers are only ever touched on the
** asker's thread.
**
** Across worker processes (--processes 2 or more): one mailbox per
** process index in memory the master maps shared before it forks, with an
** eventfd each (stats_procs.c's way). The asker writes its ask into every
** other process's mailbox and writes to its eventfd; that process's first
** worker watches the eventfd, gathers from its own workers as above and
** writes its answer (up to MAILBOX_DATA bytes; cut short beyond, and
** said) into the mailbox. The asker polls the mailboxes every 5 ms until
** each has answered this ask or the wait runs out, and copies what came.
** One ask at a time across the processes (a dump takes the mailboxes).
*/
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "proc/profile.h"
#include "stats/debug.h"
#include "vm/inspect.h"
#include "vm/task.h"

#define TASKS_WAIT_MS 2000       /* a worker's answer to a task dump */
#define PROFILE_SLACK_MS 2000    /* past a profile's length, for its answers */
#define MAILBOX_DATA (8u << 20)  /* a process's answer, items and workers */
#define POLL_MS 5                /* how often the asker looks at the mailboxes */

enum { PHASE_TASKS, PHASE_PROF_START, PHASE_PROF_STOP };

/* -- This process's workers ----------------------------------------------- */

struct answer {
  struct ch_buf out;            /* items (tasks, folded stacks) */
  int result;                   /* tasks listed, samples, or -errno */
  int answered;
};

struct gather {
  int refs;                     /* the asker, plus jobs not back yet */
  int left;                     /* jobs not back yet */
  int phase;                    /* PHASE_*; read-only once posted */
  struct ch_debug_ask ask;      /* read-only once posted */
  struct ch_coro *self;         /* listed as running; read-only */
  struct ch_sched *home;        /* the asker's scheduler; read-only */
  struct ch_coro *asker;        /* parked for the answers; NULL once it
                                ** stopped waiting (the home thread's) */
  struct answer a[];            /* per thread of this process (home's) */
};

/* A job's answer on its way home. */
struct done {
  struct gather *g;
  int i;                        /* the worker's thread index */
  struct ch_buf out;
  int result;
};

static void unref(struct gather *g)
{
  if (--g->refs > 0) return;
  for (int i = 0; i < ch_opts.threads; i++) ch_buf_free(&g->a[i].out);
  free(g);
}

/* On the asker's thread: one answer in. */
static void job_done(void *arg)
{
  struct done *d = arg;
  struct gather *g = d->g;
  if (g->asker) {
    g->a[d->i] = (struct answer){ d->out, d->result, 1 };
  } else {
    ch_buf_free(&d->out);   /* too late: the asker went on */
  }
  free(d);
  if (--g->left == 0 && g->asker) ch_unpark(g->asker, 0);
  unref(g);
}

/* On each worker's loop: its part. */
static void job(void *arg)
{
  struct gather *g = arg;
  struct ch_worker *w = ch_worker_self;
  struct done *d = calloc(1, sizeof *d);
  if (!d) return;   /* the asker's wait runs out; g is kept (a leak on ENOMEM) */
  d->g = g;
  d->i = w->id - ch_opts.process * ch_opts.threads;
  if (g->phase == PHASE_TASKS) {
    const struct ch_debug_ask *a = &g->ask;
    struct ch_inspect_filter f = { a->state[0] ? a->state : NULL, a->route[0] ? a->route : NULL,
                                   a->min_age, g->self };
    d->result = ch_inspect_tasks(w, &f, a->text, &d->out);
  } else if (g->phase == PHASE_PROF_START) {
    d->result = ch_profile_start(w, g->ask.hz, g->ask.by_route);
  } else {
    d->result = ch_profile_stop(w, &d->out);
  }
  if (ch_post(g->home, job_done, d) < 0) {
    ch_buf_free(&d->out);
    free(d);
  }
}

/* Yields. Runs phase on every worker of this process and waits up to
** wait_ms for their answers. Returns the gather (unref it when done) or
** NULL when memory is short; *err is -ECANCELED when the asker was
** cancelled meanwhile, else 0. */
static struct gather *gather(int phase, const struct ch_debug_ask *ask, int wait_ms, int *err)
{
  *err = 0;
  struct gather *g = calloc(1, sizeof *g + (size_t)ch_opts.threads * sizeof g->a[0]);
  if (!g) return NULL;
  g->phase = phase;
  g->ask = *ask;
  g->self = ch_current();
  g->home = ch_sched_self();
  g->asker = ch_current();
  /* Answers come through this thread's loop, which runs only once the
  ** asker parks: left and refs are set in time. */
  int posted = ch_workers_post(job, g);
  g->left = posted;
  g->refs = posted + 1;
  uint64_t deadline = ch_now_ns() + (uint64_t)wait_ms * 1000000u;
  while (g->left > 0 && g->asker) {
    uint64_t now = ch_now_ns();
    if (now >= deadline) break;
    int r = ch_park((int64_t)((deadline - now + 999999) / 1000000));
    if (r == -ECANCELED) { *err = r; break; }
  }
  g->asker = NULL;
  return g;
}

/* printf onto b; -ENOMEM when memory is short. */
static int add(struct ch_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add(struct ch_buf *b, const char *fmt, ...)
{
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (k < 0) return -EINVAL;
  return ch_buf_add(b, line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1, 4096);
}

/* Appends what g's workers answered: items (joined by ',' for JSON
** tasks) and one JSON object per worker. */
static int collect(struct gather *g, const struct ch_debug_ask *ask, struct ch_buf *items,
                   struct ch_buf *workers)
{
  int json = ask->op == CH_DEBUG_TASKS && !ask->text, r = 0;
  for (int i = 0; i < ch_opts.threads && r == 0; i++) {
    struct answer *a = &g->a[i];
    int id = ch_opts.process * ch_opts.threads + i;
    if (items && a->out.len) {
      if (json && items->len) r = ch_buf_add(items, ",", 1, 4096);
      if (!r) r = ch_buf_add(items, a->out.p, a->out.len, 4096);
    }
    if (!r && workers->len) r = ch_buf_add(workers, ",", 1, 4096);
    if (!r) r = add(workers, "{\"worker\":%d,\"process\":%d,\"pid\":%d,\"answered\":%s", id,
                    ch_opts.process, (int)getpid(), a->answered ? "true" : "false");
    if (!r && a->answered && ask->op == CH_DEBUG_PROFILE)
      r = a->result >= 0 ? add(workers, ",\"samples\":%d", a->result)
                         : add(workers, ",\"error\":\"%s\"", strerror(-a->result));
    if (!r) r = ch_buf_add(workers, "}", 1, 4096);
  }
  return r;
}

/* One profile at a time in this process: its workers have one table each. */
static _Atomic int profiling;

/* Yields. This process's part of ask. */
static int run_local(const struct ch_debug_ask *ask, struct ch_buf *items, struct ch_buf *workers)
{
  int err = 0, r;
  if (ask->op == CH_DEBUG_TASKS) {
    struct gather *g = gather(PHASE_TASKS, ask, TASKS_WAIT_MS, &err);
    if (!g) return -ENOMEM;
    r = collect(g, ask, items, workers);
    unref(g);
    return err ? err : r;
  }
  /* What each worker said to the start comes again in the stop's answer
  ** (a worker that refused has no profile to stop: "error"). */
  struct ch_buf started = { 0 };
  r = ch_debug_profile_start(ask->hz, ask->by_route, &started);
  ch_buf_free(&started);
  if (r < 0) return r;
  ch_sleep_ms(ask->ms);   /* cancelled or not, the timers are stopped next */
  return ch_debug_profile_stop(items, workers);
}

int ch_debug_profile_start(int hz, int by_route, struct ch_buf *workers)
{
  int expected = 0, err;
  if (!atomic_compare_exchange_strong(&profiling, &expected, 1)) return -EBUSY;
  struct ch_debug_ask ask = { .op = CH_DEBUG_PROFILE, .hz = hz, .by_route = by_route };
  struct gather *g = gather(PHASE_PROF_START, &ask, TASKS_WAIT_MS, &err);
  if (!g) {
    atomic_store(&profiling, 0);
    return -ENOMEM;
  }
  int r = collect(g, &ask, NULL, workers);
  unref(g);
  return r < 0 ? r : 0;
}

int ch_debug_profile_stop(struct ch_buf *items, struct ch_buf *workers)
{
  int err;
  if (!atomic_load(&profiling)) return -ESRCH;
  struct ch_debug_ask ask = { .op = CH_DEBUG_PROFILE };
  struct gather *g = gather(PHASE_PROF_STOP, &ask, PROFILE_SLACK_MS, &err);
  atomic_store(&profiling, 0);
  if (!g) return -ENOMEM;
  int r = collect(g, &ask, items, workers);
  unref(g);
  return r < 0 ? r : 0;
}

/* -- Worker processes ----------------------------------------------------- */

struct mailbox {
  _Alignas(64) pthread_mutex_t lock;  /* robust, process-shared; held only
                                ** to copy, never across a yield */
  uint64_t asked;               /* the ask's number (0: none yet) */
  struct ch_debug_ask ask;
  uint64_t answered;            /* the number of the ask answered last */
  uint32_t items_len;           /* in data, then the workers' part */
  uint32_t workers_len;
  uint8_t cut;                  /* the answer was cut short to fit */
  char data[MAILBOX_DATA];
};

struct shared {
  _Atomic int owner;            /* pid of the process asking now; 0: none */
  _Atomic uint64_t seq;         /* the last ask's number */
};

static struct shared *shared;
static struct mailbox *boxes;   /* one per process index */
static int nboxes;
static int *ask_fds;            /* per process index: its eventfd */

/* In a worker process, on its first worker's thread. */
static struct ch_watch watch;   /* not on a coroutine stack (copy mode) */
static int answering, asked_again;

int ch_debug_procs_create(int processes)
{
  if (processes < 2) return 0;
  size_t size = sizeof(struct shared) + 64 + (size_t)processes * sizeof(struct mailbox);
  /* NORESERVE: a mailbox costs the pages an answer writes. */
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return -errno;
  int *fds = calloc((size_t)processes, sizeof *fds);
  if (!fds) {
    munmap(p, size);
    return -ENOMEM;
  }
  for (int i = 0; i < processes; i++) {
    fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fds[i] < 0) {
      int e = -errno;
      while (i-- > 0) close(fds[i]);
      free(fds);
      munmap(p, size);
      return e;
    }
  }
  shared = p;
  boxes = (struct mailbox *)((char *)p + 64);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int i = 0; i < processes; i++) pthread_mutex_init(&boxes[i].lock, &a);
  pthread_mutexattr_destroy(&a);
  nboxes = processes;
  ask_fds = fds;
  return 0;
}

static void lock(struct mailbox *b)
{
  /* A holder that died mid-copy left at most a torn answer. */
  if (pthread_mutex_lock(&b->lock) == EOWNERDEAD) pthread_mutex_consistent(&b->lock);
}

/* Gives back the pages an answer took, once it was read. */
static void forget(struct mailbox *b, size_t len)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)b->data + page - 1) & ~(page - 1);
  uintptr_t hi = ((uintptr_t)b->data + len) & ~(page - 1);
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_REMOVE);
}

/* A coroutine of the first worker: answers this process's mailbox, again
** while asks came in meanwhile. */
static void answer(void *arg)
{
  (void)arg;
  struct mailbox *b = &boxes[ch_opts.process];
  do {
    asked_again = 0;
    lock(b);
    struct ch_debug_ask ask = b->ask;
    uint64_t seq = b->asked;
    pthread_mutex_unlock(&b->lock);
    if (!seq) continue;
    struct ch_buf items = { 0 }, workers = { 0 };
    int r = run_local(&ask, &items, &workers);
    if (r < 0 && r != -ENOMEM)
      add(&workers, "%s{\"process\":%d,\"pid\":%d,\"answered\":false,\"error\":\"%s\"}",
          workers.len ? "," : "", ch_opts.process, (int)getpid(), strerror(-r));
    size_t wl = workers.len < MAILBOX_DATA / 2 ? workers.len : 0;
    size_t il = items.len;
    uint8_t cut = 0;
    if (il > MAILBOX_DATA - wl) {   /* cut at a whole item (a line, a task) */
      il = MAILBOX_DATA - wl;
      while (il > 0 && items.p[il - 1] != '\n' && !(items.p[il - 1] == '}' && il < items.len && items.p[il] == ','))
        il--;
      cut = 1;
    }
    lock(b);
    if (il) memcpy(b->data, items.p, il);
    if (wl) memcpy(b->data + il, workers.p, wl);
    b->items_len = (uint32_t)il;
    b->workers_len = (uint32_t)wl;
    b->cut = cut;
    b->answered = seq;
    pthread_mutex_unlock(&b->lock);
    ch_buf_free(&items);
    ch_buf_free(&workers);
  } while (asked_again);
  answering = 0;
}

static void on_ask(struct ch_watch *w, int revents)
{
  (void)revents;
  int fd = ask_fds[ch_opts.process], asked = 0;
  uint64_t v;
  /* Raw reads: the hooks stay out of a watch callback. */
  while (syscall(SYS_read, fd, &v, sizeof v) == (long)sizeof v) asked = 1;
  if (asked) {
    if (answering) asked_again = 1;
    else if (ch_spawn(answer, NULL) > 0) answering = 1;
  }
  ch_watch_fd(w, fd, POLLIN, on_ask);
}

void ch_debug_worker_start(struct ch_worker *w)
{
  if (!boxes || w->id != ch_opts.process * ch_opts.threads) return;
  ch_watch_fd(&watch, ask_fds[ch_opts.process], POLLIN, on_ask);
}

void ch_debug_worker_stop(struct ch_worker *w)
{
  if (ch_profile_running()) {   /* its asker gave up on it */
    struct ch_buf drop = { 0 };
    ch_profile_stop(w, &drop);
    ch_buf_free(&drop);
  }
  if (!boxes || w->id != ch_opts.process * ch_opts.threads) return;
  ch_unwatch_fd(&watch);
}

/* Takes the mailboxes for one ask; 0, or -EBUSY while another process
** (or task) asks. An owner that died leaves them to the next. */
static int claim(void)
{
  int me = (int)getpid(), owner = 0;
  if (atomic_compare_exchange_strong(&shared->owner, &owner, me)) return 0;
  if (owner != me && kill(owner, 0) < 0 && errno == ESRCH &&
      atomic_compare_exchange_strong(&shared->owner, &owner, me))
    return 0;
  return -EBUSY;
}

/* Yields. Asks the other processes, does this one's part, waits for
** theirs. */
static int run_procs(const struct ch_debug_ask *ask, struct ch_buf *items, struct ch_buf *workers)
{
  /* A dump takes milliseconds: another waits for it, for a while. */
  uint64_t give_up = ch_now_ns() + (uint64_t)TASKS_WAIT_MS * 1000000u;
  int r;
  while ((r = claim()) < 0) {
    if (ch_now_ns() >= give_up || ch_sleep_ms(POLL_MS) < 0) return r;
  }
  uint64_t seq = atomic_fetch_add(&shared->seq, 1) + 1;
  for (int p = 0; p < nboxes; p++) {
    if (p == ch_opts.process) continue;
    lock(&boxes[p]);
    boxes[p].ask = *ask;
    boxes[p].asked = seq;
    pthread_mutex_unlock(&boxes[p].lock);
    uint64_t one = 1;
    long w = syscall(SYS_write, ask_fds[p], &one, sizeof one);
    (void)w;
  }
  uint64_t deadline = ch_now_ns() +
    (uint64_t)(ask->op == CH_DEBUG_PROFILE ? ask->ms + PROFILE_SLACK_MS + TASKS_WAIT_MS : TASKS_WAIT_MS) * 1000000u;
  r = run_local(ask, items, workers);
  /* The others' answers: polled, as stats_procs.c's are. */
  for (;;) {
    int missing = 0;
    for (int p = 0; p < nboxes; p++) {
      if (p == ch_opts.process) continue;
      lock(&boxes[p]);
      if (boxes[p].answered != seq) missing++;
      pthread_mutex_unlock(&boxes[p].lock);
    }
    if (!missing || ch_now_ns() >= deadline || r == -ECANCELED) break;
    if (ch_sleep_ms(POLL_MS) < 0) break;
  }
  int json = ask->op == CH_DEBUG_TASKS && !ask->text;
  for (int p = 0; p < nboxes && r >= 0; p++) {
    if (p == ch_opts.process) continue;
    struct mailbox *b = &boxes[p];
    lock(b);
    if (b->answered == seq) {
      if (b->items_len) {
        if (json && items->len) r = ch_buf_add(items, ",", 1, 4096);
        if (r >= 0) r = ch_buf_add(items, b->data, b->items_len, 4096);
      }
      if (r >= 0 && b->workers_len) {
        if (workers->len) r = ch_buf_add(workers, ",", 1, 4096);
        if (r >= 0) r = ch_buf_add(workers, b->data + b->items_len, b->workers_len, 4096);
      }
      if (r >= 0 && b->cut)
        r = add(workers, ",{\"process\":%d,\"cut\":true}", p);
      forget(b, (size_t)b->items_len + b->workers_len);
    } else {
      r = add(workers, "%s{\"process\":%d,\"answered\":false}", workers->len ? "," : "", p);
    }
    pthread_mutex_unlock(&b->lock);
  }
  atomic_store(&shared->owner, 0);
  return r < 0 ? r : 0;
}

int ch_debug_run(const struct ch_debug_ask *ask, struct ch_buf *items, struct ch_buf *workers)
{
  if (boxes) return run_procs(ask, items, workers);
  int r = run_local(ask, items, workers);
  return r < 0 ? r : 0;
}

/* -- SIGUSR2 -------------------------------------------------------------- */

/* On each worker's loop: its tasks to the log, a line each. */
static void log_job(void *arg)
{
  (void)arg;
  struct ch_worker *w = ch_worker_self;
  struct ch_buf out = { 0 };
  struct ch_inspect_filter f = { NULL, NULL, 0, NULL };
  int n = ch_inspect_tasks(w, &f, 1, &out);
  ch_log(CH_LOG_NOTICE, "SIGUSR2: worker %d has %d task%s%s", w->id, n < 0 ? 0 : n, n == 1 ? "" : "s",
         n < 0 ? " (the dump ran out of memory)" : n ? ":" : "");
  /* Each block starts "task ": one log line each (its traceback on the
  ** lines after). */
  size_t at = 0;
  while (at < out.len) {
    size_t end = at;
    while (end < out.len && !(out.p[end] == '\n' && end + 5 < out.len && memcmp(out.p + end + 1, "task ", 5) == 0))
      end++;
    size_t len = end - at;
    if (len && out.p[at + len - 1] == '\n') len--;
    ch_log(CH_LOG_NOTICE, "%.*s", (int)len, out.p + at);
    at = end + 1;
  }
  ch_buf_free(&out);
}

void ch_debug_log_tasks(void)
{
  ch_workers_post(log_job, NULL);
}
