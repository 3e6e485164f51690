/*
** TLS on OpenSSL for cosockets and listeners: contexts, handshakes and
** record I/O over a non-blocking fd, waiting the way plain sockets wait
** (SSL_ERROR_WANT_READ -> POLLIN, WANT_WRITE -> POLLOUT).
*/
#ifndef CH_TLS_H
#define CH_TLS_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <openssl/ssl.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"

/* A client session, shared by reference between the Lua value that
** sslhandshake returns and the SSL it came from: a TLS 1.3 ticket arrives
** after the handshake, and the box picks it up when it does. */
struct ch_tls_sess {
  int refs;                 /* the Lua value, the SSL (until freed) */
  SSL_SESSION *s;           /* the latest resumable session, or NULL */
};

/* A server context from PEM files, or NULL with a message in err.
** client_ca: CA file for client certificates (or NULL); verify_client
** makes a client certificate mandatory. One per listener. */
SSL_CTX *ch_tls_ctx_server(const char *cert, const char *key, const char *client_ca,
                           int verify_client, char *err, size_t errlen);

/* The client context for (ca_file, cert, key), any of them NULL: made on
** first use and kept for the process (contexts are thread-safe), so
** sessions and loaded CAs are shared. ca_file NULL trusts the system
** store. Returns NULL with a message in err. */
SSL_CTX *ch_tls_ctx_client(const char *ca_file, const char *cert, const char *key,
                           char *err, size_t errlen);

/* An SSL on fd, in client or server mode, or NULL (no memory). */
SSL *ch_tls_new(SSL_CTX *ctx, int fd, int server);

/* Frees ssl; with notify, first sends close_notify once without waiting. */
void ch_tls_free(SSL *ssl, int notify);

/* Yields. Runs the handshake on *fdp within ms. Returns 0, -ETIMEDOUT,
** -EBADF (the fd was closed meanwhile), or -EPROTO (TLS failure; the
** reason is logged at info). With L, waits as a task (raises
** "cancelled"); without, as a plain coroutine. */
int ch_tls_handshake(lua_State *L, SSL *ssl, const int *fdp, int ms);

/* Checks a finished client handshake's peer: its chain against the
** context's CAs, then name (a DNS name or IP literal; NULL skips it).
** Returns 0, or -1 with OpenResty's message in err: "20: unable to get
** local issuer certificate" (X509 code: text) or "certificate host
** mismatch". */
int ch_tls_verify(SSL *ssl, const char *name, char *err, size_t errlen);

/* Never yield. One SSL_read/SSL_write: bytes (> 0), 0 at EOF (read),
** -EAGAIN with *ev the poll event to wait for, or -errno (-EPROTO for a
** TLS error, -ECONNRESET for a reset). */
ssize_t ch_tls_read(SSL *ssl, void *buf, size_t n, int *ev);
ssize_t ch_tls_write(SSL *ssl, const void *buf, size_t n, int *ev);

/* Yields. Waits for *fdp to be ready for ev, as ch_tls_handshake waits.
** Returns 1 ready, 0 on timeout, -1 if the fd was closed meanwhile. */
int ch_tls_wait(lua_State *L, const int *fdp, int ev, int ms);

/* Yields. Writes every byte of iov[0..n) (small pieces coalesced into one
** record), waiting up to ms between writes that make progress. Returns 0,
** -ETIMEDOUT, -EBADF or -errno. */
int ch_tls_write_all(lua_State *L, SSL *ssl, const int *fdp, struct iovec *iov, int n, int ms);

/* -- Exported by lib_socket.c for TLS (declared here so that lib_socket.h
** needs no OpenSSL types) ------------------------------------------------ */

struct ch_listener;

/* l's TLS context (listen's opts.ssl_cert), or NULL for a plain listener. */
SSL_CTX *ch_listener_ssl_ctx(const struct ch_listener *l);

/* ch_socket_push_conn for a connection with TLS state: the cosocket owns
** ssl (NULL: plain) from here on; both are freed if it raises. */
void ch_socket_push_tls(lua_State *L, int fd, SSL *ssl, const char *pre, size_t n);

/* Session boxes: new holds one ref; attach gives ssl one (tracking new
** tickets); unref frees at zero. */
struct ch_tls_sess *ch_tls_sess_new(void);
void ch_tls_sess_attach(struct ch_tls_sess *b, SSL *ssl);
void ch_tls_sess_unref(struct ch_tls_sess *b);

#endif
