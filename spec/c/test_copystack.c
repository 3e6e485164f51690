/*
** Tests of COPY stack mode (ch_sched_set_stack_mode, docs/stacks.md): the
** coroutines of a scheduler share one stack, and a coroutine's used part
** is copied to the heap when another needs the stack and back before it
** runs again. Every test here runs in COPY mode whatever CH_STACK_MODE
** says (main sets it); other coroutines scribble over the shared stack
** between a coroutine's switches, so anything not restored exactly shows.
**
** Data shared between coroutines lives in statics or in the test body's
** frame (the thread's own stack, never swapped): a pointer into a parked
** coroutine's stack is exactly what COPY mode forbids.
**
** Run with "measure separate|copy" as arguments it prints the idle memory
** of 10,000 parked coroutines and the cost of a yield instead (no cmocka).
*/
#include "helpers.h"

#include <limits.h>
#include <netdb.h>
#include <poll.h>

/* This binary, for the children some tests run. Not /proc/self/exe: under
** valgrind that is valgrind's tool, which refuses to run directly; the
** path given runs the child natively (valgrind does not trace children). */
static char self_exe[PATH_MAX];

/* Under valgrind (make valgrind) heap figures are valgrind's allocator's,
** and every switch costs ~50x: the memory test skips, the long ones
** shrink. RUNNING_ON_VALGRIND is 0 natively. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define ON_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef ON_VALGRIND
#define ON_VALGRIND() 0
#endif

/* -- Helpers ---------------------------------------------------------------- */

/* Fills n bytes of this frame with a pattern and yields: run between the
** switches of a coroutine under test, it overwrites the shared stack. */
static __attribute__((noinline)) void scribble(size_t n) {
  volatile char *buf = __builtin_alloca(n);
  for (size_t i = 0; i < n; i += 64) buf[i] = (char)0xA5;
  ch_yield();
  buf[0] = 0;
}

static void scribbler(void *arg) {
  int rounds = (int)(intptr_t)arg;
  for (int i = 0; i < rounds; i++) scribble(8 * 1024 + (size_t)(i % 7) * 4096);
}

static int pid_status(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return st;
}

/* -- Mode selection ----------------------------------------------------------- */

static struct ch_coro *parked;

static void park_and_remember(void *arg) {
  (void)arg;
  parked = ch_current();
  ch_park(-1);
}

static int busy_rc;

static void try_switch_mode(void *arg) {
  (void)arg;
  busy_rc = ch_sched_set_stack_mode(CH_STACK_SEPARATE);
  ch_unpark(parked, 0);
}

static void test_mode_is_set_per_scheduler_only_while_no_coroutine_lives(void **state) {
  (void)state;
  assert_int_equal(ch_sched_stack_mode(), CH_STACK_COPY);
  assert_int_equal(ch_sched_set_stack_mode(7), -EINVAL);
  assert_int_equal(ch_sched_set_stack_mode(CH_STACK_SEPARATE), 0);
  assert_int_equal(ch_sched_stack_mode(), CH_STACK_SEPARATE);
  assert_int_equal(ch_sched_set_stack_mode(CH_STACK_COPY), 0);
  assert_int_equal(ch_sched_stack_mode(), CH_STACK_COPY);
  /* With a coroutine alive the mode stays. */
  assert_true(ch_spawn(park_and_remember, NULL) > 0);
  assert_int_equal(ch_sched_set_stack_mode(CH_STACK_SEPARATE), -EBUSY);
  assert_true(ch_spawn(try_switch_mode, NULL) > 0);
  th_run();
  assert_int_equal(busy_rc, -EBUSY);
  assert_int_equal(ch_sched_stack_mode(), CH_STACK_COPY);
  struct ch_stats st;
  assert_int_equal(ch_stats(&st), 0);
  assert_int_equal(st.stack_mode, CH_STACK_COPY);
}

static void *mode_of_new_thread(void *arg) {
  *(int *)arg = ch_sched_stack_mode();
  return NULL;
}

static void test_new_scheduler_takes_its_mode_from_ch_stack_mode(void **state) {
  (void)state;
  /* Each thread has its own scheduler, created on first use. */
  const char *old = getenv("CH_STACK_MODE");
  char *saved = old ? strdup(old) : NULL;
  int modes[2] = { -1, -1 };
  const char *vals[2] = { "copy", "separate" };
  for (int i = 0; i < 2; i++) {
    setenv("CH_STACK_MODE", vals[i], 1);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, mode_of_new_thread, &modes[i]), 0);
    pthread_join(t, NULL);
  }
  if (saved) setenv("CH_STACK_MODE", saved, 1);
  else unsetenv("CH_STACK_MODE");
  free(saved);
  assert_int_equal(modes[0], CH_STACK_COPY);
  assert_int_equal(modes[1], CH_STACK_SEPARATE);
}

