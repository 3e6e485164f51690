/* Sends files. See sendfile.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http/h2.h"
#include "http/response.h"
#include "http/sendfile.h"

#define PIECE (64 * 1024)         /* TLS: bytes read and written at a time */

static void http_date(char *out, size_t n, time_t t)
{
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

#define MAX_RANGES 16   /* ranges in one Range header; more: the whole file */

struct span { int64_t from, to; };   /* bytes from..to, inclusive */

/* Parses one range spec ("a-b", "a-", "-N") of v[0..n) against size.
** Returns 1 with *out, 0 when it is malformed, -1 when unsatisfiable. */
static int parse_spec(const char *v, size_t n, int64_t size, struct span *out)
{
  char tmp[64];
  if (n == 0 || n >= sizeof tmp) return 0;
  memcpy(tmp, v, n);
  tmp[n] = 0;
  char *dash = strchr(tmp, '-'), *end;
  if (!dash) return 0;
  *dash = 0;
  if (tmp[0] == 0) {                       /* -N: the last N bytes */
    long long last = strtoll(dash + 1, &end, 10);
    if (*end || dash[1] == 0 || last < 0) return 0;
    if (last == 0 || size == 0) return -1;
    out->from = last >= size ? 0 : size - last;
    out->to = size - 1;
    return 1;
  }
  long long a = strtoll(tmp, &end, 10);
  if (*end || a < 0) return 0;
  long long b = size - 1;
  if (dash[1]) {
    b = strtoll(dash + 1, &end, 10);
    if (*end || b < a) return 0;
    if (b >= size) b = size - 1;
  }
  if (a >= size) return -1;
  out->from = a;
  out->to = b;
  return 1;
}

/* Parses "bytes=" and a list of range specs against size into out[].
** Returns how many are satisfiable (> 0; unsatisfiable ones are dropped),
** 0 to serve the whole file (no bytes unit, a malformed spec, more than
** MAX_RANGES, or ranges adding up to more than the file: nginx's rule,
** which keeps "bytes=0-,0-,0-..." from multiplying the answer), or -1
** when none is satisfiable. */
static int parse_ranges(const char *v, size_t n, int64_t size, struct span *out)
{
  if (n < 7 || strncasecmp(v, "bytes=", 6) != 0) return 0;
  v += 6; n -= 6;
  int count = 0, specs = 0;
  int64_t total = 0;
  while (n > 0) {
    while (n > 0 && (*v == ' ' || *v == '\t' || *v == ',')) { v++; n--; }
    if (n == 0) break;
    const char *item = v;
    while (n > 0 && *v != ',') { v++; n--; }
    size_t il = (size_t)(v - item);
    while (il > 0 && (item[il - 1] == ' ' || item[il - 1] == '\t')) il--;
    if (++specs > MAX_RANGES) return 0;
    int r = parse_spec(item, il, size, &out[count]);
    if (r == 0) return 0;
    if (r > 0) {
      total += out[count].to - out[count].from + 1;
      count++;
    }
  }
  if (specs == 0) return 0;
  if (count == 0) return -1;
  return total > size ? 0 : count;
}

/* An HTTP-date (IMF-fixdate, RFC 850 or asctime, RFC 9110 5.6.7) in
** v[0..n) as a time, or -1 when it is none. */
static time_t parse_date(const char *v, size_t n)
{
  static const char *const formats[] = {
    "%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y",
  };
  char tmp[64];
  if (n >= sizeof tmp) return -1;
  memcpy(tmp, v, n);
  tmp[n] = 0;
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(tmp, formats[i], &tm);
    if (end && *end == 0) return timegm(&tm);
  }
  return -1;
}

