/*
** AArch64 smoke test of the context switch (asm/switch_aarch64_aapcs.S) and
** of the runtime built on it, meant to run under qemu-aarch64. It is the
** AArch64 counterpart of spec/c/test_ctx.c, whose register checks are
** x86-64 assembly, and it needs no cmocka, so it runs even where no arm64
** cmocka can be installed. Each test prints "ok", "FAIL <why>" or "skip
** <why>" (an environment that cannot show the behaviour; not counted as
** passed); the last line is "N passed, N failed" and the exit status is 1
** if anything failed.
**
** Built by scripts/test_arm64.sh against build/aarch64/libcohost.a.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "cohost.h"
#include "ctx.h"

#if !defined(__aarch64__)
#error "spec/c/arm64/smoke.c is AArch64-only: spec/c/test_ctx.c covers x86-64"
#endif

#define STACK_BYTES (64 * 1024)   /* plenty for these small entry functions */

/* -- A tiny test driver ---------------------------------------------------- */

static int passed, failed, skipped;
static const char *cur_test;
static int cur_failures, cur_skip;   /* of the test running */

/* Records a failure and goes on, so one run reports every broken check. */
#define CHECK(cond) do { if (!(cond)) fail_at(__LINE__, #cond); } while (0)

static void fail_at(int line, const char *what)
{
  if (cur_failures++ == 0) printf("FAIL %s\n", cur_test);
  printf("  smoke.c:%d: %s\n", line, what);
}

static void run(const char *name, void (*fn)(void))
{
  cur_test = name;
  cur_failures = cur_skip = 0;
  fflush(stdout);
  fn();
  if (cur_failures) failed++;
  else if (!cur_skip) { passed++; printf("ok   %s\n", name); }
}

static double now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *stack_new(void)
{
  void *p = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(2); }
  return p;
}

static void stack_free(void *p) { munmap(p, STACK_BYTES); }

/* -- Test-side assembly ----------------------------------------------------
** C cannot pin callee-saved registers across a call, so these routines
** load known values into them, switch, and store what they hold when the
** switch comes back.
**
** void regs_switch(struct ch_ctx *from, struct ch_ctx *to,
**                  const uint64_t in[NREGS], uint64_t out[NREGS]);
**   Saves the caller's x19-x29 and d8-d15 in its own 176-byte frame, loads
**   them from in[] (order: x19..x28, x29, d8..d15), calls
**   ch_ctx_switch(from, to), and when some later switch resumes from,
**   stores the registers into out[] before restoring the caller's.
**
** void align_entry(void *arg);
**   Entry function for ch_ctx_make: records sp, x29 and x30 exactly as fn
**   sees them on entry (before any prologue), then tail-calls
**   align_entry_c(arg) with the stack untouched.
*/
#define NREGS 19
uint64_t align_sp, align_fp, align_lr;   /* written by align_entry */
void regs_switch(struct ch_ctx *from, struct ch_ctx *to,
                 const uint64_t in[NREGS], uint64_t out[NREGS]);
void align_entry(void *arg);
void align_entry_c(void *arg);

__asm__(
    "  .text\n"
    "  .globl regs_switch\n"
    "  .type regs_switch, %function\n"
    "regs_switch:\n"
    "  stp x29, x30, [sp, #-176]!\n"
    "  stp x19, x20, [sp, #16]\n"
    "  stp x21, x22, [sp, #32]\n"
    "  stp x23, x24, [sp, #48]\n"
    "  stp x25, x26, [sp, #64]\n"
    "  stp x27, x28, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  str x3, [sp, #160]\n"             /* out[]: x3 is caller-saved */
    "  ldp x19, x20, [x2, #0]\n"
    "  ldp x21, x22, [x2, #16]\n"
    "  ldp x23, x24, [x2, #32]\n"
    "  ldp x25, x26, [x2, #48]\n"
    "  ldp x27, x28, [x2, #64]\n"
    "  ldr x29, [x2, #80]\n"
    "  ldr d8, [x2, #88]\n"
    "  ldp d9, d10, [x2, #96]\n"
    "  ldp d11, d12, [x2, #112]\n"
    "  ldp d13, d14, [x2, #128]\n"
    "  ldr d15, [x2, #144]\n"
    "  bl ch_ctx_switch\n"
    "  ldr x3, [sp, #160]\n"
    "  stp x19, x20, [x3, #0]\n"
    "  stp x21, x22, [x3, #16]\n"
    "  stp x23, x24, [x3, #32]\n"
    "  stp x25, x26, [x3, #48]\n"
    "  stp x27, x28, [x3, #64]\n"
    "  str x29, [x3, #80]\n"
    "  str d8, [x3, #88]\n"
    "  stp d9, d10, [x3, #96]\n"
    "  stp d11, d12, [x3, #112]\n"
    "  stp d13, d14, [x3, #128]\n"
    "  str d15, [x3, #144]\n"
    "  ldp x19, x20, [sp, #16]\n"
    "  ldp x21, x22, [sp, #32]\n"
    "  ldp x23, x24, [sp, #48]\n"
    "  ldp x25, x26, [sp, #64]\n"
    "  ldp x27, x28, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  ldp x29, x30, [sp], #176\n"
    "  ret\n"
    "  .size regs_switch, .-regs_switch\n"
    "\n"
    "  .globl align_entry\n"
    "  .type align_entry, %function\n"
    "align_entry:\n"
    "  mov x9, sp\n"
    "  adrp x10, align_sp\n"
    "  str x9, [x10, :lo12:align_sp]\n"
    "  adrp x10, align_fp\n"
    "  str x29, [x10, :lo12:align_fp]\n"
    "  adrp x10, align_lr\n"
    "  str x30, [x10, :lo12:align_lr]\n"
    "  b align_entry_c\n"
    "  .size align_entry, .-align_entry\n");