static void test_bad_ch_stack_mode_panics_with_a_message(void **state) {
  (void)state;
  int pe[2];
  assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(pe[1], 2);
    struct rlimit no_core = { 0, 0 };
    setrlimit(RLIMIT_CORE, &no_core);   /* ch_panic aborts */
    setenv("CH_STACK_MODE", "cpy", 1);
    execl(self_exe, self_exe, "--spawn-child", (char *)NULL);
    _exit(127);
  }
  close(pe[1]);
  char err[1024] = "";
  size_t n = 0;
  long r;
  while (n < sizeof err - 1 && (r = syscall(SYS_read, pe[0], err + n, sizeof err - 1 - n)) > 0)
    n += (size_t)r;
  close(pe[0]);
  int st = pid_status(pid);
  assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!strstr(err, "CH_STACK_MODE=cpy: expected copy or separate"))
    fail_msg("child said: %s", err);
}

/* -- Deep frames -------------------------------------------------------------- */

#define DEEP_FRAMES 200          /* 200 x ~512 bytes: ~100 KiB of stack */
#define DEEP_YIELDS 5

static struct ch_coro *deep_coro;
static size_t deep_saved_max;
static long deep_sum;

/* Each level keeps a buffer of values derived from its depth, yields at the
** bottom, and checks its buffer on the way back up. */
static __attribute__((noinline)) long descend(int depth) {
  volatile long frame[64];
  for (int i = 0; i < 64; i++) frame[i] = depth * 1000L + i;
  long r;
  if (depth == DEEP_FRAMES) {
    for (int i = 0; i < DEEP_YIELDS; i++) ch_yield();
    r = 0;
  } else {
    r = descend(depth + 1);
  }
  for (int i = 0; i < 64; i++) {
    if (frame[i] != depth * 1000L + i) { CHECK(!"frame corrupted"); return -1000000; }
    r += frame[i];
  }
  return r;
}

static void deep_main(void *arg) {
  (void)arg;
  deep_coro = ch_current();
  deep_sum = descend(0);
  deep_coro = NULL;
}

static void deep_watcher(void *arg) {
  (void)arg;
  for (int i = 0; i < 4 * DEEP_YIELDS; i++) {
    if (deep_coro) {
      size_t b = ch_coro_saved_bytes(deep_coro);
      if (b > deep_saved_max) deep_saved_max = b;
    }
    scribble(4096);
  }
}

static void test_deep_recursion_is_saved_and_restored_intact(void **state) {
  (void)state;
  deep_saved_max = 0;
  deep_sum = 0;
  assert_true(ch_spawn(deep_main, NULL) > 0);
  assert_true(ch_spawn(deep_watcher, NULL) > 0);
  assert_true(ch_spawn(scribbler, (void *)(intptr_t)(4 * DEEP_YIELDS)) > 0);
  th_run();
  long want = 0;
  for (int d = 0; d <= DEEP_FRAMES; d++)
    for (int i = 0; i < 64; i++) want += d * 1000L + i;
  assert_int_equal(deep_sum, want);
  /* Parked at the bottom, the whole descent was saved to the heap. */
  if (deep_saved_max < DEEP_FRAMES * 64 * sizeof(long))
    fail_msg("saved at most %zu bytes of a %zu byte descent", deep_saved_max,
             (size_t)(DEEP_FRAMES * 64 * sizeof(long)));
}

/* -- Many coroutines, many yields ------------------------------------------- */

#define MANY 1000
#define MANY_YIELDS 2000

static int many_ok, many_bad;
static int many_yields;   /* MANY_YIELDS, 100 under valgrind */

static void many_main(void *arg) {
  int id = (int)(intptr_t)arg;
  /* Locals of several kinds: an array, a pointer to one of them (its
  ** address must not change), and a register-heavy running sum. */
  volatile uint32_t vals[16];
  for (int i = 0; i < 16; i++) vals[i] = (uint32_t)(id * 16 + i) * 2654435761u;
  volatile uint32_t *self_ptr = &vals[id % 16];
  uint64_t sum = 0;
  double x = id * 0.5;
  for (int y = 0; y < many_yields; y++) {
    sum += (uint64_t)id * (uint64_t)y;
    x += 0.25;
    ch_yield();
    if (self_ptr != &vals[id % 16] || *self_ptr != (uint32_t)(id * 16 + id % 16) * 2654435761u) {
      many_bad++;
      return;
    }
    if ((y & 255) == 0)
      for (int i = 0; i < 16; i++)
        if (vals[i] != (uint32_t)(id * 16 + i) * 2654435761u) { many_bad++; return; }
  }
  uint64_t want = (uint64_t)id * ((uint64_t)many_yields * (many_yields - 1) / 2);
  if (sum == want && x == id * 0.5 + many_yields * 0.25) many_ok++;
  else many_bad++;
}

