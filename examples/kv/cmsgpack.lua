-- The cmsgpack library of Redis's scripts (its lua_cmsgpack.c: pack,
-- unpack, unpack_one, unpack_limit), as a shim over Debian's
-- lua-messagepack (MessagePack.lua, scripts/deps.sh). What differs from
-- that module's defaults is set the way lua_cmsgpack encodes: an integral
-- number as the smallest int or uint, any other as a float when a float
-- holds it exactly and as a double otherwise; a table as an array when
-- its keys are exactly 1..n, else as a map; tables nested 16 deep as nil
-- (circular ones end); strings as str types (no bin). Errors are
-- lua_cmsgpack's texts. Loaded by sandbox.lua, which omits cmsgpack if
-- the package is missing.
local mp = require "MessagePack"

local M = {}

local packers = mp.packers
local type, floor, select, pcall = type, math.floor, select, pcall
local concat = table.concat

-- An integral double that fits int64 (lua_cmsgpack's IS_INT64_EQUIVALENT).
local function is_int64(n)
  return n == floor(n) and n >= -9223372036854775808 and n < 9223372036854775808
end

local f32 = require("ffi").new("float[1]")
local function fits_float(n)
  f32[0] = n
  return f32[0] == n or n ~= n
end

-- Integers as lua_cmsgpack: fixnum, then uint8..64 or int8..64.
packers.integer = packers.unsigned

packers.number = function(buffer, n)
  if is_int64(n) then
    packers.integer(buffer, n)
  elseif fits_float(n) then
    packers.float(buffer, n)
  else
    packers.double(buffer, n)
  end
end

mp.set_string("string")

local depth = 0
local MAX_NESTING = 16   -- LUACMSGPACK_MAX_NESTING

packers._table = function(buffer, t)
  if depth >= MAX_NESTING then
    packers["nil"](buffer)
    return
  end
  local count, max, array = 0, 0, true
  for k in pairs(t) do
    if type(k) ~= "number" or k <= 0 or k ~= floor(k) then
      array = false
    elseif k > max then
      max = k
    end
    count = count + 1
  end
  depth = depth + 1
  local ok, err = pcall(function()
    if array and max == count then packers.array(buffer, t, count)
    else packers.map(buffer, t, count) end
  end)
  depth = depth - 1
  if not ok then error(err, 0) end
end

-- Types lua_cmsgpack writes as nil (functions, userdata, threads).
for _, t in ipairs { "function", "userdata", "thread", "cdata" } do
  packers[t] = function(buffer) packers["nil"](buffer) end
end

-- pack(...): every argument packed, one after the other.
function M.pack(...)
  local n = select("#", ...)
  if n == 0 then error("bad argument #0 to 'pack' (MessagePack pack needs input.)", 2) end
  local buffer = {}
  for i = 1, n do
    depth = 0
    packers[type((select(i, ...)))](buffer, (select(i, ...)))
  end
  return concat(buffer)
end

-- The values of s from byte offset (0-based), at most limit of them (0:
-- all); with offset or limit, the offset after them first (-1 at the end).
local function unpack_full(s, limit, offset)
  if type(s) ~= "string" then
    if type(s) == "number" then s = tostring(s)
    else error("bad argument #1 to 'unpack' (string expected, got " .. type(s) .. ")", 0) end
  end
  local len = #s
  if offset < 0 or limit < 0 then
    error(("Invalid request to unpack with offset of %d and limit of %d."):format(offset, len), 0)
  elseif offset > len then
    error(("Start offset %d greater than input length %d."):format(offset, len), 0)
  end
  local all = limit == 0 and offset == 0
  if all then limit = 2147483647 end
  local out, n = {}, 0
  local next_value = mp.unpacker(s:sub(offset + 1))
  local function take()
    local ok, at, v = pcall(next_value)
    if not ok then
      error(tostring(at):find("missing bytes", 1, true) and "Missing bytes in input."
            or "Bad data format in input.", 0)
    end
    return at, v
  end
  while n < limit do
    local at, v = take()
    if at == nil then break end
    n = n + 1
    out[n] = v
  end
  if all then return unpack(out, 1, n) end
  -- The offset after the values taken: where the next one starts, which
  -- the unpacker tells only by reading it (-1 when none is left).
  local at = take()
  return at and offset + at - 1 or -1, unpack(out, 1, n)
end

-- Errors as lua_cmsgpack's (luaL_error: at the caller's line).
local function packn(...)
  return { n = select("#", ...), ... }
end

local function unpack_at(s, limit, offset)
  local r = packn(pcall(unpack_full, s, limit, offset))
  if not r[1] then error(r[2], 3) end
  return r
end

function M.unpack(s)
  local r = unpack_at(s, 0, 0)
  return unpack(r, 2, r.n)
end

function M.unpack_one(s, offset)
  local r = unpack_at(s, 1, tonumber(offset) or 0)
  return unpack(r, 2, r.n)
end

function M.unpack_limit(s, limit, offset)
  local r = unpack_at(s, tonumber(limit) or 0, tonumber(offset) or 0)
  return unpack(r, 2, r.n)
end

M._NAME = "cmsgpack"
M._VERSION = "lua-cmsgpack 0.4.0"
M._COPYRIGHT = "Copyright (C) 2012, Salvatore Sanfilippo"
M._DESCRIPTION = "MessagePack C implementation for Lua"

return M
