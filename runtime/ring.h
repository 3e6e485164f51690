/*
** The io_uring backend (CH_IO_URING; built when CH_RING_LIBURING is, by
** the Makefile's IO_URING=1): one ring per scheduler, beside the
** epoll instance of poll.c, which it does not replace. Reads, accepts,
** and writes that found no room (a write is first tried at once, io.c),
** of a parked-capable coroutine in SEPARATE mode are submitted as ring
** operations on the caller's own buffers and complete with no system
** call of their own: the loop's one io_uring_enter submits what a batch
** queued and reaps what the kernel finished. A plain stream's receive
** into a provided buffer takes the ring in COPY mode too (the kernel
** writes no stack there). Everything that waits for readiness (connect,
** poll and select hooks, watches, the other calls in COPY mode, the other
** threads' wakeup eventfd) stays on epoll, whose instance the ring
** watches with a multishot poll, so the loop blocks in one place.
**
** Built without liburing (IO_URING=0 in the Makefile), every entry point
** says -ENOSYS and schedulers stay on epoll.
*/
#ifndef CH_RING_H
#define CH_RING_H

#include <stdint.h>
#include <sys/types.h>

#include "fd.h"

struct ch_sched;
struct ch_io_op;
struct ch_ring;

/* Gives s a ring. Returns 0, or -errno with s left on epoll: -ENOSYS (no
** io_uring in this build or this kernel), -EPERM (kernel.io_uring_disabled
** or a seccomp filter), -ENOMEM, -EBUSY (s already has one). */
int ch_ring_new(struct ch_sched *s);

/* Frees s's ring, if any. Ops must not be in flight (the scheduler frees
** it at thread exit, or on the way back to epoll when nothing is). */
void ch_ring_free(struct ch_sched *s);

/* Drops s's ring if it is a forked copy of the parent's (never used:
** the mapping is the parent's too), leaving s on epoll. Returns non-zero
** if s has a ring of its own. */
int ch_ring_check(struct ch_sched *s);

/* Ring operations not yet completed on s, 0 without a ring. */
unsigned ch_ring_inflight(const struct ch_sched *s);

/* Non-zero if op may go through s's ring now: s has a ring made in this
** process, the caller is a coroutine in SEPARATE mode that may park, op
** has a ring form, and fd is a socket or a pipe. (A call that may not
** wait never comes here: the engine makes it at once, and the hooks pass
** the calls on fds the user made non-blocking straight to libc.) */
int ch_ring_takes(struct ch_sched *s, const struct ch_io_op *op, const struct ch_fd *f);

/* ch_ring_takes without the op, and in COPY mode too: whether a receive
** into a provided buffer (ch_ring_recv_buf) may go through the ring now. */
int ch_ring_takes_fd(struct ch_sched *s, const struct ch_fd *f);

/* Yields. Runs op on s's ring: submitted with the next loop turn, the
** caller parked until it completes, timeout_ms passes (< 0: never; the
** deadline is kept in *deadline_ns as ch_io_run does) or the coroutine is
** cancelled. A timeout or a cancel asks the kernel to cancel the op and
** waits for its last word: an op that completed meanwhile returns its
** result, so no byte read or written is lost. Returns the call's result
** (>= 0) or -errno as ch_io_run does (-ETIMEDOUT, -ECANCELED, -EBADF when
** the fd was closed meanwhile, the call's own error). */
ssize_t ch_ring_run(struct ch_sched *s, struct ch_io_op *op, int64_t timeout_ms,
                    uint64_t *deadline_ns);

/* Bytes a receive put in one of the ring's provided buffers. */
struct ch_ring_buf {
  const char *data;         /* the buffer; read-only, the ring's */
  size_t len;               /* bytes in it; 0 at EOF */
  int id;                   /* its id, -1 once handed back (or none) */
  uint8_t full;             /* len filled the buffer: more may be waiting */
};

/* Yields. A receive on fd into a buffer the kernel picks when data comes
** (a provided buffer), the caller parked meanwhile, as ch_ring_run parks.
** Returns 1 with *b filled (len 0: EOF; hand the buffer back with
** ch_ring_buf_done), -EAGAIN when the ring has no buffer to give (the
** caller waits for readiness instead), or -errno as ch_ring_run. */
int ch_ring_recv_buf(struct ch_sched *s, int fd, int64_t timeout_ms, uint64_t *deadline_ns,
                     struct ch_ring_buf *b);

/* Gives b's buffer back to the ring. */
void ch_ring_buf_done(struct ch_sched *s, struct ch_ring_buf *b);

/* Receives that found every provided buffer taken, for stats. */
uint64_t ch_ring_nobufs(const struct ch_sched *s);

/* Operations s's ring has taken since it was made (a write that went out
** at once takes none), for stats and tests. */
uint64_t ch_ring_posted(const struct ch_sched *s);

/* The close hook's, before the real close: cancels the ops in flight on
** fd (each returns -EBADF to its caller), while the number still names
** the file the kernel matches them by. */
void ch_ring_close(int fd, struct ch_fd *f);

/* The loop's wait on s's ring: submits what is queued, waits up to
** timeout_ms (-1: no limit) for a completion, completes the ops that are
** done and, when epoll has events, runs poll.c's harvest. Returns 1 when
** another thread woke the loop (its posts are to be run), else 0. */
int ch_ring_poll(struct ch_sched *s, int timeout_ms);

/* -- Ring forms of the engine's calls (io.c, hook.c) ---------------------- */

/* The call a struct ch_io_op makes, in the ring's terms: its form
** callback fills one in when the op is submitted. */
enum ch_ring_kind {
  CH_RING_READ = 1,         /* read(2): p = buf, n = bytes */
  CH_RING_RECV,             /* recv(2): p = buf, n = bytes, flags */
  CH_RING_READV,            /* readv(2): p = iov, n = iovcnt */
  CH_RING_WRITE,            /* write(2): p = buf, n = bytes */
  CH_RING_SEND,             /* send(2): p = buf, n = bytes, flags */
  CH_RING_SENDMSG,          /* sendmsg(2): p = msg, flags */
  CH_RING_WRITEV,           /* writev(2): p = iov, n = iovcnt */
  CH_RING_ACCEPT            /* accept4(2): p = addr, q = addrlen, flags */
};

struct ch_ring_args {
  int kind;                 /* enum ch_ring_kind */
  int flags;                /* recv, send or accept4 flags */
  void *p;                  /* see enum ch_ring_kind */
  void *q;
  size_t n;
};

#endif