static void test_locals_survive_thousands_of_yields_across_1000_coroutines(void **state) {
  (void)state;
  many_ok = many_bad = 0;
  many_yields = ON_VALGRIND() ? 100 : MANY_YIELDS;
  struct ch_stats before, after;
  assert_int_equal(ch_stats(&before), 0);
  for (int i = 0; i < MANY; i++) assert_true(ch_spawn(many_main, (void *)(intptr_t)i) > 0);
  th_run();
  assert_int_equal(many_bad, 0);
  assert_int_equal(many_ok, MANY);
  assert_int_equal(ch_stats(&after), 0);
  /* Each switch between two of them copied at least one saved frame out
  ** and one back in: the copies really happened. */
  assert_true(after.copied_bytes - before.copied_bytes >= (uint64_t)MANY * many_yields * 2 * 64);
  /* All exited: nothing stays saved. */
  assert_int_equal(after.saved_bytes, 0);
  assert_int_equal(after.saved_alloc, 0);
}

/* -- Saved size follows use ---------------------------------------------- */

static struct ch_coro *small_coro, *grow_coro;
static size_t small_saved, grow_deep_saved, grow_shallow_saved;
static struct ch_stats small_stats;

static __attribute__((noinline)) void park_deep(size_t bytes) {
  volatile char *buf = __builtin_alloca(bytes);
  for (size_t i = 0; i < bytes; i += 256) buf[i] = 1;
  ch_park(-1);
  buf[0] = 2;
}

static void small_main(void *arg) {
  (void)arg;
  small_coro = ch_current();
  ch_park(-1);
}

static void grow_main(void *arg) {
  (void)arg;
  grow_coro = ch_current();
  park_deep(64 * 1024);   /* deep once */
  ch_park(-1);            /* then shallow again */
}

static void size_monitor(void *arg) {
  (void)arg;
  ch_yield();   /* both parked by now; our running here saved them */
  small_saved = ch_coro_saved_bytes(small_coro);
  grow_deep_saved = ch_coro_saved_bytes(grow_coro);
  CHECK(ch_stats(&small_stats) == 0);
  ch_unpark(grow_coro, 0);
  ch_yield();   /* grow parks shallow; this run saves it again */
  grow_shallow_saved = ch_coro_saved_bytes(grow_coro);
  ch_unpark(small_coro, 0);
  ch_unpark(grow_coro, 0);
}

static void test_saved_size_follows_real_use(void **state) {
  (void)state;
  small_saved = grow_deep_saved = grow_shallow_saved = 0;
  assert_true(ch_spawn(small_main, NULL) > 0);
  assert_true(ch_spawn(grow_main, NULL) > 0);
  assert_true(ch_spawn(size_monitor, NULL) > 0);
  th_run();
  /* A coroutine parked with a small frame costs well under a page. */
  if (small_saved == 0 || small_saved >= 4096)
    fail_msg("small park saved %zu bytes, want 1..4095", small_saved);
  if (grow_deep_saved < 64 * 1024)
    fail_msg("deep park saved %zu bytes, want >= 64 KiB", grow_deep_saved);
  if (grow_shallow_saved == 0 || grow_shallow_saved >= 4096)
    fail_msg("shallow park after a deep one saved %zu bytes", grow_shallow_saved);
  /* The scheduler's totals count both parked images. */
  assert_true(small_stats.saved_bytes >= small_saved + grow_deep_saved);
  assert_true(small_stats.saved_alloc >= small_stats.saved_bytes);
}

/* -- Stack overflow ------------------------------------------------------------ */

static void overflow_main(void *arg) {
  (void)arg;
  th_recurse(0, NULL);
  _exit(3);   /* not reached when the guard works */
}

static void idle_main(void *arg) {
  (void)arg;
  ch_sleep_ms(50);
}

/* Child: a parked coroutine shares the stack with one that overflows it. */
static int overflow_child(void) {
  if (ch_sched_set_stack_mode(CH_STACK_COPY) != 0) return 6;
  if (ch_spawn(idle_main, NULL) <= 0) return 5;
  int id = ch_spawn(overflow_main, NULL);
  if (id <= 0) return 5;
  dprintf(1, "id=%d\n", id);
  ch_run();
  return 4;
}

static void test_overflow_of_the_shared_stack_is_reported_with_the_coroutine_id(void **state) {
  (void)state;
  int po[2], pe[2];
  assert_int_equal(pipe2(po, O_CLOEXEC), 0);
  assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    execl(self_exe, self_exe, "--overflow-child", (char *)NULL);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  char out[256] = "", err[512] = "";
  size_t no = 0, ne = 0;
  long r;
  while (no < sizeof out - 1 && (r = syscall(SYS_read, po[0], out + no, sizeof out - 1 - no)) > 0)
    no += (size_t)r;
  while (ne < sizeof err - 1 && (r = syscall(SYS_read, pe[0], err + ne, sizeof err - 1 - ne)) > 0)
    ne += (size_t)r;
  close(po[0]);
  close(pe[0]);
  int st = pid_status(pid);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != CH_EXIT_STACK_OVERFLOW)
    fail_msg("child status %#x, out: %s err: %s", st, out, err);
  int id = 0;
  assert_int_equal(sscanf(out, "id=%d", &id), 1);
  char want[64];
  snprintf(want, sizeof want, "coroutine %d stack overflow (guard hit at 0x", id);
  if (!strstr(err, want)) fail_msg("want \"%s\", child said: %s", want, err);
}

