-- A Redis-protocol key-value store on cohost: RESP2 for redis-cli,
-- redis-benchmark and client libraries: strings, lists (with blocking
-- pops), hashes, sets, sorted sets, expiry, transactions, pub/sub, and an
-- append-only log. See docs/kv.md.
--
--   build/cohost examples/kv/main.lua [--port P] [--bind ADDR] [--dir D]
--       [--appendonly yes|no] [--appendfsync always|everysec|no]
--       [--aof-rewrite-min-size BYTES] [--repair-log] [--announce]
--
-- One worker only: the data lives in the worker's Lua state, so with
-- -w N each worker would hold a separate store and a client would see
-- whichever its connection landed on. More workers are refused.
local cohost = require "cohost"

-- The modules sit beside this file as kv/*.lua: put its parent directory
-- on the path, wherever the server is started from.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local parent = here:match("^(.*)/[^/]*$") or (here == "." and ".." or ".")
package.path = parent .. "/?.lua;" .. package.path

local R = require "kv.registry"
require "kv.strings"
require "kv.lists"
require "kv.hashes"
require "kv.sets"
require "kv.zsets"
require "kv.zsetops"
require "kv.bitmaps"
require "kv.sort"
require "kv.lcs"
require "kv.hll"
require "kv.geo"
require "kv.streams"
require "kv.xgroups"
require "kv.pubsub"
require "kv.conn"
require "kv.introspect"
require "kv.scripting"
require "kv.functions"
local admin = require "kv.admin"
local monitor = require "kv.monitor"
local aof = require "kv.aof"
local server = require "kv.server"
local store = require "kv.store"

local USAGE = [[
usage: cohost examples/kv/main.lua [options]
  --port P                     TCP port (default 6379; 0 picks a free one)
  --bind ADDR                  address to listen on (default 127.0.0.1)
  --dir D                      directory of appendonly.aof (default .)
  --appendonly yes|no          keep the append-only log (default yes)
  --appendfsync always|everysec|no
                               when the log reaches the disk (default everysec)
  --aof-rewrite-min-size BYTES rewrite the log once it has doubled since the
                               last rewrite and passed BYTES (default 64M)
  --repair-log                 if the log has a bad record, cut it there (the
                               rest goes to appendonly.aof.cut) and start
  --announce                   print "<port> <pid>" on stdout once listening]]

local function die(msg)
  io.stderr:write("kv: ", msg, "\n")
  cohost.exit(2)
end

local function parse_args(args)
  local cfg = R.config
  local i = 1
  while i <= #args do
    local a, v = args[i], args[i + 1]
    if a == "--port" then
      cfg.port = tonumber(v)
      if not cfg.port or cfg.port < 0 or cfg.port > 65535 then die("bad --port " .. tostring(v)) end
      i = i + 1
    elseif a == "--bind" and v then
      cfg.bind = v
      i = i + 1
    elseif a == "--dir" and v then
      cfg.dir = v
      i = i + 1
    elseif a == "--appendonly" and (v == "yes" or v == "no") then
      cfg.appendonly = v == "yes"
      i = i + 1
    elseif a == "--appendfsync" and (v == "always" or v == "everysec" or v == "no") then
      cfg.appendfsync = v
      i = i + 1
    elseif a == "--aof-rewrite-min-size" and tonumber(v) then
      cfg.rewrite_min = tonumber(v)
      i = i + 1
    elseif a == "--repair-log" then
      cfg.repair = true
    elseif a == "--announce" then
      cfg.announce = true
    elseif a == "-h" or a == "--help" then
      io.stdout:write(USAGE, "\n")
      cohost.exit(0)
    else
      die("bad argument " .. a .. "\n" .. USAGE)
    end
    i = i + 1
  end
end

if cohost.worker_count() > 1 then
  if cohost.worker_id() == 0 then
    io.stderr:write("kv: run it with one worker: the data lives in a worker's memory, ",
                    "so each of the ", cohost.worker_count(), " workers would keep a store ",
                    "of its own\n")
    cohost.exit(2)
  end
  cohost.sleep(10)   -- worker 0 ends the process once it has said why
end

parse_args(arg or {})
local cfg = R.config
R.stats.started = cohost.now()
math.randomseed(os.time())

if cfg.rewrite_min then aof.AUTO_MIN = cfg.rewrite_min end
if cfg.appendonly then
  local t0 = cohost.monotonic()
  local ok, count = pcall(aof.open, cfg.dir, cfg.appendfsync, server.exec, cfg.repair)
  if not ok then
    cohost.log(cohost.ERR, "kv: cannot load the log: ", count)
    cohost.exit(1)
  end
  cohost.log(cohost.NOTICE, ("kv: replayed %d records from %s/%s in %.3f s: %d keys"):format(
    count, cfg.dir, aof.FILE, cohost.monotonic() - t0, store.size()))
end
admin.set_aof_status(aof.status)
admin.on_appendfsync = aof.set_mode

-- CONFIG SET appendonly: the log is started (by a rewrite of the data) or
-- stopped at run time.
admin.on_appendonly = function(on)
  local why
  if on then why = aof.start(cfg.dir, cfg.appendfsync) else why = aof.stop() end
  if why then return why end
  server.set_logging(on)
end
aof.on_failed_start = function()
  server.set_logging(false)
  cfg.appendonly = false
end

local listener = server.start(cfg.bind .. ":" .. cfg.port, cfg.appendonly)
local _, port = listener:addr()
cfg.port = port
cohost.log(cohost.NOTICE, "kv: ready on ", cfg.bind, ":", port, " (appendonly ",
           cfg.appendonly and cfg.appendfsync or "off", ")")

-- Background work hz times a second (CONFIG SET hz; 10 as Redis's
-- default): the clock LRU reads, the active expiry sweep, and giving back
-- the memory of what was deleted, each within a small budget.
local tick
local function arm()
  cohost.timer.at(1 / admin.hz, tick)
end
function tick(premature)
  if premature then return end
  store.clock = cohost.now()
  local t0 = monitor.now_us()
  store.sweep(2)
  monitor.latency("expire-cycle", (monitor.now_us() - t0) / 1000)
  store.step(10)
  arm()
end
store.clock = cohost.now()
arm()

-- SIGTERM/SIGINT: write and sync the log, then exit at once as Redis
-- does (clients are not waited for). The timer is cut short at shutdown.
cohost.timer.at(1e9, function(premature)
  if not premature then return end
  if cfg.appendonly then aof.close() end
  cohost.log(cohost.NOTICE, "kv: log synced, exiting")
  cohost.exit(0)
end)

if cfg.announce then
  local f = io.open("/proc/self/stat")
  local pid = f and f:read("*n") or 0
  if f then f:close() end
  io.stdout:write(port, " ", pid, "\n")
  io.stdout:flush()
end
