-- The server of scripts/bench/prio_bench.sh's health-check benchmark:
--   build/cohost -w 1 scripts/bench/prio_server.lua HEALTH_PORT LOAD_PORT CLASS [WORK_US]
-- GET / on HEALTH_PORT answers "ok" from a listener of priority CLASS
-- ("high" or "normal"); GET / on LOAD_PORT (normal) computes WORK_US
-- microseconds (default 200) in two halves with a yield between, as a
-- handler that computes, waits and computes again, then answers "done".
local cohost = require "cohost"
local http = require "cohost.http"

local health_port, load_port = tonumber(arg[1]), tonumber(arg[2])
local class, work_us = arg[3] or "high", tonumber(arg[4] or 200)
assert(health_port and load_port, "usage: prio_server.lua HEALTH_PORT LOAD_PORT CLASS [WORK_US]")

local function compute(seconds)
  local t0 = cohost.monotonic()
  while cohost.monotonic() - t0 < seconds do end
end

assert(http.listen("127.0.0.1:" .. health_port, function(req, res)
  res:send("ok")
end, { priority = class }))

assert(http.listen("127.0.0.1:" .. load_port, function(req, res)
  compute(work_us / 2e6)
  cohost.sleep(0)
  compute(work_us / 2e6)
  res:send("done")
end))
