/*
** Idle connections for make bench's memory figure. Opens N connections to
** an echo server, one after the other: on each it sends the init bytes (if
** any), then one SIZE-byte message, and reads the whole echo back, so that
** when it goes on to the next one the server's handler for this one has
** answered and is parked in its next read. Then it prints one line,
**
**   idle_clients conns=2500 errors=0 secs=0.41
**
** and holds every connection open, doing nothing, until it gets SIGTERM
** (or the -t bound passes). The sockets linger 0, so exiting resets them
** at once and leaves no TIME_WAIT behind for later runs.
**
** Usage: idle_clients -p PORT -n N [-H 127.0.0.1] [-B SRC_ADDR] [-s 64]
**                     [-i INIT] [-t 120]
**   -B SRC_ADDR  source address of every connection (run.sh gives each
**                process its own 127.0.0.x, so ports never run short)
**
** One process holds N descriptors: run.sh splits its 15,000 connections
** over six processes of 2,500 to stay well under the open-files limit. This program
** runs no coroutine, so the cohost hooks linked in pass through to libc.
*/
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define MAX_SIZE 4096            /* echo message, and whole HTTP response */
#define IO_TIMEOUT_S 10         /* per connect, write and read: a bound */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes all of buf; 0 or -1 with errno set. */
static int write_all(int fd, const char *buf, size_t len)
{
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0)
      return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

/* -- HTTP mode ----------------------------------------------------------- */

/* The value of header NAME in the head buf[0..head) (NUL-terminated
** copy in out, at most outsz - 1 bytes), or NULL. Only for the few headers
** below: no folding, first occurrence wins. */
static const char *header(const char *buf, size_t head, const char *name,
                          char *out, size_t outsz)
{
  size_t nl = strlen(name);
  const char *p = memchr(buf, '\n', head), *end = buf + head;
  while (p != NULL && p + 1 < end) {
    const char *line = p + 1, *eol = memchr(line, '\n', (size_t)(end - line));
    if (eol == NULL)
      break;
    if ((size_t)(eol - line) > nl && line[nl] == ':' &&
        strncasecmp(line, name, nl) == 0) {
      const char *v = line + nl + 1;
      while (v < eol && (*v == ' ' || *v == '\t'))
        v++;
      size_t len = (size_t)(eol - v);
      while (len > 0 && isspace((unsigned char)v[len - 1]))
        len--;
      if (len >= outsz)
        len = outsz - 1;
      memcpy(out, v, len);
      out[len] = '\0';
      return out;
    }
    p = eol;
  }
  return NULL;
}

/* Length of the chunked body at b[0..len) through its last CRLF, 0 if it
** is not all there yet, -1 if it is malformed. No trailers expected. */
static long chunked_len(const char *b, size_t len)
{
  size_t i = 0;
  for (;;) {
    const char *eol = memchr(b + i, '\n', len - i);
    if (eol == NULL)
      return 0;
    char *endp;
    unsigned long sz = strtoul(b + i, &endp, 16);
    if (endp == b + i)
      return -1;
    i = (size_t)(eol - b) + 1;  /* past the size line */
    if (sz == 0)                /* the last chunk: one more CRLF */
      return len - i >= 2 ? (memcmp(b + i, "\r\n", 2) == 0 ? (long)(i + 2) : -1) : 0;
    if (len - i < sz + 2)
      return 0;
    i += sz + 2;                /* data and its CRLF */
  }
}

/* Reads one whole HTTP response on fd; 0 if it is a 200 that keeps the
** connection open and nothing follows it, -1 after printing why not.
** Responses are small: everything fits in one buffer, parsed again after
** every read. */
static int read_response(int fd)
{
  char buf[MAX_SIZE + 1], val[64];
  size_t got = 0;
  for (;;) {
    if (got == MAX_SIZE) {
      fprintf(stderr, "idle_clients: response over %d bytes\n", MAX_SIZE);
      return -1;
    }
    ssize_t n = read(fd, buf + got, MAX_SIZE - got);
    if (n <= 0) {
      fprintf(stderr, "idle_clients: read: %s\n",
              n == 0 ? "closed by server" : strerror(errno));
      return -1;
    }
    got += (size_t)n;
    buf[got] = '\0';
    const char *eoh = strstr(buf, "\r\n\r\n");
    if (eoh == NULL)
      continue;
    size_t head = (size_t)(eoh - buf) + 4, total;
    if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0) {
      fprintf(stderr, "idle_clients: not a 200: %.*s\n",
              (int)strcspn(buf, "\r\n"), buf);
      return -1;
    }
    if (header(buf, head, "Connection", val, sizeof val) &&
        strcasecmp(val, "close") == 0) {
      fprintf(stderr, "idle_clients: the server closes the connection\n");
      return -1;
    }
    if (header(buf, head, "Content-Length", val, sizeof val)) {
      total = head + strtoul(val, NULL, 10);
    } else if (header(buf, head, "Transfer-Encoding", val, sizeof val) &&
               strcasecmp(val, "chunked") == 0) {
      long body = chunked_len(buf + head, got - head);
      if (body < 0) {
        fprintf(stderr, "idle_clients: bad chunked body\n");
        return -1;
      }
      if (body == 0)
        continue;
      total = head + (size_t)body;
    } else {
      fprintf(stderr, "idle_clients: response has no length\n");
      return -1;
    }
    if (got < total)
      continue;
    if (got > total) {
      fprintf(stderr, "idle_clients: %zu bytes after the response\n", got - total);
      return -1;
    }
    return 0;
  }
}

