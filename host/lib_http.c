/*
** cohost.core.http: the HTTP/1.1 server's Lua face. Connections, framing,
** bodies and responses are C (http/conn.c, response.c, sendfile.c,
** url.c); Lua sees one (req, res) pair per request, on a task bound to
** the connection's coroutine only while that request is handled: this
** file makes the pair, runs the handler (the server's run callback), and
** turns the C results into Lua values and errors.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/acct.h"
#include "vm/refs.h"
#include "vm/task.h"
#include "http/conn.h"
#include "http/h2.h"
#include "http/response.h"
#include "http/sendfile.h"
#include "http/url.h"
#include "http/metrics.h"
#include "lib.h"
#include "lib_listen.h"
#include "lib_socket.h"

#ifndef __EXCEPTIONS
#error "lib_http.c must be built with -fexceptions"
#endif

#define SERVER_MT  "cohost.http.server"
#define RBOX_MT    "cohost.http.rbox"

/* -- Servers -------------------------------------------------------------- */

struct server_ud { struct ch_http_server *s; };

/* The server's last reference went (ch_http_server_unref): its handler
** ref is dropped the next time a request runs. Never calls Lua. */
static void server_free(struct ch_http_server *s)
{
  ch_refs_defer(s->handler);
  if (s->on_error) ch_refs_defer(s->on_error);
  free(s);
}

/* -- Request state -------------------------------------------------------- */

/* Lua's req and res reach the request through a box (a userdata both
** tables hold at key 0) that is emptied when the handler returns, so a req
** or res kept past its handler fails cleanly instead of touching a reused
** connection, and the server never needs the Lua thread again once the
** handler is done. */
struct rbox {
  struct ch_http_req *rq;         /* NULL once the handler has returned */
};

static __thread const void *rbox_mt;
/* Registry refs of the box, req and res metatables: lua_rawgeti by number
** instead of luaL_getmetatable's interning of a name, per request. */
static __thread int rbox_mt_ref, res_mt_ref;
/* Registry ref of dispatch(handler, res, method, target, version, path,
** query_string [, current]): makes req and tail-calls handler(req, res),
** so the handler's frames and error levels are as if C called it. A
** table constructor copies a template of the keys: ~3x cheaper than
** lua_createtable and a lua_setfield per field, and JIT-compiled. A nil
** path is the target; a nil query string is "". With current (the
** http.current() table), files thread -> {req, res} there. */
static __thread int dispatch_ref;
#define DISPATCH_SRC \
  "local req_mt = ...\n" \
  "local setmetatable, running = setmetatable, coroutine.running\n" \
  "return function(handler, res, method, target, version, path, query_string, current)\n" \
  "  local req = setmetatable({ [0] = res[0], method = method, target = target,\n" \
  "    version = version, path = path or target, query_string = query_string or '' }, req_mt)\n" \
  "  if current then current[running()] = { req, res } end\n" \
  "  return handler(req, res)\n" \
  "end\n"

/* The request of req or res at idx; raises for a finished request. */
static struct ch_http_req *check_rq(lua_State *L, int idx)
{
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_rawgeti(L, idx, 0);
  struct rbox *box = lua_touserdata(L, -1);
  int ok = box && lua_getmetatable(L, -1) && lua_topointer(L, -1) == rbox_mt;
  lua_pop(L, ok ? 2 : 1);
  if (!ok) luaL_argerror(L, idx, "not a request or response");
  if (!box->rq) luaL_error(L, "request is finished (req and res work only while its handler runs)");
  return box->rq;
}

/* The value of rq's header lname (lower case) with its length, or NULL. */
static const char *header_of(const struct ch_http_req *rq, const char *lname, size_t *len)
{
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  for (int i = 0; i < h->nheaders; i++)
    if (ch_http_name_is(base, h->name[i], lname)) {
      *len = h->value[i].len;
      return base + h->value[i].off;
    }
  return NULL;
}

/* Raises the quiet error for a client gone away, "cancelled" for a
** cancelled task. */
static void raise_io(lua_State *L, int err)
{
  if (err == -ECANCELED) ch_task_check_cancel(L);
  ch_task_raise_quiet(L, err == -ETIMEDOUT ? "timeout" : "closed");
}

/* -- Request body ---------------------------------------------------------- */

/* Yields. One more piece of the body into rq->pend: 1, 0 at its end, or
** -errno (a cancellation raises). */
static int body_more(lua_State *L, struct ch_http_req *rq)
{
  int r = ch_http_body_more(rq, 0);
  if (r == -ECANCELED) ch_task_check_cancel(L);
  return r;
}

