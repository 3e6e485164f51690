/*
** PostgreSQL connections on libpq's asynchronous API, waiting on the
** connection's socket through io.c (never libpq's own blocking waits),
** with cancel requests made on the runtime's thread pool and a bounded
** cache of prepared statements per connection. No Lua here:
** host/lib_postgres.c turns what this returns into Lua values.
*/
#ifndef CH_PG_H
#define CH_PG_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

struct ch_coro;

/* One prepared statement of a connection, named "ch<id>" on the server. */
struct ch_pg_stmt {
  struct ch_pg_stmt *next;     /* hash chain */
  uint64_t hash;               /* of key */
  uint64_t used;               /* the connection's tick at its last use */
  char *key;                   /* the SQL text, a NUL, the parameter
                               ** types' signature; owned */
  size_t keylen;
  unsigned id;                 /* its server-side name's number */
  int ref;                     /* the Lua layer's (its rows' metatable);
                               ** -1 (LUA_NOREF) for none */
};

struct ch_pg {
  PGconn *conn;                /* NULL once closed */
  PGcancel *cancel;            /* for cancel requests, made at connect */
  int64_t timeout_ms;          /* statement timeout, 0: none */
  uint8_t busy;                /* a call is running on it (it may be
                               ** parked); owner: the caller */
  uint8_t dead;                /* lost, dropped or broken: close it */
  uint8_t timed_out;           /* the last result came after a cancel
                               ** request sent at the statement timeout */
  uint8_t woken;               /* ch_pg_wake was called */
  struct ch_coro *notify_wait; /* parked in ch_pg_wait_notify, or NULL */
  struct ch_pg_stmt **buckets; /* statement cache: 2 x cap chains */
  unsigned cap;                /* statements kept at most */
  unsigned count;              /* statements kept now */
  unsigned next_id;            /* the next statement's name number */
  uint64_t tick;               /* counts statement uses, for LRU */
};

/* Results of the calls that wait (besides 0): */
#define CH_PG_LOST     (-1001) /* the connection failed (PQerrorMessage
                               ** says why); it is marked dead */

/* Sets p up empty: no connection, a statement cache of cap (at least 1). */
void ch_pg_init(struct ch_pg *p, unsigned cap);

/* Yields. Opens p with PQconnectStartParams(kw, val) (expand_dbname set:
** a "dbname" holding a connection string is one), within timeout_ms (0:
** no limit). Returns 0; -ETIMEDOUT; -ECANCELED (the task was cancelled);
** CH_PG_LOST (PQerrorMessage(p->conn) says why; p->conn stays for it
** until ch_pg_close); -ENOMEM. */
int ch_pg_connect(struct ch_pg *p, const char *const *kw, const char *const *val,
                  int64_t timeout_ms);

/* Closes p's connection and frees its cache; a statement's Lua reference
** must be dropped by the caller first (ch_pg_stmt_next walks them). Never
** yields: libpq's Terminate message goes out with one non-blocking send. */
void ch_pg_close(struct ch_pg *p);

/* The deadline of a statement starting now: now + p->timeout_ms in
** CLOCK_MONOTONIC ns, 0 for none. */
uint64_t ch_pg_deadline(const struct ch_pg *p);

/* Yields. Sends what libpq holds for the server, reading input meanwhile
** as libpq asks (the server may be sending results of earlier pipelined
** queries). Returns 0, -ECANCELED (p dropped), CH_PG_LOST, or
** -ETIMEDOUT (p dropped: a statement that cannot even be sent within
** its timeout). */
int ch_pg_flush(struct ch_pg *p, uint64_t deadline);

/* Yields. The next result of the command running on p, as PQgetResult
** (NULL when it has no more), waiting for input as long as libpq needs
** more. At the deadline (0: none) a cancel request is sent and the wait
** goes on for the server's answer (p->timed_out set), for a grace period
** at most, after which p is dropped. Returns 0 with *res set, -ECANCELED
** (a cancel request was sent and p dropped), -ETIMEDOUT (p dropped after
** the grace period), CH_PG_LOST. */
int ch_pg_result(struct ch_pg *p, uint64_t *deadline, PGresult **res);

/* Yields. Reads and frees the results left until PQgetResult says NULL;
** 0 or what ch_pg_result returned. */
int ch_pg_drain(struct ch_pg *p, uint64_t *deadline);

/* Yields. Waits for input on p and reads what came into libpq
** (PQconsumeInput): for COPY's rows, which come without PQgetResult. 0
** (maybe woken for nothing: look at libpq again), -ECANCELED or
** -ETIMEDOUT (a cancel request was sent and p dropped), CH_PG_LOST. */
int ch_pg_input(struct ch_pg *p, uint64_t deadline);

/* Yields. Sends a cancel request for p's running command (PQcancel on
** the runtime's thread pool: it opens a connection of its own and waits
** for the server). Not cancellable. Returns 0, or -EIO with errbuf
** (size n) saying why. */
int ch_pg_cancel(struct ch_pg *p, char *errbuf, int n);

/* Marks p dead and closes its socket's connection now (ch_pg_close
** frees the rest). Never yields. */
void ch_pg_drop(struct ch_pg *p);

/* Whether p is fit for a new command: open, not dead, idle (no result
** pending) and, if epoll has reported input since libpq last emptied its
** socket (an idle connection's input is the server's goodbye: a restart,
** an administrator's pg_terminate_backend), still connected after
** reading it. Costs no system call while nothing came. Never yields. */
int ch_pg_usable(struct ch_pg *p);

/* Yields. Waits up to timeout_ms (< 0: forever) for a notification on
** p (a connection that ran LISTEN): returns 1 with *n set (free it with
** PQfreemem), 0 at the timeout or when ch_pg_wake was called, -ECANCELED,
** CH_PG_LOST. */
int ch_pg_wait_notify(struct ch_pg *p, int64_t timeout_ms, PGnotify **n);

/* Makes p's ch_pg_wait_notify return 0 now, or its next one at once.
** Never yields. */
void ch_pg_wake(struct ch_pg *p);

/* -- Prepared statements ----------------------------------------------------- */

/* The statement cached under key (len bytes), marked used, or NULL. */
struct ch_pg_stmt *ch_pg_stmt_find(struct ch_pg *p, const char *key, size_t len);

/* Caches a new statement under key: the entry (its name number in id),
** or NULL for no memory. The caller keeps the count within cap first
** (ch_pg_stmt_victim, ch_pg_stmt_del). */
struct ch_pg_stmt *ch_pg_stmt_add(struct ch_pg *p, const char *key, size_t len);

/* The least recently used statement, or NULL if none. O(cap). */
struct ch_pg_stmt *ch_pg_stmt_victim(struct ch_pg *p);

/* Forgets st (the server's copy is the caller's to deallocate). */
void ch_pg_stmt_del(struct ch_pg *p, struct ch_pg_stmt *st);

/* Walks the cache: the entry after st (NULL: the first), NULL at the end.
** Not valid across ch_pg_stmt_del of the entry it returned. */
struct ch_pg_stmt *ch_pg_stmt_next(struct ch_pg *p, struct ch_pg_stmt *st);

#endif
