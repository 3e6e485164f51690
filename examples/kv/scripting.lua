-- Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT (LOAD,
-- EXISTS, FLUSH, KILL, HELP), with Redis 7.0's rules (its eval.c,
-- script.c, script_lua.c), run by the LuaJIT kv itself runs on; and the
-- engine functions.lua runs FCALL with: the redis.* API, the type
-- conversions both ways, the error texts, the busy-script limit.
--
-- A script runs atomically: on the worker's thread, from start to end,
-- with nothing that can park. Its commands go through the dispatcher as
-- a transaction's do (server.lua, in_exec): a blocking pop answers at
-- once, KEYS does not pause, a large SRANDMEMBER is not streamed; they
-- are logged as they run, between MULTI and EXEC records (Redis 7's
-- effects replication), so the log never holds an EVAL and the script
-- cache does not survive a restart (EVALSHA then answers NOSCRIPT, as in
-- Redis 7). Clients blocked on keys a script fed are served once it ends.
--
-- Past busy-reply-threshold a script is stopped with an error: Redis
-- would keep running it and answer other clients -BUSY meanwhile, which
-- a worker that must not yield inside a debug hook cannot do. The limit
-- is a count hook (installed for each run, with Redis's period) that
-- raises the error in the script's own code, never in kv's (a command
-- the script called is never cut in half); from then on it fires at
-- every instruction, so a pcall in the script cannot catch it for good.
-- The sandbox keeps script code out of the JIT, whose traces skip hooks.
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local ints = require "kv.ints"
local multi = require "kv.multi"
local monitor = require "kv.monitor"
local evict = require "kv.evict"
local admin = require "kv.admin"
local sandbox = require "kv.sandbox"
local sha1_bin = require("cohost.core.crypto").sha1_bin

local put = resp.put
local byte, sub, find, gsub, format, lower, concat = string.byte, string.sub, string.find,
  string.gsub, string.format, string.lower, table.concat
local type, tostring, tonumber, select, rawget, rawset, next = type, tostring, tonumber, select,
  rawget, rawset, next
local floor, huge = math.floor, math.huge
local now_us = monitor.now_us
local getinfo, sethook, gethook = debug.getinfo, debug.sethook, debug.gethook
local own = sandbox.own

local M = {}

M.NOSCRIPT = "-NOSCRIPT No matching script. Please use EVAL.\r\n"
M.NOTBUSY = "-NOTBUSY No scripts in execution right now.\r\n"
local HOOK_EVERY = 100000   -- the hook's period (interpreted instructions), Redis's

-- Commands Redis flags may-replicate: refused in read-only scripts as
-- writes are (commands.lua keeps the flags COMMAND shows, not this one).
local MAY_REPLICATE = { publish = true, spublish = true, pfcount = true }

-- -- RESP replies as Lua values -----------------------------------------------
--
-- What redis.call returns: Redis's redisProtocolToLuaType. Status
-- { ok = s }, error { err = "CODE msg" }, integer a number, bulk a string
-- (a null false), array a table (a null false); RESP3 (redis.setresp(3)):
-- map { map = t }, set { set = t }, null nil, boolean, double
-- { double = n }, big number { big_number = s }, verbatim
-- { verbatim_string = { format, string } }.

-- An error as the table Lua gets (Redis's luaPushErrorBuff): text is an
-- error reply's "-CODE msg" (its code kept; "ERR" if it has none) or a
-- plain message (code "ERR"); ignored says the error was counted already
-- (Redis's ignore_error_stats_update).
local function error_table(text, ignored)
  if byte(text, 1) == 45 then
    text = sub(text, 2)
    if not find(text, " ", 1, true) then text = "ERR " .. text end
  else
    text = "ERR " .. text
  end
  return { err = (gsub(text, "[\r\n]+$", "")), ignore_error_stats_update = ignored or nil }
end
M.error_table = error_table

local function parse_double(s)
  local v = tonumber(s)
  if v then return v end
  local l = lower(s)
  if l == "inf" or l == "+inf" then return huge end
  if l == "-inf" then return -huge end
  return 0 / 0
end

-- The reply at s[i]: value, position after it.
local function parse(s, i)
  local t = byte(s, i)
  local e = find(s, "\r\n", i, true)
  local line = sub(s, i + 1, e - 1)
  local nx = e + 2
  if t == 36 then                                  -- $ bulk
    local len = tonumber(line)
    if len < 0 then return false, nx end
    return sub(s, nx, nx + len - 1), nx + len + 2
  elseif t == 58 then                              -- : integer
    return tonumber(line), nx
  elseif t == 43 then                              -- + status
    return { ok = line }, nx
  elseif t == 45 then                              -- - error
    return error_table("-" .. line, true), nx
  elseif t == 42 or t == 62 then                   -- * array, > push
    local count = tonumber(line)
    if count < 0 then return false, nx end
    local a = {}
    for j = 1, count do
      local v
      v, nx = parse(s, nx)
      a[j] = v
    end
    return a, nx
  elseif t == 37 then                              -- % map
    local m = {}
    for _ = 1, tonumber(line) do
      local k, v
      k, nx = parse(s, nx)
      v, nx = parse(s, nx)
      if k ~= nil and k == k then m[k] = v end
    end
    return { map = m }, nx
  elseif t == 126 then                             -- ~ set
    local set = {}
    for _ = 1, tonumber(line) do
      local v
      v, nx = parse(s, nx)
      if v ~= nil and v == v then set[v] = true end
    end
    return { set = set }, nx
  elseif t == 95 then                              -- _ null
    return nil, nx
  elseif t == 35 then                              -- # boolean
    return line == "t", nx
  elseif t == 44 then                              -- , double
    return { double = parse_double(line) }, nx
  elseif t == 40 then                              -- ( big number
    return { big_number = line }, nx
  elseif t == 61 then                              -- = verbatim
    local len = tonumber(line)
    local body = sub(s, nx, nx + len - 1)
    return { verbatim_string = { format = sub(body, 1, 3), string = sub(body, 5) } }, nx + len + 2
  elseif t == 124 then                             -- | attribute: skipped
    for _ = 1, tonumber(line) * 2 do
      local _v
      _v, nx = parse(s, nx)
    end
    return parse(s, nx)
  end
  error("kv: unexpected reply from a command: " .. sub(s, i, i + 40))
end

-- The scalar of a one-piece status or integer reply ("+OK\r\n": "OK",
-- ":1\r\n": 1), remembered: most are the same few constant strings.
local scalars, nscalars = {}, 0
local function scalar(s)
  local v = scalars[s]
  if v ~= nil then return v end
  v = sub(s, 2, -3)
  if byte(s, 1) == 58 then v = tonumber(v) end
  if nscalars >= 1024 then scalars, nscalars = {}, 0 end
  scalars[s] = v
  nscalars = nscalars + 1
  return v
end

-- The reply in pieces out[1..n] as a Lua value (the pieces cleared). The
-- usual replies (a status, an integer, a bulk) are read without joining.
local function reply_value(out, n)
  local v
  local first = out[1]
  if n == 1 and #first <= 64 and (byte(first, 1) == 43 or byte(first, 1) == 58) then
    v = scalar(first)
    if byte(first, 1) == 43 then v = { ok = v } end
  elseif n == 1 then
    v = parse(first, 1)
  elseif n == 3 and out[3] == "\r\n" and byte(out[1], 1) == 36 and type(out[2]) == "string" then
    v = out[2]
  elseif n == 3 and out[1] == ":" then
    v = tonumber(out[2])
  else
    v = parse(concat(out, "", 1, n), 1)
  end
  if n <= 3 then
    out[1], out[2], out[3] = nil, nil, nil   -- no loop: see call()
  else
    for i = 1, n do out[i] = nil end
  end
  return v
end

-- -- Lua values as replies --------------------------------------------------
--
-- What a script's return value becomes: Redis's luaReplyToRedisReply. A
-- string is a bulk, a number an integer (truncated, as a C cast), true 1
-- and false a null (RESP3 scripts: booleans), a table an error, status,
-- double, big number, verbatim, map, set or array by its fields (an
-- array up to its first nil), anything else a null.

local MAX_DEPTH = 1000   -- nesting past which an element is an error, as Redis's stack limit

local function int_text(v)
  if v ~= v or v >= 9223372036854775808 or v < -9223372036854775808 then
    return "-9223372036854775808"   -- what the C cast gives on x86-64
  end
  v = v >= 0 and floor(v) or -floor(-v)
  return resp.int_str(v)
end

local function one_line(s)
  if not find(s, "\r", 1, true) and not find(s, "\n", 1, true) then return s end
  return (gsub(s, "[\r\n]", " "))
end
M.one_line = one_line

local status_lines, nstatus = {}, 0   -- status text -> its reply line, remembered
local on_path = setmetatable({}, { __mode = "k" })   -- the tables being written, outermost first

-- Appends value v to out after n; run.errors counts the error replies
-- written, run.counted those to leave out of the error stats.
local function put_value(out, n, v, run, depth)
  local t = type(v)
  if t == "string" then return resp.bulk(out, n, v) end
  if t == "number" then return put(out, n, ":" .. int_text(v) .. "\r\n") end
  if t == "boolean" then
    if run.sc.proto == 3 then return resp.bool(out, n, v) end
    if v then return put(out, n, resp.ONE) end
    return resp.null(out, n)
  end
  if t ~= "table" then return resp.null(out, n) end
  if depth > MAX_DEPTH or on_path[v] then
    -- Too deep, or a table inside itself (whose reply would never end).
    run.errors = run.errors + 1
    monitor.error("-ERR")
    return put(out, n, "-ERR reached lua stack limit\r\n")
  end
  local f = rawget(v, "err")
  if type(f) == "string" then
    local text = one_line((gsub("-" .. f, "[\r\n]+$", "")))
    run.errors = run.errors + 1
    if not rawget(v, "ignore_error_stats_update") then monitor.error(text) end
    return put(out, n, text .. "\r\n")
  end
  f = rawget(v, "ok")
  if type(f) == "string" then
    local line = status_lines[f]
    if not line then
      line = "+" .. one_line(f) .. "\r\n"
      if nstatus >= 1024 then status_lines, nstatus = {}, 0 end
      status_lines[f], nstatus = line, nstatus + 1
    end
    return put(out, n, line)
  end
  f = rawget(v, "double")
  if type(f) == "number" then return resp.double(out, n, f) end
  f = rawget(v, "big_number")
  if type(f) == "string" then
    if resp.is3() then return put(out, n, "(" .. one_line(f) .. "\r\n") end
    return resp.bulk(out, n, one_line(f))
  end
  f = rawget(v, "verbatim_string")
  if type(f) == "table" then
    local fmt, str = rawget(f, "format"), rawget(f, "string")
    if type(fmt) == "string" and type(str) == "string" then
      if not resp.is3() then return resp.bulk(out, n, str) end
      fmt = sub(fmt .. "   ", 1, 3)
      return put(out, n, "=" .. (#str + 4) .. "\r\n" .. fmt .. ":" .. str .. "\r\n")
    end
  end
  f = rawget(v, "map")
  if type(f) == "table" then
    local count = 0
    for _ in next, f do count = count + 1 end
    n = resp.map(out, n, count)
    on_path[v] = true
    for k, x in next, f do
      n = put_value(out, n, k, run, depth + 1)
      n = put_value(out, n, x, run, depth + 1)
    end
    on_path[v] = nil
    return n
  end
  f = rawget(v, "set")
  if type(f) == "table" then
    local count = 0
    for _ in next, f do count = count + 1 end
    n = resp.set(out, n, count)
    on_path[v] = true
    for k in next, f do n = put_value(out, n, k, run, depth + 1) end
    on_path[v] = nil
    return n
  end
  local count = 0
  while rawget(v, count + 1) ~= nil do count = count + 1 end
  n = resp.array(out, n, count)
  on_path[v] = true
  for j = 1, count do n = put_value(out, n, rawget(v, j), run, depth + 1) end
  on_path[v] = nil
  return n
end

-- -- The running script ---------------------------------------------------------

-- The run in progress, or nil. There is one at a time (EVAL and FCALL
-- are noscript), so its table is reused: { sc, fn, name, eval, ro,
-- allow_oom, oom, dirty, in_call, busy, deadline, stopped, errors }.
local current = nil
local the_run = {}

-- The client a script's commands run as (Redis's lua client): a
-- transaction's view of the dispatcher (in_exec), its own protocol
-- (redis.setresp), the caller's socket only so its commands are counted
-- in INFO commandstats and the slow log (nothing is sent on it, and
-- nothing parks: in_exec).
local ScriptClient = {}
ScriptClient.__index = ScriptClient
function ScriptClient.can_stream() return false end
local sc = setmetatable({ id = 0, peer = "lua", nsubs = 0, proto = 2, waited = 0, quit = false,
                          gone = false, in_exec = true, script = true }, ScriptClient)
the_run.sc = sc

-- -- The busy-script limit ------------------------------------------------------

local busy_hook

-- Whether a function (its source) is kv's or cohost's own code, where
-- the limit never strikes: loaded from a file ("@path"), unlike scripts
-- ("@user_script", "@user_function", or a load()ed chunk, whose name
-- sandbox.compile keeps from looking like a file).
local function kv_code(source)
  return byte(source, 1) == 64 and source ~= "@user_script" and source ~= "@user_function"
end
M.kv_code = kv_code

busy_hook = own(function()
  local run = current
  if not run or not run.deadline or now_us() < run.deadline then return end
  -- From now on at every instruction: a pcall in the script must not be
  -- able to catch the error and go on.
  if not run.hurried then
    run.hurried = true
    sethook(busy_hook, "", 1)
  end
  local info = getinfo(2, "S")
  if not info or info.what == "C" or kv_code(info.source) then return end
  if run.load then error(error_table("FUNCTION LOAD timeout"), 0) end
  if not run.stopped then
    run.stopped = true
    cohost.log(cohost.WARN, "kv: ", run.eval and "script " or "function ", run.name, " ran past ",
               "busy-reply-threshold (", run.busy, " ms): stopped")
  end
  error({ err = "ERR Script killed: it ran past busy-reply-threshold (" .. run.busy .. " ms)" }, 0)
end)

-- The hook is installed for each run that has a limit and removed after
-- it: while one is installed the interpreter counts instructions
-- everywhere, which kv's own interpreted code pays for (more than the two
-- lua_sethook calls cost: docs/benchmarks.md); each call also aborts a
-- trace being recorded, if any, which does no harm here (no trace spans
-- a script: the script is kept out of the JIT).
local function hook_on(run)
  run.hurried = false
  sethook(busy_hook, "", HOOK_EVERY)
end

-- Removes the hook after a run, unless another took its place meanwhile
-- (the CPU watchdog's, which puts back the one it displaced when it fires).
local function hook_done(run)
  if run.deadline and gethook() == busy_hook then sethook() end
  run.hurried = false
end

-- Runs fn(...) under the limit of ms milliseconds as a library's top
-- level (FUNCTION LOAD: functions.lua); returns pcall's results.
function M.load_limited(ms, name, fn, ...)
  local run = { load = true, name = name, deadline = ms > 0 and now_us() + ms * 1000 or nil }
  current = run
  if run.deadline then hook_on(run) end
  local function done(...)
    current = nil
    hook_done(run)
    return ...
  end
  return done(pcall(fn, ...))
end

-- -- redis.* --------------------------------------------------------------------

local dispatch   -- multi.dispatch, once server.lua has set it

-- redis.call and redis.pcall: raise says which; argv the arguments
-- (argc of them, as the script gave them). Redis's
-- luaRedisGenericCommand and scriptCall, checks in their order.
local out_buf = {}

local function refuse(raise, text, ignored)
  local e = error_table(text, ignored)
  if raise then error(e, 0) end
  return e
end

local function call(raise, argv, argc)
  local run = current
  if not run then
    return refuse(true, "redis.call/pcall can only be called inside a script invocation")
  end
  if argc == 0 then return refuse(raise, "Please specify at least one argument for this redis lib call") end
  -- Strings as they are, numbers as "%.17g". No loop for the usual few
  -- arguments: a loop would start a trace of its own, which cannot
  -- return into the interpreted script, and all of this would then run
  -- interpreted (LuaJIT's "return to lower frame").
  local a1, a2, a3 = argv[1], argv[2], argv[3]
  if type(a1) ~= "string" or (argc >= 2 and type(a2) ~= "string") or (argc >= 3 and type(a3) ~= "string")
      or argc > 3 then
    for i = 1, argc do
      local a = argv[i]
      local t = type(a)
      if t == "number" then
        argv[i] = format("%.17g", a)
      elseif t ~= "string" then
        return refuse(raise, "Lua redis lib command arguments must be strings or integers")
      end
    end
  end
  local cmd, badsub = R.lookup(argv, argc)
  local why
  if not cmd or badsub then
    why = "Unknown Redis command called from script"
  elseif (cmd.arity > 0 and argc ~= cmd.arity) or argc < -cmd.arity then
    why = "Wrong number of args calling Redis command from script"
  elseif cmd.flag.noscript then
    why = "This Redis command is not allowed from script"
  elseif run.ro and (cmd.write or MAY_REPLICATE[cmd.name]) then
    why = "Write commands are not allowed from read-only scripts."
  elseif cmd.write and not run.dirty and R.write_error then
    why = sub(R.write_error, 1, -3)
  elseif run.oom and not run.dirty and cmd.flag.denyoom then
    why = "-OOM command not allowed when used memory > 'maxmemory'."
  end
  if why then
    if cmd and not badsub then cmd.rejected = cmd.rejected + 1 end
    local e = error_table(why, true)
    monitor.error("-" .. e.err)
    if raise then error(e, 0) end
    return e
  end
  if cmd.write then run.dirty = true end
  local out = out_buf
  run.in_call = true
  sc.in_exec = true   -- out_of_memory in the dispatcher may have cleared it
  local ok, n = pcall(dispatch, sc, argv, argc, out, 0)
  run.in_call = false
  if not ok then
    -- A bug in a command: logged, and the script gets an error.
    for i = 1, #out do out[i] = nil end
    cohost.log(cohost.ERR, "kv: '", cmd.name, "' called from a script failed: ", n)
    return refuse(raise, "internal error in '" .. cmd.name .. "' (see the server log)", true)
  end
  local v = reply_value(out, n)
  if raise and type(v) == "table" and rawget(v, "err") and rawget(v, "ignore_error_stats_update") then
    error(v, 0)
  end
  -- A trace cannot return into the script (kept out of the JIT): one
  -- that recorded all of the above would be thrown away at the return.
  -- A call the JIT does not compile ends it here instead ("stitch"), so
  -- the command's path runs compiled.
  gethook()
  return v
end

local api = {}

-- The arguments go to one reused array (a command never keeps its argv,
-- and a command never runs a script): the usual three or four are
-- copied without select's O(n) per argument.
local argv_buf = {}
local argv_high = 4   -- argv_buf's entries past 4 are nil beyond this
local function collect(a1, a2, a3, a4, ...)
  local argv = argv_buf
  argv[1], argv[2], argv[3], argv[4] = a1, a2, a3, a4
  local more = select("#", ...)
  if more > 0 or argv_high > 4 then
    for i = 5, argv_high do argv[i] = nil end
    for i = 1, more do argv[4 + i] = (select(i, ...)) end
    argv_high = 4 + more
  end
  return argv
end

api.call = own(function(...) return call(true, collect(...), select("#", ...)) end)
api.pcall = own(function(...) return call(false, collect(...), select("#", ...)) end)

api.sha1hex = own(function(...)
  if select("#", ...) ~= 1 then error(error_table("wrong number of arguments"), 0) end
  local s = ...
  if type(s) == "number" then s = tostring(s) elseif type(s) ~= "string" then s = "" end
  return M.sha1hex(s)
end)

api.error_reply = own(function(...)
  local s = ...
  if select("#", ...) ~= 1 or type(s) ~= "string" then
    return error_table("wrong number or type of arguments")
  end
  if byte(s, 1) ~= 45 then s = "-" .. s end
  return error_table(s)
end)

api.status_reply = own(function(...)
  local s = ...
  if select("#", ...) ~= 1 or type(s) ~= "string" then
    return error_table("wrong number or type of arguments")
  end
  return { ok = s }
end)

-- redis.log(level, ...): Redis's levels 0 (debug) to 3 (warning), as
-- cohost's log levels.
local LOG_LEVEL = { [0] = cohost.DEBUG, [1] = cohost.INFO, [2] = cohost.NOTICE, [3] = cohost.WARN }
api.LOG_DEBUG, api.LOG_VERBOSE, api.LOG_NOTICE, api.LOG_WARNING = 0, 1, 2, 3
api.log = own(function(...)
  local argc = select("#", ...)
  if argc < 2 then error(error_table("redis.log() requires two arguments or more."), 0) end
  local level = tonumber((...))
  if not level then error(error_table("First argument must be a number (log level)."), 0) end
  level = level >= 0 and floor(level) or -floor(-level)
  if not LOG_LEVEL[level] then error(error_table("Invalid debug level."), 0) end
  local parts = {}
  for i = 2, argc do
    local a = select(i, ...)
    if type(a) == "string" or type(a) == "number" then parts[#parts + 1] = tostring(a) end
  end
  cohost.log(LOG_LEVEL[level], concat(parts, " "))
end)

api.setresp = own(function(...)
  if not current then
    error(error_table("redis.setresp can only be called inside a script invocation"), 0)
  end
  if select("#", ...) ~= 1 then error(error_table("redis.setresp() requires one argument."), 0) end
  local v = tonumber((...))
  if v ~= 2 and v ~= 3 then error(error_table("RESP version must be 2 or 3."), 0) end
  sc.proto = v
end)

-- redis.set_repl: REPL_NONE or REPL_REPLICA keeps the script's next
-- writes out of the log (kv has no replicas: the log is all there is).
api.REPL_NONE, api.REPL_AOF, api.REPL_SLAVE, api.REPL_REPLICA, api.REPL_ALL = 0, 1, 2, 2, 3
api.set_repl = own(function(...)
  if not current then
    error(error_table("redis.set_repl can only be called inside a script invocation"), 0)
  end
  if select("#", ...) ~= 1 then error(error_table("redis.set_repl() requires two arguments."), 0) end
  local flags = tonumber((...)) or 0
  flags = flags >= 0 and floor(flags) or -floor(-flags)
  if flags < 0 or flags > 3 then
    error(error_table("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."), 0)
  end
  sc.nolog = flags % 2 == 0
end)

api.replicate_commands = own(function() return true end)

-- kv has one user, allowed everything: a command that exists is allowed.
api.acl_check_cmd = own(function(...)
  if not current then
    error(error_table("redis.acl_check_cmd can only be called inside a script invocation"), 0)
  end
  local argc = select("#", ...)
  if argc == 0 then error(error_table("Please specify at least one argument for this redis lib call"), 0) end
  local argv = {}
  for i = 1, argc do
    local a = select(i, ...)
    if type(a) == "number" then a = format("%.17g", a)
    elseif type(a) ~= "string" then
      error(error_table("Lua redis lib command arguments must be strings or integers"), 0)
    end
    argv[i] = a
  end
  local cmd, badsub = R.lookup(argv, argc)
  if not cmd or badsub then error(error_table("Invalid command passed to redis.acl_check_cmd()"), 0) end
  return true
end)

-- The version kv follows (INFO's redis_version).
local major, minor, patch = admin.version:match("^(%d+)%.(%d+)%.(%d+)")
api.REDIS_VERSION = admin.version
api.REDIS_VERSION_NUM = tonumber(major) * 65536 + tonumber(minor) * 256 + tonumber(patch)

M.api = api

-- redis for EVAL: the API and the debugger's stubs (there is no
-- debugger: SCRIPT DEBUG is not there).
local eval_redis = {}
for k, v in pairs(api) do eval_redis[k] = v end
eval_redis.breakpoint = own(function() return false end)
eval_redis.debug = own(function() end)

-- Redis's error handler, a global of EVAL's: the error as a table with
-- the script's source and line. Frames of C functions and of kv's own
-- Lua code (redis.call...) are skipped: the line named is the script's.
local function on_error(e)
  local info, source, line
  for level = 2, 30 do
    info = getinfo(level, "Sl")
    if not info or (info.what ~= "C" and not kv_code(info.source)) then break end
  end
  if info then
    source, line = info.source, info.currentline
  elseif current and current.fn then
    -- No frame of the script left: the call that failed was a tail call
    -- ("return redis.call(...)"), whose caller's frame LuaJIT does not
    -- keep (Lua 5.1, Redis's, does). The script's last line is named:
    -- where such a return usually is.
    local fi = getinfo(current.fn, "SL")
    source, line = fi.source, 0
    for l in pairs(fi.activelines or {}) do
      if l > line then line = l end
    end
  end
  if type(e) ~= "table" or sandbox.is_readonly(e) then e = { err = "ERR " .. tostring(e) } end
  if source then
    rawset(e, "source", source)
    rawset(e, "line", line)
  end
  return e
end
own(on_error)

local eval_base = sandbox.base({ redis = sandbox.readonly(eval_redis),
                                 __redis__err__handler = on_error })

-- The globals FCALL's functions see: EVAL's, without KEYS, ARGV, the
-- error handler and the debugger's stubs.
M.function_base = sandbox.base({ redis = sandbox.readonly(api) })

-- -- Running --------------------------------------------------------------------

local HEX20 = string.rep("%02x", 20)
function M.sha1hex(s)
  return format(HEX20, byte(sha1_bin(s), 1, 20))
end

-- Script flags: those of a "#!lua flags=..." line (and of
-- redis.register_function), Redis's names.
M.FLAGS = { "no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys" }
local FLAG_SET = {}
for _, f in ipairs(M.FLAGS) do FLAG_SET[f] = true end
M.FLAG_SET = FLAG_SET

-- Before a script with flags runs (Redis's scriptPrepareForRun): nil, or
-- the error reply that refuses it.
local function refused(flags, ro)
  if flags.compat then return nil end
  if not flags["no-writes"] then
    if R.write_error then
      return "-MISCONF kv cannot write to its append-only log right now. Writable scripts are "
        .. "blocked. Use 'no-writes' flag for read only scripts. AOF error: "
        .. one_line(sub(R.write_error, 2, -3)) .. "\r\n"
    end
    if ro then return "-ERR Can not execute a script with write flag using *_ro command.\r\n" end
  end
  if evict.limit > 0 and not flags["allow-oom"] and not flags["no-writes"] and not evict.run() then
    return "-OOM allow-oom flag is not set on the script, can not run it when used memory > "
      .. "'maxmemory'\r\n"
  end
  return nil
end

-- Runs fn for client c and appends its reply: a script (eval: its KEYS
-- and ARGV set in G) or a function (called with keys and args). name is
-- the script's sha1 or the function's name, for errors; flags its flags;
-- ro whether the command was a *_RO one; cmd the command (its failed
-- calls). argv[first..argc] are the keys (numkeys) then the arguments.
-- Returns the new reply count.
function M.run(c, cmd, fn, G, env, name, flags, ro, eval, argv, first, numkeys, argc, out, n)
  if not flags.compat then
    local why = refused(flags, ro)
    if why then return put(out, n, why) end
  end
  if current then
    return put(out, n, "-ERR a script is already running\r\n")   -- cannot happen: EVAL is noscript
  end
  dispatch = dispatch or multi.dispatch
  -- KEYS and ARGV, fresh for each run (a script may change them); the
  -- usual few without a loop (see call()).
  local keys, args
  if numkeys == 0 then keys = {}
  elseif numkeys == 1 then keys = { argv[first] }
  else
    keys = {}
    for i = 1, numkeys do keys[i] = argv[first + i - 1] end
  end
  local nargs, a = argc - first - numkeys + 1, first + numkeys
  if nargs == 0 then args = {}
  elseif nargs == 1 then args = { argv[a] }
  elseif nargs == 2 then args = { argv[a], argv[a + 1] }
  else
    args = {}
    for i = a, argc do args[i - a + 1] = argv[i] end
  end
  local busy = admin.busy_reply_ms
  local run = the_run
  run.fn, run.name, run.eval, run.dirty, run.errors, run.in_call, run.stopped =
    fn, name, eval, false, 0, false, false
  if flags.compat then
    run.ro, run.allow_oom = ro, false
  else
    run.ro, run.allow_oom = ro or flags["no-writes"] or false, flags["allow-oom"] or false
  end
  run.busy, run.deadline = busy, busy > 0 and now_us() + busy * 1000 or nil
  -- OOM before the script (Redis's pre_command_oom_state): its first
  -- command that may add data is refused (allow-oom lets it).
  run.oom = not run.allow_oom and evict.limit > 0 and not evict.run()
  -- Its records join the caller's transaction when it runs inside EXEC.
  sc.proto, sc.nolog, sc.peer, sc.name = 2, false, c.peer, c.name
  sc.sock = c.sock
  sc.multi_logged = c.in_exec and c.multi_logged or false
  if eval then
    rawset(G, "KEYS", keys)
    rawset(G, "ARGV", args)
  end
  current = run
  sandbox.current_env = env
  if run.deadline then hook_on(run) end
  local ok, r
  gethook()   -- a trace ends here, before the script: see call()
  if eval then
    ok, r = xpcall(fn, on_error)
  else
    ok, r = xpcall(fn, on_error, keys, args)
  end
  hook_done(run)
  current = nil
  sandbox.current_env = nil
  if eval then
    rawset(G, "KEYS", nil)
    rawset(G, "ARGV", nil)
  end
  sc.sock = nil
  if c.in_exec then
    c.multi_logged = sc.multi_logged
  elseif sc.multi_logged then
    R.log_exec_end = true   -- the dispatcher logs EXEC after this command
  end
  sc.multi_logged = false
  resp.use(c.proto)
  if ok then
    n = put_value(out, n, r, run, 1)
  else
    local msg, ignored = nil, false
    if type(r) == "table" then
      msg = rawget(r, "err")
      ignored = rawget(r, "ignore_error_stats_update") and true or false
      if type(msg) == "number" then msg = tostring(msg) end
      if type(msg) ~= "string" then msg = "ERR the script raised a table without an 'err' field" end
      local source, line = rawget(r, "source"), rawget(r, "line")
      if source and line then msg = msg .. " script: " .. name .. ", on " .. tostring(source) .. ":"
        .. tostring(line) .. "." end
    else
      msg = "ERR Error running script " .. name .. ", " .. sub(tostring(r), 1, 100)
    end
    msg = one_line((gsub("-" .. msg, "[\r\n]+$", "")))
    if not ignored then monitor.error(msg) end
    run.errors = run.errors + 1
    n = put(out, n, msg .. "\r\n")
  end
  -- Error replies are counted here (the dispatcher would count only a
  -- single one, and would count it in the error stats again).
  if run.errors > 0 then cmd.failed = cmd.failed + 1 end
  R.error_counted = true
  return n
end

-- Whether a script or function is running now (never, when a client
-- asks: a script runs without a yield).
function M.running()
  return current ~= nil
end

-- -- The script cache -----------------------------------------------------------

-- sha1 -> { fn, env, G, flags, body }. Lost at restart, as Redis 7's.
local scripts = {}
local by_body = {}   -- body -> the same entries: EVAL finds its script without a sha1
M.scripts = scripts

-- Redis's evalExtractShebangFlags: flags (compat = no "#!" line), the
-- length of the line; or nil and the error text.
local function shebang_flags(body)
  if sub(body, 1, 2) ~= "#!" then return { compat = true }, 0 end
  local e = find(body, "\n", 1, true)
  if not e then return nil, "Invalid script shebang" end
  local parts = {}
  for w in sub(body, 1, e - 1):gmatch("%S+") do parts[#parts + 1] = w end
  if #parts == 0 then return nil, "Invalid engine in script shebang" end
  if parts[1] ~= "#!lua" then return nil, "Unexpected engine in script shebang: " .. parts[1] end
  local flags = {}
  for i = 2, #parts do
    local list = parts[i]:match("^flags=(.*)$")
    if not list then return nil, "Unknown lua shebang option: " .. parts[i] end
    for f in (list == "" and "" or list .. ","):gmatch("([^,]*),") do
      if not FLAG_SET[f] then return nil, "Unexpected flag in script shebang: " .. f end
      flags[f] = true
    end
  end
  return flags, e - 1
end
M.shebang_flags = shebang_flags

-- The script for body (compiled and cached the first time), or nil and
-- the error reply. sha: its sha1 when known.
local function script_for(body, sha)
  local s = by_body[body]
  if s then return s end
  sha = sha or M.sha1hex(body)
  s = scripts[sha]
  if s then return s end
  local flags, skip = shebang_flags(body)
  if not flags then return nil, resp.err("ERR " .. skip) end
  local env, G = sandbox.env(eval_base)
  -- The "#!" line is left out but its line feed kept: line numbers stay.
  local fn, err = sandbox.compile(sub(body, skip + 1), "@user_script", env)
  if not fn then return nil, resp.err("ERR Error compiling script (new function): " .. err) end
  s = { fn = fn, env = env, G = G, flags = flags, body = body, sha = sha }
  scripts[sha] = s
  by_body[body] = s
  return s
end

-- -- EVAL -----------------------------------------------------------------------

local reg = R.register

-- numkeys' usual values, read without ints.parse.
local SMALL = {}
for i = 0, 9 do SMALL[tostring(i)] = i end

-- Redis's evalGenericCommand; sha says EVALSHA.
local function eval_command(cmd, c, argv, argc, out, n, sha, ro)
  if sha and #argv[2] ~= 40 then return put(out, n, M.NOSCRIPT) end
  local numkeys = SMALL[argv[3]] or ints.parse(argv[3])
  if not numkeys then return put(out, n, resp.NOT_INT) end
  if numkeys > argc - 3 then
    return put(out, n, "-ERR Number of keys can't be greater than number of args\r\n")
  elseif numkeys < 0 then
    return put(out, n, "-ERR Number of keys can't be negative\r\n")
  end
  local s, err
  if sha then
    s = scripts[argv[2]] or scripts[lower(argv[2])]
    if not s then return put(out, n, M.NOSCRIPT) end
  else
    s, err = script_for(argv[2])
    if not s then return put(out, n, err) end
  end
  return M.run(c, cmd, s.fn, s.G, s.env, s.sha, s.flags, ro, true, argv, 4, numkeys, argc, out, n)
end

local eval_cmd, eval_ro_cmd, evalsha_cmd, evalsha_ro_cmd
eval_cmd = reg("eval", function(c, argv, argc, out, n)
  return eval_command(eval_cmd, c, argv, argc, out, n, false, false)
end)
eval_ro_cmd = reg("eval_ro", function(c, argv, argc, out, n)
  return eval_command(eval_ro_cmd, c, argv, argc, out, n, false, true)
end)
evalsha_cmd = reg("evalsha", function(c, argv, argc, out, n)
  return eval_command(evalsha_cmd, c, argv, argc, out, n, true, false)
end)
evalsha_ro_cmd = reg("evalsha_ro", function(c, argv, argc, out, n)
  return eval_command(evalsha_ro_cmd, c, argv, argc, out, n, true, true)
end)

-- -- SCRIPT ---------------------------------------------------------------------

reg("script", nil)

reg("script|load", function(_, argv, _, out, n)
  local s, err = script_for(argv[3])
  if not s then return put(out, n, err) end
  return resp.bulk(out, n, s.sha)
end)

reg("script|exists", function(_, argv, argc, out, n)
  n = resp.array(out, n, argc - 2)
  for i = 3, argc do n = put(out, n, scripts[lower(argv[i])] and resp.ONE or resp.ZERO) end
  return n
end)

-- SCRIPT FLUSH [ASYNC|SYNC]: both at once (the scripts are garbage then).
reg("script|flush", function(_, argv, argc, out, n)
  local mode = argc == 3 and lower(argv[3])
  if argc > 3 or (argc == 3 and mode ~= "async" and mode ~= "sync") then
    return put(out, n, "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n")
  end
  for k in pairs(scripts) do scripts[k] = nil end
  for k in pairs(by_body) do by_body[k] = nil end
  return put(out, n, resp.OK)
end)

-- No script ever runs while a client is answered (see the header).
reg("script|kill", function(_, _, _, out, n)
  return put(out, n, M.NOTBUSY)
end)

reg("script|help", function(_, _, _, out, n)
  return monitor.help(out, n, {
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
  })
end)

return M
