/*
** The CPU watchdog: one thread per process that notices a worker whose
** running coroutine has run --cpu-watchdog seconds without a single
** context switch, raises an error in it through a Lua count hook, and ends
** the process if that does not free the worker within as long again
** (JIT-compiled loops never check hooks). See docs/limits.md.
*/
#ifndef CH_WATCHDOG_H
#define CH_WATCHDOG_H

#include "log.h"
#include "worker.h"

/* The default limit, milliseconds without yielding (docs/limits.md). */
#define CH_WATCHDOG_DEFAULT_MS 10000

/* Exit status of a process the watchdog ended; CH_EXIT_STACK_OVERFLOW (86)
** is the runtime's. */
#define CH_WATCHDOG_EXIT 87

/* The signal that carries the hook to a stuck worker's thread: SIGURG,
** which nothing in cohost uses for its purpose (out-of-band data) and
** whose default action is to ignore it (Go preempts goroutines with it for
** the same reasons). */
#define CH_WATCHDOG_SIGNAL SIGURG

/* Sets the limit from a command-line value in seconds ("10", "2.5"); "0"
** turns the watchdog off. Returns 0, or -1 for a value that is not a
** number of seconds from 0 to 86400 (the setting is unchanged then). Call
** before the workers start. */
int ch_watchdog_set_seconds(const char *arg);

/* The limit in force, milliseconds; 0: off. */
int ch_watchdog_ms(void);

/* Puts the calling worker thread under watch (its scheduler and Lua state
** exist), starting the watchdog thread and its signal handler the first
** time in this process. Does nothing when the watchdog is off. A failure
** to start the thread is logged and leaves the process unwatched. */
void ch_watchdog_worker_start(struct ch_worker *w);

/* Takes the calling worker thread off watch, before its scheduler goes. */
void ch_watchdog_worker_stop(struct ch_worker *w);

#endif
