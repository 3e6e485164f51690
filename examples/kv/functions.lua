-- Redis 7 functions: FUNCTION LOAD, LIST, DELETE, FLUSH, DUMP, RESTORE,
-- STATS, KILL, HELP, and FCALL, FCALL_RO, with Redis 7.0's rules (its
-- functions.c, function_lua.c). A library is "#!lua name=<lib>" and code
-- that calls redis.register_function while it loads, seeing only redis
-- (register_function, log, the versions) then, and all of a script's
-- globals when its functions run (scripting.lua runs them; sandbox.lua
-- makes the environment, one per library).
--
-- Functions are data: FUNCTION LOAD, DELETE, FLUSH and RESTORE are
-- logged as they came, and a log rewrite starts with a FUNCTION LOAD of
-- every library (snapshot.lua's head), so they survive a restart (Redis
-- keeps them in its RDB and AOF the same way). FLUSHALL leaves them, as
-- in Redis. DUMP's payload is Redis's (RDB opcode 245 and the library's
-- code, RDB version 10, CRC-64 Jones): RESTORE takes Redis's payloads,
-- LZF-compressed strings included, and Redis takes kv's (written
-- uncompressed).
local ffi = require "ffi"
local bit = require "bit"
local R = require "kv.registry"
local resp = require "kv.resp"
local ints = require "kv.ints"
local monitor = require "kv.monitor"
local store = require "kv.store"
local snapshot = require "kv.snapshot"
local sandbox = require "kv.sandbox"
local scripting = require "kv.scripting"

local put = resp.put
local byte, sub, find, char, lower, format, concat = string.byte, string.sub, string.find,
  string.char, string.lower, string.format, table.concat
local type, tostring, select, next, rawget = type, tostring, select, next, rawget
local own, error_table = sandbox.own, scripting.error_table

local M = {}

local LOAD_TIMEOUT_MS = 500   -- Redis's LOAD_TIMEOUT_MS: a library's top level runs this long at most

-- -- Libraries ------------------------------------------------------------------

-- A set of libraries: libs name -> library; fns lower-case function
-- name -> function (names are case-insensitive across libraries, as
-- Redis's dict of functions). A library is { name, code, fns (name ->
-- function, as registered), env }; a function { name, fn, flags (a
-- set), desc, lib }.
local function new_ctx()
  return { libs = {}, fns = {} }
end

local cur = new_ctx()

