/* Keepalive pools. See keepalive.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohost.h"
#include "net/keepalive.h"
#include "net/tls.h"

/* One idle connection. Its timer closes it after the idle timeout; timer
** callbacks run on the scheduler's stack, so they only close fds. */
struct item {
  struct ch_timer timer;    /* first: the callback finds the item from it */
  struct pool *pool;        /* owner */
  struct item *prev, *next; /* most recently used first */
  int fd;
  int reused;               /* the connection's getreusedtimes() so far */
  SSL *ssl;                 /* a TLS connection keeps its session state */
};

struct pool {
  struct pool *next;        /* the thread's pools */
  struct item *head, *tail;
  int size;                 /* most idle connections kept */
  int count;                /* idle connections now */
  char key[];               /* "host:port", "unix:/path" or opts.pool */
};

/* This thread's pools. Lookup is O(pools): a worker talks to few peers.
** Empty pools are kept, so each keeps the size it was made with. */
static __thread struct pool *pools;

static struct pool *pool_find(const char *key)
{
  for (struct pool *p = pools; p; p = p->next)
    if (strcmp(p->key, key) == 0) return p;
  return NULL;
}

static void item_unlink(struct item *it)
{
  struct pool *p = it->pool;
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

static void item_expire(struct ch_timer *t)
{
  item_free((struct item *)t);
}

/* The check of ngx_http_lua_socket_keepalive_close_handler: a pooled
** connection the peer closed, or one with stray data, cannot be handed
** out. */
int ch_keepalive_quiet(int fd)
{
  char c;
  ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

int ch_keepalive_take(const char *key, int *reused, SSL **ssl)
{
  struct pool *p = pool_find(key);
  while (p && p->head) {
    struct item *it = p->head;
    ch_timer_stop(&it->timer);
    item_unlink(it);
    int fd = it->fd, n = it->reused;
    SSL *s = it->ssl;
    free(it);
    if (ch_keepalive_quiet(fd)) {
      *reused = n;
      *ssl = s;
      return fd;
    }
    ch_tls_free(s, 0);
    close(fd);
  }
  return -1;
}

int ch_keepalive_put(const char *key, int size, int idle_ms, int fd, SSL *ssl, int reused)
{
  struct pool *p = pool_find(key);
  struct item *it = calloc(1, sizeof *it);
  if (!p && it) {
    size_t klen = strlen(key);
    if ((p = calloc(1, sizeof *p + klen + 1))) {
      memcpy(p->key, key, klen + 1);
      p->size = size;
      p->next = pools;
      pools = p;
    }
  } else if (p && p->count == 0) {
    /* An empty pool is as good as a new one (OpenResty frees a pool when
    ** its last connection goes): it takes this size. A later server on a
    ** reused port would otherwise inherit an old pool's size. */
    p->size = size;
  }
  if (!p || !it) {
    free(it);
    ch_tls_free(ssl, 0);
    close(fd);
    return -ENOMEM;
  }
  if (p->count >= p->size) item_free(p->tail);   /* the least recently used */
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
    return -ENOMEM;
  }
  return 0;
}

void ch_keepalive_close(const char *key)
{
  struct pool *p = pool_find(key);
  if (p)
    while (p->head) item_free(p->head);
}

void ch_keepalive_close_all(void)
{
  for (struct pool *p = pools; p; p = p->next)
    while (p->head) item_free(p->head);
}
