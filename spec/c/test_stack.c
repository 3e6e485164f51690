/*
** Tests of coroutine stacks: the guard turns an overflow into a named
** diagnostic and a distinct exit status, other faults are left alone, and
** stacks are pooled and reused.
**
** Faults are provoked in a child process that re-executes this binary with
** a mode argument, handled in main() before cmocka starts. A plain fork
** would not do: cmocka replaces the SIGSEGV handler around every test with
** its own (installed with signal(), without SA_ONSTACK), so inside a test
** the runtime's handler is not the one the kernel would call.
**
** The child is this binary by its own path, through th_child_argv
** (helpers.h): under valgrind the children run natively, so the fault
** tests see the kernel's real signal delivery, and the parent is still
** checked; under qemu-user they run through TH_EXEC_WRAPPER.
*/
#include "helpers.h"

#include <poll.h>
#include <sys/prctl.h>

/* -- Child modes ------------------------------------------------------------ */

static void overflow_main(void *arg) {
  (void)arg;
  volatile char top = 0;
  /* The top of this coroutine's stack, for the parent to bound the
  ** reported guard address. */
  dprintf(1, "top=%p\n", (void *)&top);
  th_recurse(0, &top);
  _exit(3);  /* not reached when the guard works */
}

static void idle_main(void *arg) {
  (void)arg;
  ch_sleep_ms(10);
}

static int overflow_child(void) {
  /* A first coroutine that does nothing wrong, so the faulting one is not
  ** simply the first id: the report must name the right coroutine. */
  if (ch_spawn(idle_main, NULL) <= 0) return 5;
  int id = ch_spawn(overflow_main, NULL);
  if (id <= 0) return 5;
  dprintf(1, "id=%d\n", id);
  ch_run();
  return 4;  /* ch_run returned: the overflow went unnoticed */
}

static void segv_main(void *arg) {
  (void)arg;
  /* An ordinary bad pointer; volatile so the compiler cannot see it. */
  volatile int *volatile bad = (volatile int *)(uintptr_t)16;
  *bad = 1;
  _exit(3);
}

static int segv_child(void) {
  if (ch_spawn(segv_main, NULL) <= 0) return 5;
  ch_run();
  return 4;
}

static void noop(void *arg) { (void)arg; }

/* Prints the flags of the SIGSEGV and SIGBUS handlers the runtime left
** installed after running a coroutine. */
static int sigaction_child(void) {
  if (ch_spawn(noop, NULL) <= 0) return 5;
  if (ch_run() != 0) return 6;
  int sigs[2] = { SIGSEGV, SIGBUS };
  for (int i = 0; i < 2; i++) {
    struct sigaction sa;
    if (sigaction(sigs[i], NULL, &sa) != 0) return 7;
    int dfl = !(sa.sa_flags & SA_SIGINFO) &&
              (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN);
    dprintf(1, "sig%d installed=%d onstack=%d\n", sigs[i], !dfl,
            (sa.sa_flags & SA_ONSTACK) != 0);
  }
  return 0;
}

/* -- Running a child ------------------------------------------------------- */

struct child { char out[4096], err[4096]; int status; };

/* poll(2) with the raw system call: AArch64 has no SYS_poll, only ppoll,
** which every Linux architecture has. */
static long raw_poll(struct pollfd *p, nfds_t n, int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  return syscall(SYS_ppoll, p, n, &ts, NULL, (size_t)8 /* kernel sigset */);
}

