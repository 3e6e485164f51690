/* Timers: a 4-ary min-heap ordered by deadline, then by start order.
** Insert, stop and pop are O(log n); peek is O(1). Each scheduler has one
** (its coroutines' park timeouts and the public ch_timer_start timers,
** which timer.c also defines, over the calling thread's scheduler). */
#ifndef CH_TIMER_H
#define CH_TIMER_H

#include <stdint.h>

#include "cohost.h"

struct ch_timerq_ent;

struct ch_timerq {
  struct ch_timerq_ent *heap; /* heap[0] is the earliest; keys inline */
  uint32_t n;               /* armed timers */
  uint32_t nweak;           /* armed timers with weak set */
  uint32_t cap;             /* slots allocated */
  uint64_t seq;             /* next start number */
};

void ch_timerq_init(struct ch_timerq *q);
void ch_timerq_fini(struct ch_timerq *q);

/* Arms t for when_ns (absolute, CLOCK_MONOTONIC); moves it if armed.
** Returns 0 or -ENOMEM. */
int ch_timerq_add(struct ch_timerq *q, struct ch_timer *t, uint64_t when_ns);

/* Disarms t if armed. */
void ch_timerq_del(struct ch_timerq *q, struct ch_timer *t);

/* Deadline of the earliest timer, or UINT64_MAX when none is armed. */
uint64_t ch_timerq_next(const struct ch_timerq *q);

/* Disarms and runs, in order, every timer due at now_ns, including ones a
** callback arms for now_ns or earlier. Returns how many ran. */
uint64_t ch_timerq_expire(struct ch_timerq *q, uint64_t now_ns);

#endif
