/* Logging to stderr and OpenResty's error strings. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"

static const char *const names[] = { NULL, "error", "warn", "notice", "info", "debug" };

int ch_log_level(const char *name)
{
  static const char *const alias[] = { NULL, "err", "warn", "notice", "info", "debug" };
  for (int i = CH_LOG_ERR; i <= CH_LOG_DEBUG; i++)
    if (!strcasecmp(name, alias[i]) || !strcasecmp(name, names[i])) return i;
  return 0;
}

#define LINE_MAX_BYTES 4096   /* one log line, prefix and message */

/* Writes prefix, msg[0..len) and, when repeats > 0, " (repeated N times)",
** as one line. One write keeps lines whole between workers. A raw system
** call, not the hooked write: stderr may be a pipe that fills, and a log
** line must never park (every worker writes to this one fd). */
static void emit(int level, const char *msg, size_t len, unsigned repeats)
{
  char buf[LINE_MAX_BYTES + 64];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  int n = (int)strftime(buf, sizeof buf, "%Y/%m/%d %H:%M:%S", &tm);
  struct ch_worker *w = ch_worker_self;
  n += snprintf(buf + n, sizeof buf - (size_t)n, " [%s] w%d c%d: ",
                names[level < CH_LOG_ERR ? CH_LOG_ERR : level > CH_LOG_DEBUG ? CH_LOG_DEBUG : level],
                w ? w->id : -1, ch_self());
  if (len > LINE_MAX_BYTES - (size_t)n - 32) len = LINE_MAX_BYTES - (size_t)n - 32;
  memcpy(buf + n, msg, len);
  n += (int)len;
  if (repeats) n += snprintf(buf + n, sizeof buf - (size_t)n, " (repeated %u times)", repeats);
  buf[n++] = '\n';
  long r = syscall(SYS_write, STDERR_FILENO, buf, (size_t)n);
  (void)r;
}

/* The last error or warning line of this thread, for the repeat filter: a
** handler failing the same way on every request (a worker wedged by a bug)
** logs its message, often with a traceback, once a second with a count
** instead of once per request (it wrote 84 MB in 12 s). Per thread: each
** worker has its own, and no lock is taken. */
#define REPEAT_WINDOW 1   /* seconds an identical line stays held back */
static __thread char last[LINE_MAX_BYTES];
static __thread size_t last_len;
static __thread int last_level;
static __thread unsigned held;     /* identical lines held back since the last write */
static __thread time_t last_time;  /* when the last one was written */

void ch_log(int level, const char *fmt, ...)
{
  if (level > ch_opts.log_level) return;
  char msg[LINE_MAX_BYTES];
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* A message longer than the buffer is cut, and says so. */
  if (m < 0) m = 0;
  size_t len = (size_t)m;
  if (len >= sizeof msg - 1) {
    len = sizeof msg - 4;
    memcpy(msg + len, "...", 3);
    len += 3;
  }
  if (level > CH_LOG_WARN) {   /* only errors and warnings are filtered */
    emit(level, msg, len, 0);
    return;
  }
  time_t now = time(NULL);
  if (level == last_level && len == last_len && !memcmp(msg, last, len)) {
    if (now - last_time < REPEAT_WINDOW) {
      held++;
      return;
    }
    /* This one and those held back since the last write. */
    emit(level, msg, len, held + 1);
    held = 0;
    last_time = now;
    return;
  }
  if (held) emit(last_level, last, last_len, held);
  emit(level, msg, len, 0);
  memcpy(last, msg, len);
  last_len = len;
  last_level = level;
  held = 0;
  last_time = now;
}

const char *ch_errstr(int err)
{
  switch (err) {
  case 0: return "closed";
  case ETIMEDOUT: case EAGAIN: return "timeout";
  case ECONNREFUSED: return "connection refused";
  case ECONNRESET: return "connection reset by peer";
  case EPIPE: return "broken pipe";
  case ENOMEM: case ENOBUFS: return "no memory";
  case EBADF: return "closed";
  case ECANCELED: return "cancelled";
  case EHOSTUNREACH: return "no route to host";
  case ENETUNREACH: return "network is unreachable";
  case EADDRINUSE: return "address already in use";
  case EADDRNOTAVAIL: return "cannot assign requested address";
  case EMFILE: case ENFILE: return "too many open files";
  case ENOENT: return "no such file or directory";
  case EACCES: return "permission denied";
  default: {
    /* OpenResty's strings are lower case: "invalid argument". */
    static __thread char buf[128];
    snprintf(buf, sizeof buf, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z') buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
  }
  }
}
