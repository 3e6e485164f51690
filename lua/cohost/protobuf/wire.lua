-- cohost.protobuf.wire: the protobuf wire format's primitives, shared by
-- the encoders and decoders cohost.protobuf.encode and .decode generate:
-- the one encode buffer, varints, zigzag, fixed-width numbers, UTF-8
-- checks and the 64-bit rule (a 64-bit integer is a Lua number when
-- within +-2^53, else an int64_t/uint64_t cdata).
--
-- A varint wider than 32 bits travels here as two halves, lo and hi, each
-- a Lua number in [0, 2^32): exact in a double, and cheap for LuaJIT's bit
-- operations, so the common small values never allocate a cdata.
local ffi = require "ffi"
local bit = require "bit"

local band, bor, bxor, rshift, lshift, arshift =
  bit.band, bit.bor, bit.bxor, bit.rshift, bit.lshift, bit.arshift
local floor, type, tonumber, error = math.floor, type, tonumber, error
local istype, cast = ffi.istype, ffi.cast

-- The wire format is little-endian, and fixed-width fields are read and
-- written through casts.
assert(ffi.abi("le"), "cohost.protobuf: little-endian hosts only")

pcall(ffi.cdef, "void *memmove(void *dest, const void *src, size_t n);")

local M = {}

local TWO32 = 4294967296
local TWO53 = 9007199254740992
M.MAX_DEPTH = 100              -- nesting limit: protobuf-c++'s and python's default
M.MAX_SIZE = 2147483647        -- 2 GiB - 1: protobuf's limit on a message

local cu8p = ffi.typeof("const uint8_t *")
local i32p, u32p = ffi.typeof("int32_t *"), ffi.typeof("uint32_t *")
local i64p, u64p = ffi.typeof("int64_t *"), ffi.typeof("uint64_t *")
local fp, dp = ffi.typeof("float *"), ffi.typeof("double *")
local int64_t, uint64_t = ffi.typeof("int64_t"), ffi.typeof("uint64_t")
M.cu8p = cu8p

-- -- Errors ---------------------------------------------------------------------

-- Malformed input is not raised: a decoder (and each helper below)
-- returns nil, with the reason in M.err; cohost.protobuf.decode returns
-- nil, err. No pcall is needed around a decoder, and none may be: a trace
-- that starts inside a function called by pcall cannot return through
-- the pcall ("NYI: return to lower frame"), so every decoder with a loop
-- fell back to the interpreter after it.
M.err = nil

-- fail(msg) -> nil, the reason kept.
function M.fail(msg)
  M.err = msg
  return nil
end
local fail = M.fail

-- -- The encode buffer -----------------------------------------------------------

-- One buffer per VM (each worker thread has its own): encoders write at
-- offset n and make room with ensure() before a write of bounded size.
-- S.B changes when it grows, so code reads S.B after any ensure().
local S = { cap = 4096 }
S.B = ffi.new("uint8_t[?]", S.cap)
M.S = S

local KEEP = 1048576   -- capacity kept after an encode; larger is let go

function M.grow(need)
  if need > M.MAX_SIZE + 64 then
    error(("message over protobuf's 2 GiB limit (%d bytes)"):format(need), 0)
  end
  local cap = S.cap
  while cap < need do cap = cap * 2 end
  local nb = ffi.new("uint8_t[?]", cap)
  ffi.copy(nb, S.B, S.cap)
  S.B, S.cap = nb, cap
end
local grow = M.grow

-- After an encode: a buffer grown past KEEP goes back to the GC.
function M.trim()
  if S.cap > KEEP then
    S.cap = 4096
    S.B = ffi.new("uint8_t[?]", S.cap)
  end
end

-- -- Varints out -------------------------------------------------------------------

-- The varint writers are unrolled, with no loop: an encoder is traced
-- whole by LuaJIT only if nothing it calls loops (an inner loop cuts a
-- trace).

