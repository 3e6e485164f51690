/*
** cohost.core.socket: TCP cosockets for Lua, after OpenResty's
** ngx.socket.tcp: the same method names, return values and error strings
** (lua-nginx-module's ngx_http_lua_socket_tcp.c is the reference for every
** edge case here). The bytes move through net/stream.c, the one read and
** write path, which waits through io.c: a wait parks only the calling
** task, and a cancelled task's wait returns -ECANCELED, raised here as
** "cancelled". Connections come from net/addr.c lookups and io.c's
** connect, or from a listener (lib_listen.c); idle ones go to
** net/keepalive.c's pools. UDP is lib_udp.c.
*/
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/ljvm.h"
#include "vm/task.h"
#include "lib.h"
#include "lib_socket.h"
#include "net/addr.h"
#include "net/keepalive.h"
#include "net/stream.h"

/* A cancelled wait raises a Lua error through our frames; the busy flags
** are cleared by cleanup handlers, which only run with unwind tables. */
#ifndef __EXCEPTIONS
#error "lib_socket.c must be built with -fexceptions"
#endif

#define TCP_MT      "cohost.tcp"

#define TIMEOUT_MS   60000        /* lua_socket_{connect,send,read}_timeout */
#define KEEPALIVE_MS 60000        /* lua_socket_keepalive_timeout */
#define POOL_SIZE    30           /* lua_socket_pool_size */
#define BUF_MIN      4096         /* a read-all's first room */
#define BUF_KEEP     (64 * 1024)  /* receive(n) grows as data comes, by this */
#define READ_CHUNK   1024         /* least free space worth a read */
#define ANY_CHUNK    16384        /* most receiveany reads at once */
#define TABLE_DEPTH  64           /* nesting allowed in send's tables */

/* -- Helpers -------------------------------------------------------------- */

#define fail ch_lib_fail
#define fail_errno ch_lib_fail_errno
#define BUSY CH_LIB_BUSY

/* Raises "cancelled" when a wait said the task was cancelled: a wait
** that parks returns -ECANCELED, and the task must end. */
static inline void check_cancel(lua_State *L, ssize_t r)
{
  if (r == -ECANCELED) ch_task_check_cancel(L);
}

/* -- Payloads ------------------------------------------------------------- */

/* The largest key of the array table at idx; raises OpenResty's error on
** any other key. */
static int array_max(lua_State *L, int idx)
{
  int max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_Number k = lua_type(L, -2) == LUA_TNUMBER ? lua_tonumber(L, -2) : 0;
    if (k < 1 || k > INT_MAX || k != (lua_Number)(int)k) luaL_error(L, "non-array table found");
    if ((int)k > max) max = (int)k;
    lua_pop(L, 1);
  }
  return max;
}

/* Length of the strings and numbers in the array table at idx, nested
** tables included; raises on anything else, as the "strict" mode of
** ngx_http_lua_calc_strlen_in_table does. */
static size_t table_len(lua_State *L, int idx, int depth)
{
  size_t n = 0;
  if (depth > TABLE_DEPTH) luaL_error(L, "table nested too deeply");
  int max = array_max(L, idx);
  for (int i = 1; i <= max; i++) {
    lua_rawgeti(L, idx, i);
    switch (lua_type(L, -1)) {
    case LUA_TNUMBER:
    case LUA_TSTRING: {
      size_t len;
      lua_pushvalue(L, -1);   /* convert a copy: the table keeps its numbers */
      lua_tolstring(L, -1, &len);
      lua_pop(L, 1);
      n += len;
      break;
    }
    case LUA_TTABLE:
      n += table_len(L, lua_gettop(L), depth + 1);
      break;
    default:
      luaL_argerror(L, 2, lua_pushfstring(L, "bad data type %s found", luaL_typename(L, -1)));
    }
    lua_pop(L, 1);
  }
  return n;
}

