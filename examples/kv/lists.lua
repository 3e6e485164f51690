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

R.copiers.list = function(l)
  local items = tnew(l.cap, 0)
  for i = 1, l.cap do items[i] = l.items[i] end
  return { kind = "list", items = items, cap = l.cap, h = l.h, n = l.n }
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

-- Pushes v on the left (left = true) or right of l.
local function push_one(l, v, left)
  local len = l.n
  if len == l.cap then resize(l, l.cap * 2) end
  local mask = l.cap - 1
  if left then
    local h = band(l.h - 1, mask)
    l.h = h
    l.items[h + 1] = v
  else
    l.items[band(l.h + len, mask) + 1] = v
  end
  l.n = len + 1
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
    for i = 3, argc do push_one(l, argv[i], left) end
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
    R.modified(k)
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

-- The usual arguments of a blocking command: key [key ...] timeout.
local function keys_then_timeout(argv, argc)
  local keys = {}
  for i = 2, argc - 1 do keys[#keys + 1] = argv[i] end
  return keys, argv[argc]
end

-- A blocking command (BLPOP, BZPOPMIN, BLMOVE...). parse(argv, argc) ->
-- the keys, the timeout's text and a context for take (copied: argv is
-- the connection's and changes), or nil and an error reply (default:
-- key [key ...] timeout). take(k, ctx) -> the reply's items (an array of
-- strings; one bulk string if single), or nil if k has nothing to give,
-- or nil, true if k holds the wrong type; and the record that logs the
-- taking; reply(out, n, got) -> n answers with it (default: an array of
-- the items), none (default a null array) when nothing came. An element
-- already there is taken at once; else the client waits (not inside
-- EXEC) until a command gives one of the keys something, the timeout
-- passes or it leaves.
local function items_reply(out, n, got)
  n = put(out, n, resp.array_head(#got))
  for i = 1, #got do n = bulk(out, n, got[i]) end
  return n
end

function M.blocking(take, parse, reply, none)
  parse = parse or keys_then_timeout
  reply = reply or items_reply
  none = none or resp.NULL_ARRAY
  return function(c, argv, argc, out, n)
    local keys, ttext, ctx = parse(argv, argc)
    if not keys then return put(out, n, ttext) end
    local timeout = tonumber(ttext)
    if not timeout or timeout ~= timeout or not ttext:find("^[%d%.%-+eE]+$") then
      return put(out, n, "-ERR timeout is not a float or out of range\r\n")
    end
    if timeout < 0 then return put(out, n, "-ERR timeout is negative\r\n") end
    local got
    for i = 1, #keys do
      local wrong, rec
      got, wrong, rec = take(keys[i], ctx)
      if wrong then return put(out, n, WRONGTYPE) end
      if got then
        R.prop = rec
        break
      end
    end
    if not got then
      -- Inside EXEC a blocking command does not block (as Redis).
      if c.in_exec or not c.sock then return put(out, n, none) end
      -- Block: the replies before this one go out first.
      n = c:flush(out, n)
      c.sema = c.sema or cohost.semaphore.new(0)
      local w = { keys = keys, take = function(k) return take(k, ctx) end, sema = c.sema,
                  done = false }
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
      if not got then return put(out, n, none) end
    end
    return reply(out, n, got)
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

-- -- Editing ---------------------------------------------------------------

-- Makes l hold the array t (O(n): LREM, LINSERT and LTRIM rebuild).
local function refill(l, t, count)
  local cap = MIN_CAP
  while cap < count do cap = cap * 2 end
  local items = tnew(cap, 0)
  for i = 1, count do items[i] = t[i] end
  l.items, l.cap, l.h, l.n = items, cap, 0, count
end

-- LTRIM key start stop
reg("ltrim", 4, function(_, argv, _, out, n)
  local s, e = num_arg(argv[3]), num_arg(argv[4])
  if not s or not e then return put(out, n, NOT_INT) end
  local k = argv[2]
  local l = list_at(k)
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, resp.OK) end
  local len = l.n
  if s < 0 then s = len + s end
  if e < 0 then e = len + e end
  if s < 0 then s = 0 end
  local t, m = {}, 0
  if s <= e and s < len then
    if e >= len then e = len - 1 end
    for i = s, e do
      m = m + 1
      t[m] = at(l, i)
    end
  end
  if m == 0 then store.del(k) elseif m < len then refill(l, t, m) end
  R.prop = true
  return put(out, n, resp.OK)
end, { write = true })

-- LREM key count element: count > 0 from the head, < 0 from the tail, 0 all.
reg("lrem", 4, function(_, argv, _, out, n)
  local count = num_arg(argv[3])
  if not count then return put(out, n, NOT_INT) end
  local k, x = argv[2], argv[4]
  local l = list_at(k)
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, resp.ZERO) end
  local t, m, removed = {}, 0, 0
  local len = l.n
  local limit = count == 0 and math.huge or math.abs(count)
  local keep = {}
  if count >= 0 then
    for i = 0, len - 1 do
      local v = at(l, i)
      if v == x and removed < limit then removed = removed + 1 else keep[i] = true end
    end
  else
    for i = len - 1, 0, -1 do
      local v = at(l, i)
      if v == x and removed < limit then removed = removed + 1 else keep[i] = true end
    end
  end
  if removed == 0 then return put(out, n, resp.ZERO) end
  for i = 0, len - 1 do
    if keep[i] then
      m = m + 1
      t[m] = at(l, i)
    end
  end
  if m == 0 then store.del(k) else refill(l, t, m) end
  R.prop = true
  return put(out, n, int(removed))
end, { write = true })

