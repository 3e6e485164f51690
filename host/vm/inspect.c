/*
** Describing a worker's tasks. See inspect.h.
**
** Everything here reads: the runtime's note of what a coroutine waits on,
** the task's fields, and its Lua stack through lua_getstack and
** lua_getinfo without "f" (which would push the function onto the parked
** thread's stack). The route is one value copied onto the caller's
** state and one lua_rawgeti of an integer: no allocation, so no
** collection step and no finalizer can run while a dump walks the tasks.
*/
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/metrics.h"
#include "net/addr.h"
#include "vm/inspect.h"
#include "vm/task.h"

/* -- Tracebacks ----------------------------------------------------------- */

#define LEVELS1 12   /* first levels shown, then "...", then LEVELS2 */
#define LEVELS2 10   /* (luaL_traceback's limits) */

/* Appends one level's line; returns the new length (kept below n). */
static size_t level_line(lua_State *L, lua_Debug *ar, char *buf, size_t len, size_t n)
{
  if (!lua_getinfo(L, "Sln", ar)) return len;
  char where[LUA_IDSIZE + 16];
  if (ar->currentline > 0) snprintf(where, sizeof where, "%s:%d:", ar->short_src, ar->currentline);
  else snprintf(where, sizeof where, "%s:", ar->short_src);
  int k;
  if (ar->namewhat && *ar->namewhat)
    k = snprintf(buf + len, n - len, "\n\t%s in function '%s'", where, ar->name);
  else if (*ar->what == 'm')
    k = snprintf(buf + len, n - len, "\n\t%s in main chunk", where);
  else if (*ar->what == 'C')
    k = snprintf(buf + len, n - len, "\n\t%s in ?", where);
  else
    k = snprintf(buf + len, n - len, "\n\t%s in function <%s:%d>", where, ar->short_src, ar->linedefined);
  return k > 0 && (size_t)k < n - len ? len + (size_t)k : len;
}

size_t ch_inspect_traceback(lua_State *L, int level, char *buf, size_t n)
{
  lua_Debug ar;
  if (n < 32) {
    if (n) buf[0] = '\0';
    return 0;
  }
  /* Room kept for the "\n\t..." of a cut. */
  size_t len = (size_t)snprintf(buf, n, "stack traceback:"), room = n - 6;
  int depth = level;
  while (lua_getstack(L, depth, &ar)) depth++;
  for (int i = level; i < depth; i++) {
    if (i == level + LEVELS1 && depth - i > LEVELS2 + 1) {
      len += (size_t)snprintf(buf + len, n - len, "\n\t...");
      i = depth - LEVELS2;
    }
    if (!lua_getstack(L, i, &ar)) break;
    size_t before = len;
    len = level_line(L, &ar, buf, len, room);
    if (len == before) {   /* did not fit */
      len += (size_t)snprintf(buf + len, n - len, "\n\t...");
      break;
    }
  }
  return len;
}

/* -- What a task is and does ---------------------------------------------- */

const char *ch_inspect_route(lua_State *L, const struct ch_task *t)
{
  if (t->kind != CH_TASK_HTTP && t->kind != CH_TASK_HTTP2 && t->kind != CH_TASK_GRPC &&
      t->kind != CH_TASK_WEBSOCKET)
    return "";
  int top = lua_gettop(L), id = 0;
  if (ch_ljvm_push_bottom(L, t->T, 1) && lua_type(L, -1) == LUA_TTABLE) {
    lua_rawgeti(L, -1, 1);
    id = (int)lua_tointeger(L, -1);
  }
  lua_settop(L, top);
  return ch_http_metrics_route_name(id);
}

const char *ch_inspect_wait_name(const struct ch_task *t, int wait)
{
  static const char *const on[CH_TASK_ONS] = {
    "queue", "queue", "semaphore", "channel", "broadcast", "pool", "dns", "postgres", "thread"
  };
  switch (wait) {
  case CH_WAIT_READ: return "read";
  case CH_WAIT_WRITE: return "write";
  case CH_WAIT_POLL: return "poll";
  case CH_WAIT_SLEEP: return "sleep";
  case CH_WAIT_POOL: return "threadpool";
  case CH_WAIT_PARK: return "wakeup";
  case CH_WAIT_QUEUE: return t && t->on < CH_TASK_ONS ? on[t->on] : "queue";
  default: return "other";
  }
}

