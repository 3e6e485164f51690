/*
** Tests of runtime/io.c, the one I/O path: ch_io_wait and the waiter
** state under it (readiness, timeouts, one reader and one writer per fd,
** close and cancel), and ch_io_read/write/accept/connect: short reads,
** EOF after a short read, the drained skip, partial writes, and the
** poll(2) path a coroutine that may not park takes.
*/
#include "helpers.h"

#include <poll.h>
#include <sys/un.h>

struct waitres { int fd; int events; int64_t timeout; int rc; double ms; };

static void waiter(void *arg) {
  struct waitres *w = arg;
  double t0 = th_now_ms();
  w->rc = ch_io_wait(w->fd, w->events, w->timeout);
  w->ms = th_now_ms() - t0;
}

static void test_io_wait_returns_pollout_at_once_on_a_writable_socket(void **state) {
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

static void test_io_wait_returns_pollin_when_data_arrives(void **state) {
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

/* ch_io_wait promises readiness, like poll: an fd that is readable already
** must not wait for new data, even when the fd was registered before (an
** edge-triggered epoll reports no new edge for data already there). */
struct already { int fd, peer; int first, second; double second_ms; };

static void wait_twice(void *arg) {
  struct already *a = arg;
  char c;
  a->first = ch_io_wait(a->fd, POLLIN, 1000);  /* registers the fd */
  CHECK_EQ(recv(a->fd, &c, 1, MSG_DONTWAIT), 1);  /* one of two bytes */
  double t0 = th_now_ms();
  a->second = ch_io_wait(a->fd, POLLIN, 1000);  /* one byte still there */
  a->second_ms = th_now_ms() - t0;
}

static void test_io_wait_returns_at_once_when_the_fd_is_already_ready(void **state) {
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
  ** test_io_wait_returns_pollin_when_data_arrives. */
  assert_true(a.first > 0 && (a.first & POLLIN));
  if (a.second <= 0 || !(a.second & POLLIN) || a.second_ms >= 500)
    fail_msg("second wait on a readable fd returned %d after %.0f ms", a.second, a.second_ms);
}

static void test_io_wait_returns_etimedout_after_the_timeout(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct waitres w = { sv[0], POLLIN, 60, -1, 0 };
  assert_true(ch_spawn(waiter, &w) > 0);
  th_run();
  assert_int_equal(w.rc, -ETIMEDOUT);
  assert_true(w.ms >= 59.0);   /* never early */
  assert_true(w.ms < 1000.0);
  close(sv[0]);
  close(sv[1]);
}

/* As poll(2) says: a regular file is always ready. */
static void test_io_wait_on_a_regular_file_is_ready_at_once(void **state) {
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

/* Outside a coroutine a wait blocks the thread, as poll(2) would. */
static void test_io_wait_outside_a_coroutine_blocks_like_poll(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(ch_io_wait(sv[0], POLLIN, 30), -ETIMEDOUT);
  struct th_delayed_write dw;
  th_delayed_write_start(&dw, sv[1], 30, "x", 1);
  double t0 = th_now_ms();
  int r = ch_io_wait(sv[0], POLLIN, 5000);
  th_delayed_write_join(&dw);
  assert_true(r > 0 && (r & POLLIN));
  assert_true(th_now_ms() - t0 >= 25);
  assert_int_equal(ch_io_wait(sv[0], 0, 10), -EINVAL);
  assert_int_equal(ch_io_wait(-1, POLLIN, 10), -EBADF);
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
  d->rd_rc = ch_io_wait(d->fd, POLLIN, 5000);
  d->rd_done = 1;
}

static void duplex_writer(void *arg) {
  struct duplex *d = arg;
  d->wr_rc = ch_io_wait(d->fd, POLLOUT, 5000);
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

static void test_close_wakes_an_io_wait_waiter_with_ebadf(void **state) {
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
  cw->rc = ch_io_wait(cw->fd, POLLIN, 5000);
}

static void cancel_waiter(void *arg) {
  struct cancelled_wait *cw = arg;
  ch_sleep_ms(20);
  ch_cancel(cw->c);
}

static void test_cancel_wakes_an_io_wait_waiter_with_ecanceled(void **state) {
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


/* -- Reads --------------------------------------------------------------------- */

struct reader {
  int fd;
  size_t want;
  int64_t timeout;
  ssize_t rc[4];
  char buf[4][64];
  double ms;
  int may_yield;             /* 0: the coroutine may not park */
  int wait_between;          /* read(0), ch_io_wait, read(0): a stream's fill */
};

static void reader_main(void *arg) {
  struct reader *r = arg;
  if (!r->may_yield) ch_coro_set_may_yield(ch_current(), 0);
  double t0 = th_now_ms();
  r->rc[0] = ch_io_read(r->fd, r->buf[0], r->want, r->timeout);
  if (r->wait_between) {
    r->rc[1] = ch_io_read(r->fd, r->buf[1], r->want, 0);
    if (r->rc[1] == -EAGAIN) {
      int w = ch_io_wait(r->fd, POLLIN, r->timeout);
      CHECK(w > 0);
      r->rc[1] = ch_io_read(r->fd, r->buf[1], r->want, 0);
    }
  } else {
    r->rc[1] = ch_io_read(r->fd, r->buf[1], r->want, r->timeout);
  }
  r->ms = th_now_ms() - t0;
}

static void test_io_read_returns_as_soon_as_any_data_is_there(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "abc", 3), 3);
  struct reader r = { .fd = sv[0], .want = 64, .timeout = 5000, .may_yield = 1 };
  struct th_delayed_write dw;
  th_delayed_write_start(&dw, sv[1], 30, "defg", 4);
  assert_true(ch_spawn(reader_main, &r) > 0);
  th_run();
  th_delayed_write_join(&dw);
  assert_int_equal(r.rc[0], 3);   /* what was there, not the 64 asked */
  assert_memory_equal(r.buf[0], "abc", 3);
  assert_int_equal(r.rc[1], 4);   /* parked until more came */
  assert_memory_equal(r.buf[1], "defg", 4);
  close(sv[0]);
  close(sv[1]);
}

/* A short read, then the peer closes: the next read says EOF, with no
** input event needed beyond the close's. */
static void test_io_read_gives_eof_after_a_short_read(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "abc", 3), 3);
  struct reader r = { .fd = sv[0], .want = 64, .timeout = 5000, .may_yield = 1 };
  assert_true(ch_spawn(reader_main, &r) > 0);
  close(sv[1]);
  th_run();
  assert_int_equal(r.rc[0], 3);
  assert_int_equal(r.rc[1], 0);
  assert_true(r.ms < 2000);
  close(sv[0]);
}

/* After a short read the socket is known empty: until epoll reports input
** the next read is not made, so bytes that arrived meanwhile with no loop
** turn in between are not seen by a read that may not wait (timeout 0)...
** and a read that may wait parks, lets the loop count the event, and gets
** them. The first half is what saves a system call per message. */
struct skip { int fd, peer; ssize_t first, skipped, waited; char buf[16]; };

static void skip_main(void *arg) {
  struct skip *k = arg;
  k->first = ch_io_read(k->fd, k->buf, sizeof k->buf, 5000);      /* short: drained */
  CHECK_EQ(th_raw_write_all(k->peer, "more", 4), 0);              /* no loop turn */
  k->skipped = ch_io_read(k->fd, k->buf, sizeof k->buf, 0);       /* not made */
  k->waited = ch_io_read(k->fd, k->buf, sizeof k->buf, 5000);     /* parks once */
}

static void test_io_read_skips_the_read_a_drained_socket_would_refuse(void **state) {
  (void)state;
  /* The judgement is epoll's: on a ring the read that parks is posted to
  ** the kernel, and the next one is always made (test_ring). */
  if (ch_sched_io_backend(NULL) == CH_IO_URING) {
    fprintf(stderr, "skipped: the drained skip is the epoll backend's\n");
    skip();
  }
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "ab", 2), 2);
  struct skip k = { sv[0], sv[1], 0, 0, 0, {0} };
  assert_true(ch_spawn(skip_main, &k) > 0);
  th_run();
  assert_int_equal(k.first, 2);
  assert_int_equal(k.skipped, -EAGAIN);
  assert_int_equal(k.waited, 4);
  assert_memory_equal(k.buf, "more", 4);
  close(sv[0]);
  close(sv[1]);
}

