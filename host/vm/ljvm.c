/*
** LuaJIT VM internals: the offsets of one LuaJIT build, verified by probing
** at start-up; the classic-C-call marker; the park decision built on them;
** the frame fix-up before the Lua heap cap refuses an allocation.
**
** Why internals at all (issue 3, measured on this LuaJIT): parking a
** coroutine inside an FFI call, an FFI callback, a __gc finalizer or a debug
** hook corrupts LuaJIT or stalls its GC, and the public debug API cannot
** tell those apart (on a trace the recorded frames are stale). What is sound
** and cheap: every classic lua_CFunction call goes through ch_ljvm_wrap
** (LUAJIT_MODE_WRAPCFUNC), which marks the coroutine; when a hook would
** block, ch_ljvm_may_park checks that the marked function is still the top
** frame and reads three fields of global_State (vmstate, hookmask, cur_L).
**
** Nothing here runs on the fast path of I/O: the marker costs little per
** C call (docs/benchmarks.md) and the decision is only asked after
** EAGAIN.
*/
#ifndef __EXCEPTIONS
#error "host/vm/ljvm.c needs -fexceptions: LuaJIT's error unwinding must run ch_ljvm_wrap's cleanup"
#endif

#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <luajit.h>

#include "cohost.h"
#include "vm/ljvm.h"

/* -- Offsets of this LuaJIT build ---------------------------------------- */

/* Debian's libluajit2-5.1-2 2.1-20230119 (OpenResty's LuaJIT 2.1 branch),
** x86-64, LJ_GC64 and LJ_FR2 on. Read off its lj_obj.h and lj_frame.h and
** cross-checked against the machine code of the shipped library
** (lua_gettop, lua_sethook, lua_yield, luaJIT_setmode, the VM's stores to
** vmstate and cur_L). ch_ljvm_init probes every one before the host starts. */
#define CH_LJVM_L_GLREF     0x10   /* lua_State.glref: its global_State */
/* CH_LJVM_L_BASE 0x20 (the top frame's base) and CH_LJVM_L_TOP 0x28: ljvm.h */
#define CH_LJVM_L_DUMMY_FFID 0x0a  /* lua_State.dummy_ffid: FF_C */
#define CH_LJVM_L_MAXSTACK  0x30   /* lua_State.maxstack: last slot a frame may use */
#define CH_LJVM_L_STACK     0x38   /* lua_State.stack: slot 0 holds L itself */
#define CH_LJVM_L_CFRAME    0x50   /* lua_State.cframe: innermost VM entry */
#define CH_LJVM_G_HOOKMASK  0x91   /* global_State.hookmask, uint8_t */
#define CH_LJVM_G_VMSTATE   0xb8   /* global_State.vmstate, int32_t */
#define CH_LJVM_G_WRAPF     0x158  /* global_State.wrapf: the C call wrapper */
#define CH_LJVM_G_CUR_L     0x170  /* global_State.cur_L: running lua_State */
#define CH_LJVM_G_JIT_BASE  0x178  /* global_State.jit_base: trace base or NULL */
#define CH_LJVM_FN_FFID     0x0a   /* GCfunc.ffid: FF_LUA, FF_C or a fast function */
#define CH_LJVM_FN_PC       0x20   /* GCfuncL.pc: first bytecode, after its GCproto */
#define CH_LJVM_PT_SIZE     0x68   /* sizeof(GCproto): from pc back to the proto */
#define CH_LJVM_PT_FRAMESIZE 0x0b  /* GCproto.framesize, uint8_t: slots */
#define CH_LJVM_CF_L        0x10   /* CFRAME_OFS_L: the cframe's lua_State */
#define CH_LJVM_CF_PREV     0x20   /* CFRAME_OFS_PREV: the enclosing cframe */

/* Values of that build. */
#define CH_LJVM_VMST_INTERP  (~0)      /* ~LJ_VMST_INTERP */
#define CH_LJVM_VMST_C       (~1)      /* ~LJ_VMST_C; >= 0 is a trace number */
#define CH_LJVM_FF_LUA       0         /* GCfunc.ffid of a Lua function */
#define CH_LJVM_FF_C         1         /* ... of a classic C function */
#define CH_LJVM_HOOK_EVENTS  0x0f      /* HOOK_EVENTMASK: lua_sethook's mask */
#define CH_LJVM_HOOK_ACTIVE  0x10      /* in a hook or finalizer */
#define CH_LJVM_HOOK_VMEVENT 0x20      /* in a jit.attach handler */
#define CH_LJVM_HOOK_GC      0x40      /* in a __gc finalizer */
#define CH_LJVM_FRAME_TYPE   3         /* frame link & 3 == 0: a Lua frame */
#define CH_LJVM_FRAME_TYPEP  7
#define CH_LJVM_FRAME_CONT   2         /* continuation frame */
#define CH_LJVM_FRAME_VARG   3         /* vararg pseudo-frame */
#define CH_LJVM_CONT_FFI_CB  1         /* LJ_CONT_FFI_CALLBACK */
#define CH_LJVM_TTHREAD      UINT64_C(0x1fff9)   /* ~LJ_TTHREAD, 17 bits */
#define CH_LJVM_TFUNC        UINT64_C(0x1fff7)   /* ~LJ_TFUNC */

#define CH_LJVM_FIELD(p, ofs, type)  (*(type *)((char *)(p) + (ofs)))

static char *gstate(lua_State *L) { return CH_LJVM_FIELD(L, CH_LJVM_L_GLREF, char *); }

