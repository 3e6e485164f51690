/*
** The io_uring backend: ch_backend_uring (backend.h), beside the epoll
** one, not on top of it. One ring per scheduler, no epoll instance: the
** ring reports readiness with its own polls, and completes the I/O of
** stream sockets itself (ring.c's header says how):
**
**   - receives into a ring of provided buffers, taken by the kernel when
**     data comes, so a parked reader holds no buffer; a stream reads ahead
**     with a multishot receive, a bounded amount per connection;
**   - sends queued in a bounded buffer per connection (write-behind) and
**     posted at the loop's next io_uring_enter with everything else.
**
** Listeners are polled and accepted by the caller, as on epoll.
**
** Built without liburing (IO_URING=0 in the Makefile), the table's init
** says -ENOSYS and schedulers stay on epoll.
*/
#ifndef CH_RING_H
#define CH_RING_H

#include <stdint.h>

struct ch_sched;

/* Operations s's ring has taken since it was made, for stats and tests
** (0 on another backend). */
uint64_t ch_ring_posted(const struct ch_sched *s);

/* Receives that found every provided buffer taken (ENOBUFS), for stats
** and tests (0 on another backend). */
uint64_t ch_ring_nobufs(const struct ch_sched *s);

/* Bytes s's ring holds for fd: received ahead of its reader, and queued
** to be sent; for tests (0 on another backend). */
void ch_ring_held(const struct ch_sched *s, int fd, uint32_t *in, uint32_t *out);

#endif
