/*
** The epoll backend (cohost's ae_epoll.c): ch_backend_epoll (backend.h).
** One epoll instance per scheduler. It registers fds and reports what
** epoll says through ch_fdwait_ready; waiting, the waiter lists and the
** readiness judgement are fdwait.c's and io.c's.
**
** fds are registered once, edge-triggered, for both directions, and stay
** registered until close. That is sound because every waiter waits only
** after a call on the fd said EAGAIN (or on a new fd, whose first
** registration reports its current state): the edge that follows an
** EAGAIN is never missed, and edges nobody waits for cost nothing.
*/
#ifndef CH_POLL_H
#define CH_POLL_H

#include <stdint.h>

struct ch_poll {
  int epfd;                 /* the epoll instance; owned */
  uint32_t id;              /* unique per instance in the process: an fd
                            ** entry's poll_id says which set holds it */
};

#endif
