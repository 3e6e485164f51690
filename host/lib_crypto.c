/*
** cohost.core.crypto: the digests and encodings protocol code needs
** (WebSocket's accept key, ETags, ngx.md5/sha1_bin/encode_base64), on
** OpenSSL's libcrypto. Every function takes and returns Lua strings;
** nothing here yields.
*/
#include <limits.h>
#include <string.h>

#include <lauxlib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "lib.h"

static int digest(lua_State *L, const EVP_MD *md, int hex)
{
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(s, n, out, &len, md, NULL)) return luaL_error(L, "digest failed");
  if (!hex) {
    lua_pushlstring(L, (const char *)out, len);
    return 1;
  }
  static const char digits[] = "0123456789abcdef";
  char h[EVP_MAX_MD_SIZE * 2];
  for (unsigned i = 0; i < len; i++) {
    h[2 * i] = digits[out[i] >> 4];
    h[2 * i + 1] = digits[out[i] & 15];
  }
  lua_pushlstring(L, h, 2 * len);
  return 1;
}

static int c_md5(lua_State *L) { return digest(L, EVP_md5(), 1); }
static int c_md5_bin(lua_State *L) { return digest(L, EVP_md5(), 0); }
static int c_sha1_bin(lua_State *L) { return digest(L, EVP_sha1(), 0); }
static int c_sha256_bin(lua_State *L) { return digest(L, EVP_sha256(), 0); }

/* hmac_sha1(key, msg) -> binary digest, as ngx.hmac_sha1. */
static int c_hmac_sha1(lua_State *L)
{
  size_t kn, mn;
  const char *k = luaL_checklstring(L, 1, &kn);
  const char *m = luaL_checklstring(L, 2, &mn);
  luaL_argcheck(L, kn <= INT_MAX, 1, "key too long");   /* HMAC() takes an int */
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha1(), k, (int)kn, (const unsigned char *)m, mn, out, &len))
    return luaL_error(L, "hmac failed");
  lua_pushlstring(L, (const char *)out, len);
  return 1;
}

/* encode_base64(s [, no_padding]) */
static int c_encode_base64(lua_State *L)
{
  size_t n;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  int nopad = lua_toboolean(L, 2);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  /* EVP_EncodeBlock wants whole output room; go in slices that fit. */
  unsigned char out[4 * 768 / 3 + 4];
  while (n > 0) {
    size_t take = n > 768 ? 768 : n;
    int len = EVP_EncodeBlock(out, s, (int)take);
    if (n == take && nopad)
      while (len > 0 && out[len - 1] == '=') len--;
    luaL_addlstring(&b, (const char *)out, (size_t)len);
    s += take;
    n -= take;
  }
  luaL_pushresult(&b);
  return 1;
}

static int b64val(int c)
{
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* decode_base64(s) -> string, or nil when s is not base64. Padding is
** optional, as ngx.decode_base64 allows, but when present it must be one
** or two '=' completing a 4-character group: "QQ=" and "QQ===" are not
** base64 (a Sec-WebSocket-Key check relies on this). */
static int c_decode_base64(lua_State *L)
{
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  size_t len = n;
  while (n > 0 && s[n - 1] == '=') n--;
  if (n % 4 == 1 || len - n > 2 || (len != n && len % 4 != 0)) {
    lua_pushnil(L);
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  unsigned acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int v = b64val((unsigned char)s[i]);
    if (v < 0) { lua_pushnil(L); return 1; }
    acc = (acc << 6) | (unsigned)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      luaL_addchar(&b, (char)((acc >> bits) & 0xff));
    }
  }
  luaL_pushresult(&b);
  return 1;
}

/* random_bytes(n) -> n bytes from the OS's CSPRNG (WebSocket keys and
** masks, delete tokens). */
static int c_random_bytes(lua_State *L)
{
  /* Range-check before narrowing: (int)(2^32 + 5) would pass as 5. */
  lua_Integer want = luaL_checkinteger(L, 1);
  luaL_argcheck(L, want >= 0 && want <= 4096, 1, "0..4096 bytes");
  int n = (int)want;
  unsigned char buf[4096];
  if (RAND_bytes(buf, n) != 1) return luaL_error(L, "random_bytes failed");
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  return 1;
}

static const luaL_Reg funcs[] = {
  { "md5", c_md5 },
  { "md5_bin", c_md5_bin },
  { "sha1_bin", c_sha1_bin },
  { "sha256_bin", c_sha256_bin },
  { "hmac_sha1", c_hmac_sha1 },
  { "encode_base64", c_encode_base64 },
  { "decode_base64", c_decode_base64 },
  { "random_bytes", c_random_bytes },
  { NULL, NULL }
};

int luaopen_cohost_core_crypto(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  return 1;
}
