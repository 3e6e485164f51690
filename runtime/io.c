/*
** I/O on fds: the one path every read, write, accept, connect and wait of
** the runtime takes, the hooks' and the host's alike. A call is tried
** first; on EAGAIN the caller waits for readiness and tries again.
**
** Readiness is judged here and nowhere else. The backend reports events
** per fd and fdwait.c counts them; this file notes, at each read that
** came back short or said EAGAIN, the input count it saw (in_seen). Until
** input is reported again, another read could only say EAGAIN, so it is
** not made: the caller waits first. That saves one system call per
** message on a request/response stream (Go's netpoller keeps the same
** bit). A wait that had to block in poll(2) (the coroutine may not park
** there) sees readiness the backend never reported, so it clears the
** judgement: the next read is always made.
**
** Writes are always tried; a write that said EAGAIN is noted (out_full)
** only so that a later ch_io_wait for POLLOUT can park without looking.
**
** A backend that completes operations itself (io_uring, backend.h) may
** hold input it received for an fd, and sends it queued: reads take the
** held input first, and a read or write of the socket itself is made only
** when the backend holds nothing and has nothing in flight that it could
** overtake. Which backend runs is never asked: the table says what it can.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cohost.h"
#include "coro.h"
#include "fdwait.h"
#include "io.h"
#include "libc.h"
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
    ch_fdwait_close(fd, f);
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
      ch_fdwait_close(newfd, f);
    return;
  }
  struct ch_fd *f = ch_io_fd_new(newfd, o->kind, o->user_nonblock, o->sys_nonblock, o->stream);
  if (!f) return;
  f->rcvtimeo_ms = o->rcvtimeo_ms;
  f->sndtimeo_ms = o->sndtimeo_ms;
}

/* -- The judgement --------------------------------------------------------- */

/* Non-zero when a read of f could only say EAGAIN: the last one emptied
** the buffer and no input was reported since. After RDHUP, HUP or ERR a
** read is always made: a short read may have left the EOF or the error
** to read. */
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

/* What s's backend holds for fd (backend.h: held): > 0 input, 
** -EINPROGRESS an operation in flight that will report it, 0 neither. */
static inline int backend_holds(struct ch_sched *s, int fd)
{
  return s && s->be->held ? s->be->held(s, fd) : 0;
}

int ch_io_known_empty(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  /* run_waitfirst ignores the judgement: its reads are always made. */
  return f && f->kind != CH_FD_WAITFIRST && input_known_empty(f) &&
         backend_holds(ch_sched_tls, fd) <= 0;
}

int ch_io_input_quiet(int fd)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_fd *f = ch_fd_peek(fd);
  if (!s || !f || f->kind == CH_FD_WAITFIRST) return 0;
  /* A receive in flight that holds nothing would have taken what came. */
  int held = backend_holds(s, fd);
  if (held) return held == -EINPROGRESS;
  /* A backend reports nothing of an fd it does not watch: then nothing is
  ** known, and the caller looks. */
  return input_known_empty(f) && s->be->watched(s, fd, f);
}

int ch_io_held(int fd)
{
  return backend_holds(ch_sched_tls, fd) > 0;
}

/* -- Waiting ---------------------------------------------------------------- */

/* Milliseconds left until deadline (rounded up), 0 when it has passed. */
static int64_t left_ms(uint64_t deadline, uint64_t now)
{
  return now >= deadline ? 0 : (int64_t)((deadline - now + 999999) / 1000000);
}

