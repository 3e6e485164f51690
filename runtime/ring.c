/*
** The io_uring backend. See ring.h for what it does; shape after liburing's
** examples and scripts/bench/echo_uring.c (the ceiling): one ring per
** loop, submissions batched until the loop's one io_uring_enter, which
** also reaps what the kernel finished.
**
** Every operation on an fd names the ring's record of that fd (struct
** rfd, below) in its user_data, with the operation's kind in the low
** bits, never a coroutine or its stack: a completion lands in the record,
** which is heap memory kept until its last operation is in, and wakes the
** fd's waiters through ch_fdwait_ready, as an epoll event does. So a
** coroutine that stops waiting (a timeout, a cancel) leaves nothing
** behind that the kernel could write to, and copy-stack mode needs no
** special case.
**
** Receiving. The kernel picks one of the ring's provided buffers when
** data comes and posts a completion; the record queues the buffers in
** order and take() copies them out into the room the reader's allocation
** callback gives, then hands them back. A stream (CH_RX_AHEAD) keeps a
** multishot receive armed, one per connection, so a message costs no
** submission of its own. TCP's back-pressure is kept two ways: a
** connection that holds AHEAD_MAX bytes nobody has taken has its
** multishot receive cancelled (the bytes then stay in the socket, and the
** window closes as it would), and a ring has NBUFS buffers in all: a
** receive that finds none ends with ENOBUFS, and the reader then waits
** for readiness and reads into its own buffer, as on epoll, until buffers
** come back (below LOW_BUFS free, receives are single-shot).
**
** Sending. send() copies the bytes into the connection's write-behind
** buffer (SEND_BUF, taken when bytes are queued, given back when they are
** out) and posts one send for what is queued, unless one is in flight:
** the caller goes on at once, and the send goes into the kernel with the
** loop's next enter. A send in flight is never waited for; its error is
** kept and returned by the next send, receive or close on the fd. A full
** buffer parks the sender until the kernel has taken some. A close with
** bytes still queued keeps a dup of the fd until they are out (or
** ORPHAN_MS pass, or the send fails), so they still reach the peer.
**
** Accepting. The ring accepts nothing ahead of the caller (the table's
** accept is NULL): a listener is waited for with a poll and accepted by
** the caller's own accept4, as on epoll. A multishot accept, tried, broke
** three things epoll keeps: it takes connections off a socket other
** processes share (a reload hands the master's socket to the next
** generation) for a worker that is about to close it, which then resets
** them; the kernel fixes its fd limit when the accept is armed, so a
** lowered RLIMIT_NOFILE never gives the EMFILE the shedding in
** host/net/listener.c waits for; and a drain's last accepts (which must
** not wait) would arm one more.
*/
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "backend.h"
#include "cohost.h"
#include "coro.h"
#include "fdwait.h"
#include "libc.h"
#include "panic.h"
#include "ring.h"
#include "sched.h"

#ifdef CH_RING_LIBURING
#include <liburing.h>

#define RING_ENTRIES 1024     /* submissions queued per loop turn before one
                              ** is made early; completions get twice that */
#define NBUFS 1024            /* provided buffers per ring (power of two):
                              ** one per receive completed and not yet
                              ** taken by its reader */
#define BUF_SIZE 4096         /* each: 4 MiB in all, touched as used */
#define LOW_BUFS (NBUFS / 8)  /* below this many free, no multishot */
#define BGID 0                /* their buffer group */
#define AHEAD_MAX (4 * BUF_SIZE) /* bytes a stream's receive holds ahead of
                              ** its reader before it is stopped */
#define SEND_BUF 16384        /* write-behind bytes per connection */
#define SEND_DIRECT 8192      /* a send this large with nothing queued is
                              ** made at once, from the caller's bytes */
#define SEND_CACHE 64         /* drained send buffers kept per ring */
#define ORPHAN_MS 60000       /* a closed fd's queued bytes get this long */
#define REAP_BATCH 64         /* completions copied out per pass (1 KiB) */

/* user_data: a struct rfd's address with the operation's kind in its low
** three bits; the kinds alone (no record) are the ring's own. */
enum { OP_POLL_IN = 1, OP_POLL_OUT, OP_RECV, OP_SEND };
#define UD_WAKE 1             /* the poll on the scheduler's eventfd */
#define UD_CANCEL 2           /* cancel requests, whose results are unused */
#define UD(rfd, op) ((uint64_t)(uintptr_t)(rfd) | (op))

