/*
** Tests of host/log.c's kinds of event (ch_log_event, ch_log_flush): the
** first event of a kind is written, the others counted, also when worker
** threads log the same kind at once, and the count comes out as one
** summary line. stderr goes to a file the test reads back. No worker runs
** here (no thread calls ch_log_set_worker), so no flush timer is armed:
** the window's end is the spec's part (spec/http2_spec.lua, rapid resets).
*/
#include "helpers.h"

#include "log.h"

/* -- stderr into a file ----------------------------------------------------- */

static int saved_stderr = -1;
static char log_path[] = "/tmp/cohost-test-log-XXXXXX";

static void capture(void)
{
  int fd = mkstemp(log_path);
  assert_true(fd >= 0);
  saved_stderr = dup(STDERR_FILENO);
  assert_true(saved_stderr >= 0);
  assert_true(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
  close(fd);
}

/* Puts stderr back; returns what was written to it (malloc'd). */
static char *release(void)
{
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  FILE *f = fopen(log_path, "r");
  assert_non_null(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(log_path);
  strcpy(log_path, "/tmp/cohost-test-log-XXXXXX");
  return strdup(buf);
}

static int count(const char *text, const char *what)
{
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* -- Tests ----------------------------------------------------------------- */

#define THREADS 4
#define EVENTS  5000   /* per thread */

static struct ch_log_kind flood = CH_LOG_KIND_INIT("test: a flood event");

static void *flooder(void *arg)
{
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < EVENTS; i++)
    ch_log_event(&flood, CH_LOG_WARN, "test: flood event %d from thread %d", i, id);
  return NULL;
}

static void test_threads_logging_one_kind_write_one_line_and_one_count(void **state)
{
  (void)state;
  capture();
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(0, pthread_create(&t[i], NULL, flooder, (void *)(intptr_t)i));
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  /* Within the window: nothing more yet, and the next one is due. */
  int next = ch_log_flush(0);
  char *mid = release();
  assert_int_equal(1, count(mid, "\n"));
  assert_int_equal(1, count(mid, "[warn]"));
  assert_int_equal(1, count(mid, "test: flood event "));
  assert_true(next > 0 && next <= CH_LOG_KIND_WINDOW * 1000);
  free(mid);
  capture();
  assert_int_equal(-1, ch_log_flush(1));   /* the process ends: the count */
  assert_int_equal(-1, ch_log_flush(1));   /* once */
  char *end = release();
  assert_int_equal(1, count(end, "\n"));
  assert_non_null(strstr(end, "[warn]"));
  assert_non_null(strstr(end, "test: a flood event ... and 19,999 more in the last 1 s\n"));
  free(end);
}

static struct ch_log_kind quiet = CH_LOG_KIND_INIT("test: a debug event");
static struct ch_log_kind other = CH_LOG_KIND_INIT("test: another event");

static void test_kinds_count_apart_and_a_level_off_counts_nothing(void **state)
{
  (void)state;
  capture();
  for (int i = 0; i < 3; i++) {
    ch_log_event(&quiet, CH_LOG_DEBUG, "test: debug %d", i);   /* below warn: off */
    ch_log_event(&other, CH_LOG_ERR, "test: other %d", i);
  }
  ch_log_flush(1);
  char *text = release();
  assert_int_equal(0, count(text, "debug"));
  assert_non_null(strstr(text, "[error]"));
  assert_non_null(strstr(text, "test: other 0\n"));
  assert_null(strstr(text, "test: other 1"));
  assert_non_null(strstr(text, "test: another event ... and 2 more in the last 1 s\n"));
  assert_int_equal(2, count(text, "\n"));
  free(text);
}

int main(void)
{
  th_main_init();
  ch_log_set_level(CH_LOG_WARN);
  const struct CMUnitTest tests[] = {
    TH_TEST(test_threads_logging_one_kind_write_one_line_and_one_count),
    TH_TEST(test_kinds_count_apart_and_a_level_off_counts_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
