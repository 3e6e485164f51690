/*
** cohost.core.postgres: PostgreSQL connections for Lua (internal: the
** documented face is lua/cohost/postgres.lua, which adds the pool,
** transactions, pipelines' builder, COPY's loops and LISTEN's
** dispatcher). Net/pg.c drives libpq; this file turns Lua values into
** bound parameters and runs the commands (lib_postgres_rows.c turns
** results into Lua values):
**
**   - parameters go in the extended protocol, never into the SQL text:
**     nil and pg.null are NULL, booleans bool, integral numbers int8,
**     other numbers float8, int64 cdata int8, strings text of a type the
**     server infers (so '2024-01-01' can be a date), pg.bytea binary;
**   - each connection prepares a statement the first time it runs a
**     given text with given parameter types, and runs it by name after
**     (a bounded cache, least recently used out, DEALLOCATE'd);
**   - rows come typed by column OID (text format, parsed in
**     lib_postgres_rows.c): numbers,
**     booleans, int8 past 2^53 as int64 cdata, bytea raw, json decoded,
**     timestamps in ISO 8601, one-dimensional arrays as Lua arrays, NULL
**     as pg.null (cjson.null);
**   - errors are tables with the server's fields (code is the SQLSTATE).
*/
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <libpq-fe.h>

#include "vm/ljvm.h"
#include "vm/task.h"
#include "lib.h"
#include "net/pg.h"
#include "lib_postgres.h"

/* A cancelled wait raises "cancelled" through our frames; the cleanup
** handlers (busy flag, PGresult, buffers) only run with unwind tables. */
#ifndef __EXCEPTIONS
#error "lib_postgres.c must be built with -fexceptions"
#endif

#define CONN_MT  "cohost.postgres.conn"
#define ERROR_MT "cohost.postgres.error"
/* Registry fields set by lua/cohost/postgres.lua through setup(). */

#define CACHE_DEFAULT 256          /* prepared statements per connection */
#define PARAMS_INLINE 16           /* parameters kept on the C stack */
#define NUM_TEXT      32           /* room for one number's text */
#define COPY_BATCH    (64 * 1024)  /* rows handed to Lua at once by copy_get */

/* OIDs of the built-in types read here (pg_type.dat). */
/* Array types and their elements. */
struct conn {
  struct ch_pg p;
  int err_ref;                 /* the last error table, LUA_NOREF if none */
  uint8_t copy_ended;          /* COPY OUT's end came while copy_get had
                               ** rows to hand: the next call collects */
};

/* -- Helpers --------------------------------------------------------------- */

static struct conn *check_conn(lua_State *L)
{
  return luaL_checkudata(L, 1, CONN_MT);
}

/* The busy flag while a call runs, and on an abnormal exit (a Lua error
** or "cancelled" raised through this frame, a memory error while rows
** are built) the connection is marked dead: libpq may be half-way
** through a result, and only a new connection is sure to be sane. */
struct guard {
  struct ch_pg *p;
  int done;
};

static void unguard(struct guard *g)
{
  g->p->busy = 0;
  if (!g->done) g->p->dead = 1;
}

#define GUARD(pp) \
  struct guard guard_ __attribute__((cleanup(unguard))) = { (pp), 0 }; (pp)->busy = 1
#define GUARD_DONE() (guard_.done = 1)

static void clear_res(PGresult **r)
{
  if (*r) PQclear(*r);
  *r = NULL;
}

#define RESULT(name) PGresult *name __attribute__((cleanup(clear_res))) = NULL

static void free_ptr(void *p)
{
  free(*(void **)p);
}

/* Sets field k of the table on top to the string s (nothing if s is NULL
** or empty). */
static void set_str(lua_State *L, const char *k, const char *s)
{
  if (!s || !*s) return;
  lua_pushstring(L, s);
  lua_setfield(L, -2, k);
}

/* Pushes s without its trailing newlines (libpq ends its messages so). */
static void push_trimmed(lua_State *L, const char *s)
{
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
  lua_pushlstring(L, s, n);
}

/* Remembers the error table on top as the connection's last. */
static void keep_error(lua_State *L, struct conn *u)
{
  lua_pushvalue(L, -1);
  if (u->err_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, u->err_ref);
  u->err_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Pushes the error table of a failed result: the server's fields, and
** connection = true when the connection is gone with it. */
static void push_result_error(lua_State *L, struct conn *u, const PGresult *res)
{
  lua_createtable(L, 0, 10);
  const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
  if (msg) lua_pushstring(L, msg);
  else push_trimmed(L, PQresultErrorMessage(res));
  lua_setfield(L, -2, "message");
  const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
  set_str(L, "severity", sev ? sev : PQresultErrorField(res, PG_DIAG_SEVERITY));
  set_str(L, "code", PQresultErrorField(res, PG_DIAG_SQLSTATE));
  set_str(L, "detail", PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL));
  set_str(L, "hint", PQresultErrorField(res, PG_DIAG_MESSAGE_HINT));
  set_str(L, "constraint", PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME));
  set_str(L, "table", PQresultErrorField(res, PG_DIAG_TABLE_NAME));
  set_str(L, "column", PQresultErrorField(res, PG_DIAG_COLUMN_NAME));
  set_str(L, "schema", PQresultErrorField(res, PG_DIAG_SCHEMA_NAME));
  const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  if (!code && (!u->p.conn || PQstatus(u->p.conn) == CONNECTION_BAD)) {
    u->p.dead = 1;
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "connection");
  }
  if (u->p.timed_out && code && strcmp(code, "57014") == 0) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "timeout");
  }
  luaL_getmetatable(L, ERROR_MT);
  lua_setmetatable(L, -2);
  keep_error(L, u);
}