/* What the ring holds for one fd: heap memory, named by the user_data of
** each operation on it, freed once closed with nothing in flight. */
struct rfd {
  int fd;                     /* the number; after a close with sends
                              ** queued, a dup of it (owned) */
  uint32_t gen;               /* the fd entry's gen at creation */
  uint32_t inflight;          /* operations in flight naming this record */
  uint32_t posted_turn;       /* the ring's turn + 1 when an operation was
                              ** last posted: unsubmitted if still current */
  uint8_t closed;             /* the user closed fd: no more waiters */
  uint8_t polls;              /* POLLIN, POLLOUT: polls in flight */
  uint8_t recv_on;            /* a receive in flight: 1 single, 2 multi */
  uint8_t recv_stop;          /* a cancel of it is asked */
  uint8_t eof;                /* a receive said EOF (kept: each read after
                              ** says it too, as the socket would) */
  uint8_t last_short;         /* the last receive did not fill its buffer */
  uint8_t shut;               /* a shutdown's how + 1, made once drained */
  uint8_t counted;            /* in the ring's sending: bytes are queued
                              ** and no send of the caller's failed */
  uint8_t stalled;            /* a send of the caller's failed (its timeout,
                              ** a cancel) with bytes queued: they still go,
                              ** but do not keep the loop running */
  int err;                    /* a receive's error, not yet handed out */
  int send_err;               /* a queued send's error, not yet told */
  int32_t qhead, qtail;       /* held input: buffer ids in order, linked
                              ** through the ring's bnext; -1: none */
  uint32_t qoff;              /* bytes of the head buffer handed out */
  uint32_t qbytes;            /* bytes held */
  char *wb;                   /* write-behind buffer (SEND_BUF), NULL
                              ** while nothing is queued */
  uint32_t wstart, wend;      /* queued: wb[wstart, wend) */
  uint32_t wsent;             /* of those, the send in flight's; 0: none */
  struct ch_timer orphan;     /* a closed fd's last sends' deadline */
  struct rfd *prev, *next;    /* every record of the ring, for its end */
};

struct ch_ring {
  struct io_uring ring;
  struct io_uring_buf_ring *br; /* the provided buffers' ring; NULL when
                              ** the kernel has none (before 5.19) */
  char *bufs;                 /* NBUFS x BUF_SIZE */
  uint32_t *blen;             /* bytes in each held buffer */
  int32_t *bnext;             /* next held buffer of the same fd */
  uint32_t held;              /* buffers held (not in the kernel's ring) */
  struct rfd **rfds;          /* by fd number; NULL: nothing held */
  size_t nrfds;
  struct rfd *all;            /* every record, closed ones still in
                              ** flight included */
  char *wcache[SEND_CACHE];   /* drained write-behind buffers */
  int nwcache;
  uint64_t nobufs;            /* receives that found every buffer taken */
  uint64_t posted;            /* operations posted since the ring was made */
  uint32_t turn;              /* submissions made (io_uring_enter calls) */
  unsigned inflight;          /* operations posted, not yet completed */
  unsigned sending;           /* records with bytes queued to send that
                              ** keep the loop running (counted, below) */
  uint8_t wake_armed;         /* the poll on the eventfd is posted */
  uint8_t woken;              /* the eventfd fired: posts to run */
  uint8_t no_multishot;       /* the kernel refused a multishot receive */
  uint8_t reaping;            /* completions are being made: a block
                              ** from a callback must not reap again */
};

static struct ch_ring *ring_of(const struct ch_sched *s)
{
  return s->be_state;
}

/* -- The ring --------------------------------------------------------------- */

