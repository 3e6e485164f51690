/*
** The baseline echo server: one thread, level-triggered epoll, non-blocking
** sockets, one read per readiness event, the way Redis's ae loop serves a
** client. No coroutines: every call below runs outside one, where cohost's
** hooks (linked in by the bench Makefile rule) pass straight to libc.
**
** Usage: echo_epoll PORT        listens on 127.0.0.1:PORT until killed
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#define BUF_SIZE 4096   /* one read's worth; messages here are 64 bytes */
#define MAX_EVENTS 256

struct conn {
  int fd;
  size_t off;           /* bytes of buf already written back */
  size_t len;           /* bytes of buf read; off < len while EPOLLOUT waits */
  char buf[BUF_SIZE];
};

static int ep;

static void die(const char *what)
{
  perror(what);
  exit(1);
}

static void watch(struct conn *c, int op, uint32_t events)
{
  struct epoll_event ev = {.events = events, .data.ptr = c};
  if (epoll_ctl(ep, op, c->fd, &ev) < 0)
    die("epoll_ctl");
}

static void drop(struct conn *c)
{
  close(c->fd);  /* close also removes it from the epoll set */
  free(c);
}

/* Writes what is left of buf. Returns 1 when all is out, 0 when the socket
** is full (EPOLLOUT will call again), -1 on error. */
static int flush(struct conn *c)
{
  while (c->off < c->len) {
    ssize_t n = write(c->fd, c->buf + c->off, c->len - c->off);
    if (n < 0)
      return errno == EAGAIN ? 0 : -1;
    c->off += (size_t)n;
  }
  c->off = c->len = 0;
  return 1;
}

/* Readiness on a connection: EPOLLIN, EPOLLOUT, or an error or hang-up that
** the next read or write reports. */
static void on_event(struct conn *c)
{
  if (c->len > 0) {  /* waiting for room to write the rest */
    int r = flush(c);
    if (r < 0)
      drop(c);
    else if (r > 0)
      watch(c, EPOLL_CTL_MOD, EPOLLIN);
    return;
  }
  ssize_t n = read(c->fd, c->buf, sizeof c->buf);
  if (n == 0 || (n < 0 && errno != EAGAIN)) {
    drop(c);
    return;
  }
  if (n < 0)
    return;
  c->len = (size_t)n;
  int r = flush(c);
  if (r < 0)
    drop(c);
  else if (r == 0)  /* stop reading until the echo is out */
    watch(c, EPOLL_CTL_MOD, EPOLLOUT);
}

static void on_accept(int lfd)
{
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == ECONNABORTED || errno == EINTR)
        return;
      perror("accept4");  /* EMFILE and the like: shed, keep serving */
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
      close(fd);
      continue;
    }
    c->fd = fd;
    watch(c, EPOLL_CTL_ADD, EPOLLIN);
  }
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);  /* a peer gone mid-write is an EPIPE, not death */
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0)
    die("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)atoi(argv[1]))};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0)
    die("bind");
  if (listen(lfd, SOMAXCONN) < 0)
    die("listen");
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    die("epoll_create1");
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0)
    die("epoll_ctl");

  struct epoll_event evs[MAX_EVENTS];
  for (;;) {
    int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; i++) {
      if (evs[i].data.ptr == NULL)
        on_accept(lfd);
      else
        on_event(evs[i].data.ptr);
    }
  }
}
