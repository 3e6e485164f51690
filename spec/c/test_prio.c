/*
** Tests of the scheduling policy: priority classes (order, FIFO within a
** class, the starvation share, moving a coroutine between classes, the
** per-class stats) and fairness (a coroutine that only yields cannot hold
** back an fd that became ready, or a timer, for more than one batch).
*/
#include <poll.h>

#include "helpers.h"

/* Every test leaves the thread's scheduler with the default fairness
** (runtime/sched.h: no switch limit to speak of, 1 ms). */
static int prio_teardown(void **state) {
  ch_sched_set_fairness(1000000, 1000);
  return th_teardown(state);
}

#define PRIO_TEST(f) cmocka_unit_test_setup_teardown(f, th_setup, prio_teardown)

/* -- Run log: which class ran, in order ------------------------------------ */

static char runlog[4096];
static int runlog_len;

static void log_run(char c) {
  if (runlog_len < (int)sizeof runlog - 1) runlog[runlog_len++] = c;
  runlog[runlog_len] = '\0';
}

static char class_char(void) {
  return "HNL"[ch_coro_priority(ch_current())];
}

static void log_once(void *arg) {
  (void)arg;
  log_run(class_char());
}

/* -- Order ------------------------------------------------------------------ */

static void test_high_runs_before_normal_before_low(void **state) {
  (void)state;
  runlog_len = 0;
  assert_true(ch_spawn_prio(log_once, NULL, CH_PRIO_LOW) > 0);
  assert_true(ch_spawn(log_once, NULL) > 0);
  assert_true(ch_spawn_prio(log_once, NULL, CH_PRIO_HIGH) > 0);
  assert_true(ch_spawn_prio(log_once, NULL, CH_PRIO_NORMAL) > 0);
  th_run();
  assert_string_equal(runlog, "HNNL");
}

static char order[16];
static int order_len;

static void log_name(void *arg) {
  if (order_len < (int)sizeof order - 1) order[order_len++] = (char)(intptr_t)arg;
  order[order_len] = '\0';
}

static void test_a_class_runs_its_coroutines_in_fifo_order(void **state) {
  (void)state;
  order_len = 0;
  for (char c = 'a'; c <= 'e'; c++)
    assert_true(ch_spawn_prio(log_name, (void *)(intptr_t)c, CH_PRIO_HIGH) > 0);
  th_run();
  assert_string_equal(order, "abcde");
}

static void test_spawn_prio_refuses_an_unknown_class(void **state) {
  (void)state;
  assert_int_equal(ch_spawn_prio(log_once, NULL, 3), -EINVAL);
  assert_int_equal(ch_spawn_prio(log_once, NULL, -1), -EINVAL);
  struct ch_stats st;
  assert_int_equal(ch_stats(&st), 0);
  assert_int_equal(st.coros, 0);
}

/* -- Starvation share ------------------------------------------------------ */

static volatile int spinning;

/* Yields. Logs its class on every run until spinning drops. */
static void logging_spinner(void *arg) {
  int max = (int)(intptr_t)arg;
  for (int i = 0; i < max && spinning; i++) {
    log_run(class_char());
    ch_yield();
  }
}

/* Yields. The high spinner that ends the test: when it is done, so are
** the others. */
static void last_high(void *arg) {
  logging_spinner(arg);
  spinning = 0;
}

static int count_in(const char *s, int from, int to, char c) {
  int n = 0;
  for (int i = from; i < to; i++) n += s[i] == c;
  return n;
}

