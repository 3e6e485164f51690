-- cohost.debug: every task of every worker (and worker process), what it
-- is and what it waits on, with its Lua traceback: cohost.tasks(), GET
-- /debug/tasks and SIGUSR2 (docs/debugging.md).
local core = require "cohost.core.debug"
local cjson = require("cjson").new()   -- our own settings, not the app's

local M = {}

-- tasks([opts]) -> list, workers | nil, err. opts: state ("running",
-- "ready", "parked", or what a parked task waits on: "read", "write",
-- "sleep", "semaphore", "channel", ...), route (the router's pattern),
-- min_age (seconds). Each task: { id, worker, process, pid, kind, name,
-- route, peer, age, state, on, fd, fd_peer, timeout, traceback } (absent
-- fields are unknown or do not apply). workers: { {worker, process, pid,
-- answered}, ... }; a worker held by a handler that never yields cannot
-- answer in time and is listed with answered = false.
function M.tasks(opts)
  opts = opts or {}
  local items, workers = core.tasks { state = opts.state, route = opts.route, min_age = opts.min_age }
  if not items then return nil, workers end
  return cjson.decode("[" .. items .. "]"), cjson.decode("[" .. workers .. "]")
end

-- tasks_text([opts]) -> the same as text (a block per task), and the
-- workers list.
function M.tasks_text(opts)
  opts = opts or {}
  local text, workers = core.tasks { state = opts.state, route = opts.route, min_age = opts.min_age, text = true }
  if not text then return nil, workers end
  return text, cjson.decode("[" .. workers .. "]")
end

return M
