/* Logging to stderr, the log files SIGUSR1 reopens, and OpenResty's error
** strings. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cohost.h"
#include "log.h"

static const char *const names[] = { NULL, "error", "warn", "notice", "info", "debug" };

/* -- Level and identity -----------------------------------------------------
**
** Set from above (main.c, worker.c, the master): the log knows no worker
** and no master, so net/ and the C tests link it alone. */

static int max_level = CH_LOG_NOTICE;   /* --log-level; set before threads */
static _Atomic unsigned generation;     /* gen= of every line */
static const char *_Atomic process_name = "main";   /* a thread that is no worker's */
static __thread int worker_id = -1;     /* the calling thread's worker, or -1 */

void ch_log_set_level(int level)
{
  max_level = level;
}

int ch_log_get_level(void)
{
  return max_level;
}

void ch_log_set_identity(unsigned gen, const char *name)
{
  atomic_store_explicit(&generation, gen, memory_order_relaxed);
  atomic_store_explicit(&process_name, name, memory_order_relaxed);
}

void ch_log_set_worker(int id)
{
  worker_id = id;
}

int ch_log_level(const char *name)
{
  static const char *const alias[] = { NULL, "err", "warn", "notice", "info", "debug" };
  for (int i = CH_LOG_ERR; i <= CH_LOG_DEBUG; i++)
    if (!strcasecmp(name, alias[i]) || !strcasecmp(name, names[i])) return i;
  return 0;
}

static int json_format;   /* --log-format json */

int ch_log_set_format(const char *name)
{
  if (!strcmp(name, "text")) json_format = 0;
  else if (!strcmp(name, "json")) json_format = 1;
  else return -1;
  return 0;
}

/* Appends s as a JSON string's contents (without quotes) at buf + n, at
** most cap - n bytes; returns the new length. Control bytes are \u00XX;
** "/" stays as it is (JSON allows "\/", and log readers grep for paths). */
int ch_log_json_escape(char *buf, int n, int cap, const char *s)
{
  return ch_log_json_escape_n(buf, n, cap, s, strlen(s));
}

int ch_log_json_escape_n(char *buf, int n, int cap, const char *s, size_t len)
{
  for (const char *end = s + len; s < end && n < cap - 7; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      buf[n++] = '\\';
      buf[n++] = (char)ch;
    } else if (ch == '\n') {
      buf[n++] = '\\';
      buf[n++] = 'n';
    } else if (ch < 0x20) {
      n += snprintf(buf + n, (size_t)(cap - n), "\\u%04x", ch);
    } else {
      buf[n++] = (char)ch;
    }
  }
  return n;
}

int ch_log_is_json(void)
{
  return json_format;
}

#define LINE_MAX_BYTES 4096   /* one log line's message */

