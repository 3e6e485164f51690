/*
** Coroutine stacks: slabs, guards and the per-thread pool. See stack.h for
** the layout. Slabs are never unmapped: a pool only grows, and gives memory
** back with madvise instead, so no munmap happens in steady state.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cohost.h"
#include "stack.h"

/* Valgrind cannot tell a switch to a coroutine stack from a wild stack
** pointer ("client switching stacks?") unless each stack is registered.
** Stacks are never unmapped, so each is registered once, when its slab is
** made; outside valgrind a registration is a few no-op instructions. The
** header comes with Debian's valgrind package; without it, no
** registration (CH_NO_VALGRIND drops it on purpose). */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>) && !defined(CH_NO_VALGRIND)
#include <valgrind/valgrind.h>
#include <valgrind/memcheck.h>
#define STACK_REGISTER(lo, hi) ((void)VALGRIND_STACK_REGISTER(lo, hi))
/* Guards as memcheck's no-access: its leak check at exit then skips them
** instead of faulting on every guard page (10k stacks: 99 s, not 420). */
#define GUARD_NOACCESS(lo, len) ((void)VALGRIND_MAKE_MEM_NOACCESS(lo, len))
/* The depth probes read below where the last coroutine's stack pointer
** was: memcheck calls that undefined. */
#define PROBE_DEFINED(p, len) ((void)VALGRIND_MAKE_MEM_DEFINED(p, len))
#endif
#endif
#ifndef STACK_REGISTER
#define STACK_REGISTER(lo, hi) ((void)0)
#define GUARD_NOACCESS(lo, len) ((void)0)
#define PROBE_DEFINED(p, len) ((void)0)
#endif

/* ASan builds (CH_ASAN): a coroutine leaves poisoned redzones of its last
** frames on its stack when it exits or is abandoned; the next coroutine on
** that stack would trip on them, so a freed stack is unpoisoned. And
** LeakSanitizer scans thread stacks, not our mappings: without the stacks
** as root regions, whatever only a parked coroutine points to looks
** leaked. Each stack is one region: MADV_GUARD_INSTALL guards do not show
** in /proc/self/maps, and the scan would fault on them. */
#ifdef CH_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#define STACK_UNPOISON(base, size) ASAN_UNPOISON_MEMORY_REGION(base, size)
#define STACK_ROOT(base, size) __lsan_register_root_region(base, size)
#else
#define STACK_UNPOISON(base, size) ((void)0)
#define STACK_ROOT(base, size) ((void)0)
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102  /* Linux 6.13 uapi; Debian 12's headers predate it */
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif

struct ch_slab {
  char *base;               /* start of the mapping (first guard) */
  size_t stride;            /* guard + stack size */
  uint32_t n;               /* stacks in this slab */
  _Atomic int owner[CH_STACK_PER_SLAB]; /* coroutine id per stack, 0 if free */
  struct ch_slab *next;     /* process-wide list, read by the fault handler */
};

/* All slabs of all threads. Prepend-only, so the SIGSEGV handler can walk
** it without a lock. */
static _Atomic(struct ch_slab *) slabs;

/* -1 unknown, 1 MADV_GUARD_INSTALL works, 0 fall back to mprotect. */
static _Atomic int light_guards = -1;

static size_t page_round(size_t n)
{
  /* Cached: sysconf costs a tenth of a spawn (docs/benchmarks.md). */
  static _Atomic size_t page;
  size_t pg = atomic_load_explicit(&page, memory_order_relaxed);
  if (!pg) {
    pg = (size_t)sysconf(_SC_PAGESIZE);
    atomic_store_explicit(&page, pg, memory_order_relaxed);
  }
  return (n + pg - 1) & ~(pg - 1);
}

/* Whether reading lo faults, asked of the kernel (a pipe write copies from
** the buffer, and says EFAULT instead of raising SIGSEGV). Raw system
** calls: the runtime's own pipe is no business of the hooks. */
static int guard_works(const char *lo)
{
  int p[2];
  if (syscall(SYS_pipe2, p, O_CLOEXEC | O_NONBLOCK) < 0) return 1;   /* cannot tell: trust it */
  long n = syscall(SYS_write, p[1], lo, 1);
  int faulted = n < 0 && errno == EFAULT;
  syscall(SYS_close, p[0]);
  syscall(SYS_close, p[1]);
  return faulted;
}

