/*
** libc hooks. Linking the runtime defines read, write, connect, poll, ...
** in the program itself, so the dynamic linker binds every call (from the
** program, from shared libraries such as hiredis, from modules a host
** dlopens if it links with -rdynamic) here first. Each hook resolves its
** libc function once with dlsym(RTLD_NEXT) and:
**
**  - outside a coroutine, on a file epoll cannot watch, or on an fd the
**    user made non-blocking, calls libc straight through;
**  - otherwise makes the fd non-blocking in the kernel (keeping the user's
**    view of O_NONBLOCK in our table; fcntl and ioctl report and change
**    that view), tries the real call first and, on EAGAIN, waits in the
**    scheduler and tries again, in a loop;
**  - honours SO_RCVTIMEO/SO_SNDTIMEO as libc would (EAGAIN after the
**    timeout) and never invents a timeout of its own;
**  - writes everything on a blocking stream, as the kernel would.
**
** Where the coroutine may not park (ch_coro_set_may_yield, or the
** embedder's yield check says no), the wait is a plain poll(2) that
** blocks the thread: exactly libc's behaviour.
*/
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
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
#include "panic.h"
#include "sched.h"

/* -- The real functions --------------------------------------------------- */

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_readv)(int, const struct iovec *, int);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static int (*real_close)(int);
static int (*real_shutdown)(int, int);
static int (*real_poll)(struct pollfd *, nfds_t, int);
static int (*real_select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
static unsigned (*real_sleep)(unsigned);
static int (*real_usleep)(useconds_t);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static int (*real_clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
static int (*real_fcntl)(int, int, ...);
static int (*real_fcntl64)(int, int, ...);
static int (*real_ioctl)(int, unsigned long, ...);
static int (*real_setsockopt)(int, int, int, const void *, socklen_t);
static int (*real_getaddrinfo)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
static int (*real_socket)(int, int, int);
static int (*real_socketpair)(int, int, int, int[2]);
static int (*real_pipe)(int[2]);
static int (*real_pipe2)(int[2], int);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *resolve(const char *name)
{
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) ch_panic("hook: dlsym(RTLD_NEXT, \"%s\") found nothing", name);
  return p;
}

#define RESOLVE(name) (*(void **)&real_##name = resolve(#name))

static void resolve_all(void)
{
  RESOLVE(read); RESOLVE(write); RESOLVE(readv); RESOLVE(writev);
  RESOLVE(recv); RESOLVE(send); RESOLVE(recvfrom); RESOLVE(sendto);
  RESOLVE(recvmsg); RESOLVE(sendmsg); RESOLVE(accept); RESOLVE(accept4);
  RESOLVE(connect); RESOLVE(close); RESOLVE(shutdown); RESOLVE(poll);
  RESOLVE(select); RESOLVE(sleep); RESOLVE(usleep); RESOLVE(nanosleep);
  RESOLVE(clock_nanosleep); RESOLVE(fcntl); RESOLVE(fcntl64); RESOLVE(ioctl);
  RESOLVE(setsockopt); RESOLVE(getaddrinfo); RESOLVE(socket);
  RESOLVE(socketpair); RESOLVE(pipe); RESOLVE(pipe2); RESOLVE(dup);
  RESOLVE(dup2); RESOLVE(dup3);
}

void ch_hook_init(void);

/* Resolves every hooked function; called at load time by the constructor
** below and again (a no-op) by each scheduler. */
void ch_hook_init(void)
{
  pthread_once(&once, resolve_all);
}

__attribute__((constructor)) static void hook_ctor(void)
{
  ch_hook_init();
}

/* A hook can run before our constructor (another library's constructor
** calling read): one predictable branch covers that. */
#define ENSURE(name) do { if (__builtin_expect(!real_##name, 0)) ch_hook_init(); } while (0)

/* -- fd classification ---------------------------------------------------- */

/* A timeval as whole ms, rounded up and clamped to INT_MAX (24 days and
** more is as good as forever). */
static int tv_ms(const struct timeval *tv)
{
  int64_t ms = (int64_t)tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000;
  return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

static int timeo_ms(int fd, int name)
{
  struct timeval tv;
  socklen_t len = sizeof tv;
  if (getsockopt(fd, SOL_SOCKET, name, &tv, &len) < 0) return 0;
  return tv_ms(&tv);
}

/* Learns what fd is, the first time a hook sees it in a coroutine. Leaves
** the entry unknown if fd is not open (the real call then says EBADF). */
static int classify(int fd, struct ch_fd *f)
{
  struct stat st;
  if (fstat(fd, &st) < 0) return -1;
  int fl = real_fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  f->user_nonblock = (fl & O_NONBLOCK) != 0;
  if (S_ISSOCK(st.st_mode)) {
    int type = 0;
    socklen_t len = sizeof type;
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
    f->kind = CH_FD_SOCKET;
    f->stream = type == SOCK_STREAM;
    f->rcvtimeo_ms = timeo_ms(fd, SO_RCVTIMEO);
    f->sndtimeo_ms = timeo_ms(fd, SO_SNDTIMEO);
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    f->kind = CH_FD_WAITFIRST;   /* maybe shared with other processes */
    f->stream = 1;
  } else {
    f->kind = CH_FD_OTHER;       /* regular files never go to epoll */
  }
  return 0;
}

/* Records a new fd made by a hooked call (socket, accept, pipe, dup).
** A number closed behind our back (glibc's internal close) may still have
** an entry: it is reset, waking any waiter with EBADF. */
static struct ch_fd *fd_new(int fd, int kind, int user_nonblock, int sys_nonblock, int stream)
{
  struct ch_fd *f = ch_fd_get(fd);
  if (!f) return NULL;
  if (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers)
    ch_sched_close_fd(fd, f);
  f->kind = (uint8_t)kind;
  f->user_nonblock = (uint8_t)(user_nonblock != 0);
  f->sys_nonblock = (uint8_t)(sys_nonblock != 0);
  f->stream = (uint8_t)(stream != 0);
  return f;
}

/* A dup shares the open file, hence its real O_NONBLOCK and timeouts. */
static void fd_dup(int oldfd, int newfd)
{
  struct ch_fd *o = ch_fd_peek(oldfd);
  if (!o || o->kind == CH_FD_UNKNOWN) {
    struct ch_fd *f = ch_fd_peek(newfd);
    if (f && (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers))
      ch_sched_close_fd(newfd, f);
    return;
  }
  struct ch_fd *f = fd_new(newfd, o->kind, o->user_nonblock, o->sys_nonblock, o->stream);
  if (!f) return;
  f->rcvtimeo_ms = o->rcvtimeo_ms;
  f->sndtimeo_ms = o->sndtimeo_ms;
}

/* Decides how a hook treats fd. Returns NULL to call libc straight
** through; otherwise the entry, with *coop = 1 when the caller is a
** coroutine (wait in the scheduler) or 0 when it is a plain thread using a
** socket we made non-blocking (wait in poll, as libc would block). */
static struct ch_fd *io_begin(int fd, int *coop)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_coro *c = s ? s->current : NULL;
  struct ch_fd *f;
  if (!c) {
    f = ch_fd_peek(fd);
    if (!f || !f->sys_nonblock || f->user_nonblock) return NULL;
    *coop = 0;
    return f;
  }
  f = ch_fd_get(fd);
  if (!f) return NULL;
  if (f->kind == CH_FD_UNKNOWN && classify(fd, f) < 0) return NULL;
  if (f->kind == CH_FD_OTHER || f->user_nonblock) return NULL;
  if (!f->sys_nonblock && f->kind != CH_FD_WAITFIRST) {
    int fl = real_fcntl(fd, F_GETFL);
    if (fl < 0 || real_fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return NULL;
    f->sys_nonblock = 1;
  }
  *coop = 1;
  return f;
}

/* -- Waiting -------------------------------------------------------------- */

/* Waits until fd is ready for ev, or until *deadline (set from timeout_ms
** on the first wait; 0 = none). Returns 0 when ready (or in error: the
** retried call will say which), -1 with errno EAGAIN on timeout or when
** the coroutine is cancelled (see ch_cancel), EBADF if closed meanwhile. */
static int fd_wait(int fd, short ev, int timeout_ms, uint64_t *deadline, int coop)
{
  int64_t left = -1;
  if (timeout_ms > 0) {
    uint64_t now = ch_now_ns();
    if (!*deadline) *deadline = now + (uint64_t)timeout_ms * 1000000u;
    if (now >= *deadline) { errno = EAGAIN; return -1; }
    left = (int64_t)((*deadline - now + 999999) / 1000000);
  }
  struct ch_coro *c = coop ? ch_current() : NULL;
  if (c && ch_sched_may_park(c)) {
    int r = ch_wait_fd_again(fd, ev, left);
    if (r > 0) return 0;
    if (r == 0 || r == -ECANCELED) { errno = EAGAIN; return -1; }
    if (r != -EPERM) { errno = -r; return -1; }
    /* epoll refuses this file (e.g. /dev/null): block like libc. */
  }
  struct pollfd p = { fd, ev, 0 };
  for (;;) {
    int r = real_poll(&p, 1, (int)left);
    if (r > 0) return 0;
    if (r == 0) { errno = EAGAIN; return -1; }
    if (errno != EINTR) return -1;
    if (*deadline) {   /* restart with what is left, as SA_RESTART would */
      uint64_t now = ch_now_ns();
      if (now >= *deadline) { errno = EAGAIN; return -1; }
      left = (int64_t)((*deadline - now + 999999) / 1000000);
    }
  }
}

/* For files that may be shared with other processes: true when a
** blocking call on fd would not block now. */
static int ready_now(int fd, short ev)
{
  struct pollfd p = { fd, ev, 0 };
  return real_poll(&p, 1, 0) != 0;
}

/* -- The I/O loop --------------------------------------------------------- */

enum io_op { OP_READ, OP_READV, OP_RECV, OP_RECVFROM, OP_RECVMSG,
             OP_WRITE, OP_WRITEV, OP_SEND, OP_SENDTO, OP_SENDMSG };

struct io {
  enum io_op op;
  int fd;
  int flags;                  /* recv/send flags */
  char *buf;                  /* buffer ops: advanced by partial writes */
  size_t len;
  struct sockaddr *from;      /* recvfrom */
  socklen_t *fromlen;
  const struct sockaddr *to;  /* sendto */
  socklen_t tolen;
  struct msghdr *msg;         /* vector ops (readv/writev use msg_iov) */
};

static ssize_t io_call(struct io *io)
{
  struct msghdr *m = io->msg;
  switch (io->op) {
  case OP_READ:     return real_read(io->fd, io->buf, io->len);
  case OP_READV:    return real_readv(io->fd, m->msg_iov, (int)m->msg_iovlen);
  case OP_RECV:     return real_recv(io->fd, io->buf, io->len, io->flags);
  case OP_RECVFROM: return real_recvfrom(io->fd, io->buf, io->len, io->flags, io->from, io->fromlen);
  case OP_RECVMSG:  return real_recvmsg(io->fd, m, io->flags);
  case OP_WRITE:    return real_write(io->fd, io->buf, io->len);
  case OP_WRITEV:   return real_writev(io->fd, m->msg_iov, (int)m->msg_iovlen);
  case OP_SEND:     return real_send(io->fd, io->buf, io->len, io->flags);
  case OP_SENDTO:   return real_sendto(io->fd, io->buf, io->len, io->flags, io->to, io->tolen);
  case OP_SENDMSG:  return real_sendmsg(io->fd, m, io->flags);
  }
  errno = EINVAL;
  return -1;
}

/* Moves past n transferred bytes. Returns the bytes still to go. */
static size_t io_advance(struct io *io, size_t n)
{
  if (!io->msg) {
    io->buf += n;
    io->len -= n;
    return io->len;
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

/* Runs io as libc would on a blocking fd. all: keep going until every
** byte is moved (writes on streams; MSG_WAITALL reads). */
static ssize_t io_run(struct io *io, int writing, int all)
{
  int coop;
  if (io->flags & MSG_DONTWAIT) return io_call(io);   /* asked not to wait */
  struct ch_fd *f = io_begin(io->fd, &coop);
  if (!f) return io_call(io);
  short ev = writing ? POLLOUT : POLLIN;
  int timeout_ms = writing ? f->sndtimeo_ms : f->rcvtimeo_ms;
  uint64_t deadline = 0;
  if (f->kind == CH_FD_WAITFIRST) {
    /* Flags untouched: wait for readiness, then one blocking call. */
    while (!ready_now(io->fd, ev))
      if (fd_wait(io->fd, ev, timeout_ms, &deadline, coop) < 0) return -1;
    return io_call(io);
  }
  all = all && f->stream;
  /* A read that came back short emptied the socket; with the fd in epoll
  ** edge-triggered, new input after it is an edge that sets in_edge. So
  ** until one comes, trying again only buys an EAGAIN: wait first. This
  ** saves one system call per message on a request/response stream
  ** (Go's netpoller keeps the same "ready" bit). */
  int track = !writing && coop && f->stream && !io->msg && !(io->flags & MSG_PEEK);
  ssize_t done = 0;
  int waited = 0;
  for (;;) {
    if (track) {
      /* After a wait, always try: a wait that blocked in poll(2) (no
      ** parking allowed here) saw readiness that epoll never reported. */
      if (!waited && f->in_drained && !f->in_edge && !f->in_eof &&
          fd_wait(io->fd, ev, timeout_ms, &deadline, coop) < 0)
        return -1;
      f->in_edge = 0;   /* before the call: an edge during it sets it again */
    }
    ssize_t r = io_call(io);
    if (track)
      f->in_drained = r < 0 ? (errno == EAGAIN || errno == EWOULDBLOCK)
                            : r > 0 && (size_t)r < io->len;
    if (r > 0 && all) {
      done += r;
      if (io_advance(io, (size_t)r) == 0) return done;
      continue;
    }
    if (r >= 0) return done + r;   /* r == 0: EOF, or an empty request */
    if (errno != EAGAIN && errno != EWOULDBLOCK) return done ? done : -1;
    if (fd_wait(io->fd, ev, timeout_ms, &deadline, coop) < 0) return done ? done : -1;
    waited = 1;
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
  if (io->op == OP_RECVMSG) {   /* report what the kernel filled in */
    user->msg_namelen = m.msg_namelen;
    user->msg_controllen = m.msg_controllen;
    user->msg_flags = m.msg_flags;
  }
  if (iov != local) free(iov);
  return r;
}

/* -- Read and write hooks ------------------------------------------------- */

ssize_t read(int fd, void *buf, size_t len)
{
  ENSURE(read);
  struct io io = { .op = OP_READ, .fd = fd, .buf = buf, .len = len };
  return io_run(&io, 0, 0);
}

ssize_t write(int fd, const void *buf, size_t len)
{
  ENSURE(write);
  struct io io = { .op = OP_WRITE, .fd = fd, .buf = (char *)buf, .len = len };
  return io_run(&io, 1, 1);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
  ENSURE(recv);
  struct io io = { .op = OP_RECV, .fd = fd, .buf = buf, .len = len, .flags = flags };
  return io_run(&io, 0, (flags & MSG_WAITALL) != 0);
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
  ENSURE(send);
  struct io io = { .op = OP_SEND, .fd = fd, .buf = (char *)buf, .len = len, .flags = flags };
  return io_run(&io, 1, 1);
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen)
{
  ENSURE(recvfrom);
  struct io io = { .op = OP_RECVFROM, .fd = fd, .buf = buf, .len = len, .flags = flags,
                   .from = from, .fromlen = fromlen };
  return io_run(&io, 0, (flags & MSG_WAITALL) != 0);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen)
{
  ENSURE(sendto);
  struct io io = { .op = OP_SENDTO, .fd = fd, .buf = (char *)buf, .len = len, .flags = flags,
                   .to = to, .tolen = tolen };
  return io_run(&io, 1, 1);
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
  ENSURE(readv);
  struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)(iovcnt < 0 ? 0 : iovcnt) };
  if (iovcnt < 0) return real_readv(fd, iov, iovcnt);   /* EINVAL, from libc */
  struct io io = { .op = OP_READV, .fd = fd };
  return io_run_vec(&io, &m, 0, 0);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
  ENSURE(writev);
  struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)(iovcnt < 0 ? 0 : iovcnt) };
  if (iovcnt < 0) return real_writev(fd, iov, iovcnt);
  struct io io = { .op = OP_WRITEV, .fd = fd };
  return io_run_vec(&io, &m, 1, 1);
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
  ENSURE(recvmsg);
  struct io io = { .op = OP_RECVMSG, .fd = fd, .flags = flags };
  return io_run_vec(&io, msg, 0, (flags & MSG_WAITALL) != 0);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  ENSURE(sendmsg);
  struct io io = { .op = OP_SENDMSG, .fd = fd, .flags = flags };
  return io_run_vec(&io, (struct msghdr *)msg, 1, 1);
}

/* -- Connections ---------------------------------------------------------- */

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  ENSURE(accept4);
  int coop;
  struct ch_fd *f = io_begin(fd, &coop);
  if (!f) {
    int r = real_accept4(fd, addr, len, flags);
    if (r >= 0) fd_new(r, CH_FD_SOCKET, flags & SOCK_NONBLOCK, 0, 1);
    return r;
  }
  uint64_t deadline = 0;
  for (;;) {
    /* In a coroutine the new socket is made non-blocking at birth,
    ** saving the two fcntl calls its first read would cost. */
    int r = real_accept4(fd, addr, len, coop ? flags | SOCK_NONBLOCK : flags);
    if (r >= 0) {
      struct ch_fd *nf = fd_new(r, CH_FD_SOCKET, flags & SOCK_NONBLOCK, coop, f->stream);
      if (nf) {   /* accepted sockets inherit the listener's timeouts */
        nf->rcvtimeo_ms = f->rcvtimeo_ms;
        nf->sndtimeo_ms = f->sndtimeo_ms;
      }
      return r;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (fd_wait(fd, POLLIN, f->rcvtimeo_ms, &deadline, coop) < 0) return -1;
  }
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
  ENSURE(accept);
  return accept4(fd, addr, len, 0);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
  ENSURE(connect);
  int coop;
  struct ch_fd *f = io_begin(fd, &coop);
  if (!f) return real_connect(fd, addr, len);
  uint64_t deadline = 0;
  int r;
  /* A unix socket whose listener's backlog is full says EAGAIN where a
  ** blocking connect would wait: wait, then try again. */
  while ((r = real_connect(fd, addr, len)) < 0 && errno == EAGAIN)
    if (fd_wait(fd, POLLOUT, f->sndtimeo_ms, &deadline, coop) < 0) return -1;
  if (r == 0 || errno != EINPROGRESS) return r;
  if (fd_wait(fd, POLLOUT, f->sndtimeo_ms, &deadline, coop) < 0) {
    if (errno == EAGAIN) errno = EINPROGRESS;   /* Linux's word for a connect timeout */
    return -1;
  }
  int err = 0;
  socklen_t elen = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) return -1;
  if (err) { errno = err; return -1; }
  return 0;
}

