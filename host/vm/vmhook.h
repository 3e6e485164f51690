/*
** The one debug hook a signal handler may ask of a worker's Lua. LuaJIT
** keeps one hook per universe (each worker has its own), and both the CPU
** watchdog and the sampling profiler need one at a safe point: between
** two Lua instructions of whatever runs there. Each gets a bit; a signal
** handler arms its bit, which installs the shared count hook (saving
** whatever hook the script had set), and at the next interpreted
** instruction the hook puts the script's hook back and runs each armed
** bit's function. Two modules saving and restoring each other's hooks
** could leave a stale one armed for good; one owner cannot.
**
** The same for the runtime's one park hook (ch_set_park_hook), which the
** slow-request measure and the profiler share: installed while either
** needs it, and only then, since every park of every coroutine runs it.
*/
#ifndef CH_VMHOOK_H
#define CH_VMHOOK_H

#include <lua.h>

#include "cohost.h"

enum { CH_VMHOOK_PROFILE = 1, CH_VMHOOK_WATCHDOG = 2, CH_VMHOOK_ACCT = 4 };

/* Sets what bit's arming runs: fn(L) on the Lua thread running when the
** hook fires. Runs between two instructions, must not yield; it may
** raise (lua_error) only as the last function run, which is the
** watchdog's (its bit is the highest). Call at start, before any signal. */
void ch_vmhook_set(unsigned bit, void (*fn)(lua_State *L));

/* Arms bit on L's universe. Async-signal safe, and for the calling
** thread's own universe only (its worker's): the state it keeps is the
** thread's. Several armings before the hook fires run its function once. */
void ch_vmhook_arm(lua_State *L, unsigned bit);

/* Sets (or with NULL clears) what bit's owner runs at every park, on the
** parking coroutine (ch_set_park_hook's rules): the runtime's park hook
** is this file's while any bit has one, else none. Any thread. */
void ch_vmhook_park(unsigned bit, void (*fn)(struct ch_coro *c));

#endif
