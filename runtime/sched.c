/*
** The scheduler: one per thread. A coroutine that gives up the CPU switches
** straight to the next ready one (no hop through the loop, which measured
** 3x dearer per yield); when nothing is ready, or the batch has used up its
** fairness budget (fair_usec microseconds, or fair_switches direct
** switches if that comes first: by default it never does), it switches to
** the loop, which expires timers, polls the backend and reclaims exited
** coroutines. So a coroutine that only yields can delay I/O and timers by
** one budget at most, and a busy queue is polled once per drain or budget,
** not once per fixed count of cheap switches. Shape after
** Redis's aeMain and libuv's uv_run.
**
** Ready coroutines wait in one FIFO per priority class. The highest class
** with anyone ready runs, except that a normal or low class that has
** waited through CH_SCHED_SHARE - 1 runs of others runs next, so neither
** starves.
**
** Waiting for fds is fdwait.c's, through the I/O backend the scheduler
** points at (backend.h: epoll or io_uring, as ae_epoll.c is to ae.c), and
** judging their readiness io.c's; this file only parks and unparks, picks
** the backend, and runs its poll between batches.
*/
#include <assert.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <sys/eventfd.h>

#include "backend.h"
#include "fault.h"
#include "hook.h"
#include "libc.h"
#include "panic.h"
#include "sched.h"

/* ASan builds (make SAN=address sets CH_ASAN): ASan must be told of every
** stack switch, or it takes the coroutine stacks for overflows of the
** thread's stack and gets no-return unwinding (Lua errors) wrong. Before a
** switch san_leave names the stack to run on; fake is where the leaving
** context keeps its fake stack (detect_stack_use_after_return), or NULL
** when it never runs again. On arrival san_enter completes it. The first
** arrival of a thread comes from the loop, which runs on the thread's
** stack: its bounds, as ASan reports them, are kept for switches back to
** it, and given to LeakSanitizer as a root region, since it scans only the
** current stack (a coroutine's, when exit() is called from Lua). Same
** scheme as boost.context's and Tarantool's fibers. */
#ifdef CH_ASAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>

static __thread const void *loop_bottom;
static __thread size_t loop_size;

static void san_leave(void **fake, const struct ch_coro *to)
{
  if (to) __sanitizer_start_switch_fiber(fake, to->stack.base, to->stack.size);
  else __sanitizer_start_switch_fiber(fake, loop_bottom, loop_size);
}

static void san_enter(void *fake)
{
  const void *bottom;
  size_t size;
  __sanitizer_finish_switch_fiber(fake, &bottom, &size);
  if (!loop_size) {
    loop_bottom = bottom;
    loop_size = size;
    __lsan_register_root_region(bottom, size);
  }
}
#define SAN_FAKE(name) void *name = NULL
#define SAN_FAKE_OF(name, alive) ((alive) ? &(name) : NULL)
#else
#define san_leave(fake, to) ((void)0)
#define san_enter(fake) ((void)0)
#define SAN_FAKE(name)
#define SAN_FAKE_OF(name, alive) NULL
#endif


__thread struct ch_sched *ch_sched_tls;
/* s->current of ch_sched_tls, for ch_current (cohost.h). A scheduler
** runs only on the thread it was made on, so the two change together;
** s->current stays for the watchdog, which reads it from another thread. */
__thread struct ch_coro *ch_running;

static _Atomic uint64_t next_sched_id;
static pthread_key_t sched_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static int (*yield_check)(struct ch_coro *);
static void (*resume_hook)(struct ch_coro *);
static void (*park_hook)(struct ch_coro *);

struct ch_post {
  void (*fn)(void *);
  void *arg;
  struct ch_post *next;
};

uint64_t ch_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock of the fairness budget, read at the start of each batch and at
** a few of its switches (batch_goes_on). On x86-64 the TSC: about 10 ns
** here against 25 ns for clock_gettime, next to ~25 ns for a whole yield.
** Its rate is measured against CLOCK_MONOTONIC by the loop (calibrate);
** elsewhere ticks are nanoseconds. */
#if defined(__x86_64__)
static inline uint64_t ticks(void) { return __rdtsc(); }
#define TICKS_ARE_NS 0
#else
static inline uint64_t ticks(void) { return ch_now_ns(); }
#define TICKS_ARE_NS 1
#endif

#define CALIBRATE_NS 20000000u   /* 20 ms: TSC rate to within ~0.1% */

/* Budget in ticks. Before calibration a tick counts as a nanosecond: TSCs
** tick faster than 1 GHz, so the budget errs short. */
static void set_fair_ticks(struct ch_sched *s)
{
  uint64_t per_us = s->ticks_per_us ? s->ticks_per_us : 1000;
  s->fair_ticks = (uint64_t)s->fair_usec * per_us;
}

static void calibrate(struct ch_sched *s, uint64_t now)
{
  uint64_t dt = now - s->cal_ns;
  if (dt < CALIBRATE_NS) return;
  uint64_t per_us = (ticks() - s->cal_tick) * 1000 / dt;
  s->ticks_per_us = per_us ? (uint32_t)per_us : 1;
  set_fair_ticks(s);
}