/* -- fd waits, timers, pool jobs ------------------------------------------- */

static int fd_sv[2];
static int fd_got[2], fd_rc[2];

/* Waits for input on fd_sv[0], two of us at once: both waiters are linked
** in the same fd's list while the other coroutine runs on the stack. */
static void fd_reader(void *arg) {
  int i = (int)(intptr_t)arg;
  char local_guard[256];
  memset(local_guard, 'a' + i, sizeof local_guard);
  fd_rc[i] = ch_io_wait(fd_sv[0], POLLIN, 5000);
  for (size_t k = 0; k < sizeof local_guard; k++)
    if (local_guard[k] != 'a' + i) { CHECK(!"local changed across the wait"); break; }
  if (fd_rc[i] > 0 && i == 0) {
    char c;
    if (read(fd_sv[0], &c, 1) == 1) fd_got[i] = c;
  }
}

static void fd_writer(void *arg) {
  (void)arg;
  for (int i = 0; i < 20; i++) scribble(16 * 1024);
  CHECK_EQ(write(fd_sv[1], "x", 1), 1);
}

static void test_fd_waits_work_while_others_use_the_stack(void **state) {
  (void)state;
  th_socketpair(fd_sv);
  memset(fd_got, 0, sizeof fd_got);
  fd_rc[0] = fd_rc[1] = -1;
  assert_true(ch_spawn(fd_reader, (void *)0) > 0);
  assert_true(ch_spawn(fd_reader, (void *)1) > 0);
  assert_true(ch_spawn(fd_writer, NULL) > 0);
  th_run();
  close(fd_sv[0]);
  close(fd_sv[1]);
  assert_true(fd_rc[0] & POLLIN);
  assert_true(fd_rc[1] & POLLIN);
  assert_int_equal(fd_got[0], 'x');
}

static int close_rc[2];

static void close_waiter(void *arg) {
  int i = (int)(intptr_t)arg;
  close_rc[i] = ch_io_wait(fd_sv[0], POLLIN, 5000);
}

static void closer(void *arg) {
  (void)arg;
  scribble(32 * 1024);
  close(fd_sv[0]);   /* wakes both waiters with EBADF */
}

static void test_closing_an_fd_wakes_swapped_out_waiters(void **state) {
  (void)state;
  th_socketpair(fd_sv);
  close_rc[0] = close_rc[1] = 0;
  assert_true(ch_spawn(close_waiter, (void *)0) > 0);
  assert_true(ch_spawn(close_waiter, (void *)1) > 0);
  assert_true(ch_spawn(closer, NULL) > 0);
  th_run();
  close(fd_sv[1]);
  assert_int_equal(close_rc[0], -EBADF);
  assert_int_equal(close_rc[1], -EBADF);
}

/* An idle connection parks in an fd wait, and its saved image is what it
** costs: the runtime's wait path keeps one small frame above the park (it
** kept three, 320 bytes on x86-64, before the waiters moved into the
** coroutine). */
static struct ch_coro *plain_coro, *fdw_coro;
static size_t plain_saved, fdw_saved;
static int fdw_rc;

static void plain_parker(void *arg) {
  (void)arg;
  plain_coro = ch_current();
  ch_park(-1);
}

static void fd_parker(void *arg) {
  (void)arg;
  fdw_coro = ch_current();
  fdw_rc = ch_io_wait(fd_sv[0], POLLIN, -1);
}

static void wait_monitor(void *arg) {
  (void)arg;
  ch_yield();   /* both parked by now; our running here saved them */
  plain_saved = ch_coro_saved_bytes(plain_coro);
  fdw_saved = ch_coro_saved_bytes(fdw_coro);
  ch_unpark(plain_coro, 0);
  CHECK_EQ(write(fd_sv[1], "x", 1), 1);
}

static void test_an_fd_wait_saves_little_more_than_a_park(void **state) {
  (void)state;
  th_socketpair(fd_sv);
  plain_saved = fdw_saved = 0;
  fdw_rc = -1;
  assert_true(ch_spawn(plain_parker, NULL) > 0);
  assert_true(ch_spawn(fd_parker, NULL) > 0);
  assert_true(ch_spawn(wait_monitor, NULL) > 0);
  th_run();
  close(fd_sv[0]);
  close(fd_sv[1]);
  assert_true(fdw_rc & POLLIN);
  if (plain_saved == 0 || fdw_saved < plain_saved || fdw_saved - plain_saved > 128)
    fail_msg("fd wait saved %zu bytes, a park %zu: want at most 128 more", fdw_saved, plain_saved);
}

/* Coroutines parked through the same calls have images of one length that
** differ in few words (the shared stack is at one address): each is stored
** as a delta against one reference image, and still comes back exactly,
** with each coroutine's own locals. */
#define ALIKE 500
static struct ch_coro *alike[ALIKE];
static int alike_ok;
static struct ch_stats alike_parked;

