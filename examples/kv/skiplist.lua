-- The sorted set's order: Redis's zskiplist (t_zset.c) in Lua. Nodes are
-- ordered by (score, member), each level's forward link carries the span
-- (how many nodes it skips), so insert, delete, rank and "the node at
-- rank r" are O(log n) expected; a range walks level 1 from its first
-- node. Members and scores only: the member -> score map is the caller's.
local M = {}

local MAXLEVEL = 32
local random = math.random

-- A node: { m = member, s = score, f = { forward per level },
-- w = { span per level }, b = backward node }.
function M.new()
  local head = { f = {}, w = {} }
  for i = 1, MAXLEVEL do head.w[i] = 0 end
  return { head = head, tail = nil, level = 1, n = 0 }
end

-- Redis's level distribution: p = 1/4.
local function random_level()
  local l = 1
  while l < MAXLEVEL and random() < 0.25 do l = l + 1 end
  return l
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
    local nx = x.f[i]
    while nx and before(nx.s, nx.m, s, m) do
      rank[i] = rank[i] + x.w[i]
      x = nx
      nx = x.f[i]
    end
    update[i] = x
  end
  local level = random_level()
  if level > zl.level then
    for i = zl.level + 1, level do
      rank[i] = 0
      update[i] = zl.head
      zl.head.w[i] = zl.n
    end
    zl.level = level
  end
  local node = { m = m, s = s, f = {}, w = {} }
  for i = 1, level do
    local u = update[i]
    node.f[i] = u.f[i]
    u.f[i] = node
    node.w[i] = u.w[i] - (rank[1] - rank[i])
    u.w[i] = (rank[1] - rank[i]) + 1
  end
  for i = level + 1, zl.level do update[i].w[i] = update[i].w[i] + 1 end
  node.b = update[1] ~= zl.head and update[1] or nil
  if node.f[1] then node.f[1].b = node else zl.tail = node end
  zl.n = zl.n + 1
  return node
end

-- Removes the node of (s, m), which must be in the list. O(log n).
function M.delete(zl, s, m)
  local update = {}
  local x = zl.head
  for i = zl.level, 1, -1 do
    local nx = x.f[i]
    while nx and before(nx.s, nx.m, s, m) do
      x = nx
      nx = x.f[i]
    end
    update[i] = x
  end
  x = x.f[1]
  assert(x and x.s == s and x.m == m, "skiplist: no such node")
  for i = 1, zl.level do
    local u = update[i]
    if u.f[i] == x then
      u.w[i] = u.w[i] + x.w[i] - 1
      u.f[i] = x.f[i]
    else
      u.w[i] = u.w[i] - 1
    end
  end
  if x.f[1] then x.f[1].b = x.b else zl.tail = x.b end
  while zl.level > 1 and not zl.head.f[zl.level] do zl.level = zl.level - 1 end
  zl.n = zl.n - 1
end

-- The 1-based rank of (s, m), which must be in the list. O(log n).
function M.rank(zl, s, m)
  local r, x = 0, zl.head
  for i = zl.level, 1, -1 do
    local nx = x.f[i]
    while nx and (before(nx.s, nx.m, s, m) or (nx.s == s and nx.m == m)) do
      r = r + x.w[i]
      x = nx
      nx = x.f[i]
    end
    if x.m == m and x ~= zl.head then return r end
  end
  return nil
end

-- The node at 1-based rank r (1 <= r <= n). O(log n).
function M.at(zl, r)
  local t, x = 0, zl.head
  for i = zl.level, 1, -1 do
    while x.f[i] and t + x.w[i] <= r do
      t = t + x.w[i]
      x = x.f[i]
    end
    if t == r then return x end
  end
  return nil
end

-- The first node whose score passes lo (gt(score) true when above the
-- minimum), or nil. O(log n).
function M.first_in(zl, above_min)
  local x = zl.head
  for i = zl.level, 1, -1 do
    local nx = x.f[i]
    while nx and not above_min(nx) do
      x = nx
      nx = x.f[i]
    end
  end
  return x.f[1]
end

-- The last node whose score stays below the maximum (below_max(node)),
-- or nil. O(log n).
function M.last_in(zl, below_max)
  local x = zl.head
  for i = zl.level, 1, -1 do
    local nx = x.f[i]
    while nx and below_max(nx) do
      x = nx
      nx = x.f[i]
    end
  end
  return x ~= zl.head and x or nil
end

return M
