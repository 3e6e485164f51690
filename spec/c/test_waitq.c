/*
** Tests of wait queues (struct ch_waitq): FIFO wakes, wake-all, timeouts,
** cancellation, waiters that were woken otherwise before a wake reached
** them, a waiter gone with its coroutine, wakes from a timer callback,
** waits on several queues at once, and COPY stack mode (the node is not on the coroutine's stack).
*/
#include "helpers.h"

/* In COPY mode the queue must not be on a coroutine's stack: a global. */
static struct ch_waitq q;

/* What each waiter saw, in the order they returned. */
struct waiter {
  int64_t timeout_ms;       /* its wait's */
  int rc;                   /* what ch_waitq_wait returned */
  int done;                 /* it returned */
  int id;                   /* its coroutine id */
  struct ch_coro *coro;     /* its coroutine, while it runs */
};

static int wake_order[16];
static int nwoken;

static void waiter_main(void *arg) {
  struct waiter *w = arg;
  w->coro = ch_current();
  w->id = ch_self();
  w->rc = ch_waitq_wait(&q, w->timeout_ms);
  w->done = 1;
  w->coro = NULL;
  if (nwoken < 16) wake_order[nwoken++] = w->id;
}

static void spawn_waiters(struct waiter *w, int n, int64_t timeout_ms) {
  for (int i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].timeout_ms = timeout_ms;
    w[i].rc = 1;
    assert_true(ch_spawn(waiter_main, &w[i]) > 0);
  }
}

static void reset(void) {
  memset(&q, 0, sizeof q);
  nwoken = 0;
}

/* -- Waking ----------------------------------------------------------------- */

static struct waiter fifo[3];
static int fifo_wakes[4];

/* Runs after the three waiters parked (spawned after them, same class). */
static void wake_each(void *arg) {
  (void)arg;
  CHECK(!ch_waitq_empty(&q));
  for (int i = 0; i < 4; i++) {
    fifo_wakes[i] = ch_waitq_wake_one(&q);
    ch_yield();   /* the woken one runs and logs before the next wake */
  }
  CHECK(ch_waitq_empty(&q));
}

static void test_wake_one_wakes_the_longest_waiter_first(void **state) {
  (void)state;
  reset();
  spawn_waiters(fifo, 3, -1);
  assert_true(ch_spawn(wake_each, NULL) > 0);
  th_run();
  assert_int_equal(nwoken, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(fifo[i].rc, 0);
    assert_int_equal(wake_order[i], fifo[i].id);
  }
  assert_int_equal(fifo_wakes[0], 1);
  assert_int_equal(fifo_wakes[1], 1);
  assert_int_equal(fifo_wakes[2], 1);
  assert_int_equal(fifo_wakes[3], 0);   /* nobody left */
}

static struct waiter all[5];
static int all_woken;

static void wake_everyone(void *arg) {
  (void)arg;
  all_woken = ch_waitq_wake_all(&q);
  CHECK(ch_waitq_empty(&q));
  for (int i = 0; i < 5; i++) CHECK(!all[i].done);   /* they run later */
}

static void test_wake_all_wakes_every_waiter_in_order(void **state) {
  (void)state;
  reset();
  spawn_waiters(all, 5, -1);
  assert_true(ch_spawn(wake_everyone, NULL) > 0);
  th_run();
  assert_int_equal(all_woken, 5);
  assert_int_equal(nwoken, 5);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(all[i].rc, 0);
    assert_int_equal(wake_order[i], all[i].id);
  }
}

static int empty_one, empty_all, outside_rc;

static void wake_nobody(void *arg) {
  (void)arg;
  empty_one = ch_waitq_wake_one(&q);
  empty_all = ch_waitq_wake_all(&q);
}

static void test_a_wake_with_no_waiter_does_nothing(void **state) {
  (void)state;
  reset();
  empty_one = empty_all = -1;
  assert_true(ch_waitq_empty(&q));
  assert_int_equal(ch_waitq_wake_one(&q), 0);   /* outside a coroutine too */
  assert_int_equal(ch_waitq_wake_all(&q), 0);
  outside_rc = ch_waitq_wait(&q, 10);
  assert_int_equal(outside_rc, -EINVAL);
  assert_true(ch_waitq_empty(&q));
  assert_true(ch_spawn(wake_nobody, NULL) > 0);
  th_run();
  assert_int_equal(empty_one, 0);
  assert_int_equal(empty_all, 0);
  /* A wake is not remembered: a later waiter still waits. */
  struct waiter w;
  spawn_waiters(&w, 1, 30);
  th_run();
  assert_int_equal(w.rc, -ETIMEDOUT);
}

/* -- Timeouts ---------------------------------------------------------------- */

static struct waiter timed[2];
static int after_timeout_wake;

