-- HyperLogLog: PFADD, PFCOUNT, PFMERGE in Redis 7.0's own format
-- (hyperloglog.c), so an HLL is a string whose bytes are Redis's: GET
-- shows them, a value SET from Redis's GET (or its AOF) works here, and
-- PFCOUNT gives Redis's numbers, not only numbers as good.
--
-- The string: a 16-byte header ("HYLL", the encoding, three zero bytes,
-- the cached cardinality little endian, its top bit set when stale), then
-- 16384 6-bit registers, either dense (12288 bytes, packed from the low
-- bits of each byte up) or sparse: runs of ZERO (00xxxxxx: 1 to 64 zero
-- registers), XZERO (01xxxxxx yyyyyyyy: up to 16384) and VAL (1vvvvvxx:
-- 1 to 4 registers of value 1 to 32). A new HLL is sparse; it turns dense
-- when a register needs more than 32 or the sparse string would pass
-- hll-sparse-max-bytes (3000). An element goes to register (hash & 16383)
-- with the count of zeros after the low 14 bits of its MurmurHash64A (seed
-- 0xadc83b19), plus one; the count is Ertl's estimator over the register
-- histogram ("New cardinality estimation algorithms for HyperLogLog
-- sketches", arXiv:1702.01284), rounded: error about 0.81%.
--
-- The value is kept as a buffer (kv/bytes.lua) and changed in place.
local ffi = require "ffi"
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local bytes = require "kv.bytes"

local reg = R.register
local put, int = resp.put, resp.int
local band, bor, bxor, bnot, lshift, rshift = bit.band, bit.bor, bit.bxor, bit.bnot, bit.lshift, bit.rshift
local floor, sqrt, huge, type = math.floor, math.sqrt, math.huge, type

pcall(ffi.cdef, "void *memmove(void *dest, const void *src, size_t n);")

local M = {}

M.sparse_max = 3000   -- hll-sparse-max-bytes (CONFIG SET, admin.lua)

local P, Q = 14, 50                 -- index bits, and the 64 - 14 left
local REGISTERS = 16384
local HDR = 16
local DENSE_SIZE = HDR + 12288
local DENSE, SPARSE = 0, 1
local VAL_MAX, VAL_MAX_LEN, ZERO_MAX_LEN = 32, 4, 64
local ALPHA_INF = 0.721347520444481703680   -- 0.5 / ln(2)

local NOT_HLL = "-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n"
local INVALID = "-INVALIDOBJ Corrupted HLL object detected\r\n"

local u8 = ffi.typeof("uint8_t[?]")
local u64p = ffi.typeof("const uint64_t *")
local U64 = ffi.typeof("uint64_t")

-- -- Hashing ------------------------------------------------------------------

local MUL = 0xc6a4a7935bd1e995ULL

-- MurmurHash64A of the len bytes at p with Redis's seed, as a uint64_t.
-- (Redis reads the 8-byte blocks in little-endian order; so does x86.)
local function murmur(p, len)
  local h = bxor(0xadc83b19ULL, U64(len) * MUL)
  local blocks = floor(len / 8)
  local w = ffi.cast(u64p, p)
  for i = 0, blocks - 1 do
    local k = w[i] * MUL
    k = bxor(k, rshift(k, 47)) * MUL
    h = bxor(h, k) * MUL
  end
  local rest = len % 8
  if rest > 0 then
    local tail = p + blocks * 8
    for j = rest - 1, 0, -1 do h = bxor(h, lshift(U64(tail[j]), 8 * j)) end
    h = h * MUL
  end
  h = bxor(h, rshift(h, 47)) * MUL
  return bxor(h, rshift(h, 47))
end

-- The register an element goes to and its pattern length (hllPatLen).
local function pat_len(s)
  local hash = murmur(ffi.cast("const uint8_t *", s), #s)
  local index = tonumber(band(hash, 0x3FFFULL))
  hash = bor(rshift(hash, P), lshift(1ULL, Q))   -- the loop ends by Q + 1
  local count, probe = 1, 1ULL
  while band(hash, probe) == 0ULL do
    count = count + 1
    probe = lshift(probe, 1)
  end
  return index, count
end

-- -- Dense registers ------------------------------------------------------------

-- Register i of the dense registers at r (which has a byte after them).
local function dense_get(r, i)
  local byte, fb = floor(i * 6 / 8), i * 6 % 8
  return band(bor(rshift(r[byte], fb), lshift(r[byte + 1], 8 - fb)), 63)
end

local function dense_put(r, i, v)
  local byte, fb = floor(i * 6 / 8), i * 6 % 8
  local fb8 = 8 - fb
  r[byte] = band(bor(band(r[byte], bnot(lshift(63, fb))), lshift(v, fb)), 0xFF)
  r[byte + 1] = band(bor(band(r[byte + 1], bnot(rshift(63, fb8))), rshift(v, fb8)), 0xFF)
end

-- Raises register i to count if it is lower: 1 if it changed, else 0.
local function dense_set(r, i, count)
  if count > dense_get(r, i) then
    dense_put(r, i, count)
    return 1
  end
  return 0
end

-- -- The value ---------------------------------------------------------------------

local function invalidate(b)
  b.buf[15] = bor(b.buf[15], 0x80)
end

-- Whether the len bytes at p are a valid HLL (isHLLObjectOrReply: the
-- magic, a known encoding, a dense one of its exact size).
local function is_hll(p, len)
  if len < HDR then return false end
  if p[0] ~= 72 or p[1] ~= 89 or p[2] ~= 76 or p[3] ~= 76 then return false end   -- "HYLL"
  if p[4] > SPARSE then return false end
  if p[4] == DENSE and len ~= DENSE_SIZE then return false end
  return true
end

-- The value at k for an HLL command: a Lua string or buffer, false when
-- missing, or nil and the error reply (another type, not an HLL).
local function hll_at(k)
  local v = store.get(k)
  if v == nil then return false end
  if type(v) == "number" then return nil, NOT_HLL end
  if type(v) == "table" and v.kind ~= "string" then return nil, resp.WRONGTYPE end
  local p, len = bytes.ptr(v)
  if not is_hll(p, len) then return nil, NOT_HLL end
  return v
end

-- A new empty HLL buffer: sparse, one XZERO of all the registers.
local function new_hll()
  local b = bytes.new(HDR + 2)
  local p = b.buf
  p[0], p[1], p[2], p[3], p[4] = 72, 89, 76, 76, SPARSE
  p[HDR] = bor(rshift(REGISTERS - 1, 8), 0x40)
  p[HDR + 1] = band(REGISTERS - 1, 0xFF)
  return b
end

-- The sparse string's registers as a dense block of DENSE_SIZE bytes
-- (header copied, encoding dense), or nil if the runs do not cover the
-- 16384 registers exactly (corrupted).
local function sparse_to_dense(b)
  local cap = DENSE_SIZE + 1   -- a byte past the last register, read as zero
  local d = u8(cap)
  ffi.copy(d, b.buf, HDR)
  d[4] = DENSE
  local r = d + HDR
  local p, e, idx = HDR, b.len, 0
  local s = b.buf
  while p < e do
    local c = s[p]
    if band(c, 0xC0) == 0 then
      idx = idx + band(c, 0x3F) + 1
      p = p + 1
    elseif band(c, 0x80) == 0 then
      idx = idx + bor(lshift(band(c, 0x3F), 8), s[p + 1]) + 1
      p = p + 2
    else
      local run, val = band(c, 3) + 1, band(rshift(c, 2), 0x1F) + 1
      if run + idx > REGISTERS then break end
      for _ = 1, run do
        dense_put(r, idx, val)
        idx = idx + 1
      end
      p = p + 1
    end
  end
  if idx ~= REGISTERS then return nil end
  return d, cap
end

-- Makes b dense (if it is not). false if its sparse form is corrupted.
local function promote(b)
  if b.buf[4] == DENSE then return true end
  local d, cap = sparse_to_dense(b)
  if not d then return false end
  bytes.swap(b, d, DENSE_SIZE, cap)
  return true
end

local function sparse_len_of(s, p)
  local c = s[p]
  if band(c, 0xC0) == 0 then return band(c, 0x3F) + 1, 1 end
  if band(c, 0x80) ~= 0 then return band(c, 3) + 1, 1 end
  return bor(lshift(band(c, 0x3F), 8), s[p + 1]) + 1, 2
end

local function val_byte(v, len) return bor(lshift(v - 1, 2), len - 1, 0x80) end
local function zero_bytes(seq, n, len)
  if len > ZERO_MAX_LEN then
    seq[n + 1] = bor(rshift(len - 1, 8), 0x40)
    seq[n + 2] = band(len - 1, 0xFF)
    return n + 2
  end
  seq[n + 1] = len - 1
  return n + 1
end

-- Raises register index of the sparse HLL b to count if lower (Redis's
-- hllSparseSet, step for step, so the bytes come out the same): finds the
-- run that covers it, splits it into at most three runs, merges equal VAL
-- runs around it, and turns b dense past 32 or hll-sparse-max-bytes.
-- Returns 1 if it changed, 0 if not, -1 if b is corrupted.
local function sparse_set(b, index, count)
  if count > VAL_MAX then
    if not promote(b) then return -1 end
    return dense_set(b.buf + HDR, index, count)
  end
  bytes.reserve(b, b.len + 3 + 1)
  local s = b.buf
  local p, e = HDR, b.len
  local first, span, prev = 0, 0, nil
  while p < e do
    local oplen
    span, oplen = sparse_len_of(s, p)
    if index <= first + span - 1 then break end
    prev = p
    p = p + oplen
    first = first + span
  end
  if span == 0 or p >= e then return -1 end
  local c = s[p]
  local is_zero, is_xzero = band(c, 0xC0) == 0, band(c, 0xC0) == 0x40
  local nxt = is_xzero and p + 2 or p + 1
  if nxt >= e then nxt = nil end
  local runlen = sparse_len_of(s, p)
  local done = false
  if not is_zero and not is_xzero then
    local old = band(rshift(c, 2), 0x1F) + 1
    if old >= count then return 0 end
    if runlen == 1 then
      s[p] = val_byte(count, 1)
      done = true
    end
  end
  if not done and is_zero and runlen == 1 then
    s[p] = val_byte(count, 1)
    done = true
  end
  if not done then
    local seq, n = {}, 0
    local last = first + span - 1
    if is_zero or is_xzero then
      if index ~= first then n = zero_bytes(seq, n, index - first) end
      n = n + 1
      seq[n] = val_byte(count, 1)
      if index ~= last then n = zero_bytes(seq, n, last - index) end
    else
      local cur = band(rshift(c, 2), 0x1F) + 1
      if index ~= first then
        n = n + 1
        seq[n] = val_byte(cur, index - first)
      end
      n = n + 1
      seq[n] = val_byte(count, 1)
      if index ~= last then
        n = n + 1
        seq[n] = val_byte(cur, last - index)
      end
    end
    local oldlen = is_xzero and 2 or 1
    local delta = n - oldlen
    if delta > 0 and b.len + delta > M.sparse_max then
      if not promote(b) then return -1 end
      return dense_set(b.buf + HDR, index, count)
    end
    if delta ~= 0 and nxt then ffi.C.memmove(s + nxt + delta, s + nxt, e - nxt) end
    b.len = b.len + delta
    if delta < 0 then ffi.fill(s + b.len, -delta, 0) end   -- bytes past the end stay zero
    for i = 1, n do s[p + i - 1] = seq[i] end
    e = e + delta
  end
  -- Equal VAL runs next to each other become one, up to 4 registers,
  -- looking at up to five runs from the one before.
  p = prev or HDR
  local scan = 5
  while p < e and scan > 0 do
    scan = scan - 1
    local x = s[p]
    if band(x, 0xC0) == 0x40 then
      p = p + 2
    elseif band(x, 0xC0) == 0 then
      p = p + 1
    else
      local merged = false
      if p + 1 < e and band(s[p + 1], 0x80) ~= 0 then
        local v1, v2 = band(rshift(x, 2), 0x1F) + 1, band(rshift(s[p + 1], 2), 0x1F) + 1
        if v1 == v2 then
          local len = band(x, 3) + 1 + band(s[p + 1], 3) + 1
          if len <= VAL_MAX_LEN then
            s[p + 1] = val_byte(v1, len)
            ffi.C.memmove(s + p, s + p + 1, e - p)
            b.len = b.len - 1
            e = e - 1
            s[e] = 0
            merged = true
          end
        end
      end
      if not merged then p = p + 1 end
    end
  end
  invalidate(b)
  return 1
end

-- Raises register index of the HLL b to count: 1 if it changed, 0 if
-- not, -1 if b is corrupted.
local function hll_set(b, index, count)
  if b.buf[4] == DENSE then return dense_set(b.buf + HDR, index, count) end
  return sparse_set(b, index, count)
end

-- -- Counting ---------------------------------------------------------------------

local function sigma(x)
  if x == 1 then return huge end
  local y, z = 1, x
  while true do
    x = x * x
    local before = z
    z = z + x * y
    y = y + y
    if before == z then return z end
  end
end

local function tau(x)
  if x == 0 or x == 1 then return 0 end
  local y, z = 1.0, 1 - x
  while true do
    x = sqrt(x)
    local before = z
    y = y * 0.5
    local d = 1 - x
    z = z - d * d * y
    if before == z then return z / 3 end
  end
end

-- The estimate from a histogram of register values (hllCount).
local function estimate(histo)
  local m = REGISTERS
  local z = m * tau((m - histo[Q + 1]) / m)
  for j = Q, 1, -1 do
    z = z + histo[j]
    z = z * 0.5
  end
  z = z + m * sigma(histo[0] / m)
  return floor(ALPHA_INF * m * m / z + 0.5)
end

local function new_histo()
  local t = {}
  for i = 0, 63 do t[i] = 0 end
  return t
end

-- Calls fn(i, value) for each register i of the HLL at p (len bytes).
-- false if its sparse form is corrupted (its runs do not cover the 16384
-- registers exactly).
local function each_register(p, len, fn)
  if p[4] == DENSE then
    local r = p + HDR
    for i = 0, REGISTERS - 1 do fn(i, dense_get(r, i)) end
    return true
  end
  local q, idx = HDR, 0
  while q < len do
    local c = p[q]
    if band(c, 0xC0) == 0 then
      local run = band(c, 0x3F) + 1
      for i = idx, idx + run - 1 do
        if i < REGISTERS then fn(i, 0) end
      end
      idx = idx + run
      q = q + 1
    elseif band(c, 0x80) == 0 then
      local run = bor(lshift(band(c, 0x3F), 8), q + 1 < len and p[q + 1] or 0) + 1
      for i = idx, idx + run - 1 do
        if i < REGISTERS then fn(i, 0) end
      end
      idx = idx + run
      q = q + 2
    else
      local run, val = band(c, 3) + 1, band(rshift(c, 2), 0x1F) + 1
      if run + idx > REGISTERS then break end
      for i = idx, idx + run - 1 do fn(i, val) end
      idx = idx + run
      q = q + 1
    end
  end
  return idx == REGISTERS
end

-- The histogram of an HLL's registers; nil if corrupted.
local function histogram(p, len)
  local h = new_histo()
  local ok = each_register(p, len, function(_, v) h[v] = h[v] + 1 end)
  if not ok then return nil end
  return h
end

-- The cached cardinality of the HLL at p, or nil when stale.
local function cached(p)
  if band(p[15], 0x80) ~= 0 then return nil end
  local c = 0
  for i = 7, 0, -1 do c = c * 256 + p[8 + i] end
  return c
end

local function cache(b, card)
  local s = b.buf
  for i = 0, 7 do
    s[8 + i] = card % 256
    card = floor(card / 256)
  end
end

-- -- Commands ----------------------------------------------------------------------

-- The HLL at k made a writable buffer (created when missing). Returns the
-- buffer and whether it was created; or nil and the error reply.
local function writable(k)
  local v, err = hll_at(k)
  if v == nil then return nil, err end
  if not v then
    local b = new_hll()
    store.set(k, b)
    return b, true
  end
  return bytes.writable(k, 0), false
end

-- PFADD key [element ...]: 1 if a register changed (or the key was
-- made), else 0.
reg("pfadd", function(_, argv, argc, out, n)
  local k = argv[2]
  local b, created = writable(k)
  if not b then return put(out, n, created) end
  local updated = created and 1 or 0
  for j = 3, argc do
    local index, count = pat_len(argv[j])
    local r = hll_set(b, index, count)
    if r == -1 then
      -- A corrupt sparse HLL: the elements before this one stay set, as
      -- in Redis, which logs nothing then (and so replays another HLL).
      -- kv logs the bytes the key now holds; no event, as in Redis.
      if updated > 0 then
        R.prop = resp.encode({ "SET", k, bytes.flat(b), "KEEPTTL" }, 4)
        R.noted = true
      end
      return put(out, n, INVALID)
    end
    updated = updated + r
  end
  if updated > 0 then
    invalidate(b)
    b.ones = -1
    R.prop = true
  end
  return put(out, n, updated > 0 and resp.ONE or resp.ZERO)
end)

-- PFCOUNT key [key ...]: one key's cached count, or its count computed
-- and cached (logged, as Redis propagates it: the bytes changed); several
-- keys' union, counted from the maximum of their registers.
reg("pfcount", function(_, argv, argc, out, n)
  if argc > 2 then
    local max = u8(REGISTERS)
    for j = 2, argc do
      local v, err = hll_at(argv[j])
      if v == nil then return put(out, n, err) end
      if v then
        local p, len = bytes.ptr(v)
        local ok = each_register(p, len, function(i, x) if x > max[i] then max[i] = x end end)
        if not ok then return put(out, n, INVALID) end
      end
    end
    local h = new_histo()
    for i = 0, REGISTERS - 1 do h[max[i]] = h[max[i]] + 1 end
    return put(out, n, int(estimate(h)))
  end
  local k = argv[2]
  local v, err = hll_at(k)
  if v == nil then return put(out, n, err) end
  if not v then return put(out, n, resp.ZERO) end
  local p, len = bytes.ptr(v)
  local card = cached(p)
  if card then return put(out, n, int(card)) end
  local h = histogram(p, len)
  if not h then return put(out, n, INVALID) end
  card = estimate(h)
  local b = bytes.writable(k, 0)
  cache(b, card)
  R.prop = true
  R.noted = true   -- (no keyspace event: Redis sends none)
  return put(out, n, int(card))
end)

-- PFMERGE destkey [sourcekey ...]: destkey (itself one of the inputs)
-- gets the maximum of the registers; it turns dense if an input is (as
-- Redis 7.0.15 does), else the registers are set one by one in its sparse
-- form, which may turn it dense on the way.
reg("pfmerge", function(_, argv, argc, out, n)
  local max = u8(REGISTERS)
  local use_dense = false
  for j = 2, argc do
    local v, err = hll_at(argv[j])
    if v == nil then return put(out, n, err) end
    if v then
      local p, len = bytes.ptr(v)
      if p[4] == DENSE then use_dense = true end
      local ok = each_register(p, len, function(i, x) if x > max[i] then max[i] = x end end)
      if not ok then return put(out, n, INVALID) end
    end
  end
  local k = argv[2]
  local b = writable(k)
  if use_dense and not promote(b) then return put(out, n, INVALID) end
  for i = 0, REGISTERS - 1 do
    if max[i] ~= 0 then hll_set(b, i, max[i]) end
  end
  invalidate(b)
  b.ones = -1
  R.note("$", "pfadd", k)
  R.prop = true
  return put(out, n, resp.OK)
end)

return M
