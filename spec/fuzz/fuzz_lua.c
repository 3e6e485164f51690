/*
** libFuzzer harness for parsers written in Lua: embeds LuaJIT (no cohost
** runtime), loads the driver FUZZ_DRIVER (a Lua file that returns a
** function) and calls it with each input under pcall. Built once per
** driver by scripts/fuzz.sh:
**   build/fuzz/fuzz_ws_frame   spec/fuzz/fuzz_ws_frame.lua (cohost.websocket)
**   build/fuzz/fuzz_resp       spec/fuzz/fuzz_resp.lua (examples/kv/resp.lua)
**
** A driver checks its own invariants and raises "invariant failed: ..."
** when one breaks; any other Lua error (one raised by the module under
** test) is a finding too. Both print the message with a traceback and
** abort(), which libFuzzer reports as a crash with its input.
**
** Coverage: libFuzzer instruments only C, and the interpreter is Debian's
** uninstrumented libluajit, so without help it would see one path for
** every input. A line hook maps each (previous line, line) pair of the
** Lua files under test (FUZZ_ROOT/lua/ and FUZZ_ROOT/examples/) to a
** byte of __libfuzzer_extra_counters, AFL-style edges, which libFuzzer
** reads as coverage. Hooks only fire in the interpreter, so the JIT is
** off (FUZZ_JIT=1 turns it on and the hook off: the compiled paths get
** exercised, blind).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>
#include <luajit.h>

#ifndef FUZZ_DRIVER
#error "FUZZ_DRIVER: the driver's path, e.g. -DFUZZ_DRIVER='\"spec/fuzz/fuzz_resp.lua\"'"
#endif
#ifndef FUZZ_ROOT
#error "FUZZ_ROOT: the repository's absolute path"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 64 KiB of edge counters: the modules under test have a few thousand
** lines, so collisions are rare. */
#define COV_SIZE (1u << 16)
__attribute__((used, section("__libfuzzer_extra_counters")))
static uint8_t cov[COV_SIZE];

static lua_State *L;
static int driver_ref;             /* registry ref of the driver function */
static uint32_t prev_loc;          /* previous line's hash, per input */
static const char *last_src;       /* cache: the last chunk name seen */
static uint32_t last_hash;         /* its hash, 0 when not under test */

/* FNV-1a of a chunk name, or 0 when the chunk is not under test (the
** driver's own lines would only add noise). */
static uint32_t src_hash(const char *src)
{
  static const char *roots[] = { "@" FUZZ_ROOT "/lua/", "@" FUZZ_ROOT "/examples/" };
  int ok = 0;
  for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++)
    if (strncmp(src, roots[i], strlen(roots[i])) == 0) ok = 1;
  if (!ok) return 0;
  uint32_t h = 2166136261u;
  for (const char *p = src; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return h | 1;
}

static void line_hook(lua_State *l, lua_Debug *ar)
{
  if (!lua_getinfo(l, "S", ar)) return;
  /* Chunk names are interned strings, so the pointer identifies one for
  ** as long as its function lives: the cache is hit on almost every line. */
  if (ar->source != last_src) {
    last_src = ar->source;
    last_hash = src_hash(ar->source);
  }
  if (!last_hash) return;
  uint32_t loc = (last_hash ^ ((uint32_t)ar->currentline * 2654435761u)) & (COV_SIZE - 1);
  uint8_t *c = &cov[(loc ^ prev_loc) & (COV_SIZE - 1)];
  if (*c < 255) (*c)++;
  prev_loc = loc >> 1;
}

static int traceback(lua_State *l)
{
  const char *msg = lua_tostring(l, 1);
  luaL_traceback(l, l, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc; (void)argv;
  L = luaL_newstate();
  if (!L) abort();
  luaL_openlibs(L);
  const char *jit = getenv("FUZZ_JIT");
  int use_jit = jit && strcmp(jit, "1") == 0;
  if (!use_jit) luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
  /* The modules resolve against the tree the harness was built from. */
  lua_getglobal(L, "package");
  lua_pushstring(L, FUZZ_ROOT "/lua/?.lua;" FUZZ_ROOT "/lua/?/init.lua;"
                    FUZZ_ROOT "/examples/?.lua;" FUZZ_ROOT "/?.lua");
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  lua_pushcfunction(L, traceback);
  if (luaL_loadfile(L, FUZZ_ROOT "/" FUZZ_DRIVER) || lua_pcall(L, 0, 1, -2)) {
    fprintf(stderr, "fuzz_lua: loading %s: %s\n", FUZZ_DRIVER, lua_tostring(L, -1));
    abort();
  }
  if (!lua_isfunction(L, -1)) {
    fprintf(stderr, "fuzz_lua: %s must return a function\n", FUZZ_DRIVER);
    abort();
  }
  driver_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);
  if (!use_jit) lua_sethook(L, line_hook, LUA_MASKLINE, 0);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static unsigned runs;
  prev_loc = 0;
  lua_pushcfunction(L, traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, driver_ref);
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, -3)) {
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = "(error object is not a string)";
    /* The driver's own checks say "invariant failed"; anything else was
    ** raised by the code under test. */
    if (strstr(msg, "invariant failed: "))
      fprintf(stderr, "fuzz_lua: %s\n", msg);
    else
      fprintf(stderr, "fuzz_lua: lua error: %s\n", msg);
    abort();
  }
  lua_pop(L, 1);
  /* A full collection now and then keeps the heap from growing between
  ** incremental steps; the cost is spread over 256 inputs. */
  if (++runs % 256 == 0) lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}
