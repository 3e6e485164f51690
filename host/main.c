/*
** cohost: the program. Parses the command line, makes each worker's
** lua_State (paths, arg) and the task that runs the script's main chunk,
** hands both to the workers (worker.c: threads, schedulers, shutdown
** order), and turns SIGINT/SIGTERM into their orderly shutdown. With
** --processes it first becomes a master that forks that many such
** processes (master.c). Shape after luajit.c and Lua's lua.c.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>
#include <luajit.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "vm/cstack.h"
#include "vm/lua_alloc.h"
#include "vm/heap.h"
#include "lib.h"
#include "proc/watchdog.h"
#include "net/activation.h"
#include "proc/notify.h"
#include "stats/metrics.h"
#include "http/metrics.h"
#include "proc/master.h"
#include "stats/stats.h"
#include "stats/stats_procs.h"
#include "stats/debug.h"
#include "shdict/store.h"
#include "testmode.h"

#define COHOST_VERSION "0.1.0"

#ifndef COHOST_LUA_DIR
#define COHOST_LUA_DIR "/usr/local/share/cohost/lua"   /* make install's */
#endif

struct ch_options ch_opts = {
  .workers = 1,
  .threads = 1,
  .shutdown_timeout_ms = 10000,
  .fair_switches = 1000000,      /* no switch limit to speak of: the time rules */
  .fair_usec = 1000,
  .stack_mode = -1,
  .io_backend = -1,
};

static const char *script;        /* NULL with -e only; "-": stdin */
static char *stdin_src;           /* script "-": stdin, read once at start */
static size_t stdin_len;
static char **script_argv;        /* script arguments */
static int script_argc;
static const char *chunks[16];    /* -e CHUNK, in order */
static int nchunks;
static char **all_argv;           /* for arg[-n] */
static int script_index;          /* argv index of the script */
static char lua_dir[PATH_MAX];    /* where lua/cohost/ lives */
static char exe[PATH_MAX];        /* this binary's path (/proc/self/exe),
                                  ** or argv[0] if unknown */
static const char *status_addr;   /* --status-addr: the endpoint on worker 0 */

static int test_mode;             /* --test, or busted's script as the script */

static const char *affinity_arg;  /* as given, parsed once -w is known */

/* --shdict NAME:SIZE, made before any worker exists (see shdict/store.h). */
static struct { const char *name; long size; } shdicts[64];
static int nshdicts;

static _Atomic int started;         /* workers whose main chunk returned */
static _Atomic int exit_code;

/* Every C module, preloaded as cohost.core.<name>, as linit.c does. */
static const luaL_Reg preloads[] = {
  { "cohost.core.task", luaopen_cohost_core_task },
  { "cohost.core.sys", luaopen_cohost_core_sys },
  { "cohost.core.socket", luaopen_cohost_core_socket },
  { "cohost.core.udp", luaopen_cohost_core_udp },
  { "cohost.core.listen", luaopen_cohost_core_listen },
  { "cohost.core.ssl", luaopen_cohost_core_ssl },
  { "cohost.core.crypto", luaopen_cohost_core_crypto },
  { "cohost.core.http", luaopen_cohost_core_http },
  { "cohost.core.h2client", luaopen_cohost_core_h2client },
  { "cohost.core.re", luaopen_cohost_core_re },
  { "cohost.core.file", luaopen_cohost_core_file },
  { "cohost.core.shdict", luaopen_cohost_core_shdict },
  { "cohost.core.bus", luaopen_cohost_core_bus },
  { "cohost.core.metrics", luaopen_cohost_core_metrics },
  { "cohost.core.postgres", luaopen_cohost_core_postgres },
  { "cohost.core.debug", luaopen_cohost_core_debug },
  { NULL, NULL }
};

/* -- Command line --------------------------------------------------------- */

