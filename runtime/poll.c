/*
** The epoll backend: registration, waiters, watches, close handling and
** the loop's poll. See poll.h for the rules; sched.c calls ch_poll_run
** from its loop, io.c parks through ch_poll_wait.
*/
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "libc.h"
#include "panic.h"
#include "poll.h"
#include "ring.h"
#include "sched.h"

#define EV_WAKEUP UINT64_MAX   /* epoll data of the eventfd */
#define MAX_EVENTS 256         /* events taken per epoll_wait */

_Static_assert(CH_WAIT_READ == POLLIN && CH_WAIT_WRITE == POLLOUT &&
               CH_WAIT_POLL == (POLLIN | POLLOUT), "an fd's park notes its poll events");

/* -- The instance --------------------------------------------------------- */

int ch_poll_init(struct ch_poll *p)
{
  p->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (p->epfd < 0) return -errno;
  p->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->evfd < 0) {
    int e = -errno;
    ch_libc.close(p->epfd);
    return e;
  }
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EV_WAKEUP };
  if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->evfd, &ev) < 0) {
    int e = -errno;
    ch_libc.close(p->evfd);
    ch_libc.close(p->epfd);
    return e;
  }
  return 0;
}

void ch_poll_fini(struct ch_poll *p)
{
  ch_libc.close(p->epfd);
  ch_libc.close(p->evfd);
}

void ch_poll_wake(struct ch_poll *p)
{
  uint64_t one = 1;
  /* EAGAIN means the counter is already non-zero: a wakeup is pending. */
  ssize_t w = ch_libc.write(p->evfd, &one, sizeof one);
  (void)w;
}

/* -- Registration --------------------------------------------------------- */

/* Out of line: its epoll_event would take room in every waiting frame
** (ch_poll_wait's, parked in COPY mode) for a call made once per fd. */
static __attribute__((noinline)) int fd_add(struct ch_sched *s, int fd, struct ch_fd *f)
{
  struct epoll_event ev = {
    .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
    .data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)f->gen << 32,
  };
  /* EEXIST: a dup of this fd's file is registered under an old gen, or a
  ** file closed behind our back left the number; MOD refreshes the gen. */
  if (epoll_ctl(s->poll.epfd, EPOLL_CTL_ADD, fd, &ev) < 0 &&
      (errno != EEXIST || epoll_ctl(s->poll.epfd, EPOLL_CTL_MOD, fd, &ev) < 0))
    return -errno;
  f->registered = 1;
  f->sched_id = s->id;
  return 0;
}

int ch_poll_add(struct ch_sched *s, int fd, struct ch_fd *f)
{
  if (f->registered && f->sched_id == s->id) return 0;
  return fd_add(s, fd, f);
}

/* -- Waiter lists --------------------------------------------------------- */

static void link_waiter(struct ch_waiter **head, struct ch_waiter *w)
{
  w->prev = NULL;
  w->next = *head;
  if (*head) (*head)->prev = w;
  *head = w;
}

static void unlink_waiter(struct ch_waiter **head, struct ch_waiter *w)
{
  if (w->prev) w->prev->next = w->next;
  else if (*head == w) *head = w->next;
  else return;   /* already unlinked (the fd was closed) */
  if (w->next) w->next->prev = w->prev;
  w->next = w->prev = NULL;
}

static struct ch_waiter **list_of(struct ch_fd *f, const struct ch_waiter *w)
{
  return (w->events & POLLOUT) ? &f->writers : &f->readers;
}

/* Wakes every waiter in a list with the poll events seen. A callback's
** waiter is unlinked before its callback runs (it is one-shot, and the
** callback may arm it again). */
static void wake_list(struct ch_waiter **head, short revents)
{
  struct ch_waiter *w = *head;
  while (w) {
    struct ch_waiter *next = w->next;
    w->revents |= revents;
    if (w->coro) {
      ch_unpark(w->coro, 0);
    } else {
      unlink_waiter(head, w);
      w->notify(w);
    }
    w = next;
  }
}

/* -- One fd --------------------------------------------------------------- */

