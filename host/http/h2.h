/*
** HTTP/2 connections and streams on libnghttp2 (framing, HPACK, flow
** control are its; the I/O, the tasks and the limits are ours). An HTTP/2
** connection is an HTTP connection (struct ch_http_conn, the same accept,
** stream, TLS and peer) whose first bytes were the client preface, or
** whose TLS handshake chose "h2" by ALPN; conn.c hands it over here.
**
** A connection's coroutines:
**   reader   the connection's own (conn_main's): fills the stream's
**            buffer and feeds nghttp2 (ch_stream_fill, never a read loop
**            of its own)
**   writer   one more: takes nghttp2's frames and writes them, parks
**            when there is nothing to send
**   streams  one per request, running the handler on its task through
**            the server's run callback, as an HTTP/1.1 request does
** and none while idle (no stream, nothing to send): the writer ends and
** conn.c parks the connection as an idle HTTP/1.1 one (ch_h2_serve's 1),
** the session kept in c->h2, until input brings both back.
** Each stream is a struct ch_http_req as HTTP/1.1 has it (its head spans
** point into the stream's own header bytes), so req and res in
** lib_http.c serve both; response.c, conn.c and sendfile.c hand an HTTP/2
** request's body and response to the functions below.
**
** Backpressure is HTTP/2 flow control: a request body is acknowledged
** (WINDOW_UPDATE) as the handler reads it, so a slow reader stalls only
** its stream; a response body waits in a bounded queue per stream that
** nghttp2 empties as the client's window allows, and a handler whose
** queue is full parks (send_timeout) while other streams go on.
*/
#ifndef CH_HTTP_H2_H
#define CH_HTTP_H2_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "http/conn.h"

struct ch_h2_conn;

/* One request stream. The request is first: rq.h2 points back here. */
struct ch_h2_stream {
  struct ch_http_req rq;          /* the request as lib_http.c sees it */
  struct ch_h2_conn *conn;
  int32_t id;                     /* the HTTP/2 stream id */
  int refs;                       /* nghttp2's (until the stream closes)
                                  ** and the stream coroutine's */
  /* Head */
  char *hb;                       /* header bytes: rq.h's spans point here */
  uint32_t hlen, hcap;
  uint32_t hsize;                 /* header list size so far (RFC 9113
                                  ** 6.5.2: name + value + 32 each) */
  struct ch_http_span authority;  /* :authority, for a Host header */
  int head_status;                /* 431 or 400 found in the head: answered
                                  ** without the handler */
  uint8_t head_done;              /* the request's HEADERS are complete */
  /* Request body */
  uint8_t remote_done;            /* END_STREAM from the client */
  uint8_t fresh;                  /* body bytes came since the last read */
  uint64_t consumed;              /* body bytes acknowledged to the client */
  uint8_t drain;                  /* the handler is done: DATA is thrown
                                  ** away (up to DRAIN_MAX, then RST) */
  uint64_t drained;               /* bytes thrown away so far */
  /* Response body: queued bytes nghttp2 takes as the window allows */
  char *ob;                       /* queue, ob[ooff, olen) unsent */
  uint32_t ooff, olen, ocap;
  uint8_t oend;                   /* nothing more after the queue */
  uint8_t deferred;               /* the data source said DEFERRED */
  uint8_t local_done;             /* END_STREAM (or RST) is on its way */
  uint8_t closed;                 /* nghttp2 closed the stream, or the
                                  ** connection ended: no more I/O */
  uint32_t close_code;            /* its error code (0: NO_ERROR) */
  struct ch_waitq waiters;        /* the handler, while parked on it */
  struct ch_coro *handler;        /* the stream's coroutine while its
                                  ** handler runs (cancelled by a close
                                  ** before the response is done), or NULL */
  struct ch_h2_stream *prev, *next;   /* the connection's streams */
};

/* Yields (for the preface's 24 bytes, within the header timeout). 1 when
** c's first bytes are the HTTP/2 client preface or its TLS handshake chose
** "h2" (both only if its server allows HTTP/2), 0 when they are something
** else (HTTP/1.1 goes on with them buffered), -1 when the connection is
** to close (EOF, the header timeout, a drain). */
int ch_h2_detect(struct ch_http_conn *c);

/* Yields. Serves c as an HTTP/2 connection until it ends (0: the caller
** closes c) or goes idle (1): no stream, nothing to send, the input
** drained (its last read said EAGAIN, with no yield since). Idle, it holds
** no coroutine: c->h2 keeps the session, and the caller parks c as an
** idle HTTP/1.1 connection, calling ch_h2_serve again on input, or
** ch_h2_free when it closes c. */
int ch_h2_serve(struct ch_http_conn *c);

/* Frees the HTTP/2 state of idle c (its keep-alive expired, or a drain):
** a GOAWAY if the socket takes it at once, then the session. Never
** yields. */
void ch_h2_free(struct ch_http_conn *c);

/* The drain: every HTTP/2 connection of this worker gets GOAWAY (a
** shutdown notice, then the last stream id a second later); streams in
** flight finish, then the connections close. Never yields. */
void ch_h2_close_idle(struct ch_worker *w);

/* The GOAWAY of st's connection starts now, as at the drain deadline (a
** shutdown notice, the last stream id a second later): the client opens
** no new streams on it, the streams in flight go on, and once none is
** left the connection closes. Never yields. */
void ch_h2_goaway(struct ch_h2_stream *st);

/* Offers "h2" and "http/1.1" (or http/1.1 alone when h2 is 0) by ALPN on
** a TLS listener's context. Call before its first connection. */
void ch_h2_alpn(SSL_CTX *ctx, int h2);

/* -- The HTTP/1.1 request functions' HTTP/2 halves (http/h2_response.c
** for the response). Same results as theirs (conn.h, response.h). */

/* Yields. ch_http_body_more for a stream. */
int ch_h2_body_more(struct ch_http_req *rq, int discard);

/* Yields. ch_http_response_send, _write, _head and _finish for a stream. */
int ch_h2_response_send(struct ch_http_req *rq, const char *body, size_t n);
int ch_h2_response_write(struct ch_http_req *rq, const char *body, size_t n);
int ch_h2_response_head(struct ch_http_req *rq, int64_t clen);
int ch_h2_response_finish(struct ch_http_req *rq);

/* ch_http_response_reset for a stream: RST_STREAM code. Never yields. */
int ch_h2_response_reset(struct ch_http_req *rq, uint32_t code);

/* Yields. The bytes [off, off + left) of file fd as the body after
** ch_h2_response_head (sendfile.c's send_body for a stream). */
int ch_h2_send_file(struct ch_http_req *rq, int fd, int64_t off, int64_t left);

/* -- Between h2.c and h2_response.c ------------------------------------ */

/* The session of st's connection, or NULL once the connection is gone. */
nghttp2_session *ch_h2_session(struct ch_h2_stream *st);

/* Tells the writer there is something to send. Never yields. */
void ch_h2_kick(struct ch_h2_stream *st);

/* Yields. Parks st's handler up to ms (woken by ch_h2_wake): 0, or
** -ETIMEDOUT, -ECANCELED. */
int ch_h2_wait(struct ch_h2_stream *st, int ms);
void ch_h2_wake(struct ch_h2_stream *st);

#endif
