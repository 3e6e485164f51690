/*
** Waiting on fds. See fdwait.h. The waiter lists live in each fd's entry
** (readers, writers), so they are the same whichever backend reports
** the events: epoll's loop (poll.c) and io_uring's completions (ring.c)
** both end in ch_fdwait_ready. io.c parks through ch_fdwait_link and
** ch_fdwait_done (ch_fdwait_wait is the two around ch_sched_park), the
** poll and select hooks through ch_fdwait_wait_many, and watches are
** callbacks on the same lists.
*/
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fdwait.h"
#include "sched.h"

_Static_assert(CH_WAIT_READ == POLLIN && CH_WAIT_WRITE == POLLOUT &&
               CH_WAIT_POLL == (POLLIN | POLLOUT), "an fd's park notes its poll events");

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

void ch_fdwait_ready(struct ch_fd *f, int revents)
{
  /* Facts for io.c, which judges readiness from them. */
  if (revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
    f->in_events++;
    if (revents & (POLLRDHUP | POLLHUP | POLLERR)) f->hup = 1;
    if (f->readers) wake_list(&f->readers, (short)revents);
  }
  if (revents & (POLLOUT | POLLHUP | POLLERR)) {
    f->out_events++;
    if (f->writers) wake_list(&f->writers, (short)revents);   /* mostly nobody */
  }
}

/* -- One fd --------------------------------------------------------------- */

/* The waiters are the coroutine's own (wnodes[0] reads, wnodes[1] writes:
** it waits on one thing at a time). In COPY mode a parked coroutine's
** frames are its saved image, and an idle connection parks right after
** this: so both halves are out of line, and the caller's frame keeps only
** what it needs after the park (docs/stacks.md, idle memory). */
int ch_fdwait_link(int fd, int events, int uncancellable)
{
  struct ch_sched *s = ch_sched_tls;
  struct ch_coro *self = s ? s->current : NULL;
  if (!self) return -EINVAL;
  if (!(events & (POLLIN | POLLOUT))) return -EINVAL;
  if (self->cancelled && !uncancellable) { self->cancel_hits++; return -ECANCELED; }
  struct ch_fd *f = ch_fd_get(fd);
  int r = f ? s->be->arm(s, fd, f, events) : -ENOMEM;
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

int ch_fdwait_done(int fd, int events, int r)
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

/* -- Several fds ---------------------------------------------------------- */

static int wait_linked(struct ch_sched *s, struct ch_coro *self, struct ch_waiter *w,
                       int n, int64_t timeout_ms)
{
  for (int i = 0; i < n; i++) {
    struct ch_fd *f = ch_fd_get(w[i].fd);
    int r = f ? s->be->arm(s, w[i].fd, f, w[i].events) : -ENOMEM;
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

int ch_fdwait_wait_many(struct ch_waiter *w, int n, int64_t timeout_ms)
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
  struct ch_sched *s = ch_sched_tls;
  if (s) s->nwatches--;
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
  short ev = (events & POLLOUT) ? POLLOUT : POLLIN;
  int r = s->be->arm(s, fd, f, ev);
  if (r < 0) return r;
  memset(wt, 0, sizeof *wt);
  wt->fd = fd;
  wt->events = ev;
  wt->notify = watch_notify;
  w->cb = cb;
  s->nwatches++;
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
  struct ch_sched *s = ch_sched_tls;
  if (s) s->nwatches--;
}

/* -- Close ---------------------------------------------------------------- */

int ch_fdwait_close(int fd, struct ch_fd *f)
{
  struct ch_sched *s = ch_sched_tls;
  int err = s ? s->be->close(s, fd, f) : 0;
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
  /* A connection that ends with no coroutine (an idle one's timer, a
  ** TLS client that never sent a request) frees its memory here: the
  ** idle trim counts it as it counts a coroutine's end (sched.c). */
  if (s) s->closed++;
  ch_fd_reset(f);
  return err;
}