/* req:read(n) -> up to n body bytes, nil at the end, or nil, err. */
static int req_read(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  lua_Integer want = luaL_optinteger(L, 2, 65536);
  luaL_argcheck(L, want > 0, 2, "positive size expected");
  /* A loop: on HTTP/2 a read may find bytes that came with an earlier
  ** wake already taken, so "more" can bring none (never an empty piece). */
  while (rq->plen == 0) {
    int r = body_more(L, rq);
    if (r == 0) { lua_pushnil(L); return 1; }
    if (r < 0) {
      lua_pushnil(L);
      lua_pushstring(L, ch_http_body_error(r));
      return 2;
    }
  }
  size_t n = rq->plen < (size_t)want ? rq->plen : (size_t)want;
  lua_pushlstring(L, rq->pend, n);
  memmove(rq->pend, rq->pend + n, rq->plen - n);
  rq->plen -= n;
  return 1;
}

/* req:body() -> the whole body, or nil, err. */
static int req_body(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  int r;
  while ((r = body_more(L, rq)) > 0) {}
  if (r < 0) {
    lua_pushnil(L);
    lua_pushstring(L, ch_http_body_error(r));
    return 2;
  }
  lua_pushlstring(L, rq->pend ? rq->pend : "", rq->plen);
  rq->plen = 0;
  return 1;
}

/* -- Request fields --------------------------------------------------------- */

/* Pushes req.path and req.query_string from the target, each as nil when
** the dispatcher can make it without a string of ours: the path when it is
** the target itself (most requests), the query string when there is none
** (""). Returns 0, or -1 for a target that is no path (the caller answers
** 400) with nothing pushed. Out of line: its buffer would otherwise sit in
** run_handler's frame under the handler (COPY mode saves it). */
static __attribute__((noinline)) int push_path(lua_State *L, const char *t, size_t n)
{
  char small[512], *d = n <= sizeof small ? small : malloc(n);
  if (!d) return -1;
  const char *q;
  size_t ql;
  int same;
  int m = ch_http_url_path(t, n, d, &q, &ql, &same);
  if (m >= 0) {
    if (same) lua_pushnil(L);
    else lua_pushlstring(L, d, (size_t)m);
    if (q) lua_pushlstring(L, q, ql);
    else lua_pushnil(L);
  }
  if (d != small) free(d);
  return m < 0 ? -1 : 0;
}

/* Pushes a lower-case copy of s[0..n). */
static void push_lower(lua_State *L, const char *s, size_t n)
{
  char small[128], *d = n <= sizeof small ? small : malloc(n);
  if (!d) { lua_pushlstring(L, s, n); return; }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    d[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
  }
  lua_pushlstring(L, d, n);
  if (d != small) free(d);
}

/* Adds value (on top) under key (below it) to table t: a second value
** turns the entry into an array. Pops both. */
static void add_multi(lua_State *L, int t)
{
  lua_pushvalue(L, -2);
  lua_rawget(L, t);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_rawset(L, t);
    return;
  }
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_createtable(L, 2, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
  }
  /* stack: key value array */
  lua_insert(L, -2);
  lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
  lua_rawset(L, t);
}

/* Metatable of req.headers: lookups fold case and '_' to '-'. */
static int headers_index(lua_State *L)
{
  size_t n;
  const char *k = lua_tolstring(L, 2, &n);
  if (!k || n > 256) return 0;
  char d[256];
  int changed = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)k[i];
    if (ch >= 'A' && ch <= 'Z') { ch = (unsigned char)(ch + 32); changed = 1; }
    else if (ch == '_') { ch = '-'; changed = 1; }
    d[i] = (char)ch;
  }
  if (!changed) return 0;
  lua_pushlstring(L, d, n);
  lua_rawget(L, 1);
  return 1;
}

static void push_headers(lua_State *L, struct ch_http_req *rq)
{
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  lua_createtable(L, 0, h->nheaders);
  int t = lua_gettop(L);
  for (int i = 0; i < h->nheaders; i++) {
    push_lower(L, base + h->name[i].off, h->name[i].len);
    lua_pushlstring(L, base + h->value[i].off, h->value[i].len);
    add_multi(L, t);
  }
  lua_pushvalue(L, lua_upvalueindex(2));   /* the headers metatable */
  lua_setmetatable(L, t);
}

static void query_pair(void *ud, const char *k, size_t kl, const char *v, size_t vl)
{
  lua_State *L = ud;
  lua_pushlstring(L, k, kl);
  lua_pushlstring(L, v, vl);
  add_multi(L, lua_gettop(L) - 2);
}

/* Decodes "a=1&b=2&a=3" into a table on top. */
static void push_query(lua_State *L, const char *q, size_t n)
{
  lua_newtable(L);
  char small[256], *d = n <= sizeof small ? small : malloc(n);
  if (!d) return;
  ch_http_url_query(q, n, d, query_pair, L);
  if (d != small) free(d);
}

