/*
** Coroutine stacks: carved from slabs of many stacks per mapping, each with
** a guard of at least 64 KiB at its low end, pooled per thread.
**
** Slab layout (stride = guard + size), stacks grow down toward their guard:
**   | guard | stack 0 | guard | stack 1 | ... | guard | stack n-1 |
** With MADV_GUARD_INSTALL (Linux 6.13+) the guards live inside the one
** mapping, so a slab is one VMA whatever n is: 100,000 stacks need about
** 1,600 mappings, far under vm.max_map_count (65530). Older kernels fall
** back to mprotect(PROT_NONE), which splits the mapping into 2 VMAs per
** stack and so caps a process near 32,000 stacks.
*/
#ifndef CH_STACK_H
#define CH_STACK_H

#include <stddef.h>
#include <stdint.h>

#define CH_STACK_GUARD      (64 * 1024)   /* LuaJIT's gsub frame can jump 8.8 KB */
#define CH_STACK_DEFAULT    (256 * 1024)
#define CH_STACK_MIN        (16 * 1024)
#define CH_STACK_PER_SLAB   64            /* 64 x 320 KiB = 20 MiB of address space */
#define CH_STACK_WATERMARK  256           /* free stacks kept resident per size */
/* A freed stack whose coroutine went deeper than CH_STACK_KEEP from its
** top gives the pages below back at once (madvise): 64 KiB covers a Lua
** handler's usual depth, a few KiB to about 20. Probed at one of
** CH_STACK_PROBES words CH_STACK_PROBE_STEP apart below that depth, a
** different one at each free of the stack. */
#define CH_STACK_KEEP       (64 * 1024)
#define CH_STACK_PROBES     8
#define CH_STACK_PROBE_STEP 4096

struct ch_slab;

struct ch_stack {
  void *base;               /* lowest usable byte, just above the guard */
  size_t size;              /* usable bytes; the top is base + size */
  struct ch_slab *slab;     /* owning slab, for owner bookkeeping */
  uint32_t index;           /* position in the slab */
  uint32_t probe_turn;      /* frees so far: which probe word the next one
                            ** reads (stack.c's went_deep) */
};

/* Free stacks of one size, per thread. */
struct ch_stack_class {
  size_t size;              /* usable bytes of every stack in this class */
  struct ch_stack *free;    /* LIFO of free stacks (warm ones on top) */
  size_t nfree, cap;        /* entries used / allocated in free */
  size_t resident;          /* free stacks not yet given back with madvise:
                            ** the top `resident` entries of free */
  size_t low;               /* fewest free stacks seen since the last trim:
                            ** that many stayed unused the whole period */
};

#define CH_STACK_CLASSES 4

struct ch_stack_pool {
  struct ch_stack_class cls[CH_STACK_CLASSES]; /* by size; unused have size 0 */
  size_t bytes;             /* address space of all slabs of this pool */
  uint64_t trimmed_ns;      /* when ch_stack_trim last gave pages back */
};

/* Takes a stack of size bytes (page-rounded) from p, mapping a new slab when
** the pool is empty. Returns 0 or -errno (-ENOMEM, or the guard's error). */
int ch_stack_new(struct ch_stack_pool *p, size_t size, struct ch_stack *st);

/* Returns st to p, warm, on top of the free stacks; with its pages below
** CH_STACK_KEEP given back if its coroutine went deeper. */
void ch_stack_free(struct ch_stack_pool *p, struct ch_stack *st);

/* Gives back the pages (MADV_DONTNEED; the mapping stays) of free stacks
** beyond CH_STACK_WATERMARK that stayed unused for a whole period of
** CH_STACK_TRIM_NS: a pool sized to a recent burst keeps its pages while
** bursts keep coming, where trimming at each free refaulted stacks on every
** burst (0.37 page faults per request at 1000 HTTP connections). Cheap to
** call often: the scheduler calls it every loop iteration. */
void ch_stack_trim(struct ch_stack_pool *p, uint64_t now_ns);

#define CH_STACK_TRIM_NS 1000000000u   /* 1 s */

/* Gives back the pages of every free stack beyond CH_STACK_WATERMARK now,
** used or not this period: for a loop that has been idle a whole period
** (sched.c's trim_idle), where ch_stack_trim never runs. */
void ch_stack_trim_idle(struct ch_stack_pool *p);

/* Records which coroutine id runs on st, for the overflow report. */
void ch_stack_set_owner(const struct ch_stack *st, int id);

/* Finds the stack whose guard contains addr. Returns the owner id (> 0),
** -1 for the guard of a free stack, or 0 if addr is in no guard. Async-signal-safe: walks a list that is
** only ever prepended to. */
int ch_stack_guard_owner(const void *addr);

/* Non-zero if guards are MADV_GUARD_INSTALL regions (no extra mappings). */
int ch_stack_light_guards(void);

#endif