int close(int fd)
{
  ENSURE(close);
  struct ch_fd *f = ch_fd_peek(fd);
  /* Before the real close: once it returns, the number can be reused by
  ** another thread, and our entry must not describe the old file. */
  if (f && (f->kind != CH_FD_UNKNOWN || f->registered || f->readers || f->writers))
    ch_sched_close_fd(fd, f);
  return real_close(fd);
}

int shutdown(int fd, int how)
{
  ENSURE(shutdown);
  /* Waiters need no help: the kernel reports EOF/HUP to epoll. */
  return real_shutdown(fd, how);
}

/* -- fd creation ---------------------------------------------------------- */

int socket(int domain, int type, int protocol)
{
  ENSURE(socket);
  int r = real_socket(domain, type, protocol);
  if (r >= 0) fd_new(r, CH_FD_SOCKET, type & SOCK_NONBLOCK, 0, (type & 0xf) == SOCK_STREAM);
  return r;
}

int socketpair(int domain, int type, int protocol, int sv[2])
{
  ENSURE(socketpair);
  int r = real_socketpair(domain, type, protocol, sv);
  if (r == 0)
    for (int i = 0; i < 2; i++)
      fd_new(sv[i], CH_FD_SOCKET, type & SOCK_NONBLOCK, 0, (type & 0xf) == SOCK_STREAM);
  return r;
}