static void test_normal_and_low_each_get_a_run_within_nine_under_high_load(void **state) {
  (void)state;
  runlog_len = 0;
  spinning = 1;
  /* Two high coroutines that never stop being ready would starve the
  ** others under strict priority. */
  assert_true(ch_spawn_prio(logging_spinner, (void *)(intptr_t)10000, CH_PRIO_HIGH) > 0);
  assert_true(ch_spawn_prio(last_high, (void *)(intptr_t)400, CH_PRIO_HIGH) > 0);
  assert_true(ch_spawn_prio(logging_spinner, (void *)(intptr_t)10000, CH_PRIO_NORMAL) > 0);
  assert_true(ch_spawn_prio(logging_spinner, (void *)(intptr_t)10000, CH_PRIO_LOW) > 0);
  th_run();
  int n = runlog_len;
  assert_true(n > 400);
  /* Strict priority first: a fresh contest gives high 7 runs in a row. */
  assert_memory_equal(runlog, "HHHHHHH", 7);
  /* Any 9 runs in a row hold one of each lower class (8 when they do not
  ** come due together, as at the start)... */
  for (int i = 0; i + 9 <= n - 8; i++) {
    if (count_in(runlog, i, i + 9, 'N') < 1 || count_in(runlog, i, i + 9, 'L') < 1)
      fail_msg("no N or L in runs %d..%d: %.9s", i, i + 8, runlog + i);
  }
  /* ... and high keeps the rest: about 6 in 8. */
  int h = count_in(runlog, 0, n, 'H');
  assert_true(h >= n * 6 / 8 - 16);
  assert_true(h <= n * 6 / 8 + 16);
  struct ch_stats st;
  assert_int_equal(ch_stats(&st), 0);
  assert_true(st.prio_runs[CH_PRIO_HIGH] >= (uint64_t)h);
}

static void test_one_high_coroutine_that_keeps_yielding_does_not_starve_normal(void **state) {
  (void)state;
  /* One high coroutine empties its queue at every run and fills it again
  ** at every yield; the guard must count across that. */
  runlog_len = 0;
  spinning = 1;
  assert_true(ch_spawn_prio(logging_spinner, (void *)(intptr_t)100000, CH_PRIO_HIGH) > 0);
  assert_true(ch_spawn_prio(last_high, (void *)(intptr_t)50, CH_PRIO_NORMAL) > 0);
  th_run();
  int n = runlog_len;
  assert_int_equal(count_in(runlog, 0, n, 'N'), 50);
  assert_true(n <= 50 * 8 + 8);
  for (int i = 0; i + 8 <= n - 8; i++)
    if (count_in(runlog, i, i + 8, 'N') < 1)
      fail_msg("no N in runs %d..%d: %.8s", i, i + 7, runlog + i);
}

static void test_low_gets_one_run_in_eight_against_normal(void **state) {
  (void)state;
  runlog_len = 0;
  spinning = 1;
  assert_true(ch_spawn_prio(logging_spinner, (void *)(intptr_t)10000, CH_PRIO_LOW) > 0);
  assert_true(ch_spawn_prio(logging_spinner, (void *)(intptr_t)10000, CH_PRIO_NORMAL) > 0);
  assert_true(ch_spawn_prio(last_high, (void *)(intptr_t)400, CH_PRIO_NORMAL) > 0);
  th_run();
  int n = runlog_len;
  assert_true(n > 400);
  /* With only one lower class waiting, it runs after 7 others, exactly. */
  for (int i = 0; i + 8 <= n - 8; i++)
    if (count_in(runlog, i, i + 8, 'L') < 1)
      fail_msg("no L in runs %d..%d: %.8s", i, i + 7, runlog + i);
  assert_true(count_in(runlog, 0, n, 'N') >= n * 7 / 8 - 8);
}

static void test_stats_count_queued_coroutines_and_runs_by_class(void **state) {
  (void)state;
  struct ch_stats before, st;
  assert_int_equal(ch_stats(&before), 0);
  for (int i = 0; i < 3; i++) assert_true(ch_spawn(log_once, NULL) > 0);
  assert_true(ch_spawn_prio(log_once, NULL, CH_PRIO_HIGH) > 0);
  for (int i = 0; i < 2; i++) assert_true(ch_spawn_prio(log_once, NULL, CH_PRIO_LOW) > 0);
  assert_int_equal(ch_stats(&st), 0);
  assert_int_equal(st.prio_ready[CH_PRIO_HIGH], 1);
  assert_int_equal(st.prio_ready[CH_PRIO_NORMAL], 3);
  assert_int_equal(st.prio_ready[CH_PRIO_LOW], 2);
  assert_int_equal(st.ready, 6);
  th_run();
  assert_int_equal(ch_stats(&st), 0);
  assert_int_equal(st.ready, 0);
  assert_int_equal(st.prio_runs[CH_PRIO_HIGH] - before.prio_runs[CH_PRIO_HIGH], 1);
  assert_int_equal(st.prio_runs[CH_PRIO_NORMAL] - before.prio_runs[CH_PRIO_NORMAL], 3);
  assert_int_equal(st.prio_runs[CH_PRIO_LOW] - before.prio_runs[CH_PRIO_LOW], 2);
}

