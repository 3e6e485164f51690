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

/* What a task is, for a task dump (ch_task_kind_name has the words). Set
** by whoever makes the task. */
enum ch_task_kind {
  CH_TASK_OTHER,                /* the status endpoint's start, on_shutdown's */
  CH_TASK_MAIN,                 /* the script's main chunk */
  CH_TASK_HTTP,                 /* an HTTP/1.x request's handler */
  CH_TASK_HTTP2,                /* an HTTP/2 stream's handler */
  CH_TASK_GRPC,                 /* an HTTP/2 stream of Content-Type application/grpc */
  CH_TASK_WEBSOCKET,            /* an HTTP handler that took its connection
                                ** for a WebSocket (res:hijack) */
  CH_TASK_TCP,                  /* a cohost.listen handler */
  CH_TASK_TIMER,                /* a cohost.timer callback (a daemon task) */
  CH_TASK_SPAWNED,              /* cohost.spawn */
  CH_TASK_KINDS
};

/* What a task's binding parks it on, where the runtime knows only "a wait
** queue" (CH_WAIT_QUEUE): set around the wait by the binding, from what
** the queue was made for (cohost.core.task's waitq(kind)). */
enum ch_task_on {
  CH_TASK_ON_NOTHING,           /* the runtime's word is all there is */
  CH_TASK_ON_QUEUE,             /* a wait queue made for nothing named */
  CH_TASK_ON_SEMAPHORE,
  CH_TASK_ON_CHANNEL,
  CH_TASK_ON_BROADCAST,         /* a broadcast subscription */
  CH_TASK_ON_POOL,              /* a pool acquire (cohost.postgres) */
  CH_TASK_ON_DNS,               /* another task's lookup of the same name */
  CH_TASK_ON_POSTGRES,          /* LISTEN/NOTIFY's state */
  CH_TASK_ON_THREAD,            /* cohost.wait for a thread's end */
  CH_TASK_ONS
};

/* Every parked Lua connection holds one, so it is kept to 120 bytes (one
** 128-byte malloc chunk; it was 160, a 176-byte chunk): what few tasks
** need (the waiters of cohost.wait, a slow-request watch) is allocated
** apart, when first needed. */

struct ch_task_acct;

/* The part of a task few tasks need. */
struct ch_task_ext {
  struct ch_waitq joiners;      /* coroutines in cohost.wait on it, woken
                                ** when it ends */
  struct ch_task_acct *acct;    /* its running and parked time, while a
                                ** slow-request threshold watches it
                                ** (vm/acct.h); not owned; NULL: none */
};

struct ch_task {
  struct ch_ljvm_coro vm;       /* first: the yield check reads it from
                                ** ch_coro_udata; vm.name names it in logs
                                ** ("handler", "thread", "main") */
  struct ch_worker *w;          /* owner */
  struct ch_coro *coro;         /* NULL until it runs and after it ends */
  lua_State *T;                 /* its Lua thread */
  struct ch_task_ext *ext;      /* NULL until the first cohost.wait on it
                                ** or slow-request watch; owned */
  uint64_t start_ns;            /* when it began (an HTTP request's: its
                                ** head parsed), ch_now_ns clock; 0: unknown */
  struct ch_task *prev, *next;  /* the worker's live list */
  int ref;                      /* registry ref anchoring T */
  int nargs;                    /* arguments pushed above the function */
  int nresults;                 /* results (or the error) left on T */
  int fd;                       /* the connection it serves, for its peer;
                                ** -1: none */
  uint8_t status;               /* enum ch_task_status */
  uint8_t daemon;               /* cancelled as soon as shutdown starts */
  uint8_t waited;               /* results handed to a waiter already */
  uint8_t refs;                 /* the runner, plus a Lua handle if any */
  uint8_t kind;                 /* enum ch_task_kind */
  uint8_t on;                   /* enum ch_task_on, around a binding's wait */
};

/* Makes a task with a Lua thread from w's pool. Must run on a coroutine
** that runs Lua (never on an acceptor). Push the function and its nargs
** arguments onto t->T, then ch_task_spawn or ch_task_run. NULL on memory
** shortage (the Lua allocator may also raise). */
struct ch_task *ch_task_new(struct ch_worker *w, const char *name);

/* The ext of t, allocated if it has none yet; NULL when memory is short. */
struct ch_task_ext *ch_task_ext(struct ch_task *t);

/* "http", "http2", "grpc", "websocket", "tcp", "timer", "spawned", "main",
** "other": the word for kind (enum ch_task_kind) in task dumps. */
const char *ch_task_kind_name(int kind);

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