/* Pushes a connection error: libpq's message (or msg), connection = true. */
static void push_conn_error(lua_State *L, struct conn *u, const char *msg)
{
  lua_createtable(L, 0, 3);
  if (msg) lua_pushstring(L, msg);
  else if (u->p.conn && *PQerrorMessage(u->p.conn)) push_trimmed(L, PQerrorMessage(u->p.conn));
  else lua_pushliteral(L, "connection lost");
  lua_setfield(L, -2, "message");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "connection");
  luaL_getmetatable(L, ERROR_MT);
  lua_setmetatable(L, -2);
  u->p.dead = 1;
  keep_error(L, u);
}

/* Returns nil, err for a failed wait r (net/pg.c's codes), raising
** "cancelled" when the task was cancelled (the connection is dropped
** already). */
static int fail_wait(lua_State *L, struct conn *u, int r)
{
  if (r == -ECANCELED) ch_task_check_cancel(L);
  lua_pushnil(L);
  if (r == -EPROTO) {
    push_conn_error(L, u, "COPY needs copy_in or copy_out");
  } else if (r == -ETIMEDOUT) {
    push_conn_error(L, u, u->p.timed_out ? "statement timeout: the server did not answer the cancel request"
                                         : "timeout");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "timeout");
  } else {
    push_conn_error(L, u, NULL);
  }
  return 2;
}

/* nil, err for a misuse that is not worth raising over (a closed
** connection). */
static int fail_msg(lua_State *L, struct conn *u, const char *msg, int connection)
{
  lua_pushnil(L);
  if (connection) {
    push_conn_error(L, u, msg);
    return 2;
  }
  lua_createtable(L, 0, 1);
  lua_pushstring(L, msg);
  lua_setfield(L, -2, "message");
  luaL_getmetatable(L, ERROR_MT);
  lua_setmetatable(L, -2);
  return 2;
}

/* Raises unless u may start a command now. */
static int ready(lua_State *L, struct conn *u)
{
  if (u->p.busy) return luaL_error(L, "postgres: connection used by two threads at once");
  return u->p.conn && !u->p.dead;
}

/* -- Parameters ------------------------------------------------------------ */

struct params {
  int n;
  const char **values;
  int *lengths, *formats;
  Oid *types;
  char *sig;                   /* a type letter per parameter */
  char *num;                   /* NUM_TEXT bytes per parameter */
  int typed;                   /* some letter is not 'u': the cache key
                               ** needs the signature */
  void *heap;                  /* the arrays, past PARAMS_INLINE */
  const char *v_[PARAMS_INLINE];
  int l_[PARAMS_INLINE], f_[PARAMS_INLINE];
  Oid t_[PARAMS_INLINE];
  char s_[PARAMS_INLINE];
  char num_[PARAMS_INLINE * NUM_TEXT];
};

static void params_free(struct params *pp)
{
  free(pp->heap);
  pp->heap = NULL;
}

/* Digits of v into buf (at least 21 bytes); returns the length. */
static int fmt_int(char *buf, int64_t v)
{
  char tmp[24];
  int n = 0, neg = v < 0;
  uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  int len = 0;
  if (neg) buf[len++] = '-';
  while (n) buf[len++] = tmp[--n];
  buf[len] = 0;
  return len;
}