static int guard(char *lo)
{
  int light = atomic_load(&light_guards);
  if (light != 0) {
    if (madvise(lo, CH_STACK_GUARD, MADV_GUARD_INSTALL) == 0) {
      if (light == 1) return 0;
      /* The first time, check the guard is real: qemu-user says 0 and
      ** installs nothing. A write(2) from a guard page fails with EFAULT;
      ** from a plain page it succeeds, and then mprotect must do. */
      if (guard_works(lo)) {
        atomic_store(&light_guards, 1);
        return 0;
      }
      madvise(lo, CH_STACK_GUARD, MADV_GUARD_REMOVE);
      atomic_store(&light_guards, 0);
      return mprotect(lo, CH_STACK_GUARD, PROT_NONE) == 0 ? 0 : -errno;
    }
    if (light == 1 || errno != EINVAL) return -errno;
    atomic_store(&light_guards, 0);   /* kernel without guard regions */
  }
  return mprotect(lo, CH_STACK_GUARD, PROT_NONE) == 0 ? 0 : -errno;
}

static int slab_new(struct ch_stack_class *c, struct ch_stack_pool *p)
{
  size_t stride = CH_STACK_GUARD + c->size;
  size_t len = stride * CH_STACK_PER_SLAB;
  struct ch_slab *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  /* MAP_NORESERVE: address space only; pages are committed as touched. */
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) { free(s); return -ENOMEM; }
  for (uint32_t i = 0; i < CH_STACK_PER_SLAB; i++) {
    int r = guard(m + i * stride);
    if (r < 0) { munmap(m, len); free(s); return r; }
    GUARD_NOACCESS(m + i * stride, CH_STACK_GUARD);
  }
  if (c->cap < c->nfree + CH_STACK_PER_SLAB) {
    struct ch_stack *f = ch_buf_grow(c->free, sizeof *f, &c->cap, c->nfree + CH_STACK_PER_SLAB,
                                     CH_STACK_PER_SLAB);
    if (!f) { munmap(m, len); free(s); return -ENOMEM; }
    c->free = f;
  }
  s->base = m;
  s->stride = stride;
  s->n = CH_STACK_PER_SLAB;
  s->next = atomic_load(&slabs);
  while (!atomic_compare_exchange_weak(&slabs, &s->next, s)) {}
  /* Push in reverse so the lowest stack is handed out first. Fresh stacks
  ** count as given back: none of their pages is resident yet. */
  for (uint32_t i = CH_STACK_PER_SLAB; i-- > 0;) {
    struct ch_stack *st = &c->free[c->nfree++];
    st->base = m + i * stride + CH_STACK_GUARD;
    st->size = c->size;
    st->slab = s;
    st->index = i;
    st->probe_turn = 0;
    STACK_REGISTER(st->base, (char *)st->base + st->size - 1);
    STACK_ROOT(st->base, st->size);
  }
  p->bytes += len;
  return 0;
}

static struct ch_stack_class *class_of(struct ch_stack_pool *p, size_t size)
{
  for (int i = 0; i < CH_STACK_CLASSES; i++)
    if (p->cls[i].size == size) return &p->cls[i];
  for (int i = 0; i < CH_STACK_CLASSES; i++)
    if (p->cls[i].size == 0) { p->cls[i].size = size; return &p->cls[i]; }
  return NULL;
}

int ch_stack_new(struct ch_stack_pool *p, size_t size, struct ch_stack *st)
{
  if (size < CH_STACK_MIN) size = CH_STACK_MIN;
  size = page_round(size);
  struct ch_stack_class *c = class_of(p, size);
  if (!c) return -EINVAL;   /* more distinct sizes than classes */
  if (c->nfree == 0) {
    int r = slab_new(c, p);
    if (r < 0) return r;
  }
  *st = c->free[--c->nfree];
  if (c->resident > 0) c->resident--;   /* the warm ones sit on top */
  if (c->nfree < c->low) c->low = c->nfree;
  return 0;
}

/* Whether a coroutine went deeper than CH_STACK_KEEP on st: the probe
** word under that depth whose turn it is is not zero. Pages never touched
** (fresh from mmap or given back with madvise) read zero, and a coroutine
** that went past the probes almost surely left a frame's return address
** or saved register in one of them. One load a free, not all eight: each
** probe sits on a page of its own, and eight TLB misses per free were 2.6%
** of an HTTP/2 server's CPU (a coroutine per request; perf). What a deep
** descent leaves stays until madvise, so a later free of the same stack
** reads the other probes: the nearest (where most deep descents show)
** first, the whole set within CH_STACK_PROBES frees. The first read of a
** fresh page maps the zero page, which costs no memory. */
static int probe(const struct ch_stack *st, uint32_t i)
{
  const char *top = (const char *)st->base + st->size;
  const uint64_t *w = (const uint64_t *)(top - CH_STACK_KEEP - (size_t)i * CH_STACK_PROBE_STEP) - 1;
  PROBE_DEFINED(w, sizeof *w);
  return *(const volatile uint64_t *)w != 0;
}