/* -- The marker ----------------------------------------------------------- */

/* Lives on the C frame of ch_ljvm_wrap; the chain runs innermost first. */
struct ch_ljvm_mark {
  struct ch_ljvm_mark *prev;   /* enclosing classic C call on this coroutine */
  lua_State *L;                /* thread the C function runs on; NULL: not
                               ** linked (whose chain: the running
                               ** coroutine's, 32 bytes in all) */
  void *cframe;                /* L->cframe when it was called */
  unsigned hits;               /* the coroutine's ch_cancel_hits then */
};

void ch_ljvm_coro_init(struct ch_ljvm_coro *v, lua_State *L)
{
  memset(v, 0, sizeof *v);
  v->L = L;
}

/* Runs on every way out of ch_ljvm_wrap, LuaJIT's error unwinding (the
** system unwinder on x64) included. */
static void unmark(struct ch_ljvm_mark *m)
{
  if (!m->L) return;   /* not linked */
  /* The chain is still the running coroutine's: its udata stays the
  ** task's while one of the task's C functions runs (tasks run one after
  ** another on a coroutine, never nested: task.c). */
  struct ch_ljvm_coro *v = ch_coro_udata(ch_current());
  assert(v && v->top == m);
  v->top = m->prev;
}

/* Whether c (running v) is to raise "C stack overflow" here: less than
** the margin of C stack is left below the caller, and no such error is on
** its way already (whose handlers may go on down to half the margin). */
static inline int stack_low(struct ch_coro *c, struct ch_ljvm_coro *v)
{
  size_t size, left = ch_coro_stack_left(c, &size);
  size_t margin = size / 4 < CH_LJVM_STACK_MARGIN ? size / 4 : CH_LJVM_STACK_MARGIN;
  if (margin < CH_LJVM_STACK_MARGIN_MIN) margin = CH_LJVM_STACK_MARGIN_MIN;
  if (__builtin_expect(left >= margin, 1)) {
    if (__builtin_expect(v->overflowed, 0) && left > 2 * margin) v->overflowed = 0;
    return 0;
  }
  if (v->overflowed && left >= margin / 2) return 0;
  v->overflowed = 1;
  return 1;
}

int ch_ljvm_stack_low(void)
{
  struct ch_coro *c = ch_current();
  struct ch_ljvm_coro *v = c ? ch_coro_udata(c) : NULL;
  return v ? stack_low(c, v) : 0;
}

size_t ch_ljvm_stack_left(void)
{
  struct ch_coro *c = ch_current();
  size_t size;
  return c ? ch_coro_stack_left(c, &size) : SIZE_MAX;
}

/* ch_ljvm_wrap's first part: links m on the running task's chain, or
** returns 0 when no Lua task runs here (nothing to mark). Raises "C stack
** overflow" when too little stack is left. Out of line, so that what it
** needs is not in ch_ljvm_wrap's frame, which lies under every parked C
** function (COPY mode saves it for each parked connection: 64 bytes, not
** 96). */
static __attribute__((noinline)) int mark(struct ch_ljvm_mark *m, lua_State *L)
{
  struct ch_coro *c = ch_current();
  struct ch_ljvm_coro *v = c ? ch_coro_udata(c) : NULL;
  m->L = NULL;   /* not linked (yet) */
  if (!v) return 0;
  if (__builtin_expect(stack_low(c, v), 0)) {
    lua_pushliteral(L, "C stack overflow");
    lua_error(L);
  }
  m->prev = v->top;
  m->L = L;
  m->cframe = CH_LJVM_FIELD(L, CH_LJVM_L_CFRAME, void *);
  m->hits = ch_cancel_hits(c);
  v->top = m;
  return 1;
}

/* A cancelled wait inside the C function came back to it as a timeout
** (the hooks can only say what libc says); it has returned, so the
** cancellation is raised here, where a Lua error may start. */
static __attribute__((noinline)) void check_cancelled(struct ch_ljvm_mark *m)
{
  if (ch_cancel_hits(ch_current()) != m->hits) {
    lua_pushliteral(m->L, "cancelled");
    lua_error(m->L);
  }
}

int ch_ljvm_wrap(lua_State *L, lua_CFunction f)
{
  struct ch_ljvm_mark m __attribute__((cleanup(unmark)));
  if (!mark(&m, L)) return f(L);   /* not a Lua task: nothing marked */
  int n = f(L);
  check_cancelled(&m);
  return n;
}

/* -- Lua frames ----------------------------------------------------------- */

