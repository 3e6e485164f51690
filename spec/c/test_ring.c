/*
** Tests of runtime/ring.c, the io_uring backend: that reads, writes and
** accepts of coroutines go through the ring (an operation in flight, no
** epoll registration), that they mean what the calls mean (bytes, EOF,
** partial writes, EPIPE without SIGPIPE, MSG_PEEK), that a timeout, a
** cancel or a close ends a parked operation without losing a byte, and
** that a kernel refusing io_uring (a seccomp filter here) or a fork leaves
** the scheduler on epoll, working. Where this kernel (or qemu-user) has no
** io_uring at all, the ring tests skip and the refusal test still runs.
*/
#include "helpers.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "backend.h"
#include "libc.h"
#include "ring.h"
#include "sched.h"

/* Ring operations in flight on this thread's scheduler. */
static unsigned ring_inflight(void) {
  return ch_sched_tls->be->inflight(ch_sched_tls);
}

/* Turns the ring on for this thread's scheduler, or skips the test with
** the kernel's reason. */
static void ring_on(void) {
  TH_SKIP_UNDER_VALGRIND("valgrind does not see the kernel write ring buffers");
  int r = ch_sched_set_io_backend(CH_IO_URING);
  if (r < 0) {
    fprintf(stderr, "skipped: no io_uring here: %s\n", strerror(-r));
    skip();
  }
  assert_int_equal(ch_sched_io_backend(NULL), CH_IO_URING);
}

static void ring_off(void) {
  assert_int_equal(ch_sched_set_io_backend(CH_IO_EPOLL), 0);
}

struct reader {
  int fd;
  size_t want;
  int64_t timeout;
  ssize_t rc;
  char buf[64];
  int done;
};

static void reader_main(void *arg) {
  struct reader *r = arg;
  r->rc = ch_io_read(r->fd, r->buf, r->want, r->timeout);
  r->done = 1;
}

/* While the reader is parked: what the ring and the fd's entry say. */
struct probe { int fd; struct reader *r; unsigned inflight; int registered; int peer;
               int *holds; int held; };

static void probe_main(void *arg) {
  struct probe *p = arg;
  while (!ch_current() || ch_sched_tls->nwaiting == 0) ch_yield();
  p->inflight = ring_inflight();
  if (p->holds) p->held = *p->holds;
  p->registered = ch_fd_peek(p->fd)->registered;
  CHECK_EQ(write(p->peer, "ring", 4), 4);
}

static void test_ring_read_parks_on_the_ring_not_on_epoll(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct reader r = { .fd = sv[0], .want = 64, .timeout = 5000 };
  struct probe p = { .fd = sv[0], .r = &r, .peer = sv[1] };
  assert_true(ch_spawn(reader_main, &r) > 0);
  assert_true(ch_spawn(probe_main, &p) > 0);
  th_run();
  assert_int_equal(p.inflight, 1);      /* the read was a ring operation */
  assert_int_equal(p.registered, 0);    /* and epoll never saw the fd */
  assert_int_equal(r.rc, 4);
  assert_memory_equal(r.buf, "ring", 4);
  assert_int_equal(ring_inflight(), 0);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* A read returns what is there, a later one the rest, then EOF. */
struct reads { int fd; ssize_t rc[3]; char buf[3][16]; };

static void reads_main(void *arg) {
  struct reads *x = arg;
  for (int i = 0; i < 3; i++) x->rc[i] = ch_io_read(x->fd, x->buf[i], 4, 5000);
}

static void test_ring_reads_give_partial_bytes_then_eof(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "abcdef", 6), 6);
  shutdown(sv[1], SHUT_WR);
  struct reads x = { .fd = sv[0] };
  assert_true(ch_spawn(reads_main, &x) > 0);
  th_run();
  assert_int_equal(x.rc[0], 4);
  assert_memory_equal(x.buf[0], "abcd", 4);
  assert_int_equal(x.rc[1], 2);
  assert_memory_equal(x.buf[1], "ef", 2);
  assert_int_equal(x.rc[2], 0);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* A timeout cancels the operation in the kernel, and the bytes that come
** afterwards are the next read's: none is swallowed by the cancelled one. */
struct late { int fd, peer; ssize_t first, second; char buf[16]; double ms; };

static void late_main(void *arg) {
  struct late *l = arg;
  double t0 = th_now_ms();
  l->first = ch_io_read(l->fd, l->buf, sizeof l->buf, 50);
  l->ms = th_now_ms() - t0;
  CHECK_EQ(write(l->peer, "late", 4), 4);
  l->second = ch_io_read(l->fd, l->buf, sizeof l->buf, 5000);
}