static void usage(FILE *f)
{
  fprintf(f,
    "usage: cohost [options] script.lua [args...]\n"
    "Runs script.lua on native coroutines: its main chunk runs once per worker\n"
    "and may listen, connect and sleep.\n\n"
    "  -w, --workers N|auto       worker threads (default 1; auto = one per CPU)\n"
    "      --processes N|auto     run N worker processes of --workers threads each\n"
    "                             under a master that restarts them; SIGHUP reloads\n"
    "                             (default: one process, no master; auto = CPUs)\n"
    "      --shdict NAME:SIZE     make shared dict NAME (SIZE like 10m) before the\n"
    "                             workers start, shared by every process (repeatable)\n"
    "      --stack-size BYTES     coroutine stack size, K/M suffix (default 1M, at\n"
    "                             least 48K)\n"
    "      --stack-mode MODE      separate (a stack per coroutine, the default) or\n"
    "                             copy (one shared stack, parked frames copied to\n"
    "                             the heap): docs/stacks.md\n"
    "      --io-backend NAME      epoll (the default) or uring: reads, writes and\n"
    "                             accepts as io_uring operations (epoll where the\n"
    "                             kernel refuses it): docs/runtime.md\n"
    "      --max-connections N    per worker; more get a 503 (HTTP) or are closed at\n"
    "                             once (default 0 = no limit)\n"
    "      --shutdown-timeout S   seconds handlers get on SIGTERM/SIGINT and old workers\n"
    "                             on a reload (default 10); SIGQUIT stops at once\n"
    "      --drain-delay S        on SIGTERM, /healthz answers 503 for S seconds\n"
    "                             before the listeners close (default 0)\n"
    "      --log-level LEVEL      err, warn, notice, info, debug (default notice)\n"
    "      --log-format FORMAT    text (default) or json: one object a line\n"
    "      --cpu-affinity auto|LIST  pin worker i to the i-th CPU of LIST (e.g. 0,2-3)\n"
    "                             or of the CPUs allowed to the process (default: off)\n"
    "      --fair-switches N      a coroutine that keeps yielding lets I/O and timers\n"
    "      --fair-usec US         in after N switches or US microseconds, whichever\n"
    "                             first (default 1000000 and 1000; 0 US: no time limit)\n"
    "      --status-addr ADDR     serve GET /status (JSON) and /metrics (Prometheus)\n"
    "                             on ADDR, e.g. 127.0.0.1:9100 (default: off)\n"
    "      --debug-endpoints      serve /debug/tasks and /debug/profile on --status-addr\n"
    "                             off loopback too (on loopback they are always on)\n"
    "      --slow-request-ms N    log HTTP requests slower than N ms, with where their\n"
    "                             time went (default 0 = off): docs/debugging.md\n"
    "      --lua-memory-limit SIZE  Lua heap cap per worker, K/M/G suffix (default 1G;\n"
    "                             0 = none); past it allocations fail: docs/limits.md\n"
    "      --cpu-watchdog S       stop a coroutine that runs S seconds without yielding;\n"
    "                             exit 87 if it cannot be (default 10; 0 = off)\n"
    "      --test [ARGS...]       run busted with ARGS (default ./spec, .busted\n"
    "                             honoured) and exit with its status once it is\n"
    "                             done: docs/testing-apps.md\n"
    "  -e CHUNK                   run CHUNK before the script (repeatable)\n"
    "      --check                load and compile the script only\n"
    "  -v, --version              print the version\n"
    "  -h, --help                 print this help\n");
}

static void die(const char *fmt, const char *arg)
{
  fprintf(stderr, "cohost: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  exit(2);
}

static long parse_size(const char *s)
{
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) die("bad size '%s'", s);   /* NaN too */
  if (*end == 'k' || *end == 'K') { v *= 1024; end++; }
  else if (*end == 'm' || *end == 'M') { v *= 1024 * 1024; end++; }
  else if (*end == 'g' || *end == 'G') { v *= 1024.0 * 1024 * 1024; end++; }
  if (*end || !(v < 9.0e18)) die("bad size '%s'", s);   /* (long)v defined */
  return (long)v;
}

static int cpu_count(void)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* -- CPU affinity --------------------------------------------------------- */