/* Where the coroutine may not park (a finalizer, an FFI call), a read
** blocks the thread in poll(2), and the readiness poll(2) saw is not lost
** on the drained judgement: the read after the wait is made. Both shapes:
** one ch_io_read with a timeout, and a stream's read(0), wait, read(0).
** Either would spin until its timeout if the wait left the socket
** "known empty". */
static void check_may_not_park_read(int wait_between) {
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "ab", 2), 2);
  struct reader r = { .fd = sv[0], .want = 64, .timeout = 3000, .may_yield = 0,
                      .wait_between = wait_between };
  struct th_delayed_write dw;
  th_delayed_write_start(&dw, sv[1], 50, "late", 4);
  assert_true(ch_spawn(reader_main, &r) > 0);
  th_run();
  th_delayed_write_join(&dw);
  assert_int_equal(r.rc[0], 2);
  assert_int_equal(r.rc[1], 4);
  assert_memory_equal(r.buf[1], "late", 4);
  assert_true(r.ms >= 40 && r.ms < 2500);
  close(sv[0]);
  close(sv[1]);
}

static void test_io_read_that_may_not_park_waits_in_poll_and_then_reads(void **state) {
  (void)state;
  check_may_not_park_read(0);
}

static void test_io_read_wait_read_that_may_not_park_reads_after_the_wait(void **state) {
  (void)state;
  check_may_not_park_read(1);
}

