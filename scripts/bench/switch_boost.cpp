/*
** boost.context's jump_fcontext round trip, for comparison with
** ch_ctx_switch in switch.c: the same loop shape, the same state saved
** (callee-saved registers, MXCSR, x87 control word), output in the same
** format with impl=boost.
**
** Usage: switch_boost [ROUND_TRIPS [RUNS [dirty]]]   (RUNS = 0: one silent
** pass, for instruction counting under callgrind; "dirty": MXCSR flags
** differ between the two sides; see switch.c for both)
*/
#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <ctime>
#include <sys/mman.h>

namespace bc = boost::context::detail;

static const std::size_t STACK_SIZE = 64 * 1024;
static const int MAX_RUNS = 101;

static bc::fcontext_t co;  // the coroutine's context while it is suspended

// Bounces straight back forever: t.fctx is always the context that jumped
// here, so jumping to it resumes main.
static void loop(bc::transfer_t t)
{
  for (;;)
    t = bc::jump_fcontext(t.fctx, nullptr);
}

static void rounds(std::uint64_t n)
{
  for (std::uint64_t i = 0; i < n; i++)
    co = bc::jump_fcontext(co, nullptr).fctx;
}

// Integer nanoseconds: no floating point in the timed loop (see switch.c).
static std::uint64_t now_ns()
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000u + std::uint64_t(ts.tv_nsec);
}

// An inexact division sets MXCSR's sticky PE flag on this side only.
static void set_pe_flag()
{
  volatile double one = 1.0, three = 3.0;
  volatile double third = one / three;
  (void)third;
}

int main(int argc, char **argv)
{
  std::uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000000;
  int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  bool dirty = argc > 3 && std::string(argv[3]) == "dirty";
  if (n == 0 || runs < 0 || runs > MAX_RUNS) {
    std::fprintf(stderr, "switch_boost: bad round_trips or runs\n");
    return 2;
  }
  void *stack = mmap(nullptr, STACK_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  // make_fcontext takes the top of the stack (stacks grow down).
  co = bc::make_fcontext(static_cast<char *>(stack) + STACK_SIZE, STACK_SIZE,
                         loop);

  if (dirty)
    set_pe_flag();
  if (runs == 0) {
    rounds(n);
    return 0;
  }
  rounds(n / 10 + 1);  // warm-up, as in switch.c
  std::uint64_t elapsed[MAX_RUNS];
  for (int r = 0; r < runs; r++) {
    std::uint64_t t0 = now_ns();
    rounds(n);
    elapsed[r] = now_ns() - t0;
  }
  double ns[MAX_RUNS];  // floating point is allowed from here on
  for (int r = 0; r < runs; r++)
    ns[r] = double(elapsed[r]) / (2.0 * n);
  std::sort(ns, ns + runs);
  std::printf("switch impl=boost mxcsr=%s round_trips=%llu runs=%d "
              "ns_per_switch=%.2f min=%.2f max=%.2f\n",
              dirty ? "dirty" : "same", (unsigned long long)n, runs,
              ns[runs / 2], ns[0], ns[runs - 1]);
  return 0;
}
