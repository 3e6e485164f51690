-- cohost.drain: a worker's drain as its Lua sees it (docs/lua-api.md,
-- "Shutdown"). Internal: cohost.on_shutdown is the documented face; the
-- gRPC server and cohost.websocket add closers.
--
-- The host (lib_sys.c, ch_sys_drain) calls the function this module
-- leaves in the registry on a task of its own, twice per worker:
--
--   BEGIN  the drain begins: at SIGTERM or SIGINT (when /healthz turns
--          503, before --drain-delay), on a reload's old worker when the
--          new generation is ready, at cohost.shutdown(). Each
--          on_shutdown function starts on a task of its own.
--   STOP   the listeners have closed. Once those tasks have ended (or
--          half of --shutdown-timeout has passed: the other half is for
--          what the closers end), the closers run, each on a task of its
--          own: they end what handlers left open, so that a stop ends by
--          the drain and not by the timeout.
local task = require "cohost.core.task"
local semaphore = require "cohost.semaphore"

local M = {}

local STOP = 1   -- worker.h's CH_DRAIN_STOP (CH_DRAIN_BEGIN is 0)

local fns = {}        -- on_shutdown functions not yet started, in order
local closers = {}    -- cohost's own, in order
local settled         -- a semaphore posted once the BEGIN tasks ended

M.begun = false       -- BEGIN came: on_shutdown functions run at once
M.closing = false     -- the closers ran: what opens now is ended at once

-- Starts every function registered so far, each on a task of its own;
-- a task waits for them all and posts settled.
local function begin()
  if M.begun then return end
  M.begun = true
  local started = {}
  for i = 1, #fns do started[i] = task.spawn(fns[i]) end
  fns = nil
  if #started == 0 then return end
  settled = semaphore.new(0)
  -- An error in one is logged by its own task, with its traceback.
  task.spawn(function()
    for _, t in ipairs(started) do task.wait(t) end
    settled:post()
  end)
end

-- on_shutdown(fn): fn() runs on a task of its own when this worker's
-- drain begins; at once if it has begun.
function M.on_shutdown(fn)
  if type(fn) ~= "function" then
    error(("bad argument #1 to 'on_shutdown' (function expected, got %s)"):format(type(fn)), 2)
  end
  if M.begun then
    task.spawn(fn)
  else
    fns[#fns + 1] = fn
  end
end

-- closer(fn): fn() runs on a task of its own at the STOP phase, after
-- the on_shutdown functions; at once if that has passed. fn ends what
-- its module left open; what opens later it ends itself (M.closing).
function M.closer(fn)
  closers[#closers + 1] = fn
  if M.closing then task.spawn(fn) end
end

-- Yields. The host's entry point.
debug.getregistry()["cohost.drain"] = function(phase, shutdown_timeout)
  begin()
  if phase ~= STOP or M.closing then return end
  if settled then settled:wait(shutdown_timeout / 2) end
  M.closing = true
  for i = 1, #closers do task.spawn(closers[i]) end
end

return M
