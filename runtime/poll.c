/*
** The epoll backend: registration, the loop's poll, close. See poll.h.
*/
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "backend.h"
#include "fdwait.h"
#include "libc.h"
#include "panic.h"
#include "poll.h"
#include "sched.h"

#define EV_WAKEUP UINT64_MAX   /* epoll data of the scheduler's eventfd */
#define MAX_EVENTS 256         /* events taken per epoll_wait */

/* Instance ids: 0 is none, so a fresh entry is registered nowhere. */
static _Atomic uint32_t next_id;

static struct ch_poll *poll_of(const struct ch_sched *s)
{
  return s->be_state;
}

/* -- The instance --------------------------------------------------------- */

static int epoll_init(struct ch_sched *s)
{
  struct ch_poll *p = malloc(sizeof *p);
  if (!p) return -ENOMEM;
  p->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (p->epfd < 0) {
    int e = -errno;
    free(p);
    return e;
  }
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EV_WAKEUP };
  if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, s->wakefd, &ev) < 0) {
    int e = -errno;
    ch_libc.close(p->epfd);
    free(p);
    return e;
  }
  p->id = atomic_fetch_add(&next_id, 1) + 1;
  s->be_state = p;
  return 0;
}

static void epoll_fini(struct ch_sched *s)
{
  struct ch_poll *p = poll_of(s);
  if (!p) return;
  ch_libc.close(p->epfd);   /* the kernel drops every registration */
  free(p);
  s->be_state = NULL;
}

static unsigned epoll_inflight(const struct ch_sched *s)
{
  (void)s;
  return 0;
}

static int epoll_pending(const struct ch_sched *s)
{
  (void)s;
  return 0;
}

/* -- Registration --------------------------------------------------------- */

/* Out of line: its epoll_event would take room in every waiting frame
** (ch_fdwait_wait's, parked in COPY mode) for a call made once per fd. */
static __attribute__((noinline)) int fd_add(struct ch_poll *p, int fd, struct ch_fd *f)
{
  struct epoll_event ev = {
    .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
    .data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)f->gen << 32,
  };
  /* EEXIST: a dup of this fd's file is registered under an old gen, or a
  ** file closed behind our back left the number; MOD refreshes the gen. */
  if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 &&
      (errno != EEXIST || epoll_ctl(p->epfd, EPOLL_CTL_MOD, fd, &ev) < 0))
    return -errno;
  f->registered = 1;
  f->poll_id = p->id;
  return 0;
}

/* Both directions are registered at once, whatever events asks. */
static int epoll_arm(struct ch_sched *s, int fd, struct ch_fd *f, int events)
{
  (void)events;
  struct ch_poll *p = poll_of(s);
  if (f->registered && f->poll_id == p->id) return 0;
  return fd_add(p, fd, f);
}

static int epoll_watched(struct ch_sched *s, int fd, const struct ch_fd *f)
{
  (void)fd;
  return f->registered && f->poll_id == poll_of(s)->id;
}

static int epoll_close(struct ch_sched *s, int fd, struct ch_fd *f)
{
  struct ch_poll *p = poll_of(s);
  if (p && f->registered && f->poll_id == p->id) epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
  return 0;
}

/* -- The loop's poll ------------------------------------------------------ */

static int epoll_poll(struct ch_sched *s, int timeout_ms)
{
  struct ch_poll *p = poll_of(s);
  struct epoll_event evs[MAX_EVENTS];
  int woken = 0;
  int n = epoll_wait(p->epfd, evs, MAX_EVENTS, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    ch_panic("epoll_wait: %s", strerror(errno));
  }
  for (int i = 0; i < n; i++) {
    uint64_t d = evs[i].data.u64;
    if (d == EV_WAKEUP) {
      ch_sched_wake_drain(s);
      woken = 1;
      continue;
    }
    struct ch_fd *f = ch_fd_peek((int)(uint32_t)d);
    if (!f || f->gen != (uint32_t)(d >> 32)) continue;  /* stale: fd reused */
    uint32_t e = evs[i].events;
    ch_fdwait_ready(f, (e & EPOLLIN ? POLLIN : 0) | (e & EPOLLOUT ? POLLOUT : 0) |
                       (e & EPOLLERR ? POLLERR : 0) | (e & EPOLLHUP ? POLLHUP : 0) |
                       (e & EPOLLRDHUP ? POLLRDHUP : 0));
  }
  return woken;
}

/* Everything optional is left to io.c's readiness way. */
const struct ch_backend ch_backend_epoll = {
  .name = "epoll",
  .kind = CH_IO_EPOLL,
  .init = epoll_init,
  .fini = epoll_fini,
  .poll = epoll_poll,
  .arm = epoll_arm,
  .close = epoll_close,
  .watched = epoll_watched,
  .inflight = epoll_inflight,
  .pending = epoll_pending,
};