/* Whether the value at idx has the metatable registered under key. */
static int has_mt(lua_State *L, int idx, const char *key)
{
  if (!lua_getmetatable(L, idx)) return 0;
  lua_getfield(L, LUA_REGISTRYINDEX, key);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* Reads parameter values at stack indices first .. first+n-1 into pp.
** Raises for a value that cannot be bound. The strings stay on the Lua
** stack (or in the wrappers there) while libpq copies them. */
static void params_read(lua_State *L, int first, int n, struct params *pp)
{
  memset(pp, 0, offsetof(struct params, v_));
  pp->n = n;
  if (n > PARAMS_INLINE) {
    size_t each = sizeof(char *) + 2 * sizeof(int) + sizeof(Oid) + 1 + NUM_TEXT;
    char *h = malloc((size_t)n * each);
    if (!h) luaL_error(L, "not enough memory");
    pp->heap = h;
    pp->values = (const char **)(void *)h;
    pp->lengths = (int *)(void *)(h + (size_t)n * sizeof(char *));
    pp->formats = pp->lengths + n;
    pp->types = (Oid *)(void *)(pp->formats + n);
    pp->sig = (char *)(pp->types + n);
    pp->num = pp->sig + n;
  } else {
    pp->values = pp->v_;
    pp->lengths = pp->l_;
    pp->formats = pp->f_;
    pp->types = pp->t_;
    pp->sig = pp->s_;
    pp->num = pp->num_;
  }
  for (int i = 0; i < n; i++) {
    int idx = first + i;
    char *num = pp->num + (size_t)i * NUM_TEXT;
    const char *v = NULL;
    int len = 0, fmt = 0;
    Oid type = 0;
    char letter = 'u';
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
      break;
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) != NULL) goto bad;   /* only null binds: NULL */
      break;
    case LUA_TBOOLEAN:
      v = lua_toboolean(L, idx) ? "t" : "f";
      type = OID_BOOL;
      letter = 'b';
      break;
    case LUA_TNUMBER: {
      lua_Number d = lua_tonumber(L, idx);
      if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
        len = fmt_int(num, (int64_t)d);
        type = OID_INT8;
        letter = 'i';
      } else {
        if (d != d) len = snprintf(num, NUM_TEXT, "NaN");
        else if (isinf(d)) len = snprintf(num, NUM_TEXT, d > 0 ? "Infinity" : "-Infinity");
        else len = snprintf(num, NUM_TEXT, "%.17g", d);
        type = OID_FLOAT8;
        letter = 'f';
      }
      v = num;
      break;
    }
    case LUA_TSTRING: {
      size_t sl;
      v = lua_tolstring(L, idx, &sl);
      if (memchr(v, 0, sl))
        luaL_error(L, "postgres: parameter $%d holds a NUL byte (text cannot): use pg.bytea", i + 1);
      break;
    }
    case LUA_TTABLE:
      if (has_mt(L, idx, REG_BYTEA_MT)) {
        lua_rawgeti(L, idx, 1);
        size_t sl;
        v = lua_tolstring(L, -1, &sl);
        lua_pop(L, 1);   /* the wrapper anchors the string */
        if (!v) goto bad;
        len = (int)sl;
        fmt = 1;
        type = OID_BYTEA;
        letter = 'y';
      } else if (has_mt(L, idx, REG_JSON_MT)) {
        lua_rawgeti(L, idx, 1);
        v = lua_tostring(L, -1);
        lua_pop(L, 1);
        if (!v) goto bad;
      } else {
        goto bad;
      }
      break;
    default:
      if (lua_type(L, idx) == 10) {   /* LuaJIT's cdata: an int64 is bound as int8 */
        lua_getfield(L, LUA_REGISTRYINDEX, REG_INT64TXT);
        lua_pushvalue(L, idx);
        lua_call(L, 1, 1);
        size_t sl;
        const char *s = lua_tolstring(L, -1, &sl);
        if (!s || sl >= NUM_TEXT) goto bad;
        memcpy(num, s, sl + 1);
        lua_pop(L, 1);
        v = num;
        type = OID_INT8;
        letter = 'i';
        break;
      }
      goto bad;
    }
    pp->values[i] = v;
    pp->lengths[i] = len;
    pp->formats[i] = fmt;
    pp->types[i] = type;
    pp->sig[i] = letter;
    if (letter != 'u') pp->typed = 1;
    continue;
  bad:
    luaL_error(L, "postgres: cannot bind parameter $%d (a %s): use pg.json or pg.bytea for tables",
               i + 1, luaL_typename(L, idx));
  }
}

/* The cache key of sql with pp's types: the text alone when every
** parameter's type is left to the server, else text, NUL, signature (in
** buf when it fits in size bytes, else in *owned, to free). */
static const char *cache_key(const char *sql, size_t len, const struct params *pp, size_t *keylen,
                             char *buf, size_t size, char **owned)
{
  *owned = NULL;
  if (!pp->typed) {
    *keylen = len;
    return sql;
  }
  size_t need = len + 1 + (size_t)pp->n;
  char *k = need <= size ? buf : (*owned = malloc(need));
  if (!k) return NULL;
  memcpy(k, sql, len);
  k[len] = 0;
  memcpy(k + len + 1, pp->sig, (size_t)pp->n);
  *keylen = need;
  return k;
}

/* A statement's server-side name, "ch<id>", into buf (16 bytes). */
static void stmt_name(char *buf, unsigned id)
{
  buf[0] = 'c';
  buf[1] = 'h';
  fmt_int(buf + 2, id);
}
/* -- Commands ------------------------------------------------------------------ */

/* Yields. Sends nothing; collects the results of the command just sent
** (flushing first) and keeps the last, or the first error's. Returns 0
** with *out (NULL if none came), or a wait's failure. */
static int collect(struct ch_pg *p, uint64_t *deadline, PGresult **out)
{
  int r = ch_pg_flush(p, *deadline);
  if (r < 0) return r;
  for (;;) {
    PGresult *res;
    r = ch_pg_result(p, deadline, &res);
    if (r < 0) return r;
    if (!res) return 0;
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
      /* A COPY through query(): only copy_in and copy_out speak it. */
      PQclear(res);
      ch_pg_drop(p);
      return -EPROTO;
    }
    if (*out && PQresultStatus(*out) == PGRES_FATAL_ERROR) {
      PQclear(res);   /* keep the first error */
    } else {
      if (*out) PQclear(*out);
      *out = res;
    }
  }
}

/* Yields. Runs sql (no parameters, maybe several statements) with the
** simple protocol; *out as collect's. */
static int simple(struct ch_pg *p, const char *sql, uint64_t *deadline, PGresult **out)
{
  if (!PQsendQuery(p->conn, sql)) return CH_PG_LOST;
  return collect(p, deadline, out);
}

/* Yields. Makes room in the cache for one more statement: the least
** recently used goes, DEALLOCATE'd on the server. Returns 0 or a wait's
** failure (a failed DEALLOCATE only forgets it). */
static int evict(lua_State *L, struct ch_pg *p, uint64_t *deadline)
{
  while (p->count >= p->cap) {
    struct ch_pg_stmt *st = ch_pg_stmt_victim(p);
    char sql[40];
    snprintf(sql, sizeof sql, "DEALLOCATE ch%u", st->id);
    if (st->ref != -1) luaL_unref(L, LUA_REGISTRYINDEX, st->ref);
    ch_pg_stmt_del(p, st);
    RESULT(res);
    int r = simple(p, sql, deadline, &res);
    if (r < 0) return r;
  }
  return 0;
}

static void forget(lua_State *L, struct ch_pg *p, struct ch_pg_stmt *st)
{
  if (st->ref != -1) luaL_unref(L, LUA_REGISTRYINDEX, st->ref);
  ch_pg_stmt_del(p, st);
}