/* -- Callee-saved registers ------------------------------------------------ */

static struct ch_ctx main_ctx, co_ctx;

/* Register images, distinct per side and per round; index i of each is
** x19+i for i < 10, x29 at 10, then d8..d15. */
static uint64_t main_in1[NREGS], main_in2[NREGS], co_in1[NREGS], co_in2[NREGS];
static uint64_t co_out1[NREGS];

static void fill(uint64_t *v, uint64_t tag)
{
  for (int i = 0; i < NREGS; i++)
    v[i] = tag << 48 | (uint64_t)(i + 1) << 40 | 0x00a5a5a5a5a5ull;
}

/* The other context: loads its own values, switches back to main, and on
** resumption records what it finds; then leaves for good with values main
** must not see either. */
static void regs_co(void *arg)
{
  (void)arg;
  regs_switch(&co_ctx, &main_ctx, co_in1, co_out1);
  uint64_t unused[NREGS];
  regs_switch(&co_ctx, &main_ctx, co_in2, unused);
  abort();   /* never resumed */
}

static void callee_saved_x19_x29_and_d8_d15_survive_a_switch(void)
{
  fill(main_in1, 0x1111); fill(main_in2, 0x2222);
  fill(co_in1, 0xdead);   fill(co_in2, 0xbeef);
  void *stack = stack_new();
  uint64_t out[NREGS];
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, regs_co, NULL);

  /* The first switch enters the new context, which loads co_in1 and comes
  ** back: main must find its own values again. */
  regs_switch(&main_ctx, &co_ctx, main_in1, out);
  for (int i = 0; i < NREGS; i++) CHECK(out[i] == main_in1[i]);

  /* The second round resumes the other context mid-function: it must find
  ** its values although main loaded different ones meanwhile. */
  regs_switch(&main_ctx, &co_ctx, main_in2, out);
  for (int i = 0; i < NREGS; i++) CHECK(co_out1[i] == co_in1[i]);
  for (int i = 0; i < NREGS; i++) CHECK(out[i] == main_in2[i]);
  stack_free(stack);
}

/* -- FPCR ------------------------------------------------------------------
** RMode is FPCR bits 22-23: 0 nearest, 1 toward +inf, 2 toward -inf,
** 3 toward zero. FZ (bit 24) flushes denormals. */
#define RMODE_SHIFT 22
#define FPCR_FZ (1ull << 24)

static uint64_t get_fpcr(void)
{
  uint64_t v;
  __asm__ volatile("mrs %0, fpcr" : "=r"(v) : : "memory");
  return v;
}

static void set_fpcr(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v) : "memory"); }

static void set_rmode(unsigned m)
{
  set_fpcr((get_fpcr() & ~(3ull << RMODE_SHIFT)) | (uint64_t)m << RMODE_SHIFT);
}

static unsigned rmode(void) { return (unsigned)(get_fpcr() >> RMODE_SHIFT) & 3u; }

static unsigned co_rmode_after;
static uint64_t co_fz_after;
static volatile double third_co;

