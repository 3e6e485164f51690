-- examples/kv's Lua scripting and Redis 7 functions (scripting.lua,
-- functions.lua, sandbox.lua) against a real redis-server (Debian's
-- 7.0), case by case as in kv_compat_spec: each case's commands run on
-- both from an empty database, no scripts and no functions, in RESP2 and
-- in RESP3, and kv's replies must equal redis-server's, errors and RESP3
-- types included. Then scenarios on both (atomicity against a concurrent
-- client, INFO's counts of script errors, functions and NOSCRIPT after a
-- restart) and kv's own (the busy-script limit, what the log holds).
-- One kv and one redis-server serve the whole file.
local cohost = require "cohost"
local h = require "spec.helper"
local kv = require "spec.kv_util"
h.cleanups(after_each)

local NULL = kv.NULL

local function eval(script, ...)
  return { "EVAL", script, ... }
end

-- A library of functions: "#!lua name=<name>" and body.
local function lib(name, body)
  return "#!lua name=" .. name .. "\n" .. body
end

-- FUNCTION LIST: Redis lists libraries and their functions in its
-- dicts' order (hashed with a seed of each start), kv by name; compared
-- sorted.
local function unordered(cmd)
  cmd.unordered = true
  return cmd
end

local function serial(v)
  if type(v) ~= "table" then return tostring(v) end
  local t = {}
  for i, x in ipairs(v) do t[i] = serial(x) end
  return (v.t or "") .. "[" .. table.concat(t, ",") .. "]"
end

-- Sorts, at every depth, the arrays whose elements are all arrays.
local function deep_sort(v)
  if type(v) ~= "table" then return v end
  local all = #v > 1
  for _, x in ipairs(v) do
    deep_sort(x)
    if type(x) ~= "table" then all = false end
  end
  if all then table.sort(v, function(a, b) return serial(a) < serial(b) end) end
  return v
end

local families = {}

families["conversions from Lua"] = {
  { "numbers, strings, booleans and nil", {
    eval("return 1", "0"), eval("return 3.99", "0"), eval("return -3.99", "0"),
    eval("return 'x'", "0"), eval("return true", "0"), eval("return false", "0"),
    eval("return nil", "0"), eval("return 2^53 + 1", "0"), eval("return 1/0", "0"),
    eval("return -2^63", "0"), eval("return 0/0", "0"), eval("return 1e300", "0"),
  } },
  { "tables: arrays up to the first nil, nesting, status and error tables", {
    eval("return {1, 2, nil, 4}", "0"), eval("return {1, 'a', {2, {3}}, true, false}", "0"),
    eval("return {}", "0"), eval("return {ok = 'fine'}", "0"), eval("return {ok = 'a\\r\\nb'}", "0"),
    eval("return {err = 'MY problem'}", "0"), eval("return {err = 'a\\r\\nb'}", "0"),
    eval("return {1, {err = 'E x'}, 3}", "0"), eval("return {err = 5}", "0"),
    eval("return redis.status_reply('PONGISH')", "0"), eval("return redis.error_reply('foo')", "0"),
    eval("return redis.error_reply('MY code')", "0"), eval("return redis.error_reply('-X y')", "0"),
    eval("return redis.error_reply()", "0"), eval("return redis.status_reply(1)", "0"),
    eval("return {a = 1, 2}", "0"), eval("return {1, x = {err = 'no'}}", "0"),
  } },
  { "RESP3 types: double, big number, verbatim, map, set, booleans", {
    eval("return {double = 1.5}", "0"), eval("return {double = 1/0}", "0"),
    eval("return {big_number = '1234567890123456789012'}", "0"),
    eval("return {verbatim_string = {format = 'txt', string = 'hello'}}", "0"),
    eval("return {map = {a = 1}}", "0"), eval("return {set = {x = true}}", "0"),
    eval("redis.setresp(3) return true", "0"), eval("redis.setresp(3) return false", "0"),
    eval("redis.setresp(3) return {true, false, 1}", "0"), eval("redis.setresp(4)", "0"),
    eval("redis.setresp()", "0"),
  } },
}

