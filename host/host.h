/*
** The cohost host: what its files share. A worker is one thread with its
** own scheduler and lua_State; a task is one Lua thread running on one
** native coroutine of a worker.
*/
#ifndef CH_HOST_H
#define CH_HOST_H

#include <stdint.h>

#include <lua.h>

#include "cohost.h"
#include "ljvm.h"

/* -- Workers -------------------------------------------------------------- */

struct ch_task;

struct ch_worker {
  int id;                       /* 0 .. count-1, distinct across worker
                                ** processes; read-only */
  lua_State *L;                 /* main state: creates and anchors threads,
                                ** never runs Lua code itself */
  struct ch_sched *sched;       /* this worker's scheduler */
  struct ch_task *tasks;        /* live tasks, for shutdown and stats */
  int *idle;                    /* registry refs of reusable Lua threads */
  int nidle, idle_cap;
  int stopping;                 /* shutdown started: stop accepting */
  struct ch_timer stop_timer;   /* cancels what is left at the deadline */
  uint64_t connections;         /* open connections */
};

/* Options from the command line, read-only once workers start. */
struct ch_options {
  int workers;                  /* workers in all processes: processes (or
                                ** 1) x threads; ch_worker_count() */
  int threads;                  /* worker threads in each process */
  int processes;                /* --processes; 0: no master */
  int process;                  /* this worker process's index (0 .. processes-1);
                                ** its workers are ids process*threads + 0.. */
  size_t stack_size;            /* bytes; 0 = runtime default */
  int max_connections;          /* per worker; 0 = unlimited */
  int shutdown_timeout_ms;      /* grace period on SIGTERM/SIGINT */
  int log_level;                /* CH_LOG_* */
};

extern struct ch_options ch_opts;
extern __thread struct ch_worker *ch_worker_self;

/* Starts an orderly shutdown of the calling worker: listeners close, daemon
** tasks are cancelled, the rest have the shutdown timeout to finish. */
void ch_worker_shutdown(struct ch_worker *w);

/* Stops w's shutdown timer once its last task has ended (task.c calls it
** whenever a task ends). */
void ch_task_stop_if_idle(struct ch_worker *w);

/* The worker count (for cohost.worker_count). */
int ch_worker_count(void);

/* Ends the process at once with code, flushing stdio. */
void ch_worker_exit(int code) __attribute__((noreturn));

/* -- Shared dictionaries (lib_shdict.c) ---------------------------------- */

/* Makes shared dict name of size bytes for --shdict, before any worker
** exists: a worker process forked afterwards maps the same store, and
** cohost.shared.new(name, any size) in a script returns it. NULL, or why
** it failed. */
const char *ch_shdict_create(const char *name, long size);

/* -- Tasks ---------------------------------------------------------------- */

enum ch_task_status { CH_TASK_NEW, CH_TASK_RUNNING, CH_TASK_DONE, CH_TASK_FAILED, CH_TASK_KILLED };

struct ch_task {
  struct ch_ljvm_coro vm;       /* first: the yield check reads it from
                                ** ch_coro_udata */
  struct ch_worker *w;          /* owner */
  struct ch_coro *coro;         /* NULL until it runs and after it ends */
  lua_State *T;                 /* its Lua thread */
  int ref;                      /* registry ref anchoring T */
  int nargs;                    /* arguments pushed above the function */
  uint8_t status;               /* enum ch_task_status */
  uint8_t daemon;               /* cancelled as soon as shutdown starts */
  uint8_t waited;               /* results handed to a waiter already */
  uint8_t in_pcall;             /* inside ch_task_run's lua_pcall: the only
                                ** place the Lua memory cap may refuse */
  int refs;                     /* the runner, plus a Lua handle if any */
  int nresults;                 /* results (or the error) left on T */
  struct ch_coro *waiters[4];   /* coroutines in cohost.wait on it */
  int nwaiters;
  const char *name;             /* for logs: "handler", "thread", "main" */
  struct ch_task *prev, *next;  /* the worker's live list */
};

/* Makes a task with a Lua thread from w's pool. Must run on a coroutine
** that runs Lua (never on an acceptor). Push the function and its nargs
** arguments onto t->T, then ch_task_spawn or ch_task_run. NULL on memory
** shortage (the Lua allocator may also raise). */
struct ch_task *ch_task_new(struct ch_worker *w, const char *name);

/* Starts t on a new native coroutine. Returns the coroutine id or -errno
** (the task is freed then). */
int ch_task_spawn(struct ch_task *t, int nargs);

/* Yields. Runs t on the calling native coroutine until its function
** returns: under lua_pcall with a traceback handler; an uncaught error is
** logged with its traceback. */
void ch_task_run(struct ch_task *t, int nargs);

/* Drops one reference to t: the runner's (taken by ch_task_new) or a Lua
** handle's (taken by whoever made one, refs++). At zero, t's Lua thread
** goes back to the pool and t is freed. */
void ch_task_release(struct ch_task *t);

/* The task running Lua on this coroutine, or NULL. */
struct ch_task *ch_task_current(void);

/* Yields. Waits for fd as a Lua-facing binding should, after the call it
** made on fd said EAGAIN or EINPROGRESS (it skips the readiness check, see
** ch_wait_fd_again): parks the task if the VM allows it here, else blocks
** the thread like libc. Returns ready
** poll events (> 0) or 0 on timeout; raises a Lua error "cancelled" on L
** when the task was cancelled. timeout_ms < 0 waits forever. */
int ch_task_wait_fd(lua_State *L, int fd, int events, int timeout_ms);

/* The yield check the host installs: ch_ljvm_may_park, plus a one-time
** warning naming the Lua call site when it says no. */
int ch_task_may_park(struct ch_coro *c);

/* Raises an error that ends the task without a handler-error log line:
** an expected end such as the client going away ("closed", "timeout").
** tostring() of the error gives msg; it is logged at info level. */
void ch_task_raise_quiet(lua_State *L, const char *msg) __attribute__((noreturn));

/* Raises the cancellation error on L if the running task was cancelled. */
void ch_task_check_cancel(lua_State *L);

/* -- Logging -------------------------------------------------------------- */

enum { CH_LOG_ERR = 1, CH_LOG_WARN, CH_LOG_NOTICE, CH_LOG_INFO, CH_LOG_DEBUG };

/* Writes "YYYY/MM/DD HH:MM:SS [level] w<worker> c<coroutine>: message" to
** stderr when level is enabled, as one write(2) so lines never interleave. */
void ch_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Level number for "err", "warn", ... (case-insensitive, also "ERR"), or
** 0 if unknown. */
int ch_log_level(const char *name);

/* -- Errors --------------------------------------------------------------- */

/* OpenResty's error string for an errno: "timeout", "closed",
** "connection refused", "connection reset by peer", "no memory", ... */
const char *ch_errstr(int err);

#endif
