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
** that string it was on its worker (as lib_socket.c keys them between the
** threads of a process), and TCP ones by the worker id too. Entries that a
** reload's new generation did not ask for are closed once it has started,
** those only a failed reload asked for when it fails, and a worker
** process's TCP ones when it is not restarted at once (it keeps failing,
** or its script ended) or the master stops.
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

/* The listening socket of worker id worker for TCP address a (listen()
** call nth with spec key), its port claimed or reserved first: a new fd,
** or -ENOSYS without a master (ch_listen_tcp it yourself), or -errno. The
** same socket for that worker in every generation. */
int ch_master_listen_tcp(const char *key, int nth, int worker, const struct sockaddr *a,
                         socklen_t alen, int backlog);

/* Binds (SO_REUSEADDR, SO_REUSEPORT, IPV6_V6ONLY) and listens on TCP
** address a, non-blocking and close-on-exec. Returns the fd or -errno. */
int ch_listen_tcp(const struct sockaddr *a, socklen_t alen, int backlog);

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

/* Closes the entries that generation gen made: its reload failed. */
void ch_mlisten_abort(unsigned gen);

/* Closes the master's copies of the TCP listeners of worker ids lo to
** hi - 1 (the processes keep theirs). */
void ch_mlisten_drop_workers(int lo, int hi);

/* In a new worker process: closes the master's copies. */
void ch_mlisten_forget(void);

/* The master ends: closes every entry and unlinks its unix paths. */
void ch_mlisten_close_all(void);

/* In a worker process: the channel to the master (set by master.c), or -1. */
void ch_mlisten_set_channel(int fd);

#endif