/* Copies what table_len measured to p; returns the end. */
static char *table_copy(lua_State *L, int idx, char *p)
{
  int max = array_max(L, idx);
  for (int i = 1; i <= max; i++) {
    lua_rawgeti(L, idx, i);
    if (lua_type(L, -1) == LUA_TTABLE) {
      p = table_copy(L, lua_gettop(L), p);
    } else {
      size_t len;
      lua_pushvalue(L, -1);
      const char *s = lua_tolstring(L, -1, &len);
      memcpy(p, s, len);
      p += len;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  return p;
}

/* The bytes send(data) sends: a string or number as is, nil and booleans
** spelled out, an array table flattened into one new userdata buffer
** (anchored on the stack). Raises on other types, as OpenResty does. */
const char *ch_socket_payload(lua_State *L, int idx, size_t *len)
{
  const char *s = ch_ljvm_string_at(L, idx, len);   /* the common case, inline */
  if (s) return s;
  switch (lua_type(L, idx)) {
  case LUA_TSTRING:
    return lua_tolstring(L, idx, len);
  case LUA_TNUMBER:
    lua_pushvalue(L, idx);
    return lua_tolstring(L, -1, len);
  case LUA_TNIL:
    *len = 3;
    return "nil";
  case LUA_TBOOLEAN:
    *len = lua_toboolean(L, idx) ? 4 : 5;
    return lua_toboolean(L, idx) ? "true" : "false";
  case LUA_TTABLE: {
    size_t n = table_len(L, idx, 0);
    char *p = lua_newuserdata(L, n ? n : 1);
    table_copy(L, idx, p);
    *len = n;
    return p;
  }
  default:
    luaL_argerror(L, idx, lua_pushfstring(L, "string, number, boolean, nil, or array table "
                                          "expected, got %s", luaL_typename(L, idx)));
    return NULL;
  }
}

/* -- TCP sockets ---------------------------------------------------------- */

static const luaL_Reg tcp_methods[];

/* This worker's TCP metatable, for the fast check below. One lua_State
** per worker thread; the registry anchors the table, and LuaJIT's GC
** never moves objects, so the pointer is stable. */
static __thread const void *tcp_mt;

/* Pushes the TCP metatable, made on first use: a cosocket can be born
** (an HTTP hijack, a listener's connection) before any script required
** cohost.core.socket. */
static void push_tcp_mt(lua_State *L)
{
  if (luaL_newmetatable(L, TCP_MT)) {
    luaL_register(L, NULL, tcp_methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
    tcp_mt = lua_topointer(L, -1);
  }
}

/* luaL_checkudata finds the metatable by name, interning the name and
** reading the registry on every call (twice per echoed message);
** lua_getmetatable, lua_topointer and the pop cost several times what
** reading the pointer where the probed layout keeps it does
** (host/vm/ljvm.h; figures in docs/benchmarks.md). A light userdata is not a socket whatever it
** points to, hence the type check first. */
static struct ch_socket *to_tcp(lua_State *L, int idx)
{
  struct ch_socket *u;
  if (idx > 0) u = ch_ljvm_udata_at(L, idx);   /* lua_type and lua_touserdata, inline */
  else u = lua_type(L, idx) == LUA_TUSERDATA ? lua_touserdata(L, idx) : NULL;
  if (!u) return NULL;
  const void *mt = ch_ljvm_udata_mt(u);
  return mt && mt == tcp_mt ? u : NULL;   /* tcp_mt is NULL until first made */
}

struct ch_socket *ch_socket_check(lua_State *L)
{
  struct ch_socket *u = to_tcp(L, 1);
  return u ? u : luaL_checkudata(L, 1, TCP_MT);   /* raises the usual error */
}

static struct ch_socket *push_tcp(lua_State *L)
{
  struct ch_socket *u = lua_newuserdata(L, sizeof *u);
  memset(u, 0, sizeof *u);
  ch_stream_init(&u->s, -1, NULL);
  u->connect_ms = u->send_ms = u->read_ms = TIMEOUT_MS;
  push_tcp_mt(L);
  lua_setmetatable(L, -2);
  return u;
}

/* Closes u's connection without waiting. A reader or writer parked on it
** wakes and returns "closed"; a parked reader still owns the buffer then,
** and frees it itself (ch_stream_close leaves it). */
void ch_socket_finalize(struct ch_socket *u)
{
  ch_stream_close(&u->s, 1);
  if (u->pool) {
    /* Its place in the pool goes to a queued connect (backlog). */
    ch_keepalive_drop(u->pool);
    u->pool = NULL;
  }
  free(u->key);
  u->key = NULL;
  free(u->peer);
  u->peer = NULL;
  u->read_closed = u->write_closed = 0;
}

static void read_close(struct ch_socket *u)
{
  u->read_closed = 1;
  ch_stream_drop(&u->s);
  if (u->write_closed) ch_socket_finalize(u);
}

static void write_close(struct ch_socket *u)
{
  u->write_closed = 1;
  if (u->read_closed) ch_socket_finalize(u);
}

static int closed(lua_State *L)
{
  return fail(L, "closed");
}

/* -- Receiving ------------------------------------------------------------ */

/* Removes every CR from p[0, n), as OpenResty's *l does. New length. */
static size_t strip_cr(char *p, size_t n)
{
  char *cr = memchr(p, '\r', n);
  if (!cr) return n;
  size_t j = (size_t)(cr - p);
  for (size_t i = j; i < n; i++)
    if (p[i] != '\r') p[j++] = p[i];
  return j;
}

/* Returns nil, err, partial for a failed read: partial is the len bytes at
** p, and the first consumed bytes of the buffer are used up. A timeout
** keeps the socket; EOF ("closed") and errors close its read part, as
** ngx_http_lua_socket_read_error_retval_handler does. err: 0 for EOF, or
** -errno from the stream (a cancellation raises instead). */
static int read_fail(lua_State *L, struct ch_socket *u, ssize_t err, const char *p, size_t len,
                     size_t consumed)
{
  check_cancel(L, err);
  if (err == 0 || err == -EBADF) fail(L, "closed");
  else fail_errno(L, (int)-err);
  lua_pushlstring(L, p, len);
  if (err == -ETIMEDOUT) ch_stream_consume(&u->s, consumed);
  else if (u->s.fd < 0) ch_stream_drop(&u->s);   /* closed under us: ours to free */
  else read_close(u);
  return 3;
}

/* Common checks of every read: returns 0 to go on, else the number of
** values pushed. */
static int read_check(lua_State *L, struct ch_socket *u)
{
  if (u->s.fd < 0 || u->read_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  return 0;
}

/* Yields. receive("*l"): a line without its LF, every CR dropped. */
static int read_line(lua_State *L, struct ch_socket *u)
{
  size_t len;
  int r = ch_stream_line(&u->s, u->read_ms, &len);
  char *p = ch_stream_data(&u->s);
  if (r == 1) {
    lua_pushlstring(L, p, strip_cr(p, len - 1));
    ch_stream_consume(&u->s, len);
    return 1;
  }
  size_t avail = ch_stream_avail(&u->s);
  return read_fail(L, u, r, p, avail ? strip_cr(p, avail) : 0, avail);
}

/* Yields. receive("*a"): everything up to EOF; "" once at EOF. */
static int read_all(lua_State *L, struct ch_socket *u)
{
  for (;;) {
    size_t avail = ch_stream_avail(&u->s);
    if (u->s.eof) {
      lua_pushlstring(L, ch_stream_data(&u->s), avail);
      ch_stream_consume(&u->s, avail);
      return 1;
    }
    ssize_t r = ch_stream_fill(&u->s, avail > BUF_MIN ? avail : BUF_MIN, u->read_ms);   /* doubles */
    if (r < 0) {
      avail = ch_stream_avail(&u->s);
      return read_fail(L, u, r, ch_stream_data(&u->s), avail, avail);
    }
  }
}

/* Yields. receive(n): exactly n bytes. */
static int read_bytes(lua_State *L, struct ch_socket *u, size_t n)
{
  for (;;) {
    size_t avail = ch_stream_avail(&u->s);
    if (avail >= n) {
      lua_pushlstring(L, ch_stream_data(&u->s), n);
      ch_stream_consume(&u->s, n);
      return 1;
    }
    size_t want = n - avail;
    if (want > BUF_KEEP) want = BUF_KEEP;   /* grow as data comes, not up front */
    if (want < READ_CHUNK) want = READ_CHUNK;
    ssize_t r = u->s.eof ? 0 : ch_stream_fill(&u->s, want, u->read_ms);
    if (r <= 0) {
      avail = ch_stream_avail(&u->s);
      return read_fail(L, u, r, ch_stream_data(&u->s), avail, avail);
    }
  }
}

/* Yields. receive([pattern]): "*l" (the default), "*a" or a byte count.
** Returns the data, or nil, err, partial. */
static int tcp_receive(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int n = lua_gettop(L), r;
  if (n != 1 && n != 2)
    return luaL_error(L, "expecting 1 or 2 arguments (including the object), but got %d", n);
  if ((r = read_check(L, u))) return r;
  int mode = 'l';
  size_t bytes = 0;
  if (n == 2) {
    if (lua_isnumber(L, 2)) {
      lua_Number b = lua_tonumber(L, 2);
      if (b < 0) return luaL_argerror(L, 2, "bad pattern argument");
      if (b < 1) {   /* OpenResty returns "" for 0 without reading */
        lua_pushliteral(L, "");
        return 1;
      }
      mode = 'n';
      bytes = b < (lua_Number)(SIZE_MAX / 2) ? (size_t)b : SIZE_MAX / 2;
    } else if (lua_type(L, 2) == LUA_TSTRING) {
      size_t len;
      const char *p = lua_tolstring(L, 2, &len);
      if (len != 2 || p[0] != '*')
        return luaL_argerror(L, 2, lua_pushfstring(L, "bad pattern argument: %s", p));
      if (p[1] != 'l' && p[1] != 'a') return luaL_argerror(L, 2, "bad pattern argument");
      mode = p[1];
    } else {
      return luaL_argerror(L, 2, "bad pattern argument");
    }
  }
  BUSY(&u->reading);
  switch (mode) {
  case 'l': return read_line(L, u);
  case 'a': return read_all(L, u);
  default: return read_bytes(L, u, bytes);
  }
}

/* Yields. receiveany(max): whatever has arrived, up to max bytes, waiting
** only when nothing has. */
static int tcp_receiveany(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int n = lua_gettop(L), r;
  if (n != 2) return luaL_error(L, "expecting 2 arguments (including the object), but got %d", n);
  if ((r = read_check(L, u))) return r;
  /* lua_tonumber is 0 for what is no number: one call, not three (NaN
  ** fails too). */
  lua_Number m = lua_tonumber(L, 2);
  if (!(m >= 1)) return luaL_argerror(L, 2, "bad max argument");
  size_t max = m > (lua_Number)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)m;
  BUSY(&u->reading);
  for (;;) {
    size_t avail = ch_stream_avail(&u->s);
    if (avail) {
      if (avail > max) avail = max;
      lua_pushlstring(L, ch_stream_data(&u->s), avail);
      ch_stream_consume(&u->s, avail);
      return 1;
    }
    /* Room for ANY_CHUNK whatever max is: a reader that takes a little
    ** and the rest through ch_socket_take (examples/kv) makes one read of
    ** a batch, not one per 4 KiB. The buffer goes back when drained. */
    ssize_t got = u->s.eof ? 0 : ch_stream_fill(&u->s, ANY_CHUNK, u->read_ms);
    if (got <= 0) return read_fail(L, u, got, "", 0, 0);
  }
}

size_t ch_socket_buffered(const struct ch_socket *u)
{
  return u->s.fd < 0 || u->read_closed || u->reading ? 0 : ch_stream_avail(&u->s);
}

size_t ch_socket_take(struct ch_socket *u, void *dst, size_t max)
{
  size_t n = ch_socket_buffered(u);
  if (n > max) n = max;
  if (n == 0) return 0;
  memcpy(dst, ch_stream_data(&u->s), n);
  ch_stream_consume(&u->s, n);
  return n;
}

/* -- receiveuntil --------------------------------------------------------- */

struct until {
  uint8_t inclusive;        /* return the pattern with the data */
  uint8_t done;             /* size mode consumed the pattern: the next call
                            ** returns nil and starts over */
};

/* Yields. The iterator receiveuntil returns: iter([size]). Without size it
** returns the data before the next occurrence of the pattern. With size
** it returns at most size bytes of that data per call, and nil (no error)
** once the pattern has been consumed; the call after that starts on the
** next occurrence. Errors: nil, err, partial. Same as OpenResty, except
** that chunks never exceed size (OpenResty's matcher may overshoot). */
static int until_iter(lua_State *L)
{
  int n = lua_gettop(L), r;
  if (n > 1) return luaL_error(L, "expecting 0 or 1 arguments, but seen %d", n);
  lua_Integer size = n >= 1 ? luaL_checkinteger(L, 1) : 0;
  if (size < 0) size = 0;
  struct ch_socket *u = lua_touserdata(L, lua_upvalueindex(1));
  size_t plen;
  const char *pat = lua_tolstring(L, lua_upvalueindex(2), &plen);
  struct until *st = lua_touserdata(L, lua_upvalueindex(3));
  if ((r = read_check(L, u))) return r;
  if (st->done) {
    st->done = 0;
    lua_pushnil(L);
    lua_pushnil(L);
    lua_pushnil(L);
    return 3;
  }
  BUSY(&u->reading);
  size_t pos, safe;
  r = ch_stream_until(&u->s, pat, plen, (size_t)size, u->read_ms, &pos, &safe);
  const char *p = ch_stream_data(&u->s);
  if (r == 1 && !(size && pos >= (size_t)size)) {
    lua_pushlstring(L, p, st->inclusive ? pos + plen : pos);
    ch_stream_consume(&u->s, pos + plen);
    if (size) st->done = 1;
    return 1;
  }
  if (r >= 1) {   /* the size-th byte comes before the pattern */
    lua_pushlstring(L, p, (size_t)size);
    ch_stream_consume(&u->s, (size_t)size);
    return 1;
  }
  /* A timeout hands back the data that cannot be the pattern and keeps a
  ** possible head of it for the next call. */
  size_t part = r == -ETIMEDOUT ? safe : ch_stream_avail(&u->s);
  return read_fail(L, u, r, p, part, part);
}

static int tcp_receiveuntil(lua_State *L)
{
  int n = lua_gettop(L);
  int inclusive = 0;
  if (n != 2 && n != 3)
    return luaL_error(L, "expecting 2 or 3 arguments (including the object), but got %d", n);
  if (n == 3) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "inclusive");
    switch (lua_type(L, -1)) {
    case LUA_TNIL: break;
    case LUA_TBOOLEAN: inclusive = lua_toboolean(L, -1); break;
    default:
      return luaL_error(L, "bad \"inclusive\" option value type: %s", luaL_typename(L, -1));
    }
    lua_settop(L, 2);
  }
  ch_socket_check(L);
  size_t plen;
  luaL_checklstring(L, 2, &plen);
  if (plen == 0) return fail(L, "pattern is empty");
  struct until *st = lua_newuserdata(L, sizeof *st);
  st->inclusive = (uint8_t)inclusive;
  st->done = 0;
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, until_iter, 3);
  return 1;
}