int pipe2(int fds[2], int flags)
{
  ENSURE(pipe2);
  int r = real_pipe2(fds, flags);
  if (r == 0)
    /* O_DIRECT: a packet pipe, where a short read does not mean empty. */
    for (int i = 0; i < 2; i++) fd_new(fds[i], CH_FD_PIPE, flags & O_NONBLOCK, 0, !(flags & O_DIRECT));
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
  int r = real_dup(fd);
  if (r >= 0) fd_dup(fd, r);
  return r;
}

/* dup2 and dup3 close newfd silently when they succeed; fd_dup then wakes
** its old waiters and resets its entry (fd_new does both). On failure
** newfd is untouched, and so is its entry. */
int dup3(int oldfd, int newfd, int flags)
{
  ENSURE(dup3);
  int r = real_dup3(oldfd, newfd, flags);
  if (r >= 0) fd_dup(oldfd, r);
  return r;
}

int dup2(int oldfd, int newfd)
{
  ENSURE(dup2);
  int r = real_dup2(oldfd, newfd);
  if (r >= 0 && oldfd != newfd) fd_dup(oldfd, r);
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
    if (f && f->kind == CH_FD_UNKNOWN) classify(fd, f);
    if (f && f->sys_nonblock) r = real(fd, cmd, fl | O_NONBLOCK);
    else r = real(fd, cmd, fl);
    if (r == 0 && f && f->kind != CH_FD_UNKNOWN) f->user_nonblock = (fl & O_NONBLOCK) != 0;
    return r;
  }
  case F_DUPFD:
  case F_DUPFD_CLOEXEC:
    r = real(fd, cmd, arg);
    if (r >= 0) fd_dup(fd, r);
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
  return fcntl_hook(real_fcntl, fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...);
