/*
** TLS on OpenSSL for cosockets, listeners and HTTP: contexts, sessions,
** certificate checks, and one non-blocking step of a handshake, a read or
** a write. Nothing here waits or yields: stream.c turns a WANT_READ or
** WANT_WRITE into a wait, as it does for plain sockets.
**
** OpenSSL reads and writes the fd through a BIO of ours that makes the
** runtime's calls (ch_io_read and ch_io_write with no wait, a -EAGAIN
** becoming the BIO's retry) instead of its socket BIO's read(2): so the
** TLS path keeps io.c's readiness judgement like the plain one (a record
** read that drained the socket is noted, and the next attempt waits
** without a doomed system call), and a wait after WANT_READ parks without
** looking first. The reference for behaviour and error strings is
** lua-nginx-module's ngx_http_lua_socket_tcp.c (sslhandshake) on nginx's
** ngx_event_openssl.c.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "cohost.h"
#include "log.h"
#include "net/tls.h"

/* -- Errors --------------------------------------------------------------- */

/* The first queued OpenSSL error as text (drains the queue). */
static const char *ssl_reason(char *buf, size_t n)
{
  unsigned long e = ERR_get_error();
  if (!e) return "no OpenSSL error queued";
  ERR_error_string_n(e, buf, n);
  ERR_clear_error();
  return buf;
}

static void ctx_err(char *err, size_t errlen, const char *what, const char *path)
{
  char r[256];
  snprintf(err, errlen, "%s %s: %s", what, path, ssl_reason(r, sizeof r));
}

/* -- Sessions --------------------------------------------------------------- */

/* ex_data slot on client SSLs: their session box. */
static int sess_idx = -1;
static pthread_once_t sess_once = PTHREAD_ONCE_INIT;

static void sess_idx_init(void)
{
  sess_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

struct ch_tls_sess *ch_tls_sess_new(void)
{
  struct ch_tls_sess *b = calloc(1, sizeof *b);
  if (b) b->refs = 1;
  return b;
}

void ch_tls_sess_unref(struct ch_tls_sess *b)
{
  if (!b || --b->refs > 0) return;
  if (b->s) SSL_SESSION_free(b->s);
  free(b);
}

void ch_tls_sess_attach(struct ch_tls_sess *b, SSL *ssl)
{
  b->refs++;
  SSL_SESSION *s = SSL_get1_session(ssl);   /* TLS 1.2: resumable already */
  if (s && SSL_SESSION_is_resumable(s)) {
    if (b->s) SSL_SESSION_free(b->s);
    b->s = s;
  } else if (s) {
    SSL_SESSION_free(s);
  }
  SSL_set_ex_data(ssl, sess_idx, b);
}

/* A new session (a TLS 1.3 ticket, read with the first application data):
** the box keeps the latest. Returns 1 when it took the reference. */
static int on_new_session(SSL *ssl, SSL_SESSION *s)
{
  struct ch_tls_sess *b = SSL_get_ex_data(ssl, sess_idx);
  if (!b) return 0;
  if (b->s) SSL_SESSION_free(b->s);
  b->s = s;
  return 1;
}

/* -- Contexts --------------------------------------------------------------- */

/* Options every context shares. A peer that closes without close_notify
** is EOF, as with a plain socket (OpenSSL 3 calls it an error otherwise).
** Partial writes let a write loop advance like send(2). */
static void ctx_common(SSL_CTX *ctx)
{
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                        SSL_MODE_RELEASE_BUFFERS);   /* idle connections hold no buffers */
  /* One socket read takes whatever has arrived, not a record's 5-byte
  ** header and then its body: half the reads under load. Safe because a
  ** stream always calls SSL_read before it waits (stream.c), so records
  ** read ahead are never left unannounced; SSL_has_pending, not
  ** SSL_pending, tells whether any are buffered. */
  SSL_CTX_set_read_ahead(ctx, 1);
}

static int load_pair(SSL_CTX *ctx, const char *cert, const char *key, char *err, size_t errlen)
{
  if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
    ctx_err(err, errlen, "ssl_cert", cert);
    return -1;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key ? key : cert, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    ctx_err(err, errlen, "ssl_key", key ? key : cert);
    return -1;
  }
  return 0;
}

