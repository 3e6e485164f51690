-- Connection and server commands: PING, ECHO, QUIT, SELECT, TIME, INFO
-- and CONFIG (GET, SET, RESETSTAT, REWRITE, HELP). Replies and error
-- texts are Redis 7.0's (server.c, config.c).
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local ints = require "kv.ints"
local monitor = require "kv.monitor"
local evict = require "kv.evict"
local notify = require "kv.notify"

local reg = R.register
local bulk, int = resp.bulk, resp.int
local lower, concat, format, floor = string.lower, table.concat, string.format, math.floor

local M = {}

M.version = "7.0.0"   -- the Redis version whose behaviour this follows

reg("ping", function(c, argv, argc, out, n)
  if argc > 2 then return put(out, n, "-ERR wrong number of arguments for 'ping' command\r\n") end
  if c.nsubs > 0 and c.proto == 2 then
    -- RESP2 subscribers get pings as a message-shaped array.
    return put(out, n, "*2\r\n$4\r\npong\r\n" .. resp.bulk_str(argc == 2 and argv[2] or ""))
  end
  if argc == 2 then return bulk(out, n, argv[2]) end
  return put(out, n, resp.PONG)
end, { pubsub = true })

reg("echo", function(_, argv, _, out, n)
  return bulk(out, n, argv[2])
end)

reg("quit", function(c, _, _, out, n)
  c.quit = true
  return put(out, n, resp.OK)
end, { pubsub = true })

reg("select", function(_, argv, _, out, n)
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

reg("time", function(_, _, _, out, n)
  local t = cohost.now()
  local s = floor(t)
  out[n + 1] = "*2\r\n" .. resp.bulk_str(tostring(s)) .. resp.bulk_str(tostring(floor((t - s) * 1e6)))
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

-- Bytes as Redis's bytesToHuman prints them.
local function human(b)
  if b < 1024 then return format("%dB", b) end
  if b < 1024 ^ 2 then return format("%.2fK", b / 1024) end
  if b < 1024 ^ 3 then return format("%.2fM", b / 1024 ^ 2) end
  return format("%.2fG", b / 1024 ^ 3)
end

local sections = {}
local peak = 0   -- the largest used_memory INFO saw

function sections.server()
  OS = OS or uname()
  local up = floor(cohost.now() - R.stats.started)
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
    { "uptime_in_days", floor(up / 86400) },
    { "hz", M.hz },
    { "executable", arg and arg[-1] or "cohost" },
    { "config_file", "" },
  })
end

function sections.clients()
  return section("Clients", {
    { "connected_clients", R.stats.clients },
    { "maxclients", R.config.maxclients },
    { "blocked_clients", R.stats.blocked },
    { "pubsub_clients", R.stats.pubsub_clients or 0 },
    -- kv's own: clients whose long command (KEYS) is paused for others.
    { "kv_paused_clients", R.stats.paused },
  })
end

