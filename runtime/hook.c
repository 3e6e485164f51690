/*
** libc hooks. Linking the runtime defines read, write, connect, poll, ...
** in the program itself, so the dynamic linker binds every call (from the
** program, from shared libraries such as hiredis, from modules a host
** dlopens if it links with -rdynamic) here first. The hooks are a shim
** over io.c, whose engine makes the call and waits on EAGAIN; what is
** theirs is keeping libc's promises:
**
**  - outside a coroutine, on a file epoll cannot watch, or on an fd the
**    user made non-blocking, they call libc straight through (a plain
**    thread on a socket the runtime made non-blocking waits in poll(2),
**    as libc would block);
**  - they keep the user's view of O_NONBLOCK (fcntl and ioctl report and
**    change that view while the kernel's flag stays set);
**  - they honour SO_RCVTIMEO/SO_SNDTIMEO as libc would (EAGAIN after the
**    timeout) and never invent a timeout of their own;
**  - they write everything on a blocking stream, as the kernel would, and
**    map the engine's -errno to -1 and errno: a timeout or a cancellation
**    is EAGAIN (EINPROGRESS for connect), the bytes already moved are
**    returned.
**
** Where the coroutine may not park (ch_coro_set_may_yield, or the
** embedder's yield check says no), io.c waits in poll(2), blocking the
** thread: exactly libc's behaviour.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cohost.h"
#include "fd.h"
#include "hook.h"
#include "io.h"
#include "libc.h"
#include "panic.h"
#include "poll.h"
#include "ring.h"
#include "sched.h"

void ch_hook_init(void)
{
  ch_libc_init();
}

/* A hook can run before the constructors (another library's constructor
** calling read): one predictable branch covers that. */
#define ENSURE(name) do { if (__builtin_expect(!ch_libc.name, 0)) ch_libc_init(); } while (0)

/* -- Deciding ------------------------------------------------------------- */

/* A timeval as whole ms, rounded up and clamped to INT_MAX (24 days and
** more is as good as forever). */
static int tv_ms(const struct timeval *tv)
{
  int64_t ms = (int64_t)tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000;
  return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Decides how a hook treats fd. Returns NULL to call libc straight
** through; otherwise the entry, for io.c's engine: in a coroutine on a
** socket or pipe the user left blocking, or in a plain thread on a socket
** the runtime made non-blocking (the engine waits in poll(2) there). */
static struct ch_fd *hook_begin(int fd)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_fd *f;
  if (!s || !s->current) {
    f = ch_fd_peek(fd);
    if (!f || !f->sys_nonblock || f->user_nonblock) return NULL;
    return f;
  }
  f = ch_fd_get(fd);
  if (!f) return NULL;
  if (f->kind == CH_FD_UNKNOWN && ch_fd_classify(fd, f) < 0) return NULL;   /* libc says EBADF */
  if (f->kind == CH_FD_OTHER || f->user_nonblock) return NULL;
  return f;
}

/* A timeout of the engine as libc reports a blocking call's: -1 with
** errno, the bytes already moved winning over any error. */
static ssize_t fail(ssize_t done, ssize_t r)
{
  if (done > 0) return done;
  errno = r == -ETIMEDOUT || r == -ECANCELED ? EAGAIN : (int)-r;
  return -1;
}

/* -- Reads and writes ------------------------------------------------------ */

enum io_kind { OP_READ, OP_READV, OP_RECV, OP_RECVFROM, OP_RECVMSG,
               OP_WRITE, OP_WRITEV, OP_SEND, OP_SENDTO, OP_SENDMSG };

/* One hooked call, as io.c's engine makes it. */
struct io {
  struct ch_io_op op;         /* first: the engine's view */
  enum io_kind kind;
  int flags;                  /* recv/send flags */
  char *buf;                  /* buffer ops: advanced by partial writes */
  struct sockaddr *from;      /* recvfrom */
  socklen_t *fromlen;
  const struct sockaddr *to;  /* sendto */
  socklen_t tolen;
  struct msghdr *msg;         /* vector ops (readv/writev use msg_iov) */
};