/* Walks L's Lua frames from the top (L->base) down, as lj_debug_frame does.
** Returns 1 if one of them is the continuation frame of an FFI callback, 0
** if none is, -1 if the frames do not look sane. With levels, counts the
** levels lua_getstack would see (for the start-up probe). Read-only; a
** few loads a frame (docs/benchmarks.md). Sound whenever L is not running a trace (on a
** trace L->base is stale). */
static inline __attribute__((always_inline)) int walk(lua_State *L, int *levels)
{
  const uint64_t *stack = CH_LJVM_FIELD(L, CH_LJVM_L_STACK, const uint64_t *);
  const uint64_t *top = CH_LJVM_FIELD(L, CH_LJVM_L_TOP, const uint64_t *);
  const uint64_t *bot = stack + 1;   /* LJ_FR2: link slot of the dummy frame */
  const uint64_t *f = CH_LJVM_FIELD(L, CH_LJVM_L_BASE, const uint64_t *) - 1;
  int n = 0, cb = 0;
  while (f > bot) {
    if (f >= top) return -1;
    int64_t link = (int64_t)*f;
    if (levels && (f[-1] & CH_LJVM_PTR_MASK) != (uintptr_t)L) n++;   /* not a dummy frame */
    if ((link & CH_LJVM_FRAME_TYPE) == 0) {
      /* Lua frame: the link is the caller's PC, just past its CALL, whose
      ** operand A says where the callee's frame sits (frame_prevl). */
      const uint32_t *pc = (const uint32_t *)link;
      if (!pc) return -1;
      f -= 2 + ((pc[-1] >> 8) & 0xff);
    } else {
      int64_t type = link & CH_LJVM_FRAME_TYPEP, delta = link - type;
      if (levels && type == CH_LJVM_FRAME_VARG) n--;   /* not a level of its own */
      if (type == CH_LJVM_FRAME_CONT && f - 3 > stack && f[-3] == CH_LJVM_CONT_FFI_CB) {
        if (!levels) return 1;
        cb = 1;
      }
      if (delta <= 0) return -1;   /* would not move down */
      f = (const uint64_t *)((const char *)f - delta);
    }
  }
  if (f != bot) return -1;
  if (levels) *levels = n;
  return cb;
}

/* -- The park decision ---------------------------------------------------- */

static int refuse(struct ch_ljvm_coro *v, int why, int trace)
{
  v->refused = why;
  v->trace = trace;
  return 0;
}

int ch_ljvm_may_park(struct ch_coro *c)
{
  struct ch_ljvm_coro *v = ch_coro_udata(c);
  if (!v) return 1;   /* runs no Lua (an acceptor) */
  struct ch_ljvm_mark *m = v->top;
  /* No classic C call and no VM entry: host C code between Lua calls. */
  if (!m && (!v->L || !CH_LJVM_FIELD(v->L, CH_LJVM_L_CFRAME, void *))) return 1;
  lua_State *L = m ? m->L : v->L;
  char *g = gstate(L);
  int32_t st = CH_LJVM_FIELD(g, CH_LJVM_G_VMSTATE, volatile int32_t);
  if (st >= 0) return refuse(v, CH_LJVM_TRACE, st);
  /* INTERP is accepted too: coroutine.yield leaves it behind when it
  ** returns into a C function's lua_resume. If Lua really ran above the
  ** marked function, the cframe and cur_L checks below would say so. */
  if (st != CH_LJVM_VMST_C && st != CH_LJVM_VMST_INTERP) return refuse(v, CH_LJVM_BUSY, st);
  uint8_t hm = CH_LJVM_FIELD(g, CH_LJVM_G_HOOKMASK, volatile uint8_t);
  if (hm & CH_LJVM_HOOK_GC) return refuse(v, CH_LJVM_GC, 0);
  if (hm & (CH_LJVM_HOOK_ACTIVE | CH_LJVM_HOOK_VMEVENT)) return refuse(v, CH_LJVM_HOOK, 0);
  /* The marked function is the top frame only if nothing entered the VM
  ** on its thread since it was called (lua_call, a metamethod, a finalizer
  ** all push a cframe) and no other thread runs above it: lua_resume
  ** moves cur_L to the coroutine, whose cframe is set while it runs and
  ** NULL once it yielded or ended (then cur_L is merely stale; the VM
  ** clears cur_L when it frees a thread). */
  if (!m || CH_LJVM_FIELD(L, CH_LJVM_L_CFRAME, void *) != m->cframe)
    return refuse(v, CH_LJVM_NOT_CFUNC, 0);
  lua_State *cur = CH_LJVM_FIELD(g, CH_LJVM_G_CUR_L, lua_State *);
  if (cur != L && cur && CH_LJVM_FIELD(cur, CH_LJVM_L_CFRAME, void *))
    return refuse(v, CH_LJVM_NOT_CFUNC, 0);
  /* An FFI callback leaves a continuation frame on the thread it runs on.
  ** Look on every thread known to be active on this coroutine: those of
  ** the marked calls and the task's own. A pure-Lua coroutine resumed in
  ** between, with no classic C call on it, is not seen (documented gap). */
  if (!m->prev && (v->L == L || !v->L)) {   /* the common case: one thread */
    int r = walk(L, NULL);
    if (r) return refuse(v, r > 0 ? CH_LJVM_CALLBACK : CH_LJVM_STACK, 0);
    v->refused = CH_LJVM_OK;
    return 1;
  }
  lua_State *seen[8];
  int nseen = 0;
  for (struct ch_ljvm_mark *k = m; ; k = k->prev) {
    lua_State *T = k ? k->L : v->L;
    int i = 0;
    while (i < nseen && seen[i] != T) i++;
    if (T && i == nseen) {
      if (nseen == 8) return refuse(v, CH_LJVM_STACK, 0);
      seen[nseen++] = T;
      int r = walk(T, NULL);
      if (r) return refuse(v, r > 0 ? CH_LJVM_CALLBACK : CH_LJVM_STACK, 0);
    }
    if (!k) break;
  }
  v->refused = CH_LJVM_OK;
  return 1;
}

void ch_ljvm_resumed(struct ch_coro *c)
{
  struct ch_ljvm_coro *v = ch_coro_udata(c);
  struct ch_ljvm_mark *m;
  /* The VM sets cur_L when a C function returns, not when it raises: if
  ** the parked function raises after others ran Lua, a stale cur_L crashes
  ** the next trace exit. Store what BC_FUNCC's return would store. */
  if (v && (m = v->top)) CH_LJVM_FIELD(gstate(m->L), CH_LJVM_G_CUR_L, lua_State *) = m->L;
}

