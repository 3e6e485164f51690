/*
** cohost.core.listen: listeners for Lua. listen(addr, handler [, opts])
** runs handler(sock, peer) on a task of its own for each connection, the
** sock a cosocket (lib_socket.c); cohost.http's listen comes through
** ch_listen_with with its own admit. Binding, accepting, --max-connections
** and the drain are net/listener.c's; this file turns options and
** addresses from Lua into its terms and keeps the Lua values alive.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/refs.h"
#include "vm/task.h"
#include "lib.h"
#include "lib_listen.h"
#include "lib_socket.h"
#include "net/activation.h"
#include "net/addr.h"
#include "net/listener.h"
#include "net/proxy.h"
#include "net/stream.h"
#include "net/tls.h"

#ifndef __EXCEPTIONS
#error "lib_listen.c must be built with -fexceptions"
#endif

#define LISTENER_MT "cohost.listener"
#define HANDSHAKE_MS 60000        /* a TLS client's handshake, as a read */

/* What keeps a listener's Lua value (the handler, or cohost.http's server
** object) alive: a registry ref, dropped after the listener's last
** reference goes. Refs are dropped the next time this worker is in Lua
** (the last reference may go on the acceptor, or in a finalizer). */
struct anchor {
  int ref;
};

static void anchor_free(void *p)
{
  struct anchor *a = p;
  ch_refs_defer(a->ref);
  free(a);
}

#define fail ch_lib_fail

/* -- Connections to a Lua handler ----------------------------------------- */

/* A connection on its way from the acceptor to its coroutine. */
struct conn {
  struct ch_listener *l;
  struct anchor *handler;
  int fd;
  union ch_addr peer;
};

