/*
** cohost.http's own series in the metrics registry. See metrics.h.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/metrics.h"
#include "stats/metrics.h"

static int requests = -1, duration = -1;   /* the metrics' ids */

int ch_http_metrics_init(void)
{
  static const char *const labels[] = { "code", "method", "route" };
  int r = ch_metrics_register("cohost_http_requests_total",
                              "Requests cohost.http answered, by status code, method and "
                              "the router's pattern (route).",
                              CH_METRIC_COUNTER, labels, 3, NULL, 0);
  int d = ch_metrics_register("cohost_http_request_duration_seconds",
                              "Time from a request's head to the end of its response, by "
                              "the router's pattern (route).",
                              CH_METRIC_HISTOGRAM, labels + 2, 1, NULL, 0);
  if (r < 0 || d < 0) return r < 0 ? r : d;
  duration = d;
  requests = r;   /* both or neither: a response checks this one */
  return 0;
}

/* -- Routes ---------------------------------------------------------------- */

/* Route patterns by id, for this process: written once under routes_lock
** and never freed, so an id a worker was given reads its text without
** the lock. routes[0] is the empty route. */
static pthread_mutex_t routes_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *routes[CH_HTTP_METRICS_MAX_ROUTES] = { "" };
static int nroutes = 1;   /* guarded by routes_lock */

/* Leaves the code and method room in a series' label values
** (CH_METRICS_KEY_MAX). */
#define ROUTE_MAX_LEN (CH_METRICS_KEY_MAX - 40)

int ch_http_metrics_route(const char *pattern)
{
  size_t n = strlen(pattern);
  if (n == 0 || n > ROUTE_MAX_LEN || memchr(pattern, '\x1f', n)) return 0;
  pthread_mutex_lock(&routes_lock);
  int id = 0;
  /* O(routes) per call: a router's patterns are added once per worker. */
  for (int i = 1; i < nroutes && !id; i++)
    if (strcmp(routes[i], pattern) == 0) id = i;
  if (!id && nroutes < CH_HTTP_METRICS_MAX_ROUTES && (routes[nroutes] = strdup(pattern))) id = nroutes++;
  pthread_mutex_unlock(&routes_lock);
  return id;
}

const char *ch_http_metrics_route_name(int route)
{
  const char *p = route > 0 && route < CH_HTTP_METRICS_MAX_ROUTES ? routes[route] : NULL;
  return p ? p : "";
}

/* -- Counting ---------------------------------------------------------------- */

void ch_http_metrics_count(int status, const char *method, size_t mlen, int route, double seconds)
{
  if (requests < 0) return;
  if (route < 0 || route >= CH_HTTP_METRICS_MAX_ROUTES) route = 0;
  /* Per worker thread: the last series of each (code, method, route)
  ** asked. A small direct-mapped cache saves the hash probe, and the
  ** label key's making, on most requests; the route is its id, so the
  ** label costs an int compare, never a string. */
  static __thread struct { int status, route; char method[12]; int series; } cache[64];
  /* The duration series of each route, plus one (0: not looked up yet). */
  static __thread int duration_series[CH_HTTP_METRICS_MAX_ROUTES];
  char m[12];
  if (mlen >= sizeof m) mlen = sizeof m - 1;   /* a longer method is cut */
  memcpy(m, method, mlen);
  m[mlen] = '\0';
  unsigned slot = ((unsigned)status * 31u + (unsigned char)m[0] + (unsigned)route * 7u) & 63u;
  int series = -1;
  if (cache[slot].status == status && cache[slot].route == route && strcmp(cache[slot].method, m) == 0) {
    series = cache[slot].series;
  } else {
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    const char *values[3] = { code, m, ch_http_metrics_route_name(route) };
    series = ch_metrics_series(requests, values, 3);
    if (series >= 0) {
      cache[slot].status = status;
      cache[slot].route = route;
      memcpy(cache[slot].method, m, mlen + 1);
      cache[slot].series = series;
    }
  }
  if (series >= 0) ch_metrics_add(series, 1);
  int d = duration_series[route] - 1;
  if (d < 0) {
    const char *values[1] = { ch_http_metrics_route_name(route) };
    d = ch_metrics_series(duration, values, 1);
    if (d >= 0) duration_series[route] = d + 1;
  }
  if (d >= 0) ch_metrics_observe(d, seconds);
}
