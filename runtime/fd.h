/*
** Per-fd state shared by the hooks, io.c and poll.c: what kind of file an
** fd is, the O_NONBLOCK the user sees versus the one the kernel has,
** socket timeouts, its epoll registration, the coroutines waiting on it,
** and the facts readiness is judged from. Entries live in a two-level
** table of lazily allocated chunks, so memory follows the fds in use, with
** no fixed maximum below 2^24.
**
** Who writes what: fdwait.c counts the events the I/O backend reports
** (in_events, out_events, hup) and links waiters; io.c alone judges
** readiness from them (in_drained/in_seen, out_full/out_seen); the epoll
** backend keeps its registration (registered, poll_id); the hooks keep
** the user's view (user_nonblock, timeouts).
*/
#ifndef CH_FD_H
#define CH_FD_H

#include <stdatomic.h>
#include <stdint.h>

struct ch_coro;

enum ch_fd_kind {
  CH_FD_UNKNOWN = 0,        /* not classified yet */
  CH_FD_SOCKET,             /* the runtime may make it non-blocking */
  CH_FD_PIPE,               /* a pipe this process made: same as a socket */
  CH_FD_WAITFIRST,          /* inherited pipe, FIFO or tty: may be shared with
                            ** other processes, so its flags are never touched;
                            ** hooks wait for readiness, then call libc */
  CH_FD_OTHER               /* regular file, directory, ...: pass through */
};

/* One coroutine, or one callback (a ch_watch), waiting for one direction
** of one fd. */
struct ch_waiter {
  struct ch_waiter *next, *prev;  /* links in the fd's readers or writers */
  struct ch_coro *coro;           /* who to wake; NULL for a callback */
  void (*notify)(struct ch_waiter *w);  /* a callback's: run once, unlinked */
  int fd;                         /* the fd waited on */
  short events;                   /* POLLIN or POLLOUT (one direction) */
  short revents;                  /* poll events seen; POLLNVAL when closed */
};

struct ch_fd {
  uint8_t kind;             /* enum ch_fd_kind */
  uint8_t user_nonblock;    /* O_NONBLOCK as the user set it (SOCK_NONBLOCK
                            ** at creation counts): the kernel has it too */
  uint8_t sys_nonblock;     /* the runtime set O_NONBLOCK in the kernel */
  uint8_t stream;           /* SOCK_STREAM or pipe: writes may be partial,
                            ** and a short read means the buffer is empty */
  uint8_t registered;       /* poll.c: in the epoll set poll_id */
  uint8_t hup;              /* fdwait.c: RDHUP, HUP or ERR reported; a
                            ** short read may have left the EOF or error to
                            ** read, so io.c always tries (nginx's
                            ** pending_eof) */
  uint8_t in_drained;       /* io.c: the last read came back short or
                            ** EAGAIN, when in_events was in_seen */
  uint8_t out_full;         /* io.c: the last write said EAGAIN, when
                            ** out_events was out_seen */
  uint32_t in_events;       /* fdwait.c: input events reported, counted
                            ** (wraps; only compared for equality) */
  uint32_t out_events;      /* fdwait.c: output events reported, counted */
  uint32_t in_seen;         /* io.c: in_events at the drained read */
  uint32_t out_seen;        /* io.c: out_events at the full write */
  uint32_t gen;             /* bumped when the fd is closed or reused */
  int rcvtimeo_ms;          /* SO_RCVTIMEO in ms, 0 for none */
  int sndtimeo_ms;          /* SO_SNDTIMEO in ms, 0 for none */
  uint32_t poll_id;         /* poll.c: the epoll instance whose set holds
                            ** it, when registered */
  struct ch_waiter *readers;  /* coroutines waiting for POLLIN */
  struct ch_waiter *writers;  /* coroutines waiting for POLLOUT */
};

/* The table: 2^14 chunk pointers x 2^10 entries, chunks allocated on
** first use (fd.c). Inline below: every hook and every ch_io_* call looks
** an fd up, and a call per lookup costs a fifth of the lookup. */
#define CH_FD_CHUNK_BITS 10
#define CH_FD_CHUNK_SIZE (1 << CH_FD_CHUNK_BITS)
#define CH_FD_CHUNKS     (1 << 14)

extern _Atomic(struct ch_fd *) ch_fd_chunks[CH_FD_CHUNKS];

/* ch_fd_get's slow path: allocates fd's chunk. */
struct ch_fd *ch_fd_get_chunk(int fd);

/* The entry of fd if its chunk exists, else NULL. Never allocates. */
static inline struct ch_fd *ch_fd_peek(int fd)
{
  if ((unsigned)fd >= (unsigned)(CH_FD_CHUNKS * CH_FD_CHUNK_SIZE)) return NULL;
  struct ch_fd *c = atomic_load_explicit(&ch_fd_chunks[fd >> CH_FD_CHUNK_BITS],
                                         memory_order_acquire);
  return c ? &c[fd & (CH_FD_CHUNK_SIZE - 1)] : NULL;
}

/* The entry of fd, allocating its chunk; NULL if fd is out of range or
** memory is short (callers then pass straight through). */
static inline struct ch_fd *ch_fd_get(int fd)
{
  struct ch_fd *f = ch_fd_peek(fd);
  return f ? f : ch_fd_get_chunk(fd);
}

/* Forgets everything about fd (a new file got its number): bumps gen so
** stale epoll events are dropped. Waiters must have been woken first. */
void ch_fd_reset(struct ch_fd *f);

/* Learns what fd is (kind, stream, the user's O_NONBLOCK, socket
** timeouts) from the kernel: fstat, fcntl and for sockets getsockopt, the
** first time the runtime meets an fd it did not see being made. Returns 0,
** or -errno with the entry left unknown (fd is not open). */
int ch_fd_classify(int fd, struct ch_fd *f);

#endif
