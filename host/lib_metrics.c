/*
** cohost.core.metrics: the bindings of stats/metrics.c (application
** counters, gauges and histograms shared by every worker and process) and
** the process figures /metrics reports (CPU time, start time, open fds,
** read from /proc). lua/cohost/metrics.lua is the documented face.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "lib.h"
#include "stats/metrics.h"

/* A table's strings 1..n into out (at most max): their count, or raises. */
static int strings(lua_State *L, int idx, const char **out, int max, const char *what)
{
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = (int)lua_objlen(L, idx);
  if (n > max) luaL_error(L, "too many %s (at most %d)", what, max);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, idx, i + 1);
    out[i] = lua_tostring(L, -1);   /* the table keeps it alive */
    if (!out[i]) luaL_error(L, "%s must be strings", what);
    lua_pop(L, 1);
  }
  return n;
}

/* register(name, help, type, label_names [, buckets]) -> id; raises. */
static int l_register(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1), *help = luaL_optstring(L, 2, "");
  static const char *const types[] = { "", "counter", "gauge", "histogram", NULL };
  int type = luaL_checkoption(L, 3, NULL, types);
  const char *labels[CH_METRICS_MAX_LABELS];
  int nl = strings(L, 4, labels, CH_METRICS_MAX_LABELS, "label names");
  double buckets[CH_METRICS_MAX_BUCKETS];
  int nb = 0;
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    nb = (int)lua_objlen(L, 5);
    if (nb > CH_METRICS_MAX_BUCKETS) return luaL_error(L, "too many buckets (at most %d)", CH_METRICS_MAX_BUCKETS);
    for (int i = 0; i < nb; i++) {
      lua_rawgeti(L, 5, i + 1);
      buckets[i] = luaL_checknumber(L, -1);
      lua_pop(L, 1);
    }
  }
  int id = ch_metrics_register(name, help, type, labels, nl, nb ? buckets : NULL, nb);
  if (id == -EEXIST) return luaL_error(L, "metric %s exists with another type or other labels", name);
  if (id == -EINVAL)
    return luaL_error(L, "bad metric %s (names [a-zA-Z_:][a-zA-Z0-9_:]*, labels without ':' "
                         "and not 'le', buckets increasing)", name);
  if (id == -ENOSPC) return luaL_error(L, "too many metrics");
  if (id < 0) return luaL_error(L, "metrics: %s", strerror(-id));
  lua_pushinteger(L, id);
  return 1;
}

/* series(id, values) -> series id, or raises. */
static int l_series(lua_State *L)
{
  int id = (int)luaL_checkinteger(L, 1);
  const char *values[CH_METRICS_MAX_LABELS];
  int n = strings(L, 2, values, CH_METRICS_MAX_LABELS, "label values");
  int s = ch_metrics_series(id, values, n);
  if (s == -ENOSPC) return luaL_error(L, "too many metric series (label values)");
  if (s < 0) return luaL_error(L, "bad label values (one string per label name)");
  lua_pushinteger(L, s);
  return 1;
}

static int change(lua_State *L, int (*fn)(int, double), const char *what)
{
  if (fn((int)luaL_checkinteger(L, 1), luaL_checknumber(L, 2)) < 0)
    return luaL_error(L, "%s: bad value for this metric", what);
  return 0;
}
static int l_add(lua_State *L) { return change(L, ch_metrics_add, "inc"); }
static int l_set(lua_State *L) { return change(L, ch_metrics_set, "set"); }
static int l_observe(lua_State *L) { return change(L, ch_metrics_observe, "observe"); }

/* render() -> the registry in Prometheus' text format. */
static int l_render(lua_State *L)
{
  size_t len;
  char *p = ch_metrics_render(&len);
  if (!p) return luaL_error(L, "no memory");
  lua_pushlstring(L, p, len);
  free(p);
  return 1;
}

/* Reads a small /proc file into buf (NUL-terminated); its length or -1. */
static ssize_t slurp(const char *path, char *buf, size_t n)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t got = read(fd, buf, n - 1);
  close(fd);
  if (got < 0) return -1;
  buf[got] = '\0';
  return got;
}

/* process(pid) -> cpu_seconds, start_time (Unix seconds), open_fds; or
** nil for a process that is gone. From /proc/PID/stat (utime, stime,
** starttime: fields 14, 15, 22, in clock ticks), /proc/stat's btime and
** /proc/PID/fd. */
static int l_process(lua_State *L)
{
  int pid = (int)luaL_checkinteger(L, 1);
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  if (slurp(path, buf, sizeof buf) < 0) return 0;
  const char *p = strrchr(buf, ')');   /* the name may hold spaces */
  if (!p) return 0;
  unsigned long long utime = 0, stime = 0, start = 0;
  /* After ")": field 3 (state) on; utime is 14, stime 15, starttime 22. */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu",
             &utime, &stime, &start) != 3)
    return 0;
  double tick = (double)sysconf(_SC_CLK_TCK);
  unsigned long long btime = 0;
  if (slurp("/proc/stat", buf, sizeof buf) > 0) {
    const char *b = strstr(buf, "\nbtime ");
    if (b) btime = strtoull(b + 7, NULL, 10);
  }
  snprintf(path, sizeof path, "/proc/%d/fd", pid);
  int fds = 0;
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') fds++;
    closedir(d);
    if (pid == getpid()) fds--;   /* our own opendir's fd */
  }
  lua_pushnumber(L, (double)(utime + stime) / tick);
  lua_pushnumber(L, (double)btime + (double)start / tick);
  lua_pushinteger(L, fds);
  return 3;
}

static const luaL_Reg funcs[] = {
  { "register", l_register },
  { "series", l_series },
  { "add", l_add },
  { "set", l_set },
  { "observe", l_observe },
  { "render", l_render },
  { "process", l_process },
  { NULL, NULL }
};

int luaopen_cohost_core_metrics(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  return 1;
}
