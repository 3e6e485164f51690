/*
** The sampling profiler. See profile.h and docs/debugging.md.
**
** Why not LuaJIT's profiler (luaJIT_profile_start): it is process-wide,
** one timer (setitimer) and one state for one VM at a time, while -w N
** runs N VMs, one per worker thread; a second VM's start stops the
** first's. Here each worker thread has its own timer on its own CPU
** clock, whose signal goes to that thread alone (SIGEV_THREAD_ID), and
** its own table: N workers are sampled at once, each only while it uses
** the CPU (a worker asleep in epoll_wait takes no samples).
**
** A sample in two steps. The signal handler runs on the worker's thread,
** on its alternate stack (it may land on a coroutine's small stack
** otherwise), and does only what is async-signal safe: it reads the
** running coroutine (a thread-local) and the interrupted program counter,
** and either puts them in a ring (no Lua task runs: the scheduler's loop,
** a coroutine running C alone) or owes a sample to the running task and
** arms the worker's debug hook (vm/vmhook.c). The hook runs at the next
** Lua instruction, at a safe point: no yield happens there (it may not
** park; nothing here tries), and the stack is walked with lua_getstack
** and lua_getinfo, which allocate nothing. If the coroutine switched
** before Lua ran again (it parked inside a binding), the samples it owed
** go to its C function alone. The ring is emptied by the hook and by a
** timer on the worker every 100 ms, in normal context, where dladdr may
** name the C function.
**
** JIT-compiled code never checks the hook: the samples owed while a
** trace runs are taken when it leaves the trace, all at once (their
** count is kept), and by then the interpreter may run in a caller (a
** side trace carried the return). So the handler also notes the trace
** that ran (the VM's state is its number), and a handler attached with
** jit.attach names each trace after the function it starts in, as it is
** recorded: the samples go to that function, where the stack at the hook
** still holds it, or on top of the stack, where it returned already. The
** start flushes the traces compiled before (as LuaJIT's own profiler
** does), so that every trace is recorded, and named, again.
*/
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <lauxlib.h>

#include "proc/profile.h"
#include "vm/inspect.h"
#include "vm/task.h"
#include "vm/vmhook.h"

#define RAW_MAX 4096        /* handler samples between two drains */
#define DRAIN_MS 100        /* how often the ring is emptied */
#define DEPTH_MAX 100       /* Lua levels kept, the innermost */
#define KEY_MAX 8192        /* a stack's text */
#define SYMS 256            /* pc -> name cache entries */

enum { RAW_LOOP, RAW_NOLUA };   /* where a handler sample was taken */

struct entry {
  char *key;                /* the folded stack; owned; NULL: free slot */
  uint64_t count;
  uint32_t hash;
};

struct prof {
  struct ch_worker *w;
  lua_State *L;             /* the worker's universe */
  timer_t timer;
  struct ch_timer drain;    /* empties the ring; weak */
  int by_route;
  volatile int on;          /* the handler takes samples */
  /* From the handler to the hook: the samples owed to the running task. */
  uint32_t owed;            /* atomic: the handler adds, the hook takes */
  struct ch_coro *owed_coro;  /* who ran at the first owed sample */
  uintptr_t owed_pc;        /* and where */
  uint64_t owed_switches;   /* the switch count then */
  int owed_trace;           /* the JIT trace it ran, -1: none */
  int attached;             /* registry ref of the jit.attach handler; 0: none */
  /* From the handler to the drain: samples with no Lua to walk. */
  struct { uintptr_t pc; uint8_t where; } raw[RAW_MAX];
  uint32_t raw_head;        /* written by the handler */
  uint32_t raw_tail;        /* read up to by the drain */
  uint64_t lost;            /* samples the full ring dropped */
  /* The table, in normal context only. */
  struct entry *tab;
  size_t cap, n;
  uint64_t samples;
  struct { uintptr_t pc; char name[80]; } syms[SYMS];
  char key[KEY_MAX];        /* scratch for one stack */
};

