-- The sorted set's order: Redis's zskiplist (t_zset.c) in Lua. Nodes are
-- ordered by (score, member), each level's forward link carries the span
-- (how many nodes it skips), so insert, delete, rank and "the node at
-- rank r" are O(log n) expected; a range walks level 1 from its first
-- node. Members and scores only: the member -> score map is the caller's.
local M = {}

local MAXLEVEL = 32
local random = math.random
local tnew = require "table.new"

-- A node is one table: m = member, s = score, b = backward node, and in
-- its array part the forward link of level i at [2i - 1] and its span at
-- [2i] (so x[1] is the next node). One table a node, sized at creation,
-- where a table each for links and spans cost three allocations and
-- their growth: the collector's work is most of a bulk insert's.
local function node_new(m, s, level)
  local x = tnew(2 * level, 3)
  x.m, x.s = m, s
  return x
end

-- The span of a link to nothing is the count of nodes after its node
-- (rank(nil) = n): Redis's invariant, which insert and delete keep.
function M.new()
  local head = tnew(2 * MAXLEVEL, 0)
  for i = 1, MAXLEVEL do head[2 * i] = 0 end
  return { head = head, tail = nil, level = 1, n = 0 }
end

-- Redis's level distribution, p = 1/4 (level k or more with chance
-- 4^(1-k)), drawn in one step from the inverse of that distribution: the
-- coin-flipping loop's random trip count makes the JIT compile side
-- traces that cannot return to the dispatcher, for every member a bulk
-- build or an insert adds.
local INV_LOG_Q = 1 / math.log(0.25)
local floor, log, min = math.floor, math.log, math.min
local function random_level()
  return min(1 + floor(log(1 - random()) * INV_LOG_Q), MAXLEVEL)
end

local function before(a_s, a_m, b_s, b_m)
  return a_s < b_s or (a_s == b_s and a_m < b_m)
end

-- Inserts member m with score s (m must not be in the list). O(log n).
function M.insert(zl, s, m)
  local update, rank = {}, {}
  local x = zl.head
  for i = zl.level, 1, -1 do
    rank[i] = i == zl.level and 0 or rank[i + 1]
    local nx = x[2 * i - 1]
    while nx and before(nx.s, nx.m, s, m) do
      rank[i] = rank[i] + x[2 * i]
      x = nx
      nx = x[2 * i - 1]
    end
    update[i] = x
  end
  local level = random_level()
  if level > zl.level then
    for i = zl.level + 1, level do
      rank[i] = 0
      update[i] = zl.head
      zl.head[2 * i] = zl.n
    end
    zl.level = level
  end
  local node = node_new(m, s, level)
  for i = 1, level do
    local u = update[i]
    node[2 * i - 1] = u[2 * i - 1]
    u[2 * i - 1] = node
    node[2 * i] = u[2 * i] - (rank[1] - rank[i])
    u[2 * i] = (rank[1] - rank[i]) + 1
  end
  for i = level + 1, zl.level do update[i][2 * i] = update[i][2 * i] + 1 end
  node.b = update[1] ~= zl.head and update[1] or nil
  if node[1] then node[1].b = node else zl.tail = node end
  zl.n = zl.n + 1
  return node
end

-- Removes the node of (s, m), which must be in the list. O(log n).
function M.delete(zl, s, m)
  local update = {}
  local x = zl.head
  for i = zl.level, 1, -1 do
    local nx = x[2 * i - 1]
    while nx and before(nx.s, nx.m, s, m) do
      x = nx
      nx = x[2 * i - 1]
    end
    update[i] = x
  end
  x = x[1]
  assert(x and x.s == s and x.m == m, "skiplist: no such node")
  for i = 1, zl.level do
    local u = update[i]
    if u[2 * i - 1] == x then
      u[2 * i] = u[2 * i] + x[2 * i] - 1
      u[2 * i - 1] = x[2 * i - 1]
    else
      u[2 * i] = u[2 * i] - 1
    end
  end
  if x[1] then x[1].b = x.b else zl.tail = x.b end
  while zl.level > 1 and not zl.head[2 * zl.level - 1] do zl.level = zl.level - 1 end
  zl.n = zl.n - 1
end

-- The 1-based rank of (s, m), which must be in the list. O(log n).
function M.rank(zl, s, m)
  local r, x = 0, zl.head
  for i = zl.level, 1, -1 do
    local nx = x[2 * i - 1]
    while nx and (before(nx.s, nx.m, s, m) or (nx.s == s and nx.m == m)) do
      r = r + x[2 * i]
      x = nx
      nx = x[2 * i - 1]
    end
    if x.m == m and x ~= zl.head then return r end
  end
  return nil
end

-- The node at 1-based rank r (1 <= r <= n). O(log n).
function M.at(zl, r)
  local t, x = 0, zl.head
  for i = zl.level, 1, -1 do
    while x[2 * i - 1] and t + x[2 * i] <= r do
      t = t + x[2 * i]
      x = x[2 * i - 1]
    end
    if t == r then return x end
  end
  return nil
end

-- Fills the empty list zl with n members ms[1..n] and their scores
-- ss[1..n], already in order (by score, then member): each node gets its
-- random level and is linked after the last node of each of its levels,
-- O(n) where n inserts would each search from the top.
function M.build(zl, ms, ss, n)
  local head = zl.head
  local last, last_rank = {}, {}
  for i = 1, MAXLEVEL do
    last[i] = head
    last_rank[i] = 0
  end
  local top, prev = 1, nil
  for r = 1, n do
    local level = random_level()
    if level > top then top = level end
    local node = node_new(ms[r], ss[r], level)
    node.b = prev
    for i = 1, level do
      local l = last[i]
      l[2 * i - 1] = node
      l[2 * i] = r - last_rank[i]
      last[i] = node
      last_rank[i] = r
    end
    prev = node
  end
  for i = 1, top do last[i][2 * i] = n - last_rank[i] end
  zl.level, zl.n, zl.tail = top, n, prev
end

-- The first node above the minimum (above_min(node) true), or nil.
-- O(log n).
function M.first_in(zl, above_min)
  local x = zl.head
  for i = zl.level, 1, -1 do
    local nx = x[2 * i - 1]
    while nx and not above_min(nx) do
      x = nx
      nx = x[2 * i - 1]
    end
  end
  return x[1]
end

-- The last node below the maximum (below_max(node) true), or nil.
-- O(log n).
function M.last_in(zl, below_max)
  local x = zl.head
  for i = zl.level, 1, -1 do
    local nx = x[2 * i - 1]
    while nx and below_max(nx) do
      x = nx
      nx = x[2 * i - 1]
    end
  end
  return x ~= zl.head and x or nil
end

return M