static void test_ring_read_timeout_loses_no_byte(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct late l = { .fd = sv[0], .peer = sv[1] };
  assert_true(ch_spawn(late_main, &l) > 0);
  th_run();
  assert_int_equal(l.first, -ETIMEDOUT);
  assert_true(l.ms >= 45 && l.ms < 2000);
  assert_int_equal(l.second, 4);
  assert_memory_equal(l.buf, "late", 4);
  assert_int_equal(ring_inflight(), 0);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* ch_cancel and a close of the fd each end a parked ring read. The
** receive a cancelled read posted stays in flight (nothing of the
** coroutine's is in it): what it brings is the next read's, so no byte is
** lost. */
struct ending { struct ch_coro *reader; int fd; int close_it; ssize_t rc; };

static void ending_reader(void *arg) {
  struct ending *e = arg;
  char buf[8];
  e->reader = ch_current();
  e->rc = ch_io_read(e->fd, buf, sizeof buf, 5000);
}

static void ending_ender(void *arg) {
  struct ending *e = arg;
  while (ch_sched_tls->nwaiting == 0) ch_yield();   /* the reader parked */
  CHECK_EQ(ring_inflight(), 1);
  if (e->close_it) CHECK_EQ(close(e->fd), 0);
  else ch_cancel(e->reader);
}

static void end_parked_read(int close_it, ssize_t want_rc) {
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct ending e = { NULL, sv[0], close_it, 0 };
  assert_true(ch_spawn(ending_reader, &e) > 0);
  assert_true(ch_spawn(ending_ender, &e) > 0);
  double t0 = th_now_ms();
  th_run();
  assert_int_equal(e.rc, want_rc);
  assert_true(th_now_ms() - t0 < 2500);   /* not the 5 s timeout */
  if (!close_it) {
    assert_int_equal(write(sv[1], "after", 5), 5);
    struct reader r = { .fd = sv[0], .want = 64, .timeout = 5000 };
    assert_true(ch_spawn(reader_main, &r) > 0);
    th_run();
    assert_int_equal(r.rc, 5);
    assert_memory_equal(r.buf, "after", 5);
    close(sv[0]);
  }
  close(sv[1]);
  ring_off();
}

static void test_ring_read_of_a_cancelled_coroutine_returns_ecanceled(void **state) {
  (void)state;
  end_parked_read(0, -ECANCELED);
}

static void test_ring_read_on_an_fd_closed_meanwhile_returns_ebadf(void **state) {
  (void)state;
  end_parked_read(1, -EBADF);
}

/* Writes: partial counts as the kernel makes them, every byte arriving in
** order; a closed peer is EPIPE, not SIGPIPE (the binary ignores SIGPIPE,
** so the check is the errno: a SIGPIPE-raising write says EPIPE too, and
** test_hook covers the signal). */
struct bulk { int fd; size_t total; size_t sent; ssize_t err; };

#define BULK (1u << 20)

static void bulk_writer(void *arg) {
  struct bulk *b = arg;
  static char data[BULK];
  for (size_t i = 0; i < BULK; i++) data[i] = (char)(i * 7);
  while (b->sent < BULK) {
    ssize_t n = ch_io_write(b->fd, data + b->sent, BULK - b->sent, 5000);
    if (n <= 0) { b->err = n; return; }
    b->sent += (size_t)n;
  }
  shutdown(b->fd, SHUT_WR);
}

static void bulk_reader(void *arg) {
  struct bulk *b = arg;
  char buf[8192];
  for (;;) {
    ssize_t n = ch_io_read(b->fd, buf, sizeof buf, 5000);
    if (n <= 0) { if (n < 0) b->err = n; return; }
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != (char)((b->total + (size_t)i) * 7)) { b->err = -EILSEQ; return; }
    b->total += (size_t)n;
  }
}

static void test_ring_write_moves_a_megabyte_in_order(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct bulk w = { .fd = sv[0] }, r = { .fd = sv[1] };
  assert_true(ch_spawn(bulk_writer, &w) > 0);
  assert_true(ch_spawn(bulk_reader, &r) > 0);
  th_run();
  assert_int_equal(w.err, 0);
  assert_int_equal(r.err, 0);
  assert_int_equal(w.sent, BULK);
  assert_int_equal(r.total, BULK);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* A write with room goes out at once, taking no ring operation; one that
** finds the socket full parks on the ring (not on epoll) for the rest. */
struct filler { int fd; ssize_t small; uint64_t posted_small; size_t sent; ssize_t err; };

static void filler_main(void *arg) {
  struct filler *x = arg;
  static char data[BULK];
  uint64_t before = ch_ring_posted(ch_sched_tls);
  x->small = ch_io_write(x->fd, "now", 3, 5000);
  x->posted_small = ch_ring_posted(ch_sched_tls) - before;
  while (x->sent < BULK) {
    ssize_t n = ch_io_write(x->fd, data + x->sent, BULK - x->sent, 5000);
    if (n <= 0) { x->err = n; return; }
    x->sent += (size_t)n;
  }
}

struct drainer { int fd, peer; unsigned inflight; int registered; size_t got; };

static void drainer_main(void *arg) {
  struct drainer *d = arg;
  while (ch_sched_tls->nwaiting == 0) ch_yield();
  d->inflight = ring_inflight();
  d->registered = ch_fd_peek(d->fd)->registered;
  char buf[65536];
  while (d->got < BULK + 3) {
    ssize_t n = ch_io_read(d->peer, buf, sizeof buf, 5000);
    if (n <= 0) return;
    d->got += (size_t)n;
  }
}

static void test_ring_write_with_room_goes_out_at_once(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct filler w = { .fd = sv[0] };
  struct drainer d = { .fd = sv[0], .peer = sv[1] };
  assert_true(ch_spawn(filler_main, &w) > 0);
  assert_true(ch_spawn(drainer_main, &d) > 0);
  th_run();
  assert_int_equal(w.small, 3);
  assert_int_equal(w.posted_small, 0);  /* no ring operation for it */
  assert_int_equal(d.inflight, 1);      /* the full socket's write was one */
  assert_int_equal(d.registered, 0);    /* and epoll never saw the fd */
  assert_int_equal(w.err, 0);
  assert_int_equal(d.got, BULK + 3);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

struct piper { int fd; ssize_t rc; };

static void epipe_writer(void *arg) {
  struct piper *p = arg;
  p->rc = ch_io_write(p->fd, "x", 1, 5000);
}

static void test_ring_write_to_a_closed_peer_is_epipe(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  close(sv[1]);
  struct piper p = { sv[0], 0 };
  assert_true(ch_spawn(epipe_writer, &p) > 0);
  th_run();
  assert_int_equal(p.rc, -EPIPE);
  close(sv[0]);
  ring_off();
}

/* COPY mode: a receive (ch_io_recv) parks on the ring's receive, which
** writes no stack (the kernel fills one of the ring's buffers), and its
** bytes arrive whole although another coroutine ran on the shared stack
** meanwhile. The room is asked for only once they are there. */
struct taker { int fd; ssize_t rc; char got[16]; int holds; };

/* holds: rooms given and not given back. */
static int taker_room(void *ctx, size_t hint, struct iovec *b) {
  (void)hint;
  struct taker *t = ctx;
  if (!b) {
    t->holds--;
    return 0;
  }
  t->holds++;
  b->iov_base = t->got;
  b->iov_len = sizeof t->got;
  return 0;
}

static void taker_main(void *arg) {
  struct taker *t = arg;
  t->rc = ch_io_recv(t->fd, 16, taker_room, t, 5000);
}

static void test_ring_copy_mode_receive_takes_the_ring(void **state) {
  (void)state;
  ring_on();
  int r = ch_sched_set_stack_mode(CH_STACK_COPY);
  if (r == -ENOTSUP) {   /* a sanitizer build has no copy-stack mode */
    ring_off();
    fprintf(stderr, "skipped: no copy-stack mode in this build\n");
    skip();
  }
  assert_int_equal(r, 0);
  int sv[2];
  th_socketpair(sv);
  struct taker t = { .fd = sv[0] };
  struct probe p = { .fd = sv[0], .peer = sv[1], .holds = &t.holds };
  assert_true(ch_spawn(taker_main, &t) > 0);
  assert_true(ch_spawn(probe_main, &p) > 0);
  th_run();
  assert_int_equal(ch_sched_set_stack_mode(CH_STACK_SEPARATE), 0);
  assert_int_equal(p.inflight, 1);      /* the receive was a ring operation */
  assert_int_equal(p.registered, 0);    /* and epoll never saw the fd */
  assert_int_equal(p.held, 0);          /* parked without room */
  assert_int_equal(t.rc, 4);
  assert_int_equal(t.holds, 1);
  assert_memory_equal(t.got, "ring", 4);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* The hooks: a plain read() and recv(MSG_PEEK) in a coroutine are ring
** operations with libc's meaning. */
struct hooked { int fd; ssize_t peek, got; char a[8], b[8]; };

static void hooked_main(void *arg) {
  struct hooked *h = arg;
  h->peek = recv(h->fd, h->a, sizeof h->a, MSG_PEEK);
  h->got = read(h->fd, h->b, sizeof h->b);
}

static void delayed_hi(void *arg) {
  int fd = *(int *)arg;
  while (ch_sched_tls->nwaiting == 0) ch_yield();
  CHECK_EQ(ring_inflight(), 1);   /* the peek is on the ring */
  CHECK_EQ(write(fd, "hi", 2), 2);
}

static void test_ring_hooked_peek_then_read_see_the_same_bytes(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct hooked h = { .fd = sv[0] };
  assert_true(ch_spawn(hooked_main, &h) > 0);
  assert_true(ch_spawn(delayed_hi, &sv[1]) > 0);
  th_run();
  assert_int_equal(h.peek, 2);
  assert_memory_equal(h.a, "hi", 2);
  assert_int_equal(h.got, 2);
  assert_memory_equal(h.b, "hi", 2);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* Accept on the ring returns a connected socket the runtime knows. */
struct acc { int l; int fd; char buf[4]; ssize_t n; };

static void acceptor(void *arg) {
  struct acc *a = arg;
  a->fd = ch_io_accept(a->l, NULL, NULL, 0, 5000);
  if (a->fd >= 0) a->n = ch_io_read(a->fd, a->buf, sizeof a->buf, 5000);
}

static void connector(void *arg) {
  struct acc *a = arg;
  while (ch_sched_tls->nwaiting == 0) ch_yield();
  CHECK_EQ(ring_inflight(), 1);   /* the accept's wait is on the ring */
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  CHECK_EQ(getsockname(a->l, (struct sockaddr *)&sa, &len), 0);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_EQ(ch_io_connect(c, (struct sockaddr *)&sa, len, 5000), 0);
  CHECK_EQ(ch_io_write(c, "acc", 3, 5000), 3);
  close(c);
}

static void test_ring_accept_returns_a_connection(void **state) {
  (void)state;
  ring_on();
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(l, 8), 0);
  struct acc a = { .l = l, .fd = -1 };
  assert_true(ch_spawn(acceptor, &a) > 0);
  assert_true(ch_spawn(connector, &a) > 0);
  th_run();
  assert_true(a.fd >= 0);
  assert_int_equal(a.n, 3);
  assert_memory_equal(a.buf, "acc", 3);
  close(a.fd);
  close(l);
  ring_off();
}

/* Runs the loop for ms (a coroutine sleeps that long): completions of
** operations left in flight by ended coroutines come in meanwhile. */
static void sleeper(void *arg) {
  ch_sleep_ms(*(int *)arg);
}

static void run_for_ms(int ms) {
  static int m;
  m = ms;
  assert_true(ch_spawn(sleeper, &m) > 0);
  th_run();
}

/* -- Listeners, as on epoll ----------------------------------------------- */

/* A TCP listener on loopback, its port chosen by the kernel; *sa gets
** its address. */
static int loopback_listener(struct sockaddr_in *sa) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(l >= 0);
  *sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof *sa;
  assert_int_equal(bind(l, (struct sockaddr *)sa, len), 0);
  assert_int_equal(listen(l, 8), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)sa, &len), 0);
  return l;
}

struct lst { int l; int r, r2; int bound; int c; struct sockaddr_in sa; };

/* A drain's last accept (nothing queued, no wait), a connection that
** comes before the close, then the close. */
static void drain_then_close(void *arg) {
  struct lst *x = arg;
  x->r = ch_io_accept(x->l, NULL, NULL, SOCK_CLOEXEC, 0);
  x->c = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_EQ(ch_libc.connect(x->c, (struct sockaddr *)&x->sa, sizeof x->sa), 0);
  close(x->l);
}

/* A worker's listener is a dup of a socket the master keeps and hands to
** the next generation: the worker's last accept and its close take no
** connection off it, so one that comes meanwhile is the next one's. (A
** multishot accept armed by that accept took it, then reset it.) */
static void test_ring_a_closed_listener_takes_no_connection_off_a_shared_socket(void **state) {
  (void)state;
  ring_on();
  struct lst x = { .r = 1 };
  x.l = loopback_listener(&x.sa);
  int keep = dup(x.l);   /* the master's */
  assert_true(ch_spawn(drain_then_close, &x) > 0);
  th_run();
  assert_int_equal(x.r, -EAGAIN);
  run_for_ms(20);   /* loop turns: what the ring holds comes in */
  int a = accept4(keep, NULL, NULL, SOCK_NONBLOCK);
  assert_true(a >= 0);
  close(a);
  close(x.c);
  close(keep);
  ring_off();
}

/* An accept, then the fd limit lowered to the fds open (as prlimit or
** setrlimit does): the next accept says EMFILE, which the listener's
** shedding (host/net/listener.c) waits for. (A multishot accept keeps
** the limit it was armed under and accepted on.) */
static void accept_under_a_lowered_limit(void *arg) {
  struct lst *x = arg;
  int c = socket(AF_INET, SOCK_STREAM, 0);
  x->r = ch_io_accept(x->l, NULL, NULL, SOCK_CLOEXEC, 0);
  ch_sleep_ms(10);   /* a loop turn: what that armed is in the kernel */
  struct rlimit old, low;
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  int lowest = fcntl(0, F_DUPFD, 0);   /* every fd below it is open */
  close(lowest);
  low = old;
  low.rlim_cur = (rlim_t)lowest;
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  CHECK_EQ(ch_io_connect(c, (struct sockaddr *)&x->sa, sizeof x->sa, 5000), 0);
  x->r2 = ch_io_accept(x->l, NULL, NULL, SOCK_CLOEXEC, 1000);
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  if (x->r2 >= 0) close(x->r2);
  close(c);
}

static void test_ring_accept_under_a_lowered_fd_limit_says_emfile(void **state) {
  (void)state;
  ring_on();
  struct lst x = { .r = 1 };
  x.l = loopback_listener(&x.sa);
  assert_true(ch_spawn(accept_under_a_lowered_limit, &x) > 0);
  th_run();
  assert_int_equal(x.r, -EAGAIN);
  assert_int_equal(x.r2, -EMFILE);
  close(x.l);
  ring_off();
}

/* An acceptor parked on the ring, and its listener closed by another
** coroutine: the port is free when close returns, as on epoll, so no
** connection is hashed to (SO_REUSEPORT) or queued on a socket nobody
** will accept on. (The ring's operation held the file, and the socket
** listened on until the loop's next enter, or the ring's teardown.) */
static void parked_acceptor(void *arg) {
  struct lst *x = arg;
  x->r = ch_io_accept(x->l, NULL, NULL, SOCK_CLOEXEC, 5000);
}

static void listener_closer(void *arg) {
  struct lst *x = arg;
  while (ch_sched_tls->nwaiting == 0) ch_yield();
  ch_sleep_ms(10);   /* a loop turn: the acceptor's wait is in the kernel */
  CHECK_EQ(ring_inflight() > 0, 1);
  close(x->l);
  int n = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  CHECK_EQ(setsockopt(n, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
  x->bound = bind(n, (struct sockaddr *)&x->sa, sizeof x->sa) == 0 ? 0 : -errno;
  close(n);
}

static void test_ring_a_closed_listeners_port_is_free_when_close_returns(void **state) {
  (void)state;
  ring_on();
  struct lst x = { .r = 1, .bound = 1 };
  x.l = loopback_listener(&x.sa);
  assert_true(ch_spawn(parked_acceptor, &x) > 0);
  assert_true(ch_spawn(listener_closer, &x) > 0);
  th_run();
  assert_int_equal(x.bound, 0);
  assert_int_equal(x.r, -EBADF);
  ring_off();
}

/* -- Receiving ahead, and its bounds ----------------------------------------- */

/* A stream's receive (ch_io_recv) that reads once, finds the socket empty
** after (timeout 0: from then on its receive reads ahead), and stops. */
struct stream_rx { int fd; ssize_t first, second; char buf[4096]; int holds; };

static int stream_room(void *ctx, size_t hint, struct iovec *b) {
  (void)hint;
  struct stream_rx *x = ctx;
  if (!b) { x->holds--; return 0; }
  x->holds++;
  b->iov_base = x->buf;
  b->iov_len = sizeof x->buf;
  return 0;
}

static void stream_rx_main(void *arg) {
  struct stream_rx *x = arg;
  x->first = ch_io_recv(x->fd, sizeof x->buf, stream_room, x, 5000);
  x->second = ch_io_recv(x->fd, sizeof x->buf, stream_room, x, 0);
}

/* TCP's back-pressure is kept: a reader that stops reading has at most a
** few buffers read ahead for it, and the rest stays in the socket, so the
** sender's socket fills and its writes say EAGAIN. */
struct flood { int fd; size_t sent; int full; };

static void flood_main(void *arg) {
  struct flood *f = arg;
  static char data[65536];
  ch_sleep_ms(20);   /* the reader's first receive is done: it reads ahead */
  for (int turns = 0; turns < 2000 && !f->full; turns++) {
    ssize_t n = send(f->fd, data, sizeof data, MSG_DONTWAIT);
    if (n > 0) f->sent += (size_t)n;
    else if (n < 0 && errno == EAGAIN) f->full = 1;
    else return;
    ch_sleep_ms(1);   /* a loop turn: the ring takes what it will */
  }
}

static void test_ring_reading_ahead_stops_at_its_bound_and_the_sender_fills(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "go", 2), 2);
  struct stream_rx x = { .fd = sv[0] };
  struct flood f = { .fd = sv[1] };
  assert_true(ch_spawn(stream_rx_main, &x) > 0);
  assert_true(ch_spawn(flood_main, &f) > 0);
  th_run();
  assert_int_equal(x.first, 2);
  assert_true(f.full);
  uint32_t in, out;
  ch_ring_held(ch_sched_tls, sv[0], &in, &out);
  /* The bound (ring.c's AHEAD_MAX, 16 KiB) and the few buffers that came
  ** before the stop took effect; never the megabytes a sender could push. */
  if (in == 0 || in > 64 * 1024) fail_msg("%u bytes held ahead of the reader", in);
  assert_true(f.sent > in);   /* the rest waits in the socket */
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* When every provided buffer is out (ENOBUFS), a receive waits for
** readiness and reads into its caller's room instead: the bytes still
** come. Streams that stop reading hold the ring's buffers here. */
#define HOGS 300

struct hog { int fd; struct stream_rx x; };

static void hog_main(void *arg) {
  struct hog *h = arg;
  stream_rx_main(&h->x);
}

static void test_ring_out_of_buffers_a_receive_reads_the_socket_itself(void **state) {
  (void)state;
  ring_on();
  static struct hog hogs[HOGS];
  static int pairs[HOGS][2];
  static char chunk[4096];
  for (int i = 0; i < HOGS; i++) {
    th_socketpair(pairs[i]);
    assert_int_equal(write(pairs[i][1], "x", 1), 1);
    hogs[i] = (struct hog){ .fd = pairs[i][0], .x = { .fd = pairs[i][0] } };
    assert_true(ch_spawn(hog_main, &hogs[i]) > 0);
  }
  th_run();   /* each read its byte, and reads ahead now */
  for (int k = 0; k < 6; k++) {   /* 6 x 4 KiB each: more than the ring has */
    for (int i = 0; i < HOGS; i++) assert_int_equal(write(pairs[i][1], chunk, sizeof chunk), 4096);
    run_for_ms(10);
  }
  assert_true(ch_ring_nobufs(ch_sched_tls) > 0);
  /* A new stream's receive still gets its bytes. */
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "still", 5), 5);
  struct stream_rx x = { .fd = sv[0] };
  assert_true(ch_spawn(stream_rx_main, &x) > 0);
  th_run();
  assert_int_equal(x.first, 5);
  assert_memory_equal(x.buf, "still", 5);
  close(sv[0]);
  close(sv[1]);
  for (int i = 0; i < HOGS; i++) {
    close(pairs[i][0]);
    close(pairs[i][1]);
  }
  ring_off();
}

