/*
** sd_notify(3)'s protocol, spoken directly: one datagram of "KEY=value"
** lines to the unix socket NOTIFY_SOCKET names (a leading '@' is the
** abstract namespace). What systemd's Type=notify / notify-reload units
** wait for: READY=1 once the listeners are up, RELOADING=1 around a
** reload, STOPPING=1 on a drain, STATUS= for systemctl status, and
** WATCHDOG=1 every half WATCHDOG_USEC when the unit asks for it. Without
** NOTIFY_SOCKET every call does nothing.
*/
#ifndef CH_NOTIFY_H
#define CH_NOTIFY_H

/* At start, before any thread or fork: reads NOTIFY_SOCKET and
** WATCHDOG_USEC (for this pid) and removes them from the environment, so
** that a program the script starts does not speak for cohost. */
void ch_notify_init(void);

/* Sends the message (lines separated by '\n'); never blocks, never
** yields (a raw send on a non-blocking socket). Any thread, any process:
** the master's or, without one, the only process. */
void ch_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Milliseconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or 0. */
int ch_notify_watchdog_ms(void);

/* Without a master: starts a thread that sends WATCHDOG=1 every
** ch_notify_watchdog_ms while worker 0's scheduler still answers. */
void ch_notify_watchdog_start(void);

#endif
