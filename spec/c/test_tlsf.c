/*
** Tests of the TLSF allocator of the shared dicts (host/shdict/tlsf.h),
** alone, on arenas in static buffers: allocation, free and coalescing,
** shrinking, exhaustion and fragmentation, and ch_tlsf_check after each.
**
** The costs used are tlsf.h's: a block is need + 8 bytes rounded up to 8,
** at least 16, and an arena laid out from offset 8 to offset size spans
** size - 16 bytes (its 8-byte end sentinel comes off the end).
*/
#include "helpers.h"

#include "shdict/tlsf.h"

#define SMALL 4096u             /* region bytes of most tests */
#define BIG (1u << 20)          /* of the random and copy tests */

static uint64_t mem[BIG / 8];   /* the region; uint64_t for 8-alignment */
static uint64_t mem2[BIG / 8];  /* a second one, at another address */
static struct ch_tlsf t;

/* -- Helpers ---------------------------------------------------------------- */

/* Lays out an empty arena over the first size bytes of mem. */
static uint32_t fresh(uint32_t size)
{
  memset(mem, 0, size);
  ch_tlsf_init(&t, mem, 8, size);
  assert_null(ch_tlsf_check(&t, mem));
  return t.free_bytes;
}

/* Allocates need bytes until the arena refuses, keeping up to max payload
** offsets in out, then takes every smaller free block that is left with
** 8-byte allocations, so no free byte remains. How many of need were had. */
static int pack(uint64_t need, uint32_t *out, int max)
{
  int n = 0;
  uint32_t p;
  while ((p = ch_tlsf_alloc(&t, mem, need))) {
    assert_true(n < max);
    out[n++] = p;
  }
  while (ch_tlsf_alloc(&t, mem, 8)) {}
  assert_int_equal(t.free_bytes, 0);
  assert_null(ch_tlsf_check(&t, mem));
  return n;
}

static void fill_pattern(void *base, uint32_t p, uint32_t n, unsigned seed)
{
  unsigned char *b = (unsigned char *)base + p;
  for (uint32_t i = 0; i < n; i++) b[i] = (unsigned char)(seed * 31 + i);
}

static int pattern_intact(void *base, uint32_t p, uint32_t n, unsigned seed)
{
  const unsigned char *b = (const unsigned char *)base + p;
  for (uint32_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)(seed * 31 + i)) return 0;
  return 1;
}

/* xorshift32: the same sequence on every run. */
static uint32_t rnd_state = 2463534242u;
static uint32_t rnd(void)
{
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 17;
  rnd_state ^= rnd_state << 5;
  return rnd_state;
}

/* -- Allocation --------------------------------------------------------------- */

static void test_a_new_arena_is_one_free_block_of_all_its_bytes(void **state)
{
  (void)state;
  assert_int_equal(fresh(SMALL), SMALL - 16);
  /* One block: its whole payload can be had in one allocation. */
  uint32_t p = ch_tlsf_alloc(&t, mem, SMALL - 16 - 8);
  assert_int_not_equal(p, 0);
  assert_int_equal(t.free_bytes, 0);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_an_allocation_is_aligned_inside_the_arena_and_costs_its_block(void **state)
{
  (void)state;
  uint32_t before = fresh(SMALL);
  uint32_t p = ch_tlsf_alloc(&t, mem, 100);
  assert_int_equal(p % 8, 0);
  assert_true(p >= t.arena + 8 && p + 100 <= t.arena_end);
  assert_int_equal(before - t.free_bytes, 112);   /* 100 + 8, rounded up to 8 */
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_a_tiny_allocation_costs_the_minimum_block(void **state)
{
  (void)state;
  uint32_t before = fresh(SMALL);
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, 0), 0);
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, 1), 0);
  assert_int_equal(before - t.free_bytes, 2 * 16);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_live_allocations_never_overlap(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[64], n[64];
  int k = 0;
  for (; k < 64; k++) {
    n[k] = 1 + rnd() % 120;
    if (!(p[k] = ch_tlsf_alloc(&t, mem, n[k]))) break;
    fill_pattern(mem, p[k], n[k], (unsigned)k);
  }
  assert_true(k > 20);
  for (int i = 0; i < k; i++) assert_true(pattern_intact(mem, p[i], n[i], (unsigned)i));
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_a_request_larger_than_the_arena_never_fits(void **state)
{
  (void)state;
  uint32_t all = fresh(SMALL) - 8;   /* the payload of the one block */
  assert_false(ch_tlsf_fits(&t, all + 1));
  assert_false(ch_tlsf_fits(&t, (uint64_t)UINT32_MAX + 1));
  assert_int_equal(ch_tlsf_alloc(&t, mem, all + 1), 0);
  assert_int_equal(ch_tlsf_alloc(&t, mem, (uint64_t)UINT32_MAX + 1), 0);
  assert_true(ch_tlsf_fits(&t, all));
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, all), 0);
  /* Full now, but it could still fit once emptied. */
  assert_true(ch_tlsf_fits(&t, all));
  assert_null(ch_tlsf_check(&t, mem));
}

