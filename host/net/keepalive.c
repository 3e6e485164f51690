/* Keepalive pools. See keepalive.h. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cohost.h"
#include "net/keepalive.h"
#include "net/tls.h"

/* One idle connection. Its timer closes it after the idle timeout; timer
** callbacks run on the scheduler's stack, so they only close fds and
** wake queued connects (an unpark, which never switches stacks). */
struct item {
  struct ch_timer timer;    /* first: the callback finds the item from it */
  struct ch_keepalive *pool; /* owner */
  struct item *prev, *next; /* most recently used first */
  int fd;
  int reused;               /* the connection's getreusedtimes() so far */
  SSL *ssl;                 /* a TLS connection keeps its session state */
};

/* One key's pool: struct ch_keepalive to the header. Counted connections
** are those it handed out with ch_keepalive_take and those it holds idle;
** a connect with a backlog may take one while fewer than size are
** counted, else it queues. */
struct ch_keepalive {
  struct ch_keepalive *next; /* the thread's pools */
  struct item *head, *tail;
  int size;                 /* most idle connections kept; with a backlog,
                            ** most counted connections */
  int backlog;              /* most connects queued; -1: no queue, no bound */
  int count;                /* idle connections now */
  int out;                  /* counted connections in use (or connecting) */
  int waiting;              /* connects queued on waiters, woken ones
                            ** included until they run */
  int woken;                /* of those, woken for a connection not yet taken */
  struct ch_waitq waiters;  /* the queued connects, first come first */
  char key[];               /* "host:port", "unix:/path" or opts.pool */
};

/* This thread's pools. Lookup is O(pools): a worker talks to few peers.
** Pools are never freed (a socket keeps a pointer to its own): an empty
** one counts as gone and is made anew by the next that names sizes. */
static __thread struct ch_keepalive *pools;

static struct ch_keepalive *pool_find(const char *key)
{
  for (struct ch_keepalive *p = pools; p; p = p->next)
    if (strcmp(p->key, key) == 0) return p;
  return NULL;
}

/* Nothing counted and nothing waiting: OpenResty would have freed it. */
static int pool_empty(const struct ch_keepalive *p)
{
  return p->count == 0 && p->out == 0 && p->waiting == 0;
}

static struct ch_keepalive *pool_new(const char *key)
{
  size_t klen = strlen(key);
  struct ch_keepalive *p = calloc(1, sizeof *p + klen + 1);
  if (!p) return NULL;
  memcpy(p->key, key, klen + 1);
  p->backlog = -1;
  p->next = pools;
  pools = p;
  return p;
}

/* Connections a connect could take now: the idle ones, or room under
** size for new ones, whichever is more. */
static int pool_free(const struct ch_keepalive *p)
{
  int room = p->size - p->out;
  return p->count > room ? p->count : room;
}

/* Wakes queued connects while there are connections for them, counting
** those woken and not yet run (each will take one). A waiter that timed
** out meanwhile is skipped by the wake (cohost.h), so no connection is
** promised to a connect that is gone. Never yields. */
static void kick(struct ch_keepalive *p)
{
  while (p->waiting > p->woken && pool_free(p) > p->woken) {
    if (!ch_waitq_wake_one(&p->waiters)) break;
    p->woken++;
  }
}

static void item_unlink(struct item *it)
{
  struct ch_keepalive *p = it->pool;
  if (it->prev) it->prev->next = it->next;
  else p->head = it->next;
  if (it->next) it->next->prev = it->prev;
  else p->tail = it->prev;
  p->count--;
}

/* Closes and frees an idle connection. Never yields. */
static void item_free(struct item *it)
{
  ch_timer_stop(&it->timer);
  item_unlink(it);
  ch_tls_free(it->ssl, 0);
  close(it->fd);
  free(it);
}

/* The idle timeout: its place may go to a queued connect. */
static void item_expire(struct ch_timer *t)
{
  struct ch_keepalive *p = ((struct item *)t)->pool;
  item_free((struct item *)t);
  kick(p);
}

