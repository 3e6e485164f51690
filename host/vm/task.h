/*
** Tasks: one Lua thread on one native coroutine of a worker, run under
** lua_pcall (no Lua error ever crosses a stack switch), recycled through
** the worker's pool of Lua threads.
*/
#ifndef CH_TASK_H
#define CH_TASK_H

#include <stdint.h>

#include <lua.h>

#include "cohost.h"
#include "vm/ljvm.h"
#include "worker.h"

enum ch_task_status { CH_TASK_NEW, CH_TASK_RUNNING, CH_TASK_DONE, CH_TASK_FAILED, CH_TASK_KILLED };

/* Every parked Lua connection holds one, so it is kept to 120 bytes (one
** 128-byte malloc chunk; it was 160, a 176-byte chunk): the waiters'
** queue is allocated by the first cohost.wait on the task. */

struct ch_task {
  struct ch_ljvm_coro vm;       /* first: the yield check reads it from
                                ** ch_coro_udata */
  struct ch_worker *w;          /* owner */
  struct ch_coro *coro;         /* NULL until it runs and after it ends */
  lua_State *T;                 /* its Lua thread */
  struct ch_waitq *joiners;     /* coroutines in cohost.wait on it, woken
                                ** when it ends; NULL until the first wait;
                                ** owned */
  const char *name;             /* for logs: "handler", "thread", "main" */
  struct ch_task *prev, *next;  /* the worker's live list */
  int ref;                      /* registry ref anchoring T */
  int nargs;                    /* arguments pushed above the function */
  int refs;                     /* the runner, plus a Lua handle if any */
  int nresults;                 /* results (or the error) left on T */
  uint8_t status;               /* enum ch_task_status */
  uint8_t daemon;               /* cancelled as soon as shutdown starts */
  uint8_t waited;               /* results handed to a waiter already */
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

/* The yield check the host installs: ch_ljvm_may_park, plus a one-time
** warning naming the Lua call site when it says no. */
int ch_task_may_park(struct ch_coro *c);

/* Raises an error that ends the task without a handler-error log line:
** an expected end such as the client going away ("closed", "timeout").
** tostring() of the error gives msg; it is logged at info level. */
void ch_task_raise_quiet(lua_State *L, const char *msg) __attribute__((noreturn));

/* Raises the cancellation error on L if the running task was cancelled. */
void ch_task_check_cancel(lua_State *L);

#endif
