/*
** Closed-loop TCP echo load generator for make bench. One thread, epoll,
** non-blocking sockets. Each of C connections sends one SIZE-byte message,
** waits for all SIZE bytes to come back (checked byte for byte), records the
** latency and sends the next. After WARM seconds it measures for SECS
** seconds and prints one machine-readable line:
**
**   loadgen conns=50 size=64 secs=5.000 msgs=512345 msgs_s=102469 p50_us=480
**     p99_us=610 p999_us=900 max_us=2100 srv_cpu_s=4.95 msgs_per_cpu_s=103504
**     cli_cpu_s=4.99 other_cpu_s=0.02 errors=0
**
** (on one line). other_cpu_s is the CPU time everything else on the machine
** used meanwhile (from /proc/stat), to tell a disturbed run. With -S the server's CPU time (utime + stime, all its
** threads, from /proc/PID/stat) is read at the start and the end of the
** measured window, so msgs_per_cpu_s is what the server spent per message:
** on two cores this generator saturates before a fast server does, and
** msgs/s alone would measure the generator. Without -S those fields are 0.
**
** Usage: loadgen -p PORT [-H 127.0.0.1] [-c 50] [-s 64] [-d 5] [-w 1]
**                [-S PID[,PID...]] [-i INIT]
**   -i INIT  bytes sent once on each connection before the first message,
**            for peers that need a request line before they echo raw bytes
**
** This program runs no coroutine, so the cohost hooks the bench Makefile
** rule links in pass every call straight to libc.
*/
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define MAX_SIZE 65536
#define MAX_PIDS 16
#define MAX_EVENTS 512

struct conn {
  int fd;
  size_t wrote;         /* bytes of the current message written */
  size_t got;           /* bytes of its echo received */
  uint64_t sent_ns;     /* when the current message was first written */
};

static size_t size = 64;
static char *msg;               /* the message; every send is the same */
static int ep;
static int measuring;           /* inside the measured window */
static uint64_t msgs, errors;
static uint32_t *lat;           /* latencies in ns, measured window only */
static size_t nlat, caplat;

static void die(const char *what)
{
  perror(what);
  exit(1);
}

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* -- Server CPU time ----------------------------------------------------- */

static int pids[MAX_PIDS], npids;

/* utime + stime in clock ticks of every pid in -S; -1 if one is gone. */
static long long server_ticks(void)
{
  long long sum = 0;
  for (int i = 0; i < npids; i++) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pids[i]);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* The command name may hold spaces: fields count from the last ')'.
    ** After it come field 3 (state) ... field 14 (utime), 15 (stime). */
    char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                            "%*u %llu %llu", &ut, &st) != 2)
      return -1;
    sum += (long long)(ut + st);
  }
  return sum;
}

/* Busy clock ticks of the whole machine: all but idle and iowait. The
** irq and softirq ticks count too: the processes' utime + stime include the
** loopback traffic's softirq work that /proc/stat books apart. */
static long long machine_ticks(void)
{
  unsigned long long v[8] = {0};
  FILE *f = fopen("/proc/stat", "r");
  if (f == NULL)
    return -1;
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                 &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  return n == 8 ? (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) : -1;
}

