/* Coroutine memory: structs are recycled through a per-scheduler free list,
** stacks through the stack pool, so spawning in steady state allocates
** nothing and makes no system call. In COPY stack mode a coroutine has no
** stack of its own: it runs on its scheduler's shared stack, and its used
** part lives in a heap image while another coroutine runs there (see
** ch_coro_load and docs/stacks.md). */
#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coro.h"
#include "panic.h"
#include "sched.h"

/* Valgrind's memcheck marks stack memory no-access once the stack pointer
** has moved above it, and it cannot know that the loop, running on the
** thread's stack, may write a coroutine's frames below the last stack
** pointer seen on the shared stack. So the frames' range is made
** addressable before they are copied or forged there; memcpy then carries
** each byte's definedness from the image. Outside valgrind a few no-op
** instructions; without the header, nothing (as in stack.c). */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>) && !defined(CH_NO_VALGRIND)
#include <valgrind/memcheck.h>
#define STACK_WRITABLE(lo, n) ((void)VALGRIND_MAKE_MEM_UNDEFINED(lo, n))
#endif
#endif
#ifndef STACK_WRITABLE
#define STACK_WRITABLE(lo, n) ((void)0)
#endif

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

/* -- Shared stacks (COPY mode) -------------------------------------------- */

/* The shared stack for coroutines of size bytes, mapped on first use. A
** shared stack is never given back: saved images hold addresses on it. */
static struct ch_shared *shared_of(struct ch_sched *s, size_t size, int *err)
{
  struct ch_shared *free_slot = NULL;
  for (int i = 0; i < CH_STACK_CLASSES; i++) {
    struct ch_shared *sh = &s->shared[i];
    if (sh->asked == size) return sh;
    if (!sh->asked && !free_slot) free_slot = sh;
  }
  if (!free_slot) { *err = -EINVAL; return NULL; }   /* as ch_stack_new */
  int r = ch_stack_new(&s->stacks, size, &free_slot->stack);
  if (r < 0) { *err = r; return NULL; }
  free_slot->asked = size;
  return free_slot;
}

/* -- Images (COPY mode) ------------------------------------------------------ */

/* A parked coroutine's image is its used stack, [ctx.sp, top). Coroutines
** parked through the same calls (every idle connection of a server, in
** its read) have images of one length, and most of their words are the
** same: return addresses, saved frame pointers, and addresses of locals
** on the shared stack, which is at one address for all of them. So an
** image of up to REF_MAX bytes is stored as a delta against a reference
** image of its length, the first one saved (kept per shared stack, freed
** with the last image stored against it): a bitmap of the words that
** differ, then those words. A Lua connection parked in receiveany (656
** bytes, 82 words) differs from its reference in 23 or 24 words: a
** 211-byte delta instead of the 656-byte image (docs/stacks.md). Cost per
** save: one pass over the image against the reference, on top of the
** copy; per load, the copy of the reference and the patch. Stored whole:
** the image of a coroutine that yielded (it runs again soon), one the
** delta would not shrink by a quarter, and one of another length when
** every reference slot is taken. */
#define REF_MAX 4096    /* bytes: deeper images are rare and stored whole */

/* Words read and written on the stack, which holds anything. */
typedef uint64_t __attribute__((may_alias)) word;

struct ch_coro_ref {
  uint32_t len;         /* bytes, a multiple of 8 */
  uint32_t users;       /* images stored against it now */
  uint64_t w[];         /* the len / 8 words; never change */
};

/* The heap image at c->saved when c->saved_delta (else c->saved holds the
** stack's bytes, as they were). */
struct image {
  struct ch_coro_ref *ref;  /* what it is a delta against */
  uint64_t w[];             /* the bitmap (one bit a word, set if it
                            ** differs from ref's), then the differing words */
};

/* The reference image for len bytes on sh, made from the image at sp if
** there is none and a slot is free; NULL if none can be had (the image is
** stored whole then). */
static struct ch_coro_ref *ref_for(struct ch_sched *s, struct ch_shared *sh,
                                   const void *sp, size_t len)
{
  struct ch_coro_ref **slot = NULL;
  for (int i = 0; i < CH_CORO_REFS; i++) {
    if (sh->refs[i] && sh->refs[i]->len == len) return sh->refs[i];
    if (!sh->refs[i] && !slot) slot = &sh->refs[i];
  }
  if (!slot) return NULL;
  struct ch_coro_ref *r = malloc(sizeof *r + len);
  if (!r) return NULL;   /* stored whole */
  r->len = (uint32_t)len;
  r->users = 0;
  memcpy(r->w, sp, len);
  s->saved_alloc += sizeof *r + len;
  *slot = r;
  return r;
}

