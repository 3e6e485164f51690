/*
** Per-worker statistics readable from any worker: each worker owns a slot
** with live counters (connections accepted, HTTP requests served) that
** only it writes, and a snapshot of what only its own thread may read (its
** scheduler's ch_stats, its Lua heap, its open connections), refreshed on
** demand through ch_post. Feeds cohost.stats() and the --status-addr
** endpoint (lua/cohost/status.lua).
*/
#ifndef CH_STATS_H
#define CH_STATS_H

#include <stdint.h>

#include "log.h"
#include "worker.h"

/* One worker's figures. */
struct ch_stats_worker {
  struct ch_stats sched;        /* its scheduler's ch_stats */
  uint64_t connections;         /* open connections (ch_listen_ctx.connections) */
  uint64_t accepted;            /* connections accepted, total; live */
  uint64_t requests;            /* requests cohost.http served, total; live */
  uint64_t lua_bytes;           /* Lua heap of the worker's state (lua_gc) */
  uint64_t taken_ns;            /* ch_now_ns when sched, connections and
                                ** lua_bytes were read; 0: never */
  int running;                  /* its scheduler is running */
};

/* Registers the calling thread's worker w (its scheduler and Lua state
** exist) so other workers can ask it for a snapshot. */
void ch_stats_worker_start(struct ch_worker *w);

/* Unregisters w before its thread ends (its scheduler goes with it). */
void ch_stats_worker_stop(struct ch_worker *w);

/* Fills *out with the calling worker's figures, read now. */
void ch_stats_self(struct ch_stats_worker *out);

/* Yields. Fills out[0..n-1] with every worker's figures: asks each other
** running worker for a fresh snapshot (ch_post) and waits up to timeout_ms
** for the answers, polling every millisecond; a worker that does not
** answer in time (a handler that never yields holds its thread) keeps its
** last snapshot, whose taken_ns says how old it is. Live counters are read
** at return. Returns the worker count (may exceed n: only n are filled). */
int ch_stats_gather(struct ch_stats_worker *out, int n, int timeout_ms);

/* Starts the status endpoint on the calling worker: runs
** require("cohost.status").start(addr) on a task of its own. Returns 0,
** or -1 when it failed (the error was logged). */
int ch_stats_endpoint_start(struct ch_worker *w, const char *addr);

#endif