/* Runs this binary with mode as argv[1], capturing stdout and stderr.
** Reads with raw system calls: the hooks are not what is tested here. */
static void run_child(const char *mode, struct child *c) {
  memset(c, 0, sizeof *c);
  char *argv[TH_MAX_ARGS];
  th_child_argv(mode, argv);
  int po[2], pe[2];
  assert_int_equal(pipe2(po, O_CLOEXEC), 0);
  assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* Only async-signal-safe calls between fork and exec. */
    dup2(po[1], 1);
    dup2(pe[1], 2);
    struct rlimit no_core = { 0, 0 };
    setrlimit(RLIMIT_CORE, &no_core);  /* the segv child must not dump core */
    execv(argv[0], argv);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  size_t no = 0, ne = 0;
  int open_fds = 2;
  double deadline = th_now_ms() + 20000;  /* the child needs well under 1 s */
  while (open_fds > 0 && th_now_ms() < deadline) {
    struct pollfd p[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
    long rc = raw_poll(p, 2, 1000);
    if (rc < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; i++) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char *buf = i ? c->err : c->out;
      size_t *len = i ? &ne : &no;
      size_t cap = (i ? sizeof c->err : sizeof c->out) - 1;
      char scratch[512];
      long n = syscall(SYS_read, p[i].fd, *len < cap ? buf + *len : scratch,
                       *len < cap ? cap - *len : sizeof scratch);
      if (n > 0 && *len < cap) *len += (size_t)n;
      if (n <= 0) {
        close(i ? pe[0] : po[0]);
        if (i) pe[0] = -1; else po[0] = -1;
        open_fds--;
      }
    }
  }
  if (po[0] >= 0) close(po[0]);
  if (pe[0] >= 0) close(pe[0]);
  if (open_fds > 0) kill(pid, SIGKILL);
  assert_int_equal(waitpid(pid, &c->status, 0), pid);
}

/* -- Tests ------------------------------------------------------------------- */

static void test_stack_overflow_prints_diagnostic_and_exits_with_distinct_code(
    void **state) {
  (void)state;
  struct child c;
  run_child("--overflow-child", &c);
  if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != CH_EXIT_STACK_OVERFLOW)
    fail_msg("child status 0x%x (exited=%d code=%d signaled=%d sig=%d), stderr: %s",
             c.status, WIFEXITED(c.status), WEXITSTATUS(c.status),
             WIFSIGNALED(c.status), WIFSIGNALED(c.status) ? WTERMSIG(c.status) : 0,
             c.err);
  int id = 0;
  void *top = NULL;
  const char *p = strstr(c.out, "id=");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "id=%d", &id), 1);
  p = strstr(c.out, "top=");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "top=%p", &top), 1);

  char want[64];
  snprintf(want, sizeof want, "coroutine %d stack overflow (guard hit at 0x", id);
  p = strstr(c.err, want);
  if (!p) fail_msg("stderr lacks \"%s...)\": %s", want, c.err);
  unsigned long long addr = 0;
  char close_paren = 0;
  assert_int_equal(sscanf(p + strlen(want), "%llx%c", &addr, &close_paren), 2);
  assert_int_equal(close_paren, ')');
  /* The fault is below the coroutine's first frame, within a stack's
  ** reach (default 256 KiB + the guard; 2 MiB leaves room for layout). */
  uintptr_t t = (uintptr_t)top;
  assert_true(addr < t);
  assert_true(t - addr < 2u * 1024 * 1024);
}

static void test_fault_outside_a_guard_is_not_reported_as_overflow(void **state) {
  (void)state;
  struct child c;
  run_child("--segv-child", &c);
  assert_null(strstr(c.err, "stack overflow"));
  /* The runtime's handler passes the fault on: the default action kills. */
  if (!WIFSIGNALED(c.status) || WTERMSIG(c.status) != SIGSEGV)
    fail_msg("child status 0x%x, want death by SIGSEGV; stderr: %s", c.status, c.err);
}

static void test_runtime_fault_handlers_run_on_the_alternate_stack(void **state) {
  (void)state;
  struct child c;
  run_child("--sigaction-child", &c);
  assert_true(WIFEXITED(c.status));
  assert_int_equal(WEXITSTATUS(c.status), 0);
  char want[64];
  /* SIGSEGV must be caught (the guard report needs it), on the altstack. */
  snprintf(want, sizeof want, "sig%d installed=1 onstack=1", SIGSEGV);
  if (!strstr(c.out, want)) fail_msg("want \"%s\", child said: %s", want, c.out);
  /* SIGBUS is optional, but if installed it must use SA_ONSTACK too. */
  snprintf(want, sizeof want, "sig%d installed=1 onstack=0", SIGBUS);
  if (strstr(c.out, want)) fail_msg("SIGBUS handler without SA_ONSTACK: %s", c.out);
}

/* Touches 16 KiB of its stack: a fresh stack would fault in 4 pages. */
static void touch_stack(void *arg) {
  (void)arg;
  volatile char buf[16 * 1024];
  for (size_t i = 0; i < sizeof buf; i += 512) buf[i] = (char)i;
}

#define REUSE 10000

