/*
** Tests of host/net/stream.c, the one read and write path of cosockets,
** HTTP and WebSocket, with no Lua: lines and patterns across reads, the
** buffer limit, a close while a reader is parked, writes that must wait,
** TLS bytes decrypted but not yet read (no input edge will announce them),
** and the poll(2) path of a coroutine that may not park.
*/
#include "helpers.h"

#include <poll.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "log.h"
#include "net/stream.h"
#include "net/tls.h"

/* -- Lines and patterns --------------------------------------------------- */

struct lines {
  int fd;
  int r1, r2, r3;
  size_t len1, len2;
  char line1[32], line2[32];
};

static void line_reader(void *arg) {
  struct lines *t = arg;
  struct ch_stream s;
  ch_stream_init(&s, t->fd, NULL);
  t->r1 = ch_stream_line(&s, 5000, &t->len1);
  if (t->r1 == 1) {
    memcpy(t->line1, ch_stream_data(&s), t->len1);
    ch_stream_consume(&s, t->len1);
  }
  t->r2 = ch_stream_line(&s, 5000, &t->len2);
  if (t->r2 == 1) {
    memcpy(t->line2, ch_stream_data(&s), t->len2);
    ch_stream_consume(&s, t->len2);
  }
  size_t len3;
  t->r3 = ch_stream_line(&s, 5000, &len3);   /* "tail" then EOF */
  CHECK_EQ(ch_stream_avail(&s), 4);
  ch_stream_close(&s, 0);
}

/* The rest of the lines 30 ms later, then EOF. */
static void *late_lines(void *arg) {
  int fd = *(int *)arg;
  th_thread_sleep_ms(30);
  if (th_raw_write_all(fd, "lo\r\nworld\ntail", 14) == 0) th_thread_sleep_ms(30);
  shutdown(fd, SHUT_WR);
  return NULL;
}

static void test_a_line_split_across_reads_is_found_whole(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "hel", 3), 3);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, late_lines, &sv[1]), 0);
  struct lines t = { .fd = sv[0] };
  assert_true(ch_spawn(line_reader, &t) > 0);
  th_run();
  pthread_join(th, NULL);
  assert_int_equal(t.r1, 1);
  assert_int_equal(t.len1, 7);
  assert_memory_equal(t.line1, "hello\r\n", 7);
  assert_int_equal(t.r2, 1);
  assert_memory_equal(t.line2, "world\n", 6);
  assert_int_equal(t.r3, 0);   /* EOF, the tail left buffered */
  close(sv[1]);
}

struct until {
  int fd;
  int r1, r2, r3;
  size_t pos1, safe2, safe3;
};

static void until_reader(void *arg) {
  struct until *t = arg;
  struct ch_stream s;
  ch_stream_init(&s, t->fd, NULL);
  size_t pos, safe;
  t->r1 = ch_stream_until(&s, "--end", 5, 0, 5000, &pos, &safe);
  t->pos1 = pos;
  ch_stream_consume(&s, pos + 5);
  /* A limit: 4 bytes that cannot be the pattern come first. */
  t->r2 = ch_stream_until(&s, "--end", 5, 4, 5000, &pos, &t->safe2);
  /* A timeout: the possible head of the pattern at the end is held back. */
  ch_stream_consume(&s, ch_stream_avail(&s));
  t->r3 = ch_stream_until(&s, "--end", 5, 0, 100, &pos, &t->safe3);
  ch_stream_close(&s, 0);
}

static void test_a_pattern_split_across_reads_is_found_and_a_limit_stops_first(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "abc--e", 6), 6);
  struct th_delayed_write dw;
  th_delayed_write_start(&dw, sv[1], 30, "ndabcdefgh", 10);
  struct until t = { .fd = sv[0] };
  assert_true(ch_spawn(until_reader, &t) > 0);
  th_run();
  th_delayed_write_join(&dw);
  assert_int_equal(t.r1, 1);
  assert_int_equal(t.pos1, 3);
  assert_int_equal(t.r2, 2);
  assert_true(t.safe2 >= 4);
  assert_int_equal(t.r3, -ETIMEDOUT);
  close(sv[0]);
  close(sv[1]);
}