-- LSET key index element
reg("lset", 4, function(_, argv, _, out, n)
  local i = num_arg(argv[3])
  if not i then return put(out, n, NOT_INT) end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, "-ERR no such key\r\n") end
  if i < 0 then i = l.n + i end
  if i < 0 or i >= l.n then return put(out, n, "-ERR index out of range\r\n") end
  l.items[band(l.h + i, l.cap - 1) + 1] = argv[4]
  R.prop = true
  return put(out, n, resp.OK)
end, { write = true })

-- LINSERT key BEFORE|AFTER pivot element
reg("linsert", 5, function(_, argv, _, out, n)
  local where = lower(argv[3])
  if where ~= "before" and where ~= "after" then return put(out, n, resp.SYNTAX) end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, resp.ZERO) end
  local t, m, found = {}, 0, false
  for i = 0, l.n - 1 do
    local v = at(l, i)
    if not found and v == argv[4] then
      found = true
      if where == "before" then m = m + 1; t[m] = argv[5] end
      m = m + 1; t[m] = v
      if where == "after" then m = m + 1; t[m] = argv[5] end
    else
      m = m + 1; t[m] = v
    end
  end
  if not found then return put(out, n, int(-1)) end
  refill(l, t, m)
  R.prop = true
  return int_into(out, n, m)
end, { write = true })

-- LPOS key element [RANK rank] [COUNT num] [MAXLEN len]
reg("lpos", -3, function(_, argv, argc, out, n)
  local rank, count, maxlen = 1, nil, 0
  local j = 4
  while j <= argc do
    local o = lower(argv[j])
    if j == argc then return put(out, n, resp.SYNTAX) end
    local v = num_arg(argv[j + 1])
    if v == nil then return put(out, n, NOT_INT) end
    if o == "rank" then
      if v == 0 then
        return put(out, n, "-ERR RANK can't be zero: use 1 to start from the first match, 2 from "
                   .. "the second ... or use negative to start from the end of the list\r\n")
      end
      rank = v
    elseif o == "count" then
      if v < 0 then return put(out, n, "-ERR COUNT can't be negative\r\n") end
      count = v
    elseif o == "maxlen" then
      if v < 0 then return put(out, n, "-ERR MAXLEN can't be negative\r\n") end
      maxlen = v
    else
      return put(out, n, resp.SYNTAX)
    end
    j = j + 2
  end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  local found, nf = {}, 0
  if l then
    local want = count == 0 and math.huge or (count or 1)
    local skip = math.abs(rank) - 1
    local len = l.n
    local steps = maxlen == 0 and len or math.min(maxlen, len)
    for s = 0, steps - 1 do
      local i = rank > 0 and s or len - 1 - s
      if at(l, i) == argv[3] then
        if skip > 0 then
          skip = skip - 1
        else
          nf = nf + 1
          found[nf] = i
          if nf >= want then break end
        end
      end
    end
  end
  if not count then
    if nf == 0 then return put(out, n, NULL) end
    return put(out, n, int(found[1]))
  end
  n = put(out, n, resp.array_head(nf))
  for i = 1, nf do n = put(out, n, int(found[i])) end
  return n
end)

-- -- Moving between lists ----------------------------------------------------

local function side(s)
  s = lower(s)
  if s == "left" then return true end
  if s == "right" then return false end
  return nil
end

-- Pops from src's side and pushes to dst's: the element, or nil if src
-- is empty, or nil, true for a wrong type. Checks both types first.
local function move(src, dst, from_left, to_left)
  local l = list_at(src)
  local d = list_at(dst)
  if l == nil or d == nil then return nil, true end
  if not l then return nil end
  R.modified(dst)
  local v = pop(src, l, from_left)
  d = list_at(dst)   -- src == dst and it emptied
  if not d then
    d = new_list()
    set(dst, d)
  end
  push_one(d, v, to_left)
  M.ready(dst)
  return v