static void test_stacks_are_reused_so_mappings_stay_flat(void **state) {
  (void)state;
  /* Warm up: the pool, slab and scheduler exist after this. */
  for (int i = 0; i < 100; i++) {
    assert_true(ch_spawn(touch_stack, NULL) > 0);
    th_run();
  }
  struct ch_stats st0, st1;
  assert_int_equal(ch_stats(&st0), 0);
  long maps0 = th_count_maps(), faults0 = th_minor_faults();
  for (int i = 0; i < REUSE; i++) {
    int id = ch_spawn(touch_stack, NULL);
    if (id <= 0) fail_msg("spawn %d: %d", i, id);
    th_run();
  }
  long maps1 = th_count_maps(), faults1 = th_minor_faults();
  assert_int_equal(ch_stats(&st1), 0);
  /* One coroutine at a time: no new mapping, no new address space ... */
  if (maps1 - maps0 > 2) fail_msg("maps grew from %ld to %ld", maps0, maps1);
  assert_int_equal(st1.stack_bytes, st0.stack_bytes);
  assert_true(st1.stacks_free >= 1);
  /* ... and no fresh pages: a new stack per coroutine would fault at least
  ** REUSE * 4 times (40,000); a reused warm one hardly at all. */
  if (faults1 - faults0 >= REUSE / 5)
    fail_msg("%ld minor faults over %d spawns: stacks not reused warm",
             faults1 - faults0, REUSE);
}

/* -- Trimming: a burst's stacks keep their pages for a while, then give
** back all but CH_STACK_WATERMARK of them. */

#define BURST 1024


static void touch_and_park(void *arg) {
  volatile char deep[48 * 1024];   /* 12 pages of this coroutine's stack */
  for (size_t i = 0; i < sizeof deep; i += 4096) deep[i] = 1;
  ch_sleep_ms(*(int *)arg);
  deep[0] = 2;
}

static void tick(void *arg) {
  for (int t = 0; t < *(int *)arg; t += 100) ch_sleep_ms(100);
}

static long faults_now(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static void test_burst_stacks_stay_warm_then_are_trimmed_to_the_watermark(void **state) {
  (void)state;
  if (ch_sched_stack_mode() == CH_STACK_COPY) {
    /* Copy mode pools no per-coroutine stacks (test_copystack checks its
    ** save buffers are given back after a burst). */
    fprintf(stderr, "skipped: copy-stack mode has one shared stack, no pool to trim\n");
    skip();
  }
  int short_ms = 10, long_ms = 2300;
  for (int i = 0; i < BURST; i++) assert_true(ch_spawn(touch_and_park, &short_ms) > 0);
  th_run();
  long warm = th_rss_pages();
  /* A second burst right away reuses the same warm stacks: few faults. */
  long f0 = faults_now();
  for (int i = 0; i < BURST; i++) assert_true(ch_spawn(touch_and_park, &short_ms) > 0);
  th_run();
  long f1 = faults_now();
  if (f1 - f0 > BURST)
    fail_msg("%ld faults re-running a burst of %d: warm stacks were given back", f1 - f0, BURST);
  /* One coroutine outlives two trim periods (the first still saw the
  ** burst), waking the loop every 100 ms: it trims meanwhile. */
  assert_true(ch_spawn(tick, &long_ms) > 0);
  th_run();
  long trimmed = th_rss_pages();
  /* (BURST - 256) stacks of 12 touched pages each went back. */
  if (warm - trimmed < (BURST - 256) * 12 / 2)
    fail_msg("rss %ld pages before, %ld after a trim period: stacks not trimmed", warm, trimmed);
}

/* -- A burst that outlives the idle trim (issue 26): the loop trims after a
** second with no spawn, and trimmed then while the burst still held its
** stacks; when the burst ended nothing armed the trim again, and an idle
** loop kept its stacks warm until the next spawn. Ends arm it now. RSS is
** watched from a thread of its own: a coroutine polling it would wake the
** loop, whose periodic pool trim (ch_stack_trim) then gives the stacks
** back anyway, as it does for any loop that keeps running. */

struct burst_watch {
  struct ch_sched *sched;      /* the test's scheduler, for ch_post */
  struct ch_coro *sleeper;     /* keeps ch_run going until the watch ends */
  int park_ms;                 /* how long the burst stays parked */
  long held, after;            /* RSS pages while parked, at the end */
};

static void wake_sleeper(void *arg) {
  struct burst_watch *w = arg;
  ch_unpark(w->sleeper, 0);
}

static void *watch_burst(void *arg) {
  struct burst_watch *w = arg;
  struct timespec ts = { 0, 100 * 1000000 };
  for (int t = 0; t < w->park_ms - 400; t += 100) nanosleep(&ts, NULL);
  w->held = th_rss_pages();
  /* Until (BURST - 256) stacks of 12 touched pages each went back, or 10 s. */
  for (int t = 0; t < w->park_ms + 10000; t += 100) {
    nanosleep(&ts, NULL);
    w->after = th_rss_pages();
    if (w->held - w->after >= (BURST - 256) * 12 / 2) break;
  }
  if (ch_post(w->sched, wake_sleeper, w) != 0) abort();
  return NULL;
}

static void sleep_until_woken(void *arg) {
  struct burst_watch *w = arg;
  w->sleeper = ch_current();
  ch_park(60000);
}

static void test_a_burst_ending_after_the_idle_trim_is_trimmed_when_it_ends(void **state) {
  (void)state;
  if (ch_sched_stack_mode() == CH_STACK_COPY) {
    fprintf(stderr, "skipped: copy-stack mode has one shared stack, no pool to trim\n");
    skip();
  }
  /* Parked past the trim that their spawns arm, 1 s after them. */
  struct burst_watch w = { .sched = ch_sched_self(), .park_ms = 2000 };
  for (int i = 0; i < BURST; i++) assert_true(ch_spawn(touch_and_park, &w.park_ms) > 0);
  assert_true(ch_spawn(sleep_until_woken, &w) > 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, watch_burst, &w), 0);
  th_run();
  pthread_join(th, NULL);
  if (w.held - w.after < (BURST - 256) * 12 / 2)
    fail_msg("rss %ld pages while the burst was parked, %ld up to 10 s after it ended: its stacks stayed",
             w.held, w.after);
}

