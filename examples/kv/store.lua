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
M.on_expired = function() end   -- called with each key expiry deletes (notify.lua)
M.freed = 0   -- bytes of large strings dropped since the last full collection
local BIG_FREE = 1024 * 1024

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
  local v = data[k]
  if type(v) == "string" and #v >= BIG_FREE then M.freed = M.freed + #v end
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
    M.on_expired(k)
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
  local old = data[k]
  if type(old) == "string" and #old >= BIG_FREE then M.freed = M.freed + #old end
  if old == nil then
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
        M.on_expired(k)
      end
    end
    deleted = deleted + hit
  until hit * 4 <= n or now_ms() - t0 > budget_ms
  M.expired = M.expired + deleted
  return deleted
end

-- -- Glob patterns ----------------------------------------------------------

-- Redis's glob syntax (stringmatchlen: * ? [set] [^set] [a-z] \x), compiled
-- once into tokens and matched by the linear wildcard algorithm: every
-- token but "*" matches exactly one byte, so on a mismatch only the last
-- "*" needs to take one more byte (one backtrack point), never the earlier
-- ones. O(#pattern * #string) at worst, where Redis's recursive matcher
-- (and the Lua pattern this replaced) was exponential in the stars:
-- "a*a*a*...b" against forty a's ran for 20 s.
local STAR, ANY = -2, -1    -- tokens; a byte is its code, a set a table
local byte = string.byte

-- The tokens of glob, read as stringmatchlen reads it, byte by byte:
-- a "[" set runs to "]" or the end of the pattern, "\x" inside or outside
-- a set is x, "a-z" is a range (either way round), "[^...]" negates.
local function compile(glob)
  local toks, nt, i, n = {}, 0, 1, #glob
  while i <= n do
    local c = byte(glob, i)
    if c == 42 then                                  -- '*'
      if toks[nt] ~= STAR then nt = nt + 1; toks[nt] = STAR end
    elseif c == 63 then                              -- '?'
      nt = nt + 1; toks[nt] = ANY
    elseif c == 91 then                              -- '['
      i = i + 1
      local set = { neg = byte(glob, i) == 94 }
      if set.neg then i = i + 1 end
      while true do
        local d = byte(glob, i)
        if i > n then i = i - 1; break               -- unclosed: ends here
        elseif d == 92 and i < n then i = i + 1; set[byte(glob, i)] = true
        elseif d == 93 then break
        elseif i + 2 <= n and byte(glob, i + 1) == 45 then
          local a, b = d, byte(glob, i + 2)
          if a > b then a, b = b, a end
          for x = a, b do set[x] = true end
          i = i + 2
        else set[d] = true end
        i = i + 1
      end
      nt = nt + 1; toks[nt] = set
    elseif c == 92 and i < n then                    -- '\x'
      i = i + 1
      nt = nt + 1; toks[nt] = byte(glob, i)
    else
      nt = nt + 1; toks[nt] = c
    end
    i = i + 1
  end
  return toks, nt
end

local function tok_match(t, c)
  if t == ANY then return true end
  if type(t) == "number" then return t == c end
  return (t[c] == true) ~= t.neg
end

-- Whether s matches the compiled glob (toks, nt).
local function run(toks, nt, s)
  local n = #s
  -- stringmatchlen's loop never starts on an empty string: "" matches
  -- only the empty pattern (KEYS and SCAN treat "*" apart).
  if n == 0 then return nt == 0 end
  local si, ti = 1, 1
  local star, mark = nil, 0   -- the last "*" seen, the byte it took up to
  while si <= n do
    local t = toks[ti]
    if t == STAR then
      star, mark = ti, si
      ti = ti + 1
    elseif ti <= nt and tok_match(t, byte(s, si)) then
      si, ti = si + 1, ti + 1
    elseif star then
      mark = mark + 1
      si, ti = mark, star + 1
    else
      return false
    end
  end
  while toks[ti] == STAR do ti = ti + 1 end
  return ti > nt
end

local glob_cache, glob_cached = {}, 0

-- A matcher for glob: a function(s) -> boolean. "*" matches everything.
function M.matcher(glob)
  if glob == "*" then return function() return true end end
  local m = glob_cache[glob]
  if not m then
    local toks, nt = compile(glob)
    m = function(s) return run(toks, nt, s) end
    if glob_cached > 1000 then glob_cache, glob_cached = {}, 0 end
    glob_cache[glob] = m
    glob_cached = glob_cached + 1
  end
  return m
end

-- -- Iteration ------------------------------------------------------------

M.KEYS_SLICE = 4096   -- slots KEYS looks at between yields

-- Every live key matching glob, as an array. O(keys). With pause (a
-- function that yields), it is called every KEYS_SLICE slots so other
-- clients are served during a long KEYS; keys added or deleted meanwhile
-- may or may not be listed (as with SCAN), none is listed twice.
function M.keys(glob, pause)
  local match = M.matcher(glob)
  local t, n = {}, 0
  local seen          -- keys listed, once a pause let others in
  local s = 1
  while s <= nslots do
    local stop = s + M.KEYS_SLICE
    local now = now_ms()
    while s < stop and s <= nslots do
      local k = slots[s]
      if k then
        local e = expires[k]
        if (not e or e > now) and match(k) and not (seen and seen[k]) then
          n = n + 1
          t[n] = k
          if seen then seen[k] = true end
        end
      end
      s = s + 1
    end
    if s <= nslots and pause then
      if not seen then
        seen = {}
        for i = 1, n do seen[t[i]] = true end
      end
      pause()
    end
  end
  return t, n
end

-- One SCAN step from cursor (a slot number, 0 to start): visits about
-- count slots, returns the next cursor (0 when done) and the live keys
-- seen that pass the filter (a function or nil). With pause, a large
-- COUNT lets other clients run every KEYS_SLICE slots (slots do not move,
-- so the step stays a SCAN step).
function M.scan(cursor, count, filter, pause)
  local t, n, now = {}, 0, now_ms()
  local s = cursor + 1
  local stop = s + count
  while s < stop and s <= nslots do
    if pause and (s - cursor) % M.KEYS_SLICE == 0 then
      pause()
      now = now_ms()
    end
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

-- The number of slots and the key in slot s (or false/nil): for walks
-- that yield (the log rewrite), as a key keeps its slot for life.
function M.slot_count()
  return nslots
end

function M.slot_key(s)
  return slots[s]
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