/* -- Free and coalescing ------------------------------------------------------ */

static void test_freeing_every_block_gives_back_one_block_of_the_whole_arena(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  int n = pack(24, p, 512);
  /* Free in a shuffled order, so each kind of merge happens. */
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint32_t)(i + 1));
    uint32_t x = p[i]; p[i] = p[j]; p[j] = x;
  }
  for (int i = 0; i < n; i++) {
    ch_tlsf_free(&t, mem, p[i]);
    assert_null(ch_tlsf_check(&t, mem));
  }
  /* pack's fillers at the end stay used; what was freed must now be one
  ** block, which one allocation takes whole. */
  assert_int_equal(t.free_bytes, (uint32_t)n * 32);
  assert_int_equal(ch_tlsf_alloc(&t, mem, (uint64_t)n * 32 - 8), t.arena + 8);
  assert_int_equal(t.free_bytes, 0);
}

static void test_a_freed_block_merges_with_the_free_block_before_it(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  pack(24, p, 512);                        /* 32-byte blocks, nothing free */
  assert_int_equal(ch_tlsf_alloc(&t, mem, 56), 0);
  ch_tlsf_free(&t, mem, p[10]);
  ch_tlsf_free(&t, mem, p[11]);            /* after a free one */
  assert_null(ch_tlsf_check(&t, mem));
  assert_int_equal(ch_tlsf_alloc(&t, mem, 56), p[10]);   /* 64: both blocks */
}

static void test_a_freed_block_merges_with_the_free_block_after_it(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  pack(24, p, 512);
  ch_tlsf_free(&t, mem, p[11]);
  ch_tlsf_free(&t, mem, p[10]);            /* before a free one */
  assert_null(ch_tlsf_check(&t, mem));
  assert_int_equal(ch_tlsf_alloc(&t, mem, 56), p[10]);
}

static void test_a_freed_block_merges_with_free_blocks_on_both_sides(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  pack(24, p, 512);
  ch_tlsf_free(&t, mem, p[10]);
  ch_tlsf_free(&t, mem, p[12]);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 56), 0);   /* two 32s, apart */
  ch_tlsf_free(&t, mem, p[11]);                      /* between them */
  assert_null(ch_tlsf_check(&t, mem));
  assert_int_equal(t.free_bytes, 96);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 88), p[10]);   /* 96: all three */
  assert_int_equal(t.free_bytes, 0);
}

/* -- Exhaustion and fragmentation --------------------------------------------- */

static void test_an_exhausted_arena_refuses_until_a_block_is_freed(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  int n = pack(24, p, 512);
  assert_true(n > 100);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 1), 0);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 24), 0);
  ch_tlsf_free(&t, mem, p[n / 2]);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 24), p[n / 2]);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 1), 0);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_free_bytes_scattered_in_small_blocks_cannot_serve_a_larger_request(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  int n = pack(24, p, 512);
  for (int i = 0; i < n; i += 2) ch_tlsf_free(&t, mem, p[i]);
  assert_null(ch_tlsf_check(&t, mem));
  /* Half the arena is free, in 32-byte holes between used blocks. */
  assert_true(t.free_bytes >= SMALL / 3);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 25), 0);    /* 40 contiguous */
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, 24), 0);
  /* Freeing a neighbour joins two holes and a used block: 96 bytes. */
  ch_tlsf_free(&t, mem, p[3]);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 88), p[2]);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_a_remainder_too_small_for_a_block_stays_with_the_allocation(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  pack(32, p, 512);                        /* 40-byte blocks */
  ch_tlsf_free(&t, mem, p[5]);
  assert_int_equal(t.free_bytes, 40);
  /* 24 needs 32 bytes; the 8 left over cannot be a block, so all 40 go. */
  assert_int_equal(ch_tlsf_alloc(&t, mem, 24), p[5]);
  assert_int_equal(t.free_bytes, 0);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_a_remainder_big_enough_for_a_block_is_split_off(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t p[512];
  pack(40, p, 512);                        /* 48-byte blocks */
  ch_tlsf_free(&t, mem, p[5]);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 24), p[5]);   /* 32 of the 48 */
  assert_int_equal(t.free_bytes, 16);
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, 8), 0);   /* the other 16 */
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_a_block_of_the_requests_own_class_is_found_when_no_larger_class_has_one(void **state)
{
  (void)state;
  fresh(SMALL);
  /* 264 bytes is in the class [256, 272). A request for a 264-byte block
  ** is rounded up to the next class, [272, 288), which is empty: only
  ** the look into its own class finds the block. */
  uint32_t a = ch_tlsf_alloc(&t, mem, 256);
  uint32_t p[512];
  pack(8, p, 512);
  ch_tlsf_free(&t, mem, a);
  assert_int_equal(t.free_bytes, 264);
  assert_int_equal(ch_tlsf_alloc(&t, mem, 256), a);
  assert_null(ch_tlsf_check(&t, mem));
}

