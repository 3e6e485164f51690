/*
** Tests of the thread pool (ch_pool_call) and of cross-thread posting
** (ch_post): blocking work leaves the scheduler free, and work posted from
** other threads runs on the scheduler's own thread, promptly.
*/
#include "helpers.h"

static pid_t main_tid;

/* -- ch_pool_call ------------------------------------------------------------- */

struct job { int ms; pid_t ran_on; double took; };

/* Blocks its thread with the raw system call, which no hook can turn into
** a park: only running it elsewhere keeps the scheduler free. */
static void blocking_job(void *arg) {
  struct job *j = arg;
  j->ran_on = th_gettid();
  th_thread_sleep_ms(j->ms);
}

struct caller { struct job job; int rc; double ms; struct th_ticker *tk; };

static void pool_caller(void *arg) {
  struct caller *c = arg;
  double t0 = th_now_ms();
  c->rc = ch_pool_call(blocking_job, &c->job);
  c->ms = th_now_ms() - t0;
  if (c->tk) c->tk->stop = 1;
}

static void test_pool_call_runs_a_blocking_function_without_blocking_others(
    void **state) {
  (void)state;
  struct th_ticker tk;
  struct caller c = { { 200, 0, 0 }, -1, 0, &tk };
  assert_true(ch_spawn(pool_caller, &c) > 0);
  th_ticker_spawn(&tk, 10, 1000);
  th_run();
  assert_int_equal(c.rc, 0);
  assert_true(c.job.ran_on != 0);
  assert_int_not_equal(c.job.ran_on, main_tid);  /* ran on a pool thread */
  assert_true(c.ms >= 199.0);                     /* returned when fn was done */
  assert_true(c.ms < 2000.0);
  /* 10 ms ticks during a 200 ms call: about 20 if the loop stayed free,
  ** a few on a loaded 2-core machine, 0 if the thread blocked. */
  if (tk.ticks < 3) fail_msg("ticker ticked %d times: the thread blocked", tk.ticks);
}

static void test_pool_call_outside_a_coroutine_runs_inline(void **state) {
  (void)state;
  struct job j = { 1, 0, 0 };
  assert_int_equal(ch_pool_call(blocking_job, &j), 0);
  assert_int_equal(j.ran_on, main_tid);
}

/* Several callers at once all get their own results back. */
static void test_concurrent_pool_calls_each_resume_their_own_caller(void **state) {
  (void)state;
  struct caller c[8];
  memset(c, 0, sizeof c);
  for (int i = 0; i < 8; i++) {
    c[i].job.ms = 20 + 5 * i;
    c[i].rc = -1;
    assert_true(ch_spawn(pool_caller, &c[i]) > 0);
  }
  th_run();
  for (int i = 0; i < 8; i++) {
    assert_int_equal(c[i].rc, 0);
    assert_int_not_equal(c[i].job.ran_on, main_tid);
    assert_true(c[i].ms >= c[i].job.ms - 1);
  }
}

/* -- ch_post ----------------------------------------------------------------- */

struct posted {
  struct ch_sched *sched;
  struct ch_coro *waiter;
  pid_t ran_on;
  int unpark_rc;
  int park_rc;
  double waited;
  pthread_t t;
};

/* Runs on the scheduler's thread, from its loop: may unpark its coroutine. */
static void posted_fn(void *arg) {
  struct posted *p = arg;
  p->ran_on = th_gettid();
  p->unpark_rc = ch_unpark(p->waiter, 7);
}

static void *poster_main(void *arg) {
  struct posted *p = arg;
  th_thread_sleep_ms(50);  /* the scheduler is asleep in epoll_wait by now */
  if (ch_post(p->sched, posted_fn, p) != 0) p->unpark_rc = -999;
  return NULL;
}

static void post_waiter(void *arg) {
  struct posted *p = arg;
  p->waiter = ch_current();
  CHECK_EQ(pthread_create(&p->t, NULL, poster_main, p), 0);
  double t0 = th_now_ms();
  p->park_rc = ch_park(5000);  /* the post must wake us long before this */
  p->waited = th_now_ms() - t0;
}

static void test_post_from_another_thread_runs_on_the_scheduler_thread(void **state) {
  (void)state;
  struct posted p;
  memset(&p, 0, sizeof p);
  p.sched = ch_sched_self();
  assert_non_null(p.sched);
  p.unpark_rc = -1;
  assert_true(ch_spawn(post_waiter, &p) > 0);
  th_run();
  pthread_join(p.t, NULL);
  assert_int_equal(p.ran_on, main_tid);
  assert_int_equal(p.unpark_rc, 0);
  assert_int_equal(p.park_rc, 7);
  /* The eventfd woke the loop at once, not at the 5 s park timeout. */
  assert_true(p.waited >= 40.0 && p.waited < 1000.0);
}

#define POSTERS 4
#define POSTS_EACH 1000

static int post_count, post_wrong_thread;

static void count_post(void *arg) {
  (void)arg;
  post_count++;  /* unsynchronised on purpose: posts run on one thread */
  if (th_gettid() != main_tid) post_wrong_thread++;
}

static void *many_poster(void *arg) {
  struct ch_sched *s = arg;
  for (int i = 0; i < POSTS_EACH; i++)
    if (ch_post(s, count_post, NULL) != 0) abort();
  return NULL;
}

static void wait_for_posts(void *arg) {
  (void)arg;
  /* Keeps ch_run alive until every post ran: at most 10 s. */
  for (int i = 0; i < 10000 && post_count < POSTERS * POSTS_EACH; i++) ch_sleep_ms(1);
}

static void test_posts_from_several_threads_all_run_once_on_the_scheduler_thread(
    void **state) {
  (void)state;
  post_count = post_wrong_thread = 0;
  struct ch_sched *s = ch_sched_self();
  assert_non_null(s);
  pthread_t t[POSTERS];
  assert_true(ch_spawn(wait_for_posts, NULL) > 0);
  for (int i = 0; i < POSTERS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, many_poster, s), 0);
  th_run();
  for (int i = 0; i < POSTERS; i++) pthread_join(t[i], NULL);
  assert_int_equal(post_count, POSTERS * POSTS_EACH);
  assert_int_equal(post_wrong_thread, 0);
}

int main(void) {
  th_main_init();
  main_tid = th_gettid();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_pool_call_runs_a_blocking_function_without_blocking_others),
    TH_TEST(test_pool_call_outside_a_coroutine_runs_inline),
    TH_TEST(test_concurrent_pool_calls_each_resume_their_own_caller),
    TH_TEST(test_post_from_another_thread_runs_on_the_scheduler_thread),
    TH_TEST(test_posts_from_several_threads_all_run_once_on_the_scheduler_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
