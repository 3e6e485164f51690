/* The host's C modules, preloaded by main.c as cohost.core.<mod>. Each is
** internal: the Lua modules under lua/cohost/ are the documented face. */
#ifndef CH_LIB_H
#define CH_LIB_H

#include <stdint.h>

#include <lua.h>

#include "log.h"

int luaopen_cohost_core_task(lua_State *L);     /* lib_task.c */
int luaopen_cohost_core_sys(lua_State *L);      /* lib_sys.c */
int luaopen_cohost_core_socket(lua_State *L);   /* lib_socket.c */
int luaopen_cohost_core_udp(lua_State *L);      /* lib_udp.c */
int luaopen_cohost_core_listen(lua_State *L);   /* lib_listen.c */
int luaopen_cohost_core_ssl(lua_State *L);      /* lib_ssl.c */
int luaopen_cohost_core_crypto(lua_State *L);   /* lib_crypto.c */
int luaopen_cohost_core_http(lua_State *L);     /* lib_http.c */
int luaopen_cohost_core_h2client(lua_State *L); /* lib_h2client.c */
int luaopen_cohost_core_re(lua_State *L);       /* lib_re.c */
int luaopen_cohost_core_file(lua_State *L);     /* lib_file.c */
int luaopen_cohost_core_shdict(lua_State *L);   /* lib_shdict.c */
int luaopen_cohost_core_bus(lua_State *L);      /* lib_bus.c */
int luaopen_cohost_core_metrics(lua_State *L);  /* lib_metrics.c */
int luaopen_cohost_core_postgres(lua_State *L); /* lib_postgres.c */
int luaopen_cohost_core_debug(lua_State *L);    /* lib_debug.c */

struct ch_worker;

/* The drain hook (ch_workers_set_drain_hook): runs cohost.drain's entry
** point for phase (CH_DRAIN_*) on a coroutine of its own, if w's Lua
** loaded it. lib_sys.c. */
void ch_sys_drain(struct ch_worker *w, int phase);

/* -- What the bindings share --------------------------------------------- */

/* Pushes nil, msg: a call that failed the way OpenResty's fail. Returns 2. */
static inline int ch_lib_fail(lua_State *L, const char *msg)
{
  lua_pushnil(L);
  lua_pushstring(L, msg);
  return 2;
}

/* Pushes nil and OpenResty's word for errno err, lower case as LuaSocket
** has it ("connection refused"). Returns 2. */
static inline int ch_lib_fail_errno(lua_State *L, int err)
{
  const char *s = ch_errstr(err);
  char buf[128];
  size_t i;
  for (i = 0; s[i] && i < sizeof buf - 1; i++)
    buf[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
  lua_pushnil(L);
  lua_pushlstring(L, buf, i);
  return 2;
}

/* Busy flags live while an operation may wait. The cleanup clears them
** however the function is left, including a "cancelled" error raised
** after a wait and unwound through the frame (with -fexceptions). */
static inline void ch_lib_unbusy(uint8_t **flag)
{
  **flag = 0;
}

#define CH_LIB_BUSY(flagp) \
  uint8_t *busy_ __attribute__((cleanup(ch_lib_unbusy))) = (flagp); *busy_ = 1

#endif
