/*
** cohost runtime: native coroutines on mmap'd stacks, one epoll scheduler per
** thread, timers, and libc hooks that turn blocking socket calls made inside
** a coroutine into waits on the scheduler. Link with
**   build/libcohost.a -ldl -lpthread
** and the hooks are active: read(2) on a socket inside a coroutine parks the
** coroutine instead of the thread.
**
** Conventions: functions return 0 (or a value >= 0) on success and -errno
** on failure; nothing here prints. A function whose comment starts with
** "Yields." may switch to another coroutine before it returns. Every
** scheduler is per thread and created on first use; coroutines never move
** between threads.
*/
#ifndef CH_COHOST_H
#define CH_COHOST_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ch_coro;   /* a coroutine (opaque) */
struct ch_sched;  /* a thread's scheduler (opaque) */

/* -- Coroutines ---------------------------------------------------------- */

/* Creates a READY coroutine running fn(arg) on this thread's scheduler.
** Returns its id (> 0) or -errno (-ENOMEM when no stack can be had). Works
** before ch_run and from inside coroutines. */
int ch_spawn(void (*fn)(void *), void *arg);

/* Priority classes. Each scheduler keeps one ready queue per class and
** runs the highest class with a ready coroutine, with a starvation guard:
** a NORMAL or LOW class that has ready coroutines waits through 7 runs of
** other classes at most (8 when both come due at once), then runs one.
** So under a flood of HIGH work NORMAL and LOW each still get about 1/8
** of the runs (1/9 at worst); a fresh contest starts with strict priority.
** Within a class, FIFO. A class decides when a ready coroutine runs, not
** for how long: a coroutine runs until it yields or blocks. */
enum { CH_PRIO_HIGH = 0, CH_PRIO_NORMAL = 1, CH_PRIO_LOW = 2 };

/* ch_spawn in class prio (CH_PRIO_*); -EINVAL for another value. ch_spawn
** is ch_spawn_prio(fn, arg, CH_PRIO_NORMAL). */
int ch_spawn_prio(void (*fn)(void *), void *arg, int prio);

/* Moves c to class prio: a queued (ready) coroutine goes to the back of its
** new class's queue (O(queue length)), any other joins it at its next
** wakeup. The running coroutine keeps running. Returns 0 or -EINVAL. */
int ch_coro_set_priority(struct ch_coro *c, int prio);

/* c's class, CH_PRIO_*. */
int ch_coro_priority(const struct ch_coro *c);

/* Fairness of this thread's scheduler: coroutines that keep yielding
** without blocking switch straight to each other in batches, and between
** batches the scheduler expires timers and polls epoll (timeout 0). A
** batch ends when no coroutine is ready, after `switches` direct switches
** or once it has run `usec` microseconds, whichever comes first; 0 usec
** lifts the time limit (and its clock reads). Defaults: 1000000 switches
** (the time budget rules), 1000 us. The time is read at a batch's switches
** 1, 2, 4, ..., 64 and then every 64, so a batch overshoots by 2x or by
** 64 slices at most; a coroutine that never yields is not interrupted.
** Returns 0, or -EINVAL for switches outside 1..1000000 or usec over
** 10000000. */
int ch_sched_set_fairness(unsigned switches, unsigned usec);

/* Installs fn to run when this thread's scheduler trims after a burst: a
** second with no coroutine spawned or ended and no fd closed (the idle
** trim, docs/stacks.md). It runs in the loop, never in a coroutine, before
** the runtime gives its own memory back (the warm stacks beyond the
** pool's watermark, malloc_trim), so what fn frees goes back with it; at
** most once per idle spell. fn must not yield. NULL removes it. Returns 0,
** or -errno if the scheduler cannot be created. */
int ch_sched_set_idle_hook(void (*fn)(void));

/* Runs this thread's scheduler until no coroutine and no timer is left, or
** until ch_stop. Returns 0, -EDEADLK when called from a coroutine, or
** -errno if the scheduler cannot be created. May be called again later. */
int ch_run(void);

/* Makes the running ch_run return once the current batch has run; the
** coroutines stay where they are for the next ch_run. */
void ch_stop(void);

/* Yields. Puts the caller at the back of the ready queue. Outside a
** coroutine it does nothing. */
void ch_yield(void);