static __thread struct prof *me;    /* the calling worker's, while it samples */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_err;
static uintptr_t luajit_base;       /* where libluajit is loaded: its
                                    ** internal symbols are hidden, so a pc
                                    ** there names nothing dladdr knows */
static void take(lua_State *L);

/* -- The signal handler --------------------------------------------------- */

static uintptr_t pc_of(void *ucv)
{
  ucontext_t *uc = ucv;
#if defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  return (uintptr_t)uc->uc_mcontext.pc;
#else
  (void)uc;
  return 0;
#endif
}

static void raw_put(struct prof *p, uintptr_t pc, int where)
{
  uint32_t h = p->raw_head;
  if (h - __atomic_load_n(&p->raw_tail, __ATOMIC_RELAXED) >= RAW_MAX) {
    p->lost++;
    return;
  }
  p->raw[h % RAW_MAX].pc = pc;
  p->raw[h % RAW_MAX].where = (uint8_t)where;
  __atomic_signal_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&p->raw_head, h + 1, __ATOMIC_RELAXED);
}

/* CH_PROFILE_SIGNAL's handler: async-signal safe (plain loads and stores
** of this thread's own state, and ch_vmhook_arm). */
static void on_signal(int sig, siginfo_t *si, void *ucv)
{
  (void)sig;
  (void)si;
  int saved = errno;
  struct prof *p = me;
  if (!p || !p->on) goto out;
  uintptr_t pc = pc_of(ucv);
  struct ch_coro *c = ch_current();
  struct ch_task *t = c ? ch_coro_udata(c) : NULL;
  if (!t) {
    raw_put(p, pc, c ? RAW_NOLUA : RAW_LOOP);
    goto out;
  }
  uint64_t sw = ch_sched_switches(p->w->sched);
  /* Owed to another coroutine, or to this one before a switch: those
  ** samples' Lua is gone; their C function is what is known. */
  uint32_t owed = __atomic_load_n(&p->owed, __ATOMIC_RELAXED);
  if (owed && (p->owed_coro != c || p->owed_switches != sw)) {
    owed = __atomic_exchange_n(&p->owed, 0, __ATOMIC_RELAXED);
    while (owed--) raw_put(p, p->owed_pc, RAW_NOLUA);
  }
  if (__atomic_load_n(&p->owed, __ATOMIC_RELAXED) == 0) {
    p->owed_coro = c;
    p->owed_pc = pc;
    p->owed_switches = sw;
    p->owed_trace = ch_ljvm_trace_now(p->L);
  }
  __atomic_fetch_add(&p->owed, 1, __ATOMIC_RELAXED);
  ch_vmhook_arm(p->L, CH_VMHOOK_PROFILE);
out:
  errno = saved;
}

static void install(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  /* SA_ONSTACK: the signal may land on a coroutine's small stack; the
  ** scheduler gave each worker thread an alternate one (runtime/fault.c). */
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sa.sa_sigaction = on_signal;
  if (sigaction(CH_PROFILE_SIGNAL, &sa, NULL) < 0) install_err = -errno;
  Dl_info info;
  if (dladdr((void *)lua_gettop, &info)) luajit_base = (uintptr_t)info.dli_fbase;
  ch_vmhook_set(CH_VMHOOK_PROFILE, take);
}

/* -- The table ------------------------------------------------------------ */