/* req's __index: methods first, then the fields built on first use
** (headers, query, peer), cached in req. Upvalues: methods, headers mt. */
static int req_index(lua_State *L)
{
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (!lua_isnil(L, -1)) return 1;
  size_t n;
  const char *k = lua_tolstring(L, 2, &n);
  if (!k) return 1;
  if (n == 7 && memcmp(k, "headers", 7) == 0) {
    push_headers(L, check_rq(L, 1));
  } else if (n == 5 && memcmp(k, "query", 5) == 0) {
    lua_getfield(L, 1, "query_string");
    size_t ql;
    const char *q = lua_tolstring(L, -1, &ql);
    push_query(L, q ? q : "", q ? ql : 0);
  } else if (n == 4 && memcmp(k, "peer", 4) == 0) {
    char b[80];
    int m = ch_http_peer(check_rq(L, 1)->c, b, sizeof b);
    lua_pushlstring(L, b, (size_t)m);
  } else {
    return 1;   /* nil */
  }
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 1;
}

/* req:header(name) -> its first value, case-insensitive, or nil. */
static int req_header(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  size_t n;
  const char *name = luaL_checklstring(L, 2, &n);
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  for (int i = 0; i < h->nheaders; i++)
    if (h->name[i].len == n && strncasecmp(base + h->name[i].off, name, n) == 0) {
      lua_pushlstring(L, base + h->value[i].off, h->value[i].len);
      return 1;
    }
  lua_pushnil(L);
  return 1;
}

/* req:conninfo() -> connection, requests before this one on it, TLS,
** request bytes (head and body so far), response bytes (head and body so
** far), seconds since the head arrived, the peer's address as 4 or 16
** bytes (nil for a Unix socket), response body bytes. For ngx.var's connection, request_length,
** bytes_sent, request_time, https and binary_remote_addr. The connection
** is a light userdata: equal for the requests of one connection, and
** possibly reused by a later one (whose first request has 0 before it). */
static int req_conninfo(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  struct ch_http_conn *c = rq->c;
  lua_pushlightuserdata(L, c);
  lua_pushinteger(L, c->nreq);
  lua_pushboolean(L, c->s.ssl != NULL);
  lua_pushnumber(L, (lua_Number)rq->h.head_len + (lua_Number)rq->body_total);
  lua_pushnumber(L, (lua_Number)rq->head_sent + (lua_Number)rq->sent);
  lua_pushnumber(L, (lua_Number)(ch_now_ns() - rq->start_ns) / 1e9);
  if (c->family == AF_INET) lua_pushlstring(L, (const char *)c->addr, 4);
  else if (c->family == AF_INET6) lua_pushlstring(L, (const char *)c->addr, 16);
  else lua_pushnil(L);
  lua_pushnumber(L, (lua_Number)rq->sent);
  return 8;
}

/* -- Response headers ------------------------------------------------------ */

static void header_add(lua_State *L, struct ch_http_req *rq, const char *name, size_t nl,
                       const char *v, size_t vl)
{
  int r = ch_http_header_add(rq, name, nl, v, vl);
  if (r == -EINVAL) luaL_error(L, "bad header value for %s (control characters)", name);
  if (r < 0) luaL_error(L, "no memory");
}

/* res:header(name, value): set, replace (case-insensitive), an array for
** repeats, nil to remove. */
static int res_header(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  size_t nl;
  const char *name = luaL_checklstring(L, 2, &nl);
  if (!ch_http_valid_name(name, nl)) return luaL_argerror(L, 2, "bad header name");
  if (rq->started) return luaL_error(L, "headers already sent");
  ch_http_header_del(rq, name, nl);
  int t = lua_type(L, 3);
  if (t == LUA_TTABLE) {
    int n = (int)lua_objlen(L, 3);
    for (int i = 1; i <= n; i++) {
      lua_rawgeti(L, 3, i);
      size_t vl;
      const char *v = luaL_checklstring(L, -1, &vl);
      header_add(L, rq, name, nl, v, vl);
      lua_pop(L, 1);
    }
  } else if (t != LUA_TNIL && t != LUA_TNONE) {
    size_t vl;
    const char *v = luaL_checklstring(L, 3, &vl);
    header_add(L, rq, name, nl, v, vl);
  }
  lua_settop(L, 1);
  return 1;
}

/* res:get_header(name) -> value (the first) or nil. */
static int res_get_header(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  size_t nl, vl;
  const char *name = luaL_checklstring(L, 2, &nl);
  const char *v = ch_http_header_get(rq, name, nl, &vl);
  if (v) lua_pushlstring(L, v, vl);
  else lua_pushnil(L);
  return 1;
}

/* -- Response writing ------------------------------------------------------ */

/* The status the handler set in res.status (index res). */
static int res_status(lua_State *L, int res)
{
  lua_getfield(L, res, "status");
  int st = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  if (st < 100 || st > 999) luaL_error(L, "bad res.status (a number from 100 to 999 expected)");
  return st;
}

