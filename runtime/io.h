/*
** The I/O engine under ch_io_* (cohost.h) and the hooks: one non-blocking
** call made on an fd, retried after a wait while it says EAGAIN, with
** the readiness judgement that saves the call that could only say EAGAIN.
** This is the only code that reads or writes an fd's readiness judgement
** (struct ch_fd's in_drained, in_seen, out_full, out_seen). It calls the
** scheduler's I/O backend through its table (backend.h) and never asks
** which one runs.
*/
#ifndef CH_IO_H
#define CH_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "backend.h"
#include "fd.h"

/* One call the engine makes, and remakes after a wait. */
struct ch_io_op {
  ssize_t (*call)(struct ch_io_op *op);  /* one attempt: the call's
                                ** result, -1 with errno set on failure */
  const struct ch_io_rx *rx;    /* a read's: where input the backend took
                                ** ahead of it goes (backend.h), which it
                                ** must get before the socket's; NULL for
                                ** calls that read no stream (accept) */
  int fd;
  short events;                 /* POLLIN: input (reads, accept);
                                ** POLLOUT: output (writes) */
  uint8_t judge;                /* input: a result short of want means the
                                ** kernel buffer is empty now (a stream read
                                ** without MSG_PEEK) */
  size_t want;                  /* bytes asked, for that judgement */
};

/* Yields. Makes op's call until it says something else than EAGAIN,
** waiting for readiness in between: parked in the scheduler when the
** caller is a coroutine that may park, else in poll(2), as libc would
** block. timeout_ms < 0 waits forever, 0 never waits (-EAGAIN where it
** would), > 0 sets *deadline_ns (CLOCK_MONOTONIC ns) at the first wait if
** it is 0, so a caller that loops (a write of everything) keeps one
** deadline across its calls. Returns the call's result (>= 0) or -errno:
** -ETIMEDOUT, -ECANCELED (the coroutine was cancelled), -EBADF (closed
** meanwhile), or the call's own error. */
ssize_t ch_io_run(struct ch_io_op *op, int64_t timeout_ms, uint64_t *deadline_ns);

/* Yields. ch_io_wait with a deadline kept across calls, as ch_io_run. */
int ch_io_wait_until(int fd, int events, int64_t timeout_ms, uint64_t *deadline_ns);

/* Yields. The accept under ch_io_accept and the accept hook: accept4 with
** flags, plus SOCK_NONBLOCK if nonblock (the runtime's own, recorded as
** such: the user's O_NONBLOCK view stays flags'), within one deadline as
** ch_io_run keeps it. ahead: the backend may accept ahead of the caller
** (ch_io_accept's; never a hook's). Records the new fd (the listener's
** kind and socket timeouts). Returns it or -errno. */
int ch_io_accept_as(int fd, struct sockaddr *addr, socklen_t *len, int flags, int nonblock,
                    int ahead, int64_t timeout_ms, uint64_t *deadline_ns);

/* What a call the hooks passed straight through to libc found on fd, a
** stream socket the user made non-blocking, judged as io.c judges its
** own calls: a read that said EAGAIN, or came back short of want (want 0:
** a peek or a vector read, which say nothing of the rest), emptied the
** socket; a write that said EAGAIN found it full. So a driver over a
** non-blocking C library (libpq under host/net/pg.c) waits on the fd with
** ch_io_wait without a poll(2) first. err: the call's errno when r < 0.
** Leaves errno alone; other fds are ignored. */
void ch_io_passed(int fd, int writing, ssize_t r, int err, size_t want);

/* Non-zero when a read of fd through the engine could only say EAGAIN
** now: the last one emptied the socket and the backend has reported no
** input since, and it holds none. Never yields. */
int ch_io_known_empty(int fd);

/* Non-zero when the backend holds input for fd that a read would get now
** (bytes a stream's receive took ahead of it), though poll(2) may not
** see it. Never yields. */
int ch_io_held(int fd);

/* Non-zero while bytes the backend queued for fd (ch_io_send) are not all
** in the kernel: a write made directly now would overtake them. Never
** yields. */
int ch_io_queued(int fd);

/* Records fd as a new file made by the process (socket, accept, pipe,
** dup): its kind, the O_NONBLOCK its maker asked for, whether the runtime
** set O_NONBLOCK itself, and whether it is a stream. A number closed
** behind our back (glibc's internal close) may still have an entry: it is
** reset, waking any waiter with EBADF. Returns the entry, or NULL when no
** memory is left for it (the fd then goes untracked). */
struct ch_fd *ch_io_fd_new(int fd, int kind, int user_nonblock, int sys_nonblock, int stream);

/* Records newfd as a dup of oldfd (same open file: same kind, O_NONBLOCK
** and timeouts), resetting whatever newfd's entry held. */
void ch_io_fd_dup(int oldfd, int newfd);

/* The entry of fd ready for the engine: classified, and non-blocking in
** the kernel if it is a socket or a pipe this process made (the runtime
** sets O_NONBLOCK and says so in sys_nonblock; the user's view is kept).
** An inherited pipe or tty (CH_FD_WAITFIRST) keeps its flags: the engine
** waits for readiness before each call. NULL when fd cannot be tracked
** (no memory, or fd is not open: the call then says why). */
struct ch_fd *ch_io_prepare(int fd);

/* The close hook's work before the real close of fd: the backend lets go
** of it, its waiters wake with EBADF, its entry is reset. Returns 0, or
** the error of a send the backend queued (ch_io_send) that nobody was
** told of. Never yields. */
int ch_io_close(int fd);

/* The shutdown hook's: a shutdown that sends (SHUT_WR, SHUT_RDWR) goes
** after the bytes a backend still has queued for fd. Returns what
** shutdown(2) returns (-1 and errno on failure). Never yields. */
int ch_io_shutdown(int fd, int how);

#endif