static int went_deep(struct ch_stack *st)
{
  /* The first free after the stack's pages were mapped (or given back)
  ** reads all eight, so that the zero page is mapped under each at once:
  ** faulting one a free would refault warm stacks burst after burst. */
  if (st->probe_turn++ == 0) {
    for (uint32_t i = 0; i < CH_STACK_PROBES; i++)
      if (probe(st, i)) return 1;
    return 0;
  }
  return probe(st, st->probe_turn % CH_STACK_PROBES);
}

void ch_stack_free(struct ch_stack_pool *p, struct ch_stack *st)
{
  struct ch_stack_class *c = class_of(p, st->size);
  ch_stack_set_owner(st, 0);
  STACK_UNPOISON(st->base, st->size);
  /* A deep recursion leaves up to the whole stack resident; the pool keeps
  ** CH_STACK_WATERMARK warm stacks, so give back all but the top
  ** CH_STACK_KEEP at once (a warm stack stays warm where most
  ** coroutines run). */
  if (st->size >= CH_STACK_KEEP + CH_STACK_PROBES * CH_STACK_PROBE_STEP && went_deep(st)) {
    madvise(st->base, st->size - CH_STACK_KEEP, MADV_DONTNEED);
    st->probe_turn = 0;   /* the probes' pages are unmapped again */
  }
  if (c->nfree == c->cap) {
    struct ch_stack *f = ch_buf_grow(c->free, sizeof *f, &c->cap, c->nfree + 1, CH_STACK_PER_SLAB);
    if (!f) return;   /* leak the stack rather than fail a free */
    c->free = f;
  }
  c->resident++;   /* warm: ch_stack_trim gives pages back later */
  c->free[c->nfree++] = *st;
}

/* Gives back up to n warm stacks of c beyond CH_STACK_WATERMARK, from the
** bottom of the warm region, so the warm ones stay on top. */
static void shed(struct ch_stack_class *c, size_t n)
{
  while (n > 0 && c->resident > CH_STACK_WATERMARK) {
    struct ch_stack *old = &c->free[c->nfree - c->resident];
    madvise(old->base, old->size, MADV_DONTNEED);
    old->probe_turn = 0;
    c->resident--;
    n--;
  }
}

void ch_stack_trim(struct ch_stack_pool *p, uint64_t now_ns)
{
  if (now_ns - p->trimmed_ns < CH_STACK_TRIM_NS) return;
  p->trimmed_ns = now_ns;
  for (int i = 0; i < CH_STACK_CLASSES; i++) {
    struct ch_stack_class *c = &p->cls[i];
    /* Stacks below position low were never taken this period. Of the
    ** warm ones among them, keep CH_STACK_WATERMARK. */
    shed(c, c->low < c->resident ? c->low : c->resident);
    c->low = c->nfree;
  }
}

void ch_stack_trim_idle(struct ch_stack_pool *p)
{
  for (int i = 0; i < CH_STACK_CLASSES; i++) {
    shed(&p->cls[i], SIZE_MAX);
    p->cls[i].low = p->cls[i].nfree;
  }
}

void ch_stack_set_owner(const struct ch_stack *st, int id)
{
  atomic_store_explicit(&st->slab->owner[st->index], id, memory_order_relaxed);
}

int ch_stack_guard_owner(const void *addr)
{
  const char *a = addr;
  for (struct ch_slab *s = atomic_load(&slabs); s; s = s->next) {
    if (a < s->base || a >= s->base + s->stride * s->n) continue;
    size_t i = (size_t)(a - s->base) / s->stride;
    size_t off = (size_t)(a - s->base) % s->stride;
    if (off >= CH_STACK_GUARD) return 0;   /* inside a stack, not a guard */
    int id = atomic_load_explicit(&s->owner[i], memory_order_relaxed);
    return id > 0 ? id : -1;
  }
  return 0;
}

int ch_stack_light_guards(void)
{
  return atomic_load(&light_guards) == 1;
}