/* -- Sending -------------------------------------------------------------- */

/* Returns nil, err for a failed send; every send error, timeouts included,
** closes the write part (ngx_http_lua_socket_write_error_retval_handler). */
static int write_fail(lua_State *L, struct ch_socket *u, int err)
{
  check_cancel(L, -err);
  if (err == EBADF) fail(L, "closed");
  else fail_errno(L, err);
  if (u->s.fd >= 0) write_close(u);
  return 2;
}

/* Yields. send(data): all of it, or nil, err. Returns the byte count. */
static int tcp_send(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int n = lua_gettop(L);
  if (n != 2) return luaL_error(L, "expecting 2 arguments (including the object), but got %d", n);
  if (u->s.fd < 0 || u->write_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->writing) return fail(L, "socket busy writing");
  size_t len;
  const char *p = ch_socket_payload(L, 2, &len);
  if (len == 0) {
    lua_pushinteger(L, 0);
    return 1;
  }
  BUSY(&u->writing);
  int r = ch_stream_write(&u->s, p, len, u->send_ms);
  if (r < 0) return write_fail(L, u, -r);
  lua_pushinteger(L, (lua_Integer)len);
  return 1;
}

/* shutdown("send"): sends FIN and closes the write part; reading goes on.
** (From OpenResty's stream module; the proxy uses it to pass half-closes
** on.) */
static int tcp_shutdown(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  const char *how = luaL_checkstring(L, 2);
  if (strcmp(how, "send") != 0) return luaL_argerror(L, 2, "bad shutdown argument");
  if (u->s.fd < 0 || u->write_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->writing) return fail(L, "socket busy writing");
  if (u->s.ssl) SSL_shutdown(u->s.ssl);   /* close_notify first; one attempt */
  if (shutdown(u->s.fd, SHUT_WR) < 0) {
    int err = errno;
    write_close(u);
    return fail_errno(L, err);
  }
  write_close(u);
  lua_pushinteger(L, 1);
  return 1;
}

