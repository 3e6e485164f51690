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

struct ch_slab;

struct ch_stack {
  void *base;               /* lowest usable byte, just above the guard */
  size_t size;              /* usable bytes; the top is base + size */
  struct ch_slab *slab;     /* owning slab, for owner bookkeeping */
  uint32_t index;           /* position in the slab */
};

/* Free stacks of one size, per thread. */
struct ch_stack_class {
  size_t size;              /* usable bytes of every stack in this class */
  struct ch_stack *free;    /* LIFO of free stacks (warm ones on top) */
  size_t nfree, cap;        /* entries used / allocated in free */
  size_t resident;          /* free stacks not yet given back with madvise */
};

#define CH_STACK_CLASSES 4

struct ch_stack_pool {
  struct ch_stack_class cls[CH_STACK_CLASSES]; /* by size; unused have size 0 */
  size_t bytes;             /* address space of all slabs of this pool */
};

/* Takes a stack of size bytes (page-rounded) from p, mapping a new slab when
** the pool is empty. Returns 0 or -errno (-ENOMEM, or the guard's error). */
int ch_stack_new(struct ch_stack_pool *p, size_t size, struct ch_stack *st);

/* Returns st to p. Beyond CH_STACK_WATERMARK free stacks of its size, its
** pages go back to the kernel (MADV_DONTNEED) but the mapping stays. */
void ch_stack_free(struct ch_stack_pool *p, struct ch_stack *st);

/* Records which coroutine id runs on st, for the overflow report. */
void ch_stack_set_owner(const struct ch_stack *st, int id);

/* Finds the stack whose guard contains addr. Returns the owner id (> 0),
** -1 for the guard of a free stack, or 0 if addr is in no guard. Async-signal-safe: walks a list that is
** only ever prepended to. */
int ch_stack_guard_owner(const void *addr);

/* Non-zero if guards are MADV_GUARD_INSTALL regions (no extra mappings). */
int ch_stack_light_guards(void);

#endif