void ch_ljvm_fix_frame(lua_State *L)
{
  char *g = gstate(L);
  /* cur_L is the running thread: the VM sets it on every entry, the
  ** resume hook after a native resume; a trace passes it as the L of every
  ** C function it calls, the allocator's caller included. */
  lua_State *cur = CH_LJVM_FIELD(g, CH_LJVM_G_CUR_L, lua_State *);
  if (!cur) return;
  uint64_t *base = CH_LJVM_FIELD(g, CH_LJVM_G_JIT_BASE, uint64_t *);
  if (base) CH_LJVM_FIELD(cur, CH_LJVM_L_BASE, uint64_t *) = base;
  else base = CH_LJVM_FIELD(cur, CH_LJVM_L_BASE, uint64_t *);
  /* The frame's function: a Lua function (ffid 0) whose frame does not
  ** fit below maxstack is one being entered (curr_topL past maxstack). A
  ** thread's lowest frame has the thread in slot 0, no function. Such a
  ** frame exists only while its entry grows the stack (the interpreter's
  ** stack check, lj_dispatch_call's call_init): the error raised there
  ** unwinds that very frame, so the dummy never runs. The recorder, which
  ** swallows its errors, runs only once the frame fits. */
  if (base[-2] >> CH_LJVM_TAG_SHIFT != CH_LJVM_TFUNC) return;
  const char *fn = (const char *)(uintptr_t)(base[-2] & CH_LJVM_PTR_MASK);
  if (CH_LJVM_FIELD(fn, CH_LJVM_FN_FFID, uint8_t) != CH_LJVM_FF_LUA) return;
  const char *pc = CH_LJVM_FIELD(fn, CH_LJVM_FN_PC, const char *);
  uint8_t framesize = CH_LJVM_FIELD(pc - CH_LJVM_PT_SIZE, CH_LJVM_PT_FRAMESIZE, uint8_t);
  if (base + framesize <= CH_LJVM_FIELD(cur, CH_LJVM_L_MAXSTACK, uint64_t *)) return;
  /* setframe_gc(base - 2, cur, LJ_TTHREAD): the thread's dummy_ffid reads
  ** as a C function's, so lj_err_mem leaves top at base. */
  base[-2] = CH_LJVM_TTHREAD << CH_LJVM_TAG_SHIFT | (uintptr_t)cur;
  CH_LJVM_FIELD(cur, CH_LJVM_L_TOP, uint64_t *) = base;
}

lua_State *ch_ljvm_innermost(const struct ch_ljvm_coro *v)
{
  return v->top ? v->top->L : v->L;
}

int ch_ljvm_trace_now(lua_State *L)
{
  int32_t st = CH_LJVM_FIELD(gstate(L), CH_LJVM_G_VMSTATE, volatile int32_t);
  return st >= 0 ? st : -1;
}

int ch_ljvm_push_bottom(lua_State *L, lua_State *T, int idx)
{
  /* LJ_FR2: slot 0 holds T, slot 1 is the dummy frame's link, index 1 of
  ** the bottom level is slot 2 (lua_newthread's base). */
  const uint64_t *stack = CH_LJVM_FIELD(T, CH_LJVM_L_STACK, const uint64_t *);
  const uint64_t *top = CH_LJVM_FIELD(T, CH_LJVM_L_TOP, const uint64_t *);
  const uint64_t *slot = stack + 1 + idx;
  lua_pushnil(L);
  if (idx < 1 || slot >= top) return 0;
  CH_LJVM_FIELD(L, CH_LJVM_L_TOP, uint64_t *)[-1] = *slot;   /* a copy of the TValue */
  return 1;
}

/* -- Refusal messages ----------------------------------------------------- */

/* One helper thread per Lua universe, made at init, to run lua_getinfo on a
** function found on a trace without touching the running thread's stack.
** Appended under lock, never removed; 64 universes are plenty. */
static struct { char *g; lua_State *H; } helpers[64];
static int nhelpers;
static uint64_t reported[256];   /* hashes of messages given out */
static int nreported;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char msg[320];

static lua_State *helper_of(char *g)
{
  lua_State *H = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nhelpers; i++)
    if (helpers[i].g == g) H = helpers[i].H;
  pthread_mutex_unlock(&lock);
  return H;
}

/* "file:line" of the innermost Lua function on L with a current line, or
** 0 if there is none (a coroutine whose body tail-called a C function). */
static int site_of(lua_State *L, char *buf, size_t size)
{
  lua_Debug ar;
  for (int level = 0; level < 64 && lua_getstack(L, level, &ar); level++) {
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
      snprintf(buf, size, "%s:%d", ar.short_src, ar.currentline);
      return 1;
    }
  }
  snprintf(buf, size, "?");
  return 0;
}

/* On a trace the frames are stale, but jit_base is the trace's live base:
** the function below it is the one holding the compiled loop. Its
** definition is read on the helper thread, whose stack has room (so the
** push allocates nothing, as nothing may on a trace). */
static void trace_site_of(char *g, char *buf, size_t size)
{
  const uint64_t *base = CH_LJVM_FIELD(g, CH_LJVM_G_JIT_BASE, const uint64_t *);
  lua_State *H = helper_of(g);
  lua_Debug ar;
  snprintf(buf, size, "?");
  if (!base || !H || base[-2] >> CH_LJVM_TAG_SHIFT != CH_LJVM_TFUNC) return;
  int top = lua_gettop(H);
  lua_pushnil(H);
  CH_LJVM_FIELD(H, CH_LJVM_L_TOP, uint64_t *)[-1] = base[-2];   /* a copy of the TValue */
  if (lua_getinfo(H, ">S", &ar))   /* pops it */
    snprintf(buf, size, "the function at %s:%d", ar.short_src, ar.linedefined);
  lua_settop(H, top);
}

