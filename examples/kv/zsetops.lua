-- Sorted sets, the commands over several keys or with a destination:
-- ZUNION, ZINTER, ZDIFF and their STORE forms, ZINTERCARD, ZRANGESTORE,
-- ZRANDMEMBER, ZMPOP and BZMPOP. Replies, error texts and the order in
-- which arguments are checked are Redis 7.0's (t_zset.c); the inputs of
-- the algebra may be sets as well, each member with score 1.
--
-- A result is computed into two arrays (members, scores), sorted by score
-- then member, and either answered or made into the destination's sorted
-- set in one pass (zsets.from_sorted): O(N log N) for N result members,
-- with no search per member.
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local lists = require "kv.lists"
local sets = require "kv.sets"
local zsets = require "kv.zsets"
local ints = require "kv.ints"

local reg = R.register
local get, set = store.get, store.set
local put, bulk, int, double = resp.put, resp.bulk, resp.int, resp.double
local WRONGTYPE, NOT_INT, SYNTAX = resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local parse_int = ints.parse
local type, tonumber, lower = type, tonumber, string.lower
local random = math.random
local zset_at = zsets.zset_at
local tnew = require "table.new"
local clear = require "table.clear"

local M = {}

-- Scratch arrays for results of up to SCRATCH members (the union's
-- members and scores, the merge sort's second pair), kept from call to
-- call: made and dropped per call, they and their growth were a good part
-- of a small ZUNIONSTORE's allocations, which the collector pays for
-- (docs/benchmarks.md, issue 35's types). Each command empties what it
-- used before it returns (release), so they hold no member alive; a
-- larger result gets arrays of its own. No command here yields between
-- taking them and releasing them.
local SCRATCH = 1024
local scratch_ms, scratch_ss = tnew(SCRATCH, 0), tnew(SCRATCH, 0)
local scratch_bm, scratch_bs = tnew(SCRATCH, 0), tnew(SCRATCH, 0)
local scratch_acc = {}   -- member -> score while a union is summed; cleared after

local function release(m)
  if m > SCRATCH then return end
  for i = 1, m do scratch_ms[i], scratch_bm[i] = nil, nil end
end

-- -- Sorting a result ------------------------------------------------------

local function before(sa, ma, sb, mb)
  return sa < sb or (sa == sb and ma < mb)
end

-- Sorts the n pairs (ms[i], ss[i]) by score, then member (bytes, as
-- Redis's sdscmp): a bottom-up merge sort over the two arrays, in Lua so
-- the JIT compiles it (table.sort calls a Lua comparator through the C
-- API, per comparison). O(n log n).
local function sort_pairs(ms, ss, n)
  if n < 2 then return ms, ss end
  local bm, bs
  if n <= SCRATCH then bm, bs = scratch_bm, scratch_bs else bm, bs = tnew(n, 0), tnew(n, 0) end
  local am, as = ms, ss
  local width = 1
  while width < n do
    local i = 1
    while i <= n do
      local mid, hi = i + width, i + 2 * width
      if mid > n + 1 then mid = n + 1 end
      if hi > n + 1 then hi = n + 1 end
      local a, b, k = i, mid, i
      while a < mid and b < hi do
        if before(as[b], am[b], as[a], am[a]) then
          bm[k], bs[k] = am[b], as[b]
          b = b + 1
        else
          bm[k], bs[k] = am[a], as[a]
          a = a + 1
        end
        k = k + 1
      end
      while a < mid do
        bm[k], bs[k] = am[a], as[a]
        a, k = a + 1, k + 1
      end
      while b < hi do
        bm[k], bs[k] = am[b], as[b]
        b, k = b + 1, k + 1
      end
      i = hi
    end
    am, as, bm, bs = bm, bs, am, as
    width = width * 2
  end
  return am, as
end

-- -- The algebra -------------------------------------------------------------

-- A source: its value (a zset, a set, or false when missing) and weight.
local function card(v)
  return v and v.n or 0
end

-- Walking a source value v in its order (a set's scores are 1): the
-- first position and the member and score there, then the next from a
-- position (a skiplist node, or a set's index); nil past the end. A loop
-- over these compiles, where a callback per member would be a closure
-- per source, which the JIT does not compile.
local function first_of(v)
  if v.kind == "zset" then
    local x = v.zl.head[1]
    if x then return x, x.m, x.s end
    return nil
  end
  if v.n > 0 then return 1, v.a[1], 1 end
  return nil
end

local function next_of(v, pos)
  if v.kind == "zset" then
    local x = pos[1]
    if x then return x, x.m, x.s end
    return nil
  end
  pos = pos + 1
  if pos <= v.n then return pos, v.a[pos], 1 end
  return nil
end

-- The score of member m in source value v, or nil.
local function score_in(v, m)
  if v.kind == "zset" then return v.s[m] end
  return v.i[m] and 1 or nil
end

-- Redis's zunionInterAggregate: a sum of inf and -inf is 0.
local function aggregate(how, target, val)
  if how == "sum" then
    local r = target + val
    if r ~= r then r = 0 end
    return r
  elseif how == "min" then
    return val < target and val or target
  end
  return val > target and val or target
end

-- Parses numkeys at argv[at], the keys after it and the options that
-- follow (WEIGHTS and AGGREGATE for union and intersection, WITHSCORES
-- without a destination, LIMIT for ZINTERCARD), in Redis's order of
-- checks. Returns the sources ({ v, w } each, in argument order), the
-- aggregate, withscores, limit; or nil and the error reply.
local function parse(argv, argc, at, name, op, store_, cardinality)
  local setnum = parse_int(argv[at])
  if setnum == nil then return nil, NOT_INT end
  if setnum < 1 then
    return nil, resp.err("ERR at least 1 input key is needed for '" .. name .. "' command")
  end
  if setnum > argc - at then return nil, SYNTAX end
  setnum = tonumber(setnum)
  local src = {}
  for i = 1, setnum do
    local v = get(argv[at + i])
    if v ~= nil and (type(v) ~= "table" or (v.kind ~= "zset" and v.kind ~= "set")) then
      return nil, WRONGTYPE
    end
    src[i] = { v = v or false, w = 1 }
  end
  local how, withscores, limit = "sum", false, 0
  local j = at + setnum + 1
  while j <= argc do
    local o, left = lower(argv[j]), argc - j + 1
    if op ~= "diff" and not cardinality and left >= setnum + 1 and o == "weights" then
      for i = 1, setnum do
        local w = zsets.score_of(argv[j + i])
        if not w then return nil, "-ERR weight value is not a float\r\n" end
        src[i].w = w
      end
      j = j + setnum + 1
    elseif op ~= "diff" and not cardinality and left >= 2 and o == "aggregate" then
      how = lower(argv[j + 1])
      if how ~= "sum" and how ~= "min" and how ~= "max" then return nil, SYNTAX end
      j = j + 2
    elseif not store_ and not cardinality and o == "withscores" then
      withscores = true
      j = j + 1
    elseif cardinality and left >= 2 and o == "limit" then
      limit = parse_int(argv[j + 1])
      if limit == nil or limit < 0 then return nil, "-ERR LIMIT can't be negative\r\n" end
      limit = tonumber(limit)
      j = j + 2
    else
      return nil, SYNTAX
    end
  end
  return src, how, withscores, limit
end

-- Union and intersection take the sources smallest first (Redis sorts
-- them so; glibc's qsort there is a stable merge sort), which decides
-- the order scores are summed in.
local function by_size(src)
  for i = 2, #src do
    local x, j = src[i], i - 1
    while j >= 1 and card(src[j].v) > card(x.v) do
      src[j + 1] = src[j]
      j = j - 1
    end
    src[j + 1] = x
  end
end

-- The members of the intersection with their scores (arrays and a
-- count), or just the count (cardinality, stopping at limit > 0).
local function inter(src, how, cardinality, limit)
  by_size(src)
  local ms, ss, m = {}, {}, 0
  local first = src[1]
  if card(first.v) == 0 then return ms, ss, 0 end
  local nsrc, fv = #src, first.v
  local pos, x, score0 = first_of(fv)
  while pos do
    local score = first.w * score0
    if score ~= score then score = 0 end
    local j = 2
    while j <= nsrc do
      local s = src[j]
      local value
      if s.v == fv then value = score0 else value = score_in(s.v, x) end
      if value == nil then break end
      score = aggregate(how, score, value * s.w)
      j = j + 1
    end
    if j > nsrc then
      m = m + 1
      if cardinality then
        if limit > 0 and m >= limit then break end
      else
        ms[m], ss[m] = x, score
      end
    end
    pos, x, score0 = next_of(fv, pos)
  end
  return ms, ss, m
end

local function union(src, how)
  by_size(src)
  local most, total = card(src[#src].v), 0   -- the union has at least most, at most total
  for i = 1, #src do total = total + card(src[i].v) end
  local acc, ms, ss, m
  if total <= SCRATCH then
    acc, ms, ss, m = scratch_acc, scratch_ms, scratch_ss, 0
  else
    acc, ms, m = tnew(0, most), tnew(most, 0), 0
  end
  for i = 1, #src do
    local s = src[i]
    if card(s.v) > 0 then
      local w, v = s.w, s.v
      local pos, x, score0 = first_of(v)
      while pos do
        local score = w * score0
        if score ~= score then score = 0 end
        local cur = acc[x]
        if cur == nil then
          m = m + 1
          ms[m] = x
          acc[x] = score
        else
          acc[x] = aggregate(how, cur, score)
        end
        pos, x, score0 = next_of(v, pos)
      end
    end
  end
  ss = ss or tnew(m, 0)
  for i = 1, m do ss[i] = acc[ms[i]] end
  if acc == scratch_acc then clear(acc) end
  return ms, ss, m
end

-- The members of the first source in none of the others, with their
-- scores there (no weights: ZDIFF has none).
local function diff(src)
  local ms, ss, m = {}, {}, 0
  local first = src[1].v
  if card(first) == 0 then return ms, ss, 0 end
  for i = 2, #src do
    if src[i].v == first then return ms, ss, 0 end   -- the same key again: nothing left
  end
  local pos, x, score = first_of(first)
  while pos do
    local keep = true
    for i = 2, #src do
      local v = src[i].v
      if v and score_in(v, x) ~= nil then
        keep = false
        break
      end
    end
    if keep then
      m = m + 1
      ms[m], ss[m] = x, score
    end
    pos, x, score = next_of(first, pos)
  end
  return ms, ss, m
end

local ops = { union = union, inter = inter, diff = diff }

-- ZUNION/ZINTER/ZDIFF numkeys key [key ...] [WEIGHTS w ...]
-- [AGGREGATE SUM|MIN|MAX] [WITHSCORES]: the result, ordered as a sorted
-- set (RESP3: [member, score] pairs with WITHSCORES).
local function zop(op, name)
  return function(_, argv, argc, out, n)
    local src, how, withscores = parse(argv, argc, 2, name, op, false, false)
    if not src then return put(out, n, how) end
    local ms, ss, m = ops[op](src, how)
    ms, ss = sort_pairs(ms, ss, m)
    local pairs3 = withscores and resp.is3()
    n = resp.array(out, n, (withscores and not pairs3) and m * 2 or m)
    for i = 1, m do
      if pairs3 then n = resp.array(out, n, 2) end
      n = bulk(out, n, ms[i])
      if withscores then n = double(out, n, ss[i]) end
    end
    release(m)
    return n
  end
end

-- Stores the n members ms/ss (sorted) at dest, or deletes dest when there
-- are none (then only "del" is sent, if it existed). The reply: n.
local function store_result(dest, ms, ss, m, out, n)
  if m > 0 then
    set(dest, zsets.from_sorted(ms, ss, m))
    R.prop = true
  elseif store.del(dest) then
    R.note("g", "del", dest)
    R.prop = true
  end
  return put(out, n, int(m))
end

-- ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE destination numkeys key [key ...]
-- [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]: the result replaces
-- destination, whatever it held.
local function zopstore(op, name)
  return function(_, argv, argc, out, n)
    local src, how = parse(argv, argc, 3, name, op, true, false)
    if not src then return put(out, n, how) end
    local ms, ss, m = ops[op](src, how)
    ms, ss = sort_pairs(ms, ss, m)
    n = store_result(argv[2], ms, ss, m, out, n)
    release(m)
    return n
  end
end

for _, op in ipairs { "union", "inter", "diff" } do
  reg("z" .. op, zop(op, "z" .. op))
  reg("z" .. op .. "store", zopstore(op, "z" .. op .. "store"))
end

-- ZINTERCARD numkeys key [key ...] [LIMIT limit]
reg("zintercard", function(_, argv, argc, out, n)
  local src, how, _, limit = parse(argv, argc, 2, "zintercard", "inter", false, true)
  if not src then return put(out, n, how) end
  local _, _, m = inter(src, how, true, limit)
  return put(out, n, int(m))
end)

-- ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]:
-- ZRANGE's selection (zsets.zrange_nodes), stored.
reg("zrangestore", function(_, argv, argc, out, n)
  local nodes, count = zsets.zrange_nodes(argv, argc, 3, "rank", false, true, true)
  if nodes == nil then return put(out, n, count) end
  local ms, ss, m = {}, {}, 0
  if nodes then
    m = count
    for i = 1, count do ms[i], ss[i] = nodes[i].m, nodes[i].s end
    -- REV gives them top first; the store wants them in order.
    if m > 1 and before(ss[m], ms[m], ss[1], ms[1]) then
      for i = 1, math.floor(m / 2) do
        ms[i], ms[m + 1 - i] = ms[m + 1 - i], ms[i]
        ss[i], ss[m + 1 - i] = ss[m + 1 - i], ss[i]
      end
    end
  end
  return store_result(argv[2], ms, ss, m, out, n)
end)

-- -- ZRANDMEMBER ---------------------------------------------------------------

-- LONG_MAX / 2 and LONG_MIN / 2: WITHSCORES doubles the reply (Redis's
-- bounds, so -2^62 itself is taken).
local LONG_HALF, LONG_HALF_NEG = 4611686018427387903LL, -4611686018427387904LL

-- ZRANDMEMBER key [count [WITHSCORES]]: count > 0 distinct members, < 0
-- with repeats (streamed when large, as SRANDMEMBER's).
reg("zrandmember", function(c, argv, argc, out, n)
  local count, withscores
  if argc >= 3 then
    count = parse_int(argv[3])
    if count == nil then return put(out, n, NOT_INT) end
    if ints.is_min(count) then return put(out, n, resp.OUT_OF_RANGE) end
    if argc == 4 then
      if lower(argv[4]) ~= "withscores" then return put(out, n, SYNTAX) end
      withscores = true
      if count > LONG_HALF or count < LONG_HALF_NEG then
        return put(out, n, "-ERR value is out of range\r\n")
      end
    elseif argc > 4 then
      return put(out, n, SYNTAX)
    end
    count = tonumber(count)
  end
  local z = zset_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  if not z then
    if count then return resp.array(out, n, 0) end
    return resp.null(out, n)
  end
  local ms, ss, len = {}, {}, z.n
  local x = z.zl.head[1]
  for i = 1, len do
    ms[i], ss[i] = x.m, x.s
    x = x[1]
  end
  if not count then return bulk(out, n, ms[random(len)]) end
  if count < 0 then
    return sets.random_repeats(c, out, n, -count, ms, len, withscores and ss or nil, double)
  end
  -- Distinct: the whole set in order, or a partial shuffle of it.
  local take = count < len and count or len
  if take < len then
    for i = 1, take do
      local j = random(i, len)
      ms[i], ms[j] = ms[j], ms[i]
      ss[i], ss[j] = ss[j], ss[i]
    end
  end
  local pairs3 = withscores and resp.is3()
  n = resp.array(out, n, (withscores and not pairs3) and take * 2 or take)
  for i = 1, take do
    if pairs3 then n = resp.array(out, n, 2) end
    n = bulk(out, n, ms[i])
    if withscores then n = double(out, n, ss[i]) end
  end
  return n
end)

-- -- ZMPOP and BZMPOP ------------------------------------------------------------

-- numkeys key [key ...] MIN|MAX [COUNT count] from argv[at] on. Returns
-- the keys and { max, count }, or nil and the error reply.
local function mpop_args(argv, argc, at)
  local nk = parse_int(argv[at])
  if nk == nil or nk <= 0 then return nil, "-ERR numkeys should be greater than 0\r\n" end
  local where = at + nk + 1
  if where > argc then return nil, SYNTAX end
  local w = lower(argv[where])
  if w ~= "min" and w ~= "max" then return nil, SYNTAX end
  local count
  local j = where + 1
  while j <= argc do
    if not count and lower(argv[j]) == "count" and j < argc then
      count = parse_int(argv[j + 1])
      if count == nil or count <= 0 then return nil, "-ERR count should be greater than 0\r\n" end
      count = tonumber(count)
      j = j + 2
    else
      return nil, SYNTAX
    end
  end
  local keys = {}
  for i = at + 1, at + tonumber(nk) do keys[#keys + 1] = argv[i] end
  return keys, { w == "max", count or 1 }
end

-- Pops up to ctx's count from k: [key, [[member, score] ...]], logged as
-- ZPOPMIN/ZPOPMAX key count (as Redis propagates it).
local function mpop_take(k, ctx)
  local z = zset_at(k)
  if z == nil then return nil, true end
  if not z then return nil end
  local max = ctx[1]
  local popped = zsets.pop(k, z, ctx[2], max)
  local cmd = max and "zpopmax" or "zpopmin"
  R.note("z", cmd, k)
  if z.n == 0 then R.note("g", "del", k) end
  R.changed = { k }
  return { k, popped }, nil, resp.encode({ max and "ZPOPMAX" or "ZPOPMIN", k, tostring(#popped) }, 3)
end

local function mpop_reply(out, n, got)
  n = resp.array(out, n, 2)
  n = bulk(out, n, got[1])
  local popped = got[2]
  n = resp.array(out, n, #popped)
  for i = 1, #popped do
    n = resp.array(out, n, 2)
    n = bulk(out, n, popped[i][1])
    n = double(out, n, popped[i][2])
  end
  return n
end

-- ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]: from the first key
-- that has members.
reg("zmpop", function(_, argv, argc, out, n)
  local keys, ctx = mpop_args(argv, argc, 2)
  if not keys then return put(out, n, ctx) end
  for i = 1, #keys do
    local got, wrong, rec = mpop_take(keys[i], ctx)
    if wrong then return put(out, n, WRONGTYPE) end
    if got then
      R.prop = rec
      return mpop_reply(out, n, got)
    end
  end
  return resp.null_array(out, n)
end)

-- BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]: as ZMPOP,
-- or waits (lists.blocking: woken when one of the keys gets members).
reg("bzmpop", lists.blocking(mpop_take, function(argv, argc)
  local keys, ctx = mpop_args(argv, argc, 3)
  if not keys then return nil, ctx end
  return keys, argv[2], ctx
end, mpop_reply))

M.sort_pairs = sort_pairs   -- its result may be scratch arrays: release(n) after use
M.release = release

return M
