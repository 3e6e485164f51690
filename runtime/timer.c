/*
** Timers on a binary min-heap (libuv uses a heap too, Redis's ae.c an
** unsorted list). Each timer stores its own heap index, so stopping one
** is O(log n) with no search. Ties on the deadline are broken by a start
** sequence number, so equal deadlines fire in start order.
*/
#include <errno.h>
#include <stdlib.h>

#include "timer.h"

static int before(const struct ch_timer *a, const struct ch_timer *b)
{
  return a->when_ns != b->when_ns ? a->when_ns < b->when_ns : a->seq < b->seq;
}

static void put(struct ch_timerq *q, uint32_t i, struct ch_timer *t)
{
  q->heap[i] = t;
  t->heap_index = i;
}

static void sift_up(struct ch_timerq *q, uint32_t i)
{
  struct ch_timer *t = q->heap[i];
  while (i > 1 && before(t, q->heap[i / 2])) {
    put(q, i, q->heap[i / 2]);
    i /= 2;
  }
  put(q, i, t);
}

static void sift_down(struct ch_timerq *q, uint32_t i)
{
  struct ch_timer *t = q->heap[i];
  for (;;) {
    uint32_t c = 2 * i;
    if (c > q->n) break;
    if (c < q->n && before(q->heap[c + 1], q->heap[c])) c++;
    if (!before(q->heap[c], t)) break;
    put(q, i, q->heap[c]);
    i = c;
  }
  put(q, i, t);
}

void ch_timerq_init(struct ch_timerq *q)
{
  q->heap = NULL;
  q->n = q->cap = q->nweak = 0;
  q->seq = 0;
}

void ch_timerq_fini(struct ch_timerq *q)
{
  for (uint32_t i = 1; i <= q->n; i++) q->heap[i]->heap_index = 0;
  free(q->heap);
  ch_timerq_init(q);
}

int ch_timerq_add(struct ch_timerq *q, struct ch_timer *t, uint64_t when_ns)
{
  if (t->heap_index) ch_timerq_del(q, t);
  if (q->n + 1 >= q->cap) {
    uint32_t cap = q->cap ? q->cap * 2 : 64;
    struct ch_timer **h = realloc(q->heap, cap * sizeof *h);
    if (!h) return -ENOMEM;
    q->heap = h;
    q->cap = cap;
  }
  t->when_ns = when_ns;
  t->seq = q->seq++;
  q->nweak += t->weak;
  put(q, ++q->n, t);
  sift_up(q, q->n);
  return 0;
}

void ch_timerq_del(struct ch_timerq *q, struct ch_timer *t)
{
  uint32_t i = t->heap_index;
  if (!i) return;
  t->heap_index = 0;
  q->nweak -= t->weak;
  struct ch_timer *last = q->heap[q->n--];
  if (i > q->n) return;   /* t was the last slot */
  put(q, i, last);
  if (i > 1 && before(last, q->heap[i / 2])) sift_up(q, i);
  else sift_down(q, i);
}

uint64_t ch_timerq_next(const struct ch_timerq *q)
{
  return q->n ? q->heap[1]->when_ns : UINT64_MAX;
}

uint64_t ch_timerq_expire(struct ch_timerq *q, uint64_t now_ns)
{
  uint64_t ran = 0;
  while (q->n && q->heap[1]->when_ns <= now_ns) {
    struct ch_timer *t = q->heap[1];
    ch_timerq_del(q, t);
    t->cb(t);   /* may re-arm t or others */
    ran++;
  }
  return ran;
}
