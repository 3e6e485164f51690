/*
** The PROXY protocol (HAProxy's, versions 1 and 2) on accepted
** connections: a load balancer in front says who the client is in a
** header before the first byte of the real protocol, and of TLS. A client
** of net/stream.c: the header is read through the connection's stream,
** and what follows it stays buffered for the protocol (or goes to the
** SSL).
*/
#ifndef CH_PROXY_H
#define CH_PROXY_H

#include "net/addr.h"
#include "net/stream.h"

/* Yields. Reads the PROXY header at the start of stream s (all of it
** within timeout_ms: a v2 header may take 65,551 bytes, TLVs included,
** which are consumed as they come), consumes it, and sets *peer to the
** client it names;
** a LOCAL (v2) or UNKNOWN (v1) header, a health check of the balancer's
** own, leaves *peer as it was. A TLS stream must not have started its
** handshake: the header comes in clear before it, and the bytes read past
** the header go to the SSL. Returns 0, -EPROTO for bytes that are no
** valid header, 0 bytes' EOF as -ECONNRESET, or the read's -errno
** (-ETIMEDOUT, -ENOMEM). */
int ch_proxy_read(struct ch_stream *s, union ch_addr *peer, int timeout_ms);

/* Logs (a warning) that the connection from who (its socket's peer, as
** text) is closed for header error r from ch_proxy_read. */
void ch_proxy_log_bad(const char *who, int r);

/* Parses a PROXY header at p (n bytes). Returns its length (> 0) with
** *peer set (or left for LOCAL/UNKNOWN), 0 when more bytes are needed,
** or -EPROTO. A v2 header's length comes once its addresses are in, and
** may be more than n: the rest is TLVs, to be skipped. Never yields. */
long ch_proxy_parse(const char *p, size_t n, union ch_addr *peer);

#endif
