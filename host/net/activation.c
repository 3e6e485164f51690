/*
** Sockets passed by systemd. See activation.h.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/activation.h"

#define FIRST_FD 3      /* SD_LISTEN_FDS_START */
#define MAX_PASSED 64   /* more is no sane unit file */

struct passed {
  int fd;
  union ch_addr addr;       /* getsockname's */
  char name[64];            /* LISTEN_FDNAMES' entry, or "" */
};

/* Written once by ch_activation_init before any thread: read-only after. */
static struct passed passed[MAX_PASSED];
static int npassed;

int ch_activation_init(void)
{
  const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
  if (!pid || !fds || atol(pid) != (long)getpid()) return 0;
  const char *names = getenv("LISTEN_FDNAMES");
  int n = atoi(fds);
  if (n > MAX_PASSED) n = MAX_PASSED;
  for (int i = 0; i < n; i++) {
    struct passed *p = &passed[npassed];
    int fd = FIRST_FD + i;
    socklen_t len = sizeof p->addr;
    int listening = 0;
    socklen_t ol = sizeof listening;
    if (getsockname(fd, &p->addr.sa, &len) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) < 0 || !listening)
      continue;   /* not a listening socket: not ours to use */
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    /* Non-blocking is the file's flag, shared by every dup: set once. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    p->fd = fd;
    /* The i-th colon-separated name. */
    const char *s = names;
    for (int k = 0; s && k < i; k++) {
      s = strchr(s, ':');
      if (s) s++;
    }
    if (s) {
      size_t l = strcspn(s, ":");
      if (l >= sizeof p->name) l = sizeof p->name - 1;
      memcpy(p->name, s, l);
      p->name[l] = '\0';
    }
    npassed++;
  }
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  return npassed;
}

int ch_activation_named(const char *spec)
{
  if (strncmp(spec, "fd:", 3) == 0) {
    char *end;
    long fd = strtol(spec + 3, &end, 10);
    if (end == spec + 3 || *end) return -EINVAL;
    for (int i = 0; i < npassed; i++)
      if (passed[i].fd == fd) return (int)fd;
    return -ENOENT;
  }
  if (strncmp(spec, "systemd:", 8) == 0) {
    for (int i = 0; i < npassed; i++)
      if (strcmp(passed[i].name, spec + 8) == 0) return passed[i].fd;
    return -ENOENT;
  }
  return -EINVAL;
}

static int same(const union ch_addr *x, const union ch_addr *y)
{
  if (x->sa.sa_family != y->sa.sa_family) return 0;
  switch (x->sa.sa_family) {
  case AF_INET:
    return x->in.sin_port == y->in.sin_port && x->in.sin_addr.s_addr == y->in.sin_addr.s_addr;
  case AF_INET6:
    return x->in6.sin6_port == y->in6.sin6_port &&
           memcmp(&x->in6.sin6_addr, &y->in6.sin6_addr, sizeof x->in6.sin6_addr) == 0;
  case AF_UNIX:
    return strcmp(x->un.sun_path, y->un.sun_path) == 0;
  default:
    return 0;
  }
}

int ch_activation_match(const union ch_addr *a)
{
  for (int i = 0; i < npassed; i++)
    if (same(&passed[i].addr, a)) return passed[i].fd;
  int port = ch_addr_port(a);
  if (port == 0) return -1;   /* unix paths match exactly or not at all */
  for (int i = 0; i < npassed; i++)
    if (ch_addr_port(&passed[i].addr) == port) return passed[i].fd;
  return -1;
}