double ch_clock_us(void)
{
  struct ch_sched *s = ch_sched_tls;
  if (TICKS_ARE_NS || !s || !s->ticks_per_us) return (double)ch_now_ns() / 1e3;
  return (double)s->cal_ns / 1e3 + (double)(ticks() - s->cal_tick) / s->ticks_per_us;
}

/* Out of line: the clock's timespec would take room in every waiting
** frame (ch_fdwait_wait's, parked in COPY mode). */
__attribute__((noinline)) uint64_t ch_sched_deadline(int64_t ms)
{
  if (ms < 0) return 0;
  return ch_now_ns() + (uint64_t)ms * 1000000u;
}

/* -- Creation and teardown ---------------------------------------------- */

static void sched_free(void *p)
{
  struct ch_sched *s = p;
  /* Coroutines still parked at thread exit are abandoned with their
  ** stacks: nothing can resume them. */
  s->be->fini(s);
  ch_libc.close(s->wakefd);
  ch_timerq_fini(&s->timers);
  while (s->spare) {
    struct ch_coro *c = s->spare;
    s->spare = c->next;
    free(c);
  }
  pthread_mutex_destroy(&s->post_lock);
  if (ch_sched_tls == s) ch_sched_tls = NULL;
  free(s);
  ch_fault_fini();
}

/* The stack mode a new scheduler starts with: CH_STACK_MODE, so that a
** whole test suite or host runs in COPY mode without a code change. A
** value that means nothing, or COPY where it cannot work, panics: running
** on silently in the other mode would make such a run prove nothing. */
static int env_stack_mode(void)
{
  const char *v = getenv("CH_STACK_MODE");
  if (!v || !*v || strcmp(v, "separate") == 0) return CH_STACK_SEPARATE;
  if (strcmp(v, "copy") != 0)
    ch_panic("CH_STACK_MODE=%s: expected copy or separate", v);
#ifdef CH_ASAN
  ch_panic("CH_STACK_MODE=copy is not supported in ASan builds: the fiber "
           "annotations describe one stack per coroutine (docs/stacks.md)");
#endif
  return CH_STACK_COPY;
}

/* The I/O backend a new scheduler asks for: CH_IO_BACKEND, so that a whole
** test suite or host runs on io_uring without a code change (make test
** IO_BACKEND=uring). A value that means nothing panics, as
** CH_STACK_MODE's; a ring the kernel refuses leaves the scheduler on
** epoll, with the reason in ring_err (the host says it once). */
static int env_io_backend(void)
{
  const char *v = getenv("CH_IO_BACKEND");
  if (!v || !*v || strcmp(v, "epoll") == 0) return CH_IO_EPOLL;
  if (strcmp(v, "uring") != 0) ch_panic("CH_IO_BACKEND=%s: expected uring or epoll", v);
  return CH_IO_URING;
}

/* -- The I/O backend ------------------------------------------------------ */

static const struct ch_backend *backend_of(int kind)
{
  return kind == CH_IO_URING ? &ch_backend_uring : &ch_backend_epoll;
}

/* Moves s to backend be: its instance is made first, so a refusal leaves
** s on the one it had. The old one must hold nothing: no coroutine parked
** (its waits may be the old backend's), no watch armed, no operation in
** flight. */
static int use_backend(struct ch_sched *s, const struct ch_backend *be)
{
  if (s->be == be) return 0;
  if (s->nwaiting || s->nwatches || s->be->pending(s)) return -EBUSY;
  void *old = s->be_state;
  s->be_state = NULL;
  int r = be->init(s);
  void *made = s->be_state;
  s->be_state = old;
  if (r < 0) return r;
  s->be->fini(s);
  s->be = be;
  s->be_state = made;
  return 0;
}

void ch_sched_wake_drain(struct ch_sched *s)
{
  uint64_t count;
  ssize_t r = ch_libc.read(s->wakefd, &count, sizeof count);
  (void)r;   /* EAGAIN: drained already */
}

void ch_sched_io_fallback(struct ch_sched *s)
{
  ch_libc.close(s->wakefd);
  s->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  s->be = &ch_backend_epoll;
  s->be_state = NULL;
  int r = s->wakefd < 0 ? -errno : s->be->init(s);
  if (r < 0) ch_panic("epoll after a fork: %s", strerror(-r));
}

/* A forked child has one thread, the one that forked, and its scheduler:
** a backend that cannot be shared with the parent (io_uring's ring) lets
** go of its copy, and the scheduler goes on with epoll. */
static void forked_child(void)
{
  struct ch_sched *s = ch_sched_tls;
  if (s && s->be->forked && s->be->forked(s)) ch_sched_io_fallback(s);
}

static void make_key(void)
{
  if (pthread_key_create(&sched_key, sched_free) != 0)
    ch_panic("pthread_key_create failed");
  pthread_atfork(NULL, NULL, forked_child);
}

