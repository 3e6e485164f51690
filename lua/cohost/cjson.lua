-- cohost.cjson: what `require "cjson"` and `require "cjson.safe"` give
-- inside cohost (main.c preloads both names with this module's two
-- faces). Each is Debian's lua-cjson C module, loaded from package.cpath
-- as require would load it, with two changes: encode also writes a table
-- marked as an array (http.array, cjson.empty_array_mt as in OpenResty's
-- lua-cjson, or a metatable with __jsonarray as cohost.postgres's rows)
-- as [] when it is empty, and a 64-bit integer cdata (an int8 past 2^53
-- from cohost.postgres, a 64-bit field from cohost.protobuf, 12345LL) as
-- its exact digits, as a value or as an object key (a protobuf map's), where
-- cjson refuses it. Debian's lua-cjson
-- (2.1.0) has neither the mark nor cjson.empty_array: it writes an empty
-- table as {}. decode, the settings functions, null and new() are the C
-- module's own (new() gives an instance wrapped the same way).
-- docs/lua-api.md is the user's reference.
local M = {}

local find, gsub, next, pairs, type = string.find, string.gsub, next, pairs, type
local getmetatable, setmetatable, rawget, pcall = getmetatable, setmetatable, rawget, pcall

-- The C module's two openers, from the .so require "cjson" would load
-- (one file holds both: cjson.safe comes from it by its all-in-one name).
local so = package.searchpath("cjson", package.cpath)
if not so then error("module 'cjson' not found in package.cpath: " .. package.cpath, 0) end
local open_cjson = assert(package.loadlib(so, "luaopen_cjson"))
local open_safe = assert(package.loadlib(so, "luaopen_cjson_safe"))

local array_mt = {}
M.array_mt = array_mt
local marked = false   -- no walk at all until this worker marks an array

-- array([t]) -> t (or a new table) marked as an array.
function M.array(t)
  marked = true
  return setmetatable(t or {}, array_mt)
end

-- Marked empty arrays are swapped for a placeholder string before
-- encoding (in copies of the tables on their path: the caller's value is
-- not changed) and the placeholder's encoding for [] after; its random
-- part makes it one no data can spell. A 64-bit integer cdata is swapped
-- for NUMBER .. its digits, and that string's encoding for the bare digits.
local PLACEHOLDER = "\0cohost-empty-array-"
  .. require("cohost.core.crypto").random_bytes(12):gsub(".", function(c) return ("%02x"):format(c:byte()) end)
  .. "\0"
local ENCODED = open_cjson().encode(PLACEHOLDER):gsub("%p", "%%%0")
local NUMBER = PLACEHOLDER .. "n"
local NUMBER_ENCODED = open_cjson().encode(NUMBER):sub(1, -2):gsub("%p", "%%%0") .. "(%-?%d+)\""

local ffi, int64_t, uint64_t
local function int64_digits(v)
  if not ffi then
    ffi = require "ffi"
    int64_t, uint64_t = ffi.typeof("int64_t"), ffi.typeof("uint64_t")
  end
  if ffi.istype(int64_t, v) or ffi.istype(uint64_t, v) then
    return (gsub(tostring(v), "U?LL$", ""))
  end
end

-- v with marked empty arrays and 64-bit integer cdata replaced; true if
-- there were any. Depth is bounded as cjson's own (1000): deeper values
-- are left as they are, for cjson to refuse.
local function swap_arrays(v, depth)
  local t = type(v)
  if t == "cdata" then
    local digits = int64_digits(v)
    if digits then return NUMBER .. digits, true end
    return v, false
  end
  if t ~= "table" or depth > 1000 then return v, false end
  local mt = getmetatable(v)
  if mt and (mt == array_mt or rawget(mt, "__jsonarray")) and next(v) == nil then
    return PLACEHOLDER, true
  end
  local copy
  for k, x in pairs(v) do
    local nx, changed = swap_arrays(x, depth + 1)
    local digits = type(k) == "cdata" and int64_digits(k)   -- a key as its digits
    if digits then changed = true end
    if changed then
      if not copy then
        copy = {}
        for k2, x2 in pairs(v) do copy[k2] = x2 end
      end
      if digits then
        copy[k] = nil
        copy[digits] = nx
      else
        copy[k] = nx
      end
    end
  end
  return copy or v, copy ~= nil
end

-- cjson's refusal of a cdata value or key, raised (cjson) or returned
-- (cjson.safe).
local function refused_cdata(err)
  return type(err) == "string"
    and (find(err, "cdata", 1, true) ~= nil or find(err, "table key must be", 1, true) ~= nil)
end

-- The module table for C instance c: c's functions, encode wrapped.
-- Reading empty_array_mt marks (the app means to use it).
local function wrap(c)
  local w = {}
  for k, v in pairs(c) do w[k] = v end
  local encode, new = c.encode, c.new
  function w.encode(v)
    local sv, swapped = v, false
    if marked then sv, swapped = swap_arrays(v, 1) end
    -- Under pcall cjson's error carries no position (its caller is C):
    -- raised again at the caller's, as a direct call would place it.
    -- cjson.safe returns nil, err instead.
    local ok, s, err = pcall(encode, sv)
    if (not ok and refused_cdata(s)) or (ok and not s and refused_cdata(err)) then
      sv, swapped = swap_arrays(v, 1)   -- an int64 cdata: the slow path
      ok, s, err = pcall(encode, sv)
    end
    if not ok then error(s, 2) end
    if not s then return nil, err end
    if swapped then s = gsub(gsub(s, ENCODED, "[]"), NUMBER_ENCODED, "%1") end
    return s
  end
  function w.new() return wrap(new()) end
  return setmetatable(w, {
    __index = function(_, k)
      if k == "empty_array_mt" then
        marked = true
        return array_mt
      end
    end,
  })
end

M.cjson = wrap(open_cjson())
M.safe = wrap(open_safe())

return M
