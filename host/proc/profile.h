/*
** The sampling profiler (GET /debug/profile, cohost.profile): each worker
** thread samples itself, at hz per second of its own CPU time, with a
** timer of its own (timer_create on the thread's CPU clock, its signal
** sent to that thread alone). The signal handler notes where the thread
** was and arms the worker's debug hook (vm/vmhook.h); at the next Lua
** instruction the hook records the running coroutine's Lua stack, at a
** safe point. Samples taken where no Lua runs (the scheduler's loop, a
** coroutine running C only) are recorded by the handler as the
** interrupted C function alone. Stacks are kept as folded text with their
** counts, per worker, until the profile stops. See docs/debugging.md for
** why not LuaJIT's own profiler.
*/
#ifndef CH_PROFILE_H
#define CH_PROFILE_H

#include <signal.h>

#include "cohost.h"
#include "worker.h"

/* The signal of the sampling timers: a real-time one (SIGRTMIN + 1 is the
** master's reload, SIGPROF LuaJIT's own profiler's), which nothing sends
** by accident. */
#define CH_PROFILE_SIGNAL (SIGRTMIN + 2)

#define CH_PROFILE_HZ_MAX 1000

/* Starts sampling the calling worker w (on its own thread) hz times per
** second of its CPU time (1 .. CH_PROFILE_HZ_MAX), each stack under its
** route (HTTP tasks) or its kind in brackets when by_route. Returns 0,
** -EBUSY when w samples already, -EINVAL for a bad hz, or -errno. */
int ch_profile_start(struct ch_worker *w, int hz, int by_route);

/* Stops sampling the calling worker and appends its stacks to out, one
** line each: frames from the outermost, separated by ';', a space and the
** count ("folded" stacks, as flame graph tools read them). Returns the
** samples taken, -ESRCH when w was not sampling, or -ENOMEM. */
int ch_profile_stop(struct ch_worker *w, struct ch_buf *out);

/* Non-zero while the calling worker samples. */
int ch_profile_running(void);

#endif
