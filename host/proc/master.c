/*
** The master process of --processes (master.h). It forks N worker
** processes, each of which runs the script as a plain cohost would (its
** listeners bind with SO_REUSEPORT, so the kernel spreads connections
** between processes as it does between threads), and then only watches:
**
**   a worker that dies      is logged (exit code or signal) and forked
**                           again after a back-off: 0.1 s doubling to 10 s,
**                           back to 0.1 s once a worker lived 30 s;
**   SIGHUP                  forks a new generation, which reads the script
**                           afresh; once every new worker has started, the
**                           old ones get CH_MASTER_RELOAD_SIGNAL and drain
**                           (without the stop's /healthz 503). A new worker
**                           that dies before it started aborts the reload:
**                           the old ones keep serving;
**   SIGTERM, SIGINT         SIGTERM to every worker (they drain within
**                           --shutdown-timeout), exit when all are gone;
**   a second one, SIGQUIT   SIGQUIT to every worker (they exit at once);
**   SIGTERM to one worker   it drains, and a replacement starts at once;
**   SIGUSR1                 the master reopens its log file and passes
**                           SIGUSR1 on to every worker (log rotation).
**   SIGUSR2                 passed on to every worker, which logs its
**                           tasks (a task dump).
**
** Each worker keeps a channel to the master (a SOCK_SEQPACKET socketpair)
** and writes a one-byte message on it when its script has started
** (MSG_STARTED) and one when a signal told it to drain (MSG_DRAINING); EOF
** means it ended. Its listen() calls ask there for the unix sockets and
** port-0 ports that the master keeps for all processes (master_listen.c).
** A worker that outlives its drain by KILL_GRACE_MS gets SIGKILL. The
** master is one thread with one poll loop; it forks before any other
** thread exists and never runs Lua, so nothing it holds is half-changed
** in a child. Workers sit in their own process group, so a terminal's
** Ctrl-C reaches the master alone (which passes it on once), and die with
** SIGTERM if the master dies (PR_SET_PDEATHSIG).
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"
#include "proc/master.h"
#include "proc/master_listen.h"
#include "proc/notify.h"

#define BACKOFF_MIN_MS 100      /* first restart delay */
#define BACKOFF_MAX_MS 10000    /* the doubling stops here */
#define STABLE_MS 30000         /* a worker that lived this long resets it */
#define START_GRACE_MS 5000     /* a worker whose main chunk never returns
                                ** counts as started after this long */
#define KILL_GRACE_MS 5000      /* past --shutdown-timeout, then SIGKILL */
#define QUIT_GRACE_MS 1000      /* past SIGQUIT, then SIGKILL */

enum { MSG_STARTED = 1, MSG_DRAINING = 2 };   /* one-byte messages on a channel */

enum role { CURRENT, NEXT, OLD, ABORTED };   /* serving; a reload's, not
                                    ** yet started; draining; a failed
                                    ** reload's, told to stop */

struct child {
  pid_t pid;
  int index;                    /* 0 .. processes-1 */
  int ready_fd;                 /* the master's end of its channel; -1 at EOF */
  unsigned gen;                 /* its generation: reloads count them */
  uint8_t role;                 /* enum role */
  uint8_t started;              /* its main chunk returned everywhere */
  uint8_t first;                /* of the first generation: dying before
                                ** it started stops the master */
  uint64_t born_ms;             /* monotonic ms at fork */
  uint64_t kill_ms;             /* SIGKILL at this time; 0: no deadline */
};

static struct child *kids;      /* the master's live children */
static int nkids;
static size_t kids_cap;
static uint64_t *restart_ms;    /* per index: fork a replacement then; 0: none */
static int *backoff_ms;         /* per index: the next restart's delay */
static int stopping;            /* 0; 1 draining; 2 stopping at once */
static int status;              /* the master's exit code once stopping */
static int sig_pipe[2] = { -1, -1 };
static pid_t master_pid;
static unsigned generation;     /* the newest generation forked */
static unsigned current_gen;    /* the generation serving */
static int ready_wfd = -1;      /* in a worker: its end of the channel */
static int my_index;            /* in a worker: its index */
static unsigned generation_of_child;   /* the generation spawn forks */

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* -- Signals -------------------------------------------------------------- */