/* -- Connecting ----------------------------------------------------------- */

/* Yields. Connects a fresh non-blocking socket to sa within the connect
** timeout. Returns 0 with u's stream on it, or an errno (ETIMEDOUT on
** timeout, EBADF when closed meanwhile); raises "cancelled". */
static int dial(lua_State *L, struct ch_socket *u, const struct sockaddr *sa, socklen_t len)
{
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  ch_stream_init(&u->s, fd, NULL);
  int r;
  {
    BUSY(&u->connecting);
    r = ch_io_connect(fd, sa, len, u->connect_ms);
  }
  if (u->s.fd != fd) return EBADF;   /* closed meanwhile: not ours to close */
  if (r < 0) {
    u->s.fd = -1;
    close(fd);
    check_cancel(L, r);
    /* -EAGAIN: a unix listener's backlog stayed full until the timeout. */
    return r == -EAGAIN ? ETIMEDOUT : -r;
  }
  if (sa->sa_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return 0;
}

static void free_ai(struct addrinfo **res)
{
  if (*res) freeaddrinfo(*res);
}

/* Yields. connect(host, port [, opts]) or connect("unix:/path" [, opts]).
** A pooled connection for the key is reused first. Returns 1 or nil, err. */
static int tcp_connect(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int n = lua_gettop(L);
  if (n < 2 || n > 4)
    return luaL_error(L, "expecting 2, 3, or 4 arguments (including the object), but seen %d", n);
  size_t hlen;
  const char *host = luaL_checklstring(L, 2, &hlen);
  const char *pool = NULL;
  int pool_size = 0, backlog = -1;
  if (lua_type(L, n) == LUA_TTABLE) {
    lua_getfield(L, n, "pool_size");
    if (lua_isnumber(L, -1)) {
      pool_size = (int)lua_tointeger(L, -1);
      if (pool_size <= 0)
        return luaL_argerror(L, n, lua_pushfstring(L, "bad \"pool_size\" option value: %d",
                                                   pool_size));
    } else if (!lua_isnil(L, -1)) {
      return luaL_argerror(L, n, lua_pushfstring(L, "bad \"pool_size\" option type: %s",
                                                 luaL_typename(L, -1)));
    }
    lua_getfield(L, n, "backlog");
    if (lua_isnumber(L, -1)) {
      lua_Integer b = lua_tointeger(L, -1);
      if (b < 0 || b > INT_MAX)
        return luaL_argerror(L, n, lua_pushfstring(L, "bad \"backlog\" option value: %d", (int)b));
      backlog = (int)b;
      if (!pool_size) pool_size = POOL_SIZE;   /* lua_socket_pool_size, as in OpenResty */
    }
    lua_getfield(L, n, "pool");
    switch (lua_type(L, -1)) {
    case LUA_TNUMBER:
    case LUA_TSTRING: pool = lua_tostring(L, -1); break;   /* anchored in the stack */
    case LUA_TNIL: break;
    default:
      return luaL_argerror(L, n, lua_pushfstring(L, "bad \"pool\" option type: %s",
                                                 luaL_typename(L, -1)));
    }
    n--;
  }
  int is_unix = hlen >= 5 && strncasecmp(host, "unix:", 5) == 0;
  int port = 0;
  if (n >= 3 && lua_isnumber(L, 3)) {
    port = (int)lua_tointeger(L, 3);
    if (port < 0 || port > 65535) {
      lua_pushnil(L);
      lua_pushfstring(L, "bad port number: %d", port);
      return 2;
    }
  } else if (!is_unix) {
    return fail(L, "missing the port number");
  }
  if (u->s.fd >= 0) {
    if (u->connecting) return fail(L, "socket busy connecting");
    if (u->reading) return fail(L, "socket busy reading");
    if (u->writing) return fail(L, "socket busy writing");
    if (u->downstream) return luaL_error(L, "attempt to re-connect a request socket");
  } else if (u->connecting) {
    return fail(L, "socket busy connecting");
  }
  ch_socket_finalize(u);   /* reconnecting closes the old connection, as in OpenResty */
  u->downstream = 0;
  u->reused = 0;
  /* The key: opts.pool, else "host:port", else "unix:/path". */
  if (!pool && !is_unix) pool = lua_pushfstring(L, "%s:%d", host, port);
  if (!(u->key = strdup(pool ? pool : host))) return fail(L, "no memory");
  /* A pool that exists, or that pool_size or backlog makes, counts the
  ** connection from here until it is closed or put back; with a backlog
  ** the connect may wait here for one of its pool_size connections. */
  struct ch_keepalive *kp = ch_keepalive_get(u->key, pool_size, backlog);
  if (!kp && pool_size) {
    ch_socket_finalize(u);
    return fail(L, "no memory");
  }
  if (kp) {
    SSL *ssl = NULL;
    int fd, r;
    {
      BUSY(&u->connecting);
      r = ch_keepalive_take(kp, u->connect_ms, &fd, &u->reused, &ssl);
    }
    if (r < 0) {
      ch_socket_finalize(u);
      check_cancel(L, r);
      return fail(L, r == -EAGAIN ? "too many waiting connect operations" : "timeout");
    }
    u->pool = kp;   /* counted: ch_socket_finalize gives its place back */
    if (fd >= 0) {
      ch_stream_init(&u->s, fd, ssl);
      u->reused++;
      lua_pushinteger(L, 1);
      return 1;
    }
  }
  union ch_addr a;
  socklen_t alen;
  int err;
  if (is_unix) {
    if (!(alen = ch_addr_unix(host + 5, &a))) {
      ch_socket_finalize(u);
      return fail(L, "unix socket path too long");
    }
    err = dial(L, u, &a.sa, alen);
  } else if ((alen = ch_addr_ip(host, port, &a))) {
    err = dial(L, u, &a.sa, alen);
  } else {
    /* Freed however we leave: a dial may raise "cancelled". */
    struct addrinfo *res __attribute__((cleanup(free_ai))) = NULL;
    int gai = ch_addr_resolve(host, port, SOCK_STREAM, 0, &res);
    if (gai) {
      ch_socket_finalize(u);
      lua_pushnil(L);
      lua_pushfstring(L, "%s could not be resolved (%s)", host, ch_addr_resolve_error(gai));
      return 2;
    }
    err = EHOSTUNREACH;
    /* Try each address in turn ("localhost" may be ::1 then 127.0.0.1). */
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      memcpy(&a, ai->ai_addr, ai->ai_addrlen);
      if (!(err = dial(L, u, &a.sa, ai->ai_addrlen))) break;
      if (err == ETIMEDOUT || err == EBADF) break;
    }
  }
  if (err) {
    ch_socket_finalize(u);
    if (err == EBADF) return closed(L);
    return fail_errno(L, err);
  }
  lua_pushinteger(L, 1);
  return 1;
}