static void wake_after_timeout(void *arg) {
  (void)arg;
  while (!timed[0].done) ch_sleep_ms(5);   /* a state, not a fixed sleep */
  after_timeout_wake = ch_waitq_wake_one(&q);   /* reaches the second */
}

static void test_a_timed_out_waiter_leaves_the_queue(void **state) {
  (void)state;
  reset();
  spawn_waiters(&timed[0], 1, 20);
  spawn_waiters(&timed[1], 1, -1);
  assert_true(ch_spawn(wake_after_timeout, NULL) > 0);
  double t0 = th_now_ms();
  th_run();
  double ms = th_now_ms() - t0;
  assert_int_equal(timed[0].rc, -ETIMEDOUT);
  assert_int_equal(after_timeout_wake, 1);
  assert_int_equal(timed[1].rc, 0);
  assert_true(ch_waitq_empty(&q));
  assert_true(ms >= 19);   /* not early (the clock rounds to whole ms) */
  assert_true(ms < 10000);
}

/* -- Cancellation ------------------------------------------------------------ */

static struct waiter cancelled[2];
static int cancel_wake;

/* Cancels the first waiter and wakes at once, before it can run: the wake
** skips it (woken already, still queued) and reaches the second. */
static void cancel_then_wake(void *arg) {
  (void)arg;
  ch_cancel(cancelled[0].coro);
  cancel_wake = ch_waitq_wake_one(&q);
}

static void test_a_cancelled_waiter_is_skipped_by_the_next_wake(void **state) {
  (void)state;
  reset();
  cancel_wake = -1;
  spawn_waiters(&cancelled[0], 1, -1);
  spawn_waiters(&cancelled[1], 1, 5000);   /* a lost wake fails, not hangs */
  assert_true(ch_spawn(cancel_then_wake, NULL) > 0);
  th_run();
  assert_int_equal(cancelled[0].rc, -ECANCELED);
  assert_int_equal(cancel_wake, 1);
  assert_int_equal(cancelled[1].rc, 0);
  assert_true(ch_waitq_empty(&q));
}

static struct waiter precancelled;

static void cancel_self_then_wait(void *arg) {
  (void)arg;
  ch_cancel(ch_current());
  precancelled.rc = ch_waitq_wait(&q, -1);
  CHECK(ch_waitq_empty(&q));
}

static void test_a_cancelled_coroutine_does_not_wait(void **state) {
  (void)state;
  reset();
  precancelled.rc = 1;
  assert_true(ch_spawn(cancel_self_then_wait, NULL) > 0);
  th_run();
  assert_int_equal(precancelled.rc, -ECANCELED);
  assert_true(ch_waitq_empty(&q));
}

/* A waiter cancelled while queued runs, returns and its coroutine is
** freed (and its struct recycled for the next spawn) before anyone
** wakes the queue: nothing of it may be left there. */
static struct waiter gone, after_gone;
static int gone_wake_empty, gone_wake_next;

static void cancel_and_let_it_end(void *arg) {
  (void)arg;
  ch_cancel(gone.coro);
  while (!gone.done) ch_yield();
  ch_yield();   /* the loop reclaims the exited coroutine meanwhile */
  ch_sleep_ms(1);
  CHECK(ch_waitq_empty(&q));
  gone_wake_empty = ch_waitq_wake_one(&q);
  /* A new waiter may get the freed coroutine's struct, node and all. */
  after_gone.timeout_ms = -1;
  CHECK(ch_spawn(waiter_main, &after_gone) > 0);
  while (!after_gone.coro) ch_yield();
  gone_wake_next = ch_waitq_wake_one(&q);
}

static void test_a_waiter_freed_after_cancellation_leaves_nothing_queued(void **state) {
  (void)state;
  reset();
  gone_wake_empty = gone_wake_next = -1;
  memset(&after_gone, 0, sizeof after_gone);
  after_gone.rc = 1;
  spawn_waiters(&gone, 1, -1);
  assert_true(ch_spawn(cancel_and_let_it_end, NULL) > 0);
  th_run();
  assert_int_equal(gone.rc, -ECANCELED);
  assert_int_equal(gone_wake_empty, 0);
  assert_int_equal(gone_wake_next, 1);
  assert_int_equal(after_gone.rc, 0);
  assert_true(ch_waitq_empty(&q));
}

/* -- Waking from outside a coroutine, waiting again --------------------------- */

static struct ch_timer wake_timer;
static int timer_woke;

static void on_wake_timer(struct ch_timer *t) {
  (void)t;
  timer_woke = ch_waitq_wake_one(&q);
}

static void test_a_timer_callback_wakes_a_waiter(void **state) {
  (void)state;
  reset();
  timer_woke = -1;
  struct waiter w;
  spawn_waiters(&w, 1, -1);
  assert_int_equal(ch_timer_start(&wake_timer, 10, on_wake_timer), 0);
  th_run();
  assert_int_equal(timer_woke, 1);
  assert_int_equal(w.rc, 0);
}

