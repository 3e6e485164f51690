/*
** The thread pool: POOL_THREADS threads started on the first call,
** sharing one FIFO of jobs under a mutex. A job lives on the heap, not on
** the caller's stack: in COPY stack mode that stack is saved away and the
** shared stack reused while the caller is parked, so neither the worker
** nor finish (run by the caller's loop) may touch it. The worker hands the
** job back to the caller's scheduler with ch_post, which unparks it. Pool
** threads never run coroutines, so hooks pass straight through there.
*/
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "cohost.h"
#include "coro.h"
#include "libc.h"
#include "sched.h"

struct job {
  void (*fn)(void *);
  void *arg;
  struct ch_sched *sched;   /* the caller's scheduler */
  struct ch_coro *coro;     /* the parked caller */
  int done;                 /* set on the caller's thread by finish */
  struct job *next;
};

#define POOL_THREADS 4   /* enough for DNS and fsync; not a CPU pool */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t more = PTHREAD_COND_INITIALIZER;
static struct job *head, *tail;
static int started;

static void finish(void *p)
{
  struct job *j = p;
  j->done = 1;
  ch_unpark(j->coro, 0);
}

static void *worker(void *unused)
{
  (void)unused;
  for (;;) {
    pthread_mutex_lock(&lock);
    while (!head) pthread_cond_wait(&more, &lock);
    struct job *j = head;
    head = j->next;
    if (!head) tail = NULL;
    pthread_mutex_unlock(&lock);
    j->fn(j->arg);
    /* ch_post can only fail for memory; retrying beats losing the caller. */
    while (ch_post(j->sched, finish, j) < 0) {
      struct timespec ts = { 0, 1000000 };
      ch_libc.nanosleep(&ts, NULL);   /* the real one: this is no coroutine */
    }
  }
  return NULL;
}

/* The CPUs the process could use when it started: pool threads are
** created lazily by whichever scheduler thread first needs one, and must
** not inherit that thread's pinning (cohost --cpu-affinity). */
static cpu_set_t start_cpus;
static int have_start_cpus;

__attribute__((constructor)) static void remember_cpus(void)
{
  have_start_cpus = sched_getaffinity(0, sizeof start_cpus, &start_cpus) == 0;
}

static int start(void)
{
  if (started) return 0;
  /* Workers must not take signals meant for the schedulers' threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int r = 0;
  for (int i = 0; i < POOL_THREADS; i++) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    if (have_start_cpus) pthread_attr_setaffinity_np(&a, sizeof start_cpus, &start_cpus);
    if (pthread_create(&t, &a, worker, NULL) != 0) r = -EAGAIN;
    pthread_attr_destroy(&a);
    if (r == 0) started++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return started ? 0 : r;
}

int ch_pool_call(void (*fn)(void *), void *arg)
{
  struct ch_coro *self = ch_current();
  if (!self) { fn(arg); return 0; }
  /* COPY mode: a worker writing through an arg on the shared stack would
  ** write into whichever coroutine runs there meanwhile. Run such a call
  ** here instead: it blocks the thread, but is correct. (Pointers inside a
  ** heap arg cannot be checked; docs/stacks.md.) */
  if (self->shared) {
    const char *a = arg, *lo = self->stack.base;
    if (a >= lo && a < lo + self->stack.size) { fn(arg); return 0; }
  }
  /* About 20 ns of malloc next to a thread hop of several microseconds. */
  struct job *j = malloc(sizeof *j);
  if (!j) return -ENOMEM;
  *j = (struct job){ fn, arg, self->sched, self, 0, NULL };
  pthread_mutex_lock(&lock);
  int r = start();
  if (r < 0) { pthread_mutex_unlock(&lock); free(j); return r; }
  if (tail) tail->next = j;
  else head = j;
  tail = j;
  pthread_cond_signal(&more);
  pthread_mutex_unlock(&lock);
  /* Uncancellable: fn may be writing to what arg points to until finish
  ** runs, and finish unparks this very coroutine. */
  while (!j->done) {
    ch_coro_note_wait(self, CH_WAIT_POOL, -1);
    ch_sched_park(0, 1, CH_CORO_WAITING);
  }
  free(j);
  return 0;
}
