/*
** Shared helpers for the C tests in spec/c/: failure recording inside
** coroutines, a per-test watchdog, clocks, and small fd and thread tools.
** Header-only (static inline), one copy per test binary.
*/
#ifndef CH_TEST_HELPERS_H
#define CH_TEST_HELPERS_H

/* cmocka.h needs these four before it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cohost.h"

/* -- Failures inside coroutines -------------------------------------------
** cmocka fails a test by longjmp'ing from the assertion back to its runner.
** From a coroutine that jump would cross a context switch and leave the
** scheduler believing the coroutine still runs, breaking every later test in
** the binary. So code running in a coroutine (or a timer callback, or a
** posted function) only records the first failure with CHECK*, and the test
** body calls th_assert_coros_ok() after ch_run has returned.
*/

static char th_fail_msg[512];   /* first failure seen off the test's stack */
static int th_fail_count;       /* failures seen since the test started */

static inline void th_failed(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void th_failed(const char *file, int line, const char *fmt, ...) {
  if (th_fail_count++ == 0) {
    int n = snprintf(th_fail_msg, sizeof th_fail_msg, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof th_fail_msg)
      vsnprintf(th_fail_msg + n, sizeof th_fail_msg - (size_t)n, fmt, ap);
    va_end(ap);
  }
}

/* Records a failure unless cond holds; safe in coroutines and callbacks. */
#define CHECK(cond) do { \
    if (!(cond)) th_failed(__FILE__, __LINE__, "CHECK(%s) failed", #cond); \
  } while (0)

/* Like CHECK(a == b) but prints both values (as long long). */
#define CHECK_EQ(a, b) do { \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b); \
    if (th_a_ != th_b_) th_failed(__FILE__, __LINE__, \
        "CHECK_EQ(%s, %s) failed: %lld != %lld", #a, #b, th_a_, th_b_); \
  } while (0)

/* Fails the running test if any coroutine recorded a failure. Call it from
** the test body only, after ch_run returned. */
static inline void th_assert_coros_ok(void) {
  if (th_fail_count) {
    int n = th_fail_count;
    th_fail_count = 0;
    fail_msg("%d failure(s) inside coroutines; first: %s", n, th_fail_msg);
  }
}

/* -- Valgrind ---------------------------------------------------------------
** Under `make valgrind` (scripts/test.sh with VALGRIND=1) the binaries run
** on valgrind's synthetic CPU: 20-50x slower, SSE and x87 arithmetic always
** rounded to nearest, and signals delivered by valgrind itself. A test that
** checks what valgrind cannot emulate skips there with TH_SKIP_UNDER_VALGRIND,
** saying why; one that is only slow scales its count down with
** th_under_valgrind(). Natively both are a no-op (RUNNING_ON_VALGRIND is a
** few instructions that yield 0), so a real failure cannot hide behind them.
** Without <valgrind/valgrind.h> (the AArch64 cross build) nothing is skipped.
*/
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TH_HAVE_VALGRIND 1
#endif
#endif

/* Nonzero when this process runs under valgrind. */
static inline int th_under_valgrind(void) {
#ifdef TH_HAVE_VALGRIND
  return RUNNING_ON_VALGRIND != 0;
#else
  return 0;
#endif
}

/* An upper bound on wall time, in ms, for "at once" checks: as given
** natively, ten times more on valgrind's slower CPU. */
static inline double th_slow_ms(double ms) {
  return th_under_valgrind() ? ms * 10 : ms;
}

/* Skips the running test under valgrind, printing why; a no-op natively.
** Call it from the test body only, before anything needs cleaning up
** (skip() longjmps out of the test, as a failure does). */
#define TH_SKIP_UNDER_VALGRIND(why) do { \
    if (th_under_valgrind()) { \
      printf("skipped under valgrind: %s\n", why); \
      skip(); \
    } \
  } while (0)

/* -- Watchdog --------------------------------------------------------------
** A runtime bug that loses a wakeup makes ch_run wait forever. The alarm
** turns that into a quick, visible failure of this binary (scripts/test.sh
** counts it) instead of a 300 s timeout. cmocka has already printed
** "[ RUN ] <test>", so the hung test is named in the output.
*/
#define TH_WATCHDOG_S 30  /* the slowest test here takes about 3 s */
#define TH_WATCHDOG_VALGRIND_S 240  /* x8 under valgrind: within test.sh's
                                    ** 300 s per binary, and tests that would
                                    ** be slower scale their counts down */