function sections.memory()
  local used = floor(collectgarbage("count") * 1024)
  if used > peak then peak = used end
  return section("Memory", {
    { "used_memory", used },
    { "used_memory_human", human(used) },
    { "used_memory_peak", peak },
    { "used_memory_peak_human", human(peak) },
    -- The data as kv counts it: what maxmemory limits.
    { "used_memory_dataset", floor(store.bytes) },
    { "used_memory_lua", used },
    { "maxmemory", evict.limit },
    { "maxmemory_human", human(evict.limit) },
    { "maxmemory_policy", evict.policy },
    -- kv's own: bytes dropped that the collector has not given back yet.
    { "kv_memory_pending_free", floor(store.freed) },
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
  local s = R.stats
  return section("Stats", {
    { "total_connections_received", s.connections },
    { "total_commands_processed", s.commands },
    { "total_net_input_bytes", s.net_in },
    { "total_net_output_bytes", s.net_out },
    { "rejected_connections", s.rejected_conns },
    { "expired_keys", store.expired },
    { "evicted_keys", s.evicted },
    { "keyspace_hits", store.hits },
    { "keyspace_misses", store.misses },
    { "pubsub_channels", s.pubsub_channels },
    { "pubsub_patterns", s.pubsub_patterns },
    { "total_error_replies", s.error_replies },
  })
end

function sections.replication()
  return section("Replication", { { "role", "master" }, { "connected_slaves", 0 } })
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

local function lines(name, t)
  table.insert(t, 1, "# " .. name)
  return concat(t, "\r\n") .. "\r\n"
end

function sections.commandstats()
  return lines("Commandstats", monitor.commandstats())
end

function sections.errorstats()
  return lines("Errorstats", monitor.errorstats())
end

function sections.latencystats()
  return lines("Latencystats", monitor.latencystats(M.percentiles))
end

function sections.keyspace()
  local t = { "# Keyspace" }
  if store.size() > 0 then
    t[2] = format("db0:keys=%d,expires=%d,avg_ttl=0", store.size(), store.expiring())
  end
  return concat(t, "\r\n") .. "\r\n"
end

-- Redis 7.0's order; "default" leaves out commandstats and latencystats.
local ORDER = { "server", "clients", "memory", "persistence", "stats", "replication", "cpu",
                "commandstats", "errorstats", "latencystats", "keyspace" }
local NOT_DEFAULT = { commandstats = true, latencystats = true }

reg("info", function(_, argv, argc, out, n)
  local want = {}
  local default, all = argc == 1, false
  for i = 2, argc do
    local s = lower(argv[i])
    if s == "all" or s == "everything" then all = true
    elseif s == "default" then default = true end
    want[s] = true
  end
  local parts = {}
  for _, name in ipairs(ORDER) do
    if all or want[name] or (default and not NOT_DEFAULT[name]) then
      parts[#parts + 1] = sections[name]()
    end
  end
  return resp.verbatim(out, n, concat(parts, "\r\n"))
end)

-- -- CONFIG ----------------------------------------------------------------

-- name -> { get = function() -> string, set = function(text) -> nil or
-- the reason it is refused (Redis's texts), fixed = "immutable" or
-- "protected" for those CONFIG SET refuses }. Aliases are entries of
-- their own over the same value (hash-max-ziplist-entries).
local params = {}
M.params = params

local function def(names, get, set, fixed)
  for name in names:gmatch("%S+") do params[name] = { get = get, set = set, fixed = fixed } end
end

local LLONG_MAX = 9223372036854775807LL

-- An integer setting in [lo, hi]; on(v) applies it.
local function int_param(names, lo, hi, initial, on)
  local v = initial
  def(names, function() return ints.str(v) end, function(text)
    local x = ints.parse(text)
    if x == nil then return "argument couldn't be parsed into an integer" end
    if x < lo or x > hi then
      return format("argument must be between %s and %s inclusive", ints.str(lo), ints.str(hi))
    end
    v = tonumber(x)
    if on then on(v) end
  end)
end

-- Redis's memtoull: digits with an optional unit (b, k, kb, m, mb, g,
-- gb; k is 1000, kb 1024), no sign. Returns the bytes or nil.
local UNITS = { [""] = 1, b = 1, k = 1000, kb = 1024, m = 1000 ^ 2, mb = 1024 ^ 2, g = 1000 ^ 3,
                gb = 1024 ^ 3 }
local function memory_value(text)
  local digits, unit = lower(text):match("^(%d+)(%a*)$")
  local mul = unit and UNITS[unit]
  if not mul or #digits > 19 then return nil end
  return tonumber(digits) * mul
end

local function mem_param(names, lo, initial, on)
  local v = initial
  def(names, function() return ints.str(v) end, function(text)
    local x = memory_value(text)
    if not x then return "argument must be a memory value" end
    if x < lo then return format("argument must be between %d and %s inclusive", lo, ints.str(LLONG_MAX)) end
    v = x
    if on then on(v) end
  end)
end

local function bool_param(names, initial, on)
  local v = initial
  def(names, function() return v and "yes" or "no" end, function(text)
    local t = lower(text)
    if t ~= "yes" and t ~= "no" then return "argument must be 'yes' or 'no'" end
    local err = on and on(t == "yes")
    if err then return err end
    v = t == "yes"
  end)
end

local function enum_param(names, choices, initial, on)
  local v = initial
  def(names, function() return v end, function(text)
    local t = lower(text)
    for _, c in ipairs(choices) do
      if c == t then
        v = t
        if on then on(t) end
        return nil
      end
    end
    return "argument(s) must be one of the following: " .. concat(choices, ", ")
  end)
end

local function fixed_param(names, value, why)
  def(names, value, nil, why or "immutable")
end

local INT_MAX, UINT_MAX = 2147483647, 4294967295
local LONG_MAX = LLONG_MAX

fixed_param("appendfilename", function() return "appendonly.aof" end)
fixed_param("dir", function() return R.config.dir end, "protected")
fixed_param("port", function() return tostring(R.config.port) end)
fixed_param("bind", function() return R.config.bind end)
fixed_param("databases", function() return "1" end)
fixed_param("io-threads", function() return "1" end)
fixed_param("cluster-enabled", function() return "no" end)

M.on_appendonly = nil   -- set by main.lua: function(on) -> nil or why it cannot
bool_param("appendonly", true, function(on)
  if on == R.config.appendonly then return nil end
  if not M.on_appendonly then return "the append-only log cannot be switched here" end
  local why = M.on_appendonly(on)
  if why then return why end
  R.config.appendonly = on
end)
params.appendonly.get = function() return R.config.appendonly and "yes" or "no" end

enum_param("appendfsync", { "everysec", "always", "no" }, "everysec", function(v)
  R.config.appendfsync = v
  if M.on_appendfsync then M.on_appendfsync(v) end
end)
params.appendfsync.get = function() return R.config.appendfsync end

mem_param("auto-aof-rewrite-min-size", 0, 64 * 1024 * 1024, function(v)
  require("kv.aof").AUTO_MIN = v
end)
params["auto-aof-rewrite-min-size"].get = function() return ints.str(require("kv.aof").AUTO_MIN) end
int_param("auto-aof-rewrite-percentage", 0, INT_MAX, 100, function(v)
  require("kv.aof").AUTO_PCT = v
end)

-- save: pairs of seconds and changes, as Redis checks them. kv keeps no
-- RDB snapshots, so the setting is kept and shown, and does nothing.
local save = ""
def("save", function() return save end, function(text)
  local t = {}
  for w in text:gmatch("%S+") do t[#t + 1] = w end
  if #t % 2 == 1 then return "Invalid save parameters" end
  for _, w in ipairs(t) do
    local x = ints.parse(w)
    if x == nil or x < 0 then return "Invalid save parameters" end
  end
  if text:find("^%s") or text:find("%s%s") or (text ~= "" and text:find("%s$")) then
    return "Invalid save parameters"
  end
  save = concat(t, " ")
end)

int_param("maxclients", 1, UINT_MAX, 10000, function(v) R.config.maxclients = v end)
int_param("timeout", 0, INT_MAX, 0, function(v) R.config.timeout = v end)
params.maxclients.get = function() return tostring(R.config.maxclients) end
params.timeout.get = function() return tostring(R.config.timeout) end

def("notify-keyspace-events", function() return notify.get() end, function(v)
  if not notify.set(v) then return "Invalid event class character. Use 'Ag$lshzxeKEtmdn'." end
end)

mem_param("proto-max-bulk-len", 1024 * 1024, resp.MAX_BULK, function(v) resp.MAX_BULK = v end)

mem_param("maxmemory", 0, 0, function(v) evict.limit = v end)
enum_param("maxmemory-policy", evict.POLICIES, "noeviction", evict.set_policy)
int_param("maxmemory-samples", 1, INT_MAX, 5, function(v) evict.samples = v end)
int_param("maxmemory-eviction-tenacity", 0, 100, 10, function(v) evict.tenacity = v end)
int_param("lfu-log-factor", 0, INT_MAX, 10, function(v) store.lfu_log_factor = v end)
int_param("lfu-decay-time", 0, INT_MAX, 1, function(v) store.lfu_decay_time = v end)

int_param("slowlog-log-slower-than", -LLONG_MAX - 1, LLONG_MAX, 10000, function(v)
  monitor.config.slower_than = v
end)
int_param("slowlog-max-len", 0, LONG_MAX, 128, function(v) monitor.config.max_len = v end)
int_param("latency-monitor-threshold", 0, LLONG_MAX, 0, function(v) monitor.config.latency_ms = v end)
bool_param("latency-tracking", true, function(on) monitor.config.tracking = on end)

-- latency-tracking-info-percentiles: space-separated numbers from 0 to
-- 100, printed as Redis prints them ("%f" without the trailing zeros).
M.percentiles = { 50, 99, 99.9 }
def("latency-tracking-info-percentiles", function()
  local t = {}
  for i, p in ipairs(M.percentiles) do t[i] = monitor.trim_double(p) end
  return concat(t, " ")
end, function(text)
  local t = {}
  for w in text:gmatch("%S+") do
    local p = tonumber(w)
    if not p or p ~= p then return "Invalid latency-tracking-info-percentiles parameters" end
    if p < 0 or p > 100 then
      return "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
    end
    t[#t + 1] = p
  end
  M.percentiles = t
end)

-- busy-reply-threshold (lua-time-limit, its old name): in ms, how long a
-- script may run (0: for ever). Redis answers others -BUSY past it; kv
-- runs a script on the worker's thread and stops it there (scripting.lua).
M.busy_reply_ms = 5000
int_param("busy-reply-threshold lua-time-limit", 0, LONG_MAX, 5000, function(v) M.busy_reply_ms = v end)

-- hz: how often a second the background work runs (the expiry sweep,
-- giving memory back); 1 to 500 (Redis clamps what is set beyond).
M.hz = 10
int_param("hz", 0, INT_MAX, 10, function(v) M.hz = math.max(1, math.min(500, v)) end)
params.hz.get = function() return tostring(M.hz) end

-- hll-sparse-max-bytes: the size past which a HyperLogLog turns dense
-- (kv keeps Redis's format, kv/hll.lua).
mem_param("hll-sparse-max-bytes", 0, 3000, function(v) require("kv.hll").sparse_max = v end)

-- The encodings' thresholds: kv stores every list, hash, set and sorted
-- set one way whatever their size, so these are kept and shown for the
-- clients and tests that set them, and change nothing.
int_param("hash-max-listpack-entries hash-max-ziplist-entries", 0, LONG_MAX, 512)
mem_param("hash-max-listpack-value hash-max-ziplist-value", 0, 64)
int_param("zset-max-listpack-entries zset-max-ziplist-entries", 0, LONG_MAX, 128)
mem_param("zset-max-listpack-value zset-max-ziplist-value", 0, 64)
int_param("set-max-intset-entries", 0, LONG_MAX, 512)
int_param("list-max-listpack-size list-max-ziplist-size", -INT_MAX - 1, INT_MAX, -2)
int_param("list-compress-depth", 0, INT_MAX, 0)

-- CONFIG SET name value [name value ...]: all or none (each is checked,
-- and the ones set are set back if a later one fails, as Redis 7.0).
reg("config", nil)

reg("config|set", function(_, argv, argc, out, n)
  if argc % 2 == 1 then
    return put(out, n, "-ERR wrong number of arguments for 'config|set' command\r\n")
  end
  local seen = {}
  for i = 3, argc, 2 do
    local name = lower(argv[i])
    local p = params[name]
    if not p then
      return put(out, n, resp.err("ERR Unknown option or number of arguments for CONFIG SET - '"
                                  .. argv[i] .. "'"))
    end
    local why = p.fixed and "can't set " .. p.fixed .. " config" or (seen[p] and "duplicate parameter")
    if why then
      return put(out, n, resp.err("ERR CONFIG SET failed (possibly related to argument '"
                                  .. argv[i] .. "') - " .. why))
    end
    seen[p] = true
  end
  local old = {}
  for i = 3, argc, 2 do
    local name = lower(argv[i])
    local p = params[name]
    old[#old + 1] = { p, p.get() }
    local why = p.set(argv[i + 1])
    if why then
      for j = #old - 1, 1, -1 do old[j][1].set(old[j][2]) end
      return put(out, n, resp.err("ERR CONFIG SET failed (possibly related to argument '"
                                  .. argv[i] .. "') - " .. why))
    end
  end
  return put(out, n, resp.OK)
end)

-- CONFIG GET pattern [pattern ...]: the matching parameters and values,
-- a map (in name order; Redis's is its dict's).
reg("config|get", function(_, argv, argc, out, n)
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
  n = resp.map(out, n, #names)
  for _, name in ipairs(names) do
    n = bulk(out, n, name)
    n = bulk(out, n, params[name].get())
  end
  return n
end)

-- CONFIG RESETSTAT: the counters INFO shows start again.
reg("config|resetstat", function(_, _, _, out, n)
  local s = R.stats
  s.commands, s.connections, s.rejected_conns, s.evicted, s.net_in, s.net_out = 0, 0, 0, 0, 0, 0
  store.hits, store.misses, store.expired = 0, 0, 0
  monitor.reset()
  return put(out, n, resp.OK)
end)

reg("config|rewrite", function(_, _, _, out, n)
  return put(out, n, "-ERR The server is running without a config file\r\n")
end)

reg("config|help", function(_, _, _, out, n)
  return monitor.help(out, n, {
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
  })
end)

return M