static ssize_t io_call(struct ch_io_op *op)
{
  struct io *io = (struct io *)op;
  struct msghdr *m = io->msg;
  int fd = op->fd;
  size_t len = op->want;
  switch (io->kind) {
  case OP_READ:     return ch_libc.read(fd, io->buf, len);
  case OP_READV:    return ch_libc.readv(fd, m->msg_iov, (int)m->msg_iovlen);
  case OP_RECV:     return ch_libc.recv(fd, io->buf, len, io->flags);
  case OP_RECVFROM: return ch_libc.recvfrom(fd, io->buf, len, io->flags, io->from, io->fromlen);
  case OP_RECVMSG:  return ch_libc.recvmsg(fd, m, io->flags);
  case OP_WRITE:    return ch_libc.write(fd, io->buf, len);
  case OP_WRITEV:   return ch_libc.writev(fd, m->msg_iov, (int)m->msg_iovlen);
  case OP_SEND:     return ch_libc.send(fd, io->buf, len, io->flags);
  case OP_SENDTO:   return ch_libc.sendto(fd, io->buf, len, io->flags, io->to, io->tolen);
  case OP_SENDMSG:  return ch_libc.sendmsg(fd, m, io->flags);
  }
  errno = EINVAL;
  return -1;
}

/* The same call as a ring operation (ring.h), for the kinds that have
** one; io_run gives this to the engine only for those. */
static void io_form(const struct ch_io_op *op, struct ch_ring_args *a)
{
  const struct io *io = (const struct io *)op;
  const struct msghdr *m = io->msg;
  switch (io->kind) {
  case OP_READ:   *a = (struct ch_ring_args){ CH_RING_READ, 0, io->buf, NULL, op->want }; break;
  case OP_RECV:   *a = (struct ch_ring_args){ CH_RING_RECV, io->flags, io->buf, NULL, op->want }; break;
  case OP_READV:  *a = (struct ch_ring_args){ CH_RING_READV, 0, m->msg_iov, NULL, m->msg_iovlen }; break;
  case OP_WRITE:  *a = (struct ch_ring_args){ CH_RING_WRITE, 0, io->buf, NULL, op->want }; break;
  case OP_SEND:   *a = (struct ch_ring_args){ CH_RING_SEND, io->flags, io->buf, NULL, op->want }; break;
  case OP_WRITEV: *a = (struct ch_ring_args){ CH_RING_WRITEV, 0, m->msg_iov, NULL, m->msg_iovlen }; break;
  default: ch_panic("hook: no ring form for call kind %d", io->kind);
  }
}

/* Moves past n transferred bytes. Returns the bytes still to go. */
static size_t io_advance(struct io *io, size_t n)
{
  if (!io->msg) {
    io->buf += n;
    io->op.want -= n;
    return io->op.want;
  }
  struct msghdr *m = io->msg;
  size_t left = 0;
  while (m->msg_iovlen && n >= m->msg_iov->iov_len) {
    n -= m->msg_iov->iov_len;
    m->msg_iov++;
    m->msg_iovlen--;
  }
  if (m->msg_iovlen) {
    m->msg_iov->iov_base = (char *)m->msg_iov->iov_base + n;
    m->msg_iov->iov_len -= n;
  }
  for (size_t i = 0; i < m->msg_iovlen; i++) left += m->msg_iov[i].iov_len;
  return left;
}

/* io straight through to libc (hook_begin said so). On a socket the user
** made non-blocking, what the call found is told to io.c's judgement, as
** its own calls' is: a driver over a non-blocking C library (libpq) then
** waits on the socket without a poll(2) first (ch_io_passed). */
static ssize_t io_pass(struct io *io, int writing)
{
  ssize_t r = io_call(&io->op);
  int err = errno;
  ch_io_passed(io->op.fd, writing, r, err,
               !writing && !io->msg && !(io->flags & MSG_PEEK) ? io->op.want : 0);
  errno = err;
  return r;
}

