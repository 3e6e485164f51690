/*
** The per-thread scheduler: ready queues, park and unpark, the loop,
** timers and cross-thread posts. One per thread, created on first use,
** found through a thread-local pointer. Its fd waits are poll.c's.
*/
#ifndef CH_SCHED_H
#define CH_SCHED_H

#include <pthread.h>
#include <stdint.h>

#include "cohost.h"
#include "coro.h"
#include "ctx.h"
#include "fd.h"
#include "poll.h"
#include "stack.h"
#include "timer.h"

/* Fairness defaults (see ch_sched_set_fairness): the loop polls epoll and
** expires timers when the ready queue runs dry, once a batch has run
** CH_SCHED_USEC, or after CH_SCHED_SWITCHES direct switches, whichever
** comes first. The switch limit defaults to the setter's maximum, so the
** time budget rules: a cheap switch is no reason to poll. */
#define CH_SCHED_SWITCHES_MAX 1000000u   /* setter limits, see cohost.h */
#define CH_SCHED_SWITCHES CH_SCHED_SWITCHES_MAX
#define CH_SCHED_USEC 1000
#define CH_SCHED_USEC_MAX 10000000u      /* 10 s */

/* Starvation guard: a normal or low class with ready coroutines waits
** through at most this many runs of other classes (CH_SCHED_SHARE - 1,
** one more when normal and low come due together), so each gets at least
** one run in CH_SCHED_SHARE + 1 however busy high is. */
#define CH_SCHED_SHARE 8

#define CH_PRIO_CLASSES 3

struct ch_post;
struct ch_ring;

/* A FIFO of NEW and READY coroutines of one class. */
struct ch_readyq {
  struct ch_coro *head;
  struct ch_coro *tail;
  uint64_t pushes;              /* ever queued (pushes - runs: queued now) */
  uint64_t runs;                /* coroutines of this class switched into */
};

struct ch_sched {
  struct ch_ctx ctx;            /* the loop's context, on the thread's stack */
  struct ch_coro *current;      /* running coroutine; NULL in the loop */
  struct ch_readyq rq[CH_PRIO_CLASSES];   /* by CH_PRIO_* */
  uint32_t other_mask;          /* bit p set: rq[p] not empty, p not NORMAL */
  uint32_t skipped[CH_PRIO_CLASSES];   /* runs of others while this class
                                ** had ready coroutines (pick_class) */
  uint64_t normal_runs_seen;    /* rq[NORMAL].runs after the last pop_other */
  struct ch_coro *dead;         /* EXITED, waiting for the loop to reclaim */
  struct ch_coro *spare;        /* freed coroutine structs for reuse */
  uint32_t nspare;              /* structs on spare, at most coro.c's SPARE_MAX */
  struct ch_timerq timers;      /* includes coroutine timeouts */
  struct ch_stack_pool stacks;  /* this thread's stacks */
  uint8_t copy_mode;            /* CH_STACK_COPY: coroutines share stacks */
  struct ch_shared shared[CH_STACK_CLASSES]; /* COPY: one per stack size
                                ** in use; unused have stack.size 0 */
  struct ch_coro *handoff;      /* COPY: the coroutine the loop is to load
                                ** and switch to next; NULL: none */
  uint64_t saved_bytes;         /* COPY: sum of saved_len, for stats */
  uint64_t saved_alloc;         /* COPY: sum of saved_cap and of the
                                ** reference images, for stats */
  uint64_t copied_bytes;        /* COPY: bytes copied out and in, total */
  uint64_t saved_peak;          /* COPY: most saved_alloc since the last
                                ** image trim (see trim_images) */
  uint64_t images_trimmed_ns;   /* COPY: when trim_images last looked */
  uint64_t idle_moved;          /* spawned + exited + closed when the
                                ** loop last looked (trim_idle) */
  uint64_t idle_since_ns;       /* when that sum last moved */
  uint8_t idle_trimmed;         /* trim_idle ran since then */
  void (*idle_hook)(void);      /* runs first in trim_idle; NULL: none */
  size_t stack_size;            /* for new coroutines, bytes */
  uint64_t id;                  /* unique per process, never reused */
  struct ch_poll poll;          /* the readiness backend (poll.c) */
  struct ch_ring *ring;         /* the io_uring backend (ring.c); NULL:
                                ** epoll alone */
  int ring_err;                 /* why the last ring asked for is not
                                ** there (-errno), 0 if none failed */
  uint32_t batch;               /* direct switches in the current batch */
  uint32_t fair_switches;       /* batch limit, switches (>= 1) */
  uint32_t fair_usec;           /* batch limit, microseconds; 0: none */
  uint64_t fair_ticks;          /* fair_usec in ticks (see sched.c); 0: none */
  uint64_t batch_tick;          /* tick count when the batch began */
  uint32_t batch_stop;          /* batch count of the next limit check */
  uint64_t cal_tick, cal_ns;    /* calibration origin of the tick clock */
  uint32_t ticks_per_us;        /* measured tick rate; 0 until calibrated */
  uint8_t running;              /* inside ch_run */
  uint8_t stopping;             /* ch_stop was called */
  uint64_t nlive;               /* coroutines not yet EXITED */
  uint64_t nweak;               /* of those, the weak ones */
  uint64_t nwaiting, nsleeping; /* by state, for stats */
  uint64_t spawned;             /* total spawned */
  uint64_t exited;              /* total reclaimed after they ended */
  uint64_t closed;              /* fds known to the runtime closed on this
                                ** thread (poll.c's ch_poll_close) */
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

/* Yields. Parks the running coroutine until ch_unpark or a deadline in
** nanoseconds (0: none); with uncancellable, ch_cancel does not wake it. */
int ch_sched_park(uint64_t deadline_ns, int uncancellable, int state);

/* Non-zero if a hook may park c: its may_yield switch and the embedder's
** yield check agree. Asked only when a call would block. */
int ch_sched_may_park(struct ch_coro *c);

/* The CLOCK_MONOTONIC deadline ms milliseconds from now, in ns; 0 for a
** negative ms (none). */
uint64_t ch_sched_deadline(int64_t ms);

#endif