/* Writes one line: msg[0..len), with " (repeated N times)" when repeats >
** 0, as text or JSON. When loc > 0, msg starts with a "file:line: " of loc
** bytes (ch_log_at): a text line keeps it there, a JSON line carries it as
** "file" and "line" and the message without it. One write keeps lines
** whole between workers. A raw system call, not the hooked write: stderr
** may be a pipe that fills, and a log line must never park (every worker
** writes to this one fd). */
static void emit(int level, size_t loc, const char *fields, const char *msg, size_t len, unsigned repeats)
{
  /* The thread's, not on its stack (and vlog's msg too): a line is often
  ** logged where the stack is nearly used up (a handler's error with its
  ** traceback, logged at the depth where it was raised, "C stack
  ** overflow" included: docs/limits.md, "Recursion"), and these 16 KiB
  ** ended the process at the guard on stacks of 96 KiB and less. Nothing
  ** here yields or logs, so a thread is never in two lines at once. */
  static __thread char text[LINE_MAX_BYTES + 32], buf[2 * LINE_MAX_BYTES];
  if (len > LINE_MAX_BYTES) len = LINE_MAX_BYTES;
  memcpy(text, msg, len);
  if (repeats) len += (size_t)snprintf(text + len, sizeof text - len, " (repeated %u times)", repeats);
  text[len] = '\0';
  const char *lvl = names[level < CH_LOG_ERR ? CH_LOG_ERR : level > CH_LOG_DEBUG ? CH_LOG_DEBUG : level];
  int w = worker_id;
  int pid = (int)getpid();   /* a system call, but logging is no hot path */
  unsigned gen = atomic_load_explicit(&generation, memory_order_relaxed);
  char who[32];
  if (w >= 0) snprintf(who, sizeof who, "w%d c%d", w, ch_self());
  else snprintf(who, sizeof who, "%s", atomic_load_explicit(&process_name, memory_order_relaxed));
  time_t now = time(NULL);
  struct tm tm;
  int n;
  if (json_format) {
    gmtime_r(&now, &tm);
    n = (int)strftime(buf, sizeof buf, "{\"time\":\"%Y-%m-%dT%H:%M:%SZ\"", &tm);
    n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"level\":\"%s\",\"pid\":%d,\"generation\":%u,", lvl,
                  pid, gen);
    if (w >= 0) n += snprintf(buf + n, sizeof buf - (size_t)n, "\"worker\":%d,\"coroutine\":%d,", w, ch_self());
    else n += snprintf(buf + n, sizeof buf - (size_t)n, "\"worker\":\"%s\",", who);
    const char *m = text;
    if (loc >= 4 && loc <= len) {   /* "file:line: ": the line's digits end 2 bytes before loc */
      const char *digits = text + loc - 2;
      while (digits > text && digits[-1] >= '0' && digits[-1] <= '9') digits--;
      if (digits > text + 1 && digits[-1] == '-') digits--;   /* a C caller's -1 */
      n += snprintf(buf + n, sizeof buf - (size_t)n, "\"file\":\"");
      n = ch_log_json_escape_n(buf, n, n + 1024, text, (size_t)(digits - 1 - text));
      n += snprintf(buf + n, sizeof buf - (size_t)n, "\",\"line\":%d,", atoi(digits));
      m = text + loc;
    }
    n += snprintf(buf + n, sizeof buf - (size_t)n, "\"message\":\"");
    n = ch_log_json_escape(buf, n, (int)sizeof buf - 3, m);
    buf[n++] = '"';
    size_t fl = fields ? strlen(fields) : 0;
    if (fl && (size_t)n + fl + 12 < sizeof buf) {   /* else dropped: a line stays whole */
      memcpy(buf + n, ",\"fields\":", 10);
      memcpy(buf + n + 10, fields, fl);
      n += 10 + (int)fl;
    }
    buf[n++] = '}';
  } else {
    localtime_r(&now, &tm);
    n = (int)strftime(buf, sizeof buf, "%Y/%m/%d %H:%M:%S", &tm);
    /* The master's messages say "master: " themselves. */
    const char *t = text;
    if (w < 0 && !strncmp(t, "master: ", 8) && !strcmp(who, "master")) t += 8;
    n += snprintf(buf + n, sizeof buf - (size_t)n, " [%s] pid=%d gen=%u %s: %s", lvl, pid, gen, who, t);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
  }
  buf[n++] = '\n';
  long r = syscall(SYS_write, STDERR_FILENO, buf, (size_t)n);
  (void)r;
}

/* The last error or warning line of this thread, for the repeat filter: a
** handler failing the same way on every request (a worker wedged by a bug)
** logs its message, often with a traceback, once a second with a count
** instead of once per request (it wrote 84 MB in 12 s). Per thread: each
** worker has its own, and no lock is taken. Lines with fields (an app's
** structured log) are never held back. */
#define REPEAT_WINDOW 1   /* seconds an identical line stays held back */
static __thread char last[LINE_MAX_BYTES];
static __thread size_t last_len;
static __thread size_t last_loc;   /* its "file:line: " prefix's length */
static __thread int last_level;
static __thread unsigned held;     /* identical lines held back since the last write */
static __thread time_t last_time;  /* when the last one was written */

/* file: NULL, or the place the message is about (ch_log_at), which leads
** it as "file:line: " (a JSON line makes that its fields). */
static void vlog(int level, const char *file, int line, const char *fields, const char *fmt, va_list ap)
{
  static __thread char msg[LINE_MAX_BYTES];   /* see emit */
  size_t loc = 0;
  if (file) loc = (size_t)snprintf(msg, sizeof msg, "%.256s:%d: ", file, line);
  int m = vsnprintf(msg + loc, sizeof msg - loc, fmt, ap);
  /* A message longer than the buffer is cut, and says so. */
  if (m < 0) m = 0;
  size_t len = loc + (size_t)m;
  if (len >= sizeof msg - 1) {
    len = sizeof msg - 4;
    memcpy(msg + len, "...", 3);
    len += 3;
  }
  if (level > CH_LOG_WARN || fields) {   /* only errors and warnings are filtered */
    emit(level, loc, fields, msg, len, 0);
    return;
  }
  time_t now = time(NULL);
  if (level == last_level && len == last_len && loc == last_loc && !memcmp(msg, last, len)) {
    if (now - last_time < REPEAT_WINDOW) {
      held++;
      return;
    }
    /* This one and those held back since the last write. */
    emit(level, loc, NULL, msg, len, held + 1);
    held = 0;
    last_time = now;
    return;
  }
  if (held) emit(last_level, last_loc, NULL, last, last_len, held);
  emit(level, loc, NULL, msg, len, 0);
  memcpy(last, msg, len);
  last_len = len;
  last_loc = loc;
  last_level = level;
  held = 0;
  last_time = now;
}