/* Runs io as libc would on a blocking fd. all: keep going until every
** byte is moved (writes on streams; MSG_WAITALL reads), within one
** deadline for the socket timeout. */
static ssize_t io_run(struct io *io, int writing, int all)
{
  if (io->flags & MSG_DONTWAIT) return io_call(&io->op);   /* asked not to wait */
  struct ch_fd *f = hook_begin(io->op.fd);
  if (!f) return io_pass(io, writing);
  io->op.call = io_call;
  /* recvfrom, recvmsg, sendto and sendmsg keep the readiness path: their
  ** addresses and control data would need ring forms of their own. A
  ** writev on a socket would be a sendmsg without MSG_NOSIGNAL's say:
  ** libc's writev raises SIGPIPE, so it stays on readiness too. */
  io->op.form = io->kind == OP_READ || io->kind == OP_RECV || io->kind == OP_READV ||
                io->kind == OP_WRITE || io->kind == OP_SEND ||
                (io->kind == OP_WRITEV && f->kind != CH_FD_SOCKET) ? io_form : NULL;
  io->op.events = writing ? POLLOUT : POLLIN;
  /* A short read means an empty socket only for a plain stream read. */
  io->op.judge = !writing && !io->msg && !(io->flags & MSG_PEEK);
  int timeout_ms = writing ? f->sndtimeo_ms : f->rcvtimeo_ms;
  all = all && f->stream && f->kind != CH_FD_WAITFIRST;
  uint64_t deadline = 0;
  ssize_t done = 0;
  for (;;) {
    ssize_t r = ch_io_run(&io->op, timeout_ms ? timeout_ms : -1, &deadline);
    if (r < 0) return fail(done, r);
    if (!all || r == 0) return done + r;   /* r == 0: EOF, or an empty request */
    done += r;
    if (io_advance(io, (size_t)r) == 0) return done;
  }
}

/* Vector ops advance a private copy of the iovec array, never the user's. */
#define IOV_LOCAL 16

static ssize_t io_run_vec(struct io *io, struct msghdr *user, int writing, int all)
{
  struct iovec local[IOV_LOCAL], *iov = local;
  struct msghdr m = *user;
  if (all && m.msg_iovlen > 1) {
    if (m.msg_iovlen > IOV_LOCAL && !(iov = malloc(m.msg_iovlen * sizeof *iov))) {
      errno = ENOMEM;
      return -1;
    }
    memcpy(iov, user->msg_iov, m.msg_iovlen * sizeof *iov);
    m.msg_iov = iov;
  } else if (all && m.msg_iovlen == 1) {
    local[0] = user->msg_iov[0];
    m.msg_iov = local;
  }
  io->msg = &m;
  ssize_t r = io_run(io, writing, all);
  if (io->kind == OP_RECVMSG) {   /* report what the kernel filled in */
    user->msg_namelen = m.msg_namelen;
    user->msg_controllen = m.msg_controllen;
    user->msg_flags = m.msg_flags;
  }
  if (iov != local) free(iov);
  return r;
}

#define IO(k, fd_, len_) { .op = { .fd = (fd_), .want = (len_) }, .kind = (k) }

ssize_t read(int fd, void *buf, size_t len)
{
  ENSURE(read);
  struct io io = IO(OP_READ, fd, len);
  io.buf = buf;
  return io_run(&io, 0, 0);
}

