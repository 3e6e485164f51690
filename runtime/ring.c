/*
** The io_uring backend: see ring.h for what goes through the ring and what
** stays on epoll. Shape after liburing's own examples and libuv's
** uv__io_uring_* (src/unix/linux.c): one ring per loop, submissions
** batched until the loop's wait, completions reaped there.
**
** A parked operation is a struct pending on its coroutine's stack, whose
** address is the operation's user_data: SEPARATE mode keeps that stack in
** place while the coroutine is parked, so the kernel may write the
** caller's buffer and the completion may write the pending directly. A
** coroutine never leaves ch_ring_run while its operation is in flight: a
** timeout or a cancel asks the kernel to cancel it and waits for the
** completion, which then says whether it was cancelled or had finished.
*/
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cohost.h"
#include "coro.h"
#include "io.h"
#include "panic.h"
#include "poll.h"
#include "ring.h"
#include "sched.h"

#ifdef CH_RING_LIBURING
#include <liburing.h>

#define RING_ENTRIES 1024     /* submissions queued per loop turn before one
                              ** is made early; completions get twice that */
#define NBUFS 512             /* provided buffers for ch_ring_recv_buf: one
                              ** per receive completed and not yet copied
                              ** out by its coroutine (power of two) */
#define BUF_SIZE 4096         /* each: 2 MiB in all, touched as used */
#define BGID 0                /* their buffer group */
#define UD_EPOLL 1            /* user_data of the poll on epoll's fd */
#define UD_CANCEL 2           /* of cancel requests, whose results are unused */

struct ch_ring {
  struct io_uring ring;
  struct io_uring_buf_ring *br; /* the provided buffers' ring; NULL when
                              ** the kernel has none (before 5.19) */
  char *bufs;                 /* NBUFS x BUF_SIZE */
  uint64_t nobufs;            /* receives that found every buffer taken */
  uint64_t posted;            /* operations posted since the ring was made */
  unsigned inflight;          /* operations posted, not yet completed */
  uint32_t fork_gen;          /* fork_gen when made (see on_fork) */
  uint8_t epoll_armed;        /* the multishot poll on epoll's fd is posted */
};

/* One operation in flight, on the parked coroutine's stack. */
struct pending {
  struct ch_coro *coro;       /* to wake on completion */
  int fd;
  uint32_t gen;               /* fd's entry generation when posted */
  int res;                    /* the completion's result */
  unsigned flags;             /* its flags (the buffer a receive took) */
  uint8_t done;               /* the completion came */
  struct msghdr msg;          /* a writev on a socket, sent as sendmsg */
};

/* A forked child holds a copy of its parent's rings: the mapping is
** shared with the parent and the ring belongs to the parent's thread
** (IORING_SETUP_SINGLE_ISSUER). The child must never touch it: each ring
** notes the count of forks it was made under, and a scheduler that finds
** another count drops its ring for epoll (ch_ring_poll). */
static _Atomic uint32_t fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork(void) { atomic_fetch_add(&fork_gen, 1); }
static void atfork_init(void) { pthread_atfork(NULL, NULL, on_fork); }