/* Turns a response call's result into Lua: misuse raises its message, a
** client gone away the quiet error. Returns res. */
static int response_result(lua_State *L, struct ch_http_req *rq, int r)
{
  switch (r) {
  case 0: break;
  case -EALREADY: return luaL_error(L, "response already sent");
  case -ERANGE: return luaL_error(L, "Content-Length header disagrees with the body's length");
  case -EMSGSIZE:
    return luaL_error(L, "body longer than its Content-Length (%lld)", (long long)rq->clen);
  case -ENOMEM: return luaL_error(L, "no memory");
  default: raise_io(L, r);
  }
  lua_settop(L, 1);
  return 1;
}

/* res:send([body]): ends the response. */
static int res_send(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  size_t n = 0;
  const char *body = lua_isnoneornil(L, 2) ? "" : luaL_checklstring(L, 2, &n);
  if (rq->finished || rq->hijacked) return luaL_error(L, "response already sent");
  if (!rq->started) rq->status = res_status(L, 1);
  return response_result(L, rq, ch_http_response_send(rq, body, n));
}

/* res:write(chunk): streams a body piece. */
static int res_write(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  size_t n;
  const char *body = luaL_checklstring(L, 2, &n);
  if (rq->finished || rq->hijacked) return luaL_error(L, "response already sent");
  if (!rq->started) rq->status = res_status(L, 1);
  return response_result(L, rq, ch_http_response_write(rq, body, n));
}

/* res:trailer(name, value): a trailer field after the body (HTTP/2
** trailers; HTTP/1.1 sends them after a chunked body only). */
static int res_trailer(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  size_t nl, vl;
  const char *name = luaL_checklstring(L, 2, &nl);
  const char *v = luaL_checklstring(L, 3, &vl);
  if (!ch_http_valid_name(name, nl)) return luaL_argerror(L, 2, "bad trailer name");
  if (rq->finished || rq->hijacked) return luaL_error(L, "response already sent");
  if (!rq->h2 && rq->started && !rq->chunked)
    return luaL_error(L, "trailers need a chunked body (res:write without Content-Length)");
  int r = ch_http_trailer_add(rq, name, nl, v, vl);
  if (r == -EINVAL) return luaL_error(L, "bad trailer value for %s (control characters)", name);
  if (r < 0) return luaL_error(L, "no memory");
  lua_settop(L, 1);
  return 1;
}

/* res:reset([code]): ends the response unfinished, quietly (an info
** line, no handler error): HTTP/2 resets the stream with RST_STREAM code
** (default 2, INTERNAL_ERROR, as a handler error in the middle of a body),
** HTTP/1.1 closes the connection. Returns res. */
static int res_reset(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  lua_Integer code = luaL_optinteger(L, 2, NGHTTP2_INTERNAL_ERROR);
  luaL_argcheck(L, code >= 0 && code <= 0xffffffffLL, 2, "an HTTP/2 error code expected");
  if (ch_http_response_reset(rq, (uint32_t)code) < 0) return luaL_error(L, "response already sent");
  lua_settop(L, 1);
  return 1;
}

/* res:goaway(): HTTP/2: the connection's GOAWAY starts now (a shutdown
** notice, the last stream id a second later): its client opens no new
** streams on it, the streams in flight go on. HTTP/1.1 carries one
** request at a time and a drain closes it after its response: nothing to
** do. Returns res. */
static int res_goaway(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  if (rq->h2) ch_h2_goaway(rq->h2);
  lua_settop(L, 1);
  return 1;
}

/* res:sent() -> whether the response has started. */
static int res_sent(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  lua_pushboolean(L, rq->started || rq->hijacked);
  return 1;
}

/* res:sendfile(path [, content_type]) -> true, or nil, err ("not found":
** nothing sent, no header set). content_type is set unless the handler
** set one. */
static int res_sendfile(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  const char *path = luaL_checkstring(L, 2);
  size_t tl = 0;
  const char *ctype = luaL_optlstring(L, 3, NULL, &tl);
  if (rq->started || rq->hijacked) return luaL_error(L, "response already sent");
  rq->status = res_status(L, 1);
  int r = ch_http_sendfile(rq, path, ctype, tl);
  if (r == CH_HTTP_NOT_FOUND) {
    lua_pushnil(L);
    lua_pushliteral(L, "not found");
    return 2;
  }
  if (r == -EINVAL) return luaL_error(L, "bad header value for Content-Type (control characters)");
  if (r == CH_HTTP_REFUSED) {   /* res.status says what was sent: 412, 416 */
    lua_pushinteger(L, rq->status);
    lua_setfield(L, 1, "status");
    r = 0;
  }
  if (r < 0) response_result(L, rq, r);
  lua_pushboolean(L, 1);
  return 1;
}

