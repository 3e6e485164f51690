/*
** Tests of the context switch (asm/switch_x86_64_sysv.S through the internal
** API of runtime/ctx.h): what a switch must preserve and how a new context
** starts. These drive ch_ctx_make/ch_ctx_switch directly on stacks the test
** maps itself, so a failure here points at the assembly, not the scheduler.
*/
#include "helpers.h"

#include <sys/mman.h>

#include "ctx.h"

#define STACK_BYTES (64 * 1024)   /* plenty for these small entry functions */

/* -- Test-side assembly ----------------------------------------------------
** C cannot pin callee-saved registers across a call, so two tiny routines
** written in assembly load known values into them, switch, and store what
** they hold after the switch comes back.
**
** void regs_switch(struct ch_ctx *from, struct ch_ctx *to,
**                  const uint64_t in[6], uint64_t out[6]);
**   Saves the caller's rbx rbp r12-r15, loads them from in[] (order: rbx,
**   rbp, r12, r13, r14, r15), calls ch_ctx_switch(from, to), and when some
**   later switch resumes from, stores the six registers into out[] before
**   restoring the caller's. Six pushes plus the push of out make rsp 16-byte
**   aligned at the call, as the ABI requires.
**
** void align_entry(void *arg);
**   Entry function for ch_ctx_make: records rsp exactly as fn sees it on
**   entry (before any prologue) in align_rsp, then tail-jumps to
**   align_entry_c(arg) with the stack untouched.
*/
uint64_t align_rsp;                 /* written by align_entry */
void regs_switch(struct ch_ctx *from, struct ch_ctx *to, const uint64_t in[6],
                 uint64_t out[6]);
void align_entry(void *arg);
void align_entry_c(void *arg);

__asm__(
    "  .text\n"
    "  .globl regs_switch\n"
    "  .type regs_switch, @function\n"
    "regs_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  pushq %rcx\n"                  /* out[]: rcx is caller-saved */
    "  movq 0x00(%rdx), %rbx\n"
    "  movq 0x08(%rdx), %rbp\n"
    "  movq 0x10(%rdx), %r12\n"
    "  movq 0x18(%rdx), %r13\n"
    "  movq 0x20(%rdx), %r14\n"
    "  movq 0x28(%rdx), %r15\n"
    "  call ch_ctx_switch\n"
    "  popq %rcx\n"
    "  movq %rbx, 0x00(%rcx)\n"
    "  movq %rbp, 0x08(%rcx)\n"
    "  movq %r12, 0x10(%rcx)\n"
    "  movq %r13, 0x18(%rcx)\n"
    "  movq %r14, 0x20(%rcx)\n"
    "  movq %r15, 0x28(%rcx)\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    "  .size regs_switch, .-regs_switch\n"
    "\n"
    "  .globl align_entry\n"
    "  .type align_entry, @function\n"
    "align_entry:\n"
    "  movq %rsp, align_rsp(%rip)\n"
    "  jmp align_entry_c\n"
    "  .size align_entry, .-align_entry\n");

/* A private stack for one test context, mapped and unmapped per test. */
static void *stack_new(void) {
  void *p = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(p != MAP_FAILED);
  return p;
}

static void stack_free(void *p) { munmap(p, STACK_BYTES); }

/* -- Callee-saved registers ------------------------------------------------ */

static struct ch_ctx main_ctx, co_ctx;

/* Register images: what each side loads before switching away, and what it
** finds after being switched back to. */
static const uint64_t main_in1[6] = {
  0x1111111111111101ull, 0x2222222222222202ull, 0x3333333333333303ull,
  0x4444444444444404ull, 0x5555555555555505ull, 0x6666666666666606ull };
static const uint64_t main_in2[6] = {
  0x0123456789abcdefull, 0x1032547698badcfeull, 0x23016745ab89efcdull,
  0x32107654ba98fedcull, 0x45670123cdef89abull, 0x54761032dcfe98baull };
static const uint64_t co_in1[6] = {
  0xdead0000000000b1ull, 0xdead0000000000b2ull, 0xdead0000000000b3ull,
  0xdead0000000000b4ull, 0xdead0000000000b5ull, 0xdead0000000000b6ull };
static const uint64_t co_in2[6] = {
  0xbeef0000000000c1ull, 0xbeef0000000000c2ull, 0xbeef0000000000c3ull,
  0xbeef0000000000c4ull, 0xbeef0000000000c5ull, 0xbeef0000000000c6ull };