/* Whether the If-Match list v[0..n) names etag: "*" names any file, and
** the comparison is strong (RFC 9110 13.1.1), so a weak W/"..." never
** matches, as in nginx. */
static int match_etag(const char *v, size_t n, const char *etag)
{
  size_t el = strlen(etag);
  while (n > 0) {
    while (n > 0 && (*v == ' ' || *v == '\t' || *v == ',')) { v++; n--; }
    const char *item = v;
    while (n > 0 && *v != ',') { v++; n--; }
    size_t il = (size_t)(v - item);
    while (il > 0 && (item[il - 1] == ' ' || item[il - 1] == '\t')) il--;
    if ((il == 1 && item[0] == '*') || (il == el && memcmp(item, etag, el) == 0)) return 1;
  }
  return 0;
}

/* Answers rq with a short 4xx of its own (412, 416) and msg as its body;
** cr: its Content-Range, or NULL. */
static int refuse(struct ch_http_req *rq, int status, const char *msg, const char *cr)
{
  int r;
  rq->status = status;
  if (cr) {
    ch_http_header_del(rq, "Content-Range", 13);
    if ((r = ch_http_header_add(rq, "Content-Range", 13, cr, strlen(cr))) < 0) return r;
  }
  r = ch_http_response_send(rq, msg, strlen(msg));
  return r < 0 ? r : CH_HTTP_REFUSED;
}

/* Yields. The file's bytes [off, off + left) after the head: sendfile(2)
** on a plain socket, which copies in the kernel; through TLS, pieces read
** into a buffer of this call's own (another coroutine's sendfile must not
** share it while this one waits: SSL_write's retry wants the same bytes)
** and written as records. pread of a regular file does not park: the page
** cache. */
static int send_body(struct ch_http_req *rq, int fd, off_t off, int64_t left)
{
  struct ch_http_conn *c = rq->c;
  int r = 0;
  if (rq->h2) return ch_h2_send_file(rq, fd, off, left);
  if (c->s.ssl) {
    char *piece = malloc(PIECE);
    if (!piece) return -ENOMEM;
    while (r == 0 && left > 0) {
      ssize_t got = pread(fd, piece, left > PIECE ? PIECE : (size_t)left, off);
      if (got <= 0) { r = got < 0 ? -errno : -EIO; break; }
      r = ch_stream_write(&c->s, piece, (size_t)got, c->srv->send_ms);
      off += got;
      left -= got;
      rq->sent += (uint64_t)got;
    }
    free(piece);
    return r;
  }
  /* The head may still be queued (io_uring's write-behind): sendfile(2)
  ** goes to the socket directly, so it waits for the head first. */
  if ((r = ch_io_flush(c->s.fd, c->srv->send_ms)) < 0) return r;
  while (left > 0) {
    int sock = c->s.fd;
    if (sock < 0) return -EBADF;
    ssize_t w = sendfile(sock, fd, &off, left > (1 << 30) ? (1 << 30) : (size_t)left);
    if (w > 0) { left -= w; rq->sent += (uint64_t)w; continue; }
    if (w == 0) return -EIO;   /* the file shrank under us */
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -errno;
    int ready = ch_io_wait(sock, POLLOUT, c->srv->send_ms);
    if (ready < 0) return ready;
  }
  return 0;
}

/* The head of part i of a multipart/byteranges body into buf (n bytes;
** NULL, 0 to measure): its delimiter, the file's type (ctype, tl bytes;
** none when NULL) and Content-Range. Returns its length. */
static int part_head(char *buf, size_t n, const char *boundary, const char *ctype, size_t tl,
                     const struct span *sp, int64_t size)
{
  if (ctype)
    return snprintf(buf, n, "\r\n--%s\r\nContent-Type: %.*s\r\nContent-Range: bytes %lld-%lld/%lld\r\n\r\n",
                    boundary, (int)tl, ctype, (long long)sp->from, (long long)sp->to, (long long)size);
  return snprintf(buf, n, "\r\n--%s\r\nContent-Range: bytes %lld-%lld/%lld\r\n\r\n",
                  boundary, (long long)sp->from, (long long)sp->to, (long long)size);
}