/* Waits blocking the thread: where the caller may not park (outside a
** coroutine, a finalizer, an FFI call) or the backend refuses fd. In the
** backend's own wait when it has an operation in flight on fd (what the
** socket says would not be what the caller waits for), else in poll(2).
** Readiness poll(2) saw was never reported by the backend, so it clears
** f's judgement for the directions that are ready. */
static __attribute__((noinline)) int block(int fd, struct ch_fd *f, int events, int64_t ms,
                                           uint64_t deadline)
{
  struct ch_sched *s = ch_sched_tls;
  if (s && s->be->block) {
    int r = s->be->block(s, fd, events, ms);
    if (r != -ENOTSUP) return r;
  }
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
** park, else blocking for ms (deadline: when those ms end, if the caller
** knows; 0 makes it from ms). A file the backend refuses (a regular file,
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
      int r = ch_fdwait_link(fd, events, 0);
      if (r == 0)
        return ch_fdwait_done(fd, events, ch_sched_park(ch_sched_deadline(ms), 0,
                                                        CH_CORO_WAITING));
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

/* Non-zero when bytes a backend queued for fd are not all sent: a write
** made now would overtake them, so fd does not count as writable. */
static inline int backend_queued(struct ch_sched *s, int fd)
{
  return s && s->be->queued && s->be->queued(s, fd);
}

int ch_io_queued(int fd)
{
  return backend_queued(ch_sched_tls, fd);
}

/* Edge-triggered epoll reports changes, not states: unless io.c knows fd
** is not ready in every direction asked (its last call said so and no
** event came since), look first. Input the backend holds counts as
** readable; bytes it still has queued make fd not writable. Returns the
** ready events, 0 when not ready, or -EBADF. */
static __attribute__((noinline)) int look(int fd, int events)
{
  struct ch_sched *s = ch_sched_tls;
  int held = events & POLLIN ? backend_holds(s, fd) : 0;
  if (held > 0) return POLLIN;
  int queued = (events & POLLOUT) && backend_queued(s, fd);
  struct ch_fd *f = ch_fd_peek(fd);
  if ((!(events & POLLIN) || held == -EINPROGRESS || (f && input_known_empty(f))) &&
      (!(events & POLLOUT) || queued || (f && output_known_full(f))))
    return 0;
  int ask = events;
  if (held == -EINPROGRESS) ask &= ~POLLIN;
  if (queued) ask &= ~POLLOUT;
  struct pollfd p = { fd, (short)ask, 0 };
  if (ch_libc.poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & POLLNVAL) return -EBADF;
  return p.revents & (events | POLLERR | POLLHUP);
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

/* Non-zero when input a backend holds may go to op: a stream socket's
** read that says where its bytes go. */
static inline int takes_input(const struct ch_io_op *op, const struct ch_fd *f)
{
  return op->rx && f->kind == CH_FD_SOCKET && f->stream;
}

/* Yields. A read on a backend that may hold input: what it holds first,
** then the socket, and a wait that posts a receive into the backend's
** buffers (if it takes one) rather than waiting for readiness. A hook's
** read (CH_RX_EXACT) posts none: it waits for readiness and makes its own
** call, with libc's meaning (control data, addresses, MSG_PEEK). */
static __attribute__((noinline)) ssize_t run_held(struct ch_sched *s, struct ch_io_op *op,
                                                  struct ch_fd *f, int64_t timeout_ms,
                                                  uint64_t *deadline_ns)
{
  const struct ch_backend *be = s->be;
  int fd = op->fd;
  for (;;) {
    uint8_t empty = 0;
    ssize_t n = be->take(s, fd, op->rx, &empty);
    if (empty) note_input_empty(f);
    if (n != -EAGAIN && n != -EINPROGRESS) return n;
    int inflight = n == -EINPROGRESS;
    if (!inflight && !input_known_empty(f)) {
      n = attempt(op, consts_of(op), f);
      if (n != -EAGAIN) return n;
    }
    if (timeout_ms == 0) {
      /* A stream reads ahead from now on: what comes while it does other
      ** things is in the backend's buffers when it asks next (an idle
      ** HTTP connection's watch wakes on it). */
      if (!inflight && (op->rx->flags & CH_RX_AHEAD)) be->recv(s, fd, f, op->rx);
      return -EAGAIN;
    }
    struct ch_coro *c = ch_current();
    if (!inflight && !(op->rx->flags & CH_RX_EXACT) && c && ch_sched_may_park(c))
      be->recv(s, fd, f, op->rx);   /* else (no buffers) readiness */
    int r = ch_io_wait_until(fd, POLLIN, timeout_ms, deadline_ns);
    if (r < 0) return r;
  }
}

/* Yields. A write when the backend may still have sends queued for fd:
** it waits until they are out, so that this one goes after them. */
static __attribute__((noinline)) ssize_t run_queued(struct ch_sched *s, struct ch_io_op *op,
                                                    struct ch_fd *f, int64_t timeout_ms,
                                                    uint64_t *deadline_ns)
{
  for (;;) {
    if (!s->be->queued(s, op->fd)) {
      ssize_t n = attempt(op, consts_of(op), f);
      if (n != -EAGAIN) return n;
    }
    if (timeout_ms == 0) return -EAGAIN;
    int r = ch_io_wait_until(op->fd, POLLOUT, timeout_ms, deadline_ns);
    if (r < 0) return r;
  }
}

/* The engine, inline into each ch_io_* call so that op->call, a constant
** there (struct op_consts), becomes a direct call: an attempt unless the
** socket is known empty, and the waits only when it says EAGAIN. On a
** backend that completes operations (one with take) reads and writes of
** stream sockets go out of line, to keep the order of what it holds. */
static inline __attribute__((always_inline))
ssize_t run(struct ch_io_op *op, int64_t timeout_ms, uint64_t *deadline_ns)
{
  struct op_consts k = consts_of(op);   /* before op's address escapes */
  int input = k.input;
  struct ch_fd *f = prepare(op->fd);
  if (__builtin_expect(f && f->kind == CH_FD_WAITFIRST, 0)) return run_waitfirst(op, timeout_ms);
  struct ch_sched *s = ch_sched_tls;
  if (__builtin_expect(s && s->be->take && f && f->kind == CH_FD_SOCKET && f->stream, 0)) {
    if (input && op->rx) return run_held(s, op, f, timeout_ms, deadline_ns);
    if (!input) return run_queued(s, op, f, timeout_ms, deadline_ns);
  }
  if (!(f && input && input_known_empty(f))) {
    ssize_t n = attempt(op, k, f);
    if (n != -EAGAIN) return n;
  }
  if (timeout_ms == 0) return -EAGAIN;
  return retry(op, f, input, timeout_ms, deadline_ns);
}

ssize_t ch_io_run(struct ch_io_op *op, int64_t timeout_ms, uint64_t *deadline_ns)
{
  return run(op, timeout_ms, deadline_ns);
}

/* -- The calls ---------------------------------------------------------------- */

struct buf_op {
  struct ch_io_op op;
  struct ch_io_rx rx;
  void *buf;
};

struct vec_op {
  struct ch_io_op op;
  struct ch_io_rx rx;
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

/* Room for held input: the caller's own buffer. */
static int alloc_buf(void *ctx, size_t hint, struct iovec *b)
{
  (void)hint;
  struct buf_op *o = ctx;
  b->iov_base = o->buf;
  b->iov_len = o->op.want;
  return 0;
}

/* Room for held input: the first vector with room (a read may come back
** short, and held input is one receive's bytes at a time anyway). */
static int alloc_vec(void *ctx, size_t hint, struct iovec *b)
{
  (void)hint;
  struct vec_op *v = ctx;
  for (int i = 0; i < v->iovcnt; i++)
    if (v->iov[i].iov_len) {
      *b = v->iov[i];
      return 0;
    }
  b->iov_base = NULL;
  b->iov_len = 0;
  return 0;
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

static size_t iov_total(const struct iovec *iov, int n)
{
  size_t t = 0;
  for (int i = 0; i < n; i++) t += iov[i].iov_len;
  return t;
}

ssize_t ch_io_read(int fd, void *buf, size_t n, int64_t timeout_ms)
{
  struct buf_op b = { { call_read, &b.rx, fd, POLLIN, 1, n }, { alloc_buf, &b, n, 0 }, buf };
  uint64_t deadline = 0;
  return run(&b.op, timeout_ms, &deadline);
}

ssize_t ch_io_readv(int fd, const struct iovec *iov, int iovcnt, int64_t timeout_ms)
{
  if (iovcnt < 0) return -EINVAL;
  size_t total = iov_total(iov, iovcnt);
  struct vec_op v = { { call_readv, &v.rx, fd, POLLIN, 1, total }, { alloc_vec, &v, total, 0 },
                      iov, iovcnt };
  uint64_t deadline = 0;
  return run(&v.op, timeout_ms, &deadline);
}

ssize_t ch_io_write(int fd, const void *buf, size_t n, int64_t timeout_ms)
{
  struct buf_op b = { { call_write, NULL, fd, POLLOUT, 0, n }, { 0 }, (void *)buf };
  uint64_t deadline = 0;
  return run(&b.op, timeout_ms, &deadline);
}

ssize_t ch_io_writev(int fd, const struct iovec *iov, int iovcnt, int64_t timeout_ms)
{
  if (iovcnt < 0) return -EINVAL;
  struct vec_op v = { { call_writev, NULL, fd, POLLOUT, 0, 0 }, { 0 }, iov, iovcnt };
  uint64_t deadline = 0;
  return run(&v.op, timeout_ms, &deadline);
}

/* -- The receive with an allocation callback ---------------------------------- */

struct recv_op {
  struct ch_io_op op;
  struct ch_io_rx rx;
};

/* One receive into room the caller gives once it is called: alloc is
** asked only now, when the socket is not known empty; a read that still
** finds nothing gives the room back (alloc with no buffer). The
** judgement is made here, against the room given: the op's own judge is
** off, since want is only what the caller asked. */
static inline __attribute__((always_inline))
ssize_t recv_into(int fd, struct ch_fd *f, size_t want,
                  int (*alloc)(void *, size_t, struct iovec *), void *ctx)
{
  struct iovec b;
  int e = alloc(ctx, want, &b);
  if (e < 0) return e;
  for (;;) {
    ssize_t n = f->kind == CH_FD_SOCKET ? sys_recv(fd, b.iov_base, b.iov_len, 0)
                                        : ch_libc.read(fd, b.iov_base, b.iov_len);
    if (n >= 0) {
      if (f->stream && (size_t)n < b.iov_len) note_input_empty(f);
      return n;
    }
    e = errno;
    if (e == EINTR) continue;
    if (e != EAGAIN && e != EWOULDBLOCK) return -e;
    note_input_empty(f);
    alloc(ctx, 0, NULL);
    return -EAGAIN;
  }
}

static ssize_t call_recv(struct ch_io_op *op)
{
  struct recv_op *r = (struct recv_op *)op;
  ssize_t n = recv_into(op->fd, ch_fd_peek(op->fd), r->rx.want, r->rx.alloc, r->rx.ctx);
  if (n >= 0) return n;
  errno = (int)-n;
  return -1;
}

/* recv_try's way on a backend that holds input (backend.h: take): what
** it holds first; the socket only when it holds nothing and has no
** receive in flight; then a receive posted to it, to wait for. */
static __attribute__((noinline)) ssize_t recv_held(struct ch_sched *s, int fd, struct ch_fd *f,
                                                  size_t want,
                                                  int (*alloc)(void *, size_t, struct iovec *),
                                                  void *ctx)
{
  const struct ch_backend *be = s->be;
  struct ch_io_rx rx = { alloc, ctx, want, CH_RX_AHEAD };
  uint8_t empty = 0;
  ssize_t n = be->take(s, fd, &rx, &empty);
  if (empty) note_input_empty(f);
  if (n != -EAGAIN && n != -EINPROGRESS) return n;
  if (n == -EINPROGRESS) return -EAGAIN;   /* wait for the receive in flight */
  if (!input_known_empty(f)) {
    n = recv_into(fd, f, want, alloc, ctx);
    if (n != -EAGAIN) return n;
  }
  /* With timeout 0 too: what comes while the stream does other things is
  ** in the backend's buffers when it asks next (an idle HTTP connection's
  ** watch wakes on it). */
  be->recv(s, fd, f, &rx);
  return -EAGAIN;
}

/* Everything of ch_io_recv but its park, out of line (see ch_io_recv):
** the input the backend holds, the socket unless known empty. -EAGAIN:
** wait, then call again. An fd that is no plain socket or pipe of this
** process (an inherited tty waits first) takes the engine's whole way,
** waits included. */
static __attribute__((noinline)) ssize_t recv_try(int fd, size_t want,
                                                 int (*alloc)(void *, size_t, struct iovec *),
                                                 void *ctx, int64_t timeout_ms)
{
  struct ch_fd *f = prepare(fd);
  if (__builtin_expect(!f || (f->kind != CH_FD_SOCKET && f->kind != CH_FD_PIPE), 0)) {
    struct recv_op r = { { call_recv, &r.rx, fd, POLLIN, 0, want },
                         { alloc, ctx, want, CH_RX_AHEAD } };
    uint64_t deadline = 0;
    return run(&r.op, timeout_ms, &deadline);
  }
  struct ch_sched *s = ch_sched_tls;
  if (__builtin_expect(s && s->be->take && f->kind == CH_FD_SOCKET && f->stream, 0))
    return recv_held(s, fd, f, want, alloc, ctx);
  if (input_known_empty(f)) return -EAGAIN;
  return recv_into(fd, f, want, alloc, ctx);
}

/* Before ch_io_recv's park, out of line: the deadline, kept in *deadline
** across the loop's waits, and the link (ch_fdwait_link). Returns 0 when
** linked (park until *deadline, 0: none), else the wait's result made
** here: an error, or the events a blocking wait saw (a coroutine that may
** not park, or none; a backend that refuses fd). */
static __attribute__((noinline)) int recv_link(int fd, int64_t timeout_ms, uint64_t *deadline)
{
  int64_t ms = -1;
  if (timeout_ms > 0) {
    uint64_t now = ch_now_ns();
    if (!*deadline) *deadline = now + (uint64_t)timeout_ms * 1000000u;
    if ((ms = left_ms(*deadline, now)) == 0) return -ETIMEDOUT;
  }
  struct ch_coro *c = ch_current();
  if (c) {
    if (c->cancelled) {
      c->cancel_hits++;
      return -ECANCELED;
    }
    if (ch_sched_may_park(c)) {
      int r = ch_fdwait_link(fd, POLLIN, 0);
      if (r != -EPERM && r != -ENOSPC && r != -ENOMEM) return r;
    }
  }
  int r = block(fd, ch_fd_peek(fd), POLLIN, ms, *deadline);
  return r == 0 ? POLLIN : r;
}

/* The park is here, between recv_link and ch_fdwait_done, not in a
** function of its own: in COPY mode this frame, the stream's above it and
** ch_sched_park's are all a parked connection saves of the runtime's. */
ssize_t ch_io_recv(int fd, size_t want, int (*alloc)(void *ctx, size_t hint, struct iovec *buf),
                   void *ctx, int64_t timeout_ms)
{
  uint64_t deadline = 0;
  for (;;) {
    ssize_t n = recv_try(fd, want, alloc, ctx, timeout_ms);
    if (n != -EAGAIN || timeout_ms == 0) return n;
    int r = recv_link(fd, timeout_ms, &deadline);
    if (r == 0)
      r = ch_fdwait_done(fd, POLLIN, ch_sched_park(deadline, 0, CH_CORO_WAITING));
    if (r < 0) return r;
  }
}

/* -- Sending everything ---------------------------------------------------------- */

static void iov_advance(struct iovec **iov, int *n, size_t w)
{
  while (*n > 0 && w >= (*iov)->iov_len) {
    w -= (*iov)->iov_len;
    (*iov)++;
    (*n)--;
  }
  if (*n > 0) {
    (*iov)->iov_base = (char *)(*iov)->iov_base + w;
    (*iov)->iov_len -= w;
  }
}

/* Yields. ch_io_send's way after its first try: writes until every byte
** is taken, each waiting (and the backend's queue, if it has one) by the
** engine. */
static __attribute__((noinline)) int send_rest(int fd, struct iovec *iov, int n,
                                              int64_t timeout_ms)
{
  while (n > 0) {
    /* One piece: send(2), which the kernel takes for less than sendmsg's
    ** message header and iovec import. Each call's waits are bounded by
    ** timeout_ms: a send that makes progress starts the clock again. */
    ssize_t w = n == 1 ? ch_io_write(fd, iov->iov_base, iov->iov_len, timeout_ms)
                       : ch_io_writev(fd, iov, n, timeout_ms);
    if (w < 0) return (int)w;
    iov_advance(&iov, &n, (size_t)w);
  }
  return 0;
}

/* A backend that queues sends (backend.h: send) gets them; else one
** piece on a socket is one send(2) here, and the rest (a partial write,
** EAGAIN, several pieces) is send_rest's. */
int ch_io_send(int fd, struct iovec *iov, int n, int64_t timeout_ms)
{
  while (n > 0 && iov->iov_len == 0) { iov++; n--; }
  if (n == 0) return 0;
  struct ch_fd *f = prepare(fd);
  if (!f) return send_rest(fd, iov, n, timeout_ms);
  struct ch_sched *s = ch_sched_tls;
  if (__builtin_expect(s && s->be->send && f->kind == CH_FD_SOCKET && f->stream, 0)) {
    int r = s->be->send(s, fd, f, iov, n, timeout_ms);
    if (r != -ENOTSUP) return r;
  } else if (n == 1 && f->kind == CH_FD_SOCKET) {
    ssize_t w = sys_send(fd, iov->iov_base, iov->iov_len, MSG_NOSIGNAL);
    if ((size_t)w == iov->iov_len) return 0;
    if (w > 0) iov_advance(&iov, &n, (size_t)w);
    else if (errno == EAGAIN || errno == EWOULDBLOCK) note_output_full(f);
    else if (errno != EINTR) return -errno;
  }
  return send_rest(fd, iov, n, timeout_ms);
}

int ch_io_flush(int fd, int64_t timeout_ms)
{
  uint64_t deadline = 0;
  while (backend_queued(ch_sched_tls, fd)) {
    if (timeout_ms == 0) return -EAGAIN;
    int r = ch_io_wait_until(fd, POLLOUT, timeout_ms, &deadline);
    if (r < 0) return r;
  }
  return 0;
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

/* Yields. An accept a backend may make ahead of the caller (backend.h:
** accept): what it holds first, then a wait for its next. -ENOTSUP: the
** backend does not accept on fd (the caller accepts itself). */
static __attribute__((noinline)) int accept_held(struct ch_sched *s, int fd, struct ch_fd *f,
                                                 struct sockaddr *addr, socklen_t *len,
                                                 int flags, int64_t timeout_ms,
                                                 uint64_t *deadline_ns)
{
  for (;;) {
    int r = s->be->accept(s, fd, f, addr, len, flags);
    if (r != -EAGAIN) return r;
    if (timeout_ms == 0) return -EAGAIN;
    r = ch_io_wait_until(fd, POLLIN, timeout_ms, deadline_ns);
    if (r < 0) return r;
  }
}

int ch_io_accept_as(int fd, struct sockaddr *addr, socklen_t *len, int flags, int nonblock,
                    int ahead, int64_t timeout_ms, uint64_t *deadline_ns)
{
  int kflags = nonblock ? flags | SOCK_NONBLOCK : flags;   /* the kernel's */
  int r = -ENOTSUP;
  struct ch_sched *s = ch_sched_tls;
  struct ch_fd *f;
  if (ahead && s && s->be->accept && (f = prepare(fd)) != NULL && f->kind == CH_FD_SOCKET &&
      ch_current() && ch_sched_may_park(ch_current()))
    r = accept_held(s, fd, f, addr, len, kflags, timeout_ms, deadline_ns);
  if (r == -ENOTSUP) {
    struct accept_op a = { { call_accept, NULL, fd, POLLIN, 0, 0 }, addr, len, kflags };
    r = (int)ch_io_run(&a.op, timeout_ms, deadline_ns);
  }
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
  return ch_io_accept_as(fd, addr, len, flags, 0, 1, timeout_ms, &deadline);
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

/* -- Ending ---------------------------------------------------------------------- */

int ch_io_close(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  if (f && (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers))
    return ch_fdwait_close(fd, f);
  return 0;
}

int ch_io_shutdown(int fd, int how)
{
  struct ch_sched *s = ch_sched_tls;
  if (how != SHUT_RD && s && s->be->shutdown) {
    int r = s->be->shutdown(s, fd, how);
    if (r == 0) return 0;
  }
  return ch_libc.shutdown(fd, how);
}