static int ours(const struct ch_ring *r)
{
  return r->fork_gen == atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

/* -- The ring --------------------------------------------------------------- */

/* The provided buffers: a receive posted with no buffer of its own takes
** one when data comes, so an idle connection holds none (the stream
** releases its own while parked, docs/stacks.md). Without them (ENOMEM,
** or a kernel before 5.19) receives take the readiness path. */
static void bufs_init(struct ch_ring *r)
{
  size_t ring_bytes = NBUFS * sizeof(struct io_uring_buf);
  void *br = NULL;
  if (posix_memalign(&br, 4096, ring_bytes) != 0) return;
  char *bufs = malloc((size_t)NBUFS * BUF_SIZE);
  struct io_uring_buf_reg reg = { .ring_addr = (uintptr_t)br, .ring_entries = NBUFS,
                                  .bgid = BGID };
  if (!bufs || io_uring_register_buf_ring(&r->ring, &reg, 0) < 0) {
    free(bufs);
    free(br);
    return;
  }
  r->br = br;
  r->bufs = bufs;
  io_uring_buf_ring_init(r->br);
  for (int i = 0; i < NBUFS; i++)
    io_uring_buf_ring_add(r->br, bufs + (size_t)i * BUF_SIZE, BUF_SIZE, (unsigned short)i,
                          io_uring_buf_ring_mask(NBUFS), i);
  io_uring_buf_ring_advance(r->br, NBUFS);
}

int ch_ring_new(struct ch_sched *s)
{
  if (s->ring) return -EBUSY;
  pthread_once(&atfork_once, atfork_init);
  struct ch_ring *r = calloc(1, sizeof *r);
  if (!r) return -ENOMEM;
  /* DEFER_TASKRUN: the kernel finishes completions only when this thread
  ** enters to wait for them, never by interrupting it (6.1+); older
  ** kernels say EINVAL, and get a plain ring. */
  struct io_uring_params p = { .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN };
  int e = io_uring_queue_init_params(RING_ENTRIES, &r->ring, &p);
  if (e == -EINVAL) {
    memset(&p, 0, sizeof p);
    e = io_uring_queue_init_params(RING_ENTRIES, &r->ring, &p);
  }
  if (e < 0) {
    free(r);
    return e;
  }
  /* The ring's fd registered with this thread's io_uring context (5.18+):
  ** each io_uring_enter then skips the fd table's lookup and reference.
  ** Where the kernel has none the plain fd serves, as before. */
  (void)io_uring_register_ring_fd(&r->ring);
  r->fork_gen = atomic_load(&fork_gen);
  s->ring = r;
  bufs_init(r);
  return 0;
}

void ch_ring_free(struct ch_sched *s)
{
  struct ch_ring *r = s->ring;
  if (!r) return;
  s->ring = NULL;
  /* In a forked child the mapping is the parent's too: unmapping and
  ** closing our copy leaves the parent's ring as it was. */
  io_uring_queue_exit(&r->ring);   /* unregisters the buffer ring too */
  free(r->bufs);
  free(r->br);
  free(r);
}

int ch_ring_check(struct ch_sched *s)
{
  struct ch_ring *r = s->ring;
  if (r && !ours(r)) ch_ring_free(s);
  return s->ring != NULL;
}

unsigned ch_ring_inflight(const struct ch_sched *s)
{
  return s->ring ? s->ring->inflight : 0;
}

/* A submission entry, the queue submitted first if it is full; NULL when
** even that leaves none (the completion queue is backed up). */
static struct io_uring_sqe *entry(struct ch_ring *r)
{
  struct io_uring_sqe *e = io_uring_get_sqe(&r->ring);
  if (!e) {
    io_uring_submit(&r->ring);
    e = io_uring_get_sqe(&r->ring);
  }
  return e;
}

static void prep(struct io_uring_sqe *e, int fd, const struct ch_ring_args *a,
                 struct pending *w)
{
  /* A writev on a socket goes as sendmsg with MSG_NOSIGNAL (a peer gone
  ** is EPIPE, never SIGPIPE), its msghdr in w: the kernel reads it when
  ** the entry is submitted, after this returns. */
  const struct ch_fd *f = ch_fd_peek(fd);
  if (a->kind == CH_RING_WRITEV && f && f->kind == CH_FD_SOCKET) {
    w->msg = (struct msghdr){ .msg_iov = a->p, .msg_iovlen = a->n };
    io_uring_prep_sendmsg(e, fd, &w->msg, MSG_NOSIGNAL);
    return;
  }
  /* Offset -1: the file position, which sockets and pipes do not have. */
  switch (a->kind) {
  case CH_RING_READ:    io_uring_prep_read(e, fd, a->p, (unsigned)a->n, (uint64_t)-1); break;
  case CH_RING_RECV:    io_uring_prep_recv(e, fd, a->p, a->n, a->flags); break;
  case CH_RING_READV:   io_uring_prep_readv(e, fd, a->p, (unsigned)a->n, (uint64_t)-1); break;
  case CH_RING_WRITE:   io_uring_prep_write(e, fd, a->p, (unsigned)a->n, (uint64_t)-1); break;
  case CH_RING_SEND:    io_uring_prep_send(e, fd, a->p, a->n, a->flags); break;
  case CH_RING_SENDMSG: io_uring_prep_sendmsg(e, fd, a->p, (unsigned)a->flags); break;
  case CH_RING_WRITEV:  io_uring_prep_writev(e, fd, a->p, (unsigned)a->n, (uint64_t)-1); break;
  case CH_RING_ACCEPT:  io_uring_prep_accept(e, fd, a->p, a->q, a->flags); break;
  default: ch_panic("ring: operation kind %d", a->kind);
  }
}

/* -- Operations --------------------------------------------------------------- */

/* In COPY mode a parked coroutine's stack is another's while it waits, so
** the kernel may not write a buffer there: the calls' own forms (whose
** buffers may be on the stack) stay on epoll, and only the receive into a
** provided buffer, whose pending is then on the heap, takes the ring. */
int ch_ring_takes(struct ch_sched *s, const struct ch_io_op *op, const struct ch_fd *f)
{
  return op->form && !s->copy_mode && ch_ring_takes_fd(s, f);
}

int ch_ring_takes_fd(struct ch_sched *s, const struct ch_fd *f)
{
  struct ch_ring *r = s->ring;
  return r && f && (f->kind == CH_FD_SOCKET || f->kind == CH_FD_PIPE) && ours(r) &&
         s->current && ch_sched_may_park(s->current) && f->ring_ops < UINT16_MAX;
}

static void complete(struct pending *w, int res, unsigned flags)
{
  w->res = res;
  w->flags = flags;
  w->done = 1;
  struct ch_fd *f = ch_fd_peek(w->fd);
  if (f && f->gen == w->gen && f->ring_ops) f->ring_ops--;
  ch_unpark(w->coro, 0);   /* -EALREADY if a timeout or a cancel woke it */
}

/* Asks the kernel to cancel w's operation; its completion still comes. */
static void cancel(struct ch_ring *r, struct pending *w)
{
  struct io_uring_sqe *e = entry(r);
  if (!e) return;   /* it will complete by itself: a backed-up queue drains */
  io_uring_prep_cancel(e, w, 0);
  io_uring_sqe_set_data64(e, UD_CANCEL);
}

/* The deadline of a wait of timeout_ms, kept in *deadline_ns across the
** calls of one operation; 0 for none. -ETIMEDOUT if it has passed. */
static int64_t deadline_of(int64_t timeout_ms, uint64_t *deadline_ns, uint64_t *deadline)
{
  *deadline = 0;
  if (timeout_ms <= 0) return 0;
  uint64_t now = ch_now_ns();
  if (!*deadline_ns) *deadline_ns = now + (uint64_t)timeout_ms * 1000000u;
  if (now >= *deadline_ns) return -ETIMEDOUT;
  *deadline = *deadline_ns;
  return 0;
}

/* Yields. Parks the caller until w's operation, posted with e, completes.
** A timeout or ch_cancel asks the kernel to cancel it and waits for the
** completion: the buffer is the caller's (or the ring's, to hand back),
** and the operation may have finished meanwhile. Returns 0 with w->res
** and w->flags set, or the park's -ETIMEDOUT/-ECANCELED when the kernel
** cancelled the operation before it did anything. wait (CH_WAIT_READ or
** _WRITE) says what the park is for (ch_coro_info). */
static int post_and_park(struct ch_ring *r, struct io_uring_sqe *e, struct pending *w,
                         uint64_t deadline, int wait)
{
  io_uring_sqe_set_data(e, w);
  r->inflight++;
  r->posted++;
  ch_fd_peek(w->fd)->ring_ops++;
  ch_coro_note_wait(w->coro, wait, w->fd);
  int woke = ch_sched_park(deadline, 0, CH_CORO_WAITING);
  if (w->done) return 0;
  cancel(r, w);
  while (!w->done) {
    ch_coro_note_wait(w->coro, wait, w->fd);
    ch_sched_park(0, 1, CH_CORO_WAITING);
  }
  if (w->res == -ECANCELED) return woke < 0 ? woke : -ECANCELED;
  return 0;
}

/* What a completion's result means to the caller: -EBADF for an operation
** the close hook cancelled (the number is gone), -EAGAIN for a signal's
** EINTR (the caller goes the readiness way), else the result. */
static int result_of(const struct pending *w)
{
  if (w->res == -ECANCELED) {
    const struct ch_fd *f = ch_fd_peek(w->fd);
    if (!f || f->gen != w->gen) return -EBADF;
  }
  if (w->res == -EINTR) return -EAGAIN;
  return w->res;
}

ssize_t ch_ring_run(struct ch_sched *s, struct ch_io_op *op, int64_t timeout_ms,
                    uint64_t *deadline_ns)
{
  struct ch_ring *r = s->ring;
  struct ch_coro *self = s->current;
  if (self->cancelled) {
    self->cancel_hits++;
    return -ECANCELED;
  }
  uint64_t deadline;
  if (deadline_of(timeout_ms, deadline_ns, &deadline) < 0) return -ETIMEDOUT;
  struct io_uring_sqe *e = entry(r);
  if (!e) return -EAGAIN;   /* the caller waits for readiness instead */
  struct ch_ring_args a;
  op->form(op, &a);
  struct pending w = { .coro = self, .fd = op->fd, .gen = ch_fd_peek(op->fd)->gen };
  prep(e, op->fd, &a, &w);
  int input = a.kind == CH_RING_READ || a.kind == CH_RING_RECV || a.kind == CH_RING_READV ||
              a.kind == CH_RING_ACCEPT;
  int r2 = post_and_park(r, e, &w, deadline, input ? CH_WAIT_READ : CH_WAIT_WRITE);
  if (r2 < 0) return r2;
  return result_of(&w);
}

/* What a completed buffer receive gives its caller (ch_ring_recv_buf). */
static int recv_result(struct ch_sched *s, struct ch_ring *r, const struct pending *w,
                       struct ch_ring_buf *b)
{
  if (w->flags & IORING_CQE_F_BUFFER) {
    b->id = (int)(w->flags >> IORING_CQE_BUFFER_SHIFT);
    b->data = r->bufs + (size_t)b->id * BUF_SIZE;
    b->len = w->res > 0 ? (size_t)w->res : 0;
    b->full = w->res == BUF_SIZE;
    if (w->res > 0) return 1;
    ch_ring_buf_done(s, b);   /* a buffer with nothing in it */
  }
  if (w->res == -ENOBUFS) {
    r->nobufs++;
    return -EAGAIN;
  }
  if (w->res == 0) {
    b->id = -1;
    b->len = 0;
    return 1;   /* EOF */
  }
  int res = result_of(w);
  return res < 0 ? res : -EAGAIN;
}

int ch_ring_recv_buf(struct ch_sched *s, int fd, int64_t timeout_ms, uint64_t *deadline_ns,
                     struct ch_ring_buf *b)
{
  struct ch_ring *r = s->ring;
  struct ch_coro *self = s->current;
  if (!r->br) return -EAGAIN;
  if (self->cancelled) {
    self->cancel_hits++;
    return -ECANCELED;
  }
  uint64_t deadline;
  if (deadline_of(timeout_ms, deadline_ns, &deadline) < 0) return -ETIMEDOUT;
  /* COPY mode: the pending on the heap, as the stack is not ours while
  ** parked (complete() writes it from the loop). A malloc per wait. */
  struct pending local, *w = &local;
  if (s->copy_mode && !(w = malloc(sizeof *w))) return -EAGAIN;
  struct io_uring_sqe *e = entry(r);
  if (!e) {
    if (w != &local) free(w);
    return -EAGAIN;
  }
  io_uring_prep_recv(e, fd, NULL, BUF_SIZE, 0);
  /* POLL_FIRST: the caller comes here after a read said EAGAIN (or the
  ** judgement knew it would), so the kernel skips its own first try,
  ** which would fail the same way, and arms the poll at once: one
  ** tcp_recvmsg per message instead of two. Same kernel (5.19) as the
  ** buffer ring, which r->br says is there. */
  e->ioprio |= IORING_RECVSEND_POLL_FIRST;
  e->flags |= IOSQE_BUFFER_SELECT;
  e->buf_group = BGID;
  *w = (struct pending){ .coro = self, .fd = fd, .gen = ch_fd_peek(fd)->gen };
  int res = post_and_park(r, e, w, deadline, CH_WAIT_READ);
  if (res == 0) res = recv_result(s, r, w, b);
  if (w != &local) free(w);
  return res;
}

void ch_ring_buf_done(struct ch_sched *s, struct ch_ring_buf *b)
{
  struct ch_ring *r = s->ring;
  if (b->id < 0 || !r) return;
  io_uring_buf_ring_add(r->br, r->bufs + (size_t)b->id * BUF_SIZE, BUF_SIZE,
                        (unsigned short)b->id, io_uring_buf_ring_mask(NBUFS), 0);
  io_uring_buf_ring_advance(r->br, 1);
  b->id = -1;
}

uint64_t ch_ring_nobufs(const struct ch_sched *s)
{
  return s->ring ? s->ring->nobufs : 0;
}

uint64_t ch_ring_posted(const struct ch_sched *s)
{
  return s->ring ? s->ring->posted : 0;
}

void ch_ring_close(int fd, struct ch_fd *f)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_ring *r = s ? s->ring : NULL;
  if (!r || !f->ring_ops || !ours(r)) return;
  struct io_uring_sqe *e = entry(r);
  if (!e) return;
  /* Matched by the file the number names now, so it must go in before
  ** the real close. */
  io_uring_prep_cancel_fd(e, fd, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(e, UD_CANCEL);
  io_uring_submit(&r->ring);
}

/* -- The loop's wait ------------------------------------------------------------ */

static void arm_epoll(struct ch_ring *r, int epfd)
{
  struct io_uring_sqe *e = entry(r);
  if (!e) return;   /* the next turn tries again */
  io_uring_prep_poll_multishot(e, epfd, POLLIN);
  io_uring_sqe_set_data64(e, UD_EPOLL);
  r->epoll_armed = 1;
}

int ch_ring_poll(struct ch_sched *s, int timeout_ms)
{
  if (!ch_ring_check(s)) return ch_poll_run(&s->poll, timeout_ms, NULL);
  struct ch_ring *r = s->ring;
  if (!r->epoll_armed) arm_epoll(r, s->poll.epfd);
  int e;
  if (timeout_ms == 0) {
    e = io_uring_submit_and_get_events(&r->ring);
  } else {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { timeout_ms / 1000, (long long)(timeout_ms % 1000) * 1000000 };
    e = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, timeout_ms < 0 ? NULL : &ts, NULL);
  }
  /* ETIME: the timeout; EINTR: a signal; EBUSY, EAGAIN: completions back
  ** up, which the reaping below relieves. */
  if (e < 0 && e != -ETIME && e != -EINTR && e != -EBUSY && e != -EAGAIN)
    ch_panic("io_uring_enter: %s", strerror(-e));
  struct io_uring_cqe *cqe;
  unsigned head, n = 0;
  int harvest = 0;
  io_uring_for_each_cqe(&r->ring, head, cqe) {
    n++;
    uint64_t u = cqe->user_data;
    if (u == UD_EPOLL) {
      harvest = 1;
      if (!(cqe->flags & IORING_CQE_F_MORE)) r->epoll_armed = 0;
    } else if (u != UD_CANCEL) {
      r->inflight--;
      complete((struct pending *)(uintptr_t)u, cqe->res, cqe->flags);
    }
  }
  io_uring_cq_advance(&r->ring, n);
  if (!harvest) return 0;
  /* The poll fires once per wakeup of epoll's queue: take everything it
  ** holds now, or events left in it would wait for the next wakeup. */
  int woken = 0, full;
  do woken |= ch_poll_run(&s->poll, 0, &full);
  while (full);
  return woken;
}