static void test_io_read_times_out_with_etimedout(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "a", 1), 1);
  struct reader r = { .fd = sv[0], .want = 64, .timeout = 60, .may_yield = 1 };
  assert_true(ch_spawn(reader_main, &r) > 0);
  th_run();
  assert_int_equal(r.rc[0], 1);
  assert_int_equal(r.rc[1], -ETIMEDOUT);
  assert_true(r.ms >= 59.0 && r.ms < 2000);
  close(sv[0]);
  close(sv[1]);
}

struct cancelled_read { struct ch_coro *c; int fd; ssize_t rc; unsigned hits; };

static void cancelled_reader(void *arg) {
  struct cancelled_read *cr = arg;
  cr->c = ch_current();
  char b[8];
  cr->rc = ch_io_read(cr->fd, b, sizeof b, 5000);
  cr->hits = ch_cancel_hits(cr->c);
}

static void cancel_reader(void *arg) {
  struct cancelled_read *cr = arg;
  ch_sleep_ms(20);
  ch_cancel(cr->c);
}

static void test_io_read_of_a_cancelled_coroutine_returns_ecanceled(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct cancelled_read cr = { NULL, sv[0], 0, 0 };
  assert_true(ch_spawn(cancelled_reader, &cr) > 0);
  assert_true(ch_spawn(cancel_reader, &cr) > 0);
  th_run();
  assert_int_equal(cr.rc, -ECANCELED);
  assert_int_equal(cr.hits, 1);
  close(sv[0]);
  close(sv[1]);
}

/* Outside a coroutine a read blocks the thread, as read(2) would on a
** socket left blocking. */
static void test_io_read_outside_a_coroutine_blocks_like_read(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct th_delayed_write dw;
  th_delayed_write_start(&dw, sv[1], 30, "xyz", 3);
  char b[8];
  ssize_t n = ch_io_read(sv[0], b, sizeof b, 5000);
  th_delayed_write_join(&dw);
  assert_int_equal(n, 3);
  assert_int_equal(ch_io_read(sv[0], b, sizeof b, 0), -EAGAIN);
  close(sv[0]);
  close(sv[1]);
}

/* -- Writes -------------------------------------------------------------------- */

#define BIG (4 << 20)

struct bigio { int fd; char *out, *in; size_t got; ssize_t err; };

static void big_writer(void *arg) {
  struct bigio *b = arg;
  size_t off = 0;
  int partial = 0;
  while (off < BIG) {
    ssize_t w = ch_io_write(b->fd, b->out + off, BIG - off, 5000);
    if (w <= 0) { b->err = w; return; }
    if ((size_t)w < BIG - off) partial = 1;
    off += (size_t)w;
  }
  CHECK(partial);   /* 4 MiB never fit a socket buffer at once */
  shutdown(b->fd, SHUT_WR);
}

static void big_reader(void *arg) {
  struct bigio *b = arg;
  for (;;) {
    ssize_t n = ch_io_read(b->fd, b->in + b->got, BIG - b->got, 5000);
    if (n <= 0) { CHECK_EQ(n, 0); return; }
    b->got += (size_t)n;
    if ((b->got & 0xffff) == 0) ch_sleep_ms(1);   /* a slow reader */
  }
}