int fcntl64(int fd, int cmd, ...)
{
  ENSURE(fcntl64);
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_hook(real_fcntl64, fd, cmd, arg);
}

int ioctl(int fd, unsigned long req, ...)
{
  ENSURE(ioctl);
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (req != FIONBIO || !arg) return real_ioctl(fd, req, arg);
  struct ch_fd *f = ch_fd_get(fd);
  if (f && f->kind == CH_FD_UNKNOWN) classify(fd, f);
  int on = *(int *)arg, one = 1;
  /* Keep the kernel non-blocking under a socket the runtime manages. */
  int r = real_ioctl(fd, FIONBIO, f && f->sys_nonblock ? &one : arg);
  if (r == 0 && f && f->kind != CH_FD_UNKNOWN) f->user_nonblock = on != 0;
  return r;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  ENSURE(setsockopt);
  int r = real_setsockopt(fd, level, name, val, len);
  if (r != 0 || level != SOL_SOCKET || (name != SO_RCVTIMEO && name != SO_SNDTIMEO) ||
      len < sizeof(struct timeval))
    return r;
  struct ch_fd *f = ch_fd_get(fd);
  if (!f) return r;
  if (f->kind == CH_FD_UNKNOWN) { classify(fd, f); return r; }   /* reads both */
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
    r = left == 0 ? -ETIMEDOUT : ch_sched_wait(w, k, left);
    if (r == -ECANCELED) { r = real_poll(fds, n, 0); break; }   /* as a timeout */
    if (r < 0 && r != -ETIMEDOUT) {
      /* epoll refused an fd (EPERM for regular files, ENOSPC at
      ** max_user_watches) or memory ran out: block like libc. */
      r = real_poll(fds, n, (int)left);
      break;
    }
    r = real_poll(fds, n, 0);
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
  if (!c) return real_poll(fds, n, timeout);
  int r = real_poll(fds, n, 0);
  if (r != 0 || timeout == 0) return r;
  if (!ch_sched_may_park(c)) return real_poll(fds, n, timeout);
  return poll_park(fds, n, timeout);
}

