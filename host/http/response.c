/*
** HTTP responses. See response.h. The hot path is a small response in
** one write: the head is built into an array on the writer's stack with
** plain copies after one size check, and a body of OUT_DIRECT bytes or
** less is appended to it.
*/
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "log.h"
#include "worker.h"
#include "http/h2.h"
#include "http/response.h"

#define OUT_DIRECT    16384       /* bodies this big are written from the
                                  ** caller's string, not copied */

/* -- A head buffer --------------------------------------------------------- */

/* A growable byte buffer for response heads. It may start in an array on
** the caller's stack (OB_STACK): a head with a small body then costs no
** malloc and free (docs/benchmarks.md). */
struct obuf {
  char *p;
  size_t len, cap;
  char *stack;                    /* the caller's array p starts in, or NULL */
  int oom;                        /* a reserve failed: the contents are cut */
};

#define OB_STACK_SIZE 1024        /* a hello-sized response: ~150 bytes of
                                  ** head, the rest for the body */
#define OB_STACK(arr) { (arr), 0, sizeof (arr), (arr), 0 }

static int ob_reserve(struct obuf *b, size_t more)
{
  if (b->len + more <= b->cap) return 0;
  int on_stack = b->stack && b->p == b->stack;
  size_t cap = b->cap;
  char *p = ch_buf_grow(on_stack ? NULL : b->p, 1, &cap, b->len + more, 512);
  if (!p) {
    b->oom = 1;
    return -ENOMEM;
  }
  if (on_stack) memcpy(p, b->p, b->len);
  b->p = p;
  b->cap = cap;
  return 0;
}

static void ob_add(struct obuf *b, const char *s, size_t n)
{
  if (ob_reserve(b, n) < 0) return;   /* the caller checks b->oom */
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void ob_free(struct obuf *b)
{
  if (b->p != b->stack) free(b->p);
}

/* -- Words ------------------------------------------------------------------ */

/* "Date: ...\r\n", formatted once a second per worker. */
static const char *date_line(void)
{
  static __thread time_t last;
  static __thread char line[48];
  time_t now = time(NULL);
  if (now != last) {
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(line, sizeof line, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    last = now;
  }
  return line;
}

const char *ch_http_reason(int status)
{
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Content";
  case 426: return "Upgrade Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "Unknown";
  }
}

/* A response head needs two numbers (h2_response.c's too), and printf
** costs many times this loop (docs/benchmarks.md). */
int ch_http_utoa(uint64_t v, char *out)
{
  char tmp[24];
  int n = 0;
  do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

/* "HTTP/1.1 <status> <reason>\r\n" into out (96 bytes); returns length. */
static int status_line(int status, char *out)
{
  const char *r = ch_http_reason(status);
  size_t rl = strlen(r);
  memcpy(out, "HTTP/1.1 ", 9);
  int n = 9 + ch_http_utoa((uint64_t)status, out + 9);
  out[n++] = ' ';
  memcpy(out + n, r, rl);
  n += (int)rl;
  out[n++] = '\r';
  out[n++] = '\n';
  return n;
}

/* -- The handler's headers --------------------------------------------------- */

static int hx_find(const struct ch_http_req *rq, const char *name, size_t n, int from)
{
  for (int i = from; i < rq->nhx; i++)
    if (rq->hx[i].len && rq->hx[i].nlen == n &&
        strncasecmp(rq->hdrs + rq->hx[i].off, name, n) == 0)
      return i;
  return -1;
}

int ch_http_valid_name(const char *s, size_t n)
{
  if (n == 0 || n > 256) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch <= ' ' || ch >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", ch)) return 0;
  }
  return 1;
}

int ch_http_valid_value(const char *s, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if ((ch < ' ' && ch != '\t') || ch == 0x7f) return 0;   /* no CR/LF: no splitting */
  }
  return 1;
}