static uint64_t co_out1[6];

/* The other context: loads its own values, switches back to main, and on
** resumption records what it finds; then leaves for good with values main
** must not see either. */
static void regs_co(void *arg) {
  (void)arg;
  regs_switch(&co_ctx, &main_ctx, co_in1, co_out1);
  uint64_t unused[6];
  regs_switch(&co_ctx, &main_ctx, co_in2, unused);
  abort();  /* never resumed: the test does not switch here a third time */
}

static void test_callee_saved_registers_survive_a_switch(void **state) {
  (void)state;
  void *stack = stack_new();
  uint64_t out[6];
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, regs_co, NULL);

  /* First switch enters the new context, which loads co_in1 and comes
  ** back: main must find its own values again, not the other side's. */
  regs_switch(&main_ctx, &co_ctx, main_in1, out);
  for (int i = 0; i < 6; i++) assert_int_equal(out[i], main_in1[i]);

  /* Second round resumes the other context mid-function: it must find the
  ** values it had, while main had loaded different ones meanwhile. */
  regs_switch(&main_ctx, &co_ctx, main_in2, out);
  for (int i = 0; i < 6; i++) assert_int_equal(co_out1[i], co_in1[i]);
  for (int i = 0; i < 6; i++) assert_int_equal(out[i], main_in2[i]);
  stack_free(stack);
}

/* -- MXCSR and x87 control word ---------------------------------------------
** Rounding-control bits: MXCSR bits 13-14, x87 control word bits 10-11.
** 0 = nearest (the default), 1 = down, 2 = up, 3 = toward zero.
*/
#define MXCSR_RC_SHIFT 13
#define X87_RC_SHIFT 10

static uint32_t get_mxcsr(void) {
  uint32_t v;
  __asm__ volatile("stmxcsr %0" : "=m"(v) : : "memory");
  return v;
}

static void set_mxcsr(uint32_t v) { __asm__ volatile("ldmxcsr %0" : : "m"(v) : "memory"); }

static uint16_t get_x87cw(void) {
  uint16_t v;
  __asm__ volatile("fnstcw %0" : "=m"(v) : : "memory");
  return v;
}

static void set_x87cw(uint16_t v) { __asm__ volatile("fldcw %0" : : "m"(v) : "memory"); }

static void set_rounding(unsigned sse, unsigned x87) {
  set_mxcsr((get_mxcsr() & ~(3u << MXCSR_RC_SHIFT)) | (sse << MXCSR_RC_SHIFT));
  set_x87cw((uint16_t)((get_x87cw() & ~(3u << X87_RC_SHIFT)) | (x87 << X87_RC_SHIFT)));
}

static unsigned sse_rounding(void) { return (get_mxcsr() >> MXCSR_RC_SHIFT) & 3u; }
static unsigned x87_rounding(void) { return (get_x87cw() >> X87_RC_SHIFT) & 3u; }

static unsigned fpu_co_sse_after, fpu_co_x87_after;

/* The other context sets rounding up in both units, lets main run, and
** records what it has when resumed. */
static void fpu_co(void *arg) {
  (void)arg;
  set_rounding(2, 2);
  ch_ctx_switch(&co_ctx, &main_ctx);
  fpu_co_sse_after = sse_rounding();
  fpu_co_x87_after = x87_rounding();
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();  /* never resumed */
}

static void test_mxcsr_and_x87_control_word_survive_a_switch(void **state) {
  (void)state;
  uint32_t mxcsr0 = get_mxcsr();
  uint16_t cw0 = get_x87cw();
  void *stack = stack_new();
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, fpu_co, NULL);

  /* Main: toward zero for SSE, down for x87; the other side sets up/up. */
  set_rounding(3, 1);
  ch_ctx_switch(&main_ctx, &co_ctx);
  unsigned sse_main = sse_rounding(), x87_main = x87_rounding();

  /* Change main's again before resuming: the other side must still have
  ** its own modes, not main's. */
  set_rounding(1, 3);
  ch_ctx_switch(&main_ctx, &co_ctx);
  unsigned sse_main2 = sse_rounding(), x87_main2 = x87_rounding();

  set_mxcsr(mxcsr0);  /* restore before asserting: a failure longjmps */
  set_x87cw(cw0);
  stack_free(stack);
  assert_int_equal(sse_main, 3);
  assert_int_equal(x87_main, 1);
  assert_int_equal(fpu_co_sse_after, 2);
  assert_int_equal(fpu_co_x87_after, 2);
  assert_int_equal(sse_main2, 1);
  assert_int_equal(x87_main2, 3);
}

