/* The host's C modules, preloaded by main.c as cohost.core.<mod>. Each is
** internal: the Lua modules under lua/cohost/ are the documented face. */
#ifndef CH_LIB_H
#define CH_LIB_H

#include <lua.h>

int luaopen_cohost_core_task(lua_State *L);     /* lib_task.c */
int luaopen_cohost_core_sys(lua_State *L);      /* lib_sys.c */
int luaopen_cohost_core_socket(lua_State *L);   /* lib_socket.c */
int luaopen_cohost_core_udp(lua_State *L);      /* lib_udp.c */
int luaopen_cohost_core_listen(lua_State *L);   /* lib_listen.c */
int luaopen_cohost_core_crypto(lua_State *L);   /* lib_crypto.c */
int luaopen_cohost_core_http(lua_State *L);     /* lib_http.c */
int luaopen_cohost_core_re(lua_State *L);       /* lib_re.c */
int luaopen_cohost_core_file(lua_State *L);     /* lib_file.c */
int luaopen_cohost_core_shdict(lua_State *L);   /* lib_shdict.c */

#endif