/* A result error the cache must learn from: the statement is gone from
** the server (26000: DISCARD ALL, DEALLOCATE by hand) or its result's
** columns changed (0A000 "cached plan must not change result type"). */
static int stale(const PGresult *res)
{
  const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  return code && (strcmp(code, "26000") == 0 ||
                  (strcmp(code, "0A000") == 0 &&
                   strstr(PQresultErrorMessage(res), "cached plan") != NULL));
}

/* Yields. conn:query(sql, ...) -> rows, affected | nil, err. */
static int conn_query(lua_State *L)
{
  struct conn *u = check_conn(L);
  size_t len;
  const char *sql = luaL_checklstring(L, 2, &len);
  int n = lua_gettop(L) - 2;
  if (n > 65535) return luaL_error(L, "postgres: more than 65535 parameters");
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct params pp __attribute__((cleanup(params_free)));
  params_read(L, 3, n, &pp);
  size_t keylen;
  char keybuf[512];
  char *owned __attribute__((cleanup(free_ptr))) = NULL;
  const char *key = cache_key(sql, len, &pp, &keylen, keybuf, sizeof keybuf, &owned);
  if (!key) return luaL_error(L, "not enough memory");
  struct ch_pg *p = &u->p;
  GUARD(p);
  p->timed_out = 0;
  uint64_t deadline = ch_pg_deadline(p);
  int r, retried = 0;
  char name[16];
  RESULT(res);
again:;
  struct ch_pg_stmt *st = ch_pg_stmt_find(p, key, keylen);
  if (!st) {
    if ((r = evict(L, p, &deadline)) < 0) return fail_wait(L, u, r);
    if (!(st = ch_pg_stmt_add(p, key, keylen))) return luaL_error(L, "not enough memory");
    stmt_name(name, st->id);
    if (!PQsendPrepare(p->conn, name, sql, n, pp.types)) {
      forget(L, p, st);
      GUARD_DONE();
      return fail_wait(L, u, CH_PG_LOST);
    }
    r = collect(p, &deadline, &res);
    if (r < 0) {
      forget(L, p, st);
      return fail_wait(L, u, r);
    }
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
      forget(L, p, st);
      GUARD_DONE();
      lua_pushnil(L);
      if (res) push_result_error(L, u, res);
      else push_conn_error(L, u, NULL);
      return 2;
    }
    clear_res(&res);
  }
  stmt_name(name, st->id);
  if (!PQsendQueryPrepared(p->conn, name, n, pp.values, pp.lengths, pp.formats, 0)) {
    GUARD_DONE();
    return fail_wait(L, u, CH_PG_LOST);
  }
  r = collect(p, &deadline, &res);
  if (r < 0) return fail_wait(L, u, r);
  GUARD_DONE();
  ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK || status == PGRES_EMPTY_QUERY)
    return ch_pg_push_rows(L, st, res);
  if (res && stale(res)) {
    unsigned id = st->id;
    forget(L, p, st);
    /* Outside a transaction running it again changes nothing else; in
    ** one the transaction has failed already, and the name stays on the
    ** server (unused) until the session ends. */
    if (!retried && PQtransactionStatus(p->conn) == PQTRANS_IDLE) {
      char sql2[40];
      snprintf(sql2, sizeof sql2, "DEALLOCATE ch%u", id);
      clear_res(&res);
      guard_.done = 0;
      if ((r = simple(p, sql2, &deadline, &res)) < 0) return fail_wait(L, u, r);
      retried = 1;
      clear_res(&res);
      goto again;
    }
  }
  lua_pushnil(L);
  if (res) push_result_error(L, u, res);
  else push_conn_error(L, u, NULL);
  return 2;
}

/* Yields. conn:exec(sql) -> rows, affected | nil, err: the simple
** protocol, no parameters, several statements allowed (the last one's
** rows; the first error stops it), nothing prepared. */
static int conn_exec(lua_State *L)
{
  struct conn *u = check_conn(L);
  const char *sql = luaL_checkstring(L, 2);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  GUARD(p);
  p->timed_out = 0;
  uint64_t deadline = ch_pg_deadline(p);
  RESULT(res);
  int r = simple(p, sql, &deadline, &res);
  if (r == -EPROTO) {
    GUARD_DONE();
    return fail_msg(L, u, "COPY needs copy_in or copy_out", 1);
  }
  if (r < 0) return fail_wait(L, u, r);
  GUARD_DONE();
  ExecStatusType status = res ? PQresultStatus(res) : PGRES_EMPTY_QUERY;
  if (!res || status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK || status == PGRES_EMPTY_QUERY) {
    if (!res) {
      lua_newtable(L);
      lua_pushinteger(L, 0);
      return 2;
    }
    return ch_pg_push_rows(L, NULL, res);
  }
  lua_pushnil(L);
  push_result_error(L, u, res);
  return 2;
}

/* -- Pipelines ------------------------------------------------------------------ */

/* Pushes { rows = ..., affected = n } or { err = err } for one query's
** result in a pipeline. */
static void push_outcome(lua_State *L, struct conn *u, struct ch_pg_stmt *st, PGresult *res,
                         int skipped)
{
  lua_createtable(L, 0, 2);
  ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (!skipped && (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK || status == PGRES_EMPTY_QUERY)) {
    ch_pg_push_rows(L, st, res);
    lua_setfield(L, -3, "affected");
    lua_setfield(L, -2, "rows");
    return;
  }
  if (skipped || status == PGRES_PIPELINE_ABORTED) {
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "skipped: an earlier query of the pipeline failed");
    lua_setfield(L, -2, "message");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "skipped");
    luaL_getmetatable(L, ERROR_MT);
    lua_setmetatable(L, -2);
  } else {
    push_result_error(L, u, res);
  }
  lua_setfield(L, -2, "err");
}

