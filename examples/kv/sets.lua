-- Sets: SADD, SREM, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SPOP,
-- SRANDMEMBER, SINTER, SUNION, SDIFF and their STORE forms, SINTERCARD,
-- SMOVE, SSCAN. Replies and error texts are Redis 7.0's (t_set.c).
--
-- A set is { kind = "set", n, a = { member, ... }, i = { member = index } }:
-- the members in an array, so SPOP and SRANDMEMBER pick one in O(1), and
-- an index for membership; a removal moves the last member into the
-- hole. An emptied set is deleted. SPOP is random, so it is logged as the
-- SREM of what it took (as Redis propagates it).
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local strings = require "kv.strings"

local reg = R.register
local get, set = store.get, store.set
local bulk, int = resp.bulk, resp.int
local WRONGTYPE, NOT_INT = resp.WRONGTYPE, resp.NOT_INT
local type, random, lower = type, math.random, string.lower
local bulk_array, bulk_set = resp.bulk_array, resp.bulk_set
local ints = require "kv.ints"
local parse_int = ints.parse
local account = store.account

local M = {}

local SET_BYTES, MEMBER_BYTES = 100, 72   -- a set's tables; a member's string and slots

local function new_set()
  return { kind = "set", n = 0, a = {}, i = {}, bytes = SET_BYTES }
end

-- The set at k: the set, false for a missing key, nil for another type.
local function set_at(k)
  local v = get(k)
  if v == nil then return false end
  if type(v) ~= "table" or v.kind ~= "set" then return nil end
  return v
end
M.set_at = set_at