ssize_t write(int fd, const void *buf, size_t len)
{
  ENSURE(write);
  struct io io = IO(OP_WRITE, fd, len);
  io.buf = (char *)buf;
  return io_run(&io, 1, 1);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
  ENSURE(recv);
  struct io io = IO(OP_RECV, fd, len);
  io.buf = buf;
  io.flags = flags;
  return io_run(&io, 0, (flags & MSG_WAITALL) != 0);
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
  ENSURE(send);
  struct io io = IO(OP_SEND, fd, len);
  io.buf = (char *)buf;
  io.flags = flags;
  return io_run(&io, 1, 1);
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen)
{
  ENSURE(recvfrom);
  struct io io = IO(OP_RECVFROM, fd, len);
  io.buf = buf;
  io.flags = flags;
  io.from = from;
  io.fromlen = fromlen;
  return io_run(&io, 0, (flags & MSG_WAITALL) != 0);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen)
{
  ENSURE(sendto);
  struct io io = IO(OP_SENDTO, fd, len);
  io.buf = (char *)buf;
  io.flags = flags;
  io.to = to;
  io.tolen = tolen;
  return io_run(&io, 1, 1);
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
  ENSURE(readv);
  if (iovcnt < 0) return ch_libc.readv(fd, iov, iovcnt);   /* EINVAL, from libc */
  struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
  struct io io = IO(OP_READV, fd, 0);
  return io_run_vec(&io, &m, 0, 0);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
  ENSURE(writev);
  if (iovcnt < 0) return ch_libc.writev(fd, iov, iovcnt);
  struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
  struct io io = IO(OP_WRITEV, fd, 0);
  return io_run_vec(&io, &m, 1, 1);
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
  ENSURE(recvmsg);
  struct io io = IO(OP_RECVMSG, fd, 0);
  io.flags = flags;
  return io_run_vec(&io, msg, 0, (flags & MSG_WAITALL) != 0);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  ENSURE(sendmsg);
  struct io io = IO(OP_SENDMSG, fd, 0);
  io.flags = flags;
  return io_run_vec(&io, (struct msghdr *)msg, 1, 1);
}

/* -- Connections ---------------------------------------------------------- */

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  ENSURE(accept4);
  struct ch_fd *f = hook_begin(fd);
  if (!f) {
    int r = ch_libc.accept4(fd, addr, len, flags);
    if (r >= 0) ch_io_fd_new(r, CH_FD_SOCKET, flags & SOCK_NONBLOCK, 0, 1);
    return r;
  }
  /* In a coroutine the new socket is made non-blocking at birth, saving
  ** the two fcntl calls its first read would cost. */
  uint64_t deadline = 0;
  int r = ch_io_accept_as(fd, addr, len, flags, ch_current() != NULL,
                          f->rcvtimeo_ms ? f->rcvtimeo_ms : -1, &deadline);
  return r < 0 ? (int)fail(0, r) : r;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
  ENSURE(accept);
  return accept4(fd, addr, len, 0);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
  ENSURE(connect);
  struct ch_fd *f = hook_begin(fd);
  if (!f) return ch_libc.connect(fd, addr, len);
  int r = ch_io_connect(fd, addr, len, f->sndtimeo_ms ? f->sndtimeo_ms : -1);
  if (r == 0) return 0;
  /* Linux's word for a connect that timed out is EINPROGRESS; a unix
  ** socket whose listener's backlog stayed full says EAGAIN. */
  errno = r == -ETIMEDOUT || r == -ECANCELED ? EINPROGRESS : -r;
  return -1;
}

int close(int fd)
{
  ENSURE(close);
  struct ch_fd *f = ch_fd_peek(fd);
  /* Before the real close: once it returns, the number can be reused by
  ** another thread, and our entry must not describe the old file. */
  if (f && (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers))
    ch_poll_close(fd, f);
  return ch_libc.close(fd);
}

int shutdown(int fd, int how)
{
  ENSURE(shutdown);
  /* Waiters need no help: the kernel reports EOF/HUP to epoll. */
  return ch_libc.shutdown(fd, how);
}

/* -- fd creation ---------------------------------------------------------- */