/* Drops the delta's use of its reference, freeing the reference with its
** last user. */
static void ref_drop(struct ch_sched *s, struct ch_shared *sh, struct image *img)
{
  struct ch_coro_ref *r = img->ref;
  if (--r->users) return;
  for (int i = 0; i < CH_CORO_REFS; i++)
    if (sh->refs[i] == r) sh->refs[i] = NULL;
  s->saved_alloc -= sizeof *r + r->len;
  free(r);
}

/* Whether images may be compared word by word: under valgrind the
** compare of a frame's uninitialised padding would be reported on every
** save, so images are stored whole there. */
static int may_delta(void)
{
#ifdef RUNNING_ON_VALGRIND
  return !RUNNING_ON_VALGRIND;
#else
  return 1;
#endif
}

/* A delta of the n words at sp against ref's: bits gets one bit a word,
** set where they differ, and out the differing words in order; returns
** how many. Branch-free: every word is stored at out[k] and k moves on
** only past a differing one, so out needs room for n words. */
static size_t encode(const word *sp, const uint64_t *ref, size_t n, uint64_t *bits,
                     uint64_t *out)
{
  size_t k = 0;
  for (size_t b = 0; b * 64 < n; b++) {
    size_t base = b * 64, end = n - base < 64 ? n - base : 64;
    uint64_t m = 0;
    for (size_t j = 0; j < end; j++) {
      uint64_t v = sp[base + j], d = v != ref[base + j];
      out[k] = v;
      k += d;
      m |= d << j;
    }
    bits[b] = m;
  }
  return k;
}

/* The delta being made, before its size is known: bitmap and words of an
** image of up to REF_MAX bytes. */
static __thread uint64_t scratch[REF_MAX / 8 / 64 + 1 + REF_MAX / 8];

/* Copies the occupant's used stack, [ctx.sp, top), to its heap image.
** Nothing below the saved sp is live: the switch that stored it was a
** call, and the x86-64 red zone (128 bytes below rsp) belongs only to leaf
** functions, which make no call; AArch64 has no red zone. Cost: one
** delta pass (compare and store, into scratch) and one copy of the
** result or of the used bytes, plus a malloc when the image
** outgrows its buffer or uses less than half of it (buffers follow use
** both ways). */
static void save(struct ch_sched *s, struct ch_coro *c)
{
  char *top = (char *)c->stack.base + c->stack.size;
  size_t len = (size_t)(top - (char *)c->ctx.sp);
  assert(c->saved_len == 0 && len <= c->stack.size);
  if (len > UINT32_MAX - sizeof(struct image))
    ch_panic("copy stack: coroutine %d uses %zu bytes of stack, over 4 GiB", c->id, len);
  const word *sp = c->ctx.sp;
  size_t n = len / 8, nb = (n + 63) / 64, differ = 0;
  struct ch_coro_ref *r = NULL;
  /* Only a parked coroutine's image is worth the delta pass: one that
  ** yielded (READY) runs again within the batch, and two that take turns
  ** would pay the pass at every switch (a ch_yield with a 1 KiB frame
  ** went from ~80 to ~350 ns with it). */
  if (c->state != CH_CORO_READY && len % 8 == 0 && len <= REF_MAX && may_delta() &&
      (r = ref_for(s, c->shared, sp, len))) {
    differ = encode(sp, r->w, n, scratch, scratch + nb);
    /* A new reference is this image (nothing differs); an old one has
    ** users, so dropping it here frees nothing. */
    if ((nb + differ) * 8 > len / 4 * 3) r = NULL;   /* saves too little */
  }
  size_t need = r ? sizeof(struct image) + (nb + differ) * 8 : len;
  if (need > c->saved_cap || need < c->saved_cap / 2) {
    free(c->saved);
    s->saved_alloc -= c->saved_cap;
    c->saved_cap = 0;
    if (!(c->saved = malloc(need)))
      ch_panic("copy stack: no memory to save %zu bytes of coroutine %d", len, c->id);
    c->saved_cap = (uint32_t)need;
    s->saved_alloc += need;
  }
  if (s->saved_alloc > s->saved_peak) s->saved_peak = s->saved_alloc;
  c->saved_delta = r != NULL;
  if (r) {
    struct image *img = c->saved;
    img->ref = r;
    r->users++;
    memcpy(img->w, scratch, (nb + differ) * 8);
  } else {
    memcpy(c->saved, sp, len);   /* at the buffer's start: aligned as malloc's */
  }
  c->saved_len = (uint32_t)len;
  s->saved_bytes += len;
  s->copied_bytes += len;
}

