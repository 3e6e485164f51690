/*
** Stack-overflow reporting. A coroutine that runs off its stack faults in
** the guard below it; the kernel can only deliver that SIGSEGV on an
** alternate stack, so every scheduler thread gets one (SA_ONSTACK). The
** handler prints "coroutine <id> stack overflow (guard hit at <addr>)"
** and exits with CH_EXIT_STACK_OVERFLOW. Any other fault goes to the
** handler that was installed before ours, or to the default action.
*/
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cohost.h"
#include "fault.h"
#include "stack.h"

#define ALTSTACK_SIZE (64 * 1024)   /* SIGSTKSZ is 8 KiB; the handler is tiny
                                    ** but chained handlers may not be */

static struct sigaction old_segv, old_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_err;
static __thread int has_altstack;
static __thread void *altstack;   /* ours to unmap at ch_fault_fini */

/* Async-signal-safe formatting: stack buffers and one raw write system
** call. Never the write hook, which may allocate or park (stderr may be
** a full pipe), and neither is safe in a signal handler. */
static char *put_str(char *p, const char *s)
{
  while (*s) *p++ = *s++;
  return p;
}

static char *put_dec(char *p, unsigned long v)
{
  char t[24];
  int n = 0;
  do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  while (n) *p++ = t[--n];
  return p;
}

static char *put_hex(char *p, uintptr_t v)
{
  char t[20];
  int n = 0;
  do { t[n++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
  p = put_str(p, "0x");
  while (n) *p++ = t[--n];
  return p;
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
  int id = ch_stack_guard_owner(si->si_addr);
  if (id != 0) {
    char msg[128], *p = msg;
    p = put_str(p, "coroutine ");
    p = id > 0 ? put_dec(p, (unsigned long)id) : put_str(p, "?");
    p = put_str(p, " stack overflow (guard hit at ");
    p = put_hex(p, (uintptr_t)si->si_addr);
    p = put_str(p, ")\n");
    long w = syscall(SYS_write, STDERR_FILENO, msg, (size_t)(p - msg));
    (void)w;
    _exit(CH_EXIT_STACK_OVERFLOW);
  }
  /* Not ours: hand over to whoever was there before, or die the default
  ** way (restoring SIG_DFL makes the faulting instruction re-fault). */
  struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
  if (old->sa_flags & SA_SIGINFO) {
    if (old->sa_sigaction) { old->sa_sigaction(sig, si, uc); return; }
  } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
}

static void install(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &old_segv) < 0 || sigaction(SIGBUS, &sa, &old_bus) < 0)
    install_err = -errno;
}

int ch_fault_init(void)
{
  pthread_once(&once, install);
  if (install_err) return install_err;
  if (has_altstack) return 0;
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) {
    has_altstack = 1;   /* the embedder already gave this thread one */
    return 0;
  }
  void *m = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -ENOMEM;
  stack_t ss = { .ss_sp = m, .ss_size = ALTSTACK_SIZE, .ss_flags = 0 };
  if (sigaltstack(&ss, NULL) < 0) { int e = -errno; munmap(m, ALTSTACK_SIZE); return e; }
  has_altstack = 1;
  altstack = m;
  return 0;
}

void ch_fault_fini(void)
{
  if (!altstack) return;
  stack_t ss = { .ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE };
  sigaltstack(&ss, NULL);
  munmap(altstack, ALTSTACK_SIZE);
  altstack = NULL;
  has_altstack = 0;
}