/* Input a stream read ahead is every reader's first: a hooked read()
** on the same fd gets it, in order, and poll() counts it as readable. */
struct after_ahead { int fd; ssize_t got; char buf[64]; int polled; };

static void after_ahead_main(void *arg) {
  struct after_ahead *a = arg;
  struct pollfd p = { a->fd, POLLIN, 0 };
  a->polled = poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
  a->got = read(a->fd, a->buf, sizeof a->buf);
}

static void test_ring_bytes_read_ahead_are_a_hooked_reads_first(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "1", 1), 1);
  struct stream_rx x = { .fd = sv[0] };
  assert_true(ch_spawn(stream_rx_main, &x) > 0);
  th_run();   /* read "1"; its receive stays armed */
  assert_int_equal(write(sv[1], "23", 2), 2);
  run_for_ms(20);   /* a loop turn: the ring takes "23" ahead */
  uint32_t in, out;
  ch_ring_held(ch_sched_tls, sv[0], &in, &out);
  assert_int_equal(in, 2);
  assert_int_equal(write(sv[1], "45", 2), 2);   /* still in the socket, or taken */
  struct after_ahead a = { .fd = sv[0] };
  assert_true(ch_spawn(after_ahead_main, &a) > 0);
  th_run();
  assert_true(a.polled);
  assert_true(a.got >= 2);
  assert_memory_equal(a.buf, "2345", (size_t)a.got);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* A close ends the connection at once, as close(2) does on epoll: the