static __attribute__((noinline)) int park_with_locals(int i) {
  volatile uint64_t mine[8];   /* differ per coroutine: in every delta */
  for (int k = 0; k < 8; k++) mine[k] = (uint64_t)i * 1000003u + (uint64_t)k;
  ch_park(-1);
  for (int k = 0; k < 8; k++)
    if (mine[k] != (uint64_t)i * 1000003u + (uint64_t)k) return 0;
  return 1;
}

static void alike_main(void *arg) {
  int i = (int)(intptr_t)arg;
  alike[i] = ch_current();
  alike_ok += park_with_locals(i);
}

static void alike_monitor(void *arg) {
  (void)arg;
  ch_yield();   /* all parked, and all saved by the time we run */
  CHECK(ch_stats(&alike_parked) == 0);
  for (int i = 0; i < ALIKE; i++) ch_unpark(alike[i], 0);
}

static void test_alike_images_are_stored_as_deltas_and_restored_exactly(void **state) {
  (void)state;
  alike_ok = 0;
  struct ch_stats before, after;
  assert_int_equal(ch_stats(&before), 0);
  for (int i = 0; i < ALIKE; i++) assert_true(ch_spawn(alike_main, (void *)(intptr_t)i) > 0);
  assert_true(ch_spawn(alike_monitor, NULL) > 0);
  th_run();
  assert_int_equal(alike_ok, ALIKE);
  uint64_t bytes = alike_parked.saved_bytes - before.saved_bytes;
  uint64_t alloc = alike_parked.saved_alloc - before.saved_alloc;
  assert_true(bytes >= (uint64_t)ALIKE * 128);   /* all of them saved */
  /* Under valgrind images are stored whole (may_delta in coro.c). */
  if (!ON_VALGRIND() && alloc * 2 > bytes)
    fail_msg("%d alike images of %llu bytes each took %llu heap bytes: want at most half",
             ALIKE, (unsigned long long)(bytes / ALIKE), (unsigned long long)alloc);
  assert_int_equal(ch_stats(&after), 0);
  assert_int_equal(after.saved_alloc, before.saved_alloc);   /* reference freed too */
}

/* A wait on both directions links both of the coroutine's waiter nodes;
** each direction wakes it, and nothing stays linked after. */
static int both_rc[2], both_read;

static void both_waiter(void *arg) {
  (void)arg;
  both_rc[0] = ch_io_wait(fd_sv[1], POLLIN | POLLOUT, 5000);   /* full, empty */
  char c;
  CHECK_EQ(read(fd_sv[1], &c, 1), 1);
  both_read = 1;
  both_rc[1] = ch_io_wait(fd_sv[1], POLLIN | POLLOUT, 5000);   /* full again */
}

static void both_poker(void *arg) {
  (void)arg;
  for (int i = 0; i < 5; i++) scribble(16 * 1024);
  CHECK_EQ(write(fd_sv[0], "z", 1), 1);                   /* input */
  /* Drained only once the input was seen: one epoll round could
  ** report both edges otherwise. */
  while (!both_read) scribble(16 * 1024);
  char buf[4096];
  while (read(fd_sv[0], buf, sizeof buf) > 0) {}          /* room to write */
}

static void test_a_wait_on_both_directions_wakes_for_each(void **state) {
  (void)state;
  th_socketpair(fd_sv);
  for (int i = 0; i < 2; i++)
    assert_int_equal(fcntl(fd_sv[i], F_SETFL, fcntl(fd_sv[i], F_GETFL) | O_NONBLOCK), 0);
  char buf[4096];
  memset(buf, 'f', sizeof buf);
  while (write(fd_sv[1], buf, sizeof buf) > 0) {}         /* fd_sv[1] not writable */
  both_rc[0] = both_rc[1] = -1;
  both_read = 0;
  assert_true(ch_spawn(both_waiter, NULL) > 0);
  assert_true(ch_spawn(both_poker, NULL) > 0);
  th_run();
  assert_int_equal(both_rc[0] & (POLLIN | POLLOUT), POLLIN);
  assert_int_equal(both_rc[1] & (POLLIN | POLLOUT), POLLOUT);
  struct ch_stats st;
  assert_int_equal(ch_stats(&st), 0);
  assert_int_equal(st.waiting, 0);
  close(fd_sv[0]);
  close(fd_sv[1]);
}

#define POLL_FDS 4
static int poll_pairs[POLL_FDS][2];
static int poll_rc, poll_ready_index = -1;

/* poll(2) on more fds than the coroutine's two inline waiter nodes. */
static void poller(void *arg) {
  (void)arg;
  struct pollfd p[POLL_FDS];
  for (int i = 0; i < POLL_FDS; i++) p[i] = (struct pollfd){ poll_pairs[i][0], POLLIN, 0 };
  poll_rc = poll(p, POLL_FDS, 5000);
  for (int i = 0; i < POLL_FDS; i++)
    if (p[i].revents & POLLIN) poll_ready_index = i;
}

