/*
** The Lua heaps' allocator. See heap.h.
**
** Why not LuaJIT's own (lj_alloc, after dlmalloc): it never returns a page
** from the middle of its segments, and unmaps a segment only when no
** block is left in it. After a burst of WebSockets had closed and a full
** collection had left a few hundred KiB of live objects, LuaJIT's
** segments still held much of the memory the burst had touched, a
** different amount each run (docs/benchmarks.md, "Memory after a
** burst").
** jemalloc keeps small blocks in slabs of a few pages and can be told to
** give every free page of an arena back at once (arena.<i>.purge).
**
** Why privately: Debian builds libjemalloc without a prefix, so linking
** it as is replaces malloc for the whole process (OpenSSL, libpq, the
** runtime, whose idle trim is glibc's malloc_trim). The Makefile renames
** its public names in a copy of the static archive (objcopy
** --redefine-syms with host/vm/jemalloc.syms: malloc becomes ch_je_malloc
** and so on); its internal names are hidden already. What is renamed is
** called only from here, and only Lua's allocator function frees what it
** returns.
**
** Cost: with jemalloc's per-thread cache a Lua allocation or free takes
** fewer instructions than with lj_alloc (docs/benchmarks.md). It frees
** with free, not sdallocx with LuaJIT's old size, which would save a
** lookup per free but trust every size LuaJIT passes with the heap's
** integrity. Each worker thread is given an arena the first time it
** allocates (jemalloc makes up to four per CPU, then shares them); no
** background thread runs.
*/
#include <stdint.h>
#include <stdio.h>

#include "cohost.h"
#include "vm/heap.h"
#include "vm/lua_alloc.h"
#include "vm/refs.h"

/* The renamed part of jemalloc's API (its <jemalloc/jemalloc.h> declares
** the original names). */
void *ch_je_malloc(size_t size);
void *ch_je_realloc(void *p, size_t size);
void ch_je_free(void *p);
int ch_je_mallctl(const char *name, void *old, size_t *oldlen, void *new, size_t newlen);

/* -- The allocator -------------------------------------------------------- */

/* lua_Alloc's contract (Lua 5.1 manual, lua_Alloc): nsize 0 frees; p NULL
** allocates. LuaJIT also frees a zero-length vector as (NULL, 0), which
** free takes as nothing. */
static void *heap_f(void *ud, void *p, size_t osize, size_t nsize)
{
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    ch_je_free(p);
    return NULL;
  }
  return p ? ch_je_realloc(p, nsize) : ch_je_malloc(nsize);
}

/* luaL_newstate's panic function (LuaJIT's lib_aux.c): the process ends
** after it with EXIT_FAILURE. */
static int panic(lua_State *L)
{
  const char *s = lua_tostring(L, -1);
  fprintf(stderr, "PANIC: unprotected error in call to Lua API (%s)\n", s ? s : "?");
  fflush(stderr);
  return 0;
}

/* luaL_newstate is lua_newstate on lj_alloc plus this panic function in
** the LuaJIT cohost is built with; later LuaJITs also print errors of __gc
** finalizers through a VM event there, which this LuaJIT rethrows to the
** code that ran the collection instead. lua_newstate with an allocator of
** one's own needs a GC64 LuaJIT on x86-64 (LuaJIT's lj_state.c): another
** returns NULL, and the worker stops with "cannot create a Lua state". */
lua_State *ch_heap_newstate(void)
{
  lua_State *L = lua_newstate(heap_f, NULL);
  if (L) lua_atpanic(L, panic);
  return L;
}

/* -- Giving back ---------------------------------------------------------- */

/* Up to this heap size a burst's garbage is always collected once the
** worker is idle; past it, only once Lua allocated half the heap's size
** since the last idle collection, as LuaJIT's own pacing waits for the
** heap to double: a big live heap under sparse requests is not marked
** again after each of them. */
#define COLLECT_ALWAYS ((size_t)64 << 20)

/* The collection runs in slices of SLICE_NS of LuaJIT's incremental
** collector, one every GAP_MS, and the loop serves what comes in between:
** a full collection at once would stall every connection of the worker
** for as long as marking its live heap takes (docs/benchmarks.md). One
** step can outlast a slice: LuaJIT's atomic phase, which goes over every
** Lua thread again, is a single step, as in the cycles LuaJIT runs on its
** own. Requests that come meanwhile are served between slices, and their
** allocations advance the same cycles. */
#define SLICE_NS 1000000
#define GAP_MS 1

/* Cycles to end: the one under way when the collection starts (it may have
** marked the burst's objects while they were live), a whole one (it frees
** the garbage, and runs the finalizers of the userdata it found dead), and
** one more (it frees those userdata). */
#define CYCLES 3

/* One worker thread's idle collection. */
struct idle_gc {
  struct ch_timer timer;        /* the next slice; weak */
  lua_State *L;                 /* the worker's state; read-only */
  int cycles;                   /* cycles still to end; 0: none runs */
  uint64_t allocated_at;        /* jemalloc's count of the bytes this
                                ** thread ever allocated, when the last
                                ** idle collection started */
};

static __thread struct idle_gc igc;

static uint64_t allocated(void)
{
  uint64_t n = 0;
  size_t len = sizeof n;
  ch_je_mallctl("thread.allocated", &n, &len, NULL, 0);
  return n;
}

/* Gives the free pages of the thread's arena back: freed blocks wait in
** the thread's cache; flushed, their slabs' free pages go back
** (MADV_DONTNEED) with the arena's purge, rather than after jemalloc's
** decay, which only moves while the arena is used. */
static void purge(void)
{
  unsigned arena;
  size_t len = sizeof arena;
  char name[48];
  ch_je_mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
  if (ch_je_mallctl("thread.arena", &arena, &len, NULL, 0) != 0) return;
  snprintf(name, sizeof name, "arena.%u.purge", arena);
  ch_je_mallctl(name, NULL, NULL, NULL, 0);
}

/* One slice: steps of the collector until a cycle ends or SLICE_NS have
** passed. Protected (lua_cpcall): LuaJIT passes a __gc finalizer's error
** on to the caller of the step, and no pcall is around the loop. */
static int slice(lua_State *L)
{
  uint64_t end = ch_now_ns() + SLICE_NS;
  do {
    if (lua_gc(L, LUA_GCSTEP, 0) == 1 && --igc.cycles == 0) return 0;
  } while (ch_now_ns() < end);
  return 0;
}

static void next_slice(struct ch_timer *t)
{
  (void)t;
  if (lua_cpcall(igc.L, slice, NULL) != 0) lua_pop(igc.L, 1);
  if (igc.cycles > 0) {
    ch_timer_start(&igc.timer, GAP_MS, next_slice);
    return;
  }
  purge();
}

/* With no traffic LuaJIT collects nothing: its collector advances only as
** Lua allocates, so the garbage of a burst stays in the heap, and the
** pages under it with it. Only a collection can tell garbage from live
** objects, and the heap's size does not: 15,000 open WebSockets and the
** same closed weigh the same. */
void ch_heap_trim(lua_State *L)
{
  size_t now = ch_lua_alloc_bytes(L);
  if (now > COLLECT_ALWAYS && allocated() - igc.allocated_at < now / 2) {
    purge();
    return;
  }
  /* Registry refs a closer or finalizer deferred would keep their values
  ** alive through the collection. */
  ch_refs_flush(L);
  igc.L = L;
  igc.cycles = CYCLES;
  igc.allocated_at = allocated();
  igc.timer.weak = 1;
  next_slice(&igc.timer);
}