** receive the ring keeps armed holds the file until the kernel has
** cancelled it, and a cancel left for the loop's next turn let the peer
** see a new connection of this process before the end of this one (kv's
** LRANGE spec: the server still held the old client's reply when the
** next one came, and ran out of memory). */
struct closer { int fd, peer; ssize_t peer_rc; int peer_errno; };

static void closer_main(void *arg) {
  struct closer *c = arg;
  assert_int_equal(close(c->fd), 0);
  /* No loop turn in between: what the peer sees now. */
  char b;
  c->peer_rc = ch_libc.recv(c->peer, &b, 1, MSG_DONTWAIT);
  c->peer_errno = c->peer_rc < 0 ? errno : 0;
}

static void test_ring_close_of_a_stream_reading_ahead_ends_it_at_once(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "x", 1), 1);
  struct stream_rx x = { .fd = sv[0] };
  assert_true(ch_spawn(stream_rx_main, &x) > 0);
  th_run();   /* read "x"; its receive stays armed, in the kernel */
  assert_int_equal(x.first, 1);
  assert_true(ring_inflight() > 0);
  struct closer c = { .fd = sv[0], .peer = sv[1] };
  assert_true(ch_spawn(closer_main, &c) > 0);
  th_run();
  if (c.peer_rc != 0)
    fail_msg("the peer read %zd (%s) right after the close, not its end", c.peer_rc,
             strerror(c.peer_errno));
  close(sv[1]);
  ring_off();
}