/* The provided buffers. Without them (ENOMEM, or a kernel before 5.19)
** receives take the readiness way (take says nothing is held). */
static void bufs_init(struct ch_ring *r)
{
  size_t ring_bytes = NBUFS * sizeof(struct io_uring_buf);
  void *br = NULL;
  if (posix_memalign(&br, 4096, ring_bytes) != 0) return;
  char *bufs = malloc((size_t)NBUFS * BUF_SIZE);
  r->blen = calloc(NBUFS, sizeof *r->blen);
  r->bnext = calloc(NBUFS, sizeof *r->bnext);
  struct io_uring_buf_reg reg = { .ring_addr = (uintptr_t)br, .ring_entries = NBUFS,
                                  .bgid = BGID };
  if (!bufs || !r->blen || !r->bnext || io_uring_register_buf_ring(&r->ring, &reg, 0) < 0) {
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

static void buf_give(struct ch_ring *r, int id)
{
  io_uring_buf_ring_add(r->br, r->bufs + (size_t)id * BUF_SIZE, BUF_SIZE, (unsigned short)id,
                        io_uring_buf_ring_mask(NBUFS), 0);
  io_uring_buf_ring_advance(r->br, 1);
  r->held--;
}

static int ring_init(struct ch_sched *s)
{
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
  bufs_init(r);
  s->be_state = r;
  return 0;
}

static void rfd_free(struct ch_ring *r, struct rfd *x);

static void ring_fini(struct ch_sched *s)
{
  struct ch_ring *r = ring_of(s);
  if (!r) return;
  s->be_state = NULL;
  /* In a forked child the mapping is the parent's too: unmapping and
  ** closing our copy leaves the parent's ring as it was. The kernel
  ** cancels what is in flight (its buffers are ours until it has). */
  io_uring_queue_exit(&r->ring);   /* unregisters the buffer ring too */
  while (r->all) {
    struct rfd *x = r->all;
    if (x->closed == 2 && x->fd >= 0) ch_libc.close(x->fd);   /* a dup */
    rfd_free(r, x);
  }
  free(r->rfds);
  for (int i = 0; i < r->nwcache; i++) free(r->wcache[i]);
  free(r->bufs);
  free(r->br);
  free(r->blen);
  free(r->bnext);
  free(r);
}

/* In a forked child, on the forking thread's scheduler: the ring is the
** parent's too (a shared mapping, owned by the parent's thread under
** IORING_SETUP_SINGLE_ISSUER), so the child lets go of its copy, never
** submitting on it, and goes on with epoll. Unmapping and closing the
** copy leaves the parent's ring as it was. */
static int ring_forked(struct ch_sched *s)
{
  ring_fini(s);
  return 1;
}

static unsigned ring_inflight(const struct ch_sched *s)
{
  const struct ch_ring *r = ring_of(s);
  return r ? r->inflight : 0;
}

static int ring_pending(const struct ch_sched *s)
{
  const struct ch_ring *r = ring_of(s);
  if (!r) return 0;
  return (r->sending ? CH_BE_SENDING : 0) | (r->held ? CH_BE_HOLDING : 0);
}

/* A submission entry, the queue submitted first if it is full; NULL when
** even that leaves none (the completion queue is backed up). */
static struct io_uring_sqe *entry(struct ch_ring *r)
{
  struct io_uring_sqe *e = io_uring_get_sqe(&r->ring);
  if (!e) {
    io_uring_submit(&r->ring);
    r->turn++;
    e = io_uring_get_sqe(&r->ring);
  }
  return e;
}

/* Names x and kind in e, counted in flight until its last completion. */
static void post(struct ch_ring *r, struct io_uring_sqe *e, struct rfd *x, int kind)
{
  io_uring_sqe_set_data64(e, UD(x, kind));
  x->inflight++;
  x->posted_turn = r->turn + 1;
  r->inflight++;
  r->posted++;
}

/* Asks the kernel to cancel x's operation of kind; its completion comes. */
static void cancel(struct ch_ring *r, struct rfd *x, int kind)
{
  struct io_uring_sqe *e = entry(r);
  if (!e) return;   /* it will complete by itself: a backed-up queue drains */
  io_uring_prep_cancel64(e, UD(x, kind), 0);
  io_uring_sqe_set_data64(e, UD_CANCEL);
}

/* -- Records ------------------------------------------------------------------ */

static inline struct rfd *rfd_peek(const struct ch_ring *r, int fd)
{
  return (size_t)fd < r->nrfds ? r->rfds[fd] : NULL;
}

static void rfd_detach(struct ch_ring *r, struct rfd *x);

/* fd's record, if it is the one of the file fd names now: an entry reset
** behind the ring's back (a close on another thread) left a record of an
** old file, which is dropped here. Inline: every operation asks. */
static inline struct rfd *rfd_find(struct ch_ring *r, int fd)
{
  struct rfd *x = rfd_peek(r, fd);
  if (!x) return NULL;
  const struct ch_fd *f = ch_fd_peek(fd);
  if (__builtin_expect(f && f->gen == x->gen, 1)) return x;
  rfd_detach(r, x);
  return NULL;
}

/* fd's record, made on first use. NULL when memory is short. */
static struct rfd *rfd_get(struct ch_ring *r, int fd, const struct ch_fd *f)
{
  struct rfd *x = rfd_find(r, fd);
  if (x) return x;
  if ((size_t)fd >= r->nrfds) {
    size_t cap = r->nrfds;
    struct rfd **t = ch_buf_grow(r->rfds, sizeof *t, &cap, (size_t)fd + 1, 64);
    if (!t) return NULL;
    memset(t + r->nrfds, 0, (cap - r->nrfds) * sizeof *t);
    r->rfds = t;
    r->nrfds = cap;
  }
  if (!(x = calloc(1, sizeof *x))) return NULL;
  x->fd = fd;
  x->gen = f->gen;
  x->qhead = x->qtail = -1;
  x->next = r->all;
  if (r->all) r->all->prev = x;
  r->all = x;
  r->rfds[fd] = x;
  return x;
}

static int wb_pending(const struct rfd *x)
{
  return x->wend > x->wstart || x->wsent;
}

static void send_queued(struct ch_ring *r, struct rfd *x);

/* Hands x's held buffers back to the kernel. */
static void drop_input(struct ch_ring *r, struct rfd *x)
{
  while (x->qhead >= 0) {
    int id = x->qhead;
    x->qhead = r->bnext[id];
    buf_give(r, id);
  }
  x->qtail = -1;
  x->qoff = x->qbytes = 0;
}

/* Counts x in the ring's sending while it has bytes queued and is not
** stalled: what keeps the loop from ending (backend.h: pending). */
static void recount(struct ch_ring *r, struct rfd *x)
{
  uint8_t on = x->wb && !x->stalled;
  if (on == x->counted) return;
  x->counted = on;
  if (on) r->sending++;
  else r->sending--;
}

static void wb_give(struct ch_ring *r, struct rfd *x)
{
  if (!x->wb) return;
  if (r->nwcache < SEND_CACHE) r->wcache[r->nwcache++] = x->wb;
  else free(x->wb);
  x->wb = NULL;
  x->wstart = x->wend = 0;
}

static void rfd_free(struct ch_ring *r, struct rfd *x)
{
  if (r->rfds && (size_t)x->fd < r->nrfds && r->rfds[x->fd] == x) r->rfds[x->fd] = NULL;
  drop_input(r, x);
  wb_give(r, x);
  recount(r, x);
  ch_timer_stop(&x->orphan);
  if (x->prev) x->prev->next = x->next;
  else r->all = x->next;
  if (x->next) x->next->prev = x->prev;
  free(x);
}

/* Frees a closed record once nothing in flight names it any more. */
static void rfd_release(struct ch_ring *r, struct rfd *x)
{
  if (x->closed && !x->inflight) {
    if (x->closed == 2 && x->fd >= 0) ch_libc.close(x->fd);   /* the dup */
    rfd_free(r, x);
  }
}


/* The fd entry x reports to, or NULL when its fd is closed. */
static struct ch_fd *entry_of(const struct rfd *x)
{
  if (x->closed) return NULL;
  struct ch_fd *f = ch_fd_peek(x->fd);
  return f && f->gen == x->gen ? f : NULL;
}

static void report(struct rfd *x, int revents)
{
  struct ch_fd *f = entry_of(x);
  if (f) ch_fdwait_ready(f, revents);
}

/* -- Readiness ------------------------------------------------------------------ */

/* Polls for the directions asked that nothing in flight reports: a
** receive reports input, a send in flight reports room. A
** one-shot poll looks at the file's state when it is armed, so no edge is
** lost between the EAGAIN and the wait. */
static int ring_arm(struct ch_sched *s, int fd, struct ch_fd *f, int events)
{
  struct ch_ring *r = ring_of(s);
  /* Any file: a poll of one that is always ready (a regular file, which
  ** epoll refuses) completes at once, and an eventfd, a timerfd or a
  ** pipe are polled as sockets are. Known from here on, so that its
  ** close comes to ring_close, as a registered fd's comes to epoll's. */
  if (f->kind == CH_FD_UNKNOWN && ch_fd_classify(fd, f) < 0) return -EBADF;
  struct rfd *x = rfd_get(r, fd, f);
  if (!x) return -ENOMEM;
  int need = events & (POLLIN | POLLOUT) & ~x->polls;
  if ((need & POLLIN) && x->recv_on) need &= ~POLLIN;
  if ((need & POLLOUT) && wb_pending(x)) {
    if (!x->wsent) send_queued(r, x);   /* one that found no entry before */
    if (x->wsent) need &= ~POLLOUT;
  }
  for (int i = 0; i < 2; i++) {
    int ev = i ? POLLOUT : POLLIN;
    if (!(need & ev)) continue;
    struct io_uring_sqe *e = entry(r);
    if (!e) return -ENOMEM;
    io_uring_prep_poll_add(e, fd, i ? POLLOUT : POLLIN | POLLRDHUP);
    post(r, e, x, i ? OP_POLL_OUT : OP_POLL_IN);
    x->polls |= (uint8_t)ev;
  }
  return 0;
}

static void on_poll(struct rfd *x, int dir, int res)
{
  x->polls &= (uint8_t)~dir;
  if (res > 0) report(x, res);
  else if (res != -ECANCELED) report(x, dir | POLLERR);
}

/* -- Receiving ---------------------------------------------------------------- */

static int ring_watched(struct ch_sched *s, int fd, const struct ch_fd *f)
{
  (void)f;
  struct rfd *x = rfd_find(ring_of(s), fd);
  return x && (x->recv_on || (x->polls & POLLIN));
}

static int ring_held(struct ch_sched *s, int fd)
{
  struct ch_ring *r = ring_of(s);
  struct rfd *x = rfd_find(r, fd);
  if (!x) return 0;
  if (x->qbytes || x->err || x->eof || x->send_err) return 1;
  return x->recv_on ? -EINPROGRESS : 0;
}

/* Copies up to room bytes of x's held input to p, handing emptied buffers
** back unless peek. */
static size_t copy_out(struct ch_ring *r, struct rfd *x, char *p, size_t room, int peek)
{
  size_t done = 0;
  int id = x->qhead;
  uint32_t off = x->qoff;
  while (id >= 0 && done < room) {
    size_t n = r->blen[id] - off;
    if (n > room - done) n = room - done;
    memcpy(p + done, r->bufs + (size_t)id * BUF_SIZE + off, n);
    done += n;
    off += (uint32_t)n;
    if (off < r->blen[id]) break;
    int next = r->bnext[id];
    if (!peek) {
      buf_give(r, id);
      x->qhead = next;
    }
    id = next;
    off = 0;
  }
  if (!peek) {
    x->qoff = off;
    x->qbytes -= (uint32_t)done;
    if (x->qhead < 0) x->qtail = -1;
  }
  return done;
}

static ssize_t ring_take(struct ch_sched *s, int fd, const struct ch_io_rx *rx, uint8_t *empty)
{
  struct ch_ring *r = ring_of(s);
  *empty = 0;
  struct rfd *x = rfd_find(r, fd);
  if (!x) return -EAGAIN;
  if (x->qbytes) {
    struct iovec b;
    int e = rx->alloc(rx->ctx, rx->want, &b);
    if (e < 0) return e;
    if (!b.iov_len) return 0;
    size_t n = copy_out(r, x, b.iov_base, b.iov_len, rx->flags & CH_RX_PEEK);
    *empty = !x->qbytes && !x->recv_on && x->last_short;
    return (ssize_t)n;
  }
  if (x->err) {
    int e = x->err;
    if (!(rx->flags & CH_RX_PEEK)) x->err = 0;
    return e;
  }
  if (x->eof) return 0;
  if (x->send_err) {
    int e = x->send_err;
    x->send_err = 0;
    return e;
  }
  return x->recv_on ? -EINPROGRESS : -EAGAIN;
}

static int ring_recv(struct ch_sched *s, int fd, struct ch_fd *f, const struct ch_io_rx *rx)
{
  struct ch_ring *r = ring_of(s);
  if (!r->br) return -ENOTSUP;
  struct rfd *x = rfd_get(r, fd, f);
  if (!x) return -ENOMEM;
  if (x->recv_on) return 0;
  unsigned free_bufs = NBUFS - r->held;
  if (!free_bufs) {
    r->nobufs++;
    return -ENOBUFS;
  }
  struct io_uring_sqe *e = entry(r);
  if (!e) return -EBUSY;
  /* A stream reads ahead (one multishot receive, which stays armed) while
  ** buffers are plentiful; another reader gets one receive per wait. */
  int multi = (rx->flags & CH_RX_AHEAD) && free_bufs > LOW_BUFS && !r->no_multishot;
  if (multi) io_uring_prep_recv_multishot(e, fd, NULL, 0, 0);
  else io_uring_prep_recv(e, fd, NULL, 0, 0);
  /* POLL_FIRST: the caller comes here after a read said EAGAIN (or the
  ** judgement knew it would), so the kernel skips its own first try,
  ** which would fail the same way, and arms its poll at once. Not on a
  ** multishot receive: with it, an EOF that came with the first bytes was
  ** never reported (6.18: the receive stayed armed after them). */
  if (!multi) e->ioprio |= IORING_RECVSEND_POLL_FIRST;
  e->flags |= IOSQE_BUFFER_SELECT;
  e->buf_group = BGID;
  post(r, e, x, OP_RECV);
  x->recv_on = multi ? 2 : 1;
  x->recv_stop = 0;
  return 0;
}

static void on_recv(struct ch_ring *r, struct rfd *x, int res, unsigned flags)
{
  int more = (flags & IORING_CQE_F_MORE) != 0;
  int id = flags & IORING_CQE_F_BUFFER ? (int)(flags >> IORING_CQE_BUFFER_SHIFT) : -1;
  int was = x->recv_on;
  if (id >= 0) r->held++;
  if (!more) {
    x->recv_on = 0;
    x->recv_stop = 0;
  }
  if (res > 0 && id >= 0 && !x->closed) {
    r->blen[id] = (uint32_t)res;
    r->bnext[id] = -1;
    if (x->qtail >= 0) r->bnext[x->qtail] = id;
    else x->qhead = id;
    x->qtail = id;
    x->qbytes += (uint32_t)res;
    x->last_short = res < BUF_SIZE;
    /* Back-pressure: a reader this far behind gets no more ahead of it. */
    if (more && x->qbytes >= AHEAD_MAX && !x->recv_stop) {
      cancel(r, x, OP_RECV);
      x->recv_stop = 1;
    }
    report(x, POLLIN);
    return;
  }
  if (id >= 0) buf_give(r, id);
  if (x->closed) return;
  if (res == 0) {
    x->eof = 1;
    report(x, POLLIN | POLLRDHUP);
  } else if (res == -ENOBUFS) {
    /* Every buffer is out: the reader wakes, finds nothing held and reads
    ** the socket itself (the readiness way) until buffers come back. */
    r->nobufs++;
    report(x, POLLIN);
  } else if (res == -EINVAL && was == 2) {
    r->no_multishot = 1;   /* a kernel before 6.0: single-shot from now on */
    report(x, POLLIN);
  } else if (res == -ECANCELED || res == -EINTR) {
    report(x, POLLIN);     /* a stopped receive: its reader looks again */
  } else if (res < 0) {
    x->err = res;
    report(x, POLLIN | POLLERR);
  }
}

/* -- Sending ------------------------------------------------------------------- */

/* Posts the send of everything x has queued. */
static void send_queued(struct ch_ring *r, struct rfd *x)
{
  struct io_uring_sqe *e = entry(r);
  if (!e) {
    /* Nothing can be posted now: the bytes wait for the next send or
    ** completion of this fd to go (rare: the completion queue is full). */
    return;
  }
  io_uring_prep_send(e, x->fd, x->wb + x->wstart, x->wend - x->wstart, MSG_NOSIGNAL);
  post(r, e, x, OP_SEND);
  x->wsent = x->wend - x->wstart;
}

/* Bytes queued on x are all sent (or dropped): its buffer goes back, a
** shutdown that waited is made, a closed fd's dup is closed. */
static void send_drained(struct ch_ring *r, struct rfd *x)
{
  wb_give(r, x);
  x->stalled = 0;
  recount(r, x);
  if (x->shut) {
    ch_libc.shutdown(x->fd, x->shut - 1);
    x->shut = 0;
  }
  if (x->closed == 2) {
    ch_timer_stop(&x->orphan);
    ch_libc.close(x->fd);
    x->fd = -1;
  }
}

static void on_send(struct ch_ring *r, struct rfd *x, int res)
{
  x->wsent = 0;
  if (res < 0) {
    /* The bytes cannot go: the error waits for the next send, receive or
    ** close, and the fd's waiters (a sender waiting for room, a write
    ** waiting for the queue) wake to see it. */
    if (!x->closed) x->send_err = res;
    x->wstart = x->wend;
    send_drained(r, x);
    report(x, POLLOUT | POLLERR);
    return;
  }
  x->wstart += (uint32_t)res;
  if (x->wstart < x->wend) send_queued(r, x);   /* the rest, or bytes queued meanwhile */
  else send_drained(r, x);
  report(x, POLLOUT);
}

static int ring_queued(struct ch_sched *s, int fd)
{
  struct ch_ring *r = ring_of(s);
  struct rfd *x = rfd_find(r, fd);
  return x && wb_pending(x);
}

/* Appends up to n bytes of p to x's queue: the count taken. */
static size_t queue_bytes(struct ch_ring *r, struct rfd *x, const char *p, size_t n)
{
  if (!x->wb) {
    x->wb = r->nwcache ? r->wcache[--r->nwcache] : malloc(SEND_BUF);
    if (!x->wb) return 0;
    x->wstart = x->wend = 0;
    recount(r, x);
  } else if (!x->wsent && x->wstart) {   /* nothing in flight: compact */
    memmove(x->wb, x->wb + x->wstart, x->wend - x->wstart);
    x->wend -= x->wstart;
    x->wstart = 0;
  }
  size_t room = SEND_BUF - x->wend;
  if (n > room) n = room;
  memcpy(x->wb + x->wend, p, n);
  x->wend += (uint32_t)n;
  return n;
}

static int ring_send(struct ch_sched *s, int fd, struct ch_fd *f, const struct iovec *iov, int n,
                     int64_t timeout_ms)
{
  struct ch_ring *r = ring_of(s);
  struct rfd *x = rfd_find(r, fd);
  if (x && x->send_err) {
    int e = x->send_err;
    x->send_err = 0;
    return e;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) total += iov[i].iov_len;
  int queued = x && wb_pending(x);
  /* Nothing queued: a large send goes straight from the caller's bytes
  ** (what the kernel does not take is queued or waited for by the
  ** readiness way). Bytes that do not fit the queue's room need a caller
  ** that may park to wait for more (asked only then: the host's check
  ** walks the Lua stack); one that may not goes the readiness way, which
  ** blocks (after the queue, if there is one). */
  if (!queued && total >= SEND_DIRECT) return -ENOTSUP;
  size_t room = !x || !x->wb ? SEND_BUF : x->wsent ? SEND_BUF - x->wend
                                                   : SEND_BUF - (x->wend - x->wstart);
  if (total > room) {
    struct ch_coro *c = ch_current();
    if (!c || !ch_sched_may_park(c)) return -ENOTSUP;
  }
  if (!x && !(x = rfd_get(r, fd, f))) return -ENOTSUP;
  for (int i = 0; i < n; i++) {
    const char *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left) {
      size_t k = queue_bytes(r, x, p, left);
      if (k && !x->wsent) send_queued(r, x);
      p += k;
      left -= k;
      if (!left) break;
      if (!x->wb) return -ENOMEM;
      /* Full: wait until the kernel takes some. The send in flight
      ** reports POLLOUT when it completes. */
      int w = ch_fdwait_wait(fd, POLLOUT, timeout_ms, 0);
      if (rfd_find(r, fd) != x) return -EBADF;
      if (w < 0) {
        /* The caller is told; what is queued still goes, but a peer that
        ** reads nothing no longer keeps the loop from ending. */
        x->stalled = 1;
        recount(r, x);
        return w;
      }
      if (x->send_err) {
        int e = x->send_err;
        x->send_err = 0;
        return e;
      }
    }
  }
  return 0;
}

static int ring_shutdown(struct ch_sched *s, int fd, int how)
{
  struct ch_ring *r = ring_of(s);
  struct rfd *x = rfd_find(r, fd);
  if (!x || !wb_pending(x)) return -EAGAIN;
  x->shut = (uint8_t)(how + 1);
  return 0;
}

/* A closed fd's sends did not finish in time: they are cancelled. */
static void orphan_expired(struct ch_timer *t)
{
  struct rfd *x = (struct rfd *)(void *)((char *)t - offsetof(struct rfd, orphan));
  struct ch_sched *s = ch_sched_tls;
  if (!s || s->be != &ch_backend_uring || !x->wsent) return;
  cancel(ring_of(s), x, OP_SEND);
}

/* -- Close ---------------------------------------------------------------------- */

static void rfd_detach(struct ch_ring *r, struct rfd *x)
{
  if (r->rfds[x->fd] == x) r->rfds[x->fd] = NULL;
  x->closed = 1;
  drop_input(r, x);
  if (x->recv_on && !x->recv_stop) cancel(r, x, OP_RECV);
  if (x->polls & POLLIN) cancel(r, x, OP_POLL_IN);
  if (x->polls & POLLOUT) cancel(r, x, OP_POLL_OUT);
  x->recv_stop = 1;
  rfd_release(r, x);
}

/* Makes the cancels just posted now, before the real close. An operation
** in flight holds the file: until the kernel has ended it, close(2) does
** not end the connection (no FIN), and a peer could see this process's
** next connection before the end of this one, as on epoll it never does;
** a listener would stay bound and take connections (SO_REUSEPORT hashes
** them to it) that its end then resets; and a thread that ends first
** leaves the file to the ring's teardown, which may take a second.
** GETEVENTS: with DEFER_TASKRUN a cancelled operation lets go of the file
** only when the thread enters to wait. Its completion is reaped later. */
static void cancel_now(struct ch_ring *r)
{
  io_uring_submit_and_get_events(&r->ring);
  r->turn++;
}

static int ring_close(struct ch_sched *s, int fd, struct ch_fd *f)
{
  (void)f;
  struct ch_ring *r = ring_of(s);
  if (!r) return 0;
  struct rfd *x = rfd_peek(r, fd);
  if (!x) return 0;
  int err = x->send_err;
  /* A receive or a poll that would stay armed (a send in
  ** flight ends by itself, and after a close its file is the dup's). */
  int armed = x->recv_on || x->polls;
  /* An operation posted since the last enter names fd by its number,
  ** which the kernel looks up when it submits it: that must happen
  ** before the real close, or it could find another file there. */
  if (x->posted_turn == r->turn + 1) {
    io_uring_submit(&r->ring);
    r->turn++;
  }
  if (wb_pending(x)) {
    /* Queued bytes still go out, after the close: on a dup of fd (the
    ** send in flight holds the file already). Without one they are lost,
    ** as close(2) loses nothing else. */
    int dup = ch_libc.fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup >= 0) {
      r->rfds[fd] = NULL;
      x->fd = dup;
      x->closed = 2;
      drop_input(r, x);
      if (x->recv_on && !x->recv_stop) cancel(r, x, OP_RECV);
      if (x->polls & POLLIN) cancel(r, x, OP_POLL_IN);
      if (x->polls & POLLOUT) cancel(r, x, OP_POLL_OUT);
      x->recv_stop = 1;
      if (!x->wsent) send_queued(r, x);
      ch_timer_start(&x->orphan, ORPHAN_MS, orphan_expired);
      if (armed) cancel_now(r);
      return err;
    }
    x->wstart = x->wend;
    if (!x->wsent) send_drained(r, x);
  }
  rfd_detach(r, x);   /* may free x */
  if (armed) cancel_now(r);
  return err;
}

