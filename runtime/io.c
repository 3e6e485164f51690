/*
** I/O on fds: the one path every read, write, accept, connect and wait of
** the runtime takes, the hooks' and the host's alike. A call is tried
** first; on EAGAIN the caller waits for readiness and tries again.
**
** Readiness is judged here and nowhere else. poll.c counts the events
** epoll reports per fd; this file notes, at each read that came back
** short or said EAGAIN, the input count it saw (in_seen). Until epoll
** reports input again, another read could only say EAGAIN, so it is not
** made: the caller waits first. That saves one system call per message
** on a request/response stream (Go's netpoller keeps the same bit). A
** wait that had to block in poll(2) (the coroutine may not park there)
** sees readiness epoll never counted, so it clears the judgement: the
** next read is always made.
**
** Writes are always tried; a write that said EAGAIN is noted (out_full)
** only so that a later ch_io_wait for POLLOUT can park without looking.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cohost.h"
#include "coro.h"
#include "io.h"
#include "libc.h"
#include "poll.h"
#include "ring.h"
#include "sched.h"

/* -- The fd table's side -------------------------------------------------- */

/* ch_io_prepare's first-use work, out of line: classifying an fd and
** setting O_NONBLOCK happen once per fd. */
static __attribute__((noinline)) struct ch_fd *prepare_slow(int fd, struct ch_fd *f)
{
  if (f->kind == CH_FD_UNKNOWN && ch_fd_classify(fd, f) < 0) return NULL;
  if ((f->kind == CH_FD_SOCKET || f->kind == CH_FD_PIPE) && !f->user_nonblock &&
      !f->sys_nonblock) {
    int fl = ch_libc.fcntl(fd, F_GETFL);
    if (fl < 0 || ch_libc.fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return NULL;
    f->sys_nonblock = 1;
  }
  return f;
}

/* The hot path of every call: a known fd, non-blocking in the kernel. */
static inline struct ch_fd *prepare(int fd)
{
  struct ch_fd *f = ch_fd_get(fd);
  if (!f) return NULL;
  if (__builtin_expect(f->kind != CH_FD_UNKNOWN && (f->user_nonblock || f->sys_nonblock ||
                       (f->kind != CH_FD_SOCKET && f->kind != CH_FD_PIPE)), 1))
    return f;
  return prepare_slow(fd, f);
}

struct ch_fd *ch_io_prepare(int fd)
{
  return prepare(fd);
}

struct ch_fd *ch_io_fd_new(int fd, int kind, int user_nonblock, int sys_nonblock, int stream)
{
  struct ch_fd *f = ch_fd_get(fd);
  if (!f) return NULL;
  if (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers)
    ch_poll_close(fd, f);
  f->kind = (uint8_t)kind;
  f->user_nonblock = (uint8_t)(user_nonblock != 0);
  f->sys_nonblock = (uint8_t)(sys_nonblock != 0);
  f->stream = (uint8_t)(stream != 0);
  return f;
}

void ch_io_fd_dup(int oldfd, int newfd)
{
  struct ch_fd *o = ch_fd_peek(oldfd);
  if (!o || o->kind == CH_FD_UNKNOWN) {
    struct ch_fd *f = ch_fd_peek(newfd);
    if (f && (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers))
      ch_poll_close(newfd, f);
    return;
  }
  struct ch_fd *f = ch_io_fd_new(newfd, o->kind, o->user_nonblock, o->sys_nonblock, o->stream);
  if (!f) return;
  f->rcvtimeo_ms = o->rcvtimeo_ms;
  f->sndtimeo_ms = o->sndtimeo_ms;
}

/* -- The judgement --------------------------------------------------------- */

/* Non-zero when a read of f could only say EAGAIN: the last one emptied
** the buffer and epoll has reported no input since. After RDHUP, HUP or
** ERR a read is always made: a short read may have left the EOF or the
** error to read. */
static inline int input_known_empty(const struct ch_fd *f)
{
  return f->in_drained && f->in_seen == f->in_events && !f->hup;
}

static inline int output_known_full(const struct ch_fd *f)
{
  return f->out_full && f->out_seen == f->out_events;
}

static inline void note_input_empty(struct ch_fd *f)
{
  f->in_drained = 1;
  f->in_seen = f->in_events;
}

static inline void note_output_full(struct ch_fd *f)
{
  f->out_full = 1;
  f->out_seen = f->out_events;
}

void ch_io_passed(int fd, int writing, ssize_t r, int err, size_t want)
{
  struct ch_fd *f = ch_fd_peek(fd);
  if (!f || f->kind != CH_FD_SOCKET || !f->user_nonblock || !f->stream) return;
  if (r < 0) {
    if (err != EAGAIN && err != EWOULDBLOCK) return;
    if (writing) note_output_full(f);
    else note_input_empty(f);
  } else if (!writing && r > 0 && (size_t)r < want) {
    /* Not at EOF (0): the hup flag, not this, keeps reads coming then. */
    note_input_empty(f);
  }
}

/* -- Waiting ---------------------------------------------------------------- */

/* Milliseconds left until deadline (rounded up), 0 when it has passed. */
static int64_t left_ms(uint64_t deadline, uint64_t now)
{
  return now >= deadline ? 0 : (int64_t)((deadline - now + 999999) / 1000000);
}

/* Waits in poll(2), blocking the thread: where the caller may not park
** (outside a coroutine, a finalizer, an FFI call) or epoll refuses fd.
** Readiness seen here was never counted by epoll, so it clears f's
** judgement for the directions that are ready. */
static __attribute__((noinline)) int block(int fd, struct ch_fd *f, int events, int64_t ms,
                                           uint64_t deadline)
{
  struct pollfd p = { fd, (short)events, 0 };
  if (ms > 0 && !deadline) deadline = ch_now_ns() + (uint64_t)ms * 1000000u;
  for (;;) {
    int r = ch_libc.poll(&p, 1, ms < 0 ? -1 : ms > INT_MAX ? INT_MAX : (int)ms);
    if (r > 0) {
      if (p.revents & POLLNVAL) return -EBADF;
      if (f) {
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) f->in_drained = 0;
        if (p.revents & (POLLOUT | POLLHUP | POLLERR)) f->out_full = 0;
      }
      return p.revents & (events | POLLERR | POLLHUP);
    }
    if (r == 0) return -ETIMEDOUT;
    if (errno != EINTR) return -errno;
    if (deadline) {   /* restart with what is left, as SA_RESTART would */
      ms = left_ms(deadline, ch_now_ns());
      if (ms == 0) return -ETIMEDOUT;
    }
  }
}