struct ch_sched *ch_sched_get(int *err)
{
  struct ch_sched *s = ch_sched_tls;
  if (s) return s;
  ch_hook_init();
  pthread_once(&key_once, make_key);
  int r = ch_fault_init();
  if (r < 0) { *err = r; return NULL; }
  s = calloc(1, sizeof *s);
  if (!s) { *err = -ENOMEM; return NULL; }
  if ((s->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
    *err = -errno;
    free(s);
    return NULL;
  }
  s->be = &ch_backend_epoll;
  if ((r = s->be->init(s)) < 0) {
    ch_libc.close(s->wakefd);
    *err = r;
    free(s);
    return NULL;
  }
  ch_timerq_init(&s->timers);
  pthread_mutex_init(&s->post_lock, NULL);
  s->stack_size = CH_STACK_DEFAULT;
  s->copy_mode = env_stack_mode() == CH_STACK_COPY;
  s->id = atomic_fetch_add(&next_sched_id, 1) + 1;
  s->fair_switches = CH_SCHED_SWITCHES;
  s->fair_usec = CH_SCHED_USEC;
  s->cal_ns = ch_now_ns();
  s->cal_tick = ticks();
  s->ticks_per_us = TICKS_ARE_NS ? 1000 : 0;
  set_fair_ticks(s);
  pthread_setspecific(sched_key, s);
  ch_sched_tls = s;
  if (env_io_backend() == CH_IO_URING) s->ring_err = use_backend(s, &ch_backend_uring);
  return s;
}

struct ch_sched *ch_sched_self(void)
{
  int err;
  return ch_sched_get(&err);
}

/* -- Ready queue and switching ------------------------------------------ */

/* The hot path is shaped for the common case, everything in one class:
** normal's queue is tested by its head, and other_mask (bits of high and
** low queues that are not empty) is zero, so a push or pop costs a few
** instructions more than a single FIFO. */

/* push_ready for high and low. */
static __attribute__((noinline)) void push_other(struct ch_sched *s, struct ch_coro *c)
{
  struct ch_readyq *q = &s->rq[c->prio];
  c->next = NULL;
  if (q->tail) q->tail->next = c;
  else {
    q->head = c;
    s->other_mask |= 1u << c->prio;
  }
  q->tail = c;
  q->pushes++;
}

static inline void push_ready(struct ch_sched *s, struct ch_coro *c)
{
  assert(c->state == CH_CORO_READY || c->state == CH_CORO_NEW);
  if (c->prio != CH_PRIO_NORMAL) {
    push_other(s, c);
    return;
  }
  struct ch_readyq *q = &s->rq[CH_PRIO_NORMAL];
  c->next = NULL;
  if (q->tail) q->tail->next = c;
  else q->head = c;
  q->tail = c;
  q->pushes++;
}

static inline int any_ready(const struct ch_sched *s)
{
  return s->other_mask || s->rq[CH_PRIO_NORMAL].head;
}

/* The class to run when several have ready coroutines (mask has two bits
** or more): the highest, unless normal or low has waited through
** CH_SCHED_SHARE - 1 runs of others (both due: the longer wait, normal on
** a tie; the other is due again at the next run). So a class with ready
** coroutines waits CH_SCHED_SHARE runs of others at most. */
static unsigned pick_class(struct ch_sched *s, uint32_t mask)
{
  unsigned p = (unsigned)__builtin_ctz(mask);
  uint32_t wait_n = (mask & (1u << CH_PRIO_NORMAL)) && p != CH_PRIO_NORMAL ? s->skipped[CH_PRIO_NORMAL] : 0;
  uint32_t wait_l = (mask & (1u << CH_PRIO_LOW)) ? s->skipped[CH_PRIO_LOW] : 0;
  if (wait_n >= CH_SCHED_SHARE - 1 && wait_n >= wait_l) p = CH_PRIO_NORMAL;
  else if (wait_l >= CH_SCHED_SHARE - 1) p = CH_PRIO_LOW;
  for (unsigned q = 0; q < CH_PRIO_CLASSES; q++)
    if (mask & (1u << q)) s->skipped[q]++;
  return p;
}

/* pop_ready when high or low has ready coroutines. */
static __attribute__((noinline)) struct ch_coro *pop_other(struct ch_sched *s)
{
  /* Normal ran on the hot path since the last call, which counts no
  ** waits: its wait is over. */
  if (s->rq[CH_PRIO_NORMAL].runs != s->normal_runs_seen) s->skipped[CH_PRIO_NORMAL] = 0;
  uint32_t mask = s->other_mask | (s->rq[CH_PRIO_NORMAL].head ? 1u << CH_PRIO_NORMAL : 0);
  unsigned p = (mask & (mask - 1)) ? pick_class(s, mask) : (unsigned)__builtin_ctz(mask);
  struct ch_readyq *q = &s->rq[p];
  struct ch_coro *c = q->head;
  q->head = c->next;
  if (!q->head) {
    q->tail = NULL;
    s->other_mask &= ~(1u << p) & ~(1u << CH_PRIO_NORMAL);
  }
  s->skipped[p] = 0;
  q->runs++;
  s->normal_runs_seen = s->rq[CH_PRIO_NORMAL].runs;
  return c;
}

/* The next coroutine to run, taken off its queue, or NULL. */
static inline struct ch_coro *pop_ready(struct ch_sched *s)
{
  if (s->other_mask) return pop_other(s);
  struct ch_readyq *q = &s->rq[CH_PRIO_NORMAL];
  struct ch_coro *c = q->head;
  if (!c) return NULL;
  q->head = c->next;
  if (!q->head) q->tail = NULL;
  q->runs++;
  return c;
}

/* Takes c, READY or NEW, out of its queue. O(n) in the queue's length:
** only priority changes of queued coroutines come here. */
static void unqueue(struct ch_sched *s, struct ch_coro *c)
{
  struct ch_readyq *q = &s->rq[c->prio];
  struct ch_coro **pp = &q->head, *prev = NULL;
  while (*pp != c) {
    assert(*pp);
    prev = *pp;
    pp = &(*pp)->next;
  }
  *pp = c->next;
  if (q->tail == c) q->tail = prev;
  if (!q->head) {
    if (c->prio != CH_PRIO_NORMAL) s->other_mask &= ~(1u << c->prio);
    s->skipped[c->prio] = 0;
  }
  q->pushes--;
  c->next = NULL;
}

/* The most switches between two clock reads once a batch is long (see
** batch_goes_on): a read costs about half a yield, so one per 64 switches
** adds under 1% to the cheapest yield. */
#define CLOCK_STRIDE 64u

/* Called when the batch's direct switch count reaches batch_stop: non-zero
** if the batch may go on, with the next stop set. A batch ends when the
** ready queue runs dry (switch_out_inline), when its time budget is spent
** or at fair_switches, whichever comes first; by default the switch limit
** is too high to matter, so under load the loop polls once per drained
** queue or per budget, and each epoll_wait takes many events. (Polling
** every 64 switches, the old default, cut a busy queue into many small
** polls: at 1,000 echo connections about 20 events per epoll_wait.) The
** clock is read at the batch's switches 1, 2, 4, ..., 64 and then every
** CLOCK_STRIDE switches: a batch of even slices overshoots its time by 2x
** at most, and a long batch by CLOCK_STRIDE slices at most. */
static __attribute__((noinline)) int batch_goes_on(struct ch_sched *s)
{
  uint32_t b = s->batch;
  if (b >= s->fair_switches || s->stopping) return 0;
  if (s->fair_ticks && ticks() - s->batch_tick >= s->fair_ticks) return 0;
  uint32_t next = s->fair_ticks ? b + (b < CLOCK_STRIDE ? b : CLOCK_STRIDE) : s->fair_switches;
  s->batch_stop = next < s->fair_switches ? next : s->fair_switches;
  return 1;
}

/* COPY mode: a coroutine cannot switch straight to another, since the
** other's frames must be copied onto the very stack the switch runs on.
** So it switches to the loop's context, on the thread's own stack, which
** saves and loads the frames (ch_coro_load) and switches on to next, or
** carries on with the loop when next is NULL. Two switches and the copies
** per yield, where SEPARATE mode makes one switch. */
static inline void via_loop(struct ch_sched *s, struct ch_coro *self, struct ch_coro *next)
{
  s->handoff = next;
  ch_ctx_switch(&self->ctx, &s->ctx);
}

/* Switches from self (already moved out of RUNNING) to the next ready
** coroutine, or to the loop when the batch is used up or nothing is
** ready. Returns when self is resumed. Inlined into ch_sched_park: in
** COPY mode a frame of its own would be one more in every parked
** coroutine's saved image; ch_yield and coro_main call switch_out. */
static inline __attribute__((always_inline)) void switch_out_inline(struct ch_sched *s, struct ch_coro *self)
{
  struct ch_coro *next;
  SAN_FAKE(fake);
  if ((s->batch < s->batch_stop || batch_goes_on(s)) && (next = pop_ready(s)) != NULL) {
    s->batch++;
    assert(next->state == CH_CORO_READY || next->state == CH_CORO_NEW);
    next->state = CH_CORO_RUNNING;
    s->current = ch_running = next;
    s->switches++;
    san_leave(SAN_FAKE_OF(fake, self->state != CH_CORO_EXITED), next);
    if (s->copy_mode) via_loop(s, self, next);
    else ch_ctx_switch(&self->ctx, &next->ctx);
  } else {
    s->current = ch_running = NULL;
    s->switches++;
    san_leave(SAN_FAKE_OF(fake, self->state != CH_CORO_EXITED), NULL);
    if (s->copy_mode) via_loop(s, self, NULL);
    else ch_ctx_switch(&self->ctx, &s->ctx);
  }
  san_enter(fake);
  assert(s->current == self && self->state == CH_CORO_RUNNING);
  if (resume_hook) resume_hook(self);
}

static __attribute__((noinline)) void switch_out(struct ch_sched *s, struct ch_coro *self)
{
  switch_out_inline(s, self);
}

/* First and last frame of every coroutine (ch_ctx_entry calls it). */
static void coro_main(void *p)
{
  san_enter(NULL);
  struct ch_coro *self = p;
  struct ch_sched *s = self->sched;
  self->fn(self->arg);
  assert(s->current == self);
  self->state = CH_CORO_EXITED;
  ch_timerq_del(&s->timers, &self->timer);   /* a lazy timer left armed */
  s->nlive--;
  s->nweak -= self->weak;
  self->next = s->dead;   /* the loop frees the stack we are standing on */
  s->dead = self;
  switch_out(s, self);
  ch_panic("exited coroutine %d resumed", self->id);
}

static void reclaim(struct ch_sched *s)
{
  while (s->dead) {
    struct ch_coro *c = s->dead;
    assert(c->state == CH_CORO_EXITED && c != s->current);
    s->dead = c->next;
    ch_coro_free(c);
    s->exited++;
  }
}

/* -- Coroutine API -------------------------------------------------------- */

/* Inlined into both entry points, so ch_spawn's constant class folds the
** class test of push_ready away. */
static inline int spawn(void (*fn)(void *), void *arg, int prio)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  struct ch_coro *c = ch_coro_new(s, fn, arg, coro_main, &err);
  if (!c) return err;
  c->prio = (uint8_t)prio;
  s->nlive++;
  s->spawned++;
  push_ready(s, c);
  return c->id;
}