/* -- The loop's wait ------------------------------------------------------------ */

static void arm_wake(struct ch_sched *s, struct ch_ring *r)
{
  struct io_uring_sqe *e = entry(r);
  if (!e) return;   /* the next turn tries again */
  io_uring_prep_poll_multishot(e, s->wakefd, POLLIN);
  io_uring_sqe_set_data64(e, UD_WAKE);
  r->wake_armed = 1;
}

/* Completes one operation. */
static void complete(struct ch_sched *s, struct ch_ring *r, struct io_uring_cqe *cqe)
{
  uint64_t u = cqe->user_data;
  if (u == UD_CANCEL) return;
  if (u == UD_WAKE) {
    if (!(cqe->flags & IORING_CQE_F_MORE)) r->wake_armed = 0;
    ch_sched_wake_drain(s);
    r->woken = 1;
    return;
  }
  struct rfd *x = (struct rfd *)(uintptr_t)(u & ~(uint64_t)7);
  int kind = (int)(u & 7), res = cqe->res;
  unsigned flags = cqe->flags;
  int last = !(flags & IORING_CQE_F_MORE);
  switch (kind) {
  case OP_POLL_IN:  on_poll(x, POLLIN, res); break;
  case OP_POLL_OUT: on_poll(x, POLLOUT, res); break;
  case OP_RECV:     on_recv(r, x, res, flags); break;
  case OP_SEND:     on_send(r, x, res); break;
  default: ch_panic("ring: completion of kind %d", kind);
  }
  if (last) {
    r->inflight--;
    x->inflight--;
    rfd_release(r, x);
  }
}