/* Yields. Sleeps ms milliseconds (0 is ch_yield). Returns 0, or -ECANCELED
** when the coroutine was cancelled. Outside a coroutine it sleeps the
** thread. */
int ch_sleep_ms(int64_t ms);

/* -- I/O ------------------------------------------------------------------ */

/* The runtime's one I/O path, which the hooks stand on too. Each call is
** made at once and, where the fd has nothing (EAGAIN), waits for it:
** parked in the scheduler when the caller is a coroutine that may park
** (ch_coro_set_may_yield, ch_set_yield_check), else blocking the thread in
** poll(2), as libc would. A socket or pipe given here is made non-blocking
** in the kernel if it is not (as the hooks do; what fcntl shows the user
** does not change); an inherited pipe or tty keeps its flags and is waited
** for before each call. timeout_ms < 0 waits forever, 0 never waits
** (-EAGAIN where it would), > 0 bounds the call's waits. Each returns a
** count (>= 0; 0 from a read is EOF) or -errno: -ETIMEDOUT, -ECANCELED
** (the coroutine was cancelled), -EBADF (closed meanwhile), or the
** system call's own error. A read that came back short emptied the
** socket: until epoll reports input again, the next read is not made
** (it could only say EAGAIN) and the caller waits first, which saves one
** system call per message on a request/response stream. */

/* Yields. One read of at most n bytes: returns as soon as any arrived. */
ssize_t ch_io_read(int fd, void *buf, size_t n, int64_t timeout_ms);

/* Yields. One readv. */
ssize_t ch_io_readv(int fd, const struct iovec *iov, int iovcnt, int64_t timeout_ms);

/* Yields. One write: waits for room, then returns what the kernel took
** (> 0, maybe fewer than n on a stream: call again for the rest). On a
** socket it is send(MSG_NOSIGNAL): a peer gone away is -EPIPE, never
** SIGPIPE. */
ssize_t ch_io_write(int fd, const void *buf, size_t n, int64_t timeout_ms);

/* Yields. One writev (sendmsg with MSG_NOSIGNAL on a socket), as
** ch_io_write. */
ssize_t ch_io_writev(int fd, const struct iovec *iov, int iovcnt, int64_t timeout_ms);

/* Yields. accept4(fd, addr, len, flags), waiting for a connection. Returns
** the new fd or -errno. */
int ch_io_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags, int64_t timeout_ms);

/* Yields. Connects fd to addr within timeout_ms: 0, or -errno (the
** connection's error, -ETIMEDOUT, -ECANCELED; -EAGAIN when a unix
** socket's listener kept its backlog full until the timeout, retried
** every 10 ms meanwhile). timeout_ms 0 returns -EINPROGRESS once started. */
int ch_io_connect(int fd, const struct sockaddr *addr, socklen_t len, int64_t timeout_ms);

/* Yields. Waits until fd is ready for events (POLLIN, POLLOUT, or both):
** returns the ready poll events (> 0: those asked for plus POLLERR and
** POLLHUP, as poll(2) reports them), -ETIMEDOUT, -ECANCELED, -EBADF if fd
** is closed meanwhile, -EINVAL for no events. Looks first (one poll(2))
** unless a call through this API just said EAGAIN in every direction
** asked and nothing came since; a regular file is always ready. Outside a
** coroutine it blocks the thread, as poll(2). */
int ch_io_wait(int fd, int events, int64_t timeout_ms);

/* Yields. One receive from fd, a stream socket (or pipe), for a caller
** that keeps a buffer of its own (libuv's uv_read_start shape): waits
** until bytes are there (or EOF, or an error), then asks alloc for room
** and puts them there. alloc(ctx, hint, buf) fills *buf with room for at
** least one byte (hint: want, the room asked for; bytes beyond the room
** given wait for the next call) and returns 0, or -errno, which
** ch_io_recv then returns. It is called only when bytes are there, so a
** caller parked here holds no buffer: with epoll once the socket is not
** known empty (the read is made into the room; if that read still finds
** nothing, alloc is called again with buf NULL, and may let the room go
** before the wait); with io_uring when a receive completed into one of
** the ring's buffers, whose bytes are copied into the room. Returns the
** bytes put in the room (> 0), 0 at EOF, or -errno as ch_io_read (timeout
** 0: -EAGAIN when nothing is there).
**
** On io_uring the receive reads ahead of its caller: a multishot receive
** stays armed on fd and takes what comes into the ring's buffers, at most
** a few buffers per connection before it is stopped (the rest waits in
** the socket, so TCP's window still closes on a slow reader), and at most
** the ring's buffers in all (then receives wait for readiness and read
** into the caller's room, as on epoll). Every read of fd through this API
** and the hooks gets the bytes held first, in order. */
ssize_t ch_io_recv(int fd, size_t want, int (*alloc)(void *ctx, size_t hint, struct iovec *buf),
                   void *ctx, int64_t timeout_ms);