families["conversions to Lua"] = {
  { "redis.call's replies as Lua values", {
    { "RPUSH", "l", "a", "b" }, { "HSET", "h", "f", "v" }, { "SET", "s", "str" },
    eval("return type(redis.call('get', 'none'))", "0"),
    eval("return tostring(redis.call('get', 'none'))", "0"),
    eval("local r = redis.call('set', 'k', 'v') return {type(r), r.ok}", "0"),
    eval("return {type(redis.call('incr', 'n')), redis.call('incr', 'n')}", "0"),
    eval("return redis.call('lrange', 'l', 0, -1)", "0"),
    eval("return redis.call('hgetall', 'h')", "0"),
    eval("return type(redis.call('blmpop', '0.01', '1', 'nol', 'LEFT'))", "0"),
    eval("return redis.call('get', 's') .. '!'", "0"),
    eval("return redis.call('set', 'f', 1.5)", "0"), { "GET", "f" },
    eval("return redis.call('set', 'g', 0.1)", "0"), { "GET", "g" },
    eval("return redis.call('set', 'i', 12345678)", "0"), { "GET", "i" },
    eval("return redis.call('type', 'l')", "0"),
  } },
  { "RESP3 replies after redis.setresp(3)", {
    { "HSET", "h", "f", "v" }, { "SADD", "set", "m" }, { "ZADD", "z", "1.5", "m" },
    eval("redis.setresp(3) local r = redis.call('hgetall', 'h') return {type(r.map), r.map.f}", "0"),
    eval("redis.setresp(3) local r = redis.call('smembers', 'set') return {type(r.set), tostring(r.set.m)}", "0"),
    eval("redis.setresp(3) local r = redis.call('zscore', 'z', 'm') return {type(r), tostring(r.double)}", "0"),
    eval("redis.setresp(3) return type(redis.call('get', 'none'))", "0"),
    eval("redis.setresp(3) return redis.call('hgetall', 'h')", "0"),
    eval("redis.setresp(3) return redis.call('zscore', 'z', 'm')", "0"),
    eval("redis.setresp(3) return redis.call('smembers', 'set')", "0"),
    eval("redis.setresp(3) return redis.call('sismember', 'set', 'm')", "0"),
  } },
}

families["errors"] = {
  { "redis.call raises, redis.pcall returns the error", {
    { "SET", "foo", "a" },
    eval("return redis.call('incr', 'foo')", "0"), eval("return redis.pcall('incr', 'foo')", "0"),
    eval("local e = redis.pcall('incr', 'foo') return {type(e), e.err}", "0"),
    eval("return {pcall(redis.call, 'incr', 'foo')}", "0"),
    eval("redis.pcall('incr', 'foo') return 'went on'", "0"),
    eval("return redis.call('lpush', 'foo', 'x')", "0"),
  } },
  { "commands a script may not call", {
    eval("return redis.call('nosuch')", "0"), eval("return redis.call('get')", "0"),
    eval("return redis.call('client', 'id')", "0"), eval("return redis.call('config', 'nosuch')", "0"),
    eval("return redis.call('config')", "0"), eval("return redis.call()", "0"),
    eval("return redis.call({})", "0"), eval("return redis.call('blpop', 'l', 0)", "0"),
    eval("return redis.call('eval', 'return 1', 0)", "0"), eval("return redis.call('multi')", "0"),
    eval("return redis.call('subscribe', 'ch')", "0"), eval("return redis.pcall('nosuch')", "0"),
    eval("return redis.call('set', 'k', nil)", "0"), eval("return redis.call('set', 'k', true)", "0"),
  } },
  { "script errors name the line", {
    eval("error('x')", "0"), eval("local a = 1\nlocal b = nil + a", "0"), eval("error({err = 'MYERR y'})", "0"),
    eval("error(redis.error_reply('X y'))", "0"), eval("error()", "0"), eval("error({err = 5})", "0"),
    eval("local t = {}\nlocal function f() redis.call('nosuch') end\nf()", "0"),
    eval("error('a\\r\\nb')", "0"), eval("return nosuch()", "0"), eval("local s = string.rep() return s", "0"),
    eval("return {", "0"), eval("local r = redis.sha1hex() return r", "0"), eval("redis.log(99, 'x')", "0"),
    eval("redis.log(redis.LOG_WARNING)", "0"), eval("redis.log('x', 'y')", "0"),
  } },
  { "read-only scripts and shebang flags", {
    { "EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k" },
    { "EVAL_RO", "return redis.call('set', KEYS[1], 'v')", "1", "k" },
    { "EVAL_RO", "return redis.call('publish', 'ch', 'm')", "0" },
    { "EVAL_RO", "return redis.pcall('del', 'k')", "0" },
    eval("#!lua flags=no-writes\nreturn redis.call('set', 'k', 'v')", "0"),
    eval("#!lua flags=no-writes\nreturn redis.call('get', 'k')", "0"),
    eval("#!lua\nreturn redis.call('set', 'k', 'v')", "0"),
    { "EVAL_RO", "#!lua\nreturn 1", "0" }, { "EVAL_RO", "#!lua flags=no-writes,allow-oom\nreturn 1", "0" },
    eval("#!lua flags=nosuch\nreturn 1", "0"), eval("#!lua foo=bar\nreturn 1", "0"),
    eval("#!python\nreturn 1", "0"), eval("#!lua", "0"), eval("#!lua flags=\nreturn 1", "0"),
    eval("#!lua\n\nerror('line 3')", "0"),
  } },
}