int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  ENSURE(select);
  struct ch_coro *c = ch_current();
  if (!c || nfds < 0 || nfds > FD_SETSIZE || !ch_sched_may_park(c))
    return real_select(nfds, rd, wr, ex, tv);
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
  if (!may_sleep()) return real_sleep(s);
  uint64_t start = ch_now_ns();
  if (park_ns((uint64_t)s * 1000000000u) == 0) return 0;
  uint64_t spent = (ch_now_ns() - start) / 1000000000u;
  return spent >= s ? 0 : s - (unsigned)spent;   /* seconds left, like libc */
}

int usleep(useconds_t us)
{
  ENSURE(usleep);
  if (!may_sleep()) return real_usleep(us);
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
  if (!may_sleep() || !req || !valid_ts(req)) return real_nanosleep(req, rem);
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
    return real_clock_nanosleep(clk, flags, req, rem);
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
  g->ret = real_getaddrinfo(g->node, g->service, g->has_hints ? &g->hints : NULL, &g->res);
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
  if (!may_sleep()) return real_getaddrinfo(node, service, hints, res);
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
    return real_getaddrinfo(node, service, hints, res);
  }
  int ret = g->ret;
  if (ret == 0) *res = g->res;
  else if (ret == EAI_SYSTEM) errno = g->err;
  gai_free(g);
  return ret;
}