/* Yields. Sends every byte of iov[0..n) on fd, a stream socket, advancing
** the array past what it sent: 0, or -errno (what was not sent is then
** what iov still says, on epoll; unknown on io_uring). timeout_ms bounds
** each wait for room (a wait that ends in progress starts it again:
** nginx's send_timeout). With epoll it writes until the kernel has taken
** every byte. With io_uring it may return once the bytes are queued
** (write-behind, as libuv's uv_write): they are copied into a bounded
** buffer of the connection's and posted with the loop's next
** io_uring_enter, with everything else; a full buffer parks the caller
** until the kernel has taken some. A queued send's error is returned by
** the next ch_io_send or ch_io_recv on fd, or by close(2). Writes and
** shutdown(2) of fd through this API and the hooks go after the queued
** bytes; close(2) lets them finish (on a dup of fd, for a minute at
** most). */
int ch_io_send(int fd, struct iovec *iov, int n, int64_t timeout_ms);

/* Non-zero when fd has nothing to read and no EOF, known without a
** system call: the backend has a receive in flight on fd that holds
** nothing yet (io_uring), or the last read through this API emptied fd
** and the backend watches it (epoll: a wait registered it; io_uring: an
** input poll is in flight) and has reported nothing since, so that bytes
** or an EOF arriving would have been reported. A socket nobody waits on
** (an idle pooled connection) is quiet by this only if nothing came since
** its last read. 0 means unknown: look (a peek). Never yields. */
int ch_io_input_quiet(int fd);


/* Yields. Waits until the bytes ch_io_send queued for fd are all in the
** kernel: before writing to fd by other means than this API and the hooks
** (sendfile(2), splice(2)), which would overtake them. 0 at once when
** nothing is queued (always, on epoll), -ETIMEDOUT, -ECANCELED, -EBADF,
** or -EAGAIN with timeout 0 while some are. A queued send's error is the
** next ch_io_send's or ch_io_recv's. */
int ch_io_flush(int fd, int64_t timeout_ms);

/* A one-shot readiness callback that needs no coroutine: what lets a
** server keep an idle keep-alive connection with no stack at all, and bind
** a coroutine only when input arrives. */
struct ch_watch {
  void *priv[6];                  /* the runtime's; do not touch */
  void (*cb)(struct ch_watch *w, int revents);
  void *data;                     /* the caller's */
};

/* Calls cb(w, revents) once, from the scheduler loop, the next time epoll
** reports fd ready for events (POLLIN or POLLOUT, one direction): revents
** as ch_io_wait reports them, POLLNVAL if fd is closed first. The fd is
** edge-triggered: watch it only after a call on it said EAGAIN (or on a
** new fd, whose first registration reports its current state), as
** ch_io_read's -EAGAIN with timeout 0 says. cb must
** not yield; it may spawn, unwatch w, or watch w again. A watch does not
** keep ch_run running. In COPY stack mode w must not be on a coroutine's
** stack. Returns 0, -EBUSY if w is armed, -EPERM if epoll refuses fd,
** -ENOMEM. */
int ch_watch_fd(struct ch_watch *w, int fd, int events,
                void (*cb)(struct ch_watch *w, int revents));

/* Disarms w if it is armed; its callback will not run. */
void ch_unwatch_fd(struct ch_watch *w);

/* Id of the running coroutine, or 0 outside one. */
int ch_self(void);

/* The running coroutine, or NULL outside one. Read inline from a
** thread-local the scheduler sets at every switch (sched.c): the hooks
** and the host's C-call marker ask for it several times a message. */
extern __thread struct ch_coro *ch_running;
static inline struct ch_coro *ch_current(void) { return ch_running; }

