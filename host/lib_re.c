/*
** cohost.core.re: PCRE2 (Debian libpcre2-8) for ngx.re, plus the few C
** helpers cohost.ngx needs (CRC-32, a quiet end of the running task, the
** process id). Internal: lua/cohost/ngx.lua is the face.
**
** A compiled regex is a userdata owning its pcre2_code and one match data
** block; exec fills that block and the accessors (group, captures, subst)
** read it, so the caller takes what it needs before running any Lua code
** that could exec the same regex again. Nothing here yields, and no Lua
** code runs between an allocation and its release.
*/
#define PCRE2_CODE_UNIT_WIDTH 8

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <pcre2.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "lib.h"

#define REGEX_MT "cohost.regex"

struct regex {
  pcre2_code *code;               /* NULL once collected */
  pcre2_match_data *md;           /* ovector of the last exec */
  uint32_t ncap;                  /* capture groups, not counting group 0 */
  int utf;                        /* compiled with PCRE2_UTF ('u' or 'U') */
  int nocheck;                    /* 'U': the caller vouches for UTF-8 */
  int matched;                    /* the last exec matched: md is valid */
};

/* One JIT stack and match context per worker thread, grown past PCRE2's
** 32 KiB default (which lives on the machine stack, here a coroutine's)
** so deep JIT backtracking fails late and off the coroutine stack. */
static __thread pcre2_match_context *mctx;
static __thread pcre2_jit_stack *jstack;

static pcre2_match_context *match_context(void)
{
  if (!mctx) {
    mctx = pcre2_match_context_create(NULL);
    if (!mctx) return NULL;
    jstack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);   /* 1 MiB at most */
    if (jstack) pcre2_jit_stack_assign(mctx, NULL, jstack);
  }
  return mctx;
}

static struct regex *check_regex(lua_State *L, int i)
{
  struct regex *rx = luaL_checkudata(L, i, REGEX_MT);
  if (!rx->code) luaL_error(L, "regex already freed");
  return rx;
}

/* -- Compiling ------------------------------------------------------------- */

/* compile(pattern, flags) -> rx | nil, err. flags are ngx.re's letters;
** the Lua side has already refused unknown ones, and handles 'o' (cache)
** itself. 'j' asks for the JIT, which is skipped quietly where PCRE2 has
** none, as OpenResty does. */
static int re_compile(lua_State *L)
{
  size_t plen, flen;
  const char *pat = luaL_checklstring(L, 1, &plen);
  const char *flags = luaL_optlstring(L, 2, "", &flen);
  uint32_t opts = 0;
  int jit = 0, nocheck = 0;
  for (size_t i = 0; i < flen; i++) {
    switch (flags[i]) {
    case 'i': opts |= PCRE2_CASELESS; break;
    case 'm': opts |= PCRE2_MULTILINE; break;
    case 's': opts |= PCRE2_DOTALL; break;
    case 'x': opts |= PCRE2_EXTENDED; break;
    case 'a': opts |= PCRE2_ANCHORED; break;
    case 'u': opts |= PCRE2_UTF; break;
    case 'U': opts |= PCRE2_UTF; nocheck = 1; break;
    case 'D': opts |= PCRE2_DUPNAMES; break;
    case 'J': opts |= PCRE2_ALT_BSUX | PCRE2_MATCH_UNSET_BACKREF; break;
    case 'j': jit = 1; break;
    case 'o': break;
    default: return luaL_argerror(L, 2, "unknown flag");
    }
  }
  int errcode;
  PCRE2_SIZE erroff;
  pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, plen, opts, &errcode, &erroff, NULL);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(errcode, msg, sizeof msg);
    lua_pushnil(L);
    lua_pushfstring(L, "pcre2_compile() failed: %s in \"%s\"", (const char *)msg, pat);
    return 2;
  }
  if (jit) pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);   /* an error leaves the interpreter */
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
  if (!md) {
    pcre2_code_free(code);
    return luaL_error(L, "no memory");
  }
  struct regex *rx = lua_newuserdata(L, sizeof *rx);
  memset(rx, 0, sizeof *rx);
  rx->code = code;
  rx->md = md;
  rx->utf = (opts & PCRE2_UTF) != 0;
  rx->nocheck = nocheck;
  pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &rx->ncap);
  luaL_getmetatable(L, REGEX_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static int re_gc(lua_State *L)
{
  struct regex *rx = luaL_checkudata(L, 1, REGEX_MT);
  if (rx->md) pcre2_match_data_free(rx->md);
  if (rx->code) pcre2_code_free(rx->code);
  rx->md = NULL;
  rx->code = NULL;
  return 0;
}

/* rx:ncaptures() -> capture groups, not counting the whole match. */
static int re_ncaptures(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)check_regex(L, 1)->ncap);
  return 1;
}