/* -- Moving between classes ------------------------------------------------- */

struct mover {
  struct ch_coro *target;   /* a queued coroutine to move */
  int to;
};

static void parked_logger(void *arg) {
  struct ch_coro **slot = arg;
  *slot = ch_current();
  ch_park(-1);                 /* until the mover wakes it */
  log_name((void *)(intptr_t)"HNL"[ch_coro_priority(ch_current())]);
}

static struct ch_coro *pl[3];

/* Wakes the three parked loggers (normal, queued in order 0 1 2), then
** moves 2 to high and 0 to low while they are queued. */
static void mover_main(void *arg) {
  (void)arg;
  for (int i = 0; i < 3; i++) CHECK_EQ(ch_unpark(pl[i], 0), 0);
  struct ch_stats st;
  CHECK_EQ(ch_stats(&st), 0);
  CHECK_EQ(st.prio_ready[CH_PRIO_NORMAL], 3);
  CHECK_EQ(ch_coro_set_priority(pl[2], CH_PRIO_HIGH), 0);
  CHECK_EQ(ch_coro_set_priority(pl[0], CH_PRIO_LOW), 0);
  CHECK_EQ(ch_coro_set_priority(pl[1], 7), -EINVAL);
  CHECK_EQ(ch_stats(&st), 0);
  CHECK_EQ(st.prio_ready[CH_PRIO_HIGH], 1);
  CHECK_EQ(st.prio_ready[CH_PRIO_NORMAL], 1);
  CHECK_EQ(st.prio_ready[CH_PRIO_LOW], 1);
  CHECK_EQ(st.ready, 3);
}

static void test_set_priority_moves_queued_coroutines_between_classes(void **state) {
  (void)state;
  order_len = 0;
  for (int i = 0; i < 3; i++) assert_true(ch_spawn(parked_logger, &pl[i]) > 0);
  assert_true(ch_spawn(mover_main, NULL) > 0);
  th_run();
  assert_string_equal(order, "HNL");
}

/* Yields. Drops itself to low, yields, and logs; a normal coroutine
** spawned after it logs first. */
static void demoting(void *arg) {
  (void)arg;
  CHECK_EQ(ch_coro_set_priority(ch_current(), CH_PRIO_LOW), 0);
  CHECK_EQ(ch_coro_priority(ch_current()), CH_PRIO_LOW);
  ch_yield();
  log_name((void *)(intptr_t)'d');
}

static void test_a_coroutine_that_lowers_its_class_yields_to_the_others(void **state) {
  (void)state;
  order_len = 0;
  assert_true(ch_spawn(demoting, NULL) > 0);
  assert_true(ch_spawn(log_name, (void *)(intptr_t)'n') > 0);
  th_run();
  assert_string_equal(order, "nd");
}

/* -- Fairness --------------------------------------------------------------- */

struct fair {
  int pipe[2];
  int spins;                /* spinner runs so far */
  int spins_at_write;       /* when the pipe was written */
  int spins_at_wake;        /* when the reader woke; -1 until then */
  int slice_us;             /* busy time per spinner run */
  int max_spins;            /* bound, so ch_run always ends */
  int write_after;          /* spinner run at which it writes the pipe */
  double write_ms, wake_ms; /* th_now_ms() at the write and the wakeup */
};

static void busy_us(int us) {
  double end = th_now_ms() + us / 1000.0;
  while (th_now_ms() < end) {}
}

/* Yields. Spins, writing the pipe at write_after, until the reader woke or
** max_spins. */
static void fair_spinner(void *arg) {
  struct fair *f = arg;
  for (f->spins = 0; f->spins < f->max_spins && f->spins_at_wake < 0; f->spins++) {
    if (f->spins == f->write_after) {
      f->spins_at_write = f->spins;
      f->write_ms = th_now_ms();
      CHECK_EQ(write(f->pipe[1], "x", 1), 1);
    }
    if (f->slice_us) busy_us(f->slice_us);
    ch_yield();
  }
}