static void poke_third(void *arg) {
  (void)arg;
  for (int i = 0; i < 10; i++) scribble(8 * 1024);
  CHECK_EQ(write(poll_pairs[2][1], "y", 1), 1);
}

static void test_poll_on_many_fds_wakes_in_copy_mode(void **state) {
  (void)state;
  for (int i = 0; i < POLL_FDS; i++) th_socketpair(poll_pairs[i]);
  poll_rc = -2;
  poll_ready_index = -1;
  assert_true(ch_spawn(poller, NULL) > 0);
  assert_true(ch_spawn(poke_third, NULL) > 0);
  th_run();
  for (int i = 0; i < POLL_FDS; i++) { close(poll_pairs[i][0]); close(poll_pairs[i][1]); }
  assert_int_equal(poll_rc, 1);
  assert_int_equal(poll_ready_index, 2);
}

#define SLEEPERS 200
static int sleep_n, sleep_bad, sleep_short;

static void sleeper(void *arg) {
  int i = (int)(intptr_t)arg;
  volatile int mine = i * 7;
  int ms = 1 + (i % 10) * 3;
  uint64_t t0 = ch_now_ns();
  int r = ch_sleep_ms(ms);
  if (ch_now_ns() - t0 < (uint64_t)ms * 1000000u) sleep_short++;
  if (r != 0 || mine != i * 7) sleep_bad++;
  sleep_n++;
  /* A timed-out park, too. */
  if (ch_park(2) != -ETIMEDOUT || mine != i * 7) sleep_bad++;
}

static void test_timers_and_timeouts_work_in_copy_mode(void **state) {
  (void)state;
  sleep_n = sleep_bad = sleep_short = 0;
  for (int i = 0; i < SLEEPERS; i++) assert_true(ch_spawn(sleeper, (void *)(intptr_t)i) > 0);
  assert_true(ch_spawn(scribbler, (void *)(intptr_t)50) > 0);
  th_run();
  assert_int_equal(sleep_bad, 0);
  assert_int_equal(sleep_n, SLEEPERS);
  assert_int_equal(sleep_short, 0);   /* each timer waited its time */
}

struct pool_job { int in, out; pthread_t ran_on; };

static void pool_fn(void *p) {
  struct pool_job *j = p;
  th_thread_sleep_ms(5);   /* long enough for the others to use the stack */
  j->out = j->in * 3;
  j->ran_on = pthread_self();
}

#define POOLERS 16
static int pool_ok, pool_bad, pool_inline_ok;

static void pooler(void *arg) {
  int i = (int)(intptr_t)arg;
  struct pool_job *j = malloc(sizeof *j);   /* heap: the pool thread writes it */
  if (!j) { pool_bad++; return; }
  j->in = i;
  j->out = -1;
  volatile int mine = i + 100;
  if (ch_pool_call(pool_fn, j) == 0 && j->out == i * 3 && mine == i + 100 &&
      !pthread_equal(j->ran_on, pthread_self()))
    pool_ok++;
  else
    pool_bad++;
  free(j);
}

static void stack_arg_pooler(void *arg) {
  (void)arg;
  /* An arg on the shared stack runs inline, on this thread: a pool thread
  ** writing here while we are swapped out would corrupt another. */
  struct pool_job j = { 5, -1, 0 };
  if (ch_pool_call(pool_fn, &j) == 0 && j.out == 15 && pthread_equal(j.ran_on, pthread_self()))
    pool_inline_ok = 1;
}

static void test_pool_jobs_work_in_copy_mode(void **state) {
  (void)state;
  pool_ok = pool_bad = pool_inline_ok = 0;
  for (int i = 0; i < POOLERS; i++) assert_true(ch_spawn(pooler, (void *)(intptr_t)i) > 0);
  assert_true(ch_spawn(scribbler, (void *)(intptr_t)200) > 0);
  assert_true(ch_spawn(stack_arg_pooler, NULL) > 0);
  th_run();
  assert_int_equal(pool_bad, 0);
  assert_int_equal(pool_ok, POOLERS);
  assert_int_equal(pool_inline_ok, 1);
}

static int gai_rc = -1, gai_family;

static void resolver(void *arg) {
  (void)arg;
  struct addrinfo hints, *res = NULL;   /* both on this stack */
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  char node[32];
  strcpy(node, "127.0.0.1");
  gai_rc = getaddrinfo(node, "80", &hints, &res);
  if (gai_rc == 0 && res) {
    gai_family = res->ai_family;
    freeaddrinfo(res);
  }
}

static void test_getaddrinfo_through_the_pool_works_in_copy_mode(void **state) {
  (void)state;
  gai_rc = -1;
  gai_family = 0;
  assert_true(ch_spawn(resolver, NULL) > 0);
  assert_true(ch_spawn(scribbler, (void *)(intptr_t)50) > 0);
  th_run();
  assert_int_equal(gai_rc, 0);
  assert_int_equal(gai_family, AF_INET);
}