/* Before ch_poll_wait's park: registers fd and links the running
** coroutine's waiters for events. Returns 0 or -errno (nothing linked
** then). */
static __attribute__((noinline)) int wait_link(int fd, int events)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_coro *self = s ? s->current : NULL;
  if (!self) return -EINVAL;
  if (!(events & (POLLIN | POLLOUT))) return -EINVAL;
  if (self->cancelled) { self->cancel_hits++; return -ECANCELED; }
  struct ch_fd *f = ch_fd_get(fd);
  int r = f ? ch_poll_add(s, fd, f) : -ENOMEM;
  if (r < 0) return r;
  for (int i = 0; i < 2; i++) {
    short ev = i ? POLLOUT : POLLIN;
    if (!(events & ev)) continue;
    struct ch_waiter *w = &self->wnodes[i];
    w->fd = fd;
    w->events = ev;
    w->revents = 0;
    w->coro = self;
    w->notify = NULL;
    link_waiter(i ? &f->writers : &f->readers, w);
  }
  ch_coro_note_wait(self, events & (POLLIN | POLLOUT), fd);   /* CH_WAIT_READ, _WRITE, _POLL */
  return 0;
}

/* After ch_poll_wait's park: unlinks the waiters and says what happened.
** Its own function, tail-called, so that only fd and events stay live in
** ch_poll_wait's frame across the park. */
static __attribute__((noinline)) int wait_done(int fd, int events, int r)
{
  struct ch_waiter *w = ch_sched_tls->current->wnodes;
  struct ch_fd *f = ch_fd_peek(fd);
  int rev = 0;
  if (events & POLLIN) {
    if (f) unlink_waiter(&f->readers, &w[0]);
    rev |= w[0].revents;
  }
  if (events & POLLOUT) {
    if (f) unlink_waiter(&f->writers, &w[1]);
    rev |= w[1].revents;
  }
  if (r < 0) return r;
  if (rev & POLLNVAL) return -EBADF;
  /* Report what was asked for plus errors, as poll(2) does. */
  return rev & (events | POLLERR | POLLHUP);
}

/* The waiters are the coroutine's own (wnodes[0] reads, wnodes[1] writes:
** it waits on one thing at a time). In COPY mode a parked coroutine's
** frames are its saved image, and an idle connection parks right here: so
** the work before and after the park is done by helpers out of line, and
** only fd and events stay in this frame (docs/stacks.md, idle memory). */
int ch_poll_wait(int fd, int events, int64_t timeout_ms)
{
  int r = wait_link(fd, events);
  if (r < 0) return r;
  r = ch_sched_park(ch_sched_deadline(timeout_ms), 0, CH_CORO_WAITING);
  return wait_done(fd, events, r);
}

/* -- Several fds ---------------------------------------------------------- */

static int wait_linked(struct ch_sched *s, struct ch_coro *self, struct ch_waiter *w,
                       int n, int64_t timeout_ms)
{
  for (int i = 0; i < n; i++) {
    struct ch_fd *f = ch_fd_get(w[i].fd);
    int r = f ? ch_poll_add(s, w[i].fd, f) : -ENOMEM;
    if (r < 0) {
      while (i-- > 0) unlink_waiter(list_of(ch_fd_peek(w[i].fd), &w[i]), &w[i]);
      return r;
    }
    w[i].coro = self;
    w[i].notify = NULL;
    w[i].revents = 0;
    link_waiter(list_of(f, &w[i]), &w[i]);
  }
  ch_coro_note_wait(self, CH_WAIT_POLL, n > 0 ? w[0].fd : -1);
  int r = ch_sched_park(ch_sched_deadline(timeout_ms), 0, CH_CORO_WAITING);
  for (int i = 0; i < n; i++) {
    struct ch_fd *f = ch_fd_peek(w[i].fd);
    if (f) unlink_waiter(list_of(f, &w[i]), &w[i]);
  }
  return r;
}

int ch_poll_wait_many(struct ch_waiter *w, int n, int64_t timeout_ms)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_coro *self = s ? s->current : NULL;
  if (!self) return -EINVAL;
  if (self->cancelled) { self->cancel_hits++; return -ECANCELED; }
  if (!self->shared) return wait_linked(s, self, w, n, timeout_ms);
  /* COPY mode: w is on our stack, which is saved away while we are
  ** parked, and the loop and other coroutines walk and relink the fd's
  ** waiter list. Link copies kept in the coroutine (2 inline; more take a
  ** heap array) and hand their revents back. */
  struct ch_waiter *nodes = self->wnodes;
  if (n > 2 && !(nodes = malloc((size_t)n * sizeof *nodes))) return -ENOMEM;
  memcpy(nodes, w, (size_t)n * sizeof *nodes);
  int r = wait_linked(s, self, nodes, n, timeout_ms);
  for (int i = 0; i < n; i++) w[i].revents = nodes[i].revents;
  if (nodes != self->wnodes) free(nodes);
  return r;
}

/* -- Watches: callbacks instead of coroutines ----------------------------- */

_Static_assert(sizeof(struct ch_waiter) <= sizeof(((struct ch_watch *)0)->priv),
               "struct ch_watch too small for a waiter");

