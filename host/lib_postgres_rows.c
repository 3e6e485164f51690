/*
** cohost.core.postgres's result reader: a result's values, which libpq
** gives as text, made into Lua values by their column's type (numbers,
** booleans, int64 cdata past 2^53, bytea unescaped, arrays parsed and
** marked, json and jsonb decoded by its own decoder), into rows that
** share one metatable per statement. lib_postgres.c runs the commands.
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
#include "lib_postgres.h"

#ifndef __EXCEPTIONS
#error "lib_postgres_rows.c must be built with -fexceptions"
#endif

#define JSON_DEPTH    1000         /* as cjson's decode_max_depth */
#define MAX_SAFE_INT  INT64_C(9007199254740992)   /* 2^53: doubles hold every integer to it */

static const struct { Oid array, elem; } array_oids[] = {
  { 1000, OID_BOOL }, { 1001, OID_BYTEA }, { 1002, OID_CHAR }, { 1003, OID_NAME },
  { 1005, OID_INT2 }, { 1007, OID_INT4 }, { 1009, OID_TEXT }, { 1014, OID_BPCHAR },
  { 1015, OID_VARCHAR }, { 1016, OID_INT8 }, { 1021, OID_FLOAT4 }, { 1022, OID_FLOAT8 },
  { 1028, OID_OID }, { 1115, OID_TIMESTAMP }, { 1182, OID_DATE }, { 1185, OID_TIMESTAMPTZ },
  { 1231, OID_NUMERIC }, { 199, OID_JSON }, { 2951, OID_UUID }, { 3807, OID_JSONB },
};

/* -- Values ------------------------------------------------------------------- */

/* Per-call state of the value readers: a scratch buffer for unescaped
** strings and whether the array mark is on the stack. */
struct rd {
  lua_State *L;
  char *buf;                   /* scratch, malloc'd; freed by the caller */
  size_t cap;
  int array_mt;                /* stack index of cohost.http's array mark, 0 */
};

static void rd_free(struct rd *r)
{
  free(r->buf);
  r->buf = NULL;
}

static char *rd_room(struct rd *r, size_t n)
{
  if (n <= r->cap) return r->buf;
  size_t cap = r->cap ? r->cap : 256;
  while (cap < n) cap *= 2;
  char *b = realloc(r->buf, cap);
  if (!b) luaL_error(r->L, "not enough memory");
  r->buf = b;
  r->cap = cap;
  return b;
}

/* Parses a decimal integer of n bytes; 0 if it is not one. */
static int parse_int(const char *s, size_t n, int64_t *out)
{
  size_t i = 0;
  int neg = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  if (i == n) return 0;
  uint64_t v = 0;
  for (; i < n; i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (d > 9) return 0;
    if (v > (UINT64_C(9223372036854775808) - d) / 10) return 0;
    v = v * 10 + d;
  }
  if (!neg && v > INT64_MAX) return 0;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 1;
}

/* Pushes an int8: a number up to +-2^53 (a double holds it exactly), else an
** int64 cdata (through the Lua face's FFI helper). */
static void push_int8(lua_State *L, int64_t v)
{
  if (v <= MAX_SAFE_INT && v >= -MAX_SAFE_INT) {   /* integers: a double rounds */
    lua_pushnumber(L, (lua_Number)v);
    return;
  }
  lua_getfield(L, LUA_REGISTRYINDEX, REG_INT64);
  lua_pushlstring(L, (const char *)&v, sizeof v);
  lua_call(L, 1, 1);
}

static int hexval(int c)
{
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* bytea's text output: hex ("\x0a0b", the default bytea_output) or the
** old escape format ("\012" octal, "\\"). */
static void push_bytea(struct rd *r, const char *s, size_t n)
{
  lua_State *L = r->L;
  if (n >= 2 && s[0] == '\\' && s[1] == 'x') {
    size_t out = (n - 2) / 2;
    char *b = rd_room(r, out + 1);
    for (size_t i = 0; i < out; i++) {
      int hi = hexval((unsigned char)s[2 + 2 * i]), lo = hexval((unsigned char)s[3 + 2 * i]);
      b[i] = (char)(hi << 4 | lo);
    }
    lua_pushlstring(L, b, out);
    return;
  }
  char *b = rd_room(r, n + 1);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\\') {
      b[o++] = '\\';
      i++;
    } else if (s[i] == '\\' && i + 3 < n) {
      b[o++] = (char)((s[i + 1] - '0') << 6 | (s[i + 2] - '0') << 3 | (s[i + 3] - '0'));
      i += 3;
    } else {
      b[o++] = s[i];
    }
  }
  lua_pushlstring(L, b, o);
}

/* -- JSON ------------------------------------------------------------------- */

