-- cohost.timer: ngx.timer's shape. Callbacks run as light threads that are
-- cancelled when shutdown starts; a callback gets premature = true when
-- shutdown cut its wait short, as with ngx.timer.at.
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"

local M = {}

local function report(err)
  sys.log(1, "timer callback failed: ", debug.traceback(err, 2))
end

-- at(delay, fn, ...) -> thread: fn(premature, ...) after delay seconds.
function M.at(delay, fn, ...)
  assert(type(delay) == "number" and delay >= 0, "bad delay")
  assert(type(fn) == "function", "bad callback")
  return task.spawn_daemon(function(...)
    local ok = pcall(task.sleep, delay)
    fn(not ok, ...)
  end, ...)
end

-- every(interval, fn, ...) -> thread: fn(premature, ...) every interval
-- seconds until killed or shutdown; an error in one run is logged and the
-- next run still happens.
function M.every(interval, fn, ...)
  assert(type(interval) == "number" and interval > 0, "bad interval")
  assert(type(fn) == "function", "bad callback")
  return task.spawn_daemon(function(...)
    while true do
      local ok = pcall(task.sleep, interval)
      if not ok then
        pcall(fn, true, ...)
        return
      end
      xpcall(fn, report, false, ...)
    end
  end, ...)
end

return M