static void test_io_write_returns_partial_counts_and_loses_nothing(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct bigio w = { sv[0], malloc(BIG), NULL, 0, 0 }, r = { sv[1], NULL, malloc(BIG), 0, 0 };
  for (size_t i = 0; i < BIG; i++) w.out[i] = (char)(i * 131 + (i >> 12));
  assert_true(ch_spawn(big_writer, &w) > 0);
  assert_true(ch_spawn(big_reader, &r) > 0);
  th_run();
  assert_int_equal(w.err, 0);
  assert_int_equal(r.got, BIG);
  assert_memory_equal(w.out, r.in, BIG);
  free(w.out);
  free(r.in);
  close(sv[0]);
  close(sv[1]);
}

/* On a socket ch_io_write is send(MSG_NOSIGNAL): a peer gone away is
** -EPIPE, and no SIGPIPE ends the test binary. */
static void pipe_writer(void *arg) {
  int fd = *(int *)arg;
  *(ssize_t *)((int *)arg + 2) = ch_io_write(fd, "x", 1, 1000);
}

static void test_io_write_to_a_closed_peer_is_epipe_not_sigpipe(void **state) {
  (void)state;
  signal(SIGPIPE, SIG_DFL);
  int sv[2];
  th_socketpair(sv);
  close(sv[1]);
  struct { int fd; int pad; ssize_t rc; } a = { sv[0], 0, 0 };
  assert_true(ch_spawn(pipe_writer, &a) > 0);
  th_run();
  assert_int_equal(a.rc, -EPIPE);
  close(sv[0]);
}

/* -- Connections ------------------------------------------------------------------ */

struct conn_test { int port; int lfd; int acc; int crc; int refused; };

static void acceptor_main(void *arg) {
  struct conn_test *t = arg;
  t->acc = ch_io_accept(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC, 5000);
}

static void connector_main(void *arg) {
  struct conn_test *t = arg;
  ch_sleep_ms(20);   /* the acceptor is parked by now */
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = th_loopback(t->port);
  t->crc = ch_io_connect(fd, (struct sockaddr *)&a, sizeof a, 5000);
  close(fd);
  int port = th_free_port();
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  a = th_loopback(port);
  t->refused = ch_io_connect(fd, (struct sockaddr *)&a, sizeof a, 5000);
  close(fd);
}

static void test_io_accept_parks_until_a_connect_and_connect_reports_refusal(void **state) {
  (void)state;
  struct conn_test t = { th_free_port(), -1, -1, 1, 1 };
  t.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(t.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = th_loopback(t.port);
  assert_int_equal(bind(t.lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(t.lfd, 16), 0);
  assert_true(ch_spawn(acceptor_main, &t) > 0);
  assert_true(ch_spawn(connector_main, &t) > 0);
  th_run();
  assert_true(t.acc >= 0);
  assert_int_equal(t.crc, 0);
  assert_int_equal(t.refused, -ECONNREFUSED);
  close(t.acc);
  close(t.lfd);
}

/* A unix listener with a full backlog: the kernel says EAGAIN and reports
** the unconnected socket writable at once, so the connect retries on a
** clock instead of spinning, and gives up with -EAGAIN at its timeout. */
struct backlog { const char *path; int rc; double ms; };

static void backlog_connector(void *arg) {
  struct backlog *b = arg;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  strcpy(a.sun_path, b->path);
  int fds[64], n = 0, r = 0;
  /* Fill the backlog (listen(0) queues at most one). */
  for (; n < 64; n++) {
    fds[n] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    r = connect(fds[n], (struct sockaddr *)&a, sizeof a);   /* non-blocking: no wait */
    if (r < 0) break;
  }
  CHECK(r < 0 && errno == EAGAIN);
  double t0 = th_now_ms();
  b->rc = ch_io_connect(fds[n], (struct sockaddr *)&a, sizeof a, 100);
  b->ms = th_now_ms() - t0;
  for (int i = 0; i <= n && i < 64; i++) close(fds[i]);
}

static void test_io_connect_to_a_full_unix_backlog_retries_until_its_timeout(void **state) {
  (void)state;
  char path[108];
  snprintf(path, sizeof path, "/tmp/cohost-test-io-%d.sock", (int)getpid());
  unlink(path);
  int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  strcpy(a.sun_path, path);
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 0), 0);
  struct backlog b = { path, 0, 0 };
  assert_true(ch_spawn(backlog_connector, &b) > 0);
  th_run();
  assert_int_equal(b.rc, -EAGAIN);
  assert_true(b.ms >= 95 && b.ms < 2000);
  close(l);
  unlink(path);
}

