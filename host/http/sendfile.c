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

/* Parses a single "bytes=a-b" range against size. Returns 1 with *from,
** *to (inclusive), 0 to serve the whole file (absent, several ranges or
** not bytes), -1 when unsatisfiable. */
static int parse_range(const char *v, size_t n, int64_t size, int64_t *from, int64_t *to)
{
  if (n < 7 || strncasecmp(v, "bytes=", 6) != 0) return 0;
  v += 6; n -= 6;
  if (memchr(v, ',', n)) return 0;
  char tmp[64];
  if (n >= sizeof tmp) return 0;
  memcpy(tmp, v, n);
  tmp[n] = 0;
  char *dash = strchr(tmp, '-'), *end;
  if (!dash) return 0;
  *dash = 0;
  if (tmp[0] == 0) {                       /* bytes=-N: the last N */
    long long last = strtoll(dash + 1, &end, 10);
    if (*end || dash[1] == 0 || last < 0) return 0;
    if (last == 0 || size == 0) return -1;
    *from = last >= size ? 0 : size - last;
    *to = size - 1;
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
  *from = a;
  *to = b;
  return 1;
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
  int status = rq->status, ranged = 0;
  const struct ch_http_head *h = &rq->h;
  const char *base = ch_http_req_base(rq);
  const char *inm = NULL, *ims = NULL, *range = NULL, *ifr = NULL;
  size_t inml = 0, imsl = 0, rangel = 0, ifrl = 0;
  for (int i = 0; i < h->nheaders; i++) {
    struct ch_http_span nm = h->name[i], vl = h->value[i];
    if (ch_http_name_is(base, nm, "if-none-match")) { inm = base + vl.off; inml = vl.len; }
    else if (ch_http_name_is(base, nm, "if-modified-since")) { ims = base + vl.off; imsl = vl.len; }
    else if (ch_http_name_is(base, nm, "range")) { range = base + vl.off; rangel = vl.len; }
    else if (ch_http_name_is(base, nm, "if-range")) { ifr = base + vl.off; ifrl = vl.len; }
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
    int pr = parse_range(range, rangel, size, &from, &to);
    if (pr < 0) {
      close(fd);
      char cr[64];
      snprintf(cr, sizeof cr, "bytes */%lld", (long long)size);
      rq->status = 416;
      ch_http_header_del(rq, "Content-Range", 13);
      if ((r = ch_http_header_add(rq, "Content-Range", 13, cr, strlen(cr))) < 0) return r;
      static const char msg[] = "416 Range Not Satisfiable\n";
      r = ch_http_response_send(rq, msg, sizeof msg - 1);
      return r < 0 ? r : CH_HTTP_UNSATISFIABLE;
    }
    if (pr > 0) { status = 206; ranged = 1; }
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