/* rx:names() -> array of {name, group} in PCRE2's name-table order (by
** name, then group number for duplicate names), or nil if none. */
static int re_names(lua_State *L)
{
  struct regex *rx = check_regex(L, 1);
  uint32_t count, size;
  PCRE2_SPTR table;
  pcre2_pattern_info(rx->code, PCRE2_INFO_NAMECOUNT, &count);
  if (count == 0) return 0;
  pcre2_pattern_info(rx->code, PCRE2_INFO_NAMEENTRYSIZE, &size);
  pcre2_pattern_info(rx->code, PCRE2_INFO_NAMETABLE, &table);
  lua_createtable(L, (int)count, 0);
  for (uint32_t i = 0; i < count; i++) {
    PCRE2_SPTR e = table + i * size;   /* 2 bytes of group number, then the name */
    lua_createtable(L, 2, 0);
    lua_pushstring(L, (const char *)e + 2);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, (e[0] << 8) | e[1]);
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* -- Matching -------------------------------------------------------------- */

/* Runs rx on s from byte offset pos; PCRE2's result code. checked: the
** subject's UTF-8 was validated by an earlier exec on the same string. */
static int exec(struct regex *rx, const char *s, size_t n, size_t pos, int checked)
{
  uint32_t opts = 0;
  if (rx->utf && (rx->nocheck || checked)) opts |= PCRE2_NO_UTF_CHECK;
  int rc = pcre2_match(rx->code, (PCRE2_SPTR)s, n, pos, opts, rx->md, match_context());
  rx->matched = rc > 0;
  return rc;
}

/* rx:exec(subject, pos [, checked]) -> from, to (0-based, to exclusive) of
** the whole match, or nil for no match, or false, code for a PCRE2 error
** (a bad UTF-8 subject, a match limit). pos is a 0-based byte offset. */
static int re_exec(lua_State *L)
{
  struct regex *rx = check_regex(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  lua_Integer pos = luaL_optinteger(L, 3, 0);
  int checked = lua_toboolean(L, 4);
  if (pos < 0 || (size_t)pos > n) {
    rx->matched = 0;
    lua_pushnil(L);
    return 1;
  }
  int rc = exec(rx, s, n, (size_t)pos, checked);
  if (rc == PCRE2_ERROR_NOMATCH) {
    lua_pushnil(L);
    return 1;
  }
  if (rc < 0) {
    lua_pushboolean(L, 0);
    lua_pushinteger(L, rc);
    return 2;
  }
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
  lua_pushinteger(L, (lua_Integer)ov[0]);
  lua_pushinteger(L, (lua_Integer)ov[1]);
  return 2;
}

/* rx:group(n) -> from, to (0-based, exclusive) of group n in the last
** match, or nil if it did not take part. */
static int re_group(lua_State *L)
{
  struct regex *rx = check_regex(L, 1);
  lua_Integer g = luaL_checkinteger(L, 2);
  if (!rx->matched || g < 0 || (uint32_t)g > rx->ncap) return 0;
  uint32_t pairs = pcre2_get_ovector_count(rx->md);
  if ((uint32_t)g >= pairs) return 0;
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
  if (ov[2 * g] == PCRE2_UNSET) return 0;
  lua_pushinteger(L, (lua_Integer)ov[2 * g]);
  lua_pushinteger(L, (lua_Integer)ov[2 * g + 1]);
  return 2;
}

/* Pushes group g of the last match of rx on s, or false if unset. */
static void push_group(lua_State *L, struct regex *rx, const char *s, uint32_t g)
{
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
  if (g < pcre2_get_ovector_count(rx->md) && ov[2 * g] != PCRE2_UNSET)
    lua_pushlstring(L, s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
  else
    lua_pushboolean(L, 0);
}

/* rx:captures(subject, res, dupnames) -> res: res[0] the whole match,
** res[i] group i (false when unset), res[name] for named groups (with
** dupnames, an array of the set groups of that name, or absent if none).
** The table ngx.re.match returns; subject must be the string of the last
** exec. */
static int re_captures(lua_State *L)
{
  struct regex *rx = check_regex(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  int dup = lua_toboolean(L, 4);
  if (!rx->matched) return luaL_error(L, "no match to take captures from");
  if (lua_istable(L, 3)) lua_settop(L, 3);
  else {
    lua_settop(L, 2);
    lua_createtable(L, (int)rx->ncap, 0);
  }
  for (uint32_t g = 0; g <= rx->ncap; g++) {
    push_group(L, rx, s, g);
    lua_rawseti(L, 3, (int)g);
  }
  uint32_t count, size;
  PCRE2_SPTR table;
  pcre2_pattern_info(rx->code, PCRE2_INFO_NAMECOUNT, &count);
  if (count == 0) return 1;
  pcre2_pattern_info(rx->code, PCRE2_INFO_NAMEENTRYSIZE, &size);
  pcre2_pattern_info(rx->code, PCRE2_INFO_NAMETABLE, &table);
  for (uint32_t i = 0; i < count; i++) {
    PCRE2_SPTR e = table + i * size;
    uint32_t g = (uint32_t)((e[0] << 8) | e[1]);
    const char *name = (const char *)e + 2;
    if (!dup) {
      push_group(L, rx, s, g);
      lua_setfield(L, 3, name);
      continue;
    }
    push_group(L, rx, s, g);
    if (!lua_toboolean(L, -1)) {   /* unset groups are left out */
      lua_pop(L, 1);
      continue;
    }
    lua_getfield(L, 3, name);
    if (!lua_istable(L, -1)) {
      lua_pop(L, 1);
      lua_createtable(L, 2, 0);
      lua_pushvalue(L, -1);
      lua_setfield(L, 3, name);
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    lua_pop(L, 1);
  }
  return 1;
}

/* Bytes in the UTF-8 sequence that starts with byte c (1 for a stray
** continuation byte, so a scan always moves). */
static size_t utf8_len(unsigned char c)
{
  if (c >= 0xf0) return 4;
  if (c >= 0xe0) return 3;
  if (c >= 0xc0) return 2;
  return 1;
}

/* rx:subst(subject, template, global) -> result, count | nil, err. The
** template is an array of literal strings and group numbers (ngx.lua
** parses "$1 ${name} $$" into it). Replaces the first match, or every
** match with global. After an empty match the next search starts one
** character later and that character is copied, as OpenResty does (one
** UTF-8 character in UTF mode, where OpenResty steps one byte). */
static int re_subst(lua_State *L)
{
  struct regex *rx = check_regex(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  luaL_checktype(L, 3, LUA_TTABLE);
  int global = lua_toboolean(L, 4);
  int parts = (int)lua_objlen(L, 3);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t pos = 0, copied = 0;
  int count = 0, checked = 0;
  while (pos <= n) {
    int rc = exec(rx, s, n, pos, checked);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      lua_pushnil(L);
      lua_pushfstring(L, "pcre_exec() failed: %d", rc);
      return 2;
    }
    checked = 1;
    count++;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
    uint32_t pairs = pcre2_get_ovector_count(rx->md);
    size_t from = ov[0], to = ov[1];
    luaL_addlstring(&b, s + copied, from - copied);
    for (int i = 1; i <= parts; i++) {
      lua_rawgeti(L, 3, i);
      if (lua_type(L, -1) == LUA_TNUMBER) {
        lua_Integer g = lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (g >= 0 && (uint32_t)g < pairs && ov[2 * g] != PCRE2_UNSET)
          luaL_addlstring(&b, s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
      } else {
        luaL_addvalue(&b);   /* a literal */
      }
    }
    copied = to;
    pos = to;
    if (from == to) {
      if (to >= n) break;
      pos += rx->utf ? utf8_len((unsigned char)s[to]) : 1;
      if (pos > n) pos = n;
    }
    if (!global) break;
  }
  if (count == 0) {   /* the subject itself, no copy */
    lua_pushvalue(L, 2);
    lua_pushinteger(L, 0);
    return 2;
  }
  luaL_addlstring(&b, s + copied, n - copied);
  luaL_pushresult(&b);
  lua_pushinteger(L, count);
  return 2;
}

/* -- Helpers for cohost.ngx ------------------------------------------------ */

/* crc32(s) -> CRC-32 (IEEE 802.3, zlib's), as ngx.crc32_short and
** ngx.crc32_long. Table-driven: 1 KiB of table, one lookup per byte. */
static uint32_t crc_table[256];

static void crc_init(void)
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

static int h_crc32(lua_State *L)
{
  size_t n;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ s[i]) & 0xff] ^ (c >> 8);
  lua_pushnumber(L, (lua_Number)(c ^ 0xffffffffu));
  return 1;
}

/* quiet_exit(msg): ends the running task with an error that is logged at
** info level only (ngx.exit's way out of a handler or thread). */
static int h_quiet_exit(lua_State *L)
{
  ch_task_raise_quiet(L, luaL_optstring(L, 1, "exit"));
}

static int h_pid(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

static const luaL_Reg regex_methods[] = {
  { "exec", re_exec },
  { "group", re_group },
  { "captures", re_captures },
  { "subst", re_subst },
  { "ncaptures", re_ncaptures },
  { "names", re_names },
  { NULL, NULL }
};

static const luaL_Reg funcs[] = {
  { "compile", re_compile },
  { "crc32", h_crc32 },
  { "quiet_exit", h_quiet_exit },
  { "pid", h_pid },
  { NULL, NULL }
};

int luaopen_cohost_core_re(lua_State *L)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, crc_init);   /* workers open this module concurrently */
  luaL_newmetatable(L, REGEX_MT);
  lua_newtable(L);
  luaL_register(L, NULL, regex_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, re_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  return 1;
}
