/*
** Statistics across worker processes. See stats_procs.h.
**
** The region (MAP_SHARED, made by the master before it forks) holds one
** slot per worker process and one ch_stats_worker per worker id, ids being
** distinct across processes. A slot's robust process-shared mutex guards
** its entries and its workers': it is held only to copy them, never across
** a yield, and a process killed while holding it leaves it to the next
** locker (EOWNERDEAD) with at worst one torn answer, which the next
** answer overwrites.
**
** Asking: one eventfd per process index, inherited by every generation of
** that index (a replacement after a crash, a reload's new process). Its
** first worker watches it with ch_watch_fd, which needs no coroutine and
** does not keep the worker running; a watch callback must not yield, so it
** spawns a short coroutine that gathers (ch_stats_gather yields) and
** publishes. During a reload the old and the new process of an index both
** watch the same eventfd: whichever reads the ask answers it.
*/
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stats/stats_procs.h"
#include "vm/task.h"

#define ANSWER_TIMEOUT_MS 200   /* an answer's own wait for its threads */

struct slot {
  _Alignas(64) pthread_mutex_t lock;  /* robust, process-shared */
  pid_t pid;                    /* the last process that answered */
  uint64_t rss_bytes;
  uint64_t taken_ns;            /* when that answer began; 0: never */
};

static struct slot *slots;      /* processes of them, then the workers */
static struct ch_stats_worker *shared_workers;   /* ch_opts.workers */
static int nprocs, nthreads;
static int *ask_fds;            /* per process index: its eventfd */

/* In a worker process, on its first worker's thread only. */
static struct ch_watch watch;   /* not on a coroutine stack (copy mode) */
static int answering;           /* an answer coroutine is running */
static int asked_again;         /* asked while it ran: answer once more */

int ch_stats_procs_create(int processes, int threads)
{
  if (processes < 2) return 0;
  size_t size = (size_t)processes * sizeof(struct slot) +
                (size_t)processes * (size_t)threads * sizeof(struct ch_stats_worker);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -errno;
  int *fds = calloc((size_t)processes, sizeof *fds);
  if (!fds) {
    munmap(p, size);
    return -ENOMEM;
  }
  for (int i = 0; i < processes; i++) {
    /* Non-blocking: the hooks then pass it through, and the answer side
    ** waits with ch_watch_fd, the ask side never waits. */
    fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fds[i] < 0) {
      int e = errno;
      while (i-- > 0) close(fds[i]);
      free(fds);
      munmap(p, size);
      return -e;
    }
  }
  struct slot *s = p;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int i = 0; i < processes; i++) pthread_mutex_init(&s[i].lock, &a);
  pthread_mutexattr_destroy(&a);
  slots = s;
  shared_workers = (struct ch_stats_worker *)(s + processes);
  nprocs = processes;
  nthreads = threads;
  ask_fds = fds;
  return 0;
}

int ch_stats_procs_active(void)
{
  return slots != NULL;
}

static void lock(struct slot *s)
{
  /* A holder that died mid-copy left at most a torn answer: usable. */
  if (pthread_mutex_lock(&s->lock) == EOWNERDEAD) pthread_mutex_consistent(&s->lock);
}

