/*
** The TLSF allocator of tlsf.h, after Masmano et al.'s "TLSF: a new
** dynamic memory allocator for real-time systems" (2004): free blocks sit
** in one list per size class, two bitmaps say which lists are non-empty,
** so finding a block is two find-first-set instructions. Blocks carry a
** boundary tag (the free previous block's offset) so a free merges with
** both neighbours in O(1).
*/
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shdict/tlsf.h"

#define SL_LOG2 CH_TLSF_SL_LOG2
#define SL_COUNT CH_TLSF_SL_COUNT
#define FL_COUNT CH_TLSF_FL_COUNT
#define FL_SHIFT (SL_LOG2 + 3)
#define SMALL_BLOCK (1u << FL_SHIFT)  /* 128: below it the classes are linear */

struct blk {
  uint32_t prev;       /* offset of the physically previous block; valid only
                       ** while that block is free (BLK_PREV_FREE) */
  uint32_t size;       /* bytes with this header, a multiple of 8; the low
                       ** bits hold BLK_FREE and BLK_PREV_FREE */
  uint32_t next_free;  /* free blocks only: the class list, offsets */
  uint32_t prev_free;
};

#define BLK_HDR 8u                    /* a used block's overhead */
#define BLK_FREE 1u
#define BLK_PREV_FREE 2u
#define MIN_BLOCK 16u                 /* room for a free block's links */

static inline struct blk *B(void *base, uint32_t off) { return (struct blk *)((char *)base + off); }
static inline uint32_t bsize(const struct blk *b) { return b->size & ~7u; }

/* -- Free lists ------------------------------------------------------------ */

/* The class [fl][sl] of a block of size bytes. */
static void mapping(uint32_t size, int *fl, int *sl)
{
  if (size < SMALL_BLOCK) {
    *fl = 0;
    *sl = (int)(size / 8);
    return;
  }
  int f = 31 - __builtin_clz(size);
  *sl = (int)((size >> (f - SL_LOG2)) ^ SL_COUNT);
  *fl = f - FL_SHIFT + 1;
}

static void free_insert(struct ch_tlsf *t, void *base, uint32_t off)
{
  struct blk *b = B(base, off);
  int fl, sl;
  mapping(bsize(b), &fl, &sl);
  uint32_t head = t->heads[fl][sl];
  b->next_free = head;
  b->prev_free = 0;
  if (head) B(base, head)->prev_free = off;
  t->heads[fl][sl] = off;
  t->fl_map |= 1u << fl;
  t->sl_map[fl] |= 1u << sl;
}

static void free_remove(struct ch_tlsf *t, void *base, uint32_t off)
{
  struct blk *b = B(base, off);
  if (b->next_free) B(base, b->next_free)->prev_free = b->prev_free;
  if (b->prev_free) {
    B(base, b->prev_free)->next_free = b->next_free;
    return;
  }
  int fl, sl;
  mapping(bsize(b), &fl, &sl);
  t->heads[fl][sl] = b->next_free;
  if (!b->next_free) {
    t->sl_map[fl] &= ~(1u << sl);
    if (!t->sl_map[fl]) t->fl_map &= ~(1u << fl);
  }
}

/* A free block of at least size bytes, or 0. Above 128 bytes the request
** is rounded up to the next class boundary, so the head of any list found
** fits (TLSF's good fit); when that finds nothing, a few blocks of the
** request's own class are tried, which matters in a nearly full arena. */
static uint32_t free_find(struct ch_tlsf *t, void *base, uint32_t size)
{
  int fl, sl;
  uint64_t up = size;
  if (size >= SMALL_BLOCK) up += (1ull << (31 - __builtin_clz(size) - SL_LOG2)) - 1;
  if (up <= UINT32_MAX) {
    mapping((uint32_t)up, &fl, &sl);
    if (fl < FL_COUNT) {
      uint32_t m = t->sl_map[fl] & (~0u << sl);
      if (!m) {
        uint32_t f = t->fl_map & (~0u << (fl + 1));   /* fl + 1 <= 26 */
        if (f) {
          fl = __builtin_ctz(f);
          m = t->sl_map[fl];
        }
      }
      if (m) return t->heads[fl][__builtin_ctz(m)];
    }
  }
  mapping(size, &fl, &sl);
  uint32_t off = t->heads[fl][sl];
  for (int i = 0; off && i < 8; i++, off = B(base, off)->next_free)
    if (bsize(B(base, off)) >= size) return off;
  return 0;
}

/* -- Blocks ---------------------------------------------------------------- */

/* The block size that holds need payload bytes, or 0 if it could never fit. */
static uint32_t block_size(const struct ch_tlsf *t, uint64_t need)
{
  uint64_t size = (need + BLK_HDR + 7) & ~7ull;
  if (size < MIN_BLOCK) size = MIN_BLOCK;
  return size <= t->arena_end - t->arena ? (uint32_t)size : 0;
}

