/*
** Application metrics (counters, gauges, histograms with labels) summed
** across every worker thread and worker process: one registry in memory
** mapped before the master forks (MAP_SHARED), so every process and
** every reload generation adds into the same series, and the process
** serving /metrics renders them without asking anyone. Series are slots
** of a fixed open-addressing table, found without a lock (a slot is
** published once, with a release store) and changed with atomic adds;
** only a new metric or a new series takes the registry's process-shared
** mutex. Generic: cohost.http registers its own series
** (host/http/metrics.c), as scripts do theirs (lib_metrics.c).
*/
#ifndef CH_METRICS_H
#define CH_METRICS_H

#include <stddef.h>

enum { CH_METRIC_COUNTER = 1, CH_METRIC_GAUGE, CH_METRIC_HISTOGRAM };

#define CH_METRICS_MAX_BUCKETS 24     /* upper bounds of one histogram */
#define CH_METRICS_MAX_LABELS 8
#define CH_METRICS_KEY_MAX 240        /* bytes of a series' label values,
                                      ** each joined to the next by one */

/* Maps the registry. Call once at start, before any thread or fork.
** Returns 0 or -errno (then the calls below fail with -ENOSYS). */
int ch_metrics_init(void);

/* The metric called name: registers it on first use with its type, help,
** label names (nlabels of them) and, for a histogram, its bucket upper
** bounds (sorted, +Inf implied; NULL: Prometheus' defaults, .005 to 10).
** A second call with the same name and the same type and labels finds it
** (every worker runs the script). Returns
** its id (>= 0), -EEXIST when name is registered differently, -EINVAL for
** a bad name, label or bucket list, -ENOSPC when the registry is full. */
int ch_metrics_register(const char *name, const char *help, int type, const char *const *labels,
                        int nlabels, const double *buckets, int nbuckets);

/* The series of metric id with these label values (as many as its label
** names): >= 0, or -ENOSPC / -EINVAL. Lock-free once it exists. */
int ch_metrics_series(int id, const char *const *values, int nvalues);

/* Adds v to a counter or gauge series (a counter refuses v < 0:
** -EINVAL), or sets a gauge's value; observes v in a histogram's. */
int ch_metrics_add(int series, double v);
int ch_metrics_set(int series, double v);
int ch_metrics_observe(int series, double v);

/* Every metric in the Prometheus text format 0.0.4 into a malloc'd buffer
** (*len bytes), or NULL on ENOMEM. */
char *ch_metrics_render(size_t *len);

#endif