/* set as a CPU list, "0-3,6", into buf. */
static void format_cpus(const cpu_set_t *set, char *buf, size_t size)
{
  size_t n = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && n < size; c++) {
    if (!CPU_ISSET(c, set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set)) last++;
    int w = last > c ? snprintf(buf + n, size - n, "%s%d-%d", n ? "," : "", c, last)
                     : snprintf(buf + n, size - n, "%s%d", n ? "," : "", c);
    if (w < 0) break;
    n += (size_t)w;
    c = last;
  }
}

static int parse_cpu(const char **p, const char *arg)
{
  char *end;
  errno = 0;
  long v = strtol(*p, &end, 10);
  if (errno || end == *p || v < 0 || v >= CPU_SETSIZE) die("bad CPU list '%s'", arg);
  *p = end;
  return (int)v;
}

/* Turns --cpu-affinity's value into ch_opts.cpus: "auto" is every CPU the
** process may use, in order; a list ("0,2-3") is taken as written and each
** of its CPUs must be allowed. Exits with status 2 otherwise. */
static void parse_affinity(const char *arg)
{
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) < 0) die("sched_getaffinity failed%s", "");
  int *cpus = calloc(CPU_SETSIZE, sizeof *cpus), n = 0;
  if (!cpus) die("no memory%s", "");
  ch_opts.cpus = cpus;
  if (!strcmp(arg, "auto")) {
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &allowed)) cpus[n++] = c;
    ch_opts.ncpus = n;
    return;
  }
  const char *p = arg;
  while (*p) {
    int lo = parse_cpu(&p, arg), hi = lo;
    if (*p == '-') {
      p++;
      hi = parse_cpu(&p, arg);
      if (hi < lo) die("bad CPU list '%s'", arg);
    }
    if (*p == ',') p++;
    else if (*p) die("bad CPU list '%s'", arg);
    for (int c = lo; c <= hi; c++) {
      if (!CPU_ISSET(c, &allowed)) {
        char set[512], msg[600];
        format_cpus(&allowed, set, sizeof set);
        snprintf(msg, sizeof msg, "--cpu-affinity: CPU %d is not in the set this process may use (%s)", c, set);
        die("%s", msg);
      }
      if (n < CPU_SETSIZE) cpus[n++] = c;
    }
  }
  if (n == 0) die("bad CPU list '%s'", arg);
  ch_opts.ncpus = n;
}

