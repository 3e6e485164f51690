/*
** PostgreSQL connections over libpq's asynchronous API (libpq's own docs,
** "Asynchronous Command Processing" and "Pipeline Mode", are the
** reference for every call order here). libpq is non-blocking on its
** socket: each call reads or writes what the socket takes and says
** whether it needs more; the waits in between are io.c's ch_io_wait, so
** a query parks only its coroutine, with the statement timeout as the
** wait's deadline and the task's cancellation seen there too.
**
** libpq's own recv and send reach the libc hooks, which pass them
** straight through (libpq made the socket non-blocking itself) and tell
** io.c what they found (hook.c, io_pass): a read that emptied the socket
** is noted, so the wait that follows parks at once instead of asking
** poll(2) first. A query is then one send and one receive.
**
** Two libpq calls block: PQconnectStart's getaddrinfo for a host name
** (lua/cohost/postgres.lua resolves names with cohost.dns and passes
** hostaddr) and PQcancel, which opens a connection of its own and waits
** for the server: it runs on the runtime's thread pool (ch_pool_call).
*/
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "cohost.h"
#include "log.h"
#include "net/pg.h"

/* How long the server has to answer a cancel request made at a
** statement timeout before the connection is dropped: time for it to
** notice (it checks for interrupts often, but a slow disk or a lock wait
** in a big transaction can delay it). */
#define CANCEL_GRACE_NS (5 * UINT64_C(1000000000))

/* -- Waiting -------------------------------------------------------------- */

/* Milliseconds until deadline (rounded up): -1 for no deadline, 0 once
** it has passed. */
static int64_t ms_left(uint64_t deadline)
{
  if (!deadline) return -1;
  uint64_t now = ch_now_ns();
  if (now >= deadline) return 0;
  return (int64_t)((deadline - now + 999999) / 1000000);
}

/* Yields. Waits for events on p's socket until deadline (0: none).
** Returns the ready events, 0 when woken by ch_pg_wake (not by the
** socket), -ETIMEDOUT, -ECANCELED, or CH_PG_LOST when the socket is gone. */
static int wait_sock(struct ch_pg *p, int events, uint64_t deadline)
{
  int fd = PQsocket(p->conn);
  if (fd < 0) return CH_PG_LOST;
  int64_t ms = ms_left(deadline);
  if (ms == 0) return -ETIMEDOUT;
  int r = ch_io_wait(fd, events, ms);
  return r == -EBADF ? CH_PG_LOST : r;
}

/* Whether OpenSSL holds bytes of p's socket that libpq has not taken: a
** wait on the socket would then wait for data already read (libpq's own
** pqSocketCheck asks the same before it polls). */
static int ssl_pending(PGconn *c)
{
  if (!PQsslInUse(c)) return 0;
  SSL *ssl = PQsslStruct(c, "OpenSSL");
  return ssl && SSL_has_pending(ssl);
}

/* The server's NOTICE and WARNING messages go to cohost's log at info
** level, not to stderr as libpq's default processor writes them. */
static void notice(void *arg, const char *msg)
{
  (void)arg;
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') n--;
  ch_log(CH_LOG_INFO, "postgres: %.*s", (int)n, msg);
}

/* -- Connections ----------------------------------------------------------- */

void ch_pg_init(struct ch_pg *p, unsigned cap)
{
  memset(p, 0, sizeof *p);
  p->cap = cap ? cap : 1;
  p->next_id = 1;
}

