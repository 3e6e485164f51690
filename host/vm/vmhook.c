/*
** The shared debug hook. See vmhook.h.
**
** lua_sethook is the one Lua API call meant for signal handlers (lua.c's
** SIGINT handler uses it, and LuaJIT's own luajit.c): it stores the hook
** and its mask and updates the dispatch table, pointer by pointer. Only
** the interpreter checks the hook; a JIT-compiled loop runs on until it
** leaves its trace, so a hook fires late there, never early.
*/
#include "vm/vmhook.h"

#define BITS 2

static void (*fns[BITS])(lua_State *L);

/* Per worker thread; the signal handler and the hook both run there. */
static __thread unsigned armed;          /* bits asked for, not yet run */
static __thread lua_Hook saved_hook;     /* the script's, while ours is in */
static __thread int saved_mask, saved_count;

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
  lua_sethook(L, saved_hook, saved_mask, saved_count);
  unsigned bits = __atomic_exchange_n(&armed, 0u, __ATOMIC_RELAXED);
  for (int i = 0; i < BITS; i++)
    if ((bits & (1u << i)) && fns[i]) fns[i](L);
}

void ch_vmhook_arm(lua_State *L, unsigned bit)
{
  __atomic_fetch_or(&armed, bit, __ATOMIC_RELAXED);
  /* Installed already (the script may have replaced it since: then it is
  ** installed again, and the script's saved). */
  if (lua_gethook(L) == on_hook) return;
  saved_hook = lua_gethook(L);
  saved_mask = lua_gethookmask(L);
  saved_count = lua_gethookcount(L);
  lua_sethook(L, on_hook, LUA_MASKCOUNT, 1);
}
