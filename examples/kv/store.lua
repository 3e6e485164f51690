-- The keyspace: one database of strings, lists and hashes with expiry.
--
-- A string value is a Lua string, or a Lua number for a counter INCR
-- made (below 1e14 in magnitude, printed exactly by tostring); a list is { kind = "list", h, t, [h..t]
-- = items } (a deque on integer keys, negative ones below 1); a hash is
-- { kind = "hash", n, f = { field = value } }.
--
-- Expiry is lazy (a key read after its deadline is deleted then) plus a
-- sweep that samples keys with a deadline, as Redis's activeExpireCycle.
-- For SCAN every key has a slot in an array that never moves while the key
-- lives (freed slots are reused by new keys), so a cursor is a slot
-- number and a key present through a whole scan is returned.
local M = {}

local now_ms_clock = require("cohost").now
local floor, random = math.floor, math.random

local data = {}      -- key -> value
local expires = {}   -- key -> deadline, Unix ms
local slot_of = {}   -- key -> its slot in slots
local slots = {}     -- slot -> key, or false once freed
local free = {}      -- freed slots, reused last in first out
local nslots, nfree = 0, 0
local nkeys = 0
local ekeys, eidx, nexp = {}, {}, 0   -- keys with a deadline, for sampling

M.hits, M.misses, M.expired = 0, 0, 0

-- Unix time in ms (a float; comparisons only).
local function now_ms()
  return now_ms_clock() * 1000
end
M.now_ms = now_ms

local function add_slot(k)
  local s
  while nfree > 0 do
    s = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
    if s <= nslots then break end   -- slots past the end were trimmed
    s = nil
  end
  if not s then
    nslots = nslots + 1
    s = nslots
  end
  slots[s] = k
  slot_of[k] = s
end

local function drop_slot(k)
  local s = slot_of[k]
  slot_of[k] = nil
  if s == nslots then
    -- Trim trailing free slots so an emptied keyspace scans quickly.
    slots[s] = nil
    nslots = nslots - 1
    while nslots > 0 and slots[nslots] == false do
      slots[nslots] = nil
      nslots = nslots - 1
    end
  else
    slots[s] = false
    nfree = nfree + 1
    free[nfree] = s
  end
end

local function clear_expire(k)
  local i = eidx[k]
  if not i then return end
  expires[k] = nil
  eidx[k] = nil
  local last = ekeys[nexp]
  ekeys[i] = last
  eidx[last] = i
  if last == k then eidx[k] = nil end
  ekeys[nexp] = nil
  nexp = nexp - 1
end

-- Deletes k (it must exist). Returns true.
local function delete(k)
  data[k] = nil
  nkeys = nkeys - 1
  drop_slot(k)
  if expires[k] then clear_expire(k) end
  return true
end

-- The live value of k or nil, deleting it if its deadline has passed.
local function get(k)
  local v = data[k]
  if v == nil then return nil end
  local e = expires[k]
  if e and e <= now_ms() then
    delete(k)
    M.expired = M.expired + 1
    return nil
  end
  return v
end
M.get = get

-- get, counting a keyspace hit or miss (for INFO).
function M.read(k)
  local v = get(k)
  if v == nil then M.misses = M.misses + 1 else M.hits = M.hits + 1 end
  return v
end

-- Stores v at k; keep_ttl keeps an existing deadline (else it is dropped,
-- as SET does).
function M.set(k, v, keep_ttl)
  if data[k] == nil then
    nkeys = nkeys + 1
    add_slot(k)
  elseif expires[k] and not keep_ttl then
    clear_expire(k)
  end
  data[k] = v
end

-- Replaces the value of a live key in place (INCR, APPEND): no slot or
-- deadline bookkeeping.
function M.replace(k, v)
  data[k] = v
end

-- Deletes k if it is live; true if it was.
function M.del(k)
  if get(k) == nil then return false end
  return delete(k)
end

-- Sets k's deadline (Unix ms); k must be live.
function M.expire_at(k, ms)
  if not expires[k] then
    nexp = nexp + 1
    ekeys[nexp] = k
    eidx[k] = nexp
  end
  expires[k] = ms
end

-- The deadline of live k, or nil.
function M.deadline(k)
  return expires[k]
end

-- Drops k's deadline; true if it had one.
function M.persist(k)
  if not expires[k] then return false end
  clear_expire(k)
  return true
end

function M.size()
  return nkeys
end

function M.expiring()
  return nexp
end

function M.flush()
  data, expires, slot_of, slots, free = {}, {}, {}, {}, {}
  nslots, nfree, nkeys = 0, 0, 0
  ekeys, eidx, nexp = {}, {}, 0
end

-- Redis's TYPE name of a value.
function M.type_of(v)
  if type(v) ~= "table" then return "string" end
  return v.kind
end

-- -- Expiry sweep ---------------------------------------------------------