int ch_pg_connect(struct ch_pg *p, const char *const *kw, const char *const *val,
                  int64_t timeout_ms)
{
  uint64_t deadline = timeout_ms > 0 ? ch_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
  p->conn = PQconnectStartParams(kw, val, 1);
  if (!p->conn) return -ENOMEM;
  PQsetNoticeProcessor(p->conn, notice, NULL);
  if (PQstatus(p->conn) == CONNECTION_BAD) {
    p->dead = 1;
    return CH_PG_LOST;
  }
  /* As libpq's docs say: start as if PQconnectPoll had said WRITING. Its
  ** socket may change between calls (another address, a retry without
  ** TLS), so each wait asks for it again. */
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED) {
      p->dead = 1;
      return CH_PG_LOST;
    }
    int r = wait_sock(p, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
    if (r == -ETIMEDOUT || r == -ECANCELED) {
      ch_pg_drop(p);
      return r;
    }
    if (r == 0) continue;   /* not the socket's doing */
    st = PQconnectPoll(p->conn);
  }
  if (PQsetnonblocking(p->conn, 1) != 0) {
    p->dead = 1;
    return CH_PG_LOST;
  }
  p->cancel = PQgetCancel(p->conn);
  return 0;
}

void ch_pg_drop(struct ch_pg *p)
{
  p->dead = 1;
  if (p->cancel) PQfreeCancel(p->cancel);
  p->cancel = NULL;
  if (p->conn) PQfinish(p->conn);
  p->conn = NULL;
}

void ch_pg_close(struct ch_pg *p)
{
  ch_pg_drop(p);
  if (p->buckets) {
    for (unsigned i = 0; i < 2 * p->cap; i++) {
      struct ch_pg_stmt *st = p->buckets[i];
      while (st) {
        struct ch_pg_stmt *next = st->next;
        free(st->key);
        free(st);
        st = next;
      }
    }
    free(p->buckets);
    p->buckets = NULL;
  }
  p->count = 0;
}

uint64_t ch_pg_deadline(const struct ch_pg *p)
{
  return p->timeout_ms > 0 ? ch_now_ns() + (uint64_t)p->timeout_ms * 1000000u : 0;
}

/* -- Cancel requests --------------------------------------------------------- */

/* On the heap: in COPY stack mode the pool thread must not touch the
** caller's stack (ch_pool_call). */
struct cancel_job {
  PGcancel *cancel;
  int ok;
  char err[256];
};

static void run_cancel(void *arg)
{
  struct cancel_job *j = arg;
  j->ok = PQcancel(j->cancel, j->err, sizeof j->err);
}

int ch_pg_cancel(struct ch_pg *p, char *errbuf, int n)
{
  if (!p->cancel) {
    if (n > 0) snprintf(errbuf, (size_t)n, "no cancel key for this connection");
    return -EIO;
  }
  struct cancel_job *j = malloc(sizeof *j);
  if (!j) {
    if (n > 0) snprintf(errbuf, (size_t)n, "no memory");
    return -ENOMEM;
  }
  j->cancel = p->cancel;
  j->ok = 0;
  j->err[0] = 0;
  int r = ch_pool_call(run_cancel, j);
  if (r == 0 && !j->ok) r = -EIO;
  if (r < 0 && n > 0) snprintf(errbuf, (size_t)n, "%s", j->err[0] ? j->err : "cancel request failed");
  free(j);
  return r;
}

/* A cancelled task cannot wait for the server's answer to anything: a
** command still running is cancelled on the server (so it stops now,
** not when it next writes to a closed socket) and the connection
** closed, which also rolls back an open transaction. */
static int cancelled(struct ch_pg *p)
{
  char buf[256];
  if (PQtransactionStatus(p->conn) == PQTRANS_ACTIVE) ch_pg_cancel(p, buf, sizeof buf);
  ch_pg_drop(p);
  return -ECANCELED;
}

/* -- Commands ---------------------------------------------------------------- */

int ch_pg_flush(struct ch_pg *p, uint64_t deadline)
{
  for (;;) {
    int f = PQflush(p->conn);
    if (f == 0) return 0;
    if (f < 0) {
      p->dead = 1;
      return CH_PG_LOST;
    }
    /* libpq's rule: while output waits for room, read what comes, or a
    ** server blocked writing results to us would never read more. */
    int r = wait_sock(p, POLLIN | POLLOUT, deadline);
    if (r == -ECANCELED) return cancelled(p);
    if (r == -ETIMEDOUT) {
      ch_pg_drop(p);
      return r;
    }
    if (r < 0) {
      p->dead = 1;
      return r;
    }
    if ((r & (POLLIN | POLLHUP | POLLERR)) && !PQconsumeInput(p->conn)) {
      p->dead = 1;
      return CH_PG_LOST;
    }
  }
}

