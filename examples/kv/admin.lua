-- Connection and server commands: PING, ECHO, QUIT, SELECT, INFO, CONFIG
-- (GET for what clients and redis-benchmark ask, RESETSTAT), COMMAND
-- (enough for redis-cli), TIME.
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local ints = require "kv.ints"

local reg = R.register
local bulk, int = resp.bulk, resp.int
local lower, concat, format = string.lower, table.concat, string.format

local M = {}

M.version = "7.0.0"   -- the Redis version whose behaviour this follows

reg("ping", -1, function(c, argv, argc, out, n)
  if argc > 2 then return put(out, n, "-ERR wrong number of arguments for 'ping' command\r\n") end
  if (c.nsubs or 0) > 0 then
    -- RESP2 subscribers get pings as a message-shaped array.
    return put(out, n, "*2\r\n$4\r\npong\r\n" .. resp.bulk_str(argc == 2 and argv[2] or ""))
  end
  if argc == 2 then return bulk(out, n, argv[2]) end
  return put(out, n, resp.PONG)
end, { pubsub = true })

reg("echo", 2, function(_, argv, _, out, n)
  return bulk(out, n, argv[2])
end)

reg("quit", -1, function(c, _, _, out, n)
  c.quit = true
  return put(out, n, resp.OK)
end, { pubsub = true })

reg("select", 2, function(_, argv, _, out, n)
  local db = ints.parse(argv[2])
  if db == nil then
    out[n + 1] = resp.NOT_INT
  elseif db ~= 0 then
    out[n + 1] = "-ERR DB index is out of range\r\n"
  else
    out[n + 1] = resp.OK
  end
  return n + 1
end)

reg("time", 1, function(_, _, _, out, n)
  local t = cohost.now()
  local s = math.floor(t)
  out[n + 1] = "*2\r\n" .. resp.bulk_str(tostring(s))
    .. resp.bulk_str(tostring(math.floor((t - s) * 1e6)))
  return n + 1
end)

-- -- INFO ------------------------------------------------------------------

local aof_status   -- set by main.lua: function() -> table of persistence fields

function M.set_aof_status(fn)
  aof_status = fn
end

local function pid()
  local f = io.open("/proc/self/stat")
  local p = f and f:read("*n") or 0
  if f then f:close() end
  return p
end
local PID = pid()

-- "Linux 6.1.0 x86_64", as uname -srm, without running a program.
local function uname()
  local function first_line(path)
    local f = io.open(path)
    local s = f and f:read("*l")
    if f then f:close() end
    return s
  end
  local arch = jit.arch == "x64" and "x86_64" or jit.arch
  return (first_line("/proc/sys/kernel/ostype") or "Linux") .. " "
    .. (first_line("/proc/sys/kernel/osrelease") or "") .. " " .. arch
end
local OS

