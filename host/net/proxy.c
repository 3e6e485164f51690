/*
** The PROXY protocol. See proxy.h, and HAProxy's doc/proxy-protocol.txt
** for both versions' layout.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohost.h"
#include "log.h"
#include "net/proxy.h"
#include "net/tls.h"

#define V1_MAX 107   /* the longest v1 line, CRLF included (the spec's) */
#define V2_HEAD 16   /* signature, version and command, family, length */

static const char v2_sig[12] = "\r\n\r\n\0\r\nQUIT\n";

/* "PROXY TCP4 1.2.3.4 5.6.7.8 1111 80\r\n" */
static long parse_v1(const char *p, size_t n, union ch_addr *peer)
{
  const char *end = memchr(p, '\n', n < V1_MAX ? n : V1_MAX);
  if (!end) return n >= V1_MAX ? -EPROTO : 0;
  if (end == p || end[-1] != '\r') return -EPROTO;
  char line[V1_MAX + 1];
  size_t len = (size_t)(end - 1 - p);
  memcpy(line, p, len);
  line[len] = '\0';
  char *save, *f[6];
  int nf = 0;
  for (char *t = strtok_r(line, " ", &save); t && nf < 6; t = strtok_r(NULL, " ", &save)) f[nf++] = t;
  if (nf < 2 || strcmp(f[0], "PROXY") != 0) return -EPROTO;
  if (strcmp(f[1], "UNKNOWN") == 0) return end + 1 - p;   /* the rest is ignored */
  int v6 = strcmp(f[1], "TCP6") == 0;
  if ((!v6 && strcmp(f[1], "TCP4") != 0) || nf != 6) return -EPROTO;
  char *e;
  long port = strtol(f[4], &e, 10);
  if (*e || e == f[4] || port < 0 || port > 65535) return -EPROTO;
  union ch_addr a;
  memset(&a, 0, sizeof a);
  if (v6) {
    a.in6.sin6_family = AF_INET6;
    a.in6.sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, f[2], &a.in6.sin6_addr) != 1) return -EPROTO;
  } else {
    a.in.sin_family = AF_INET;
    a.in.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, f[2], &a.in.sin_addr) != 1) return -EPROTO;
  }
  *peer = a;
  return end + 1 - p;
}

/* Needs only the fixed part and the addresses: the length it returns may
** reach past n, over TLVs the caller skips as they come (up to 65,535
** bytes, so the header is never buffered whole). */
static long parse_v2(const unsigned char *p, size_t n, union ch_addr *peer)
{
  if (n < V2_HEAD) return 0;
  int ver = p[12] >> 4, cmd = p[12] & 0xf, fam = p[13];
  size_t len = (size_t)p[14] << 8 | p[15];
  if (ver != 2 || cmd > 1) return -EPROTO;
  long total = (long)(V2_HEAD + len);
  if (cmd == 0) return total;   /* LOCAL: the balancer's own */
  size_t need;
  if (fam == 0x11) need = 12;          /* TCP over IPv4: src, dst, sport, dport */
  else if (fam == 0x21) need = 36;     /* TCP over IPv6 */
  else if (fam == 0x00) return total;  /* UNSPEC: keep the socket's address */
  else return -EPROTO;                 /* UDP or unix under a TCP listener */
  if (len < need) return -EPROTO;
  if (n < V2_HEAD + need) return 0;
  const unsigned char *a = p + V2_HEAD;
  union ch_addr out;
  memset(&out, 0, sizeof out);
  if (fam == 0x11) {
    out.in.sin_family = AF_INET;
    memcpy(&out.in.sin_addr, a, 4);
    memcpy(&out.in.sin_port, a + 8, 2);
  } else {
    out.in6.sin6_family = AF_INET6;
    memcpy(&out.in6.sin6_addr, a, 16);
    memcpy(&out.in6.sin6_port, a + 32, 2);
  }
  *peer = out;
  return total;   /* TLVs after the addresses are skipped */
}

long ch_proxy_parse(const char *p, size_t n, union ch_addr *peer)
{
  /* A prefix of either signature needs more bytes; anything else is no
  ** PROXY header at all, and fails at once (a plain HTTP client's GET). */
  size_t k = n < sizeof v2_sig ? n : sizeof v2_sig;
  if (memcmp(p, v2_sig, k) == 0) return n < sizeof v2_sig ? 0 : parse_v2((const unsigned char *)p, n, peer);
  k = n < 6 ? n : 6;
  if (memcmp(p, "PROXY ", k) == 0) return n < 6 ? 0 : parse_v1(p, n, peer);
  return -EPROTO;
}

/* Yields. The read loop of ch_proxy_read, on a plain stream, all of it
** within timeout_ms. Once the header's length is known its bytes are
** consumed as they come: the buffer holds a read's worth of them at a
** time, never the 65,551 bytes a v2 header may take (its protocol may
** allow far less, an HTTP head's). */
static int read_header(struct ch_stream *s, union ch_addr *peer, int timeout_ms)
{
  uint64_t deadline = ch_now_ns() + (uint64_t)timeout_ms * 1000000u;
  size_t left = 0;   /* the header's bytes still to consume, once known */
  for (;;) {
    if (!left) {
      long r = ch_proxy_parse(ch_stream_data(s), ch_stream_avail(s), peer);
      if (r < 0) return (int)r;
      left = (size_t)r;
    }
    if (left) {
      size_t k = ch_stream_avail(s) < left ? ch_stream_avail(s) : left;
      ch_stream_consume(s, k);
      if (!(left -= k)) return 0;
    }
    uint64_t now = ch_now_ns();
    if (now >= deadline) return -ETIMEDOUT;
    ssize_t got = ch_stream_fill(s, V1_MAX, (int)((deadline - now + 999999) / 1000000u));
    if (got == 0) return -ECONNRESET;
    if (got < 0) return (int)got;
  }
}

int ch_proxy_read(struct ch_stream *s, union ch_addr *peer, int timeout_ms)
{
  /* On a TLS connection the header comes before the handshake, in clear
  ** (HAProxy's send-proxy in front of SSL passthrough): the stream reads
  ** it as a plain one, and the bytes it read past the header (the start
  ** of the ClientHello) go to the SSL, whose reads take them first. */
  SSL *ssl = s->ssl;
  s->ssl = NULL;
  int r = read_header(s, peer, timeout_ms);
  if (!ssl) return r;
  if (s->fd < 0) {   /* closed meanwhile: the close saw no SSL to free */
    ch_tls_free(ssl, 0);
    return r < 0 ? r : -EBADF;
  }
  s->ssl = ssl;
  if (r == 0 && ch_stream_avail(s)) {
    r = ch_tls_unread(ssl, ch_stream_data(s), ch_stream_avail(s));
    ch_stream_consume(s, ch_stream_avail(s));
  }
  return r;
}

/* One line per connection, from anyone who reaches the port: a scanner,
** a client that bypasses the balancer, a port probe. Rate-limited, bad
** bytes and a header that never came apart (log.h). */
static struct ch_log_kind bad_kind =
  CH_LOG_KIND_INIT("proxy protocol: a connection without a valid PROXY header closed");
static struct ch_log_kind cut_kind =
  CH_LOG_KIND_INIT("proxy protocol: a connection that ended or timed out before its header closed");

void ch_proxy_log_bad(const char *who, int r)
{
  if (r == -EPROTO)
    ch_log_event(&bad_kind, CH_LOG_WARN, "proxy protocol: %s: no valid PROXY header; connection closed", who);
  else
    ch_log_event(&cut_kind, CH_LOG_WARN, "proxy protocol: %s: %s; connection closed", who, ch_errstr(-r));
}
