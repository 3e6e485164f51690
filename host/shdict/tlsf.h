/*
** A TLSF allocator (two-level segregated fit: O(1) allocation and free,
** with coalescing) over an arena addressed by 32-bit offsets. It knows
** blocks, never what the caller keeps in them.
**
** Every offset counts from base, the start of the region the caller
** passes to each call, and every link in the arena is such an offset, so
** the arena works at any address: in a MAP_SHARED region, in every process
** that maps it. 0 is never a block or a payload, so it means "none". The
** control struct may live inside the region (the shared dict keeps it
** there) or anywhere else.
*/
#ifndef CH_TLSF_H
#define CH_TLSF_H

#include <stdint.h>

/* Size classes: below 128 bytes, 16 linear classes of 8 bytes (first
** level 0); above, each power of two split into 16. 26 first levels reach
** 4 GiB. */
#define CH_TLSF_SL_LOG2 4
#define CH_TLSF_SL_COUNT (1u << CH_TLSF_SL_LOG2)
#define CH_TLSF_FL_COUNT (32 - (CH_TLSF_SL_LOG2 + 3) + 1)

struct ch_tlsf {
  uint32_t arena;        /* offset of the first block; read-only */
  uint32_t arena_end;    /* offset of the end sentinel, a used block of size
                         ** 0 that stops coalescing; read-only */
  uint32_t free_bytes;   /* bytes in free blocks, headers included */
  uint32_t fl_map;       /* bit f: some class list of level f is non-empty */
  uint32_t sl_map[CH_TLSF_FL_COUNT];                   /* bit s: list [f][s]
                                                       ** is non-empty */
  uint32_t heads[CH_TLSF_FL_COUNT][CH_TLSF_SL_COUNT];  /* free lists: block
                                                       ** offsets, 0 ends */
};

/* Lays out an empty arena in base from offset first (rounded up to 8,
** and above 0) to offset end: one free block and the sentinel, whose 8
** bytes end it. Writes only the control struct and those two headers,
** O(1), so the rest of a fresh mapping stays untouched. */
void ch_tlsf_init(struct ch_tlsf *t, void *base, uint32_t first, uint32_t end);

/* Allocates need payload bytes (8-aligned); the payload's offset, or 0
** when no free block is big enough. A block costs need + 8 bytes, rounded
** up to 8 and to at least 16. O(1). */
uint32_t ch_tlsf_alloc(struct ch_tlsf *t, void *base, uint64_t need);

/* Frees the payload at payload, merging its block with free neighbours
** (invariant: no two free blocks are adjacent). O(1). */
void ch_tlsf_free(struct ch_tlsf *t, void *base, uint32_t payload);

/* Non-zero if need payload bytes could fit in the arena when it is
** empty: when 0, freeing anything for them is useless. */
int ch_tlsf_fits(const struct ch_tlsf *t, uint64_t need);

/* Shrinks the used block at payload, in place, to hold need payload
** bytes: 0, changing nothing, when it holds fewer; else the tail beyond
** need is given back when it is big enough to be a block of its own (a
** remainder too small for that stays with the block). O(1). */
int ch_tlsf_shrink(struct ch_tlsf *t, void *base, uint32_t payload, uint64_t need);

/* Non-zero if the n bytes at off lie inside the arena: for checks of
** offsets read from a region that may be damaged. */
int ch_tlsf_holds(const struct ch_tlsf *t, uint32_t off, uint32_t n);

/* What is wrong with the arena, or NULL: walks every block and every free
** list, O(blocks). Offsets are bounds-checked before use, so a damaged
** arena is reported, never followed out of it. */
const char *ch_tlsf_check(const struct ch_tlsf *t, void *base);

#endif