#else /* !CH_RING_LIBURING */

int ch_ring_new(struct ch_sched *s) { (void)s; return -ENOSYS; }
int ch_ring_check(struct ch_sched *s) { (void)s; return 0; }
void ch_ring_free(struct ch_sched *s) { (void)s; }
unsigned ch_ring_inflight(const struct ch_sched *s) { (void)s; return 0; }
int ch_ring_takes(struct ch_sched *s, const struct ch_io_op *op, const struct ch_fd *f)
{
  (void)s; (void)op; (void)f;
  return 0;
}
int ch_ring_takes_fd(struct ch_sched *s, const struct ch_fd *f)
{
  (void)s; (void)f;
  return 0;
}
ssize_t ch_ring_run(struct ch_sched *s, struct ch_io_op *op, int64_t timeout_ms,
                    uint64_t *deadline_ns)
{
  (void)s; (void)op; (void)timeout_ms; (void)deadline_ns;
  return -EAGAIN;
}
int ch_ring_recv_buf(struct ch_sched *s, int fd, int64_t timeout_ms, uint64_t *deadline_ns,
                     struct ch_ring_buf *b)
{
  (void)s; (void)fd; (void)timeout_ms; (void)deadline_ns; (void)b;
  return -EAGAIN;
}
void ch_ring_buf_done(struct ch_sched *s, struct ch_ring_buf *b) { (void)s; b->id = -1; }
uint64_t ch_ring_nobufs(const struct ch_sched *s) { (void)s; return 0; }
uint64_t ch_ring_posted(const struct ch_sched *s) { (void)s; return 0; }
void ch_ring_close(int fd, struct ch_fd *f) { (void)fd; (void)f; }
int ch_ring_poll(struct ch_sched *s, int timeout_ms)
{
  return ch_poll_run(&s->poll, timeout_ms, NULL);
}

#endif