-- Samples up to 20 keys with a deadline and deletes the expired ones,
-- again while more than a quarter of a sample had expired, for at most
-- budget_ms. Returns how many it deleted. O(sampled).
function M.sweep(budget_ms)
  local t0 = now_ms()
  local deleted = 0
  repeat
    if nexp == 0 then break end
    local n = nexp < 20 and nexp or 20
    local hit = 0
    local t = now_ms()
    for _ = 1, n do
      if nexp == 0 then break end
      local k = ekeys[random(nexp)]
      if expires[k] <= t then
        delete(k)
        hit = hit + 1
      end
    end
    deleted = deleted + hit
  until hit * 4 <= n or now_ms() - t0 > budget_ms
  M.expired = M.expired + deleted
  return deleted
end

-- -- Iteration ------------------------------------------------------------

-- Glob patterns as Redis's stringmatchlen (* ? [set] [^set] [a-z] \x),
-- translated to anchored Lua patterns once and cached.
local glob_cache, glob_cached = {}, 0

-- One character, safe inside a Lua pattern or set.
local function esc(ch)
  if ch == "\0" then return "%z" end
  return ch:match("%w") and ch or "%" .. ch
end

-- The Lua set for a glob's [set] starting after the "[" at i; returns it
-- and the position of the closing "]" (or the end: Redis treats an
-- unclosed set as closed there).
local function glob_set(glob, i, n)
  local neg = glob:sub(i, i) == "^"
  if neg then i = i + 1 end
  local items = {}
  while i <= n do
    local c = glob:sub(i, i)
    if c == "]" then break end
    if c == "\\" and i < n then
      i = i + 1
      items[#items + 1] = esc(glob:sub(i, i))
    elseif glob:sub(i + 1, i + 1) == "-" and i + 2 <= n then
      local a, b = c:byte(), glob:byte(i + 2)
      if a > b then a, b = b, a end   -- Redis takes [z-a] as [a-z]
      for x = a, b do items[#items + 1] = esc(string.char(x)) end
      i = i + 2
    else
      items[#items + 1] = esc(c)
    end
    i = i + 1
  end
  if #items == 0 then
    return neg and "." or "[^%z\1-\255]", i   -- [] matches no character
  end
  return "[" .. (neg and "^" or "") .. table.concat(items) .. "]", i
end

local function glob_to_pattern(glob)
  local out, i, n = { "^" }, 1, #glob
  while i <= n do
    local c = glob:sub(i, i)
    if c == "*" then
      out[#out + 1] = ".*"
    elseif c == "?" then
      out[#out + 1] = "."
    elseif c == "[" then
      out[#out + 1], i = glob_set(glob, i + 1, n)
    elseif c == "\\" and i < n then
      i = i + 1
      out[#out + 1] = esc(glob:sub(i, i))
    else
      out[#out + 1] = esc(c)
    end
    i = i + 1
  end
  out[#out + 1] = "$"
  return table.concat(out)
end

-- A matcher for glob: a function(s) -> boolean. "*" matches everything.
function M.matcher(glob)
  if glob == "*" then return function() return true end end
  local p = glob_cache[glob]
  if not p then
    p = glob_to_pattern(glob)
    if glob_cached > 1000 then glob_cache, glob_cached = {}, 0 end
    glob_cache[glob] = p
    glob_cached = glob_cached + 1
  end
  local find = string.find
  return function(s) return find(s, p) ~= nil end
end

-- Every live key matching glob, as an array. O(keys).
function M.keys(glob)
  local match = M.matcher(glob)
  local t, n, now = {}, 0, now_ms()
  for k in pairs(data) do
    local e = expires[k]
    if (not e or e > now) and match(k) then
      n = n + 1
      t[n] = k
    end
  end
  return t, n
end

-- One SCAN step from cursor (a slot number, 0 to start): visits about
-- count slots, returns the next cursor (0 when done) and the live keys
-- seen that pass the filter (a function or nil).
function M.scan(cursor, count, filter)
  local t, n, now = {}, 0, now_ms()
  local s = cursor + 1
  local stop = s + count
  while s < stop and s <= nslots do
    local k = slots[s]
    if k then
      local e = expires[k]
      if (not e or e > now) and (not filter or filter(k, data[k])) then
        n = n + 1
        t[n] = k
      end
    end
    s = s + 1
  end
  if s > nslots then s = 1 end
  return s - 1, t, n
end

-- Calls fn(k, v, deadline or nil) for every live key. O(keys); fn must
-- not change the keyspace.
function M.each(fn)
  local now = now_ms()
  for k, v in pairs(data) do
    local e = expires[k]
    if not e or e > now then fn(k, v, e) end
  end
end

-- Picks a random live key or nil (RANDOMKEY). O(1) expected while most
-- slots are used.
function M.random_key()
  if nkeys == 0 then return nil end
  for _ = 1, 100 do
    local k = slots[random(nslots)]
    if k and get(k) ~= nil then return k end
  end
  for k in pairs(data) do
    if get(k) ~= nil then return k end
  end
  return nil
end

return M
