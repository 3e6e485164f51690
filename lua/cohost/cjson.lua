-- cohost.cjson: what `require "cjson"` and `require "cjson.safe"` give
-- inside cohost (main.c preloads both names with this module's two
-- faces). Each is Debian's lua-cjson C module, loaded from package.cpath
-- as require would load it, with one change: encode also writes a table
-- marked as an array (http.array, or cjson.empty_array_mt as in
-- OpenResty's lua-cjson) as [] when it is empty. Debian's lua-cjson
-- (2.1.0) has neither the mark nor cjson.empty_array: it writes an empty
-- table as {}. And one addition: a 64-bit integer cdata (int64_t or
-- uint64_t, as cohost.protobuf and cohost.postgres give values past
-- +-2^53) is written as its exact digits, as a value or as an object key;
-- the C module refuses every cdata. decode, the settings functions, null
-- and new() are the C module's own (new() gives an instance wrapped the
-- same way).
-- docs/lua-api.md is the user's reference.
local ffi = require "ffi"

local M = {}

local gsub, next, pairs, type, tostring = string.gsub, next, pairs, type, tostring
local getmetatable, setmetatable, pcall, error = getmetatable, setmetatable, pcall, error
local istype = ffi.istype
local int64_t, uint64_t = ffi.typeof("int64_t"), ffi.typeof("uint64_t")

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

-- Marked empty arrays and 64-bit integers are swapped for placeholder
-- strings before encoding (in copies of the tables on their path: the
-- caller's value is not changed), and the placeholders' encodings for []
-- and the digits after; their random part makes them ones no data can
-- spell. An integer placeholder is INT, the digits, then "\0".
local RANDOM = require("cohost.core.crypto").random_bytes(12):gsub(".", function(c)
  return ("%02x"):format(c:byte())
end)
local PLACEHOLDER = "\0cohost-empty-array-" .. RANDOM .. "\0"
local ENCODED = open_cjson().encode(PLACEHOLDER):gsub("%p", "%%%0")
local INT = "\0cohost-int64-" .. RANDOM .. "-"
local INT_ENCODED = open_cjson().encode(INT .. "0\0"):gsub("0(\\u0000\")$", "\0%1")
local INT_PATTERN = INT_ENCODED:gsub("%p", "%%%0"):gsub("%z", "(%%-?%%d+)")

local function is_int64(v)
  return type(v) == "cdata" and (istype(int64_t, v) or istype(uint64_t, v))
end

-- The exact digits of an int64_t or uint64_t ("-5", not "-5LL").
local function digits(v)
  return (gsub(tostring(v), "[LU]+$", ""))
end

-- v with marked empty arrays and 64-bit integers (values and keys)
-- replaced; true if there were any. Depth is bounded as cjson's own
-- (1000): deeper values are left as they are, for cjson to refuse.
local function swap(v, depth)
  if is_int64(v) then return INT .. digits(v) .. "\0", true end
  if type(v) ~= "table" or depth > 1000 then return v, false end
  if getmetatable(v) == array_mt and next(v) == nil then return PLACEHOLDER, true end
  local copy
  for k, x in pairs(v) do
    local nx, changed = swap(x, depth + 1)
    local nk = k
    if is_int64(k) then nk, changed = digits(k), true end
    if changed then
      if not copy then
        copy = {}
        for k2, x2 in pairs(v) do copy[k2] = x2 end
      end
      if nk ~= k then copy[k] = nil end
      copy[nk] = nx
    end
  end
  return copy or v, copy ~= nil
end

-- The module table for C instance c: c's functions, encode wrapped.
-- Reading empty_array_mt marks (the app means to use it).
local function wrap(c)
  local w = {}
  for k, v in pairs(c) do w[k] = v end
  local encode, new = c.encode, c.new
  function w.encode(v)
    local sv, swapped = v, false
    if marked then sv, swapped = swap(v, 1) end
    -- Under pcall cjson's error carries no position (its caller is C):
    -- raised again at the caller's, as a direct call would place it.
    -- cjson.safe returns nil, err instead.
    local ok, s, err = pcall(encode, sv)
    -- A 64-bit integer is found by the C module's refusal ("Cannot
    -- serialise cdata", or a cdata key): only then is the value walked.
    if not swapped and (not ok or s == nil) then
      sv, swapped = swap(v, 1)
      if swapped then ok, s, err = pcall(encode, sv) end
    end
    if not ok then error(s, 2) end
    if not s then return nil, err end
    if swapped then s = gsub(gsub(s, ENCODED, "[]"), INT_PATTERN, "%1") end
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