/* Puts c's saved image back at ctx.sp, exactly as it was saved. */
static void restore(struct ch_sched *s, struct ch_coro *c)
{
  size_t len = c->saved_len;
  STACK_WRITABLE(c->ctx.sp, len);
  if (c->saved_delta) {
    struct image *img = c->saved;
    struct ch_coro_ref *r = img->ref;
    word *sp = c->ctx.sp;
    size_t n = len / 8, nb = (n + 63) / 64;
    const uint64_t *bits = img->w, *in = img->w + nb;
    memcpy(sp, r->w, len);
    for (size_t b = 0; b < nb; b++)
      for (uint64_t m = bits[b]; m; m &= m - 1)
        sp[b * 64 + (size_t)__builtin_ctzll(m)] = *in++;
    ref_drop(s, c->shared, img);
    c->saved_delta = 0;
  } else {
    memcpy(c->ctx.sp, c->saved, len);
  }
  s->saved_bytes -= len;
  s->copied_bytes += len;
  c->saved_len = 0;
}

void ch_coro_load(struct ch_coro *c)
{
  struct ch_sched *s = c->sched;
  struct ch_shared *sh = c->shared;
  struct ch_coro *occ = sh->occupant;
  /* The fault handler names the coroutine on the stack when its guard is
  ** hit; a relaxed store, about free. */
  ch_stack_set_owner(&sh->stack, c->id);
  if (occ == c) return;   /* still there: nothing ran on it since */
  if (occ && occ->state != CH_CORO_EXITED) save(s, occ);
  sh->occupant = c;
  char *top = (char *)c->stack.base + c->stack.size;
  if (!c->ctx.sp) {   /* never ran: forge its first frame at the top */
    STACK_WRITABLE(top - CH_CTX_FRAME - 16, CH_CTX_FRAME + 16);  /* + alignment */
    ch_ctx_make(&c->ctx, top, sh->entry, c);
    return;
  }
  restore(s, c);
}

size_t ch_coro_saved_bytes(const struct ch_coro *c) { return c->saved_len; }

/* -- Life ------------------------------------------------------------------ */

/* Freed coroutine structs kept for reuse per scheduler. Bounded, as the
** stack pool's warm stacks are: the 15,000 structs of a burst kept for good
** were scattered over the malloc heap, each pinning a page that the
** burst's freed buffers around it could not give back. */
#define SPARE_MAX 256

static void spare_push(struct ch_sched *s, struct ch_coro *c)
{
  if (s->nspare >= SPARE_MAX) {
    free(c);
    return;
  }
  c->next = s->spare;
  s->spare = c;
  s->nspare++;
}

struct ch_coro *ch_coro_new(struct ch_sched *s, void (*fn)(void *), void *arg,
                            void (*entry)(void *), int *err)
{
  struct ch_coro *c = s->spare;
  if (c) {
    s->spare = c->next;
    s->nspare--;
  } else if (!(c = malloc(sizeof *c))) { *err = -ENOMEM; return NULL; }
  memset(c, 0, sizeof *c);
  if (s->copy_mode) {
    /* No stack of its own and no frame yet: ch_coro_load forges the
    ** first one when the coroutine first runs (ctx.sp stays NULL). */
    struct ch_shared *sh = shared_of(s, s->stack_size, err);
    if (!sh) {
      spare_push(s, c);
      return NULL;
    }
    sh->entry = entry;
    c->shared = sh;
    c->stack = sh->stack;
  } else {
    int r = ch_stack_new(&s->stacks, s->stack_size, &c->stack);
    if (r < 0) {
      spare_push(s, c);
      *err = r;
      return NULL;
    }
  }
  c->sched = s;
  c->fn = fn;
  c->arg = arg;
  c->id = new_id();
  c->state = CH_CORO_NEW;
  c->may_yield = 1;
  c->prio = CH_PRIO_NORMAL;
  if (!c->shared) {
    ch_stack_set_owner(&c->stack, c->id);
    ch_ctx_make(&c->ctx, (char *)c->stack.base + c->stack.size, entry, c);
  }
  return c;
}

void ch_coro_free(struct ch_coro *c)
{
  struct ch_sched *s = c->sched;
  if (c->shared) {
    if (c->shared->occupant == c) c->shared->occupant = NULL;
    if (c->saved_len && c->saved_delta) ref_drop(s, c->shared, c->saved);
    s->saved_bytes -= c->saved_len;
    s->saved_alloc -= c->saved_cap;
    free(c->saved);
  } else {
    ch_stack_free(&s->stacks, &c->stack);
  }
  spare_push(s, c);
}

int ch_coro_id(const struct ch_coro *c) { return c->id; }
void ch_coro_set_udata(struct ch_coro *c, void *udata) { c->udata = udata; }
void ch_coro_set_may_yield(struct ch_coro *c, int on) { c->may_yield = on != 0; }
