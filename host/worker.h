/*
** Workers: one thread each, with its own scheduler and lua_State, and the
** command-line options they all read. A worker's life and its shutdown
** order (listeners, then idle connections, then pools, then the tasks
** left) live in worker.c, so no module calls up into another's shutdown.
*/
#ifndef CH_WORKER_H
#define CH_WORKER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cohost.h"
#include "net/listen.h"

struct lua_State;
struct ch_task;

struct ch_worker {
  int id;                       /* 0 .. count-1, distinct across worker
                                ** processes; read-only */
  struct lua_State *L;          /* main state: creates and anchors threads,
                                ** never runs Lua code itself */
  struct ch_sched *sched;       /* this worker's scheduler */
  struct ch_task *tasks;        /* live tasks, for shutdown and stats */
  int *idle;                    /* registry refs of reusable Lua threads */
  int nidle, idle_cap;
  int stopping;                 /* shutdown started: stop accepting */
  int drain_begun;              /* the drain began: the Lua's on_shutdown
                                ** functions were started (in a stop,
                                ** --drain-delay before stopping) */
  struct ch_timer stop_timer;   /* cancels what is left at the deadline;
                                ** weak: never keeps the worker running */
  struct ch_listen_ctx listen;  /* what its listeners read and count in
                                ** (net/listen.h): its id, the limit, open
                                ** connections; installed on its thread */
  /* Live counters: written only by the worker's thread, read by anyone
  ** (stats, relaxed loads). On a cache line of their own, away from what
  ** the worker touches for everything else. */
  _Alignas(64) _Atomic uint64_t accepted;   /* connections accepted */
  _Atomic uint64_t requests;    /* HTTP requests served */
};

/* Options from the command line, read-only once workers start. */
/* The coroutine stack size of cohost's workers when --stack-size is not
** given: 1 MiB, four times the runtime's, so that Lua recursion through C
** (a gsub callback about 100 levels deep) ends with "C stack overflow" in
** its handler, not far sooner (docs/stacks.md). Address space only, with
** MAP_NORESERVE: a stack costs the pages it touched. */
#define CH_WORKER_STACK_DEFAULT ((size_t)1 << 20)

struct ch_options {
  int workers;                  /* workers in all processes: processes (or
                                ** 1) x threads; ch_worker_count() */
  int threads;                  /* worker threads in each process */
  int processes;                /* --processes; 0: no master */
  int process;                  /* this worker process's index (0 .. processes-1);
                                ** its workers are ids process*threads + 0.. */
  size_t stack_size;            /* bytes; 0 = CH_WORKER_STACK_DEFAULT */
  int max_connections;          /* per worker; 0 = unlimited */
  int shutdown_timeout_ms;      /* grace period on SIGTERM/SIGINT */
  int drain_delay_ms;           /* --drain-delay: SIGTERM first makes
                                ** /healthz answer 503 this long, serving
                                ** as before, then the shutdown starts */
  unsigned fair_switches;       /* ch_sched_set_fairness's policy */
  unsigned fair_usec;
  int stack_mode;               /* --stack-mode; -1: CH_STACK_MODE or separate */
  int io_backend;               /* --io-backend; -1: CH_IO_BACKEND or epoll */
  const int *cpus;              /* --cpu-affinity: worker i runs on
                                ** cpus[i % ncpus]; NULL: not pinned */
  int ncpus;
  int slow_request_ms;          /* --slow-request-ms: log HTTP requests
                                ** slower than this; 0: none */
  int debug_endpoints;          /* --debug-endpoints: the debug endpoints
                                ** on a status listener off loopback too */
};

extern struct ch_options ch_opts;
extern __thread struct ch_worker *ch_worker_self;

/* Runs this process's ch_opts.threads workers, worker 0 on the calling
** thread, the others on threads of their own, and returns once all have
** ended. Each pins itself (--cpu-affinity), makes its scheduler with the
** options' policy and its lua_State with new_state, starts the statistics
** and the watchdog, and spawns start(worker) as its first coroutine: the
** script's main chunk. A setting the runtime refuses ends the process
** with status 2. */
void ch_workers_run(struct lua_State *(*new_state)(void), void (*start)(void *));

/* Asks each of this process's running workers, through its scheduler, to
** shut down (ch_worker_shutdown). Any thread; the signal thread's. */
void ch_workers_shutdown(void);

/* Tells each of this process's running workers, through its scheduler,
** that the drain begins (ch_worker_drain_begin). Any thread; the signal
** thread's, at the signal, before --drain-delay. */
void ch_workers_drain_begin(void);

/* The two moments of a worker's drain that its Lua hears of. */
enum { CH_DRAIN_BEGIN, CH_DRAIN_STOP };

/* Installs what runs a worker's Lua at the moments of its drain
** (lib_sys.c's ch_sys_drain; main.c installs it before the workers
** start): CH_DRAIN_BEGIN once the drain begins, CH_DRAIN_STOP once its
** listeners have closed. Called on the worker's thread, in a coroutine
** or in its scheduler's loop; never yields. */
void ch_workers_set_drain_hook(void (*hook)(struct ch_worker *w, int phase));

/* Posts fn(arg) to each running worker's scheduler (it runs on that
** worker's thread). Returns how many took it. Any thread. */
int ch_workers_post(void (*fn)(void *), void *arg);

/* Whether this process is being stopped: a SIGTERM (or cohost.shutdown)
** came, and /healthz answers 503 (during --drain-delay, and after). A
** reload's old workers drain without it: the node still serves. Any
** thread. */
int ch_workers_draining(void);

/* Marks this process as draining (ch_workers_draining). Any thread. */
void ch_workers_set_draining(void);

/* The drain of the calling worker begins: its Lua's on_shutdown
** functions start (the drain hook's CH_DRAIN_BEGIN), once. Its listeners
** still serve. ch_worker_shutdown does this first if nobody did. */
void ch_worker_drain_begin(struct ch_worker *w);

/* Starts an orderly shutdown of the calling worker: listeners close, daemon
** tasks are cancelled, cohost's own closers end the streams handlers
** left open (the drain hook's CH_DRAIN_STOP), the rest have the shutdown
** timeout to finish. /healthz is not touched: a stop says 503 first
** (ch_workers_set_draining), a reload's old workers do not. */
void ch_worker_shutdown(struct ch_worker *w);

/* The worker count (for cohost.worker_count). */
int ch_worker_count(void);

/* Counts one HTTP request on w from its own thread. One writer: a load
** and a store, not a locked add (what that saves: docs/benchmarks.md).
** The listeners count accepts the same way, through w->listen. */
static inline void ch_worker_bump(_Atomic uint64_t *n)
{
  atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                        memory_order_relaxed);
}
#define ch_worker_count_request(w) ch_worker_bump(&(w)->requests)

/* Ends the process at once with code, flushing stdio. */
void ch_worker_exit(int code) __attribute__((noreturn));

#endif
