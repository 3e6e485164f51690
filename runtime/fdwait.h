/*
** Waiting on fds, whatever the backend: the waiters linked on each fd
** (coroutines and watches), the one place a coroutine parks on an fd,
** the count of what the backend reports, and waking the waiters at close.
** A backend (backend.h) only makes sure events are reported, and reports
** them with ch_fdwait_ready; it counts (in_events, out_events, hup in
** struct ch_fd) here, and io.c judges readiness from the counts.
*/
#ifndef CH_FDWAIT_H
#define CH_FDWAIT_H

#include <stdint.h>

#include "fd.h"
#include "sched.h"

/* The first half of every park of a coroutine on an fd, the one place
** such a wait begins: has the backend report fd's events (POLLIN,
** POLLOUT or both) and links the running coroutine's waiters for them.
** Call it after a call on fd said EAGAIN, or while an operation of the
** backend's is in flight on fd: it never looks first. Returns 0 (linked:
** park with ch_sched_park, then ch_fdwait_done), or -errno with nothing
** linked: -EINVAL outside a coroutine, -ECANCELED (unless
** uncancellable), or the backend's -EPERM, -ENOSPC or -ENOMEM when fd
** cannot be watched. */
int ch_fdwait_link(int fd, int events, int uncancellable);

/* The second half: unlinks the waiters after the park, whose result r
** is, and says what came: the ready poll events (> 0: those asked for
** plus POLLERR and POLLHUP), r when it is an error (-ETIMEDOUT,
** -ECANCELED), or -EBADF when fd was closed meanwhile. */
int ch_fdwait_done(int fd, int events, int r);

/* Yields. Parks the running coroutine until fd is ready for events,
** timeout_ms passes (< 0: never) or the coroutine is cancelled (unless
** uncancellable): the two halves around the park. Inline, so that a
** waiting caller's frame is the only one between it and the park (in
** COPY mode every parked connection saves those frames). Returns as
** ch_fdwait_done, or ch_fdwait_link's error (nothing parked then). */
static inline int ch_fdwait_wait(int fd, int events, int64_t timeout_ms, int uncancellable)
{
  int r = ch_fdwait_link(fd, events, uncancellable);
  if (r < 0) return r;
  r = ch_sched_park(ch_sched_deadline(timeout_ms), uncancellable, CH_CORO_WAITING);
  return ch_fdwait_done(fd, events, r);
}

/* Yields. ch_fdwait_wait for several waiters at once (the poll and
** select hooks): parks until one of them is ready. Returns 0 when woken
** by an fd (each waiter's revents says what it saw), -ETIMEDOUT,
** -ECANCELED, or the backend's refusal (nothing parked then). */
int ch_fdwait_wait_many(struct ch_waiter *w, int n, int64_t timeout_ms);

/* What a backend saw on f's fd (poll events, POLLRDHUP included):
** counted into the entry and given to the fd's waiters, which wake.
** Never yields; a watch's callback runs from here. */
void ch_fdwait_ready(struct ch_fd *f, int revents);

/* The close path, before the real close of fd: the backend lets go of
** fd, its waiters wake with POLLNVAL and the entry is reset. Returns the
** backend's last word on fd: an error a queued send met, or 0. */
int ch_fdwait_close(int fd, struct ch_fd *f);

#endif