int socket(int domain, int type, int protocol)
{
  ENSURE(socket);
  int r = ch_libc.socket(domain, type, protocol);
  if (r >= 0) ch_io_fd_new(r, CH_FD_SOCKET, type & SOCK_NONBLOCK, 0, (type & 0xf) == SOCK_STREAM);
  return r;
}

int socketpair(int domain, int type, int protocol, int sv[2])
{
  ENSURE(socketpair);
  int r = ch_libc.socketpair(domain, type, protocol, sv);
  if (r == 0)
    for (int i = 0; i < 2; i++)
      ch_io_fd_new(sv[i], CH_FD_SOCKET, type & SOCK_NONBLOCK, 0, (type & 0xf) == SOCK_STREAM);
  return r;
}

int pipe2(int fds[2], int flags)
{
  ENSURE(pipe2);
  int r = ch_libc.pipe2(fds, flags);
  if (r == 0)
    /* O_DIRECT: a packet pipe, where a short read does not mean empty. */
    for (int i = 0; i < 2; i++)
      ch_io_fd_new(fds[i], CH_FD_PIPE, flags & O_NONBLOCK, 0, !(flags & O_DIRECT));
  return r;
}

int pipe(int fds[2])
{
  ENSURE(pipe);
  return pipe2(fds, 0);
}

int dup(int fd)
{
  ENSURE(dup);
  int r = ch_libc.dup(fd);
  if (r >= 0) ch_io_fd_dup(fd, r);
  return r;
}

/* dup2 and dup3 close newfd silently when they succeed; ch_io_fd_dup then
** wakes its old waiters and resets its entry. On failure newfd is
** untouched, and so is its entry. */
int dup3(int oldfd, int newfd, int flags)
{
  ENSURE(dup3);
  int r = ch_libc.dup3(oldfd, newfd, flags);
  if (r >= 0) ch_io_fd_dup(oldfd, r);
  return r;
}

int dup2(int oldfd, int newfd)
{
  ENSURE(dup2);
  int r = ch_libc.dup2(oldfd, newfd);
  if (r >= 0 && oldfd != newfd) ch_io_fd_dup(oldfd, r);
  return r;
}

/* -- Flags and options ---------------------------------------------------- */

static int fcntl_hook(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
  struct ch_fd *f;
  int r;
  switch (cmd) {
  case F_GETFL:
    r = real(fd, cmd);
    f = ch_fd_peek(fd);
    if (r >= 0 && f && f->sys_nonblock)   /* show the user's own view */
      r = f->user_nonblock ? (r | O_NONBLOCK) : (r & ~O_NONBLOCK);
    return r;
  case F_SETFL: {
    int fl = (int)(intptr_t)arg;
    f = ch_fd_get(fd);
    if (f && f->kind == CH_FD_UNKNOWN) ch_fd_classify(fd, f);
    if (f && f->sys_nonblock) r = real(fd, cmd, fl | O_NONBLOCK);
    else r = real(fd, cmd, fl);
    if (r == 0 && f && f->kind != CH_FD_UNKNOWN) f->user_nonblock = (fl & O_NONBLOCK) != 0;
    return r;
  }
  case F_DUPFD:
  case F_DUPFD_CLOEXEC:
    r = real(fd, cmd, arg);
    if (r >= 0) ch_io_fd_dup(fd, r);
    return r;
  default:
    return real(fd, cmd, arg);
  }
}