/* -- Idle memory after a burst ------------------------------------------------ */

#define BURST 1024


static long burst_rss_parked;
static void *burst_pins[BURST];

static void burst_member(void *arg) {
  int i = (int)(intptr_t)arg;
  volatile char deep[48 * 1024];   /* 12 pages, saved while parked */
  for (size_t k = 0; k < sizeof deep; k += 4096) deep[k] = 1;
  /* A small block that outlives the burst, allocated between this
  ** member's image and the last one's: free alone cannot shrink such a
  ** heap, as a server's long-lived allocations keep it from shrinking. */
  burst_pins[i] = malloc(64);
  ch_sleep_ms(20);
  deep[0] = 2;
}

static void burst_probe(void *arg) {
  (void)arg;
  ch_sleep_ms(10);   /* all members parked and saved by now */
  burst_rss_parked = th_rss_pages();
}

static void slow_tick(void *arg) {
  (void)arg;
  for (int t = 0; t < 2300; t += 100) ch_sleep_ms(100);
}

static void test_heap_images_of_a_burst_are_given_back_when_it_ends(void **state) {
  (void)state;
  if (ON_VALGRIND()) {
    printf("skipped under valgrind: its allocator, not glibc's, holds the images\n");
    skip();
  }
  long before = th_rss_pages();
  for (int i = 0; i < BURST; i++) assert_true(ch_spawn(burst_member, (void *)(intptr_t)i) > 0);
  assert_true(ch_spawn(burst_probe, NULL) > 0);
  th_run();
  /* The loop looks once a second; the burst's images (48 MiB) were freed
  ** when it ended, and two looks later the heap pages went back. */
  assert_true(ch_spawn(slow_tick, NULL) > 0);
  th_run();
  long after = th_rss_pages();
  for (int i = 0; i < BURST; i++) free(burst_pins[i]);
  long grown = burst_rss_parked - before, kept = after - before;
  if (grown < BURST * 12 / 2)
    fail_msg("rss grew by %ld pages with %d parked 48 KiB frames", grown, BURST);
  if (kept > grown / 4)
    fail_msg("rss %ld pages over the start after the burst, %ld at its peak", kept, grown);
}

/* -- Stack sizes ---------------------------------------------------------------- */

static long big_sum;

static void big_user(void *arg) {
  (void)arg;
  volatile char buf[900 * 1024];
  for (size_t i = 0; i < sizeof buf; i += 1024) buf[i] = (char)(i >> 10);
  ch_yield();   /* saved: ~900 KiB */
  long s = 0;
  for (size_t i = 0; i < sizeof buf; i += 1024) s += buf[i];
  big_sum = s;
}

static void test_each_stack_size_gets_its_own_shared_stack(void **state) {
  (void)state;
  big_sum = 0;
  assert_int_equal(ch_set_stack_size(1024 * 1024), 0);
  int id = ch_spawn(big_user, NULL);
  int rc0 = ch_set_stack_size(0);
  assert_true(id > 0);
  assert_int_equal(rc0, 0);
  /* Default-size coroutines run meanwhile, on the other shared stack. */
  assert_true(ch_spawn(scribbler, (void *)(intptr_t)20) > 0);
  th_run();
  long want = 0;
  for (size_t i = 0; i < 900 * 1024; i += 1024) want += (char)(i >> 10);
  assert_int_equal(big_sum, want);
}

/* -- Measurements (not tests) ------------------------------------------------- */

#define MEASURE_N 10000
#define MEASURE_YIELDS 1000000

