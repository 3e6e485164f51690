/*
** Listening sockets made here. See listen.h.
*/
#include <errno.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/listen.h"

int ch_listen_unix(const struct sockaddr_un *a, socklen_t alen, int backlog)
{
  struct stat st;
  if (lstat(a->sun_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
    /* A socket file nobody accepts on is left over from a process that
    ** ended without unlinking it: take its place. A live one is not ours. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      if (connect(probe, (const struct sockaddr *)a, alen) < 0 && errno == ECONNREFUSED)
        unlink(a->sun_path);
      close(probe);
    }
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (bind(fd, (const struct sockaddr *)a, alen) < 0 || listen(fd, backlog) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int ch_listen_tcp(const struct sockaddr *a, socklen_t alen, int backlog)
{
  int one = 1;
  int fd = socket(a->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (a->sa_family == AF_INET6)   /* nginx's ipv6only=on */
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, a, alen) < 0 || listen(fd, backlog) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int ch_listen_probe(const struct sockaddr *a, socklen_t alen)
{
  /* SO_REUSEADDR (a TIME_WAIT left by an earlier run is no owner) but no
  ** SO_REUSEPORT: the bind then fails with EADDRINUSE while any socket
  ** listens there, SO_REUSEPORT or not. Bound, never listening: it takes
  ** no connection, and it is closed at once. */
  int one = 1;
  int fd = socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (a->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  int r = bind(fd, a, alen) < 0 ? -errno : 0;
  close(fd);
  return r;
}
