-- Lists: LPUSH, RPUSH, LPOP, RPOP, LLEN, LRANGE, LINDEX, and the blocking
-- BLPOP/BRPOP. A list is a ring buffer { kind = "list", items, cap, h =
-- offset of the first element, n = length } whose items sit in the
-- array part of their table (slot = (h + i) % cap + 1): LuaJIT compiles
-- array-part accesses but not integer keys in the hash part, which a
-- deque on negative keys would use. It doubles when full and halves when
-- a quarter full. An emptied list is deleted, as in Redis.
--
-- A client blocked in BLPOP parks on its own semaphore, queued under each
-- key it waits for. A push, or any command that creates the key (RENAME,
-- COPY, a ZADD for BZPOPMIN), marks the key ready; once the command (or
-- the whole EXEC) is logged, the dispatcher calls serve(), which pops for
-- the waiters in arrival order against the data as it is then and wakes
-- them with the element already in hand, so no other client can take it
-- between the wake-up and the reply (Redis's handleClientsBlockedOnKeys).
-- A thread watches the blocked client's socket meanwhile: a client that
-- leaves stops waiting at once and is never handed an element.
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local strings = require "kv.strings"
local ints = require "kv.ints"

local reg = R.register
local get, set = store.get, store.set
local bulk, int, int_into = resp.bulk, resp.int, resp.int_into
local null, null_array = resp.null, resp.null_array
local WRONGTYPE, NOT_INT = resp.WRONGTYPE, resp.NOT_INT
local type, lower = type, string.lower
local account = store.account
local num_arg = strings.num_arg
local band = bit.band
local tnew = require "table.new"

local MIN_CAP = 8   -- slots of a new list; a power of two
local LIST_BYTES, ITEM_BYTES = 120, 32   -- a list's tables, an element's slot and header

local M = {}

local waiting = {}   -- key -> FIFO array of waiters (entries may be done)

local function new_list()
  return { kind = "list", items = tnew(MIN_CAP, 0), cap = MIN_CAP, h = 0, n = 0,
           bytes = LIST_BYTES }
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
  return { kind = "list", items = items, cap = l.cap, h = l.h, n = l.n, bytes = l.bytes }
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
-- k when l empties (unless keep: LMOVE of a list onto itself).
local function pop(k, l, left, keep)
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
  account(l, -(#v + ITEM_BYTES))
  if n == 0 then
    if not keep then store.del(k) end
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
  account(l, #v + ITEM_BYTES)
end

-- A new list of the n strings t[1..n], in order (SORT ... STORE).
function M.from(t, n)
  local l = new_list()
  for i = 1, n do push_one(l, t[i], false) end
  return l
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
reg("lpush", push(true))
reg("rpush", push(false))

-- LPUSHX/RPUSHX key element [element ...]: only onto an existing list (a
-- missing key stays missing: 0); the events are LPUSH's and RPUSH's.
local function pushx(left)
  return function(_, argv, argc, out, n)
    local k = argv[2]
    local l = list_at(k)
    if l == nil then return put(out, n, WRONGTYPE) end
    if not l then return put(out, n, resp.ZERO) end
    for i = 3, argc do push_one(l, argv[i], left) end
    R.prop = true
    R.note("l", left and "lpush" or "rpush", k)
    return int_into(out, n, l.n)
  end
end
reg("lpushx", pushx(true))
reg("rpushx", pushx(false))

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
    if not l then
      if count then return null_array(out, n) end
      return null(out, n)
    end
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
reg("lpop", popcmd(true))
reg("rpop", popcmd(false))

reg("llen", function(_, argv, _, out, n)
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(l and l.n or 0))
end)

-- Redis's index clamping for LRANGE: negative counts from the end.
reg("lrange", function(_, argv, _, out, n)
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

reg("lindex", function(_, argv, _, out, n)
  local i = num_arg(argv[3])
  if not i then return put(out, n, NOT_INT) end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return null(out, n) end
  local len = l.n
  if i < 0 then i = len + i end
  if i < 0 or i >= len then return null(out, n) end
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
-- the command that gave k elements (or created it) is logged.
function M.ready(k)
  if waiting[k] then
    R.ready[k] = true
    R.any_ready = true
  end
end

-- Ends w's wait: with its items (got), an error reply for its client
-- (err), or neither (a timeout, CLIENT UNBLOCK, the client gone).
local function finish(w, got, err)
  w.done, w.got, w.err = true, got, err
  w.sema:post()
end
M.finish = finish

-- Hands elements of the ready keys to their waiters, oldest first, and
-- logs each pop. A waiter whose move cannot be done (BLMOVE into a key of
-- another type) gets its error and the element stays; a key of another
-- type than the waiters want keeps them waiting. Called by the dispatcher
-- after the command that made the keys ready.
function M.serve()
  local ready = R.ready
  R.ready, R.any_ready = {}, false
  for k in pairs(ready) do
    R.modified(k)
    local q = waiting[k]
    local i = 1
    while q and i <= #q do
      local w = q[i]
      local served = true
      if not w.done then
        local got, err, rec, pass = w.take(k)
        if got then
          R.log_after(rec)
          finish(w, got)
        elseif type(err) == "string" then
          finish(w, nil, err)
        elseif pass then
          -- Nothing for this one (an XREAD after a later ID), but the
          -- ones behind it may still be served: it keeps its place.
          served = false
        else
          break
        end
      end
      if served then table.remove(q, i) else i = i + 1 end
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
      if not w.done then finish(w) end
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

-- A timeout in seconds as Redis 7.0 reads one (getTimeoutFromObjectOrReply):
-- a float as strtold takes it, in ms rounded up; past int64 ms (inf
-- too) the conversion wraps, which Redis reports as negative. Returns
-- the ms (0: for ever), or nil and the error reply.
local float_arg = strings.float_arg
function M.timeout_ms(s)
  local t = float_arg(s)
  if not t then return nil, "-ERR timeout is not a float or out of range\r\n" end
  local ms = math.ceil(t * 1000)
  if ms < 0 or ms >= 2 ^ 63 then return nil, "-ERR timeout is negative\r\n" end
  return ms
end

-- A blocking command (BLPOP, BZPOPMIN, BLMOVE...). parse(argv, argc) ->
-- the keys, the timeout's text and a context for take (copied: argv is
-- the connection's and changes), or nil and an error reply (default:
-- key [key ...] timeout). take(k, ctx) -> the reply's items (an array of
-- strings), the record that logs the taking; or nil when k has nothing
-- to give; nil, true when k holds the wrong type; nil and an error reply
-- when the taking fails otherwise (BLMOVE into a key of another type);
-- nil, nil, nil, true when k has nothing for this waiter but may have for
-- the next (XREAD: each waits for entries after an ID of its own).
-- reply(out, n, got) -> n answers with it (default: an array of the
-- items); none(out, n) answers when nothing came (default a null array).
-- An element already there is taken at once; else the client waits (not
-- inside EXEC) until a command gives one of the keys something, the
-- timeout passes, CLIENT UNBLOCK or KILL ends the wait or it leaves.
local function items_reply(out, n, got)
  n = resp.array(out, n, #got)
  for i = 1, #got do n = bulk(out, n, got[i]) end
  return n
end

-- With in_ms, the timeout is an integer of milliseconds (XREAD BLOCK),
-- read as Redis reads one (getTimeoutFromObjectOrReply, UNIT_MILLISECONDS).
local function timeout_in_ms(s)
  local v = ints.parse(s)
  if v == nil then return nil, "-ERR timeout is not an integer or out of range\r\n" end
  if v < 0 then return nil, "-ERR timeout is negative\r\n" end
  return tonumber(v)
end

function M.blocking(take, parse, reply, none, in_ms)
  parse = parse or keys_then_timeout
  reply = reply or items_reply
  none = none or null_array
  return function(c, argv, argc, out, n)
    local keys, ttext, ctx = parse(argv, argc)
    if not keys then return put(out, n, ttext) end
    local ms, terr
    if in_ms then ms, terr = timeout_in_ms(ttext) else ms, terr = M.timeout_ms(ttext) end
    if not ms then return put(out, n, terr) end
    for i = 1, #keys do
      local got, err, rec = take(keys[i], ctx)
      if err == true then return put(out, n, WRONGTYPE) end
      if err then return put(out, n, err) end
      if got then
        R.prop = rec
        return reply(out, n, got)
      end
    end
    -- Inside EXEC a blocking command does not block (as Redis).
    if c.in_exec or not c.sock then return none(out, n) end
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
    c.blocked = w
    local watcher = cohost.spawn(watch, c, w)
    local t0 = cohost.monotonic()
    -- 0 waits for ever (the semaphore's limit is about 24 days a wait).
    local deadline = ms > 0 and t0 + ms / 1000 or math.huge
    while not w.done do
      local wait = deadline - cohost.monotonic()
      if wait <= 0 then break end
      c.sema:wait(wait < 1e6 and wait or 1e6)
    end
    R.stats.blocked = R.stats.blocked - 1
    c.blocked = nil
    c.waited = (cohost.monotonic() - t0) * 1e6   -- not counted as the command's time
    w.done = true
    cohost.kill(watcher)
    cohost.wait(watcher)
    unqueue(w)
    -- Others were answered meanwhile, perhaps in the other protocol.
    resp.use(c.proto)
    if w.err then return put(out, n, w.err) end
    if not w.got then return none(out, n) end
    return reply(out, n, w.got)
  end
end

-- BLPOP/BRPOP key [key ...] timeout
local function bpop(left)
  local name = left and "LPOP" or "RPOP"
  return M.blocking(function(k)
    local l = list_at(k)
    if l == nil then return nil, true end
    if not l then return nil end
    local v = pop(k, l, left)
    R.note("l", left and "lpop" or "rpop", k)
    if l.n == 0 then R.note("g", "del", k) end
    R.changed = { k }
    return { k, v }, nil, resp.encode({ name, k }, 2)
  end)
end
reg("blpop", bpop(true))
reg("brpop", bpop(false))

-- -- Editing ---------------------------------------------------------------

-- Makes l hold the array t (O(n): LREM, LINSERT and LTRIM rebuild).
local function refill(l, t, count)
  local cap = MIN_CAP
  while cap < count do cap = cap * 2 end
  local items, bytes = tnew(cap, 0), LIST_BYTES
  for i = 1, count do
    items[i] = t[i]
    bytes = bytes + #t[i] + ITEM_BYTES
  end
  l.items, l.cap, l.h, l.n = items, cap, 0, count
  account(l, bytes - l.bytes)
end

-- LTRIM key start stop
reg("ltrim", function(_, argv, _, out, n)
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
end)

-- LREM key count element: count > 0 from the head, < 0 from the tail, 0 all.
reg("lrem", function(_, argv, _, out, n)
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
end)

-- LSET key index element
reg("lset", function(_, argv, _, out, n)
  local i = num_arg(argv[3])
  if not i then return put(out, n, NOT_INT) end
  local l = list_at(argv[2])
  if l == nil then return put(out, n, WRONGTYPE) end
  if not l then return put(out, n, "-ERR no such key\r\n") end
  if i < 0 then i = l.n + i end
  if i < 0 or i >= l.n then return put(out, n, "-ERR index out of range\r\n") end
  local slot = band(l.h + i, l.cap - 1) + 1
  account(l, #argv[4] - #l.items[slot])
  l.items[slot] = argv[4]
  R.prop = true
  return put(out, n, resp.OK)
end)

-- LINSERT key BEFORE|AFTER pivot element
reg("linsert", function(_, argv, _, out, n)
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
end)

-- LPOS key element [RANK rank] [COUNT num] [MAXLEN len]
reg("lpos", function(_, argv, argc, out, n)
  local rank, count, maxlen = 1, nil, 0
  local j = 4
  while j <= argc do
    local o = lower(argv[j])
    if j == argc then return put(out, n, resp.SYNTAX) end
    local v = num_arg(argv[j + 1])
    if v == nil then return put(out, n, NOT_INT) end
    if o == "rank" then
      -- INT64_MIN: Redis 7.0 negates it into itself, a rank every match
      -- reaches, so it finds the last match (the first from the tail).
      if ints.is_min(ints.parse(argv[j + 1])) then v = -1 end
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
    if nf == 0 then return null(out, n) end
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

-- Pops from src's side and pushes to dst's: the element; or nil if src
-- is empty (dst is not looked at then: BRPOPLPUSH into a key of another
-- type blocks, as in Redis); nil, true if src holds another type; nil and
-- WRONGTYPE if dst does (checked before anything moves).
local function move(src, dst, from_left, to_left)
  local l = list_at(src)
  if l == nil then return nil, true end
  if not l then return nil end
  local d = list_at(dst)
  if d == nil then return nil, WRONGTYPE end
  R.modified(dst)
  local v = pop(src, l, from_left, src == dst)
  if not d then
    d = new_list()
    set(dst, d)
  end
  push_one(d, v, to_left)
  M.ready(dst)
  -- Redis's order: the push, the pop, the source's deletion.
  R.note("l", to_left and "lpush" or "rpush", dst)
  R.note("l", from_left and "lpop" or "rpop", src)
  if l.n == 0 then R.note("g", "del", src) end
  R.changed = { src, dst }
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
    if v == nil then return null(out, n) end
    R.prop = lmove_rec({ argv[2], argv[3], from, to })
    return bulk(out, n, v)
  end
end
reg("lmove", lmove(false))
reg("rpoplpush", lmove(true))

-- BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout, BRPOPLPUSH src dst timeout.
local function blmove_take(k, ctx)
  local v, err = move(k, ctx[2], ctx[3], ctx[4])
  if v == nil then return nil, err end
  return { v }, nil, lmove_rec(ctx)
end
local function one_reply(out, n, got) return bulk(out, n, got[1]) end
reg("blmove", M.blocking(blmove_take, function(argv)
  local from, to = side(argv[4]), side(argv[5])
  if from == nil or to == nil then return nil, resp.SYNTAX end
  return { argv[2] }, argv[6], { argv[2], argv[3], from, to }
end, one_reply, null))
reg("brpoplpush", M.blocking(blmove_take, function(argv)
  return { argv[2] }, argv[4], { argv[2], argv[3], false, true }
end, one_reply, null))

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
  R.note("l", ctx[1] and "lpop" or "rpop", k)
  if l.n == 0 then R.note("g", "del", k) end
  R.changed = { k }
  return { k, items }, nil, resp.encode({ ctx[1] and "LPOP" or "RPOP", k, tostring(count) }, 3)
end

-- The reply [key, [elements]].
local function mpop_reply(out, n, got)
  n = put(out, n, "*2\r\n")
  n = bulk(out, n, got[1])
  return resp.bulk_array(out, n, got[2], #got[2])
end

reg("lmpop", function(_, argv, argc, out, n)
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
  return null_array(out, n)
end)

-- BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]
reg("blmpop", M.blocking(mpop_take, function(argv, argc)
  local keys, ctx = mpop_args(argv, argc, 3)
  if not keys then return nil, ctx end
  return keys, argv[2], ctx
end, mpop_reply))

return M
