-- Bitmaps: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and
-- BITFIELD_RO, on string values as Redis 7.0 has them (bitops.c): bit 0
-- is the most significant bit of the first byte, a missing key is an
-- endless run of zeros, and replies, error texts and the order arguments
-- are checked in are Redis's.
--
-- The commands that write bits keep the value as a buffer changed in
-- place (kv/bytes.lua): SETBIT is O(1) whatever the bitmap's size. A
-- buffer also keeps its count of set bits once BITCOUNT has counted it
-- (b.ones), which SETBIT keeps up to date, so counting a whole bitmap that
-- only SETBIT changed since is O(1); any other write forgets it.
local ffi = require "ffi"
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local bytes = require "kv.bytes"
local ints = require "kv.ints"

local reg = R.register
local get = store.get
local put, int, null = resp.put, resp.int, resp.null
local WRONGTYPE, NOT_INT, SYNTAX = resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local parse_int, int_arg = ints.parse, resp.int_arg
local band, bor, bnot, lshift, rshift = bit.band, bit.bor, bit.bnot, bit.lshift, bit.rshift
local floor, type, tonumber, lower = math.floor, type, tonumber, string.lower

local M = {}

local BITS = { [0] = resp.ZERO, [1] = resp.ONE }   -- a bit's reply
local BIT_OFFSET = "-ERR bit offset is not an integer or out of range\r\n"
local BIT_VALUE = "-ERR bit is not an integer or out of range\r\n"

-- -- Arguments -------------------------------------------------------------

-- A bit offset as Redis's getBitOffsetFromArgument takes it: an integer
-- (with hash, "#N" is N fields of bits bits), not negative, whose byte is
-- below proto-max-bulk-len. Returns it (a number: below 2^32 by default),
-- or nil. checked_offset takes the integer read (nil if it was not one).
local function checked_offset(v, use_hash, bits)
  if v == nil then return nil end
  if use_hash then v = (v + 0LL) * bits end   -- wraps as Redis's long long does
  if v < 0 or v >= resp.MAX_BULK * 8 then return nil end
  local r = tonumber(v)   -- not a tail call: see server.lua's new_client
  return r
end

local function offset_arg(s, hash, bits)
  local use_hash = hash and bits > 0 and s:sub(1, 1) == "#"
  return checked_offset(parse_int(use_hash and s:sub(2) or s), use_hash, bits)
end

-- -- Counting --------------------------------------------------------------

-- The set bits of a byte (for the ends of a range).
local BYTE_POP = {}
for i = 0, 255 do
  local c, x = 0, i
  while x > 0 do
    c = c + x % 2
    x = floor(x / 2)
  end
  BYTE_POP[i] = c
end

local u64p = ffi.typeof("const uint64_t *")

-- The set bits in bytes p[0..count-1]: eight at a time by the SWAR count
-- on 64-bit words (what redisPopcount does on 32-bit ones without
-- POPCNT; LuaJIT compiles the uint64_t arithmetic to plain 64-bit
-- instructions), then the rest a byte at a time. O(count).
local function popcount(p, count)
  local words = floor(count / 8)
  local total = 0
  if words > 0 then
    local w = ffi.cast(u64p, p)
    local sum = 0ULL
    for j = 0, words - 1 do
      local v = w[j]
      v = v - band(rshift(v, 1), 0x5555555555555555ULL)
      v = band(v, 0x3333333333333333ULL) + band(rshift(v, 2), 0x3333333333333333ULL)
      v = band(v + rshift(v, 4), 0x0F0F0F0F0F0F0F0FULL)
      sum = sum + rshift(v * 0x0101010101010101ULL, 56)
    end
    total = tonumber(sum)
  end
  for i = words * 8, count - 1 do total = total + BYTE_POP[p[i]] end
  return total
end
M.popcount = popcount

