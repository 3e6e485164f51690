/*
** The I/O backend interface: what a scheduler's way of waiting for fds
** does, as one table of operations (libuv's uv__io_t platforms, Redis's
** ae_epoll.c and ae_kqueue.c behind ae.c). Two tables exist, beside each
** other: ch_backend_epoll (poll.c) and ch_backend_uring (ring.c). Each
** scheduler points at one (sched.c picks it, from CH_IO_BACKEND or
** ch_sched_set_io_backend); everything above calls through the table and
** never asks which one runs.
**
** Every backend reports readiness the same way: it calls ch_fdwait_ready
** (fdwait.c) with the fd's entry and the poll events it saw, and the
** waiters linked on the fd wake. The required operations are enough for a
** backend of readiness alone (epoll). A backend that completes operations
** itself (io_uring) fills the optional ones too; NULL there means "the
** readiness way": io.c makes the call, and waits with arm when it says
** EAGAIN.
*/
#ifndef CH_BACKEND_H
#define CH_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "fd.h"

struct ch_sched;

/* A receive's request to a backend that holds input (ch_backend.take):
** where the bytes go, asked for only when there are some. */
struct ch_io_rx {
  int (*alloc)(void *ctx, size_t hint, struct iovec *buf);  /* the
                            ** caller's: room for bytes that are there
                            ** (cohost.h, ch_io_recv) */
  void *ctx;                /* alloc's */
  size_t want;              /* the room the caller asks for: alloc's hint
                            ** (what is held beyond the room stays held) */
  int flags;                /* CH_RX_* */
};

#define CH_RX_AHEAD 1       /* the caller is a stream: the backend may read
                            ** ahead of it, within its bound */
#define CH_RX_PEEK  2       /* MSG_PEEK: copy out, consume nothing */
#define CH_RX_EXACT 4       /* a hook's: no receive is posted for it (the
                            ** backend's receive has no control data or
                            ** addresses, and could outlive the call); it
                            ** waits for readiness and makes its own call */

#define CH_BE_SENDING 1     /* pending: sends queued, not in the kernel */
#define CH_BE_HOLDING 2     /* pending: input held, not handed out */

struct ch_backend {
  const char *name;         /* "epoll", "uring" */
  int kind;                 /* CH_IO_EPOLL, CH_IO_URING (cohost.h), for
                            ** ch_stats and ch_sched_io_backend only */

  /* -- Required ------------------------------------------------------------ */

  /* Makes s's instance (s->be_state); the scheduler's wakeup eventfd
  ** (s->wakefd) is there already, for the backend to watch. 0 or -errno
  ** (the scheduler then keeps the backend it had). */
  int (*init)(struct ch_sched *s);

  /* Frees s's instance. Nothing is parked on it and no operation is in
  ** flight (inflight says 0), or the thread is going away. */
  void (*fini)(struct ch_sched *s);

  /* The loop's wait: up to timeout_ms (-1: no limit) for events, reported
  ** through ch_fdwait_ready. Returns 1 when s->wakefd fired (another
  ** thread posted: sched.c runs the posts), else 0. Panics when the
  ** kernel fails it for anything but a signal. */
  int (*poll)(struct ch_sched *s, int timeout_ms);

  /* Makes sure fd's readiness for events (POLLIN, POLLOUT or both) will
  ** be reported: registered once (epoll), or a poll posted for the
  ** directions nothing reports yet (io_uring). Called before a waiter
  ** parks. 0, or -errno: -EPERM for a file the backend cannot watch (a
  ** regular file), -ENOSPC, -ENOMEM; the waiter then blocks in poll(2). */
  int (*arm)(struct ch_sched *s, int fd, struct ch_fd *f, int events);

  /* Before the real close of fd (whose waiters fdwait.c wakes next): lets
  ** go of what the backend holds for it. Returns 0, or the error a
  ** queued send met that nobody has been told of yet (-errno). */
  int (*close)(struct ch_sched *s, int fd, struct ch_fd *f);

  /* Never yields. Non-zero when input arriving on fd would be reported
  ** with nothing armed anew: epoll's set holds fd; io_uring has a receive,
  ** an accept or a poll for input in flight on it. What io.c knows of
  ** fd's input stays true until a report only then (ch_io_input_quiet). */
  int (*watched)(struct ch_sched *s, int fd, const struct ch_fd *f);

