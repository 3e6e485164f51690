/*
** Echo server on the cohost runtime, written the way the runtime promises
** code can be written: blocking accept(), read() and write() on blocking
** sockets, one coroutine per connection. The hooks turn every call that
** would block into a wait on the scheduler's epoll, so one thread serves
** every connection. Compare with echo_epoll.c, the hand-written event loop.
**
** Usage: echo_ch PORT           listens on 127.0.0.1:PORT until killed
*/
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "cohost.h"

#define BUF_SIZE 4096   /* one read's worth, on the coroutine's stack */

/* One connection. Yields in read and write (through the hooks). */
static void serve(void *arg)
{
  int fd = (int)(intptr_t)arg;
  char buf[BUF_SIZE];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0)
      break;  /* 0: peer closed; < 0: reset and the like */
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(fd, buf + off, (size_t)(n - off));
      if (w < 0)
        goto out;
      off += w;
    }
  }
out:
  close(fd);
}

/* The accept loop. Yields in accept. */
static void acceptor(void *arg)
{
  int lfd = (int)(intptr_t)arg;
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
      /* A connection aborted before accept is transient; anything else
      ** (EMFILE: out of descriptors) needs connections to finish first. */
      if (errno != ECONNABORTED && errno != EINTR)
        ch_sleep_ms(1);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int id = ch_spawn(serve, (void *)(intptr_t)fd);
    if (id < 0)
      close(fd);
  }
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);  /* a peer gone mid-write is an EPIPE, not death */
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) {
    perror("socket");
    return 1;
  }
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)atoi(argv[1]))};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      listen(lfd, SOMAXCONN) < 0) {
    perror("bind/listen");
    return 1;
  }
  int rc = ch_spawn(acceptor, (void *)(intptr_t)lfd);
  if (rc < 0) {
    fprintf(stderr, "echo_ch: ch_spawn: %s\n", strerror(-rc));
    return 1;
  }
  rc = ch_run();  /* never returns: the acceptor lives forever */
  fprintf(stderr, "echo_ch: ch_run returned %d\n", rc);
  return 1;
}