void ch_http_header_del(struct ch_http_req *rq, const char *name, size_t nl)
{
  for (int i = 0; (i = hx_find(rq, name, nl, i)) >= 0; i++) rq->hx[i].len = 0;
  if (nl == 10 && strncasecmp(name, "connection", 10) == 0) rq->user_close = 0;
}

int ch_http_header_add(struct ch_http_req *rq, const char *name, size_t nl,
                       const char *v, size_t vl)
{
  if (!ch_http_valid_value(v, vl)) return -EINVAL;
  if (rq->nhx == rq->hxcap) {
    size_t cap = (size_t)rq->hxcap;
    void *p = ch_buf_grow(rq->hx, sizeof *rq->hx, &cap, (size_t)rq->nhx + 1, 8);
    if (!p) return -ENOMEM;
    rq->hx = p;
    rq->hxcap = cap < INT_MAX ? (int)cap : INT_MAX;   /* nhx is an int too */
  }
  size_t need = rq->hdrs_len + nl + vl + 4;
  if (need > rq->hdrs_cap) {
    char *p = ch_buf_grow(rq->hdrs, 1, &rq->hdrs_cap, need, 512);
    if (!p) return -ENOMEM;
    rq->hdrs = p;
  }
  char *p = rq->hdrs + rq->hdrs_len;
  memcpy(p, name, nl);
  memcpy(p + nl, ": ", 2);
  memcpy(p + nl + 2, v, vl);
  memcpy(p + nl + 2 + vl, "\r\n", 2);
  rq->hx[rq->nhx].off = (uint32_t)rq->hdrs_len;
  rq->hx[rq->nhx].len = (uint32_t)(nl + vl + 4);
  rq->hx[rq->nhx].nlen = (uint32_t)nl;
  rq->nhx++;
  rq->hdrs_len = need;
  if (nl == 10 && strncasecmp(name, "connection", 10) == 0 &&
      vl == 5 && strncasecmp(v, "close", 5) == 0)
    rq->user_close = 1;
  return 0;
}

int ch_http_trailer_add(struct ch_http_req *rq, const char *name, size_t nl,
                        const char *v, size_t vl)
{
  if (!ch_http_valid_value(v, vl)) return -EINVAL;
  size_t need = rq->trl_len + nl + vl + 4;
  if (need > UINT32_MAX) return -ENOMEM;
  if (need > rq->trl_cap) {
    size_t cap = rq->trl_cap;
    char *p = ch_buf_grow(rq->trl, 1, &cap, need, 256);
    if (!p) return -ENOMEM;
    rq->trl = p;
    rq->trl_cap = cap < UINT32_MAX ? (uint32_t)cap : UINT32_MAX;   /* need fits, checked above */
  }
  char *p = rq->trl + rq->trl_len;
  memcpy(p, name, nl);
  memcpy(p + nl, ": ", 2);
  memcpy(p + nl + 2, v, vl);
  memcpy(p + nl + 2 + vl, "\r\n", 2);
  rq->trl_len = (uint32_t)need;
  return 0;
}

const char *ch_http_header_get(const struct ch_http_req *rq, const char *name, size_t nl,
                               size_t *vl)
{
  int i = hx_find(rq, name, nl, 0);
  if (i < 0) return NULL;
  *vl = rq->hx[i].len - nl - 4;
  return rq->hdrs + rq->hx[i].off + nl + 2;
}

void ch_http_req_release(struct ch_http_req *rq)
{
  free(rq->pend);
  rq->pend = NULL;
  rq->plen = rq->pcap = 0;
  free(rq->hdrs);
  rq->hdrs = NULL;
  rq->hdrs_len = rq->hdrs_cap = 0;
  free(rq->hx);
  rq->hx = NULL;
  rq->nhx = rq->hxcap = 0;
  free(rq->trl);
  rq->trl = NULL;
  rq->trl_len = rq->trl_cap = 0;
}

/* -- The head ---------------------------------------------------------------- */

