/*
** What the other bindings need from lib_socket.c's TCP cosockets.
*/
#ifndef CH_LIB_SOCKET_H
#define CH_LIB_SOCKET_H

#include <stddef.h>

#include <lua.h>
#include <openssl/ssl.h>

#include "net/stream.h"

/* Pushes a cosocket (the cohost.tcp object) owning connected fd and ssl
** (NULL: plain), with the n bytes at pre already read into its buffer: an
** accepted connection, or one handed over after a protocol upgrade.
** Returns its stream (for a server handshake). Raises on memory shortage
** (fd closed then). */
struct ch_stream *ch_socket_push_conn(lua_State *L, int fd, SSL *ssl, const char *pre, size_t n);

/* The bytes send(data) sends, as OpenResty has it: a string or number as
** is, nil and booleans spelled out, an array table flattened into one new
** userdata buffer (anchored on the stack). Raises on other types. */
const char *ch_socket_payload(lua_State *L, int idx, size_t *len);

/* Closes the cosocket at idx if it is one and still open. */
void ch_socket_close_at(lua_State *L, int idx);

#endif