/* -- Deep stacks: a coroutine that went deeper than CH_STACK_KEEP gives
** the pages below back when its stack is freed, not after the pool's
** trim (which keeps CH_STACK_WATERMARK stacks warm, all of their pages). */

static long deep_rss;

static void go_deep(void *arg) {
  (void)arg;
  volatile char deep[600 * 1024];   /* 150 pages, most below the keep */
  for (size_t i = 0; i < sizeof deep; i++) deep[i] = 1;
  deep_rss = th_rss_pages();
  deep[0] = 2;
}

static void test_a_deep_stack_gives_its_pages_below_the_keep_back_when_freed(void **state) {
  (void)state;
  if (ch_sched_stack_mode() == CH_STACK_COPY) {
    fprintf(stderr, "skipped: copy-stack mode frees no per-coroutine stack\n");
    skip();
  }
  assert_int_equal(ch_set_stack_size(1 << 20), 0);
  assert_true(ch_spawn(go_deep, NULL) > 0);
  th_run();
  long after = th_rss_pages();
  assert_int_equal(ch_set_stack_size(0), 0);
  /* (600 - 64) KiB went back: 134 pages, and some slack for the heap. */
  if (deep_rss - after < 100)
    fail_msg("rss %ld pages while deep, %ld after the coroutine ended", deep_rss, after);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--overflow-child") == 0) return overflow_child();
  if (argc > 1 && strcmp(argv[1], "--segv-child") == 0) return segv_child();
  if (argc > 1 && strcmp(argv[1], "--sigaction-child") == 0) return sigaction_child();
  if (th_self_exe_init() != 0) {
    fprintf(stderr, "test_stack: cannot read /proc/self/exe\n");
    return 1;
  }
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_stack_overflow_prints_diagnostic_and_exits_with_distinct_code),
    TH_TEST(test_fault_outside_a_guard_is_not_reported_as_overflow),
    TH_TEST(test_runtime_fault_handlers_run_on_the_alternate_stack),
    TH_TEST(test_stacks_are_reused_so_mappings_stay_flat),
    TH_TEST(test_burst_stacks_stay_warm_then_are_trimmed_to_the_watermark),
    TH_TEST(test_a_burst_ending_after_the_idle_trim_is_trimmed_when_it_ends),
    TH_TEST(test_a_deep_stack_gives_its_pages_below_the_keep_back_when_freed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