/* A buffer at its limit says -ENOBUFS (HTTP answers 431 to that). */
static void test_a_full_buffer_at_its_limit_says_enobufs(void **state) {
  (void)state;
  struct ch_stream s;
  ch_stream_init(&s, -1, NULL);
  s.max = 8192;
  char big[8192];
  memset(big, 'x', sizeof big);
  assert_int_equal(ch_stream_put(&s, big, sizeof big), 0);
  assert_int_equal(ch_stream_reserve(&s, 1), -ENOBUFS);
  ch_stream_consume(&s, 100);   /* room comes from compacting */
  assert_int_equal(ch_stream_reserve(&s, 100), 0);
  assert_int_equal(ch_stream_avail(&s), 8092);
  ch_stream_close(&s, 0);
}

/* -- Close and write ---------------------------------------------------------- */

struct closing {
  struct ch_stream s;
  ssize_t got, after;
  size_t kept;
};

static void parked_reader(void *arg) {
  struct closing *t = arg;
  t->got = ch_stream_fill(&t->s, 1, 5000);        /* "part" */
  t->after = ch_stream_fill(&t->s, 1, 5000);      /* parked until the close */
  t->kept = ch_stream_avail(&t->s);               /* still readable after it */
  ch_stream_drop(&t->s);
}

static void stream_closer(void *arg) {
  struct closing *t = arg;
  ch_sleep_ms(20);
  ch_stream_close(&t->s, 0);
}

static void test_a_close_while_a_reader_is_parked_wakes_it_with_ebadf(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "part", 4), 4);
  struct closing t;
  memset(&t, 0, sizeof t);
  ch_stream_init(&t.s, sv[0], NULL);
  assert_true(ch_spawn(parked_reader, &t) > 0);
  assert_true(ch_spawn(stream_closer, &t) > 0);
  th_run();
  assert_int_equal(t.got, 4);
  assert_int_equal(t.after, -EBADF);
  assert_int_equal(t.kept, 4);   /* the close left the buffer to the reader */
  close(sv[1]);
}

#define BIG (2 << 20)

struct bulk { int fd; char *out, *in; size_t got; int rc; };

static void bulk_writer(void *arg) {
  struct bulk *b = arg;
  struct ch_stream s;
  ch_stream_init(&s, b->fd, NULL);
  struct iovec iov[3] = { { b->out, 100 }, { b->out + 100, BIG / 2 }, { b->out + 100 + BIG / 2, BIG / 2 - 100 } };
  b->rc = ch_stream_writev(&s, iov, 3, 5000);
  shutdown(b->fd, SHUT_WR);
}

static void bulk_reader(void *arg) {
  struct bulk *b = arg;
  struct ch_stream s;
  ch_stream_init(&s, b->fd, NULL);
  for (;;) {
    ssize_t n = ch_stream_fill(&s, 65536, 5000);
    if (n <= 0) { CHECK_EQ(n, 0); break; }
    memcpy(b->in + b->got, ch_stream_data(&s), ch_stream_avail(&s));
    b->got += ch_stream_avail(&s);
    ch_stream_consume(&s, ch_stream_avail(&s));
    ch_sleep_ms(1);   /* slower than the writer: its writes must wait */
  }
  ch_stream_close(&s, 0);
}

static void test_writev_waits_for_room_and_writes_every_byte_in_order(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  struct bulk w = { sv[0], malloc(BIG), NULL, 0, -1 }, r = { sv[1], NULL, malloc(BIG), 0, 0 };
  for (size_t i = 0; i < BIG; i++) w.out[i] = (char)(i * 7 + (i >> 10));
  assert_true(ch_spawn(bulk_writer, &w) > 0);
  assert_true(ch_spawn(bulk_reader, &r) > 0);
  th_run();
  assert_int_equal(w.rc, 0);
  assert_int_equal(r.got, BIG);
  assert_memory_equal(w.out, r.in, BIG);
  free(w.out);
  free(r.in);
  close(sv[0]);
}

/* -- Where the coroutine may not park ------------------------------------------ */

struct noparks { int fd; ssize_t first, second; double ms; char buf[8]; };

static void nopark_reader(void *arg) {
  struct noparks *t = arg;
  ch_coro_set_may_yield(ch_current(), 0);   /* as in a __gc finalizer */
  struct ch_stream s;
  ch_stream_init(&s, t->fd, NULL);
  t->first = ch_stream_fill(&s, 1, 3000);    /* "ab": short, drained */
  ch_stream_consume(&s, ch_stream_avail(&s));
  double t0 = th_now_ms();
  t->second = ch_stream_fill(&s, 1, 3000);   /* blocks in poll(2), then reads */
  t->ms = th_now_ms() - t0;
  memcpy(t->buf, ch_stream_data(&s), ch_stream_avail(&s) < 8 ? ch_stream_avail(&s) : 8);
  ch_stream_close(&s, 0);
}

