/*
** Cosockets: TCP and UDP sockets, listeners and keepalive pools for Lua,
** after OpenResty's ngx.socket.tcp and ngx.socket.udp: the same method
** names, return values and error strings (lua-nginx-module's
** ngx_http_lua_socket_tcp.c is the reference for every edge case here).
**
** Every socket is non-blocking from birth (SOCK_NONBLOCK, which the hooks
** record as the user's own choice, so they pass our calls straight
** through) and every wait goes through ch_task_wait_fd, which parks only
** the calling task. A listener accepts on a native coroutine that never
** touches Lua; each connection gets a coroutine of its own, which makes the
** handler's task. Listener and pool lists are per worker thread.
*/
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "lib.h"
#include "lib_http.h"
#include "lib_socket.h"
#include "proc/master_listen.h"
#include "proc/stats.h"
#include "net/tls.h"

/* A cancelled wait raises a Lua error through our frames; the busy flags
** are cleared by cleanup handlers, which only run with unwind tables. */
#ifndef __EXCEPTIONS
#error "lib_socket.c must be built with -fexceptions"
#endif

#define TCP_MT      "cohost.tcp"
#define UDP_MT      "cohost.udp"
#define LISTENER_MT "cohost.listener"
#define SESSION_MT  "cohost.ssl_session"

#define TIMEOUT_MS   60000        /* lua_socket_{connect,send,read}_timeout */
#define KEEPALIVE_MS 60000        /* lua_socket_keepalive_timeout */
#define POOL_SIZE    30           /* lua_socket_pool_size */
#define BUF_MIN      4096         /* lua_socket_buffer_size on 4 KiB pages */
#define BUF_KEEP     (64 * 1024)  /* larger buffers are freed once drained */
#define READ_CHUNK   1024         /* least free space worth a recv */
#define ANY_CHUNK    16384        /* most receiveany reads at once */
#define UDP_MAX      65536        /* OpenResty's UDP_MAX_DATAGRAM_SIZE */
#define BACKLOG      511          /* nginx's default listen backlog */
#define ACCEPT_BATCH 64           /* accepts before the acceptor yields */
#define BUSY_MAX     64           /* 503 answers in flight per worker; past
                                  ** it, a connection over the limit is closed */
#define BUSY_LINGER_MS 1000       /* a 503 waits this long for the client's
                                  ** close, reading what it sends */
#define BUSY_DRAIN   (64 * 1024)  /* and reads at most this much */
#define TABLE_DEPTH  64           /* nesting allowed in send's tables */

union addr {
  struct sockaddr sa;
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
  struct sockaddr_un un;
  struct sockaddr_storage ss;
};

/* -- Helpers -------------------------------------------------------------- */

/* Pushes OpenResty's word for err, lower-cased as LuaSocket has it. */
static void push_errstr(lua_State *L, int err)
{
  const char *s = ch_errstr(err);
  char buf[128];
  size_t i;
  for (i = 0; s[i] && i < sizeof buf - 1; i++) buf[i] = (char)tolower((unsigned char)s[i]);
  lua_pushlstring(L, buf, i);
}

static int fail(lua_State *L, const char *msg)
{
  lua_pushnil(L);
  lua_pushstring(L, msg);
  return 2;
}

static int fail_errno(lua_State *L, int err)
{
  lua_pushnil(L);
  push_errstr(L, err);
  return 2;
}

/* Busy flags live while an operation may wait. The cleanup clears them
** however the function is left, including a "cancelled" error raised from
** ch_task_wait_fd and unwound through this frame. */
static void unbusy(uint8_t **flag)
{
  **flag = 0;
}

#define BUSY(flagp) \
  uint8_t *busy_ __attribute__((cleanup(unbusy))) = (flagp); *busy_ = 1

/* Yields. Waits for *fdp to be ready for ev. Returns 1 when ready, 0 on
** timeout, -1 when the socket was closed meanwhile (by the connection's
** coroutine after its handler returned). Raises "cancelled". */
static int wait_io(lua_State *L, const int *fdp, int ev, int ms)
{
  int fd = *fdp;
  int r = ch_task_wait_fd(L, fd, ev, ms);
  if (*fdp != fd) return -1;
  return r > 0;
}

/* Fills a for an IP literal: "1.2.3.4", "::1" or "[::1]". Returns the
** address length, or 0 if host is not a literal. */
static socklen_t ip_literal(const char *host, int port, union addr *a)
{
  char buf[INET6_ADDRSTRLEN + 1];
  size_t n = strlen(host);
  memset(a, 0, sizeof *a);
  if (inet_pton(AF_INET, host, &a->in.sin_addr) == 1) {
    a->in.sin_family = AF_INET;
    a->in.sin_port = htons((uint16_t)port);
    return sizeof a->in;
  }
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof buf) {
    memcpy(buf, host + 1, n - 2);
    buf[n - 2] = '\0';
    host = buf;
  }
  if (inet_pton(AF_INET6, host, &a->in6.sin6_addr) == 1) {
    a->in6.sin6_family = AF_INET6;
    a->in6.sin6_port = htons((uint16_t)port);
    return sizeof a->in6;
  }
  return 0;
}

/* Fills a for "unix:/path" (the prefix already skipped). 0 if too long. */
static socklen_t unix_addr(const char *path, union addr *a)
{
  size_t n = strlen(path);
  memset(a, 0, sizeof *a);
  if (n == 0 || n >= sizeof a->un.sun_path) return 0;
  a->un.sun_family = AF_UNIX;
  memcpy(a->un.sun_path, path, n + 1);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

/* Yields: getaddrinfo's hook runs it on the thread pool. Resolves host for
** socktype; on failure pushes nil and OpenResty's resolver message (with
** nginx's resolver codes: 3 for a name that does not exist, 2 otherwise)
** and returns NULL. Free the result with freeaddrinfo. */
static struct addrinfo *resolve(lua_State *L, const char *host, int port, int socktype, int passive)
{
  struct addrinfo hints, *res = NULL;
  char serv[8];
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  snprintf(serv, sizeof serv, "%d", port);
  int r = getaddrinfo(host, serv, &hints, &res);
  if (r == 0 && res) return res;
  lua_pushnil(L);
  if (r == EAI_NONAME || r == EAI_NODATA)
    lua_pushfstring(L, "%s could not be resolved (3: Host not found)", host);
  else if (r == EAI_AGAIN)
    lua_pushfstring(L, "%s could not be resolved (2: Server failure)", host);
  else
    lua_pushfstring(L, "%s could not be resolved (2: %s)", host, gai_strerror(r));
  return NULL;
}

static void free_ai(struct addrinfo **res)
{
  if (*res) freeaddrinfo(*res);
}

static void nodelay(int fd)
{
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Pushes "ip:port" ("[ip]:port" for IPv6, "unix:path" for unix). Out of
** line: inlined, its buffer would sit in conn_main's frame under every
** parked handler (COPY mode saves it, docs/stacks.md). */
static __attribute__((noinline)) void push_peer(lua_State *L, const union addr *a)
{
  char ip[INET6_ADDRSTRLEN];
  switch (a->sa.sa_family) {
  case AF_INET:
    inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof ip);
    lua_pushfstring(L, "%s:%d", ip, (int)ntohs(a->in.sin_port));
    break;
  case AF_INET6:
    inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof ip);
    lua_pushfstring(L, "[%s]:%d", ip, (int)ntohs(a->in6.sin6_port));
    break;
  case AF_UNIX:
    lua_pushfstring(L, "unix:%s", a->un.sun_path);
    break;
  default:
    lua_pushliteral(L, "");
  }
}

