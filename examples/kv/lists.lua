-- Lists: LPUSH, RPUSH, LPOP, RPOP, LLEN, LRANGE, LINDEX, and the blocking
-- BLPOP/BRPOP. A list is a ring buffer { kind = "list", items, cap, h =
-- offset of the first element, n = length } whose items sit in the
-- array part of their table (slot = (h + i) % cap + 1): LuaJIT compiles
-- array-part accesses but not integer keys in the hash part, which a
-- deque on negative keys would use. It doubles when full and halves when
-- a quarter full. An emptied list is deleted, as in Redis.
--
-- A client blocked in BLPOP parks on its own semaphore, queued under each
-- key it waits for. A push marks the key ready; once the pushing command
-- is logged, the dispatcher calls serve(), which pops for the waiters in
-- arrival order and wakes them with the element already in hand, so no
-- other client can take it between the wake-up and the reply (Redis's
-- handleClientsBlockedOnKeys). A thread watches the blocked client's
-- socket meanwhile: a client that leaves stops waiting at once and is
-- never handed an element.
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local strings = require "kv.strings"

local reg = R.register
local get, set = store.get, store.set
local bulk, int, int_into = resp.bulk, resp.int, resp.int_into
local NULL, WRONGTYPE, NOT_INT = resp.NULL, resp.WRONGTYPE, resp.NOT_INT
local type, floor, lower = type, math.floor, string.lower
local num_arg = strings.num_arg
local band = bit.band
local tnew = require "table.new"

local MIN_CAP = 8   -- slots of a new list; a power of two

local M = {}

local waiting = {}   -- key -> FIFO array of waiters (entries may be done)

local function new_list()
  return { kind = "list", items = tnew(MIN_CAP, 0), cap = MIN_CAP, h = 0, n = 0 }
end

-- Moves l's elements into a new array of cap slots, first at slot 1.
-- O(n), amortized O(1) per push or pop.
local function resize(l, cap)
  local items, old, h, mask = tnew(cap, 0), l.items, l.h, l.cap - 1
  for i = 0, l.n - 1 do items[i + 1] = old[band(h + i, mask) + 1] end
  l.items, l.cap, l.h = items, cap, 0
end

-- The element at 0-based index i (0 <= i < n).
local function at(l, i)
  return l.items[band(l.h + i, l.cap - 1) + 1]
end

-- The elements of l in order, as an array (for the log rewrite).
function M.elements(l)
  local t = {}
  for i = 0, l.n - 1 do t[i + 1] = at(l, i) end
  return t
end

R.dumpers.list = function(l)
  return "RPUSH", M.elements(l), l.n, 1
end

-- The list at k for reading: the list, false for a missing key, or nil
-- after appending WRONGTYPE (then the caller returns n + 1).
local function list_at(k)
  local v = get(k)
  if v == nil then return false end
  if type(v) ~= "table" or v.kind ~= "list" then return nil end
  return v
end

-- Pops one element from the left (left = true) or right of l, deleting
-- k when l empties.
local function pop(k, l, left)
  local items, mask, h, n = l.items, l.cap - 1, l.h, l.n - 1
  local v, slot
  if left then
    slot = h + 1
    l.h = band(h + 1, mask)
  else
    slot = band(h + n, mask) + 1
  end
  v = items[slot]
  items[slot] = nil
  l.n = n
  if n == 0 then
    store.del(k)
  elseif n * 4 < l.cap and l.cap > MIN_CAP then
    resize(l, l.cap / 2)
  end
  return v
end

-- LPUSH/RPUSH key element [element ...]
local function push(left)
  return function(_, argv, argc, out, n)
    local k = argv[2]
    local l = list_at(k)
    if l == nil then return put(out, n, WRONGTYPE) end
    if not l then
      l = new_list()
      set(k, l)
    end
    local len = l.n
    for i = 3, argc do
      if len == l.cap then resize(l, l.cap * 2) end
      local mask = l.cap - 1
      if left then
        local h = band(l.h - 1, mask)
        l.h = h
        l.items[h + 1] = argv[i]
      else
        l.items[band(l.h + len, mask) + 1] = argv[i]
      end
      len = len + 1
      l.n = len
    end
    R.prop = true
    M.ready(k)
    return int_into(out, n, l.n)
  end
end
reg("lpush", -3, push(true), { write = true })
reg("rpush", -3, push(false), { write = true })

-- LPOP/RPOP key [count]
local function popcmd(left)
  return function(_, argv, argc, out, n)
    if argc > 3 then
      return put(out, n, "-ERR wrong number of arguments for '" .. (left and "lpop" or "rpop") ..
                         "' command\r\n")
    end
    local count
    if argc == 3 then
      count = num_arg(argv[3])
      if not count or count < 0 then
        return put(out, n, "-ERR value is out of range, must be positive\r\n")
      end
    end
    local k = argv[2]
    local l = list_at(k)
    if l == nil then return put(out, n, WRONGTYPE) end
    if not l then return put(out, n, count and resp.NULL_ARRAY or NULL) end
    if not count then
      R.prop = true
      return bulk(out, n, pop(k, l, left))
    end
    local len = l.n
    if count > len then count = len end
    n = n + 1
    out[n] = resp.array_head(count)
    for _ = 1, count do n = bulk(out, n, pop(k, l, left)) end
    if count > 0 then R.prop = true end
    return n
  end
end
reg("lpop", -2, popcmd(true), { write = true })
reg("rpop", -2, popcmd(false), { write = true })

reg("llen", 2, function(_, argv, _, out, n)
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(l and l.n or 0))
end)