/* conn_main's first part: the handler's task, with handler, socket and
** peer pushed on its thread above a second reference to the socket in
** slot 1, which keeps it past the handler (ch_task_run keeps what lies
** below the function; a registry ref would cost a registry slot per
** connection) and, on a TLS listener, the handshake done
** (a failed one closes quietly; the reason is logged at info). Returns -1
** when no task could be made (the connection is closed and counted off
** then), 0 when the handshake failed, 1 when the handler is to run. */
static __attribute__((noinline)) int conn_open(struct conn *c, struct ch_task **tp)
{
  struct ch_listener *l = c->l;
  struct ch_task *t = ch_task_new(ch_worker_self, "handler");
  if (!t) {
    close(c->fd);
    free(c);
    ch_listener_conn_end(l);
    return -1;
  }
  t->kind = CH_TASK_TCP;
  t->fd = c->fd;
  t->start_ns = ch_now_ns();
  lua_State *T = t->T;
  ch_refs_flush(T);
  lua_rawgeti(T, LUA_REGISTRYINDEX, c->handler->ref);
  SSL_CTX *ctx = ch_listener_ssl_ctx(l);
  SSL *ssl = ctx ? ch_tls_new(ctx, c->fd, 1) : NULL;
  struct ch_stream *s = ch_socket_push_conn(T, c->fd, ssl, NULL, 0);
  lua_pushvalue(T, -1);
  lua_insert(T, 1);   /* slot 1: the socket, below handler and arguments */
  *tp = t;
  if (ch_listener_proxy(l)) {
    char from[CH_ADDR_TEXT];
    ch_addr_format(&c->peer, from, sizeof from);
    union ch_addr before = c->peer;
    int r = ch_proxy_read(s, &c->peer, HANDSHAKE_MS);
    if (r == 0 && memcmp(&before, &c->peer, sizeof before) != 0) r = ch_socket_set_peer(T, -1, &c->peer);
    if (r < 0) {
      ch_proxy_log_bad(from, r);
      free(c);
      return 0;
    }
  }
  char peer[CH_ADDR_TEXT];
  int n = ch_addr_format(&c->peer, peer, sizeof peer);
  lua_pushlstring(T, peer, (size_t)n);
  free(c);
  if (ctx) {
    int r = ssl ? ch_stream_handshake(s, HANDSHAKE_MS) : -ENOMEM;
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
static __attribute__((noinline)) void conn_close(struct ch_listener *l, struct ch_task *t)
{
  ch_socket_close_at(t->T, 1);
  ch_listener_conn_end(l);
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
  struct ch_listener *l = c->l;
  struct ch_task *t;
  int ok = conn_open(c, &t);
  if (ok < 0) return;
  if (ok) ch_task_run(t, 2);
  conn_close(l, t);
}

/* The admit of a Lua handler's listener: a coroutine per connection, in
** the listener's class. */
static void lua_admit(void *ud, struct ch_listener *l, int fd, const union ch_addr *peer)
{
  struct conn *c = malloc(sizeof *c);
  if (!c) {
    close(fd);
    ch_listener_conn_end(l);
    return;
  }
  c->l = l;
  c->handler = ud;
  c->fd = fd;
  c->peer = *peer;
  int id = ch_spawn_prio(conn_main, c, ch_listener_prio(l));
  if (id < 0) {
    close(fd);
    free(c);
    ch_listener_conn_end(l);
    ch_log(CH_LOG_ERR, "accept: no coroutine for a connection: %s", strerror(-id));
  }
}

/* -- Listener objects ------------------------------------------------------ */

/* The Lua object only points at the listener: collecting it does not stop
** listening, since scripts rarely keep what listen() returns. */
struct listener_ud {
  struct ch_listener *l;
};

static const luaL_Reg listener_methods[];

/* Pushes the listener metatable, made on first use: cohost.http's listen
** makes listeners too, and a script that never required cohost.core.listen
** still gets their methods. */
static void push_listener_mt(lua_State *L)
{
  if (luaL_newmetatable(L, LISTENER_MT)) {
    luaL_register(L, NULL, listener_methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
  }
}

static struct ch_listener *check_listener(lua_State *L)
{
  struct listener_ud *ud = luaL_checkudata(L, 1, LISTENER_MT);
  if (!ud->l) luaL_argerror(L, 1, "dead listener");
  return ud->l;
}

static int listener_lclose(lua_State *L)
{
  struct ch_listener *l = check_listener(L);
  if (ch_listener_fd(l) < 0) return fail(L, "closed");
  ch_listener_close(l);
  lua_pushinteger(L, 1);
  return 1;
}

/* addr(): host, port as bound (the real port when 0 was asked), or
** "unix:/path". */
static int listener_addr(lua_State *L)
{
  const union ch_addr *a = ch_listener_addr(check_listener(L));
  char ip[INET6_ADDRSTRLEN];
  int port;
  if (ch_addr_ip_port(a, ip, &port) == 0) {
    lua_pushstring(L, ip);
    lua_pushinteger(L, port);
    return 2;
  }
  lua_pushfstring(L, "unix:%s", a->un.sun_path);
  return 1;
}

static int listener_gc(lua_State *L)
{
  struct listener_ud *ud = lua_touserdata(L, 1);
  if (ud->l) ch_listener_unref(ud->l);   /* no registry changes in finalizers */
  ud->l = NULL;
  return 0;
}

static int listener_tostring(lua_State *L)
{
  struct ch_listener *l = check_listener(L);
  lua_pushfstring(L, "listener (fd %d): %p", ch_listener_fd(l), (void *)l);
  return 1;
}

/* -- listen ------------------------------------------------------------------ */

/* A string option of table t, or NULL. */
static const char *opt_str(lua_State *L, int t, const char *k)
{
  lua_getfield(L, t, k);
  const char *v = lua_tostring(L, -1);   /* anchored in t */
  lua_pop(L, 1);
  return v;
}

/* Reads listen's opts at index 3 into o; may raise for bad values. */
static void read_opts(lua_State *L, struct ch_listener_opts *o)
{
  if (lua_isnoneornil(L, 3)) return;
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_getfield(L, 3, "backlog");
  if (!lua_isnil(L, -1)) o->backlog = (int)luaL_checkinteger(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 3, "priority");   /* index = CH_PRIO_* */
  if (!lua_isnil(L, -1)) {
    static const char *const classes[] = { "high", "normal", "low", NULL };
    const char *name = lua_tostring(L, -1);
    int p;
    for (p = 0; classes[p] && (!name || strcmp(name, classes[p])); p++) {}
    if (!classes[p]) luaL_argerror(L, 3, "priority must be \"high\", \"normal\" or \"low\"");
    o->prio = p;
  }
  lua_pop(L, 1);
  lua_getfield(L, 3, "proxy_protocol");
  o->proxy_protocol = lua_toboolean(L, -1);
  lua_pop(L, 1);
}

/* The TLS context of opts.ssl_cert, or NULL (none asked, or failed: then
** err is set). */
static SSL_CTX *read_tls(lua_State *L, char *err, size_t errlen)
{
  err[0] = '\0';
  if (lua_isnoneornil(L, 3)) return NULL;
  const char *cert = opt_str(L, 3, "ssl_cert"), *key = opt_str(L, 3, "ssl_key");
  if (!cert) return NULL;
  lua_getfield(L, 3, "ssl_verify_client");
  int verify_client = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return ch_tls_ctx_server(cert, key, opt_str(L, 3, "ssl_client_ca"), verify_client, err, errlen);
}

/* Yields (name lookup). Fills a for listen's spec. Returns its length, or
** 0 with nil, err pushed. Raises for a malformed spec. */
static socklen_t listen_addr(lua_State *L, const char *spec, union ch_addr *a)
{
  char hostbuf[256];
  const char *host;
  int port = 0;
  int kind = ch_addr_parse_listen(spec, hostbuf, sizeof hostbuf, &host, &port);
  if (!kind)
    luaL_argerror(L, 1, "bad address (\"host:port\", \"[ipv6]:port\", \"*:port\" "
                        "or \"unix:/path\")");
  socklen_t alen;
  if (kind == 2) {
    if (!(alen = ch_addr_unix(host, a))) fail(L, "unix socket path too long");
    return alen;
  }
  if (!host[0] || strcmp(host, "*") == 0) {
    memset(a, 0, sizeof *a);
    a->in.sin_family = AF_INET;
    a->in.sin_addr.s_addr = htonl(INADDR_ANY);
    a->in.sin_port = htons((uint16_t)port);
    return sizeof a->in;
  }
  if ((alen = ch_addr_ip(host, port, a))) return alen;
  struct addrinfo *res, *ai;
  int gai = ch_addr_resolve(host, port, SOCK_STREAM, 1, &res);
  if (gai) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s could not be resolved (%s)", host, ch_addr_resolve_error(gai));
    return 0;
  }
  for (ai = res; ai->ai_next && ai->ai_family != AF_INET; ai = ai->ai_next) {}
  if (ai->ai_family != AF_INET) ai = res;   /* prefer IPv4, as "localhost" users expect */
  memcpy(a, ai->ai_addr, ai->ai_addrlen);
  alen = ai->ai_addrlen;
  freeaddrinfo(res);
  return alen;
}

static int listen_with(lua_State *L, ch_admit_fn admit, void *ud)
{
  const char *spec = luaL_checkstring(L, 1);
  struct ch_listener_opts o = { .prio = CH_PRIO_NORMAL };
  read_opts(L, &o);
  struct ch_worker *w = ch_worker_self;
  if (!w) return luaL_error(L, "listen: not on a worker");
  if (w->stopping) return fail(L, "shutting down");
  ch_refs_flush(L);
  union ch_addr a;
  socklen_t alen;
  int passed = ch_activation_named(spec);   /* "fd:N", "systemd:NAME" */
  if (passed != -EINVAL) {
    if (passed < 0) return fail(L, "no such socket passed by systemd (LISTEN_FDS)");
    alen = sizeof a;
    if (getsockname(passed, &a.sa, &alen) < 0) return ch_lib_fail_errno(L, errno);
  } else if (!(alen = listen_addr(L, spec, &a))) {
    return 2;
  }
  char err[512];
  SSL_CTX *ctx = read_tls(L, err, sizeof err);
  if (!ctx && err[0]) return fail(L, err);
  /* Everything that may raise comes before the listener exists. */
  struct listener_ud *lud = lua_newuserdata(L, sizeof *lud);
  lud->l = NULL;
  push_listener_mt(L);
  lua_setmetatable(L, -2);
  struct anchor *an = malloc(sizeof *an);
  if (!an) {
    SSL_CTX_free(ctx);
    return fail(L, "no memory");
  }
  o.ssl_ctx = ctx;
  o.admit = admit ? admit : lua_admit;
  o.admit_ud = admit ? ud : an;
  o.answer_503 = admit != NULL;   /* cohost.http's: the one C protocol */
  o.on_free = anchor_free;
  o.free_ud = an;
  struct ch_listener *l;
  int r = ch_listener_open(spec, &a, alen, &o, &l);
  if (r < 0) {
    free(an);
    return ch_lib_fail_errno(L, -r);
  }
  lua_pushvalue(L, 2);
  an->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lud->l = l;
  return 1;
}

/* Yields (name lookup). listen(addr, handler [, opts]): accepts
** connections on addr and runs handler(sock, peer) for each on its own
** task. opts: backlog (511), priority, proxy_protocol (a PROXY header
** first, before TLS too), ssl_cert, ssl_key, ssl_client_ca,
** ssl_verify_client. Returns a listener or nil, err. */
static int l_listen(lua_State *L)
{
  luaL_checktype(L, 2, LUA_TFUNCTION);
  return listen_with(L, NULL, NULL);
}

int ch_listen_with(lua_State *L, ch_admit_fn admit, void *ud)
{
  return listen_with(L, admit, ud);
}

struct ch_listener *ch_listen_at(lua_State *L, int idx)
{
  struct listener_ud *ud = luaL_testudata(L, idx, LISTENER_MT);
  return ud ? ud->l : NULL;
}

/* -- Module ------------------------------------------------------------------ */

static const luaL_Reg listener_methods[] = {
  { "close", listener_lclose },
  { "addr", listener_addr },
  { "__gc", listener_gc },
  { "__tostring", listener_tostring },
  { NULL, NULL }
};

static const luaL_Reg listen_funcs[] = {
  { "listen", l_listen },
  { NULL, NULL }
};

int luaopen_cohost_core_listen(lua_State *L)
{
  push_listener_mt(L);
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, listen_funcs);
  return 1;
}