/* One query of a pipeline while its results come back. */
struct pq {
  struct ch_pg_stmt *st;       /* its statement, NULL: unnamed */
  int prepared;                /* a Parse was sent for it in this pipeline */
};

/* Yields. conn:pipeline(list) -> outcomes | nil, err. list[i] is { sql,
** nargs, arg1, ... }; outcome i is { rows, affected } or { err } (a
** query after a failed one: err.skipped). All are sent at once with
** libpq's pipeline mode and one Sync: one round trip. */
static int conn_pipeline(lua_State *L)
{
  struct conn *u = check_conn(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  int nq = (int)lua_objlen(L, 2);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  struct pq *qs __attribute__((cleanup(free_ptr))) = calloc((size_t)nq + 1, sizeof *qs);
  if (!qs) return luaL_error(L, "not enough memory");
  GUARD(p);
  p->timed_out = 0;
  uint64_t deadline = ch_pg_deadline(p);
  if (!PQenterPipelineMode(p->conn)) {
    GUARD_DONE();
    return fail_msg(L, u, "cannot start a pipeline: the connection is not idle", 0);
  }
  for (int i = 0; i < nq; i++) {
    lua_rawgeti(L, 2, i + 1);
    int q = lua_gettop(L);
    lua_rawgeti(L, q, 1);
    size_t len;
    const char *sql = lua_tolstring(L, -1, &len);
    if (!sql) return luaL_error(L, "postgres: pipeline query %d has no SQL text", i + 1);
    lua_rawgeti(L, q, 2);
    int n = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    luaL_checkstack(L, n + 8, "too many parameters");
    for (int k = 0; k < n; k++) lua_rawgeti(L, q, k + 3);
    struct params pp __attribute__((cleanup(params_free)));
    params_read(L, q + 2, n, &pp);
    size_t keylen;
    char keybuf[512];
    char *owned __attribute__((cleanup(free_ptr))) = NULL;
    const char *key = cache_key(sql, len, &pp, &keylen, keybuf, sizeof keybuf, &owned);
    if (!key) return luaL_error(L, "not enough memory");
    struct ch_pg_stmt *st = ch_pg_stmt_find(p, key, keylen);
    char name[16];
    int ok;
    if (!st && p->count < p->cap && (st = ch_pg_stmt_add(p, key, keylen)) != NULL) {
      stmt_name(name, st->id);
      qs[i].prepared = 1;
      if (!PQsendPrepare(p->conn, name, sql, n, pp.types)) return fail_wait(L, u, CH_PG_LOST);
    }
    qs[i].st = st;
    if (st) {
      stmt_name(name, st->id);
      ok = PQsendQueryPrepared(p->conn, name, n, pp.values, pp.lengths, pp.formats, 0);
    } else {   /* the cache is full of this pipeline's own: unnamed */
      ok = PQsendQueryParams(p->conn, sql, n, pp.types, pp.values, pp.lengths, pp.formats, 0);
    }
    if (!ok) return fail_wait(L, u, CH_PG_LOST);
    lua_settop(L, q - 1);
  }
  if (!PQpipelineSync(p->conn)) return fail_wait(L, u, CH_PG_LOST);
  int r = ch_pg_flush(p, deadline);
  if (r < 0) return fail_wait(L, u, r);
  lua_createtable(L, nq, 0);
  int out = lua_gettop(L);
  for (int i = 0; i < nq; i++) {
    RESULT(prep);
    RESULT(res);
    PGresult *end;
    if (qs[i].prepared) {
      if ((r = ch_pg_result(p, &deadline, &prep)) < 0) return fail_wait(L, u, r);
      if ((r = ch_pg_result(p, &deadline, &end)) < 0) return fail_wait(L, u, r);
      if (end) PQclear(end);
    }
    if ((r = ch_pg_result(p, &deadline, &res)) < 0) return fail_wait(L, u, r);
    if (res && PQresultStatus(res) != PGRES_PIPELINE_ABORTED &&
        PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
      if ((r = ch_pg_result(p, &deadline, &end)) < 0) return fail_wait(L, u, r);
      if (end) PQclear(end);
    } else if (res && PQresultStatus(res) == PGRES_PIPELINE_ABORTED) {
      if ((r = ch_pg_result(p, &deadline, &end)) < 0) return fail_wait(L, u, r);
      if (end) PQclear(end);
    }
    int prep_failed = prep && PQresultStatus(prep) != PGRES_COMMAND_OK;
    if (prep_failed && qs[i].st) {
      /* Not on the server: another query of this pipeline with the same
      ** text shares the entry, and failed the same way. */
      for (int k = i + 1; k < nq; k++)
        if (qs[k].st == qs[i].st) qs[k].st = NULL;
      forget(L, p, qs[i].st);
      qs[i].st = NULL;
    }
    if (prep_failed && PQresultStatus(prep) == PGRES_FATAL_ERROR) push_outcome(L, u, NULL, prep, 0);
    else push_outcome(L, u, qs[i].st, res, prep_failed);
    lua_rawseti(L, out, i + 1);
  }
  /* The Sync's own result, then NULL. */
  RESULT(sync);
  if ((r = ch_pg_result(p, &deadline, &sync)) < 0) return fail_wait(L, u, r);
  if (!sync || PQresultStatus(sync) != PGRES_PIPELINE_SYNC) return fail_wait(L, u, CH_PG_LOST);
  if (!PQexitPipelineMode(p->conn)) return fail_wait(L, u, CH_PG_LOST);
  GUARD_DONE();
  return 1;
}

/* -- COPY --------------------------------------------------------------------- */

/* Yields. conn:copy_start(sql) -> "in" | "out" | nil, err. */
static int conn_copy_start(lua_State *L)
{
  struct conn *u = check_conn(L);
  const char *sql = luaL_checkstring(L, 2);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  GUARD(p);
  p->timed_out = 0;
  uint64_t deadline = ch_pg_deadline(p);
  if (!PQsendQuery(p->conn, sql)) return fail_wait(L, u, CH_PG_LOST);
  int r = ch_pg_flush(p, deadline);
  if (r < 0) return fail_wait(L, u, r);
  RESULT(res);
  if ((r = ch_pg_result(p, &deadline, &res)) < 0) return fail_wait(L, u, r);
  ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT) {
    GUARD_DONE();
    lua_pushstring(L, st == PGRES_COPY_IN ? "in" : "out");
    return 1;
  }
  if (st == PGRES_COPY_BOTH) {
    ch_pg_drop(p);
    return fail_msg(L, u, "COPY BOTH (replication) is not supported", 1);
  }
  /* Not a COPY, or it failed: read the rest, say so. */
  if ((r = ch_pg_drain(p, &deadline)) < 0) return fail_wait(L, u, r);
  GUARD_DONE();
  if (!res || st != PGRES_FATAL_ERROR) return fail_msg(L, u, "not a COPY statement", 0);
  lua_pushnil(L);
  push_result_error(L, u, res);
  return 2;
}

