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

void ch_log(int level, const char *fmt, ...)
{
  if (level > ch_opts.log_level) return;
  char buf[4096];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  int n = (int)strftime(buf, sizeof buf, "%Y/%m/%d %H:%M:%S", &tm);
  struct ch_worker *w = ch_worker_self;
  n += snprintf(buf + n, sizeof buf - (size_t)n, " [%s] w%d c%d: ",
                names[level < CH_LOG_ERR ? CH_LOG_ERR : level > CH_LOG_DEBUG ? CH_LOG_DEBUG : level],
                w ? w->id : -1, ch_self());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  /* A message longer than the buffer is cut, and says so. */
  if (m < 0) m = 0;
  if ((size_t)(n + m) >= sizeof buf - 1) {
    n = (int)sizeof buf - 5;
    memcpy(buf + n, "...", 3);
    n += 3;
  } else {
    n += m;
  }
  buf[n++] = '\n';
  /* One write keeps lines whole between workers. A raw system call, not
  ** the hooked write: stderr may be a pipe that fills, and a log line must
  ** never park (every worker writes to this one fd). */
  long r = syscall(SYS_write, STDERR_FILENO, buf, (size_t)n);
  (void)r;
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
