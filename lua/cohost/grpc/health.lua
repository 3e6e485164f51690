-- cohost.grpc.health: gRPC's health checking service,
-- grpc.health.v1.Health (lua/cohost/grpc/proto/grpc/health/v1/health.proto),
-- which every cohost.grpc server serves unless made with health = false
-- (docs/grpc.md, "Health checking").
--
-- The server as a whole ("") is SERVING while it runs; the app sets each
-- service's status with srv:set_health. Once a stop begins (SIGTERM,
-- cohost.shutdown: cohost.core.sys.draining() is true in the on_shutdown
-- functions) every status reads NOT_SERVING and each Watch is told. A
-- reload is not a stop: its old workers keep answering SERVING while
-- their connections get GOAWAY, and the new ones serve, so a balancer
-- watching health never sees NOT_SERVING across a reload.
local cohost = require "cohost"
local pb = require "cohost.protobuf"
local sys = require "cohost.core.sys"
local semaphore = require "cohost.semaphore"
local status = require "cohost.grpc.status"
local typed = require "cohost.grpc.typed"

local M = {}

M.SERVICE = "grpc.health.v1.Health"

-- The set of the standard services' types (health and reflection),
-- loaded once per worker from the embedded descriptor set.
local builtin
function M.types()
  if not builtin then builtin = assert(pb.load_descriptor(require "cohost.grpc.descriptors")) end
  return builtin
end

local STATUSES = { SERVING = true, NOT_SERVING = true, UNKNOWN = true }

-- Servers with health, weakly: the stop tells each.
local servers = setmetatable({}, { __mode = "k" })
local hooked = false

-- Wakes every Watch of h to look again.
local function notify(h)
  for w in pairs(h.watchers) do w:post() end
end

-- The status of service name on h, or nil when h does not know it.
local function current(h, name)
  local st = h.statuses[name]
  if st == nil then return nil end
  if h.stopping then return "NOT_SERVING" end
  return st
end

local function stop_all()
  -- A reload's old worker drains too, but its process is not stopping:
  -- it keeps saying SERVING.
  if not sys.draining() then return end
  for srv in pairs(servers) do
    srv.health.stopping = true
    notify(srv.health)
  end
end

-- install(srv): srv serves grpc.health.v1.Health.
function M.install(srv)
  local h = { statuses = { [""] = "SERVING" }, watchers = setmetatable({}, { __mode = "k" }), stopping = false }
  srv.health = h
  servers[srv] = true
  if not hooked then
    hooked = true
    cohost.on_shutdown(stop_all)
  end
  typed.service(srv, M.types(), M.SERVICE, {
    Check = function(req)
      local st = current(h, req.service)
      if st == nil then
        error(status.new_error(status.NOT_FOUND, "unknown service " .. req.service), 0)
      end
      return { status = st }
    end,
    -- Yields. The status now, then each change; SERVICE_UNKNOWN while the
    -- service is not known. Ends when the client goes or the drain ends
    -- the call (UNAVAILABLE).
    Watch = function(req, stream)
      local w = semaphore.new(0)
      h.watchers[w] = true
      local ok, err = pcall(function()
        local last
        while true do
          local st = current(h, req.service) or "SERVICE_UNKNOWN"
          if st ~= last then
            stream:send({ status = st })
            last = st
          end
          w:wait(3600)   -- posted on every change
        end
      end)
      h.watchers[w] = nil
      if not ok then error(err, 0) end
    end,
  }, 2)
end

-- set(srv, name, st): service name's status on srv: "SERVING",
-- "NOT_SERVING", "UNKNOWN", or nil to forget it (Check answers NOT_FOUND).
function M.set(srv, name, st, level)
  if type(name) ~= "string" then error("bad service name (string expected)", level + 1) end
  if st ~= nil and not STATUSES[st] then
    error(("bad status %s (\"SERVING\", \"NOT_SERVING\", \"UNKNOWN\" or nil expected)"):format(tostring(st)), level + 1)
  end
  local h = srv.health
  if not h then error("this server has no health service (grpc.server{ health = false })", level + 1) end
  if h.statuses[name] ~= st then
    h.statuses[name] = st
    notify(h)
  end
end

return M