/* Yields. conn:copy_put(data) -> true | nil, err: data to the server
** (any split of the COPY text), sent before it returns. */
static int conn_copy_put(lua_State *L)
{
  struct conn *u = check_conn(L);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  GUARD(p);
  for (;;) {
    /* 0: libpq could not take it (non-blocking, its buffer full): send
    ** what it holds, then try again. */
    int q = PQputCopyData(p->conn, data, (int)len);
    if (q < 0 && PQstatus(p->conn) == CONNECTION_OK) {
      /* The server ended the COPY with an error (bad data): say it. */
      uint64_t deadline = ch_pg_deadline(p);
      RESULT(res);
      int r = collect(p, &deadline, &res);
      if (r < 0) return fail_wait(L, u, r);
      GUARD_DONE();
      lua_pushnil(L);
      if (res && PQresultStatus(res) == PGRES_FATAL_ERROR) push_result_error(L, u, res);
      else push_conn_error(L, u, NULL);
      return 2;
    }
    if (q < 0) return fail_wait(L, u, CH_PG_LOST);
    int r = ch_pg_flush(p, 0);
    if (r < 0) return fail_wait(L, u, r);
    if (q == 1) break;
  }
  GUARD_DONE();
  lua_pushboolean(L, 1);
  return 1;
}

/* Yields. conn:copy_end([errmsg]) -> affected | nil, err: ends COPY IN
** (with errmsg: aborts it, and the server says so in err). */
static int conn_copy_end(lua_State *L)
{
  struct conn *u = check_conn(L);
  const char *abort_msg = luaL_optstring(L, 2, NULL);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  GUARD(p);
  uint64_t deadline = ch_pg_deadline(p);
  int r;
  while ((r = PQputCopyEnd(p->conn, abort_msg)) == 0)
    if ((r = ch_pg_flush(p, 0)) < 0) return fail_wait(L, u, r);
  if (r < 0) return fail_wait(L, u, CH_PG_LOST);
  RESULT(res);
  if ((r = collect(p, &deadline, &res)) < 0) return fail_wait(L, u, r);
  GUARD_DONE();
  if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
    const char *aff = PQcmdTuples(res);
    lua_pushnumber(L, aff && *aff ? strtod(aff, NULL) : 0);
    return 1;
  }
  lua_pushnil(L);
  if (res) push_result_error(L, u, res);
  else push_conn_error(L, u, NULL);
  return 2;
}

/* Yields. conn:copy_get() -> text (rows of COPY OUT, up to COPY_BATCH
** bytes at once) | false, affected (the end) | nil, err. */
static int conn_copy_get(lua_State *L)
{
  struct conn *u = check_conn(L);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  GUARD(p);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t have = 0;
  for (;;) {
    char *row = NULL;
    /* libpq says the end (-1) once; asked again it says -2. */
    int n = u->copy_ended ? -1 : PQgetCopyData(p->conn, &row, 1);
    if (n > 0) {
      luaL_addlstring(&b, row, (size_t)n);
      PQfreemem(row);
      have += (size_t)n;
      if (have >= COPY_BATCH) break;
      continue;
    }
    if (n == 0) {
      if (have) break;   /* hand over what came before waiting for more */
      int r = ch_pg_input(p, 0);
      if (r < 0) return fail_wait(L, u, r);
      continue;
    }
    if (n == -2) return fail_wait(L, u, CH_PG_LOST);
    if (have) {   /* the end: next call */
      u->copy_ended = 1;
      break;
    }
    u->copy_ended = 0;
    uint64_t deadline = ch_pg_deadline(p);
    RESULT(res);
    int r = collect(p, &deadline, &res);
    if (r < 0) return fail_wait(L, u, r);
    GUARD_DONE();
    if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
      lua_pushboolean(L, 0);
      const char *aff = PQcmdTuples(res);
      lua_pushnumber(L, aff && *aff ? strtod(aff, NULL) : 0);
      return 2;
    }
    lua_pushnil(L);
    if (res) push_result_error(L, u, res);
    else push_conn_error(L, u, NULL);
    return 2;
  }
  GUARD_DONE();
  luaL_pushresult(&b);
  return 1;
}