/* Yields. The wait itself: parked when the caller is a coroutine that may
** park, else in poll(2) for ms (deadline: when those ms end, if the
** caller knows; 0 makes it from ms). A file epoll refuses (a regular file,
** /dev/null), a full max_user_watches or a memory shortage are found
** before anything parks, and the wait then blocks like libc rather than
** spin. In COPY mode this frame is saved under a parked connection: it
** keeps only its arguments (docs/stacks.md, idle memory). */
static int wait_for(int fd, int events, int64_t ms, uint64_t deadline)
{
  struct ch_coro *c = ch_current();
  if (c) {
    if (c->cancelled) {
      c->cancel_hits++;
      return -ECANCELED;
    }
    if (ch_sched_may_park(c)) {
      int r = ch_poll_wait(fd, events, ms);
      if (r != -EPERM && r != -ENOSPC && r != -ENOMEM) return r;
    }
  }
  return block(fd, ch_fd_peek(fd), events, ms, deadline);
}

int ch_io_wait_until(int fd, int events, int64_t timeout_ms, uint64_t *deadline_ns)
{
  int64_t ms = timeout_ms;
  if (timeout_ms > 0) {
    uint64_t now = ch_now_ns();
    if (!*deadline_ns) *deadline_ns = now + (uint64_t)timeout_ms * 1000000u;
    if ((ms = left_ms(*deadline_ns, now)) == 0) return -ETIMEDOUT;
  } else if (timeout_ms == 0) {
    return -ETIMEDOUT;
  }
  return wait_for(fd, events, ms, timeout_ms > 0 ? *deadline_ns : 0);
}

/* Edge-triggered epoll reports changes, not states: unless io.c knows fd
** is not ready in every direction asked (its last call said so and no
** event came since), look first. Returns the ready events, 0 when not
** ready, or -EBADF. */
static __attribute__((noinline)) int look(int fd, int events)
{
  struct ch_fd *f = ch_fd_peek(fd);
  if (f && (!(events & POLLIN) || input_known_empty(f)) &&
      (!(events & POLLOUT) || output_known_full(f)))
    return 0;
  struct pollfd p = { fd, (short)events, 0 };
  if (ch_libc.poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & POLLNVAL) return -EBADF;
  return p.revents & (events | POLLERR | POLLHUP);
}

