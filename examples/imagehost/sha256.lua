-- imagehost.sha256: incremental SHA-256 over libcrypto's EVP_Digest* calls.
--
--   local h = sha256.new(); h:update(piece) ...; h:hex() -> 64 hex digits
--
-- cohost.core.crypto hashes whole strings only; an upload is hashed piece
-- by piece as it streams to disk, so it is never held in memory whole.
-- build/cohost links libcrypto.so.3, so ffi.C sees its symbols. Each
-- update costs one FFI call and no copy (the piece is passed as is).
local ffi = require "ffi"

local M = {}

-- Declared one at a time under pcall: another module may have declared
-- some of these already, and ffi.cdef refuses a second declaration.
for _, decl in ipairs {
  "typedef struct evp_md_ctx_st EVP_MD_CTX;",
  "typedef struct evp_md_st EVP_MD;",
  "EVP_MD_CTX *EVP_MD_CTX_new(void);",
  "void EVP_MD_CTX_free(EVP_MD_CTX *ctx);",
  "const EVP_MD *EVP_sha256(void);",
  "int EVP_DigestInit_ex(EVP_MD_CTX *ctx, const EVP_MD *type, void *engine);",
  "int EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt);",
  "int EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s);",
} do
  pcall(ffi.cdef, decl)
end

local C = ffi.C
local out = ffi.new("unsigned char[32]")    -- shared: hex() never yields
local outlen = ffi.new("unsigned int[1]")

local Hash = {}
Hash.__index = Hash

-- new() -> a hash ready for update; its context is freed by the GC.
function M.new()
  local ctx = C.EVP_MD_CTX_new()
  assert(ctx ~= nil, "EVP_MD_CTX_new failed")
  ctx = ffi.gc(ctx, C.EVP_MD_CTX_free)
  assert(C.EVP_DigestInit_ex(ctx, C.EVP_sha256(), nil) == 1, "EVP_DigestInit_ex failed")
  return setmetatable({ ctx = ctx }, Hash)
end

function Hash:update(s)
  assert(C.EVP_DigestUpdate(self.ctx, s, #s) == 1, "EVP_DigestUpdate failed")
end

-- hex() -> the digest in lower-case hex; the hash is finished after it.
function Hash:hex()
  assert(C.EVP_DigestFinal_ex(self.ctx, out, outlen) == 1, "EVP_DigestFinal_ex failed")
  local s = ffi.string(out, outlen[0])
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

return M