/* fd's peer as "ip:port" or "unix:path" into out; 0 when fd has none. */
static int peer_of(int fd, char *out, size_t n)
{
  union ch_addr a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  if (fd < 0 || getpeername(fd, &a.sa, &len) < 0) return 0;
  if (a.sa.sa_family == AF_UNIX && len <= offsetof(struct sockaddr_un, sun_path)) {
    snprintf(out, n, "unix:");   /* an unnamed peer (socketpair) */
    return 1;
  }
  return ch_addr_format(&a, out, n) > 0;
}

/* The Lua thread parked task t runs on: its innermost C call's, whose
** mark lies on its C stack (host/vm/ljvm.c); in COPY mode a coroutine
** parked with its frames saved away has that stack's memory lent to
** another, so then its own thread (a Lua coroutine it resumed is not
** seen). */
static lua_State *thread_of(const struct ch_task *t)
{
  if (t->coro && ch_coro_saved_bytes(t->coro)) return t->vm.L;
  return ch_ljvm_innermost(&t->vm);
}

/* -- Output --------------------------------------------------------------- */

/* printf onto out; -ENOMEM when memory is short. */
static int add(struct ch_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add(struct ch_buf *out, const char *fmt, ...)
{
  va_list ap;
  for (;;) {
    size_t room = out->cap - out->len;
    va_start(ap, fmt);
    int k = vsnprintf(out->p ? out->p + out->len : NULL, room, fmt, ap);
    va_end(ap);
    if (k < 0) return -EINVAL;
    if ((size_t)k < room) {
      out->len += (size_t)k;
      return 0;
    }
    if (ch_buf_reserve(out, (size_t)k + 1, 4096) < 0) return -ENOMEM;
  }
}

/* s as a JSON string, quotes included. */
static int add_json(struct ch_buf *out, const char *s)
{
  if (ch_buf_reserve(out, strlen(s) * 6 + 3, 4096) < 0) return -ENOMEM;
  char *p = out->p + out->len;
  *p++ = '"';
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') { *p++ = '\\'; *p++ = (char)*c; }
    else if (*c == '\n') { *p++ = '\\'; *p++ = 'n'; }
    else if (*c == '\t') { *p++ = '\\'; *p++ = 't'; }
    else if (*c < 0x20) p += sprintf(p, "\\u%04x", *c);
    else *p++ = (char)*c;
  }
  *p++ = '"';
  out->len = (size_t)(p - out->p);
  return 0;
}

/* One task, read now. */
struct view {
  const struct ch_task *t;
  struct ch_coro_info info;
  const char *state;            /* "running", "ready", "parked" */
  const char *on;               /* what a parked one waits on, else NULL */
  const char *route;            /* "" when none */
  double age;                   /* seconds; < 0: unknown */
  double timeout;               /* seconds left of its park; < 0: none */
  char peer[CH_ADDR_TEXT];      /* its connection's peer, "" if none */
  char fd_peer[CH_ADDR_TEXT];   /* the waited fd's peer, "" if none */
  char trace[3072];
};

static void look(struct view *v, lua_State *L, const struct ch_task *t,
                 const struct ch_inspect_filter *f, uint64_t now)
{
  v->t = t;
  if (t->coro) ch_coro_info(t->coro, &v->info);
  else v->info = (struct ch_coro_info){ CH_INFO_READY, CH_WAIT_NONE, -1, 0 };   /* not started */
  if (f->self && t->coro == f->self) v->info = (struct ch_coro_info){ CH_INFO_RUNNING, CH_WAIT_NONE, -1, 0 };
  v->state = v->info.state == CH_INFO_RUNNING ? "running" : v->info.state == CH_INFO_PARKED ? "parked" : "ready";
  v->on = v->info.state == CH_INFO_PARKED ? ch_inspect_wait_name(t, v->info.wait) : NULL;
  v->route = ch_inspect_route(L, t);
  v->age = t->start_ns && t->start_ns <= now ? (double)(now - t->start_ns) / 1e9 : -1;
  v->timeout = v->info.deadline_ns ? (v->info.deadline_ns > now ? (double)(v->info.deadline_ns - now) / 1e9 : 0) : -1;
  v->peer[0] = v->fd_peer[0] = '\0';
  peer_of(t->fd, v->peer, sizeof v->peer);
  if (v->info.fd >= 0 && v->info.fd != t->fd) peer_of(v->info.fd, v->fd_peer, sizeof v->fd_peer);
  else if (v->info.fd >= 0) snprintf(v->fd_peer, sizeof v->fd_peer, "%s", v->peer);
}