void ch_tlsf_init(struct ch_tlsf *t, void *base, uint32_t first, uint32_t end)
{
  t->arena = (first + 7) & ~7u;
  t->arena_end = (end - BLK_HDR) & ~7u;
  assert(t->arena > 0 && t->arena_end >= t->arena + MIN_BLOCK);
  t->fl_map = 0;
  memset(t->sl_map, 0, sizeof t->sl_map);
  memset(t->heads, 0, sizeof t->heads);
  uint32_t size = t->arena_end - t->arena;
  B(base, t->arena)->size = size | BLK_FREE;
  B(base, t->arena_end)->size = 0 | BLK_PREV_FREE;
  B(base, t->arena_end)->prev = t->arena;
  t->free_bytes = size;
  free_insert(t, base, t->arena);
}

int ch_tlsf_fits(const struct ch_tlsf *t, uint64_t need)
{
  return block_size(t, need) != 0;
}

uint32_t ch_tlsf_alloc(struct ch_tlsf *t, void *base, uint64_t need)
{
  uint32_t size = block_size(t, need);
  if (!size) return 0;
  uint32_t off = free_find(t, base, size);
  if (!off) return 0;
  struct blk *b = B(base, off);
  free_remove(t, base, off);
  uint32_t have = bsize(b);
  if (have - size >= MIN_BLOCK) {
    uint32_t rest = off + size;
    struct blk *r = B(base, rest);
    r->size = (have - size) | BLK_FREE;
    B(base, rest + (have - size))->prev = rest;   /* keeps BLK_PREV_FREE */
    free_insert(t, base, rest);
  } else {
    size = have;
    B(base, off + have)->size &= ~BLK_PREV_FREE;
  }
  b->size = size | (b->size & BLK_PREV_FREE);
  t->free_bytes -= size;
  return off + BLK_HDR;
}

void ch_tlsf_free(struct ch_tlsf *t, void *base, uint32_t payload)
{
  uint32_t off = payload - BLK_HDR;
  struct blk *b = B(base, off);
  uint32_t size = bsize(b);
  t->free_bytes += size;
  if (b->size & BLK_PREV_FREE) {
    uint32_t p = b->prev;
    free_remove(t, base, p);
    size += bsize(B(base, p));
    off = p;
    b = B(base, off);
  }
  struct blk *n = B(base, off + size);
  if (n->size & BLK_FREE) {
    free_remove(t, base, off + size);
    size += bsize(n);
  }
  b->size = size | BLK_FREE;
  n = B(base, off + size);
  n->prev = off;
  n->size |= BLK_PREV_FREE;
  free_insert(t, base, off);
}

int ch_tlsf_shrink(struct ch_tlsf *t, void *base, uint32_t payload, uint64_t need)
{
  uint32_t off = payload - BLK_HDR;
  struct blk *b = B(base, off);
  uint32_t have = bsize(b);
  if (have - BLK_HDR < need) return 0;
  uint32_t size = block_size(t, need);
  if (have - size < MIN_BLOCK) return 1;
  B(base, off + size)->size = have - size;       /* a used block, then freed */
  b->size = size | (b->size & BLK_PREV_FREE);
  ch_tlsf_free(t, base, off + size + BLK_HDR);
  return 1;
}

/* -- Checking -------------------------------------------------------------- */

int ch_tlsf_holds(const struct ch_tlsf *t, uint32_t off, uint32_t n)
{
  return off >= t->arena && off <= t->arena_end && t->arena_end - off >= n;
}

const char *ch_tlsf_check(const struct ch_tlsf *t, void *base)
{
  uint32_t off, prev = 0, free_sum = 0, nfree = 0, listed = 0;
  int prev_free = 0;
  for (off = t->arena; off < t->arena_end; off += bsize(B(base, off))) {
    struct blk *b = B(base, off);
    uint32_t sz = bsize(b);
    if (sz < MIN_BLOCK || off + sz > t->arena_end) return "block size";
    if (!(b->size & BLK_PREV_FREE) != !prev_free) return "previous-free flag";
    if (prev_free && b->prev != prev) return "previous-block link";
    if (b->size & BLK_FREE) {
      if (prev_free) return "adjacent free blocks";
      free_sum += sz;
      nfree++;
    }
    prev_free = b->size & BLK_FREE;
    prev = off;
  }
  if (off != t->arena_end) return "arena end";
  if (!(B(base, off)->size & BLK_PREV_FREE) != !prev_free) return "sentinel flag";
  if (free_sum != t->free_bytes) return "free byte count";
  for (int fl = 0; fl < FL_COUNT; fl++) {
    if (!(t->fl_map >> fl & 1) != !t->sl_map[fl]) return "first-level bitmap";
    for (int sl = 0; sl < (int)SL_COUNT; sl++) {
      if (!(t->sl_map[fl] >> sl & 1) != !t->heads[fl][sl]) return "second-level bitmap";
      uint32_t back = 0;
      for (off = t->heads[fl][sl]; off; off = B(base, off)->next_free) {
        if (!ch_tlsf_holds(t, off, sizeof(struct blk))) return "free list link";
        int f, l;
        mapping(bsize(B(base, off)), &f, &l);
        if (!(B(base, off)->size & BLK_FREE) || f != fl || l != sl || B(base, off)->prev_free != back ||
            ++listed > nfree) return "free list";
        back = off;
      }
    }
  }
  if (listed != nfree) return "free blocks missing from the lists";
  return NULL;
}