int ch_spawn_prio(void (*fn)(void *), void *arg, int prio)
{
  if (prio < CH_PRIO_HIGH || prio > CH_PRIO_LOW) return -EINVAL;
  return spawn(fn, arg, prio);
}

int ch_spawn(void (*fn)(void *), void *arg)
{
  return spawn(fn, arg, CH_PRIO_NORMAL);
}

int ch_coro_set_priority(struct ch_coro *c, int prio)
{
  if (prio < CH_PRIO_HIGH || prio > CH_PRIO_LOW) return -EINVAL;
  if (c->prio == prio) return 0;
  /* A queued coroutine moves to the back of its new class's queue; any
  ** other takes the class at its next wakeup. */
  int queued = c->state == CH_CORO_READY || c->state == CH_CORO_NEW;
  if (queued) unqueue(c->sched, c);
  c->prio = (uint8_t)prio;
  if (queued) push_ready(c->sched, c);
  return 0;
}

int ch_coro_priority(const struct ch_coro *c) { return c->prio; }

void ch_coro_set_weak(struct ch_coro *c, int on)
{
  struct ch_sched *s = c->sched;
  uint8_t weak = on != 0;
  if (c->weak == weak || c->state == CH_CORO_EXITED) return;
  c->weak = weak;
  if (weak) s->nweak++;
  else s->nweak--;
  /* An armed park timer was counted by its old weakness: re-add it (the
  ** del left a free slot, so the add cannot fail). */
  if (c->timer.heap_index) {
    uint64_t when = c->timer.when_ns;
    ch_timerq_del(&s->timers, &c->timer);
    c->timer.weak = weak;
    (void)ch_timerq_add(&s->timers, &c->timer, when);
  } else {
    c->timer.weak = weak;
  }
}