families["KEYS and ARGV"] = {
  { "KEYS, ARGV and numkeys", {
    eval("return {KEYS, ARGV}", "2", "a", "b", "c", "d"), eval("return #KEYS + #ARGV * 10", "1", "a", "b"),
    eval("return KEYS[1]", "0"), eval("return 1", "3", "a"), eval("return 1", "-1"),
    eval("return 1", "x"), eval("return 1", "1.5"), eval("KEYS[1] = 'x' return KEYS[1]", "1", "a"),
    eval("return ARGV[1] + 1", "0", "41"), eval("return #ARGV", "0", "", ""),
  } },
  { "EVALSHA and the script cache", {
    { "SCRIPT", "LOAD", "return 'loaded'" }, { "EVALSHA", "5e3bd10aa5cbdf3b5e0ef6d9d1bf3ea4c8d8b4a2", "0" },
    { "EVALSHA", "3b2ec1b1d5ba0e9a2d0a4c6b1d10d2d0a1b0c2e5", "0" },
    { "SCRIPT", "EXISTS", "5e3bd10aa5cbdf3b5e0ef6d9d1bf3ea4c8d8b4a2", "nope" },
    { "EVALSHA", "short", "0" }, { "EVALSHA", "short", "x" },
    { "SCRIPT", "LOAD", "return {" }, { "SCRIPT", "LOAD", "return KEYS[1]" },
    { "EVALSHA", "2b5e9f0ac0a59a2e57b8ae1f8bf1c5fb6ec2b1a0", "0" },
    { "SCRIPT", "FLUSH" }, { "SCRIPT", "FLUSH", "ASYNC" }, { "SCRIPT", "FLUSH", "nope" },
    { "SCRIPT", "FLUSH", "SYNC", "x" }, { "SCRIPT", "KILL" }, { "SCRIPT", "NOPE" },
    { "SCRIPT", "EXISTS" },
  } },
  { "EVALSHA of loaded scripts, in upper case too", (function()
    local cmds = {}
    local body = "return {KEYS[1], ARGV[1]}"
    cmds[#cmds + 1] = { "SCRIPT", "LOAD", body }
    cmds.sha = true
    return cmds
  end)() },
}

families["sandbox"] = {
  { "globals are Redis's and read-only", {
    eval("x = 1", "0"), eval("return x", "0"), eval("return type(os)", "0"), eval("return type(io)", "0"),
    eval("return type(require)", "0"), eval("return type(debug)", "0"), eval("return type(jit)", "0"),
    eval("return type(ffi)", "0"), eval("return type(package)", "0"), eval("return type(setfenv)", "0"),
    eval("return type(getfenv)", "0"), eval("return type(print)", "0"), eval("return type(dofile)", "0"),
    eval("return type(newproxy)", "0"), eval("return type(module)", "0"), eval("return _VERSION", "0"),
    eval("redis = nil", "0"), eval("_G.y = 1", "0"), eval("rawset(_G, 'y', 1)", "0"),
    eval("setmetatable(_G, nil)", "0"), eval("return rawget(_G, 'redis') == redis", "0"),
    eval("local f = function() z = 1 end f()", "0"), eval("local t = {} t.a = 1 return t.a", "0"),
    eval("local t = {} for k, v in pairs(_G) do t[#t + 1] = k .. '=' .. type(v) end table.sort(t) "
         .. "local s = table.concat(t, ' ') return (s:gsub('struct=table ', ''):gsub('__redis__err__handler=function ', ''))", "0"),
  } },
  { "the libraries cannot be changed", {
    eval("string.foo = 1", "0"), eval("local s = string s.rep = nil return 1", "0"),
    eval("getmetatable('').__index = {} return 1", "0"), eval("getmetatable('').__index.rep = nil return 1", "0"),
    eval("return getmetatable('').__index == string", "0"), eval("setmetatable(string, {})", "0"),
    eval("cjson.encode = nil", "0"), eval("table.insert = nil", "0"), eval("math.pi = 3", "0"),
    eval("redis.call = function() end", "0"), eval("bit.band = nil", "0"), eval("coroutine.wrap = nil", "0"),
    eval("return next(string) ~= nil", "0"), eval("local n = 0 for _ in pairs(math) do n = n + 1 end return n > 20", "0"),
    eval("return ('x'):rep(3)", "0"), eval("return string.format('%05.1f', 3.14159)", "0"),
  } },
  { "load and loadstring: text only, in the script's globals", {
    eval("return loadstring('return 5')()", "0"), eval("return loadstring('return redis')() == redis", "0"),
    eval("local f = loadstring('y = 1') f() return 1", "0"),
    eval("return type(loadstring(string.dump(function() return 1 end)))", "0"),
    eval("return type(load(string.dump(function() return 1 end)))", "0"),
    eval("return load('return 7')()", "0"),
  } },
  { "cjson, bit, cmsgpack", {
    eval("return cjson.encode({1, 2, 'a'})", "0"), eval("return cjson.encode({a = {b = true}})", "0"),
    eval("return cjson.decode('[1, 2, {\"a\": \"b\"}]')[3].a", "0"),
    eval("return cjson.decode('{\"x\": null}').x == cjson.null", "0"), eval("local t = cjson.decode('[1,') return t", "0"),
    eval("return {bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1), bit.lshift(1, 10), bit.tohex(255), bit.bnot(0)}", "0"),
    eval("return cmsgpack.pack({1, 2, 3}, 'abc', {a = 1}, 1.5, -1, 300, -300, 70000, 2^40, true, 3.14)", "0"),
    eval("return {cmsgpack.unpack(cmsgpack.pack({1, 2, {x = 'y'}}, 'z'))}", "0"),
    eval("local t = cmsgpack.unpack(cmsgpack.pack({a = 1, b = {1, 2}})) return {t.a, t.b[2]}", "0"),
    eval("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}", "0"),
    eval("local p = cmsgpack.pack(1, 2, 3) return {cmsgpack.unpack_limit(p, 2, 0)}", "0"),
    eval("local p = cmsgpack.pack(1, 2, 3) return {cmsgpack.unpack_one(p, 2)}", "0"),
    eval("local v = cmsgpack.unpack('\\217') return v", "0"), eval("local p = cmsgpack.pack() return p", "0"),
    eval("return cmsgpack.pack(string.rep('x', 40), string.rep('y', 300))", "0"),
  } },
  { "math.random is Redis's sequence", {
    eval("math.randomseed(42) return {math.random(1000), math.random(1000), math.random(5, 10), math.floor(math.random() * 1e6)}", "0"),
    eval("math.randomseed(-7) return {math.random(100), math.random(100)}", "0"),
    eval("local r = math.random(0) return r", "0"),
  } },
  { "redis.sha1hex, redis.log, versions and the rest", {
    eval("return redis.sha1hex('')", "0"), eval("return redis.sha1hex('abc')", "0"),
    eval("return redis.sha1hex(42)", "0"), eval("return redis.log(redis.LOG_WARNING, 'from a script', 1, {})", "0"),
    eval("return {redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING}", "0"),
    eval("return type(redis.REDIS_VERSION_NUM)", "0"), eval("return redis.replicate_commands()", "0"),
    eval("return redis.breakpoint()", "0"), eval("return redis.acl_check_cmd('get', 'k')", "0"),
    eval("local ok = redis.acl_check_cmd('nosuch') return ok", "0"), eval("redis.set_repl(9)", "0"),
    eval("return {redis.REPL_NONE, redis.REPL_AOF, redis.REPL_REPLICA, redis.REPL_ALL}", "0"),
    eval("return type(redis.foo)", "0"), eval("collectgarbage('step') return type(collectgarbage('count'))", "0"),
  } },
}

local LIB_A = lib("liba", [[
redis.register_function('fa', function(keys, args) return {keys, args} end)
redis.register_function{function_name = 'fb', callback = function(keys, args)
  return redis.call('set', keys[1], args[1]) end, description = 'sets a key'}
redis.register_function{function_name = 'fro', callback = function(keys)
  return redis.call('get', keys[1]) end, flags = {'no-writes', 'allow-oom'}}
redis.register_function('fw', function(keys) return redis.call('del', keys[1]) end)
]])

families["functions"] = {
  { "FUNCTION LOAD, FCALL, FCALL_RO", {
    { "FUNCTION", "LOAD", LIB_A }, { "FCALL", "fa", "2", "a", "b", "c" }, { "FCALL", "FA", "0" },
    { "FCALL", "fb", "1", "k", "v" }, { "FCALL_RO", "fro", "1", "k" }, { "FCALL_RO", "fb", "1", "k", "w" },
    { "FCALL", "fro", "1", "k" }, { "FCALL", "nosuch", "0" }, { "FCALL", "fa", "x" }, { "FCALL", "fa", "5" },
    { "FCALL", "fa", "-1" }, { "FUNCTION", "LOAD", LIB_A }, { "FUNCTION", "LOAD", "REPLACE", LIB_A },
    unordered { "FUNCTION", "LIST" }, unordered { "FUNCTION", "LIST", "WITHCODE" }, unordered { "FUNCTION", "LIST", "LIBRARYNAME", "lib*" },
    unordered { "FUNCTION", "LIST", "LIBRARYNAME", "LIBA" }, unordered { "FUNCTION", "LIST", "LIBRARYNAME", "x*" },
    unordered { "FUNCTION", "LIST", "LIBRARYNAME" }, unordered { "FUNCTION", "LIST", "BOGUS" },
    unordered { "FUNCTION", "LIST", "WITHCODE", "WITHCODE" }, { "FUNCTION", "STATS" }, { "FUNCTION", "KILL" },
    { "FUNCTION", "DELETE", "liba" }, { "FUNCTION", "DELETE", "liba" }, { "FCALL", "fa", "0" },
    { "FUNCTION", "STATS" },
  } },
  { "what a library may do while it loads", {
    { "FUNCTION", "LOAD", lib("x", "local s = string.rep('a', 2) redis.register_function('f', function() return 1 end)") },
    { "FUNCTION", "LOAD", lib("x2", "error('boom')") },
    { "FUNCTION", "LOAD", lib("x3", "redis.register_function('f3', 5)") },
    { "FUNCTION", "LOAD", lib("x4", "redis.call('ping')") },
    { "FUNCTION", "LOAD", lib("x5", "local t = {}") },
    { "FUNCTION", "LOAD", lib("x6", "local x = ") },
    { "FUNCTION", "LOAD", lib("x7", "redis.register_function('f7', function() return 1 end)\n"
                                     .. "redis.register_function('f7', function() return 2 end)") },
    { "FUNCTION", "LOAD", lib("x8", "redis.register_function('bad-name', function() return 1 end)") },
    { "FUNCTION", "LOAD", lib("x9", "redis.register_function{function_name = 'f9'}") },
    { "FUNCTION", "LOAD", lib("x10", "redis.register_function{callback = function() end}") },
    { "FUNCTION", "LOAD", lib("x11", "redis.register_function{function_name = 'f', callback = function() end, flags = {'nope'}}") },
    { "FUNCTION", "LOAD", lib("x12", "redis.register_function{function_name = 'f', callback = function() end, what = 1}") },
    { "FUNCTION", "LOAD", lib("x13", "redis.register_function()") },
    { "FUNCTION", "LOAD", lib("x14", "redis.register_function(1, 2, 3)") },
    { "FUNCTION", "LOAD", lib("x15", "redis.register_function('a')") },
    { "FUNCTION", "LOAD", lib("x16", "redis.register_function({})") },
    { "FUNCTION", "LOAD", lib("x17", "redis.register_function('f17', function() return x end)") },
    { "FCALL", "f17", "0" },
    { "FUNCTION", "LOAD", lib("x18", "redis.register_function('f18', function() return redis.register_function end)") },
    { "FCALL", "f18", "0" },
    { "FUNCTION", "LOAD", lib("x19", "redis.log(redis.LOG_NOTICE, 'loading') redis.register_function('f19', "
                                      .. "function(k, a) return {redis.setresp ~= nil, type(KEYS)} end)") },
    { "FCALL", "f19", "0" },
    { "FUNCTION", "LOAD", lib("x20", "redis.register_function('f20', function() error('in f20') end)") },
    { "FCALL", "f20", "0" },
    unordered { "FUNCTION", "LIST", "LIBRARYNAME", "x1*" },
  } },
  { "library metadata", {
    { "FUNCTION", "LOAD", "#!lua name=m1 foo=bar\n" }, { "FUNCTION", "LOAD", "#!luaz name=m2\n" },
    { "FUNCTION", "LOAD", "#!lua name=m-3\n" }, { "FUNCTION", "LOAD", "#!lua\n" },
    { "FUNCTION", "LOAD", "nope" }, { "FUNCTION", "LOAD", "#!lua name=x" },
    { "FUNCTION", "LOAD", "#!lua name=a name=b\n" }, { "FUNCTION", "LOAD", "#!LUA NAME=up\nredis.register_function('up', function() return 1 end)" },
    { "FUNCTION", "LOAD", "BOGUS", "#!lua name=z\n" }, { "FUNCTION", "LOAD", "REPLACE" },
    unordered { "FUNCTION", "LIST" },
  } },
  { "function names collide across libraries, case-insensitively", {
    { "FUNCTION", "LOAD", lib("l1", "redis.register_function('same', function() return 1 end)") },
    { "FUNCTION", "LOAD", lib("l2", "redis.register_function('SAME', function() return 2 end)") },
    { "FUNCTION", "LOAD", "REPLACE", lib("l1", "redis.register_function('other', function() return 3 end)") },
    { "FCALL", "same", "0" }, { "FCALL", "other", "0" },
    { "FUNCTION", "LOAD", lib("l2", "redis.register_function('SAME', function() return 2 end)") },
    { "FCALL", "same", "0" }, { "FUNCTION", "FLUSH" }, { "FUNCTION", "FLUSH", "ASYNC" },
    { "FUNCTION", "FLUSH", "bogus" }, { "FUNCTION", "FLUSH", "SYNC", "x" }, { "FCALL", "same", "0" },
    { "FUNCTION", "DELETE" }, { "FUNCTION", "NOPE" }, { "FUNCTION", "HELP" },
  } },
  { "FUNCTION DUMP and RESTORE", {
    { "FUNCTION", "LOAD", lib("d1", "redis.register_function('d1', function() return 'one' end)") },
    { "FUNCTION", "RESTORE", "bad" }, { "FUNCTION", "RESTORE", "bad", "NOPE" },
    { "FUNCTION", "RESTORE", "x", "FLUSH", "y" },
    { "FUNCTION", "RESTORE", "\245\1x\10\0\0\0\0\0\0\0\0\0" },
  } },
}

-- -- Running the cases ----------------------------------------------------------

-- Runs cmds on c from an empty server (no keys, scripts or functions);
-- returns the replies, typed in RESP3 (as kv_compat_spec's run).
local function run(c, cmds, proto)
  if proto == 3 then
    local hello = c:typed("HELLO", "3")
    assert(type(hello) == "table" and hello.t == "%", "no RESP3")
  end
  for _, cmd in ipairs { { "FLUSHALL" }, { "FUNCTION", "FLUSH" }, { "SCRIPT", "FLUSH" } } do
    assert(c:call(unpack(cmd)) == "OK")
  end
  local replies = {}
  local function one(cmd)
    local r
    if proto == 3 then
      r = c:typed(unpack(cmd))
      if cmd.unordered then deep_sort(r) end
      if r ~= nil then r = kv.typed_string(r) end
    else
      r = c:call(unpack(cmd))
      if cmd.unordered then deep_sort(r) end
    end
    replies[#replies + 1] = r == nil and "<no reply>" or r
    return r
  end
  for _, cmd in ipairs(cmds) do
    local r = one(cmd)
    if cmds.sha then
      -- The sha SCRIPT LOAD gave, called as given and in upper case.
      local sha = proto == 3 and r:sub(2) or r
      one({ "EVALSHA", sha, "1", "k", "a" })
      one({ "EVALSHA", sha:upper(), "1", "k", "a" })
      one({ "SCRIPT", "EXISTS", sha:upper(), sha })
      one({ "EVALSHA_RO", sha, "0" })
    end
  end
  return replies
end

local show = kv.show_replies

local redis_pid, redis_log, redis_port, redis_dir
local kv_proc, kv_dir
local stops = {}

local function start_redis()
  redis_pid, redis_log = h.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly yes "
    .. "--appendfsync always --dir %s"):format(redis_port, h.shell_quote(redis_dir)))
  h.wait_port(redis_port, redis_log)
  -- Listening is not loaded: until its log is read it answers -LOADING.
  local c = kv.client(redis_port)
  assert(h.wait_for(function() return c:call("PING") == "PONG" end, 20), "redis-server did not load its log")
end

local function start_kv()
  kv_proc = kv.start(function(fn) stops[#stops + 1] = fn end,
                     { args = "--appendfsync always", dir = kv_dir })
end

describe("kv's scripting against redis-server", function()
  -- Directories that live as long as the file's servers (h.tmpdir's
  -- go after each test).
  local function dir()
    local d = os.tmpname()
    os.remove(d)
    assert(os.execute("mkdir " .. h.shell_quote(d)) == 0)
    return d
  end

  setup(function()
    redis_port, redis_dir, kv_dir = h.free_port(), dir(), dir()
    start_redis()
    start_kv()
  end)

  teardown(function()
    h.stop_pid(redis_pid)
    if redis_log then os.remove(redis_log) end
    for _, fn in ipairs(stops) do fn() end
    os.execute("rm -rf " .. h.shell_quote(redis_dir) .. " " .. h.shell_quote(kv_dir))
  end)

  local names = {}
  for name in pairs(families) do names[#names + 1] = name end
  table.sort(names)
  for _, proto in ipairs { 2, 3 } do
    for _, family in ipairs(names) do
      for _, case in ipairs(families[family]) do
        it(("%s: %s (RESP%d)"):format(family, case[1], proto), function()
          local cmds = case[2]
          local want = run(kv.client(redis_port), cmds, proto)
          local got = run(kv.client(kv_proc.port), cmds, proto)
          assert.same(want, got, "\n" .. show(cmds, want, got))
        end)
      end
    end
  end

  -- Runs scenario(port) on both servers at once; the results must be equal.
  local function both(scenario)
    local r = cohost.spawn(scenario, redis_port)
    local k = cohost.spawn(scenario, kv_proc.port)
    local ok_r, want = cohost.wait(r)
    local ok_k, got = cohost.wait(k)
    assert(ok_r, want)
    assert(ok_k, got)
    assert.same(want, got)
    return got
  end

  local function fresh(c)
    for _, cmd in ipairs { { "FLUSHALL" }, { "FUNCTION", "FLUSH" }, { "SCRIPT", "FLUSH" },
                           { "CONFIG", "RESETSTAT" } } do
      assert(c:call(unpack(cmd)) == "OK")
    end
  end

  it("restores a dump of the other server's functions", function()
    local r, k = kv.client(redis_port), kv.client(kv_proc.port)
    fresh(r)
    fresh(k)
    local code = lib("dumped", "redis.register_function('dumped', function(keys, args) return "
      .. "'this library is long enough for Redis to compress it with LZF: ' .. string.rep('abc', 10) end)")
    assert.equal("dumped", r:call("FUNCTION", "LOAD", code))
    local payload = r:call("FUNCTION", "DUMP")
    assert.equal("OK", k:call("FUNCTION", "RESTORE", payload))
    assert.same(r:call("FCALL", "dumped", "0"), k:call("FCALL", "dumped", "0"))
    assert.same(r:call("FUNCTION", "LIST", "WITHCODE"), k:call("FUNCTION", "LIST", "WITHCODE"))
    assert.same({ err = "ERR Library dumped already exists" }, k:call("FUNCTION", "RESTORE", payload))
    assert.equal("OK", k:call("FUNCTION", "RESTORE", payload, "REPLACE"))
    -- And back: kv's payload (uncompressed) into redis-server, after a flush.
    local mine = k:call("FUNCTION", "DUMP")
    assert.equal("OK", r:call("FUNCTION", "RESTORE", mine, "FLUSH"))
    assert.same(r:call("FUNCTION", "LIST", "WITHCODE"), k:call("FUNCTION", "LIST", "WITHCODE"))
    local bad = mine:sub(1, -2) .. string.char((mine:byte(-1) + 1) % 256)
    assert.same(r:call("FUNCTION", "RESTORE", bad), k:call("FUNCTION", "RESTORE", bad))
  end)

  it("runs a script atomically: a concurrent client's commands come before or after it", function()
    local got = both(function(port)
      local c = kv.client(port)
      fresh(c)
      c:call("SET", "counter", "0")
      -- The other client writes the key as fast as it can meanwhile.
      local stop = false
      local writes = 0
      local other = cohost.spawn(function()
        local o = kv.client(port)
        while not stop do
          assert(o:call("SET", "counter", "0") == "OK")
          writes = writes + 1
        end
      end)
      assert(h.wait_for(function() return writes > 0 end, 10))
      local results = {}
      for i = 1, 5 do
        -- 20,000 increments; any interleaved SET would show in the sum.
        results[i] = c:call("EVAL", [[
          local before = tonumber(redis.call('get', KEYS[1]))
          for i = 1, 20000 do redis.call('incr', KEYS[1]) end
          return tonumber(redis.call('get', KEYS[1])) - before]], "1", "counter")
      end
      stop = true
      cohost.wait(other)
      return results
    end)
    assert.same({ 20000, 20000, 20000, 20000, 20000 }, got)
  end)

  it("counts script errors in INFO commandstats and errorstats as redis-server does", function()
    both(function(port)
      local c = kv.client(port)
      fresh(c)
      c:call("SET", "foo", "a")
      local out = {}
      local scripts = {
        "redis.pcall('incr', 'foo') return 1", "return redis.pcall('incr', 'foo')",
        "return redis.call('incr', 'foo')", "return redis.call('nosuch')",
        "return redis.call('client', 'id')", "error('x')", "return redis.error_reply('MY x')",
        "return {err = 'FOO x'}", "return {1, redis.error_reply('BAR x')}",
      }
      for _, s in ipairs(scripts) do out[#out + 1] = c:call("EVAL", s, "0") end
      local function lines(section, pat)
        local t = {}
        for l in c:call("INFO", section):gmatch("[^\r\n]+") do
          if l:find(pat) then t[#t + 1] = (l:gsub("usec=%d+,usec_per_call=[%d.]+,", "")) end
        end
        table.sort(t)   -- Redis's order is its dict's
        return t
      end
      out[#out + 1] = lines("commandstats", "^cmdstat_[ei]")
      out[#out + 1] = lines("commandstats", "^cmdstat_client")
      out[#out + 1] = lines("errorstats", "^errorstat_")
      return out
    end)
  end)

  it("keeps functions and script effects across a restart, and forgets the script cache", function()
    local shas = both(function(port)
      local c = kv.client(port)
      fresh(c)
      local out = {}
      out[#out + 1] = c:call("FUNCTION", "LOAD", LIB_A)
      out[#out + 1] = c:call("FUNCTION", "LOAD", lib("gone", "redis.register_function('gone', function() return 0 end)"))
      out[#out + 1] = c:call("FUNCTION", "DELETE", "gone")
      out[#out + 1] = c:call("SCRIPT", "LOAD", "return redis.call('incrby', KEYS[1], ARGV[1])")
      out[#out + 1] = c:call("EVALSHA", out[#out], "1", "n", "5")
      out[#out + 1] = c:call("EVAL", "redis.call('set', 'a', '1') redis.call('rpush', 'l', 'x', 'y') return 1", "0")
      out[#out + 1] = c:call("EVAL", "redis.set_repl(redis.REPL_NONE) redis.call('set', 'unlogged', '1') "
        .. "redis.set_repl(redis.REPL_ALL) redis.call('set', 'logged', '1') return 1", "0")
      out[#out + 1] = c:call("FCALL", "fb", "1", "fk", "fv")
      c:call("MULTI")
      c:call("EVAL", "return redis.call('incr', 'n')", "0")
      c:call("FCALL", "fb", "1", "in_multi", "yes")
      out[#out + 1] = c:call("EXEC")
      return out
    end)
    -- Both restarted on their logs.
    h.stop_pid(redis_pid)
    start_redis()
    kv_proc.stop()
    start_kv()
    both(function(port)
      local c = kv.client(port)
      return {
        c:call("FCALL", "fa", "1", "k", "v"), c:call("FCALL", "gone", "0"), c:call("FCALL_RO", "fro", "1", "fk"),
        c:call("EVALSHA", shas[4], "1", "n", "5"), c:call("SCRIPT", "EXISTS", shas[4]),
        c:call("MGET", "n", "a", "unlogged", "logged", "fk", "in_multi"), c:call("LRANGE", "l", "0", "-1"),
        deep_sort(c:call("FUNCTION", "LIST")),
      }
    end)
    -- kv's log rewrite keeps the functions too.
    local k = kv.client(kv_proc.port)
    assert.equal("Background append only file rewriting started", k:call("BGREWRITEAOF"))
    kv.wait_rewrites(k, 1)
    kv_proc.stop()
    start_kv()
    k = kv.client(kv_proc.port)
    assert.same({ { "fk" }, { "v" } }, k:call("FCALL", "fa", "1", "fk", "v"))
    assert.equal("fv", k:call("FCALL_RO", "fro", "1", "fk"))
    assert.same({ err = "ERR Function not found" }, k:call("FCALL", "gone", "0"))
  end)
end)

describe("kv's scripts", function()
  local proc
  local mine = {}
  setup(function()
    proc = kv.start(function(fn) mine[#mine + 1] = fn end, { args = "--appendonly no", dir = "/tmp" })
  end)

  teardown(function()
    for _, fn in ipairs(mine) do fn() end
  end)

  it("stops a script past busy-reply-threshold with an error, and serves on", function()
    local c = kv.client(proc.port, 20000)
    assert.equal("OK", c:call("CONFIG", "SET", "busy-reply-threshold", "100"))
    local other = kv.client(proc.port)
    local scripts = {
      "local i = 0 while true do i = i + 1 end",
      -- A pcall cannot catch it for good.
      "while true do pcall(function() while true do end end) end",
      "local co = coroutine.wrap(function() while true do end end) while true do pcall(co) end",
      "local t = {} while true do t[#t % 100 + 1] = redis.call('ping') end",
      "local f = loadstring('while true do end') f()",
    }
    for _, s in ipairs(scripts) do
      local t0 = cohost.monotonic()
      local r = c:call("EVAL", s, "0")
      assert.is_table(r, s)
      assert.matches("^ERR Script killed: it ran past busy%-reply%-threshold %(100 ms%) script: %x+, on ", r.err)
      assert.is_true(cohost.monotonic() - t0 < 10, s)
      assert.equal("PONG", other:call("PING"))
    end
    assert.equal("busy", c:call("FUNCTION", "LOAD", lib("busy", "redis.register_function('spin', function() "
      .. "while true do end end)")))
    local r = c:call("FCALL", "spin", "0")
    assert.matches("^ERR Script killed: .* script: spin, on @user_function:2%.$", r.err)
    assert.same({ err = "NOTBUSY No scripts in execution right now." }, c:call("SCRIPT", "KILL"))
    assert.same({ err = "NOTBUSY No scripts in execution right now." }, c:call("FUNCTION", "KILL"))
    -- A library's top level is limited too (500 ms, as Redis's).
    r = c:call("FUNCTION", "LOAD", lib("slow", "while true do end"))
    assert.same({ err = "ERR Error registering functions: ERR FUNCTION LOAD timeout" }, r)
    -- The limit at 0: no limit, and a script that ends is not stopped.
    assert.equal("OK", c:call("CONFIG", "SET", "busy-reply-threshold", "0"))
    assert.equal(5000000, c:call("EVAL", "local n = 0 for i = 1, 5000000 do n = n + 1 end return n", "0"))
    assert.equal("OK", c:call("CONFIG", "SET", "busy-reply-threshold", "5000"))
  end)
end)