/* Yields. Answers several ranges as a 206 multipart/byteranges body
** (RFC 9110 14.6), as nginx does: each part has the file's Content-Type
** and its Content-Range, the whole a Content-Length. The headers the
** caller set stay, but Content-Type names the multipart and its boundary. */
static int send_multipart(struct ch_http_req *rq, int fd, const struct span *sp, int count,
                          int64_t size)
{
  static __thread unsigned long long serial;
  char boundary[40];
  snprintf(boundary, sizeof boundary, "%020llu", (unsigned long long)time(NULL) * 1000003ULL + ++serial);
  size_t tl = 0;
  const char *had = ch_http_header_get(rq, "content-type", 12, &tl);
  /* Copied: the header is replaced below. */
  char *ctype = had ? strndup(had, tl) : NULL;
  if (had && !ctype) return -ENOMEM;
  int64_t total = 0;
  for (int i = 0; i < count; i++)
    total += part_head(NULL, 0, boundary, ctype, tl, &sp[i], size) + sp[i].to - sp[i].from + 1;
  char tail[64];
  int taill = snprintf(tail, sizeof tail, "\r\n--%s--\r\n", boundary);
  total += taill;
  char mt[80];
  int mtl = snprintf(mt, sizeof mt, "multipart/byteranges; boundary=%s", boundary);
  ch_http_header_del(rq, "Content-Type", 12);
  int r = ch_http_header_add(rq, "Content-Type", 12, mt, (size_t)mtl);
  rq->status = 206;
  if (r == 0) r = ch_http_response_head(rq, total);
  struct ch_http_conn *c = rq->c;
  for (int i = 0; r == 0 && !rq->head_only && i < count; i++) {
    int hl = part_head(NULL, 0, boundary, ctype, tl, &sp[i], size);
    char *head = malloc((size_t)hl + 1);
    if (!head) { r = -ENOMEM; break; }
    part_head(head, (size_t)hl + 1, boundary, ctype, tl, &sp[i], size);
    r = ch_stream_write(&c->s, head, (size_t)hl, c->srv->send_ms);
    free(head);
    rq->sent += (uint64_t)hl;
    if (r == 0) r = send_body(rq, fd, (off_t)sp[i].from, sp[i].to - sp[i].from + 1);
  }
  if (r == 0 && !rq->head_only) {
    r = ch_stream_write(&c->s, tail, (size_t)taill, c->srv->send_ms);
    rq->sent += (uint64_t)taill;
  }
  free(ctype);
  return r;
}

