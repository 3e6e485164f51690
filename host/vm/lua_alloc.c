/*
** The Lua heap cap. See lua_alloc.h and docs/limits.md.
**
** LuaJIT hands every allocation of a universe to one lua_Alloc with the
** old and new block sizes, and keeps g->gc.total from the same figures, so
** a wrapper that forwards to the original allocator and adds nsize - osize
** counts exactly what lua_gc(L, LUA_GCCOUNT) reports. It wraps whatever
** allocator the state was made with (lua_getallocf/lua_setallocf): a
** worker's is vm/heap.c's.
**
** Five rules keep the cap safe:
**   1. Frees and shrinks always go through: LuaJIT never expects NULL
**      there (lj_mem_realloc raises only when a growth fails).
**   2. Only code running inside a task's protected call can be refused.
**      cohost's own C code that prepares or cleans up after a task (a
**      request's req and res tables, a Lua thread for a new task) runs
**      outside any pcall: an error there would hit LuaJIT's panic and end
**      the process, so it is never refused. It allocates little.
**   3. After a refusal a reserve of limit/16 opens above the limit, so
**      what runs next (pcall handlers, error handlers and their
**      tracebacks, other connections of the worker) still gets memory; it
**      closes once the heap is back under limit - reserve. Past limit +
**      reserve every protected growth is refused.
**   4. No collection ever runs in here (the allocator is called from
**      inside the collector and from any VM state). A refusal is only
**      counted; when a task's pcall has returned, ch_lua_alloc_recover runs
**      one full collection. LuaJIT's own pacing would not: its next cycle
**      starts at twice the heap of the last one, which sits above the limit
**      once a heap near it was measured, so the failed handler's garbage
**      would stay until the next refusal, and the next, for good.
**   5. Before returning NULL, ch_ljvm_fix_frame makes the running frame
**      one this LuaJIT can raise the error on: on a trace and at a
**      function entry that grows the Lua stack its lj_err_mem wrote the
**      message to the wrong place, which crashed the process.
** LuaJIT raises a memory error without calling the message handler (see
** lj_err_mem), so the task's own log line has no traceback: the refusal
** is logged here, naming the task, once per episode.
*/
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/ljvm.h"
#include "vm/lua_alloc.h"

static size_t limit = CH_LUA_ALLOC_DEFAULT;

/* One wrapped universe. Touched only on its worker's thread. */
struct heap {
  lua_Alloc f;                  /* LuaJIT's allocator; read-only */
  void *ud;                     /* its state; read-only */
  size_t bytes;                 /* held now, = g->gc.total */
  size_t limit;                 /* refusals start past this, bytes */
  size_t reserve;               /* opened above limit after a refusal */
  int over;                     /* a refusal happened, reserve open */
  unsigned refused;             /* refusals since the last recovery */
};

/* -- Settings ------------------------------------------------------------- */

int ch_lua_alloc_set_limit(const char *arg)
{
  char *end;
  double v = strtod(arg, &end);
  if (end == arg || !(v >= 0)) return -1;
  switch (*end) {
  case 'k': case 'K': v *= 1024.0; end++; break;
  case 'm': case 'M': v *= 1024.0 * 1024; end++; break;
  case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (*end || v >= 9.0e18) return -1;
  if (v != 0 && v < (double)CH_LUA_ALLOC_MIN) return -1;   /* "0.5" is not "0" */
  size_t n = (size_t)v;
  limit = n;
  return 0;
}

size_t ch_lua_alloc_limit(void)
{
  return limit;
}

/* -- The allocator -------------------------------------------------------- */

/* Sections of C code that allocate on a state no pcall protects (w->L)
** while a task runs; per thread, and never across a yield. */
static __thread int unrefusable;

void ch_lua_alloc_unrefusable(int delta)
{
  unrefusable += delta;
}

/* The running coroutine's VM state (a task's: vm/task.c puts it first in
** the struct the coroutine's udata points to), or NULL. */
static struct ch_ljvm_coro *running_vm(void)
{
  struct ch_coro *c = ch_current();
  return c ? ch_coro_udata(c) : NULL;
}

/* Whether a growth may fail here: only inside a running task's own pcall
** (not while ch_task_run sets it up), outside unrefusable sections. */
static int is_protected(void)
{
  struct ch_ljvm_coro *v = running_vm();
  return v && v->in_pcall && !unrefusable;
}

/* Decides a growth by grow bytes that would pass h->limit: non-zero to
** refuse it. Runs inside the allocator: no Lua here, only C. */
static int refuse(struct heap *h, size_t grow)
{
  if (!is_protected()) return 0;
  if (h->over && h->bytes + grow <= h->limit + h->reserve) return 0;
  h->refused++;
  if (!h->over) {
    h->over = 1;
    ch_log(CH_LOG_ERR, "%s: Lua memory limit reached (%zu MiB, --lua-memory-limit): "
           "%zu bytes more refused with %zu in use; it fails with \"not enough memory\"",
           running_vm()->name, h->limit >> 20, grow, h->bytes);
  }
  /* LuaJIT puts the error message above the running frame, which this
  ** LuaJIT gets wrong on a trace and at a function entry: ljvm.h. */
  ch_ljvm_fix_frame(running_vm()->L);
  return 1;
}

static void *heap_alloc(void *ud, void *p, size_t osize, size_t nsize)
{
  struct heap *h = ud;
  /* Only a growth can pass the limit; the test costs one compare. */
  if (nsize > osize && h->bytes + (nsize - osize) > h->limit && refuse(h, nsize - osize))
    return NULL;
  void *r = h->f(h->ud, p, osize, nsize);
  if (r || nsize == 0) {
    h->bytes = h->bytes - osize + nsize;
    if (h->over && h->bytes + h->reserve < h->limit) h->over = 0;
  }
  return r;
}

/* -- Recovery ------------------------------------------------------------ */

static int full_gc(lua_State *L)
{
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}

void ch_lua_alloc_recover(lua_State *L)
{
  void *ud;
  if (lua_getallocf(L, &ud) != heap_alloc) return;
  struct heap *h = ud;
  if (!h->refused) return;
  h->refused = 0;
  /* Protected: LuaJIT passes a __gc finalizer's error on to the caller of
  ** the collection, and no pcall is around here. Costs one mark and sweep
  ** of the live heap (docs/benchmarks.md, "The Lua heap after a burst",
  ** times one); it runs once per task that met a refusal, never per
  ** request of a healthy worker. */
  if (lua_cpcall(L, full_gc, NULL) != 0) lua_pop(L, 1);
}

/* -- Wrapping ------------------------------------------------------------- */

int ch_lua_alloc_wrap(lua_State *L)
{
  if (!limit) return 0;
  struct heap *h = calloc(1, sizeof *h);
  if (!h) return -1;
  h->f = lua_getallocf(L, &h->ud);
  h->bytes = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
  h->limit = limit;
  h->reserve = limit / 16;
  lua_setallocf(L, heap_alloc, h);
  return 0;
}

size_t ch_lua_alloc_bytes(lua_State *L)
{
  void *ud;
  if (lua_getallocf(L, &ud) == heap_alloc) return ((struct heap *)ud)->bytes;
  return (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
}