/* Whether the connection is kept after this response. */
static int decide_keep(const struct ch_http_req *rq)
{
  const struct ch_http_conn *c = rq->c;
  const struct ch_http_head *h = &rq->h;
  if (!h->keepalive || rq->user_close || c->w->stopping) return 0;
  if (rq->body_status) return 0;   /* the body broke: its end is unknown */
  if (c->nreq + 1 >= c->srv->keepalive_requests) return 0;
  /* A body the client holds back for our 100 Continue never comes. */
  if (!h->body_done && h->expect_continue && !rq->continue_sent) return 0;
  return 1;
}

/* Builds the response head into out. clen >= 0: Content-Length; -1:
** chunked (HTTP/1.1) or until close (HTTP/1.0). One reserve for the
** whole head, then plain copies: this runs once per response. */
static void build_head(struct ch_http_req *rq, struct obuf *out, int64_t clen, int default_ctype)
{
  struct ch_http_conn *c = rq->c;
  static const char ctype[] = "Content-Type: text/plain; charset=utf-8\r\n";
  static const char te[] = "Transfer-Encoding: chunked\r\n";
  static const char cclose[] = "Connection: close\r\n";
  static const char ckeep[] = "Connection: keep-alive\r\n";
  const char *date = date_line();
  size_t srvl = strlen(c->srv->server_hdr), datel = strlen(date);
  /* Status line 96, Content-Length 40, the longest Connection line, CRLF. */
  size_t most = 96 + srvl + datel + rq->hdrs_len + sizeof ctype + 40 + sizeof ckeep + 2;
  if (ob_reserve(out, most) < 0) return;
  char *p = out->p + out->len;
#define PUT(s, n) (memcpy(p, (s), (n)), p += (n))
  p += status_line(rq->status, p);
  /* A handler's own Server or Date replaces ours (a proxy copying an
  ** upstream's must not send two). */
  if (srvl && hx_find(rq, "server", 6, 0) < 0) PUT(c->srv->server_hdr, srvl);
  if (hx_find(rq, "date", 4, 0) < 0) PUT(date, datel);
  for (int i = 0; i < rq->nhx; i++)
    if (rq->hx[i].len) PUT(rq->hdrs + rq->hx[i].off, rq->hx[i].len);
  int nobody = rq->status == 204 || rq->status == 304 || rq->status < 200;
  rq->nobody = (uint8_t)nobody;
  if (default_ctype && !nobody && hx_find(rq, "content-type", 12, 0) < 0)
    PUT(ctype, sizeof ctype - 1);
  rq->keep = (uint8_t)decide_keep(rq);
  if (nobody) {
    clen = 0;
  } else if (clen >= 0) {
    if (hx_find(rq, "content-length", 14, 0) < 0) {
      PUT("Content-Length: ", 16);
      p += ch_http_utoa((uint64_t)clen, p);
      PUT("\r\n", 2);
    }
  } else if (rq->h.version_minor >= 1) {
    PUT(te, sizeof te - 1);
    rq->chunked = 1;
  } else {
    rq->until_close = 1;
    rq->keep = 0;
  }
  if (!rq->keep) {
    if (hx_find(rq, "connection", 10, 0) < 0) PUT(cclose, sizeof cclose - 1);
  } else if (rq->h.version_minor == 0) {
    PUT(ckeep, sizeof ckeep - 1);
  }
  PUT("\r\n", 2);
#undef PUT
  rq->head_sent = (uint32_t)(p - (out->p + out->len));
  out->len = (size_t)(p - out->p);
  rq->clen = clen;
  rq->started = 1;
}

/* The Content-Length the handler set itself, or -1. */
static int64_t user_clen(const struct ch_http_req *rq)
{
  int i = hx_find(rq, "content-length", 14, 0);
  return i < 0 ? -1 : strtoll(rq->hdrs + rq->hx[i].off + 16, NULL, 10);
}

/* -- The body ---------------------------------------------------------------- */

/* Yields. Writes the whole of iov[0..n) with the send timeout. */
static int out(struct ch_http_req *rq, struct iovec *iov, int n)
{
  return ch_http_conn_writev(rq->c, iov, n, rq->c->srv->send_ms);
}

