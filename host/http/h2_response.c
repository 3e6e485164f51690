/*
** HTTP/2 responses: the handler's headers as a HEADERS frame (names
** lower-cased, HTTP/1.1's connection headers dropped), the body through a
** bounded queue per stream that nghttp2's data source empties as the
** client's window allows, trailers, files, and what a handler left
** unfinished. The HTTP/1.1 counterparts are in response.c and sendfile.c;
** the results and misuse codes are theirs (response.h).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "http/h2.h"
#include "http/response.h"

#define QUEUE_MAX (64 * 1024)     /* response bytes a stream queues before
                                  ** its handler parks: about one window */
#define NV_STACK  32              /* header fields without a malloc */

/* -- Header fields ------------------------------------------------------------ */

/* HTTP/1.1 connection headers have no meaning in HTTP/2, and a client
** must treat a response carrying one as malformed (RFC 9113 8.2.2). */
static int hop_by_hop(const char *n, size_t l)
{
  static const char *const names[] = { "connection", "keep-alive", "proxy-connection",
                                       "transfer-encoding", "upgrade", "te", NULL };
  for (int i = 0; names[i]; i++)
    if (strlen(names[i]) == l && strncasecmp(n, names[i], l) == 0) return 1;
  return 0;
}

struct nvs {
  nghttp2_nv *v;
  size_t n, cap;
  nghttp2_nv small[NV_STACK];
};

static int nv_add(struct nvs *a, const char *name, size_t nl, const char *value, size_t vl)
{
  if (a->n == a->cap) {
    int in_small = a->v == a->small;
    nghttp2_nv *p = ch_buf_grow(in_small ? NULL : a->v, sizeof *p, &a->cap, a->cap + 1, NV_STACK);
    if (!p) return -ENOMEM;
    if (in_small) memcpy(p, a->small, sizeof a->small);
    a->v = p;
  }
  /* nghttp2 copies names and values (no NO_COPY flags). */
  a->v[a->n++] = (nghttp2_nv){ (uint8_t *)name, (uint8_t *)value, nl, vl, NGHTTP2_NV_FLAG_NONE };
  return 0;
}

static void nv_free(struct nvs *a)
{
  if (a->v != a->small) free(a->v);
}

/* Adds the "name: value\r\n" lines of buf[0..len) (res:header's or
** res:trailer's), lower-casing their names in place: HTTP/2 names are
** lower case, and the lines are never sent as HTTP/1.1 once here. */
static int nv_lines(struct nvs *a, char *buf, const struct ch_http_req *rq, int trailers, size_t len)
{
  if (!trailers) {
    for (int i = 0; i < rq->nhx; i++) {
      if (!rq->hx[i].len) continue;   /* deleted */
      char *n = buf + rq->hx[i].off;
      size_t nl = rq->hx[i].nlen, vl = rq->hx[i].len - nl - 4;
      if (hop_by_hop(n, nl)) continue;
      for (size_t k = 0; k < nl; k++) n[k] = (char)(n[k] >= 'A' && n[k] <= 'Z' ? n[k] + 32 : n[k]);
      if (nv_add(a, n, nl, n + nl + 2, vl) < 0) return -ENOMEM;
    }
    return 0;
  }
  for (size_t off = 0; off < len;) {
    char *n = buf + off, *colon = memchr(n, ':', len - off), *end = memchr(n, '\r', len - off);
    if (!colon || !end) break;
    size_t nl = (size_t)(colon - n);
    for (size_t k = 0; k < nl; k++) n[k] = (char)(n[k] >= 'A' && n[k] <= 'Z' ? n[k] + 32 : n[k]);
    if (nv_add(a, n, nl, colon + 2, (size_t)(end - colon - 2)) < 0) return -ENOMEM;
    off = (size_t)(end - buf) + 2;
  }
  return 0;
}

