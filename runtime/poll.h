/*
** The readiness backend (cohost's ae_epoll.c): one epoll instance per
** scheduler, fd registration, the waiters parked on fds, watches, close
** handling and the wakeup other threads use. It counts what epoll reports
** per fd (in_events, out_events, hup in struct ch_fd) and never judges
** readiness itself: io.c does. The io_uring backend (ring.c) sits beside
** it: the ring takes reads, writes and accepts, and watches this epoll
** instance for everything else.
**
** fds are registered once, edge-triggered, for both directions, and stay
** registered until close. That is sound because every waiter waits only
** after a call on the fd said EAGAIN (or on a new fd, whose first
** registration reports its current state): the edge that follows an
** EAGAIN is never missed, and edges nobody waits for cost nothing.
*/
#ifndef CH_POLL_H
#define CH_POLL_H

#include <stdint.h>

#include "fd.h"

struct ch_sched;

struct ch_poll {
  int epfd;                 /* the epoll instance; owned */
  int evfd;                 /* eventfd other threads write to wake the
                            ** loop (ch_poll_wake); owned */
};

/* Makes p's epoll instance and wakeup eventfd. Returns 0 or -errno. */
int ch_poll_init(struct ch_poll *p);

/* Closes them (the real close: these fds are not the user's). */
void ch_poll_fini(struct ch_poll *p);

/* Registers fd with s's epoll unless it already is. Returns 0 or -errno:
** -EPERM for a file epoll cannot watch (a regular file), -ENOSPC at
** max_user_watches. */
int ch_poll_add(struct ch_sched *s, int fd, struct ch_fd *f);

/* Yields. Parks the running coroutine until fd is ready for events
** (POLLIN, POLLOUT or both), timeout_ms passes (< 0: never) or the
** coroutine is cancelled. Never looks first: call it after a call on fd
** said EAGAIN. Returns the ready poll events (> 0: those asked for plus
** POLLERR and POLLHUP), -ETIMEDOUT, -ECANCELED, -EBADF when fd was closed
** meanwhile, -EINVAL outside a coroutine, or -EPERM/-ENOSPC/-ENOMEM when
** fd cannot be registered (nothing parked then). */
int ch_poll_wait(int fd, int events, int64_t timeout_ms);

/* Yields. ch_poll_wait for several waiters at once (the poll and select
** hooks): parks until one of them is ready. Returns 0 when woken by an fd
** (each waiter's revents says what it saw), -ETIMEDOUT, -ECANCELED, or a
** registration failure (nothing parked then). */
int ch_poll_wait_many(struct ch_waiter *w, int n, int64_t timeout_ms);

/* Called by the close hook before the real close: cancels fd's ring
** operations (ring.c), wakes its waiters with POLLNVAL, drops fd from
** epoll and resets its entry. */
void ch_poll_close(int fd, struct ch_fd *f);

/* The loop's poll: waits up to timeout_ms (-1: no limit) for events, counts
** them into each fd's entry and wakes its waiters. Returns 1 when another
** thread woke the loop with ch_poll_wake (its posts are to be run), else
** 0; *full (if not NULL) says whether it took as many events as one call
** takes, so more may be waiting. Panics if epoll_wait fails for anything
** but EINTR. */
int ch_poll_run(struct ch_poll *p, int timeout_ms, int *full);

/* Wakes p's loop from any thread (a write to its eventfd). */
void ch_poll_wake(struct ch_poll *p);

#endif
