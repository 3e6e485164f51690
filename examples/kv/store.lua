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

-- Hooks, set by server.lua: a key was added where there was none (blocked
-- clients, the "new" event), a key was deleted by its expiry (WATCH, the
-- "expired" event), a read missed (the "keymiss" event).
M.on_added = function() end
M.on_expired = function() end
M.on_miss = false

-- -- Accounting -------------------------------------------------------------
--
-- The data's size as kv counts it, for maxmemory and INFO's
-- used_memory_dataset: per key its name, its value and an overhead for
-- its slots here. A collection keeps its own count in v.bytes, which its
-- module changes through account() as elements come and go. The constants
-- are what LuaJIT spends on a key or a short string, about; the Lua heap
-- (INFO's used_memory) also holds garbage not yet collected, which would
-- make a poor measure to evict by.
M.KEY_BYTES = 150    -- a key's entries in data, slot_of and slots
M.STR_BYTES = 24     -- a string's header
M.bytes = 0

local function value_bytes(v)
  local t = type(v)
  if t == "string" then return #v + 24 end
  if t == "table" or t == "cdata" then return v.bytes end   -- a collection, a buffer (bytes.lua)
  return 0
end
M.value_bytes = value_bytes

-- A stored collection's v.live is the keyspace's generation (FLUSHALL
-- starts a new one, so nothing needs visiting); a dropped one's is false.
local gen = 1

-- A collection v grew (or shrank, d < 0) by d bytes.
function M.account(v, d)
  v.bytes = v.bytes + d
  if v.live == gen then M.bytes = M.bytes + d end
end

-- Bytes of large values (64 KiB or more: a big set, a long string)
-- dropped since the heap last gave them back. collect() (from the
-- dispatcher, past COLLECT_NOW) and the timer's step() give them back, so
-- INFO's used_memory comes down after an UNLINK; small keys that come and
-- go are left to the collector's own pace (stepping for them would run
-- many more cycles than it does).
M.freed = 0
M.COLLECT_NOW = 64 * 1024 * 1024
local BIG_DROP = 64 * 1024

local function drop(k, v)
  local b = #k + value_bytes(v) + M.KEY_BYTES
  M.bytes = M.bytes - b
  if b >= BIG_DROP then M.freed = M.freed + b end
  local t = type(v)
  if t == "table" then v.live = false elseif t == "cdata" then v.live = 0 end
end