int ch_http_sendfile(struct ch_http_req *rq, const char *path, const char *ctype, size_t ctl)
{
  if (rq->started || rq->hijacked) return -EALREADY;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) close(fd);
    return CH_HTTP_NOT_FOUND;
  }
  size_t had;
  int r = 0;
  if (ctype && !ch_http_header_get(rq, "content-type", 12, &had))
    r = ch_http_header_add(rq, "Content-Type", 12, ctype, ctl);
  if (r < 0) {
    close(fd);
    return r;
  }
  char etag[64], lm[40];
  snprintf(etag, sizeof etag, "\"%llx-%llx\"", (unsigned long long)st.st_mtime,
           (unsigned long long)st.st_size);
  http_date(lm, sizeof lm, st.st_mtime);
  int64_t size = st.st_size, from = 0, to = size - 1;
  int status = rq->status, ranged = 0, pr = 0;
  struct span spans[MAX_RANGES];
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  const char *inm = NULL, *ims = NULL, *range = NULL, *ifr = NULL, *im = NULL, *ius = NULL;
  size_t inml = 0, imsl = 0, rangel = 0, ifrl = 0, iml = 0, iusl = 0;
  for (int i = 0; i < h->nheaders; i++) {
    struct ch_http_span nm = h->name[i], vl = h->value[i];
    if (ch_http_name_is(base, nm, "if-none-match")) { inm = base + vl.off; inml = vl.len; }
    else if (ch_http_name_is(base, nm, "if-match")) { im = base + vl.off; iml = vl.len; }
    else if (ch_http_name_is(base, nm, "if-unmodified-since")) { ius = base + vl.off; iusl = vl.len; }
    else if (ch_http_name_is(base, nm, "if-modified-since")) { ims = base + vl.off; imsl = vl.len; }
    else if (ch_http_name_is(base, nm, "range")) { range = base + vl.off; rangel = vl.len; }
    else if (ch_http_name_is(base, nm, "if-range")) { ifr = base + vl.off; ifrl = vl.len; }
  }
  /* RFC 9110 13.2.2's order: If-Match, else If-Unmodified-Since (ignored
  ** when it is no date), then If-None-Match or If-Modified-Since, then
  ** Range. A failed precondition is a 412, as nginx answers. */
  int failed = 0;
  if (im) failed = !match_etag(im, iml, etag);
  else if (ius) {
    time_t t = parse_date(ius, iusl);
    failed = t != (time_t)-1 && st.st_mtime > t;
  }
  if (status == 200 && failed) {
    close(fd);
    return refuse(rq, 412, "412 Precondition Failed\n", NULL);
  }
  int not_modified = 0;
  if (inm) {
    size_t el = strlen(etag);
    not_modified = (inml == 1 && inm[0] == '*') ||
                   (inml >= el && memmem(inm, inml, etag, el) != NULL);
  } else if (ims) {
    not_modified = imsl == strlen(lm) && memcmp(ims, lm, imsl) == 0;   /* nginx's exact */
  }
  if (status == 200 && not_modified) {
    status = 304;
  } else if (status == 200 && range &&
             (!ifr || (ifrl == strlen(etag) && memcmp(ifr, etag, ifrl) == 0) ||
              (ifrl == strlen(lm) && memcmp(ifr, lm, ifrl) == 0))) {
    pr = parse_ranges(range, rangel, size, spans);
    if (pr < 0) {
      close(fd);
      char cr[64];
      snprintf(cr, sizeof cr, "bytes */%lld", (long long)size);
      return refuse(rq, 416, "416 Range Not Satisfiable\n", cr);
    }
    if (pr > 0) { status = 206; ranged = 1; from = spans[0].from; to = spans[0].to; }
  }
  rq->status = status;
  /* Headers through the same path as res:header, for validation. */
  if ((r = ch_http_header_add(rq, "ETag", 4, etag, strlen(etag))) < 0 ||
      (r = ch_http_header_add(rq, "Last-Modified", 13, lm, strlen(lm))) < 0 ||
      (!ch_http_header_get(rq, "accept-ranges", 13, &had) &&
       (r = ch_http_header_add(rq, "Accept-Ranges", 13, "bytes", 5)) < 0)) {
    close(fd);
    return r;
  }
  if (ranged && pr > 1) {
    r = send_multipart(rq, fd, spans, pr, size);
    close(fd);
    if (r == -EIO) rq->keep = 0;
    return r < 0 ? r : CH_HTTP_SENT;
  }
  if (ranged) {
    char cr[96];
    int m = snprintf(cr, sizeof cr, "bytes %lld-%lld/%lld", (long long)from, (long long)to,
                     (long long)size);
    if ((r = ch_http_header_add(rq, "Content-Range", 13, cr, (size_t)m)) < 0) {
      close(fd);
      return r;
    }
  }
  int64_t len = status == 304 ? 0 : to - from + 1;
  r = ch_http_response_head(rq, len);
  int64_t left = rq->head_only || status == 304 ? 0 : len;
  if (r == 0 && left > 0) r = send_body(rq, fd, (off_t)from, left);
  close(fd);
  if (r == -EIO) rq->keep = 0;
  return r < 0 ? r : CH_HTTP_SENT;
}
