/*
** Tests of ch_wait_fd and the per-fd waiter state under it: readiness,
** timeouts, one reader and one writer per fd at once, and what close and
** cancel do to a waiter.
*/
#include "helpers.h"

#include <poll.h>

struct waitres { int fd; int events; int64_t timeout; int rc; double ms; };

static void waiter(void *arg) {
  struct waitres *w = arg;
  double t0 = th_now_ms();
  w->rc = ch_wait_fd(w->fd, w->events, w->timeout);
  w->ms = th_now_ms() - t0;
}

static void test_wait_fd_returns_pollout_at_once_on_a_writable_socket(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct waitres w = { sv[0], POLLOUT, 1000, -1, 0 };
  assert_true(ch_spawn(waiter, &w) > 0);
  th_run();
  assert_int_equal(w.rc, POLLOUT);
  assert_true(w.ms < 500);   /* not the 1000 ms timeout */
  close(sv[0]);
  close(sv[1]);
}

static void delayed_send(void *arg) {
  int fd = *(int *)arg;
  ch_sleep_ms(30);
  CHECK_EQ(write(fd, "x", 1), 1);
}

static void test_wait_fd_returns_pollin_when_data_arrives(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct waitres w = { sv[0], POLLIN, 5000, -1, 0 };
  assert_true(ch_spawn(waiter, &w) > 0);
  assert_true(ch_spawn(delayed_send, &sv[1]) > 0);
  th_run();
  assert_int_equal(w.rc, POLLIN);
  assert_true(w.ms >= 25 && w.ms < 2000);
  close(sv[0]);
  close(sv[1]);
}

/* ch_wait_fd promises readiness, like poll: an fd that is readable already
** must not wait for new data, even when the fd was registered before (an
** edge-triggered epoll reports no new edge for data already there). */
struct already { int fd, peer; int first, second; double second_ms; };

static void wait_twice(void *arg) {
  struct already *a = arg;
  char c;
  a->first = ch_wait_fd(a->fd, POLLIN, 1000);  /* registers the fd */
  CHECK_EQ(recv(a->fd, &c, 1, MSG_DONTWAIT), 1);  /* one of two bytes */
  double t0 = th_now_ms();
  a->second = ch_wait_fd(a->fd, POLLIN, 1000);  /* one byte still there */
  a->second_ms = th_now_ms() - t0;
}

static void test_wait_fd_returns_at_once_when_the_fd_is_already_ready(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "ab", 2), 2);
  struct already a = { sv[0], sv[1], -1, -1, 0 };
  assert_true(ch_spawn(wait_twice, &a) > 0);
  th_run();
  close(sv[0]);
  close(sv[1]);
  /* Only readiness and promptness here; the exact event mask is checked by
  ** test_wait_fd_returns_pollin_when_data_arrives. */
  assert_true(a.first > 0 && (a.first & POLLIN));
  if (a.second <= 0 || !(a.second & POLLIN) || a.second_ms >= 500)
    fail_msg("second wait on a readable fd returned %d after %.0f ms", a.second, a.second_ms);
}

static void test_wait_fd_returns_zero_after_the_timeout(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct waitres w = { sv[0], POLLIN, 60, -1, 0 };
  assert_true(ch_spawn(waiter, &w) > 0);
  th_run();
  assert_int_equal(w.rc, 0);
  assert_true(w.ms >= 59.0);   /* never early */
  assert_true(w.ms < 1000.0);
  close(sv[0]);
  close(sv[1]);
}

static void waiter_again(void *arg) {
  struct waitres *w = arg;
  w->rc = ch_wait_fd_again(w->fd, w->events, w->timeout);
}

/* As poll(2) says: a regular file is always ready. */
static void test_wait_fd_on_a_regular_file_is_ready_at_once(void **state) {
  (void)state;
  char path[] = "/tmp/cohost-test-fd-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  struct waitres w = { fd, POLLIN, 1000, 0, 0 };
  assert_true(ch_spawn(waiter, &w) > 0);
  th_run();
  assert_int_equal(w.rc, POLLIN);
  assert_true(w.ms < 500.0);
  close(fd);
}

/* Without the readiness check the wait reaches epoll, which refuses. */
static void test_wait_fd_again_on_a_regular_file_gives_eperm(void **state) {
  (void)state;
  char path[] = "/tmp/cohost-test-fd-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  struct waitres w = { fd, POLLIN, 1000, 0, 0 };
  assert_true(ch_spawn(waiter_again, &w) > 0);
  th_run();
  assert_int_equal(w.rc, -EPERM);
  close(fd);
}

static void test_wait_fd_outside_a_coroutine_gives_einval(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(ch_wait_fd(sv[0], POLLIN, 10), -EINVAL);
  close(sv[0]);
  close(sv[1]);
}

/* One fd, two waiters: the reader waits for POLLIN while the writer waits
** for POLLOUT on the same fd; each must be woken by its own direction. */
struct duplex {
  int fd, peer;
  int rd_rc, wr_rc;
  int rd_done, wr_done;
  int wr_done_before_rd;
  size_t filled;
};