/* -- Sending behind -------------------------------------------------------- */

/* ch_io_send returns once the bytes are queued: nothing parked, nothing
** in the kernel yet until the loop's next turn submits the send. */
struct behind { int fd; int rc; uint32_t queued; uint64_t posted; };

static void behind_main(void *arg) {
  struct behind *b = arg;
  struct iovec iov = { "queued", 6 };
  uint64_t before = ch_ring_posted(ch_sched_tls);
  b->rc = ch_io_send(b->fd, &iov, 1, 5000);
  uint32_t in;
  ch_ring_held(ch_sched_tls, b->fd, &in, &b->queued);
  b->posted = ch_ring_posted(ch_sched_tls) - before;
}

static void test_ring_send_returns_with_its_bytes_queued(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct behind b = { .fd = sv[0] };
  uint64_t switches = 0;
  struct ch_stats st;
  assert_int_equal(ch_stats(&st), 0);
  switches = st.switches;
  assert_true(ch_spawn(behind_main, &b) > 0);
  th_run();
  assert_int_equal(ch_stats(&st), 0);
  assert_int_equal(b.rc, 0);
  assert_int_equal(b.queued, 6);   /* in the connection's buffer */
  assert_int_equal(b.posted, 1);   /* one send, posted: no system call */
  assert_true(st.switches - switches <= 2);   /* in and out: it never parked */
  char buf[16];
  assert_int_equal(read(sv[1], buf, sizeof buf), 6);
  assert_memory_equal(buf, "queued", 6);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* A full write-behind buffer parks the sender until the kernel takes
** some; a peer that never reads so keeps a sender waiting, bounded. */
struct stuck { int fd; int rc; size_t sent; };

static void stuck_main(void *arg) {
  struct stuck *x = arg;
  char piece[100] = { 0 };
  while (x->sent < (4u << 20)) {
    struct iovec iov = { piece, sizeof piece };
    if ((x->rc = ch_io_send(x->fd, &iov, 1, 300)) < 0) return;
    x->sent += sizeof piece;
  }
}

static void test_ring_a_full_send_buffer_parks_the_sender(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct stuck x = { .fd = sv[0] };
  assert_true(ch_spawn(stuck_main, &x) > 0);
  th_run();
  assert_int_equal(x.rc, -ETIMEDOUT);   /* parked for room, then its timeout */
  uint32_t in, out;
  ch_ring_held(ch_sched_tls, sv[0], &in, &out);
  assert_true(out > 0 && out <= 16384);   /* bounded: ring.c's SEND_BUF */
  assert_true(x.sent < (4u << 20));
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* A call asked not to wait (MSG_DONTWAIT: held HTTP answers pushed from
** a timer, net/keepalive.c's peek at an idle pooled connection) keeps
** the order of what the ring holds: a send does not overtake bytes
** ch_io_send queued (it says EAGAIN until they are in the kernel), and a
** peek sees the bytes the ring read ahead, not the socket behind them. */
struct nowait { int fd; int rc; ssize_t sent; int err; };

static void nowait_main(void *arg) {
  struct nowait *w = arg;
  struct iovec iov = { "first", 5 };
  w->rc = ch_io_send(w->fd, &iov, 1, 5000);   /* queued, not yet submitted */
  w->sent = send(w->fd, "second", 6, MSG_DONTWAIT);
  w->err = errno;
}

static void test_ring_a_call_asked_not_to_wait_keeps_the_rings_order(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  struct nowait w = { .fd = sv[0] };
  assert_true(ch_spawn(nowait_main, &w) > 0);
  th_run();
  assert_int_equal(w.rc, 0);
  assert_int_equal(w.sent, -1);
  assert_int_equal(w.err, EAGAIN);
  char buf[16];
  assert_int_equal(read(sv[1], buf, sizeof buf), 5);
  assert_memory_equal(buf, "first", 5);
  /* The peek, outside any coroutine, as the pool's check makes it. */
  assert_int_equal(write(sv[1], "1", 1), 1);
  struct stream_rx x = { .fd = sv[0] };
  assert_true(ch_spawn(stream_rx_main, &x) > 0);
  th_run();   /* read "1"; its receive stays armed */
  assert_int_equal(ch_io_input_quiet(sv[0]), 1);
  assert_int_equal(write(sv[1], "23", 2), 2);
  run_for_ms(20);   /* a loop turn: the ring takes "23" ahead */
  uint32_t in, out;
  ch_ring_held(ch_sched_tls, sv[0], &in, &out);
  assert_int_equal(in, 2);
  assert_int_equal(ch_io_input_quiet(sv[0]), 0);
  char c = 0;
  assert_int_equal(recv(sv[0], &c, 1, MSG_PEEK | MSG_DONTWAIT), 1);
  assert_int_equal(c, '2');
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* -- A burst of connections ---------------------------------------------- */

/* A burst of connections, all queued before the acceptor runs again,
** loses none, and each comes with its peer's address. */
#define BURST 100

struct burst { int l; int n; int with_addr; struct sockaddr_in sa; int clients[BURST];
               int connected; };

/* Once the acceptor waits (its poll on the ring), BURST blocking
** connects in a row, with no loop turn between them. */
static void burst_connector(void *arg) {
  struct burst *b = arg;
  while (ch_sched_tls->nwaiting == 0) ch_yield();
  for (int i = 0; i < BURST; i++) {
    b->clients[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (ch_libc.connect(b->clients[i], (struct sockaddr *)&b->sa, sizeof b->sa) == 0)
      b->connected++;
  }
}

static void burst_acceptor(void *arg) {
  struct burst *b = arg;
  while (b->n < BURST) {
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    memset(&peer, 0, sizeof peer);
    int fd = ch_io_accept(b->l, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC, 5000);
    if (fd < 0) return;
    if (plen == sizeof peer && peer.sin_family == AF_INET &&
        peer.sin_addr.s_addr == htonl(INADDR_LOOPBACK))
      b->with_addr++;
    b->n++;
    close(fd);
  }
}

static void test_ring_a_burst_of_connections_loses_none(void **state) {
  (void)state;
  ring_on();
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(l, 512), 0);
  socklen_t len = sizeof sa;
  assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &len), 0);
  struct burst b = { .l = l, .sa = sa };
  assert_true(ch_spawn(burst_acceptor, &b) > 0);
  assert_true(ch_spawn(burst_connector, &b) > 0);
  th_run();
  assert_int_equal(b.connected, BURST);
  assert_int_equal(b.n, BURST);
  assert_int_equal(b.with_addr, BURST);
  for (int i = 0; i < BURST; i++) close(b.clients[i]);
  close(l);
  ring_off();
}

/* -- Switching ----------------------------------------------------------------- */

/* A scheduler leaves its backend only when nothing would be lost: not
** while input is held ahead for a stream, nor while a watch is armed. */
static void on_watch(struct ch_watch *w, int revents) {
  (void)w;
  (void)revents;
}

static void test_ring_is_not_left_while_it_holds_input_or_a_watch(void **state) {
  (void)state;
  ring_on();
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "1", 1), 1);
  struct stream_rx x = { .fd = sv[0] };
  assert_true(ch_spawn(stream_rx_main, &x) > 0);
  th_run();
  assert_int_equal(write(sv[1], "held", 4), 4);
  run_for_ms(20);
  assert_int_equal(ch_sched_set_io_backend(CH_IO_EPOLL), -EBUSY);   /* "held" */
  struct rx_drain { int fd; char buf[8]; ssize_t n; } d = { sv[0], { 0 }, 0 };
  d.n = ch_io_read(sv[0], d.buf, sizeof d.buf, 0);   /* outside a coroutine */
  assert_int_equal(d.n, 4);
  struct ch_watch w;
  memset(&w, 0, sizeof w);
  assert_int_equal(ch_watch_fd(&w, sv[1], POLLIN, on_watch), 0);
  assert_int_equal(ch_sched_set_io_backend(CH_IO_EPOLL), -EBUSY);   /* the watch */
  ch_unwatch_fd(&w);
  close(sv[0]);
  close(sv[1]);
  ring_off();
}