/* The handler only writes the signal number to a pipe the loop polls: raw
** system calls, since the hooked write must not run in a handler. */
static void on_signal(int sig)
{
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  long r = syscall(SYS_write, sig_pipe[1], &b, 1);
  (void)r;
  errno = saved;
}

static void catch_signals(void)
{
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    fprintf(stderr, "cohost: cannot make the signal pipe\n");
    exit(2);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_signal;
  static const int sigs[] = { SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2 };
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
  sa.sa_handler = SIG_IGN;   /* a closed stderr must not kill the master;
                             ** each worker installs its own handler */
  sigaction(SIGPIPE, &sa, NULL);
}

/* -- Children ------------------------------------------------------------- */

/* In the new worker: drops what belongs to the master and restores the
** signals main.c does not set itself. */
static void become_worker(int wfd, const sigset_t *old_mask)
{
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  for (int i = 0; i < nkids; i++)
    if (kids[i].ready_fd >= 0) close(kids[i].ready_fd);
  ready_wfd = wfd;
  ch_log_set_identity(generation_of_child, "main");
  ch_mlisten_forget();
  ch_mlisten_set_channel(wfd);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_DFL;   /* until main.c sets its own, in a moment */
  static const int sigs[] = { SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2 };
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
  sa.sa_handler = SIG_IGN;   /* a log rotation or a task dump now must not
                             ** kill it either */
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  pthread_sigmask(SIG_SETMASK, old_mask, NULL);   /* blocked since the fork */
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != master_pid) _exit(1);   /* it died before the prctl */
}

/* Forks worker index in role. Returns 1 in the child, 0 in the master
** (also when the fork failed: a current worker is then retried later). */
static int spawn(int index, enum role role, int first)
{
  int p[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) < 0) {
    ch_log(CH_LOG_ERR, "master: cannot make a channel for worker process %d: %s", index, strerror(errno));
    if (role == CURRENT) restart_ms[index] = now_ms() + (uint64_t)BACKOFF_MAX_MS;
    return 0;
  }
  if ((size_t)nkids == kids_cap) {
    struct child *k = ch_buf_grow(kids, sizeof *k, &kids_cap, kids_cap + 1, 16);
    if (!k) {
      fprintf(stderr, "cohost: master: no memory\n");
      _exit(1);
    }
    kids = k;
  }
  fflush(NULL);   /* else buffered output would be written twice */
  /* Signals wait until the child has dropped the master's handlers: one
  ** sent to it right after the fork would otherwise reach the master's
  ** signal pipe and drain or reload everything. */
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  generation_of_child = role == NEXT ? generation : current_gen;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    become_worker(p[1], &old_mask);
    my_index = index;
    return 1;
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  close(p[1]);
  if (pid < 0) {
    ch_log(CH_LOG_ERR, "master: cannot fork worker process %d: %s", index, strerror(errno));
    close(p[0]);
    if (role == CURRENT) restart_ms[index] = now_ms() + (uint64_t)BACKOFF_MAX_MS;
    return 0;
  }
  struct child *c = &kids[nkids++];
  memset(c, 0, sizeof *c);
  c->pid = pid;
  c->index = index;
  c->ready_fd = p[0];
  c->role = (uint8_t)role;
  c->gen = generation_of_child;
  c->first = (uint8_t)first;
  c->born_ms = now_ms();
  ch_log(CH_LOG_INFO, "master: worker process %d is pid %d", index, (int)pid);
  return 0;
}

static void signal_all(int sig, uint64_t kill_ms, int skip_old)
{
  for (int i = 0; i < nkids; i++) {
    if (skip_old && (kids[i].role == OLD || kids[i].role == ABORTED)) continue;
    kill(kids[i].pid, sig);
    kids[i].kill_ms = kill_ms;
  }
}

static uint64_t drain_deadline(void)
{
  /* A worker first waits --drain-delay (serving), then drains. */
  return now_ms() + (uint64_t)ch_opts.drain_delay_ms + (uint64_t)ch_opts.shutdown_timeout_ms + KILL_GRACE_MS;
}