const char *ch_ljvm_refusal(struct ch_coro *c)
{
  struct ch_ljvm_coro *v = ch_coro_udata(c);
  if (!v || !v->refused) return NULL;
  lua_State *L = v->top ? v->top->L : v->L;
  char *g = gstate(L);
  char site[200];
  if (v->refused == CH_LJVM_TRACE) trace_site_of(g, site, sizeof site);
  else if (!site_of(CH_LJVM_FIELD(g, CH_LJVM_G_CUR_L, lua_State *), site, sizeof site) &&
           v->L)
    site_of(v->L, site, sizeof site);   /* the task's own thread, below */
  if (v->refused == CH_LJVM_STACK) site[0] = '?', site[1] = 0;   /* not walkable */
  switch (v->refused) {
  case CH_LJVM_NOT_CFUNC:
    snprintf(msg, sizeof msg,
             "in an FFI call or built-in function, not a classic C function, at %s", site);
    break;
  case CH_LJVM_TRACE:
    snprintf(msg, sizeof msg, "in an FFI call from JIT-compiled code (trace %d) in %s",
             v->trace, site);
    break;
  case CH_LJVM_BUSY:
    snprintf(msg, sizeof msg, "while the VM is busy (state %d) at %s", v->trace, site);
    break;
  case CH_LJVM_GC:
    snprintf(msg, sizeof msg, "inside a __gc finalizer at %s", site);
    break;
  case CH_LJVM_HOOK:
    snprintf(msg, sizeof msg, "inside a debug hook at %s", site);
    break;
  case CH_LJVM_CALLBACK:
    snprintf(msg, sizeof msg, "inside an FFI callback at %s", site);
    break;
  default:
    snprintf(msg, sizeof msg, "with Lua frames it cannot check at %s", site);
    break;
  }
  uint64_t h = 14695981039346656037u;   /* FNV-1a */
  for (const char *p = msg; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  int fresh = 1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nreported && fresh; i++) fresh = reported[i] != h;
  if (fresh && nreported < 256) reported[nreported++] = h;
  else fresh = 0;   /* seen, or too many distinct sites to keep quoting */
  pthread_mutex_unlock(&lock);
  return fresh ? msg : NULL;
}

/* -- Start-up probes ------------------------------------------------------ */

/* What the probe functions saw. One probe runs at a time per thread. */
struct probe {
  char *g;
  lua_State *L;          /* the main thread */
  void *cframe_before;   /* L->cframe just before a call from C, or (void *)1 */
  const char *fail;      /* first mismatch */
  int calls, cb_calls, hooks, finalizers, traced, interp, values;
};

static __thread struct probe *probe_now;

/* Records the first mismatch; returns -1 for "return mismatch(...)". */
static int mismatch(struct probe *p, const char *text)
{
  if (!p->fail) p->fail = text;
  return -1;
}

/* A classic C function: probe(expect_callback) checks every field the
** decision reads, from inside a C function called by the VM. */
static int probe_call(lua_State *L)
{
  struct probe *p = probe_now;
  int in_cb = (int)lua_tointeger(L, 1);
  char here;
  p->calls++;
  p->cb_calls += in_cb;
  if (gstate(L) != p->g)
    mismatch(p, "lua_State.glref (0x10) does not lead to the global_State");
  if (CH_LJVM_FIELD(p->g, CH_LJVM_G_VMSTATE, int32_t) != CH_LJVM_VMST_C)
    mismatch(p, "global_State.vmstate (0xb8) is not ~LJ_VMST_C inside a C function");
  if (!in_cb && CH_LJVM_FIELD(p->g, CH_LJVM_G_CUR_L, lua_State *) != L)
    mismatch(p, "global_State.cur_L (0x170) does not name the running thread");
  char *base = CH_LJVM_FIELD(L, CH_LJVM_L_BASE, char *);
  if ((CH_LJVM_FIELD(L, CH_LJVM_L_TOP, char *) - base) / 8 != lua_gettop(L))
    mismatch(p, "lua_State.base/top (0x20/0x28) do not frame the arguments");
  uint64_t slot0 = *CH_LJVM_FIELD(L, CH_LJVM_L_STACK, uint64_t *);
  if (slot0 != (CH_LJVM_TTHREAD << CH_LJVM_TAG_SHIFT | (uintptr_t)L))
    mismatch(p, "lua_State.stack (0x38) slot 0 does not hold the thread");
  uintptr_t cfa = (uintptr_t)CH_LJVM_FIELD(L, CH_LJVM_L_CFRAME, void *) & ~(uintptr_t)3;
  char *cf = (char *)cfa;   /* the VM's frame: above ours, within 64 KiB */
  if (!(cfa > (uintptr_t)&here && cfa < (uintptr_t)&here + 65536) ||
      CH_LJVM_FIELD(cf, CH_LJVM_CF_L, lua_State *) != L)
    mismatch(p, "lua_State.cframe (0x50) is not this thread's frame on this C stack");
  else if (p->cframe_before != (void *)1 &&
           CH_LJVM_FIELD(cf, CH_LJVM_CF_PREV, void *) != p->cframe_before)
    mismatch(p, "cframe prev (0x20) does not link the enclosing frame");
  if (CH_LJVM_FIELD(p->g, CH_LJVM_G_HOOKMASK, uint8_t) & ~CH_LJVM_HOOK_EVENTS & 0x7f)
    mismatch(p, "global_State.hookmask (0x91) shows a hook outside any hook");
  int levels = -1, api = 0;
  lua_Debug ar;
  while (lua_getstack(L, api, &ar)) api++;
  int cb = walk(L, &levels);
  if (cb < 0 || levels != api)
    mismatch(p, "the Lua frame walk disagrees with lua_getstack");
  else if (cb != in_cb)
    mismatch(p, "the frame walk does not find FFI callback frames (LJ_CONT_FFI_CALLBACK)");
  lua_pushinteger(L, 1);
  return 1;
}

