/* Coroutines: the object, its states and its life from new to free. The
** scheduler (sched.c) moves them between states; this module owns memory. */
#ifndef CH_CORO_H
#define CH_CORO_H

#include <stdint.h>

#include "cohost.h"
#include "ctx.h"
#include "stack.h"

enum ch_coro_state {
  CH_CORO_NEW,              /* spawned, queued, never ran */
  CH_CORO_READY,            /* queued to run */
  CH_CORO_RUNNING,          /* the one running on its thread */
  CH_CORO_WAITING,          /* parked: fds, ch_park, the thread pool */
  CH_CORO_SLEEPING,         /* parked on its timer only */
  CH_CORO_EXITED            /* fn returned; stack to reclaim */
};

struct ch_coro {
  struct ch_ctx ctx;        /* saved context while not running */
  struct ch_coro *next;     /* ready queue, dead list or free list link */
  struct ch_sched *sched;   /* owning scheduler; read-only */
  void (*fn)(void *);       /* entry function; read-only */
  void *arg;                /* its argument; read-only */
  struct ch_stack stack;    /* owned */
  struct ch_timer timer;    /* timeout of parks; may stay armed after one
                            ** (see ch_sched_park) */
  uint64_t deadline;        /* current park's deadline, ns; 0: none */
  void *udata;              /* embedder's pointer */
  int id;                   /* > 0; read-only */
  uint8_t state;            /* enum ch_coro_state */
  uint8_t may_yield;        /* hooks may park it (default 1) */
  uint8_t cancelled;        /* ch_cancel was called */
  uint8_t uncancellable;    /* current park ignores ch_cancel */
  uint8_t prio;             /* CH_PRIO_*: the ready queue it joins */
  int wake_value;           /* what ch_park returns */
  uint32_t cancel_hits;     /* waits that returned -ECANCELED */
};

/* Allocates a NEW coroutine with a stack from s's pool. Returns NULL and
** sets *err to -errno on failure. */
struct ch_coro *ch_coro_new(struct ch_sched *s, void (*fn)(void *), void *arg,
                            void (*entry)(void *), int *err);

/* Returns c's stack to the pool and c to the free list. */
void ch_coro_free(struct ch_coro *c);

#endif