int ch_pg_result(struct ch_pg *p, uint64_t *deadline, PGresult **res)
{
  PGconn *c = p->conn;
  for (;;) {
    if (!PQisBusy(c)) {
      *res = PQgetResult(c);
      return 0;
    }
    if (!ssl_pending(c)) {
      int r = wait_sock(p, POLLIN, *deadline);
      if (r == -ETIMEDOUT) {
        char buf[256];
        if (p->timed_out || ch_pg_cancel(p, buf, sizeof buf) < 0) {
          ch_pg_drop(p);   /* no answer to the cancel request */
          return -ETIMEDOUT;
        }
        p->timed_out = 1;
        *deadline = ch_now_ns() + CANCEL_GRACE_NS;
        continue;
      }
      if (r == -ECANCELED) return cancelled(p);
      if (r < 0) {
        p->dead = 1;
        return r;
      }
      if (r == 0) continue;   /* ch_pg_wake's, not the socket's */
    }
    if (!PQconsumeInput(c)) {
      p->dead = 1;
      return CH_PG_LOST;
    }
  }
}

int ch_pg_drain(struct ch_pg *p, uint64_t *deadline)
{
  for (;;) {
    PGresult *res;
    int r = ch_pg_result(p, deadline, &res);
    if (r < 0) return r;
    if (!res) return 0;
    /* COPY states need their own ending: the caller ends COPY first. */
    ExecStatusType st = PQresultStatus(res);
    PQclear(res);
    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
      ch_pg_drop(p);
      return CH_PG_LOST;
    }
  }
}

int ch_pg_input(struct ch_pg *p, uint64_t deadline)
{
  if (!ssl_pending(p->conn)) {
    int r = wait_sock(p, POLLIN, deadline);
    if (r == -ECANCELED) return cancelled(p);
    if (r == -ETIMEDOUT) {
      char buf[256];
      ch_pg_cancel(p, buf, sizeof buf);
      ch_pg_drop(p);
      return r;
    }
    if (r < 0) {
      p->dead = 1;
      return r;
    }
    if (r == 0) return 0;
  }
  if (!PQconsumeInput(p->conn)) {
    p->dead = 1;
    return CH_PG_LOST;
  }
  return 0;
}

int ch_pg_usable(struct ch_pg *p)
{
  if (!p->conn || p->dead || PQstatus(p->conn) != CONNECTION_OK) return 0;
  if (PQisBusy(p->conn) || PQtransactionStatus(p->conn) == PQTRANS_ACTIVE) return 0;
  int fd = PQsocket(p->conn);
  /* No system call when io.c knows the socket empty (libpq's last read
  ** said EAGAIN, and nothing was reported since), one poll(2) otherwise. */
  if (ch_io_wait(fd, POLLIN, 0) == -ETIMEDOUT && !ssl_pending(p->conn)) return 1;
  /* Something came while it was idle: read it. An EOF or a reset makes
  ** libpq mark the connection bad. */
  if (!PQconsumeInput(p->conn) || PQstatus(p->conn) != CONNECTION_OK) {
    p->dead = 1;
    return 0;
  }
  return 1;
}

/* -- Notifications ------------------------------------------------------------- */