int ch_io_input_known_empty(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  /* run_waitfirst ignores the judgement: its reads are always made. */
  return f && f->kind != CH_FD_WAITFIRST && input_known_empty(f);
}

int ch_io_input_quiet(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  /* Epoll reports nothing of an fd it does not watch: then nothing is
  ** known, and the caller looks. */
  return f && f->kind != CH_FD_WAITFIRST && f->registered && input_known_empty(f);
}

int ch_io_wait(int fd, int events, int64_t timeout_ms)
{
  if (fd < 0) return -EBADF;
  events &= POLLIN | POLLOUT;
  if (!events) return -EINVAL;
  int r = look(fd, events);
  if (r != 0) return r;
  if (timeout_ms == 0) return -ETIMEDOUT;
  return wait_for(fd, events, timeout_ms, 0);
}

/* Out of line: the ring's receive, when it takes fd. The judgement is set
** from it as from a read: a receive that did not fill its buffer emptied
** the socket. */
static __attribute__((noinline)) int wait_input_ring(struct ch_sched *s, int fd,
                                                     int64_t timeout_ms, struct ch_io_input *in)
{
  struct ch_fd *f = prepare(fd);
  if (!f || !ch_ring_takes_fd(s, f)) return -EAGAIN;
  struct ch_ring_buf b;
  uint64_t deadline = 0;
  int r = ch_ring_recv_buf(s, fd, timeout_ms, &deadline, &b);
  if (r != 1) return r;
  if ((f = ch_fd_peek(fd)) != NULL) {
    if (b.len && !b.full && f->stream) note_input_empty(f);
    else f->in_drained = 0;
  }
  in->data = b.data;
  in->len = b.len;
  in->id = b.id;
  return CH_IO_TAKEN;
}

int ch_io_wait_input(int fd, int64_t timeout_ms, struct ch_io_input *in)
{
  in->data = NULL;
  in->len = 0;
  in->id = -1;
  struct ch_sched *s = ch_sched_tls;
  if (s && s->ring && timeout_ms != 0 && fd >= 0) {
    int r = wait_input_ring(s, fd, timeout_ms, in);
    if (r != -EAGAIN) return r;
  }
  return ch_io_wait(fd, POLLIN, timeout_ms);
}

void ch_io_input_done(struct ch_io_input *in)
{
  struct ch_sched *s = ch_sched_tls;
  if (in->id >= 0 && s) {
    struct ch_ring_buf b = { .id = in->id };
    ch_ring_buf_done(s, &b);
  }
  in->id = -1;
}

/* -- The engine -------------------------------------------------------------- */

/* The fields of an op the engine reads around its calls, copied before
** the first: op's address is passed to every call, so the compiler
** cannot keep them (nor make op->call a direct call) once it has. */
struct op_consts {
  ssize_t (*call)(struct ch_io_op *op);
  int input;                   /* events == POLLIN */
  int judge;                   /* op->judge, on input */
  size_t want;
};

static inline __attribute__((always_inline)) struct op_consts consts_of(const struct ch_io_op *op)
{
  int input = op->events == POLLIN;
  return (struct op_consts){ op->call, input, input && op->judge, op->want };
}

/* One attempt of op on f's fd, with the judgement: the call's result, or
** -errno; -EAGAIN means it would block, and is noted. */
static inline __attribute__((always_inline))
ssize_t attempt(struct ch_io_op *op, struct op_consts k, struct ch_fd *f)
{
  int input = k.input;
  for (;;) {
    ssize_t n = k.call(op);
    if (n >= 0) {
      if (f && k.judge && f->stream && (size_t)n < k.want) note_input_empty(f);
      return n;
    }
    int e = errno;
    if (e == EINTR) continue;
    if (e != EAGAIN && e != EWOULDBLOCK) return -e;
    if (f) {
      if (input) note_input_empty(f);
      else note_output_full(f);
    }
    return -EAGAIN;
  }
}