end

local function lmove_rec(ctx)
  return resp.encode({ "LMOVE", ctx[1], ctx[2], ctx[3] and "LEFT" or "RIGHT",
                       ctx[4] and "LEFT" or "RIGHT" }, 5)
end

-- LMOVE src dst LEFT|RIGHT LEFT|RIGHT, RPOPLPUSH src dst.
local function lmove(fixed)
  return function(_, argv, _, out, n)
    local from, to
    if fixed then from, to = false, true else from, to = side(argv[4]), side(argv[5]) end
    if from == nil or to == nil then return put(out, n, resp.SYNTAX) end
    local v, wrong = move(argv[2], argv[3], from, to)
    if wrong then return put(out, n, WRONGTYPE) end
    if v == nil then return put(out, n, NULL) end
    R.prop = lmove_rec({ argv[2], argv[3], from, to })
    return bulk(out, n, v)
  end
end
reg("lmove", 5, lmove(false), { write = true, last = 3 })
reg("rpoplpush", 3, lmove(true), { write = true, last = 3 })

-- BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout, BRPOPLPUSH src dst timeout.
local function blmove_take(k, ctx)
  local v, wrong = move(k, ctx[2], ctx[3], ctx[4])
  if wrong then return nil, true end
  if v == nil then return nil end
  return { v }, false, lmove_rec(ctx)
end
local function one_reply(out, n, got) return bulk(out, n, got[1]) end
reg("blmove", 6, M.blocking(blmove_take, function(argv)
  local from, to = side(argv[4]), side(argv[5])
  if from == nil or to == nil then return nil, resp.SYNTAX end
  return { argv[2] }, argv[6], { argv[2], argv[3], from, to }
end, one_reply, NULL), { write = true, last = 3 })
reg("brpoplpush", 4, M.blocking(blmove_take, function(argv)
  return { argv[2] }, argv[4], { argv[2], argv[3], false, true }
end, one_reply, NULL), { write = true, last = 3 })

-- LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count] (from 'at' on:
-- BLMPOP has its timeout first). Returns keys, { left, count }, or nil
-- and an error reply.
local function mpop_args(argv, argc, at_)
  local nk = num_arg(argv[at_])
  if not nk or nk <= 0 then return nil, "-ERR numkeys should be greater than 0\r\n" end
  local where = at_ + nk + 1
  if where > argc then return nil, resp.SYNTAX end
  local left = side(argv[where])
  if left == nil then return nil, resp.SYNTAX end
  local count
  local j = where + 1
  while j <= argc do
    if lower(argv[j]) == "count" and j < argc and not count then
      count = num_arg(argv[j + 1])
      if not count or count <= 0 then return nil, "-ERR count should be greater than 0\r\n" end
      j = j + 2
    else
      return nil, resp.SYNTAX
    end
  end
  local keys = {}
  for i = at_ + 1, at_ + nk do keys[#keys + 1] = argv[i] end
  return keys, { left, count or 1 }
end

local function mpop_take(k, ctx)
  local l = list_at(k)
  if l == nil then return nil, true end
  if not l then return nil end
  local count = ctx[2] < l.n and ctx[2] or l.n
  local items = {}
  for i = 1, count do items[i] = pop(k, l, ctx[1]) end
  return { k, items }, false, resp.encode({ ctx[1] and "LPOP" or "RPOP", k, tostring(count) }, 3)
end

-- The reply [key, [elements]].
local function mpop_reply(out, n, got)
  n = put(out, n, "*2\r\n")
  n = bulk(out, n, got[1])
  return strings.bulk_array(out, n, got[2], #got[2])
end

local function mpop_keys(at_)
  return function(argv, argc, touch)
    local nk = num_arg(argv[at_]) or 0
    for i = at_ + 1, math.min(at_ + nk, argc) do touch(argv[i]) end
  end
end

reg("lmpop", -4, function(_, argv, argc, out, n)
  local keys, ctx = mpop_args(argv, argc, 2)
  if not keys then return put(out, n, ctx) end
  for _, k in ipairs(keys) do
    local got, wrong, rec = mpop_take(k, ctx)
    if wrong then return put(out, n, WRONGTYPE) end
    if got then
      R.prop = rec
      return mpop_reply(out, n, got)
    end
  end
  return put(out, n, resp.NULL_ARRAY)
end, { write = true, keys = mpop_keys(2) })

-- BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]
reg("blmpop", -5, M.blocking(mpop_take, function(argv, argc)
  local keys, ctx = mpop_args(argv, argc, 3)
  if not keys then return nil, ctx end
  return keys, argv[2], ctx
end, mpop_reply), { write = true, keys = mpop_keys(3) })

return M
