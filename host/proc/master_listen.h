/*
** Listening sockets a --processes master keeps for its worker processes.
** Every worker process runs the script and calls listen() itself; TCP
** listeners on a fixed port simply bind with SO_REUSEPORT. Two kinds need
** one owner above the processes, which only the master can be:
**
**   unix:/path   can be bound only once: the master binds it on the first
**                ask and hands every worker process (of every generation:
**                restarts and reloads too) the same socket over its
**                channel (SCM_RIGHTS), so a reload loses no connection on
**                it; the master unlinks the path when it ends.
**   port 0       must mean one port for all: the master reserves one with
**                a socket bound (SO_REUSEPORT) but never listening, which
**                takes no connections, and every process binds that port.
**   a fixed port is bound by every process with SO_REUSEPORT, which the
**                kernel would let any other process of the same user join
**                (and split the connections with it): the first ask checks
**                that nobody listens there yet (ch_listen_probe), and only
**                the processes and generations of this master join after.
**
** Entries are keyed by the address string and by which listen() call with
** that string it was on its worker (as lib_socket.c keys them between the
** threads of a process). Entries that a reload's new generation did not
** ask for are closed once it has started.
*/
#ifndef CH_MASTER_LISTEN_H
#define CH_MASTER_LISTEN_H

#include <sys/socket.h>
#include <sys/un.h>

/* -- In a worker process (lib_socket.c) ----------------------------------- */

/* The listening socket for unix address a (listen() call nth with spec
** key): a new fd, or -ENOSYS without a master (bind it yourself), or
** -errno (the master could not bind it). Never yields: blocks the calling
** thread for one round trip to the master, which never waits on anyone. */
int ch_master_listen_unix(const char *key, int nth, const struct sockaddr_un *a,
                          socklen_t alen, int backlog);

/* The port every process binds for TCP address a whose port is 0 (listen()
** call nth with spec key): > 0, or -ENOSYS without a master, or -errno. */
int ch_master_reserve_port(const char *key, int nth, const struct sockaddr *a, socklen_t alen);

/* May this cohost listen on TCP address a with its fixed port (listen()
** call nth with spec key)? The first ask of all its processes and
** generations checks that no other process listens there (the answer's
** -EADDRINUSE); the others join the first with SO_REUSEPORT. Returns 0,
** -ENOSYS without a master (probe yourself), or -errno. */
int ch_master_claim_port(const char *key, int nth, const struct sockaddr *a, socklen_t alen);

/* Whether any process listens on TCP address a now: 0 if none, else
** -EADDRINUSE (or another -errno). What a claim checks. */
int ch_listen_probe(const struct sockaddr *a, socklen_t alen);

/* Binds and listens on unix address a (non-blocking, close-on-exec),
** first removing a stale socket file there (one nobody accepts on).
** Returns the fd or -errno. What the master does on a first ask, and what
** a process without a master does itself. */
int ch_listen_unix(const struct sockaddr_un *a, socklen_t alen, int backlog);

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

/* In a new worker process: closes the master's copies. */
void ch_mlisten_forget(void);

/* The master ends: closes every entry and unlinks its unix paths. */
void ch_mlisten_close_all(void);

/* In a worker process: the channel to the master (set by master.c), or -1. */
void ch_mlisten_set_channel(int fd);

#endif