/* Yields. The engine after an attempt said EAGAIN: waits, tries, until
** the call says something else or the wait fails. Out of line: the common
** call is made at once and returns (run, below). */
static __attribute__((noinline)) ssize_t retry(struct ch_io_op *op, struct ch_fd *f, int input,
                                               int64_t timeout_ms, uint64_t *deadline_ns)
{
  for (;;) {
    int r = ch_io_wait_until(op->fd, op->events, timeout_ms, deadline_ns);
    if (r < 0) return r;
    if (f && input && input_known_empty(f)) continue;   /* woken for nothing */
    ssize_t n = attempt(op, consts_of(op), f);
    if (n != -EAGAIN) return n;
  }
}

/* Flags untouched (the file may be shared with other processes): wait
** until a blocking call would not block, then make one. */
static __attribute__((noinline)) ssize_t run_waitfirst(struct ch_io_op *op, int64_t timeout_ms)
{
  int r = ch_io_wait(op->fd, op->events, timeout_ms);
  if (r < 0) return timeout_ms == 0 && r == -ETIMEDOUT ? -EAGAIN : r;
  ssize_t n = op->call(op);
  return n < 0 ? -errno : n;
}

/* Yields. The call as a ring operation (ring.c), when the scheduler has a
** ring that takes it; -EAGAIN sends it the readiness way. Out of line, as
** the waits are. A ring call says nothing of what the socket still holds
** or has room for (epoll, which would say, never sees the fd), so the
** judgement in its direction is dropped: the next call is made. */
static __attribute__((noinline)) ssize_t run_ring(struct ch_sched *s, struct ch_io_op *op,
                                                  struct ch_fd *f, int64_t timeout_ms,
                                                  uint64_t *deadline_ns)
{
  if (!ch_ring_takes(s, op, f)) return -EAGAIN;
  ssize_t n = ch_ring_run(s, op, timeout_ms, deadline_ns);
  f = ch_fd_peek(op->fd);
  if (f && op->events == POLLIN) f->in_drained = 0;
  else if (f) f->out_full = 0;
  return n;
}

/* The engine, inline into each ch_io_* call so that op->call, a constant
** there (struct op_consts), becomes a direct call: an attempt unless the socket is known
** empty, and the waits only when it says EAGAIN; or, on a ring, a read
** posted there at once and a write posted only once its attempt said
** EAGAIN (a call that may not wait, timeout 0, is always made at once).
** A write that goes out at once is one send(2) and no park: on the ring
** it cost a park and a resume per message, which at 1,000 connections
** (a cold stack each) cost more than the system call it saved
** (docs/benchmarks.md#io_uring). */
static inline __attribute__((always_inline))
ssize_t run(struct ch_io_op *op, int64_t timeout_ms, uint64_t *deadline_ns)
{
  struct op_consts k = consts_of(op);   /* before op's address escapes */
  int input = k.input;
  struct ch_fd *f = prepare(op->fd);
  if (__builtin_expect(f && f->kind == CH_FD_WAITFIRST, 0)) return run_waitfirst(op, timeout_ms);
  struct ch_sched *s = ch_sched_tls;
  int ring = __builtin_expect(s && s->ring && timeout_ms != 0, 0);
  if (ring && input) {
    ssize_t n = run_ring(s, op, f, timeout_ms, deadline_ns);
    if (n != -EAGAIN) return n;
  }
  if (!(f && input && input_known_empty(f))) {
    ssize_t n = attempt(op, k, f);
    if (n != -EAGAIN) return n;
  }
  if (timeout_ms == 0) return -EAGAIN;
  if (ring && !input) {   /* no room: the ring waits for it and writes */
    ssize_t n = run_ring(s, op, f, timeout_ms, deadline_ns);
    if (n != -EAGAIN) return n;
  }
  return retry(op, f, input, timeout_ms, deadline_ns);
}

ssize_t ch_io_run(struct ch_io_op *op, int64_t timeout_ms, uint64_t *deadline_ns)
{
  return run(op, timeout_ms, deadline_ns);
}

/* -- The calls ---------------------------------------------------------------- */

struct buf_op {
  struct ch_io_op op;
  void *buf;
};

struct vec_op {
  struct ch_io_op op;
  const struct iovec *iov;
  int iovcnt;
};

/* recv(2) and send(2) on a socket as the system calls glibc makes for
** them (recvfrom, sendto: seccomp filters and strace see the same), less
** glibc's wrapper. The wrappers are cancellation points, switching the
** thread's cancel type on and off around each call, a few percent of
** what an echoed message costs in user space (docs/benchmarks.md).
** Nothing here can be cancelled: the runtime never
** cancels its threads, and the socket is non-blocking, so the call never
** waits in the kernel. */
static ssize_t sys_recv(int fd, void *buf, size_t n, int flags)
{
  return syscall(SYS_recvfrom, fd, buf, n, flags, NULL, NULL);
}

