/*
** An echo server on io_uring, the ceiling a completion backend could reach
** (issue 15): what echo_epoll is to the epoll loop. One thread, one ring;
** a multishot accept, one multishot recv per connection into a ring of
** provided buffers (the kernel picks the buffer, so nothing is posted per
** connection while it is idle), and a send of that same buffer back. The
** loop's one system call is io_uring_submit_and_wait: every send queued
** while the completions of the last wait were handled goes in with it.
**
** Order is kept per connection: a second message that arrives while the
** first one's send is in flight waits in the connection's queue, so an
** echo never overtakes another. No coroutines: cohost's hooks, linked in
** by the bench Makefile rule, pass close(2) straight through, and liburing
** makes its system calls itself.
**
** Usage: echo_uring PORT        listens on 127.0.0.1:PORT until killed
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
#include <sys/socket.h>

#include <liburing.h>

#define RING_ENTRIES 4096   /* SQ size; the CQ is twice that by default */
#define NBUFS 4096          /* provided buffers: one per message in flight */
#define BUF_SIZE 2048       /* one recv's worth; messages here are 64 bytes */
#define BGID 0              /* the buffer group every recv takes from */
#define MAX_FDS 65536       /* fds are table indexes (20,000-file limit here) */
#define QUEUE 64            /* messages waiting for a connection's send */

/* user_data: the operation in the top byte, the buffer id in the next 16
** bits, the fd in the low 32. */
enum { OP_ACCEPT = 1, OP_RECV, OP_SEND };
#define UD(op, bid, fd) (((uint64_t)(op) << 56) | ((uint64_t)(bid) << 32) | (uint32_t)(fd))
#define UD_OP(u) ((int)((u) >> 56))
#define UD_BID(u) ((int)(((u) >> 32) & 0xffff))
#define UD_FD(u) ((int)(uint32_t)(u))

struct conn {
  int open;             /* the fd is a live connection of ours */
  int sending;          /* a send is in flight (queue[head] is its buffer) */
  int recv_armed;       /* a multishot recv is posted */
  unsigned head, n;     /* the queue of buffers to send, oldest first */
  uint16_t bid[QUEUE];
  uint32_t len[QUEUE];  /* bytes of each buffer still to send */
  uint32_t off;         /* bytes of the oldest already sent */
};

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;
static struct conn *conns;
static int lfd;
static int starved;     /* a recv ended for want of buffers: re-arm later */

static void die(const char *what, int err)
{
  fprintf(stderr, "echo_uring: %s: %s\n", what, strerror(err));
  exit(1);
}

/* An SQE, submitting the queue first if it is full. */
static struct io_uring_sqe *sqe(void)
{
  struct io_uring_sqe *e = io_uring_get_sqe(&ring);
  if (!e) {
    io_uring_submit(&ring);
    e = io_uring_get_sqe(&ring);
    if (!e) die("io_uring_get_sqe", EBUSY);
  }
  return e;
}

static void arm_accept(void)
{
  struct io_uring_sqe *e = sqe();
  io_uring_prep_multishot_accept(e, lfd, NULL, NULL, 0);
  io_uring_sqe_set_data64(e, UD(OP_ACCEPT, 0, lfd));
}

static void arm_recv(int fd)
{
  struct io_uring_sqe *e = sqe();
  io_uring_prep_recv_multishot(e, fd, NULL, 0, 0);
  e->flags |= IOSQE_BUFFER_SELECT;
  e->buf_group = BGID;
  io_uring_sqe_set_data64(e, UD(OP_RECV, 0, fd));
  conns[fd].recv_armed = 1;
}

static void give_back(int bid)
{
  io_uring_buf_ring_add(br, bufs + (size_t)bid * BUF_SIZE, BUF_SIZE, (unsigned short)bid,
                        io_uring_buf_ring_mask(NBUFS), 0);
  io_uring_buf_ring_advance(br, 1);
}

/* Posts the send of the connection's oldest queued buffer, from off. */
static void send_head(int fd)
{
  struct conn *c = &conns[fd];
  int bid = c->bid[c->head];
  struct io_uring_sqe *e = sqe();
  io_uring_prep_send(e, fd, bufs + (size_t)bid * BUF_SIZE + c->off, c->len[c->head] - c->off,
                     MSG_NOSIGNAL);
  io_uring_sqe_set_data64(e, UD(OP_SEND, bid, fd));
  c->sending = 1;
}