/* Yields. Writes head (if any) and a body piece. */
static int emit(struct ch_http_req *rq, struct obuf *head, const char *body, size_t n)
{
  struct iovec iov[4];
  int k = 0;
  char hex[24];
  if (head && head->len) iov[k++] = (struct iovec){ head->p, head->len };
  if (!rq->head_only && !rq->nobody && n > 0) {
    if (rq->chunked) {
      int hl = snprintf(hex, sizeof hex, "%zx\r\n", n);
      iov[k++] = (struct iovec){ hex, (size_t)hl };
      iov[k++] = (struct iovec){ (void *)body, n };
      iov[k++] = (struct iovec){ "\r\n", 2 };
    } else {
      iov[k++] = (struct iovec){ (void *)body, n };
    }
    rq->sent += n;
  }
  if (k == 0) return 0;
  return out(rq, iov, k);
}

/* Yields. The last chunk of a chunked body, with res:trailer's lines. */
static int chunk_end(struct ch_http_req *rq)
{
  struct iovec end[3] = { { "0\r\n", 3 }, { rq->trl, rq->trl_len }, { "\r\n", 2 } };
  return out(rq, end, 3);
}

/* -EMSGSIZE unless n more body bytes fit the Content-Length sent (clen):
** the excess would be read as the next response. */
static int room(const struct ch_http_req *rq, int64_t clen, size_t n)
{
  return clen >= 0 && !rq->head_only && rq->sent + n > (uint64_t)clen ? -EMSGSIZE : 0;
}

int ch_http_response_send(struct ch_http_req *rq, const char *body, size_t n)
{
  if (rq->h2) return ch_h2_response_send(rq, body, n);
  if (rq->finished || rq->hijacked) return -EALREADY;
  int r;
  if (!rq->started && rq->trl_len && rq->h.version_minor >= 1 && user_clen(rq) < 0) {
    /* Trailers need a chunked body: the body as one chunk, then the end. */
    if ((r = ch_http_response_write(rq, body, n)) < 0) return r;
    return ch_http_response_send(rq, "", 0);
  }
  if (!rq->started) {
    char sb[OB_STACK_SIZE];
    struct obuf head = OB_STACK(sb);
    int64_t clen = (int64_t)n, uclen = user_clen(rq);
    /* The handler's own length must match the body. */
    if (uclen >= 0 && uclen != clen && !rq->head_only) return -ERANGE;
    build_head(rq, &head, clen, 1);
    int bodyless = rq->head_only || rq->status == 204 || rq->status == 304;
    if (!bodyless && n <= OUT_DIRECT) {
      ob_add(&head, body, n);   /* one buffer, one write */
      rq->sent += n;
      n = 0;
    } else if (bodyless) {
      n = 0;
    }
    if (head.oom) {
      ob_free(&head);
      return -ENOMEM;
    }
    rq->finished = 1;
    /* The whole response in one buffer, the client's next request here
    ** already: held back for one write with the rest of its batch. */
    if (n == 0 && ch_http_conn_hold(rq, head.p, head.len)) r = 0;
    else r = emit(rq, &head, body, n);
    ob_free(&head);
    return r;
  }
  if ((r = room(rq, rq->clen, n)) < 0) return r;
  rq->finished = 1;
  r = emit(rq, NULL, body, n);
  if (r == 0 && rq->chunked && !rq->head_only) r = chunk_end(rq);
  return r;
}

int ch_http_response_write(struct ch_http_req *rq, const char *body, size_t n)
{
  if (rq->h2) return ch_h2_response_write(rq, body, n);
  if (rq->finished || rq->hijacked) return -EALREADY;
  int r;
  if (!rq->started) {
    int64_t clen = user_clen(rq);
    if ((r = room(rq, clen, n)) < 0) {
      rq->clen = clen;   /* for the caller's message */
      return r;
    }
    char sb[OB_STACK_SIZE];
    struct obuf head = OB_STACK(sb);
    build_head(rq, &head, clen, 1);
    if (head.oom) {
      ob_free(&head);
      return -ENOMEM;
    }
    r = emit(rq, &head, body, n);
    ob_free(&head);
    return r;
  }
  if (n == 0) return 0;
  if ((r = room(rq, rq->clen, n)) < 0) return r;
  return emit(rq, NULL, body, n);
}