/* The wait of a coroutine that may not park blocks in poll(2), which leaves
** no epoll event behind: had the fill kept the socket "known empty" it
** would wait again and again without reading, until its timeout. */
static void test_a_fill_that_may_not_park_reads_what_poll_saw(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  assert_int_equal(write(sv[1], "ab", 2), 2);
  struct th_delayed_write dw;
  th_delayed_write_start(&dw, sv[1], 50, "late", 4);
  struct noparks t = { .fd = sv[0] };
  assert_true(ch_spawn(nopark_reader, &t) > 0);
  th_run();
  th_delayed_write_join(&dw);
  assert_int_equal(t.first, 2);
  assert_int_equal(t.second, 4);
  assert_memory_equal(t.buf, "late", 4);
  assert_true(t.ms >= 40 && t.ms < 2500);
  close(sv[1]);
}

/* -- TLS ---------------------------------------------------------------------- */

/* A throwaway server context: an EC key and a self-signed certificate. */
static SSL_CTX *test_server_ctx(void) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  assert_non_null(key);
  assert_non_null(x);
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME *name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
  X509_set_issuer_name(x, name);
  assert_true(X509_sign(x, key, EVP_sha256()) > 0);
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
  X509_free(x);
  EVP_PKEY_free(key);
  return ctx;
}

#define RECORD 10000   /* one SSL_write: one record, read in 4 KiB pieces */

struct tls_pair {
  int sfd, cfd;
  SSL_CTX *sctx, *cctx;
  int srv_rc, cli_rc;
  size_t got;
  int fills, late;          /* fills after the first; ones that timed out */
  volatile int done;
};

static void tls_server(void *arg) {
  struct tls_pair *p = arg;
  struct ch_stream s;
  ch_stream_init(&s, p->sfd, ch_tls_new(p->sctx, p->sfd, 1));
  p->srv_rc = ch_stream_handshake(&s, 5000);
  if (p->srv_rc == 0) {
    char rec[RECORD];
    memset(rec, 'r', sizeof rec);
    p->srv_rc = ch_stream_write(&s, rec, sizeof rec, 5000);
  }
  /* Sends nothing more until the client is done: no input edge comes. */
  while (!p->done) ch_sleep_ms(5);
  ch_stream_close(&s, 1);
}

static void tls_client(void *arg) {
  struct tls_pair *p = arg;
  struct ch_stream s;
  ch_stream_init(&s, p->cfd, ch_tls_new(p->cctx, p->cfd, 0));
  s.max = 4096;   /* room for less than the record: SSL keeps the rest */
  p->cli_rc = ch_stream_handshake(&s, 5000);
  while (p->cli_rc == 0 && p->got < RECORD) {
    ssize_t n = ch_stream_fill(&s, 1, p->got ? 300 : 5000);
    if (n == -ETIMEDOUT) { p->late++; break; }
    if (n <= 0) { p->cli_rc = (int)n; break; }
    if (p->got) p->fills++;
    p->got += ch_stream_avail(&s);
    ch_stream_consume(&s, ch_stream_avail(&s));   /* the next fill starts empty */
  }
  p->done = 1;
  ch_stream_close(&s, 1);
}

static void test_tls_bytes_decrypted_but_unread_come_without_an_input_edge(void **state) {
  (void)state;
  int sv[2];
  th_socketpair(sv);
  char err[256];
  struct tls_pair p = { .sfd = sv[0], .cfd = sv[1], .sctx = test_server_ctx() };
  p.cctx = ch_tls_ctx_client(NULL, NULL, NULL, err, sizeof err);
  assert_non_null(p.cctx);
  assert_true(ch_spawn(tls_server, &p) > 0);
  assert_true(ch_spawn(tls_client, &p) > 0);
  th_run();
  SSL_CTX_free(p.sctx);
  assert_int_equal(p.srv_rc, 0);
  assert_int_equal(p.cli_rc, 0);
  assert_int_equal(p.late, 0);
  assert_int_equal(p.got, RECORD);
  assert_true(p.fills >= 1);   /* the record came in more than one piece */
}

/* -- An idle reader ---------------------------------------------------------- */