/* Closes fd once it is being dropped and nothing of ours is in flight on
** it; its queued buffers go back to the ring. */
static void finish(int fd)
{
  struct conn *c = &conns[fd];
  if (c->open || c->sending || c->recv_armed) return;
  while (c->n) {
    give_back(c->bid[c->head]);
    c->head = (c->head + 1) % QUEUE;
    c->n--;
  }
  close(fd);
}

/* Drops a connection: shutdown ends its multishot recv (a last completion
** comes), and the last completion closes it. */
static void drop(int fd)
{
  struct conn *c = &conns[fd];
  if (c->open) {
    c->open = 0;
    if (c->recv_armed) shutdown(fd, SHUT_RDWR);
  }
  finish(fd);
}

static void on_recv(int fd, int res, unsigned flags)
{
  struct conn *c = &conns[fd];
  if (!(flags & IORING_CQE_F_MORE)) c->recv_armed = 0;
  if (res > 0 && !c->open) res = 0;   /* data for a dropped connection */
  if (res == -ENOBUFS && c->open) {   /* every buffer is out: re-arm once some return */
    starved = 1;
    return;
  }
  if (res <= 0) {
    if (flags & IORING_CQE_F_BUFFER) give_back((int)(flags >> IORING_CQE_BUFFER_SHIFT));
    drop(fd);
    return;
  }
  int bid = (int)(flags >> IORING_CQE_BUFFER_SHIFT);
  if (c->n == QUEUE) {         /* a client that never reads: let it go */
    give_back(bid);
    drop(fd);
    return;
  }
  unsigned tail = (c->head + c->n) % QUEUE;
  c->bid[tail] = (uint16_t)bid;
  c->len[tail] = (uint32_t)res;
  c->n++;
  if (!c->sending) send_head(fd);
  if (!c->recv_armed) arm_recv(fd);
}

static void on_send(int fd, int res)
{
  struct conn *c = &conns[fd];
  c->sending = 0;
  if (res < 0 || !c->open) {
    drop(fd);
    return;
  }
  c->off += (uint32_t)res;
  if (c->off < c->len[c->head]) {   /* partial: the rest, in order */
    send_head(fd);
    return;
  }
  give_back(c->bid[c->head]);
  c->off = 0;
  c->head = (c->head + 1) % QUEUE;
  c->n--;
  if (c->n) send_head(fd);
}

static void on_accept(int res, unsigned flags)
{
  if (!(flags & IORING_CQE_F_MORE)) arm_accept();
  if (res < 0) return;   /* EMFILE and such: the next one may do */
  if (res >= MAX_FDS) {
    close(res);
    return;
  }
  int one = 1;
  setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  conns[res] = (struct conn){.open = 1};
  arm_recv(res);
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN};
  int r = io_uring_queue_init_params(RING_ENTRIES, &ring, &p);
  if (r < 0) die("io_uring_queue_init", -r);
  conns = calloc(MAX_FDS, sizeof *conns);
  bufs = malloc((size_t)NBUFS * BUF_SIZE);
  if (posix_memalign((void **)&br, 4096, NBUFS * sizeof(struct io_uring_buf)) || !conns || !bufs)
    die("malloc", ENOMEM);
  io_uring_buf_ring_init(br);
  struct io_uring_buf_reg reg = {.ring_addr = (uintptr_t)br, .ring_entries = NBUFS, .bgid = BGID};
  if ((r = io_uring_register_buf_ring(&ring, &reg, 0)) < 0) die("io_uring_register_buf_ring", -r);
  for (int i = 0; i < NBUFS; i++)
    io_uring_buf_ring_add(br, bufs + (size_t)i * BUF_SIZE, BUF_SIZE, (unsigned short)i,
                          io_uring_buf_ring_mask(NBUFS), i);
  io_uring_buf_ring_advance(br, NBUFS);

  lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0)
    die("listen", errno);
  arm_accept();

  for (;;) {
    r = io_uring_submit_and_wait(&ring, 1);
    if (r < 0 && r != -EINTR) die("io_uring_submit_and_wait", -r);
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      uint64_t u = cqe->user_data;
      switch (UD_OP(u)) {
      case OP_ACCEPT: on_accept(cqe->res, cqe->flags); break;
      case OP_RECV: on_recv(UD_FD(u), cqe->res, cqe->flags); break;
      case OP_SEND: on_send(UD_FD(u), cqe->res); break;
      }
      seen++;
    }
    io_uring_cq_advance(&ring, seen);
    if (starved) {   /* buffers came back: re-arm the recvs that ran dry */
      starved = 0;
      for (int fd = 0; fd < MAX_FDS; fd++)
        if (conns[fd].open && !conns[fd].recv_armed) arm_recv(fd);
    }
  }
}