local function section(name, fields)
  local t = { "# " .. name }
  for _, kv in ipairs(fields) do t[#t + 1] = kv[1] .. ":" .. tostring(kv[2]) end
  return concat(t, "\r\n") .. "\r\n"
end

local sections = {}

function sections.server()
  OS = OS or uname()
  local up = math.floor(cohost.now() - R.stats.started)
  return section("Server", {
    { "redis_version", M.version },
    { "redis_mode", "standalone" },
    { "kv_implementation", "cohost examples/kv" },
    { "os", OS },
    { "arch_bits", 64 },
    { "multiplexing_api", "epoll" },
    { "process_id", PID },
    { "tcp_port", R.config.port },
    { "uptime_in_seconds", up },
    { "uptime_in_days", math.floor(up / 86400) },
    { "executable", arg and arg[-1] or "cohost" },
    { "config_file", "" },
  })
end

function sections.clients()
  return section("Clients", {
    { "connected_clients", R.stats.clients },
    { "blocked_clients", R.stats.blocked },
    { "pubsub_clients", R.stats.pubsub_clients or 0 },
    -- kv's own: clients whose long command (KEYS) is paused for others.
    { "kv_paused_clients", R.stats.paused },
  })
end

function sections.memory()
  local kb = collectgarbage("count")
  return section("Memory", {
    { "used_memory", math.floor(kb * 1024) },
    { "used_memory_human", format("%.2fM", kb / 1024) },
    { "used_memory_lua", math.floor(kb * 1024) },
  })
end

function sections.persistence()
  local fields = { { "loading", 0 }, { "rdb_changes_since_last_save", 0 },
                   { "aof_enabled", R.config.appendonly and 1 or 0 } }
  if aof_status then
    for _, kv in ipairs(aof_status()) do fields[#fields + 1] = kv end
  end
  return section("Persistence", fields)
end

function sections.stats()
  return section("Stats", {
    { "total_connections_received", R.stats.connections },
    { "total_commands_processed", R.stats.commands },
    { "expired_keys", store.expired },
    { "keyspace_hits", store.hits },
    { "keyspace_misses", store.misses },
    { "pubsub_channels", R.stats.pubsub_channels },
    { "pubsub_patterns", R.stats.pubsub_patterns },
  })
end

-- CPU time from getrusage(2), as Redis's INFO cpu: the process, the
-- children it waited for, and the calling (main) thread.
local ffi = require "ffi"
ffi.cdef [[
struct kv_timeval { long tv_sec; long tv_usec; };
struct kv_rusage { struct kv_timeval ru_utime, ru_stime; long ru_rest[14]; };
int getrusage(int who, struct kv_rusage *usage);
]]
local RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD = 0, -1, 1
local ru = ffi.new("struct kv_rusage")

local function cpu(who)
  if ffi.C.getrusage(who, ru) ~= 0 then return "0.000000", "0.000000" end
  local function secs(tv) return format("%d.%06d", tonumber(tv.tv_sec), tonumber(tv.tv_usec)) end
  return secs(ru.ru_stime), secs(ru.ru_utime)
end

function sections.cpu()
  local sys, user = cpu(RUSAGE_SELF)
  local csys, cuser = cpu(RUSAGE_CHILDREN)
  local msys, muser = cpu(RUSAGE_THREAD)
  return section("CPU", {
    { "used_cpu_sys", sys },
    { "used_cpu_user", user },
    { "used_cpu_sys_children", csys },
    { "used_cpu_user_children", cuser },
    { "used_cpu_sys_main_thread", msys },
    { "used_cpu_user_main_thread", muser },
  })
end

function sections.keyspace()
  local t = { "# Keyspace" }
  if store.size() > 0 then
    t[2] = format("db0:keys=%d,expires=%d,avg_ttl=0", store.size(), store.expiring())
  end
  return concat(t, "\r\n") .. "\r\n"
end

local order = { "server", "clients", "memory", "persistence", "stats", "cpu", "keyspace" }

reg("info", -1, function(_, argv, argc, out, n)
  local want = {}
  local all = argc == 1
  for i = 2, argc do
    local s = lower(argv[i])
    if s == "all" or s == "default" or s == "everything" then all = true end
    want[s] = true
  end
  local parts = {}
  for _, name in ipairs(order) do
    if all or want[name] then parts[#parts + 1] = sections[name]() end
  end
  return bulk(out, n, concat(parts, "\r\n"))
end)

-- -- CONFIG ----------------------------------------------------------------

-- Parameters CONFIG GET knows; values are read when asked.
local params = {
  appendonly = function() return R.config.appendonly and "yes" or "no" end,
  appendfsync = function() return R.config.appendfsync end,
  appendfilename = function() return "appendonly.aof" end,
  dir = function() return R.config.dir end,
  port = function() return tostring(R.config.port) end,
  bind = function() return R.config.bind end,
  save = function() return "" end,
  databases = function() return "1" end,
  maxmemory = function() return "0" end,
  ["maxmemory-policy"] = function() return "noeviction" end,
  timeout = function() return tostring(R.config.timeout) end,
  maxclients = function() return tostring(R.config.maxclients) end,
  ["notify-keyspace-events"] = function() return require("kv.notify").get() end,
  ["proto-max-bulk-len"] = function() return tostring(resp.MAX_BULK) end,
  ["io-threads"] = function() return "1" end,
  ["cluster-enabled"] = function() return "no" end,
}

-- CONFIG SET's parameters: name -> function(value) -> nil, or the
-- reason the value is refused (Redis's texts).
local function int_param(name, set)
  return function(v)
    local x = ints.parse(v)
    if x == nil then return "argument couldn't be parsed into an integer" end
    if x < 0 or x > 2147483647 then return "argument must be between 0 and 2147483647 inclusive" end
    R.config[name] = tonumber(x)
    if set then set(tonumber(x)) end
  end
end

M.setters = {
  appendfsync = function(v)
    v = lower(v)
    if v ~= "everysec" and v ~= "always" and v ~= "no" then
      return "argument(s) must be one of the following: everysec, always, no"
    end
    R.config.appendfsync = v
    if M.on_appendfsync then M.on_appendfsync(v) end
  end,
  maxclients = int_param("maxclients"),
  timeout = int_param("timeout"),
  ["notify-keyspace-events"] = function(v)
    if not require("kv.notify").set(v) then
      return "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
    end
  end,
}

-- CONFIG SET name value [name value ...]: all or none (each is checked
-- before any is set, as Redis 7.0 does).
local function config_set(argv, argc, out, n)
  if argc < 4 or argc % 2 == 1 then
    return put(out, n, "-ERR wrong number of arguments for 'config|set' command\r\n")
  end
  for i = 3, argc, 2 do
    if not M.setters[lower(argv[i])] then
      return put(out, n, resp.err("ERR Unknown option or number of arguments for CONFIG SET - '"
                                  .. argv[i] .. "'"))
    end
  end
  local old = {}
  for i = 3, argc, 2 do
    local name = lower(argv[i])
    old[#old + 1] = { name, params[name]() }
    local why = M.setters[name](argv[i + 1])
    if why then
      for j = #old - 1, 1, -1 do M.setters[old[j][1]](old[j][2]) end
      return put(out, n, resp.err("ERR CONFIG SET failed (possibly related to argument '" .. name
                                  .. "') - " .. why))
    end
  end
  return put(out, n, resp.OK)
end

reg("config", -2, function(_, argv, argc, out, n)
  local sub = lower(argv[2])
  if sub == "get" then
    if argc < 3 then
      return put(out, n, "-ERR wrong number of arguments for 'config|get' command\r\n")
    end
    local names, seen = {}, {}
    for i = 3, argc do
      local match = store.matcher(lower(argv[i]))
      for name in pairs(params) do
        if not seen[name] and match(name) then
          seen[name] = true
          names[#names + 1] = name
        end
      end
    end
    table.sort(names)
    n = n + 1
    out[n] = resp.array_head(#names * 2)
    for _, name in ipairs(names) do
      n = bulk(out, n, name)
      n = bulk(out, n, params[name]())
    end
    return n
  elseif sub == "resetstat" then
    R.stats.commands, R.stats.connections = 0, 0
    store.hits, store.misses, store.expired = 0, 0, 0
    return put(out, n, resp.OK)
  elseif sub == "set" then
    return config_set(argv, argc, out, n)
  elseif sub == "help" then
    local lines = { "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
                    "RESETSTAT", "    Reset statistics reported by the INFO command." }
    n = n + 1
    out[n] = resp.array_head(#lines)
    for _, l in ipairs(lines) do n = n + 1; out[n] = resp.simple(l) end
    return n
  end
  return put(out, n, resp.err("ERR unknown subcommand '" .. argv[2]:sub(1, 128) ..
                               "'. Try CONFIG HELP."))
end)

-- COMMAND: redis-cli asks COMMAND DOCS for its hints; an empty answer
-- means no hints. COMMAND COUNT is the size of the table.
reg("command", -1, function(_, argv, argc, out, n)
  if argc >= 2 and lower(argv[2]) == "count" then
    local seen, count = {}, 0
    for _, cmd in pairs(R.commands) do
      if not seen[cmd] then seen[cmd] = true; count = count + 1 end
    end
    return put(out, n, int(count))
  end
  return put(out, n, resp.EMPTY_ARRAY)
end)

return M