/* Id of c. */
int ch_coro_id(const struct ch_coro *c);

/* -- Parking: the primitive under wait queues ---------------------------- */

/* Yields. Parks the running coroutine until ch_unpark or timeout_ms (< 0:
** never). Returns the value given to ch_unpark, -ETIMEDOUT, or -ECANCELED.
** -EINVAL outside a coroutine. */
int ch_park(int64_t timeout_ms);

/* Makes the parked coroutine c READY; its ch_park returns value (>= 0).
** Returns 0, or -EALREADY if c is not parked (woken before, or running).
** Must be called on c's own thread (see ch_post for others). */
int ch_unpark(struct ch_coro *c, int value);

/* What a parked coroutine waits for, as the runtime noted where it parked
** it (struct ch_coro_info's wait). The fd waits are poll(2)'s bits, so
** that an fd's park notes its events as they are. */
enum {
  CH_WAIT_NONE = 0,     /* not parked (or parked where nothing was noted) */
  CH_WAIT_READ = 1,     /* POLLIN: fd to become readable (a read, a
                        ** receive, an accept) */
  CH_WAIT_WRITE = 4,    /* POLLOUT: fd to take more (a write, a send, a
                        ** connect) */
  CH_WAIT_POLL = 5,     /* both, or several fds (poll, select): fd is the
                        ** first */
  CH_WAIT_QUEUE = 8,    /* a wait queue (ch_waitq_wait) */
  CH_WAIT_SLEEP,        /* its timer alone (ch_sleep_ms, a hooked sleep) */
  CH_WAIT_POOL,         /* a call on the thread pool (ch_pool_call) */
  CH_WAIT_PARK          /* ch_park: a ch_unpark by the embedder */
};

/* What a coroutine is doing, for an inspector (a task dump) running on
** the coroutine's own thread: nothing here is safe to read from another. */
struct ch_coro_info {
  int state;                /* CH_INFO_* */
  int wait;                 /* CH_WAIT_* while parked, else CH_WAIT_NONE */
  int fd;                   /* the fd it waits on; -1: none */
  uint64_t deadline_ns;     /* its park's deadline (ch_now_ns clock); 0: none */
};
enum { CH_INFO_RUNNING, CH_INFO_READY, CH_INFO_PARKED, CH_INFO_ENDED };

/* Fills *out for c (READY covers a coroutine spawned that never ran, and
** one woken that has not run since). Reads a few fields, allocates
** nothing. */
void ch_coro_info(const struct ch_coro *c, struct ch_coro_info *out);

/* Cancels c: its current or next wait returns -ECANCELED, and so does
** every later one (the flag stays set). A hooked libc call cannot say
** ECANCELED (no C library expects it, and retry loops would spin), so it
** returns what libc returns when a timeout expires: read/write/accept fail
** with EAGAIN (or return the bytes already moved), connect with
** EINPROGRESS, poll and select return 0, and the sleeps return early with
** success. Embedders notice through ch_cancel_hits (the Lua host raises a
** "cancelled" error when the C function returns). */
void ch_cancel(struct ch_coro *c);

/* Non-zero if c was cancelled. */
int ch_cancelled(const struct ch_coro *c);

/* Where four fields of struct ch_coro lie, for the inline readers below:
** the host's C-call marker reads them on every Lua C function call (twice
** per echoed message, host/vm/ljvm.c), where a call each cost more than
** the load. runtime/coro.h pins them with _Static_assert. */
#define CH_CORO_OFS_UDATA       24   /* void * */
#define CH_CORO_OFS_CANCEL_HITS 52   /* uint32_t */
#define CH_CORO_OFS_STACK_BASE  56   /* char *: lowest usable byte */
#define CH_CORO_OFS_STACK_SIZE  64   /* size_t: usable bytes */
#define CH_CORO_FIELD(c, ofs, type) (*(type const *)((const char *)(c) + (ofs)))

/* How many of c's waits have returned -ECANCELED, hooks' included: compare
** before and after a call to tell whether cancellation cut it short. */
static inline unsigned ch_cancel_hits(const struct ch_coro *c)
{
  return CH_CORO_FIELD(c, CH_CORO_OFS_CANCEL_HITS, uint32_t);
}

/* -- Wait queues --------------------------------------------------------- */