/* -- Shrinking ------------------------------------------------------------------ */

static void test_shrinking_gives_back_a_tail_big_enough_to_be_a_block(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t a = ch_tlsf_alloc(&t, mem, 200);   /* 208 */
  uint32_t p[512];
  pack(8, p, 512);
  assert_true(ch_tlsf_shrink(&t, mem, a, 24));   /* keeps 32 */
  assert_int_equal(t.free_bytes, 176);
  assert_null(ch_tlsf_check(&t, mem));
  assert_int_equal(ch_tlsf_alloc(&t, mem, 168), a + 32);
}

static void test_shrinking_keeps_a_tail_too_small_to_be_a_block(void **state)
{
  (void)state;
  uint32_t before = fresh(SMALL);
  uint32_t a = ch_tlsf_alloc(&t, mem, 24);    /* 32 */
  assert_true(ch_tlsf_shrink(&t, mem, a, 16));   /* 24 would leave 8 */
  assert_int_equal(before - t.free_bytes, 32);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_shrinking_refuses_a_size_the_block_cannot_hold(void **state)
{
  (void)state;
  uint32_t before = fresh(SMALL);
  uint32_t a = ch_tlsf_alloc(&t, mem, 20);    /* 32: holds 24 */
  assert_false(ch_tlsf_shrink(&t, mem, a, 25));
  assert_int_equal(before - t.free_bytes, 32);
  assert_true(ch_tlsf_shrink(&t, mem, a, 24));
  assert_int_equal(before - t.free_bytes, 32);
  assert_null(ch_tlsf_check(&t, mem));
}

static void test_a_shrunk_tail_merges_with_the_free_block_after_it(void **state)
{
  (void)state;
  uint32_t all = fresh(SMALL);
  uint32_t a = ch_tlsf_alloc(&t, mem, 200);   /* the rest stays free */
  assert_true(ch_tlsf_shrink(&t, mem, a, 8));    /* keeps 16 */
  assert_null(ch_tlsf_check(&t, mem));           /* no two free neighbours */
  assert_int_equal(t.free_bytes, all - 16);
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, all - 16 - 8), 0);   /* one block */
}

/* -- The arena as a whole ------------------------------------------------------ */

static void test_an_arena_copied_to_another_address_stays_valid(void **state)
{
  (void)state;
  fresh(BIG);
  uint32_t p[200], n[200];
  for (int i = 0; i < 200; i++) {
    n[i] = 1 + rnd() % 3000;
    p[i] = ch_tlsf_alloc(&t, mem, n[i]);
    assert_int_not_equal(p[i], 0);
    fill_pattern(mem, p[i], n[i], (unsigned)i);
  }
  /* Offsets, not pointers: the copy works where it lands. */
  memcpy(mem2, mem, BIG);
  memset(mem, 0xff, BIG);
  struct ch_tlsf t2 = t;
  assert_null(ch_tlsf_check(&t2, mem2));
  for (int i = 0; i < 200; i += 2) {
    assert_true(pattern_intact(mem2, p[i], n[i], (unsigned)i));
    ch_tlsf_free(&t2, mem2, p[i]);
  }
  for (int i = 1; i < 200; i += 2) assert_true(pattern_intact(mem2, p[i], n[i], (unsigned)i));
  assert_null(ch_tlsf_check(&t2, mem2));
}