/* Yields. Waits for the pipe, notes the spinner's count. */
static void fair_reader(void *arg) {
  struct fair *f = arg;
  int r = ch_io_wait(f->pipe[0], POLLIN, 10000);
  CHECK(r > 0);
  f->spins_at_wake = f->spins;
  f->wake_ms = th_now_ms();
}

static void fair_run(struct fair *f) {
  assert_int_equal(pipe2(f->pipe, O_NONBLOCK | O_CLOEXEC), 0);
  f->spins_at_wake = -1;
  f->spins_at_write = -1;
  assert_true(ch_spawn(fair_reader, f) > 0);
  assert_true(ch_spawn(fair_spinner, f) > 0);
  th_run();
  close(f->pipe[0]);
  close(f->pipe[1]);
  assert_true(f->spins_at_write >= 0);
}

static void test_a_yielding_coroutine_lets_a_ready_fd_in_within_the_switch_budget(void **state) {
  (void)state;
  assert_int_equal(ch_sched_set_fairness(8, 0), 0);
  struct fair f = { .slice_us = 0, .max_spins = 100000, .write_after = 100 };
  fair_run(&f);
  /* The loop polls after at most 8 switches; the reader then joins the
  ** queue behind the spinner, one more run. */
  assert_true(f.spins_at_wake >= 0);
  assert_true(f.spins_at_wake - f.spins_at_write <= 8 + 2);
}

static void test_a_yielding_coroutine_lets_a_ready_fd_in_within_the_time_budget(void **state) {
  (void)state;
  /* No switch budget to speak of: only the 2 ms limit ends a batch. Each
  ** spinner run takes 0.5 ms, so the reader wakes within ~4 runs (a few
  ** more before the tick clock is calibrated, when the budget errs short;
  ** 100 is the generous bound for a loaded machine). */
  assert_int_equal(ch_sched_set_fairness(1000000, 2000), 0);
  struct fair f = { .slice_us = 500, .max_spins = 400, .write_after = 20 };
  fair_run(&f);
  assert_true(f.spins_at_wake >= 0);
  assert_true(f.spins_at_wake - f.spins_at_write <= 100);
}

static void test_by_default_a_coroutine_yielding_in_a_loop_lets_a_ready_fd_in_within_the_time_budget(void **state) {
  (void)state;
  /* Default fairness: cheap yields (tens of ns), so only the 1 ms budget
  ** ends the spinner's batch; the reader must still be served. 250 ms is
  ** the generous bound for a loaded machine; without the budget the
  ** spinner would run its 50 million yields (seconds) first. */
  struct fair f = { .slice_us = 0, .max_spins = 50000000, .write_after = 100 };
  fair_run(&f);
  assert_true(f.spins_at_wake >= 0);
  assert_true(f.wake_ms - f.write_ms < 250);
}

/* Counts the loop's turns: a 0 ms timer expires once per turn and arms
** itself again until the spinner is done. */
struct turns {
  struct ch_timer t;        /* first: the callback casts back */
  int turns;                /* loop turns seen */
  int done;                 /* set by the spinner when it ends */
};

static void count_turn(struct ch_timer *t) {
  struct turns *x = (struct turns *)(void *)t;
  if (x->done) return;
  x->turns++;
  CHECK_EQ(ch_timer_start(t, 0, count_turn), 0);
}

#define CHEAP_YIELDS 200000

/* Yields. CHEAP_YIELDS yields with no work between them. */
static void cheap_spinner(void *arg) {
  struct turns *x = arg;
  for (int i = 0; i < CHEAP_YIELDS; i++) ch_yield();
  x->done = 1;
}

static void test_by_default_cheap_yields_are_not_cut_into_batches_of_a_fixed_count(void **state) {
  (void)state;
  /* The loop polls when the queue runs dry or the time budget is spent,
  ** not every 64 switches (the old rule, which cut a busy queue into many
  ** small epoll_waits): 200,000 yields take a few ms here, so a few turns.
  ** The bound, batches of 256 switches on average, allows 780 ms of wall
  ** time (a loaded machine); a fixed count of 64 fails it 4x over. */
  struct turns x = { .turns = 0, .done = 0 };
  memset(&x.t, 0, sizeof x.t);
  assert_int_equal(ch_timer_start(&x.t, 0, count_turn), 0);
  assert_true(ch_spawn(cheap_spinner, &x) > 0);
  th_run();
  assert_true(x.done);
  assert_true(x.turns >= 1);
  assert_true((long)x.turns * 256 < CHEAP_YIELDS);
}