static void start_stop(int at_once)
{
  for (int i = 0; i < ch_opts.processes; i++) restart_ms[i] = 0;
  /* No worker will take over the TCP listeners: the last close of each
  ** (its worker's, after it took what was queued) is the end of it. */
  ch_mlisten_drop_workers(0, INT_MAX);
  if (at_once) {
    if (stopping == 2) return;
    stopping = 2;
    status = 1;
    ch_log(CH_LOG_NOTICE, "master: stopping %d worker process%s at once", nkids, nkids == 1 ? "" : "es");
    signal_all(SIGQUIT, now_ms() + QUIT_GRACE_MS, 0);
    return;
  }
  stopping = 1;
  ch_notify("STOPPING=1\nSTATUS=draining %d worker process%s", nkids, nkids == 1 ? "" : "es");
  if (nkids)
    ch_log(CH_LOG_NOTICE, "master: draining %d worker process%s", nkids, nkids == 1 ? "" : "es");
  signal_all(SIGTERM, drain_deadline(), 1);   /* the old ones drain already */
}

/* Reload: once every new worker has started, the current ones drain. */
static void promote_if_started(void)
{
  /* Stopping: every worker was told to drain once already; a second
  ** SIGTERM would make the current ones stop at once. */
  if (stopping) return;
  int next = 0;
  for (int i = 0; i < nkids; i++)
    if (kids[i].role == NEXT) {
      if (!kids[i].started) return;
      next++;
    }
  if (!next) return;
  uint64_t deadline = drain_deadline();
  int old = 0;
  for (int i = 0; i < nkids; i++) {
    struct child *c = &kids[i];
    if (c->role == CURRENT) {
      c->role = OLD;
      kill(c->pid, CH_MASTER_RELOAD_SIGNAL);
      c->kill_ms = deadline;
      old++;
    } else if (c->role == NEXT) {
      c->role = CURRENT;
    }
  }
  for (int i = 0; i < ch_opts.processes; i++) {
    restart_ms[i] = 0;   /* the new generation replaces the dead too */
    backoff_ms[i] = BACKOFF_MIN_MS;
  }
  current_gen = generation;
  ch_log_set_identity(current_gen, "master");
  ch_mlisten_retire(current_gen);
  ch_notify("READY=1\nSTATUS=serving: %d worker process%s, generation %u", next, next == 1 ? "" : "es",
            current_gen);
  ch_log(CH_LOG_NOTICE, "master: reload: %d new worker process%s started, %d old draining",
         next, next == 1 ? "" : "es", old);
}

/* A reload's new worker died before it started: the others go too. */
static void abort_reload(void)
{
  uint64_t deadline = drain_deadline();
  ch_notify("READY=1\nSTATUS=reload failed; serving generation %u", current_gen);
  ch_mlisten_abort(generation);   /* what only the failed script listened on */
  for (int i = 0; i < nkids; i++)
    if (kids[i].role == NEXT) {
      kids[i].role = ABORTED;
      kill(kids[i].pid, CH_MASTER_RELOAD_SIGNAL);   /* the old ones serve on */
      kids[i].kill_ms = deadline;
    }
}

/* Worker c says a signal told it to drain. Unless the master did that
** (a reload, a stop), someone recycles it: a replacement starts now, and c
** is old. Returns 1 in the replacement. */
static int worker_draining(struct child *c)
{
  if (stopping || c->role != CURRENT) return 0;
  c->role = OLD;
  c->kill_ms = drain_deadline();
  int index = c->index;
  restart_ms[index] = 0;
  ch_log(CH_LOG_NOTICE, "master: worker process %d (pid %d) drains on a signal of its own; "
         "starting a replacement", index, (int)c->pid);
  return spawn(index, CURRENT, 0);   /* may move kids: c is not used again */
}

