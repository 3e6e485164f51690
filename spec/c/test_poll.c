/*
** Tests of runtime/poll.c's watches (ch_watch_fd): a one-shot readiness
** callback with no coroutine, what an idle keep-alive connection waits
** with. poll.c's waits and close handling are exercised through io.c in
** test_io.c.
*/
#include "helpers.h"

#include <poll.h>

struct seen { int calls; int revents; int spawned; };

static void on_ready(struct ch_watch *w, int revents) {
  struct seen *s = w->data;
  s->calls++;
  s->revents = revents;
}

static void delayed_write(void *arg) {
  int fd = *(int *)arg;
  ch_sleep_ms(20);
  CHECK_EQ(write(fd, "x", 1), 1);
  ch_sleep_ms(20);
  CHECK_EQ(write(fd, "y", 1), 1);   /* a second edge: must not call again */
  ch_sleep_ms(20);
}

static void test_watch_calls_back_once_when_input_arrives(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct seen s = { 0, 0, 0 };
  struct ch_watch w;
  memset(&w, 0, sizeof w);
  w.data = &s;
  assert_int_equal(ch_watch_fd(&w, sv[0], POLLIN, on_ready), 0);
  assert_int_equal(ch_watch_fd(&w, sv[0], POLLIN, on_ready), -EBUSY);
  assert_true(ch_spawn(delayed_write, &sv[1]) > 0);
  th_run();
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.revents, POLLIN);
  close(sv[0]);
  close(sv[1]);
}

static void test_unwatch_means_no_callback(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct seen s = { 0, 0, 0 };
  struct ch_watch w;
  memset(&w, 0, sizeof w);
  w.data = &s;
  assert_int_equal(ch_watch_fd(&w, sv[0], POLLIN, on_ready), 0);
  ch_unwatch_fd(&w);
  ch_unwatch_fd(&w);   /* twice is fine */
  assert_true(ch_spawn(delayed_write, &sv[1]) > 0);
  th_run();
  assert_int_equal(s.calls, 0);
  close(sv[0]);
  close(sv[1]);
}

static void closer(void *arg) {
  int fd = *(int *)arg;
  ch_sleep_ms(10);
  close(fd);
}

static void test_close_calls_back_with_pollnval(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct seen s = { 0, 0, 0 };
  struct ch_watch w;
  memset(&w, 0, sizeof w);
  w.data = &s;
  assert_int_equal(ch_watch_fd(&w, sv[0], POLLIN, on_ready), 0);
  assert_true(ch_spawn(closer, &sv[0]) > 0);
  th_run();
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.revents, POLLNVAL);
  close(sv[1]);
}

/* The callback binds a coroutine, as an HTTP server does for a request. */
static void reader(void *arg) {
  int fd = *(int *)arg;
  char b[8];
  CHECK_EQ(read(fd, b, sizeof b), 1);
}

static int watched_fd;

static void sleeper(void *arg) { ch_sleep_ms(*(int *)arg); }

static void spawn_reader(struct ch_watch *w, int revents) {
  struct seen *s = w->data;
  s->calls++;
  s->revents = revents;
  s->spawned = ch_spawn(reader, &watched_fd) > 0;
}

static void test_callback_may_spawn_a_coroutine(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  watched_fd = sv[0];
  struct seen s = { 0, 0, 0 };
  struct ch_watch w;
  memset(&w, 0, sizeof w);
  w.data = &s;
  assert_int_equal(ch_watch_fd(&w, sv[0], POLLIN, spawn_reader), 0);
  assert_int_equal(write(sv[1], "z", 1), 1);
  int keep = 30;   /* a watch alone does not keep ch_run running */
  assert_true(ch_spawn(sleeper, &keep) > 0);
  th_run();
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.spawned, 1);
  close(sv[0]);
  close(sv[1]);
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_watch_calls_back_once_when_input_arrives),
    TH_TEST(test_unwatch_means_no_callback),
    TH_TEST(test_close_calls_back_with_pollnval),
    TH_TEST(test_callback_may_spawn_a_coroutine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