/* The other side rounds up with FZ set, lets main run, then checks its
** modes and computes 1/3 under them. */
static void fpcr_co(void *arg)
{
  (void)arg;
  set_rmode(1);
  set_fpcr(get_fpcr() | FPCR_FZ);
  ch_ctx_switch(&co_ctx, &main_ctx);
  co_rmode_after = rmode();
  co_fz_after = get_fpcr() & FPCR_FZ;
  volatile double one = 1.0, three = 3.0;
  third_co = one / three;
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void fpcr_rounding_mode_and_fz_follow_each_context(void)
{
  uint64_t fpcr0 = get_fpcr();
  void *stack = stack_new();
  /* The new context inherits its creator's FPCR: toward zero here. */
  set_rmode(3);
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, fpcr_co, NULL);
  set_rmode(0);
  ch_ctx_switch(&main_ctx, &co_ctx);
  unsigned main_after1 = rmode();
  uint64_t main_fz1 = get_fpcr() & FPCR_FZ;
  set_rmode(2);   /* main now rounds down */
  volatile double one = 1.0, three = 3.0;
  double third_main = one / three;
  ch_ctx_switch(&main_ctx, &co_ctx);
  unsigned main_after2 = rmode();
  double third_main2 = one / three;
  set_fpcr(fpcr0);
  stack_free(stack);
  CHECK(main_after1 == 0);       /* not the other side's "up" */
  CHECK(main_fz1 == 0);          /* nor its FZ */
  CHECK(co_rmode_after == 1);    /* not main's "down" */
  CHECK(co_fz_after == FPCR_FZ);
  CHECK(main_after2 == 2);
  CHECK(third_co > third_main);  /* the modes are in effect: up vs down */
  CHECK(third_main2 == third_main);
}

static unsigned inherit_seen;

static void inherit_co(void *arg)
{
  (void)arg;
  inherit_seen = rmode();
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void new_context_inherits_its_creators_fpcr(void)
{
  uint64_t fpcr0 = get_fpcr();
  void *stack = stack_new();
  set_rmode(3);
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, inherit_co, NULL);
  set_fpcr(fpcr0);
  inherit_seen = 99;
  ch_ctx_switch(&main_ctx, &co_ctx);
  stack_free(stack);
  CHECK(inherit_seen == 3);
  CHECK(rmode() == ((fpcr0 >> RMODE_SHIFT) & 3u));
}

/* -- New contexts ----------------------------------------------------------- */

static void *align_arg_seen;