/* The Date value, formatted once a second per worker. */
static const char *date_value(size_t *n)
{
  static __thread time_t last;
  static __thread char v[40];
  static __thread size_t vl;
  time_t now = time(NULL);
  if (now != last) {
    struct tm tm;
    gmtime_r(&now, &tm);
    vl = strftime(v, sizeof v, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    last = now;
  }
  *n = vl;
  return v;
}

/* The Content-Length the handler set itself, or -1. */
static int64_t user_clen(const struct ch_http_req *rq)
{
  size_t vl;
  const char *v = ch_http_header_get(rq, "content-length", 14, &vl);
  char tmp[24];
  if (!v || vl >= sizeof tmp) return -1;
  memcpy(tmp, v, vl);
  tmp[vl] = 0;
  return strtoll(tmp, NULL, 10);
}

/* -- The body's data source --------------------------------------------------- */

/* Ends the stream after the queue: END_STREAM on the last DATA, or the
** trailers after it. */
static void at_eof(struct ch_h2_stream *st, nghttp2_session *s, uint32_t *flags)
{
  struct ch_http_req *rq = &st->rq;
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  st->local_done = 1;
  if (rq->trl_len) {
    struct nvs a = { .cap = NV_STACK };
    a.v = a.small;
    if (nv_lines(&a, rq->trl, rq, 1, rq->trl_len) == 0 &&
        nghttp2_submit_trailer(s, st->id, a.v, a.n) == 0)
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nv_free(&a);
  }
}

/* nghttp2 asks for up to length body bytes as the window allows. */
static ssize_t source_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
  (void)id; (void)ud;
  struct ch_h2_stream *st = src->ptr;
  size_t avail = st->olen - st->ooff, n = avail < length ? avail : length;
  if (n == 0 && !st->oend) {
    st->deferred = 1;   /* resumed when the handler queues more */
    return NGHTTP2_ERR_DEFERRED;
  }
  memcpy(buf, st->ob + st->ooff, n);
  st->ooff += (uint32_t)n;
  if (st->ooff == st->olen) st->ooff = st->olen = 0;
  if (n == avail && st->oend) at_eof(st, s, flags);
  ch_h2_wake(st);   /* progress: a handler waiting for room goes on */
  return (ssize_t)n;
}

/* More to send, or the end: wakes the data source and the writer. */
static void resume(struct ch_h2_stream *st)
{
  nghttp2_session *s = ch_h2_session(st);
  if (!s) return;
  if (st->deferred) {
    st->deferred = 0;
    nghttp2_session_resume_data(s, st->id);
  }
  ch_h2_kick(st);
}

/* Room for n more queued bytes (n <= QUEUE_MAX - unsent). */
static int reserve(struct ch_h2_stream *st, size_t n)
{
  if (st->ooff && st->olen + n > st->ocap) {
    memmove(st->ob, st->ob + st->ooff, st->olen - st->ooff);
    st->olen -= st->ooff;
    st->ooff = 0;
  }
  if (st->olen + n <= st->ocap) return 0;
  char *p = realloc(st->ob, QUEUE_MAX);
  if (!p) return -ENOMEM;
  st->ob = p;
  st->ocap = QUEUE_MAX;
  return 0;
}