/* Pushes host, port (2 values) for IP addresses, "unix:path" (1) else. */
static int push_hostport(lua_State *L, const union addr *a)
{
  char ip[INET6_ADDRSTRLEN];
  switch (a->sa.sa_family) {
  case AF_INET:
    lua_pushstring(L, inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof ip));
    lua_pushinteger(L, ntohs(a->in.sin_port));
    return 2;
  case AF_INET6:
    lua_pushstring(L, inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof ip));
    lua_pushinteger(L, ntohs(a->in6.sin6_port));
    return 2;
  default:
    lua_pushfstring(L, "unix:%s", a->un.sun_path);
    return 1;
  }
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
static const char *payload(lua_State *L, int idx, size_t *len)
{
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

struct tcp {
  int fd;                   /* -1 when not connected */
  int connect_ms;           /* timeouts in ms, > 0 */
  int send_ms;
  int read_ms;
  int reused;               /* times this connection came from a pool */
  int pool_size;            /* opts.pool_size of the last connect; 0: default */
  char *key;                /* pool key of the connection (malloc), or NULL */
  char *buf;                /* receive buffer (malloc); NULL while drained,
                            ** so an idle connection holds no buffer */
  size_t start, end, cap;   /* unread data is buf[start, end) */
  uint8_t reading;          /* busy flags: a task is inside that operation */
  uint8_t writing;
  uint8_t connecting;
  uint8_t read_closed;      /* OpenResty's half states: a read error closes */
  uint8_t write_closed;     /* the read part, a write error the write part */
  uint8_t eof;              /* the peer closed its side */
  uint8_t downstream;       /* accepted by a listener: no pool key */
  SSL *ssl;                 /* after sslhandshake (or a TLS listener's
                            ** handshake, or a pooled TLS connection):
                            ** all I/O goes through it; else NULL */
};

/* This worker's TCP metatable, for the fast check below. One lua_State
** per worker thread; the registry anchors the table, and LuaJIT's GC
** never moves objects, so the pointer is stable. */
static __thread const void *tcp_mt;

/* luaL_checkudata finds the metatable by name, interning the name and
** reading the registry on every call (about 150 instructions, twice per
** echoed message); comparing metatable pointers costs a few. */
static struct tcp *check_tcp(lua_State *L)
{
  struct tcp *u = lua_touserdata(L, 1);
  if (u && lua_getmetatable(L, 1)) {
    int ok = lua_topointer(L, -1) == tcp_mt;
    lua_pop(L, 1);
    if (ok) return u;
  }
  return luaL_checkudata(L, 1, TCP_MT);   /* raises the usual error */
}

static struct tcp *push_tcp(lua_State *L)
{
  struct tcp *u = lua_newuserdata(L, sizeof *u);
  memset(u, 0, sizeof *u);
  u->fd = -1;
  u->connect_ms = u->send_ms = u->read_ms = TIMEOUT_MS;
  luaL_getmetatable(L, TCP_MT);
  lua_setmetatable(L, -2);
  return u;
}

/* Buffers a drained socket let go of, kept for the next reader on this
** worker: every echoed message parks without its buffer (so an idle
** connection holds none) and needs one back, and the cache spares a
** malloc and free per message. Bounded: at most BUF_CACHE buffers of at
** most BUF_KEEP bytes. */
#define BUF_CACHE 16
static __thread struct { char *buf; size_t cap; } buf_cache[BUF_CACHE];
static __thread int buf_cached;

static void drop_buf(struct tcp *u)
{
  if (u->buf && u->cap <= BUF_KEEP && buf_cached < BUF_CACHE) {
    buf_cache[buf_cached].buf = u->buf;
    buf_cache[buf_cached].cap = u->cap;
    buf_cached++;
  } else {
    free(u->buf);
  }
  u->buf = NULL;
  u->start = u->end = u->cap = 0;
}

/* A cached buffer of at least want bytes, or a new one of cap bytes. */
static char *take_buf(size_t want, size_t *cap)
{
  for (int i = buf_cached; i-- > 0;)
    if (buf_cache[i].cap >= want) {
      char *b = buf_cache[i].buf;
      *cap = buf_cache[i].cap;
      buf_cache[i] = buf_cache[--buf_cached];
      return b;
    }
  return malloc(*cap);
}

/* Closes u's connection without waiting. A reader or writer parked on it
** wakes with POLLNVAL, finds fd < 0 and returns "closed"; a reader still
** owns the buffer then, and frees it itself. */
static void finalize(struct tcp *u)
{
  if (u->fd >= 0) {
    int fd = u->fd;
    u->fd = -1;
    ch_tls_free(u->ssl, 1);
    close(fd);
  } else {
    ch_tls_free(u->ssl, 0);
  }
  u->ssl = NULL;
  if (!u->reading) drop_buf(u);
  free(u->key);
  u->key = NULL;
  u->read_closed = u->write_closed = u->eof = 0;
}

static void read_close(struct tcp *u)
{
  u->read_closed = 1;
  drop_buf(u);
  if (u->write_closed) finalize(u);
}

static void write_close(struct tcp *u)
{
  u->write_closed = 1;
  if (u->read_closed) finalize(u);
}

static int closed(lua_State *L)
{
  return fail(L, "closed");
}

/* Makes room for at least want more bytes after u->end: compacts the
** buffer or doubles it. Returns 0 or -ENOMEM. O(unread) when it moves. */
static int reserve(struct tcp *u, size_t want)
{
  size_t used = u->end - u->start;
  if (!u->buf) {
    size_t cap = want > BUF_MIN ? want : BUF_MIN;
    if (!(u->buf = take_buf(want, &cap))) return -ENOMEM;
    u->start = u->end = 0;
    u->cap = cap;
    return 0;
  }
  if (u->cap - u->end >= want) return 0;
  if (u->start > 0) {
    memmove(u->buf, u->buf + u->start, used);
    u->start = 0;
    u->end = used;
    if (u->cap - u->end >= want) return 0;
  }
  size_t cap = u->cap * 2;
  while (cap - used < want) cap *= 2;
  char *b = realloc(u->buf, cap);
  if (!b) return -ENOMEM;
  u->buf = b;
  u->cap = cap;
  return 0;
}

/* The unread data; never NULL (a drained socket has no buffer). */
static char *unread(struct tcp *u)
{
  static char none[1];
  return u->buf ? u->buf + u->start : none;
}

static void consume(struct tcp *u, size_t n)
{
  u->start += n;
  if (u->start == u->end) {
    u->start = u->end = 0;
    if (u->cap > BUF_KEEP) drop_buf(u);
  }
}

/* Accounts a read of n >= 0 bytes into u's buffer (0: EOF); returns n. */
static inline ssize_t took(struct tcp *u, ssize_t n)
{
  if (n > 0) u->end += (size_t)n;
  else u->eof = 1;
  return n;
}

/* fill's reading part: one read into u's buffer, making room for want.
** Returns bytes read (> 0), 0 at EOF, -EAGAIN when there is nothing to
** read yet (*ev: the readiness to wait for), or -errno. Out of line, so
** that its locals are not in fill's frame while fill is parked (COPY mode
** saves that frame for every idle connection, docs/stacks.md). */
static __attribute__((noinline)) ssize_t fill_once(struct tcp *u, size_t want, int waited, int *ev)
{
  for (;;) {
    if (u->ssl) {
      /* Always SSL_read: it may hold decrypted bytes (SSL_pending) that
      ** no input edge will announce, so the drained bookkeeping of
      ** ch_fd_try_read does not apply. WANT_* means the socket said
      ** EAGAIN, so the edge-triggered wait below is sound. */
      if (reserve(u, want) < 0) return -ENOMEM;
      ssize_t n = ch_tls_read(u->ssl, u->buf + u->end, u->cap - u->end, ev);
      return n >= 0 ? took(u, n) : n;   /* -EAGAIN included */
    }
    /* After a short read, wait for the next input edge rather than make a
    ** recv that can only say EAGAIN (see ch_fd_try_read). After a wait,
    ** always try: a wait that had to block in poll(2) (a finalizer) saw
    ** readiness that epoll never reported. */
    if (!ch_fd_try_read(u->fd) && !waited) return -EAGAIN;
    if (reserve(u, want) < 0) return -ENOMEM;
    size_t room = u->cap - u->end;
    ssize_t n = recv(u->fd, u->buf + u->end, room, 0);
    int e = errno;
    ch_fd_read_result(u->fd, n < 0 ? (e == EAGAIN || e == EWOULDBLOCK) : (size_t)n < room);
    if (n >= 0) return took(u, n);
    if (e == EINTR) continue;
    return e == EWOULDBLOCK ? -EAGAIN : -e;
  }
}

/* Yields. Reads what the kernel has into u's buffer, waiting up to the
** read timeout for at least one byte. want is the free space to make room
** for. Returns bytes read (> 0), 0 at EOF, or -errno: -ETIMEDOUT, -EBADF
** when the socket was closed meanwhile, -ENOMEM, or the recv error. */
static ssize_t fill(lua_State *L, struct tcp *u, size_t want)
{
  int waited = 0, ev = POLLIN;
  for (;;) {
    ssize_t n = fill_once(u, want, waited, &ev);
    if (n != -EAGAIN) return n;
    if (u->start == u->end) drop_buf(u);   /* park without a buffer */
    int r = wait_io(L, &u->fd, ev, u->read_ms);
    if (r < 0) return -EBADF;
    if (r == 0) return -ETIMEDOUT;
    waited = 1;
  }
}

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
** -errno from fill. */
static int read_fail(lua_State *L, struct tcp *u, ssize_t err, const char *p, size_t len,
                     size_t consumed)
{
  lua_pushnil(L);
  if (err == 0 || err == -EBADF) lua_pushliteral(L, "closed");
  else push_errstr(L, (int)-err);
  lua_pushlstring(L, p, len);
  if (err == -ETIMEDOUT) consume(u, consumed);
  else if (u->fd < 0) drop_buf(u);   /* closed under us: ours to free */
  else read_close(u);
  return 3;
}

/* Common checks of every read: returns 0 to go on, else the number of
** values pushed. */
static int read_check(lua_State *L, struct tcp *u)
{
  if (u->fd < 0 || u->read_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  return 0;
}

/* Yields. receive("*l"): a line without its LF, every CR dropped. */
static int read_line(lua_State *L, struct tcp *u)
{
  size_t scanned = 0;
  for (;;) {
    char *p = unread(u);
    size_t avail = u->end - u->start;
    char *nl = avail > scanned ? memchr(p + scanned, '\n', avail - scanned) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - p);
      lua_pushlstring(L, p, strip_cr(p, n));
      consume(u, n + 1);
      return 1;
    }
    scanned = avail;
    ssize_t r = u->eof ? 0 : fill(L, u, READ_CHUNK);
    if (r <= 0) {
      p = unread(u);
      avail = u->end - u->start;
      return read_fail(L, u, r, p, avail ? strip_cr(p, avail) : 0, avail);
    }
  }
}

/* Yields. receive("*a"): everything up to EOF; "" once at EOF. */
static int read_all(lua_State *L, struct tcp *u)
{
  for (;;) {
    size_t avail = u->end - u->start;
    if (u->eof) {
      lua_pushlstring(L, unread(u), avail);
      consume(u, avail);
      return 1;
    }
    ssize_t r = fill(L, u, avail > BUF_MIN ? avail : BUF_MIN);   /* doubles */
    if (r < 0) return read_fail(L, u, r, unread(u), u->end - u->start, u->end - u->start);
  }
}

/* Yields. receive(n): exactly n bytes. */
static int read_bytes(lua_State *L, struct tcp *u, size_t n)
{
  for (;;) {
    size_t avail = u->end - u->start;
    if (avail >= n) {
      lua_pushlstring(L, unread(u), n);
      consume(u, n);
      return 1;
    }
    size_t want = n - avail;
    if (want > BUF_KEEP) want = BUF_KEEP;   /* grow as data comes, not up front */
    if (want < READ_CHUNK) want = READ_CHUNK;
    ssize_t r = u->eof ? 0 : fill(L, u, want);
    if (r <= 0) return read_fail(L, u, r, unread(u), u->end - u->start, u->end - u->start);
  }
}

/* Yields. receive([pattern]): "*l" (the default), "*a" or a byte count.
** Returns the data, or nil, err, partial. */
static int tcp_receive(lua_State *L)
{
  struct tcp *u = check_tcp(L);
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
  struct tcp *u = check_tcp(L);
  int n = lua_gettop(L), r;
  if (n != 2) return luaL_error(L, "expecting 2 arguments (including the object), but got %d", n);
  if ((r = read_check(L, u))) return r;
  if (!lua_isnumber(L, 2) || lua_tonumber(L, 2) < 1) return luaL_argerror(L, 2, "bad max argument");
  lua_Number m = lua_tonumber(L, 2);
  size_t max = m > (lua_Number)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)m;
  BUSY(&u->reading);
  for (;;) {
    size_t avail = u->end - u->start;
    if (avail) {
      if (avail > max) avail = max;
      lua_pushlstring(L, unread(u), avail);
      consume(u, avail);
      return 1;
    }
    ssize_t got = u->eof ? 0 : fill(L, u, max < ANY_CHUNK ? max : ANY_CHUNK);
    if (got <= 0) return read_fail(L, u, got, "", 0, 0);
  }
}

