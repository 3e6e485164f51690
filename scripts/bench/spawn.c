/*
** Runtime micro-benchmarks: coroutine life cycle, timers, yield.
**
** Usage:
**   spawn spawn  [TOTAL [BATCH [RUNS]]]   spawn BATCH empty coroutines, ch_run
**                                         them to exit; repeat to TOTAL
**   spawn timers [N [RUNS]]               N timers with random deadlines,
**                                         ch_run until all expired
**   spawn yield  [N [RUNS]]               two coroutines ch_yield N times each
**
** Each prints one machine-readable line with the median over RUNS, e.g.
**   spawn total=1000000 batch=100 runs=5 ns_per_coro=120.5 min=.. max=..
**   timers n=1000000 runs=3 ns_per_timer=310.2 insert_ns=150.1 expire_ns=160.1 wall_ms=...
**   yield n=10000000 runs=5 ns_per_yield=25.1 min=.. max=..
** One untimed warm-up run comes first, so the stack pool and the heap are
** as a long-running server would have them.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#include "cohost.h"

#define MAX_RUNS 101

static uint64_t clock_ns(clockid_t id)
{
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v in place and returns its median. */
static double median(double *v, int n)
{
  qsort(v, n, sizeof v[0], cmp_double);
  return v[n / 2];
}

static void die(const char *what, int err)
{
  fprintf(stderr, "spawn: %s: %s\n", what, strerror(-err));
  exit(1);
}

/* -- Spawn + run + exit -------------------------------------------------- */

static uint64_t ran;  /* coroutines that ran, to check none was lost */

static void empty(void *arg)
{
  (void)arg;
  ran++;
}

/* Spawns and runs total coroutines, batch at a time; returns ns each. */
static double spawn_run(uint64_t total, uint64_t batch)
{
  ran = 0;
  uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
  for (uint64_t done = 0; done < total; done += batch) {
    for (uint64_t i = 0; i < batch; i++) {
      int id = ch_spawn(empty, NULL);
      if (id <= 0)
        die("ch_spawn", id);
    }
    int rc = ch_run();
    if (rc < 0)
      die("ch_run", rc);
  }
  uint64_t t1 = clock_ns(CLOCK_MONOTONIC);
  uint64_t want = (total + batch - 1) / batch * batch;
  if (ran != want) {
    fprintf(stderr, "spawn: %llu coroutines ran, %llu spawned\n",
            (unsigned long long)ran, (unsigned long long)want);
    exit(1);
  }
  return (double)(t1 - t0) / (double)want;
}

static void bench_spawn(uint64_t total, uint64_t batch, int runs)
{
  double ns[MAX_RUNS];
  spawn_run(total / 10 + batch, batch);  /* warm-up: fills the stack pool */
  for (int r = 0; r < runs; r++)
    ns[r] = spawn_run(total, batch);
  double med = median(ns, runs);
  struct ch_stats st;
  memset(&st, 0, sizeof st);
  ch_stats(&st);
  printf("spawn total=%llu batch=%llu runs=%d ns_per_coro=%.1f min=%.1f "
         "max=%.1f stacks_free=%llu\n", (unsigned long long)total,
         (unsigned long long)batch, runs, med, ns[0], ns[runs - 1],
         (unsigned long long)st.stacks_free);
}

/* -- Timers -------------------------------------------------------------- */

#define TIMER_SPREAD_MS 50  /* deadlines uniform in [0, 50] ms */

static struct ch_timer *timers;
static uint64_t fired;
static uint64_t last_when, last_seq;
static int out_of_order;

static void on_timer(struct ch_timer *t)
{
  /* Deadlines must come out sorted, ties in start order. */
  if (t->when_ns < last_when ||
      (t->when_ns == last_when && t->seq < last_seq))
    out_of_order = 1;
  last_when = t->when_ns;
  last_seq = t->seq;
  fired++;
}

