/*
** Sockets passed by systemd (socket activation: LISTEN_FDS, LISTEN_PID,
** LISTEN_FDNAMES, sd_listen_fds(3)'s protocol). They are taken once at
** start; a listen() then adopts the one it matches instead of binding:
** "fd:N" and "systemd:NAME" name one, and any other TCP address adopts an
** inherited socket on its port (whatever its address), a unix address
** the socket on its path. Every worker thread, worker process and reload
** generation accepts on the same inherited socket (each on a dup), so
** nothing ever binds it a second time, and a restart of cohost under
** systemd loses no connection: systemd keeps the socket meanwhile.
*/
#ifndef CH_ACTIVATION_H
#define CH_ACTIVATION_H

#include "net/addr.h"

/* At start, before any thread or fork: takes the passed sockets when
** LISTEN_PID is this process (making them close-on-exec and removing the
** variables, so a program the script starts does not take them too).
** Returns how many. */
int ch_activation_init(void);

/* The passed socket that spec names: "fd:N" (N one of the passed fds) or
** "systemd:NAME" (a LISTEN_FDNAMES name). Returns the fd, -ENOENT when
** none matches, or -EINVAL when spec is neither form. Never yields. */
int ch_activation_named(const char *spec);

/* The passed listening socket that a listen on a adopts: exactly a
** first, else one on a's port (a TCP port other than 0), or on its path
** (unix). Returns the fd, or -1. Never yields. */
int ch_activation_match(const union ch_addr *a);

#endif
