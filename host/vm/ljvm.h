/*
** What the host needs from LuaJIT's internals: the offsets of this LuaJIT
** build (verified at start-up), the "inside a classic C function" marker,
** the decision whether a hook may park the running coroutine, and the
** frame fix-up that lets the Lua heap cap refuse an allocation safely.
**
** A hook may park a coroutine only while the VM is running a classic
** lua_CFunction (cohost's own bindings, C modules such as LuaSocket):
** never inside an FFI call (interpreted or on a JIT trace), an FFI
** callback, a __gc finalizer or a debug hook. Elsewhere it blocks like libc.
*/
#ifndef CH_LJVM_H
#define CH_LJVM_H

#include <stdint.h>

#include <lua.h>

struct ch_coro;
struct ch_ljvm_mark;   /* one per active classic C call, on its C frame */

/* Why ch_ljvm_may_park said no: struct ch_ljvm_coro.refused. */
enum ch_ljvm_why {
  CH_LJVM_OK,          /* it said yes */
  CH_LJVM_NOT_CFUNC,   /* no classic C function on top: an FFI call or built-in */
  CH_LJVM_TRACE,       /* on a JIT trace: an FFI call from compiled code */
  CH_LJVM_BUSY,        /* the VM is in the GC, the recorder or a trace exit */
  CH_LJVM_GC,          /* inside a __gc finalizer */
  CH_LJVM_HOOK,        /* inside a debug hook or jit.attach handler */
  CH_LJVM_CALLBACK,    /* an FFI callback is below */
  CH_LJVM_STACK        /* Lua frames not understood, or over 8 threads deep */
};

/* Per-coroutine state. The host embeds it as the FIRST member of the
** struct it hands to ch_coro_set_udata, so ch_coro_udata(c) points to it. */
struct ch_ljvm_coro {
  lua_State *L;                /* the coroutine's own Lua thread; owner: host */
  struct ch_ljvm_mark *top;    /* innermost classic C call or NULL; owner: ljvm */
  int refused;                 /* enum ch_ljvm_why of the last decision; owner: ljvm */
  int trace;                   /* vmstate at a TRACE or BUSY refusal */
  const char *name;            /* for logs ("handler", "main"); owner: task.c */
  /* The two flags share the last word (40 bytes, not 48: a parked
  ** connection's task record is one malloc size class smaller). */
  uint8_t in_pcall;            /* inside the task's own lua_pcall: the only
                               ** place the Lua memory cap may refuse
                               ** (lua_alloc.c); owner: task.c */
  uint8_t overflowed;          /* a "C stack overflow" error is on its way:
                               ** its handlers get half the margin more;
                               ** owner: ljvm */
};

/* C stack kept free below a classic C function's call, bytes: a quarter
** of the stack, at most CH_LJVM_STACK_MARGIN and at least
** CH_LJVM_STACK_MARGIN_MIN. A call with less left raises "C stack
** overflow" instead (see ch_ljvm_wrap). The floor covers, twice (the
** handlers that run while that error is raised may go down to half the
** margin, and raise it again there), the deepest step between two checks
** (a gsub callback level: 8,976 bytes, LuaJIT's gsub frame 8.8 KB of
** it) and the error's own path at that depth: the unwinder, the task's
** message handler with its traceback and log line, about 3.5 KiB since
** the log's buffers left the stack (host/log.c). A quarter of a 96 KiB
** stack, the margin before, left the handler 12 KiB, less than that path
** took then: the guard ended the process. */
#define CH_LJVM_STACK_MARGIN (64 * 1024)
#define CH_LJVM_STACK_MARGIN_MIN (32 * 1024)

/* The smallest coroutine stack the host runs Lua on (cohost --stack-size
** refuses less): the margin's floor and 16 KiB for the frames of a
** handler and its callers (a request's handler makes its first C call
** about 1.2 KiB down). */
#define CH_LJVM_STACK_MIN (48 * 1024)

/* Checks that this LuaJIT build has the layout the host was written for,
** by probing L (hooks, C calls, a thread, a finalizer, an FFI callback and
** a JIT trace), then turns the wrapper on for every classic C function of
** L's universe. Call once per lua_State universe, after luaL_openlibs (it
** needs require "ffi"). Returns 0, or -1 with *why saying what did not
** match: the host must refuse to start then. */
int ch_ljvm_init(lua_State *L, const char **why);

