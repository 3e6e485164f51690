/*
** Tests of growable buffers (struct ch_buf, ch_buf_grow): the growth rule,
** the overflow check, and that a failed growth leaves the buffer as it was.
*/
#include "helpers.h"

static void test_the_first_growth_takes_first_then_capacity_doubles(void **state) {
  (void)state;
  struct ch_buf b = { 0 };
  assert_int_equal(ch_buf_reserve(&b, 10, 512), 0);
  assert_non_null(b.p);
  assert_int_equal(b.cap, 512);
  b.len = 500;
  assert_int_equal(ch_buf_reserve(&b, 12, 512), 0);   /* fits: no growth */
  assert_int_equal(b.cap, 512);
  assert_int_equal(ch_buf_reserve(&b, 13, 512), 0);
  assert_int_equal(b.cap, 1024);
  assert_int_equal(ch_buf_reserve(&b, 5000, 512), 0);   /* doubled until it fits */
  assert_int_equal(b.cap, 8192);
  ch_buf_free(&b);
  assert_null(b.p);
  assert_int_equal(b.len, 0);
  assert_int_equal(b.cap, 0);
}

static void test_a_first_growth_past_first_doubles_from_first(void **state) {
  (void)state;
  struct ch_buf b = { 0 };
  assert_int_equal(ch_buf_reserve(&b, 3000, 512), 0);
  assert_int_equal(b.cap, 4096);
  ch_buf_free(&b);
}

static void test_add_appends_and_keeps_what_was_there(void **state) {
  (void)state;
  struct ch_buf b = { 0 };
  for (int i = 0; i < 1000; i++) assert_int_equal(ch_buf_add(&b, "abcdefgh", 8, 16), 0);
  assert_int_equal(b.len, 8000);
  assert_true(b.cap >= 8000 && b.cap < 16000);
  for (int i = 0; i < 1000; i++) assert_memory_equal(b.p + i * 8, "abcdefgh", 8);
  assert_int_equal(ch_buf_add(&b, NULL, 0, 16), 0);   /* nothing: fine */
  assert_int_equal(b.len, 8000);
  ch_buf_free(&b);
}

static void test_an_overflowing_size_fails_and_leaves_the_buffer(void **state) {
  (void)state;
  struct ch_buf b = { 0 };
  assert_int_equal(ch_buf_add(&b, "xy", 2, 64), 0);
  char *p = b.p;
  assert_int_equal(ch_buf_reserve(&b, SIZE_MAX, 64), -ENOMEM);   /* len + n wraps */
  assert_int_equal(ch_buf_reserve(&b, SIZE_MAX - 1, 64), -ENOMEM);
  assert_ptr_equal(b.p, p);
  assert_int_equal(b.len, 2);
  assert_int_equal(b.cap, 64);
  assert_memory_equal(b.p, "xy", 2);
  ch_buf_free(&b);
}

static void test_an_array_grows_by_the_same_rule_and_checks_elements_times_size(void **state) {
  (void)state;
  size_t cap = 0;
  uint64_t *a = ch_buf_grow(NULL, sizeof *a, &cap, 1, 8);
  assert_non_null(a);
  assert_int_equal(cap, 8);
  for (int i = 0; i < 8; i++) a[i] = (uint64_t)i;
  uint64_t *b = ch_buf_grow(a, sizeof *a, &cap, 9, 8);
  assert_non_null(b);
  assert_int_equal(cap, 16);
  for (int i = 0; i < 8; i++) assert_int_equal(b[i], i);
  /* need * size past SIZE_MAX: refused, the array untouched. */
  size_t before = cap;
  assert_null(ch_buf_grow(b, sizeof *b, &cap, SIZE_MAX / 4, 8));
  assert_int_equal(cap, before);
  for (int i = 0; i < 8; i++) assert_int_equal(b[i], i);
  free(b);
}

int main(void) {
  th_main_init();
  const struct CMUnitTest tests[] = {
    TH_TEST(test_the_first_growth_takes_first_then_capacity_doubles),
    TH_TEST(test_a_first_growth_past_first_doubles_from_first),
    TH_TEST(test_add_appends_and_keeps_what_was_there),
    TH_TEST(test_an_overflowing_size_fails_and_leaves_the_buffer),
    TH_TEST(test_an_array_grows_by_the_same_rule_and_checks_elements_times_size),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
