/*
** What the other bindings need from lib_socket.c's TCP cosockets: the
** object itself (lib_ssl.c runs its TLS methods), and accepted or
** upgraded connections made into one (lib_listen.c, lib_http.c).
*/
#ifndef CH_LIB_SOCKET_H
#define CH_LIB_SOCKET_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <openssl/ssl.h>

#include "net/addr.h"
#include "net/keepalive.h"
#include "net/stream.h"

/* A TCP cosocket: the cohost.tcp userdata. */
struct ch_socket {
  struct ch_stream s;       /* the connection: fd (-1 when not connected),
                            ** TLS state, receive buffer */
  int connect_ms;           /* timeouts in ms, > 0 */
  int send_ms;
  int read_ms;
  int reused;               /* times this connection came from a pool */
  struct ch_keepalive *pool; /* the pool counting this connection (connect
                            ** found or made one), or NULL */
  char *key;                /* pool key of the connection (malloc), or NULL */
  union ch_addr *peer;      /* the client a PROXY header named (malloc):
                            ** getpeername's answer; NULL: the socket's */
  uint8_t reading;          /* busy flags: a task is inside that operation */
  uint8_t writing;
  uint8_t connecting;
  uint8_t read_closed;      /* OpenResty's half states: a read error closes */
  uint8_t write_closed;     /* the read part, a write error the write part */
  uint8_t downstream;       /* accepted by a listener: no pool key */
};

/* The cosocket at index 1 (the method's self); raises if it is none. */
struct ch_socket *ch_socket_check(lua_State *L);

/* Closes u's connection without waiting (close_notify once on TLS). A
** reader or writer parked on it wakes and returns "closed". */
void ch_socket_finalize(struct ch_socket *u);

/* The TLS methods, in lib_ssl.c: sslhandshake and sslinfo. */
int ch_ssl_handshake(lua_State *L);
int ch_ssl_info(lua_State *L);

/* Pushes a cosocket (the cohost.tcp object) owning connected fd and ssl
** (NULL: plain), with the n bytes at pre already read into its buffer: an
** accepted connection, or one handed over after a protocol upgrade.
** Returns its stream (for a server handshake). Raises on memory shortage
** (fd closed then). */
struct ch_stream *ch_socket_push_conn(lua_State *L, int fd, SSL *ssl, const char *pre, size_t n);

/* Makes getpeername() of the cosocket at idx answer a (the client of a
** PROXY protocol header) instead of the socket's peer. Returns 0 or
** -ENOMEM; never raises (a listener calls it outside any pcall). */
int ch_socket_set_peer(lua_State *L, int idx, const union ch_addr *a);

/* The bytes send(data) sends, as OpenResty has it: a string or number as
** is, nil and booleans spelled out, an array table flattened into one new
** userdata buffer (anchored on the stack). Raises on other types. */
const char *ch_socket_payload(lua_State *L, int idx, size_t *len);

/* Closes the cosocket at idx if it is one and still open. */
void ch_socket_close_at(lua_State *L, int idx);

/* Never yields. Copies up to max of the bytes u has received and not yet
** returned into dst, and consumes them: what the next receive would have
** returned first. Returns the count: 0 when nothing is buffered, or u is
** closed or has a reader parked in it. Called through the FFI with the
** cosocket's userdata as u (examples/kv/server.lua), so that a reader can
** build its own string of a batch rather than take the received bytes as
** one Lua string. */
size_t ch_socket_take(struct ch_socket *u, void *dst, size_t max);

/* Never yields. The bytes ch_socket_take would copy now without a limit:
** those received and not yet returned (0 when u is closed or has a reader
** parked in it). */
size_t ch_socket_buffered(const struct ch_socket *u);

#endif