/* The third argument is an int or a pointer; x86-64 passes both in the
** same register, and glibc's own fcntl reads it as void * too. */
int fcntl(int fd, int cmd, ...)
{
  ENSURE(fcntl);
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_hook(ch_libc.fcntl, fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...);
int fcntl64(int fd, int cmd, ...)
{
  ENSURE(fcntl64);
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_hook(ch_libc.fcntl64, fd, cmd, arg);
}

int ioctl(int fd, unsigned long req, ...)
{
  ENSURE(ioctl);
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (req != FIONBIO || !arg) return ch_libc.ioctl(fd, req, arg);
  struct ch_fd *f = ch_fd_get(fd);
  if (f && f->kind == CH_FD_UNKNOWN) ch_fd_classify(fd, f);
  int on = *(int *)arg, one = 1;
  /* Keep the kernel non-blocking under a socket the runtime manages. */
  int r = ch_libc.ioctl(fd, FIONBIO, f && f->sys_nonblock ? &one : arg);
  if (r == 0 && f && f->kind != CH_FD_UNKNOWN) f->user_nonblock = on != 0;
  return r;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  ENSURE(setsockopt);
  int r = ch_libc.setsockopt(fd, level, name, val, len);
  if (r != 0 || level != SOL_SOCKET || (name != SO_RCVTIMEO && name != SO_SNDTIMEO) ||
      len < sizeof(struct timeval))
    return r;
  struct ch_fd *f = ch_fd_get(fd);
  if (!f) return r;
  if (f->kind == CH_FD_UNKNOWN) { ch_fd_classify(fd, f); return r; }   /* reads both */
  int ms = tv_ms(val);
  if (name == SO_RCVTIMEO) f->rcvtimeo_ms = ms;
  else f->sndtimeo_ms = ms;
  return r;
}

/* -- poll and select ------------------------------------------------------ */

#define POLL_LOCAL 32

static int poll_park(struct pollfd *fds, nfds_t n, int timeout)
{
  struct ch_waiter local[POLL_LOCAL], *w = local;
  if (2 * n > POLL_LOCAL && !(w = calloc(2 * n, sizeof *w))) {
    errno = ENOMEM;
    return -1;
  }
  uint64_t deadline = timeout > 0 ? ch_now_ns() + (uint64_t)timeout * 1000000u : 0;
  int r;
  for (;;) {
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
      if (fds[i].fd < 0) continue;
      short e = fds[i].events;
      /* A waiter on the read side also catches HUP and ERR, which poll
      ** reports even when not asked for. */
      if ((e & (POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND | POLLRDHUP)) ||
          !(e & (POLLOUT | POLLWRNORM | POLLWRBAND)))
        w[k++] = (struct ch_waiter){ .fd = fds[i].fd, .events = POLLIN };
      if (e & (POLLOUT | POLLWRNORM | POLLWRBAND))
        w[k++] = (struct ch_waiter){ .fd = fds[i].fd, .events = POLLOUT };
    }
    int64_t left = -1;
    if (deadline) {
      uint64_t now = ch_now_ns();
      left = now >= deadline ? 0 : (int64_t)((deadline - now + 999999) / 1000000);
    }
    r = left == 0 ? -ETIMEDOUT : ch_poll_wait_many(w, k, left);
    if (r == -ECANCELED) { r = ch_libc.poll(fds, n, 0); break; }   /* as a timeout */
    if (r < 0 && r != -ETIMEDOUT) {
      /* epoll refused an fd (EPERM for regular files, ENOSPC at
      ** max_user_watches) or memory ran out: block like libc. */
      r = ch_libc.poll(fds, n, (int)left);
      break;
    }
    r = ch_libc.poll(fds, n, 0);
    if (r != 0) break;
    if (deadline && ch_now_ns() >= deadline) break;   /* r == 0: timed out */
  }
  if (w != local) free(w);
  return r;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  ENSURE(poll);
  struct ch_coro *c = ch_current();
  if (!c) return ch_libc.poll(fds, n, timeout);
  int r = ch_libc.poll(fds, n, 0);
  if (r != 0 || timeout == 0) return r;
  if (!ch_sched_may_park(c)) return ch_libc.poll(fds, n, timeout);
  return poll_park(fds, n, timeout);
}

