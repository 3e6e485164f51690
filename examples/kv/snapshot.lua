-- The data as log records, for the log rewrite, taken while commands go
-- on (Redis forks for this; kv cannot, so it takes the snapshot in slices
-- and yields between them, so a rewrite of any size never holds the
-- worker long enough for the CPU watchdog).
--
-- Consistency: the rewritten log is the snapshot's records followed by
-- every record logged since the rewrite began (the tail). A key must
-- therefore be recorded with its value as of the rewrite's start, or as
-- of just before the first logged command that changed it: the
-- dispatcher calls touch(k) for every key a write command names before it
-- runs, and touch records a key not yet visited there and then. A key
-- created after the start is marked visited and left to the tail. A key
-- being written out when a command changes it was copied when the
-- snapshot reached it (its elements, O(n) without a yield: a 10M-element
-- list pauses about 0.1 s).
local cohost = require "cohost"
local resp = require "kv.resp"
local store = require "kv.store"
local ints = require "kv.ints"
local R = require "kv.registry"

local type, min = type, math.min

-- Appends a record (a string, or pieces for a large value) to s.recs.
local function add(s, rec)
  if type(rec) == "table" then
    for _, part in ipairs(rec) do
      s.n = s.n + 1
      s.recs[s.n] = part
    end
  else
    s.n = s.n + 1
    s.recs[s.n] = rec
  end
end

local function encode(argv, argc) return resp.encode(argv, argc) end

local M = {}

M.SLICE = 1024          -- records made between yields
local CHUNK_ITEMS = 64  -- list elements, hash pairs, members per record

-- A kind's dumper: R.dumpers[kind](v) -> command, flat array of its
-- arguments after the key, their count, arguments per item (the type
-- modules register theirs); or nil, an array of whole commands (each an
-- argv with false where the key goes, filled in here), their count.
local dumpers = R.dumpers

local snap      -- the snapshot in progress, or nil

-- Records key k (its value v, its deadline or nil) into s.recs (which
-- s.pause may swap for a new table: always through s).
local function record_value(s, k, v, deadline)
  if type(v) ~= "table" and type(v) ~= "cdata" then
    -- A large value comes as pieces: the value itself is written, never
    -- copied.
    add(s, encode({ "SET", k, tostring(v) }, 3))
  else
    local cmd, items, count, per = dumpers[v.kind](v)
    if not cmd then
      -- Whole commands of their own (a stream's XADDs, XSETID, groups):
      -- items[i] is one, false where its key goes.
      for i = 1, count do
        local args = items[i]
        for j = 1, #args do
          if args[j] == false then args[j] = k end
        end
        add(s, encode(args, #args))
        if s.n >= M.SLICE and s.pause then s.pause() end
      end
      if deadline then add(s, encode({ "PEXPIREAT", k, ints.str(math.floor(deadline)) }, 3)) end
      return
    end
    local step = CHUNK_ITEMS * per
    for i = 1, count, step do
      local args, a = { cmd, k }, 2
      for j = i, min(i + step - 1, count) do
        a = a + 1
        args[a] = items[j]
      end
      add(s, encode(args, a))
      if s.n >= M.SLICE and s.pause then s.pause() end
    end
  end
  if deadline then add(s, encode({ "PEXPIREAT", k, ints.str(math.floor(deadline)) }, 3)) end
end

-- Records k now if the snapshot has not visited it yet. O(size of k).
function M.touch(k)
  local s = snap
  if not s or s.done[k] then return end
  s.done[k] = true
  local v = store.get(k)
  if v ~= nil then
    local pause = s.pause
    s.pause = nil   -- no yield inside a command
    record_value(s, k, v, store.deadline(k))
    s.pause = pause
  end
end

-- FLUSHALL during a snapshot: the keys not visited need no records (the
-- tail's FLUSHALL removes those recorded), so the snapshot ends there.
function M.touch_all()
  if snap then snap.all = true end
end

function M.active()
  return snap ~= nil
end

-- Set by functions.lua: function() -> records that come before the keys
-- (a FUNCTION LOAD per library), taken with them at the snapshot's start.
M.head = nil

-- Yields. Takes the snapshot, calling write(recs, n) with each slice of
-- records (which may yield) and returns the count of keys recorded. The
-- tail must start being collected before this is called.
function M.take(write)
  local s = { recs = {}, n = 0, done = {}, all = false, keys = 0 }
  s.pause = function()
    local recs, n = s.recs, s.n
    s.recs, s.n = {}, 0
    write(recs, n)
    cohost.sleep(0)
  end
  snap = s
  if M.head then
    for _, rec in ipairs(M.head()) do add(s, rec) end
  end
  local ok, err = pcall(function()
    local slot = 1
    while not s.all and slot <= store.slot_count() do
      local k = store.slot_key(slot)
      if k and not s.done[k] then
        s.done[k] = true
        local v = store.get(k)
        if v ~= nil then
          s.keys = s.keys + 1
          -- A copy of a collection's items is made at once (dumpers), so
          -- the yields in record_value see no change to them.
          record_value(s, k, v, store.deadline(k))
        end
      end
      slot = slot + 1
      if slot % M.SLICE == 0 then s.pause() end
    end
    write(s.recs, s.n)
  end)
  snap = nil
  if not ok then error(err, 0) end
  return s.keys
end

return M