static uint32_t hash_of(const char *s, size_t n)
{
  uint32_t h = 2166136261u;   /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

/* Adds count samples of the stack key[0..n). Memory short: they are lost. */
static void count(struct prof *p, const char *key, size_t n, uint64_t k)
{
  if (p->n * 2 >= p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    struct entry *tab = calloc(cap, sizeof *tab);
    if (!tab) { p->lost += k; return; }
    for (size_t i = 0; i < p->cap; i++) {
      if (!p->tab[i].key) continue;
      size_t j = p->tab[i].hash & (cap - 1);
      while (tab[j].key) j = (j + 1) & (cap - 1);
      tab[j] = p->tab[i];
    }
    free(p->tab);
    p->tab = tab;
    p->cap = cap;
  }
  uint32_t h = hash_of(key, n);
  size_t j = h & (p->cap - 1);
  for (; p->tab[j].key; j = (j + 1) & (p->cap - 1)) {
    if (p->tab[j].hash == h && strncmp(p->tab[j].key, key, n) == 0 && p->tab[j].key[n] == '\0') {
      p->tab[j].count += k;
      p->samples += k;
      return;
    }
  }
  char *copy = malloc(n + 1);
  if (!copy) { p->lost += k; return; }
  memcpy(copy, key, n);
  copy[n] = '\0';
  p->tab[j] = (struct entry){ copy, k, h };
  p->n++;
  p->samples += k;
}

/* -- Frames --------------------------------------------------------------- */

/* Appends frame s to the key at *len, after a ';' unless it is the
** first, with ';' and line breaks in s made harmless (';' separates
** frames); returns 0, or -1 when the key is full. */
static int put(struct prof *p, size_t *len, const char *s)
{
  if (*len) {
    if (*len >= KEY_MAX - 1) return -1;
    p->key[(*len)++] = ';';
  }
  for (; *s; s++) {
    if (*len >= KEY_MAX - 1) return -1;
    p->key[(*len)++] = *s == ';' ? ':' : (*s == '\n' || *s == '\r') ? ' ' : *s;
  }
  return 0;
}

/* The C function at pc, as "[C] name", or NULL where naming it would say
** nothing true: inside LuaJIT (the interpreter, or its built-ins, whose
** symbols are hidden) or in JIT-compiled code (no object at all). A name
** is a symbol's only if pc lies within its size; else "[C] file+0xoffset",
** for addr2line. Cached per pc. */
static const char *sym_of(struct prof *p, uintptr_t pc)
{
  unsigned slot = (unsigned)(pc >> 2) % SYMS;
  if (p->syms[slot].pc == pc) return p->syms[slot].name[0] ? p->syms[slot].name : NULL;
  p->syms[slot].pc = pc;
  char *name = p->syms[slot].name;
  name[0] = '\0';
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!pc || !dladdr1((void *)pc, &info, (void **)&sym, RTLD_DL_SYMENT) || !info.dli_fname) return NULL;
  if ((uintptr_t)info.dli_fbase == luajit_base) return NULL;
  if (info.dli_sname && sym && pc >= (uintptr_t)info.dli_saddr &&
      pc < (uintptr_t)info.dli_saddr + sym->st_size) {
    snprintf(name, sizeof p->syms[slot].name, "[C] %s", info.dli_sname);
  } else {
    const char *file = strrchr(info.dli_fname, '/');
    snprintf(name, sizeof p->syms[slot].name, "[C] %s+0x%lx", file ? file + 1 : info.dli_fname,
             (unsigned long)(pc - (uintptr_t)info.dli_fbase));
  }
  return name;
}

/* One Lua level as a frame: "name@file:line" (where the function is
** defined), "main@file" for a chunk, "name@[C]" for a C function. */
static void frame_of(lua_State *L, lua_Debug *ar, char *out, size_t n)
{
  if (!lua_getinfo(L, "Sn", ar)) {
    snprintf(out, n, "?");
    return;
  }
  const char *name = ar->name && *ar->name ? ar->name : NULL;
  if (*ar->what == 'C') snprintf(out, n, "%s@[C]", name ? name : "?");
  else if (*ar->what == 'm') snprintf(out, n, "main@%s", ar->short_src);
  else snprintf(out, n, "%s@%s:%d", name ? name : "function", ar->short_src, ar->linedefined);
}