local function add(s, m)
  if s.i[m] then return false end
  local n = s.n + 1
  s.n = n
  s.a[n] = m
  s.i[m] = n
  account(s, #m + MEMBER_BYTES)
  return true
end

local function remove(s, m)
  local at = s.i[m]
  if not at then return false end
  local n = s.n
  local last = s.a[n]
  s.a[at] = last
  s.i[last] = at
  s.a[n] = nil
  s.i[m] = nil
  s.n = n - 1
  account(s, -(#m + MEMBER_BYTES))
  return true
end

R.dumpers.set = function(s)
  local t = {}
  for j = 1, s.n do t[j] = s.a[j] end
  return "SADD", t, s.n, 1
end

R.copiers.set = function(s)
  local c = new_set()
  for j = 1, s.n do add(c, s.a[j]) end
  return c
end

reg("sadd", function(_, argv, argc, out, n)
  local k = argv[2]
  local s = set_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then
    s = new_set()
    set(k, s)
  end
  local added = 0
  for j = 3, argc do
    if add(s, argv[j]) then added = added + 1 end
  end
  if added > 0 then R.prop = true end
  return put(out, n, int(added))
end)

reg("srem", function(_, argv, argc, out, n)
  local k = argv[2]
  local s = set_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  local removed = 0
  if s then
    for j = 3, argc do
      if remove(s, argv[j]) then removed = removed + 1 end
    end
    if s.n == 0 then store.del(k) end
  end
  if removed > 0 then R.prop = true end
  return put(out, n, int(removed))
end)

reg("smembers", function(_, argv, _, out, n)
  local s = set_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return resp.set(out, n, 0) end
  return bulk_set(out, n, s.a, s.n)
end)

reg("sismember", function(_, argv, _, out, n)
  local s = set_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, (s and s.i[argv[3]]) and resp.ONE or resp.ZERO)
end)

reg("smismember", function(_, argv, argc, out, n)
  local s = set_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  n = put(out, n, resp.array_head(argc - 2))
  for j = 3, argc do n = put(out, n, (s and s.i[argv[j]]) and resp.ONE or resp.ZERO) end
  return n
end)

reg("scard", function(_, argv, _, out, n)
  local s = set_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(s and s.n or 0))
end)

-- SPOP key [count]
reg("spop", function(_, argv, argc, out, n)
  if argc > 3 then return put(out, n, resp.SYNTAX) end
  local count
  if argc == 3 then
    count = parse_int(argv[3])
    if count == nil or count < 0 then
      return put(out, n, "-ERR value is out of range, must be positive\r\n")
    end
  end
  local k = argv[2]
  local s = set_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then
    if count then return resp.set(out, n, 0) end
    return resp.null(out, n)
  end
  local taken, t = count or 1, {}
  if taken > s.n then taken = s.n end
  for j = 1, taken do
    local m = s.a[random(s.n)]
    remove(s, m)
    t[j] = m
  end
  if s.n == 0 then store.del(k) end
  if taken > 0 then
    local rec = { "SREM", k }
    for j = 1, taken do rec[j + 2] = t[j] end
    R.prop = resp.encode(rec, taken + 2)
  end
  if not count then return bulk(out, n, t[1]) end
  return bulk_set(out, n, t, taken)
end)

-- A reply of count picks at random, with repeats, from items[1..len]
-- (values: their values, each pick then a pair: a flat two in RESP2, an
-- array in RESP3; vput(out, n, v) writes a value, bulk by default).
-- Past STREAM picks the reply goes out in pieces as it
-- is made, from a copy of the items, and other clients run between them:
-- a count of -10^9 costs this client's wait, not everyone's (Redis builds
-- it in one go and stalls them all), and never a heap of its size.
local STREAM = 65536

function M.random_repeats(c, out, n, count, items, len, values, vput)
  vput = vput or bulk
  local pairs3 = values and resp.is3()
  n = resp.array(out, n, (values and not pairs3) and count * 2 or count)
  local stream = count > STREAM and c:can_stream()
  if stream then
    local copy, vcopy = {}, values and {}
    for i = 1, len do
      copy[i] = items[i]
      if values then vcopy[i] = values[i] end
    end
    items, values = copy, vcopy
  end
  for i = 1, count do
    local j = random(len)
    if pairs3 then n = resp.array(out, n, 2) end
    n = bulk(out, n, items[j])
    if values then n = vput(out, n, values[j]) end
    if stream and i % STREAM == 0 then
      n = c:reply_now(out, n)
      if c.quit or c.gone then return n end   -- the client left: no one to answer
    end
  end
  return n
end

-- SRANDMEMBER key [count]: count > 0 distinct members, < 0 with
-- repeats; count is within -LONG_MAX..LONG_MAX (INT64_MIN's negation
-- would not fit).
reg("srandmember", function(c, argv, argc, out, n)
  if argc > 3 then return put(out, n, resp.SYNTAX) end
  local count
  if argc == 3 then
    count = parse_int(argv[3])
    if count == nil then return put(out, n, NOT_INT) end
    if ints.is_min(count) then return put(out, n, resp.OUT_OF_RANGE) end
    count = tonumber(count)
  end
  local s = set_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then
    if count then return resp.array(out, n, 0) end
    return resp.null(out, n)
  end
  if not count then return bulk(out, n, s.a[random(s.n)]) end
  if count < 0 then return M.random_repeats(c, out, n, -count, s.a, s.n) end
  local t, m = {}, 0
  if count >= s.n then
    for j = 1, s.n do t[j] = s.a[j] end
    m = s.n
  else
    -- A partial Fisher-Yates shuffle on a copy of the indexes' order.
    local picked = {}
    for j = 1, count do
      local r = random(j, s.n)
      local a, b = picked[j] or s.a[j], picked[r] or s.a[r]
      picked[j], picked[r] = b, a
      t[j] = b
    end
    m = count
  end
  return bulk_array(out, n, t, m)
end)

-- The members of the sets named argv[from..to] combined by op ("inter",
-- "union", "diff"), as an array and a count; nil if one is not a set.
local function combine(op, argv, from, to)
  local sets = {}
  for j = from, to do
    local s = set_at(argv[j])
    if s == nil then return nil end
    sets[#sets + 1] = s or false
  end
  local t, m = {}, 0
  if op == "union" then
    local seen = {}
    for _, s in ipairs(sets) do
      if s then
        for j = 1, s.n do
          local x = s.a[j]
          if not seen[x] then
            seen[x] = true
            m = m + 1
            t[m] = x
          end
        end
      end
    end
  elseif op == "inter" then
    -- Walk the smallest; an empty or missing one makes it empty.
    local small
    for _, s in ipairs(sets) do
      if not s then return t, 0 end
      if not small or s.n < small.n then small = s end
    end
    for j = 1, small.n do
      local x, all = small.a[j], true
      for _, s in ipairs(sets) do
        if not s.i[x] then
          all = false
          break
        end
      end
      if all then
        m = m + 1
        t[m] = x
      end
    end
  else
    local first = sets[1]
    if first then
      for j = 1, first.n do
        local x, keep = first.a[j], true
        for q = 2, #sets do
          if sets[q] and sets[q].i[x] then
            keep = false
            break
          end
        end
        if keep then
          m = m + 1
          t[m] = x
        end
      end
    end
  end
  return t, m
end

for _, op in ipairs { "inter", "union", "diff" } do
  reg("s" .. op, function(_, argv, argc, out, n)
    local t, m = combine(op, argv, 2, argc)
    if not t then return put(out, n, WRONGTYPE) end
    return bulk_set(out, n, t, m)
  end)
  -- S*STORE destination key [key ...]: the result replaces destination
  -- (deleted when empty).
  reg("s" .. op .. "store", function(_, argv, argc, out, n)
    local t, m = combine(op, argv, 3, argc)
    if not t then return put(out, n, WRONGTYPE) end
    local dest = argv[2]
    if m > 0 then
      local s = new_set()
      for j = 1, m do add(s, t[j]) end
      set(dest, s)   -- over whatever was there
      R.prop = true
    elseif store.del(dest) then
      -- An empty result deletes the destination: only "del" is sent.
      R.note("g", "del", dest)
      R.prop = true
    end
    return put(out, n, int(m))
  end)
end

-- SINTERCARD numkeys key [key ...] [LIMIT limit]
reg("sintercard", function(_, argv, argc, out, n)
  local nk = parse_int(argv[2])
  if nk == nil or nk <= 0 then return put(out, n, "-ERR numkeys should be greater than 0\r\n") end
  if nk > argc - 2 then
    return put(out, n, "-ERR Number of keys can't be greater than number of args\r\n")
  end
  local limit = 0
  local j = 3 + nk
  while j <= argc do
    if lower(argv[j]) == "limit" and j < argc then
      limit = parse_int(argv[j + 1])
      if limit == nil or limit < 0 then return put(out, n, "-ERR LIMIT can't be negative\r\n") end
      j = j + 2
    else
      return put(out, n, resp.SYNTAX)
    end
  end
  local t, m = combine("inter", argv, 3, 2 + nk)
  if not t then return put(out, n, WRONGTYPE) end
  if limit > 0 and m > limit then m = limit end
  return put(out, n, int(m))
end)

reg("smove", function(_, argv, _, out, n)
  local src, dst = set_at(argv[2]), set_at(argv[3])
  if src == nil or dst == nil then return put(out, n, WRONGTYPE) end
  local m = argv[4]
  if not src or not src.i[m] then return put(out, n, resp.ZERO) end
  if argv[2] == argv[3] then return put(out, n, resp.ONE) end
  remove(src, m)
  R.note("s", "srem", argv[2])
  if src.n == 0 then
    store.del(argv[2])
    R.note("g", "del", argv[2])
  end
  if not dst then
    dst = new_set()
    set(argv[3], dst)
  end
  -- The destination changed only if it did not have the member (WATCH
  -- sees only what changed, as Redis signals it).
  if add(dst, m) then
    R.note("s", "sadd", argv[3])
  else
    R.changed = { argv[2] }
  end
  R.prop = true
  return put(out, n, resp.ONE)
end)

-- SSCAN key cursor [MATCH pattern] [COUNT count]: the whole set in one
-- reply with cursor 0, as Redis answers for its small encodings (COUNT
-- is a hint), so no member present throughout is missed.
-- As Redis, the cursor is read first, then the key (missing: an empty
-- scan; another type: WRONGTYPE), then the options.
M.INVALID_CURSOR = "-ERR invalid cursor\r\n"
M.EMPTY_SCAN = "*2\r\n$1\r\n0\r\n*0\r\n"

function M.scan_args(argv, argc)
  local match
  local j = 4
  while j <= argc do
    local o = lower(argv[j])
    if j == argc then return nil, resp.SYNTAX end
    if o == "count" then
      local c = parse_int(argv[j + 1])
      if c == nil then return nil, NOT_INT end
      if c < 1 then return nil, resp.SYNTAX end
    elseif o == "match" then
      match = argv[j + 1] ~= "*" and store.matcher(argv[j + 1]) or nil
    else
      return nil, resp.SYNTAX
    end
    j = j + 2
  end
  return match or false
end

reg("sscan", function(_, argv, argc, out, n)
  if not strings.cursor(argv[3]) then return put(out, n, M.INVALID_CURSOR) end
  local s = set_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, M.EMPTY_SCAN) end
  local match, err = M.scan_args(argv, argc)
  if match == nil then return put(out, n, err) end
  local t, m = {}, 0
  for j = 1, s.n do
    local x = s.a[j]
    if not match or match(x) then
      m = m + 1
      t[m] = x
    end
  end
  n = put(out, n, "*2\r\n$1\r\n0\r\n")
  return bulk_array(out, n, t, m)
end)

return M