/* xorshift64: the deadlines need to be scattered, not good random. */
static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Starts n timers and runs them out. Returns CPU ns per timer for the
** inserts and for the expiries separately. CPU time, not wall time: ch_run
** sleeps in epoll_wait until the later deadlines come, and that idle time
** is not the timer code's cost. */
static void timers_run(uint64_t n, double *insert_ns, double *expire_ns,
                       double *wall_ms)
{
  fired = 0;
  last_when = last_seq = 0;
  out_of_order = 0;
  uint64_t w0 = clock_ns(CLOCK_MONOTONIC);
  uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  for (uint64_t i = 0; i < n; i++) {
    int rc = ch_timer_start(&timers[i], (int64_t)(next_rand() %
                            (TIMER_SPREAD_MS + 1)), on_timer);
    if (rc < 0)
      die("ch_timer_start", rc);
  }
  uint64_t c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  int rc = ch_run();
  if (rc < 0)
    die("ch_run", rc);
  uint64_t c2 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  uint64_t w1 = clock_ns(CLOCK_MONOTONIC);
  if (fired != n || out_of_order) {
    fprintf(stderr, "timers: %llu of %llu fired%s\n", (unsigned long long)fired,
            (unsigned long long)n, out_of_order ? ", out of order" : "");
    exit(1);
  }
  *insert_ns = (double)(c1 - c0) / (double)n;
  *expire_ns = (double)(c2 - c1) / (double)n;
  *wall_ms = (double)(w1 - w0) / 1e6;
}

static void bench_timers(uint64_t n, int runs)
{
  timers = calloc(n, sizeof *timers);
  if (timers == NULL)
    die("calloc", -ENOMEM);
  double ins[MAX_RUNS], exp_[MAX_RUNS], tot[MAX_RUNS], wall[MAX_RUNS];
  double a, b, c;
  timers_run(n, &a, &b, &c);  /* warm-up: grows the heap, faults pages in */
  for (int r = 0; r < runs; r++) {
    timers_run(n, &ins[r], &exp_[r], &wall[r]);
    tot[r] = ins[r] + exp_[r];
  }
  printf("timers n=%llu runs=%d ns_per_timer=%.1f insert_ns=%.1f "
         "expire_ns=%.1f wall_ms=%.0f\n", (unsigned long long)n, runs,
         median(tot, runs), median(ins, runs), median(exp_, runs),
         median(wall, runs));
  free(timers);
}

/* -- Yield ping-pong ----------------------------------------------------- */

static uint64_t yields;

static void yielder(void *arg)
{
  uint64_t n = *(uint64_t *)arg;
  for (uint64_t i = 0; i < n; i++)
    ch_yield();
}

static void bench_yield(uint64_t n, int runs)
{
  double ns[MAX_RUNS];
  for (int r = -1; r < runs; r++) {  /* r = -1 is the warm-up */
    yields = r < 0 ? n / 10 + 1 : n;
    int rc;
    if ((rc = ch_spawn(yielder, &yields)) <= 0 ||
        (rc = ch_spawn(yielder, &yields)) <= 0)
      die("ch_spawn", rc);
    uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
    if ((rc = ch_run()) < 0)
      die("ch_run", rc);
    if (r >= 0)
      ns[r] = (double)(clock_ns(CLOCK_MONOTONIC) - t0) / (2.0 * n);
  }
  double med = median(ns, runs);
  printf("yield n=%llu runs=%d ns_per_yield=%.1f min=%.1f max=%.1f\n",
         (unsigned long long)n, runs, med, ns[0], ns[runs - 1]);
}

/* -- Driver -------------------------------------------------------------- */

static uint64_t arg_u64(int argc, char **argv, int i, uint64_t def)
{
  return argc > i ? strtoull(argv[i], NULL, 10) : def;
}

int main(int argc, char **argv)
{
  const char *what = argc > 1 ? argv[1] : "";
  if (strcmp(what, "spawn") == 0) {
    uint64_t total = arg_u64(argc, argv, 2, 1000000);
    uint64_t batch = arg_u64(argc, argv, 3, 100);
    int runs = (int)arg_u64(argc, argv, 4, 5);
    if (total && batch && runs > 0 && runs <= MAX_RUNS) {
      bench_spawn(total, batch, runs);
      return 0;
    }
  } else if (strcmp(what, "timers") == 0) {
    uint64_t n = arg_u64(argc, argv, 2, 1000000);
    int runs = (int)arg_u64(argc, argv, 3, 3);
    if (n && runs > 0 && runs <= MAX_RUNS) {
      bench_timers(n, runs);
      return 0;
    }
  } else if (strcmp(what, "yield") == 0) {
    uint64_t n = arg_u64(argc, argv, 2, 5000000);
    int runs = (int)arg_u64(argc, argv, 3, 5);
    if (n && runs > 0 && runs <= MAX_RUNS) {
      bench_yield(n, runs);
      return 0;
    }
  }
  fprintf(stderr, "usage: %s spawn [total [batch [runs]]] | timers [n [runs]]"
          " | yield [n [runs]]\n", argv[0]);
  return 2;
}
