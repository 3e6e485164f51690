/*
** libFuzzer harness for a whole cohost.http connection: the real host
** (runtime, hooks, LuaJIT, lib_http.c, lua/cohost/http*) runs in this
** process, serving spec/fuzz/fuzz_http_conn_server.lua on a unix socket,
** and each input is one client connection to it. Built by scripts/fuzz.sh
** from the Makefile's RUNTIME_SRC and HOST_SRC with host/main.c compiled
** with -Dmain=ch_fuzz_host_main (no edit there): LLVMFuzzerInitialize
** runs that on a thread of its own, whose thread becomes worker 0.
**
** Input: the bytes the client sends, with "~|~" where one write ends. Each
** piece is written, then the harness waits (up to 20 ms) until the server
** has read it (SIOCOUTQ: the bytes the peer has not taken yet), so the
** server really sees the pieces as separate reads. Then the client
** half-closes and reads until the server closes.
**
** Invariants (abort() with "invariant failed: ..." on a failure):
**   - the process does not crash (ASan, UBSan in the host as well);
**   - the server closes the connection within 5 s of the half-close;
**   - the bytes received are a sequence of well-formed HTTP/1.x responses
**     (status line, headers, body framed by Content-Length, chunked, or
**     the close); interim 100 Continue allowed;
**   - the handler's answers come in order: their X-Seq values are
**     consecutive from the first; an answer of the server itself (no
**     X-Seq: 400, 408, 413, 414, 431, 501, 505) or one that closes ends
**     the stream;
**   - 500s are exactly the handler's deliberate errors (/err paths):
**     another one means a Lua error inside cohost.http;
**   - after the connection, the process holds the same fds as before and
**     the worker the same number of live coroutines and connections
**     (polled for up to 2 s: the server finishes asynchronously).
** Lua coverage: the same line hook as fuzz_lua.c, installed on every
** lua_State the host creates (the link wraps lua_newstate, which
** host/vm/heap.c's ch_heap_newstate calls).
** FUZZ_DEBUG=1 prints the response stream of each input.
**
** Built with -DFUZZ_H2 (scripts/fuzz.sh's h2_conn), the server allows
** HTTP/2 and an input that starts with the client preface is an HTTP/2
** connection. Its answer is checked instead as a sequence of whole frames
** that opens with the server's SETTINGS, whose header blocks (HEADERS +
** CONTINUATION) decode with an HPACK decoder of their own and carry a
** :status of 100..599 first; 500s are at most the deliberate errors (the
** client can reset a stream, or break the connection, before its 500 is
** out). The fd, coroutine and connection counts are checked as for
** HTTP/1.1. An input without the preface is HTTP/1.1, checked as above.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include <lauxlib.h>
#include <lua.h>

#ifdef FUZZ_H2
#include <nghttp2/nghttp2.h>
#define FUZZ_PROTO "h2"
#else
#define FUZZ_PROTO "h1"
#endif

#ifndef FUZZ_ROOT
#error "FUZZ_ROOT: the repository's absolute path"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int ch_fuzz_host_main(int argc, char **argv);
lua_State *__real_lua_newstate(lua_Alloc f, void *ud);
lua_State *__wrap_lua_newstate(lua_Alloc f, void *ud);

#define MARKER      "~|~"
#define MARKER_LEN  3
#define MAX_PIECES  64
#define MAX_RESP    (1 << 20)      /* bytes of responses kept per input */

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz_http_conn: invariant failed: " __VA_ARGS__);    \
      fprintf(stderr, " (line %d)\n", __LINE__);                            \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* -- Lua coverage (as fuzz_lua.c) ---------------------------------------- */

#define COV_SIZE (1u << 16)
__attribute__((used, section("__libfuzzer_extra_counters")))
static uint8_t cov[COV_SIZE];
static __thread uint32_t prev_loc;
static __thread const char *last_src;
static __thread uint32_t last_hash;

