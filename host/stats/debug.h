/*
** The debug endpoints' data across workers and worker processes: a task
** dump (vm/inspect.h) or a CPU profile (proc/profile.h) asked of every
** worker thread through its scheduler (each describes its own tasks, on
** its own thread), and under --processes of every worker process through
** a mailbox in memory the master shares before it forks. And SIGUSR2's
** dump of each worker's tasks to the error log.
*/
#ifndef CH_DEBUG_H
#define CH_DEBUG_H

#include <stdint.h>

#include "cohost.h"
#include "worker.h"

enum { CH_DEBUG_TASKS = 1, CH_DEBUG_PROFILE };

/* What a dump or profile asks of each worker. Plain data: it is copied
** into other processes' mailboxes. */
struct ch_debug_ask {
  int op;                       /* CH_DEBUG_TASKS or CH_DEBUG_PROFILE */
  int text;                     /* tasks as text blocks, else JSON */
  char state[32];               /* tasks: the filters; "" for none */
  char route[256];
  double min_age;
  int hz;                       /* profile: samples per CPU second */
  int by_route;                 /* profile: stacks under their route */
  int ms;                       /* profile: how long */
};

/* Yields. Runs ask on every worker of this process and, under
** --processes, of every worker process; the asker's own coroutine is
** listed as running. Appends to items what they answered: JSON objects
** joined by commas, text blocks, or folded stack lines (a stack may come
** once per worker: the caller sums them); and to workers one JSON object
** per worker, {"worker", "process", "pid", "answered"} (and "samples" or
** "error" for a profile). A worker or process that does not answer in
** time (a handler holding its thread) is listed as not answered. Returns
** 0, -EBUSY while another profile runs in this process, -ENOMEM, or
** -ECANCELED when the asker was cancelled. */
int ch_debug_run(const struct ch_debug_ask *ask, struct ch_buf *items, struct ch_buf *workers);

/* Yields. Starts sampling every worker of this process (proc/profile.h)
** at hz, stacks under their routes when by_route; appends one JSON object
** per worker to workers, with "error" where it refused. Returns 0, or
** -EBUSY when a profile runs already in this process. */
int ch_debug_profile_start(int hz, int by_route, struct ch_buf *workers);

/* Yields. Stops the profile ch_debug_profile_start began and appends the
** folded stacks of every worker to items (a stack may come once per
** worker: the caller sums) and one JSON object per worker to workers,
** with its "samples". Returns 0, -ESRCH when none runs, or -ENOMEM. */
int ch_debug_profile_stop(struct ch_buf *items, struct ch_buf *workers);

/* Makes the worker processes' mailboxes and their eventfds; in the master
** before it forks. Returns 0 or -errno (dumps then stay within each
** process). */
int ch_debug_procs_create(int processes);

/* On each worker thread, before and after ch_run: the first worker of a
** worker process answers its mailbox; a profile left running at the end
** is stopped. */
void ch_debug_worker_start(struct ch_worker *w);
void ch_debug_worker_stop(struct ch_worker *w);

/* SIGUSR2: asks every worker of this process to log its tasks (text, one
** line per task with its traceback, at notice level). Any thread; never
** waits. */
void ch_debug_log_tasks(void);

#endif