/* Appends L's frames, the outermost first (DEPTH_MAX innermost at most).
** With jit (a frame's text, "name@file:line"), the frames stop at the
** outermost one of jit's function (the "@file:line" parts match): the
** sample was taken there, on a trace; returns 1 then, else 0; -1 when the
** key is full. */
static int put_frames(struct prof *p, size_t *len, lua_State *L, const char *jit)
{
  lua_Debug ar;
  int depth = 0, last = 0;
  while (depth < DEPTH_MAX && lua_getstack(L, depth, &ar)) depth++;
  const char *where = jit ? strchr(jit, '@') : NULL;
  if (where) {   /* the outermost level running jit's function, if any */
    last = -1;
    for (int i = depth - 1; i >= 0 && last < 0; i--) {
      char frame[LUA_IDSIZE + 96];
      if (!lua_getstack(L, i, &ar)) continue;
      frame_of(L, &ar, frame, sizeof frame);
      const char *at = strchr(frame, '@');
      if (at && strcmp(at, where) == 0) last = i;
    }
  }
  for (int i = depth - 1; i >= (last < 0 ? 0 : last); i--) {
    char frame[LUA_IDSIZE + 96];
    if (!lua_getstack(L, i, &ar)) continue;
    frame_of(L, &ar, frame, sizeof frame);
    if (put(p, len, frame) < 0) return -1;
  }
  return where && last >= 0;
}

/* -- Naming traces -------------------------------------------------------- */

/* The handler jit.attach calls as traces are recorded: names[trace] =
** "name@file:line" of the function the trace starts in, its name found
** on the stack being recorded (a function value has none of its own). */
static const char attach_src[] =
  "local names = ...\n"
  "local getinfo = debug.getinfo\n"
  "return function(what, tr, func)\n"
  "  if what == 'flush' then for k in pairs(names) do names[k] = nil end return end\n"
  "  if what ~= 'start' or type(func) ~= 'function' then return end\n"
  "  local ar = getinfo(func, 'S')\n"
  "  local name = 'function'\n"
  "  for level = 2, 40 do\n"
  "    local f = getinfo(level, 'nf')\n"
  "    if not f then break end\n"
  "    if f.func == func then name = f.name or name break end\n"
  "  end\n"
  "  names[tr] = ar.what == 'main' and 'main@' .. ar.short_src\n"
  "    or name .. '@' .. ar.short_src .. ':' .. ar.linedefined\n"
  "end\n";

static char names_key;          /* registry key of the names table */

/* Attaches the namer on w's universe and flushes the traces made before
** (recorded again, they are named). On the worker's loop; a failure
** (the memory cap) leaves traces unnamed: their samples go where the
** interpreter resumed, as without it. */
static void attach(struct prof *p)
{
  lua_State *L = p->L;
  int top = lua_gettop(L);
  lua_getglobal(L, "jit");
  if (!lua_istable(L, -1)) goto out;
  lua_pushlightuserdata(L, &names_key);
  lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_insert(L, -3);
  lua_rawset(L, LUA_REGISTRYINDEX);   /* jit, names */
  if (luaL_loadbuffer(L, attach_src, sizeof attach_src - 1, "=cohost.profile") ||
      (lua_insert(L, -2), lua_pcall(L, 1, 1, 0)))
    goto out;
  lua_pushvalue(L, -1);
  p->attached = luaL_ref(L, LUA_REGISTRYINDEX);   /* jit, handler */
  lua_getfield(L, -2, "attach");
  lua_insert(L, -2);
  lua_pushliteral(L, "trace");
  if (lua_pcall(L, 2, 0, 0)) goto out;
  lua_getfield(L, -1, "flush");
  lua_pcall(L, 0, 0, 0);
out:
  lua_settop(L, top);
}

/* Detaches the namer (jit.attach with the handler alone). */
static void detach(struct prof *p)
{
  if (!p->attached) return;
  lua_State *L = p->L;
  int top = lua_gettop(L);
  lua_getglobal(L, "jit");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "attach");
    lua_rawgeti(L, LUA_REGISTRYINDEX, p->attached);
    lua_pcall(L, 1, 0, 0);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, p->attached);
  lua_pushlightuserdata(L, &names_key);
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_settop(L, top);
  p->attached = 0;
}