/* x4 in an ASan build: the 100k-coroutine test of test_coro took over
** 30 s there on a loaded 2-core machine (14 s on a quieter moment); still
** well within test.sh's 600 s per binary under SAN. */
#define TH_WATCHDOG_ASAN_S 120
#if defined(CH_ASAN) || defined(__SANITIZE_ADDRESS__)
#define TH_WATCHDOG_NATIVE_S TH_WATCHDOG_ASAN_S
#else
#define TH_WATCHDOG_NATIVE_S TH_WATCHDOG_S
#endif

static inline void th_watchdog_fired(int sig) {
  (void)sig;
  static const char m[] =
      "\nwatchdog: test still running after its time limit (lost wakeup?); aborting\n";
  /* Raw syscall: write(2) is hooked and may run on a coroutine's stack. */
  (void)!syscall(SYS_write, 2, m, sizeof m - 1);
  _exit(99);  /* not 124: that is timeout(1)'s own status */
}

static inline int th_setup(void **state) {
  (void)state;
  th_fail_count = 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = th_watchdog_fired;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm(th_under_valgrind() ? TH_WATCHDOG_VALGRIND_S : TH_WATCHDOG_NATIVE_S);
  return 0;
}

static inline int th_teardown(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

/* Every test runs under the watchdog. */
#define TH_TEST(f) cmocka_unit_test_setup_teardown(f, th_setup, th_teardown)

/* Common start of every test main(): line-buffered stdout so cmocka's
** stdout lines and its stderr summary interleave whole when piped, and
** SIGPIPE ignored so a write to a closed peer fails with EPIPE instead of
** killing the whole binary. */
static inline void th_main_init(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
}

/* -- Clocks ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ms, read directly (not through the runtime). */
static inline double th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sleeps the calling thread with the raw system call, so that helper threads
** never depend on the sleep hooks under test. */
static inline void th_thread_sleep_ms(int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR) {}
}

/* Kernel thread id, to tell which thread ran something. */
static inline pid_t th_gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* -- Process state --------------------------------------------------------- */

/* Lines in /proc/self/maps, i.e. VMAs (vm.max_map_count counts these).
** stdio reads through glibc's internal read, which the hooks do not see.
** Cost: O(mappings). */
static inline long th_count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  long n = 0;
  int c;
  while ((c = getc(f)) != EOF)
    if (c == '\n') n++;
  fclose(f);
  return n;
}

/* Minor page faults of this process so far. */
static inline long th_minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* -- Re-executing this binary ------------------------------------------------
** Tests that need a fresh process (fault handlers as installed at startup,
** a panic) run this binary again with a mode argument. By its own path,
** read once from /proc/self/exe by th_self_exe_init() in main(), not by
** /proc/self/exe itself: under valgrind that link names valgrind's tool,
** which refuses to run directly, while readlink gives the client's path
** (and valgrind does not follow the exec: the child runs natively). Under
** qemu-user a guest cannot exec an arm64 binary without binfmt_misc, so
** TH_EXEC_WRAPPER, set by scripts/test_arm64.sh, names the emulator and its
** options, which go first.
*/
#define TH_MAX_ARGS 32

static char th_self_exe[4096];      /* this binary's path */
static char th_wrapper_words[1024]; /* TH_EXEC_WRAPPER, split in place */

/* Reads this binary's path; 0, or -1 if /proc/self/exe cannot be read. */
static inline int th_self_exe_init(void) {
  ssize_t n = readlink("/proc/self/exe", th_self_exe, sizeof th_self_exe - 1);
  if (n <= 0 || (size_t)n >= sizeof th_self_exe - 1) return -1;
  th_self_exe[n] = 0;
  return 0;
}

/* Fills argv for execv(argv[0], argv): the words of TH_EXEC_WRAPPER (split
** on spaces), this binary, then mode. Call it before fork: it writes
** static buffers, and argv points into them. */
static inline void th_child_argv(const char *mode, char *argv[TH_MAX_ARGS]) {
  int n = 0;
  const char *w = getenv("TH_EXEC_WRAPPER");
  if (w && *w) {
    snprintf(th_wrapper_words, sizeof th_wrapper_words, "%s", w);
    char *save = NULL;
    for (char *t = strtok_r(th_wrapper_words, " ", &save); t && n < TH_MAX_ARGS - 3;
         t = strtok_r(NULL, " ", &save))
      argv[n++] = t;
  }
  argv[n++] = th_self_exe;
  argv[n++] = (char *)mode;
  argv[n] = NULL;
}