/* A FIFO of coroutines parked until another wakes them (Tarantool's
** fiber_cond): what a hand-written "the coroutine waiting here" slot does,
** for any number of waiters, with timeouts and cancellation. All zero is
** an empty queue. A queue belongs to one thread's coroutines; in COPY
** stack mode it must not be on a coroutine's stack. Wake every waiter
** (ch_waitq_wake_all) before the queue's memory goes. */
struct ch_waiter;
struct ch_waitq {
  struct ch_waiter *head;         /* the longest waiter; the runtime's */
  struct ch_waiter *tail;         /* the newest; the runtime's */
};

/* Yields. Parks the running coroutine at the back of q until a wake
** reaches it, timeout_ms passes (< 0: never) or it is cancelled. Returns
** 0 when woken by q, -ETIMEDOUT, -ECANCELED (also at once when already
** cancelled), what a direct ch_unpark gave, or -EINVAL outside a
** coroutine. However it returns, it is off q. */
int ch_waitq_wait(struct ch_waitq *q, int64_t timeout_ms);

/* Yields. ch_waitq_wait on the n queues qs[0..n) at once (n >= 1):
** returns 0 when a wake of any of them reaches the coroutine, or as
** ch_waitq_wait; -ENOMEM when more than two queues need nodes and no
** memory is left (nothing parked then). Off every queue when it returns. */
int ch_waitq_wait_any(struct ch_waitq *const *qs, int n, int64_t timeout_ms);

/* ch_waitq_wake_one's and ch_waitq_wake_all's work, out of line: the
** wakes are inline so that one on an empty queue, the usual case of a
** "something to do" kick, costs a load and a branch. */
int ch_waitq_wake(struct ch_waitq *q, int all);

/* Wakes q's longest waiter; one timed out or cancelled meanwhile (woken,
** not yet run) is skipped and taken off. Returns 1, or 0 when q had no
** waiter. Never yields; the woken coroutine runs later. */
static inline int ch_waitq_wake_one(struct ch_waitq *q)
{
  return q->head ? ch_waitq_wake(q, 0) : 0;
}

/* Wakes every waiter of q, in order; q is empty after. Returns how many
** were woken (skipped ones, as above, not counted). Never yields. */
static inline int ch_waitq_wake_all(struct ch_waitq *q)
{
  return q->head ? ch_waitq_wake(q, 1) : 0;
}

/* Non-zero when no coroutine is queued on q (one timed out or cancelled
** stays queued until it runs again). */
static inline int ch_waitq_empty(const struct ch_waitq *q)
{
  return q->head == NULL;
}

/* -- Growable buffers ---------------------------------------------------- */

/* Bytes that grow as they are appended to (Redis's sds, nginx's
** ngx_array_t), and the same for arrays: one growth rule, the capacity
** doubled (from a first capacity the caller picks) until what is asked
** fits, and one overflow check, for every buffer in cohost that grows.
** All zero is an empty buffer holding no memory. */
struct ch_buf {
  char *p;                        /* the bytes; owned; NULL until the first
                                  ** growth */
  size_t len;                     /* bytes in use; the caller moves it */
  size_t cap;                     /* bytes allocated at p */
};

/* Grows array p, of *cap elements of size bytes, to hold need elements
** (need > *cap): *cap doubled, or first (>= 1) when it is 0, until need
** fits; doubling makes n appends cost O(n) copying in all. Returns the
** array (p moved, or p itself) with *cap updated, or NULL when memory is
** short or need elements overflow a size_t (the check every caller used
** to write, or forget): then p is untouched and still the caller's. For
** arrays that keep their own count; bytes are easier in a struct ch_buf.
** Inline: an HTTP/2 stream's header bytes take their first 512 here, per
** request, where a call cost more than the rule. */
static inline void *ch_buf_grow(void *p, size_t size, size_t *cap, size_t need, size_t first)
{
  size_t c = *cap ? *cap : first ? first : 1, bytes;
  if (*cap) c = c <= SIZE_MAX / 2 ? c * 2 : SIZE_MAX;
  while (c < need) c = c <= SIZE_MAX / 2 ? c * 2 : SIZE_MAX;
  /* A doubling past what a size_t holds falls back to need itself. */
  if (__builtin_mul_overflow(c, size, &bytes) &&
      __builtin_mul_overflow(c = need, size, &bytes))
    return NULL;
  void *q = realloc(p, bytes);
  if (q) *cap = c;
  return q;
}

