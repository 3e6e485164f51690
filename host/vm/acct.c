/*
** A task's time, split. See acct.h.
**
** The hooks run on every park and resume of every coroutine once
** installed: a task not measured costs them two loads (its ext) each.
** They are installed the first time a task is measured, and stay: the
** resume hook is then this file's, which calls ch_ljvm_resumed first.
** A traceback is taken at a resume that ends the longest park so far, if
** that park lasted trace_min_ns: a slow request is mostly one long wait,
** and the stack at its resume is the stack it parked with.
*/
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "net/addr.h"
#include "vm/acct.h"
#include "vm/inspect.h"
#include "vm/vmhook.h"

/* Index of what a park waits on: the runtime's kind, or for a wait queue
** the binding's word (enum ch_task_on). Names by ch_inspect_wait_name. */
static int on_index(const struct ch_task *t, int wait)
{
  switch (wait) {
  case CH_WAIT_READ: return 0;
  case CH_WAIT_WRITE: return 1;
  case CH_WAIT_POLL: return 2;
  case CH_WAIT_SLEEP: return 3;
  case CH_WAIT_POOL: return 4;
  case CH_WAIT_PARK: return 5;
  case CH_WAIT_QUEUE: return 6 + (t->on < CH_TASK_ONS ? t->on : 0);
  default: return CH_ACCT_ONS - 1;
  }
}

/* The words for the indexes above. */
static const char *on_name(int i)
{
  static const char *const names[CH_ACCT_ONS] = {
    "read", "write", "poll", "sleep", "threadpool", "wakeup",
    "queue", "queue", "semaphore", "channel", "broadcast", "pool", "dns", "postgres", "thread", "other"
  };
  return i >= 0 && i < CH_ACCT_ONS ? names[i] : "other";
}

_Static_assert(6 + CH_TASK_ONS <= CH_ACCT_ONS - 1, "room for every binding's word and other");

static struct ch_task_acct *acct_of(struct ch_coro *c, struct ch_task **tp)
{
  struct ch_task *t = ch_coro_udata(c);
  if (!t || !t->ext) return NULL;
  *tp = t;
  return t->ext->acct;
}

static void on_park(struct ch_coro *c)
{
  struct ch_task *t;
  struct ch_task_acct *a = acct_of(c, &t);
  if (!a) return;
  uint64_t now = ch_now_ns();
  a->run_ns += now - a->mark_ns;
  a->mark_ns = now;
  struct ch_coro_info in;
  ch_coro_info(c, &in);
  a->parked_on = (uint8_t)on_index(t, in.wait);
  a->parked_fd = in.fd;
}

static void on_resume(struct ch_coro *c)
{
  ch_ljvm_resumed(c);
  struct ch_task *t;
  struct ch_task_acct *a = acct_of(c, &t);
  if (!a) return;
  uint64_t now = ch_now_ns(), d = now - a->mark_ns;
  a->mark_ns = now;
  a->park_ns += d;
  a->on_ns[a->parked_on % CH_ACCT_ONS] += d;
  if (d <= a->longest_ns) return;
  a->longest_ns = d;
  a->longest_on = a->parked_on;
  a->longest_fd = a->parked_fd;
  if (d < a->trace_min_ns) return;
  /* Before it runs on: the stack it parked with. */
  ch_inspect_traceback(ch_ljvm_innermost(&t->vm), 0, a->trace, sizeof a->trace);
  union ch_addr peer;
  socklen_t len = sizeof peer;
  a->longest_peer[0] = '\0';
  if (a->longest_fd >= 0 && getpeername(a->longest_fd, &peer.sa, &len) == 0)
    ch_addr_format(&peer, a->longest_peer, sizeof a->longest_peer);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void install(void)
{
  ch_set_resume_hook(on_resume);
  ch_vmhook_park(CH_VMHOOK_ACCT, on_park);
}

void ch_acct_begin(struct ch_task *t, struct ch_task_acct *a, uint64_t trace_min_ns)
{
  pthread_once(&once, install);
  memset(a, 0, offsetof(struct ch_task_acct, longest_peer));
  a->longest_peer[0] = a->trace[0] = '\0';
  a->longest_fd = a->parked_fd = -1;
  a->trace_min_ns = trace_min_ns;
  a->mark_ns = ch_now_ns();
  t->ext->acct = a;
}

void ch_acct_end(struct ch_task *t)
{
  struct ch_task_acct *a = t->ext ? t->ext->acct : NULL;
  if (!a) return;
  a->run_ns += ch_now_ns() - a->mark_ns;
  t->ext->acct = NULL;
}

size_t ch_acct_format(const struct ch_task_acct *a, char *buf, size_t n)
{
  size_t len = 0;
#define PUT(...) do { int k_ = snprintf(buf + len, n - len, __VA_ARGS__); \
                      if (k_ > 0) len = (size_t)k_ < n - len ? len + (size_t)k_ : n - 1; } while (0)
  PUT("running %.1f ms, parked %.1f ms", a->run_ns / 1e6, a->park_ns / 1e6);
  int first = 1;
  for (int i = 0; i < CH_ACCT_ONS; i++) {
    if (!a->on_ns[i]) continue;
    PUT("%s%s %.1f ms", first ? " (" : ", ", on_name(i), a->on_ns[i] / 1e6);
    first = 0;
  }
  if (!first) PUT(")");
  if (a->longest_ns) {
    PUT("; longest park %.1f ms on %s", a->longest_ns / 1e6, on_name(a->longest_on));
    if (a->longest_fd >= 0) PUT(" fd %d", a->longest_fd);
    if (a->longest_peer[0]) PUT(" (%s)", a->longest_peer);
  }
#undef PUT
  return len;
}