/* Offsets and values of this LuaJIT build that the inline readers below
** use (GC64: a value is a 17-bit type tag above a 47-bit pointer). All
** probed by ch_ljvm_init, with the rest of its layout in ljvm.c. */
#define CH_LJVM_L_BASE       0x20      /* lua_State.base: stack index 1 */
#define CH_LJVM_L_TOP        0x28      /* lua_State.top: first free slot */
#define CH_LJVM_TAG_SHIFT    47
#define CH_LJVM_PTR_MASK     ((UINT64_C(1) << 47) - 1)
#define CH_LJVM_TUDATA       UINT64_C(0x1fff3)   /* ~LJ_TUDATA, 17 bits */
#define CH_LJVM_UD_SIZE      48        /* sizeof(GCudata): header to payload */

/* The slot of stack index idx of L's running C function, or NULL when idx
** is not in [1, top): index2adr for positive indices, in two loads. */
static inline const uint64_t *ch_ljvm_slot_at(lua_State *L, int idx)
{
  const uint64_t *base = *(const uint64_t *const *)((const char *)L + CH_LJVM_L_BASE);
  const uint64_t *top = *(const uint64_t *const *)((const char *)L + CH_LJVM_L_TOP);
  return idx >= 1 && idx <= top - base ? base + idx - 1 : NULL;
}

/* The payload of the full userdata at stack index idx (>= 1) of L, as
** lua_touserdata gives it, or NULL when that value is anything else or
** absent: lua_type and lua_touserdata in a few loads (each costs an
** index2adr call, docs/benchmarks.md; a cosocket method checks its self
** on every call). */
static inline void *ch_ljvm_udata_at(lua_State *L, int idx)
{
  const uint64_t *tv = ch_ljvm_slot_at(L, idx);
  if (!tv || *tv >> CH_LJVM_TAG_SHIFT != CH_LJVM_TUDATA) return NULL;
  return (char *)(uintptr_t)(*tv & CH_LJVM_PTR_MASK) + CH_LJVM_UD_SIZE;
}

#define CH_LJVM_TSTR         UINT64_C(0x1fffb)   /* ~LJ_TSTR */
#define CH_LJVM_STR_LEN      20        /* GCstr.len, uint32_t */
#define CH_LJVM_STR_SIZE     24        /* sizeof(GCstr): header to bytes */

/* The bytes and length of the string at stack index idx (>= 1) of L, or
** NULL when that value is no string (a number is not converted, unlike
** lua_tolstring: ask it then). */
static inline const char *ch_ljvm_string_at(lua_State *L, int idx, size_t *len)
{
  const uint64_t *tv = ch_ljvm_slot_at(L, idx);
  if (!tv || *tv >> CH_LJVM_TAG_SHIFT != CH_LJVM_TSTR) return NULL;
  const char *str = (const char *)(uintptr_t)(*tv & CH_LJVM_PTR_MASK);
  *len = *(const uint32_t *)(str + CH_LJVM_STR_LEN);
  return str + CH_LJVM_STR_SIZE;
}

/* Where a full userdata's metatable pointer lies, in bytes before its
** payload (what lua_touserdata returns): GCudata.metatable of this LuaJIT
** build (GC64: the header is 48 bytes, the metatable at 32). Probed by
** ch_ljvm_init. */
#define CH_LJVM_UD_MT_BEFORE 16

/* The metatable of the full userdata whose payload is p, as lua_topointer
** gives it (NULL: none). p must come from lua_touserdata on a value of
** type LUA_TUSERDATA. A type check at a fraction of lua_getmetatable's
** cost, and far below luaL_checkudata's name lookup: a pointer comparison
** after this load (docs/benchmarks.md). */
static inline const void *ch_ljvm_udata_mt(const void *p)
{
  return *(const void *const *)((const char *)p - CH_LJVM_UD_MT_BEFORE);
}