/* ch_buf_reserve's slow path. */
int ch_buf_expand(struct ch_buf *b, size_t n, size_t first);

/* Makes room for n more bytes after b->len (ch_buf_grow's rule, from
** first bytes). Returns 0, or -ENOMEM with b unchanged. */
static inline int ch_buf_reserve(struct ch_buf *b, size_t n, size_t first)
{
  return b->cap - b->len >= n ? 0 : ch_buf_expand(b, n, first);
}

/* Appends s[0..n) to b: 0, or -ENOMEM with b unchanged. */
int ch_buf_add(struct ch_buf *b, const void *s, size_t n, size_t first);

/* Frees b's bytes: b is empty again. */
void ch_buf_free(struct ch_buf *b);

/* -- Stack modes --------------------------------------------------------- */

/* Where a scheduler's coroutines keep their stacks (docs/stacks.md).
** SEPARATE: each coroutine owns an mmap'd stack (ch_set_stack_size) for its
** whole life; a switch is a register swap. COPY: the coroutines run on one
** shared stack (one per stack size in use); a coroutine that gives way to
** another has the used part of the shared stack, from its saved stack
** pointer to the top, copied to a heap buffer sized to fit, and copied
** back before it runs again. A parked coroutine then costs what it really
** uses (a few hundred bytes for a shallow park) instead of whole pages,
** and each switch between two coroutines costs two copies. In COPY mode no
** other coroutine, the loop, a timer or watch callback or a pool thread may
** touch memory on a parked coroutine's stack: see docs/stacks.md for what
** the runtime moved off the stack and what embedders must do. */
enum { CH_STACK_SEPARATE = 0, CH_STACK_COPY = 1 };

/* Sets this thread's scheduler's stack mode (CH_STACK_*). A new scheduler
** takes it from the environment variable CH_STACK_MODE ("copy" or
** "separate"; unset or empty: separate; any other value panics, as does
** "copy" in an ASan build, whose fiber annotations assume separate
** stacks). Returns 0, -EINVAL for another mode, -EBUSY while coroutines of
** this scheduler are alive, -ENOTSUP for COPY under ASan (CH_ASAN). */
int ch_sched_set_stack_mode(int mode);

/* This thread's scheduler's stack mode, CH_STACK_*, or -errno when the
** scheduler cannot be created. */
int ch_sched_stack_mode(void);

/* I/O backends. EPOLL: every call is made at once and, where it would
** block, waits for readiness in epoll (edge-triggered, one registration
** per fd). URING: an io_uring ring instead, and no epoll: waits for
** readiness are polls on the ring; ch_io_recv and ch_io_read of stream
** sockets receive into the ring's own buffers, ch_io_send queues its
** bytes and posts them (write-behind), ch_io_accept waits with a poll
** and accepts itself, as on epoll; all are posted with no system call
** and submitted together at the loop's next wait, which also reaps
** them. The hooks keep libc's meaning: a hooked read waits for
** readiness and makes its own call, partial transfers, errors and
** timeouts are the same.
** docs/runtime.md has the details. */
enum { CH_IO_EPOLL = 0, CH_IO_URING = 1 };

/* Sets this thread's scheduler's I/O backend (CH_IO_*). A new scheduler
** takes it from CH_IO_BACKEND ("uring" or "epoll"; unset or empty: epoll;
** any other value panics). Returns 0, -EINVAL for another backend,
** -EBUSY to leave URING while ring operations are in flight, or why the
** kernel refused a ring (the scheduler then stays on EPOLL): -ENOSYS (no
** io_uring in this build or kernel), -EPERM (kernel.io_uring_disabled,
** a seccomp filter), -ENOMEM. */
int ch_sched_set_io_backend(int backend);

/* This thread's scheduler's I/O backend, CH_IO_*, or -errno when the
** scheduler cannot be created. *why (if not NULL) gets the error of the
** last ring asked for that the kernel refused (by CH_IO_BACKEND or
** ch_sched_set_io_backend), 0 if none was. */
int ch_sched_io_backend(int *why);