static void duplex_reader(void *arg) {
  struct duplex *d = arg;
  d->rd_rc = ch_wait_fd(d->fd, POLLIN, 5000);
  d->rd_done = 1;
}

static void duplex_writer(void *arg) {
  struct duplex *d = arg;
  d->wr_rc = ch_wait_fd(d->fd, POLLOUT, 5000);
  d->wr_done = 1;
  d->wr_done_before_rd = !d->rd_done;
}

static void duplex_peer(void *arg) {
  struct duplex *d = arg;
  ch_sleep_ms(20);  /* both waiters are parked now */
  CHECK(!d->rd_done);
  CHECK(!d->wr_done);
  /* Make the fd writable first: drain the peer side, which was filled. */
  char buf[65536];
  size_t drained = 0;
  for (int i = 0; i < 100000 && drained < d->filled; i++) {
    ssize_t n = recv(d->peer, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    drained += (size_t)n;
  }
  CHECK_EQ(drained, d->filled);
  ch_sleep_ms(20);
  CHECK(d->wr_done);   /* the writer woke on POLLOUT ... */
  CHECK(!d->rd_done);  /* ... and the reader did not */
  CHECK_EQ(write(d->peer, "r", 1), 1);
}

static void test_one_reader_and_one_writer_wait_on_one_fd_at_once(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct duplex d;
  memset(&d, 0, sizeof d);
  d.fd = sv[0];
  d.peer = sv[1];
  /* Fill sv[0]'s send path so POLLOUT is not ready (user non-blocking
  ** writes pass straight through, then blocking mode is restored). */
  int fl = fcntl(sv[0], F_GETFL);
  assert_int_equal(fcntl(sv[0], F_SETFL, fl | O_NONBLOCK), 0);
  char chunk[4096];
  memset(chunk, 'f', sizeof chunk);
  for (int i = 0; i < 100000; i++) {
    ssize_t n = send(sv[0], chunk, sizeof chunk, MSG_DONTWAIT);
    if (n <= 0) break;
    d.filled += (size_t)n;
  }
  assert_int_equal(fcntl(sv[0], F_SETFL, fl), 0);
  assert_true(d.filled > 0);
  assert_true(ch_spawn(duplex_reader, &d) > 0);
  assert_true(ch_spawn(duplex_writer, &d) > 0);
  assert_true(ch_spawn(duplex_peer, &d) > 0);
  th_run();
  assert_true(d.wr_rc > 0 && (d.wr_rc & POLLOUT));
  assert_true(d.rd_rc > 0 && (d.rd_rc & POLLIN));
  assert_true(d.wr_done_before_rd);
  close(sv[0]);
  close(sv[1]);
}

/* -- Close and cancel ------------------------------------------------------------ */

static void closer(void *arg) {
  int fd = *(int *)arg;
  ch_sleep_ms(20);
  CHECK_EQ(close(fd), 0);
}

static void test_close_wakes_a_wait_fd_waiter_with_ebadf(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct waitres w = { sv[0], POLLIN, 5000, 0, 0 };
  assert_true(ch_spawn(waiter, &w) > 0);
  assert_true(ch_spawn(closer, &sv[0]) > 0);
  th_run();
  assert_int_equal(w.rc, -EBADF);
  assert_true(w.ms < 2000);
  close(sv[1]);
}

struct cancelled_wait { struct ch_coro *c; int fd; int rc; };

static void cancellable_waiter(void *arg) {
  struct cancelled_wait *cw = arg;
  cw->c = ch_current();
  cw->rc = ch_wait_fd(cw->fd, POLLIN, 5000);
}

static void cancel_waiter(void *arg) {
  struct cancelled_wait *cw = arg;
  ch_sleep_ms(20);
  ch_cancel(cw->c);
}

static void test_cancel_wakes_a_wait_fd_waiter_with_ecanceled(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct cancelled_wait cw = { NULL, sv[0], 0 };
  double t0 = th_now_ms();
  assert_true(ch_spawn(cancellable_waiter, &cw) > 0);
  assert_true(ch_spawn(cancel_waiter, &cw) > 0);
  th_run();
  assert_int_equal(cw.rc, -ECANCELED);
  assert_true(th_now_ms() - t0 < 2000);
  close(sv[0]);
  close(sv[1]);
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_wait_fd_returns_pollout_at_once_on_a_writable_socket),
    TH_TEST(test_wait_fd_returns_pollin_when_data_arrives),
    TH_TEST(test_wait_fd_returns_at_once_when_the_fd_is_already_ready),
    TH_TEST(test_wait_fd_returns_zero_after_the_timeout),
    TH_TEST(test_wait_fd_on_a_regular_file_is_ready_at_once),
    TH_TEST(test_wait_fd_again_on_a_regular_file_gives_eperm),
    TH_TEST(test_wait_fd_outside_a_coroutine_gives_einval),
    TH_TEST(test_one_reader_and_one_writer_wait_on_one_fd_at_once),
    TH_TEST(test_close_wakes_a_wait_fd_waiter_with_ebadf),
    TH_TEST(test_cancel_wakes_a_wait_fd_waiter_with_ecanceled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