int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  ENSURE(select);
  struct ch_coro *c = ch_current();
  if (!c || nfds < 0 || nfds > FD_SETSIZE || !ch_sched_may_park(c))
    return ch_libc.select(nfds, rd, wr, ex, tv);
  /* 1024 pollfds are 8 KiB: too much for a small coroutine stack. */
  struct pollfd local[64], *p = local;
  if (nfds > 64 && !(p = malloc((size_t)nfds * sizeof *p))) { errno = ENOMEM; return -1; }
  int n = 0;
  for (int fd = 0; fd < nfds; fd++) {
    short e = (short)((rd && FD_ISSET(fd, rd) ? POLLIN : 0) |
                      (wr && FD_ISSET(fd, wr) ? POLLOUT : 0) |
                      (ex && FD_ISSET(fd, ex) ? POLLPRI : 0));
    if (e) p[n++] = (struct pollfd){ fd, e, 0 };
  }
  int timeout = -1, count = -1;
  if (tv) {
    if (tv->tv_sec < 0 || tv->tv_usec < 0) { errno = EINVAL; goto out; }
    timeout = tv_ms(tv);
  }
  uint64_t start = ch_now_ns();
  if (poll(p, (nfds_t)n, timeout) < 0) goto out;
  for (int i = 0; i < n; i++)
    if (p[i].revents & POLLNVAL) { errno = EBADF; goto out; }
  if (rd) FD_ZERO(rd);
  if (wr) FD_ZERO(wr);
  if (ex) FD_ZERO(ex);
  count = 0;
  for (int i = 0; i < n; i++) {
    short re = p[i].revents, e = p[i].events;
    if ((e & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) { FD_SET(p[i].fd, rd); count++; }
    if ((e & POLLOUT) && (re & (POLLOUT | POLLERR))) { FD_SET(p[i].fd, wr); count++; }
    if ((e & POLLPRI) && (re & POLLPRI)) { FD_SET(p[i].fd, ex); count++; }
  }
  if (tv) {   /* Linux select leaves the time not slept in *tv */
    uint64_t spent_us = (ch_now_ns() - start) / 1000;
    uint64_t total_us = (uint64_t)tv->tv_sec * 1000000u + (uint64_t)tv->tv_usec;
    uint64_t rest = spent_us >= total_us ? 0 : total_us - spent_us;
    tv->tv_sec = (time_t)(rest / 1000000u);
    tv->tv_usec = (suseconds_t)(rest % 1000000u);
  }
out:
  if (p != local) free(p);
  return count;
}

/* -- Sleeping ------------------------------------------------------------- */

/* Parks the running coroutine for ns. A cancelled coroutine wakes early,
** and the sleep still reports success: libc callers retry a failed sleep
** (LuaSocket's socket.sleep loops while nanosleep fails), and
** ch_cancel_hits tells the embedder. */
static int park_ns(uint64_t ns)
{
  if (ns == 0) {
    ch_yield();
    return 0;
  }
  ch_coro_note_wait(ch_running, CH_WAIT_SLEEP, -1);
  int r = ch_sched_park(ch_now_ns() + ns, 0, CH_CORO_SLEEPING);
  return r == -ETIMEDOUT || r == -ECANCELED ? 0 : r;
}

static int may_sleep(void)
{
  struct ch_coro *c = ch_current();
  return c && ch_sched_may_park(c);
}

unsigned sleep(unsigned s)
{
  ENSURE(sleep);
  if (!may_sleep()) return ch_libc.sleep(s);
  uint64_t start = ch_now_ns();
  if (park_ns((uint64_t)s * 1000000000u) == 0) return 0;
  uint64_t spent = (ch_now_ns() - start) / 1000000000u;
  return spent >= s ? 0 : s - (unsigned)spent;   /* seconds left, like libc */
}

int usleep(useconds_t us)
{
  ENSURE(usleep);
  if (!may_sleep()) return ch_libc.usleep(us);
  int r = park_ns((uint64_t)us * 1000u);
  if (r < 0) { errno = -r; return -1; }
  return 0;
}

