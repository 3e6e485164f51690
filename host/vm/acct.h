/*
** A task's time, split (--slow-request-ms): running (from each resume to
** the next park) and parked (by what it waited on), with its longest park
** and the Lua traceback there. Measured by the runtime's park and resume
** hooks, installed only once some listener watches for slow requests; a
** task is measured only while a struct ch_task_acct is attached to it.
*/
#ifndef CH_ACCT_H
#define CH_ACCT_H

#include <stddef.h>
#include <stdint.h>

#include "vm/task.h"

#define CH_ACCT_ONS 16          /* what a park waits on, by index (acct.c) */

struct ch_task_acct {
  uint64_t mark_ns;             /* the last park or resume (ch_now_ns) */
  uint64_t run_ns;              /* running, from resume to park */
  uint64_t park_ns;             /* parked, woken included until it runs */
  uint64_t on_ns[CH_ACCT_ONS];  /* park_ns by what it waited on */
  uint64_t trace_min_ns;        /* a park this long gets its traceback */
  uint64_t longest_ns;          /* the longest park */
  int longest_fd;               /* the fd it waited on, -1: none */
  uint8_t longest_on;           /* what it waited on */
  uint8_t parked_on;            /* what the current park waits on */
  int parked_fd;
  char longest_peer[128];       /* that fd's peer, "" if none */
  char trace[2048];             /* the traceback at the longest park that
                                ** was at least trace_min_ns; "" if none */
};

/* Starts measuring t (the task about to run on the calling coroutine)
** into a, taking a traceback at parks of trace_min_ns or more; installs
** the hooks the first time. t's ext must exist. */
void ch_acct_begin(struct ch_task *t, struct ch_task_acct *a, uint64_t trace_min_ns);

/* Ends t's measure (its running time up to now counted) and detaches it. */
void ch_acct_end(struct ch_task *t);

/* "running 8.1 ms, parked 304.3 ms (read 300.2 ms, sleep 4.1 ms); longest
** park 300.2 ms on read fd 12 (127.0.0.1:6379)" into buf; returns the
** length. */
size_t ch_acct_format(const struct ch_task_acct *a, char *buf, size_t n);

#endif