/* -- receiveuntil --------------------------------------------------------- */

struct until {
  uint8_t inclusive;        /* return the pattern with the data */
  uint8_t done;             /* size mode consumed the pattern: the next call
                            ** returns nil and starts over */
};

/* Length of the longest tail of p[0, n) that is a head of the pattern:
** those bytes may still turn out to be the pattern. O(plen^2), and plen is
** a boundary string. */
static size_t pattern_tail(const char *p, size_t n, const char *pat, size_t plen)
{
  size_t k = n < plen - 1 ? n : plen - 1;
  for (; k > 0; k--)
    if (memcmp(p + n - k, pat, k) == 0) return k;
  return 0;
}

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
  struct tcp *u = lua_touserdata(L, lua_upvalueindex(1));
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
  size_t from = 0;   /* no match starts before this offset */
  for (;;) {
    const char *p = unread(u);
    size_t avail = u->end - u->start;
    const char *hit = avail - from >= plen ? memmem(p + from, avail - from, pat, plen) : NULL;
    if (hit) {
      size_t pos = (size_t)(hit - p);
      if (size && pos >= (size_t)size) {   /* the size-th byte comes first */
        lua_pushlstring(L, p, (size_t)size);
        consume(u, (size_t)size);
        return 1;
      }
      lua_pushlstring(L, p, st->inclusive ? pos + plen : pos);
      consume(u, pos + plen);
      if (size) st->done = 1;
      return 1;
    }
    size_t safe = avail - pattern_tail(p, avail, pat, plen);
    if (size && safe >= (size_t)size) {
      lua_pushlstring(L, p, (size_t)size);
      consume(u, (size_t)size);
      return 1;
    }
    from = safe;
    ssize_t got = u->eof ? 0 : fill(L, u, READ_CHUNK);
    if (got <= 0) {
      p = unread(u);
      avail = u->end - u->start;
      /* A timeout hands back the data that cannot be the pattern and keeps
      ** a possible head of it for the next call. */
      size_t part = got == -ETIMEDOUT ? from : avail;
      return read_fail(L, u, got, p, part, part);
    }
  }
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
  check_tcp(L);
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
static int write_fail(lua_State *L, struct tcp *u, int err)
{
  lua_pushnil(L);
  if (err == EBADF) lua_pushliteral(L, "closed");
  else push_errstr(L, err);
  if (u->fd >= 0) write_close(u);
  return 2;
}