/* -- Notifications --------------------------------------------------------------- */

/* Yields. conn:wait_notify([timeout_s]) -> channel, payload, pid | nil,
** "timeout" (also when woken) | nil, err (connection lost). */
static int conn_wait_notify(lua_State *L)
{
  struct conn *u = check_conn(L);
  lua_Number s = luaL_optnumber(L, 2, -1);
  if (!ready(L, u)) return fail_msg(L, u, "connection closed", 1);
  struct ch_pg *p = &u->p;
  PGnotify *n = NULL;
  int r;
  {
    GUARD(p);
    r = ch_pg_wait_notify(p, s < 0 ? -1 : (int64_t)ceil(s * 1000), &n);
    GUARD_DONE();
  }
  if (r == 1) {
    lua_pushstring(L, n->relname);
    lua_pushstring(L, n->extra);
    lua_pushinteger(L, n->be_pid);
    PQfreemem(n);
    return 3;
  }
  if (r == 0) {
    lua_pushnil(L);
    lua_pushliteral(L, "timeout");
    return 2;
  }
  return fail_wait(L, u, r);
}

/* conn:wake(): makes a wait_notify on conn return now. */
static int conn_wake(lua_State *L)
{
  ch_pg_wake(&check_conn(L)->p);
  return 0;
}

/* -- The rest of a connection --------------------------------------------------------- */

static void conn_free(lua_State *L, struct conn *u)
{
  for (struct ch_pg_stmt *st = ch_pg_stmt_next(&u->p, NULL); st; st = ch_pg_stmt_next(&u->p, st))
    if (st->ref != -1) {
      luaL_unref(L, LUA_REGISTRYINDEX, st->ref);
      st->ref = -1;
    }
  if (u->err_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, u->err_ref);
  u->err_ref = LUA_NOREF;
  ch_pg_close(&u->p);
}

/* conn:close(): closes now (never yields). A connection in use by a
** parked thread cannot be closed under it: nil, err. */
static int conn_close(lua_State *L)
{
  struct conn *u = check_conn(L);
  if (u->p.busy) return fail_msg(L, u, "connection busy", 0);
  conn_free(L, u);
  lua_pushboolean(L, 1);
  return 1;
}

static int conn_gc(lua_State *L)
{
  struct conn *u = check_conn(L);
  if (!u->p.busy) conn_free(L, u);
  return 0;
}

/* conn:settimeout(seconds): the statement timeout (0 or nil: none). */
static int conn_settimeout(lua_State *L)
{
  struct conn *u = check_conn(L);
  lua_Number s = luaL_optnumber(L, 2, 0);
  u->p.timeout_ms = s > 0 ? (int64_t)ceil(s * 1000) : 0;
  return 0;
}

/* conn:status() -> "idle" | "transaction" | "failed" (an aborted
** transaction) | "active" | "closed". */
static int conn_status(lua_State *L)
{
  struct conn *u = check_conn(L);
  const char *s = "closed";
  if (u->p.conn && !u->p.dead && PQstatus(u->p.conn) == CONNECTION_OK) {
    switch (PQtransactionStatus(u->p.conn)) {
    case PQTRANS_IDLE: s = "idle"; break;
    case PQTRANS_INTRANS: s = "transaction"; break;
    case PQTRANS_INERROR: s = "failed"; break;
    case PQTRANS_ACTIVE: s = "active"; break;
    default: break;
    }
  }
  lua_pushstring(L, s);
  return 1;
}

/* conn:usable() -> whether a new command may start (net/pg.c's
** ch_pg_usable: no system call unless input came while it was idle). */
static int conn_usable(lua_State *L)
{
  struct conn *u = check_conn(L);
  lua_pushboolean(L, !u->p.busy && ch_pg_usable(&u->p));
  return 1;
}

/* conn:last_error() -> the last error table, or nil. */
static int conn_last_error(lua_State *L)
{
  struct conn *u = check_conn(L);
  if (u->err_ref == LUA_NOREF) lua_pushnil(L);
  else lua_rawgeti(L, LUA_REGISTRYINDEX, u->err_ref);
  return 1;
}

/* conn:backend_pid() -> the server process's pid, or nil. */
static int conn_backend_pid(lua_State *L)
{
  struct conn *u = check_conn(L);
  if (!u->p.conn) return 0;
  lua_pushinteger(L, PQbackendPID(u->p.conn));
  return 1;
}

/* conn:statements() -> prepared statements cached now. */
static int conn_statements(lua_State *L)
{
  lua_pushinteger(L, check_conn(L)->p.count);
  return 1;
}

static int conn_tostring(lua_State *L)
{
  struct conn *u = check_conn(L);
  lua_pushfstring(L, "cohost.postgres.conn: %p", (void *)u);
  return 1;
}

/* -- Module ---------------------------------------------------------------------- */