/* Bytes of c's stack saved to the heap now: 0 in SEPARATE mode, and for a
** coroutine whose frames are on the shared stack (the running one, and
** the last one that ran there: saving is lazy, done only when another
** coroutine needs the stack). */
size_t ch_coro_saved_bytes(const struct ch_coro *c);

/* -- Per-coroutine settings ---------------------------------------------- */

/* Stack size for coroutines spawned from now on by this thread, rounded up
** to pages; 0 restores the default (256 KiB). Minimum 16 KiB. In COPY mode
** it is the size of the shared stack they run on (one per size in use, 4
** sizes at most per thread). */
int ch_set_stack_size(size_t bytes);

/* Bytes of c's stack left below the caller's frame, c being the running
** coroutine (the caller runs on its stack), and in *size the stack's usable
** size. For embedders that re-enter an interpreter and would rather raise an
** error than hit the guard (host/vm/cstack.c). Two loads and a subtraction;
** the frame address stands for the stack pointer, a few hundred bytes
** high at most. */
static inline size_t ch_coro_stack_left(const struct ch_coro *c, size_t *size)
{
  /* In COPY mode c's stack is the shared stack's, where c runs now. */
  const char *sp = (const char *)__builtin_frame_address(0);
  const char *lo = CH_CORO_FIELD(c, CH_CORO_OFS_STACK_BASE, char *);
  *size = CH_CORO_FIELD(c, CH_CORO_OFS_STACK_SIZE, size_t);
  return sp > lo ? (size_t)(sp - lo) : 0;
}

/* An opaque pointer the embedder keeps per coroutine (the Lua host keeps the
** coroutine's lua_State there). */
void ch_coro_set_udata(struct ch_coro *c, void *udata);
static inline void *ch_coro_udata(const struct ch_coro *c)
{
  return CH_CORO_FIELD(c, CH_CORO_OFS_UDATA, void *);
}

/* Whether hooks may park this coroutine (default 1). With 0 the hooks act
** like plain libc, blocking the thread. */
void ch_coro_set_may_yield(struct ch_coro *c, int on);

/* Whether c keeps ch_run running (default: it does). A weak coroutine
** (on != 0) runs like any other while the loop runs, but the loop returns
** once only weak coroutines are left, parked ones abandoned as at thread
** exit (a later ch_run resumes them), and the timeouts of its parks are
** weak timers: libuv's uv_unref for a coroutine. For helpers that only
** serve other coroutines, such as the HTTP/2 client's reader and writer
** of a pooled connection, which would otherwise keep a finished program
** running until the connection's idle timeout. */
void ch_coro_set_weak(struct ch_coro *c, int on);

/* A decision hook asked only when a hooked call on a coroutine that may
** yield would block: return non-zero to park, 0 to block like libc. Used by
** the Lua host to refuse parking inside FFI calls and finalizers. One per
** process; NULL removes it. */
void ch_set_yield_check(int (*check)(struct ch_coro *c));

/* Called on the resumed coroutine right after every switch back into it,
** before control returns to its code. One per process; NULL removes it. */
void ch_set_resume_hook(void (*hook)(struct ch_coro *c));

/* Called on the running coroutine as it parks, once what it waits for is
** noted (ch_coro_info) and before it switches away: with the resume hook,
** the edges of its time parked (the Lua host's slow-request report). One
** per process; NULL (the default) removes it, and then a park pays one
** load and one branch for it. */
void ch_set_park_hook(void (*hook)(struct ch_coro *c));

/* -- Timers -------------------------------------------------------------- */

/* A timer embedded in the caller's own struct. Callbacks run on the
** scheduler's own stack between coroutines and must not yield. In COPY
** stack mode the struct must not be on a coroutine's stack. */
struct ch_timer {
  uint64_t when_ns;               /* deadline, CLOCK_MONOTONIC ns; read-only */
  uint64_t seq;                   /* start order, breaks ties; read-only */
  void (*cb)(struct ch_timer *t); /* run on expiry; owner: caller */
  uint32_t heap_index;            /* heap slot + 1, 0 when stopped; owner: runtime */
  uint8_t weak;                   /* 1: does not keep ch_run running (libuv's
                                  ** uv_unref), e.g. idle-connection expiry;
                                  ** set before starting; owner: caller */
};

