/*
** The master process of --processes: forks the worker processes, restarts
** the ones that die, and turns SIGHUP into a reload and SIGTERM into a
** drain of them all. It never runs Lua.
*/
#ifndef CH_MASTER_H
#define CH_MASTER_H

#include <signal.h>

/* The signal a reload's old worker processes get from the master (and
** a failed reload's new ones): they drain as on SIGTERM, but at once and
** without the stop's /healthz 503, since the node still serves on the
** same sockets. SIGTERM would tell them to stop. A real-time signal,
** which nothing sends by accident (a terminal's resize sends SIGWINCH to
** the whole foreground group), and SIGUSR2 stays free for the user. */
#define CH_MASTER_RELOAD_SIGNAL (SIGRTMIN + 1)

/* Becomes the master: forks ch_opts.processes workers and supervises them
** until it is told to stop. Returns only in a worker process, with its
** index (0 .. processes-1); the master itself ends with _exit. Call
** before any thread is started (fork copies only the calling thread). */
int ch_master_run(void);

/* A worker process says it has started (its script's main chunk returned
** on every thread): the master waits for this before it drains the old
** workers of a reload. Without a master it does nothing. Async-signal-safe
** and never yields (a raw write). */
void ch_master_ready(void);

/* A worker process says a signal (SIGTERM, SIGINT) told it to drain: if
** the master did not send it, the master starts a replacement at once.
** Same rules as ch_master_ready. */
void ch_master_draining(void);

#endif