/* Called with a full userdata, a light userdata pointing at its payload,
** a table, a number and a string: only the first reads as a full
** userdata in place, at lua_touserdata's address, and only the last as a
** string, at lua_tolstring's. */
static int probe_values(lua_State *L)
{
  struct probe *p = probe_now;
  p->values++;
  if (ch_ljvm_udata_at(L, 1) != lua_touserdata(L, 1) || !lua_touserdata(L, 1))
    mismatch(p, "a full userdata is not at sizeof(GCudata) (48) past its tagged (0x1fff3) slot");
  for (int i = 2; i <= 5; i++)
    if (ch_ljvm_udata_at(L, i)) mismatch(p, "a value that is no full userdata reads as one");
  if (ch_ljvm_udata_at(L, 0) || ch_ljvm_udata_at(L, -1))
    mismatch(p, "ch_ljvm_udata_at reads outside the arguments");
  size_t len = 0, want = 0;
  const char *str = ch_ljvm_string_at(L, 5, &len), *api = lua_tolstring(L, 5, &want);
  if (str != api || len != want || len != 5)
    mismatch(p, "a string's bytes or length are not at GCstr 24 and 20 past its tagged (0x1fffb) slot");
  for (int i = 1; i <= 4; i++)
    if (ch_ljvm_string_at(L, i, &len)) mismatch(p, "a value that is no string reads as one");
  if (ch_ljvm_string_at(L, 6, &len)) mismatch(p, "ch_ljvm_string_at reads outside the arguments");
  return 0;
}

static int probe_gc(lua_State *L)
{
  struct probe *p = probe_now;
  (void)L;
  p->finalizers++;
  uint8_t hm = CH_LJVM_FIELD(p->g, CH_LJVM_G_HOOKMASK, uint8_t);
  if ((hm & (CH_LJVM_HOOK_ACTIVE | CH_LJVM_HOOK_GC)) != (CH_LJVM_HOOK_ACTIVE | CH_LJVM_HOOK_GC))
    mismatch(p, "global_State.hookmask (0x91) lacks HOOK_ACTIVE|HOOK_GC in a finalizer");
  if (CH_LJVM_FIELD(p->g, CH_LJVM_G_VMSTATE, int32_t) != CH_LJVM_VMST_C)
    mismatch(p, "global_State.vmstate (0xb8) is not ~LJ_VMST_C inside a finalizer's C function");
  return 0;
}

static void probe_hook(lua_State *L, lua_Debug *ar)
{
  struct probe *p = probe_now;
  (void)L; (void)ar;
  p->hooks++;
  if (!(CH_LJVM_FIELD(p->g, CH_LJVM_G_HOOKMASK, uint8_t) & CH_LJVM_HOOK_ACTIVE))
    mismatch(p, "global_State.hookmask (0x91) lacks HOOK_ACTIVE inside a debug hook");
  if (CH_LJVM_FIELD(p->g, CH_LJVM_G_VMSTATE, int32_t) != CH_LJVM_VMST_INTERP)
    mismatch(p, "global_State.vmstate (0xb8) is not ~LJ_VMST_INTERP inside a count hook");
}

/* Called through an FFI function pointer, interpreted and then from a
** trace: vmstate must read C, then the trace number, with jit_base set. */
static int probe_leaf(void)
{
  struct probe *p = probe_now;
  int32_t st = CH_LJVM_FIELD(p->g, CH_LJVM_G_VMSTATE, int32_t);
  if (st >= 0) {
    /* jit_base must be a frame base on the thread's stack, below a function. */
    const uint64_t *base = CH_LJVM_FIELD(p->g, CH_LJVM_G_JIT_BASE, const uint64_t *);
    uintptr_t stack = (uintptr_t)CH_LJVM_FIELD(p->L, CH_LJVM_L_STACK, void *);
    p->traced++;
    if (!base || (uintptr_t)base <= stack || (uintptr_t)base - stack > (1u << 20) ||
        (uintptr_t)base % 8 || base[-2] >> CH_LJVM_TAG_SHIFT != CH_LJVM_TFUNC)
      mismatch(p, "global_State.jit_base (0x178) is not the trace's base on a trace");
  } else if (st == CH_LJVM_VMST_C) {
    p->interp++;
  } else {
    mismatch(p, "global_State.vmstate (0xb8) is neither C nor a trace in an FFI call");
  }
  return 1;
}

static int probe_call_back(int (*cb)(int), int x)
{
  return cb(x);
}

