/*
** The shared debug hook. See vmhook.h.
**
** lua_sethook is the one Lua API call meant for signal handlers (lua.c's
** SIGINT handler uses it, and LuaJIT's own luajit.c): it stores the hook
** and its mask and updates the dispatch table, pointer by pointer. Only
** the interpreter checks the hook; a JIT-compiled loop runs on until it
** leaves its trace, so a hook fires late there, never early.
*/
#include <pthread.h>

#include "vm/vmhook.h"

#define BITS 3

static void (*fns[BITS])(lua_State *L);
static void (*park_fns[BITS])(struct ch_coro *c);   /* read by every worker */

/* Per worker thread; the signal handler and the hook both run there. */
static __thread unsigned armed;          /* bits asked for, not yet run */
static __thread lua_Hook saved_hook;     /* the script's, while ours is in */
static __thread int saved_mask, saved_count;
/* Inside lua_sethook here: it rewrites LuaJIT's dispatch table entry by
** entry, and a signal's lua_sethook in the middle would leave the table
** in the other mode than the hook mask says (a hook that never fires).
** A signal then only sets its bit, which the interrupted code runs. */
static __thread volatile int setting;

void ch_vmhook_set(unsigned bit, void (*fn)(lua_State *L))
{
  for (int i = 0; i < BITS; i++)
    if (bit == 1u << i) fns[i] = fn;
}

/* The count hook: the script's hook back first, so that a signal from
** here on installs this one again (saving the script's, which is right),
** then the armed bits, taken at once: one armed meanwhile is seen by the
** next firing. */
static void on_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  setting = 1;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  lua_sethook(L, saved_hook, saved_mask, saved_count);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  setting = 0;
  unsigned bits = __atomic_exchange_n(&armed, 0u, __ATOMIC_RELAXED);
  for (int i = 0; i < BITS; i++)
    if ((bits & (1u << i)) && fns[i]) fns[i](L);
}

static void on_park(struct ch_coro *c)
{
  for (int i = 0; i < BITS; i++) {
    void (*fn)(struct ch_coro *) = __atomic_load_n(&park_fns[i], __ATOMIC_RELAXED);
    if (fn) fn(c);
  }
}

void ch_vmhook_park(unsigned bit, void (*fn)(struct ch_coro *c))
{
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  int any = 0;
  for (int i = 0; i < BITS; i++) {
    if (bit == 1u << i) __atomic_store_n(&park_fns[i], fn, __ATOMIC_RELAXED);
    any |= park_fns[i] != NULL;
  }
  /* A worker may still run the old hook once: both stay valid. */
  ch_set_park_hook(any ? on_park : NULL);
  pthread_mutex_unlock(&lock);
}

void ch_vmhook_arm(lua_State *L, unsigned bit)
{
  __atomic_fetch_or(&armed, bit, __ATOMIC_RELAXED);
  /* Installed already (the script may have replaced it since: then it is
  ** installed again, and the script's saved), or being set by the code
  ** this signal interrupted, which takes the bit. */
  if (setting || lua_gethook(L) == on_hook) return;
  setting = 1;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  saved_hook = lua_gethook(L);
  saved_mask = lua_gethookmask(L);
  saved_count = lua_gethookcount(L);
  lua_sethook(L, on_hook, LUA_MASKCOUNT, 1);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  setting = 0;
}