/* ch_io_input_quiet: unknown (0) for an fd epoll does not watch, even
** after a read said EAGAIN; quiet after a wait registered it and a short
** read emptied it; not quiet once bytes or an EOF came (epoll counted
** them while the coroutine slept), though nothing read them. */
struct quiet { int fd, peer; int unwatched, drained, after_data, drained_again, after_eof; };

static void quiet_sender(void *arg) {
  int fd = *(int *)arg;
  ch_sleep_ms(20);
  CHECK_EQ(write(fd, "ab", 2), 2);
}

static void quiet_main(void *arg) {
  struct quiet *q = arg;
  char buf[16];
  CHECK_EQ(ch_io_read(q->fd, buf, sizeof buf, 0), -EAGAIN);   /* never waited */
  q->unwatched = ch_io_input_quiet(q->fd);
  CHECK_EQ(ch_spawn(quiet_sender, &q->peer) > 0, 1);
  CHECK_EQ(ch_io_read(q->fd, buf, sizeof buf, 5000), 2);      /* waits: registered; short */
  q->drained = ch_io_input_quiet(q->fd);
  CHECK_EQ(write(q->peer, "c", 1), 1);
  ch_sleep_ms(20);                                             /* epoll reports it */
  q->after_data = ch_io_input_quiet(q->fd);
  CHECK_EQ(ch_io_read(q->fd, buf, sizeof buf, 5000), 1);
  q->drained_again = ch_io_input_quiet(q->fd);
  CHECK_EQ(shutdown(q->peer, SHUT_WR), 0);
  ch_sleep_ms(20);
  q->after_eof = ch_io_input_quiet(q->fd);
}

static void test_io_input_quiet_knows_only_what_epoll_reported(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct quiet q = { sv[0], sv[1], -1, -1, -1, -1, -1 };
  assert_true(ch_spawn(quiet_main, &q) > 0);
  th_run();
  assert_int_equal(q.unwatched, 0);
  assert_int_equal(q.drained, 1);
  assert_int_equal(q.after_data, 0);
  assert_int_equal(q.drained_again, 1);
  assert_int_equal(q.after_eof, 0);
  close(sv[0]);
  close(sv[1]);
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_io_wait_returns_pollout_at_once_on_a_writable_socket),
    TH_TEST(test_io_input_quiet_knows_only_what_epoll_reported),
    TH_TEST(test_io_wait_returns_pollin_when_data_arrives),
    TH_TEST(test_io_wait_returns_at_once_when_the_fd_is_already_ready),
    TH_TEST(test_io_wait_returns_etimedout_after_the_timeout),
    TH_TEST(test_io_wait_on_a_regular_file_is_ready_at_once),
    TH_TEST(test_io_wait_outside_a_coroutine_blocks_like_poll),
    TH_TEST(test_one_reader_and_one_writer_wait_on_one_fd_at_once),
    TH_TEST(test_close_wakes_an_io_wait_waiter_with_ebadf),
    TH_TEST(test_cancel_wakes_an_io_wait_waiter_with_ecanceled),
    TH_TEST(test_io_read_returns_as_soon_as_any_data_is_there),
    TH_TEST(test_io_read_gives_eof_after_a_short_read),
    TH_TEST(test_io_read_skips_the_read_a_drained_socket_would_refuse),
    TH_TEST(test_io_read_that_may_not_park_waits_in_poll_and_then_reads),
    TH_TEST(test_io_read_wait_read_that_may_not_park_reads_after_the_wait),
    TH_TEST(test_io_read_times_out_with_etimedout),
    TH_TEST(test_io_read_of_a_cancelled_coroutine_returns_ecanceled),
    TH_TEST(test_io_read_outside_a_coroutine_blocks_like_read),
    TH_TEST(test_io_write_returns_partial_counts_and_loses_nothing),
    TH_TEST(test_io_write_to_a_closed_peer_is_epipe_not_sigpipe),
    TH_TEST(test_io_accept_parks_until_a_connect_and_connect_reports_refusal),
    TH_TEST(test_io_connect_to_a_full_unix_backlog_retries_until_its_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