int ch_sched_set_fairness(unsigned switches, unsigned usec)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  if (switches == 0 || switches > CH_SCHED_SWITCHES_MAX || usec > CH_SCHED_USEC_MAX)
    return -EINVAL;
  s->fair_switches = switches;
  s->fair_usec = usec;
  set_fair_ticks(s);
  return 0;
}

int ch_sched_set_idle_hook(void (*fn)(void))
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  s->idle_hook = fn;
  return 0;
}

int ch_self(void)
{
  struct ch_coro *c = ch_current();
  return c ? c->id : 0;
}

void ch_yield(void)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_coro *self = s ? s->current : NULL;
  if (!self) return;
  assert(self->state == CH_CORO_RUNNING);
  self->state = CH_CORO_READY;
  push_ready(s, self);
  switch_out(s, self);
}

/* The coroutine timer fired. It may be left over from an earlier park
** (see ch_sched_park): then it times out nothing, or moves on to the
** current park's later deadline. */
static void park_timeout(struct ch_timer *t)
{
  struct ch_coro *c = (struct ch_coro *)((char *)t - offsetof(struct ch_coro, timer));
  if ((c->state != CH_CORO_WAITING && c->state != CH_CORO_SLEEPING) || !c->deadline)
    return;
  if (c->deadline <= ch_now_ns()) ch_unpark(c, -ETIMEDOUT);
  else ch_timerq_add(&c->sched->timers, t, c->deadline);
}

