-- maxmemory: when the data passes the limit, keys are evicted by the
-- policy before a command runs, as Redis's performEvictions (evict.c);
-- if nothing can be evicted, commands that may add data are refused with
-- -OOM. The measure is the data as kv counts it (store.bytes, INFO's
-- used_memory_dataset), not the whole Lua heap, which also holds garbage
-- not yet collected and would swing with the collector's pace.
--
-- Policies, Redis's eight: noeviction; allkeys- or volatile- (keys with
-- a deadline) lru, lfu and random; volatile-ttl. LRU and LFU are
-- approximated as Redis does: maxmemory-samples random keys are looked
-- at, the best candidates kept in a pool of 16 across rounds, and the
-- best of the pool evicted (store.lua keeps each key's access clock or
-- LFU counter while such a policy is set).
local R = require "kv.registry"
local store = require "kv.store"
local monitor = require "kv.monitor"

local huge, floor = math.huge, math.floor

local M = {}

M.limit = 0               -- maxmemory in bytes; 0: none
M.policy = "noeviction"
M.samples = 5             -- maxmemory-samples
M.tenacity = 10           -- maxmemory-eviction-tenacity

-- Called with each key evicted, before it goes (server.lua: the log's
-- DEL, WATCH, the "evicted" event).
M.on_evict = function() end

M.POLICIES = { "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru",
               "allkeys-lfu", "allkeys-random", "noeviction" }

-- Sets the policy; store.lua tracks accesses for LRU and LFU only.
function M.set_policy(p)
  M.policy = p
  local track = p:match("lru$") and "lru" or p:match("lfu$") and "lfu" or false
  if track ~= store.track then
    store.set_track(track)
    M.since = store.accesses   -- keys untouched since count as last used now
  end
end

-- -- The pool of candidates ------------------------------------------------

local POOL = 16               -- EVPOOL_SIZE
local pool = {}               -- { key, idle }, by idle ascending: the best last

-- How good a candidate k is under the policy: higher is evicted first.
local function idle(k)
  local p = M.policy
  if p == "volatile-ttl" then return -(store.deadline(k) or huge) end
  local w = store.access(k)
  if p:match("lru$") then return store.accesses - (w or M.since or 0) end
  return 255 - (w and store.lfu_counter(w) or 5)   -- LFU: 5 is LFU_INIT_VAL
end

local function populate(volatile)
  for _ = 1, M.samples do
    local k = store.sample(volatile)
    if not k then return end
    local score = idle(k)
    local at = 1
    while at <= #pool and pool[at][2] < score do at = at + 1 end
    local dup = false
    for i = 1, #pool do
      if pool[i][1] == k then dup = true end
    end
    if not dup and (at > 1 or #pool < POOL) then
      table.insert(pool, at, { k, score })
      if #pool > POOL then table.remove(pool, 1) end
    end
  end
end

-- The next key to evict, or nil when there is none.
local function best()
  local volatile = M.policy:match("^volatile") ~= nil
  if M.policy:match("random$") then return store.sample(volatile) end
  for _ = 1, 100 do
    populate(volatile)
    while #pool > 0 do
      local k = table.remove(pool)[1]
      if store.peek(k) ~= nil and (not volatile or store.deadline(k)) then return k end
    end
    if not store.sample(volatile) then return nil end
  end
  return nil
end

-- -- Evicting -------------------------------------------------------------------

-- Evicts until the data is within the limit: true when it is (or the
-- time allowed ran out with keys still to go: the next command goes on),
-- false when nothing can be evicted (the caller refuses commands that
-- may add data).
function M.run()
  if M.limit <= 0 or store.bytes <= M.limit then return true end
  if M.policy == "noeviction" then return false end
  local t0 = monitor.now_us()
  -- Redis's evictionTimeLimitUs: 50 us per step of tenacity up to 10,
  -- growing faster to 100 (no limit past that).
  local budget = M.tenacity <= 10 and 50 * M.tenacity
    or M.tenacity < 100 and floor(500 * 1.15 ^ (M.tenacity - 10)) or huge
  while store.bytes > M.limit do
    local k = best()
    if not k then return false end
    M.on_evict(k)
    if store.del(k) then R.stats.evicted = R.stats.evicted + 1 end
    if monitor.now_us() - t0 > budget then break end
  end
  monitor.latency("eviction-cycle", (monitor.now_us() - t0) / 1000)
  return true
end

return M