static ssize_t sys_send(int fd, const void *buf, size_t n, int flags)
{
  return syscall(SYS_sendto, fd, buf, n, flags, NULL, 0);
}

/* On a socket, recv(2): the same bytes as read(2) without the VFS's read
** path (its fsnotify and position checks), which costs per message. */
static ssize_t call_read(struct ch_io_op *op)
{
  struct ch_fd *f = ch_fd_peek(op->fd);
  void *buf = ((struct buf_op *)op)->buf;
  if (f && f->kind == CH_FD_SOCKET) return sys_recv(op->fd, buf, op->want, 0);
  return ch_libc.read(op->fd, buf, op->want);
}

static void form_read(const struct ch_io_op *op, struct ch_ring_args *a)
{
  struct ch_fd *f = ch_fd_peek(op->fd);
  *a = (struct ch_ring_args){ f && f->kind == CH_FD_SOCKET ? CH_RING_RECV : CH_RING_READ, 0,
                              ((const struct buf_op *)op)->buf, NULL, op->want };
}

static ssize_t call_readv(struct ch_io_op *op)
{
  struct vec_op *v = (struct vec_op *)op;
  return ch_libc.readv(op->fd, v->iov, v->iovcnt);
}

/* On a socket, send(MSG_NOSIGNAL): a peer gone away is EPIPE, never a
** SIGPIPE that would end a process with the default handler. */
static ssize_t call_write(struct ch_io_op *op)
{
  struct ch_fd *f = ch_fd_peek(op->fd);
  const void *buf = ((struct buf_op *)op)->buf;
  if (f && f->kind == CH_FD_SOCKET) return sys_send(op->fd, buf, op->want, MSG_NOSIGNAL);
  return ch_libc.write(op->fd, buf, op->want);
}

static void form_readv(const struct ch_io_op *op, struct ch_ring_args *a)
{
  const struct vec_op *v = (const struct vec_op *)op;
  *a = (struct ch_ring_args){ CH_RING_READV, 0, (void *)v->iov, NULL, (size_t)v->iovcnt };
}

static void form_write(const struct ch_io_op *op, struct ch_ring_args *a)
{
  struct ch_fd *f = ch_fd_peek(op->fd);
  *a = (struct ch_ring_args){ f && f->kind == CH_FD_SOCKET ? CH_RING_SEND : CH_RING_WRITE,
                              MSG_NOSIGNAL, ((const struct buf_op *)op)->buf, NULL, op->want };
}

static ssize_t call_writev(struct ch_io_op *op)
{
  struct vec_op *v = (struct vec_op *)op;
  struct ch_fd *f = ch_fd_peek(op->fd);
  if (f && f->kind == CH_FD_SOCKET) {
    struct msghdr m = { .msg_iov = (struct iovec *)v->iov, .msg_iovlen = (size_t)v->iovcnt };
    return ch_libc.sendmsg(op->fd, &m, MSG_NOSIGNAL);
  }
  return ch_libc.writev(op->fd, v->iov, v->iovcnt);
}

/* ring.c makes a writev on a socket a sendmsg with MSG_NOSIGNAL, as
** call_writev does. */
static void form_writev(const struct ch_io_op *op, struct ch_ring_args *a)
{
  const struct vec_op *v = (const struct vec_op *)op;
  *a = (struct ch_ring_args){ CH_RING_WRITEV, 0, (void *)v->iov, NULL, (size_t)v->iovcnt };
}

static size_t iov_total(const struct iovec *iov, int n)
{
  size_t t = 0;
  for (int i = 0; i < n; i++) t += iov[i].iov_len;
  return t;
}

ssize_t ch_io_read(int fd, void *buf, size_t n, int64_t timeout_ms)
{
  struct buf_op b = { { call_read, form_read, fd, POLLIN, 1, n }, buf };
  uint64_t deadline = 0;
  return run(&b.op, timeout_ms, &deadline);
}

ssize_t ch_io_readv(int fd, const struct iovec *iov, int iovcnt, int64_t timeout_ms)
{
  if (iovcnt < 0) return -EINVAL;
  struct vec_op v = { { call_readv, form_readv, fd, POLLIN, 1, iov_total(iov, iovcnt) }, iov, iovcnt };
  uint64_t deadline = 0;
  return run(&v.op, timeout_ms, &deadline);
}

