/*
** Describing a worker's tasks for a task dump (GET /debug/tasks, SIGUSR2,
** cohost.tasks()): what each is, how old, what it is doing or parked on
** (the runtime's note, ch_coro_info, with its binding's word for a wait
** queue) and its Lua traceback, read without allocating on the Lua heap,
** so that it may run in a worker's loop between coroutines.
*/
#ifndef CH_INSPECT_H
#define CH_INSPECT_H

#include <lua.h>

#include "cohost.h"
#include "worker.h"

struct ch_task;

/* Which tasks a dump lists. */
struct ch_inspect_filter {
  const char *state;            /* "running", "ready", "parked" or what a
                                ** parked one waits on ("read", "sleep",
                                ** "semaphore", ...); NULL: any */
  const char *route;            /* the router's pattern; NULL: any */
  double min_age;               /* seconds; 0: any age */
  struct ch_coro *self;         /* the coroutine that asked, parked until
                                ** the dump is done: listed as running */
};

/* Appends luaL_traceback's text for L's stack from level on to buf (size
** n, NUL-terminated, cut short with "\n\t..." when it does not fit): the
** same lines, made with lua_getstack and lua_getinfo("Sln") only, which
** allocate nothing, so that it may run in a hook or between coroutines.
** Returns the length. */
size_t ch_inspect_traceback(lua_State *L, int level, char *buf, size_t n);

/* The router's pattern of HTTP task t ("" when none matched yet, or t is
** no HTTP task): the id the router stored in res[1] (lib_http.c), read
** through L, a state of t's universe with a free slot. */
const char *ch_inspect_route(lua_State *L, const struct ch_task *t);

/* What parked task t (on coroutine c, parked for wait, a CH_WAIT_*) waits
** on, as a dump says it: "read", "write", "poll", "sleep", "threadpool",
** "wakeup", or its binding's word for a wait queue ("semaphore",
** "channel", "broadcast", "pool", "dns", "postgres", "thread", "queue"). */
const char *ch_inspect_wait_name(const struct ch_task *t, int wait);

/* Appends each of w's tasks that f lets through to out, as JSON objects
** separated by commas (text: blocks of lines, the traceback's indented).
** On w's own thread, not inside one of its Lua tasks' Lua code (in its
** loop, or a coroutine without Lua). Returns how many were listed, or
** -ENOMEM (out keeps what was appended). */
int ch_inspect_tasks(struct ch_worker *w, const struct ch_inspect_filter *f, int text,
                     struct ch_buf *out);

#endif