static unsigned parse_uint(const char *v, const char *opt, unsigned max)
{
  char *end;
  errno = 0;
  unsigned long n = strtoul(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-' || n > max) die("bad value for %s", opt);
  return (unsigned)n;
}

/* "auto" (the CPU count) or a whole decimal number; anything else
** ("2x", "", "-1") is 0, which the callers reject. */
static int count_arg(const char *v)
{
  if (!strcmp(v, "auto")) return cpu_count();
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  return errno || end == v || *end || n < 0 || n > 1000000 ? 0 : (int)n;
}

/* Value of an option: "--opt=value" or the next argument. */
static const char *value(int argc, char **argv, int *i, const char *opt)
{
  const char *eq = strchr(argv[*i], '=');
  if (eq && argv[*i][1] == '-') return eq + 1;
  if (*i + 1 >= argc) die("option %s needs a value", opt);
  return argv[++*i];
}

static int is(const char *arg, const char *name)
{
  size_t n = strlen(name);
  return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

static int parse_args(int argc, char **argv, int *check)
{
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || !strcmp(a, "-")) break;
    if (!strcmp(a, "--")) { i++; break; }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
    else if (!strcmp(a, "-v") || !strcmp(a, "--version")) {
      printf("cohost %s (%s)\n", COHOST_VERSION, LUAJIT_VERSION);
      exit(0);
    } else if (!strcmp(a, "-w") || is(a, "--workers")) {
      const char *v = value(argc, argv, &i, "--workers");
      ch_opts.threads = count_arg(v);
      if (ch_opts.threads < 1 || ch_opts.threads > 1024) die("bad worker count '%s'", v);
    } else if (is(a, "--processes")) {
      const char *v = value(argc, argv, &i, "--processes");
      ch_opts.processes = count_arg(v);
      if (ch_opts.processes < 1 || ch_opts.processes > 1024) die("bad process count '%s'", v);
    } else if (is(a, "--shdict")) {
      const char *v = value(argc, argv, &i, "--shdict");
      const char *colon = strrchr(v, ':');
      if (!colon || colon == v) die("--shdict wants NAME:SIZE, not '%s'", v);
      if (nshdicts == (int)(sizeof shdicts / sizeof shdicts[0])) die("too many --shdict%s", "");
      char *name = strndup(v, (size_t)(colon - v));
      if (!name) die("no memory%s", "");
      shdicts[nshdicts].name = name;
      shdicts[nshdicts++].size = parse_size(colon + 1);
    } else if (is(a, "--stack-mode")) {
      const char *m = value(argc, argv, &i, "--stack-mode");
      if (!strcmp(m, "copy")) ch_opts.stack_mode = CH_STACK_COPY;
      else if (!strcmp(m, "separate")) ch_opts.stack_mode = CH_STACK_SEPARATE;
      else die("--stack-mode: expected copy or separate, not %s", m);
    } else if (is(a, "--io-backend")) {
      const char *m = value(argc, argv, &i, "--io-backend");
      if (!strcmp(m, "uring")) ch_opts.io_backend = CH_IO_URING;
      else if (!strcmp(m, "epoll")) ch_opts.io_backend = CH_IO_EPOLL;
      else die("--io-backend: expected uring or epoll, not %s", m);
    } else if (is(a, "--stack-size")) {
      const char *v = value(argc, argv, &i, "--stack-size");
      ch_opts.stack_size = (size_t)parse_size(v);
      /* Below it a handler's Lua could not even start: the margin that
      ** ends recursion as a Lua error takes most of the stack. */
      if (ch_opts.stack_size < CH_LJVM_STACK_MIN) {
        char why[160];
        snprintf(why, sizeof why, "--stack-size %.64s is too small: the minimum is %zuK", v,
                 (size_t)CH_LJVM_STACK_MIN >> 10);
        die("%s", why);
      }
    } else if (is(a, "--max-connections")) {
      ch_opts.max_connections = atoi(value(argc, argv, &i, "--max-connections"));
    } else if (is(a, "--drain-delay")) {
      ch_opts.drain_delay_ms = (int)(atof(value(argc, argv, &i, "--drain-delay")) * 1000);
    } else if (is(a, "--shutdown-timeout")) {
      ch_opts.shutdown_timeout_ms = (int)(atof(value(argc, argv, &i, "--shutdown-timeout")) * 1000);
    } else if (is(a, "--log-level")) {
      const char *v = value(argc, argv, &i, "--log-level");
      int level = ch_log_level(v);
      if (!level) die("unknown log level '%s'", v);
      ch_log_set_level(level);
    } else if (is(a, "--log-format")) {
      const char *v = value(argc, argv, &i, "--log-format");
      if (ch_log_set_format(v) < 0) die("--log-format: expected text or json, not '%s'", v);
    } else if (is(a, "--cpu-affinity")) {
      affinity_arg = value(argc, argv, &i, "--cpu-affinity");
    } else if (is(a, "--fair-switches")) {
      ch_opts.fair_switches = parse_uint(value(argc, argv, &i, "--fair-switches"), "--fair-switches", 1000000);
      if (ch_opts.fair_switches == 0) die("bad value for %s", "--fair-switches");
    } else if (is(a, "--fair-usec")) {
      ch_opts.fair_usec = parse_uint(value(argc, argv, &i, "--fair-usec"), "--fair-usec", 10000000);
    } else if (is(a, "--status-addr")) {
      status_addr = value(argc, argv, &i, "--status-addr");
    } else if (!strcmp(a, "--debug-endpoints")) {
      ch_opts.debug_endpoints = 1;
    } else if (is(a, "--slow-request-ms")) {
      ch_opts.slow_request_ms = (int)parse_uint(value(argc, argv, &i, "--slow-request-ms"), "--slow-request-ms",
                                                 86400000);
    } else if (is(a, "--lua-memory-limit")) {
      if (ch_lua_alloc_set_limit(value(argc, argv, &i, "--lua-memory-limit")) < 0) die("bad value for %s", "--lua-memory-limit");
    } else if (is(a, "--cpu-watchdog")) {
      if (ch_watchdog_set_seconds(value(argc, argv, &i, "--cpu-watchdog")) < 0) die("bad value for %s", "--cpu-watchdog");
    } else if (!strcmp(a, "-e")) {
      if (nchunks == (int)(sizeof chunks / sizeof chunks[0])) die("too many -e chunks%s", "");
      chunks[nchunks++] = value(argc, argv, &i, "-e");
    } else if (!strcmp(a, "--test")) {
      test_mode = 1;
      break;   /* the rest is busted's; arg[1..] start after --test */
    } else if (!strcmp(a, "--check")) {
      *check = 1;
    } else {
      die("unknown option '%s' (cohost --help lists them)", a);
    }
  }
  if (ch_opts.threads * (ch_opts.processes ? ch_opts.processes : 1) > 65536)
    die("too many workers (processes x threads > 65536)%s", "");
  ch_opts.workers = ch_opts.threads * (ch_opts.processes ? ch_opts.processes : 1);
  if (affinity_arg) parse_affinity(affinity_arg);
  if (i < argc) {
    script = argv[i];
    script_index = i;
    script_argv = argv + i + 1;
    script_argc = argc - i - 1;
  } else {
    script_index = argc;
  }
  return 0;
}