static double cpu_self_s(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* -- Connections --------------------------------------------------------- */

static void watch(struct conn *c, int op, uint32_t events)
{
  struct epoll_event ev = {.events = events, .data.ptr = c};
  if (epoll_ctl(ep, op, c->fd, &ev) < 0)
    die("epoll_ctl");
}

static void fail(struct conn *c, const char *why)
{
  if (errors++ < 5)
    fprintf(stderr, "loadgen: connection %d: %s\n", c->fd, why);
  close(c->fd);
  c->fd = -1;
}

/* Writes the rest of the current message. 64 bytes always fit in an empty
** socket buffer; EPOLLOUT covers the case where they do not. */
static void push(struct conn *c)
{
  while (c->wrote < size) {
    ssize_t n = write(c->fd, msg + c->wrote, size - c->wrote);
    if (n < 0) {
      if (errno == EAGAIN) {
        watch(c, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
        return;
      }
      fail(c, strerror(errno));
      return;
    }
    c->wrote += (size_t)n;
  }
}

static void start_msg(struct conn *c)
{
  c->wrote = c->got = 0;
  c->sent_ns = now_ns();
  push(c);
}

static void record(uint64_t ns)
{
  msgs++;
  if (nlat == caplat) {
    caplat = caplat ? caplat * 2 : 1 << 20;
    lat = realloc(lat, caplat * sizeof *lat);
    if (lat == NULL)
      die("realloc");
  }
  lat[nlat++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static void on_event(struct conn *c, uint32_t events)
{
  if (events & EPOLLOUT) {
    push(c);
    if (c->fd >= 0 && c->wrote == size)
      watch(c, EPOLL_CTL_MOD, EPOLLIN);
    if (c->fd < 0)
      return;
  }
  if (!(events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
    return;
  char buf[MAX_SIZE];
  ssize_t n = read(c->fd, buf, sizeof buf);
  if (n < 0 && errno == EAGAIN)
    return;
  if (n <= 0) {
    fail(c, n == 0 ? "closed by server" : strerror(errno));
    return;
  }
  if (c->got + (size_t)n > size || memcmp(buf, msg + c->got, (size_t)n) != 0) {
    fail(c, "echo does not match the message");
    return;
  }
  c->got += (size_t)n;
  if (c->got < size)
    return;
  if (measuring)
    record(now_ns() - c->sent_ns);
  start_msg(c);
}

static int dial(const struct sockaddr_in *sa, const char *init, size_t ninit)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    die("socket");
  if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0)
    die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* The init bytes go out while the socket still blocks: simplest. */
  for (size_t off = 0; off < ninit;) {
    ssize_t n = write(fd, init + off, ninit - off);
    if (n < 0)
      die("write init");
    off += (size_t)n;
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
    die("fcntl");
  return fd;
}

static int cmp_u32(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static double pct_us(double p)
{
  if (nlat == 0)
    return 0;
  size_t i = (size_t)(p * (double)(nlat - 1) + 0.5);
  return lat[i] / 1000.0;
}

int main(int argc, char **argv)
{
  const char *host = "127.0.0.1", *init = "";
  int port = 0, nconns = 50;
  double secs = 5, warm = 1;
  int opt;
  while ((opt = getopt(argc, argv, "H:p:c:s:d:w:S:i:")) != -1) {
    switch (opt) {
    case 'H': host = optarg; break;
    case 'p': port = atoi(optarg); break;
    case 'c': nconns = atoi(optarg); break;
    case 's': size = strtoul(optarg, NULL, 10); break;
    case 'd': secs = atof(optarg); break;
    case 'w': warm = atof(optarg); break;
    case 'i': init = optarg; break;
    case 'S':
      for (char *tok = strtok(optarg, ","); tok && npids < MAX_PIDS;
           tok = strtok(NULL, ","))
        pids[npids++] = atoi(tok);
      break;
    default: goto usage;
    }
  }
  if (port <= 0 || nconns <= 0 || size == 0 || size > MAX_SIZE || secs <= 0 ||
      warm < 0)
    goto usage;
  signal(SIGPIPE, SIG_IGN);

  msg = malloc(size);
  if (msg == NULL)
    die("malloc");
  for (size_t i = 0; i < size; i++)  /* printable, newline-terminated */
    msg[i] = i + 1 == size ? '\n' : (char)('a' + i % 26);

  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    fprintf(stderr, "loadgen: bad host %s\n", host);
    return 2;
  }
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    die("epoll_create1");
  struct conn *conns = calloc((size_t)nconns, sizeof *conns);
  if (conns == NULL)
    die("calloc");
  for (int i = 0; i < nconns; i++) {
    conns[i].fd = dial(&sa, init, strlen(init));
    watch(&conns[i], EPOLL_CTL_ADD, EPOLLIN);
  }
  for (int i = 0; i < nconns; i++)
    start_msg(&conns[i]);

  uint64_t t_start = now_ns();
  uint64_t t_measure = t_start + (uint64_t)(warm * 1e9);
  uint64_t t_end = t_measure + (uint64_t)(secs * 1e9);
  uint64_t t0 = 0, t1 = 0;
  long long ticks0 = 0, ticks1 = 0, mach0 = 0, mach1 = 0;
  double cpu0 = 0, cpu1 = 0;
  struct epoll_event evs[MAX_EVENTS];
  for (;;) {
    int n = epoll_wait(ep, evs, MAX_EVENTS, 50);
    if (n < 0 && errno != EINTR)
      die("epoll_wait");
    uint64_t now = now_ns();
    if (!measuring && now >= t_measure) {
      measuring = 1;
      t0 = now;
      ticks0 = server_ticks();
      mach0 = machine_ticks();
      cpu0 = cpu_self_s();
    }
    if (measuring && now >= t_end) {
      t1 = now;
      ticks1 = server_ticks();
      mach1 = machine_ticks();
      cpu1 = cpu_self_s();
      break;
    }
    for (int i = 0; i < n; i++) {
      struct conn *c = evs[i].data.ptr;
      if (c->fd >= 0)
        on_event(c, evs[i].events);
    }
    if (errors >= (uint64_t)nconns)
      break;  /* every connection failed */
  }

  double dur = measuring && t1 ? (t1 - t0) / 1e9 : 0;
  double tck = (double)sysconf(_SC_CLK_TCK), srv_cpu = 0, other = 0;
  if (npids > 0 && ticks0 >= 0 && ticks1 >= 0)
    srv_cpu = (double)(ticks1 - ticks0) / tck;
  /* CPU time of everything else on the machine during the window: other
  ** load makes the figures unreliable, and run.sh repeats such runs. */
  if (mach0 >= 0 && mach1 >= 0)
    other = (double)(mach1 - mach0) / tck - srv_cpu - (cpu1 - cpu0);
  qsort(lat, nlat, sizeof *lat, cmp_u32);
  printf("loadgen conns=%d size=%zu secs=%.3f msgs=%llu msgs_s=%.0f "
         "p50_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f srv_cpu_s=%.2f "
         "msgs_per_cpu_s=%.0f cli_cpu_s=%.2f other_cpu_s=%.2f errors=%llu\n",
         nconns, size, dur, (unsigned long long)msgs, dur > 0 ? msgs / dur : 0,
         pct_us(0.50), pct_us(0.99), pct_us(0.999), pct_us(1.0), srv_cpu,
         srv_cpu > 0 ? msgs / srv_cpu : 0, cpu1 - cpu0, other,
         (unsigned long long)errors);
  free(conns);   /* freed for LeakSanitizer, in sanitizer builds of the tests */
  return errors > 0 || dur == 0 ? 1 : 0;

usage:
  fprintf(stderr, "usage: %s -p PORT [-H host] [-c conns] [-s size] [-d secs]"
          " [-w warmup_secs] [-S pid,...] [-i init]\n", argv[0]);
  return 2;
}