SSL_CTX *ch_tls_ctx_server(const char *cert, const char *key, const char *client_ca,
                           int verify_client, char *err, size_t errlen)
{
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) {
    snprintf(err, errlen, "no memory");
    return NULL;
  }
  ctx_common(ctx);
  if (load_pair(ctx, cert, key, err, errlen) < 0) goto fail;
  if (client_ca) {
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
    if (!names || SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1) {
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      ctx_err(err, errlen, "ssl_client_ca", client_ca);
      goto fail;
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    /* Without verify_client a certificate is asked for and checked if
    ** sent, but not required (nginx's ssl_verify_client optional). */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER |
                       (verify_client ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
  } else if (verify_client) {
    snprintf(err, errlen, "ssl_verify_client needs ssl_client_ca");
    goto fail;
  }
  /* Resumption (tickets, and the id cache for TLS 1.2) keyed per
  ** listener: one context per listen call, so per worker. */
  static const unsigned char sid[] = "cohost";
  SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
  return ctx;
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

/* Client contexts by (ca_file, cert, key). Never freed: a process talks
** with few configurations. Lookup is O(contexts) under a lock, once per
** handshake. */
struct cctx {
  struct cctx *next;
  SSL_CTX *ctx;
  char *ca, *cert, *key;    /* NULL: not given */
};
static pthread_mutex_t cctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cctx *cctxs;   /* guarded by cctx_lock */

static int same(const char *a, const char *b)
{
  return a == b || (a && b && strcmp(a, b) == 0);
}

static char *dup_opt(const char *s, int *oom)
{
  char *d = s ? strdup(s) : NULL;
  if (s && !d) *oom = 1;
  return d;
}

SSL_CTX *ch_tls_ctx_client(const char *ca_file, const char *cert, const char *key,
                           char *err, size_t errlen)
{
  pthread_once(&sess_once, sess_idx_init);
  pthread_mutex_lock(&cctx_lock);
  for (struct cctx *c = cctxs; c; c = c->next)
    if (same(c->ca, ca_file) && same(c->cert, cert) && same(c->key, key)) {
      pthread_mutex_unlock(&cctx_lock);
      return c->ctx;
    }
  /* Loading files under the lock blocks other workers' first handshake
  ** with a new configuration only; it happens once per configuration. */
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  struct cctx *c = calloc(1, sizeof *c);
  int oom = !ctx || !c;
  if (oom) goto fail;
  ctx_common(ctx);
  if (ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1
              : SSL_CTX_set_default_verify_paths(ctx) != 1) {
    ctx_err(err, errlen, "ca_file", ca_file ? ca_file : "(system store)");
    goto fail_quiet;
  }
  if (cert && load_pair(ctx, cert, key, err, errlen) < 0) goto fail_quiet;
  /* The verdict is read after the handshake (ch_tls_verify), as nginx
  ** does, so verify=false still completes against any certificate. */
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, on_new_session);
  c->ctx = ctx;
  c->ca = dup_opt(ca_file, &oom);
  c->cert = dup_opt(cert, &oom);
  c->key = dup_opt(key, &oom);
  if (oom) goto fail;
  c->next = cctxs;
  cctxs = c;
  pthread_mutex_unlock(&cctx_lock);
  return ctx;
fail:
  snprintf(err, errlen, "no memory");
fail_quiet:
  pthread_mutex_unlock(&cctx_lock);
  if (c) { free(c->ca); free(c->cert); free(c->key); free(c); }
  SSL_CTX_free(ctx);
  return NULL;
}

/* -- Connections -------------------------------------------------------------- */

/* -- The BIO --------------------------------------------------------------- */

/* A BIO on an fd through io.c. Its data is the fd; it never closes it
** (the stream owns the fd, as BIO_NOCLOSE). */
static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_fd(BIO *b)
{
  return (int)(intptr_t)BIO_get_data(b);
}

/* Bytes of the connection read before its SSL took over (a PROXY header's
** read ran on into the ClientHello, net/proxy.c): the BIO's reads give
** them first. Held in the BIO's ex_data, so a BIO without any pays one
** NULL look-up per read. */
struct pre {
  size_t off, n;            /* given so far, of n at p */
  char p[];
};
static int pre_idx = -1;    /* the BIO ex_data index of a struct pre */

static void pre_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                     void *argp)
{
  (void)parent; (void)ad; (void)idx; (void)argl; (void)argp;
  free(ptr);
}