/* Submits what is queued, waits up to timeout_ms (-1: no limit, 0: not at
** all) for a completion, and completes what is in. */
static void reap(struct ch_sched *s, struct ch_ring *r, int timeout_ms)
{
  if (!r->wake_armed) arm_wake(s, r);
  int e;
  if (timeout_ms == 0) {
    e = io_uring_submit_and_get_events(&r->ring);
  } else {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { timeout_ms / 1000, (long long)(timeout_ms % 1000) * 1000000 };
    e = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, timeout_ms < 0 ? NULL : &ts, NULL);
  }
  r->turn++;
  /* ETIME: the timeout; EINTR: a signal; EBUSY, EAGAIN: completions back
  ** up, which the reaping below relieves. */
  if (e < 0 && e != -ETIME && e != -EINTR && e != -EBUSY && e != -EAGAIN)
    ch_panic("io_uring_enter: %s", strerror(-e));
  /* Completions are copied out and marked seen before they are made:
  ** making one may run a watch's callback, which may close fds, submit,
  ** or (from a coroutine that may not park) reap again. */
  r->reaping = 1;
  for (;;) {
    struct io_uring_cqe *cqe, batch[REAP_BATCH];
    unsigned head, n = 0;
    io_uring_for_each_cqe(&r->ring, head, cqe) {   /* no system call */
      batch[n++] = *cqe;
      if (n == REAP_BATCH) break;
    }
    if (!n) break;
    io_uring_cq_advance(&r->ring, n);
    for (unsigned i = 0; i < n; i++) complete(s, r, &batch[i]);
  }
  r->reaping = 0;
}