/* res:hijack() -> a cosocket on the connection (protocol upgrades). */
static int res_hijack(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  if (rq->h2) return luaL_error(L, "res:hijack() is not available on HTTP/2 (a stream shares its connection)");
  if (rq->started || rq->hijacked) return luaL_error(L, "response already started");
  SSL *ssl;
  const char *pre;
  size_t n;
  size_t un;
  const char *up = header_of(rq, "upgrade", &un);
  int websocket = up && un == 9 && strncasecmp(up, "websocket", 9) == 0;
  int fd = ch_http_hijack(rq, &ssl, &pre, &n);
  struct ch_task *t = ch_task_current();
  if (t && websocket) t->kind = CH_TASK_WEBSOCKET;
  ch_socket_push_conn(L, fd, ssl, pre, n);
  lua_pushvalue(L, -1);
  lua_setfield(L, 1, "_hijacked");   /* closed when the handler returns */
  return 1;
}

/* http.current() support, off until a module asks (cohost.ngx does): a
** weak-keyed registry table from the handler's Lua thread to {req, res}.
** Per worker (each has its own Lua state). */
#define CURRENT_KEY "cohost.http.current"
static __thread int track_current;

/* track_current(on): starts (or stops) recording the running request. */
static int l_track_current(lua_State *L)
{
  track_current = lua_toboolean(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  if (lua_isnil(L, -1)) {
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  }
  return 0;
}

/* current([thread]) -> req, res of the handler running on thread (default:
** the caller's), or nothing. Needs track_current(true). */
static int l_current(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  if (!lua_istable(L, -1)) return 0;
  if (lua_isthread(L, 1)) lua_pushvalue(L, 1);
  else lua_pushthread(L);
  lua_rawget(L, -2);
  if (!lua_istable(L, -1)) return 0;
  lua_rawgeti(L, -1, 1);
  lua_rawgeti(L, -2, 2);
  return 2;
}

/* req:settimeout(ms): how long each wait for more of the body may last,
** instead of the listener's body_timeout (0 or nil: no limit), for
** long-lived streams such as gRPC's. Returns req. */
static int req_settimeout(lua_State *L)
{
  struct ch_http_req *rq = check_rq(L, 1);
  lua_Number ms = luaL_optnumber(L, 2, 0);
  luaL_argcheck(L, ms >= 0, 2, "a timeout in ms (>= 0) expected");
  rq->body_ms = ms == 0 ? -1 : ms < 1 ? 1 : ms > INT_MAX ? -1 : (int)ms;
  lua_settop(L, 1);
  return 1;
}

/* route_id(pattern) -> the pattern's id for the route label (see
** ch_http_metrics_route): a router asks once per route it adds, and puts
** the matched one's id at res[1] for run_handler. */
static int l_route_id(lua_State *L)
{
  lua_pushinteger(L, ch_http_metrics_route(luaL_checkstring(L, 1)));
  return 1;
}

/* What the handler's task is, for task dumps: an HTTP/2 stream whose
** Content-Type is application/grpc (and its +proto, +json) is a gRPC
** call. A look at the headers of HTTP/2 streams only. */
static int kind_of(const struct ch_http_req *rq)
{
  if (!rq->h2) return CH_TASK_HTTP;
  size_t n;
  const char *ct = header_of(rq, "content-type", &n);
  return ct && n >= 16 && strncasecmp(ct, "application/grpc", 16) == 0 ? CH_TASK_GRPC : CH_TASK_HTTP2;
}

/* -- Slow requests ---------------------------------------------------------- */

/* A spare record per worker thread: one request watched at a time is the
** common case, and the record is 2.5 KiB. */
static __thread struct ch_task_acct *acct_spare;

/* Starts measuring handler task t for a threshold of ms; NULL when memory
** is short (the request is then not watched). A park of an eighth of the
** threshold or more gets its traceback taken. */
static __attribute__((noinline)) struct ch_task_acct *slow_begin(struct ch_task *t, int ms)
{
  struct ch_task_acct *a = acct_spare;
  if (a) acct_spare = NULL;
  else if (!(a = malloc(sizeof *a))) return NULL;
  if (!ch_task_ext(t)) {
    free(a);
    return NULL;
  }
  ch_acct_begin(t, a, (uint64_t)ms * 1000000u / 8);
  return a;
}

/* After the handler: logs rq if it took ms or more, with where its time
** went, and gives a back. */
static __attribute__((noinline)) void slow_end(struct ch_http_req *rq, struct ch_task *t,
                                               struct ch_task_acct *a, int ms)
{
  ch_acct_end(t);
  uint64_t took = ch_now_ns() - rq->start_ns;
  if (took >= (uint64_t)ms * 1000000u) {
    const struct ch_http_head *h = &rq->h;
    const char *base = ch_http_req_base(rq);
    char split[512];
    ch_acct_format(a, split, sizeof split);
    const char *route = ch_http_metrics_route_name(rq->route);
    ch_log(CH_LOG_WARN, "slow request: %.*s %.*s%s%s took %.1f ms (over %d ms): handler %s%s%s",
           (int)h->method.len, base + h->method.off, h->target.len > 300 ? 300 : (int)h->target.len,
           base + h->target.off, route[0] ? " route " : "", route, took / 1e6, ms, split,
           a->trace[0] ? "; at the longest park:\n" : "", a->trace);
  }
  if (!acct_spare) acct_spare = a;
  else free(a);
}

/* Yields. The server's run callback: handler(req, res) for request rq on
** a task. Everything that needs Lua happens here, before any later wait:
** once the handler has returned, the server touches the Lua thread no
** more. Sets rq->failed, rq->status if the response has not started, and
** for debug 500s rq->err. */
static void run_handler(struct ch_http_server *srv, struct ch_http_req *rq)
{
  struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  struct ch_task *t = ch_task_new(rq->c->w, "handler");
  if (!t) {
    rq->failed = 1;
    return;
  }
  t->kind = (uint8_t)kind_of(rq);
  t->fd = rq->c->s.fd;
  t->start_ns = rq->start_ns;
  lua_State *T = t->T;
  ch_refs_flush(T);
  /* Slot 1 keeps res past the call (ch_task_run keeps what lies below the
  ** function); slot 2 is the dispatcher, which makes req from the
  ** arguments (lua_setfield per field costs ~3x its table constructor). */
  lua_pushnil(T);
  lua_rawgeti(T, LUA_REGISTRYINDEX, dispatch_ref);
  /* A body declared over max_body_size: on_error answers (conn.c). */
  lua_rawgeti(T, LUA_REGISTRYINDEX, rq->body_status == 413 && srv->on_error ? srv->on_error : srv->handler);
  /* res: the box at [0], in the array part (whose slot 1 is the router's
  ** route id), and no hash part until the handler sets a field (status
  ** reads 200 from the metatable). */
  lua_createtable(T, 1, 0);
  int res = lua_gettop(T);
  struct rbox *box = lua_newuserdata(T, sizeof *box);
  box->rq = rq;
  lua_rawgeti(T, LUA_REGISTRYINDEX, rbox_mt_ref);
  lua_setmetatable(T, -2);
  lua_rawseti(T, res, 0);
  lua_rawgeti(T, LUA_REGISTRYINDEX, res_mt_ref);
  lua_setmetatable(T, res);
  lua_pushvalue(T, res);
  lua_replace(T, 1);
  lua_pushlstring(T, base + h->method.off, h->method.len);
  lua_pushlstring(T, base + h->target.off, h->target.len);
  lua_pushnumber(T, rq->h2 ? 2 : h->version_minor ? 1.1 : 1.0);
  if (push_path(T, base + h->target.off, h->target.len) < 0) {
    box->rq = NULL;
    lua_settop(T, 0);
    ch_task_release(t);
    rq->failed = -1;   /* a target that is no path: 400 */
    return;
  }
  int nargs = 7;
  if (track_current) {   /* http.current(): the dispatcher files thread -> req, res */
    lua_getfield(T, LUA_REGISTRYINDEX, CURRENT_KEY);
    nargs++;
  }
  int slow_ms = srv->slow_ms;
  struct ch_task_acct *acct = slow_ms > 0 ? slow_begin(t, slow_ms) : NULL;
  ch_task_run(t, nargs);
  if (track_current) {
    lua_getfield(T, LUA_REGISTRYINDEX, CURRENT_KEY);
    lua_pushthread(T);
    lua_pushnil(T);
    lua_rawset(T, -3);
    lua_pop(T, 1);
  }
  /* The router's route id (res[1], next to the box in res's array part:
  ** the router's store there costs no allocation and no C call, and this
  ** read is the label's whole cost to a request without a router). Left
  ** on the stack: the settop below drops it. */
  lua_rawgeti(T, 1, 1);
  rq->route = (int)lua_tointeger(T, -1);
  if (acct) slow_end(rq, t, acct, slow_ms);
  rq->failed = t->status != CH_TASK_DONE;
  if (rq->failed && srv->debug && t->nresults > 0 && lua_isstring(T, 2))
    snprintf(rq->err, sizeof rq->err, "%s", lua_tostring(T, 2));   /* the error, above res */
  if (rq->hijacked) {
    lua_getfield(T, 1, "_hijacked");
    if (!lua_isnil(T, -1)) ch_socket_close_at(T, -1);
    lua_pop(T, 1);
  }
  if (!rq->started) {
    lua_getfield(T, 1, "status");
    rq->status = (int)lua_tointeger(T, -1);
    if (rq->status < 100 || rq->status > 999) rq->status = 500;
  }
  box->rq = NULL;   /* req and res kept past here fail cleanly */
  lua_settop(T, 0);
  ch_task_release(t);
}

/* -- Lua API -------------------------------------------------------------- */

static int opt_int(lua_State *L, int idx, const char *k, int def)
{
  lua_getfield(L, idx, k);
  int v = lua_isnil(L, -1) ? def : (int)luaL_checkinteger(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Seconds (a number) to ms. */
static int opt_secs(lua_State *L, int idx, const char *k, int def_s)
{
  lua_getfield(L, idx, k);
  double v = lua_isnil(L, -1) ? def_s : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  if (v < 0.001) v = 0.001;
  return (int)(v * 1000);
}

/* server(handler, opts [, on_error]) -> a server object for listen(). */
static int l_server(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (lua_isnoneornil(L, 2)) {
    lua_newtable(L);
    lua_replace(L, 2);
  }
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TFUNCTION);
  lua_settop(L, 3);
  struct server_ud *ud = lua_newuserdata(L, sizeof *ud);
  ud->s = NULL;
  luaL_getmetatable(L, SERVER_MT);
  lua_setmetatable(L, -2);
  struct ch_http_server *s = calloc(1, sizeof *s);
  if (!s) return luaL_error(L, "no memory");
  s->log_fd = -1;
  s->lim.max_line = (uint32_t)opt_int(L, 2, "max_request_line", 8192);
  s->lim.max_header = (uint32_t)opt_int(L, 2, "max_header_size", 8192);
  lua_getfield(L, 2, "max_body_size");
  s->max_body = lua_isnil(L, -1) ? 1024 * 1024 : (uint64_t)luaL_checknumber(L, -1);
  lua_pop(L, 1);
  s->header_ms = opt_secs(L, 2, "header_timeout", 60);
  s->body_ms = opt_secs(L, 2, "body_timeout", 60);
  s->send_ms = opt_secs(L, 2, "send_timeout", 60);
  s->keepalive_ms = opt_secs(L, 2, "keepalive_timeout", 75);
  s->keepalive_requests = (uint32_t)opt_int(L, 2, "keepalive_requests", 1000);
  lua_getfield(L, 2, "http2");
  s->http2 = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  s->h2_max_streams = (uint32_t)opt_int(L, 2, "http2_max_concurrent_streams", 128);
  lua_getfield(L, 2, "slow_request_ms");
  lua_Number slow = lua_isnil(L, -1) ? -1 : lua_isnumber(L, -1) ? lua_tonumber(L, -1) : -2;
  lua_pop(L, 1);
  if (!(slow == -1 || (slow >= 0 && slow <= INT_MAX))) {
    free(s);
    return luaL_error(L, "bad slow_request_ms: milliseconds (0: off) expected");
  }
  s->slow_ms = slow < 0 ? ch_opts.slow_request_ms : (int)slow;   /* the flag's, unless set */
  lua_getfield(L, 2, "debug");
  s->debug = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 2, "server");
  if (lua_isnil(L, -1)) snprintf(s->server_hdr, sizeof s->server_hdr, "Server: cohost\r\n");
  else if (lua_isstring(L, -1) && ch_http_valid_value(lua_tostring(L, -1), lua_objlen(L, -1)))
    snprintf(s->server_hdr, sizeof s->server_hdr, "Server: %.40s\r\n", lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 2, "access_log");
  if (lua_toboolean(L, -1)) {
    if (lua_isstring(L, -1)) {
      s->log_fd = ch_log_file_open(lua_tostring(L, -1));   /* SIGUSR1 reopens it */
      if (s->log_fd < 0) {
        int e = -s->log_fd;
        free(s);
        return luaL_error(L, "access_log %s: %s", lua_tostring(L, -1), strerror(e));
      }
      s->log_owned = 1;
    } else {
      s->log_fd = 2;
    }
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "access_log_format");
  const char *fmt = lua_tostring(L, -1);
  if (lua_isnil(L, -1)) {
    s->log_json = (uint8_t)ch_log_is_json();   /* --log-format's */
  } else if (fmt && (!strcmp(fmt, "json") || !strcmp(fmt, "text"))) {
    s->log_json = fmt[0] == 'j';
  } else {
    if (s->log_owned) ch_log_file_close(s->log_fd);
    free(s);
    return luaL_error(L, "bad option access_log_format (\"text\" or \"json\" expected)");
  }
  lua_pop(L, 1);
  /* metrics = false: the listener's requests stay out of cohost_http_*
  ** (the status endpoint's scrapes and health checks). */
  lua_getfield(L, 2, "metrics");
  s->uncounted = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (s->lim.max_line < 64 || s->lim.max_header < 64 || s->keepalive_requests < 1 ||
      s->h2_max_streams < 1) {
    free(s);
    return luaL_error(L, "bad limits (max_request_line, max_header_size >= 64; "
                         "keepalive_requests, http2_max_concurrent_streams >= 1)");
  }
  lua_pushvalue(L, 1);
  s->handler = luaL_ref(L, LUA_REGISTRYINDEX);
  if (!lua_isnil(L, 3)) {
    lua_pushvalue(L, 3);
    s->on_error = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  s->refs = 1;
  s->run = run_handler;
  s->on_free = server_free;
  ud->s = s;
  return 1;
}

static int server_gc(lua_State *L)
{
  struct server_ud *ud = lua_touserdata(L, 1);
  if (ud->s) ch_http_server_unref(ud->s);
  ud->s = NULL;
  return 0;
}

/* listen(addr, server, opts) -> listener | nil, err. */
static int l_listen(lua_State *L)
{
  luaL_checkstring(L, 1);
  struct server_ud *ud = luaL_checkudata(L, 2, SERVER_MT);
  if (!ud->s) return luaL_argerror(L, 2, "dead server");
  lua_settop(L, 3);
  int n = ch_listen_with(L, ch_http_admit, ud->s);
  struct ch_listener *l = ch_listen_at(L, -n);
  SSL_CTX *ctx = l ? ch_listener_ssl_ctx(l) : NULL;
  if (ctx) ch_h2_alpn(ctx, ud->s->http2);   /* before its first connection */
  return n;
}

/* -- HTML ----------------------------------------------------------------- */

/* Bytes each byte adds when escaped: & < > " ' become &amp; &lt; &gt;
** &quot; &#39; (OWASP's five: enough inside elements and quoted
** attributes). */
static const uint8_t html_extra[256] = {
  ['&'] = 4, ['<'] = 3, ['>'] = 3, ['"'] = 5, ['\''] = 4,
};

/* escape_html(s) -> s HTML-escaped. A string with nothing to escape (most
** text) comes back as it is, with no copy; Lua's gsub makes a new string
** either way, and its pattern was the most of TechEmpower's fortunes in
** Lua (docs/benchmarks.md). */
static int l_escape_html(lua_State *L)
{
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  size_t extra = 0;
  for (size_t i = 0; i < n; i++) extra += html_extra[(unsigned char)s[i]];
  if (!extra) {
    lua_settop(L, 1);
    if (lua_type(L, 1) != LUA_TSTRING) lua_pushlstring(L, s, n);   /* a number's text */
    return 1;
  }
  if (extra > SIZE_MAX - n) return luaL_error(L, "escape_html: string too long");
  char small[4096];
  char *out = n + extra <= sizeof small ? small : malloc(n + extra);
  if (!out) return luaL_error(L, "not enough memory");
  char *o = out;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!html_extra[c]) { *o++ = (char)c; continue; }
    const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;" : "&#39;";
    size_t el = (size_t)html_extra[c] + 1;
    memcpy(o, e, el);
    o += el;
  }
  lua_pushlstring(L, out, n + extra);
  if (out != small) free(out);
  return 1;
}

