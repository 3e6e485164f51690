/*
** sd_notify, spoken directly. See notify.h; the protocol is systemd's
** sd_notify(3) "NOTES": one SOCK_DGRAM message, credentials implied.
*/
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"
#include "proc/notify.h"

/* Written once by ch_notify_init before any thread: read-only after. */
static int sock = -1;
static struct sockaddr_un addr;
static socklen_t addr_len;
static int watchdog_ms;

void ch_notify_init(void)
{
  const char *path = getenv("NOTIFY_SOCKET");
  const char *wd = getenv("WATCHDOG_USEC"), *wd_pid = getenv("WATCHDOG_PID");
  if (wd && (!wd_pid || atol(wd_pid) == (long)getpid())) {
    long long usec = atoll(wd);
    if (usec > 0) watchdog_ms = (int)(usec / 2000 > 0 ? usec / 2000 : 1);
  }
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  if (!path) return;
  size_t n = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || n < 2 || n >= sizeof addr.sun_path) {
    fprintf(stderr, "cohost: NOTIFY_SOCKET %s: not a unix socket path; not notifying\n", path);
    unsetenv("NOTIFY_SOCKET");
    return;
  }
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path, n);
  if (path[0] == '@') addr.sun_path[0] = '\0';   /* the abstract namespace */
  addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
  sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  unsetenv("NOTIFY_SOCKET");
}

void ch_notify(const char *fmt, ...)
{
  if (sock < 0) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n >= (int)sizeof msg) n = (int)sizeof msg - 1;
  /* Raw: the hooked sendto would park a coroutine, and this may run on
  ** one, on the signal thread, or in the master. */
  long r = syscall(SYS_sendto, sock, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT,
                   (const struct sockaddr *)&addr, addr_len);
  if (r < 0) ch_log(CH_LOG_WARN, "sd_notify: %s", strerror(errno));
}

int ch_notify_watchdog_ms(void)
{
  return sock >= 0 ? watchdog_ms : 0;
}

/* -- The watchdog's pings without a master --------------------------------- */

static _Atomic int answered;   /* workers that ran the last round's post */

static void answer(void *arg)
{
  (void)arg;
  atomic_fetch_add_explicit(&answered, 1, memory_order_relaxed);
}

/* Pings only while every worker's scheduler runs what is posted to it:
** a worker stuck in a loop (or a deadlock) stops the pings, and systemd
** restarts the unit. */
static void *watchdog_main(void *arg)
{
  (void)arg;
  int posted = 0;
  for (;;) {
    struct timespec ts = { watchdog_ms / 1000, (long)(watchdog_ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    int got = atomic_exchange_explicit(&answered, 0, memory_order_relaxed);
    if (got >= posted) ch_notify("WATCHDOG=1");
    posted = ch_workers_post(answer, NULL);
  }
  return NULL;
}

void ch_notify_watchdog_start(void)
{
  if (!ch_notify_watchdog_ms()) return;
  pthread_t t;
  if (pthread_create(&t, NULL, watchdog_main, NULL) == 0) pthread_detach(t);
  else ch_log(CH_LOG_ERR, "sd_notify: cannot start the watchdog thread");
}
