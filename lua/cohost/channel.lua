-- cohost.channel: a FIFO between light threads, for fan-out between
-- connections. new([capacity]) -> ch with send(v), receive(timeout),
-- close(). Without a capacity it never fills; with one, send waits while
-- it is full. nil cannot be sent (it would end a receive loop).
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"

local M = {}
local Chan = {}
Chan.__index = Chan

function M.new(capacity)
  assert(capacity == nil or (type(capacity) == "number" and capacity >= 1), "bad capacity")
  return setmetatable({
    cap = capacity or math.huge,
    head = 1, tail = 0,            -- items live in [head, tail]
    items = {},
    notempty = task.waitq("channel"),
    notfull = task.waitq("channel"),
    closed = false,
  }, Chan)
end

function Chan:len()
  return self.tail - self.head + 1
end

-- send(v[, timeout]) -> true, or nil, "closed" / "timeout".
function Chan:send(v, timeout)
  assert(v ~= nil, "cannot send nil")
  local deadline = timeout and sys.monotonic() + timeout
  while not self.closed and self:len() >= self.cap do
    local left = deadline and deadline - sys.monotonic()
    if left and left <= 0 then return nil, "timeout" end
    self.notfull:wait(left)
  end
  if self.closed then return nil, "closed" end
  self.tail = self.tail + 1
  self.items[self.tail] = v
  self.notempty:signal()
  return true
end

-- receive([timeout]) -> v, or nil, "closed" once closed and drained, or
-- nil, "timeout".
function Chan:receive(timeout)
  local deadline = timeout and sys.monotonic() + timeout
  while self:len() == 0 do
    if self.closed then return nil, "closed" end
    local left = deadline and deadline - sys.monotonic()
    if left and left <= 0 then return nil, "timeout" end
    self.notempty:wait(left)
  end
  local v = self.items[self.head]
  self.items[self.head] = nil
  self.head = self.head + 1
  self.notfull:signal()
  return v
end

-- close(): receivers drain what is left, then get nil, "closed"; senders
-- get nil, "closed" at once.
function Chan:close()
  self.closed = true
  self.notempty:broadcast()
  self.notfull:broadcast()
  return true
end

return M
