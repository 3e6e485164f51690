-- cohost.broadcast: publish/subscribe across every worker thread and
-- every worker process of one cohost (docs/lua-api.md, "Publish and
-- subscribe"). Channels are names; a message is a string.
--   local sub = broadcast.subscribe("room")        -- { queue = 1024 }
--   broadcast.publish("room", "hello")             -- every subscriber, every worker
--   local msg, err = sub:receive([timeout])        -- parks until one comes
--   sub:close()
-- publish never waits: it queues the message for this worker's
-- subscribers and sends one datagram to each other worker (cohost.core.bus,
-- host/lib_bus.c), whose receiving task wakes on it (epoll, no polling)
-- and queues it for the subscribers there. Each subscriber's queue is
-- bounded; a subscriber whose queue is full when a message comes is
-- closed: it gets what was queued, then nil, "overflow".
-- Across machines: broadcast.configure{ backend = "redis", url = ... }
-- in the main chunk; publish then also hands the message to Redis, and
-- messages of other nodes come from there (lua/cohost/broadcast/redis.lua).
local bus = require "cohost.core.bus"
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"

local M = {}

M.QUEUE = 1024     -- messages a subscriber may have waiting, by default
M.MAX = bus.max    -- bytes of channel name and message together, at most

local type, pairs, next, error = type, pairs, next, error

-- This worker's subscribers: channel -> set of subscriptions.
local channels = {}
local nsubs = 0
local fd               -- this worker's bus socket while it has subscribers
local receiving = false
local stats = { published = 0, delivered = 0, overflowed = 0, dropped = 0 }
local remote           -- the backend to other machines, once configured
local used = false     -- subscribe or publish was called: too late to configure

local Sub = {}
Sub.__index = Sub

-- -- Subscriptions ------------------------------------------------------------

local function unlink(s)
  local set = channels[s.channel]
  if set and set[s] then
    set[s] = nil
    if next(set) == nil then
      channels[s.channel] = nil
      if remote then remote.unwant(s.channel) end
    end
    nsubs = nsubs - 1
  end
end

-- Ends s with reason; what it queued can still be received.
local function finish(s, reason)
  if s.reason then return end
  s.reason = reason
  unlink(s)
  s.waiting:broadcast()
  -- The last subscriber gone: the receiver stops and frees the socket
  -- (an empty datagram to ourselves wakes it).
  if nsubs == 0 and fd then bus.send(sys.worker_id(), "") end
end

local function push(s, msg)
  if s.tail - s.head + 1 >= s.cap then
    stats.overflowed = stats.overflowed + 1
    return finish(s, "overflow")
  end
  s.tail = s.tail + 1
  s.items[s.tail] = msg
  stats.delivered = stats.delivered + 1
  s.waiting:signal()
end

local function deliver(channel, msg)
  local set = channels[channel]
  if not set then return end
  for s in pairs(set) do push(s, msg) end
end

-- Yields. receive([timeout]) -> msg, or nil, "timeout", "closed" (after
-- close) or "overflow" (the queue filled up: closed, see above). Queued
-- messages come first either way.
function Sub:receive(timeout)
  local deadline = timeout and sys.monotonic() + timeout
  while self.tail < self.head and not self.reason do
    local left = deadline and deadline - sys.monotonic()
    if left and left <= 0 then return nil, "timeout" end
    self.waiting:wait(left)
  end
  if self.tail >= self.head then
    local msg = self.items[self.head]
    self.items[self.head] = nil
    self.head = self.head + 1
    return msg
  end
  return nil, self.reason
end

-- The number of messages waiting.
function Sub:len()
  return self.tail - self.head + 1
end

-- Unsubscribes; a receive parked on it returns nil, "closed".
function Sub:close()
  finish(self, "closed")
end

-- -- Between workers ------------------------------------------------------------

-- The receiving task: one per worker while it has subscribers. A datagram
-- is channel .. "\0" .. message; an empty one asks it to look whether
-- subscribers are left.
local function receive_loop()
  while nsubs > 0 do
    local data, err = bus.recv(fd)
    if not data then
      sys.log(2, "cohost.broadcast: receive failed: ", err)
      break
    end
    local z = data:find("\0", 1, true)
    if z then deliver(data:sub(1, z - 1), data:sub(z + 1)) end
  end
end

local function receiver()
  local ok, err = pcall(receive_loop)
  if not ok then sys.log(4, "cohost.broadcast: receiver ended: ", err) end
  bus.close(fd)
  fd = nil
  receiving = false
end

-- Binds this worker's socket and starts its receiver, if it has none.
-- The bind happens before subscribe returns, so a message published
-- anywhere after that reaches the new subscriber. On a reload, the worker
-- this one replaces holds the name until it exits: retried every 50 ms
-- meanwhile (other workers' messages reach the old one until then; this
-- worker's own reach its subscribers at once).
local function listen()
  if receiving then return end
  receiving = true
  local s, err = bus.open()
  if s then
    fd = s
    task.spawn_daemon(receiver)
    return
  end
  task.spawn_daemon(function()
    while nsubs > 0 and err == "address in use" do
      task.sleep(0.05)
      s, err = bus.open()
      if s then
        fd = s
        return receiver()
      end
    end
    if nsubs > 0 then sys.log(1, "cohost.broadcast: cannot receive from other workers: ", err) end
    receiving = false
  end)
end

-- -- API ------------------------------------------------------------------------------

-- configure{ backend = "redis", url = "redis://host:port" [, password,
-- db, channel_prefix, timeout, backlog] }: messages go to and come from
-- the other cohost nodes through Redis (docs/lua-api.md). In the main
-- chunk, before any subscribe or publish of this worker. backend =
-- "local" (the default) is one node.
function M.configure(opts)
  if type(opts) ~= "table" then error("bad options: table expected", 2) end
  if used then error("broadcast.configure: call it before the first subscribe or publish (in the main chunk)", 2) end
  if remote then error("broadcast.configure: configured already", 2) end
  local backend = opts.backend or "local"
  if backend == "local" then return end
  if backend ~= "redis" then error("bad backend: \"local\" or \"redis\" expected", 2) end
  local b, err = require("cohost.broadcast.redis").new(opts, deliver)
  if not b then error("broadcast.configure: " .. err, 2) end
  remote = b
end

-- Yields with a backend: subscribe(channel [, opts]) -> sub. opts.queue:
-- messages it may have waiting (default M.QUEUE). With a backend it waits
-- (the backend's timeout at most) until Redis has confirmed this worker's
-- subscription to the channel, so that what any node publishes after
-- subscribe returns reaches it; while Redis is unreachable it returns at
-- once, and messages of other nodes come once it is back.
function M.subscribe(channel, opts)
  if type(channel) ~= "string" then error("bad channel: string expected", 2) end
  local cap = opts and opts.queue or M.QUEUE
  if type(cap) ~= "number" or cap < 1 then error("bad queue: positive number expected", 2) end
  local s = setmetatable({
    channel = channel, cap = cap, items = {}, head = 1, tail = 0,
    waiting = task.waitq("broadcast"), reason = nil,
  }, Sub)
  local set = channels[channel]
  if not set then
    set = {}
    channels[channel] = set
  end
  set[s] = true
  nsubs = nsubs + 1
  used = true
  listen()
  if remote then remote.want(channel) end
  return s
end

-- publish(channel, msg) -> true, or nil, "message too large". Never
-- waits; reaches this worker's subscribers before it returns, the other
-- workers' as soon as they run. A worker whose kernel queue is full
-- (hundreds of messages it has not read yet) misses the message: counted
-- in stats().dropped. With a backend, nil, "redis: ..." says that the
-- message reached this node only (Redis is unreachable, or this worker's
-- backlog for it is full).
function M.publish(channel, msg)
  if type(channel) ~= "string" then error("bad channel: string expected", 2) end
  if type(msg) ~= "string" then error("bad message: string expected", 2) end
  if #channel + 1 + #msg > M.MAX then return nil, "message too large" end
  used = true
  stats.published = stats.published + 1
  deliver(channel, msg)
  local me, data = sys.worker_id(), channel .. "\0" .. msg
  for id = 0, sys.worker_count() - 1 do
    if id ~= me then
      local ok, err = bus.send(id, data)
      if not ok and err ~= "absent" then stats.dropped = stats.dropped + 1 end
    end
  end
  if remote then return remote.publish(channel, msg) end
  return true
end

-- stats() -> this worker's counts: published, delivered (to its
-- subscribers), overflowed (subscribers closed), dropped (messages a
-- worker's full queue refused), subscribers; with the Redis backend also
-- redis_sent, redis_received, redis_unsent, redis_missed,
-- redis_duplicates, redis_queued and redis_up (docs/lua-api.md).
function M.stats()
  local t = { published = stats.published, delivered = stats.delivered, overflowed = stats.overflowed,
              dropped = stats.dropped, subscribers = nsubs }
  return remote and remote.stats(t) or t
end

return M