/* Yields. connect(params, timeout_s, cache) -> conn | nil, err. params is
** a table of libpq keywords (host, hostaddr, port, dbname, user,
** password, options, sslmode, ...); a "dbname" holding "=" or a URI is
** expanded as a connection string. */
static int l_connect(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Number timeout = luaL_optnumber(L, 2, 0);
  lua_Integer cache = luaL_optinteger(L, 3, CACHE_DEFAULT);
  if (cache < 1) cache = 1;
  int n = 0;
  for (lua_pushnil(L); lua_next(L, 1); lua_pop(L, 1)) n++;
  const char **kw __attribute__((cleanup(free_ptr))) = calloc((size_t)n + 1, sizeof *kw);
  const char **val __attribute__((cleanup(free_ptr))) = calloc((size_t)n + 1, sizeof *val);
  if (!kw || !val) return luaL_error(L, "not enough memory");
  int i = 0;
  for (lua_pushnil(L); lua_next(L, 1); lua_pop(L, 1)) {
    /* Both strings: a converted number would not be anchored. */
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "postgres: connection parameters must be strings");
    kw[i] = lua_tostring(L, -2);
    val[i] = lua_tostring(L, -1);
    i++;
  }
  struct conn *u = lua_newuserdata(L, sizeof *u);
  ch_pg_init(&u->p, (unsigned)cache);
  u->err_ref = LUA_NOREF;
  u->copy_ended = 0;
  luaL_getmetatable(L, CONN_MT);
  lua_setmetatable(L, -2);
  int r;
  {
    GUARD(&u->p);
    r = ch_pg_connect(&u->p, kw, val, timeout > 0 ? (int64_t)ceil(timeout * 1000) : 0);
    GUARD_DONE();
  }
  if (r == 0) return 1;
  if (r == -ECANCELED) {
    conn_free(L, u);
    ch_task_check_cancel(L);
  }
  lua_pushnil(L);
  if (r == -ETIMEDOUT) {
    push_conn_error(L, u, "connect: timeout");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "timeout");
  } else {
    push_conn_error(L, u, r == -ENOMEM ? "not enough memory" : NULL);
  }
  conn_free(L, u);
  return 2;
}

/* conninfo_parse(s) -> { keyword = value } of a connection string or
** URI (only what it sets), or nil, err. */
static int l_conninfo_parse(lua_State *L)
{
  const char *s = luaL_checkstring(L, 1);
  char *err = NULL;
  PQconninfoOption *opts = PQconninfoParse(s, &err);
  if (!opts) {
    lua_pushnil(L);
    if (err) {
      push_trimmed(L, err);
      PQfreemem(err);
    } else {
      lua_pushliteral(L, "not enough memory");
    }
    return 2;
  }
  lua_newtable(L);
  for (PQconninfoOption *o = opts; o->keyword; o++) {
    if (!o->val) continue;
    lua_pushstring(L, o->val);
    lua_setfield(L, -2, o->keyword);
  }
  PQconninfoFree(opts);
  return 1;
}

/* error_tostring(err) -> "ERROR: message (SQLSTATE 23505)". */
static int error_tostring(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_getfield(L, 1, "severity");
  if (lua_isstring(L, -1)) {
    lua_pushvalue(L, -1);
    luaL_addvalue(&b);
    luaL_addstring(&b, ": ");
  } else {
    lua_getfield(L, 1, "connection");
    if (lua_toboolean(L, -1)) luaL_addstring(&b, "connection: ");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "message");
  if (lua_isstring(L, -1)) luaL_addvalue(&b);
  else lua_pop(L, 1);
  lua_getfield(L, 1, "code");
  if (lua_isstring(L, -1)) {
    luaL_addstring(&b, " (SQLSTATE ");
    luaL_addvalue(&b);
    luaL_addchar(&b, ')');
  } else {
    lua_pop(L, 1);
  }
  luaL_pushresult(&b);
  return 1;
}

/* setup(t): the Lua face's helpers: t.array_mt, t.int64, t.int64text,
** t.bytea_mt, t.json_mt (registry fields REG_*). */
static int l_setup(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const fields[][2] = {
    { "array_mt", REG_ARRAY_MT }, { "int64", REG_INT64 }, { "int64text", REG_INT64TXT },
    { "bytea_mt", REG_BYTEA_MT }, { "json_mt", REG_JSON_MT },
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    lua_getfield(L, 1, fields[i][0]);
    if (lua_isnil(L, -1)) return luaL_error(L, "postgres.setup: %s missing", fields[i][0]);
    lua_setfield(L, LUA_REGISTRYINDEX, fields[i][1]);
  }
  return 0;
}

static const luaL_Reg conn_methods[] = {
  { "query", conn_query },
  { "exec", conn_exec },
  { "pipeline_run", conn_pipeline },
  { "copy_start", conn_copy_start },
  { "copy_put", conn_copy_put },
  { "copy_end", conn_copy_end },
  { "copy_get", conn_copy_get },
  { "wait_notify", conn_wait_notify },
  { "wake", conn_wake },
  { "close", conn_close },
  { "settimeout", conn_settimeout },
  { "status", conn_status },
  { "usable", conn_usable },
  { "last_error", conn_last_error },
  { "backend_pid", conn_backend_pid },
  { "statements", conn_statements },
  { NULL, NULL }
};

static const luaL_Reg pg_funcs[] = {
  { "connect", l_connect },
  { "conninfo_parse", l_conninfo_parse },
  { "setup", l_setup },
  { NULL, NULL }
};

int luaopen_cohost_core_postgres(lua_State *L)
{
  luaL_newmetatable(L, ERROR_MT);
  lua_pushcfunction(L, error_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newmetatable(L, CONN_MT);
  lua_newtable(L);
  luaL_register(L, NULL, conn_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, conn_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, conn_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_newtable(L);
  luaL_register(L, NULL, pg_funcs);
  lua_getfield(L, -2, "__index");
  lua_setfield(L, -2, "conn_methods");   /* the Lua face adds its methods */
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "error_mt");
  return 1;
}
