/* Coroutines: the object, its states and its life from new to free. The
** scheduler (sched.c) moves them between states; this module owns memory. */
#ifndef CH_CORO_H
#define CH_CORO_H

#include <stddef.h>
#include <stdint.h>

#include "cohost.h"
#include "ctx.h"
#include "fd.h"
#include "stack.h"

enum ch_coro_state {
  CH_CORO_NEW,              /* spawned, queued, never ran */
  CH_CORO_READY,            /* queued to run */
  CH_CORO_RUNNING,          /* the one running on its thread */
  CH_CORO_WAITING,          /* parked: fds, ch_park, the thread pool */
  CH_CORO_SLEEPING,         /* parked on its timer only */
  CH_CORO_EXITED            /* fn returned; stack to reclaim */
};

/* Field order is cache order: what a message's park, wake and resume touch
** (ch_sched_park, ch_unpark, pop_ready, the resume hook's udata, the
** stack-depth check of each Lua C call, the lazy park timer) comes first,
** in the struct's first 128 bytes, so a resume misses on two lines of it
** (three when malloc puts it off a line boundary) instead of four or five:
** at 1,000 connections each resumed coroutine's struct is cold
** (scripts/bench/echo_misses.sh). Copy-mode and life-cycle fields follow. */
struct ch_coro {
  struct ch_ctx ctx;        /* saved context while not running */
  struct ch_coro *next;     /* ready queue, dead list or free list link */
  struct ch_sched *sched;   /* owning scheduler; read-only */
  void *udata;              /* embedder's pointer */
  uint64_t deadline;        /* current park's deadline, ns; 0: none */
  uint8_t state;            /* enum ch_coro_state */
  uint8_t may_yield;        /* hooks may park it (default 1) */
  uint8_t cancelled;        /* ch_cancel was called */
  uint8_t uncancellable;    /* current park ignores ch_cancel */
  uint8_t prio;             /* CH_PRIO_*: the ready queue it joins */
  uint8_t saved_delta;      /* COPY: saved is a delta against a reference
                            ** image (coro.c), not the bytes themselves */
  uint8_t weak;             /* does not keep ch_run running
                            ** (ch_coro_set_weak) */
  uint8_t wait;             /* CH_WAIT_*: what the current park waits for,
                            ** noted where it parks; CH_WAIT_NONE once it
                            ** runs again. With weak, in the padding
                            ** before wake_value */
  int wake_value;           /* what ch_park returns */
  uint32_t cancel_hits;     /* waits that returned -ECANCELED */
  struct ch_stack stack;    /* owned; in COPY mode a copy of the shared
                            ** stack's, not owned */
  struct ch_timer timer;    /* timeout of parks; may stay armed after one
                            ** (see ch_sched_park) */
  void (*fn)(void *);       /* entry function; read-only */
  void *arg;                /* its argument; read-only */
  struct ch_shared *shared; /* COPY mode: the shared stack it runs on;
                            ** NULL: stack owns its own mapping */
  void *saved;              /* COPY: heap image of [ctx.sp, top) while
                            ** swapped out, maybe a delta against a
                            ** reference (coro.c); owned */
  struct ch_waiter wnodes[2]; /* the waiters it parks with, never on its
                            ** stack: its fd waits' (poll.c; in COPY mode
                            ** the poll hook's copies too) and its wait
                            ** queues' (waitq.c) */
  int id;                   /* > 0; read-only */
  /* 32 bits (an image over 4 GiB panics in save): the struct stays 248
  ** bytes, one malloc chunk of 256 per coroutine, not 272. */
  uint32_t saved_len;       /* COPY: bytes of stack saved; 0 while on the
                            ** stack */
  uint32_t saved_cap;       /* COPY: bytes allocated at saved */
  int wait_fd;              /* the fd of a CH_WAIT_READ, _WRITE or _POLL
                            ** park; in the struct's tail padding */
};

_Static_assert(offsetof(struct ch_coro, timer) + offsetof(struct ch_timer, heap_index)
               < 128, "the fields a resume touches fit in two lines");
_Static_assert(sizeof(struct ch_coro) <= 248, "one 256-byte malloc chunk per coroutine");
/* The offsets cohost.h's inline readers use. */
_Static_assert(offsetof(struct ch_coro, udata) == CH_CORO_OFS_UDATA, "CH_CORO_OFS_UDATA");
_Static_assert(offsetof(struct ch_coro, cancel_hits) == CH_CORO_OFS_CANCEL_HITS &&
               sizeof(((struct ch_coro *)0)->cancel_hits) == 4, "CH_CORO_OFS_CANCEL_HITS");
_Static_assert(offsetof(struct ch_coro, stack) + offsetof(struct ch_stack, base) ==
               CH_CORO_OFS_STACK_BASE, "CH_CORO_OFS_STACK_BASE");
_Static_assert(offsetof(struct ch_coro, stack) + offsetof(struct ch_stack, size) ==
               CH_CORO_OFS_STACK_SIZE, "CH_CORO_OFS_STACK_SIZE");

/* Notes what c is about to park on (ch_coro_info): two stores, on lines
** the park touches anyway. */
static inline void ch_coro_note_wait(struct ch_coro *c, int wait, int fd)
{
  c->wait = (uint8_t)wait;
  c->wait_fd = fd;
}

/* Allocates a NEW coroutine with a stack from s's pool. Returns NULL and
** sets *err to -errno on failure. */
struct ch_coro *ch_coro_new(struct ch_sched *s, void (*fn)(void *), void *arg,
                            void (*entry)(void *), int *err);

/* Returns c's stack to the pool (COPY: frees its saved image) and c to the
** free list. */
void ch_coro_free(struct ch_coro *c);

/* COPY mode: reference images per shared stack (coro.c, "Images"). */
#define CH_CORO_REFS 8

/* COPY mode: the stack shared by coroutines of stack size size, mapped on
** first use (with the same guard as any stack). */
struct ch_shared {
  struct ch_stack stack;    /* owned; never returned to the pool */
  size_t asked;             /* the ch_set_stack_size it serves; 0: unused */
  struct ch_coro *occupant; /* whose frames are on it now; NULL: nobody's */
  void (*entry)(void *);    /* first function of its coroutines (the
                            ** scheduler's), for the frame forged at load */
  struct ch_coro_ref *refs[CH_CORO_REFS]; /* images others are stored
                            ** against, one per length; owned, each freed
                            ** with its last user */
};

/* COPY mode: puts c's frames on its shared stack, saving the occupant's
** first (lazily: a coroutine stays on the stack until another needs it),
** or forges c's first frame if it never ran. Must run off that stack: the
** scheduler calls it from the loop, on the thread's own stack. Panics when
** no memory is left for the occupant's image (a switch cannot fail). */
void ch_coro_load(struct ch_coro *c);

#endif