/* Rounding mode actually in effect, not only the stored bits: 1/3 rounded
** down and up differ in the last place. */
static volatile double fpu_third_co;

static void fpu_compute_co(void *arg) {
  (void)arg;
  set_rounding(2, 2);  /* up */
  ch_ctx_switch(&co_ctx, &main_ctx);
  volatile double one = 1.0, three = 3.0;
  fpu_third_co = one / three;  /* SSE division under this context's mode */
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void test_rounding_mode_in_effect_follows_the_context(void **state) {
  (void)state;
  /* Valgrind keeps the MXCSR and x87 control bits (the test above passes
  ** under it) but computes every SSE and x87 result rounded to nearest, so
  ** no rounding mode is ever in effect there. */
  TH_SKIP_UNDER_VALGRIND("SSE/x87 arithmetic always rounds to nearest on "
                         "valgrind's CPU, whatever MXCSR says");
  uint32_t mxcsr0 = get_mxcsr();
  uint16_t cw0 = get_x87cw();
  void *stack = stack_new();
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, fpu_compute_co, NULL);
  ch_ctx_switch(&main_ctx, &co_ctx);
  set_rounding(1, 1);  /* main: down */
  volatile double one = 1.0, three = 3.0;
  double third_main = one / three;
  ch_ctx_switch(&main_ctx, &co_ctx);
  double third_main_after = one / three;
  set_mxcsr(mxcsr0);
  set_x87cw(cw0);
  stack_free(stack);
  assert_true(fpu_third_co > third_main);          /* up vs down */
  assert_true(third_main_after == third_main);     /* main still rounds down */
}

/* -- New contexts ----------------------------------------------------------- */

static void *align_arg_seen;

void align_entry_c(void *arg) {
  align_arg_seen = arg;
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void test_new_context_enters_fn_with_abi_stack_alignment(void **state) {
  (void)state;
  void *stack = stack_new();
  /* Tops of every misalignment: ch_ctx_make must align them itself. */
  for (int off = 0; off < 16; off++) {
    char *top = (char *)stack + STACK_BYTES - 64 - off;
    align_rsp = 0;
    align_arg_seen = NULL;
    ch_ctx_make(&co_ctx, top, align_entry, &align_rsp);
    ch_ctx_switch(&main_ctx, &co_ctx);
    /* At a function's first instruction the call has pushed 8 bytes onto
    ** a 16-byte aligned stack: rsp % 16 == 8. */
    assert_int_equal(align_rsp % 16, 8);
    assert_true(align_rsp < (uint64_t)(uintptr_t)top);
    assert_true(align_rsp > (uint64_t)(uintptr_t)stack);
    assert_ptr_equal(align_arg_seen, &align_rsp);
  }
  stack_free(stack);
}

/* Many round trips keep the locals of both sides intact. */
static int pingpong_count;

static void pingpong_co(void *arg) {
  long *n = arg;
  for (int i = 0; i < 100000; i++) {
    pingpong_count++;
    (*n)++;
    ch_ctx_switch(&co_ctx, &main_ctx);
  }
  ch_ctx_switch(&co_ctx, &main_ctx);
  abort();
}

static void test_hundred_thousand_round_trips_keep_both_sides_state(void **state) {
  (void)state;
  void *stack = stack_new();
  long n = 0;
  pingpong_count = 0;
  ch_ctx_make(&co_ctx, (char *)stack + STACK_BYTES, pingpong_co, &n);
  long mine = 0;
  for (int i = 0; i < 100000; i++) {
    ch_ctx_switch(&main_ctx, &co_ctx);
    mine += 2;
    assert_int_equal(n, i + 1);
  }
  assert_int_equal(mine, 200000);
  assert_int_equal(pingpong_count, 100000);
  stack_free(stack);
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_callee_saved_registers_survive_a_switch),
    TH_TEST(test_mxcsr_and_x87_control_word_survive_a_switch),
    TH_TEST(test_rounding_mode_in_effect_follows_the_context),
    TH_TEST(test_new_context_enters_fn_with_abi_stack_alignment),
    TH_TEST(test_hundred_thousand_round_trips_keep_both_sides_state),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