-- The value at k for a bit reader: a Lua string (a counter's digits) or
-- a buffer, false when missing, or nil for another type. The caller holds
-- it in a local while it reads through bytes.ptr.
local function bits_at(k)
  local v = get(k)
  if v == nil then return false end
  if type(v) == "number" then return tostring(v) end
  if type(v) == "table" and v.kind ~= "string" then return nil end
  return v
end

-- -- SETBIT, GETBIT ----------------------------------------------------------

-- SETBIT key offset 0|1: the bit's old value. Always a write, as Redis
-- 7.0 counts it (logged, WATCH sees it, the "setbit" event).
reg("setbit", function(_, argv, _, out, n)
  local off = checked_offset(int_arg(argv, 3))
  if not off then return put(out, n, BIT_OFFSET) end
  -- Only "0" and "1" are taken (string2ll refuses "01", "+1", " 1").
  local on = argv[4]
  if on == "1" then on = 1 elseif on == "0" then on = 0 else return put(out, n, BIT_VALUE) end
  local byte = floor(off / 8)
  local b = bytes.writable(argv[2], byte + 1)
  if not b then return put(out, n, WRONGTYPE) end
  -- Without a branch on the bit's value: random bits would take each
  -- way half the time, one of them through a side exit.
  local shift = 7 - off % 8
  local p = bytes.base(b)
  local cur = p[byte]
  local was = band(rshift(cur, shift), 1)
  p[byte] = bor(band(cur, bnot(lshift(1, shift))), lshift(on, shift))
  local ones = b.ones
  if ones >= 0 then b.ones = ones + on - was end
  R.prop = true
  return put(out, n, BITS[was])
end)

reg("getbit", function(_, argv, _, out, n)
  local off = checked_offset(int_arg(argv, 3))
  if not off then return put(out, n, BIT_OFFSET) end
  local v = bits_at(argv[2])
  if v == nil then return put(out, n, WRONGTYPE) end
  if not v then return put(out, n, resp.ZERO) end
  local p, len = bytes.ptr(v)
  local byte = floor(off / 8)
  if byte >= len then return put(out, n, resp.ZERO) end
  return put(out, n, band(p[byte], lshift(1, 7 - off % 8)) ~= 0 and resp.ONE or resp.ZERO)
end)

-- -- Ranges ----------------------------------------------------------------------

-- A BITCOUNT/BITPOS range: start and stop (bytes, or bits with isbit)
-- clamped to a string of len bytes as Redis clamps them. Returns the first
-- and last byte and, in bit mode, the bits to leave out of them (masks of
-- the bits before start in the first byte and after stop in the last).
local function clamp(start, stop, len, isbit)
  local total = isbit and len * 8 or len
  if start < 0 then start = total + start end
  if stop < 0 then stop = total + stop end
  if start < 0 then start = 0 end
  if stop < 0 then stop = 0 end
  if stop >= total then stop = total - 1 end
  local first_mask, last_mask = 0, 0
  if isbit and start <= stop then
    first_mask = band(bnot(lshift(1, 8 - start % 8) - 1), 0xFF)
    last_mask = lshift(1, 7 - stop % 8) - 1
    start, stop = floor(start / 8), floor(stop / 8)
  end
  return start, stop, first_mask, last_mask
end

local function unit_arg(s)
  local u = lower(s)
  if u == "bit" then return true end
  if u == "byte" then return false end
  return nil
end

-- BITCOUNT key [start end [BYTE|BIT]]. As Redis 7.0, a missing key
-- answers 0 before the range is looked at. A range that is the whole of a
-- buffer is counted once and kept (b.ones).
reg("bitcount", function(_, argv, argc, out, n)
  local v = bits_at(argv[2])
  if v == nil then return put(out, n, WRONGTYPE) end
  if not v then return put(out, n, resp.ZERO) end
  local p, len = bytes.ptr(v)
  local start, stop
  if argc == 2 then
    start, stop = 0, len - 1
  elseif argc == 4 or argc == 5 then
    start, stop = parse_int(argv[3]), parse_int(argv[4])
    if start == nil or stop == nil then return put(out, n, NOT_INT) end
    start, stop = tonumber(start), tonumber(stop)
    if start < 0 and stop < 0 and start > stop then return put(out, n, resp.ZERO) end
  else
    return put(out, n, SYNTAX)
  end
  local isbit = false
  if argc == 5 then
    isbit = unit_arg(argv[5])
    if isbit == nil then return put(out, n, SYNTAX) end
  end
  local first, last, fmask, lmask = clamp(start, stop, len, isbit)
  if first > last then return put(out, n, resp.ZERO) end
  if first == 0 and last == len - 1 and fmask == 0 and lmask == 0 then
    if type(v) == "cdata" then
      -- The whole of a buffer: counted once, then kept up by SETBIT.
      local ones = v.ones
      if ones < 0 then
        ones = popcount(p, len)
        v.ones = ones
      end
      return put(out, n, int(ones))
    end
  end
  local count = popcount(p + first, last - first + 1)
  if fmask ~= 0 then count = count - BYTE_POP[band(p[first], fmask)] end
  if lmask ~= 0 then count = count - BYTE_POP[band(p[last], lmask)] end
  return put(out, n, int(count))
end)

-- The first bit equal to bit in bytes p[first..last], the bits of the
-- first byte in fmask and of the last in lmask left out; as a bit
-- position, or nil if there is none.
local function find_bit(p, first, last, fmask, lmask, bit)
  local skip = bit == 1 and 0 or 0xFF
  for i = first, last do
    local c = p[i]
    -- Bits left out never match: set them to what is not looked for.
    if i == first and fmask ~= 0 then c = bit == 1 and band(c, bnot(fmask)) or bor(c, fmask) end
    if i == last and lmask ~= 0 then c = bit == 1 and band(c, bnot(lmask)) or bor(c, lmask) end
    c = band(c, 0xFF)
    if c ~= skip then
      for j = 0, 7 do
        if (band(c, lshift(1, 7 - j)) ~= 0) == (bit == 1) then return i * 8 + j end
      end
    end
  end
  return nil
end

-- BITPOS key bit [start [end [BYTE|BIT]]]: the first bit set (or clear),
-- -1 if none. Looking for a clear bit without an end, the string is taken
-- as padded with zeros: the bit after it.
reg("bitpos", function(_, argv, argc, out, n)
  local bit = parse_int(argv[3])
  if bit == nil then return put(out, n, NOT_INT) end
  if bit ~= 0 and bit ~= 1 then return put(out, n, "-ERR The bit argument must be 1 or 0.\r\n") end
  local v = bits_at(argv[2])
  if v == nil then return put(out, n, WRONGTYPE) end
  if not v then return put(out, n, int(bit == 1 and -1 or 0)) end
  local p, len = bytes.ptr(v)
  local first, last, fmask, lmask, end_given = 0, len - 1, 0, 0, false
  if argc >= 4 and argc <= 6 then
    local start = parse_int(argv[4])
    if start == nil then return put(out, n, NOT_INT) end
    local isbit = false
    if argc == 6 then
      isbit = unit_arg(argv[6])
      if isbit == nil then return put(out, n, SYNTAX) end
    end
    local stop
    if argc >= 5 then
      stop = parse_int(argv[5])
      if stop == nil then return put(out, n, NOT_INT) end
      stop = tonumber(stop)
      end_given = true
    else
      stop = isbit and len * 8 + 7 or len - 1
    end
    first, last, fmask, lmask = clamp(tonumber(start), stop, len, isbit)
  elseif argc ~= 3 then
    return put(out, n, SYNTAX)
  end
  if first > last then return put(out, n, int(-1)) end
  local pos = find_bit(p, first, last, fmask, lmask, bit)
  if pos then return put(out, n, int(pos)) end
  if bit == 1 or end_given then return put(out, n, int(-1)) end
  return put(out, n, int((last + 1) * 8))
end)

-- -- BITOP ------------------------------------------------------------------------

-- BITOP AND|OR|XOR|NOT destkey key [key ...]: the result, as long as the
-- longest input (shorter ones padded with zeros), replaces destkey; an
-- empty one deletes it. The reply is its length.
reg("bitop", function(_, argv, argc, out, n)
  local op = lower(argv[2])
  if op ~= "and" and op ~= "or" and op ~= "xor" and op ~= "not" then return put(out, n, SYNTAX) end
  if op == "not" and argc ~= 4 then
    return put(out, n, "-ERR BITOP NOT must be called with a single source key.\r\n")
  end
  local srcs, ptrs, lens, maxlen = {}, {}, {}, 0
  local nsrc = argc - 3
  for j = 1, nsrc do
    local v = bits_at(argv[j + 3])
    if v == nil then return put(out, n, WRONGTYPE) end
    srcs[j] = v   -- (keeps the bytes ptrs[j] points at alive)
    if v then
      ptrs[j], lens[j] = bytes.ptr(v)
      if lens[j] > maxlen then maxlen = lens[j] end
    else
      lens[j] = 0
    end
  end
  local dest = argv[3]
  if maxlen == 0 then
    if store.del(dest) then
      R.note("g", "del", dest)
      R.prop = true
    end
    return put(out, n, resp.ZERO)
  end
  local b = bytes.new(maxlen)
  local res = b.buf
  for i = 0, maxlen - 1 do
    local x = i < lens[1] and ptrs[1][i] or 0
    if op == "not" then
      x = bnot(x)
    else
      for j = 2, nsrc do
        local y = i < lens[j] and ptrs[j][i] or 0
        if op == "and" then x = band(x, y) elseif op == "or" then x = bor(x, y) else x = bit.bxor(x, y) end
      end
    end
    res[i] = band(x, 0xFF)
  end
  store.set(dest, b)
  R.note("$", "set", dest)
  R.prop = true
  return put(out, n, int(maxlen))
end)

-- -- BITFIELD ----------------------------------------------------------------------

local I64, U64 = ffi.typeof("int64_t"), ffi.typeof("uint64_t")
local INT64_MAX = 0x7fffffffffffffffLL
local UINT64_MAX = 0xffffffffffffffffULL

-- The unsigned value of bits bits at bit offset off of bytes p[0..len-1]
-- (bits past len read as zeros). A uint64_t.
local function get_bits(p, len, off, bits)
  local v = 0ULL
  for _ = 1, bits do
    local byte = floor(off / 8)
    local b = 0
    if byte < len and band(p[byte], lshift(1, 7 - off % 8)) ~= 0 then b = 1 end
    v = bor(lshift(v, 1), b)
    off = off + 1
  end
  return v
end

-- The same as signed: the top bit of the field spread above it.
local function get_signed(p, len, off, bits)
  local v = get_bits(p, len, off, bits)
  if bits < 64 and band(v, lshift(1ULL, bits - 1)) ~= 0 then v = bor(v, lshift(UINT64_MAX, bits)) end
  return I64(v)
end

-- Writes the low bits bits of uv (a 64-bit cdata) at bit offset off.
local function set_bits(p, off, bits, uv)
  uv = U64(uv)
  for j = 0, bits - 1 do
    local byte = floor(off / 8)
    local mask = lshift(1, 7 - off % 8)
    if band(rshift(uv, bits - 1 - j), 1ULL) ~= 0 then
      p[byte] = bor(p[byte], mask)
    else
      p[byte] = band(p[byte], bnot(mask))
    end
    off = off + 1
  end
end

-- Redis's checkSignedBitfieldOverflow: for value + incr in a signed field
-- of bits bits, 0 if it fits, else 1 (above) or -1 (below) and the value
-- to store for WRAP or SAT (nil for FAIL). int64 arithmetic wraps, as
-- Redis's casts do.
local function check_signed(value, incr, bits, ow)
  local max = bits == 64 and INT64_MAX or lshift(1LL, bits - 1) - 1
  local min = -max - 1
  local maxincr = I64(U64(max) - U64(value))
  local minincr = min - value
  local over
  if value > max or (bits ~= 64 and incr > maxincr) or (value >= 0 and incr > 0 and incr > maxincr) then
    over = 1
  elseif value < min or (bits ~= 64 and incr < minincr) or (value < 0 and incr < 0 and incr < minincr) then
    over = -1
  else
    return 0
  end
  if ow == "wrap" then
    local c = U64(value) + U64(incr)
    if bits < 64 then
      local mask = lshift(UINT64_MAX, bits)
      if band(c, lshift(1ULL, bits - 1)) ~= 0 then c = bor(c, mask) else c = band(c, bnot(mask)) end
    end
    return over, I64(c)
  elseif ow == "sat" then
    return over, over == 1 and max or min
  end
  return over
end

-- Redis's checkUnsignedBitfieldOverflow, the same for an unsigned field.
local function check_unsigned(value, incr, bits, ow)
  local max = lshift(1ULL, bits) - 1
  local maxincr = I64(max - value)
  local minincr = I64(-value)
  local over
  if value > max or (incr > 0 and incr > maxincr) then
    over = 1
  elseif incr < 0 and incr < minincr then
    over = -1
  else
    return 0
  end
  if ow == "wrap" then
    return over, band(value + U64(incr), bnot(lshift(UINT64_MAX, bits)))
  elseif ow == "sat" then
    return over, over == 1 and max or 0ULL
  end
  return over
end

local BAD_TYPE = "-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not "
  .. "supported but i64 is.\r\n"

-- A field type: "i1".."i64" or "u1".."u63". Returns signed, bits; or nil.
local function type_arg(s)
  local c = s:sub(1, 1)
  if c ~= "i" and c ~= "u" then return nil end
  local bits = parse_int(s:sub(2))
  if bits == nil or bits < 1 or (c == "i" and bits > 64) or (c == "u" and bits > 63) then return nil end
  return c == "i", tonumber(bits)
end

-- An integer reply for a 64-bit cdata (Redis's addReplyLongLong: an
-- unsigned field, at most 63 bits, fits).
local function int64_reply(out, n, v)
  return put(out, n, ":" .. tostring(I64(v)):gsub("LL$", "") .. "\r\n")
end

-- BITFIELD key [GET type offset] [SET type offset value]
-- [INCRBY type offset increment] [OVERFLOW WRAP|SAT|FAIL] ..., and
-- BITFIELD_RO key [GET type offset ...] (ro). Every operation is parsed
-- before any runs; a write makes room up to the farthest bit written.
local function bitfield(ro)
  return function(_, argv, argc, out, n)
    local ops, ow, readonly, highest = {}, "wrap", true, -1
    local j = 3
    while j <= argc do
      local sub, left = lower(argv[j]), argc - j
      local op
      if sub == "get" and left >= 2 then op = "get"
      elseif sub == "set" and left >= 3 then op = "set"
      elseif sub == "incrby" and left >= 3 then op = "incrby"
      elseif sub == "overflow" and left >= 1 then
        local o = lower(argv[j + 1])
        if o ~= "wrap" and o ~= "sat" and o ~= "fail" then
          return put(out, n, "-ERR Invalid OVERFLOW type specified\r\n")
        end
        ow = o
        j = j + 2
      else
        return put(out, n, SYNTAX)
      end
      if op then
        local signed, bits = type_arg(argv[j + 1])
        if signed == nil then return put(out, n, BAD_TYPE) end
        local off = offset_arg(argv[j + 2], true, bits)
        if not off then return put(out, n, BIT_OFFSET) end
        local arg
        if op ~= "get" then
          readonly = false
          if off + bits - 1 > highest then highest = off + bits - 1 end
          arg = parse_int(argv[j + 3])
          if arg == nil then return put(out, n, NOT_INT) end
          arg = I64(arg)
        end
        ops[#ops + 1] = { op = op, signed = signed, bits = bits, off = off, arg = arg, ow = ow }
        j = j + (op == "get" and 3 or 4)
      end
    end
    local k = argv[2]
    local v, b
    if readonly then
      v = bits_at(k)
      if v == nil then return put(out, n, WRONGTYPE) end
    else
      if ro then return put(out, n, "-ERR BITFIELD_RO only supports the GET subcommand\r\n") end
      b = bytes.writable(k, floor(highest / 8) + 1)
      if not b then return put(out, n, WRONGTYPE) end
      v = b
    end
    n = resp.array(out, n, #ops)
    local changes = 0
    for _, o in ipairs(ops) do
      local p, len
      if v then p, len = bytes.ptr(v) else p, len = nil, 0 end
      if o.op == "get" then
        if o.signed then
          n = int64_reply(out, n, get_signed(p, len, o.off, o.bits))
        else
          n = int64_reply(out, n, get_bits(p, len, o.off, o.bits))
        end
      else
        local old, new, over, limit, ret
        if o.signed then
          old = get_signed(p, len, o.off, o.bits)
          if o.op == "incrby" then
            over, limit = check_signed(old, o.arg, o.bits, o.ow)
            new = over ~= 0 and limit or old + o.arg
            ret = new
          else
            new = o.arg
            over, limit = check_signed(new, 0LL, o.bits, o.ow)
            if over ~= 0 then new = limit end
            ret = old
          end
        else
          old = get_bits(p, len, o.off, o.bits)
          if o.op == "incrby" then
            new = old + U64(o.arg)
            over, limit = check_unsigned(old, o.arg, o.bits, o.ow)
            if over ~= 0 then new = limit end
            ret = new
          else
            new = U64(o.arg)
            over, limit = check_unsigned(new, 0LL, o.bits, o.ow)
            if over ~= 0 then new = limit end
            ret = old
          end
        end
        if over ~= 0 and o.ow == "fail" then
          n = null(out, n)
        else
          n = int64_reply(out, n, ret)
          set_bits(b.buf, o.off, o.bits, new)
        end
        changes = changes + 1
      end
    end
    if changes > 0 then
      b.ones = -1
      R.note("$", "setbit", k)
      R.prop = true
    end
    return n
  end
end
reg("bitfield", bitfield(false))
reg("bitfield_ro", bitfield(true))

return M