static int passes(const struct view *v, const struct ch_inspect_filter *f)
{
  if (f->state && strcmp(f->state, v->state) != 0 && !(v->on && strcmp(f->state, v->on) == 0)) return 0;
  if (f->route && strcmp(f->route, v->route) != 0) return 0;
  if (f->min_age > 0 && v->age < f->min_age) return 0;
  return 1;
}

static int emit_json(struct ch_buf *out, const struct view *v, int first)
{
  const struct ch_task *t = v->t;
  int r = add(out, "%s{\"id\":%d,\"worker\":%d,\"process\":%d,\"pid\":%d,\"kind\":\"%s\",\"name\":",
              first ? "" : ",", t->coro ? ch_coro_id(t->coro) : 0, t->w->id, ch_opts.process,
              (int)getpid(), ch_task_kind_name(t->kind));
  if (!r) r = add_json(out, t->vm.name ? t->vm.name : "");
  if (!r && v->route[0]) r = add(out, ",\"route\":") || add_json(out, v->route);
  if (!r && v->peer[0]) r = add(out, ",\"peer\":") || add_json(out, v->peer);
  if (!r && v->age >= 0) r = add(out, ",\"age\":%.3f", v->age);
  if (!r) r = add(out, ",\"state\":\"%s\"", v->state);
  if (!r && v->on) r = add(out, ",\"on\":\"%s\"", v->on);
  if (!r && v->info.fd >= 0) r = add(out, ",\"fd\":%d", v->info.fd);
  if (!r && v->fd_peer[0]) r = add(out, ",\"fd_peer\":") || add_json(out, v->fd_peer);
  if (!r && v->timeout >= 0) r = add(out, ",\"timeout\":%.3f", v->timeout);
  if (!r) r = add(out, ",\"traceback\":") || add_json(out, v->trace) || add(out, "}");
  return r ? -ENOMEM : 0;
}

static int emit_text(struct ch_buf *out, const struct view *v)
{
  const struct ch_task *t = v->t;
  int r = add(out, "task %d worker %d", t->coro ? ch_coro_id(t->coro) : 0, t->w->id);
  if (!r && ch_opts.processes) r = add(out, " process %d pid %d", ch_opts.process, (int)getpid());
  if (!r) r = add(out, " %s (%s)", ch_task_kind_name(t->kind), t->vm.name ? t->vm.name : "");
  if (!r && v->route[0]) r = add(out, " route %s", v->route);
  if (!r && v->peer[0]) r = add(out, " peer %s", v->peer);
  if (!r && v->age >= 0) r = add(out, " age %.3fs", v->age);
  if (!r) r = add(out, " %s", v->state);
  if (!r && v->on) r = add(out, " on %s", v->on);
  if (!r && v->info.fd >= 0) r = add(out, " fd %d", v->info.fd);
  if (!r && v->fd_peer[0]) r = add(out, " (%s)", v->fd_peer);
  if (!r && v->timeout >= 0) r = add(out, " timeout %.3fs", v->timeout);
  if (!r) r = add(out, "\n%s\n", v->trace);
  return r ? -ENOMEM : 0;
}

int ch_inspect_tasks(struct ch_worker *w, const struct ch_inspect_filter *f, int text,
                     struct ch_buf *out)
{
  static __thread struct view v;   /* 3 KiB+: off the stack */
  uint64_t now = ch_now_ns();
  int n = 0;
  lua_State *L = w->L;
  if (!lua_checkstack(L, 4)) return -ENOMEM;
  for (struct ch_task *t = w->tasks; t; t = t->next) {
    look(&v, L, t, f, now);
    if (!passes(&v, f)) continue;
    /* A running task's stack starts at this dump's own frames: it is the
    ** asker, parked under the C function that asked. */
    ch_inspect_traceback(thread_of(t), 0, v.trace, sizeof v.trace);
    int r = text ? emit_text(out, &v) : emit_json(out, &v, n == 0 && (out->len == 0 || out->p[out->len - 1] == '['));
    if (r < 0) return r;
    n++;
  }
  return n;
}
