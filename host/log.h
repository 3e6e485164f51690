/* Logging to stderr, and OpenResty's error strings for errno values. */
#ifndef CH_LOG_H
#define CH_LOG_H

enum { CH_LOG_ERR = 1, CH_LOG_WARN, CH_LOG_NOTICE, CH_LOG_INFO, CH_LOG_DEBUG };

/* Writes "YYYY/MM/DD HH:MM:SS [level] w<worker> c<coroutine>: message" to
** stderr when level is enabled, as one write(2) so lines never interleave
** and never park. An error or warning identical to the thread's last one
** within a second is held back and counted; the next line that is written
** for it says " (repeated N times)" (N lines, the written one included). */
void ch_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Level number for "err", "warn", ... (case-insensitive, also "ERR"), or
** 0 if unknown. */
int ch_log_level(const char *name);

/* OpenResty's error string for an errno: "timeout", "closed",
** "connection refused", "connection reset by peer", "no memory", ... */
const char *ch_errstr(int err);

#endif