int ch_sched_park(uint64_t deadline_ns, int uncancellable, int state)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_coro *self = s ? s->current : NULL;
  if (!self) return -EINVAL;
  if (self->cancelled && !uncancellable) {
    self->cancel_hits++;
    return -ECANCELED;
  }
  /* The timer is lazy: a park that ends early leaves it armed, and the
  ** next park keeps it if it fires no later than the new deadline (it then
  ** moves itself on when it fires). A request/response loop with a 60 s
  ** read timeout so makes no heap operation per park, where arming and
  ** stopping cost a heap insert and delete (docs/benchmarks.md). */
  self->deadline = deadline_ns;
  if (deadline_ns && (!self->timer.heap_index || self->timer.when_ns > deadline_ns)) {
    self->timer.cb = park_timeout;
    self->timer.weak = self->weak;
    if (ch_timerq_add(&s->timers, &self->timer, deadline_ns) < 0) return -ENOMEM;
  }
  assert(self->state == CH_CORO_RUNNING && self->sched == s);
  assert(state == CH_CORO_WAITING || state == CH_CORO_SLEEPING);
  self->uncancellable = (uint8_t)uncancellable;
  self->wake_value = 0;
  self->state = (uint8_t)state;
  if (state == CH_CORO_SLEEPING) s->nsleeping++;
  else s->nwaiting++;
  if (park_hook) park_hook(self);
  switch_out_inline(s, self);
  assert(self->state == CH_CORO_RUNNING);
  self->deadline = 0;
  self->wait = CH_WAIT_NONE;
  if (self->wake_value == -ECANCELED) self->cancel_hits++;
  return self->wake_value;
}

int ch_park(int64_t timeout_ms)
{
  if (ch_running) ch_coro_note_wait(ch_running, CH_WAIT_PARK, -1);
  return ch_sched_park(ch_sched_deadline(timeout_ms), 0, CH_CORO_WAITING);
}

int ch_unpark(struct ch_coro *c, int value)
{
  struct ch_sched *s = c->sched;
  /* Only c's own thread may wake it (ch_post carries wakeups across). */
  assert(s == ch_sched_tls);
  if (c->state == CH_CORO_WAITING) s->nwaiting--;
  else if (c->state == CH_CORO_SLEEPING) s->nsleeping--;
  else return -EALREADY;
  assert(value >= 0 || value == -ETIMEDOUT || value == -ECANCELED);
  c->wake_value = value;
  c->state = CH_CORO_READY;
  push_ready(s, c);
  return 0;
}

void ch_cancel(struct ch_coro *c)
{
  c->cancelled = 1;
  if (!c->uncancellable) ch_unpark(c, -ECANCELED);
}

int ch_cancelled(const struct ch_coro *c) { return c->cancelled; }

int ch_sleep_ms(int64_t ms)
{
  if (!ch_current()) {
    if (ms > 0) {
      struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
      while (ch_libc.clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {}
    }
    return 0;
  }
  if (ms <= 0) {
    ch_yield();
    return ch_current()->cancelled ? -ECANCELED : 0;
  }
  ch_coro_note_wait(ch_running, CH_WAIT_SLEEP, -1);
  int r = ch_sched_park(ch_sched_deadline(ms), 0, CH_CORO_SLEEPING);
  return r == -ETIMEDOUT ? 0 : r;
}

int ch_set_stack_size(size_t bytes)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  if (bytes == 0) bytes = CH_STACK_DEFAULT;
  if (bytes < CH_STACK_MIN) return -EINVAL;
  s->stack_size = bytes;
  return 0;
}

int ch_sched_set_stack_mode(int mode)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  if (mode != CH_STACK_SEPARATE && mode != CH_STACK_COPY) return -EINVAL;
#ifdef CH_ASAN
  if (mode == CH_STACK_COPY) return -ENOTSUP;
#endif
  if (s->copy_mode == (mode == CH_STACK_COPY)) return 0;
  /* Live coroutines own stacks of the mode they were spawned in; dead
  ** ones not reclaimed yet are freed by that mode's rule. */
  if (s->nlive || s->dead) return -EBUSY;
  s->copy_mode = mode == CH_STACK_COPY;
  return 0;
}

int ch_sched_stack_mode(void)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  return s->copy_mode ? CH_STACK_COPY : CH_STACK_SEPARATE;
}

int ch_sched_set_io_backend(int backend)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  if (backend != CH_IO_EPOLL && backend != CH_IO_URING) return -EINVAL;
  int r = use_backend(s, backend_of(backend));
  if (backend == CH_IO_URING && r != -EBUSY) s->ring_err = r;
  else if (r == 0) s->ring_err = 0;
  return r;
}

int ch_sched_io_backend(int *why)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  if (why) *why = s->ring_err;
  return s->be->kind;
}

void ch_set_yield_check(int (*check)(struct ch_coro *c)) { yield_check = check; }
void ch_set_resume_hook(void (*hook)(struct ch_coro *c)) { resume_hook = hook; }
void ch_set_park_hook(void (*hook)(struct ch_coro *c)) { park_hook = hook; }

void ch_coro_info(const struct ch_coro *c, struct ch_coro_info *out)
{
  out->wait = CH_WAIT_NONE;
  out->fd = -1;
  out->deadline_ns = 0;
  switch (c->state) {
  case CH_CORO_RUNNING: out->state = CH_INFO_RUNNING; return;
  case CH_CORO_NEW:
  case CH_CORO_READY: out->state = CH_INFO_READY; return;
  case CH_CORO_EXITED: out->state = CH_INFO_ENDED; return;
  default: break;
  }
  out->state = CH_INFO_PARKED;
  out->wait = c->wait;
  out->deadline_ns = c->deadline;
  if (c->wait == CH_WAIT_READ || c->wait == CH_WAIT_WRITE || c->wait == CH_WAIT_POLL) out->fd = c->wait_fd;
}