/* Gives n bytes from b's struct pre (n > 0); frees it once emptied. */
static size_t pre_take(BIO *b, struct pre *pr, char *buf, size_t n)
{
  size_t k = pr->n - pr->off < n ? pr->n - pr->off : n;
  memcpy(buf, pr->p + pr->off, k);
  pr->off += k;
  if (pr->off == pr->n) {
    BIO_set_ex_data(b, pre_idx, NULL);
    free(pr);
  }
  return k;
}

static int bio_read(BIO *b, char *buf, size_t n, size_t *got)
{
  BIO_clear_retry_flags(b);
  struct pre *pr = pre_idx >= 0 && n ? BIO_get_ex_data(b, pre_idx) : NULL;
  if (pr) {
    *got = pre_take(b, pr, buf, n);
    return 1;
  }
  ssize_t r = ch_io_read(bio_fd(b), buf, n, 0);
  if (r >= 0) {
    *got = (size_t)r;
    /* EOF: BIO_eof must say so, or OpenSSL 3 takes a close without
    ** close_notify for an error despite SSL_OP_IGNORE_UNEXPECTED_EOF. */
    if (r == 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    return r > 0;
  }
  if (r == -EAGAIN) BIO_set_retry_read(b);
  else errno = (int)-r;   /* SSL_ERROR_SYSCALL reads it */
  *got = 0;
  return -1;
}

static int bio_write(BIO *b, const char *buf, size_t n, size_t *put)
{
  BIO_clear_retry_flags(b);
  ssize_t r = ch_io_write(bio_fd(b), buf, n, 0);   /* MSG_NOSIGNAL */
  if (r >= 0) {
    *put = (size_t)r;
    return 1;
  }
  if (r == -EAGAIN) BIO_set_retry_write(b);
  else errno = (int)-r;
  *put = 0;
  return -1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
  (void)num;
  switch (cmd) {
  case BIO_CTRL_FLUSH:   /* writes are never buffered here */
  case BIO_CTRL_DUP:
    return 1;
  case BIO_CTRL_EOF:
    return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
  case BIO_C_GET_FD:     /* SSL_get_fd */
    if (ptr) *(int *)ptr = bio_fd(b);
    return bio_fd(b);
  default:
    return 0;
  }
}

static int bio_create(BIO *b)
{
  BIO_set_init(b, 1);
  return 1;
}

static void bio_method_init(void)
{
  int type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR;
  BIO_METHOD *m = BIO_meth_new(type, "cohost fd");
  if (m && BIO_meth_set_read_ex(m, bio_read) && BIO_meth_set_write_ex(m, bio_write) &&
      BIO_meth_set_ctrl(m, bio_ctrl) && BIO_meth_set_create(m, bio_create))
    bio_method = m;
  pre_idx = BIO_get_ex_new_index(0, NULL, NULL, NULL, pre_free);
}

SSL *ch_tls_new(SSL_CTX *ctx, int fd, int server)
{
  pthread_once(&bio_once, bio_method_init);
  if (!bio_method) return NULL;
  SSL *ssl = SSL_new(ctx);
  if (!ssl) return NULL;
  BIO *b = BIO_new(bio_method);
  if (!b) {
    SSL_free(ssl);
    return NULL;
  }
  BIO_set_data(b, (void *)(intptr_t)fd);
  SSL_set_bio(ssl, b, b);   /* one reference, for both directions */
  if (server) SSL_set_accept_state(ssl);
  else SSL_set_connect_state(ssl);
  return ssl;
}

int ch_tls_unread(SSL *ssl, const void *p, size_t n)
{
  BIO *b = SSL_get_rbio(ssl);
  if (n == 0) return 0;
  if (pre_idx < 0 || !b || BIO_get_ex_data(b, pre_idx)) return -EINVAL;   /* once, first */
  struct pre *pr = malloc(sizeof *pr + n);
  if (!pr) return -ENOMEM;
  pr->off = 0;
  pr->n = n;
  memcpy(pr->p, p, n);
  if (!BIO_set_ex_data(b, pre_idx, pr)) {
    free(pr);
    return -ENOMEM;
  }
  return 0;
}

void ch_tls_free(SSL *ssl, int notify)
{
  if (!ssl) return;
  if (sess_idx >= 0) {
    struct ch_tls_sess *b = SSL_get_ex_data(ssl, sess_idx);
    SSL_set_ex_data(ssl, sess_idx, NULL);
    ch_tls_sess_unref(b);
  }
  /* One attempt, never a wait: a peer that does not read our alert loses
  ** nothing it needs. Only after a finished handshake (a fatal error
  ** makes SSL_shutdown an error itself). */
  if (notify && SSL_is_init_finished(ssl)) SSL_shutdown(ssl);
  ERR_clear_error();
  SSL_free(ssl);
}

/* An SSL call's failure as our result: -EAGAIN with *ev, 0 for EOF, or
** -errno. */
static ssize_t io_fail(SSL *ssl, int r, int *ev)
{
  int e = SSL_get_error(ssl, r);
  int en = errno;
  char buf[256];
  switch (e) {
  case SSL_ERROR_WANT_READ: *ev = POLLIN; return -EAGAIN;
  case SSL_ERROR_WANT_WRITE: *ev = POLLOUT; return -EAGAIN;
  case SSL_ERROR_ZERO_RETURN: return 0;   /* close_notify, or EOF (see ctx_common) */
  case SSL_ERROR_SYSCALL:
    ERR_clear_error();
    return en && en != EAGAIN ? -en : -ECONNRESET;
  default:
    ch_log(CH_LOG_INFO, "tls: %s", ssl_reason(buf, sizeof buf));
    return -EPROTO;
  }
}

ssize_t ch_tls_read(SSL *ssl, void *buf, size_t n, int *ev)
{
  ERR_clear_error();
  int r = SSL_read(ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
  return r > 0 ? r : io_fail(ssl, r, ev);
}

ssize_t ch_tls_write(SSL *ssl, const void *buf, size_t n, int *ev)
{
  ERR_clear_error();
  int r = SSL_write(ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
  if (r > 0) return r;
  ssize_t f = io_fail(ssl, r, ev);
  return f == 0 ? -EPIPE : f;   /* the peer's close_notify: nothing more goes out */
}

int ch_tls_handshake_step(SSL *ssl, int *ev)
{
  char buf[256];
  ERR_clear_error();
  int r = SSL_do_handshake(ssl);
  if (r == 1) return 0;
  int e = SSL_get_error(ssl, r);
  if (e == SSL_ERROR_WANT_READ) { *ev = POLLIN; return -EAGAIN; }
  if (e == SSL_ERROR_WANT_WRITE) { *ev = POLLOUT; return -EAGAIN; }
  if (e == SSL_ERROR_SYSCALL && !ERR_peek_error())
    ch_log(CH_LOG_INFO, "tls: handshake: %s", errno ? strerror(errno) : "peer closed");
  else
    ch_log(CH_LOG_INFO, "tls: handshake: %s", ssl_reason(buf, sizeof buf));
  return -EPROTO;
}

int ch_tls_verify(SSL *ssl, const char *name, char *err, size_t errlen)
{
  long rc = SSL_get_verify_result(ssl);
  if (rc != X509_V_OK) {
    snprintf(err, errlen, "%ld: %s", rc, X509_verify_cert_error_string(rc));
    return -1;
  }
  X509 *cert = SSL_get1_peer_certificate(ssl);
  if (!cert) {
    snprintf(err, errlen, "no peer certificate");
    return -1;
  }
  int ok = 1;
  if (name) {
    unsigned char ip[16];
    if (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1)
      ok = X509_check_ip_asc(cert, name, 0) == 1;
    else
      ok = X509_check_host(cert, name, strlen(name), 0, NULL) == 1;
  }
  X509_free(cert);
  if (!ok) {
    snprintf(err, errlen, "certificate host mismatch");
    return -1;
  }
  return 0;
}