static void test_random_allocations_and_frees_keep_every_invariant(void **state)
{
  (void)state;
  uint32_t all = fresh(BIG);
  enum { LIVE = 256 };
  uint32_t p[LIVE] = { 0 }, n[LIVE] = { 0 };
  int refused = 0;
  for (int step = 0; step < 20000; step++) {
    int i = (int)(rnd() % LIVE);
    if (p[i]) {
      assert_true(pattern_intact(mem, p[i], n[i], (unsigned)i));
      ch_tlsf_free(&t, mem, p[i]);
      p[i] = 0;
    } else {
      /* Mostly small, some up to 64 KiB: LIVE of those overfill the arena. */
      n[i] = rnd() % 8 ? 1 + rnd() % 512 : 1 + rnd() % 65536;
      if ((p[i] = ch_tlsf_alloc(&t, mem, n[i]))) fill_pattern(mem, p[i], n[i], (unsigned)i);
      else refused++;
    }
    if (step % 500 == 0) assert_null(ch_tlsf_check(&t, mem));
  }
  assert_true(refused > 0);
  for (int i = 0; i < LIVE; i++)
    if (p[i]) {
      assert_true(pattern_intact(mem, p[i], n[i], (unsigned)i));
      ch_tlsf_free(&t, mem, p[i]);
    }
  assert_null(ch_tlsf_check(&t, mem));
  assert_int_equal(t.free_bytes, all);
  assert_int_not_equal(ch_tlsf_alloc(&t, mem, all - 8), 0);
}

static void test_check_reports_a_damaged_arena(void **state)
{
  (void)state;
  fresh(SMALL);
  uint32_t a = ch_tlsf_alloc(&t, mem, 100);
  ch_tlsf_alloc(&t, mem, 100);
  ch_tlsf_free(&t, mem, a);
  struct ch_tlsf saved = t;
  t.free_bytes += 8;
  assert_string_equal(ch_tlsf_check(&t, mem), "free byte count");
  t = saved;
  t.fl_map = 0;
  assert_string_equal(ch_tlsf_check(&t, mem), "first-level bitmap");
  t = saved;
  /* A block's size word (the 4 bytes before its payload) rewritten. */
  uint32_t *size = (uint32_t *)((char *)mem + a - 4);
  uint32_t was = *size;
  *size = 4;
  assert_string_equal(ch_tlsf_check(&t, mem), "block size");
  *size = was;
  assert_null(ch_tlsf_check(&t, mem));
}

int main(void)
{
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_a_new_arena_is_one_free_block_of_all_its_bytes),
    TH_TEST(test_an_allocation_is_aligned_inside_the_arena_and_costs_its_block),
    TH_TEST(test_a_tiny_allocation_costs_the_minimum_block),
    TH_TEST(test_live_allocations_never_overlap),
    TH_TEST(test_a_request_larger_than_the_arena_never_fits),
    TH_TEST(test_freeing_every_block_gives_back_one_block_of_the_whole_arena),
    TH_TEST(test_a_freed_block_merges_with_the_free_block_before_it),
    TH_TEST(test_a_freed_block_merges_with_the_free_block_after_it),
    TH_TEST(test_a_freed_block_merges_with_free_blocks_on_both_sides),
    TH_TEST(test_an_exhausted_arena_refuses_until_a_block_is_freed),
    TH_TEST(test_free_bytes_scattered_in_small_blocks_cannot_serve_a_larger_request),
    TH_TEST(test_a_remainder_too_small_for_a_block_stays_with_the_allocation),
    TH_TEST(test_a_remainder_big_enough_for_a_block_is_split_off),
    TH_TEST(test_a_block_of_the_requests_own_class_is_found_when_no_larger_class_has_one),
    TH_TEST(test_shrinking_gives_back_a_tail_big_enough_to_be_a_block),
    TH_TEST(test_shrinking_keeps_a_tail_too_small_to_be_a_block),
    TH_TEST(test_shrinking_refuses_a_size_the_block_cannot_hold),
    TH_TEST(test_a_shrunk_tail_merges_with_the_free_block_after_it),
    TH_TEST(test_an_arena_copied_to_another_address_stays_valid),
    TH_TEST(test_random_allocations_and_frees_keep_every_invariant),
    TH_TEST(test_check_reports_a_damaged_arena),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