static void test_without_a_time_budget_a_slow_batch_holds_the_fd_back(void **state) {
  (void)state;
  /* The control for the test above: with the time limit off, nothing
  ** ends the batch before max_spins, and the reader waits. */
  assert_int_equal(ch_sched_set_fairness(1000000, 0), 0);
  struct fair f = { .slice_us = 50, .max_spins = 300, .write_after = 20 };
  fair_run(&f);
  assert_true(f.spins_at_wake < 0 || f.spins_at_wake - f.spins_at_write > 200);
}

struct late {
  double due_ms;            /* when the sleeper should wake */
  double late_ms;           /* how late it woke; -1 until then */
  volatile int done;
};

static void late_sleeper(void *arg) {
  struct late *l = arg;
  l->due_ms = th_now_ms() + 10;
  ch_sleep_ms(10);
  l->late_ms = th_now_ms() - l->due_ms;
  l->done = 1;
}

/* Yields. Runs 0.5 ms between yields until the sleeper woke (1 s at most). */
static void slow_spinner(void *arg) {
  struct late *l = arg;
  for (int i = 0; i < 2000 && !l->done; i++) {
    busy_us(500);
    ch_yield();
  }
}

static void test_a_timer_fires_within_a_few_ms_despite_a_yielding_coroutine(void **state) {
  (void)state;
  /* Default fairness: 64 switches of 0.5 ms would be 32 ms; the 1 ms limit
  ** bounds the delay to about a slice or two. 250 ms is the generous bound
  ** (a preempted process); without any limit the timer would wait out the
  ** spinner's whole second. */
  struct late l = { 0, -1, 0 };
  assert_true(ch_spawn(late_sleeper, &l) > 0);
  assert_true(ch_spawn(slow_spinner, &l) > 0);
  th_run();
  assert_true(l.late_ms >= 0);
  assert_true(l.late_ms < 250);
}

static void test_set_fairness_refuses_zero_switches_and_huge_values(void **state) {
  (void)state;
  assert_int_equal(ch_sched_set_fairness(0, 1000), -EINVAL);
  assert_int_equal(ch_sched_set_fairness(2000000, 1000), -EINVAL);
  assert_int_equal(ch_sched_set_fairness(64, 20000000), -EINVAL);
  assert_int_equal(ch_sched_set_fairness(1, 0), 0);
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    PRIO_TEST(test_high_runs_before_normal_before_low),
    PRIO_TEST(test_a_class_runs_its_coroutines_in_fifo_order),
    PRIO_TEST(test_spawn_prio_refuses_an_unknown_class),
    PRIO_TEST(test_normal_and_low_each_get_a_run_within_nine_under_high_load),
    PRIO_TEST(test_one_high_coroutine_that_keeps_yielding_does_not_starve_normal),
    PRIO_TEST(test_low_gets_one_run_in_eight_against_normal),
    PRIO_TEST(test_stats_count_queued_coroutines_and_runs_by_class),
    PRIO_TEST(test_set_priority_moves_queued_coroutines_between_classes),
    PRIO_TEST(test_a_coroutine_that_lowers_its_class_yields_to_the_others),
    PRIO_TEST(test_a_yielding_coroutine_lets_a_ready_fd_in_within_the_switch_budget),
    PRIO_TEST(test_a_yielding_coroutine_lets_a_ready_fd_in_within_the_time_budget),
    PRIO_TEST(test_by_default_a_coroutine_yielding_in_a_loop_lets_a_ready_fd_in_within_the_time_budget),
    PRIO_TEST(test_by_default_cheap_yields_are_not_cut_into_batches_of_a_fixed_count),
    PRIO_TEST(test_without_a_time_budget_a_slow_batch_holds_the_fd_back),
    PRIO_TEST(test_a_timer_fires_within_a_few_ms_despite_a_yielding_coroutine),
    PRIO_TEST(test_set_fairness_refuses_zero_switches_and_huge_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