static int ring_poll(struct ch_sched *s, int timeout_ms)
{
  struct ch_ring *r = ring_of(s);
  reap(s, r, timeout_ms);
  int woken = r->woken;
  r->woken = 0;
  return woken;
}

/* Blocks in the ring's own wait while what the caller waits for on fd is
** an operation of the ring's (a receive, queued sends): the
** socket's readiness, which poll(2) would see, is not it. Completions of
** other fds are made meanwhile, as the loop would (their coroutines run
** when this one lets them). */
static int ring_block(struct ch_sched *s, int fd, int events, int64_t ms)
{
  struct ch_ring *r = ring_of(s);
  if (r->reaping) return -ENOTSUP;
  struct rfd *x = rfd_find(r, fd);
  if (!x) return -ENOTSUP;
  int in = (events & POLLIN) && x->recv_on;
  int out = (events & POLLOUT) && wb_pending(x);
  if (!in && !out) return -ENOTSUP;
  uint64_t deadline = ms > 0 ? ch_now_ns() + (uint64_t)ms * 1000000u : 0;
  for (;;) {
    int left = -1;
    if (deadline) {
      uint64_t now = ch_now_ns();
      if (now >= deadline) return -ETIMEDOUT;
      left = (int)((deadline - now + 999999) / 1000000);
    } else if (ms == 0) {
      left = 0;
    }
    reap(s, r, left);
    if (rfd_find(r, fd) != x) return -EBADF;
    int got = 0;
    if ((events & POLLIN) && (x->qbytes || x->err || x->eof || !x->recv_on))
      got |= POLLIN;
    if ((events & POLLOUT) && !wb_pending(x)) got |= POLLOUT;
    if (got) return got;
    if (ms == 0) return -ETIMEDOUT;
  }
}