/* "exited with code 3" or "was killed by signal SIGKILL". */
static void describe(int st, char *buf, size_t n)
{
  if (WIFSIGNALED(st)) {
    const char *name = sigabbrev_np(WTERMSIG(st));
    if (name) snprintf(buf, n, "was killed by signal SIG%s%s", name, WCOREDUMP(st) ? " (core dumped)" : "");
    else snprintf(buf, n, "was killed by signal %d", WTERMSIG(st));
  } else {
    snprintf(buf, n, "exited with code %d", WEXITSTATUS(st));
  }
}

/* Reads what a reaped worker said before it ended but the loop has not
** read yet: a script that returns at once sends MSG_STARTED and exits,
** and the reap may come first. The messages stay queued on the channel. */
static void read_last_words(struct child *c)
{
  unsigned char msg[CH_MASTER_MSG_MAX];
  ssize_t got;
  while (c->ready_fd >= 0 && (got = recv(c->ready_fd, msg, sizeof msg, MSG_DONTWAIT)) > 0)
    if (msg[0] == MSG_STARTED) c->started = 1;
}

/* The master's copies of worker process index's TCP listeners: with
** none left, the kernel stops giving that process's sockets new
** connections. */
static void drop_listeners_of(int index)
{
  ch_mlisten_drop_workers(index * ch_opts.threads, (index + 1) * ch_opts.threads);
}

/* kids[k] was reaped: it leaves the table first, so nothing below signals
** its pid again (which the kernel may already have given to another
** process). */
static void child_ended(int k, int st)
{
  struct child dead = kids[k], *c = &dead;
  kids[k] = kids[--nkids];
  read_last_words(c);
  char why[96];
  describe(st, why, sizeof why);
  int clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  uint64_t now = now_ms();
  if (c->ready_fd >= 0) close(c->ready_fd);
  c->ready_fd = -1;
  if (c->role == OLD) {
    ch_log(CH_LOG_NOTICE, "master: old worker process %d (pid %d) %s", c->index, (int)c->pid, why);
  } else if (c->role == ABORTED) {
    ch_log(CH_LOG_NOTICE, "master: new worker process %d (pid %d) of the failed reload %s",
           c->index, (int)c->pid, why);
  } else if (stopping) {
    if (!clean) status = 1;
    ch_log(CH_LOG_NOTICE, "master: worker process %d (pid %d) %s", c->index, (int)c->pid, why);
  } else if (c->role == NEXT) {
    ch_log(CH_LOG_ERR, "master: reload failed: new worker process %d (pid %d) %s before it "
           "started; the old workers keep serving", c->index, (int)c->pid, why);
    abort_reload();
  } else if (c->first && !c->started && !clean) {
    ch_log(CH_LOG_ERR, "master: worker process %d (pid %d) %s before it started; stopping",
           c->index, (int)c->pid, why);
    start_stop(0);
    status = 1;
  } else if (clean) {
    ch_log(CH_LOG_NOTICE, "master: worker process %d (pid %d) %s: its script ended, not restarted",
           c->index, (int)c->pid, why);
    drop_listeners_of(c->index);
  } else {
    int i = c->index;
    if (now - c->born_ms >= STABLE_MS) backoff_ms[i] = BACKOFF_MIN_MS;
    int delay = backoff_ms[i];
    /* Its TCP listeners wait for the replacement (what they queued is
    ** served then) unless it keeps failing: then new connections go to
    ** the other processes meanwhile. */
    if (delay > BACKOFF_MIN_MS) drop_listeners_of(i);
    backoff_ms[i] = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
    restart_ms[i] = now + (uint64_t)delay;
    ch_log(CH_LOG_WARN, "master: worker process %d (pid %d) %s; restarting it in %.1f s",
           i, (int)c->pid, why, delay / 1000.0);
  }
}

static void reap(void)
{
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (int i = 0; i < nkids; i++)
      if (kids[i].pid == pid) {
        child_ended(i, st);
        break;
      }
}