/* Where the Lua modules are, found from the binary's own path so that
** it does not matter what PREFIX it was built with: ../lua beside its
** directory (a build tree: build/cohost and lua/), else
** ../share/cohost/lua (make install's layout, under any PREFIX and
** DESTDIR), else COHOST_LUA_DIR (when /proc is not mounted; the fuzz
** harness's in-process host). */
static void find_lua_dir(void)
{
  static const char *const beside[] = { "../lua", "../share/cohost/lua" };
  char dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
  char *slash = NULL;
  if (n > 0) {
    dir[n] = '\0';
    snprintf(exe, sizeof exe, "%s", dir);
    slash = strrchr(dir, '/');
  }
  if (slash) {
    *slash = '\0';
    for (size_t i = 0; i < sizeof beside / sizeof *beside; i++) {
      char probe[PATH_MAX + 32];
      if (snprintf(lua_dir, sizeof lua_dir, "%s/%s", dir, beside[i]) < (int)sizeof lua_dir &&
          snprintf(probe, sizeof probe, "%s/cohost/init.lua", lua_dir) < (int)sizeof probe &&
          access(probe, R_OK) == 0)
        return;
    }
  }
  if (!exe[0]) snprintf(exe, sizeof exe, "%s", all_argv[0]);
  snprintf(lua_dir, sizeof lua_dir, "%s", COHOST_LUA_DIR);
}

/* -- Lua states ----------------------------------------------------------- */

/* 0, or -1 when out of memory. */
static int set_path(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "preload");
  for (const luaL_Reg *r = preloads; r->name; r++) {
    lua_pushcfunction(L, r->func);
    lua_setfield(L, -2, r->name);
  }
  /* "cjson" and "cjson.safe" are lua/cohost/cjson.lua's faces of Debian's
  ** lua-cjson, whose encode honours http.array's mark. Preloaded, so no
  ** path, LUA_PATH or LUA_CPATH decides it. */
  static const char *const cjson_faces[][2] = {
    { "cjson", "return require('cohost.cjson').cjson" },
    { "cjson.safe", "return require('cohost.cjson').safe" },
  };
  for (size_t i = 0; i < sizeof cjson_faces / sizeof cjson_faces[0]; i++) {
    if (luaL_loadstring(L, cjson_faces[i][1]) != 0) return -1;
    lua_setfield(L, -2, cjson_faces[i][0]);
  }
  lua_pop(L, 2);
  return 0;
}

/* arg as luajit sets it: arg[0] the script, arg[1..] its arguments,
** arg[-1..] the interpreter and options. In test mode arg[-1] is this
** binary's full path instead (lua/cohost/testing.lua keeps it for the
** specs), so that a spec starts the cohost that runs it. */
static void set_arg(lua_State *L)
{
  lua_createtable(L, script_argc, script_index + 1);
  for (int i = 0; all_argv[i]; i++) {
    lua_pushstring(L, all_argv[i]);
    lua_rawseti(L, -2, i - script_index);
  }
  if (test_mode) {
    lua_pushstring(L, exe);
    lua_rawseti(L, -2, -1);
  }
  lua_setglobal(L, "arg");
}