int ch_pg_wait_notify(struct ch_pg *p, int64_t timeout_ms, PGnotify **n)
{
  uint64_t deadline = timeout_ms > 0 ? ch_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
  for (;;) {
    /* Notifications an earlier command's input carried come first. */
    if ((*n = PQnotifies(p->conn)) != NULL) return 1;
    if (p->woken) {
      p->woken = 0;
      return 0;
    }
    if (timeout_ms == 0) return 0;
    int r = 1;
    if (!ssl_pending(p->conn)) {
      p->notify_wait = ch_current();
      r = wait_sock(p, POLLIN, deadline);
      p->notify_wait = NULL;
    }
    if (r == -ETIMEDOUT) return 0;
    if (r == -ECANCELED) return r;
    if (r < 0) {
      p->dead = 1;
      return r;
    }
    if (r == 0) continue;   /* woken */
    if (!PQconsumeInput(p->conn) || PQstatus(p->conn) != CONNECTION_OK) {
      p->dead = 1;
      return CH_PG_LOST;
    }
  }
}

void ch_pg_wake(struct ch_pg *p)
{
  p->woken = 1;
  /* Its wait (ch_io_wait, parked on the socket) returns 0: no events. */
  if (p->notify_wait) ch_unpark(p->notify_wait, 0);
}

/* -- Prepared statements ------------------------------------------------------- */

/* 64-bit FNV-1a over 8-byte words, then the tail: a statement's text is
** hashed once per query, so word steps matter for long SQL. */
static uint64_t hash_key(const char *s, size_t n)
{
  uint64_t h = UINT64_C(0xcbf29ce484222325) ^ n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * UINT64_C(0x100000001b3);
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  while (n--) h = (h ^ (unsigned char)*s++) * UINT64_C(0x100000001b3);
  return h ^ (h >> 32);
}

static unsigned nbuckets(const struct ch_pg *p)
{
  return 2 * p->cap;
}

struct ch_pg_stmt *ch_pg_stmt_find(struct ch_pg *p, const char *key, size_t len)
{
  if (!p->buckets) return NULL;
  uint64_t h = hash_key(key, len);
  for (struct ch_pg_stmt *st = p->buckets[h % nbuckets(p)]; st; st = st->next) {
    if (st->hash == h && st->keylen == len && memcmp(st->key, key, len) == 0) {
      st->used = ++p->tick;
      return st;
    }
  }
  return NULL;
}

struct ch_pg_stmt *ch_pg_stmt_add(struct ch_pg *p, const char *key, size_t len)
{
  if (!p->buckets && !(p->buckets = calloc(nbuckets(p), sizeof *p->buckets))) return NULL;
  struct ch_pg_stmt *st = malloc(sizeof *st);
  char *k = malloc(len + 1);
  if (!st || !k) {
    free(st);
    free(k);
    return NULL;
  }
  memcpy(k, key, len);
  k[len] = 0;
  uint64_t h = hash_key(key, len);
  *st = (struct ch_pg_stmt){ p->buckets[h % nbuckets(p)], h, ++p->tick, k, len, p->next_id++, -1 };
  p->buckets[h % nbuckets(p)] = st;
  p->count++;
  return st;
}

struct ch_pg_stmt *ch_pg_stmt_victim(struct ch_pg *p)
{
  struct ch_pg_stmt *best = NULL;
  for (struct ch_pg_stmt *st = ch_pg_stmt_next(p, NULL); st; st = ch_pg_stmt_next(p, st))
    if (!best || st->used < best->used) best = st;
  return best;
}

void ch_pg_stmt_del(struct ch_pg *p, struct ch_pg_stmt *st)
{
  struct ch_pg_stmt **link = &p->buckets[st->hash % nbuckets(p)];
  while (*link && *link != st) link = &(*link)->next;
  if (!*link) return;
  *link = st->next;
  free(st->key);
  free(st);
  p->count--;
}

struct ch_pg_stmt *ch_pg_stmt_next(struct ch_pg *p, struct ch_pg_stmt *st)
{
  if (!p->buckets) return NULL;
  unsigned i = 0;
  if (st) {
    if (st->next) return st->next;
    i = (unsigned)(st->hash % nbuckets(p)) + 1;
  }
  for (; i < nbuckets(p); i++)
    if (p->buckets[i]) return p->buckets[i];
  return NULL;
}