/* Returns 1 in a new worker (SIGHUP forked it). */
static int on_master_signal(int sig)
{
  switch (sig) {
  case SIGHUP:
    if (stopping) return 0;
    for (int i = 0; i < nkids; i++)
      if (kids[i].role == NEXT) {
        ch_log(CH_LOG_WARN, "master: SIGHUP: a reload is already under way");
        return 0;
      }
    ch_log(CH_LOG_NOTICE, "master: SIGHUP: starting %d new worker process%s",
           ch_opts.processes, ch_opts.processes == 1 ? "" : "es");
    generation++;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ch_notify("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading: generation %u",
              (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u, generation);
    for (int i = 0; i < ch_opts.processes; i++)
      if (spawn(i, NEXT, 0)) return 1;
    return 0;
  case SIGTERM:
  case SIGINT:
    start_stop(stopping != 0);
    return 0;
  case SIGQUIT:
    start_stop(1);
    return 0;
  case SIGUSR1:
    ch_log_reopen();
    ch_log(CH_LOG_NOTICE, "master: SIGUSR1: log files reopened; passing it on to the workers");
    for (int i = 0; i < nkids; i++) kill(kids[i].pid, SIGUSR1);
    return 0;
  case SIGUSR2:   /* each worker process logs its own tasks */
    ch_log(CH_LOG_NOTICE, "master: SIGUSR2: passing it on to the workers (task dumps)");
    for (int i = 0; i < nkids; i++) kill(kids[i].pid, SIGUSR2);
    return 0;
  default:   /* SIGCHLD: reap() runs every turn */
    return 0;
  }
}

/* -- The loop ------------------------------------------------------------- */

static int min_timeout(int t, uint64_t at, uint64_t now)
{
  int left = at > now ? (int)(at - now) : 0;
  return t < 0 || left < t ? left : t;
}

/* Runs deadlines that passed; returns 1 in a new worker, else sets
** *timeout to the wait until the next one. */
static int run_deadlines(int *timeout)
{
  uint64_t now = now_ms();
  *timeout = -1;
  for (int i = 0; i < ch_opts.processes; i++) {
    if (!restart_ms[i]) continue;
    if (restart_ms[i] <= now) {
      restart_ms[i] = 0;
      if (spawn(i, CURRENT, 0)) return 1;
    } else {
      *timeout = min_timeout(*timeout, restart_ms[i], now);
    }
  }
  for (int i = 0; i < nkids; i++) {
    struct child *c = &kids[i];
    if (c->kill_ms && c->kill_ms <= now) {
      ch_log(CH_LOG_WARN, "master: worker process %d (pid %d) did not stop in time: SIGKILL",
             c->index, (int)c->pid);
      kill(c->pid, SIGKILL);
      c->kill_ms = 0;
    } else if (c->kill_ms) {
      *timeout = min_timeout(*timeout, c->kill_ms, now);
    }
    if (!c->started) {
      uint64_t at = c->born_ms + START_GRACE_MS;
      if (at <= now) c->started = 1;
      else *timeout = min_timeout(*timeout, at, now);
    }
  }
  return 0;
}

/* READY=1 once every worker process of the first generation started. */
static void notify_first_ready(void)
{
  static int sent;
  if (sent || stopping) return;
  int up = 0;
  for (int i = 0; i < nkids; i++)
    if (kids[i].role == CURRENT && kids[i].started) up++;
  if (up < ch_opts.processes) return;
  sent = 1;
  ch_notify("READY=1\nMAINPID=%d\nSTATUS=serving: %d worker process%s", (int)master_pid, up,
            up == 1 ? "" : "es");
}

/* WATCHDOG=1 every ch_notify_watchdog_ms (WATCHDOG_USEC / 2) from the
** master's loop, which also watches the workers; shortens *timeout to
** the next ping. */
static void watchdog_ping(int *timeout)
{
  static uint64_t next_ms;
  int every = ch_notify_watchdog_ms();
  if (!every) return;
  uint64_t now = now_ms();
  if (now >= next_ms) {
    ch_notify("WATCHDOG=1");
    next_ms = now + (uint64_t)every;
  }
  *timeout = min_timeout(*timeout, next_ms, now);
}

static int pending_restarts(void)
{
  for (int i = 0; i < ch_opts.processes; i++)
    if (restart_ms[i]) return 1;
  return 0;
}

int ch_master_run(void)
{
  int n = ch_opts.processes;
  master_pid = getpid();
  ch_log_set_identity(current_gen, "master");
  restart_ms = calloc((size_t)n, sizeof *restart_ms);
  backoff_ms = calloc((size_t)n, sizeof *backoff_ms);
  struct pollfd *fds = NULL;
  int *map = NULL, fds_cap = 0;
  if (!restart_ms || !backoff_ms) {
    fprintf(stderr, "cohost: master: no memory\n");
    exit(1);
  }
  catch_signals();
  for (int i = 0; i < n; i++) backoff_ms[i] = BACKOFF_MIN_MS;
  ch_log(CH_LOG_INFO, "master: pid %d, %d worker process%s", (int)master_pid, n, n == 1 ? "" : "es");
  for (int i = 0; i < n; i++)
    if (spawn(i, CURRENT, 1)) return my_index;
  for (;;) {
    reap();
    promote_if_started();
    int timeout;
    if (run_deadlines(&timeout)) return my_index;
    promote_if_started();
    notify_first_ready();
    watchdog_ping(&timeout);
    if (nkids == 0 && (stopping || !pending_restarts())) {
      ch_log(CH_LOG_INFO, "master: every worker process has ended");
      ch_mlisten_close_all();
      fflush(NULL);
      _exit(status);
    }
    /* The signal pipe, then each child's channel. */
    if (fds_cap < nkids + 1) {   /* one per child, plus the signal pipe */
      fds_cap = nkids + 1;
      fds = realloc(fds, (size_t)fds_cap * sizeof *fds);
      map = realloc(map, (size_t)fds_cap * sizeof *map);
      if (!fds || !map) {
        fprintf(stderr, "cohost: master: no memory\n");
        _exit(1);
      }
    }
    int nfds = 0;
    fds[nfds].fd = sig_pipe[0];
    fds[nfds++].events = POLLIN;
    for (int i = 0; i < nkids; i++)
      if (kids[i].ready_fd >= 0) {
        map[nfds] = i;
        fds[nfds].fd = kids[i].ready_fd;
        fds[nfds++].events = POLLIN;
      }
    if (poll(fds, (nfds_t)nfds, timeout) < 0) continue;   /* EINTR */
    for (int j = 1; j < nfds; j++) {
      if (!fds[j].revents) continue;
      struct child *c = &kids[map[j]];
      unsigned char msg[CH_MASTER_MSG_MAX];
      ssize_t got = read(c->ready_fd, msg, sizeof msg);   /* one message */
      if (got <= 0) {   /* EOF: it ended (reap() says how) */
        close(c->ready_fd);
        c->ready_fd = -1;
        continue;
      }
      if (msg[0] == CH_MASTER_MSG_LISTEN) {
        ch_mlisten_answer(c->ready_fd, msg, (size_t)got, c->gen);
        continue;
      }
      for (ssize_t m = 0; m < got; m++) {
        if (msg[m] == MSG_STARTED) {
          c->started = 1;
        } else if (msg[m] == MSG_DRAINING) {
          if (worker_draining(c)) return my_index;
          break;   /* it may have moved kids; nothing follows a drain */
        }
      }
    }
    if (fds[0].revents) {
      unsigned char sigs[64];
      ssize_t got = read(sig_pipe[0], sigs, sizeof sigs);
      for (ssize_t j = 0; j < got; j++)
        if (on_master_signal(sigs[j])) return my_index;
    }
  }
}

/* One byte to the master; raw, so a signal thread or a coroutine may
** call it (never parks). A master gone away: EPIPE, ignored. */
static void tell_master(unsigned char b)
{
  if (ready_wfd < 0) {   /* no master: this process speaks to systemd */
    if (b == MSG_STARTED) ch_notify("READY=1\nSTATUS=serving: %d worker thread%s", ch_opts.threads,
                                    ch_opts.threads == 1 ? "" : "s");
    else ch_notify("STOPPING=1\nSTATUS=draining");
    return;
  }
  long r = syscall(SYS_write, ready_wfd, &b, 1);
  (void)r;
}

void ch_master_ready(void)
{
  tell_master(MSG_STARTED);
}

void ch_master_draining(void)
{
  tell_master(MSG_DRAINING);
}