static uint32_t src_hash(const char *src)
{
  static const char root[] = "@" FUZZ_ROOT "/lua/";
  if (strncmp(src, root, sizeof root - 1) != 0) return 0;
  uint32_t h = 2166136261u;
  for (const char *p = src; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return h | 1;
}

static void line_hook(lua_State *l, lua_Debug *ar)
{
  if (!lua_getinfo(l, "S", ar)) return;
  if (ar->source != last_src) {
    last_src = ar->source;
    last_hash = src_hash(ar->source);
  }
  if (!last_hash) return;
  uint32_t loc = (last_hash ^ ((uint32_t)ar->currentline * 2654435761u)) & (COV_SIZE - 1);
  uint8_t *c = &cov[(loc ^ prev_loc) & (COV_SIZE - 1)];
  if (*c < 255) (*c)++;
  prev_loc = loc >> 1;
}

lua_State *__wrap_lua_newstate(lua_Alloc f, void *ud)
{
  lua_State *L = __real_lua_newstate(f, ud);
  if (L && !getenv("FUZZ_JIT")) lua_sethook(L, line_hook, LUA_MASKLINE, 0);
  return L;
}

/* -- The server ------------------------------------------------------------ */

static char sock_path[108];
static int base_fds;               /* fds open between inputs */
static long base_coros, base_conns;
static int debug;

static void *host_thread(void *p)
{
  (void)p;
  static char *argv[] = { "cohost", "--log-level", "warn",
                          FUZZ_ROOT "/spec/fuzz/fuzz_http_conn_server.lua", sock_path,
                          FUZZ_PROTO, NULL };
  int r = ch_fuzz_host_main(6, argv);
  fprintf(stderr, "fuzz_http_conn: the host returned %d\n", r);
  abort();
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The fds open now, but pipes and /dev/null: libFuzzer and the sanitizers
** start a symbolizer process the first time they print a function name,
** and keep its pipes. The server's own fds are sockets, files, epoll and
** eventfds. O(fds), a readlink each. */
static int count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d) abort();
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], target[64];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len < 0) continue;
    target[len] = '\0';
    if (strncmp(target, "pipe:", 5) == 0 || strcmp(target, "/dev/null") == 0) continue;
    n++;
  }
  closedir(d);
  return n;   /* includes the DIR's own fd: constant */
}

/* Waits up to 2 s for the fd count to come back to base_fds; returns the
** last count. */
static int settle_fds(void)
{
  double end = now_s() + 2;
  int n;
  while ((n = count_fds()) != base_fds && now_s() < end) usleep(1000);
  return n;
}

/* On a failure: what the fds are. */
static void list_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n > 0) fprintf(stderr, "  fd %s -> %.*s\n", e->d_name, (int)n, target);
  }
  closedir(d);
}

static int dial(void)
{
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) abort();
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads what is there (waiting up to ms for the first bytes) into buf;
** returns 0 at EOF, -1 when nothing came, else the bytes. */
static ssize_t pull(int fd, char *buf, size_t *len, int ms)
{
  struct pollfd pfd = { .fd = fd, .events = POLLIN };
  if (poll(&pfd, 1, ms) <= 0) return -1;
  char tmp[65536];
  ssize_t n = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN ? -1 : 0;   /* ECONNRESET counts as the end */
  if (n > 0 && *len + (size_t)n <= MAX_RESP) {
    memcpy(buf + *len, tmp, (size_t)n);
    *len += (size_t)n;
  }
  return n;
}

/* One GET /__stats: live coroutines and connections of the worker. */
static void stats(long *coros, long *conns, long *seq, long *errors)
{
  int fd = -1;
  for (int i = 0; i < 200 && (fd = dial()) < 0; i++) usleep(10000);
  CHECK(fd >= 0, "cannot reach the server at %s", sock_path);
  static const char req[] = "GET /__stats HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n";
  CHECK(send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1), "stats send");
  static char buf[8192];
  size_t len = 0;
  double end = now_s() + 5;
  while (now_s() < end && pull(fd, buf, &len, 100) != 0) {}
  close(fd);
  buf[len < sizeof buf ? len : sizeof buf - 1] = '\0';
  const char *c = strstr(buf, "X-Coros: "), *n = strstr(buf, "X-Conns: ");
  const char *s = strstr(buf, "X-Seq-Now: "), *e = strstr(buf, "X-Errors: ");
  CHECK(c && n && s && e, "no stats in: %.200s", buf);
  *coros = atol(c + 9);
  *conns = atol(n + 9);
  *seq = atol(s + 11);
  *errors = atol(e + 10);
}