static long rss_kib(void) {
  long size = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static struct ch_coro **measure_coros;
static long measure_rss0, measure_rss1;
static struct ch_stats measure_st;

static void measure_parker(void *arg) {
  int i = (int)(intptr_t)arg;
  measure_coros[i] = ch_current();
  ch_park(-1);
}

static void measure_monitor(void *arg) {
  (void)arg;
  ch_yield();
  measure_rss1 = rss_kib();
  ch_stats(&measure_st);
  for (int i = 0; i < MEASURE_N; i++) ch_unpark(measure_coros[i], 0);
}

static uint64_t pingpong_ns;

static __attribute__((noinline)) void pinger_at(size_t depth) {
  volatile char *buf = __builtin_alloca(depth);
  buf[0] = 1;
  for (int i = 0; i < MEASURE_YIELDS; i++) ch_yield();
  buf[0] = 0;
}

static void pinger(void *arg) { pinger_at((size_t)(uintptr_t)arg); }

/* Prints idle memory of MEASURE_N coroutines parked in ch_park and the
** cost of one ch_yield between two coroutines (a yield plus the other's
** resume), with extra frames of 16 bytes to 16 KiB. */
static int measure(const char *mode) {
  int m = strcmp(mode, "copy") == 0 ? CH_STACK_COPY : CH_STACK_SEPARATE;
  if (ch_sched_set_stack_mode(m) != 0) return 2;
  measure_coros = calloc(MEASURE_N, sizeof *measure_coros);
  /* Warm up: scheduler, first slab, malloc arenas. */
  if (ch_spawn(park_and_remember, NULL) <= 0) return 3;
  ch_spawn(try_switch_mode, NULL);
  ch_run();
  measure_rss0 = rss_kib();
  for (int i = 0; i < MEASURE_N; i++)
    if (ch_spawn(measure_parker, (void *)(intptr_t)i) <= 0) return 3;
  ch_spawn(measure_monitor, NULL);
  ch_run();
  printf("%s: %d parked coroutines: rss +%ld KiB (%.0f bytes each); saved_bytes %llu "
         "(%.0f each), saved_alloc %llu\n", mode, MEASURE_N, measure_rss1 - measure_rss0,
         (measure_rss1 - measure_rss0) * 1024.0 / MEASURE_N,
         (unsigned long long)measure_st.saved_bytes,
         (double)measure_st.saved_bytes / MEASURE_N,
         (unsigned long long)measure_st.saved_alloc);
  size_t depths[4] = { 16, 1024, 4096, 16384 };
  for (int d = 0; d < 4; d++) {
    ch_spawn(pinger, (void *)(uintptr_t)depths[d]);
    ch_spawn(pinger, (void *)(uintptr_t)depths[d]);
    uint64_t t0 = ch_now_ns();
    ch_run();
    pingpong_ns = ch_now_ns() - t0;
    printf("%s: ch_yield between 2 coroutines, %zu-byte extra frame: %.1f ns per yield\n",
           mode, depths[d], (double)pingpong_ns / (2.0 * MEASURE_YIELDS));
  }
  return 0;
}

static int spawn_child(void) {
  ch_spawn(idle_main, NULL);
  return ch_run();
}

/* ASan builds only: asking for copy mode fails with -ENOTSUP and leaves
** the scheduler in separate mode, where coroutines still run. */
static void copy_refused_body(void *arg) { *(int *)arg = 1; }

static void test_copy_mode_is_refused_in_asan_builds(void **state) {
  (void)state;
  assert_int_equal(ch_sched_set_stack_mode(CH_STACK_COPY), -ENOTSUP);
  assert_int_equal(ch_sched_stack_mode(), CH_STACK_SEPARATE);
  int ran = 0;
  assert_true(ch_spawn(copy_refused_body, &ran) > 0);
  th_run();
  assert_int_equal(ran, 1);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--overflow-child") == 0) return overflow_child();
  if (argc > 1 && strcmp(argv[1], "--spawn-child") == 0) return spawn_child();
  if (argc > 2 && strcmp(argv[1], "measure") == 0) return measure(argv[2]);
  th_main_init();
  if (!realpath(argv[0], self_exe)) snprintf(self_exe, sizeof self_exe, "%s", argv[0]);
  int rc = ch_sched_set_stack_mode(CH_STACK_COPY);
  if (rc == -ENOTSUP) {
    /* ASan builds: copy mode is refused (its fiber annotations assume a
    ** stack per coroutine); that refusal is what is tested. */
    fprintf(stderr, "ASan build: COPY stack mode is off (docs/stacks.md); only its refusal is tested\n");
    const struct CMUnitTest asan_tests[] = {
      TH_TEST(test_copy_mode_is_refused_in_asan_builds),
    };
    return cmocka_run_group_tests(asan_tests, NULL, NULL);
  }
  if (rc != 0) {
    fprintf(stderr, "ch_sched_set_stack_mode(CH_STACK_COPY): %d\n", rc);
    return 1;
  }
  const struct CMUnitTest tests[] = {
    TH_TEST(test_mode_is_set_per_scheduler_only_while_no_coroutine_lives),
    TH_TEST(test_new_scheduler_takes_its_mode_from_ch_stack_mode),
    TH_TEST(test_bad_ch_stack_mode_panics_with_a_message),
    TH_TEST(test_deep_recursion_is_saved_and_restored_intact),
    TH_TEST(test_locals_survive_thousands_of_yields_across_1000_coroutines),
    TH_TEST(test_saved_size_follows_real_use),
    TH_TEST(test_overflow_of_the_shared_stack_is_reported_with_the_coroutine_id),
    TH_TEST(test_fd_waits_work_while_others_use_the_stack),
    TH_TEST(test_closing_an_fd_wakes_swapped_out_waiters),
    TH_TEST(test_an_fd_wait_saves_little_more_than_a_park),
    TH_TEST(test_alike_images_are_stored_as_deltas_and_restored_exactly),
    TH_TEST(test_a_wait_on_both_directions_wakes_for_each),
    TH_TEST(test_poll_on_many_fds_wakes_in_copy_mode),
    TH_TEST(test_timers_and_timeouts_work_in_copy_mode),
    TH_TEST(test_pool_jobs_work_in_copy_mode),
    TH_TEST(test_getaddrinfo_through_the_pool_works_in_copy_mode),
    TH_TEST(test_each_stack_size_gets_its_own_shared_stack),
    TH_TEST(test_heap_images_of_a_burst_are_given_back_when_it_ends),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
