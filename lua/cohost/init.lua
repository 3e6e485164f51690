-- cohost: the Lua API. Sockets follow OpenResty's cosocket names and
-- error strings; threads, timers and semaphores follow ngx.thread,
-- ngx.timer and ngx.semaphore. Every blocking call parks only the calling
-- coroutine. See docs/lua-api.md.

-- The C cores exist only inside the cohost program (main.c preloads
-- them). Plain `lua` or `busted` finding these files (LUA_PATH, a .busted
-- lpath, make install's copy) gets one line saying what to run instead of
-- five lines of searched paths.
if not package.preload["cohost.core.task"] then
  error("cohost: these modules run inside the cohost program: run specs with `cohost --test` or `busted --lua=cohost`, scripts with `cohost app.lua` (docs/testing-apps.md)", 0)
end

local task = require "cohost.core.task"
local sys = require "cohost.core.sys"
local socket = require "cohost.core.socket"
local udp = require "cohost.core.udp"
local listen = require "cohost.core.listen"

local M = {}

M.version = "0.1.0"

-- Log levels, as ngx.ERR ... ngx.DEBUG.
M.ERR, M.WARN, M.NOTICE, M.INFO, M.DEBUG = 1, 2, 3, 4, 5

-- Sockets.
M.tcp = socket.tcp
M.udp = udp.udp
M.listen = listen.listen

-- Time. sleep(seconds) parks the caller; sleep(0) lets the others run.
M.sleep = task.sleep
M.now = sys.now
M.time = sys.time
M.monotonic = sys.monotonic

-- Light threads: spawn(fn, ...) or spawn({priority = "high"}, fn, ...)
-- -> thread; wait(t1, ...) -> ok, results... of the first to finish
-- (false, err if it failed); kill(t).
M.spawn = task.spawn
M.wait = task.wait
M.kill = task.kill

-- Priority classes "high", "normal" (the default), "low": which ready
-- thread runs first (see docs/lua-api.md). setpriority(class) applies to
-- the calling thread from its next wakeup.
M.setpriority = task.setpriority
M.getpriority = task.getpriority

-- log(level, ...): level is M.ERR .. M.DEBUG or a name ("err", "info").
M.log = sys.log

M.worker_id = sys.worker_id
M.worker_count = sys.worker_count
M.worker_cpu = sys.worker_cpu
M.stats = sys.stats

-- xpcall(f, msgh, ...): the builtin's results, run from C so that f and
-- its caller are compiled apart (a dispatcher's loop; docs/lua-api.md).
M.xpcall = sys.xpcall

-- tasks([opts]) -> every task of every worker, with what it waits on and
-- its traceback (docs/debugging.md); profile.start/stop/run: CPU
-- profiles (cohost.profile, loaded when first used: a script that never
-- profiles does not carry it).
function M.tasks(opts) return require("cohost.debug").tasks(opts) end

-- exit(code): ends the process now. shutdown(): stops the way SIGTERM does.
M.exit = sys.exit
M.shutdown = sys.shutdown

-- on_shutdown(fn): fn runs on a task of its own when this worker's drain
-- begins (SIGTERM, a reload, shutdown()). exiting() -> true once its
-- listeners have closed (ngx.worker.exiting).
M.on_shutdown = require("cohost.drain").on_shutdown
M.exiting = sys.exiting

M.timer = require "cohost.timer"
M.metrics = require "cohost.metrics"
M.semaphore = require "cohost.semaphore"
M.channel = require("cohost.channel").new

setmetatable(M, { __index = function(_, k)
  if k == "profile" then return require "cohost.profile" end
end })

-- Names in connect/setpeername resolve through cohost.dns (cached with
-- their TTL, on cosockets: a silent nameserver parks only its callers).
require("cohost.dns").install()

return M