/* Copies the name of trace tr into out; 0 when it has none. Reads two
** tables through L (a free slot needed), allocates nothing. */
static int trace_name(lua_State *L, int tr, char *out, size_t n)
{
  int top = lua_gettop(L), found = 0;
  lua_pushlightuserdata(L, &names_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_istable(L, -1)) {
    lua_rawgeti(L, -1, tr);
    const char *s = lua_tostring(L, -1);
    if (s) {
      snprintf(out, n, "%s", s);
      found = 1;
    }
  }
  lua_settop(L, top);
  return found;
}

/* -- Taking samples ------------------------------------------------------- */

/* Records the k samples owed to task t, taken at pc (on trace tr, or -1),
** with L's stack: L is the thread running now (in the hook) or the
** thread of the C function t parks in (at its park). */
static void take_on(struct prof *p, struct ch_task *t, lua_State *L, uint32_t k, uintptr_t pc, int tr)
{
  size_t len = 0;
  if (p->by_route) {
    const char *route = lua_checkstack(L, 2) ? ch_inspect_route(L, t) : "";
    char kind[32];
    if (!*route) snprintf(kind, sizeof kind, "[%s]", ch_task_kind_name(t->kind));
    put(p, &len, *route ? route : kind);
  }
  char jit[LUA_IDSIZE + 96];
  int on_trace = tr >= 0 && lua_checkstack(L, 3) && trace_name(L, tr, jit, sizeof jit);
  /* A Lua coroutine the task resumed runs above the task's own thread,
  ** which waits in coroutine.resume: both, the task's first. */
  if (L != t->T) put_frames(p, &len, t->T, NULL);
  int cut = put_frames(p, &len, L, on_trace ? jit : NULL);
  /* On a trace whose function returned before the hook: on top. */
  if (on_trace && !cut) put(p, &len, jit);
  const char *sym = sym_of(p, pc);
  if (sym && len) put(p, &len, sym);
  count(p, p->key, len, k);
}

/* The hook's work (vmhook.c runs it at the next Lua instruction): the
** samples owed to the running task, with its Lua stack. */
static void take(lua_State *L)
{
  struct prof *p = me;
  if (!p) return;
  struct ch_coro *c = p->owed_coro;
  uintptr_t pc = p->owed_pc;
  int tr = p->owed_trace;
  uint32_t k = __atomic_exchange_n(&p->owed, 0, __ATOMIC_RELAXED);
  if (!k) return;
  struct ch_task *t = ch_task_current();
  if (ch_current() == c && t && ch_sched_switches(p->w->sched) == p->owed_switches) {
    take_on(p, t, L, k, pc, tr);
    return;
  }
  /* It switched before Lua ran again (the park hook takes most of
  ** those): the trace's function if known, else its C function. */
  size_t len = 0;
  char jit[LUA_IDSIZE + 96];
  if (tr >= 0 && lua_checkstack(L, 3) && trace_name(L, tr, jit, sizeof jit)) put(p, &len, jit);
  else put(p, &len, "[no Lua]");
  const char *sym = sym_of(p, pc);
  if (sym) put(p, &len, sym);
  count(p, p->key, len, k);
}

/* The park hook's work (vmhook.c), while this process samples: a task
** that owes samples and parks before Lua runs again (in a binding called
** from a JIT trace, no interpreted instruction comes between) gives them
** with its stack as it parks. */
static void parked(struct ch_coro *c)
{
  struct prof *p = me;
  if (!p || p->owed_coro != c || !__atomic_load_n(&p->owed, __ATOMIC_RELAXED)) return;
  struct ch_task *t = ch_coro_udata(c);
  if (!t || ch_sched_switches(p->w->sched) != p->owed_switches) return;
  uintptr_t pc = p->owed_pc;
  int tr = p->owed_trace;
  uint32_t k = __atomic_exchange_n(&p->owed, 0, __ATOMIC_RELAXED);
  if (k) take_on(p, t, ch_ljvm_innermost(&t->vm), k, pc, tr);
}

