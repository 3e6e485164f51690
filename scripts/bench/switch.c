/*
** Context switch cost: ch_ctx_switch (asm/) against glibc's swapcontext.
** boost.context's jump_fcontext is measured by switch_boost.cpp with the
** same loop, so the figures compare directly.
**
** Usage: switch IMPL [ROUND_TRIPS [RUNS [dirty]]]     IMPL: ch | ucontext
**
** One round trip is two switches: main -> coroutine -> main. Prints one line
**   switch impl=ch mxcsr=same round_trips=10000000 runs=5 ns_per_switch=5.12 min=5.01 max=5.40
** with the median of RUNS timed runs (after one untimed warm-up run).
** RUNS = 0 makes exactly one untimed pass and prints nothing: run.sh uses it
** under valgrind --tool=callgrind at two ROUND_TRIPS and divides the
** difference in instructions, which cancels start-up and set-up costs.
**
** MXCSR: both switches save and restore MXCSR, whose low 6 bits are sticky
** exception flags (the ABI makes them caller-saved; only the control bits
** are callee-saved). Any inexact floating-point result sets the PE flag, so
** once one side has done floating point the two saved values differ and
** every switch loads a different MXCSR. On these VMs that load costs about
** 70 ns, against about 1 ns when the value does not change. By default the
** timed loop keeps the flags equal (integer timing, no floating point until
** the end); "dirty" sets PE on the main side first, which is what a server
** doing any floating point sees.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "ctx.h"

#define STACK_SIZE (64 * 1024)  /* the loops below use a few hundred bytes */
#define MAX_RUNS 101

/* -- ch_ctx_switch ------------------------------------------------------- */

static struct ch_ctx ch_main, ch_co;

/* Never returns (ch_ctx_make's contract): bounces straight back forever. */
static void ch_loop(void *arg)
{
  (void)arg;
  for (;;)
    ch_ctx_switch(&ch_co, &ch_main);
}

static void ch_setup(void *stack)
{
  ch_ctx_make(&ch_co, (char *)stack + STACK_SIZE, ch_loop, NULL);
}

static void ch_rounds(uint64_t n)
{
  for (uint64_t i = 0; i < n; i++)
    ch_ctx_switch(&ch_main, &ch_co);
}

/* -- swapcontext --------------------------------------------------------- */

static ucontext_t uc_main, uc_co;

static void uc_loop(void)
{
  for (;;)
    swapcontext(&uc_co, &uc_main);
}

static void uc_setup(void *stack)
{
  if (getcontext(&uc_co) != 0) {
    perror("getcontext");
    exit(1);
  }
  uc_co.uc_stack.ss_sp = stack;
  uc_co.uc_stack.ss_size = STACK_SIZE;
  uc_co.uc_link = NULL;
  makecontext(&uc_co, uc_loop, 0);
}

static void uc_rounds(uint64_t n)
{
  for (uint64_t i = 0; i < n; i++)
    swapcontext(&uc_main, &uc_co);
}

/* -- Driver -------------------------------------------------------------- */

/* Integer nanoseconds: the timed loop must not touch floating point, see
** "dirty" in the header comment. */
static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* An inexact division sets MXCSR's sticky PE flag on this side only. */
static void set_pe_flag(void)
{
  volatile double one = 1.0, three = 3.0;
  volatile double third = one / three;
  (void)third;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s ch|ucontext [round_trips [runs [dirty]]]\n", argv[0]);
    return 2;
  }
  const char *impl = argv[1];
  uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 10000000;
  int runs = argc > 3 ? atoi(argv[3]) : 5;
  int dirty = argc > 4 && strcmp(argv[4], "dirty") == 0;
  if (n == 0 || runs < 0 || runs > MAX_RUNS) {
    fprintf(stderr, "switch: bad round_trips or runs\n");
    return 2;
  }

  /* An mmap'd stack like the runtime's, without the guard: the loops are
  ** tiny and this binary measures the switch, not the stack allocator. */
  void *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) {
    perror("mmap");
    return 1;
  }

  void (*rounds)(uint64_t);
  if (strcmp(impl, "ch") == 0) {
    ch_setup(stack);
    rounds = ch_rounds;
  } else if (strcmp(impl, "ucontext") == 0) {
    uc_setup(stack);
    rounds = uc_rounds;
  } else {
    fprintf(stderr, "switch: unknown impl %s\n", impl);
    return 2;
  }

  if (dirty)
    set_pe_flag();
  if (runs == 0) {  /* instruction counting: one pass of exactly n */
    rounds(n);
    return 0;
  }

  rounds(n / 10 + 1);  /* warm-up: caches, branch predictors, page faults */
  uint64_t elapsed[MAX_RUNS];
  for (int r = 0; r < runs; r++) {
    uint64_t t0 = now_ns();
    rounds(n);
    elapsed[r] = now_ns() - t0;
  }
  /* Floating point is allowed from here on. */
  double ns[MAX_RUNS];
  for (int r = 0; r < runs; r++)
    ns[r] = (double)elapsed[r] / (2.0 * n);
  qsort(ns, runs, sizeof ns[0], cmp_double);
  printf("switch impl=%s mxcsr=%s round_trips=%llu runs=%d "
         "ns_per_switch=%.2f min=%.2f max=%.2f\n", impl,
         dirty ? "dirty" : "same", (unsigned long long)n, runs,
         ns[runs / 2], ns[0], ns[runs - 1]);
  return 0;
}
