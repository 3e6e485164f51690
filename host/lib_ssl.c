/*
** cohost.core.ssl: TLS on TCP cosockets, after OpenResty's
** sock:sslhandshake (and cohost's own sock:sslinfo): the methods of
** lib_socket.c's cohost.tcp objects that run a client handshake over the
** cosocket's stream, check the peer, and hand out session objects for
** resumption. Contexts, sessions and checks are net/tls.c's. The module
** itself sets the CA bundle handshakes trust by default.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "log.h"
#include "vm/task.h"
#include "lib.h"
#include "lib_socket.h"
#include "net/stream.h"
#include "net/tls.h"

#ifndef __EXCEPTIONS
#error "lib_ssl.c must be built with -fexceptions"
#endif

#define SESSION_MT  "cohost.ssl_session"

#define fail ch_lib_fail
#define BUSY CH_LIB_BUSY

static int closed(lua_State *L)
{
  return fail(L, "closed");
}

static int session_gc(lua_State *L);

/* The session metatable, made on first use. */
static void push_session_mt(lua_State *L)
{
  if (luaL_newmetatable(L, SESSION_MT)) {
    lua_pushcfunction(L, session_gc);
    lua_setfield(L, -2, "__gc");
  }
}

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
  push_session_mt(L);
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
static int ssl_set_default_ca(lua_State *L)
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
** cert and key (a client certificate), alpn (protocols offered by ALPN,
** as the wire's length-prefixed list, e.g. "\2h2\8http/1.1"; sslinfo's
** alpn says which the server chose). Returns a session, true (when
** reused_session is false), or nil, err: "handshake failed", "timeout",
** "closed", "20: unable to get local issuer certificate" (verify),
** "certificate host mismatch". A failure closes the connection. */
int ch_ssl_handshake(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
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
  const char *ca = NULL, *cert = NULL, *key = NULL, *alpn = NULL;
  int t = lua_istable(L, 5) ? 5 : lua_istable(L, 6) ? 6 : 0;
  if (t) {
    ca = opt_str(L, t, "ca_file");
    cert = opt_str(L, t, "cert");
    key = opt_str(L, t, "key");
    alpn = opt_str(L, t, "alpn");
  }
  if (!ca && default_ca[0]) ca = default_ca;   /* lua_ssl_trusted_certificate */
  if (u->s.fd < 0) return closed(L);
  if (u->connecting) return fail(L, "socket busy connecting");
  if (u->reading) return fail(L, "socket busy reading");
  if (u->writing) return fail(L, "socket busy writing");
  if (u->downstream) return luaL_error(L, "attempt to do ssl handshake on a request socket");
  char err[256];
  if (u->s.ssl) {
    /* Handshaked already (a pooled TLS connection): as OpenResty, return
    ** at once, but only for the same peer name and verdict, since the pool
    ** key does not carry them. */
    const char *was = SSL_get_servername(u->s.ssl, TLSEXT_NAMETYPE_host_name);
    if (!same_name(was, sni(name))) return fail(L, "ssl connection was made for another server_name");
    if (verify && ch_tls_verify(u->s.ssl, name, err, sizeof err) < 0) return fail(L, err);
    struct ch_tls_sess *b = ch_tls_sess_new();
    if (!b) return fail(L, "no memory");
    ch_tls_sess_attach(b, u->s.ssl);
    int r = push_session(L, want_session, b);
    ch_tls_sess_unref(b);
    return r;
  }
  SSL_CTX *ctx = ch_tls_ctx_client(ca, cert, key, err, sizeof err);
  if (!ctx) return fail(L, err);
  SSL *ssl = ch_tls_new(ctx, u->s.fd, 0);
  /* Dropped however we leave: the handshake may raise "cancelled". */
  struct ch_tls_sess *b __attribute__((cleanup(sess_drop))) = ch_tls_sess_new();
  if (!ssl || !b) {
    ch_tls_free(ssl, 0);
    return fail(L, "no memory");
  }
  if (sni(name)) SSL_set_tlsext_host_name(ssl, name);   /* SNI carries names only (RFC 6066) */
  if (given && *given && (*given)->s) SSL_set_session(ssl, (*given)->s);
  /* SSL_set_alpn_protos returns 0 on success, unlike most of OpenSSL. */
  if (alpn && *alpn && SSL_set_alpn_protos(ssl, (const unsigned char *)alpn, strlen(alpn)) != 0) {
    ch_tls_free(ssl, 0);
    return fail(L, "no memory");
  }
  ch_tls_sess_attach(b, ssl);   /* picks up a TLS 1.3 ticket later */
  int r;
  {
    BUSY(&u->connecting);
    u->s.ssl = ssl;
    r = ch_stream_handshake(&u->s, u->connect_ms);
  }
  if (r == -ECANCELED) ch_task_check_cancel(L);
  if (r == 0 && verify && ch_tls_verify(ssl, name, err, sizeof err) < 0) r = -EACCES;
  if (r < 0) {
    if (u->s.fd >= 0) ch_socket_finalize(u);   /* frees ssl */
    else if (u->s.ssl) { ch_tls_free(u->s.ssl, 0); u->s.ssl = NULL; }
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
int ch_ssl_info(lua_State *L)
{
  struct ch_socket *u = ch_socket_check(L);
  if (u->s.fd < 0) return closed(L);
  if (!u->s.ssl) return fail(L, "not ssl");
  lua_createtable(L, 0, 6);
  lua_pushstring(L, SSL_get_version(u->s.ssl));
  lua_setfield(L, -2, "protocol");
  lua_pushstring(L, SSL_get_cipher_name(u->s.ssl));
  lua_setfield(L, -2, "cipher");
  lua_pushboolean(L, SSL_session_reused(u->s.ssl));
  lua_setfield(L, -2, "session_reused");
  const char *sn = SSL_get_servername(u->s.ssl, TLSEXT_NAMETYPE_host_name);
  if (sn) {
    lua_pushstring(L, sn);
    lua_setfield(L, -2, "server_name");
  }
  X509 *peer = SSL_get1_peer_certificate(u->s.ssl);
  if (peer) {
    char buf[256];
    X509_NAME_oneline(X509_get_subject_name(peer), buf, sizeof buf);
    lua_pushstring(L, buf);
    lua_setfield(L, -2, "peer_subject");
    X509_free(peer);
  }
  lua_pushinteger(L, SSL_get_verify_result(u->s.ssl));
  lua_setfield(L, -2, "verify_result");
  const unsigned char *ap;
  unsigned an;
  SSL_get0_alpn_selected(u->s.ssl, &ap, &an);
  if (an) {
    lua_pushlstring(L, (const char *)ap, an);
    lua_setfield(L, -2, "alpn");
  }
  return 1;
}


/* -- Module ------------------------------------------------------------------ */

static const luaL_Reg ssl_funcs[] = {
  { "set_default_ca", ssl_set_default_ca },
  { NULL, NULL }
};

int luaopen_cohost_core_ssl(lua_State *L)
{
  push_session_mt(L);
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, ssl_funcs);
  return 1;
}