static int rounds_done;

static void wait_rounds(void *arg) {
  (void)arg;
  for (int i = 0; i < 3; i++) {
    int rc = ch_waitq_wait(&q, 5000);
    CHECK_EQ(rc, 0);
    rounds_done++;
  }
}

static void wake_rounds(void *arg) {
  (void)arg;
  for (int i = 0; i < 3; i++) {
    while (ch_waitq_empty(&q)) ch_yield();
    CHECK_EQ(ch_waitq_wake_one(&q), 1);
  }
}

static void test_a_woken_waiter_can_wait_again(void **state) {
  (void)state;
  reset();
  rounds_done = 0;
  assert_true(ch_spawn(wait_rounds, NULL) > 0);
  assert_true(ch_spawn(wake_rounds, NULL) > 0);
  th_run();
  assert_int_equal(rounds_done, 3);
  assert_true(ch_waitq_empty(&q));
}

/* -- Several queues at once ---------------------------------------------------- */

static struct ch_waitq qs[4];
static int any_rc, any_n, any_other_wake, any_timeout_rc;

static void wait_on_any(void *arg) {
  (void)arg;
  struct ch_waitq *list[4] = { &qs[0], &qs[1], &qs[2], &qs[3] };
  any_rc = ch_waitq_wait_any(list, any_n, 5000);
  for (int i = 0; i < any_n; i++) CHECK(ch_waitq_empty(&qs[i]));
  any_timeout_rc = ch_waitq_wait_any(list, any_n, 10);
  for (int i = 0; i < any_n; i++) CHECK(ch_waitq_empty(&qs[i]));
}

/* Wakes the last queue, then at once the first: the waiter has not run
** yet, so that wake finds it not waiting any more and skips it. */
static void wake_last_then_first(void *arg) {
  (void)arg;
  for (int i = 0; i < any_n; i++) CHECK(!ch_waitq_empty(&qs[i]));
  CHECK_EQ(ch_waitq_wake_one(&qs[any_n - 1]), 1);
  any_other_wake = ch_waitq_wake_one(&qs[0]);
}

static void run_wait_any(int n) {
  memset(qs, 0, sizeof qs);
  any_n = n;
  any_rc = any_timeout_rc = any_other_wake = 1;
  assert_true(ch_spawn(wait_on_any, NULL) > 0);
  assert_true(ch_spawn(wake_last_then_first, NULL) > 0);
  th_run();
  assert_int_equal(any_rc, 0);
  assert_int_equal(any_other_wake, 0);
  assert_int_equal(any_timeout_rc, -ETIMEDOUT);
  for (int i = 0; i < n; i++) assert_true(ch_waitq_empty(&qs[i]));
}

static void test_a_waiter_on_two_queues_wakes_on_either_and_leaves_both(void **state) {
  (void)state;
  run_wait_any(2);   /* the coroutine's own two nodes */
}

static void test_a_waiter_on_four_queues_wakes_on_any_and_leaves_all(void **state) {
  (void)state;
  run_wait_any(4);   /* nodes on the heap */
}

/* -- COPY stack mode ------------------------------------------------------------ */

static struct waiter copied[3];

static void test_waiters_in_copy_stack_mode(void **state) {
  (void)state;
  int rc = ch_sched_set_stack_mode(CH_STACK_COPY);
  if (rc == -ENOTSUP) {   /* an ASan build */
    printf("skipped: COPY stack mode is not available in this build\n");
    skip();
  }
  assert_int_equal(rc, 0);
  reset();
  spawn_waiters(copied, 3, -1);
  assert_true(ch_spawn(wake_everyone, NULL) > 0);
  memset(all, 0, sizeof all);
  th_run();
  ch_sched_set_stack_mode(CH_STACK_SEPARATE);
  assert_int_equal(nwoken, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(copied[i].rc, 0);
    assert_int_equal(wake_order[i], copied[i].id);
  }
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_wake_one_wakes_the_longest_waiter_first),
    TH_TEST(test_wake_all_wakes_every_waiter_in_order),
    TH_TEST(test_a_wake_with_no_waiter_does_nothing),
    TH_TEST(test_a_timed_out_waiter_leaves_the_queue),
    TH_TEST(test_a_cancelled_waiter_is_skipped_by_the_next_wake),
    TH_TEST(test_a_cancelled_coroutine_does_not_wait),
    TH_TEST(test_a_waiter_freed_after_cancellation_leaves_nothing_queued),
    TH_TEST(test_a_timer_callback_wakes_a_waiter),
    TH_TEST(test_a_woken_waiter_can_wait_again),
    TH_TEST(test_a_waiter_on_two_queues_wakes_on_either_and_leaves_both),
    TH_TEST(test_a_waiter_on_four_queues_wakes_on_any_and_leaves_all),
    TH_TEST(test_waiters_in_copy_stack_mode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