ssize_t ch_io_write(int fd, const void *buf, size_t n, int64_t timeout_ms)
{
  struct buf_op b = { { call_write, form_write, fd, POLLOUT, 0, n }, (void *)buf };
  uint64_t deadline = 0;
  return run(&b.op, timeout_ms, &deadline);
}

ssize_t ch_io_writev(int fd, const struct iovec *iov, int iovcnt, int64_t timeout_ms)
{
  if (iovcnt < 0) return -EINVAL;
  struct vec_op v = { { call_writev, form_writev, fd, POLLOUT, 0, 0 }, iov, iovcnt };
  uint64_t deadline = 0;
  return run(&v.op, timeout_ms, &deadline);
}

/* -- Connections ---------------------------------------------------------------- */

struct accept_op {
  struct ch_io_op op;
  struct sockaddr *addr;
  socklen_t *len;
  int flags;
};

static ssize_t call_accept(struct ch_io_op *op)
{
  struct accept_op *a = (struct accept_op *)op;
  return ch_libc.accept4(op->fd, a->addr, a->len, a->flags);
}

static void form_accept(const struct ch_io_op *op, struct ch_ring_args *a)
{
  const struct accept_op *x = (const struct accept_op *)op;
  *a = (struct ch_ring_args){ CH_RING_ACCEPT, x->flags, x->addr, x->len, 0 };
}

int ch_io_accept_as(int fd, struct sockaddr *addr, socklen_t *len, int flags, int nonblock,
                    int64_t timeout_ms, uint64_t *deadline_ns)
{
  struct accept_op a = { { call_accept, form_accept, fd, POLLIN, 0, 0 }, addr, len,
                         nonblock ? flags | SOCK_NONBLOCK : flags };
  int r = (int)ch_io_run(&a.op, timeout_ms, deadline_ns);
  if (r >= 0) {
    /* Known from birth: no classification (five system calls) at its
    ** first use. It inherits the listener's kind and timeouts. */
    struct ch_fd *l = ch_fd_peek(fd);
    struct ch_fd *nf = ch_io_fd_new(r, CH_FD_SOCKET, flags & SOCK_NONBLOCK, nonblock,
                                    l ? l->stream : 1);
    if (nf && l) {
      nf->rcvtimeo_ms = l->rcvtimeo_ms;
      nf->sndtimeo_ms = l->sndtimeo_ms;
    }
  }
  return r;
}

int ch_io_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags, int64_t timeout_ms)
{
  uint64_t deadline = 0;
  return ch_io_accept_as(fd, addr, len, flags, 0, timeout_ms, &deadline);
}

/* How long a connect waits before it tries again when a unix socket's
** listener has a full backlog: the kernel says EAGAIN and, the socket
** being unconnected, reports it writable at once, so waiting for an event
** would spin. */
#define CONNECT_RETRY_MS 10

int ch_io_connect(int fd, const struct sockaddr *addr, socklen_t len, int64_t timeout_ms)
{
  ch_io_prepare(fd);
  uint64_t deadline = timeout_ms > 0 ? ch_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
  int e;
  for (;;) {
    if (ch_libc.connect(fd, addr, len) == 0) return 0;
    e = errno;
    if (e != EAGAIN) break;
    if (timeout_ms == 0 || (deadline && ch_now_ns() >= deadline)) return -EAGAIN;
    struct ch_coro *c = ch_current();
    if (c && c->cancelled) {
      c->cancel_hits++;
      return -ECANCELED;
    }
    if (c && ch_sched_may_park(c)) {
      if (ch_sleep_ms(CONNECT_RETRY_MS) < 0) return -ECANCELED;
    } else {
      struct timespec ts = { 0, CONNECT_RETRY_MS * 1000000L };
      ch_libc.nanosleep(&ts, NULL);
    }
  }
  /* EINTR: Linux goes on connecting in the background, as EINPROGRESS. */
  if (e != EINPROGRESS && e != EINTR) return -e;
  if (timeout_ms == 0) return -EINPROGRESS;
  int r = ch_io_wait_until(fd, POLLOUT, timeout_ms, &deadline);
  if (r < 0) return r;
  int err = 0;
  socklen_t elen = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) return -errno;
  return -err;
}