/* Yields. send(data): all of it, or nil, err. Returns the byte count. */
static int tcp_send(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  int n = lua_gettop(L);
  if (n != 2) return luaL_error(L, "expecting 2 arguments (including the object), but got %d", n);
  if (u->fd < 0 || u->write_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->writing) return fail(L, "socket busy writing");
  size_t len;
  const char *p = payload(L, 2, &len);
  if (len == 0) {
    lua_pushinteger(L, 0);
    return 1;
  }
  BUSY(&u->writing);
  size_t off = 0;
  while (off < len) {
    if (u->ssl) {
      int ev;
      ssize_t w = ch_tls_write(u->ssl, p + off, len - off, &ev);
      if (w > 0) { off += (size_t)w; continue; }
      if (w != -EAGAIN) return write_fail(L, u, (int)-w);
      int r = wait_io(L, &u->fd, ev, u->send_ms);
      if (r <= 0) return write_fail(L, u, r < 0 ? EBADF : ETIMEDOUT);
      continue;
    }
    /* MSG_NOSIGNAL: a peer gone away is EPIPE here, never SIGPIPE. */
    ssize_t w = send(u->fd, p + off, len - off, MSG_NOSIGNAL);
    if (w >= 0) {
      off += (size_t)w;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return write_fail(L, u, errno);
    int r = wait_io(L, &u->fd, POLLOUT, u->send_ms);
    if (r <= 0) return write_fail(L, u, r < 0 ? EBADF : ETIMEDOUT);
  }
  lua_pushinteger(L, (lua_Integer)len);
  return 1;
}

/* shutdown("send"): sends FIN and closes the write part; reading goes on.
** (From OpenResty's stream module; the proxy uses it to pass half-closes
** on.) */
static int tcp_shutdown(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  const char *how = luaL_checkstring(L, 2);
  if (strcmp(how, "send") != 0) return luaL_argerror(L, 2, "bad shutdown argument");
  if (u->fd < 0 || u->write_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->writing) return fail(L, "socket busy writing");
  if (u->ssl) SSL_shutdown(u->ssl);   /* close_notify first; one attempt */
  if (shutdown(u->fd, SHUT_WR) < 0) {
    int err = errno;
    write_close(u);
    return fail_errno(L, err);
  }
  write_close(u);
  lua_pushinteger(L, 1);
  return 1;
}

/* -- Keepalive pools ------------------------------------------------------ */

/* One idle connection. Its timer closes it after the idle timeout; timer
** callbacks run on the scheduler's stack, so they only close fds. */
struct pool_item {
  struct ch_timer timer;    /* first: the callback finds the item from it */
  struct pool *pool;        /* owner */
  struct pool_item *prev, *next;  /* most recently used first */
  int fd;
  int reused;               /* the connection's getreusedtimes() so far */
  SSL *ssl;                 /* a TLS connection keeps its session state */
};

struct pool {
  struct pool *next;        /* the worker's pools */
  struct pool_item *head, *tail;
  int size;                 /* most idle connections kept */
  int count;                /* idle connections now */
  char key[];               /* "host:port", "unix:/path" or opts.pool */
};

/* This worker's pools. Lookup is O(pools): a worker talks to few peers.
** Empty pools are kept, so each keeps the size it was made with. */
static __thread struct pool *pools;

static struct pool *pool_find(const char *key)
{
  for (struct pool *p = pools; p; p = p->next)
    if (strcmp(p->key, key) == 0) return p;
  return NULL;
}

static void item_unlink(struct pool_item *it)
{
  struct pool *p = it->pool;
  if (it->prev) it->prev->next = it->next;
  else p->head = it->next;
  if (it->next) it->next->prev = it->prev;
  else p->tail = it->prev;
  p->count--;
}

/* Closes and frees an idle connection. Never yields. */
static void item_free(struct pool_item *it)
{
  ch_timer_stop(&it->timer);
  item_unlink(it);
  ch_tls_free(it->ssl, 0);
  close(it->fd);
  free(it);
}

static void item_expire(struct ch_timer *t)
{
  item_free((struct pool_item *)t);
}

/* True if fd has nothing to read and no EOF: a pooled connection the peer
** closed, or one with stray data, cannot be handed out (the check of
** ngx_http_lua_socket_keepalive_close_handler). */
static int quiet(int fd)
{
  char c;
  ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Takes the most recently used healthy connection of key's pool. Returns
** its fd (and *reused) or -1. */
static int pool_take(const char *key, int *reused, SSL **ssl)
{
  struct pool *p = pool_find(key);
  while (p && p->head) {
    struct pool_item *it = p->head;
    ch_timer_stop(&it->timer);
    item_unlink(it);
    int fd = it->fd, n = it->reused;
    SSL *s = it->ssl;
    free(it);
    if (quiet(fd)) {
      *reused = n;
      *ssl = s;
      return fd;
    }
    ch_tls_free(s, 0);
    close(fd);
  }
  return -1;
}

/* -- Connecting ----------------------------------------------------------- */

/* Yields. Connects a fresh non-blocking socket to a within the connect
** timeout. Returns 0 with u->fd set, or an errno (ETIMEDOUT on timeout). */
static int dial(lua_State *L, struct tcp *u, const struct sockaddr *sa, socklen_t len)
{
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  u->fd = fd;
  BUSY(&u->connecting);
  int err = 0;
  uint64_t deadline = ch_now_ns() + (uint64_t)u->connect_ms * 1000000u;
  while (connect(fd, sa, len) < 0) {
    err = errno;
    if (err == EAGAIN && sa->sa_family == AF_UNIX) {
      /* The listener's backlog is full and unix sockets give no readiness
      ** event for that: retry every 10 ms until the timeout. */
      if (ch_now_ns() >= deadline) { err = ETIMEDOUT; break; }
      if (ch_sleep_ms(10) < 0) ch_task_check_cancel(L);
      err = 0;
      continue;
    }
    if (err == EINPROGRESS || err == EINTR) {
      int r = wait_io(L, &u->fd, POLLOUT, u->connect_ms);
      socklen_t elen = sizeof err;
      if (r < 0) return EBADF;
      if (r == 0) err = ETIMEDOUT;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) err = errno;
    }
    break;
  }
  if (err) {
    u->fd = -1;
    close(fd);
    return err;
  }
  if (sa->sa_family != AF_UNIX) nodelay(fd);
  return 0;
}

/* Yields. connect(host, port [, opts]) or connect("unix:/path" [, opts]).
** A pooled connection for the key is reused first. Returns 1 or nil, err. */
static int tcp_connect(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  int n = lua_gettop(L);
  if (n < 2 || n > 4)
    return luaL_error(L, "expecting 2, 3, or 4 arguments (including the object), but seen %d", n);
  size_t hlen;
  const char *host = luaL_checklstring(L, 2, &hlen);
  const char *pool = NULL;
  int pool_size = 0;
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
    lua_getfield(L, n, "backlog");   /* accepted and ignored: no connect queue */
    if (lua_isnumber(L, -1) && lua_tointeger(L, -1) < 0)
      return luaL_argerror(L, n, lua_pushfstring(L, "bad \"backlog\" option value: %d",
                                                 (int)lua_tointeger(L, -1)));
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
  if (u->fd >= 0) {
    if (u->connecting) return fail(L, "socket busy connecting");
    if (u->reading) return fail(L, "socket busy reading");
    if (u->writing) return fail(L, "socket busy writing");
    if (u->downstream) return luaL_error(L, "attempt to re-connect a request socket");
  } else if (u->connecting) {
    return fail(L, "socket busy connecting");
  }
  finalize(u);   /* reconnecting closes the old connection, as in OpenResty */
  u->downstream = 0;
  u->reused = 0;
  u->pool_size = pool_size;
  /* The key: opts.pool, else "host:port", else "unix:/path". */
  if (!pool && !is_unix) pool = lua_pushfstring(L, "%s:%d", host, port);
  if (!(u->key = strdup(pool ? pool : host))) return fail(L, "no memory");
  SSL *ssl = NULL;
  int fd = pool_take(u->key, &u->reused, &ssl);
  if (fd >= 0) {
    u->fd = fd;
    u->ssl = ssl;
    u->reused++;
    lua_pushinteger(L, 1);
    return 1;
  }
  union addr a;
  socklen_t alen;
  int err;
  if (is_unix) {
    if (!(alen = unix_addr(host + 5, &a))) {
      finalize(u);
      return fail(L, "unix socket path too long");
    }
    err = dial(L, u, &a.sa, alen);
  } else if ((alen = ip_literal(host, port, &a))) {
    err = dial(L, u, &a.sa, alen);
  } else {
    /* Freed however we leave: a dial may raise "cancelled". */
    struct addrinfo *res __attribute__((cleanup(free_ai))) = resolve(L, host, port, SOCK_STREAM, 0);
    if (!res) {
      finalize(u);
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
    finalize(u);
    if (err == EBADF) return closed(L);
    return fail_errno(L, err);
  }
  lua_pushinteger(L, 1);
  return 1;
}

/* -- TLS ------------------------------------------------------------------ */

/* The SNI sent for a server_name: none for an IP literal. */
static const char *sni(const char *name)
{
  unsigned char ip[16];
  if (!name || inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1) return NULL;
  return name;
}

static int same_name(const char *a, const char *b)
{
  return (!a && !b) || (a && b && strcasecmp(a, b) == 0);
}

/* A string option of table t, or NULL. */
static const char *opt_str(lua_State *L, int t, const char *k)
{
  lua_getfield(L, t, k);
  const char *v = lua_tostring(L, -1);   /* anchored in t */
  lua_pop(L, 1);
  return v;
}

/* Pushes sslhandshake's success value: true when reused_session was
** false, else a session userdata (usable as reused_session) on box. */
static int push_session(lua_State *L, int want, struct ch_tls_sess *b)
{
  if (!want) {
    lua_pushboolean(L, 1);
    return 1;
  }
  struct ch_tls_sess **ud = lua_newuserdata(L, sizeof *ud);
  *ud = b;
  b->refs++;
  luaL_getmetatable(L, SESSION_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static void sess_drop(struct ch_tls_sess **b)
{
  ch_tls_sess_unref(*b);
}

static int session_gc(lua_State *L)
{
  struct ch_tls_sess **ud = luaL_checkudata(L, 1, SESSION_MT);
  ch_tls_sess_unref(*ud);
  *ud = NULL;
  return 0;
}

/* The CA bundle handshakes trust when they name none (set_default_ca):
** OpenResty's lua_ssl_trusted_certificate, for drivers that call
** sslhandshake without cohost's options. Per worker; "" is the system
** store. */
static __thread char default_ca[PATH_MAX];

/* set_default_ca(path | nil) */
static int sock_set_default_ca(lua_State *L)
{
  size_t n = 0;
  const char *path = luaL_optlstring(L, 1, "", &n);
  if (n >= sizeof default_ca) return luaL_argerror(L, 1, "path too long");
  memcpy(default_ca, path, n + 1);
  return 0;
}

/* Yields. sslhandshake(reused_session, server_name, verify
** [, send_status_req [, opts]]): OpenResty's client handshake within the
** connect timeout. opts (cohost's): ca_file (else the system store),
** cert and key (a client certificate). Returns a session, true (when
** reused_session is false), or nil, err: "handshake failed", "timeout",
** "closed", "20: unable to get local issuer certificate" (verify),
** "certificate host mismatch". A failure closes the connection. */
static int tcp_sslhandshake(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  int n = lua_gettop(L);
  if (n > 6) return luaL_error(L, "ngx.socket sslhandshake: expecting 1 ~ 6 arguments "
                                  "(including the object), but seen %d", n);
  lua_settop(L, 6);
  struct ch_tls_sess **given = NULL;
  if (!lua_isnil(L, 2) && !(lua_isboolean(L, 2) && !lua_toboolean(L, 2)))
    given = luaL_checkudata(L, 2, SESSION_MT);
  int want_session = !(lua_isboolean(L, 2) && !lua_toboolean(L, 2));
  const char *name = lua_isnil(L, 3) ? NULL : luaL_checkstring(L, 3);
  int verify = lua_toboolean(L, 4);
  const char *ca = NULL, *cert = NULL, *key = NULL;
  int t = lua_istable(L, 5) ? 5 : lua_istable(L, 6) ? 6 : 0;
  if (t) {
    ca = opt_str(L, t, "ca_file");
    cert = opt_str(L, t, "cert");
    key = opt_str(L, t, "key");
  }
  if (!ca && default_ca[0]) ca = default_ca;   /* lua_ssl_trusted_certificate */
  if (u->fd < 0) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  if (u->writing) return fail(L, "socket busy writing");
  if (u->downstream) return luaL_error(L, "attempt to do ssl handshake on a request socket");
  char err[256];
  if (u->ssl) {
    /* Handshaked already (a pooled TLS connection): as OpenResty, return
    ** at once, but only for the same peer name and verdict, since the pool
    ** key does not carry them. */
    const char *was = SSL_get_servername(u->ssl, TLSEXT_NAMETYPE_host_name);
    if (!same_name(was, sni(name))) return fail(L, "ssl connection was made for another server_name");
    if (verify && ch_tls_verify(u->ssl, name, err, sizeof err) < 0) return fail(L, err);
    struct ch_tls_sess *b = ch_tls_sess_new();
    if (!b) return fail(L, "no memory");
    ch_tls_sess_attach(b, u->ssl);
    int r = push_session(L, want_session, b);
    ch_tls_sess_unref(b);
    return r;
  }
  SSL_CTX *ctx = ch_tls_ctx_client(ca, cert, key, err, sizeof err);
  if (!ctx) return fail(L, err);
  SSL *ssl = ch_tls_new(ctx, u->fd, 0);
  /* Dropped however we leave: the handshake may raise "cancelled". */
  struct ch_tls_sess *b __attribute__((cleanup(sess_drop))) = ch_tls_sess_new();
  if (!ssl || !b) {
    ch_tls_free(ssl, 0);
    return fail(L, "no memory");
  }
  if (sni(name)) SSL_set_tlsext_host_name(ssl, name);   /* SNI carries names only (RFC 6066) */
  if (given && *given && (*given)->s) SSL_set_session(ssl, (*given)->s);
  ch_tls_sess_attach(b, ssl);   /* picks up a TLS 1.3 ticket later */
  int r;
  {
    BUSY(&u->connecting);
    u->ssl = ssl;
    r = ch_tls_handshake(L, ssl, &u->fd, u->connect_ms);
  }
  if (r == 0 && verify && ch_tls_verify(ssl, name, err, sizeof err) < 0) r = -EACCES;
  if (r < 0) {
    if (u->fd >= 0) finalize(u);   /* frees ssl */
    else if (u->ssl) { ch_tls_free(u->ssl, 0); u->ssl = NULL; }
    if (r == -EACCES) return fail(L, err);
    if (r == -EBADF) return closed(L);
    if (r == -ETIMEDOUT) return fail(L, "timeout");
    return fail(L, "handshake failed");
  }
  return push_session(L, want_session, b);
}

/* sslinfo() -> { protocol, cipher, session_reused, server_name,
** peer_subject, verify_result } for a TLS connection, or nil, err.
** cohost's own: what a spec or a handler checks after a handshake. */
static int tcp_sslinfo(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  if (u->fd < 0) return closed(L);
  if (!u->ssl) return fail(L, "not ssl");
  lua_createtable(L, 0, 6);
  lua_pushstring(L, SSL_get_version(u->ssl));
  lua_setfield(L, -2, "protocol");
  lua_pushstring(L, SSL_get_cipher_name(u->ssl));
  lua_setfield(L, -2, "cipher");
  lua_pushboolean(L, SSL_session_reused(u->ssl));
  lua_setfield(L, -2, "session_reused");
  const char *sn = SSL_get_servername(u->ssl, TLSEXT_NAMETYPE_host_name);
  if (sn) {
    lua_pushstring(L, sn);
    lua_setfield(L, -2, "server_name");
  }
  X509 *peer = SSL_get1_peer_certificate(u->ssl);
  if (peer) {
    char buf[256];
    X509_NAME_oneline(X509_get_subject_name(peer), buf, sizeof buf);
    lua_pushstring(L, buf);
    lua_setfield(L, -2, "peer_subject");
    X509_free(peer);
  }
  lua_pushinteger(L, SSL_get_verify_result(u->ssl));
  lua_setfield(L, -2, "verify_result");
  return 1;
}

/* setkeepalive([idle_ms [, pool_size]]): puts the connection in the
** worker's pool for its key and closes the Lua object. idle_ms 0 keeps it
** without limit. Returns 1 or nil, err. */
static int tcp_setkeepalive(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  int n = lua_gettop(L);
  if (n > 3)
    return luaL_error(L, "expecting 1 to 3 arguments (including the object), but got %d", n);
  if (u->fd < 0 || u->read_closed || u->write_closed) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  if (u->writing) return fail(L, "socket busy writing");
  if (u->start != u->end) return fail(L, "unread data in buffer");
  if (u->eof) return fail(L, "invalid connection");
  if (!u->key) return fail(L, "key not found");   /* accepted sockets have none */
  lua_Integer idle = n >= 2 && !lua_isnil(L, 2) ? luaL_checkinteger(L, 2) : KEEPALIVE_MS;
  if (idle < 0 || idle > INT_MAX) return luaL_argerror(L, 2, "bad timeout value");
  lua_Integer size = n >= 3 && !lua_isnil(L, 3) ? luaL_checkinteger(L, 3)
                   : u->pool_size ? u->pool_size : POOL_SIZE;
  if (size <= 0 || size > INT_MAX)
    return luaL_argerror(L, n, lua_pushfstring(L, "bad \"pool_size\" option value: %d", (int)size));
  struct ch_worker *w = ch_worker_self;
  if ((w && w->stopping) || !quiet(u->fd) || (u->ssl && SSL_pending(u->ssl))) {
    /* Shutting down: close instead, as OpenResty does while exiting. */
    int dubious = !(w && w->stopping);
    finalize(u);
    if (dubious) return fail(L, "connection in dubious state");
    lua_pushinteger(L, 1);
    return 1;
  }
  struct pool *p = pool_find(u->key);
  if (!p) {
    size_t klen = strlen(u->key);
    if (!(p = calloc(1, sizeof *p + klen + 1))) {
      finalize(u);
      return fail(L, "no memory");
    }
    memcpy(p->key, u->key, klen + 1);
    p->size = (int)size;
    p->next = pools;
    pools = p;
  } else if (p->count == 0) {
    /* An empty pool is as good as a new one (OpenResty frees a pool when
    ** its last connection goes): it takes this size. A later server on a
    ** reused port would otherwise inherit an old pool's size. */
    p->size = (int)size;
  }
  struct pool_item *it = calloc(1, sizeof *it);
  if (!it) {
    finalize(u);
    return fail(L, "no memory");
  }
  if (p->count >= p->size) item_free(p->tail);   /* the least recently used */
  it->pool = p;
  it->fd = u->fd;
  it->reused = u->reused;
  it->ssl = u->ssl;
  it->next = p->head;
  if (p->head) p->head->prev = it;
  else p->tail = it;
  p->head = it;
  p->count++;
  it->timer.weak = 1;   /* an idle connection never keeps a worker alive */
  if (idle > 0 && ch_timer_start(&it->timer, idle, item_expire) < 0) {
    item_free(it);
  }
  u->fd = -1;   /* the pool owns the fd (and the SSL) now */
  u->ssl = NULL;
  finalize(u);
  lua_pushinteger(L, 1);
  return 1;
}

static int tcp_getreusedtimes(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  if (u->fd < 0) return closed(L);
  lua_pushinteger(L, u->reused);
  return 1;
}

static int tcp_close(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  if (lua_gettop(L) != 1)
    return luaL_error(L, "expecting 1 argument (including the object) but seen %d", lua_gettop(L));
  if (u->fd < 0) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  if (u->writing) return fail(L, "socket busy writing");
  finalize(u);
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
  struct tcp *u = check_tcp(L);
  if (lua_gettop(L) != 2)
    return luaL_error(L, "settimeout: expecting 2 arguments (including the object) but seen %d",
                      lua_gettop(L));
  u->connect_ms = u->send_ms = u->read_ms = timeout_arg(L, 2);
  return 0;
}

static int tcp_settimeouts(lua_State *L)
{
  struct tcp *u = check_tcp(L);
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
  struct tcp *u = check_tcp(L);
  int i = option_arg(L, 2);
  if (i < 0) return 2;
  if (lua_isnoneornil(L, 3)) return fail(L, "missing the \"value\" argument");
  int v = lua_isboolean(L, 3) ? lua_toboolean(L, 3) : (int)luaL_checkinteger(L, 3);
  if (u->fd < 0) return closed(L);
  if (setsockopt(u->fd, options[i].level, options[i].opt, &v, sizeof v) < 0)
    return fail_errno(L, errno);
  lua_pushboolean(L, 1);
  return 1;
}

static int tcp_getoption(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  int i = option_arg(L, 2);
  if (i < 0) return 2;
  if (u->fd < 0) return closed(L);
  int v = 0;
  socklen_t len = sizeof v;
  if (getsockopt(u->fd, options[i].level, options[i].opt, &v, &len) < 0)
    return fail_errno(L, errno);
  lua_pushinteger(L, v);
  return 1;
}

/* getpeername(): ip, port; or the path for a unix socket. */
static int tcp_getpeername(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  union addr a;
  socklen_t len = sizeof a;
  if (u->fd < 0) return closed(L);
  memset(&a, 0, sizeof a);
  if (getpeername(u->fd, &a.sa, &len) < 0) return fail_errno(L, errno);
  if (a.sa.sa_family == AF_UNIX) {
    lua_pushstring(L, a.un.sun_path);
    return 1;
  }
  return push_hostport(L, &a);
}

/* Collected: closes without waiting (a finalizer may never park). */
static int tcp_gc(lua_State *L)
{
  struct tcp *u = lua_touserdata(L, 1);
  u->reading = 0;
  finalize(u);
  return 0;
}

static int tcp_tostring(lua_State *L)
{
  struct tcp *u = check_tcp(L);
  lua_pushfstring(L, "tcp socket (fd %d): %p", u->fd, (void *)u);
  return 1;
}

static int sock_tcp(lua_State *L)
{
  if (lua_gettop(L) != 0)
    return luaL_error(L, "expecting zero arguments, but got %d", lua_gettop(L));
  push_tcp(L);
  return 1;
}

/* -- UDP sockets ---------------------------------------------------------- */

struct udp {
  int fd;                   /* -1 until setpeername */
  int read_ms;              /* receive timeout, > 0 */
  uint8_t waiting;          /* a receive is parked: OpenResty's "socket busy" */
};

/* Datagrams land here before becoming strings: no stack pages or buffer
** per socket. A receive running inside a finalizer that fired during the
** copy would clobber it, hence the in-use flag. */
static __thread char *udp_buf;
static __thread int udp_buf_busy;

static struct udp *check_udp(lua_State *L)
{
  return luaL_checkudata(L, 1, UDP_MT);
}

static void udp_finalize(struct udp *u)
{
  if (u->fd >= 0) {
    int fd = u->fd;
    u->fd = -1;
    close(fd);
  }
}

/* Yields (name lookup). setpeername(host, port) or
** setpeername("unix:/path"): connects the datagram socket. */
static int udp_setpeername(lua_State *L)
{
  struct udp *u = check_udp(L);
  int n = lua_gettop(L);
  if (n != 2 && n != 3)
    return luaL_error(L, "expecting 2 or 3 arguments (including the object), but seen %d", n);
  size_t hlen;
  const char *host = luaL_checklstring(L, 2, &hlen);
  int is_unix = hlen >= 5 && strncasecmp(host, "unix:", 5) == 0;
  int port = 0;
  if (n == 3) {
    port = (int)luaL_checkinteger(L, 3);
    if (port < 0 || port > 65535) {
      lua_pushnil(L);
      lua_pushfstring(L, "bad port number: %d", port);
      return 2;
    }
  } else if (!is_unix) {
    return fail(L, "missing the port number");
  }
  if (u->waiting) return fail(L, "socket busy");
  udp_finalize(u);
  union addr a;
  socklen_t alen;
  struct addrinfo *res = NULL;
  if (is_unix) {
    if (!(alen = unix_addr(host + 5, &a))) return fail(L, "unix socket path too long");
  } else if (!(alen = ip_literal(host, port, &a))) {
    if (!(res = resolve(L, host, port, SOCK_DGRAM, 0))) return 2;
    memcpy(&a, res->ai_addr, res->ai_addrlen);
    alen = res->ai_addrlen;
    freeaddrinfo(res);
  }
  int fd = socket(a.sa.sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail_errno(L, errno);
  if (is_unix) {
    /* Autobind to an abstract name so the peer has somewhere to reply. */
    sa_family_t fam = AF_UNIX;
    if (bind(fd, (struct sockaddr *)&fam, sizeof fam) < 0) {
      int err = errno;
      close(fd);
      return fail_errno(L, err);
    }
  }
  if (connect(fd, &a.sa, alen) < 0) {
    int err = errno;
    close(fd);
    return fail_errno(L, err);
  }
  u->fd = fd;
  lua_pushinteger(L, 1);
  return 1;
}

/* Yields (only when the socket buffer is full). send(data): one datagram.
** Returns 1 or nil, err. */
static int udp_send(lua_State *L)
{
  struct udp *u = check_udp(L);
  if (lua_gettop(L) != 2)
    return luaL_error(L, "expecting 2 arguments (including the object), but got %d", lua_gettop(L));
  if (u->fd < 0) return closed(L);
  if (u->waiting) return fail(L, "socket busy");
  size_t len;
  const char *p = payload(L, 2, &len);
  for (;;) {
    ssize_t w = send(u->fd, p, len, MSG_NOSIGNAL);
    if (w >= 0) {
      if ((size_t)w != len) return fail(L, "partial write");
      lua_pushinteger(L, 1);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return fail_errno(L, errno);
    /* The socket buffer is full: rare for datagrams, wait a little. */
    int r = wait_io(L, &u->fd, POLLOUT, u->read_ms);
    if (r < 0) return closed(L);
    if (r == 0) return fail(L, "timeout");
  }
}

/* Yields. receive([size]): one datagram of at most size (65536) bytes.
** A timeout or an error leaves the socket open. */
static int udp_receive(lua_State *L)
{
  struct udp *u = check_udp(L);
  int n = lua_gettop(L);
  if (n != 1 && n != 2)
    return luaL_error(L, "expecting 1 or 2 arguments (including the object), but got %d", n);
  if (u->fd < 0) return closed(L);
  if (u->waiting) return fail(L, "socket busy");
  lua_Number s = luaL_optnumber(L, 2, UDP_MAX);
  size_t size = s < 0 || s > UDP_MAX ? UDP_MAX : (size_t)s;
  for (;;) {
    int own = udp_buf_busy;   /* we run inside a finalizer inside a copy */
    char *buf = own ? malloc(UDP_MAX) : udp_buf ? udp_buf : (udp_buf = malloc(UDP_MAX));
    if (!buf) return fail(L, "no memory");
    if (!own) udp_buf_busy = 1;
    ssize_t r = recv(u->fd, buf, size, 0);
    int err = errno;
    if (r >= 0) lua_pushlstring(L, buf, (size_t)r);   /* may run finalizers */
    if (own) free(buf);
    else udp_buf_busy = 0;
    if (r >= 0) return 1;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) return fail_errno(L, err);
    BUSY(&u->waiting);
    int w = wait_io(L, &u->fd, POLLIN, u->read_ms);
    if (w < 0) return closed(L);
    if (w == 0) return fail(L, "timeout");
  }
}

static int udp_settimeout(lua_State *L)
{
  struct udp *u = check_udp(L);
  if (lua_gettop(L) != 2)
    return luaL_error(L, "settimeout: expecting 2 arguments (including the object) but seen %d",
                      lua_gettop(L));
  lua_Number t = lua_tonumber(L, 2);
  u->read_ms = t >= 1 && t < 2147483648.0 ? (int)t : TIMEOUT_MS;
  return 0;
}

static int udp_close(lua_State *L)
{
  struct udp *u = check_udp(L);
  if (u->fd < 0) return closed(L);
  if (u->waiting) return fail(L, "socket busy");
  udp_finalize(u);
  lua_pushinteger(L, 1);
  return 1;
}

static int udp_gc(lua_State *L)
{
  udp_finalize(lua_touserdata(L, 1));
  return 0;
}

static int udp_tostring(lua_State *L)
{
  struct udp *u = check_udp(L);
  lua_pushfstring(L, "udp socket (fd %d): %p", u->fd, (void *)u);
  return 1;
}

static int sock_udp(lua_State *L)
{
  if (lua_gettop(L) != 0)
    return luaL_error(L, "expecting zero arguments, but got %d", lua_gettop(L));
  struct udp *u = lua_newuserdata(L, sizeof *u);
  u->fd = -1;
  u->read_ms = TIMEOUT_MS;
  u->waiting = 0;
  luaL_getmetatable(L, UDP_MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* -- Listeners: process-wide coordination --------------------------------- */

/* Every worker runs the script's main chunk, so each calls listen() with
** the same arguments and binds its own socket (SO_REUSEPORT spreads
** connections between them). Two things need agreement between workers:
** the port a "port 0" listen got, and, for unix sockets, which cannot be
** bound twice, the one socket they all accept on (each worker gets a dup).
** Entries are keyed by the address string and by which listen() call with
** that string this was on its worker. */
struct shared {
  struct shared *next;
  int nth;                  /* nth listen() with addr on a worker */
  int port;                 /* the port the first worker got */
  int fd;                   /* unix: the socket every worker dups; or -1 */
  int users;                /* unix: listeners open on fd */
  int from_master;          /* unix: fd is the master's socket (--processes),
                            ** whose path the master unlinks, not us */
  char addr[];              /* the address as given */
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared *shared_list;   /* guarded by shared_lock; never shrinks */

/* Finds or makes (addr, nth). Call with shared_lock held. NULL on ENOMEM. */
static struct shared *shared_get(const char *addr, int nth, int *made)
{
  struct shared *s;
  for (s = shared_list; s; s = s->next)
    if (s->nth == nth && strcmp(s->addr, addr) == 0) {
      *made = 0;
      return s;
    }
  size_t n = strlen(addr);
  if (!(s = calloc(1, sizeof *s + n + 1))) return NULL;
  memcpy(s->addr, addr, n + 1);
  s->nth = nth;
  s->fd = -1;
  s->next = shared_list;
  shared_list = s;
  *made = 1;
  return s;
}

/* Per worker: how many times listen() saw each address string. */
struct seen {
  struct seen *next;
  int count;
  char addr[];
};
static __thread struct seen *seen_list;

static int seen_next(const char *addr)
{
  struct seen *s;
  for (s = seen_list; s; s = s->next)
    if (strcmp(s->addr, addr) == 0) return s->count++;
  size_t n = strlen(addr);
  if (!(s = malloc(sizeof *s + n + 1))) return 0;
  memcpy(s->addr, addr, n + 1);
  s->count = 1;
  s->next = seen_list;
  seen_list = s;
  return 0;
}

/* -- Listeners ------------------------------------------------------------ */

struct listener {
  int fd;                   /* listening socket; -1 once closed */
  int reserve;              /* /dev/null, given up to shed a connection
                            ** when accept says EMFILE; -1 if we have none */
  int handler;              /* registry ref of the handler function */
  int refs;                 /* the Lua object, the acceptor, each connection */
  struct ch_worker *w;      /* owner */
  struct shared *shared;    /* unix: the process-wide socket; else NULL */
  union addr addr;          /* bound address, for addr() */
  ch_admit_fn admit;        /* a C protocol's hand-off (lib_http.c), or
                            ** NULL: handler(sock, peer) on a task */
  void *admit_ud;           /* admit's first argument */
  int prio;                 /* CH_PRIO_* of its connections (opts.priority) */
  SSL_CTX *ssl_ctx;         /* opts.ssl_cert: TLS on every connection
                            ** (certificates loaded once, at listen) */
  struct listener *next;    /* this worker's open listeners */
};

/* The Lua object only points at the listener: collecting it does not stop
** listening, since scripts rarely keep what listen() returns. */
struct listener_ud {
  struct listener *l;
};

/* A connection on its way from the acceptor to its coroutine. */
struct conn {
  struct listener *l;
  int fd;
  union addr peer;
};

static __thread struct listener *listeners;   /* open ones */
static __thread int *dead_refs;   /* handler refs to drop when next in Lua */
static __thread int ndead, dead_cap;
static __thread uint64_t warned_ns;   /* last rate-limited warning */
static __thread int busy_n;           /* busy_main coroutines running */

/* Drops handler refs whose listener was freed where Lua may not run. */
static void drain_dead(lua_State *L)
{
  while (ndead > 0) luaL_unref(L, LUA_REGISTRYINDEX, dead_refs[--ndead]);
}

/* Drops one reference to l. L is a Lua state of this worker when the
** caller may call Lua, else NULL (the acceptor, a finalizer). */
static void release(struct listener *l, lua_State *L)
{
  if (--l->refs > 0) return;
  if (L) {
    luaL_unref(L, LUA_REGISTRYINDEX, l->handler);
  } else {
    if (ndead == dead_cap) {
      int cap = dead_cap ? dead_cap * 2 : 8;
      int *d = realloc(dead_refs, (size_t)cap * sizeof *d);
      if (d) { dead_refs = d; dead_cap = cap; }
    }
    if (ndead < dead_cap) dead_refs[ndead++] = l->handler;   /* else leak one ref */
  }
  SSL_CTX_free(l->ssl_ctx);   /* live SSLs hold their own reference */
  free(l);
}

static void listener_close(struct listener *l)
{
  if (l->fd < 0) return;
  for (struct listener **p = &listeners; *p; p = &(*p)->next)
    if (*p == l) { *p = l->next; break; }
  int fd = l->fd;
  l->fd = -1;
  close(fd);   /* wakes the acceptor with EBADF */
  if (l->reserve >= 0) close(l->reserve);
  l->reserve = -1;
  if (l->shared) {
    pthread_mutex_lock(&shared_lock);
    if (--l->shared->users == 0) {
      close(l->shared->fd);
      l->shared->fd = -1;
      if (!l->shared->from_master) unlink(l->addr.un.sun_path);
    }
    pthread_mutex_unlock(&shared_lock);
    l->shared = NULL;
  }
}

/* Logs at most once a second per worker. */
static int may_warn(void)
{
  uint64_t now = ch_now_ns();
  if (warned_ns && now - warned_ns < 1000000000u) return 0;
  warned_ns = now;
  return 1;
}

/* conn_main's first part: the handler's task, with handler, socket and
** peer pushed on its thread and, on a TLS listener, the handshake done
** (a failed one closes quietly; the reason is logged at info). Returns -1
** when no task could be made (the connection is closed and counted off
** then), 0 when the handshake failed, 1 when the handler is to run. */
static __attribute__((noinline)) int conn_open(struct conn *c, struct ch_task **tp, int *refp)
{
  struct listener *l = c->l;
  struct ch_worker *w = l->w;
  struct ch_task *t = ch_task_new(w, "handler");
  if (!t) {
    close(c->fd);
    free(c);
    w->connections--;
    release(l, NULL);
    return -1;
  }
  lua_State *T = t->T;
  drain_dead(T);
  lua_rawgeti(T, LUA_REGISTRYINDEX, l->handler);
  struct tcp *u = push_tcp(T);
  u->fd = c->fd;
  u->downstream = 1;
  if (c->peer.sa.sa_family != AF_UNIX) nodelay(c->fd);
  lua_pushvalue(T, -1);
  *refp = luaL_ref(T, LUA_REGISTRYINDEX);   /* keeps u past the handler */
  *tp = t;
  push_peer(T, &c->peer);
  free(c);
  if (l->ssl_ctx) {
    int r = -ENOMEM;
    if ((u->ssl = ch_tls_new(l->ssl_ctx, u->fd, 1)))
      r = ch_tls_handshake(NULL, u->ssl, &u->fd, u->read_ms);
    if (r < 0) {
      ch_log(CH_LOG_INFO, "tls: handshake with a client failed: %s",
             r == -EPROTO ? "see above" : strerror(-r));
      return 0;
    }
  }
  return 1;
}

/* conn_main's last part: closes the socket if the handler left it open
** (tasks it spawned that still use it see "closed"). */
static __attribute__((noinline)) void conn_close(struct listener *l, struct ch_task *t, int ref)
{
  lua_State *T = t->T;
  lua_rawgeti(T, LUA_REGISTRYINDEX, ref);
  struct tcp *u = lua_touserdata(T, -1);
  if (u->fd >= 0) finalize(u);
  lua_pop(T, 1);
  luaL_unref(T, LUA_REGISTRYINDEX, ref);
  l->w->connections--;
  release(l, T);
  ch_task_release(t);
}

/* Yields. A connection's coroutine: makes the handler's task, runs
** handler(sock, peer) on it, then closes the socket if the handler left it
** open. The parts before and after the run are out of line: this frame
** lies under the handler for the connection's life, and in COPY mode a
** parked handler's frames are its saved image (docs/stacks.md). */
static void conn_main(void *arg)
{
  struct conn *c = arg;
  struct listener *l = c->l;
  struct ch_task *t;
  int ref;
  int ok = conn_open(c, &t, &ref);
  if (ok < 0) return;
  if (ok) ch_task_run(t, 2);
  conn_close(l, t, ref);
}

static const char busy_reply[] =
  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
  "Content-Length: 24\r\nConnection: close\r\n\r\n503 Service Unavailable\n";

/* Yields. Answers a connection over --max-connections on an HTTP listener
** with a fixed 503, without parsing anything or running Lua, and closes
** it. The answer fits an empty send buffer, so one send does. Then, as
** lib_http.c's linger_close, it shuts down its side and reads what the
** client sends until it closes (at most BUSY_LINGER_MS and BUSY_DRAIN):
** closing with the request unread would send RST, which can destroy the
** 503 in the client's receive queue before it is read. */
static void busy_main(void *arg)
{
  int fd = (int)(intptr_t)arg;
  if (send(fd, busy_reply, sizeof busy_reply - 1, MSG_NOSIGNAL | MSG_DONTWAIT) > 0) {
    shutdown(fd, SHUT_WR);
    char junk[4096];
    uint64_t end = ch_now_ns() + (uint64_t)BUSY_LINGER_MS * 1000000u;
    size_t total = 0;
    for (;;) {
      ssize_t n = read(fd, junk, sizeof junk);
      if (n > 0) {
        if ((total += (size_t)n) > BUSY_DRAIN) break;
        continue;
      }
      if (n == 0 || errno != EAGAIN) break;
      uint64_t now = ch_now_ns();
      if (now >= end) break;
      if (ch_wait_fd_again(fd, POLLIN, (int64_t)((end - now) / 1000000u) + 1) <= 0) break;
    }
  }
  close(fd);
  busy_n--;
}

/* A connection over --max-connections: HTTP listeners (the one C protocol
** that admits through l->admit) answer 503 on a small coroutine, unless
** they speak TLS (the answer would need a handshake first) or BUSY_MAX
** answers are under way; everything else is closed at once. Logs once a
** second at most. */
static void refuse(struct listener *l, int fd)
{
  int answered = 0;
  if (l->admit && !l->ssl_ctx && busy_n < BUSY_MAX) {
    busy_n++;
    if (ch_spawn_prio(busy_main, (void *)(intptr_t)fd, l->prio) >= 0) answered = 1;
    else busy_n--;
  }
  if (!answered) close(fd);
  if (may_warn())
    ch_log(CH_LOG_WARN, "%d connections reached (--max-connections): %s new ones",
           ch_opts.max_connections, l->admit ? "answering 503 to" : "closing");
}

/* Hands a new connection to a coroutine of its own, or refuses it when
** the worker is at --max-connections. */
static void admit(struct listener *l, int fd, const union addr *peer)
{
  struct ch_worker *w = l->w;
  ch_stats_count_accept();
  if (ch_opts.max_connections > 0 && w->connections >= (uint64_t)ch_opts.max_connections) {
    refuse(l, fd);
    return;
  }
  if (l->admit) {
    l->refs++;
    w->connections++;
    l->admit(l->admit_ud, (struct ch_listener *)l, fd, &peer->sa);
    return;
  }
  struct conn *c = malloc(sizeof *c);
  if (!c) {
    close(fd);
    return;
  }
  c->l = l;
  c->fd = fd;
  c->peer = *peer;
  l->refs++;
  w->connections++;
  int id = ch_spawn_prio(conn_main, c, l->prio);
  if (id < 0) {
    w->connections--;
    l->refs--;
    close(fd);
    free(c);
    if (may_warn()) ch_log(CH_LOG_ERR, "accept: no coroutine for a connection: %s", strerror(-id));
  }
}

/* Yields (backing off). Out of fds: accept and close one pending
** connection with the fd kept for the purpose, as libev and libuv do.
** Linux says EMFILE before it looks for a connection, so at the limit
** accept never says EAGAIN and a plain retry would spin. Returns 1 if a
** connection was shed, 0 if none is pending. Without a reserve it backs
** off 100 ms. */
static int shed(struct listener *l, int err)
{
  if (may_warn())
    ch_log(CH_LOG_ERR, "accept: %s; closing new connections", strerror(err));
  if (l->reserve < 0) {
    ch_sleep_ms(100);
    l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 1;
  }
  close(l->reserve);
  int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) close(fd);
  l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0;
}

/* Yields. The acceptor: a plain C coroutine per listener that never
** touches Lua (it may not run finalizers). It accepts until the listener
** is closed or the worker stops, and yields every ACCEPT_BATCH
** connections so a flood cannot starve the handlers. */
static void acceptor(void *arg)
{
  struct listener *l = arg;
  struct ch_worker *w = l->w;
  int batch = 0;
  while (l->fd >= 0 && !w->stopping) {
    if (++batch == ACCEPT_BATCH) {
      batch = 0;
      ch_yield();
      continue;
    }
    union addr peer;
    socklen_t plen = sizeof peer;
    memset(&peer, 0, sizeof peer);   /* unnamed unix peers fill no path */
    int fd = accept4(l->fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(l, fd, &peer);
      continue;
    }
    int err = errno;
    switch (err) {
    case EMFILE:
    case ENFILE:
      if (shed(l, err)) break;
      /* Nothing pending: wait for the next connection. */
      /* fallthrough */
    case EAGAIN:
      batch = 0;
      if (ch_wait_fd_again(l->fd, POLLIN, -1) < 0) goto done;   /* -EBADF: closed */
      break;
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:   /* a firewall said no to this one */
      break;
    case EBADF:
    case EINVAL:
    case ENOTSOCK:
      goto done;
    default:   /* ENOBUFS, ENOMEM: wait for memory */
      if (may_warn()) ch_log(CH_LOG_ERR, "accept: %s", strerror(err));
      ch_sleep_ms(100);
    }
  }
done:
  listener_close(l);
  release(l, NULL);
}

/* Parses "host:port", "[v6]:port", "*:port", "port" or "unix:/path".
** Returns 1 with *host (in buf) and *port, 2 for unix with *host the
** path, 0 if malformed. */
static int parse_listen(const char *spec, char *buf, size_t bufsz, const char **host, int *port)
{
  if (strncasecmp(spec, "unix:", 5) == 0) {
    *host = spec + 5;
    return 2;
  }
  const char *colon = strrchr(spec, ':'), *ps;
  size_t hlen;
  if (spec[0] == '[') {
    const char *end = strchr(spec, ']');
    if (!end || end[1] != ':') return 0;
    hlen = (size_t)(end - spec - 1);
    spec++;
    ps = end + 2;
  } else if (colon) {
    hlen = (size_t)(colon - spec);
    ps = colon + 1;
  } else {
    hlen = 0;
    ps = spec;
  }
  if (hlen >= bufsz) return 0;
  memcpy(buf, spec, hlen);
  buf[hlen] = '\0';
  char *endp;
  long p = strtol(ps, &endp, 10);
  if (*ps == '\0' || *endp != '\0' || p < 0 || p > 65535) return 0;
  *host = buf;
  *port = (int)p;
  return 1;
}

/* Opens, binds and listens on a TCP socket for a; with port 0, agrees on
** the port with the other workers. Returns the fd or -errno. Never yields
** and never calls Lua while holding shared_lock. */
static int open_tcp(const char *spec, int nth, union addr *a, socklen_t alen, int backlog)
{
  int one = 1, err = 0, made = 0;
  int zero_port = (a->sa.sa_family == AF_INET ? a->in.sin_port : a->in6.sin6_port) == 0;
  struct shared *s = NULL;
  if (zero_port) {
    pthread_mutex_lock(&shared_lock);
    if (!(s = shared_get(spec, nth, &made))) {
      pthread_mutex_unlock(&shared_lock);
      return -ENOMEM;
    }
    /* A worker before us got the port; or, with --processes, the master
    ** reserved it for every process (master_listen.h). */
    int port = made ? ch_master_reserve_port(spec, nth, &a->sa, alen) : s->port;
    if (port < 0 && port != -ENOSYS) {
      s->nth = -1;   /* the next worker asks afresh */
      pthread_mutex_unlock(&shared_lock);
      return port;
    }
    if (port > 0) {
      if (a->sa.sa_family == AF_INET) a->in.sin_port = htons((uint16_t)port);
      else a->in6.sin6_port = htons((uint16_t)port);
    }
  }
  int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno;
  } else {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (a->sa.sa_family == AF_INET6)   /* nginx's ipv6only=on */
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, &a->sa, alen) < 0 || listen(fd, backlog) < 0) {
      err = errno;
    } else {
      socklen_t len = sizeof *a;
      getsockname(fd, &a->sa, &len);
    }
  }
  if (s) {
    if (made && !err)
      s->port = ntohs(a->sa.sa_family == AF_INET ? a->in.sin_port : a->in6.sin6_port);
    else if (made)   /* nobody got a port: the next worker tries afresh */
      s->nth = -1;
    pthread_mutex_unlock(&shared_lock);
  }
  if (err) {
    if (fd >= 0) close(fd);
    return -err;
  }
  return fd;
}

/* Binds the unix socket path once per process (with --processes, the
** master binds it once for all: master_listen.h); every other worker gets
** a dup of it. A stale socket file (nobody accepting) is removed first.
** Returns the fd or -errno. Never parks: the lock is held throughout. */
static int open_unix(const char *spec, int nth, const union addr *a, socklen_t alen, int backlog,
                     struct shared **sp)
{
  int made, err = 0, fd = -1;
  pthread_mutex_lock(&shared_lock);
  struct shared *s = shared_get(spec, nth, &made);
  if (!s) {
    err = ENOMEM;
  } else if (s->fd >= 0) {
    if ((fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0)) < 0) err = errno;
  } else {
    fd = ch_master_listen_unix(spec, nth, &a->un, alen, backlog);
    if (fd == -ENOSYS) fd = ch_listen_unix(&a->un, alen, backlog);   /* no master */
    else s->from_master = fd >= 0;
    if (fd < 0) err = -fd;
    else if ((s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) err = errno;
  }
  if (!err) {
    s->users++;
    *sp = s;
  }
  pthread_mutex_unlock(&shared_lock);
  if (err) {
    if (fd >= 0) close(fd);
    return -err;
  }
  return fd;
}

static void ctx_drop(SSL_CTX **ctx)
{
  SSL_CTX_free(*ctx);
}

/* Yields (name lookup). listen(addr, handler [, opts]) with each accepted
** connection going to admit (lib_http.c) instead of a handler task when
** admit is not NULL; the value at index 2 is anchored while the listener
** lives. */
static int listen_with(lua_State *L, ch_admit_fn on_conn, void *admit_ud)
{
  const char *spec = luaL_checkstring(L, 1);
  int backlog = BACKLOG;
  int prio = CH_PRIO_NORMAL;
  SSL_CTX *ssl_ctx = NULL;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "backlog");
    if (!lua_isnil(L, -1)) backlog = (int)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 3, "priority");   /* index = CH_PRIO_* */
    if (!lua_isnil(L, -1)) {
      static const char *const classes[] = { "high", "normal", "low", NULL };
      const char *name = lua_tostring(L, -1);
      for (prio = 0; classes[prio] && (!name || strcmp(name, classes[prio])); prio++) {}
      if (!classes[prio])
        return luaL_argerror(L, 3, "priority must be \"high\", \"normal\" or \"low\"");
    }
    lua_pop(L, 1);
    const char *cert = opt_str(L, 3, "ssl_cert"), *key = opt_str(L, 3, "ssl_key");
    if (cert) {
      char err[512];
      lua_getfield(L, 3, "ssl_verify_client");
      int verify_client = lua_toboolean(L, -1);
      lua_pop(L, 1);
      ssl_ctx = ch_tls_ctx_server(cert, key, opt_str(L, 3, "ssl_client_ca"), verify_client,
                                  err, sizeof err);
      if (!ssl_ctx) return fail(L, err);
    }
  }
  /* Freed on every early return below; handed to the listener at the end. */
  SSL_CTX *ctx_owned __attribute__((cleanup(ctx_drop))) = ssl_ctx;
  struct ch_worker *w = ch_worker_self;
  if (!w) return luaL_error(L, "listen: not on a worker");
  if (w->stopping) return fail(L, "shutting down");
  drain_dead(L);
  char hostbuf[256];
  const char *host;
  int port = 0;
  int kind = parse_listen(spec, hostbuf, sizeof hostbuf, &host, &port);
  if (!kind)
    return luaL_argerror(L, 1, "bad address (\"host:port\", \"[ipv6]:port\", \"*:port\" "
                               "or \"unix:/path\")");
  union addr a;
  socklen_t alen;
  if (kind == 2) {
    if (!(alen = unix_addr(host, &a))) return fail(L, "unix socket path too long");
  } else if (!host[0] || strcmp(host, "*") == 0) {
    memset(&a, 0, sizeof a);
    a.in.sin_family = AF_INET;
    a.in.sin_addr.s_addr = htonl(INADDR_ANY);
    a.in.sin_port = htons((uint16_t)port);
    alen = sizeof a.in;
  } else if (!(alen = ip_literal(host, port, &a))) {
    struct addrinfo *res = resolve(L, host, port, SOCK_STREAM, 1), *ai;
    if (!res) return 2;
    for (ai = res; ai->ai_next && ai->ai_family != AF_INET; ai = ai->ai_next) {}
    if (ai->ai_family != AF_INET) ai = res;   /* prefer IPv4, as "localhost" users expect */
    memcpy(&a, ai->ai_addr, ai->ai_addrlen);
    alen = ai->ai_addrlen;
    freeaddrinfo(res);
  }
  int nth = seen_next(spec);
  struct shared *shared = NULL;
  int fd = kind == 2 ? open_unix(spec, nth, &a, alen, backlog, &shared)
                     : open_tcp(spec, nth, &a, alen, backlog);
  if (fd < 0) return fail_errno(L, -fd);
  struct listener *l = calloc(1, sizeof *l);
  struct listener_ud *ud = lua_newuserdata(L, sizeof *ud);   /* may raise: l not yet live */
  if (!l) {
    close(fd);
    return fail(L, "no memory");
  }
  ud->l = NULL;
  luaL_getmetatable(L, LISTENER_MT);
  lua_setmetatable(L, -2);
  l->fd = fd;
  l->w = w;
  l->shared = shared;
  l->addr = a;
  l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  l->admit = on_conn;
  l->admit_ud = admit_ud;
  l->prio = prio;
  l->ssl_ctx = ctx_owned;
  ctx_owned = NULL;
  lua_pushvalue(L, 2);
  l->handler = luaL_ref(L, LUA_REGISTRYINDEX);
  l->refs = 2;   /* the Lua object and the acceptor */
  int id = ch_spawn_prio(acceptor, l, l->prio);   /* a high listener accepts first too */
  if (id < 0) {
    l->refs = 1;
    listener_close(l);
    release(l, L);
    return fail_errno(L, -id);
  }
  l->next = listeners;
  listeners = l;
  ud->l = l;
  return 1;
}

/* Yields (name lookup). listen(addr, handler [, opts]): accepts
** connections on addr and runs handler(sock, peer) for each on its own
** task. opts.backlog (511). Returns a listener or nil, err. */
static int sock_listen(lua_State *L)
{
  luaL_checktype(L, 2, LUA_TFUNCTION);
  return listen_with(L, NULL, NULL);
}

int ch_socket_listen_with(lua_State *L, ch_admit_fn on_conn, void *ud)
{
  return listen_with(L, on_conn, ud);
}

void ch_listener_conn_end(struct ch_listener *cl)
{
  struct listener *l = (struct listener *)cl;
  l->w->connections--;
  release(l, NULL);
}

int ch_listener_prio(const struct ch_listener *cl)
{
  return ((const struct listener *)cl)->prio;
}

SSL_CTX *ch_listener_ssl_ctx(const struct ch_listener *cl)
{
  return ((const struct listener *)cl)->ssl_ctx;
}

void ch_socket_push_conn(lua_State *L, int fd, const char *pre, size_t n)
{
  ch_socket_push_tls(L, fd, NULL, pre, n);
}

void ch_socket_push_tls(lua_State *L, int fd, SSL *ssl, const char *pre, size_t n)
{
  struct tcp *u = push_tcp(L);
  u->ssl = ssl;   /* owned from here on, freed with u's connection */
  if (n > 0) {
    size_t cap = n > BUF_MIN ? n : BUF_MIN;
    if (!(u->buf = take_buf(n, &cap))) {
      ch_tls_free(ssl, 0);
      u->ssl = NULL;
      close(fd);
      luaL_error(L, "no memory");
    }
    memcpy(u->buf, pre, n);
    u->start = 0;
    u->end = n;
    u->cap = cap;
  }
  u->fd = fd;
  u->downstream = 1;
}

void ch_socket_close_at(lua_State *L, int idx)
{
  struct tcp *u = lua_touserdata(L, idx);
  if (!u || !lua_getmetatable(L, idx)) return;
  int ok = lua_topointer(L, -1) == tcp_mt;
  lua_pop(L, 1);
  if (ok && u->fd >= 0) finalize(u);
}

static struct listener *check_listener(lua_State *L)
{
  struct listener_ud *ud = luaL_checkudata(L, 1, LISTENER_MT);
  if (!ud->l) luaL_argerror(L, 1, "dead listener");
  return ud->l;
}

static int listener_lclose(lua_State *L)
{
  struct listener *l = check_listener(L);
  if (l->fd < 0) return closed(L);
  listener_close(l);
  lua_pushinteger(L, 1);
  return 1;
}

/* addr(): host, port as bound (the real port when 0 was asked), or
** "unix:/path". */
static int listener_addr(lua_State *L)
{
  return push_hostport(L, &check_listener(L)->addr);
}

static int listener_gc(lua_State *L)
{
  struct listener_ud *ud = lua_touserdata(L, 1);
  if (ud->l) release(ud->l, NULL);   /* no registry changes in finalizers */
  ud->l = NULL;
  return 0;
}

static int listener_tostring(lua_State *L)
{
  struct listener *l = check_listener(L);
  lua_pushfstring(L, "listener (fd %d): %p", l->fd, (void *)l);
  return 1;
}

void ch_socket_close_listeners(struct ch_worker *w)
{
  (void)w;   /* the list is this thread's: w must be ch_worker_self */
  while (listeners) listener_close(listeners);
}

/* Connections the kernel queued on a listener that is about to close. */
struct queued {
  struct listener *l;       /* holds a reference until admitted */
  int fd;
  union addr peer;
};

#define QUEUED_MAX 4096     /* taken off all listeners at most; the rest
                            ** are reset with the listener */

/* Accepts what is already queued on w's listeners, each holding a ref on
** its listener; returns how many (q grows as needed, *q may be NULL). A
** listener that shares its port with another process (SO_REUSEPORT, a
** reload's new workers) resets its queued connections when it closes:
** Linux does not move them to the other sockets (unless the
** net.ipv4.tcp_migrate_req sysctl is on), so a drain serves them here. */
static int take_queued(struct queued **q)
{
  int n = 0, cap = 0;
  for (struct listener *l = listeners; l; l = l->next) {
    while (n < QUEUED_MAX) {
      union addr peer;
      socklen_t plen = sizeof peer;
      memset(&peer, 0, sizeof peer);
      int fd = accept4(l->fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;   /* EAGAIN: none left; anything else: give up */
      if (n == cap) {
        int ncap = cap ? cap * 2 : 16;
        struct queued *g = realloc(*q, (size_t)ncap * sizeof *g);
        if (!g) { close(fd); break; }
        *q = g;
        cap = ncap;
      }
      (*q)[n].l = l;
      (*q)[n].fd = fd;
      (*q)[n].peer = peer;
      l->refs++;
      n++;
    }
  }
  return n;
}

void ch_socket_close_all(struct ch_worker *w)
{
  struct queued *q = NULL;
  int n = w->stopping ? take_queued(&q) : 0;
  ch_socket_close_listeners(w);
  /* Each is served like any other during a drain (HTTP: the idle grace of
  ** ch_http_close_idle, one request, then Connection: close). */
  for (int i = 0; i < n; i++) {
    admit(q[i].l, q[i].fd, &q[i].peer);
    release(q[i].l, NULL);
  }
  free(q);
  ch_http_close_idle(w);
  for (struct pool *p = pools; p; p = p->next)
    while (p->head) item_free(p->head);
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
  { "sslhandshake", tcp_sslhandshake },
  { "sslinfo", tcp_sslinfo },
  { "__gc", tcp_gc },
  { "__tostring", tcp_tostring },
  { NULL, NULL }
};

static const luaL_Reg udp_methods[] = {
  { "setpeername", udp_setpeername },
  { "send", udp_send },
  { "receive", udp_receive },
  { "settimeout", udp_settimeout },
  { "close", udp_close },
  { "__gc", udp_gc },
  { "__tostring", udp_tostring },
  { NULL, NULL }
};

static const luaL_Reg listener_methods[] = {
  { "close", listener_lclose },
  { "addr", listener_addr },
  { "__gc", listener_gc },
  { "__tostring", listener_tostring },
  { NULL, NULL }
};

static const luaL_Reg socket_funcs[] = {
  { "tcp", sock_tcp },
  { "set_default_ca", sock_set_default_ca },
  { "udp", sock_udp },
  { "listen", sock_listen },
  { NULL, NULL }
};

static void new_class(lua_State *L, const char *name, const luaL_Reg *methods)
{
  luaL_newmetatable(L, name);
  luaL_register(L, NULL, methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

int luaopen_cohost_core_socket(lua_State *L)
{
  new_class(L, TCP_MT, tcp_methods);
  luaL_getmetatable(L, TCP_MT);
  tcp_mt = lua_topointer(L, -1);
  lua_pop(L, 1);
  new_class(L, UDP_MT, udp_methods);
  new_class(L, LISTENER_MT, listener_methods);
  luaL_newmetatable(L, SESSION_MT);
  lua_pushcfunction(L, session_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, socket_funcs);
  return 1;
}