static void watch_notify(struct ch_waiter *wt)
{
  struct ch_watch *w = (struct ch_watch *)(void *)wt;
  int rev = wt->revents & (wt->revents & POLLNVAL ? POLLNVAL : (wt->events | POLLERR | POLLHUP));
  wt->notify = NULL;   /* disarmed: the callback may arm it again */
  w->cb(w, rev);
}

int ch_watch_fd(struct ch_watch *w, int fd, int events,
                void (*cb)(struct ch_watch *w, int revents))
{
  int err = 0;
  struct ch_sched *s = ch_sched_get(&err);
  if (!s) return err;
  struct ch_waiter *wt = (struct ch_waiter *)(void *)w;
  if (wt->notify) return -EBUSY;
  if (fd < 0) return -EBADF;
  struct ch_fd *f = ch_fd_get(fd);
  if (!f) return -ENOMEM;
  int r = ch_poll_add(s, fd, f);
  if (r < 0) return r;
  memset(wt, 0, sizeof *wt);
  wt->fd = fd;
  wt->events = (events & POLLOUT) ? POLLOUT : POLLIN;
  wt->notify = watch_notify;
  w->cb = cb;
  link_waiter(list_of(f, wt), wt);
  return 0;
}

void ch_unwatch_fd(struct ch_watch *w)
{
  struct ch_waiter *wt = (struct ch_waiter *)(void *)w;
  if (!wt->notify) return;
  struct ch_fd *f = ch_fd_peek(wt->fd);
  if (f) unlink_waiter(list_of(f, wt), wt);
  wt->notify = NULL;
}

/* -- Close ---------------------------------------------------------------- */

void ch_poll_close(int fd, struct ch_fd *f)
{
  struct ch_sched *s = ch_sched_tls;
  if (f->ring_ops) ch_ring_close(fd, f);
  /* Waiters are unlinked here, not by themselves: the entry is reset below
  ** and the fd number may be reused before they run. */
  struct ch_waiter *lists[2] = { f->readers, f->writers };
  f->readers = f->writers = NULL;
  for (int i = 0; i < 2; i++) {
    struct ch_waiter *w = lists[i];
    while (w) {
      struct ch_waiter *next = w->next;
      w->next = w->prev = NULL;
      w->revents |= POLLNVAL;
      if (w->coro) ch_unpark(w->coro, 0);
      else w->notify(w);
      w = next;
    }
  }
  if (f->registered && s && f->sched_id == s->id)
    epoll_ctl(s->poll.epfd, EPOLL_CTL_DEL, fd, NULL);
  /* A connection that ends with no coroutine (an idle one's timer, a
  ** TLS client that never sent a request) frees its memory here: the
  ** idle trim counts it as it counts a coroutine's end (sched.c). */
  if (s) s->closed++;
  ch_fd_reset(f);
}

/* -- The loop's poll ------------------------------------------------------ */

int ch_poll_run(struct ch_poll *p, int timeout_ms, int *full)
{
  struct epoll_event evs[MAX_EVENTS];
  int woken = 0;
  int n = epoll_wait(p->epfd, evs, MAX_EVENTS, timeout_ms);
  if (full) *full = n == MAX_EVENTS;
  if (n < 0) {
    if (errno == EINTR) return 0;
    ch_panic("epoll_wait: %s", strerror(errno));
  }
  for (int i = 0; i < n; i++) {
    uint64_t d = evs[i].data.u64;
    if (d == EV_WAKEUP) {
      uint64_t count;
      ssize_t r = ch_libc.read(p->evfd, &count, sizeof count);   /* re-arm it */
      (void)r;
      woken = 1;
      continue;
    }
    struct ch_fd *f = ch_fd_peek((int)(uint32_t)d);
    if (!f || f->gen != (uint32_t)(d >> 32)) continue;  /* stale: fd reused */
    uint32_t e = evs[i].events;
    short rev = (short)((e & EPOLLIN ? POLLIN : 0) | (e & EPOLLOUT ? POLLOUT : 0) |
                        (e & EPOLLERR ? POLLERR : 0) | (e & EPOLLHUP ? POLLHUP : 0) |
                        (e & EPOLLRDHUP ? POLLRDHUP : 0));
    /* Facts for io.c, which judges readiness from them. */
    if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      f->in_events++;
      if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) f->hup = 1;
      if (f->readers) wake_list(&f->readers, rev);
    }
    if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
      f->out_events++;
      if (f->writers) wake_list(&f->writers, rev);   /* mostly nobody: a write rarely waits */
    }
  }
  return woken;
}
