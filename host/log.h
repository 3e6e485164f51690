/* Logging to stderr, the log files SIGUSR1 reopens, and OpenResty's error
** strings for errno values. */
#ifndef CH_LOG_H
#define CH_LOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { CH_LOG_ERR = 1, CH_LOG_WARN, CH_LOG_NOTICE, CH_LOG_INFO, CH_LOG_DEBUG };

/* The lines written: level and up (CH_LOG_NOTICE until --log-level says
** otherwise). Set at start, before any thread. */
void ch_log_set_level(int level);
int ch_log_get_level(void);

/* Who this process is in its lines, installed from above (the log knows
** no worker and no master): its reload generation (gen=) and the name its
** threads that are no worker's go by ("main" until set; a --processes
** master says "master"). Any thread; the master sets it at start and at
** each reload, each worker process it forks at once. */
void ch_log_set_identity(unsigned generation, const char *name);

/* The calling thread is worker id's (its lines say "w<id> c<coroutine>"),
** or no worker's with -1 (the default). A worker's thread, which has a
** scheduler, also gets the timer that writes the kinds of event's
** summaries (ch_log_event). */
void ch_log_set_worker(int id);

/* Writes "YYYY/MM/DD HH:MM:SS [level] pid=P gen=G w<worker> c<coroutine>:
** message" to stderr when level is enabled (the identity's name, such as
** "master:" or "main:", in place of the worker on a thread that is none),
** or with --log-format json one object a line: {"time", "level", "pid",
** "generation", "worker", "coroutine", "message"} ("file" and "line" too
** from ch_log_at). One write(2), so lines never interleave and never
** park. An error or warning identical to the thread's last one within a
** second is held back and counted; the next line that is written for it
** says " (repeated N times)" (N lines, the written one included). */
void ch_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ch_log with structured fields: fields is a JSON object's text, which a
** --log-format json line carries as "fields" (a text line does not: the
** caller puts them in the message). */
void ch_log_fields(int level, const char *fields, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ch_log_fields about a place in a script (a cohost.log call, a Lua
** error): a text line says "file:line: message", a --log-format json line
** carries "file" and "line" as fields of their own and the message
** without them. fields may be NULL. */
void ch_log_at(int level, const char *file, int line, const char *fields, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));

/* A kind of event a client can cause once per connection (a rapid reset,
** a bad PROXY header, a connection over --max-connections): under attack
** its lines, each naming its own peer, pass the repeat filter and flood
** the log. ch_log_event logs the first at once, then counts; at most one
** summary line per CH_LOG_KIND_WINDOW seconds says how many more came:
** "<what> ... and 7,361 more in the last 10 s". One static struct per
** kind, shared by every worker thread of the process. */
#define CH_LOG_KIND_WINDOW 10   /* seconds between a kind's lines */

struct ch_log_kind {
  const char *what;             /* the summary's subject; read-only */
  pthread_mutex_t lock;         /* guards the fields below */
  uint64_t since_ns;            /* when its last line was written
                                ** (CLOCK_MONOTONIC ns); 0: never */
  unsigned held;                /* events counted since, not written */
  int level;                    /* the level of its lines */
  uint8_t listed;               /* on log.c's list of kinds */
  struct ch_log_kind *next;     /* that list; guarded by log.c's lock */
};
#define CH_LOG_KIND_INIT(what) { (what), PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, NULL }

/* Logs one event of kind k, as ch_log would, when k has written no line
** for CH_LOG_KIND_WINDOW seconds; else counts it. The count is written as
** k's summary line by the first event after the window, by a timer on a
** worker thread at the window's end (a weak one: it keeps no worker
** alive), or by ch_log_flush at exit. Never yields; safe from any thread
** (a mutex per kind, held only to count). */
void ch_log_event(struct ch_log_kind *k, int level, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* Writes the summary of each kind whose window is over (all: of every
** kind that holds a count, as the process ends). Returns the milliseconds
** until the next window with a count ends, or -1 when none holds one. */
int ch_log_flush(int all);

/* Appends s as the contents of a JSON string (no quotes) at buf + n, at
** most cap - n bytes (cut short, never split inside an escape); returns
** the new length. */
int ch_log_json_escape(char *buf, int n, int cap, const char *s);

/* ch_log_json_escape of the len bytes at s (which may hold NUL bytes). */
int ch_log_json_escape_n(char *buf, int n, int cap, const char *s, size_t len);

/* Whether lines are JSON (--log-format json). */
int ch_log_is_json(void);

/* Level number for "err", "warn", ... (case-insensitive, also "ERR"), or
** 0 if unknown. */
int ch_log_level(const char *name);

/* --log-format: "text" (the default) or "json". Returns 0, or -1 for an
** unknown name. */
int ch_log_set_format(const char *name);

/* At start, before any thread: remembers the path of stderr when it is a
** regular file (cohost app.lua 2>>error.log), for ch_log_reopen. */
void ch_log_init(void);

/* Opens an access log file for appending (close-on-exec) and remembers
** its path for ch_log_reopen. Returns the fd or -errno. */
int ch_log_file_open(const char *path);

/* Closes fd, opened by ch_log_file_open, and forgets it. */
void ch_log_file_close(int fd);

/* SIGUSR1: reopens stderr's file and every file of ch_log_file_open under
** its path (a log rotation renamed them), each new file taking its old fd
** number (dup2), so writers never see a closed fd. Never yields. */
void ch_log_reopen(void);

/* OpenResty's error string for an errno: "timeout", "closed",
** "connection refused", "connection reset by peer", "no memory", ... */
const char *ch_errstr(int err);

#endif