/* -- Cross-thread posts --------------------------------------------------- */

int ch_post(struct ch_sched *s, void (*fn)(void *), void *arg)
{
  struct ch_post *p = malloc(sizeof *p);
  if (!p) return -ENOMEM;
  p->fn = fn;
  p->arg = arg;
  pthread_mutex_lock(&s->post_lock);
  p->next = s->posts;
  s->posts = p;
  pthread_mutex_unlock(&s->post_lock);
  uint64_t one = 1;
  /* EAGAIN means the counter is already non-zero: a wakeup is pending. */
  ssize_t w = ch_libc.write(s->wakefd, &one, sizeof one);
  (void)w;
  return 0;
}

static void run_posts(struct ch_sched *s)
{
  pthread_mutex_lock(&s->post_lock);
  struct ch_post *p = s->posts;
  s->posts = NULL;
  pthread_mutex_unlock(&s->post_lock);
  /* Reverse to run posts in the order they were made. */
  struct ch_post *in_order = NULL;
  while (p) {
    struct ch_post *next = p->next;
    p->next = in_order;
    in_order = p;
    p = next;
  }
  while (in_order) {
    struct ch_post *next = in_order->next;
    in_order->fn(in_order->arg);
    free(in_order);
    in_order = next;
  }
}

/* -- The loop ------------------------------------------------------------- */

/* Runs one batch: the loop switches into the first ready coroutine, which
** chains directly to the next ones; control comes back here when the batch
** is used up or nothing is ready. */
static void run_batch(struct ch_sched *s)
{
  struct ch_coro *c = pop_ready(s);
  if (!c) return;
  assert(c->state == CH_CORO_READY || c->state == CH_CORO_NEW);
  s->batch = 0;
  s->batch_tick = ticks();
  s->batch_stop = s->fair_ticks ? 1 : s->fair_switches;
  c->state = CH_CORO_RUNNING;
  s->current = ch_running = c;
  s->switches++;
  SAN_FAKE(fake);
  san_leave(&fake, c);
  if (s->copy_mode) {
    /* Every switch of the batch comes back here (via_loop): load the
    ** next coroutine's frames, from this stack, and go on. */
    do {
      assert(s->current == c && c->state == CH_CORO_RUNNING);
      s->handoff = NULL;
      ch_coro_load(c);
      ch_ctx_switch(&s->ctx, &c->ctx);
    } while ((c = s->handoff) != NULL);
  } else {
    ch_ctx_switch(&s->ctx, &c->ctx);
  }
  san_enter(fake);
  assert(s->current == NULL);
  reclaim(s);
}

/* COPY mode: images are malloc'd, and free keeps the memory of a burst's
** images in the heap (they are mostly under the mmap threshold), so after
** a burst of deep coroutines the idle memory would not follow use. Once
** per CH_STACK_TRIM_NS, if the images shrank by IMAGES_TRIM_BYTES or more
** since the last look, malloc_trim(0) hands free heap pages back
** (MADV_DONTNEED, middle of the heap included). It walks every arena: a
** few milliseconds for a big heap, at most once a second, only after such
** a drop. */
#define IMAGES_TRIM_BYTES (4u << 20)

static void trim_images(struct ch_sched *s, uint64_t now)
{
  if (now - s->images_trimmed_ns < CH_STACK_TRIM_NS) return;
  s->images_trimmed_ns = now;
  if (s->saved_peak - s->saved_alloc >= IMAGES_TRIM_BYTES) malloc_trim(0);
  s->saved_peak = s->saved_alloc;
}

/* After a burst: once no coroutine was spawned or ended and no fd was
** closed for CH_STACK_TRIM_NS, give back what the burst left. The stack
** pool's warm stacks beyond its watermark (ch_stack_trim gives them back
** only from a loop that runs, and an idle loop sleeps in epoll_wait), and
** the malloc heap's free pages: glibc returns only the top of a heap on
** free, so the connection structs, buffers and request records of 15,000
** dropped connections stayed as ~200 MB of free chunks under a live one.
** malloc_trim(0) hands every free page back (MADV_DONTNEED, middle of the
** heap included); it walks every arena, a few milliseconds for a big heap,
** once per idle spell.
**
** Ends count as much as spawns: a burst's memory is freed when its
** coroutines end or its connections close (an idle connection has no
** coroutine: a TLS client that never sends a request is closed by a
** timer), and a burst held open for longer than CH_STACK_TRIM_NS
** (half-open requests, TLS handshakes, streams stalled on a zero window)
** ends long after its last spawn: a trim armed by spawns alone had run,
** with nothing to give back yet, before the frees it was for. A timer or
** a sleeping coroutine that wakes does not count, so a heartbeat does not
** keep the trim from coming. While the trim is due, loop_timeout wakes
** the loop once for it; after it, an idle loop sleeps for good again:
** only a spawn, an end or a close starts another spell. */

/* Starts the idle spell's clock again if a coroutine was spawned or ended
** or an fd closed since the last look; non-zero then. */
static int moved(struct ch_sched *s, uint64_t now)
{
  uint64_t m = s->spawned + s->exited + s->closed;
  if (m == s->idle_moved) return 0;
  s->idle_moved = m;
  s->idle_since_ns = now;
  s->idle_trimmed = 0;
  return 1;
}