-- put_u32(B, n, v) -> n: v an integer in [0, 2^32).
local function put_u32(B, n, v)
  if v < 128 then B[n] = v; return n + 1 end
  B[n] = bor(band(v, 127), 128); v = rshift(v, 7)
  if v < 128 then B[n + 1] = v; return n + 2 end
  B[n + 1] = bor(band(v, 127), 128); v = rshift(v, 7)
  if v < 128 then B[n + 2] = v; return n + 3 end
  B[n + 2] = bor(band(v, 127), 128); v = rshift(v, 7)
  if v < 128 then B[n + 3] = v; return n + 4 end
  B[n + 3] = bor(band(v, 127), 128)
  B[n + 4] = rshift(v, 7)
  return n + 5
end
M.put_u32 = put_u32

-- put_v64(B, n, lo, hi) -> n: the 64-bit value hi * 2^32 + lo, both
-- halves in [0, 2^32): lo's first 28 bits, then 7 bits at a time from
-- (hi, lo >> 28).
local function put_v64(B, n, lo, hi)
  if hi == 0 and lo < 268435456 then return put_u32(B, n, lo) end
  B[n] = bor(band(lo, 127), 128)
  B[n + 1] = bor(band(rshift(lo, 7), 127), 128)
  B[n + 2] = bor(band(rshift(lo, 14), 127), 128)
  B[n + 3] = bor(band(rshift(lo, 21), 127), 128)
  local v = rshift(lo, 28) + band(hi, 7) * 16   -- bits 28-34
  hi = rshift(hi, 3)                            -- bits 35-63, 29 of them
  if hi == 0 then B[n + 4] = v; return n + 5 end
  B[n + 4] = bor(v, 128)
  return put_u32(B, n + 5, hi)
end
M.put_v64 = put_v64

