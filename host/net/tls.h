/*
** TLS on OpenSSL: contexts, sessions, certificate checks, and single
** non-blocking steps (handshake, read, write) over an fd. Never yields:
** stream.c waits when a step says -EAGAIN.
*/
#ifndef CH_TLS_H
#define CH_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include <openssl/ssl.h>

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

/* An SSL on fd (through io.c's calls, never waiting), in client or
** server mode, or NULL (no memory). */
SSL *ch_tls_new(SSL_CTX *ctx, int fd, int server);

/* Gives ssl, before its first step, n bytes already read from its fd
** (what a PROXY header's read took past the header): its reads return
** them before reading the fd. 0, -ENOMEM, or -EINVAL (bytes given
** before). */
int ch_tls_unread(SSL *ssl, const void *p, size_t n);

/* Frees ssl; with notify, first sends close_notify once without waiting. */
void ch_tls_free(SSL *ssl, int notify);

/* One handshake step: 0 when done, -EAGAIN with *ev the poll event to
** wait for, or -EPROTO (the reason is logged at info). */
int ch_tls_handshake_step(SSL *ssl, int *ev);

/* Checks a finished client handshake's peer: its chain against the
** context's CAs, then name (a DNS name or IP literal; NULL skips it).
** Returns 0, or -1 with OpenResty's message in err: "20: unable to get
** local issuer certificate" (X509 code: text) or "certificate host
** mismatch". */
int ch_tls_verify(SSL *ssl, const char *name, char *err, size_t errlen);

/* One SSL_read/SSL_write: bytes (> 0), 0 at EOF (read), -EAGAIN with *ev
** the poll event to wait for, or -errno (-EPROTO for a TLS error,
** -ECONNRESET for a reset, -EPIPE writing after the peer's close_notify). */
ssize_t ch_tls_read(SSL *ssl, void *buf, size_t n, int *ev);
ssize_t ch_tls_write(SSL *ssl, const void *buf, size_t n, int *ev);

/* Session boxes: new holds one ref; attach gives ssl one (tracking new
** tickets); unref frees at zero. */
struct ch_tls_sess *ch_tls_sess_new(void);
void ch_tls_sess_attach(struct ch_tls_sess *b, SSL *ssl);
void ch_tls_sess_unref(struct ch_tls_sess *b);

#endif
