/*
** The per-thread scheduler: ready queue, epoll, timers, the loop, and the
** waits the hooks build on. One per thread, created on first use, found
** through a thread-local pointer.
*/
#ifndef CH_SCHED_H
#define CH_SCHED_H

#include <pthread.h>
#include <stdint.h>

#include "cohost.h"
#include "coro.h"
#include "ctx.h"
#include "fd.h"
#include "stack.h"
#include "timer.h"

#define CH_SCHED_BATCH 64   /* direct switches before the loop polls epoll */

struct ch_post;

struct ch_sched {
  struct ch_ctx ctx;            /* the loop's context, on the thread's stack */
  struct ch_coro *current;      /* running coroutine; NULL in the loop */
  struct ch_coro *ready_head;   /* FIFO of NEW and READY coroutines */
  struct ch_coro *ready_tail;
  struct ch_coro *dead;         /* EXITED, waiting for the loop to reclaim */
  struct ch_coro *spare;        /* freed coroutine structs for reuse */
  struct ch_timerq timers;      /* includes coroutine timeouts */
  struct ch_stack_pool stacks;  /* this thread's stacks */
  size_t stack_size;            /* for new coroutines, bytes */
  uint64_t id;                  /* unique per process, never reused */
  int epfd;                     /* epoll instance */
  int evfd;                     /* eventfd other threads write to wake us */
  uint32_t batch;               /* direct switches in the current batch */
  uint8_t running;              /* inside ch_run */
  uint8_t stopping;             /* ch_stop was called */
  uint64_t nlive;               /* coroutines not yet EXITED */
  uint64_t nwaiting, nsleeping, nready; /* by state, for stats */
  uint64_t spawned;             /* total spawned */
  uint64_t switches;            /* context switches */
  pthread_mutex_t post_lock;    /* guards posts */
  struct ch_post *posts;        /* ch_post queue, newest first */
};

/* This thread's scheduler if it exists (hooks use it: they must not create
** one). */
extern __thread struct ch_sched *ch_sched_tls;

/* This thread's scheduler, created on first use; NULL with *err set when
** it cannot be. */
struct ch_sched *ch_sched_get(int *err);

/* Yields. Parks the running coroutine on the given fd waiters (each linked
** into its fd's readers or writers, registering fds with epoll as needed)
** until one is ready, timeout_ms passes (< 0: never) or it is cancelled.
** Returns 0 when woken by an fd (see each waiter's revents), -ETIMEDOUT,
** -ECANCELED, or -EPERM if epoll refuses an fd (nothing parked then). */
int ch_sched_wait(struct ch_waiter *w, int n, int64_t timeout_ms);

/* Yields. Parks the running coroutine until ch_unpark or a deadline in
** nanoseconds (0: none); with uncancellable, ch_cancel does not wake it. */
int ch_sched_park(uint64_t deadline_ns, int uncancellable, int state);

/* Non-zero if a hook may park c: its may_yield switch and the embedder's
** yield check agree. Asked only when a call would block. */
int ch_sched_may_park(struct ch_coro *c);

/* Called by the close hook before the real close: wakes fd's waiters with
** POLLNVAL, drops it from epoll and resets its entry. */
void ch_sched_close_fd(int fd, struct ch_fd *f);

#endif