/* -- Without a ring ---------------------------------------------------------- */

/* A read in a child process: what the child exits with says how it went. */
static int child_read_works(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) return 10;
  if (write(sv[1], "ok", 2) != 2) return 11;
  struct reader r = { .fd = sv[0], .want = 2, .timeout = 2000 };
  if (ch_spawn(reader_main, &r) <= 0) return 12;
  if (ch_run() < 0) return 13;
  if (r.rc != 2 || memcmp(r.buf, "ok", 2) != 0) return 14;
  return 0;
}

/* io_uring_setup refused as a seccomp filter (or a container runtime's
** default profile) refuses it. */
static int forbid_io_uring(void) {
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { (unsigned short)(sizeof f / sizeof f[0]), f };
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static void test_ring_refused_by_the_kernel_leaves_epoll_working(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* qemu-user cannot install a seccomp filter (EINVAL); it has no
    ** io_uring either, so the refusal is still the kernel's ENOSYS. */
    int filtered = forbid_io_uring() == 0;
    int r = ch_sched_set_io_backend(CH_IO_URING);
    int why = 0;
    if (!filtered && r == 0) _exit(77);
    /* ENOSYS: a build without liburing (IO_URING=0), or qemu-user. */
    if (r != -EPERM && r != -ENOSYS) _exit(21);
    if (ch_sched_io_backend(&why) != CH_IO_EPOLL || why != r) _exit(22);
    _exit(child_read_works());
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) {
    fprintf(stderr, "skipped: no seccomp filter here, and io_uring works\n");
    skip();
  }
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* A forked child must not use its parent's ring (shared mapping, owned by
** the parent's thread): its scheduler drops it and goes on with epoll. */
static void test_ring_of_a_forked_child_is_dropped_for_epoll(void **state) {
  (void)state;
  ring_on();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int r = child_read_works();
    if (r) _exit(r);
    _exit(ch_sched_io_backend(NULL) == CH_IO_EPOLL ? 0 : 30);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* The parent's ring is untouched. */
  assert_int_equal(ch_sched_io_backend(NULL), CH_IO_URING);
  assert_int_equal(child_read_works(), 0);
  ring_off();
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_ring_read_parks_on_the_ring_not_on_epoll),
    TH_TEST(test_ring_reads_give_partial_bytes_then_eof),
    TH_TEST(test_ring_read_timeout_loses_no_byte),
    TH_TEST(test_ring_read_of_a_cancelled_coroutine_returns_ecanceled),
    TH_TEST(test_ring_read_on_an_fd_closed_meanwhile_returns_ebadf),
    TH_TEST(test_ring_write_moves_a_megabyte_in_order),
    TH_TEST(test_ring_write_to_a_closed_peer_is_epipe),
    TH_TEST(test_ring_write_with_room_goes_out_at_once),
    TH_TEST(test_ring_copy_mode_receive_takes_the_ring),
    TH_TEST(test_ring_hooked_peek_then_read_see_the_same_bytes),
    TH_TEST(test_ring_accept_returns_a_connection),
    TH_TEST(test_ring_reading_ahead_stops_at_its_bound_and_the_sender_fills),
    TH_TEST(test_ring_out_of_buffers_a_receive_reads_the_socket_itself),
    TH_TEST(test_ring_bytes_read_ahead_are_a_hooked_reads_first),
    TH_TEST(test_ring_close_of_a_stream_reading_ahead_ends_it_at_once),
    TH_TEST(test_ring_send_returns_with_its_bytes_queued),
    TH_TEST(test_ring_a_full_send_buffer_parks_the_sender),
    TH_TEST(test_ring_a_call_asked_not_to_wait_keeps_the_rings_order),
    TH_TEST(test_ring_a_burst_of_connections_loses_none),
    TH_TEST(test_ring_a_closed_listener_takes_no_connection_off_a_shared_socket),
    TH_TEST(test_ring_accept_under_a_lowered_fd_limit_says_emfile),
    TH_TEST(test_ring_a_closed_listeners_port_is_free_when_close_returns),
    TH_TEST(test_ring_is_not_left_while_it_holds_input_or_a_watch),
    TH_TEST(test_ring_refused_by_the_kernel_leaves_epoll_working),
    TH_TEST(test_ring_of_a_forked_child_is_dropped_for_epoll),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