static lua_State *new_state(void)
{
  lua_State *L = ch_heap_newstate();
  if (!L || ch_lua_alloc_wrap(L) < 0) return NULL;
  luaL_openlibs(L);
  const char *why = NULL;
  if (ch_ljvm_init(L, &why) < 0) {
    fprintf(stderr, "cohost: this LuaJIT build is not the one cohost was verified on: %s\n", why);
    exit(1);
  }
  if (ch_cstack_init(L) < 0) return NULL;
  if (set_path(L) < 0) return NULL;
  set_arg(L);
  return L;
}

/* -- Workers -------------------------------------------------------------- */

/* Loads the -e chunks and the script onto a task and runs it. */
static void main_task(void *p)
{
  struct ch_worker *w = p;
  struct ch_task *t = ch_task_new(w, "main");
  if (!t) { exit_code = 1; return; }
  t->kind = CH_TASK_MAIN;
  t->start_ns = ch_now_ns();
  lua_State *T = t->T;
  /* One function runs every -e chunk, then the script with its args
  ** (from stdin: the source read at start, which every worker runs). */
  static const char runner[] =
    "local chunks, script, src = ...\n"
    "for i = 1, #chunks do assert(loadstring(chunks[i], '=(command line)'))() end\n"
    "if script then\n"
    "  local f, err\n"
    "  if src then f, err = loadstring(src, '=stdin') else f, err = loadfile(script) end\n"
    "  if not f then error(err, 0) end\n"
    "  return f(select(4, ...))\n"
    "end\n";
  if (luaL_loadbuffer(T, runner, sizeof runner - 1, "=cohost")) {
    ch_log(CH_LOG_ERR, "%s", lua_tostring(T, -1));
    exit_code = 1;
    ch_task_release(t);
    return;
  }
  lua_createtable(T, nchunks, 0);
  for (int i = 0; i < nchunks; i++) {
    lua_pushstring(T, chunks[i]);
    lua_rawseti(T, -2, i + 1);
  }
  if (script) lua_pushstring(T, script);
  else lua_pushnil(T);
  if (stdin_src) lua_pushlstring(T, stdin_src, stdin_len);
  else lua_pushnil(T);
  for (int i = 0; i < script_argc; i++) lua_pushstring(T, script_argv[i]);
  ch_task_run(t, 3 + script_argc);
  /* A main chunk that a requested stop ends (cancelled at the shutdown
  ** timeout in a script that loops after listening, or failing because
  ** listen refuses once a drain began, as in a worker that was still
  ** starting when SIGTERM came) ended as asked: logged, not an error. */
  int cancelled_by_shutdown = w->stopping;
  if (t->status != CH_TASK_DONE && !cancelled_by_shutdown) {
    exit_code = 1;
    /* A worker process whose script failed (the error is logged) is no
    ** use to its master half-started: it ends, and the master restarts
    ** it, or abandons the reload or the start that made it. */
    if (ch_opts.processes) ch_worker_exit(1);
    ch_workers_set_draining();   /* /healthz: this process is stopping */
    ch_worker_shutdown(w);
  } else if (status_addr && w->id == 0 && ch_stats_endpoint_start(w, status_addr) < 0) {
    ch_worker_exit(1);   /* the reason was logged; asked for, so fatal */
  }
  /* Started once the status endpoint listens too: a reload's new worker
  ** must have asked the master for that socket before the master retires
  ** what the new generation did not ask for, or the old worker's copy
  ** would be the last one and the new one could not bind the port. */
  if (t->status == CH_TASK_DONE && ++started == ch_opts.threads)
    ch_master_ready();   /* the master may now drain the old workers */
  ch_task_release(t);
}

/* -- Signals -------------------------------------------------------------- */

