/*
** Application metrics in shared memory. See metrics.h.
*/
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cohost.h"
#include "log.h"
#include "stats/metrics.h"

#define MAX_METRICS 256
#define MAX_SERIES 4096         /* a power of two: the table's mask */
#define NAME_MAX_LEN 96
#define HELP_MAX_LEN 256
#define KEY_MAX_LEN CH_METRICS_KEY_MAX   /* label values, '\x1f'-joined */
#define SLOT_VALUES (CH_METRICS_MAX_BUCKETS + 3)   /* buckets, +Inf, sum, count */

struct metric {
  char name[NAME_MAX_LEN];
  char help[HELP_MAX_LEN];
  char labels[CH_METRICS_MAX_LABELS][32];
  int nlabels;
  int type;                     /* CH_METRIC_* */
  int nbuckets;
  double buckets[CH_METRICS_MAX_BUCKETS];
};

/* A series: published once (state 2) and never moved or freed. Values are
** atomics: doubles as their bits (counters, gauges, a histogram's sum),
** integers for a histogram's bucket counts and count. */
struct series {
  _Atomic int state;            /* 0 free, 2 published */
  int metric;
  char key[KEY_MAX_LEN];
  _Atomic uint64_t v[SLOT_VALUES];
};

struct registry {
  pthread_mutex_t lock;         /* process-shared, robust: registration only */
  _Atomic int nmetrics;         /* metrics[0 .. nmetrics) are complete */
  int nseries;
  struct metric metrics[MAX_METRICS];
  struct series series[MAX_SERIES];
};

static struct registry *reg;    /* mapped by ch_metrics_init; shared */

static const double default_buckets[] = { .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10 };

static void lock(void)
{
  if (pthread_mutex_lock(&reg->lock) == EOWNERDEAD) pthread_mutex_consistent(&reg->lock);
}

static void unlock(void)
{
  pthread_mutex_unlock(&reg->lock);
}

int ch_metrics_init(void)
{
  /* ~1.5 MiB of address space; untouched pages cost nothing. */
  void *p = mmap(NULL, sizeof *reg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -errno;
  reg = p;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&reg->lock, &a);
  pthread_mutexattr_destroy(&a);
  return 0;
}