/* Yields. Waits for room in st's queue: the bytes it can take now (> 0),
** or -ECONNRESET (the stream closed), -ETIMEDOUT (send_timeout with no
** progress: a window that never opens), -ECANCELED. */
static long room(struct ch_h2_stream *st)
{
  for (;;) {
    if (!ch_h2_session(st)) return -ECONNRESET;
    size_t unsent = st->olen - st->ooff;
    if (unsent < QUEUE_MAX) return (long)(QUEUE_MAX - unsent);
    int r = ch_h2_wait(st, st->rq.c->srv->send_ms);
    if (r == -ETIMEDOUT) {   /* the client's window stayed shut: give up */
      nghttp2_submit_rst_stream(ch_h2_session(st), NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
      st->local_done = 1;
      ch_h2_kick(st);
    }
    if (r < 0) return r;
  }
}

/* Yields. Queues n body bytes, parking while the queue is full. */
static int queue_body(struct ch_http_req *rq, const char *p, size_t n)
{
  struct ch_h2_stream *st = rq->h2;
  while (n > 0) {
    long k = room(st);
    if (k < 0) return (int)k;
    if ((size_t)k > n) k = (long)n;
    if (reserve(st, (size_t)k) < 0) return -ENOMEM;
    memcpy(st->ob + st->olen, p, (size_t)k);
    st->olen += (uint32_t)k;
    p += k;
    n -= (size_t)k;
    rq->sent += (uint64_t)k;
    resume(st);
  }
  return 0;
}

static void end_body(struct ch_h2_stream *st)
{
  if (st->local_done) return;
  st->oend = 1;
  resume(st);
}

/* -- The head ------------------------------------------------------------------- */

/* Submits the response's HEADERS: status, Server, Date, the handler's
** headers, Content-Type (default_ctype) and Content-Length (clen >= 0).
** With body (and a response that may have one) a data source follows,
** else the HEADERS end the stream. Without body but with trailers the
** response is trailers-only: the trailers join this one HEADERS frame and
** there is no Content-Length (gRPC's Trailers-Only has none). */
static int submit_head(struct ch_http_req *rq, int64_t clen, int default_ctype, int body)
{
  struct ch_h2_stream *st = rq->h2;
  struct ch_http_server *srv = rq->c->srv;
  nghttp2_session *s = ch_h2_session(st);
  if (!s) return -ECONNRESET;
  int nobody = rq->status == 204 || rq->status == 304 || rq->status < 200;
  rq->nobody = (uint8_t)nobody;
  char status[24], cl[24];
  size_t stl = (size_t)ch_http_utoa((uint64_t)rq->status, status);   /* 100..999 */
  struct nvs a = { .cap = NV_STACK };
  a.v = a.small;
  size_t dl, had, svl = strlen(srv->server_hdr);
  int r = nv_add(&a, ":status", 7, status, stl);
  if (svl > 10 && !ch_http_header_get(rq, "server", 6, &had))   /* "Server: x\r\n" */
    r |= nv_add(&a, "server", 6, srv->server_hdr + 8, svl - 10);
  const char *date = date_value(&dl);
  r |= nv_add(&a, "date", 4, date, dl);
  r |= nv_lines(&a, rq->hdrs, rq, 0, 0);
  if (default_ctype && !nobody && !ch_http_header_get(rq, "content-type", 12, &had))
    r |= nv_add(&a, "content-type", 12, "text/plain; charset=utf-8", 25);
  int trailers_only = !body && rq->trl_len > 0;
  if (nobody) clen = 0;
  else if (clen >= 0 && !trailers_only && !ch_http_header_get(rq, "content-length", 14, &had))
    r |= nv_add(&a, "content-length", 14, cl, (size_t)ch_http_utoa((uint64_t)clen, cl));
  if (trailers_only) r |= nv_lines(&a, rq->trl, rq, 1, rq->trl_len);
  if (r < 0) {
    nv_free(&a);
    return -ENOMEM;
  }
  int with_source = body && !nobody && !rq->head_only;
  nghttp2_data_provider prd = { .source.ptr = st, .read_callback = source_read };
  r = nghttp2_submit_response(s, st->id, a.v, a.n, with_source ? &prd : NULL);
  nv_free(&a);
  if (r != 0) return r == NGHTTP2_ERR_NOMEM ? -ENOMEM : -ECONNRESET;
  if (!with_source) st->local_done = 1;
  rq->started = 1;
  rq->clen = clen;
  ch_h2_kick(st);
  return 0;
}

static int body_allowed(const struct ch_http_req *rq)
{
  return !rq->nobody && !rq->head_only && !rq->h2->local_done;
}

int ch_h2_response_send(struct ch_http_req *rq, const char *body, size_t n)
{
  if (rq->finished) return -EALREADY;
  int r;
  if (!rq->started) {
    int64_t uclen = user_clen(rq);
    if (uclen >= 0 && uclen != (int64_t)n && !rq->head_only) return -ERANGE;
    if ((r = submit_head(rq, (int64_t)n, 1, n > 0)) < 0) return r;
  } else if (rq->clen >= 0 && !rq->head_only && rq->sent + n > (uint64_t)rq->clen) {
    return -EMSGSIZE;
  }
  rq->finished = 1;
  r = body_allowed(rq) ? queue_body(rq, body, n) : 0;
  end_body(rq->h2);
  return r;
}

int ch_h2_response_write(struct ch_http_req *rq, const char *body, size_t n)
{
  if (rq->finished) return -EALREADY;
  int r;
  if (!rq->started) {
    int64_t clen = user_clen(rq);
    if (clen >= 0 && !rq->head_only && n > (uint64_t)clen) {
      rq->clen = clen;   /* for the caller's message */
      return -EMSGSIZE;
    }
    if ((r = submit_head(rq, clen, 1, 1)) < 0) return r;
  } else if (rq->clen >= 0 && !rq->head_only && rq->sent + n > (uint64_t)rq->clen) {
    return -EMSGSIZE;
  }
  if (n == 0 || !body_allowed(rq)) return 0;
  return queue_body(rq, body, n);
}

int ch_h2_response_head(struct ch_http_req *rq, int64_t clen)
{
  if (rq->started) return -EALREADY;
  int r = submit_head(rq, clen, 0, clen > 0);
  if (r < 0) return r;
  rq->finished = 1;
  return 0;
}

int ch_h2_send_file(struct ch_http_req *rq, int fd, int64_t off, int64_t left)
{
  struct ch_h2_stream *st = rq->h2;
  while (left > 0 && body_allowed(rq)) {
    long k = room(st);
    if (k < 0) return (int)k;
    if (k > left) k = (long)left;
    if (reserve(st, (size_t)k) < 0) return -ENOMEM;
    /* A regular file's pread does not park: the page cache. */
    ssize_t got = pread(fd, st->ob + st->olen, (size_t)k, off);
    if (got <= 0) return got < 0 ? -errno : -EIO;   /* the file shrank */
    st->olen += (uint32_t)got;
    off += got;
    left -= got;
    rq->sent += (uint64_t)got;
    resume(st);
  }
  end_body(st);
  return 0;
}

int ch_h2_response_reset(struct ch_http_req *rq, uint32_t code)
{
  struct ch_h2_stream *st = rq->h2;
  if (rq->finished) return -EALREADY;
  rq->started = 1;   /* finish adds nothing: no 500, no END_STREAM */
  rq->finished = 1;
  if (st->local_done || !ch_h2_session(st)) return 0;   /* already over on the wire */
  char peer[80];
  ch_http_peer(rq->c, peer, sizeof peer);
  ch_log(CH_LOG_INFO, "http2: the handler reset stream %d of %s (code %u)", (int)st->id, peer, code);
  nghttp2_submit_rst_stream(ch_h2_session(st), NGHTTP2_FLAG_NONE, st->id, code);
  st->local_done = 1;
  ch_h2_kick(st);
  return 0;
}

/* -- After the handler ------------------------------------------------------- */

int ch_h2_response_finish(struct ch_http_req *rq)
{
  struct ch_h2_stream *st = rq->h2;
  if (!ch_h2_session(st)) return 0;
  if (!rq->started) {
    /* Nothing answered, or the handler failed first: as HTTP/1.1. */
    char msg[1100];
    const char *body = "";
    if (rq->failed) {
      rq->status = 500;
      rq->nhx = 0;
      rq->hdrs_len = 0;
      rq->trl_len = 0;
      body = "500 Internal Server Error\n";
      if (rq->err[0]) {
        snprintf(msg, sizeof msg, "500 Internal Server Error\n%s\n", rq->err);
        body = msg;
      }
    } else if (rq->body_status) {
      rq->status = rq->body_status;
      snprintf(msg, sizeof msg, "%d %s\n", rq->status, ch_http_reason(rq->status));
      body = msg;
    }
    ch_h2_response_send(rq, body, strlen(body));
  } else if (!st->local_done && rq->failed) {
    /* Failed in the middle of its body: this stream only is reset
    ** (HTTP/1.1 closes the connection). */
    nghttp2_submit_rst_stream(ch_h2_session(st), NGHTTP2_FLAG_NONE, st->id,
                              NGHTTP2_INTERNAL_ERROR);
    st->local_done = 1;
    ch_h2_kick(st);
  } else {
    end_body(st);
  }
  /* Until nghttp2 has taken the last byte: each wake is progress. */
  while (!st->local_done && ch_h2_session(st)) {
    int r = ch_h2_wait(st, rq->c->srv->send_ms);
    if (r == -ETIMEDOUT || r == -ECANCELED) {
      nghttp2_submit_rst_stream(ch_h2_session(st), NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
      st->local_done = 1;
      ch_h2_kick(st);
    }
  }
  return 0;
}