/* SIGINT and SIGTERM are caught by a handler that only writes the signal
** number to a pipe (raw system calls: the hooked write must not run in a
** signal handler); a thread of its own reads it and asks each worker,
** through its scheduler, to shut down. A second signal, or SIGQUIT, ends
** the process at once. Handlers rather than a blocked mask, because exec
** resets handlers but keeps the mask: programs a script starts must get
** their signals. A worker process of --processes also ignores SIGHUP
** (through a no-op handler, for the same reason): it is the master's; and
** takes CH_MASTER_RELOAD_SIGNAL as a reload's drain: the same shutdown,
** without the stop's /healthz 503 and --drain-delay, since the new
** processes serve on the same sockets. */
static int sig_pipe[2];

static void on_signal(int sig)
{
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  long r = syscall(SYS_write, sig_pipe[1], &b, 1);
  (void)r;
  errno = saved;
}

/* SIGPIPE: a no-op handler instead of SIG_IGN, which exec would pass on.
** A write to a closed peer still fails with EPIPE. */
static void on_sigpipe(int sig)
{
  (void)sig;
}

static void catch_signals(void)
{
  if (syscall(SYS_pipe2, sig_pipe, O_CLOEXEC) < 0) die("cannot make the signal pipe%s", "");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  /* SA_ONSTACK: the signal may land on a coroutine's small stack. */
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGQUIT, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);   /* reopen the log files, not die */
  sigaction(SIGUSR2, &sa, NULL);   /* dump the tasks to the log */
  sa.sa_handler = on_sigpipe;
  sigaction(SIGPIPE, &sa, NULL);
  if (ch_opts.processes) {
    sigaction(SIGHUP, &sa, NULL);   /* the no-op */
    sa.sa_handler = on_signal;
    sigaction(CH_MASTER_RELOAD_SIGNAL, &sa, NULL);
  }
}

/* --drain-delay, in a stop: /healthz says 503 while the listeners still
** serve, so a load balancer stops sending before they close. A second
** signal ends the wait (and, read by the loop, the process). */
static void drain_delay(void)
{
  if (ch_opts.drain_delay_ms <= 0) return;
  ch_log(CH_LOG_NOTICE, "draining: /healthz answers 503; listeners close in %.1f s",
         ch_opts.drain_delay_ms / 1000.0);
  struct pollfd pf = { .fd = sig_pipe[0], .events = POLLIN };
  while (poll(&pf, 1, ch_opts.drain_delay_ms) < 0 && errno == EINTR) {}
}

static void *signal_main(void *p)
{
  (void)p;
  int seen = 0;
  for (;;) {
    unsigned char b;
    long n = syscall(SYS_read, sig_pipe[0], &b, 1);
    if (n != 1) continue;   /* EINTR */
    int sig = b;
    if (sig == SIGUSR1) {   /* logrotate's postrotate, as for nginx */
      ch_log_reopen();
      ch_log(CH_LOG_NOTICE, "SIGUSR1: log files reopened");
      continue;
    }
    if (sig == SIGUSR2) {   /* every task, with its traceback, to the log */
      ch_debug_log_tasks();
      continue;
    }
    if (sig == SIGQUIT) {
      fprintf(stderr, "cohost: SIGQUIT, exiting now\n");
      ch_worker_exit(1);
    }
    if (seen++) {
      fprintf(stderr, "cohost: second signal %d, exiting now\n", sig);
      ch_worker_exit(1);
    }
    ch_master_draining();   /* a master starts a replacement for us */
    /* A stop turns /healthz 503 first, so that what the on_shutdown
    ** functions do already finds it so; a reload's drain never does,
    ** and skips the delay: the node keeps serving. */
    int stop = sig != CH_MASTER_RELOAD_SIGNAL;
    if (stop) ch_workers_set_draining();
    ch_workers_drain_begin();   /* on_shutdown functions, at the signal */
    if (stop) drain_delay();
    ch_workers_shutdown();
  }
  return NULL;
}

/* -- main ----------------------------------------------------------------- */