/* Arms t to call cb after ms milliseconds on this thread's scheduler;
** restarting an armed timer moves it. Timers with equal deadlines fire in
** the order they were started. An armed timer keeps ch_run running
** unless t->weak.
** O(log n). Returns 0 or -ENOMEM. */
int ch_timer_start(struct ch_timer *t, int64_t ms, void (*cb)(struct ch_timer *t));

/* Disarms t; its callback will not run. Stopping a stopped timer is fine.
** O(log n). */
void ch_timer_stop(struct ch_timer *t);

/* Monotonic time in nanoseconds. */
uint64_t ch_now_ns(void);

/* Microseconds on this thread's loop clock: on x86-64 the TSC at the rate
** the loop measured in its first 20 ms (about 10 ns a read here against
** 25 for clock_gettime), else, and until then, CLOCK_MONOTONIC. For timing
** short spans often (a KV store's per-command times); it drifts from
** CLOCK_MONOTONIC by the measured rate's error (under 0.05%), and each
** thread's loop has its own. */
double ch_clock_us(void);

/* -- Threads ------------------------------------------------------------- */

/* This thread's scheduler, created on first use; NULL if it cannot be. */
struct ch_sched *ch_sched_self(void);

/* Progress of s, for a watchdog on another thread: its context switch
** count and its running coroutine (NULL while its loop runs). Plain
** relaxed loads without a lock: either may be stale once read. */
uint64_t ch_sched_switches(const struct ch_sched *s);
struct ch_coro *ch_sched_running(const struct ch_sched *s);

/* Runs fn(arg) on s's thread, from its loop, soon. Safe from any thread
** (wakes s through an eventfd). Returns 0 or -ENOMEM. */
int ch_post(struct ch_sched *s, void (*fn)(void *), void *arg);

/* Yields. Runs fn(arg) on the runtime's thread pool and returns when it is
** done, parking only this coroutine meanwhile: for calls that cannot be
** made non-blocking (getaddrinfo, fsync, regular-file I/O). Outside a
** coroutine fn runs inline. Returns 0 (fn done) or -ENOMEM; not
** cancellable, since fn cannot be interrupted. In COPY stack mode the pool
** thread must not touch the caller's stack, which another coroutine may
** be using meanwhile: arg and everything fn reads or writes through it
** must be on the heap. An arg that points into the shared stack is run
** inline instead (blocking the thread, but correct); pointers inside arg
** cannot be checked. */
int ch_pool_call(void (*fn)(void *), void *arg);

/* -- Statistics ---------------------------------------------------------- */

struct ch_stats {
  uint64_t coros;          /* live coroutines */
  uint64_t ready;          /* READY or NEW, queued to run */
  uint64_t waiting;        /* parked on fds or ch_park */
  uint64_t sleeping;       /* parked on a timer only */
  uint64_t spawned;        /* total ever spawned on this scheduler */
  uint64_t switches;       /* context switches */
  uint64_t timers;         /* armed timers, including coroutine timeouts */
  uint64_t stacks_free;    /* stacks kept in the pool */
  uint64_t stack_bytes;    /* address space of all stacks of this thread */
  uint64_t prio_ready[3];  /* queued to run, by class (CH_PRIO_*) */
  uint64_t prio_runs[3];   /* coroutines switched into, by class */
  uint64_t stack_mode;     /* CH_STACK_SEPARATE or CH_STACK_COPY */
  uint64_t saved_bytes;    /* COPY: stack bytes of parked coroutines saved
                           ** to the heap now (their idle stack memory) */
  uint64_t saved_alloc;    /* COPY: heap bytes held by save buffers and
                           ** reference images (below saved_bytes when
                           ** images are deltas: runtime/coro.c) */
  uint64_t copied_bytes;   /* COPY: total bytes copied out and back in */
  uint64_t io_backend;     /* CH_IO_EPOLL or CH_IO_URING */
  uint64_t ring_inflight;  /* URING: ring operations not yet completed */
};

/* Fills *st for this thread's scheduler. Returns 0 or -errno. */
int ch_stats(struct ch_stats *st);

/* Exit status of a process whose coroutine hit its stack guard; the runtime
** prints "coroutine <id> stack overflow (guard hit at <addr>)" first. */
#define CH_EXIT_STACK_OVERFLOW 86

#ifdef __cplusplus
}
#endif

#endif