local function sorted_names(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local function unlink(ctx, lib)
  for name in pairs(lib.fns) do ctx.fns[lower(name)] = nil end
  ctx.libs[lib.name] = nil
end

local function link(ctx, lib)
  for name, f in pairs(lib.fns) do ctx.fns[lower(name)] = f end
  ctx.libs[lib.name] = lib
end

-- Letters, digits and underscores, at least one (functionsVerifyName).
local NAME_ERR = "Library names can only contain letters, numbers, or underscores(_) and must be at "
  .. "least one character long"
local function good_name(s)
  return #s > 0 and not find(s, "[^%w_]")
end

-- -- Loading a library -----------------------------------------------------------

local loading = nil   -- the library whose top level runs now

-- The flags of a register_function flags table, as a set; nil if one is
-- unknown or not a string.
local function read_flags(t)
  local flags, j = {}, 1
  while true do
    local v = t[j]
    if v == nil then break end
    if type(v) ~= "string" and type(v) ~= "number" then return nil end
    v = lower(tostring(v))
    if not scripting.FLAG_SET[v] then return nil end
    flags[v] = true
    j = j + 1
  end
  return flags
end

local function fail(text)
  error(error_table(text), 0)
end

-- redis.register_function(name, callback) or
-- redis.register_function{ function_name, callback, flags, description }.
local function register_function(...)
  local lib = loading
  if not lib then fail("redis.register_function can only be called on FUNCTION LOAD command") end
  local argc = select("#", ...)
  if argc < 1 or argc > 2 then fail("wrong number of arguments to redis.register_function") end
  local name, fn, flags, desc
  if argc == 1 then
    local t = ...
    if type(t) ~= "table" or sandbox.is_readonly(t) then
      fail("calling redis.register_function with a single argument is only applicable to Lua "
           .. "table (representing named arguments).")
    end
    for k, v in next, t do
      if type(k) ~= "string" and type(k) ~= "number" then
        fail("named argument key given to redis.register_function is not a string")
      end
      local key = lower(tostring(k))
      if key == "function_name" then
        if type(v) ~= "string" and type(v) ~= "number" then
          fail("function_name argument given to redis.register_function must be a string")
        end
        name = tostring(v)
      elseif key == "description" then
        if type(v) ~= "string" and type(v) ~= "number" then
          fail("description argument given to redis.register_function must be a string")
        end
        desc = tostring(v)
      elseif key == "callback" then
        if type(v) ~= "function" then
          fail("callback argument given to redis.register_function must be a function")
        end
        fn = v
      elseif key == "flags" then
        if type(v) ~= "table" then
          fail("flags argument to redis.register_function must be a table representing function flags")
        end
        flags = read_flags(v)
        if not flags then fail("unknown flag given") end
      else
        fail("unknown argument given to redis.register_function")
      end
    end
    if not name then fail("redis.register_function must get a function name argument") end
    if not fn then fail("redis.register_function must get a callback argument") end
  else
    name, fn = ...
    if type(name) ~= "string" and type(name) ~= "number" then
      fail("first argument to redis.register_function must be a string")
    end
    if type(fn) ~= "function" then fail("second argument to redis.register_function must be a function") end
    name = tostring(name)
  end
  if not good_name(name) then fail(NAME_ERR) end
  if lib.fns[name] then fail("Function already exists in the library") end
  lib.fns[name] = { name = name, fn = fn, flags = flags or {}, desc = desc, lib = lib }
end
own(register_function)

-- redis while a library loads: register_function, log and the versions;
-- anything else is a missing global, as in Redis.
local load_api = { register_function = register_function }
for _, k in ipairs { "log", "LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING", "REDIS_VERSION",
                     "REDIS_VERSION_NUM" } do
  load_api[k] = scripting.api[k]
end
setmetatable(load_api, { __index = function(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end })
local load_globals = sandbox.load_globals(sandbox.readonly(load_api))

-- Redis's functionExtractLibMetaData: engine, name and the code after
-- the "#!" line (its line feed kept); or nil and the error text.
local function metadata(payload)
  if sub(payload, 1, 2) ~= "#!" then return nil, "Missing library metadata" end
  local e = find(payload, "\n", 1, true)
  if not e then return nil, "Invalid library metadata" end
  local parts = {}
  local argc = resp.parse(sub(payload, 1, e), 1, e, parts)
  if not argc or argc == 0 then return nil, "Invalid library metadata" end
  local engine, name = sub(parts[1], 3), nil
  for i = 2, argc do
    local p = parts[i]
    if lower(sub(p, 1, 5)) == "name=" then
      if name then return nil, "Invalid metadata value, name argument was given multiple times" end
      name = sub(p, 6)
    else
      return nil, "Invalid metadata value given: " .. p
    end
  end
  if not name then return nil, "Library name was not given" end
  return { engine = engine, name = name, code = sub(payload, e) }
end

-- Compiles and runs library payload into ctx (replacing one of the same
-- name if replace), the top level limited to timeout_ms (0: none).
-- Returns the library's name, or nil and the error text (Redis's
-- functionsCreateWithLibraryCtx).
local function create(ctx, payload, replace, timeout_ms)
  local md, err = metadata(payload)
  if not md then return nil, err end
  if not good_name(md.name) then return nil, NAME_ERR end
  if lower(md.engine) ~= "lua" then return nil, "Engine '" .. md.engine .. "' not found" end
  local old = ctx.libs[md.name]
  if old and not replace then return nil, "Library '" .. md.name .. "' already exists" end
  local env, G, mt = sandbox.env(scripting.function_base)
  local lib = { name = md.name, code = payload, fns = {}, env = env }
  mt.__index = load_globals
  local chunk, cerr = sandbox.compile(md.code, "@user_function", env)
  if not chunk then
    mt.__index = G
    return nil, "Error compiling function: " .. cerr
  end
  -- The top level runs as a script would: atomically, sandboxed, limited.
  loading = lib
  sandbox.current_env = env
  local ok, e = scripting.load_limited(timeout_ms, md.name, chunk)
  loading = nil
  sandbox.current_env = nil
  mt.__index = G
  if not ok then
    local msg
    if type(e) == "table" and not sandbox.is_readonly(e) then
      msg = rawget(e, "err")
      if type(msg) ~= "string" and type(msg) ~= "number" then msg = "unknown error" end
    else
      msg = "ERR " .. tostring(e)
    end
    return nil, "Error registering functions: " .. tostring(msg)
  end
  if next(lib.fns) == nil then return nil, "No functions registered" end
  if old then unlink(ctx, old) end
  for name in pairs(lib.fns) do
    if ctx.fns[lower(name)] then
      if old then link(ctx, old) end
      return nil, "Function " .. name .. " already exists"
    end
  end
  link(ctx, lib)
  return lib.name
end

-- -- DUMP's payload ---------------------------------------------------------------

local RDB_VERSION = 10
local OPCODE_FUNCTION2, OPCODE_FUNCTION = 245, 246   -- RDB_OPCODE_FUNCTION2, and 7.0 rc1/rc2's

-- CRC-64 Jones (reflected, as Redis's crc64.c): crc64(0, "123456789") is
-- 0xe9c6d914c4b8d9ca. A table of 256, one step per byte.
local u64 = ffi.typeof("uint64_t")
local CRC_POLY = ffi.new(u64, 0x95AC9329ULL * 0x100000000ULL + 0xAC4BC9B5ULL)
local crc_table = {}
for i = 0, 255 do
  local c = ffi.new(u64, i)
  for _ = 1, 8 do
    if bit.band(c, 1ULL) ~= 0ULL then c = bit.bxor(bit.rshift(c, 1), CRC_POLY)
    else c = bit.rshift(c, 1) end
  end
  crc_table[i] = c
end

local function crc64(s, len)
  local crc = ffi.new(u64, 0)
  for i = 1, len do
    crc = bit.bxor(crc_table[tonumber(bit.band(bit.bxor(crc, byte(s, i)), 0xFFULL))], bit.rshift(crc, 8))
  end
  return crc
end
M.crc64 = crc64

-- The 8 bytes of v, least significant first.
local function le64(v)
  local t = {}
  for i = 1, 8 do
    t[i] = char(tonumber(bit.band(v, 0xFFULL)))
    v = bit.rshift(v, 8)
  end
  return concat(t)
end

-- An RDB length (rdbSaveLen).
local function rdb_len(l)
  if l < 64 then return char(l) end
  if l < 16384 then return char(0x40 + math.floor(l / 256), l % 256) end
  if l <= 4294967295 then
    return char(0x80, math.floor(l / 16777216) % 256, math.floor(l / 65536) % 256,
                math.floor(l / 256) % 256, l % 256)
  end
  error("kv: a library of 4 GB")
end

local function dump(ctx)
  local t = {}
  for _, name in ipairs(sorted_names(ctx.libs)) do
    local code = ctx.libs[name].code
    t[#t + 1] = char(OPCODE_FUNCTION2) .. rdb_len(#code) .. code
  end
  t[#t + 1] = char(RDB_VERSION % 256, math.floor(RDB_VERSION / 256))
  local body = concat(t)
  return body .. le64(crc64(body, #body))
end

-- LZF decompression (Redis's lzf_d.c): n bytes from data, or nil.
local function lzf(data, n)
  local out, o, i, len = {}, 0, 1, #data
  while i <= len do
    local ctrl = byte(data, i)
    i = i + 1
    if ctrl < 32 then                          -- a literal run of ctrl + 1 bytes
      for _ = 0, ctrl do
        if i > len then return nil end
        o = o + 1
        out[o] = byte(data, i)
        i = i + 1
      end
    else                                       -- a back reference
      local l = bit.rshift(ctrl, 5)
      if l == 7 then
        if i > len then return nil end
        l = l + byte(data, i)
        i = i + 1
      end
      if i > len then return nil end
      local ref = o - bit.lshift(bit.band(ctrl, 0x1F), 8) - byte(data, i)
      i = i + 1
      if ref < 1 then return nil end
      for k = 0, l + 1 do
        o = o + 1
        out[o] = out[ref + k]
      end
    end
    if o > n then return nil end
  end
  if o ~= n then return nil end
  local parts = {}
  for j = 1, o, 4096 do parts[#parts + 1] = char(unpack(out, j, math.min(j + 4095, o))) end
  return concat(parts)
end

-- Reads an RDB length at s[i]: len, next, or len, next, true for a
-- special encoding (its type in len); nil past the end.
local function read_len(s, i, stop)
  if i > stop then return nil end
  local b = byte(s, i)
  local kind = bit.rshift(b, 6)
  if kind == 0 then return bit.band(b, 63), i + 1 end
  if kind == 1 then
    if i + 1 > stop then return nil end
    return bit.band(b, 63) * 256 + byte(s, i + 1), i + 2
  end
  if kind == 3 then return bit.band(b, 63), i + 1, true end
  local n = b == 0x80 and 4 or b == 0x81 and 8 or nil
  if not n or i + n > stop then return nil end
  local v = 0
  for k = 1, n do v = v * 256 + byte(s, i + k) end
  return v, i + 1 + n
end

-- Reads an RDB string at s[i]: the string, next; nil if it is bad.
local function read_string(s, i, stop)
  local l, nx, special = read_len(s, i, stop)
  if not l then return nil end
  if special then
    if l <= 2 then                             -- an integer, 1, 2 or 4 bytes, little-endian
      local size = l == 0 and 1 or l == 1 and 2 or 4
      if nx + size - 1 > stop then return nil end
      local v = 0
      for k = size - 1, 0, -1 do v = v * 256 + byte(s, nx + k) end
      if v >= 2 ^ (size * 8 - 1) then v = v - 2 ^ (size * 8) end
      return ints.str(v), nx + size
    elseif l == 3 then                         -- LZF: compressed length, length, data
      local clen, n
      clen, nx = read_len(s, nx, stop)
      if not clen then return nil end
      n, nx = read_len(s, nx, stop)
      if not n or nx + clen - 1 > stop then return nil end
      local v = lzf(sub(s, nx, nx + clen - 1), n)
      if not v then return nil end
      return v, nx + clen
    end
    return nil
  end
  if nx + l - 1 > stop then return nil end
  return sub(s, nx, nx + l - 1), nx + l
end

-- The library payloads in a DUMP payload; or nil and the error text.
local function undump(data)
  local len = #data
  if len < 10 then return nil, "DUMP payload version or checksum are wrong" end
  local ver = byte(data, len - 9) + byte(data, len - 8) * 256
  if ver > RDB_VERSION or le64(crc64(data, len - 8)) ~= sub(data, len - 7) then
    return nil, "DUMP payload version or checksum are wrong"
  end
  local codes, i, stop = {}, 1, len - 10
  while i <= stop do
    local kind = byte(data, i)
    i = i + 1
    if kind == OPCODE_FUNCTION2 then
      local code
      code, i = read_string(data, i, stop)
      if not code then return nil, "Failed loading library payload" end
      codes[#codes + 1] = code
    elseif kind == OPCODE_FUNCTION then
      -- 7.0 rc1/rc2: name, engine, an optional description, the code.
      local name, engine, has_desc, code
      name, i = read_string(data, i, stop)
      if not name then return nil, "Failed loading library name" end
      engine, i = read_string(data, i, stop)
      if not engine then return nil, "Failed loading engine name" end
      has_desc, i = read_len(data, i, stop)
      if not has_desc then return nil, "Failed loading library description indicator" end
      if has_desc ~= 0 then
        local _desc
        _desc, i = read_string(data, i, stop)
        if not _desc then return nil, "Failed loading library description" end
      end
      code, i = read_string(data, i, stop)
      if not code then return nil, "Failed loading library blob" end
      codes[#codes + 1] = "#!" .. engine .. " name=" .. name .. "\n" .. code
    else
      return nil, "given type is not a function"
    end
  end
  return codes
end

-- Joins the libraries of src into dst (Redis's libraryJoin): a library
-- of the same name is an error, or replaced; then no function may
-- collide. Nothing changes on an error. Returns nil or the error text.
local function join(dst, src, replace)
  local replaced = {}
  for name in pairs(src.libs) do
    local old = dst.libs[name]
    if old then
      if not replace then
        for _, o in ipairs(replaced) do link(dst, o) end
        return "Library " .. name .. " already exists"
      end
      unlink(dst, old)
      replaced[#replaced + 1] = old
    end
  end
  for key, f in pairs(src.fns) do
    if dst.fns[key] then
      for _, o in ipairs(replaced) do link(dst, o) end
      return "Function " .. f.name .. " already exists"
    end
  end
  for _, lib in pairs(src.libs) do link(dst, lib) end
  return nil
end

-- -- FUNCTION -----------------------------------------------------------------------

local reg = R.register

reg("function", nil)

local function syntax(sub_name)
  return resp.err(format("ERR unknown subcommand or wrong number of arguments for '%s'. Try FUNCTION HELP.",
                         sub(sub_name, 1, 128)))
end

-- FUNCTION LOAD [REPLACE] code: logged as it came; replayed from the log
-- without the time limit (Redis's for its master and AOF).
reg("function|load", function(c, argv, argc, out, n)
  local replace, i = false, 3
  while i < argc do
    if lower(argv[i]) ~= "replace" then return put(out, n, resp.err("ERR Unknown option given: " .. argv[i])) end
    replace = true
    i = i + 1
  end
  if i > argc then return put(out, n, "-ERR Function code is missing\r\n") end
  local name, err = create(cur, argv[i], replace, c.sock and LOAD_TIMEOUT_MS or 0)
  if not name then return put(out, n, resp.err("ERR " .. err)) end
  R.prop = true
  return resp.bulk(out, n, name)
end)

reg("function|delete", function(_, argv, _, out, n)
  local lib = cur.libs[argv[3]]
  if not lib then return put(out, n, "-ERR Library not found\r\n") end
  unlink(cur, lib)
  R.prop = true
  return put(out, n, resp.OK)
end)

reg("function|flush", function(_, argv, argc, out, n)
  if argc > 3 then return put(out, n, syntax(argv[2])) end
  local mode = argc == 3 and lower(argv[3])
  if argc == 3 and mode ~= "async" and mode ~= "sync" then
    return put(out, n, "-ERR FUNCTION FLUSH only supports SYNC|ASYNC option\r\n")
  end
  cur = new_ctx()
  R.prop = true
  return put(out, n, resp.OK)
end)

-- FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]: libraries by name,
-- their functions by name (Redis's come in its dicts' order).
reg("function|list", function(_, argv, argc, out, n)
  local with_code, pattern = false, nil
  local i = 3
  while i <= argc do
    local a = lower(argv[i])
    if not with_code and a == "withcode" then
      with_code = true
    elseif not pattern and a == "libraryname" then
      if i >= argc then return put(out, n, "-ERR library name argument was not given\r\n") end
      i = i + 1
      pattern = argv[i]
    else
      return put(out, n, resp.err("ERR Unknown argument " .. argv[i]))
    end
    i = i + 1
  end
  local match = pattern and store.matcher(lower(pattern))
  local libs = {}
  for _, name in ipairs(sorted_names(cur.libs)) do
    if not match or match(lower(name)) then libs[#libs + 1] = cur.libs[name] end
  end
  n = resp.array(out, n, #libs)
  for _, lib in ipairs(libs) do
    n = resp.map(out, n, with_code and 4 or 3)
    n = resp.bulk(out, n, "library_name")
    n = resp.bulk(out, n, lib.name)
    n = resp.bulk(out, n, "engine")
    n = resp.bulk(out, n, "LUA")
    n = resp.bulk(out, n, "functions")
    local names = sorted_names(lib.fns)
    n = resp.array(out, n, #names)
    for _, fname in ipairs(names) do
      local f = lib.fns[fname]
      n = resp.map(out, n, 3)
      n = resp.bulk(out, n, "name")
      n = resp.bulk(out, n, f.name)
      n = resp.bulk(out, n, "description")
      if f.desc then n = resp.bulk(out, n, f.desc) else n = resp.null(out, n) end
      n = resp.bulk(out, n, "flags")
      local fl = {}
      for _, flag in ipairs(scripting.FLAGS) do
        if f.flags[flag] then fl[#fl + 1] = flag end
      end
      n = resp.set(out, n, #fl)
      for _, flag in ipairs(fl) do n = put(out, n, "+" .. flag .. "\r\n") end
    end
    if with_code then
      n = resp.bulk(out, n, "library_code")
      n = resp.bulk(out, n, lib.code)
    end
  end
  return n
end)

reg("function|dump", function(_, _, _, out, n)
  return resp.bulk(out, n, dump(cur))
end)

-- FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]: all or nothing.
reg("function|restore", function(_, argv, argc, out, n)
  if argc > 4 then return put(out, n, syntax(argv[2])) end
  local policy = argc == 4 and lower(argv[4]) or "append"
  if policy ~= "append" and policy ~= "replace" and policy ~= "flush" then
    return put(out, n, "-ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.\r\n")
  end
  local codes, err = undump(argv[3])
  if not codes then return put(out, n, resp.err("ERR " .. err)) end
  local ctx = new_ctx()
  for _, code in ipairs(codes) do
    local name, cerr = create(ctx, code, false, 0)
    if not name then return put(out, n, resp.err("ERR " .. cerr)) end
  end
  if policy == "flush" then
    cur = ctx
  else
    err = join(cur, ctx, policy == "replace")
    if err then return put(out, n, resp.err("ERR " .. err)) end
  end
  R.prop = true
  return put(out, n, resp.OK)
end)

-- No function ever runs while a client is answered (scripting.lua).
reg("function|kill", function(_, _, _, out, n)
  return put(out, n, scripting.NOTBUSY)
end)

reg("function|stats", function(_, _, _, out, n)
  local libs, fns = 0, 0
  for _ in pairs(cur.libs) do libs = libs + 1 end
  for _ in pairs(cur.fns) do fns = fns + 1 end
  n = resp.map(out, n, 2)
  n = resp.bulk(out, n, "running_script")
  n = resp.null(out, n)
  n = resp.bulk(out, n, "engines")
  n = resp.map(out, n, 1)
  n = resp.bulk(out, n, "LUA")
  n = resp.map(out, n, 2)
  n = resp.bulk(out, n, "libraries_count")
  n = resp.int_into(out, n, libs)
  n = resp.bulk(out, n, "functions_count")
  return resp.int_into(out, n, fns)
end)

reg("function|help", function(_, _, _, out, n)
  return monitor.help(out, n, {
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using "
      .. "FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore "
      .. "policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, "
      .. "replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance "
      .. "of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
  })
end)

-- -- FCALL --------------------------------------------------------------------------

local function fcall(cmd, c, argv, argc, out, n, ro)
  local f = cur.fns[lower(argv[2])]
  if not f then return put(out, n, "-ERR Function not found\r\n") end
  local numkeys = ints.parse(argv[3])
  if not numkeys then return put(out, n, "-ERR Bad number of keys provided\r\n") end
  if numkeys > argc - 3 then
    return put(out, n, "-ERR Number of keys can't be greater than number of args\r\n")
  elseif numkeys < 0 then
    return put(out, n, "-ERR Number of keys can't be negative\r\n")
  end
  return scripting.run(c, cmd, f.fn, nil, f.lib.env, f.name, f.flags, ro, false, argv, 4, numkeys,
                       argc, out, n)
end

local fcall_cmd, fcall_ro_cmd
fcall_cmd = reg("fcall", function(c, argv, argc, out, n)
  return fcall(fcall_cmd, c, argv, argc, out, n, false)
end)
fcall_ro_cmd = reg("fcall_ro", function(c, argv, argc, out, n)
  return fcall(fcall_ro_cmd, c, argv, argc, out, n, true)
end)

-- -- The log rewrite --------------------------------------------------------------

-- The libraries as they are when the snapshot starts, first in the
-- rewritten log (the records after it may replace or delete them).
snapshot.head = function()
  local recs = {}
  for _, name in ipairs(sorted_names(cur.libs)) do
    recs[#recs + 1] = resp.encode({ "FUNCTION", "LOAD", cur.libs[name].code }, 3)
  end
  return recs
end

return M
