-- 64-bit integers as Redis reads and prints them. Lua numbers are exact
-- up to 2^53; past that the values go through LuaJIT's int64_t cdata, so
-- INCRBY near the int64 limits behaves as Redis does, overflow error
-- included.
local ffi = require "ffi"

local M = {}

local byte, find, tonumber, tostring, format = string.byte, string.find, tonumber, tostring, string.format
local cast = ffi.cast

local I64_MAX = 9223372036854775807LL
local I64_MIN = -9223372036854775807LL - 1
local EXACT = 2 ^ 53
M.MIN = I64_MIN

-- Whether v (from parse) is INT64_MIN, which Redis's getRangeLong...
-- (-LONG_MAX..LONG_MAX) refuses: its negation does not fit.
function M.is_min(v)
  return type(v) ~= "number" and v == I64_MIN
end

local POW10 = {}
for k = 0, 15 do POW10[k] = 10 ^ k end

-- The integer in s as Redis's string2ll accepts it (an optional '-', no
-- '+', no spaces, no leading zeros, within int64), or nil. A Lua number
-- when exact, else an int64_t cdata.
function M.parse(s)
  local len = #s
  if len == 0 or len > 20 then return nil end
  if len <= 14 then
    -- Fast path, compiled by the JIT without a loop and without making a
    -- string (tostring(v) == s cost 40 ns of a --pipe SETBIT's 600): s is
    -- canonical when tonumber reads an integer from it, it is "0" or
    -- starts with 1-9 after an optional '-' ("+1", " 1", "01", "-0",
    -- "0x1" fail), ends in a digit (" 1 "), has no exponent, and the
    -- integer has as many digits as s has characters past its sign: a '.'
    -- or any other character takes the place of a digit ("10.0").
    local v = tonumber(s)
    if not v or v % 1 ~= 0 then return nil end
    local c, k, a = byte(s, 1), len, v
    if c == 45 then c, k, a = byte(s, 2), len - 1, -v end
    if c == 48 then return len == 1 and v or nil end
    if c < 49 or c > 57 then return nil end
    local z = byte(s, len)
    if z < 48 or z > 57 or find(s, "e", 2, true) or find(s, "E", 2, true) then return nil end
    if a < POW10[k - 1] or a >= POW10[k] then return nil end
    return v
  end
  if not find(s, "^%-?[1-9]%d*$") then return nil end
  local neg = byte(s, 1) == 45
  local v = 0LL
  for i = neg and 2 or 1, len do
    local d = byte(s, i) - 48
    -- Accumulate toward the sign so INT64_MIN fits.
    if neg then
      if v < (I64_MIN + d) / 10 then return nil end
      v = v * 10 - d
    else
      if v > (I64_MAX - d) / 10 then return nil end
      v = v * 10 + d
    end
  end
  if v > -EXACT and v < EXACT then return tonumber(v) end
  return v
end

-- What parse(s) returns for s = buf[p .. p + l - 1], without making s
-- when it is up to 15 characters of digits (strtoll reads them where they
-- lie; a string made per request costs more: resp.lazy_argv).
pcall(ffi.cdef, "long long strtoll(const char *s, char **end, int base);")
local strtoll, ends, cstr = ffi.C.strtoll, ffi.new("char *[1]"), ffi.typeof("const char *")
local sub = string.sub

function M.parse_at(buf, p, l)
  if l > 0 and l <= 15 then
    local c = byte(buf, p)
    if c == 45 and l > 1 then c = byte(buf, p + 1) end
    if c >= 49 and c <= 57 then   -- so no sign, blank or leading zero
      local s = cast(cstr, buf) + (p - 1)
      local v = strtoll(s, ends, 10)
      -- Every byte a digit, and no digit after them (the CR of RESP).
      if ends[0] == s + l then
        local r = tonumber(v)   -- not a tail call: see server.lua's new_client
        return r
      end
    end
  end
  return M.parse(sub(buf, p, p + l - 1))
end

-- a + b, or nil on int64 overflow. Either may be a number or an int64.
function M.add(a, b)
  if type(a) == "number" and type(b) == "number" then
    local r = a + b
    if r > -EXACT and r < EXACT then return r end
  end
  a, b = a + 0LL, b + 0LL
  if (b > 0 and a > I64_MAX - b) or (b < 0 and a < I64_MIN - b) then return nil end
  local r = a + b
  if r > -EXACT and r < EXACT then return tonumber(r) end
  return r
end

-- -v, or nil for INT64_MIN (DECRBY's "decrement would overflow").
function M.neg(v)
  if type(v) == "number" then return -v end
  if v == I64_MIN then return nil end
  return -v
end

-- (a * k), k a small positive number; the caller keeps it within int64.
function M.mul(a, k)
  local r = (a + 0LL) * k
  if r > -EXACT and r < EXACT then return tonumber(r) end
  return r
end

-- The decimal text of an integer from parse or add, or of an integral
-- double, which past 2^63 (a deadline of LLONG_MAX once a double) is
-- clamped to int64 as format would not be.
function M.str(v)
  if type(v) == "number" then
    if v > -1e14 and v < 1e14 then return tostring(v) end
    if v >= 2 ^ 63 then return "9223372036854775807" end
    if v <= -2 ^ 63 then return "-9223372036854775808" end
    return format("%d", v)
  end
  return (tostring(v):gsub("LL$", ""))
end

return M