uint64_t ch_stats_rss_bytes(void)
{
  FILE *f = fopen("/proc/self/statm", "re");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = fscanf(f, "%lu %lu", &size, &resident);
  fclose(f);
  return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* -- Answering ------------------------------------------------------------ */

/* Copies this process's workers (out of all, indexed by id) into its slot. */
static void publish(const struct ch_stats_worker *all, uint64_t taken_ns)
{
  int p = ch_opts.process;
  struct slot *s = &slots[p];
  uint64_t rss = ch_stats_rss_bytes();
  lock(s);
  memcpy(&shared_workers[p * nthreads], &all[p * nthreads], (size_t)nthreads * sizeof *all);
  s->pid = getpid();
  s->rss_bytes = rss;
  s->taken_ns = taken_ns;
  pthread_mutex_unlock(&s->lock);
}

/* A coroutine: gathers this process's workers and publishes them, again
** while asks came in meanwhile. */
static void answer(void *arg)
{
  (void)arg;
  struct ch_stats_worker *all = calloc((size_t)ch_opts.workers, sizeof *all);
  if (all) {
    do {
      asked_again = 0;
      uint64_t taken = ch_now_ns();   /* after the ask was written */
      ch_stats_gather(all, ch_opts.workers, ANSWER_TIMEOUT_MS);
      publish(all, taken);
    } while (asked_again);
    free(all);
  }
  answering = 0;
}

static void on_ask(struct ch_watch *w, int revents)
{
  (void)revents;
  int fd = ask_fds[ch_opts.process], asked = 0;
  uint64_t v;
  /* Raw reads: the hooks stay out of a watch callback. Read to EAGAIN,
  ** as the edge-triggered watch wants. */
  while (syscall(SYS_read, fd, &v, sizeof v) == (long)sizeof v) asked = 1;
  if (asked) {
    if (answering) asked_again = 1;
    else if (ch_spawn(answer, NULL) > 0) answering = 1;
  }
  ch_watch_fd(w, fd, POLLIN, on_ask);   /* -ENOMEM: asks go unanswered */
}

void ch_stats_procs_worker_start(struct ch_worker *w)
{
  if (!slots || w->id != ch_opts.process * nthreads) return;
  ch_watch_fd(&watch, ask_fds[ch_opts.process], POLLIN, on_ask);
}

void ch_stats_procs_worker_stop(struct ch_worker *w)
{
  if (!slots || w->id != ch_opts.process * nthreads) return;
  ch_unwatch_fd(&watch);
}

/* -- Asking --------------------------------------------------------------- */

uint64_t ch_stats_procs_ask(void)
{
  uint64_t asked = ch_now_ns();
  if (!slots) return asked;
  for (int p = 0; p < nprocs; p++) {
    if (p == ch_opts.process) continue;
    uint64_t one = 1;
    long r = syscall(SYS_write, ask_fds[p], &one, sizeof one);   /* EAGAIN only
                                                                 ** at 2^64-2 asks */
    (void)r;
  }
  return asked;
}

void ch_stats_procs_collect(struct ch_stats_worker *out, int n, uint64_t asked_ns,
                            uint64_t deadline_ns, struct ch_stats_proc *procs)
{
  if (!slots) return;
  struct ch_coro *c = ch_current();
  for (;;) {
    int missing = 0;
    for (int p = 0; p < nprocs; p++) {
      if (p == ch_opts.process) continue;
      lock(&slots[p]);
      if (slots[p].taken_ns < asked_ns) missing++;
      pthread_mutex_unlock(&slots[p].lock);
    }
    if (!missing || ch_now_ns() >= deadline_ns) break;
    if (!c || !ch_task_may_park(c) || ch_sleep_ms(1) < 0) break;
  }
  for (int p = 0; p < nprocs; p++) {
    struct ch_stats_proc *pr = &procs[p];
    if (p == ch_opts.process) {
      pr->pid = getpid();
      pr->rss_bytes = ch_stats_rss_bytes();
      pr->taken_ns = asked_ns;
      pr->fresh = 1;
      continue;
    }
    struct slot *s = &slots[p];
    int first = p * nthreads, count = nthreads;
    if (first >= n) count = 0;
    else if (first + count > n) count = n - first;
    lock(s);
    if (count > 0) memcpy(&out[first], &shared_workers[first], (size_t)count * sizeof *out);
    pr->pid = s->pid;
    pr->rss_bytes = s->rss_bytes;
    pr->taken_ns = s->taken_ns;
    pthread_mutex_unlock(&s->lock);
    pr->fresh = pr->taken_ns >= asked_ns;
    /* Gone (died, or drained after a reload with no successor answering
    ** yet): what it published is history, not a running worker. */
    if (!pr->fresh && (!pr->pid || (kill(pr->pid, 0) < 0 && errno == ESRCH)))
      for (int i = 0; i < count; i++) out[first + i].running = 0;
  }
}