-- -- Access tracking (maxmemory's LRU and LFU policies) -----------------------

-- Off (false), "lru" or "lfu", as evict.lua sets it for the policy. LRU
-- keeps the number of each key's last access in a count of all accesses
-- (an order as exact as Redis's clock is coarse: its LRU clock ticks once
-- a second); LFU Redis's 8-bit logarithmic counter with its decay
-- (evict.c): minutes * 256 + counter.
M.track = false
M.clock = 0                 -- seconds, advanced by the 10 Hz timer (LFU's decay)
M.accesses = 0              -- LRU: accesses so far
M.lfu_log_factor, M.lfu_decay_time = 10, 1
local LFU_INIT = 5
local access = {}           -- key -> its LRU clock or LFU word
local track = false

function M.set_track(mode)
  M.track, track = mode, mode
  access = {}
end

-- An LFU word's counter, decayed by the minutes since it was last touched.
local function lfu_counter(w)
  local minutes = floor(M.clock / 60)
  local last, counter = floor(w / 256), w % 256
  local periods = M.lfu_decay_time > 0 and floor((minutes - last) / M.lfu_decay_time) or 0
  return periods > counter and 0 or counter - periods
end
M.lfu_counter = lfu_counter

local function touch(k)
  if track == "lru" then
    local a = M.accesses + 1
    M.accesses = a
    access[k] = a
  else
    local w = access[k]
    local counter = w and lfu_counter(w) or LFU_INIT
    if counter < 255 then
      local base = counter - LFU_INIT
      if base < 0 then base = 0 end
      if random() < 1 / (base * M.lfu_log_factor + 1) then counter = counter + 1 end
    end
    access[k] = floor(M.clock / 60) * 256 + counter
  end
end

-- A new key's first word: LRU an access; LFU Redis's LFU_INIT_VAL, not
-- yet counted up (a key read once then outranks one only written).
local function init_access(k)
  if track == "lru" then
    touch(k)
  else
    access[k] = floor(M.clock / 60) * 256 + LFU_INIT
  end
end

-- The access word of k (nil: not touched since tracking began).
function M.access(k)
  return access[k]
end

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
  drop(k, v)
  data[k] = nil
  nkeys = nkeys - 1
  drop_slot(k)
  if expires[k] then clear_expire(k) end
  if track then access[k] = nil end
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
  if track then touch(k) end
  return v
end
M.get = get

-- get, counting a keyspace hit or miss (for INFO).
function M.read(k)
  local v = get(k)
  if v == nil then
    M.misses = M.misses + 1
    if M.on_miss then M.on_miss(k) end
  else
    M.hits = M.hits + 1
  end
  return v
end

-- Stores v at k; keep_ttl keeps an existing deadline (else it is dropped,
-- as SET does).
function M.set(k, v, keep_ttl)
  local old = data[k]
  if old == nil then
    nkeys = nkeys + 1
    add_slot(k)
  else
    drop(k, old)
    if expires[k] and not keep_ttl then clear_expire(k) end
  end
  data[k] = v
  M.bytes = M.bytes + #k + value_bytes(v) + M.KEY_BYTES
  local t = type(v)
  if t == "table" or t == "cdata" then v.live = gen end
  if track then
    if old == nil then init_access(k) else touch(k) end
  end
  if old == nil then M.on_added(k, v) end
end

-- Replaces the string value of a live key in place (INCR, APPEND): no
-- slot or deadline bookkeeping.
function M.replace(k, v)
  local old = data[k]
  local ob = value_bytes(old)
  M.bytes = M.bytes + value_bytes(v) - ob
  if ob >= BIG_DROP then M.freed = M.freed + ob end
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
  gen = gen + 1
  M.freed = M.freed + M.bytes
  M.bytes = 0
  data, expires, slot_of, slots, free = {}, {}, {}, {}, {}
  nslots, nfree, nkeys = 0, 0, 0
  ekeys, eidx, nexp = {}, {}, 0
  access = {}
end

-- -- Giving memory back -------------------------------------------------------

-- A full collection now (O(heap): after 64 MiB or more was dropped, as a
-- large value).
function M.collect()
  M.freed = 0
  collectgarbage()
end

-- One slice of incremental collection while something dropped is still
-- held, for at most budget_ms: called ten times a second, so that after
-- an UNLINK of a large set the heap comes down within a second or so,
-- without the pause of a full collection. The dropped bytes count as
-- given back once two cycles have finished (an object dropped during a
-- cycle's mark may live to the next one).
local cycles = 0
function M.step(budget_ms)
  if M.freed == 0 then return end
  local t0 = now_ms()
  repeat
    if collectgarbage("step", 1024) then
      cycles = cycles + 1
      if cycles >= 2 then
        cycles = 0
        M.freed = 0
        return
      end
    end
  until now_ms() - t0 >= budget_ms
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

-- A random key for maxmemory's sampling: of all keys, or (volatile) of
-- those with a deadline; nil if there is none. May be expired. O(1).
function M.sample(volatile)
  if volatile then
    if nexp == 0 then return nil end
    return ekeys[random(nexp)]
  end
  if nkeys == 0 then return nil end
  for _ = 1, 100 do
    local k = slots[random(nslots)]
    if k then return k end
  end
  return next(data)
end

-- The key's value as it is (expired or not), for maxmemory's accounting.
function M.peek(k)
  return data[k]
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