/* Lua side of the probes: nested Lua frames, an FFI callback calling a
** classic C function, and a hot loop of FFI calls for the JIT. */
static const char probe_chunk[] =
  "local probe, call_ptr, leaf_ptr = ...\n"
  "local function nest(n)\n"
  "  if n == 0 then local r = probe(0) return r end\n"
  "  local r = nest(n - 1) return r\n"
  "end\n"
  "nest(3)\n"
  "local ffi = require('ffi')\n"
  "local call = ffi.cast('int (*)(int (*)(int), int)', call_ptr)\n"
  "local cb = ffi.cast('int (*)(int)', function(x) local r = probe(x) return r end)\n"
  "local r = call(cb, 1)\n"
  "cb:free()\n"
  "local leaf = ffi.cast('int (*)(void)', leaf_ptr)\n"
  "local s = 0\n"
  "for i = 1, 1000 do s = s + leaf() end\n"
  "return r + s\n";

/* Calls the probe function on T from C, as the host's lua_pcall will. */
static int probe_from_c(lua_State *T, struct probe *p)
{
  p->cframe_before = CH_LJVM_FIELD(T, CH_LJVM_L_CFRAME, void *);
  lua_pushcfunction(T, probe_call);
  lua_pushinteger(T, 0);
  int r = lua_pcall(T, 1, 0, 0);
  if (r) lua_pop(T, 1);
  p->cframe_before = (void *)1;
  return r;
}

/* What ch_ljvm_fix_frame reads and writes: a function's ffid and its
** proto's framesize (against jit.util.funcinfo's stackslots), a thread's
** dummy_ffid, and maxstack (lua_checkstack grows the stack exactly when
** asked for the slots left below it). */
static void probe_frames(lua_State *L, struct probe *p)
{
  static const char chunk[] = "local a, b, c, d, e, f, g, h = ... return function() end";
  if (luaL_loadstring(L, chunk)) {
    lua_pop(L, 1);
    mismatch(p, "the frame probe chunk does not compile");
    return;
  }
  const char *fn = lua_topointer(L, -1);
  const char *pc = CH_LJVM_FIELD(fn, CH_LJVM_FN_PC, const char *);
  int framesize = CH_LJVM_FIELD(pc - CH_LJVM_PT_SIZE, CH_LJVM_PT_FRAMESIZE, uint8_t);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "jit.util");
  int slots = -1;
  if (!lua_pcall(L, 1, 1, 0)) {
    lua_getfield(L, -1, "funcinfo");
    lua_pushvalue(L, -3);
    if (!lua_pcall(L, 1, 1, 0)) {
      lua_getfield(L, -1, "stackslots");
      slots = (int)lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 2);
  if (CH_LJVM_FIELD(fn, CH_LJVM_FN_FFID, uint8_t) != CH_LJVM_FF_LUA)
    mismatch(p, "GCfunc.ffid (0x0a) is not FF_LUA for a Lua function");
  if (framesize != slots || slots < 8)
    mismatch(p, "GCproto.framesize (0x0b, 0x68 before pc at 0x20) is not jit.util's stackslots");
  lua_pushcfunction(L, probe_call);
  if (CH_LJVM_FIELD(lua_topointer(L, -1), CH_LJVM_FN_FFID, uint8_t) != CH_LJVM_FF_C)
    mismatch(p, "GCfunc.ffid (0x0a) is not FF_C for a C function");
  lua_pop(L, 2);
  lua_State *T = lua_newthread(L);
  if (CH_LJVM_FIELD(L, CH_LJVM_L_DUMMY_FFID, uint8_t) != CH_LJVM_FF_C ||
      CH_LJVM_FIELD(T, CH_LJVM_L_DUMMY_FFID, uint8_t) != CH_LJVM_FF_C)
    mismatch(p, "lua_State.dummy_ffid (0x0a) is not FF_C");
  char *max = CH_LJVM_FIELD(T, CH_LJVM_L_MAXSTACK, char *);
  char *top = CH_LJVM_FIELD(T, CH_LJVM_L_TOP, char *);
  char *stack = CH_LJVM_FIELD(T, CH_LJVM_L_STACK, char *);
  int left = (int)((max - top) / 8);
  /* The growth is seen in maxstack's distance from the stack, not in its
  ** address: a grown stack may be reallocated below the old one. */
  if (top <= stack || max <= top || left > 1024 ||
      !lua_checkstack(T, left - 1) || CH_LJVM_FIELD(T, CH_LJVM_L_MAXSTACK, char *) != max ||
      !lua_checkstack(T, left) ||
      CH_LJVM_FIELD(T, CH_LJVM_L_MAXSTACK, char *) - CH_LJVM_FIELD(T, CH_LJVM_L_STACK, char *) <= max - stack)
    mismatch(p, "lua_State.maxstack (0x30) is not where lua_checkstack grows the stack");
  lua_pop(L, 1);
}