/* Prometheus' metric and label name rule: [a-zA-Z_:][a-zA-Z0-9_:]*
** (labels without ':'). */
static int valid_name(const char *s, int colon, size_t max)
{
  size_t n = strlen(s);
  if (n == 0 || n >= max) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
             (i > 0 && c >= '0' && c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

static int same_shape(const struct metric *m, int type, const char *const *labels, int nlabels)
{
  if (m->type != type || m->nlabels != nlabels) return 0;
  for (int i = 0; i < nlabels; i++)
    if (strcmp(m->labels[i], labels[i]) != 0) return 0;
  return 1;
}

int ch_metrics_register(const char *name, const char *help, int type, const char *const *labels,
                        int nlabels, const double *buckets, int nbuckets)
{
  if (!reg) return -ENOSYS;
  if (!valid_name(name, 1, NAME_MAX_LEN) || nlabels < 0 || nlabels > CH_METRICS_MAX_LABELS ||
      type < CH_METRIC_COUNTER || type > CH_METRIC_HISTOGRAM)
    return -EINVAL;
  for (int i = 0; i < nlabels; i++)
    if (!valid_name(labels[i], 0, sizeof reg->metrics[0].labels[0]) || strcmp(labels[i], "le") == 0)
      return -EINVAL;
  if (type == CH_METRIC_HISTOGRAM) {
    if (!buckets) {
      buckets = default_buckets;
      nbuckets = (int)(sizeof default_buckets / sizeof default_buckets[0]);
    }
    if (nbuckets < 1 || nbuckets > CH_METRICS_MAX_BUCKETS) return -EINVAL;
    for (int i = 0; i < nbuckets; i++)
      if (!isfinite(buckets[i]) || (i && buckets[i] <= buckets[i - 1])) return -EINVAL;
  }
  lock();
  int n = atomic_load(&reg->nmetrics), id = -1;
  for (int i = 0; i < n; i++)
    if (strcmp(reg->metrics[i].name, name) == 0) {
      id = same_shape(&reg->metrics[i], type, labels, nlabels) ? i : -EEXIST;
      break;
    }
  if (id == -1) {
    if (n == MAX_METRICS) {
      id = -ENOSPC;
    } else {
      struct metric *m = &reg->metrics[n];
      memset(m, 0, sizeof *m);
      snprintf(m->name, sizeof m->name, "%s", name);
      snprintf(m->help, sizeof m->help, "%s", help ? help : "");
      for (int i = 0; i < nlabels; i++) snprintf(m->labels[i], sizeof m->labels[i], "%s", labels[i]);
      m->nlabels = nlabels;
      m->type = type;
      if (type == CH_METRIC_HISTOGRAM) {
        m->nbuckets = nbuckets;
        memcpy(m->buckets, buckets, (size_t)nbuckets * sizeof *buckets);
      }
      atomic_store_explicit(&reg->nmetrics, n + 1, memory_order_release);
      id = n;
    }
  }
  unlock();
  return id;
}

/* FNV-1a over the metric id and the key. */
static uint32_t hash(int id, const char *key)
{
  uint32_t h = 2166136261u ^ (uint32_t)id;
  h *= 16777619u;
  for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
    h ^= *p;
    h *= 16777619u;
  }
  return h;
}

int ch_metrics_series(int id, const char *const *values, int nvalues)
{
  if (!reg) return -ENOSYS;
  if (id < 0 || id >= atomic_load_explicit(&reg->nmetrics, memory_order_acquire)) return -EINVAL;
  if (nvalues != reg->metrics[id].nlabels) return -EINVAL;
  char key[KEY_MAX_LEN];
  size_t len = 0;
  for (int i = 0; i < nvalues; i++) {
    size_t l = strlen(values[i]);
    if (len + l + 2 > sizeof key || memchr(values[i], '\x1f', l)) return -EINVAL;
    if (i) key[len++] = '\x1f';
    memcpy(key + len, values[i], l);
    len += l;
  }
  key[len] = '\0';
  uint32_t h = hash(id, key);
  /* Lock-free probe; a miss takes the lock and probes again, since
  ** another thread may be publishing the same series. */
  for (int locked = 0; locked < 2; locked++) {
    if (locked) lock();
    for (uint32_t i = 0; i < MAX_SERIES; i++) {
      struct series *s = &reg->series[(h + i) & (MAX_SERIES - 1)];
      int st = atomic_load_explicit(&s->state, memory_order_acquire);
      if (st == 0) {
        if (!locked) break;
        if (reg->nseries >= MAX_SERIES - MAX_SERIES / 8) break;   /* keep probes short */
        s->metric = id;
        memcpy(s->key, key, len + 1);
        reg->nseries++;
        atomic_store_explicit(&s->state, 2, memory_order_release);
        unlock();
        return (int)(s - reg->series);
      }
      if (s->metric == id && strcmp(s->key, key) == 0) {
        if (locked) unlock();
        return (int)(s - reg->series);
      }
    }
    if (locked) unlock();
  }
  return -ENOSPC;
}

static void add_double(_Atomic uint64_t *p, double v)
{
  uint64_t old = atomic_load_explicit(p, memory_order_relaxed), nw;
  do {
    double d;
    memcpy(&d, &old, sizeof d);
    d += v;
    memcpy(&nw, &d, sizeof nw);
  } while (!atomic_compare_exchange_weak_explicit(p, &old, nw, memory_order_relaxed, memory_order_relaxed));
}

static struct series *get(int series, int *type)
{
  if (!reg || series < 0 || series >= MAX_SERIES) return NULL;
  struct series *s = &reg->series[series];
  if (atomic_load_explicit(&s->state, memory_order_acquire) != 2) return NULL;
  *type = reg->metrics[s->metric].type;
  return s;
}

int ch_metrics_add(int series, double v)
{
  int type;
  struct series *s = get(series, &type);
  if (!s || type == CH_METRIC_HISTOGRAM || (type == CH_METRIC_COUNTER && !(v >= 0)) || !isfinite(v))
    return -EINVAL;
  add_double(&s->v[0], v);
  return 0;
}

int ch_metrics_set(int series, double v)
{
  int type;
  struct series *s = get(series, &type);
  if (!s || type != CH_METRIC_GAUGE || isnan(v)) return -EINVAL;
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  atomic_store_explicit(&s->v[0], bits, memory_order_relaxed);
  return 0;
}

int ch_metrics_observe(int series, double v)
{
  int type;
  struct series *s = get(series, &type);
  if (!s || type != CH_METRIC_HISTOGRAM || isnan(v)) return -EINVAL;
  const struct metric *m = &reg->metrics[s->metric];
  int b = 0;
  while (b < m->nbuckets && v > m->buckets[b]) b++;   /* b == nbuckets: +Inf */
  atomic_fetch_add_explicit(&s->v[b], 1, memory_order_relaxed);
  add_double(&s->v[CH_METRICS_MAX_BUCKETS + 1], v);
  atomic_fetch_add_explicit(&s->v[CH_METRICS_MAX_BUCKETS + 2], 1, memory_order_relaxed);
  return 0;
}

/* -- Rendering ------------------------------------------------------------- */

struct buf {
  char *p;
  size_t len, cap;
  int oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    char *p = ch_buf_grow(b->p, 1, &b->cap, b->len + (size_t)n + 1, 8192);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
  }
}