/* The check of ngx_http_lua_socket_keepalive_close_handler: a pooled
** connection the peer closed, or one with stray data, cannot be handed
** out. nginx looks only when epoll reported input on the idle connection;
** so does this, through io.c's judgement: after the read that emptied the
** socket, with no input reported since, it is quiet without a peek (the
** peeks at take and put were the system calls a pooled connection cost
** beyond nginx's, docs/benchmarks.md). */
int ch_keepalive_quiet(int fd)
{
  if (ch_io_input_quiet(fd)) return 1;
  char c;
  ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

struct ch_keepalive *ch_keepalive_get(const char *key, int size, int backlog)
{
  struct ch_keepalive *p = pool_find(key);
  if (size <= 0) return p && !pool_empty(p) ? p : NULL;
  if (!p && !(p = pool_new(key))) return NULL;
  if (pool_empty(p)) {
    p->size = size;
    p->backlog = backlog < 0 ? -1 : backlog;
  }
  return p;
}

/* Time left until deadline (ch_sched's ms clock is not ours to read:
** CLOCK_MONOTONIC), at least 0. */
static int64_t left_ms(const struct timespec *deadline)
{
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t ms = (int64_t)(deadline->tv_sec - now.tv_sec) * 1000 +
               (deadline->tv_nsec - now.tv_nsec) / 1000000;
  return ms > 0 ? ms : 0;
}

int ch_keepalive_take(struct ch_keepalive *p, int timeout_ms, int *fd, int *reused, SSL **ssl)
{
  /* With a backlog, a connect queues behind those waiting already (and
  ** those woken, not yet run) even if a connection is free, so the
  ** longest waiting gets it. */
  if (p->backlog >= 0 && (p->waiting > 0 || pool_free(p) <= 0)) {
    if (p->waiting - p->woken >= p->backlog) return -EAGAIN;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000;
    }
    int64_t ms = timeout_ms;
    for (;;) {
      p->waiting++;
      int r = ch_waitq_wait(&p->waiters, ms);
      p->waiting--;
      if (r == 0) p->woken--;
      if (r < 0) {
        /* Timed out or cancelled, maybe just as a connection came free
        ** for it: the next in line gets that. */
        kick(p);
        return r == -ECANCELED ? r : -ETIMEDOUT;
      }
      if (pool_free(p) > 0) break;
      /* Woken, then beaten to it (cannot happen while every connect of
      ** the pool queues, but cheap to survive): wait again, last. */
      if ((ms = left_ms(&deadline)) <= 0) return -ETIMEDOUT;
    }
  }
  while (p->head) {
    struct item *it = p->head;
    ch_timer_stop(&it->timer);
    item_unlink(it);
    int f = it->fd, n = it->reused;
    SSL *s = it->ssl;
    free(it);
    if (ch_keepalive_quiet(f)) {
      p->out++;
      *fd = f;
      *reused = n;
      *ssl = s;
      return 0;
    }
    ch_tls_free(s, 0);
    close(f);
  }
  p->out++;
  *fd = -1;
  *reused = 0;
  *ssl = NULL;
  return 0;
}

void ch_keepalive_drop(struct ch_keepalive *p)
{
  assert(p->out > 0);
  p->out--;
  kick(p);
}

int ch_keepalive_put(const char *key, struct ch_keepalive *counted, int size, int idle_ms,
                     int fd, SSL *ssl, int reused)
{
  struct ch_keepalive *p = counted;
  if (p) {
    assert(p->out > 0);
    p->out--;
  } else if ((p = pool_find(key)) == NULL) {
    p = pool_new(key);
  }
  if (p && pool_empty(p) && !counted) {
    /* A pool that is gone is made anew with the size this call gives (a
    ** later server on a reused port would otherwise inherit an old
    ** pool's size), as OpenResty's setkeepalive makes one. */
    p->size = size;
    p->backlog = -1;
  }
  struct item *it = p ? calloc(1, sizeof *it) : NULL;
  if (!it) {
    ch_tls_free(ssl, 0);
    close(fd);
    if (p) kick(p);
    return -ENOMEM;
  }
  if (p->count >= p->size && p->tail) item_free(p->tail);   /* the least recently used */
  it->pool = p;
  it->fd = fd;
  it->reused = reused;
  it->ssl = ssl;
  it->next = p->head;
  if (p->head) p->head->prev = it;
  else p->tail = it;
  p->head = it;
  p->count++;
  it->timer.weak = 1;   /* an idle connection never keeps a worker alive */
  if (idle_ms > 0 && ch_timer_start(&it->timer, idle_ms, item_expire) < 0) {
    item_free(it);
    kick(p);
    return -ENOMEM;
  }
  kick(p);
  return 0;
}

void ch_keepalive_close(const char *key)
{
  struct ch_keepalive *p = pool_find(key);
  if (!p) return;
  while (p->head) item_free(p->head);
  kick(p);
}

void ch_keepalive_close_all(void)
{
  for (struct ch_keepalive *p = pools; p; p = p->next)
    while (p->head) item_free(p->head);
}