  /* Operations in flight in the kernel (0 for epoll), for ch_stats. */
  unsigned (*inflight)(const struct ch_sched *s);

  /* What the backend holds that must not be lost: CH_BE_SENDING while
  ** bytes queued by send are not all in the kernel (the loop does not end
  ** before they are), CH_BE_HOLDING while input it received is not all
  ** handed out (a switch of backends, which waits for neither, would lose
  ** it). 0 for a backend of readiness alone. */
  int (*pending)(const struct ch_sched *s);

  /* -- Optional: a backend that completes operations --------------------- */

  /* Never yields. > 0 when the backend holds input for fd that a call
  ** would get now (received bytes, an EOF or error, accepted
  ** connections): fd counts as readable though poll(2) may not say so.
  ** -EINPROGRESS when it holds none but has a receive or an accept in
  ** flight on fd, which will report it: what poll(2) says of fd is then
  ** no answer (the operation takes what comes). 0 otherwise. */
  int (*held)(struct ch_sched *s, int fd);

  /* Never yields. Input the backend took for fd (received, not yet
  ** handed out) goes to rx: bytes (> 0, what alloc's room held), 0 at
  ** EOF, or the receive's -errno. -EAGAIN: nothing held and nothing in
  ** flight, read the socket; -EINPROGRESS: nothing held, a receive is in
  ** flight, so wait for it (a read of the socket now could overtake it).
  ** *empty is set when the receive that brought the bytes emptied the
  ** socket (it did not fill its buffer) and nothing more is held. */
  ssize_t (*take)(struct ch_sched *s, int fd, const struct ch_io_rx *rx, uint8_t *empty);

  /* Posts a receive on fd, a stream socket just found empty, to complete
  ** into the backend's own buffers, for rx (its flags and want). 0, or
  ** -errno with nothing posted (no buffers: ENOBUFS); the caller then
  ** waits for readiness and reads itself. */
  int (*recv)(struct ch_sched *s, int fd, struct ch_fd *f, const struct ch_io_rx *rx);

  /* Yields. Queues iov[0..n) (bytes > 0 in all) to be sent on fd, a
  ** stream socket, after what is queued already, and returns once they
  ** are: 0, or -errno (a queued send's error not yet reported, -ENOTSUP
  ** when fd is not the backend's to send on, -ETIMEDOUT, -ECANCELED,
  ** -EBADF while it waited for room, timeout_ms a wait without progress). */
  int (*send)(struct ch_sched *s, int fd, struct ch_fd *f, const struct iovec *iov, int n,
              int64_t timeout_ms);

  /* Never yields. Non-zero while bytes queued by send are not all in the
  ** kernel: a write made directly now would overtake them, so the caller
  ** waits for POLLOUT, which comes once they are. */
  int (*queued)(struct ch_sched *s, int fd);

  /* A shutdown of fd that must wait for queued sends: 0 once it is
  ** queued behind them, -EAGAIN when nothing is queued (make it now). */
  int (*shutdown)(struct ch_sched *s, int fd, int how);

  /* Never yields. A connection the backend accepted on listening fd
  ** ahead of the caller, or -EAGAIN when it holds none (accept, or
  ** wait), with the address filled in as accept4 would. Arms the
  ** backend's accepts on fd if they are not. */
  int (*accept)(struct ch_sched *s, int fd, struct ch_fd *f, struct sockaddr *addr,
                socklen_t *len, int flags);

  /* In a forked child, on the forking thread's scheduler (the only one
  ** the child has): non-zero when the backend cannot go on there and has
  ** let go of its state (a ring, shared with the parent); the scheduler
  ** then goes on with epoll. NULL: it goes on as it is. */
  int (*forked)(struct ch_sched *s);

  /* Blocks the thread (a coroutine that may not park, or none) until fd
  ** has events for an operation of the backend's in flight, or ms pass.
  ** Returns the events, -ETIMEDOUT, or -ENOTSUP when nothing of the
  ** backend's is in flight on fd (poll(2) will do). */
  int (*block)(struct ch_sched *s, int fd, int events, int64_t ms);
};

extern const struct ch_backend ch_backend_epoll;   /* poll.c */
extern const struct ch_backend ch_backend_uring;   /* ring.c */

#endif
