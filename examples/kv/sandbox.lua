-- The environment Lua scripts and functions run in (scripting.lua,
-- functions.lua): Redis 7.0's globals and nothing else, read-only as
-- Redis makes them. Scripts run in the server's own LuaJIT, so the
-- sandbox is what keeps them from kv's state and cohost's modules:
--
-- * Each script (each EVAL body, each function library) gets a fresh
--   environment: an empty proxy whose reads go to a table of its own
--   holding Redis's globals (the libraries, redis, the safe builtins)
--   and whose writes fail, as Redis's global protection does ("Script
--   attempted to access nonexistent global variable", "Attempt to modify
--   a readonly table"). No `require`, `io`, `os`, `debug`, `ffi`, `jit`,
--   `package`, `getfenv`/`setfenv`, `dofile`, `print`.
-- * The libraries are copies (math gets Redis's own random), shown
--   through read-only proxies; rawset, setmetatable, rawget, next and
--   pairs see through the proxies as Redis's read-only tables behave.
--   getmetatable("") gives a read-only view of the string metatable, so
--   the real one (every string's, kv's included) cannot be touched.
-- * load and loadstring compile text only, in the calling script's
--   environment: bytecode (string.dump's) is refused, as Redis refuses it.
-- * Every function compiled for a script is kept out of the JIT
--   (jit.off, recursively): compiled traces never run debug hooks, and
--   the busy-script limit is a count hook (scripting.lua).
-- * collectgarbage may only count, collect and step: the heap is the
--   server's ("stop" would stop kv's collector).
local ffi = require "ffi"
local bit = require "bit"

local M = {}

local RO = "Attempt to modify a readonly table"

-- proxy -> the table it shows; weak, as proxies die with their scripts.
local real_of = setmetatable({}, { __mode = "k" })

-- The functions handed to scripts that are kv's own Lua code (Redis's
-- are C functions): string.dump refuses them. (The error handler and the
-- busy-script hook tell kv's code from a script's by its source.)
local internal = setmetatable({}, { __mode = "k" })

-- f, marked as one of kv's own (returns f).
local function own(f)
  internal[f] = true
  return f
end
M.own = own

local function ro_write()
  error(RO, 2)
end
own(ro_write)

-- A read-only view of t.
local function readonly(t)
  local p = setmetatable({}, { __index = t, __newindex = ro_write, __metatable = false })
  real_of[p] = t
  return p
end
M.readonly = readonly

-- Whether t is one of the read-only views.
function M.is_readonly(t)
  return real_of[t] ~= nil
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- -- math.random ----------------------------------------------------------------

-- Redis's math.random: rand48 (its rand.c), the same sequence on every
-- machine, one state for all scripts and functions as in Redis (seeded
-- at start, changed only by math.randomseed).
local u64 = ffi.typeof("uint64_t")
local A, C, MASK48 = ffi.new(u64, 0x5DEECE66D), ffi.new(u64, 0xB), ffi.new(u64, 0xFFFFFFFFFFFF)
local X0 = ffi.new(u64, 0x1234ABCD330E)
local x48 = X0
local LRAND_MAX = 2147483647   -- REDIS_LRAND48_MAX (INT32_MAX)

local function lrand48()
  x48 = bit.band(A * x48 + C, MASK48)
  return tonumber(bit.rshift(x48, 17))
end

local floor = math.floor

-- luaL_checkint: a number (or numeric string), truncated.
local function checkint(v, i, fname)
  local n = tonumber(v)
  if not n then
    error(("bad argument #%d to '%s' (number expected, got %s)"):format(i, fname,
          v == nil and "no value" or type(v)), 3)
  end
  return n >= 0 and floor(n) or -floor(-n)
end

local function random(...)
  local r = (lrand48() % LRAND_MAX) / LRAND_MAX
  local argc = select("#", ...)
  if argc == 0 then return r end
  if argc == 1 then
    local u = checkint((...), 1, "random")
    if u < 1 then error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * u) + 1
  end
  if argc == 2 then
    local l, u = checkint((...), 1, "random"), checkint(select(2, ...), 2, "random")
    if l > u then error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (u - l + 1)) + l
  end
  error("wrong number of arguments", 2)
end

local function randomseed(seed)
  local s = checkint(seed, 1, "randomseed") % 4294967296
  -- SEED(X0, LOW(seedval), HIGH(seedval)): the high 32 bits are the seed.
  x48 = bit.bor(bit.lshift(ffi.new(u64, s), 16), 0x330E)
end

-- -- The libraries --------------------------------------------------------------

local math_lib = copy(math)
math_lib.random, math_lib.randomseed = own(random), own(randomseed)

-- cjson: an instance of its own (Debian's lua-cjson under cohost's
-- wrapper), so a script's settings (encode_max_depth...) stay in scripts.
local cjson_lib = copy(require("cjson").new())

-- string.dump refuses kv's own functions (redis.call and the other
-- Lua ones scripts can reach), as it refuses Redis's C ones.
local string_lib = copy(string)
local raw_dump = string.dump
string_lib.dump = own(function(f, ...)
  if type(f) == "function" then
    local info = debug.getinfo(f, "S")
    if info.what == "C" or internal[f] or (info.source:byte(1) == 64 and info.source ~= "@user_script"
        and info.source ~= "@user_function") then
      error("unable to dump given function", 2)
    end
  end
  return raw_dump(f, ...)
end)