static _Atomic int sampling;    /* workers sampling in this process */

/* Empties the ring: each handler sample as its C function. */
static void drain(struct prof *p)
{
  uint32_t head = __atomic_load_n(&p->raw_head, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_ACQUIRE);
  for (uint32_t i = p->raw_tail; i != head; i++) {
    size_t len = 0;
    put(p, &len, p->raw[i % RAW_MAX].where == RAW_LOOP ? "[scheduler]" : "[no Lua]");
    const char *sym = sym_of(p, p->raw[i % RAW_MAX].pc);
    if (sym) put(p, &len, sym);
    count(p, p->key, len, 1);
  }
  __atomic_store_n(&p->raw_tail, head, __ATOMIC_RELAXED);
}

static void on_drain(struct ch_timer *t)
{
  struct prof *p = (struct prof *)((char *)t - offsetof(struct prof, drain));
  drain(p);
  ch_timer_start(&p->drain, DRAIN_MS, on_drain);
}

/* -- Start and stop ------------------------------------------------------- */

int ch_profile_running(void)
{
  return me != NULL;
}

int ch_profile_start(struct ch_worker *w, int hz, int by_route)
{
  if (me) return -EBUSY;
  if (hz < 1 || hz > CH_PROFILE_HZ_MAX) return -EINVAL;
  pthread_once(&once, install);
  if (install_err) return install_err;
  struct prof *p = calloc(1, sizeof *p);
  if (!p) return -ENOMEM;
  p->w = w;
  p->L = w->L;
  p->by_route = by_route;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = CH_PROFILE_SIGNAL;
#ifdef sigev_notify_thread_id
  ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
#else
  ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
#endif
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &p->timer) < 0) {
    int e = -errno;
    free(p);
    return e;
  }
  long ns = 1000000000L / hz;
  struct itimerspec its = { { ns / 1000000000L, ns % 1000000000L }, { ns / 1000000000L, ns % 1000000000L } };
  me = p;
  p->on = 1;
  if (timer_settime(p->timer, 0, &its, NULL) < 0) {
    int e = -errno;
    me = NULL;
    timer_delete(p->timer);
    free(p);
    return e;
  }
  p->drain.weak = 1;   /* keeps no worker running */
  ch_timer_start(&p->drain, DRAIN_MS, on_drain);
  attach(p);
  if (atomic_fetch_add(&sampling, 1) == 0) ch_vmhook_park(CH_VMHOOK_PROFILE, parked);
  return 0;
}

int ch_profile_stop(struct ch_worker *w, struct ch_buf *out)
{
  (void)w;
  struct prof *p = me;
  if (!p) return -ESRCH;
  p->on = 0;
  timer_delete(p->timer);
  ch_timer_stop(&p->drain);
  detach(p);
  /* What a task still owes (no Lua ran on it since): its C function. */
  uint32_t owed = __atomic_exchange_n(&p->owed, 0, __ATOMIC_RELAXED);
  while (owed--) raw_put(p, p->owed_pc, RAW_NOLUA);
  drain(p);
  /* A hook still armed takes what is owed; from here it finds nobody. */
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  me = NULL;
  if (atomic_fetch_sub(&sampling, 1) == 1) ch_vmhook_park(CH_VMHOOK_PROFILE, NULL);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  int r = 0;
  for (size_t i = 0; i < p->cap && r == 0; i++) {
    if (!p->tab[i].key) continue;
    size_t n = strlen(p->tab[i].key);
    if (ch_buf_reserve(out, n + 24, 4096) < 0) r = -ENOMEM;
    else out->len += (size_t)sprintf(out->p + out->len, "%s %llu\n", p->tab[i].key,
                                     (unsigned long long)p->tab[i].count);
  }
  uint64_t samples = p->samples;
  for (size_t i = 0; i < p->cap; i++) free(p->tab[i].key);
  free(p->tab);
  free(p);
  return r < 0 ? r : (int)(samples > INT32_MAX ? INT32_MAX : samples);
}