/* vlog with its arguments, for this file's own lines. */
static void __attribute__((format(printf, 2, 3))) log_line(int level, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vlog(level, NULL, 0, NULL, fmt, ap);
  va_end(ap);
}

void ch_log(int level, const char *fmt, ...)
{
  if (level > max_level) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, NULL, 0, NULL, fmt, ap);
  va_end(ap);
}

void ch_log_fields(int level, const char *fields, const char *fmt, ...)
{
  if (level > max_level) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, NULL, 0, fields, fmt, ap);
  va_end(ap);
}

void ch_log_at(int level, const char *file, int line, const char *fields, const char *fmt, ...)
{
  if (level > max_level) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, file, line, fields, fmt, ap);
  va_end(ap);
}

/* -- Events per kind ------------------------------------------------------
**
** The repeat filter above holds back a line identical to the last; a line
** per attacking connection names its peer, so it never is (a rapid reset
** from one client wrote 7,362 lines in 12 s). A kind counts instead. Its
** state is the process's, behind a mutex: the workers of one process
** share a kind, and an event takes the lock only to count (the lines are
** written outside it, so a full pipe on stderr stalls the writer alone). */

#define WINDOW_NS ((uint64_t)CH_LOG_KIND_WINDOW * 1000000000u)

static pthread_mutex_t kinds_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ch_log_kind *kinds;   /* every kind that had an event;
                                    ** guarded by kinds_lock */

/* The thread's flush timer: armed on a worker thread when a count starts,
** so a kind whose events stop still gets its summary near its window's
** end. Weak: a worker that is done does not wait for it. Per thread, and
** not on a coroutine's stack (copy-stack mode). */
static __thread struct ch_timer flush_timer;
static __thread uint8_t flush_armed;