static void trim_idle(struct ch_sched *s, uint64_t now)
{
  if (moved(s, now) || s->idle_trimmed || now - s->idle_since_ns < CH_STACK_TRIM_NS) return;
  s->idle_trimmed = 1;
  /* The host's part first (cohost collects its Lua heap there): what it
  ** frees is in the heap malloc_trim walks next. An fd its finalizers
  ** close starts another spell, and one more trim a second later. */
  if (s->idle_hook) s->idle_hook();
  ch_stack_trim_idle(&s->stacks);
  malloc_trim(0);
}

/* The poll's timeout, ms: 0 with coroutines ready, else until the first
** timer or the idle trim, -1 for neither. The batch that just ran may
** have ended coroutines or closed fds with nothing left to run: moved
** sees them here, or an idle loop would sleep past the trim they are due. */
static int loop_timeout(struct ch_sched *s)
{
  if (any_ready(s)) return 0;
  uint64_t now = ch_now_ns();
  moved(s, now);
  uint64_t next = ch_timerq_next(&s->timers);
  if (!s->idle_trimmed && s->idle_since_ns + CH_STACK_TRIM_NS < next)
    next = s->idle_since_ns + CH_STACK_TRIM_NS;
  if (next == UINT64_MAX) return -1;
  if (next <= now) return 0;
  /* Round up to whole ms: rounding down would wake early and spin. */
  uint64_t ms = (next - now + 999999) / 1000000;
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

int ch_run(void)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  if (s->current) return -EDEADLK;
  if (s->running) return -EBUSY;
  s->running = 1;
  s->stopping = 0;
  for (;;) {
    uint64_t now = ch_now_ns();
    if (!s->ticks_per_us) calibrate(s, now);
    ch_timerq_expire(&s->timers, now);
    ch_stack_trim(&s->stacks, now);
    if (s->copy_mode) trim_images(s, now);
    trim_idle(s, now);
    run_batch(s);
    if (s->stopping) break;
    /* With no coroutine left but weak ones, every armed timer is a
    ** ch_timer_start one or a weak coroutine's park timeout; weak ones do
    ** not count. */
    if (s->nlive == s->nweak && s->timers.n == s->timers.nweak && !any_ready(s) &&
        !(s->be->pending(s) & CH_BE_SENDING)) {
      pthread_mutex_lock(&s->post_lock);
      int posts = s->posts != NULL;
      pthread_mutex_unlock(&s->post_lock);
      if (!posts) break;
    }
    int t = loop_timeout(s);
    if (s->be->poll(s, t)) run_posts(s);
  }
  /* Stopped with sends queued (ch_stop): they go into the kernel now, so
  ** that a program that ends here loses none it could send. */
  if (s->be->pending(s) & CH_BE_SENDING) s->be->poll(s, 0);
  s->running = 0;
  return 0;
}

void ch_stop(void)
{
  struct ch_sched *s = ch_sched_tls;
  if (!s) return;
  s->stopping = 1;
  /* End the batch at the next switch (batch_goes_on sees stopping): with
  ** no switch limit, a busy queue would otherwise run on for its budget. */
  s->batch_stop = s->batch;
}

/* -- Hooks' view ---------------------------------------------------------- */

int ch_sched_may_park(struct ch_coro *c)
{
  return c->may_yield && (!yield_check || yield_check(c));
}

/* -- Statistics ----------------------------------------------------------- */

int ch_stats(struct ch_stats *st)
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  memset(st, 0, sizeof *st);
  st->coros = s->nlive;
  for (int p = 0; p < CH_PRIO_CLASSES; p++) {
    uint64_t n = s->rq[p].pushes - s->rq[p].runs;
    st->ready += n;
    st->prio_ready[p] = n;
    st->prio_runs[p] = s->rq[p].runs;
  }
  st->waiting = s->nwaiting;
  st->sleeping = s->nsleeping;
  st->spawned = s->spawned;
  st->switches = s->switches;
  st->timers = s->timers.n;
  for (int i = 0; i < CH_STACK_CLASSES; i++) st->stacks_free += s->stacks.cls[i].nfree;
  st->stack_bytes = s->stacks.bytes;
  st->stack_mode = s->copy_mode ? CH_STACK_COPY : CH_STACK_SEPARATE;
  st->io_backend = (uint64_t)s->be->kind;
  st->ring_inflight = s->be->inflight(s);
  st->saved_bytes = s->saved_bytes;
  st->saved_alloc = s->saved_alloc;
  st->copied_bytes = s->copied_bytes;
  return 0;
}

/* -- Progress, for a watchdog on another thread ---------------------------- */

uint64_t ch_sched_switches(const struct ch_sched *s)
{
  return __atomic_load_n(&s->switches, __ATOMIC_RELAXED);
}

struct ch_coro *ch_sched_running(const struct ch_sched *s)
{
  return __atomic_load_n(&s->current, __ATOMIC_RELAXED);
}
