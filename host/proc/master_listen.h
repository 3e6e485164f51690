/*
** Listening sockets a --processes master keeps for its worker processes.
** Every worker process runs the script and calls listen() itself, but the
** sockets belong to the master, which asks nobody and outlives them all:
**
**   TCP          each worker (thread) has its own socket (SO_REUSEPORT
**                spreads connections between them), bound and listened on
**                by the master at the worker's first ask and handed over
**                its channel (SCM_RIGHTS). The same worker id of a later
**                generation, or a worker's replacement, gets the same
**                socket: connections the kernel queued on it are accepted
**                by the new process, where a socket closed by the old one
**                would reset them (Linux does not move a closing
**                SO_REUSEPORT socket's queue to the others unless
**                net.ipv4.tcp_migrate_req is on).
**   unix:/path   can be bound only once: one socket for every worker
**                process, of every generation; the master unlinks the
**                path when it ends.
**   port 0       must mean one port for all: the master reserves one with
**                a socket bound (SO_REUSEPORT) but never listening, which
**                takes no connections, and every worker's socket is bound
**                to that port.
**   a fixed port is bound with SO_REUSEPORT, which the kernel would let
**                any other process of the same user join (and split the
**                connections with it): the first ask checks that nobody
**                listens there yet (ch_listen_probe), and only the
**                processes and generations of this master join after.
**
** Entries are keyed by the address string and by which listen() call with
** that string it was on its worker (as net/listener.c keys them between the
** threads of a process), and TCP ones by the worker id too. Entries that a
** reload's new generation did not ask for are closed once it has started,
** those only a failed reload asked for when it fails, and a worker
** process's TCP ones when it is not restarted at once (it keeps failing,
** or its script ended) or the master stops.
*/
#ifndef CH_MASTER_LISTEN_H
#define CH_MASTER_LISTEN_H

#include <stddef.h>

/* -- In a worker process -------------------------------------------------- */

/* The channel to the master (set by master.c); installs the listen
** operations (net/listen.h) that ask the master, so that the process's
** listeners (net/listener.c) get their sockets from it. */
void ch_mlisten_set_channel(int fd);

/* -- In the master (master.c) --------------------------------------------- */

/* Largest message on a worker's channel. */
#define CH_MASTER_MSG_MAX 1024

/* The type byte of a listen request; master.c's own messages are others. */
#define CH_MASTER_MSG_LISTEN 3

/* Answers the listen request msg (got bytes) that came on channel fd from a
** worker process of generation gen. */
void ch_mlisten_answer(int fd, const void *msg, size_t got, unsigned gen);

/* Closes the entries no worker of generation gen or later asked for
** (unlinking their unix paths): a reload's new generation has started. */
void ch_mlisten_retire(unsigned gen);

/* Closes the entries that generation gen made: its reload failed. */
void ch_mlisten_abort(unsigned gen);

/* Closes the master's copies of the TCP listeners of worker ids lo to
** hi - 1 (the processes keep theirs). */
void ch_mlisten_drop_workers(int lo, int hi);

/* In a new worker process: closes the master's copies. */
void ch_mlisten_forget(void);

/* The master ends: closes every entry and unlinks its unix paths. */
void ch_mlisten_close_all(void);

#endif