/* A label value with \, " and newline escaped, as the format wants. */
static void put_value(struct buf *b, const char *v, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (v[i] == '\\' || v[i] == '"') put(b, "\\%c", v[i]);
    else if (v[i] == '\n') put(b, "\\n");
    else put(b, "%c", v[i]);
  }
}

/* {a="x",b="y"[,le="..."]} for series s; nothing for no labels. */
static void put_labels(struct buf *b, const struct metric *m, const struct series *s, const char *le)
{
  if (!m->nlabels && !le) return;
  put(b, "{");
  const char *v = s->key;
  for (int i = 0; i < m->nlabels; i++) {
    const char *end = strchr(v, '\x1f');
    size_t n = end ? (size_t)(end - v) : strlen(v);
    put(b, "%s%s=\"", i ? "," : "", m->labels[i]);
    put_value(b, v, n);
    put(b, "\"");
    v = end ? end + 1 : v + n;
  }
  if (le) put(b, "%sle=\"%s\"", m->nlabels ? "," : "", le);
  put(b, "}");
}

/* The shortest of %.15g and %.17g that reads back as v: "0.005", not
** "0.0050000000000000001". */
static const char *fmt_num(double v, char *out, size_t n)
{
  snprintf(out, n, "%.15g", v);
  if (strtod(out, NULL) != v) snprintf(out, n, "%.17g", v);
  return out;
}

static double as_double(const _Atomic uint64_t *p)
{
  uint64_t bits = atomic_load_explicit(p, memory_order_relaxed);
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

char *ch_metrics_render(size_t *len)
{
  struct buf b = { malloc(8192), 0, 8192, 0 };
  if (!b.p) return NULL;
  b.p[0] = '\0';
  int n = reg ? atomic_load_explicit(&reg->nmetrics, memory_order_acquire) : 0;
  static const char *const types[] = { "", "counter", "gauge", "histogram" };
  char num[40];
  /* O(metrics x table) over the slots: a scrape, not the request path. */
  for (int id = 0; id < n; id++) {
    const struct metric *m = &reg->metrics[id];
    put(&b, "# HELP %s ", m->name);
    for (const char *h = m->help; *h; h++) put(&b, *h == '\n' ? "\\n" : *h == '\\' ? "\\\\" : "%c", *h);
    put(&b, "\n# TYPE %s %s\n", m->name, types[m->type]);
    for (int i = 0; i < MAX_SERIES; i++) {
      const struct series *s = &reg->series[i];
      if (atomic_load_explicit(&s->state, memory_order_acquire) != 2 || s->metric != id) continue;
      if (m->type != CH_METRIC_HISTOGRAM) {
        put(&b, "%s", m->name);
        put_labels(&b, m, s, NULL);
        put(&b, " %s\n", fmt_num(as_double(&s->v[0]), num, sizeof num));
        continue;
      }
      uint64_t cum = 0;
      char le[32];
      for (int k = 0; k <= m->nbuckets; k++) {
        cum += atomic_load_explicit(&s->v[k], memory_order_relaxed);
        if (k < m->nbuckets) fmt_num(m->buckets[k], le, sizeof le);
        else snprintf(le, sizeof le, "+Inf");
        put(&b, "%s_bucket", m->name);
        put_labels(&b, m, s, le);
        put(&b, " %llu\n", (unsigned long long)cum);
      }
      put(&b, "%s_sum", m->name);
      put_labels(&b, m, s, NULL);
      put(&b, " %s\n", fmt_num(as_double(&s->v[CH_METRICS_MAX_BUCKETS + 1]), num, sizeof num));
      put(&b, "%s_count", m->name);
      put_labels(&b, m, s, NULL);
      /* The count is read after the buckets: a scrape during an observe
      ** may see count one above +Inf's, never below. */
      put(&b, " %llu\n", (unsigned long long)atomic_load_explicit(&s->v[CH_METRICS_MAX_BUCKETS + 2],
                                                                 memory_order_relaxed));
    }
  }
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *len = b.len;
  return b.p;
}
