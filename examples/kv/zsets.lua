-- Sorted sets: ZADD (NX XX GT LT CH INCR), ZREM, ZSCORE, ZMSCORE, ZINCRBY,
-- ZCARD, ZCOUNT, ZRANGE (BYSCORE BYLEX REV LIMIT WITHSCORES),
-- ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX,
-- ZREVRANGE, ZRANK, ZREVRANK, ZPOPMIN, ZPOPMAX, BZPOPMIN, BZPOPMAX,
-- ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZSCAN. Replies and error texts are
-- Redis 7.0's (t_zset.c); scores are printed as it prints them to RESP2
-- clients ("%.17g", inf and -inf).
--
-- A sorted set is { kind = "zset", n, s = { member = score }, zl = a
-- skiplist (kv/skiplist.lua) }: O(1) score lookups, O(log n) updates,
-- ranks and range starts. An emptied one is deleted.
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local sets = require "kv.sets"
local lists = require "kv.lists"
local sl = require "kv.skiplist"
local tnew = require "table.new"

local reg = R.register
local get, set = store.get, store.set
local bulk, int, null, double = resp.bulk, resp.int, resp.null, resp.double
local WRONGTYPE, NOT_INT, SYNTAX = resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local account = store.account
local type, tonumber, lower = type, tonumber, string.lower
local huge = math.huge
local parse_int = require("kv.ints").parse

local M = {}

local NOT_FLOAT = "-ERR value is not a valid float\r\n"

local ZSET_BYTES, MEMBER_BYTES = 200, 180   -- a zset's tables; a member's node, string, slot

local function new_zset()
  return { kind = "zset", n = 0, s = {}, zl = sl.new(), bytes = ZSET_BYTES }
end

M.new = new_zset

local function zset_at(k)
  local v = get(k)
  if v == nil then return false end
  if type(v) ~= "table" or v.kind ~= "zset" then return nil end
  return v
end
M.zset_at = zset_at

-- A score as Redis's strtod-based parsing takes it (no blanks, inf and
-- -inf, not NaN, not out of range), or nil.
local INF = { inf = huge, ["+inf"] = huge, ["-inf"] = -huge, infinity = huge,
              ["+infinity"] = huge, ["-infinity"] = -huge }
local function score_of(s)
  if s == "" or s:find("[%s]") then return nil end
  local i = INF[lower(s)]
  if i then return i end
  local v = tonumber(s)
  if not v or v ~= v or v == huge or v == -huge then return nil end
  return v
end

M.score_of = score_of

local score_str = resp.double_str
M.score_str = score_str

R.dumpers.zset = function(z)
  local t, n = {}, 0
  local x = z.zl.head[1]
  while x do
    t[n + 1], t[n + 2] = score_str(x.s), x.m
    n = n + 2
    x = x[1]
  end
  return "ZADD", t, n, 2
end