-- Redis's index clamping for LRANGE: negative counts from the end.
reg("lrange", 4, function(_, argv, _, out, n)
  local s, e = num_arg(argv[3]), num_arg(argv[4])
  if not s or not e then return put(out, n, NOT_INT) end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, resp.EMPTY_ARRAY) end
  local len = l.n
  if s < 0 then s = len + s end
  if e < 0 then e = len + e end
  if s < 0 then s = 0 end
  if s > e or s >= len then return put(out, n, resp.EMPTY_ARRAY) end
  if e >= len then e = len - 1 end
  n = n + 1
  out[n] = resp.array_head(e - s + 1)
  for i = s, e do n = bulk(out, n, at(l, i)) end
  return n
end)

reg("lindex", 3, function(_, argv, _, out, n)
  local i = num_arg(argv[3])
  if not i then return put(out, n, NOT_INT) end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, NULL) end
  local len = l.n
  if i < 0 then i = len + i end
  if i < 0 or i >= len then return put(out, n, NULL) end
  return bulk(out, n, at(l, i))
end)

-- -- Blocking --------------------------------------------------------------

-- Removes w from the queues of the keys it waits on. O(queue length).
local function unqueue(w)
  for _, k in ipairs(w.keys) do
    local q = waiting[k]
    if q then
      for i = #q, 1, -1 do
        if q[i] == w then table.remove(q, i) end
      end
      if #q == 0 then waiting[k] = nil end
    end
  end
end

-- Marks k ready if clients wait on it: the dispatcher serves them once
-- the command that gave k elements is logged.
function M.ready(k)
  if waiting[k] then
    R.ready[k] = true
    R.any_ready = true
  end
end

-- Hands elements of the ready keys to their waiters, oldest first, and
-- logs each pop. Called by the dispatcher after the pushing command.
function M.serve()
  local ready = R.ready
  R.ready, R.any_ready = {}, false
  for k in pairs(ready) do
    local q = waiting[k]
    while q and #q > 0 do
      local w = q[1]
      if not w.done then
        local got, _, rec = w.take(k)
        if not got then break end
        w.done, w.got = true, got
        R.log_after(rec)
        w.sema:post()
      end
      table.remove(q, 1)
    end
    if q and #q == 0 then waiting[k] = nil end
  end
end

-- Watches a blocked client's socket: input that arrives is kept for the
-- connection loop (c.pending), and EOF or an error wakes the waiter.
local function watch(c, w)
  while not w.done do
    local data, err = c.sock:receiveany(65536)
    if data then
      c.pending = (c.pending or "") .. data
    elseif err ~= "timeout" then
      c.gone = true
      if not w.done then
        w.done = true
        w.sema:post()
      end
      return
    end
  end
end

-- A blocking command (BLPOP, BZPOPMIN, ...): key [key ...] timeout.
-- take(k) -> the reply's items (an array of strings), or nil if k has
-- nothing to give, or nil, true if k holds the wrong type; and the record
-- that logs the taking. An element already there is taken at once;
-- else the client waits (not inside EXEC) until a command gives one of
-- the keys something, the timeout passes (null array) or it leaves.
function M.blocking(take)
  return function(c, argv, argc, out, n)
    local timeout = tonumber(argv[argc])
    if not timeout or timeout ~= timeout or not argv[argc]:find("^[%d%.%-+eE]+$") then
      return put(out, n, "-ERR timeout is not a float or out of range\r\n")
    end
    if timeout < 0 then return put(out, n, "-ERR timeout is negative\r\n") end
    local got
    for i = 2, argc - 1 do
      local wrong, rec
      got, wrong, rec = take(argv[i])
      if wrong then return put(out, n, WRONGTYPE) end
      if got then
        R.prop = rec
        break
      end
    end
    if not got then
      -- Inside EXEC a blocking command does not block (as Redis).
      if c.in_exec or not c.sock then return put(out, n, resp.NULL_ARRAY) end
      -- Block: the replies before this one go out first.
      n = c:flush(out, n)
      local keys = {}
      for i = 2, argc - 1 do keys[#keys + 1] = argv[i] end
      c.sema = c.sema or cohost.semaphore.new(0)
      local w = { keys = keys, take = take, sema = c.sema, done = false }
      for _, k in ipairs(keys) do
        local q = waiting[k]
        if not q then
          q = {}
          waiting[k] = q
        end
        q[#q + 1] = w
      end
      R.stats.blocked = R.stats.blocked + 1
      local watcher = cohost.spawn(watch, c, w)
      -- 0 waits for ever (the semaphore's limit is about 24 days a wait).
      local left_s = timeout > 0 and timeout or math.huge
      local deadline = cohost.monotonic() + left_s
      while not w.done do
        local wait = deadline - cohost.monotonic()
        if wait <= 0 then break end
        c.sema:wait(wait < 1e6 and wait or 1e6)
      end
      R.stats.blocked = R.stats.blocked - 1
      w.done = true
      cohost.kill(watcher)
      cohost.wait(watcher)
      unqueue(w)
      got = w.got
      if not got then return put(out, n, resp.NULL_ARRAY) end
    end
    n = put(out, n, resp.array_head(#got))
    for i = 1, #got do n = bulk(out, n, got[i]) end
    return n
  end
end

-- BLPOP/BRPOP key [key ...] timeout
local function bpop(left)
  local name = left and "LPOP" or "RPOP"
  return M.blocking(function(k)
    local l = list_at(k)
    if l == nil then return nil, true end
    if not l then return nil end
    return { k, pop(k, l, left) }, false, resp.encode({ name, k }, 2)
  end)
end
reg("blpop", -3, bpop(true), { write = true, last = -2 })
reg("brpop", -3, bpop(false), { write = true, last = -2 })

return M