/* An idle connection's reader parks in ch_stream_fill. It holds no buffer
** while parked, and in COPY mode (where a parked coroutine's frames are
** its cost, copied to the heap) the fill keeps one small frame above the
** runtime's fd wait: 48 bytes on x86-64 since its park went out of line
** and tail-calls the wait (80 before, when it kept the wait's fd and the
** "never waits" flag across it). */
struct idle {
  int sv[2];
  struct ch_stream s;
  struct ch_coro *filler, *waiter;
  ssize_t first, second;        /* the two fills */
  int buffered;                 /* s.buf while the filler was parked */
  size_t fill_saved, wait_saved;
};

static void idle_filler(void *arg) {
  struct idle *t = arg;
  t->filler = ch_current();
  t->first = ch_stream_fill(&t->s, 1, 5000);     /* "ab", there already */
  ch_stream_consume(&t->s, ch_stream_avail(&t->s));
  t->second = ch_stream_fill(&t->s, 1, 5000);    /* parks until "c" */
  ch_stream_drop(&t->s);
}

static void idle_waiter(void *arg) {
  struct idle *t = arg;
  t->waiter = ch_current();
  ch_io_wait(t->sv[1], POLLIN, 5000);            /* parks until "d" */
}

static void idle_monitor(void *arg) {
  struct idle *t = arg;
  ch_yield();   /* both parked by now; running here saved them */
  t->buffered = t->s.buf != NULL;
  t->fill_saved = ch_coro_saved_bytes(t->filler);
  t->wait_saved = ch_coro_saved_bytes(t->waiter);
  CHECK_EQ(write(t->sv[1], "c", 1), 1);
  CHECK_EQ(write(t->sv[0], "d", 1), 1);
}

static void test_a_parked_fill_holds_no_buffer_and_one_small_frame(void **state) {
  (void)state;
  int mode = ch_sched_stack_mode();
  int copy = ch_sched_set_stack_mode(CH_STACK_COPY) == 0;   /* -ENOTSUP under ASan */
  /* Either backend (make test IO_BACKEND=uring): a fill parks through
  ** the same frames on both. */
  struct idle t;
  memset(&t, 0, sizeof t);
  th_socketpair(t.sv);
  assert_int_equal(write(t.sv[1], "ab", 2), 2);
  ch_stream_init(&t.s, t.sv[0], NULL);
  assert_true(ch_spawn(idle_filler, &t) > 0);
  assert_true(ch_spawn(idle_waiter, &t) > 0);
  assert_true(ch_spawn(idle_monitor, &t) > 0);
  th_run();
  assert_int_equal(ch_sched_set_stack_mode(mode), 0);
  close(t.sv[0]);
  close(t.sv[1]);
  assert_int_equal(t.first, 2);
  assert_int_equal(t.second, 1);
  assert_false(t.buffered);
  if (!copy) return;   /* no images to compare */
  /* 128 = ch_stream_fill's 48, ch_io_recv's 48 more than the plain
  ** wait's wait_for (both park in their own frame: ch_fdwait_link, the
  ** park, ch_fdwait_done), and the 32 by which idle_filler's frame is the
  ** larger of the two test functions' (gcc -O2, x86-64). The fill's whole
  ** image is what it was before the receive took an allocation callback
  ** (320 bytes); the plain wait's is 48 smaller. */
  if (t.wait_saved == 0 || t.fill_saved < t.wait_saved + 80 ||
      t.fill_saved - t.wait_saved > 128)
    fail_msg("a parked fill saved %zu bytes, an fd wait %zu: want 80 to 128 more",
             t.fill_saved, t.wait_saved);
}

int main(void) {
  th_main_init();
  ch_log_set_level(CH_LOG_ERR);
  const struct CMUnitTest tests[] = {
    TH_TEST(test_a_line_split_across_reads_is_found_whole),
    TH_TEST(test_a_pattern_split_across_reads_is_found_and_a_limit_stops_first),
    TH_TEST(test_a_full_buffer_at_its_limit_says_enobufs),
    TH_TEST(test_a_close_while_a_reader_is_parked_wakes_it_with_ebadf),
    TH_TEST(test_writev_waits_for_room_and_writes_every_byte_in_order),
    TH_TEST(test_a_fill_that_may_not_park_reads_what_poll_saw),
    TH_TEST(test_tls_bytes_decrypted_but_unread_come_without_an_input_edge),
    TH_TEST(test_a_parked_fill_holds_no_buffer_and_one_small_frame),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
