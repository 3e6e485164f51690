-- cohost.semaphore: ngx.semaphore's API. new(n) -> sema with post(n),
-- wait(timeout) -> true or nil, "timeout", count(). new(n, "pool") makes
-- a task parked in its wait show as waiting for a pool in task dumps
-- (/debug/tasks) rather than for a semaphore.
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"

local M = {}
local Sema = {}
Sema.__index = Sema

function M.new(n, what)
  n = n or 0
  assert(type(n) == "number" and n >= 0, "bad resource count")
  return setmetatable({ n = n, q = task.waitq(what == "pool" and "pool" or "semaphore") }, Sema)
end

-- post([n]): adds n resources (default 1) and wakes up to n waiters.
function Sema:post(n)
  n = n or 1
  assert(type(n) == "number" and n >= 1, "bad post count")
  self.n = self.n + n
  for _ = 1, n do
    if not self.q:signal() then break end
  end
  return true
end

-- wait([timeout]): takes a resource, waiting up to timeout seconds (default
-- 0: do not wait, as ngx.semaphore). Returns true or nil, "timeout".
function Sema:wait(timeout)
  timeout = timeout or 0
  if self.n > 0 then
    self.n = self.n - 1
    return true
  end
  if timeout <= 0 then return nil, "timeout" end
  local deadline = sys.monotonic() + timeout
  while self.n == 0 do
    local left = deadline - sys.monotonic()
    if left <= 0 then return nil, "timeout" end
    local ok = self.q:wait(left)
    if not ok and self.n == 0 then return nil, "timeout" end
  end
  self.n = self.n - 1
  return true
end

-- count(): resources available (negative values are not used).
function Sema:count()
  return self.n
end

return M
