/*
** cohost.http's own series in the metrics registry (stats/metrics.h):
** cohost_http_requests_total by status code, method and route, and
** cohost_http_request_duration_seconds by route. HTTP registers and
** counts them through the registry's generic calls; the registry knows
** no HTTP.
*/
#ifndef CH_HTTP_METRICS_H
#define CH_HTTP_METRICS_H

#include <stddef.h>

/* Registers the two metrics. Call once at start, after ch_metrics_init
** and before any thread or fork. Returns 0 or -errno (then nothing is
** counted). */
int ch_http_metrics_init(void);

/* The id of a route pattern ("/notes/:id") for the route label: the same
** id for the same text, in this process (every worker registers its
** router's patterns). 0 is the empty route (no router, or none matched),
** and so is every pattern past CH_HTTP_METRICS_MAX_ROUTES or over 200
** bytes: the label's values stay bounded by the patterns, whatever the
** paths. Takes a lock: call it when a route is added, not per request. */
#define CH_HTTP_METRICS_MAX_ROUTES 1024
int ch_http_metrics_route(const char *pattern);

/* The pattern of route id (from ch_http_metrics_route), "" for 0 or a bad
** id. */
const char *ch_http_metrics_route_name(int route);

/* After each response: counts it by status code, method and route (an id
** from ch_http_metrics_route) and observes its duration by route. Never
** blocks, never yields; looks up no string on most calls (a per-thread
** cache keyed by ints). */
void ch_http_metrics_count(int status, const char *method, size_t mlen, int route, double seconds);

#endif