/* -- For stats and tests ---------------------------------------------------------- */

uint64_t ch_ring_posted(const struct ch_sched *s)
{
  return s->be == &ch_backend_uring && ring_of(s) ? ring_of(s)->posted : 0;
}

uint64_t ch_ring_nobufs(const struct ch_sched *s)
{
  return s->be == &ch_backend_uring && ring_of(s) ? ring_of(s)->nobufs : 0;
}

void ch_ring_held(const struct ch_sched *s, int fd, uint32_t *in, uint32_t *out)
{
  const struct ch_ring *r = s->be == &ch_backend_uring ? ring_of(s) : NULL;
  const struct rfd *x = r ? rfd_peek(r, fd) : NULL;
  *in = x ? x->qbytes : 0;
  *out = x ? x->wend - x->wstart : 0;
}

const struct ch_backend ch_backend_uring = {
  .name = "uring",
  .kind = CH_IO_URING,
  .init = ring_init,
  .fini = ring_fini,
  .poll = ring_poll,
  .arm = ring_arm,
  .close = ring_close,
  .watched = ring_watched,
  .inflight = ring_inflight,
  .pending = ring_pending,
  .held = ring_held,
  .take = ring_take,
  .recv = ring_recv,
  .send = ring_send,
  .queued = ring_queued,
  .shutdown = ring_shutdown,
  .accept = NULL,   /* see "Accepting" at the top */
  .block = ring_block,
  .forked = ring_forked,
};

#else /* !CH_RING_LIBURING */

/* Without liburing the table can only refuse: a scheduler asked for it
** stays on epoll, with -ENOSYS as the reason. */
static int ring_init(struct ch_sched *s)
{
  (void)s;
  return -ENOSYS;
}

uint64_t ch_ring_posted(const struct ch_sched *s) { (void)s; return 0; }
uint64_t ch_ring_nobufs(const struct ch_sched *s) { (void)s; return 0; }
void ch_ring_held(const struct ch_sched *s, int fd, uint32_t *in, uint32_t *out)
{
  (void)s; (void)fd;
  *in = *out = 0;
}

const struct ch_backend ch_backend_uring = {
  .name = "uring",
  .kind = CH_IO_URING,
  .init = ring_init,
};

#endif