/* setkeepalive([idle_ms [, pool_size]]): puts the connection in the
** worker's pool for its key and closes the Lua object. idle_ms 0 keeps it
** without limit. Returns 1 or nil, err. */
static int tcp_setkeepalive(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int n = lua_gettop(L);
  if (n > 3)
    return luaL_error(L, "expecting 1 to 3 arguments (including the object), but got %d", n);
  if (u->s.fd < 0 || u->read_closed || u->write_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  if (u->writing) return fail(L, "socket busy writing");
  if (ch_stream_avail(&u->s)) return fail(L, "unread data in buffer");
  if (u->s.eof) return fail(L, "invalid connection");
  if (!u->key) return fail(L, "key not found");   /* accepted sockets have none */
  lua_Integer idle = n >= 2 && !lua_isnil(L, 2) ? luaL_checkinteger(L, 2) : KEEPALIVE_MS;
  if (idle < 0 || idle > INT_MAX) return luaL_argerror(L, 2, "bad timeout value");
  lua_Integer size = n >= 3 && !lua_isnil(L, 3) ? luaL_checkinteger(L, 3) : POOL_SIZE;
  if (size <= 0 || size > INT_MAX)
    return luaL_argerror(L, n, lua_pushfstring(L, "bad \"pool_size\" option value: %d", (int)size));
  struct ch_worker *w = ch_worker_self;
  if ((w && w->stopping) || !ch_keepalive_quiet(u->s.fd) || (u->s.ssl && SSL_has_pending(u->s.ssl))) {
    /* Shutting down: close instead, as OpenResty does while exiting. */
    int dubious = !(w && w->stopping);
    ch_socket_finalize(u);
    if (dubious) return fail(L, "connection in dubious state");
    lua_pushinteger(L, 1);
    return 1;
  }
  /* The pool owns the fd and the SSL from here on, whatever happens, and
  ** a counted connection stays counted there (as idle). size only makes
  ** a pool that is gone. */
  int r = ch_keepalive_put(u->key, u->pool, (int)size, (int)idle, u->s.fd, u->s.ssl, u->reused);
  u->s.fd = -1;
  u->s.ssl = NULL;
  u->pool = NULL;
  ch_socket_finalize(u);
  if (r < 0) return fail(L, "no memory");
  lua_pushinteger(L, 1);
  return 1;
}

static int tcp_getreusedtimes(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  if (u->s.fd < 0) return closed(L);
  lua_pushinteger(L, u->reused);
  return 1;
}

static int tcp_close(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  if (lua_gettop(L) != 1)
    return luaL_error(L, "expecting 1 argument (including the object) but seen %d", lua_gettop(L));
  if (u->s.fd < 0) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  if (u->writing) return fail(L, "socket busy writing");
  ch_socket_finalize(u);
  lua_pushinteger(L, 1);
  return 1;
}

/* A timeout argument: 0 (or nil) restores the default; negative or 2^31
** and above raise "bad timeout value", as OpenResty's (timeout >> 31). */
static int timeout_arg(lua_State *L, int idx)
{
  lua_Number t = lua_tonumber(L, idx);
  if (t < 0 || t >= 2147483648.0) luaL_error(L, "bad timeout value");
  return t >= 1 ? (int)t : TIMEOUT_MS;
}

static int tcp_settimeout(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  if (lua_gettop(L) != 2)
    return luaL_error(L, "settimeout: expecting 2 arguments (including the object) but seen %d",
                      lua_gettop(L));
  u->connect_ms = u->send_ms = u->read_ms = timeout_arg(L, 2);
  return 0;
}

static int tcp_settimeouts(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  if (lua_gettop(L) != 4)
    return luaL_error(L, "settimeouts: expecting 4 arguments (including the object) but seen %d",
                      lua_gettop(L));
  int c = timeout_arg(L, 2), s = timeout_arg(L, 3), r = timeout_arg(L, 4);
  u->connect_ms = c;
  u->send_ms = s;
  u->read_ms = r;
  return 0;
}

/* The options of lua-resty-core's setoption/getoption, in its order. */
static const struct {
  const char *name;
  int level, opt;
} options[] = {
  { "keepalive", SOL_SOCKET, SO_KEEPALIVE },
  { "reuseaddr", SOL_SOCKET, SO_REUSEADDR },
  { "tcp-nodelay", IPPROTO_TCP, TCP_NODELAY },
  { "sndbuf", SOL_SOCKET, SO_SNDBUF },
  { "rcvbuf", SOL_SOCKET, SO_RCVBUF },
};

/* Finds option name at idx: its index, or -1 with nil, err pushed. */
static int option_arg(lua_State *L, int idx)
{
  if (lua_isnoneornil(L, idx)) {
    fail(L, "missing the \"option\" argument");
    return -1;
  }
  const char *name = lua_tostring(L, idx);
  for (int i = 0; name && i < (int)(sizeof options / sizeof options[0]); i++)
    if (strcmp(name, options[i].name) == 0) return i;
  lua_pushnil(L);
  lua_pushfstring(L, "unsupported option %s", name ? name : luaL_typename(L, idx));
  return -1;
}

static int tcp_setoption(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int i = option_arg(L, 2);
  if (i < 0) return 2;
  if (lua_isnoneornil(L, 3)) return fail(L, "missing the \"value\" argument");
  int v = lua_isboolean(L, 3) ? lua_toboolean(L, 3) : (int)luaL_checkinteger(L, 3);
  if (u->s.fd < 0) return closed(L);
  if (setsockopt(u->s.fd, options[i].level, options[i].opt, &v, sizeof v) < 0)
    return fail_errno(L, errno);
  lua_pushboolean(L, 1);
  return 1;
}

static int tcp_getoption(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  int i = option_arg(L, 2);
  if (i < 0) return 2;
  if (u->s.fd < 0) return closed(L);
  int v = 0;
  socklen_t len = sizeof v;
  if (getsockopt(u->s.fd, options[i].level, options[i].opt, &v, &len) < 0)
    return fail_errno(L, errno);
  lua_pushinteger(L, v);
  return 1;
}

/* getpeername(): ip, port; or the path for a unix socket. */
static int tcp_getpeername(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  union ch_addr a;
  socklen_t len = sizeof a;
  if (u->s.fd < 0) return closed(L);
  memset(&a, 0, sizeof a);
  if (u->peer) a = *u->peer;
  else if (getpeername(u->s.fd, &a.sa, &len) < 0) return fail_errno(L, errno);
  if (a.sa.sa_family == AF_UNIX) {
    lua_pushstring(L, a.un.sun_path);
    return 1;
  }
  char ip[INET6_ADDRSTRLEN];
  int port;
  if (ch_addr_ip_port(&a, ip, &port) < 0) return fail(L, "unknown address family");
  lua_pushstring(L, ip);
  lua_pushinteger(L, port);
  return 2;
}

/* Collected: closes without waiting (a finalizer may never park). */
static int tcp_gc(lua_State *L)
{
  ch_socket_finalize(lua_touserdata(L, 1));
  return 0;
}

static int tcp_tostring(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  lua_pushfstring(L, "tcp socket (fd %d): %p", u->s.fd, (void *)u);
  return 1;
}

static int sock_tcp(lua_State *L)
{
  if (lua_gettop(L) != 0)
    return luaL_error(L, "expecting zero arguments, but got %d", lua_gettop(L));
  push_tcp(L);
  return 1;
}

/* -- For the other bindings ------------------------------------------------ */

struct ch_stream *ch_socket_push_conn(lua_State *L, int fd, SSL *ssl, const char *pre, size_t n)
{
  struct ch_socket *u = push_tcp(L);
  ch_stream_init(&u->s, fd, ssl);   /* owned from here on */
  u->downstream = 1;
  if (ch_stream_put(&u->s, pre, n) < 0) {
    ch_socket_finalize(u);
    luaL_error(L, "no memory");
  }
  return &u->s;
}

int ch_socket_set_peer(lua_State *L, int idx, const union ch_addr *a)
{
  struct ch_socket *u = lua_touserdata(L, idx);
  if (!u->peer && !(u->peer = malloc(sizeof *u->peer))) return -ENOMEM;
  *u->peer = *a;
  return 0;
}

void ch_socket_close_at(lua_State *L, int idx)
{
  struct ch_socket *u = to_tcp(L, idx);
  if (u && u->s.fd >= 0) ch_socket_finalize(u);
}

/* -- Module --------------------------------------------------------------- */

static const luaL_Reg tcp_methods[] = {
  { "connect", tcp_connect },
  { "send", tcp_send },
  { "receive", tcp_receive },
  { "receiveany", tcp_receiveany },
  { "receiveuntil", tcp_receiveuntil },
  { "close", tcp_close },
  { "shutdown", tcp_shutdown },
  { "settimeout", tcp_settimeout },
  { "settimeouts", tcp_settimeouts },
  { "setoption", tcp_setoption },
  { "getoption", tcp_getoption },
  { "setkeepalive", tcp_setkeepalive },
  { "getreusedtimes", tcp_getreusedtimes },
  { "getpeername", tcp_getpeername },
  { "sslhandshake", ch_ssl_handshake },   /* lib_ssl.c */
  { "sslinfo", ch_ssl_info },
  { "__gc", tcp_gc },
  { "__tostring", tcp_tostring },
  { NULL, NULL }
};

/* close_pool(name): closes the idle connections of the worker's pool
** name (connect's pool option, else "host:port"). */
static int sock_close_pool(lua_State *L)
{
  ch_keepalive_close(luaL_checkstring(L, 1));
  return 0;
}

static const luaL_Reg socket_funcs[] = {
  { "tcp", sock_tcp },
  { "close_pool", sock_close_pool },
  { NULL, NULL }
};

int luaopen_cohost_core_socket(lua_State *L)
{
  push_tcp_mt(L);
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, socket_funcs);
  return 1;
}