static const luaL_Reg req_methods[] = {
  { "body", req_body },
  { "read", req_read },
  { "settimeout", req_settimeout },
  { "header", req_header },
  { "conninfo", req_conninfo },
  { NULL, NULL }
};

static const luaL_Reg res_methods[] = {
  { "header", res_header },
  { "get_header", res_get_header },
  { "send", res_send },
  { "write", res_write },
  { "sendfile", res_sendfile },
  { "sent", res_sent },
  { "trailer", res_trailer },
  { "reset", res_reset },
  { "goaway", res_goaway },
  { "hijack", res_hijack },
  { NULL, NULL }
};

static const luaL_Reg funcs[] = {
  { "track_current", l_track_current },
  { "escape_html", l_escape_html },
  { "route_id", l_route_id },
  { "current", l_current },
  { "server", l_server },
  { "listen", l_listen },
  { NULL, NULL }
};

int luaopen_cohost_core_http(lua_State *L)
{
  luaL_newmetatable(L, SERVER_MT);
  lua_pushcfunction(L, server_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, RBOX_MT);
  rbox_mt = lua_topointer(L, -1);
  rbox_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  lua_newtable(L);   /* the module */
  luaL_register(L, NULL, funcs);

  /* Request: methods table (extensible from Lua) and metatable. */
  lua_newtable(L);
  luaL_register(L, NULL, req_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "Request");
  luaL_newmetatable(L, "cohost.http.req");
  lua_pushvalue(L, -2);          /* methods */
  lua_newtable(L);               /* headers metatable */
  lua_pushcfunction(L, headers_index);
  lua_setfield(L, -2, "__index");
  lua_pushcclosure(L, req_index, 2);
  lua_setfield(L, -2, "__index");
  /* The dispatcher, over the req metatable. */
  if (luaL_loadbuffer(L, DISPATCH_SRC, sizeof DISPATCH_SRC - 1, "=cohost.core.http") != 0)
    return lua_error(L);
  lua_pushvalue(L, -2);
  lua_call(L, 1, 1);
  dispatch_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 2);

  /* Response */
  lua_newtable(L);
  luaL_register(L, NULL, res_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "Response");
  luaL_newmetatable(L, "cohost.http.res");
  lua_pushvalue(L, -1);
  res_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  /* res's __index: the defaults, then the methods. A default in the
  ** metatable costs res no hash part (docs/benchmarks.md). */
  lua_createtable(L, 0, 1);
  lua_pushinteger(L, 200);
  lua_setfield(L, -2, "status");
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, -4);          /* methods */
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 2);
  return 1;
}
