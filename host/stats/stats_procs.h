/*
** Statistics across the worker processes of --processes. stats.c gathers
** the workers of one process (threads can post to each other); a process
** cannot post to another, so each process publishes its workers' figures
** into memory shared from the master, on demand: a scraper asks through a
** per-process eventfd, and the asked process's first worker gathers its
** workers (ch_stats_gather) and copies them into its slot. Nothing runs
** while nobody asks.
*/
#ifndef CH_STATS_PROCS_H
#define CH_STATS_PROCS_H

#include <stdint.h>
#include <sys/types.h>

#include "stats/stats.h"

/* What a scrape learnt about one worker process. */
struct ch_stats_proc {
  pid_t pid;                    /* the process that answered last; 0: never */
  uint64_t rss_bytes;           /* its resident memory then */
  uint64_t taken_ns;            /* ch_now_ns when it was asked; 0: never */
  int fresh;                    /* answered this scrape */
};

/* Makes the shared slots and the eventfds for processes worker processes of
** threads workers each. Call in the master before it forks. Returns 0, or
** -errno (then stats("all") stays within each process). */
int ch_stats_procs_create(int processes, int threads);

/* Non-zero when the slots exist (--processes 2 or more). */
int ch_stats_procs_active(void);

/* On the first worker thread of a worker process, before ch_run: answer
** asks from now on (a watch that does not keep ch_run running). */
void ch_stats_procs_worker_start(struct ch_worker *w);

/* On the same thread after ch_run: stop answering. */
void ch_stats_procs_worker_stop(struct ch_worker *w);

/* Asks every other worker process for fresh figures; returns the moment
** of asking (ch_now_ns): what was published after it is fresh. */
uint64_t ch_stats_procs_ask(void);

/* Yields. Waits until every process asked at asked_ns has published, or
** until deadline_ns (ch_now_ns clock), polling every millisecond; then
** copies each other process's workers into out (indexed by worker id,
** n entries) and fills procs[0 .. processes-1] (this process's entry from
** the calling process itself). A process that did not answer in time
** keeps what it published last (its taken_ns says how old); one that is
** gone is marked not running. */
void ch_stats_procs_collect(struct ch_stats_worker *out, int n, uint64_t asked_ns,
                            uint64_t deadline_ns, struct ch_stats_proc *procs);

/* Resident set of the calling process (/proc/self/statm), or 0. */
uint64_t ch_stats_rss_bytes(void);

#endif