local function zadd_member(z, m, score)
  z.s[m] = score
  z.n = z.n + 1
  sl.insert(z.zl, score, m)
  account(z, #m + MEMBER_BYTES)
end

R.copiers.zset = function(z)
  local c = new_zset()
  local x = z.zl.head[1]
  while x do
    zadd_member(c, x.m, x.s)
    x = x[1]
  end
  return c
end

-- A new sorted set of the n members ms[1..n] with scores ss[1..n], given
-- in order (by score, then member). O(n).
function M.from_sorted(ms, ss, n)
  local z = new_zset()
  local s, bytes = tnew(0, n), 0
  z.s = s
  for i = 1, n do
    local m = ms[i]
    s[m] = ss[i]
    bytes = bytes + #m + MEMBER_BYTES
  end
  z.n = n
  account(z, bytes)
  sl.build(z.zl, ms, ss, n)
  return z
end

local function zrem_member(z, m)
  local score = z.s[m]
  if score == nil then return false end
  sl.delete(z.zl, score, m)
  z.s[m] = nil
  z.n = z.n - 1
  account(z, -(#m + MEMBER_BYTES))
  return true
end

local function set_score(z, m, score)
  local cur = z.s[m]
  if cur == score then return end
  sl.delete(z.zl, cur, m)
  sl.insert(z.zl, score, m)
  z.s[m] = score
end

-- Appends member (and its score) of node x: with scores, RESP3 has a
-- [member, score] pair for each, RESP2 the two flat.
local function put_node(out, n, x, withscores)
  if withscores and resp.is3() then n = resp.array(out, n, 2) end
  n = bulk(out, n, x.m)
  if withscores then n = double(out, n, x.s) end
  return n
end

M.put_node = put_node

-- The head of an array of count members, with their scores if asked.
local function nodes_head(out, n, count, withscores)
  return resp.array(out, n, (withscores and not resp.is3()) and count * 2 or count)
end
M.nodes_head = nodes_head

-- -- Writes --------------------------------------------------------------

-- ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]
local function zadd(name, incr_only)
  return function(_, argv, argc, out, n)
    local nx, xx, gt, lt, ch, incr = false, false, false, false, false, incr_only
    local j = 3
    while j <= argc and not incr_only do   -- ZINCRBY: key increment member
      local o = lower(argv[j])
      if o == "nx" then nx = true
      elseif o == "xx" then xx = true
      elseif o == "gt" then gt = true
      elseif o == "lt" then lt = true
      elseif o == "ch" then ch = true
      elseif o == "incr" then incr = true
      else break end
      j = j + 1
    end
    local elements = argc - j + 1
    if elements % 2 == 1 or elements == 0 then return put(out, n, SYNTAX) end
    elements = elements / 2
    if nx and xx then
      return put(out, n, "-ERR XX and NX options at the same time are not compatible\r\n")
    end
    if (gt and nx) or (lt and nx) or (gt and lt) then
      return put(out, n, "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n")
    end
    if incr and elements > 1 then
      return put(out, n, "-ERR INCR option supports a single increment-element pair\r\n")
    end
    local scores = {}
    for e = 1, elements do
      scores[e] = score_of(argv[j + 2 * (e - 1)])
      if not scores[e] then return put(out, n, NOT_FLOAT) end
    end
    local k = argv[2]
    local z = zset_at(k)
    if z == nil then return put(out, n, WRONGTYPE) end
    if not z then
      if xx then
        if incr then return null(out, n) end
        return put(out, n, resp.ZERO)
      end
      z = new_zset()
      set(k, z)
    end
    local added, updated, last = 0, 0, nil
    for e = 1, elements do
      local score, m = scores[e], argv[j + 2 * e - 1]
      local cur = z.s[m]
      if cur ~= nil then
        if not nx then
          if incr then
            score = score + cur
            if score ~= score then
              if z.n == 0 then store.del(k) end
              return put(out, n, "-ERR resulting score is not a number (NaN)\r\n")
            end
          end
          if not ((lt and score >= cur) or (gt and score <= cur)) then
            if score ~= cur then
              set_score(z, m, score)
              updated = updated + 1
            end
            last = score
          end
        end
      elseif not xx then
        zadd_member(z, m, score)
        added = added + 1
        last = score
      end
    end
    if z.n == 0 then store.del(k) end
    if added + updated > 0 then
      R.prop = true
      lists.ready(k)
    end
    if incr then
      if last == nil then return null(out, n) end
      return double(out, n, last)
    end
    return put(out, n, int(ch and added + updated or added))
  end
end
reg("zadd", zadd("zadd", false))

-- ZINCRBY key increment member: ZADD's INCR, logged as itself.
local zincr = zadd("zincrby", true)
reg("zincrby", zincr)

reg("zrem", function(_, argv, argc, out, n)
  local k = argv[2]
  local z = zset_at(k)
  if z == nil then return put(out, n, WRONGTYPE) end
  local removed = 0
  if z then
    for j = 3, argc do
      if zrem_member(z, argv[j]) then removed = removed + 1 end
    end
    if z.n == 0 then store.del(k) end
  end
  if removed > 0 then R.prop = true end
  return put(out, n, int(removed))
end)

-- -- Reads -----------------------------------------------------------------

reg("zscore", function(_, argv, _, out, n)
  local z = zset_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  local v = z and z.s[argv[3]] or nil
  if v == nil then return null(out, n) end
  return double(out, n, v)
end)

reg("zmscore", function(_, argv, argc, out, n)
  local z = zset_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  n = put(out, n, resp.array_head(argc - 2))
  for j = 3, argc do
    local v = z and z.s[argv[j]] or nil
    if v == nil then n = null(out, n) else n = double(out, n, v) end
  end
  return n
end)

reg("zcard", function(_, argv, _, out, n)
  local z = zset_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(z and z.n or 0))
end)

-- A score range bound: "(" excludes; "-inf", "+inf". Returns value,
-- exclusive; or nil.
local function score_bound(s)
  local ex = s:sub(1, 1) == "("
  local v = score_of(ex and s:sub(2) or s)
  if v == nil then return nil end
  return v, ex
end

-- A lex range bound: "-", "+", "[x" inclusive, "(x" exclusive. Returns
-- kind ("min", "max" or "str"), the string, exclusive; or nil.
local function lex_bound(s)
  if s == "-" then return "min" end
  if s == "+" then return "max" end
  local c = s:sub(1, 1)
  if c == "[" then return "str", s:sub(2), false end
  if c == "(" then return "str", s:sub(2), true end
  return nil
end

-- Tests on nodes for a range: above_min(x) and below_max(x).
local function score_tests(min, minex, max, maxex)
  local function above(x) if minex then return x.s > min end return x.s >= min end
  local function below(x) if maxex then return x.s < max end return x.s <= max end
  return above, below
end

local function lex_tests(mink, mins, minex, maxk, maxs, maxex)
  local function above(x)
    if mink == "min" then return true end
    if mink == "max" then return false end
    if minex then return x.m > mins end
    return x.m >= mins
  end
  local function below(x)
    if maxk == "max" then return true end
    if maxk == "min" then return false end
    if maxex then return x.m < maxs end
    return x.m <= maxs
  end
  return above, below
end

-- The range tests for argv[i] and argv[j] as scores or lex bounds; nil
-- and an error reply when they do not parse.
local function range_tests(bylex, a, b)
  if bylex then
    local mink, mins, minex = lex_bound(a)
    local maxk, maxs, maxex = lex_bound(b)
    if not mink or not maxk then return nil, "-ERR min or max not valid string range item\r\n" end
    return lex_tests(mink, mins, minex, maxk, maxs, maxex)
  end
  local min, minex = score_bound(a)
  local max, maxex = score_bound(b)
  if min == nil or max == nil then return nil, "-ERR min or max is not a float\r\n" end
  return score_tests(min, minex, max, maxex)
end

-- The nodes of a by-score or by-lex range, in order (rev: from the top),
-- after skipping offset, at most limit (negative: all). An array.
local function range_nodes(z, above, below, rev, offset, limit)
  local t, m = {}, 0
  local x
  if rev then x = sl.last_in(z.zl, below) else x = sl.first_in(z.zl, above) end
  while x and offset > 0 do
    if rev then
      if not above(x) then return t, 0 end
      x = x.b
    else
      if not below(x) then return t, 0 end
      x = x[1]
    end
    offset = offset - 1
  end
  while x and limit ~= 0 do
    if rev then
      if not above(x) then break end
    elseif not below(x) then
      break
    end
    m = m + 1
    t[m] = x
    limit = limit - 1
    if rev then x = x.b else x = x[1] end
  end
  return t, m
end

-- Rank range start..stop (Redis's clamping; rev counts from the top):
-- the nodes, in reply order.
local function rank_nodes(z, start, stop, rev)
  local len = z.n
  if start < 0 then start = len + start end
  if stop < 0 then stop = len + stop end
  if start < 0 then start = 0 end
  local t, m = {}, 0
  if start > stop or start >= len then return t, 0 end
  if stop >= len then stop = len - 1 end
  local x
  if rev then x = sl.at(z.zl, len - start) else x = sl.at(z.zl, start + 1) end
  for _ = start, stop do
    m = m + 1
    t[m] = x
    if rev then x = x.b else x = x[1] end
  end
  return t, m
end

-- Redis's zrangeGenericCommand, up to the nodes: argv[at] is the key,
-- argv[at + 1], argv[at + 2] the range and the options follow. kind:
-- "rank", "score" or "lex"; rev; zrange: ZRANGE's own options (BYSCORE,
-- BYLEX, REV) are allowed, once each; store: ZRANGESTORE (no
-- WITHSCORES). Returns the nodes in reply order, their count and
-- whether WITHSCORES was given; false when the key is missing; or nil
-- and the error reply.
local function zrange_nodes(argv, argc, at, kind, rev, zrange, store)
  local withscores, offset, limit = false, 0, -1
  local auto_kind, auto_dir = zrange, zrange
  local j = at + 3
  while j <= argc do
    local o = lower(argv[j])
    if o == "withscores" and not store then
      withscores = true
    elseif o == "limit" and j + 2 <= argc then
      offset, limit = parse_int(argv[j + 1]), parse_int(argv[j + 2])
      if offset == nil or limit == nil then return nil, NOT_INT end
      j = j + 2
    elseif auto_dir and o == "rev" then
      rev, auto_dir = true, false
    elseif auto_kind and o == "bylex" then
      kind, auto_kind = "lex", false
    elseif auto_kind and o == "byscore" then
      kind, auto_kind = "score", false
    else
      return nil, SYNTAX
    end
    j = j + 1
  end
  -- As Redis: a LIMIT whose count is -1 (all) is no LIMIT.
  if limit ~= -1 and kind == "rank" then
    return nil, "-ERR syntax error, LIMIT is only supported in combination with either "
      .. "BYSCORE or BYLEX\r\n"
  end
  if withscores and kind == "lex" then
    return nil, "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n"
  end
  local a, b = argv[at + 1], argv[at + 2]
  -- The reverse forms name the range from the top: max first.
  if rev and kind ~= "rank" then a, b = b, a end
  local above, below, start, stop
  if kind == "rank" then
    start, stop = parse_int(a), parse_int(b)
    if start == nil or stop == nil then return nil, NOT_INT end
  else
    above, below = range_tests(kind == "lex", a, b)
    if not above then return nil, below end
  end
  local z = zset_at(argv[at])
  if z == nil then return nil, WRONGTYPE end
  if not z then return false end
  local nodes, count
  if kind == "rank" then
    nodes, count = rank_nodes(z, tonumber(start), tonumber(stop), rev)
  elseif tonumber(offset) < 0 then   -- Redis skips "offset--" nodes: all of them
    nodes, count = {}, 0
  else
    nodes, count = range_nodes(z, above, below, rev, tonumber(offset), tonumber(limit))
  end
  return nodes, count, withscores
end
M.zrange_nodes = zrange_nodes

-- The reply of a range: zrange_nodes, then the nodes (and scores).
local function zrange_generic(argv, argc, out, n, kind, rev, zrange)
  local nodes, count, withscores = zrange_nodes(argv, argc, 2, kind, rev, zrange, false)
  if nodes == nil then return put(out, n, count) end
  if not nodes then return put(out, n, resp.EMPTY_ARRAY) end
  n = nodes_head(out, n, count, withscores)
  for i = 1, count do n = put_node(out, n, nodes[i], withscores) end
  return n
end

reg("zrange", function(_, argv, argc, out, n)
  return zrange_generic(argv, argc, out, n, "rank", false, true)
end)
reg("zrevrange", function(_, argv, argc, out, n)
  return zrange_generic(argv, argc, out, n, "rank", true, false)
end)
reg("zrangebyscore", function(_, argv, argc, out, n)
  return zrange_generic(argv, argc, out, n, "score", false, false)
end)
reg("zrevrangebyscore", function(_, argv, argc, out, n)
  return zrange_generic(argv, argc, out, n, "score", true, false)
end)
reg("zrangebylex", function(_, argv, argc, out, n)
  return zrange_generic(argv, argc, out, n, "lex", false, false)
end)
reg("zrevrangebylex", function(_, argv, argc, out, n)
  return zrange_generic(argv, argc, out, n, "lex", true, false)
end)

-- ZCOUNT key min max, ZLEXCOUNT key min max.
local function count_in(bylex)
  return function(_, argv, _, out, n)
    local above, below = range_tests(bylex, argv[3], argv[4])
    if not above then return put(out, n, below) end
    local z = zset_at(argv[2])
    if z == nil then return put(out, n, WRONGTYPE) end
    if not z then return put(out, n, resp.ZERO) end
    local first = sl.first_in(z.zl, above)
    if not first or not below(first) then return put(out, n, resp.ZERO) end
    local last = sl.last_in(z.zl, below)
    local r1 = sl.rank(z.zl, first.s, first.m)
    local r2 = sl.rank(z.zl, last.s, last.m)
    return put(out, n, int(r2 - r1 + 1))
  end
end
reg("zcount", count_in(false))
reg("zlexcount", count_in(true))

-- ZRANK/ZREVRANK key member
local function rank(rev)
  return function(_, argv, _, out, n)
    local z = zset_at(argv[2])
    if z == nil then return put(out, n, WRONGTYPE) end
    local score = z and z.s[argv[3]] or nil
    if score == nil then return null(out, n) end
    local r = sl.rank(z.zl, score, argv[3])
    return put(out, n, int(rev and z.n - r or r - 1))
  end
end
reg("zrank", rank(false))
reg("zrevrank", rank(true))

-- -- Pops and range removals ----------------------------------------------

-- Pops up to count members from the bottom (max: top) of z at k, deleting
-- k when it empties. Returns the array of { member, score } pairs.
local function pop(k, z, count, max)
  local t = {}
  for j = 1, count do
    local x = max and z.zl.tail or z.zl.head[1]
    if not x then break end
    t[j] = { x.m, x.s }
    zrem_member(z, x.m)
  end
  if z.n == 0 then store.del(k) end
  return t
end
M.pop = pop

-- ZPOPMIN/ZPOPMAX key [count]: without a count, the member and its
-- score flat; with one, as a range WITHSCORES (RESP3: pairs).
local function popcmd(max)
  return function(_, argv, argc, out, n)
    if argc > 3 then return put(out, n, SYNTAX) end
    local count = 1
    if argc == 3 then
      count = parse_int(argv[3])
      if count == nil then return put(out, n, NOT_INT) end
      if count < 0 then return put(out, n, "-ERR value is out of range, must be positive\r\n") end
      count = tonumber(count)
    end
    local k = argv[2]
    local z = zset_at(k)
    if z == nil then return put(out, n, WRONGTYPE) end
    if not z then return put(out, n, resp.EMPTY_ARRAY) end
    local t = pop(k, z, count, max)
    if #t > 0 then R.prop = true end
    if argc == 3 then
      n = nodes_head(out, n, #t, true)
    else
      n = resp.array(out, n, #t * 2)
    end
    for _, p in ipairs(t) do
      if argc == 3 and resp.is3() then n = resp.array(out, n, 2) end
      n = bulk(out, n, p[1])
      n = double(out, n, p[2])
    end
    return n
  end
end
reg("zpopmin", popcmd(false))
reg("zpopmax", popcmd(true))

-- BZPOPMIN/BZPOPMAX key [key ...] timeout: through the lists' blocking
-- machinery, with a take that pops one member and logs it as ZPOPMIN/MAX.
local function bzpop(max)
  local name = max and "ZPOPMAX" or "ZPOPMIN"
  local function take(k)
    local z = zset_at(k)
    if z == nil then return nil, true end
    if not z then return nil end
    local p = pop(k, z, 1, max)[1]
    R.note("z", max and "zpopmax" or "zpopmin", k)
    if z.n == 0 then R.note("g", "del", k) end
    R.changed = { k }
    return { k, p[1], p[2] }, nil, resp.encode({ name, k }, 2)
  end
  -- [key, member, score]: the score a double.
  local function reply(out, n, got)
    n = resp.array(out, n, 3)
    n = bulk(out, n, got[1])
    n = bulk(out, n, got[2])
    return double(out, n, got[3])
  end
  return lists.blocking(take, nil, reply)
end
reg("bzpopmin", bzpop(false))
reg("bzpopmax", bzpop(true))

-- ZREMRANGEBYRANK key start stop, ZREMRANGEBYSCORE/BYLEX key min max.
local function remrange(kind)
  return function(_, argv, _, out, n)
    local k = argv[2]
    local nodes, count
    if kind == "rank" then
      local start, stop = parse_int(argv[3]), parse_int(argv[4])
      if start == nil or stop == nil then return put(out, n, NOT_INT) end
      local z = zset_at(k)
      if z == nil then return put(out, n, WRONGTYPE) end
      if not z then return put(out, n, resp.ZERO) end
      nodes, count = rank_nodes(z, tonumber(start), tonumber(stop), false)
    else
      local above, below = range_tests(kind == "lex", argv[3], argv[4])
      if not above then return put(out, n, below) end
      local z = zset_at(k)
      if z == nil then return put(out, n, WRONGTYPE) end
      if not z then return put(out, n, resp.ZERO) end
      nodes, count = range_nodes(z, above, below, false, 0, -1)
    end
    local z = zset_at(k)
    for i = 1, count do zrem_member(z, nodes[i].m) end
    if count > 0 then
      R.prop = true
      if z.n == 0 then store.del(k) end
    end
    return put(out, n, int(count))
  end
end
reg("zremrangebyrank", remrange("rank"))
reg("zremrangebyscore", remrange("score"))
reg("zremrangebylex", remrange("lex"))

-- ZSCAN key cursor [MATCH pattern] [COUNT count]: the whole set in one
-- reply, as SSCAN.
reg("zscan", function(_, argv, argc, out, n)
  if not require("kv.strings").cursor(argv[3]) then return put(out, n, sets.INVALID_CURSOR) end
  local z = zset_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  if not z then return put(out, n, sets.EMPTY_SCAN) end
  local match, err = sets.scan_args(argv, argc)
  if match == nil then return put(out, n, err) end
  local t, m = {}, 0
  local x = z.zl.head[1]
  while x do
    if not match or match(x.m) then
      t[m + 1], t[m + 2] = x.m, score_str(x.s)
      m = m + 2
    end
    x = x[1]
  end
  n = put(out, n, "*2\r\n$1\r\n0\r\n")
  return resp.bulk_array(out, n, t, m)
end)

return M
