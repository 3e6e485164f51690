/* Coroutine memory: structs are recycled through a per-scheduler free list,
** stacks through the stack pool, so spawning in steady state allocates
** nothing and makes no system call. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coro.h"
#include "sched.h"

/* Ids are process-wide so logs from several threads never collide; after
** INT_MAX they wrap to 1 (an id is a name in logs, not a handle). */
static _Atomic int next_id;

static int new_id(void)
{
  int id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed) + 1;
  if (id <= 0) {
    atomic_store(&next_id, 1);
    id = 1;
  }
  return id;
}

struct ch_coro *ch_coro_new(struct ch_sched *s, void (*fn)(void *), void *arg,
                            void (*entry)(void *), int *err)
{
  struct ch_coro *c = s->spare;
  if (c) s->spare = c->next;
  else if (!(c = malloc(sizeof *c))) { *err = -ENOMEM; return NULL; }
  memset(c, 0, sizeof *c);
  int r = ch_stack_new(&s->stacks, s->stack_size, &c->stack);
  if (r < 0) {
    c->next = s->spare;
    s->spare = c;
    *err = r;
    return NULL;
  }
  c->sched = s;
  c->fn = fn;
  c->arg = arg;
  c->id = new_id();
  c->state = CH_CORO_NEW;
  c->may_yield = 1;
  c->prio = CH_PRIO_NORMAL;
  ch_stack_set_owner(&c->stack, c->id);
  ch_ctx_make(&c->ctx, (char *)c->stack.base + c->stack.size, entry, c);
  return c;
}

void ch_coro_free(struct ch_coro *c)
{
  struct ch_sched *s = c->sched;
  ch_stack_free(&s->stacks, &c->stack);
  c->next = s->spare;
  s->spare = c;
}

int ch_coro_id(const struct ch_coro *c) { return c->id; }
void ch_coro_set_udata(struct ch_coro *c, void *udata) { c->udata = udata; }
void *ch_coro_udata(const struct ch_coro *c) { return c->udata; }
void ch_coro_set_may_yield(struct ch_coro *c, int on) { c->may_yield = on != 0; }
int ch_cancelled(const struct ch_coro *c) { return c->cancelled; }
unsigned ch_cancel_hits(const struct ch_coro *c) { return c->cancel_hits; }