/* -- Sockets and raw I/O --------------------------------------------------- */

/* An AF_UNIX stream socketpair, close-on-exec so children never inherit it. */
static inline void th_socketpair(int sv[2]) {
  int rc = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
  assert_int_equal(rc, 0);
}

/* A loopback TCP port nobody listens on right now: bind port 0, read the
** port the kernel picked, close. Racy in theory, fine for tests. */
static inline int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* 127.0.0.1:port as a sockaddr. */
static inline struct sockaddr_in th_loopback(int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  return a;
}

/* Writes all of buf with the raw system call (helper threads only). */
static inline int th_raw_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    long n = syscall(SYS_write, fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* -- Helper threads -------------------------------------------------------- */

/* A plain pthread that waits delay_ms, then writes len bytes of buf to fd,
** all with raw system calls, so that a coroutine's blocking call has
** something to wait for that does not depend on the scheduler. */
struct th_delayed_write {
  int fd;
  int delay_ms;
  const void *buf;
  size_t len;
  int rc;                   /* 0 when everything was written */
  pthread_t thread;
};

static inline void *th_delayed_write_main(void *arg) {
  struct th_delayed_write *w = arg;
  th_thread_sleep_ms(w->delay_ms);
  w->rc = th_raw_write_all(w->fd, w->buf, w->len);
  return NULL;
}

static inline void th_delayed_write_start(struct th_delayed_write *w, int fd,
                                          int delay_ms, const void *buf,
                                          size_t len) {
  w->fd = fd;
  w->delay_ms = delay_ms;
  w->buf = buf;
  w->len = len;
  w->rc = -1;
  assert_int_equal(pthread_create(&w->thread, NULL, th_delayed_write_main, w), 0);
}

static inline void th_delayed_write_join(struct th_delayed_write *w) {
  pthread_join(w->thread, NULL);
  assert_int_equal(w->rc, 0);
}

/* -- Ticker coroutine ------------------------------------------------------
** Proves that a blocking call parked only its coroutine: the ticker keeps
** counting while the call waits. It stops when *stop is set or after max
** ticks, so ch_run always ends.
*/
struct th_ticker {
  volatile int stop;        /* set by the coroutine under test when done */
  int period_ms;            /* sleep between ticks */
  int max;                  /* bound on ticks */
  int ticks;                /* ticks counted */
};

/* Yields. The ticker coroutine's body. */
static inline void th_ticker_main(void *arg) {
  struct th_ticker *t = arg;
  for (int i = 0; i < t->max && !t->stop; i++) {
    ch_sleep_ms(t->period_ms);
    if (!t->stop) t->ticks++;
  }
}

static inline void th_ticker_spawn(struct th_ticker *t, int period_ms, int max) {
  t->stop = 0;
  t->period_ms = period_ms;
  t->max = max;
  t->ticks = 0;
  assert_true(ch_spawn(th_ticker_main, t) > 0);
}

/* Runs the scheduler and checks it returned 0 and that no coroutine
** recorded a failure. */
static inline void th_run(void) {
  int rc = ch_run();
  assert_int_equal(rc, 0);
  th_assert_coros_ok();
}

/* Recurses 1 KiB a frame until a stack guard stops it (the overflow
** tests). The frame's buffer is volatile and its address escapes into the
** next call, so the compiler can neither drop the frame nor turn the
** recursion into a loop. Bounded by TH_MAX_DEPTH (1 GiB of frames, far
** past any stack) so that a missing guard ends in a distinct way instead
** of running away. */
#define TH_MAX_DEPTH 1000000L
static __attribute__((noinline, unused)) long th_recurse(long depth, volatile char *prev) {
  volatile char buf[1024];
  buf[0] = (char)depth;
  buf[sizeof buf - 1] = prev ? prev[0] : 0;
  if (depth >= TH_MAX_DEPTH) return depth;
  long r = th_recurse(depth + 1, buf);
  __asm__ volatile("" : : : "memory");
  return r + buf[sizeof buf - 1];
}

/* This process's resident pages (/proc/self/statm), or 0. */
static inline long th_rss_pages(void) {
  long size = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss;
}

#endif