/* Readies L's universe for an out-of-memory error that its allocator is
** about to cause (lua_alloc.c calls it just before it refuses a growth).
** This LuaJIT's lj_err_mem puts the error message just above the frame
** at the running thread's lua_State.base, base + framesize, and two cases
** make that a write to the wrong place, which crashed the process:
**   - on a JIT trace, lua_State.base is stale (the trace keeps its base in
**     a register and in global_State.jit_base): the frame there may be
**     gone, its function slot holding a number by now. The trace's base
**     is stored instead.
**   - a function entry that grows the stack (its frame is not on the
**     stack yet): base + framesize lies past the end of the stack block.
**     The frame's function is replaced by the thread itself, a dummy
**     frame that is no Lua function, so the message goes to base (where
**     the call's arguments are) and the frame unwinds like any other.
** Both are what LuaJIT does in lj_err_mem itself from June 2023 ("Fix
** frame for on-trace out-of-memory error") and February 2024 ("Rework
** stack overflow handling"); Debian's 2.1-20230119 predates them. Changes
** nothing in any other state (the interpreter and the exit handler store
** the base before they call C; a frame being run is on the stack).
** Only on L's own worker thread; allocates nothing. */
void ch_ljvm_fix_frame(lua_State *L);

/* Clears v for a coroutine about to run Lua thread L. */
void ch_ljvm_coro_init(struct ch_ljvm_coro *v, lua_State *L);

/* The C function wrapper (LUAJIT_MODE_WRAPCFUNC) installed by ch_ljvm_init:
** marks the running coroutine "inside classic C function f" while f runs,
** error unwinding included, after checking that the coroutine has
** CH_LJVM_STACK_MARGIN of C stack left: with less it raises "C stack
** overflow" (LuaJIT 2.1 has no C-call depth limit of its own, and Lua
** recursion through C would hit the stack guard, which ends the process).
** While that error is raised, its handlers may go on down to half the
** margin. It runs for every classic C call (its cost:
** docs/benchmarks.md). Public only so that ch_ljvm_init and tests can
** name it. */
int ch_ljvm_wrap(lua_State *L, lua_CFunction f);

/* The same check for Lua code (host/vm/cstack.c calls it through the FFI,
** which the JIT compiles to a plain call): non-zero when the running task
** is to raise "C stack overflow" now. Does not yield, allocates nothing;
** 0 outside a task. Exported (cohost links with -rdynamic) for ffi.C. */
int ch_ljvm_stack_low(void);

/* Bytes of C stack left to the running task (SIZE_MAX outside a task), for
** Lua code that calls C which recurses on its own (cjson, ~90 bytes a
** nesting level) and bounds that recursion to fit. Does not yield;
** exported for ffi.C. */
size_t ch_ljvm_stack_left(void);

/* The yield check (ch_set_yield_check): non-zero when c may park here,
** i.e. c runs no Lua at all, or its innermost marked classic C function
** is the top frame, the VM is in C and not on a trace, in no finalizer or
** hook, and no FFI callback is below. Costs a walk of the Lua frames
** when it says yes, less when a finalizer or hook makes it say no at once
** (docs/benchmarks.md). */
int ch_ljvm_may_park(struct ch_coro *c);

/* After ch_ljvm_may_park(c) said no: a one-line reason naming the Lua call
** site ("inside a __gc finalizer at app.lua:12"), or NULL when that reason
** and site were reported before in this process (so hosts log it once).
** Reads the Lua stack, allocates nothing. The text stays valid until the
** next call on this thread. */
const char *ch_ljvm_refusal(struct ch_coro *c);

/* The Lua thread a task runs on now, for a traceback: the thread of its
** innermost classic C call (a Lua coroutine it resumed, parked inside a
** binding), else its own v->L. The marks lie on the coroutine's C stack:
** ask only while that stack is in place (the coroutine runs, or in COPY
** mode its frames are not saved away: ch_coro_saved_bytes is 0). */
lua_State *ch_ljvm_innermost(const struct ch_ljvm_coro *v);

/* Pushes onto L a copy of the value at stack index idx (>= 1) of T's
** bottom level, the one below T's first call (what a host pushed before
** lua_pcall: lib_http.c keeps res at 1 there), and returns 1; or pushes
** nil and returns 0 when T's stack does not reach that far. L and T are
** of one universe; T may be parked (read on its own thread). L must have
** a free slot: the push allocates nothing. */
int ch_ljvm_push_bottom(lua_State *L, lua_State *T, int idx);

/* The number of the JIT trace L's universe runs now, or -1 when it runs
** none (the interpreter, C, the GC). Two loads; async-signal safe (the
** profiler's signal handler asks). */
int ch_ljvm_trace_now(lua_State *L);

/* The resume hook (ch_set_resume_hook): makes LuaJIT's current-thread
** pointer name the Lua thread c was running when it parked. One store,
** where re-entering the VM with a lua_call would cost many times more
** (docs/benchmarks.md). */
void ch_ljvm_resumed(struct ch_coro *c);

#endif
