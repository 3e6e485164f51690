/*
** A fixed amount of echo work, for counting tools (cachegrind, callgrind,
** strace -c) rather than clocks: opens C connections, then each sends one
** SIZE-byte message, waits for all of it to come back (checked byte for
** byte) and sends the next, R times; then all close and it exits. Every
** connection stays open until all are done, so the server has C live
** connections throughout. Two runs with different R give the server's
** cost per message as the difference of its counts over C x (R2 - R1):
** start-up, accepts and closes cancel out (scripts/bench/echo_misses.sh
** runs both under cachegrind).
**
** Usage: echo_rounds -p PORT [-c 1000] [-r 20] [-s 64]
**
** Runs no coroutine, so the cohost hooks the bench Makefile rule links in
** pass every call straight to libc.
*/
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#define MAX_SIZE 4096
#define MAX_EVENTS 512

struct conn {
  int fd;
  int rounds;           /* messages whose echo came back */
  size_t got;           /* bytes of the current echo received */
};

static void die(const char *what)
{
  perror(what);
  exit(1);
}

int main(int argc, char **argv)
{
  int port = 0, nconn = 1000, rounds = 20, opt;
  size_t size = 64;
  while ((opt = getopt(argc, argv, "p:c:r:s:")) != -1) {
    switch (opt) {
    case 'p': port = atoi(optarg); break;
    case 'c': nconn = atoi(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 's': size = (size_t)atol(optarg); break;
    default: goto usage;
    }
  }
  if (port <= 0 || nconn <= 0 || rounds < 0 || size == 0 || size > MAX_SIZE) {
  usage:
    fprintf(stderr, "usage: echo_rounds -p PORT [-c 1000] [-r 20] [-s 64]\n");
    return 2;
  }
  char msg[MAX_SIZE], buf[MAX_SIZE];
  for (size_t i = 0; i < size; i++) msg[i] = (char)('a' + i % 26);
  struct conn *cs = calloc((size_t)nconn, sizeof *cs);
  int ep = epoll_create1(0);
  if (!cs || ep < 0) die("setup");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* Blocking connects, one at a time, all before the first message: every
  ** round then runs with all C connections open. */
  for (int i = 0; i < nconn; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    cs[i].fd = fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
  }
  int active = 0;
  for (int i = 0; i < nconn; i++) {
    if (rounds == 0) break;
    if (write(cs[i].fd, msg, size) != (ssize_t)size) die("write");
    active++;
  }
  struct epoll_event evs[MAX_EVENTS];
  while (active > 0) {
    int n = epoll_wait(ep, evs, MAX_EVENTS, 10000);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { fprintf(stderr, "echo_rounds: no echo for 10 s\n"); return 1; }
    for (int k = 0; k < n; k++) {
      struct conn *c = evs[k].data.ptr;
      ssize_t r = read(c->fd, buf, size - c->got);
      if (r <= 0) die("read");
      if (memcmp(buf, msg + c->got, (size_t)r) != 0) {
        fprintf(stderr, "echo_rounds: wrong bytes back\n");
        return 1;
      }
      c->got += (size_t)r;
      if (c->got < size) continue;
      c->got = 0;
      if (++c->rounds == rounds) { active--; continue; }
      if (write(c->fd, msg, size) != (ssize_t)size) die("write");
    }
  }
  for (int i = 0; i < nconn; i++) close(cs[i].fd);
  printf("echo_rounds conns=%d rounds=%d size=%zu msgs=%ld\n", nconn, rounds, size,
         (long)nconn * rounds);
  return 0;
}