static int valid_ts(const struct timespec *ts)
{
  return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
  ENSURE(nanosleep);
  if (!may_sleep() || !req || !valid_ts(req)) return ch_libc.nanosleep(req, rem);
  uint64_t ns = (uint64_t)req->tv_sec * 1000000000u + (uint64_t)req->tv_nsec;
  uint64_t start = ch_now_ns();
  int r = park_ns(ns);
  if (r == 0) return 0;
  if (rem) {
    uint64_t spent = ch_now_ns() - start, left = spent >= ns ? 0 : ns - spent;
    rem->tv_sec = (time_t)(left / 1000000000u);
    rem->tv_nsec = (long)(left % 1000000000u);
  }
  errno = -r;
  return -1;
}

int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem)
{
  ENSURE(clock_nanosleep);
  if (!may_sleep() || !req || !valid_ts(req) ||
      (clk != CLOCK_MONOTONIC && clk != CLOCK_REALTIME && clk != CLOCK_BOOTTIME))
    return ch_libc.clock_nanosleep(clk, flags, req, rem);
  int64_t ns = (int64_t)req->tv_sec * 1000000000 + req->tv_nsec;
  if (flags & TIMER_ABSTIME) {
    struct timespec now;
    clock_gettime(clk, &now);
    ns -= (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (ns < 0) ns = 0;
  }
  uint64_t start = ch_now_ns();
  int r = park_ns((uint64_t)ns);
  if (r == 0) return 0;
  if (rem && !(flags & TIMER_ABSTIME)) {
    uint64_t spent = ch_now_ns() - start, left = spent >= (uint64_t)ns ? 0 : (uint64_t)ns - spent;
    rem->tv_sec = (time_t)(left / 1000000000u);
    rem->tv_nsec = (long)(left % 1000000000u);
  }
  return -r;   /* clock_nanosleep returns the error number itself */
}

/* -- Name resolution ------------------------------------------------------ */

/* getaddrinfo makes socket calls inside glibc that no hook can see, so in
** a coroutine the whole call runs on the thread pool. Everything the pool
** thread reads or writes is on the heap: node, service and hints may be
** on the caller's stack, and so may *res, and in COPY stack mode that
** stack is not where it was while the caller is parked. */
struct gai_call {
  char *node, *service;        /* copies; NULL as given */
  struct addrinfo hints;       /* copy; used when has_hints */
  int has_hints;
  struct addrinfo *res;        /* the result, handed to *res after */
  int ret;
  int err;   /* errno, for EAI_SYSTEM */
};

static void gai_run(void *p)
{
  struct gai_call *g = p;
  g->ret = ch_libc.getaddrinfo(g->node, g->service, g->has_hints ? &g->hints : NULL, &g->res);
  g->err = errno;
}

static void gai_free(struct gai_call *g)
{
  free(g->node);
  free(g->service);
  free(g);
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
  ENSURE(getaddrinfo);
  if (!may_sleep()) return ch_libc.getaddrinfo(node, service, hints, res);
  struct gai_call *g = calloc(1, sizeof *g);
  if (!g || (node && !(g->node = strdup(node))) ||
      (service && !(g->service = strdup(service)))) {
    if (g) gai_free(g);
    return EAI_MEMORY;
  }
  if (hints) {
    /* POSIX: only these four fields of hints are read; the rest must
    ** be zero or NULL. */
    g->hints.ai_flags = hints->ai_flags;
    g->hints.ai_family = hints->ai_family;
    g->hints.ai_socktype = hints->ai_socktype;
    g->hints.ai_protocol = hints->ai_protocol;
    g->has_hints = 1;
  }
  if (ch_pool_call(gai_run, g) < 0) {
    gai_free(g);
    return ch_libc.getaddrinfo(node, service, hints, res);
  }
  int ret = g->ret;
  if (ret == 0) *res = g->res;
  else if (ret == EAI_SYSTEM) errno = g->err;
  gai_free(g);
  return ret;
}