/* "7361" as "7,361", into buf (at least 16 bytes). */
static void thousands(char *buf, unsigned v)
{
  char d[16];
  int n = snprintf(d, sizeof d, "%u", v), k = 0;
  for (int i = 0; i < n; i++) {
    if (i && (n - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = d[i];
  }
  buf[k] = '\0';
}

static void summary(const char *what, int level, unsigned count, uint64_t ns)
{
  char n[16];
  thousands(n, count);
  unsigned secs = (unsigned)((ns + 500000000u) / 1000000000u);
  log_line(level, "%s ... and %s more in the last %u s", what, n, secs ? secs : 1);
}

static void on_flush(struct ch_timer *t);

static void arm(int ms)
{
  if (flush_armed || worker_id < 0 || ms < 0) return;
  flush_timer.weak = 1;
  if (ch_timer_start(&flush_timer, ms, on_flush) == 0) flush_armed = 1;
}

static void on_flush(struct ch_timer *t)
{
  (void)t;
  flush_armed = 0;
  arm(ch_log_flush(0));
}

static int ms_left(const struct ch_log_kind *k, uint64_t now)
{
  uint64_t end = k->since_ns + WINDOW_NS;
  return end > now ? (int)((end - now + 999999) / 1000000u) : 0;
}

void ch_log_event(struct ch_log_kind *k, int level, const char *fmt, ...)
{
  if (level > max_level) return;
  uint64_t now = ch_now_ns();
  unsigned count = 0;
  uint64_t over = 0;
  int write, due = -1, list;
  pthread_mutex_lock(&k->lock);
  list = !k->listed;
  k->listed = 1;
  k->level = level;
  if (!k->since_ns || (!k->held && now - k->since_ns >= WINDOW_NS)) {
    write = 1;                       /* the first in a window: in full */
    k->since_ns = now;
  } else if (now - k->since_ns < WINDOW_NS) {
    write = 0;
    if (k->held++ == 0) due = ms_left(k, now);
  } else {
    write = 0;                       /* the window is over: its summary, */
    count = k->held;                 /* and this one starts the next */
    over = now - k->since_ns;
    k->since_ns = now;
    k->held = 1;
    due = ms_left(k, now);
  }
  pthread_mutex_unlock(&k->lock);
  if (list) {
    pthread_mutex_lock(&kinds_lock);
    k->next = kinds;
    kinds = k;
    pthread_mutex_unlock(&kinds_lock);
  }
  if (count) summary(k->what, level, count, over);
  if (write) {
    va_list ap;
    va_start(ap, fmt);
    vlog(level, NULL, 0, NULL, fmt, ap);
    va_end(ap);
  }
  arm(due);
}

int ch_log_flush(int all)
{
  uint64_t now = ch_now_ns();
  int next = -1;
  pthread_mutex_lock(&kinds_lock);
  for (struct ch_log_kind *k = kinds; k; k = k->next) {
    pthread_mutex_lock(&k->lock);
    unsigned count = 0;
    uint64_t over = now - k->since_ns;
    int level = k->level;
    if (k->held && (all || over >= WINDOW_NS)) {
      count = k->held;
      k->held = 0;
      k->since_ns = now;
    } else if (k->held) {
      int left = ms_left(k, now);
      if (next < 0 || left < next) next = left;
    }
    pthread_mutex_unlock(&k->lock);
    if (count) summary(k->what, level, count, over);
  }
  pthread_mutex_unlock(&kinds_lock);
  return next;
}

/* -- Log files SIGUSR1 reopens -------------------------------------------- */

struct logfile {
  struct logfile *next;
  int fd;                   /* the number writers use; kept over a reopen */
  int users;                /* ch_log_file_open calls on this path */
  char path[];
};

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct logfile *files;   /* guarded by files_lock */
static char *stderr_path;       /* stderr's file, or NULL (a tty, a pipe) */

static int open_append(const char *path)
{
  return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

void ch_log_init(void)
{
  struct stat st;
  char link[64], path[PATH_MAX];
  if (fstat(STDERR_FILENO, &st) < 0 || !S_ISREG(st.st_mode)) return;
  snprintf(link, sizeof link, "/proc/self/fd/%d", STDERR_FILENO);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0 || path[0] != '/') return;
  path[n] = '\0';
  stderr_path = strdup(path);
}

/* Every worker of a process opens the same access log: one fd for all. */
int ch_log_file_open(const char *path)
{
  pthread_mutex_lock(&files_lock);
  struct logfile *f;
  for (f = files; f; f = f->next)
    if (strcmp(f->path, path) == 0) break;
  int fd;
  if (f) {
    f->users++;
    fd = f->fd;
  } else if ((fd = open_append(path)) < 0) {
    fd = -errno;
  } else if (!(f = malloc(sizeof *f + strlen(path) + 1))) {
    close(fd);
    fd = -ENOMEM;
  } else {
    f->fd = fd;
    f->users = 1;
    strcpy(f->path, path);
    f->next = files;
    files = f;
  }
  pthread_mutex_unlock(&files_lock);
  return fd;
}

void ch_log_file_close(int fd)
{
  pthread_mutex_lock(&files_lock);
  for (struct logfile **p = &files; *p; p = &(*p)->next)
    if ((*p)->fd == fd) {
      struct logfile *f = *p;
      if (--f->users == 0) {
        *p = f->next;
        close(f->fd);
        free(f);
      }
      break;
    }
  pthread_mutex_unlock(&files_lock);
}

/* Opens path afresh and puts it at fd's number. */
static void reopen(const char *path, int fd)
{
  int nfd = open_append(path);
  if (nfd < 0) {
    ch_log(CH_LOG_ERR, "cannot reopen log file %s: %s", path, strerror(errno));
    return;
  }
  if (dup3(nfd, fd, fd == STDERR_FILENO ? 0 : O_CLOEXEC) < 0)
    ch_log(CH_LOG_ERR, "cannot reopen log file %s: %s", path, strerror(errno));
  close(nfd);
}

void ch_log_reopen(void)
{
  if (stderr_path) reopen(stderr_path, STDERR_FILENO);
  pthread_mutex_lock(&files_lock);
  for (struct logfile *f = files; f; f = f->next) reopen(f->path, f->fd);
  pthread_mutex_unlock(&files_lock);
}

const char *ch_errstr(int err)
{
  switch (err) {
  case 0: return "closed";
  case ETIMEDOUT: case EAGAIN: return "timeout";
  case ECONNREFUSED: return "connection refused";
  case ECONNRESET: return "connection reset by peer";
  case EPIPE: return "broken pipe";
  case ENOMEM: case ENOBUFS: return "no memory";
  case EBADF: return "closed";
  case ECANCELED: return "cancelled";
  case EHOSTUNREACH: return "no route to host";
  case ENETUNREACH: return "network is unreachable";
  case EADDRINUSE: return "address already in use";
  case EADDRNOTAVAIL: return "cannot assign requested address";
  case EMFILE: case ENFILE: return "too many open files";
  case ENOENT: return "no such file or directory";
  case EACCES: return "permission denied";
  default: {
    /* OpenResty's strings are lower case: "invalid argument". */
    static __thread char buf[128];
    snprintf(buf, sizeof buf, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z') buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
  }
  }
}