int ch_http_response_head(struct ch_http_req *rq, int64_t clen)
{
  if (rq->h2) return ch_h2_response_head(rq, clen);
  if (rq->started || rq->hijacked) return -EALREADY;
  struct obuf head = { 0 };
  build_head(rq, &head, clen, 0);
  if (head.oom) {
    ob_free(&head);
    return -ENOMEM;
  }
  rq->finished = 1;
  int r = emit(rq, &head, NULL, 0);
  ob_free(&head);
  return r;
}

int ch_http_response_reset(struct ch_http_req *rq, uint32_t code)
{
  if (rq->h2) return ch_h2_response_reset(rq, code);
  if (rq->finished || rq->hijacked) return -EALREADY;
  rq->started = 1;   /* finish writes nothing and says close */
  rq->finished = 1;
  rq->keep = 0;
  char peer[80];
  ch_http_peer(rq->c, peer, sizeof peer);
  ch_log(CH_LOG_INFO, "http: the handler reset its response to %s: connection closed", peer);
  /* At once: the client sees the end now, not when the handler returns;
  ** the answers held back before this one first, as far as they go. */
  ch_http_conn_push(rq->c);
  if (rq->c->s.fd >= 0) shutdown(rq->c->s.fd, SHUT_RDWR);
  return 0;
}

/* -- After the handler ------------------------------------------------------- */

int ch_http_response_finish(struct ch_http_req *rq)
{
  if (rq->h2) return ch_h2_response_finish(rq);
  if (rq->hijacked) return 0;
  if (!rq->started) {
    /* The handler answered nothing, or failed first. */
    char sb[OB_STACK_SIZE];
    struct obuf head = OB_STACK(sb);
    const char *body = "";
    char msg[1100];
    if (rq->failed) {
      rq->status = 500;
      rq->nhx = 0;
      rq->hdrs_len = 0;
      body = "500 Internal Server Error\n";
      if (rq->err[0]) {
        snprintf(msg, sizeof msg, "500 Internal Server Error\n%s\n", rq->err);
        body = msg;
      }
    } else if (rq->body_status == 413 || rq->body_status == 400) {
      rq->status = rq->body_status;
      body = rq->status == 413 ? "413 Content Too Large\n" : "400 Bad Request\n";
    }
    size_t bl = strlen(body), sent = rq->head_only ? 0 : bl;
    build_head(rq, &head, (int64_t)bl, bl > 0);
    ob_add(&head, body, sent);
    int keep = 0;
    if (!head.oom) {
      rq->sent += sent;
      struct iovec iov = { head.p, head.len };
      keep = out(rq, &iov, 1) == 0 && rq->keep;
    }
    ob_free(&head);
    return keep;
  }
  if (rq->finished) return rq->keep && !rq->failed;   /* a send that timed out cut it */
  if (rq->failed) return 0;
  if (rq->head_only && !rq->until_close) return rq->keep;
  if (rq->chunked) return chunk_end(rq) == 0 && rq->keep;
  return rq->clen >= 0 && rq->sent == (uint64_t)rq->clen && rq->keep;
}

void ch_http_answer_error(struct ch_http_conn *c, int status)
{
  char b[512];
  const char *r = ch_http_reason(status);
  int n = snprintf(b, sizeof b,
                   "HTTP/1.1 %d %s\r\n%s%sContent-Type: text/plain\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%d %s\n",
                   status, r, c->srv->server_hdr, date_line(),
                   strlen(r) + 5, status, r);
  struct iovec iov = { b, (size_t)n };
  ch_http_conn_writev(c, &iov, 1, c->srv->send_ms);
}