static int probe_all(lua_State *L, struct probe *p)
{
  /* The wrapper: luaJIT_setmode stores it in global_State.wrapf. */
  lua_pushlightuserdata(L, (void *)(uintptr_t)ch_ljvm_wrap);
  int ok = luaJIT_setmode(L, -1, LUAJIT_MODE_WRAPCFUNC | LUAJIT_MODE_ON);
  lua_pop(L, 1);
  if (!ok) return mismatch(p, "luaJIT_setmode refused the C function wrapper");
  if (CH_LJVM_FIELD(p->g, CH_LJVM_G_WRAPF, void *) != (void *)(uintptr_t)ch_ljvm_wrap)
    return mismatch(p, "global_State.wrapf (0x158) does not hold the wrapper");

  /* C calls on the main thread and on a new thread (cur_L must follow). */
  if (probe_from_c(L, p)) return mismatch(p, "a probe C call raised an error");
  lua_State *T = lua_newthread(L);
  int r = probe_from_c(T, p);
  lua_pop(L, 1);
  if (r || p->calls != 2) return mismatch(p, "a probe C call did not run");

  probe_frames(L, p);

  /* A count hook: hookmask holds the event mask, HOOK_ACTIVE inside. */
  lua_sethook(L, probe_hook, LUA_MASKCOUNT, 1);
  if ((CH_LJVM_FIELD(p->g, CH_LJVM_G_HOOKMASK, uint8_t) & CH_LJVM_HOOK_EVENTS) != LUA_MASKCOUNT)
    mismatch(p, "global_State.hookmask (0x91) does not hold the hook mask");
  r = luaL_loadstring(L, "local x = 0 for i = 1, 3 do x = x + i end return x");
  if (!r) r = lua_pcall(L, 0, 0, 0);
  lua_sethook(L, NULL, 0, 0);
  if (r) lua_pop(L, 1);
  uint8_t hm = CH_LJVM_FIELD(p->g, CH_LJVM_G_HOOKMASK, uint8_t);
  if (hm & (CH_LJVM_HOOK_EVENTS | CH_LJVM_HOOK_ACTIVE))
    mismatch(p, "global_State.hookmask (0x91) keeps bits after the hook is removed");
  if (r || !p->hooks) mismatch(p, "the probe count hook did not run");

  /* A finalizer: HOOK_GC and HOOK_ACTIVE while it runs. */
  lua_newuserdata(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, probe_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  lua_gc(L, LUA_GCCOLLECT, 0);
  if (p->finalizers != 1) mismatch(p, "the probe finalizer did not run");

  /* A full userdata's metatable (ch_ljvm_udata_mt), with and without. */
  void *ud = lua_newuserdata(L, 24);
  if (ch_ljvm_udata_mt(ud) != NULL)
    mismatch(p, "GCudata.metatable (16 before the payload) is not NULL without one");
  lua_createtable(L, 0, 0);
  const void *mt = lua_topointer(L, -1);
  lua_setmetatable(L, -2);
  if (ch_ljvm_udata_mt(ud) != mt)
    mismatch(p, "GCudata.metatable (16 before the payload) does not hold the metatable");
  lua_pop(L, 1);

  /* Stack values read in place (ch_ljvm_udata_at), from a C call. */
  lua_pushcfunction(L, probe_values);
  ud = lua_newuserdata(L, 8);
  lua_pushlightuserdata(L, ud);
  lua_createtable(L, 0, 0);
  lua_pushnumber(L, 7);
  lua_pushliteral(L, "udata");
  if (lua_pcall(L, 5, 0, 0)) {
    lua_pop(L, 1);
    mismatch(p, "the stack value probe raised an error");
  }
  if (p->values != 1) mismatch(p, "the stack value probe did not run");

  /* Nested Lua frames, an FFI callback, a trace. */
  if (luaL_loadstring(L, probe_chunk)) return mismatch(p, "the probe chunk does not compile");
  lua_pushcfunction(L, probe_call);
  lua_pushlightuserdata(L, (void *)(uintptr_t)probe_call_back);
  lua_pushlightuserdata(L, (void *)(uintptr_t)probe_leaf);
  if (lua_pcall(L, 3, 0, 0)) {
    lua_pop(L, 1);
    return mismatch(p, "the FFI probe raised an error (is require('ffi') available?)");
  }
  if (p->cb_calls != 1) mismatch(p, "the FFI callback probe did not run");
  if (!p->interp)
    mismatch(p, "global_State.vmstate (0xb8) did not read C in an interpreted FFI call");
  return p->fail ? -1 : 0;
}

int ch_ljvm_init(lua_State *L, const char **why)
{
  struct probe p = { .L = L, .cframe_before = (void *)1 };
  int top = lua_gettop(L);
  *why = NULL;
  /* Everything is read through glref, so check it before any use: the
  ** main thread and its global_State share one allocation (GG_State), g
  ** right after L. */
  int main_thread = lua_pushthread(L);
  lua_pop(L, 1);
  if (!main_thread) {
    *why = "ch_ljvm_init wants the main lua_State";
    return -1;
  }
  uintptr_t g = (uintptr_t)gstate(L);
  if (g <= (uintptr_t)L || g - (uintptr_t)L > 256 || g % 8) {
    *why = "lua_State.glref (0x10) does not point to the global_State after the main thread";
    return -1;
  }
  p.g = (char *)g;
  probe_now = &p;
  int r = probe_all(L, &p);
  probe_now = NULL;
  lua_settop(L, top);
  /* With the JIT off no trace forms and probe_leaf checks nothing on one;
  ** the trace rule (vmstate >= 0) then never fires either. */
  if (r < 0 || p.fail) {
    *why = p.fail ? p.fail : "probe failed";
    return -1;
  }
  /* The helper thread for refusal messages, with stack to spare. */
  lua_State *H = lua_newthread(L);
  luaL_ref(L, LUA_REGISTRYINDEX);
  lua_checkstack(H, 8);
  pthread_mutex_lock(&lock);
  int i = 0;
  while (i < nhelpers && helpers[i].g != p.g) i++;
  if (i < 64) {
    helpers[i].g = p.g;
    helpers[i].H = H;
    if (i == nhelpers) nhelpers++;
  }
  pthread_mutex_unlock(&lock);
  return 0;
}