-- halves(x) -> lo, hi of an int64_t or uint64_t cdata (two's complement).
local function halves(x)
  local u = cast(uint64_t, x)
  return tonumber(band(u, 0xffffffffULL)), tonumber(rshift(u, 32))
end
M.halves = halves

-- put_int(B, n, v) -> n: v an integer number in [-2^63, 2^64) (negative
-- ones as 10 bytes, two's complement, as every varint of a signed type)
-- or an int64/uint64 cdata.
local function put_int(B, n, v)
  if type(v) == "number" then
    if v >= 0 then
      if v < 2147483648 then return put_u32(B, n, v) end
      return put_v64(B, n, v % TWO32, floor(v / TWO32))
    end
    if v >= -TWO53 then
      return put_v64(B, n, v % TWO32, floor(v / TWO32) % TWO32)
    end
    v = cast(int64_t, v)
  end
  local lo, hi = halves(v)
  return put_v64(B, n, lo, hi)
end
M.put_int = put_int

-- put_zz32(B, n, v) -> n: sint32's zigzag.
function M.put_zz32(B, n, v)
  local z = bxor(lshift(v, 1), arshift(v, 31))
  if z < 0 then z = z + TWO32 end
  return put_u32(B, n, z)
end

-- put_zz64(B, n, v) -> n: sint64's zigzag of a number or an int64 cdata.
function M.put_zz64(B, n, v)
  if type(v) == "number" and v >= -4503599627370496 and v <= 4503599627370495 then   -- +-2^52
    if v >= 0 then return put_int(B, n, v * 2) end
    return put_int(B, n, -v * 2 - 1)
  end
  local x = cast(int64_t, v)
  local z = bxor(lshift(x, 1), arshift(x, 63))
  local lo, hi = halves(z)
  return put_v64(B, n, lo, hi)
end

-- size of a varint of v in [0, 2^53)
local function vsize(v)
  local k = 1
  while v >= 128 do v = floor(v / 128); k = k + 1 end
  return k
end

-- fix_len(st, n) -> n: a length-delimited value was written from st + 1
-- to n with one byte kept at st for its length; writes the length there,
-- moving the value up when the length takes more than one byte.
function M.fix_len(st, n)
  local len = n - st - 1
  local B = S.B
  if len < 128 then
    B[st] = len
    return n
  end
  local k = vsize(len)
  if n + k > S.cap then grow(n + k); B = S.B end
  ffi.C.memmove(B + st + k, B + st + 1, len)
  put_u32(B, st, len)
  return n + k - 1
end

-- -- Fixed-width out ---------------------------------------------------------------

function M.put_f32(B, n, v) cast(fp, B + n)[0] = v; return n + 4 end
function M.put_f64(B, n, v) cast(dp, B + n)[0] = v; return n + 8 end
function M.put_fx32(B, n, v) cast(u32p, B + n)[0] = v; return n + 4 end
function M.put_sfx32(B, n, v) cast(i32p, B + n)[0] = v; return n + 4 end
function M.put_fx64(B, n, v) cast(u64p, B + n)[0] = v; return n + 8 end
function M.put_sfx64(B, n, v) cast(i64p, B + n)[0] = v; return n + 8 end

-- -- Checking Lua values ------------------------------------------------------------

-- Each chk_* returns its value as the encoder writes it, or nil when v is
-- not one: the encoder then raises naming the field.

local function chk_range(v, lo, hi)
  if type(v) == "number" then
    if v >= lo and v <= hi and v == floor(v) then return v end
    return nil
  end
  if type(v) == "cdata" then
    -- (a uint64 compared with a negative bound would see it as 2^64 - n)
    if istype(uint64_t, v) then
      if v <= hi then return tonumber(v) end
    elseif istype(int64_t, v) and v >= lo and v <= hi then
      return tonumber(v)
    end
  end
  return nil
end

function M.chk_i32(v)
  if type(v) == "number" and v >= -2147483648 and v <= 2147483647 and v == floor(v) then return v end
  return chk_range(v, -2147483648, 2147483647)
end
function M.chk_u32(v)
  if type(v) == "number" and v >= 0 and v <= 4294967295 and v == floor(v) then return v end
  return chk_range(v, 0, 4294967295)
end

-- int64: a number in [-2^63, 2^63), an int64 cdata, or a uint64 one
-- below 2^63. Returned as given (numbers stay numbers).
function M.chk_i64(v)
  if type(v) == "number" then
    if v >= -9223372036854775808 and v < 9223372036854775808 and v == floor(v) then return v end
    return nil
  end
  if type(v) == "cdata" then
    if istype(int64_t, v) then return v end
    if istype(uint64_t, v) and v < 0x8000000000000000ULL then return cast(int64_t, v) end
  end
  return nil
end

-- uint64: a number in [0, 2^64), a uint64 cdata, or a non-negative int64.
function M.chk_u64(v)
  if type(v) == "number" then
    if v >= 0 and v < 18446744073709551616 and v == floor(v) then return v end
    return nil
  end
  if type(v) == "cdata" then
    if istype(uint64_t, v) then return v end
    if istype(int64_t, v) and v >= 0 then return cast(uint64_t, v) end
  end
  return nil
end

-- A number too large for a uint64_t store through a double conversion:
-- fixed64 and sfixed64 go through a cdata of their own type.
function M.u64_of(v)
  if type(v) == "number" then
    if v < 9223372036854775808 then return cast(uint64_t, cast(int64_t, v)) end
    return cast(uint64_t, v)
  end
  return v
end

-- -- Varints in ----------------------------------------------------------------------

-- get_v64(P, p, e) -> lo, hi, p: a varint of up to 10 bytes at p, which
-- must end before e; nil when it does not. For the rare paths (long tags
-- and lengths, skipped fields): the decoders read varints inline.
local function get_v64(P, p, e)
  local lo, b = 0, 0
  local mul = 1
  for _ = 1, 4 do   -- bits 0-27
    if p >= e then return fail("truncated varint") end
    b = P[p]; p = p + 1
    lo = lo + band(b, 127) * mul
    if b < 128 then return lo, 0, p end
    mul = mul * 128
  end
  if p >= e then return fail("truncated varint") end
  b = P[p]; p = p + 1   -- bits 28-34: 4 to lo, 3 to hi
  lo = lo + band(b, 15) * 268435456
  local hi = rshift(band(b, 127), 4)
  if b < 128 then return lo, hi, p end
  mul = 8
  for _ = 1, 5 do   -- bits 35-63 (the tenth byte's bits past 63 are dropped)
    if p >= e then return fail("truncated varint") end
    b = P[p]; p = p + 1
    hi = (hi + band(b, 127) * mul) % TWO32
    if b < 128 then return lo, hi, p end
    mul = mul * 128
  end
  return fail("varint longer than 10 bytes")
end
M.get_v64 = get_v64

-- get_len(P, p, e) -> n, p: a length, at most 2^31 - 1; nil if none.
function M.get_len(P, p, e)
  local lo, hi
  lo, hi, p = get_v64(P, p, e)
  if lo == nil then return nil end
  if hi ~= 0 or lo > 2147483647 then return fail(("length %.0f over 2 GiB"):format(hi * TWO32 + lo)) end
  return lo, p
end

-- get_tag(P, p, e) -> tag, p: a tag of more than one byte (at most 32
-- bits: field numbers stop at 2^29 - 1); nil if none.
function M.get_tag(P, p, e)
  local lo, hi
  lo, hi, p = get_v64(P, p, e)
  if lo == nil then return nil end
  if hi ~= 0 then return fail("tag over 32 bits") end
  return lo, p
end

-- The 64-bit integer types from a varint's halves, past the +-2^53 the
-- decoders convert inline.

-- int64 of two's complement halves: a number within +-2^53, else int64_t.
local function as_i64(lo, hi)
  if hi < 2147483648 then
    if hi < 2097152 or (hi == 2097152 and lo == 0) then return hi * TWO32 + lo end
    return cast(int64_t, hi) * 4294967296LL + lo
  end
  local h = hi - TWO32
  if h >= -2097152 then return h * TWO32 + lo end
  return cast(int64_t, h) * 4294967296LL + lo
end
M.as_i64 = as_i64

function M.as_u64(lo, hi)
  if hi < 2097152 or (hi == 2097152 and lo == 0) then return hi * TWO32 + lo end
  return cast(uint64_t, hi) * 4294967296ULL + lo
end

function M.as_zz64(lo, hi)
  local hl = rshift(lo, 1) + band(hi, 1) * 2147483648   -- u >> 1
  local hh = rshift(hi, 1)
  if band(lo, 1) == 0 then return as_i64(hl, hh) end
  -- -(u >> 1) - 1 is the bitwise not of u >> 1
  return as_i64(TWO32 - 1 - hl, TWO32 - 1 - hh)
end

-- skip(P, p, e, tag, depth) -> p past the value of a field whose tag was
-- read (groups skipped to their end, nested groups counting towards the
-- depth limit), or nil: a field number 0, wire type 4, 6 or 7, a value
-- past e.
local function skip(P, p, e, tag, depth)
  local wt = tag % 8
  if tag < 8 then return fail("field number 0") end
  if wt == 0 then
    for _ = 1, 10 do
      if p >= e then return fail("truncated varint") end
      local b = P[p]; p = p + 1
      if b < 128 then return p end
    end
    return fail("varint longer than 10 bytes")
  elseif wt == 1 then
    if e - p < 8 then return fail("truncated fixed64") end
    return p + 8
  elseif wt == 2 then
    if p >= e then return fail("truncated length") end
    local len = P[p]
    if len < 128 then p = p + 1 else len, p = M.get_len(P, p, e) end
    if len == nil then return nil end
    if len > e - p then return fail(("length %d past the end (%d bytes left)"):format(len, e - p)) end
    return p + len
  elseif wt == 5 then
    if e - p < 4 then return fail("truncated fixed32") end
    return p + 4
  elseif wt == 3 then
    if depth >= M.MAX_DEPTH then return fail(("nesting deeper than %d levels"):format(M.MAX_DEPTH)) end
    local field = floor(tag / 8)
    while true do
      if p >= e then return fail("truncated group") end
      local t = P[p]
      if t < 128 then p = p + 1 else t, p = M.get_tag(P, p, e) end
      if t == nil then return nil end
      if t % 8 == 4 then
        if floor(t / 8) ~= field then return fail("mismatched end of group") end
        return p
      end
      p = skip(P, p, e, t, depth + 1)
      if p == nil then return nil end
    end
  elseif wt == 4 then
    return fail("end of group without a start")
  end
  return fail(("wire type %d"):format(wt))
end
M.skip = skip

-- -- UTF-8 -----------------------------------------------------------------------------

-- utf8_valid(p, n) -> 1 when the n bytes at p are UTF-8 as protobuf's
-- runtimes check it, else 0: host/utf8.c's ch_utf8_valid, in C so that
-- the decoders' traces stay whole (a Lua loop would split them).
pcall(ffi.cdef, "int ch_utf8_valid(const unsigned char *s, size_t n);")
M.utf8_valid = ffi.C.ch_utf8_valid

return M