void align_entry_c(void *arg)
{
  align_arg_seen = arg;
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void new_context_enters_fn_with_aligned_sp_and_fp_zero(void)
{
  void *stack = stack_new();
  /* Tops of every misalignment: ch_ctx_make must align them itself. */
  for (int off = 0; off < 16; off++) {
    char *top = (char *)stack + STACK_BYTES - 64 - off;
    align_sp = align_fp = align_lr = 1;
    align_arg_seen = NULL;
    ch_ctx_make(&co_ctx, top, align_entry, &align_sp);
    ch_ctx_switch(&main_ctx, &co_ctx);
    /* AArch64 has no pushed return address: sp is 16-byte aligned at a
    ** function's first instruction, and here it is the aligned top. */
    CHECK(align_sp % 16 == 0);
    CHECK(align_sp == ((uintptr_t)top & ~(uintptr_t)15));
    CHECK(align_fp == 0);    /* the frame-pointer chain ends here */
    CHECK(align_lr > (uintptr_t)ch_ctx_entry && align_lr < (uintptr_t)ch_ctx_entry + 16);
    CHECK(align_arg_seen == &align_sp);
  }
  stack_free(stack);
}

/* -- Unwinding -------------------------------------------------------------- */

#define MAX_FRAMES 64
static uintptr_t uw_ip[MAX_FRAMES];
static int uw_n, uw_rc, fp_n;
static uintptr_t fp_last_lr;

static _Unwind_Reason_Code uw_step(struct _Unwind_Context *c, void *arg)
{
  (void)arg;
  if (uw_n >= MAX_FRAMES) return _URC_NORMAL_STOP;
  uw_ip[uw_n++] = _Unwind_GetIP(c);
  return _URC_NO_REASON;
}

static __attribute__((noinline)) void uw_deeper(int depth)
{
  if (depth > 0) { uw_deeper(depth - 1); __asm__ volatile(""); return; }
  uw_rc = _Unwind_Backtrace(uw_step, NULL);
  /* Walk the x29 chain too: each record is {caller's fp, return address}. */
  uintptr_t *fp = __builtin_frame_address(0);
  fp_n = 0;
  while (fp && fp_n < MAX_FRAMES) { fp_last_lr = fp[1]; fp = (uintptr_t *)fp[0]; fp_n++; }
}

static void uw_co(void *arg)
{
  (void)arg;
  uw_deeper(3);
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void unwinders_stop_at_the_coroutine_base(void)
{
  void *stack = stack_new();
  uw_n = 0;
  uw_rc = -1;
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, uw_co, NULL);
  ch_ctx_switch(&main_ctx, &co_ctx);
  stack_free(stack);
  /* uw_deeper x4, uw_co, ch_ctx_entry, then nothing past it, or the walk
  ** would go on into whatever the stack top holds. libgcc reports the end
  ** as one last frame with ip 0 (glibc's backtrace() drops it). */
  CHECK(uw_rc == _URC_END_OF_STACK);
  if (uw_n > 0 && uw_ip[uw_n - 1] == 0) uw_n--;
  CHECK(uw_n >= 6 && uw_n <= 7);
  if (uw_n > 0) {
    uintptr_t last = uw_ip[uw_n - 1];
    CHECK(last > (uintptr_t)ch_ctx_entry && last <= (uintptr_t)ch_ctx_entry + 16);
  }
  CHECK(fp_n >= 5 && fp_n <= 7);   /* uw_deeper x4, uw_co; ends at fp 0 */
  CHECK(fp_last_lr > (uintptr_t)ch_ctx_entry && fp_last_lr < (uintptr_t)ch_ctx_entry + 16);
}

/* -- Round trips ------------------------------------------------------------ */

#define ROUNDS 100000
static int pingpong_count;

static void pingpong_co(void *arg)
{
  long *n = arg;
  double acc = 0.5;   /* a live FP value across switches */
  for (int i = 0; i < ROUNDS; i++) {
    pingpong_count++;
    (*n)++;
    acc += 1.0;
    ch_ctx_switch(&co_ctx, &main_ctx);
  }
  if (acc != ROUNDS + 0.5) *n = -1;
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static double ns_per_switch;

static void hundred_thousand_round_trips_keep_both_sides_state(void)
{
  void *stack = stack_new();
  long n = 0;
  pingpong_count = 0;
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, pingpong_co, &n);
  long mine = 0;
  int bad = 0;
  double t0 = now_ns();
  for (int i = 0; i < ROUNDS; i++) {
    ch_ctx_switch(&main_ctx, &co_ctx);
    mine += 2;
    if (n != i + 1) bad++;
  }
  ns_per_switch = (now_ns() - t0) / (2.0 * ROUNDS);
  ch_ctx_switch(&main_ctx, &co_ctx);   /* lets the other side check acc */
  stack_free(stack);
  CHECK(bad == 0);
  CHECK(mine == 2L * ROUNDS);
  CHECK(pingpong_count == ROUNDS);
  CHECK(n == ROUNDS);
}

/* -- The runtime on top: coro.c and sched.c --------------------------------- */

#define NCOROS 10000
#define NYIELDS 3
static int coro_done, coro_bad, coro_order_bad, coro_last;

static void coro_main(void *arg)
{
  int k = (int)(intptr_t)arg;
  volatile char buf[256];   /* stack contents that must survive yields */
  memset((char *)buf, k & 0xff, sizeof buf);
  double f = k * 0.25;
  for (int y = 0; y < NYIELDS; y++) {
    ch_yield();
    f += 1.0;
  }
  for (size_t i = 0; i < sizeof buf; i++) if (buf[i] != (char)(k & 0xff)) { coro_bad++; break; }
  if (f != k * 0.25 + NYIELDS) coro_bad++;
  /* Round robin: coroutines finish in spawn order. */
  if (k != coro_last + 1) coro_order_bad++;
  coro_last = k;
  coro_done++;
}

static void ten_thousand_coroutines_run_through_the_scheduler(void)
{
  coro_done = coro_bad = coro_order_bad = 0;
  coro_last = -1;
  int spawned = 0;
  for (int k = 0; k < NCOROS; k++)
    if (ch_spawn(coro_main, (void *)(intptr_t)k) > 0) spawned++;
  CHECK(spawned == NCOROS);
  CHECK(ch_run() == 0);
  CHECK(coro_done == NCOROS);
  CHECK(coro_bad == 0);
  CHECK(coro_order_bad == 0);
  struct ch_stats st;
  CHECK(ch_stats(&st) == 0);
  CHECK(st.coros == 0);
}

static int slept;

static void sleeper(void *arg)
{
  (void)arg;
  CHECK(ch_sleep_ms(20) == 0);
  slept++;
}

static void coroutines_sleep_on_the_timer_loop(void)
{
  slept = 0;
  double t0 = now_ns();
  for (int i = 0; i < 100; i++) CHECK(ch_spawn(sleeper, NULL) > 0);
  CHECK(ch_run() == 0);
  CHECK(slept == 100);
  CHECK(now_ns() - t0 >= 20e6);   /* slept, not skipped */
}

/* -- Stack overflow ---------------------------------------------------------
** In a forked child, so the fault handler the runtime installs is the one
** the kernel (here QEMU) calls: fault.c reads only si_addr, which is the
** same on every architecture. */
static __attribute__((noinline)) long recurse(long depth, volatile char *prev)
{
  volatile char buf[1024];
  buf[0] = (char)depth;
  buf[sizeof buf - 1] = prev ? prev[0] : 0;
  if (depth >= 1000000L) return depth;   /* 1 GiB: a missing guard ends here */
  long r = recurse(depth + 1, buf);
  __asm__ volatile("" : : : "memory");
  return r + buf[sizeof buf - 1];
}

static void overflow_noop(void *arg) { (void)arg; }

static void overflow_main(void *arg)
{
  (void)arg;
  recurse(0, NULL);
  _exit(3);
}

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102   /* Linux 6.13 uapi, as in runtime/stack.c */
#endif

/* Whether MADV_GUARD_INSTALL really guards here. QEMU user mode (7.2 at
** least) answers 0 to madvise advice it does not know and does nothing, so
** the runtime believes it has guards it does not have. The kernel refuses
** to copy from a guard region (EFAULT), which write(2) shows without a
** fault; under QEMU the write simply succeeds. */
static int light_guards_are_real(void)
{
  long pg = sysconf(_SC_PAGESIZE);
  char *p = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  int fds[2], real = 0;
  if (madvise(p, (size_t)pg, MADV_GUARD_INSTALL) == 0 && pipe(fds) == 0) {
    real = write(fds[1], p, 1) < 0;
    close(fds[0]);
    close(fds[1]);
  }
  munmap(p, (size_t)pg);
  return real;
}

int ch_stack_light_guards(void);   /* runtime/stack.h: 1 if madvise guards */

static void stack_overflow_is_reported_with_its_exit_status(void)
{
  /* The runtime picks its guard kind at the first stack; spawn one first. */
  CHECK(ch_spawn(overflow_noop, NULL) > 0);
  CHECK(ch_run() == 0);
  if (ch_stack_light_guards() && !light_guards_are_real()) {
    skipped++;
    printf("skip %s: madvise(MADV_GUARD_INSTALL) is a silent no-op here "
           "(QEMU), so the stacks have no guard\n", cur_test);
    cur_skip = 1;
    return;
  }
  int pipefd[2];
  CHECK(pipe(pipefd) == 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 2);
    if (ch_spawn(overflow_main, NULL) <= 0) _exit(5);
    ch_run();
    _exit(4);
  }
  close(pipefd[1]);
  char msg[256] = {0};
  ssize_t got = 0, r;
  while ((r = read(pipefd[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0) got += r;
  close(pipefd[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == CH_EXIT_STACK_OVERFLOW);
  CHECK(strstr(msg, "stack overflow (guard hit at 0x") != NULL);
}

int main(void)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  run("callee-saved x19-x29 and d8-d15 survive a switch",
      callee_saved_x19_x29_and_d8_d15_survive_a_switch);
  run("FPCR rounding mode and FZ follow each context",
      fpcr_rounding_mode_and_fz_follow_each_context);
  run("a new context inherits its creator's FPCR",
      new_context_inherits_its_creators_fpcr);
  run("a new context enters fn with 16-byte sp, fp 0, lr in the trampoline",
      new_context_enters_fn_with_aligned_sp_and_fp_zero);
  run("DWARF and frame-pointer unwinders stop at the coroutine base",
      unwinders_stop_at_the_coroutine_base);
  run("100,000 round trips keep both sides' state",
      hundred_thousand_round_trips_keep_both_sides_state);
  run("10,000 coroutines run through coro.c and sched.c",
      ten_thousand_coroutines_run_through_the_scheduler);
  run("coroutines sleep on the timer loop",
      coroutines_sleep_on_the_timer_loop);
  run("a stack overflow is reported with its exit status",
      stack_overflow_is_reported_with_its_exit_status);
  printf("switch: %.1f ns per ch_ctx_switch (emulated; a sanity number only)\n",
         ns_per_switch);
  if (skipped) printf("%d skipped (not counted as passed)\n", skipped);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
