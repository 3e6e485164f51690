/*
** A worker's shutdown, in one place and in order: first the listeners
** (what the kernel already queued is still served), then the idle HTTP
** connections (given a moment for one more request), then the keepalive
** pools, then the daemon tasks; the rest have --shutdown-timeout to end.
** Each module only closes its own things when asked: none calls up into
** another's shutdown.
*/
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "http/conn.h"
#include "net/keepalive.h"
#include "net/listener.h"

__thread struct ch_worker *ch_worker_self;

int ch_worker_count(void)
{
  return ch_opts.workers;
}

void ch_worker_exit(int code)
{
  fflush(NULL);
  _exit(code);
}

/* Kills what the shutdown timeout left running. */
static void kill_tasks(struct ch_worker *w, int daemons_only)
{
  for (struct ch_task *t = w->tasks; t; t = t->next) {
    if (daemons_only && !t->daemon) continue;
    if (t->coro) ch_cancel(t->coro);
    else if (t->status == CH_TASK_NEW) t->status = CH_TASK_KILLED;
  }
}

static void stop_expired(struct ch_timer *tm)
{
  struct ch_worker *w = (struct ch_worker *)((char *)tm - offsetof(struct ch_worker, stop_timer));
  int n = 0;
  for (struct ch_task *t = w->tasks; t; t = t->next) n++;
  kill_tasks(w, 0);
  if (n) ch_log(CH_LOG_WARN, "shutdown timeout: cancelling %d task%s", n, n == 1 ? "" : "s");
}

void ch_worker_shutdown(struct ch_worker *w)
{
  if (w->stopping) return;
  w->stopping = 1;
  ch_log(CH_LOG_INFO, "shutting down");
  ch_listener_drain(w);
  ch_http_close_idle(w);
  ch_keepalive_close_all();
  kill_tasks(w, 1);
  /* Weak: once the last task and coroutine have ended, the scheduler
  ** returns without waiting for it; until then it cancels the rest at the
  ** deadline. */
  w->stop_timer.weak = 1;
  if (w->tasks) ch_timer_start(&w->stop_timer, ch_opts.shutdown_timeout_ms, stop_expired);
}
