/*
** Wait queues (Tarantool's fiber_cond): a FIFO of parked coroutines that
** others wake one at a time or all at once. See cohost.h.
**
** A waiter's nodes are the coroutine's own fd waiters (wnodes in struct
** ch_coro; a heap array for more than two queues): a coroutine parks on
** one thing at a time, so they are free whenever it is not in
** ch_poll_wait, and they live in the coroutine's struct, never on its
** stack, which in COPY mode is saved away while it is parked. In a node,
** coro is the waiting coroutine while the node is queued and NULL once a
** wake took it off the queue.
**
** A waiter woken by something else (its timeout, ch_cancel) stays queued
** until it runs again and unlinks itself; a wake that meets it meanwhile
** takes it off and moves on to the next waiter, so a wake is never spent
** on a coroutine that is not waiting any more.
*/
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "cohost.h"
#include "coro.h"
#include "sched.h"

static void unlink_node(struct ch_waitq *q, struct ch_waiter *w)
{
  if (w->prev) w->prev->next = w->next;
  else q->head = w->next;
  if (w->next) w->next->prev = w->prev;
  else q->tail = w->prev;
  w->coro = NULL;
}

static void link_node(struct ch_waitq *q, struct ch_waiter *w, struct ch_coro *self)
{
  w->coro = self;
  w->next = NULL;
  w->prev = q->tail;
  if (q->tail) q->tail->next = w;
  else q->head = w;
  q->tail = w;
}

int ch_waitq_wait(struct ch_waitq *q, int64_t timeout_ms)
{
  struct ch_coro *self = ch_running;
  if (!self) return -EINVAL;
  struct ch_waiter *w = &self->wnodes[0];
  link_node(q, w, self);
  ch_coro_note_wait(self, CH_WAIT_QUEUE, -1);
  int r = ch_sched_park(timeout_ms < 0 ? 0 : ch_sched_deadline(timeout_ms), 0, CH_CORO_WAITING);
  /* Still queued: the timeout, a cancellation (maybe before the park, which
  ** then returned at once) or a direct ch_unpark woke it, not a wake. */
  if (w->coro) unlink_node(q, w);
  return r;
}

int ch_waitq_wait_any(struct ch_waitq *const *qs, int n, int64_t timeout_ms)
{
  struct ch_coro *self = ch_running;
  if (!self || n < 1) return -EINVAL;
  /* One node per queue: the coroutine's two, or a heap array for more
  ** (never on the stack: see the top of this file). The first wake takes
  ** one node off its queue; the others are still queued when the
  ** coroutine runs, and later wakes of their queues skip them meanwhile,
  ** as they skip any waiter that is not waiting any more. */
  struct ch_waiter *nodes = self->wnodes;
  if (n > 2 && !(nodes = malloc((size_t)n * sizeof *nodes))) return -ENOMEM;
  for (int i = 0; i < n; i++) link_node(qs[i], &nodes[i], self);
  ch_coro_note_wait(self, CH_WAIT_QUEUE, -1);
  int r = ch_sched_park(ch_sched_deadline(timeout_ms), 0, CH_CORO_WAITING);
  for (int i = 0; i < n; i++)
    if (nodes[i].coro) unlink_node(qs[i], &nodes[i]);
  if (nodes != self->wnodes) free(nodes);
  return r;
}

/* Wakes the longest waiter that is still waiting, taking off those that
** are not (see the top of this file). Its own function, with only q live
** across ch_unpark, for the common wake of one: the slot it replaces cost
** a load, a branch and the unpark. */
static __attribute__((noinline)) int wake_first(struct ch_waitq *q)
{
  struct ch_waiter *w;
  while ((w = q->head) != NULL) {
    struct ch_coro *c = w->coro;
    assert(c && w->prev == NULL);
    /* Off the queue: only coro says so (NULL); the links of a node off
    ** every queue are never read, and link_node sets them again. */
    q->head = w->next;
    if (q->head) q->head->prev = NULL;
    else q->tail = NULL;
    w->coro = NULL;
    /* -EALREADY: it was woken otherwise and has not run yet; it returns
    ** what woke it, and the next waiter gets this wake. */
    if (ch_unpark(c, 0) == 0) return 1;
  }
  return 0;
}

static __attribute__((noinline)) int wake_every(struct ch_waitq *q)
{
  /* Woken coroutines only become READY: none can queue again before the
  ** loop ends, so it ends. */
  int n = 0;
  while (wake_first(q)) n++;
  return n;
}

/* Two tail calls: the frame wake_every needs is not set up for a wake of
** one. */
int ch_waitq_wake(struct ch_waitq *q, int all)
{
  return all ? wake_every(q) : wake_first(q);
}