static void remove_sock(void)
{
  unlink(sock_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc; (void)argv;
  debug = getenv("FUZZ_DEBUG") != NULL;
  snprintf(sock_path, sizeof sock_path, "/tmp/cohost-fuzz-conn-%d.sock", (int)getpid());
  unlink(sock_path);
  pthread_t t;
  if (pthread_create(&t, NULL, host_thread, NULL) != 0) abort();
  pthread_detach(t);
  long seq, errors;
  stats(&base_coros, &base_conns, &seq, &errors);   /* waits for the server */
  atexit(remove_sock);
  base_fds = count_fds();
  return 0;
}

/* -- Checking the responses --------------------------------------------- */

static const char *find_header(const char *head, size_t hlen, const char *name)
{
  size_t nl = strlen(name);
  for (const char *p = head; p && p < head + hlen; ) {
    const char *eol = memchr(p, '\n', (size_t)(head + hlen - p));
    if (!eol) break;
    if ((size_t)(eol - p) > nl + 1 && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
      p += nl + 1;
      while (*p == ' ') p++;
      return p;
    }
    p = eol + 1;
  }
  return NULL;
}

/* Walks the response stream; checks framing and order. Returns the 500s
** seen and sets *last_seq to the last X-Seq (0: none). */
static int check_responses(const char *buf, size_t len, long *first_seq, long *last_seq)
{
  size_t pos = 0;
  int n500 = 0, ended = 0;
  *first_seq = *last_seq = 0;
  while (pos < len) {
    CHECK(!ended, "bytes after a response that ends the connection (at %zu of %zu)", pos, len);
    const char *p = buf + pos;
    const char *end = memmem(p, len - pos, "\r\n\r\n", 4);
    CHECK(end, "a response head cut short at %zu of %zu", pos, len);
    size_t hlen = (size_t)(end - p) + 4;
    CHECK(hlen > 12 && (memcmp(p, "HTTP/1.1 ", 9) == 0 || memcmp(p, "HTTP/1.0 ", 9) == 0),
          "bad status line at %zu: %.40s", pos, p);
    int status = atoi(p + 9);
    CHECK(status >= 100 && status <= 599, "status %d", status);
    pos += hlen;
    if (status == 100) continue;   /* interim */
    const char *seq = find_header(p, hlen, "X-Seq");
    const char *method = find_header(p, hlen, "X-Method");
    const char *cl = find_header(p, hlen, "Content-Length");
    const char *te = find_header(p, hlen, "Transfer-Encoding");
    const char *conn = find_header(p, hlen, "Connection");
    if (status == 500) n500++;
    if (seq) {
      long s = atol(seq);
      if (*last_seq) CHECK(s == *last_seq + 1, "X-Seq %ld after %ld", s, *last_seq);
      else *first_seq = s;
      *last_seq = s;
    } else if (status != 500) {
      /* The server's own answers close the connection. */
      ended = 1;
    }
    if (conn && strncasecmp(conn, "close", 5) == 0) ended = 1;
    int head = method && strncmp(method, "HEAD", 4) == 0;
    if (head || status == 204 || status == 304) continue;
    if (te) {
      CHECK(!cl, "both Content-Length and Transfer-Encoding");
      CHECK(strncasecmp(te, "chunked", 7) == 0, "Transfer-Encoding %.20s", te);
      for (;;) {
        const char *eol = memmem(buf + pos, len - pos, "\r\n", 2);
        CHECK(eol, "a chunk size line cut short at %zu", pos);
        char *stop;
        unsigned long sz = strtoul(buf + pos, &stop, 16);
        CHECK(stop == eol && stop > buf + pos, "bad chunk size line at %zu", pos);
        pos = (size_t)(eol - buf) + 2;
        if (sz == 0) {
          CHECK(len - pos >= 2 && memcmp(buf + pos, "\r\n", 2) == 0, "no CRLF after the last chunk");
          pos += 2;
          break;
        }
        CHECK(len - pos >= sz + 2 && memcmp(buf + pos + sz, "\r\n", 2) == 0, "chunk of %lu cut short", sz);
        pos += sz + 2;
      }
    } else if (cl) {
      unsigned long n = strtoul(cl, NULL, 10);
      CHECK(len - pos >= n, "a %lu-byte body cut short (%zu left)", n, len - pos);
      pos += n;
    } else {
      pos = len;   /* until the close (HTTP/1.0 streaming) */
      ended = 1;
    }
  }
  return n500;
}

#ifdef FUZZ_H2
/* -- Checking an HTTP/2 answer ------------------------------------------- */

static uint32_t be(const unsigned char *p, int n)
{
  uint32_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

/* Decodes one whole header block; returns the 500s in it (0 or 1). */
static int check_block(nghttp2_hd_inflater *inf, const unsigned char *b, size_t n)
{
  int first = 1, status = 0;
  for (;;) {
    nghttp2_nv nv;
    int flags = 0;
    ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &flags, b, n, 1);
    CHECK(r >= 0, "the server's header block does not decode: %s", nghttp2_strerror((int)r));
    b += r;
    n -= (size_t)r;
    if (flags & NGHTTP2_HD_INFLATE_EMIT) {
      if (first && nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0) {
        char v[8] = { 0 };
        memcpy(v, nv.value, nv.valuelen < 7 ? nv.valuelen : 7);
        status = atoi(v);
        CHECK(nv.valuelen == 3 && status >= 100 && status <= 599, "bad :status %.*s",
              (int)nv.valuelen, nv.value);
      }
      /* A trailer block has no :status; a response's has it first. */
      CHECK(first || nv.name[0] != ':', "pseudo-header %.*s after a field", (int)nv.namelen, nv.name);
      first = 0;
    }
    if (flags & NGHTTP2_HD_INFLATE_FINAL) break;
    CHECK(r > 0 || n > 0, "the HPACK decoder stalled");
  }
  nghttp2_hd_inflate_end_headers(inf);
  return status == 500;
}

/* Walks the server's frames; returns the 500s seen. */
static int check_h2(const char *buf, size_t len)
{
  const unsigned char *p = (const unsigned char *)buf, *end = p + len;
  static unsigned char block[MAX_RESP];
  size_t blen = 0;
  int n500 = 0, frames = 0, in_block = 0, goaway = 0;
  nghttp2_hd_inflater *inf;
  CHECK(nghttp2_hd_inflate_new(&inf) == 0, "no inflater");
  while (p < end) {
    CHECK(end - p >= 9, "a frame header cut short (%zd bytes left)", (ssize_t)(end - p));
    uint32_t n = be(p, 3), sid = be(p + 5, 4) & 0x7fffffffu;
    uint8_t type = p[3], flags = p[4];
    CHECK((size_t)(end - p) >= 9 + n, "a %u-byte frame of type %u cut short", n, type);
    const unsigned char *pl = p + 9;
    if (frames++ == 0)
      CHECK(type == NGHTTP2_SETTINGS && !(flags & NGHTTP2_FLAG_ACK) && sid == 0,
            "the server's first frame is type %u, not its SETTINGS", type);
    CHECK(!in_block || type == NGHTTP2_CONTINUATION, "frame type %u inside a header block", type);
    CHECK(type != NGHTTP2_PUSH_PROMISE, "a PUSH_PROMISE");
    switch (type) {
    case NGHTTP2_HEADERS: {
      CHECK(sid != 0 && sid % 2 == 1, "HEADERS on stream %u", sid);
      size_t pad = 0, skip = 0;
      if (flags & NGHTTP2_FLAG_PADDED) { CHECK(n >= 1, "padded HEADERS"); pad = pl[0]; skip = 1; }
      if (flags & NGHTTP2_FLAG_PRIORITY) skip += 5;
      CHECK(skip + pad <= n, "HEADERS padding past its frame");
      memcpy(block, pl + skip, n - skip - pad);
      blen = n - skip - pad;
      in_block = !(flags & NGHTTP2_FLAG_END_HEADERS);
      break;
    }
    case NGHTTP2_CONTINUATION:
      CHECK(in_block, "CONTINUATION outside a header block");
      CHECK(blen + n <= sizeof block, "header block too long");
      memcpy(block + blen, pl, n);
      blen += n;
      in_block = !(flags & NGHTTP2_FLAG_END_HEADERS);
      break;
    case NGHTTP2_DATA:
      CHECK(sid != 0 && sid % 2 == 1, "DATA on stream %u", sid);
      break;
    case NGHTTP2_SETTINGS:
      CHECK(sid == 0 && n % 6 == 0, "SETTINGS of %u bytes on stream %u", n, sid);
      break;
    case NGHTTP2_GOAWAY:
      CHECK(sid == 0 && n >= 8, "GOAWAY of %u bytes on stream %u", n, sid);
      goaway++;
      break;
    case NGHTTP2_RST_STREAM:
      CHECK(sid != 0 && n == 4, "RST_STREAM of %u bytes on stream %u", n, sid);
      break;
    case NGHTTP2_WINDOW_UPDATE:
      CHECK(n == 4, "WINDOW_UPDATE of %u bytes", n);
      break;
    case NGHTTP2_PING:
      CHECK(sid == 0 && n == 8, "PING of %u bytes on stream %u", n, sid);
      break;
    }
    if ((type == NGHTTP2_HEADERS || type == NGHTTP2_CONTINUATION) && !in_block)
      n500 += check_block(inf, block, blen);
    p += 9 + n;
  }
  CHECK(!in_block, "the answer ends inside a header block");
  CHECK(goaway <= 3, "%d GOAWAYs", goaway);
  nghttp2_hd_inflate_del(inf);
  return n500;
}
#endif

/* -- One connection --------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static char resp[MAX_RESP];
  size_t rlen = 0;
  long coros0, conns0, seq0, err0;
  stats(&coros0, &conns0, &seq0, &err0);

  int fd = -1;
  for (int i = 0; i < 200 && (fd = dial()) < 0; i++) usleep(10000);
  CHECK(fd >= 0, "cannot connect");
  fcntl(fd, F_SETFL, O_NONBLOCK);

  /* Write the pieces, each read by the server before the next. */
  const char *p = (const char *)data, *end = p + size;
  int pieces = 0, broken = 0;
  while (p <= end && !broken) {
    const char *m = pieces < MAX_PIECES - 1 ? memmem(p, (size_t)(end - p), MARKER, MARKER_LEN) : NULL;
    const char *stop = m ? m : end;
    size_t left = (size_t)(stop - p);
    double deadline = now_s() + 2;
    while (left > 0 && !broken) {
      ssize_t n = send(fd, p, left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        p += n;
        left -= (size_t)n;
      } else if (n < 0 && errno == EAGAIN) {
        /* The server is not reading: take its answers meanwhile. */
        if (pull(fd, resp, &rlen, 10) == 0 || now_s() > deadline) broken = 1;
      } else {
        broken = 1;   /* the server closed: what it sent is still checked */
      }
    }
    pieces++;
    /* Wait until the server has taken the piece. */
    for (int i = 0; i < 20 && !broken; i++) {
      int outq = 0;
      if (ioctl(fd, SIOCOUTQ, &outq) < 0 || outq == 0) break;
      if (pull(fd, resp, &rlen, 1) == 0) broken = 1;
    }
    if (!m) break;
    p = m + MARKER_LEN;
  }
  shutdown(fd, SHUT_WR);
  double deadline = now_s() + 5;
  ssize_t r;
  while ((r = pull(fd, resp, &rlen, 100)) != 0)
    CHECK(now_s() < deadline, "the server kept the connection open 5 s after the client's half-close");
  close(fd);
  if (debug) fprintf(stderr, "fuzz_http_conn: %zu bytes back:\n%.*s\n", rlen, (int)rlen, resp);

  long first = 0, last = 0;
  int n500, h2 = 0;
#ifdef FUZZ_H2
  /* HTTP/2 when the server answered with something else than HTTP/1.x,
  ** or when the bytes sent, without the markers, start with the preface
  ** (an answer can be empty). */
  char sent[24];
  size_t sn = 0;
  for (size_t i = 0; i < size && sn < sizeof sent; i++) {
    if (size - i >= MARKER_LEN && memcmp(data + i, MARKER, MARKER_LEN) == 0) {
      i += MARKER_LEN - 1;
      continue;
    }
    sent[sn++] = (char)data[i];
  }
  h2 = (sn == 24 && memcmp(sent, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24) == 0)
       || (rlen > 0 && (rlen < 7 || memcmp(resp, "HTTP/1.", 7) != 0));
#endif
  if (h2) {
#ifdef FUZZ_H2
    n500 = check_h2(resp, rlen);
#endif
  } else {
    n500 = check_responses(resp, rlen, &first, &last);
  }

  /* The connection's coroutine and fd go away; compare with before. The
  ** server closes asynchronously, and a stats request leaves its own
  ** server-side fd for a moment (lingering close): the fds are polled
  ** with no request in flight, before and after the stats. */
  long coros, conns, seq, err;
  settle_fds();
  deadline = now_s() + 2;
  for (;;) {
    stats(&coros, &conns, &seq, &err);
    if ((coros == coros0 && conns == conns0) || now_s() > deadline) break;
    usleep(1000);
  }
  CHECK(coros == coros0, "%ld live coroutines after the connection, %ld before", coros, coros0);
  CHECK(conns == conns0, "%ld connections after the connection, %ld before", conns, conns0);
  int fds = settle_fds();
  if (fds != base_fds) list_fds();
  CHECK(fds == base_fds, "%d fds after the connection, %d before", fds, base_fds);
  if (h2)
    CHECK(n500 <= err - err0, "%d 500s for %ld deliberate errors", n500, err - err0);
  else
    CHECK(n500 == err - err0, "%d 500s for %ld deliberate errors", n500, err - err0);
  /* Requests the handler saw all answered, in order, except the
  ** deliberate errors' (500 without X-Seq). */
  if (last) CHECK(first == seq0 + 1, "first X-Seq %ld, expected %ld", first, seq0 + 1);
  CHECK(seq - seq0 >= (last ? last - seq0 : 0), "X-Seq %ld past the handler's count %ld", last, seq);
  return 0;
}

/* The server's memory stays reachable only from its Lua state and parked
** coroutine stacks, which LeakSanitizer does not scan (and the host never
** closes its states): leaks are this harness's fd and coroutine counts. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
  return "detect_leaks=0";
}