static void read_stdin_script(void)
{
  size_t cap = 0;
  for (;;) {
    if (stdin_len == cap) {
      char *p = ch_buf_grow(stdin_src, 1, &cap, stdin_len + 1, 65536);
      if (!p) die("no memory for the script on stdin%s", "");
      stdin_src = p;
    }
    ssize_t n = read(0, stdin_src + stdin_len, cap - stdin_len);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      die("cannot read the script on stdin%s", "");
    }
    stdin_len += (size_t)n;
  }
}

static int check_only(void)
{
  lua_State *L = luaL_newstate();
  if (!script) die("--check needs a script%s", "");
  if (luaL_loadfile(L, strcmp(script, "-") ? script : NULL)) {
    fprintf(stderr, "cohost: %s\n", lua_tostring(L, -1));
    return 1;
  }
  printf("cohost: %s: syntax OK\n", script);
  return 0;
}

/* Runs busted (lua/cohost/testing.lua) instead of a script: worker 0
** runs the specs and the process exits with busted's status when it is
** done. One process: a worker process's exit would be restarted by its
** master. */
static void enter_test_mode(void)
{
  if (ch_opts.processes)
    die("--test runs in one process; start a --processes app from a spec instead (docs/testing-apps.md)%s", "");
  if (nchunks == (int)(sizeof chunks / sizeof chunks[0])) die("too many -e chunks%s", "");
  chunks[nchunks++] = CH_TESTMODE_CHUNK;
  script = NULL;
  test_mode = 1;
}

int main(int argc, char **argv)
{
  int check = 0;
  all_argv = argv;
  ch_log_init();   /* stderr's file, which SIGUSR1 reopens */
  ch_activation_init();   /* systemd's sockets, before any fork */
  ch_notify_init();       /* and its NOTIFY_SOCKET */
  if (ch_metrics_init() < 0)   /* shared by every process: before the fork */
    fprintf(stderr, "cohost: no memory for the metrics registry; cohost.metrics is off\n");
  else ch_http_metrics_init();   /* cohost.http's series, in it */
  parse_args(argc, argv, &check);
  if (check) return check_only();
  if (test_mode || (script && ch_testmode_is_busted(script))) enter_test_mode();
  if (!script && nchunks == 0) { usage(stderr); return 2; }
  find_lua_dir();

  /* Shared dicts first: a worker process maps what its master made. */
  for (int i = 0; i < nshdicts; i++) {
    const char *err = ch_shdict_create(shdicts[i].name, shdicts[i].size);
    if (err) {
      char msg[256];
      snprintf(msg, sizeof msg, "--shdict %s: %s", shdicts[i].name, err);
      die("%s", msg);
    }
  }
  /* A script on stdin is read once, here: every worker thread and worker
  ** process runs it (each reading stdin would leave the others an empty
  ** script), and a reload runs it again. */
  if (script && strcmp(script, "-") == 0) read_stdin_script();
  /* Statistics across worker processes: also made before the fork. */
  if (ch_opts.processes > 1) {
    int r = ch_stats_procs_create(ch_opts.processes, ch_opts.threads);
    if (r < 0)
      fprintf(stderr, "cohost: statistics stay per process: %s\n", strerror(-r));
    if ((r = ch_debug_procs_create(ch_opts.processes)) < 0)
      fprintf(stderr, "cohost: task dumps and profiles stay per process: %s\n", strerror(-r));
  }
  if (ch_opts.processes) ch_opts.process = ch_master_run();   /* returns in a worker */

  catch_signals();

  pthread_t sig_thread;
  if (pthread_create(&sig_thread, NULL, signal_main, NULL) != 0) die("cannot start the signal thread%s", "");
  pthread_detach(sig_thread);
  if (!ch_opts.processes) ch_notify_watchdog_start();   /* else the master pings */

  ch_workers_set_drain_hook(ch_sys_drain);
  ch_set_yield_check(ch_task_may_park);
  ch_set_resume_hook(ch_ljvm_resumed);

  ch_workers_run(new_state, main_task);
  ch_log_flush(1);   /* the counts of rate-limited events still held */
  fflush(NULL);
  /* No lua_close: other threads' states and parked coroutines may still
  ** reference memory; the kernel reclaims it all at once. */
  _exit(exit_code);
}