local libs = {
  string = readonly(string_lib),
  table = readonly(copy(table)),
  math = readonly(math_lib),
  coroutine = readonly(copy(coroutine)),
  bit = readonly(copy(bit)),
  cjson = readonly(cjson_lib),
}
-- cmsgpack when Debian's lua-messagepack is there (scripts/deps.sh).
local ok_mp, cmsgpack = pcall(require, "kv.cmsgpack")
if ok_mp then
  libs.cmsgpack = readonly(cmsgpack)
else
  M.no_cmsgpack = cmsgpack
end
M.libs = libs

-- getmetatable(""): a read-only view of a table holding __index = the
-- scripts' string (Redis's is the real metatable, made read-only).
local string_mt = readonly({ __index = libs.string })

-- -- Builtins -------------------------------------------------------------------

-- The environment load and loadstring compile into: the running script's
-- (set by scripting.lua around each run and load).
M.current_env = nil

local jit_off = jit.off
local raw_load = load

-- Compiles text (never bytecode) in env; the function runs interpreted.
-- Returns f, or nil and the error.
local byte, sub = string.byte, string.sub
local function compile(chunk, name, env)
  -- A name that would read as a file ("@x.lua") is shown as given but
  -- not taken for kv's own code, where the busy limit never strikes.
  if type(name) == "string" and byte(name, 1) == 64 and name ~= "@user_script"
      and name ~= "@user_function" then
    name = "=" .. sub(name, 2)
  end
  local f, err = raw_load(chunk, name, "t", env)
  if not f then return nil, err end
  jit_off(f, true)
  return f
end
M.compile = compile

local builtins = {
  assert = assert, error = error, ipairs = ipairs, rawequal = rawequal, select = select,
  tonumber = tonumber, tostring = tostring, type = type, unpack = unpack, xpcall = xpcall,
  gcinfo = gcinfo, _VERSION = _VERSION,
}

-- Redis's pcall: an error table { err = "..." } (what redis.call raises)
-- comes back as its message.
builtins.pcall = own(function(f, ...)
  local function pass(ok, ...)
    if ok then return true, ... end
    local e = ...
    if type(e) == "table" and type(rawget(e, "err")) == "string" then return false, e.err end
    return false, e
  end
  return pass(pcall(f, ...))
end)

builtins.rawset = own(function(t, k, v)
  if real_of[t] then error(RO, 0) end
  return rawset(t, k, v)
end)

builtins.rawget = own(function(t, k)
  return rawget(real_of[t] or t, k)
end)

local raw_next = next
local function next_(t, k)
  return raw_next(real_of[t] or t, k)
end
builtins.next = own(next_)

builtins.pairs = own(function(t)
  local r = real_of[t]
  if r then return raw_next, r, nil end
  return pairs(t)
end)

builtins.getmetatable = own(function(v)
  if type(v) == "string" then return string_mt end
  if real_of[v] then return nil end
  return getmetatable(v)
end)

builtins.setmetatable = own(function(t, mt)
  if real_of[t] then error(RO, 0) end
  return setmetatable(t, mt)
end)

builtins.loadstring = own(function(s, name)
  if type(s) ~= "string" then s = tostring(s) end
  return compile(s, name or s, M.current_env)
end)

-- load takes a reader function only, as Lua 5.1's: its pieces are
-- joined, then compiled as text.
builtins.load = own(function(chunk, name)
  if type(chunk) ~= "function" then
    error("bad argument #1 to 'load' (function expected, got " .. (chunk == nil and "no value" or type(chunk))
          .. ")", 2)
  end
  local parts = {}
  while true do
    local p = chunk()
    if p == nil or p == "" then break end
    if type(p) ~= "string" then return nil, "reader function must return a string" end
    parts[#parts + 1] = p
  end
  return compile(table.concat(parts), name or "=(load)", M.current_env)
end)

local COLLECT_OK = { count = true, collect = true, step = true }
builtins.collectgarbage = own(function(opt, arg)
  opt = opt or "collect"
  if not COLLECT_OK[opt] then
    error(("collectgarbage('%s') is not allowed: scripts share the server's heap"):format(
          tostring(opt)), 2)
  end
  return collectgarbage(opt, arg)
end)

-- -- Environments ---------------------------------------------------------------

local function missing(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
own(missing)

-- The globals of a kind of script: the builtins, the libraries and
-- extra (redis, ...), as a table to copy for each script.
function M.base(extra)
  local b = copy(builtins)
  for k, v in pairs(libs) do b[k] = v end
  for k, v in pairs(extra) do b[k] = v end
  return b
end

-- A fresh environment of base's globals: returns env (what the script
-- sees, _G included), its globals table G (kv sets KEYS and ARGV there
-- with rawset) and env's metatable (functions.lua points its __index
-- elsewhere while a library loads).
function M.env(base)
  local G = copy(base)
  local mt = { __index = G, __newindex = ro_write, __metatable = false }
  local env = setmetatable({}, mt)
  real_of[env] = G
  G._G = env
  setmetatable(G, { __index = missing })
  return env, G, mt
end

-- The globals a library sees while it loads (redis: register_function,
-- log and the versions), as an environment's globals table.
function M.load_globals(redis_api)
  local G = { redis = redis_api }
  setmetatable(G, { __index = missing })
  return G
end

return M
