/*
** cohost.core.udp: UDP cosockets for Lua, after OpenResty's
** ngx.socket.udp (setpeername, send, receive, settimeout, close).
** Datagrams go through io.c directly: no stream, no buffer per socket.
*/
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "vm/task.h"
#include "lib.h"
#include "lib_socket.h"
#include "net/addr.h"

#ifndef __EXCEPTIONS
#error "lib_udp.c must be built with -fexceptions"
#endif

#define UDP_MT      "cohost.udp"
#define TIMEOUT_MS  60000         /* lua_socket_read_timeout */
#define UDP_MAX     65536         /* OpenResty's UDP_MAX_DATAGRAM_SIZE */

#define fail ch_lib_fail
#define fail_errno ch_lib_fail_errno
#define BUSY CH_LIB_BUSY

static int closed(lua_State *L)
{
  return fail(L, "closed");
}

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
  union ch_addr a;
  socklen_t alen;
  struct addrinfo *res = NULL;
  if (is_unix) {
    if (!(alen = ch_addr_unix(host + 5, &a))) return fail(L, "unix socket path too long");
  } else if (!(alen = ch_addr_ip(host, port, &a))) {
    int gai = ch_addr_resolve(host, port, SOCK_DGRAM, 0, &res);
    if (gai) {
      lua_pushnil(L);
      lua_pushfstring(L, "%s could not be resolved (%s)", host, ch_addr_resolve_error(gai));
      return 2;
    }
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
  const char *p = ch_socket_payload(L, 2, &len);
  /* Waits only when the socket buffer is full: rare for datagrams. */
  ssize_t w = ch_io_write(u->fd, p, len, u->read_ms);
  if (w == -ECANCELED) ch_task_check_cancel(L);
  if (w == -EBADF) return closed(L);
  if (w == -ETIMEDOUT) return fail(L, "timeout");
  if (w < 0) return fail_errno(L, (int)-w);
  if ((size_t)w != len) return fail(L, "partial write");
  lua_pushinteger(L, 1);
  return 1;
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
    ssize_t r = ch_io_read(u->fd, buf, size, 0);
    if (r >= 0) lua_pushlstring(L, buf, (size_t)r);   /* may run finalizers */
    if (own) free(buf);
    else udp_buf_busy = 0;
    if (r >= 0) return 1;
    if (r != -EAGAIN) return fail_errno(L, (int)-r);
    /* Parked without the shared buffer, which others may use meanwhile. */
    BUSY(&u->waiting);
    int fd = u->fd;
    int w = ch_io_wait(fd, POLLIN, u->read_ms);
    if (w == -ECANCELED) ch_task_check_cancel(L);
    if (u->fd != fd || w == -EBADF) return closed(L);
    if (w == -ETIMEDOUT) return fail(L, "timeout");
    if (w < 0) return fail_errno(L, -w);
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

static const luaL_Reg udp_funcs[] = {
  { "udp", sock_udp },
  { NULL, NULL }
};

int luaopen_cohost_core_udp(lua_State *L)
{
  luaL_newmetatable(L, UDP_MT);
  luaL_register(L, NULL, udp_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, udp_funcs);
  return 1;
}