/* A JSON decoder that marks arrays (cjson 2.1.0 cannot: [] and {} both
** decode to an empty table there), for json and jsonb columns. The
** server checked the text, so errors here mean a bug: they raise. */
struct jd {
  struct rd *r;
  const char *p, *end;
  int depth;
};

static void jd_ws(struct jd *d)
{
  while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r')) d->p++;
}

static void jd_fail(struct jd *d, const char *what)
{
  luaL_error(d->r->L, "postgres: bad JSON from the server (%s)", what);
}

static unsigned jd_hex4(struct jd *d)
{
  if (d->end - d->p < 4) jd_fail(d, "short \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval((unsigned char)d->p[i]);
    if (h < 0) jd_fail(d, "bad \\u escape");
    v = v << 4 | (unsigned)h;
  }
  d->p += 4;
  return v;
}

static size_t utf8(char *o, unsigned c)
{
  if (c < 0x80) { o[0] = (char)c; return 1; }
  if (c < 0x800) { o[0] = (char)(0xc0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
  if (c < 0x10000) {
    o[0] = (char)(0xe0 | c >> 12); o[1] = (char)(0x80 | (c >> 6 & 0x3f));
    o[2] = (char)(0x80 | (c & 0x3f)); return 3;
  }
  o[0] = (char)(0xf0 | c >> 18); o[1] = (char)(0x80 | (c >> 12 & 0x3f));
  o[2] = (char)(0x80 | (c >> 6 & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
  return 4;
}

static void jd_string(struct jd *d)
{
  const char *s = ++d->p;   /* past the quote */
  while (d->p < d->end && *d->p != '"' && *d->p != '\\') d->p++;
  if (d->p < d->end && *d->p == '"') {   /* no escapes: the common case */
    lua_pushlstring(d->r->L, s, (size_t)(d->p - s));
    d->p++;
    return;
  }
  /* Escapes never make a string longer. */
  const char *q = d->p;
  while (q < d->end && *q != '"') q += *q == '\\' ? 2 : 1;
  char *b = rd_room(d->r, (size_t)(q - s) + 4);
  size_t o = (size_t)(d->p - s);
  memcpy(b, s, o);
  while (d->p < d->end && *d->p != '"') {
    char c = *d->p++;
    if (c != '\\') { b[o++] = c; continue; }
    if (d->p >= d->end) jd_fail(d, "escape at the end");
    c = *d->p++;
    switch (c) {
    case 'b': b[o++] = '\b'; break;
    case 'f': b[o++] = '\f'; break;
    case 'n': b[o++] = '\n'; break;
    case 'r': b[o++] = '\r'; break;
    case 't': b[o++] = '\t'; break;
    case 'u': {
      unsigned cp = jd_hex4(d);
      if (cp >= 0xd800 && cp < 0xdc00 && d->end - d->p >= 6 && d->p[0] == '\\' && d->p[1] == 'u') {
        d->p += 2;
        unsigned lo = jd_hex4(d);
        if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        else o += utf8(b + o, cp), cp = lo;
      }
      o += utf8(b + o, cp);
      break;
    }
    default: b[o++] = c;   /* \" \\ \/ */
    }
  }
  if (d->p >= d->end) jd_fail(d, "unterminated string");
  d->p++;
  lua_pushlstring(d->r->L, b, o);
}

static void jd_value(struct jd *d);

static void jd_nest(struct jd *d)
{
  if (++d->depth > JSON_DEPTH || ch_ljvm_stack_low()) jd_fail(d, "nested too deep");
  luaL_checkstack(d->r->L, 4, "JSON nested too deep");
}

static void jd_array(struct jd *d)
{
  lua_State *L = d->r->L;
  jd_nest(d);
  d->p++;
  lua_newtable(L);
  lua_pushvalue(L, d->r->array_mt);
  lua_setmetatable(L, -2);
  jd_ws(d);
  if (d->p < d->end && *d->p == ']') {
    d->p++;
    d->depth--;
    return;
  }
  for (int i = 1;; i++) {
    jd_value(d);
    lua_rawseti(L, -2, i);
    jd_ws(d);
    if (d->p < d->end && *d->p == ',') { d->p++; continue; }
    if (d->p < d->end && *d->p == ']') { d->p++; break; }
    jd_fail(d, "expected , or ]");
  }
  d->depth--;
}

static void jd_object(struct jd *d)
{
  lua_State *L = d->r->L;
  jd_nest(d);
  d->p++;
  lua_newtable(L);
  jd_ws(d);
  if (d->p < d->end && *d->p == '}') {
    d->p++;
    d->depth--;
    return;
  }
  for (;;) {
    jd_ws(d);
    if (d->p >= d->end || *d->p != '"') jd_fail(d, "expected a key");
    jd_string(d);
    jd_ws(d);
    if (d->p >= d->end || *d->p != ':') jd_fail(d, "expected :");
    d->p++;
    jd_value(d);
    lua_rawset(L, -3);
    jd_ws(d);
    if (d->p < d->end && *d->p == ',') { d->p++; continue; }
    if (d->p < d->end && *d->p == '}') { d->p++; break; }
    jd_fail(d, "expected , or }");
  }
  d->depth--;
}

static void jd_value(struct jd *d)
{
  lua_State *L = d->r->L;
  jd_ws(d);
  if (d->p >= d->end) jd_fail(d, "unexpected end");
  switch (*d->p) {
  case '{': jd_object(d); return;
  case '[': jd_array(d); return;
  case '"': jd_string(d); return;
  case 't':
    if (d->end - d->p >= 4 && memcmp(d->p, "true", 4) == 0) { d->p += 4; lua_pushboolean(L, 1); return; }
    break;
  case 'f':
    if (d->end - d->p >= 5 && memcmp(d->p, "false", 5) == 0) { d->p += 5; lua_pushboolean(L, 0); return; }
    break;
  case 'n':
    if (d->end - d->p >= 4 && memcmp(d->p, "null", 4) == 0) { d->p += 4; lua_pushlightuserdata(L, NULL); return; }
    break;
  default: {
    size_t n = 0;
    while (d->p + n < d->end && strchr("+-0123456789.eE", d->p[n]) && d->p[n]) n++;
    if (n == 0) break;
    char *num = rd_room(d->r, n + 1);   /* jsonb's numerics may be long */
    memcpy(num, d->p, n);
    num[n] = 0;
    char *e;
    double v = strtod(num, &e);
    if (e != num + n) break;
    d->p += n;
    lua_pushnumber(L, v);
    return;
  }
  }
  jd_fail(d, "unexpected character");
}

static void push_json(struct rd *r, const char *s, size_t n)
{
  struct jd d = { r, s, s + n, 0 };
  jd_value(&d);
}

/* -- Arrays ------------------------------------------------------------------ */

static Oid elem_of(Oid array)
{
  for (size_t i = 0; i < sizeof array_oids / sizeof array_oids[0]; i++)
    if (array_oids[i].array == array) return array_oids[i].elem;
  return 0;
}

static void push_value(struct rd *r, Oid oid, const char *s, size_t n);

/* An array's text ("{1,2,NULL}", "{\"a b\",c}", "{{1,2},{3,4}}", maybe
** after "[0:1]=" bounds) as nested Lua arrays, elements read as elem. */
static const char *parse_array(struct rd *r, Oid elem, const char *p, const char *end)
{
  lua_State *L = r->L;
  luaL_checkstack(L, 4, "array nested too deep");
  if (p >= end || *p != '{') luaL_error(L, "postgres: bad array text from the server");
  p++;
  lua_newtable(L);
  lua_pushvalue(L, r->array_mt);
  lua_setmetatable(L, -2);
  if (p < end && *p == '}') return p + 1;
  for (int i = 1;; i++) {
    if (p < end && *p == '{') {
      p = parse_array(r, elem, p, end);
    } else if (p < end && *p == '"') {
      const char *q = ++p;
      while (q < end && *q != '"') q += *q == '\\' ? 2 : 1;
      if (q >= end) luaL_error(L, "postgres: bad array text from the server");
      char *b = rd_room(r, (size_t)(q - p) + 1);
      size_t o = 0;
      for (; p < q; p++) {
        if (*p == '\\') p++;
        b[o++] = *p;
      }
      p = q + 1;
      /* push_value may use the scratch buffer itself: copy out first. */
      lua_pushlstring(L, b, o);
      size_t sl;
      const char *s = lua_tolstring(L, -1, &sl);
      push_value(r, elem, s, sl);
      lua_remove(L, -2);
    } else {
      const char *q = p;
      while (q < end && *q != ',' && *q != '}') q++;
      if (q - p == 4 && strncasecmp(p, "NULL", 4) == 0) lua_pushlightuserdata(L, NULL);
      else push_value(r, elem, p, (size_t)(q - p));
      p = q;
    }
    lua_rawseti(L, -2, i);
    if (p < end && *p == ',') { p++; continue; }
    if (p < end && *p == '}') return p + 1;
    luaL_error(L, "postgres: bad array text from the server");
  }
}

static void push_array(struct rd *r, Oid elem, const char *s, size_t n)
{
  const char *end = s + n;
  if (n && *s == '[') {   /* bounds other than 1: "[0:2]={...}" */
    const char *eq = memchr(s, '=', n);
    if (eq) s = eq + 1;
  }
  parse_array(r, elem, s, end);
}

/* -- Rows --------------------------------------------------------------------- */

/* Pushes the value s (n bytes of text output) of a column of type oid. */
static void push_value(struct rd *r, Oid oid, const char *s, size_t n)
{
  lua_State *L = r->L;
  switch (oid) {
  case OID_BOOL:
    lua_pushboolean(L, n > 0 && s[0] == 't');
    return;
  case OID_INT2: case OID_INT4: case OID_INT8: case OID_OID: {
    int64_t v;
    if (parse_int(s, n, &v)) {
      if (oid == OID_INT8) push_int8(L, v);
      else lua_pushnumber(L, (lua_Number)v);
      return;
    }
    break;
  }
  case OID_FLOAT4: case OID_FLOAT8: {
    char num[64];
    if (n < sizeof num) {
      memcpy(num, s, n);
      num[n] = 0;
      lua_pushnumber(L, strtod(num, NULL));   /* NaN, Infinity, -Infinity too */
      return;
    }
    break;
  }
  case OID_BYTEA:
    push_bytea(r, s, n);
    return;
  case OID_JSON: case OID_JSONB:
    push_json(r, s, n);
    return;
  case OID_TIMESTAMP: case OID_TIMESTAMPTZ:
    /* "2024-01-02 03:04:05+00" (DateStyle ISO, set at connect) in ISO
    ** 8601: a T between date and time. */
    if (n > 10 && s[10] == ' ' && s[4] == '-') {
      char *b = rd_room(r, n);
      memcpy(b, s, n);
      b[10] = 'T';
      lua_pushlstring(L, b, n);
      return;
    }
    break;
  default: {
    Oid elem = n && (s[0] == '{' || s[0] == '[') ? elem_of(oid) : 0;
    if (elem) {
      push_array(r, elem, s, n);
      return;
    }
  }
  }
  lua_pushlstring(L, s, n);   /* text, varchar, name, uuid, numeric, date, ... */
}

/* The metatable of a statement's rows: { __index = { columns = {...} },
** __jsonarray = true } (cohost.http writes such a table as a JSON array,
** [] when empty), made once per statement and kept in st->ref. Pushes
** it, and the column names at names .. names+ncols-1 are pushed by the
** caller from it. */
static void push_rows_mt(lua_State *L, struct rd *r, struct ch_pg_stmt *st, const PGresult *res)
{
  int ncols = PQnfields(res);
  if (st && st->ref != LUA_NOREF && st->ref != -1) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, st->ref);
    lua_getfield(L, -1, "__index");
    lua_getfield(L, -1, "columns");
    int same = (int)lua_objlen(L, -1) == ncols;
    lua_pop(L, 2);
    if (same) return;
    lua_pop(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, st->ref);
    st->ref = -1;
  }
  lua_createtable(L, 0, 2);
  lua_createtable(L, 0, 1);
  lua_createtable(L, ncols, 0);
  lua_pushvalue(L, r->array_mt);
  lua_setmetatable(L, -2);
  for (int j = 0; j < ncols; j++) {
    lua_pushstring(L, PQfname(res, j));
    lua_rawseti(L, -2, j + 1);
  }
  lua_setfield(L, -2, "columns");
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "__jsonarray");
  if (st) {
    lua_pushvalue(L, -1);
    st->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
}

int ch_pg_push_rows(lua_State *L, struct ch_pg_stmt *st, const PGresult *res)
{
  struct rd r __attribute__((cleanup(rd_free))) = { L, NULL, 0, 0 };
  int nrows = PQntuples(res), ncols = PQnfields(res);
  luaL_checkstack(L, ncols + 24, "too many columns");
  lua_getfield(L, LUA_REGISTRYINDEX, REG_ARRAY_MT);
  r.array_mt = lua_gettop(L);
  lua_createtable(L, nrows, 0);
  int rows = lua_gettop(L);
  push_rows_mt(L, &r, st, res);
  lua_getfield(L, -1, "__index");
  lua_getfield(L, -1, "columns");
  int names = lua_gettop(L) + 1;
  for (int j = 0; j < ncols; j++) lua_rawgeti(L, names - 1, j + 1);
  lua_pushvalue(L, names - 3);
  lua_setmetatable(L, rows);
  Oid oids[64];
  for (int j = 0; j < ncols && j < 64; j++) oids[j] = PQftype(res, j);
  for (int i = 0; i < nrows; i++) {
    lua_createtable(L, 0, ncols);
    for (int j = 0; j < ncols; j++) {
      lua_pushvalue(L, names + j);
      if (PQgetisnull(res, i, j)) lua_pushlightuserdata(L, NULL);
      else push_value(&r, j < 64 ? oids[j] : PQftype(res, j), PQgetvalue(res, i, j),
                      (size_t)PQgetlength(res, i, j));
      lua_rawset(L, -3);
    }
    lua_rawseti(L, rows, i + 1);
  }
  lua_settop(L, rows);
  lua_remove(L, rows - 1);   /* the array mark */
  const char *aff = PQcmdTuples((PGresult *)res);
  lua_pushnumber(L, aff && *aff ? strtod(aff, NULL) : 0);
  return 2;
}