/* -- Connections ----------------------------------------------------------- */

/* Opens one connection and does one echo round trip on it (size 0: one
** HTTP exchange instead). Returns the descriptor, or -1 after printing
** why. */
static int open_one(const struct sockaddr_in *dst, const struct sockaddr_in *src,
                    const char *init, const char *msg, size_t size)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    perror("idle_clients: socket");
    return -1;
  }
  int one = 1;
  struct linger lg = {.l_onoff = 1, .l_linger = 0};   /* close = reset */
  struct timeval tv = {.tv_sec = IO_TIMEOUT_S};       /* also bounds connect */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (src != NULL) {
    /* Choose the port at connect time, by the full 4-tuple: bind alone
    ** would reserve a port per socket and run out. */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)src, sizeof *src) < 0) {
      perror("idle_clients: bind");
      goto fail;
    }
  }
  if (connect(fd, (const struct sockaddr *)dst, sizeof *dst) < 0) {
    perror("idle_clients: connect");
    goto fail;
  }
  if (write_all(fd, init, strlen(init)) < 0 || write_all(fd, msg, size) < 0) {
    perror("idle_clients: write");
    goto fail;
  }
  if (size == 0) {
    if (read_response(fd) < 0)
      goto fail;
    return fd;
  }
  char buf[MAX_SIZE];
  for (size_t got = 0; got < size;) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n <= 0) {
      fprintf(stderr, "idle_clients: read: %s\n",
              n == 0 ? "closed by server" : strerror(errno));
      goto fail;
    }
    got += (size_t)n;
  }
  if (memcmp(buf, msg, size) != 0) {
    fprintf(stderr, "idle_clients: echo does not match the message\n");
    goto fail;
  }
  return fd;
fail:
  close(fd);
  return -1;
}

int main(int argc, char **argv)
{
  const char *host = "127.0.0.1", *bind_addr = NULL, *init = "";
  int port = 0, n = 0, hold = 120, http = 0;
  size_t size = 64;
  int opt;
  while ((opt = getopt(argc, argv, "H:B:p:n:s:i:t:R")) != -1) {
    switch (opt) {
    case 'H': host = optarg; break;
    case 'B': bind_addr = optarg; break;
    case 'p': port = atoi(optarg); break;
    case 'n': n = atoi(optarg); break;
    case 's': size = strtoul(optarg, NULL, 10); break;
    case 'i': init = optarg; break;
    case 't': hold = atoi(optarg); break;
    case 'R': http = 1; break;
    default: goto usage;
    }
  }
  if (port <= 0 || n <= 0 || size == 0 || size > MAX_SIZE || hold <= 0)
    goto usage;
  if (http) {
    size = 0;                   /* no echo message: the request is the init */
    if (*init == '\0')
      init = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  }

  /* The soft open-files limit up to the hard one; N plus a few needed. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 16) {
    fprintf(stderr, "idle_clients: %d connections need more than the %llu "
            "open files allowed\n", n, (unsigned long long)rl.rlim_cur);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm((unsigned)hold);        /* never outlive the benchmark */

  char msg[MAX_SIZE];
  for (size_t i = 0; i < size; i++)  /* like loadgen's: newline-terminated */
    msg[i] = i + 1 == size ? '\n' : (char)('a' + i % 26);

  struct sockaddr_in dst = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
  struct sockaddr_in src = {.sin_family = AF_INET};
  if (inet_pton(AF_INET, host, &dst.sin_addr) != 1 ||
      (bind_addr && inet_pton(AF_INET, bind_addr, &src.sin_addr) != 1)) {
    fprintf(stderr, "idle_clients: bad address\n");
    return 2;
  }

  /* Stops at the first failure: the line says how many are held, and
  ** run.sh divides by that. */
  double t0 = now_s();
  int ok = 0, errors = 0;
  while (ok < n) {
    if (open_one(&dst, bind_addr ? &src : NULL, init, msg, size) < 0) {
      errors = 1;
      break;
    }
    ok++;
  }
  printf("idle_clients conns=%d errors=%d secs=%.2f\n", ok, errors, now_s() - t0);
  fflush(stdout);
  for (;;)
    pause();                    /* SIGTERM or SIGALRM ends it */

usage:
  fprintf(stderr, "usage: %s -p PORT -n N [-H host] [-B src_addr] [-s size]"
          " [-i init] [-t hold_secs] [-R]\n", argv[0]);
  return 2;
}
