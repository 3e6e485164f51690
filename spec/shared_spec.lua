-- cohost.shared: dictionaries shared by the worker threads, with
-- ngx.shared.DICT's API and return conventions. In-process tests use one
-- fresh dictionary each (dictionaries live as long as the process); the
-- cross-worker tests run `build/cohost -w 2` as a child process.
local cohost = require "cohost"
local shared = require "cohost.shared"
local core = require "cohost.core.shdict"

local h = require "spec.helper"
h.cleanups(after_each)

local serial = 0

-- A new dictionary of size (default "64k") under a name no test used.
local function fresh(size)
  serial = serial + 1
  return shared.new("spec" .. serial, size or "64k")
end

-- The arena walk in the C core: allocator, LRU list and buckets agree.
local function assert_consistent(d)
  local ok, what = core.check(d)
  assert(ok, "store inconsistent: " .. tostring(what))
end

-- Fills d with "k1", "k2", ... (value v, no TTL) while another entry
-- surely fits, never evicting; returns how many keys went in.
local function fill(d, v, prefix)
  prefix = prefix or "k"
  local n = 0
  while d:free_space() >= 2 * (48 + #prefix + 8 + #v) do
    n = n + 1
    local ok, err, forcible = d:set(prefix .. n, v)
    assert(ok, err)
    assert.is_false(forcible)
  end
  return n
end

describe("cohost.shared", function()
  describe("new and get", function()
    it("new returns the dictionary; new with the same name and get(name) return that same object", function()
      local d = shared.new("spec-same", "32k")
      assert.equal(d, shared.new("spec-same", 32 * 1024))
      assert.equal(d, shared.get("spec-same"))
      assert.matches("^cohost.shared: spec%-same$", tostring(d))
    end)

    it("get of a name nobody created is nil", function()
      assert.is_nil(shared.get("spec-never-created"))
    end)

    it("accepts sizes as bytes or with k, m and g, and capacity() reports them", function()
      assert.equal(12345, fresh(12345):capacity())
      assert.equal(512 * 1024, fresh("512k"):capacity())
      assert.equal(2 * 1024 * 1024, fresh("2M"):capacity())
    end)

    it("raises on a bad name or size, and on a known name with another size", function()
      shared.new("spec-sized", "16k")
      for _, case in ipairs {
        { "spec-sized", "32k", "exists with another size" },
        { "spec-bad1", "4k", "size must be between" },
        { "spec-bad2", "5g", "size must be between" },
        { "spec-bad3", "ten", "bad size" },
        { "spec-bad4", "10 m", "bad size" },
        { "spec-bad5", -1, "bad size" },
        { "spec-bad6", 8192.5, "bad size" },
        { "spec-bad7", {}, "bad size" },
        { "", "16k", "bad name" },
        { 42, "16k", "bad name" },
      } do
        local ok, err = pcall(shared.new, case[1], case[2])
        assert.is_false(ok)
        assert.truthy(tostring(err):find(case[3], 1, true), tostring(err))
      end
    end)
  end)

  describe("values", function()
    it("stores strings, numbers and booleans, and set returns true, nil, false", function()
      local d = fresh()
      assert.same({ true, nil, false }, { d:set("s", "hello\0world") })
      d:set("n", -1.25)
      d:set("t", true)
      d:set("f", false)
      d:set("empty", "")
      assert.equal("hello\0world", d:get("s"))
      assert.equal(-1.25, d:get("n"))
      assert.is_true(d:get("t"))
      assert.is_false(d:get("f"))
      assert.equal("", d:get("empty"))
      assert.same({}, { d:get("missing") })
    end)

    it("a number key is its string", function()
      local d = fresh()
      d:set(12, "twelve")
      assert.equal("twelve", d:get("12"))
    end)

    it("overwrites values of any size and type, and a large value round-trips", function()
      local d = fresh()
      local big = string.rep("0123456789", 3000)
      d:set("k", "small")
      d:set("k", big)
      assert.equal(big, d:get("k"))
      d:set("k", 7)
      assert.equal(7, d:get("k"))
      d:set("k", "x")
      assert.equal("x", d:get("k"))
      assert_consistent(d)
    end)

    it("set to nil and delete remove the key", function()
      local d = fresh()
      d:set("a", 1)
      d:set("b", 2)
      assert.same({ true, nil, false }, { d:set("a", nil) })
      assert.same({ true, nil, false }, { d:delete("b") })
      assert.is_nil(d:get("a"))
      assert.is_nil(d:get("b"))
      assert.same({}, d:get_keys())
    end)

    it("add fails with 'exists' on a live key; replace fails with 'not found' on a missing one", function()
      local d = fresh()
      assert.same({ true, nil, false }, { d:add("a", 1) })
      assert.same({ false, "exists", false }, { d:add("a", 2) })
      assert.equal(1, d:get("a"))
      assert.same({ false, "not found", false }, { d:replace("b", 1) })
      assert.is_nil(d:get("b"))
      assert.same({ true, nil, false }, { d:replace("a", "two") })
      assert.equal("two", d:get("a"))
      assert.same({ false, "attempt to add or replace nil values" }, { d:add("c", nil) })
      assert.same({ false, "attempt to add or replace nil values" }, { d:replace("a", nil) })
    end)

    it("user flags come back from get only when non-zero, and from get_stale", function()
      local d = fresh()
      d:set("f", "v", 0, 42)
      assert.same({ "v", 42 }, { d:get("f") })
      assert.same({ "v", 42, false }, { d:get_stale("f") })
      d:set("f", "v", 0, 4294967295)
      assert.same({ "v", 4294967295 }, { d:get("f") })
      d:set("f", "w")
      assert.same({ "w" }, { d:get("f") })
      assert.same({ "w", nil, false }, { d:get_stale("f") })
    end)

    it("keys that are nil, empty or too long give nil and OpenResty's error", function()
      local d = fresh("256k")
      assert.same({ nil, "nil key" }, { d:get(nil) })
      assert.same({ nil, "nil key" }, { d:set(nil, 1) })
      assert.same({ nil, "empty key" }, { d:get("") })
      assert.same({ nil, "empty key" }, { d:incr("", 1) })
      assert.same({ nil, "key too long" }, { d:set(string.rep("k", 65536), 1) })
      assert.is_true(d:set(string.rep("k", 65535), 1))
      assert.equal(1, d:get(string.rep("k", 65535)))
    end)

    it("a table or function value gives nil, 'bad value type'", function()
      local d = fresh()
      assert.same({ nil, "bad value type" }, { d:set("k", {}) })
      assert.same({ nil, "bad value type" }, { d:add("k", print) })
      assert.is_nil(d:get("k"))
    end)
  end)

  describe("incr", function()
    it("adds to a number, and fails with 'not found' or 'not a number'", function()
      local d = fresh()
      d:set("n", 10)
      assert.same({ 15 }, { d:incr("n", 5) })
      assert.same({ 14.5 }, { d:incr("n", -0.5) })
      assert.equal(14.5, d:get("n"))
      assert.same({ nil, "not found" }, { d:incr("missing", 1) })
      d:set("s", "text")
      assert.same({ nil, "not a number" }, { d:incr("s", 1) })
    end)

    it("with init creates the key as init + value, returning nil, forcible too", function()
      local d = fresh()
      assert.same({ 11, nil, false }, { d:incr("c", 1, 10) })
      assert.same({ 12, nil, false }, { d:incr("c", 1, 10) })
      assert.same({ 0 }, { d:incr("c", -12) })
    end)

    it("init_ttl applies to a key that incr creates", function()
      local d = fresh()
      d:incr("c", 1, 0, 0.2)
      local ttl = d:ttl("c")
      assert.is_true(ttl > 0 and ttl <= 0.2, tostring(ttl))
      cohost.sleep(0.3)
      assert.same({ nil, "not found" }, { d:incr("c", 1) })
      assert.same({ 6, nil, false }, { d:incr("c", 1, 5) })
      assert.equal(0, d:ttl("c"))
    end)
  end)

  describe("expiry", function()
    it("an entry set with a TTL is gone from get after it; get_stale still sees it as stale", function()
      local d = fresh()
      d:set("k", "v", 0.2, 3)
      d:set("forever", "v")
      assert.equal("v", d:get("k"))
      cohost.sleep(0.3)
      assert.is_nil(d:get("k"))
      assert.same({ "v", 3, true }, { d:get_stale("k") })
      assert.equal("v", d:get("forever"))
    end)

    it("ttl() gives the seconds left, 0 without a TTL, and 'not found' for missing or expired keys", function()
      local d = fresh()
      d:set("k", 1, 10)
      d:set("p", 1)
      d:set("short", 1, 0.05)
      local ttl = d:ttl("k")
      assert.is_true(ttl > 9.5 and ttl <= 10, tostring(ttl))
      assert.equal(0, d:ttl("p"))
      assert.same({ nil, "not found" }, { d:ttl("missing") })
      cohost.sleep(0.1)
      assert.same({ nil, "not found" }, { d:ttl("short") })
    end)

    it("expire() sets a new TTL, 0 removes it, and a missing key is 'not found'", function()
      local d = fresh()
      d:set("k", 1)
      assert.same({ true }, { d:expire("k", 0.2) })
      local ttl = d:ttl("k")
      assert.is_true(ttl > 0 and ttl <= 0.2, tostring(ttl))
      assert.is_true(d:expire("k", 100))
      assert.is_true(d:ttl("k") > 99)
      assert.is_true(d:expire("k", 0))
      assert.equal(0, d:ttl("k"))
      d:set("gone", 1, 0.2)
      assert.is_true(d:expire("gone", 0.05))
      cohost.sleep(0.1)
      assert.is_nil(d:get("gone"))
      assert.same({ nil, "not found" }, { d:expire("gone", 10) })
      assert.same({ nil, "not found" }, { d:expire("missing", 10) })
    end)

    it("add succeeds and replace fails on an expired key", function()
      local d = fresh()
      d:set("a", 1, 0.05)
      d:set("r", 1, 0.05)
      cohost.sleep(0.1)
      assert.same({ false, "not found", false }, { d:replace("r", 2) })
      assert.same({ true, nil, false }, { d:add("a", 2) })
      assert.equal(2, d:get("a"))
    end)

    it("flush_all expires everything; flush_expired frees it and gives the memory back", function()
      local d = fresh()
      local empty = d:free_space()
      for i = 1, 50 do d:set("k" .. i, string.rep("v", i)) end
      local used = d:free_space()
      assert.is_true(used < empty)
      d:flush_all()
      assert.is_nil(d:get("k1"))
      assert.same({ "v", nil, true }, { d:get_stale("k1") })
      assert.same({}, d:get_keys())
      assert.equal(used, d:free_space())   -- marked, not yet freed
      assert.equal(10, d:flush_expired(10))
      assert.equal(40, d:flush_expired())
      assert.equal(0, d:flush_expired())
      assert.equal(empty, d:free_space())
      assert.is_nil(d:get_stale("k1"))
      assert_consistent(d)
    end)

    it("flush_expired leaves live entries alone", function()
      local d = fresh()
      d:set("live", 1)
      d:set("dying", 1, 0.05)
      d:set("later", 1, 60)
      cohost.sleep(0.1)
      assert.equal(1, d:flush_expired())
      assert.same({ "live", "later" }, d:get_keys())
    end)
  end)

  describe("eviction when full", function()
    it("evicts the least recently used keys first, says forcible, and keeps a key read recently", function()
      local d = fresh("16k")
      local v = string.rep("x", 200)
      local n = fill(d, v)
      assert.is_true(n >= 20, "only " .. n .. " entries fit")
      assert.equal("x", d:get("k1"):sub(1, 1))   -- k1 is now the most recently used
      -- New keys go in without eviction until the store is full, then
      -- each one evicts exactly the oldest entry: k2 first.
      local added, forced = 0, false
      repeat
        added = added + 1
        local ok, err, forcible = d:set("new" .. added, v)
        assert(ok, err)
        forced = forcible
      until forced or added > 10
      assert.is_true(forced)
      assert.is_nil(d:get("k2"))   -- a miss moves nothing in the LRU order
      for i = 1, 3 do
        assert.is_true(select(3, d:set("more" .. i, v)))
      end
      for i = 2, 5 do assert.is_nil(d:get("k" .. i), "k" .. i) end
      for i = 6, n do assert.equal(v, d:get("k" .. i), "k" .. i) end
      assert.equal(v, d:get("k1"))
      assert_consistent(d)
    end)

    it("frees expired entries before evicting live ones, without forcible", function()
      local d = fresh("16k")
      local v = string.rep("x", 200)
      for i = 1, 10 do assert(d:set("live" .. i, v)) end
      local n = 0
      while d:free_space() >= 2 * (48 + 8 + #v) do
        n = n + 1
        assert(d:set("tmp" .. n, v, 0.1))
      end
      cohost.sleep(0.2)
      for i = 1, 5 do
        assert.same({ true, nil, false }, { d:set("new" .. i, v) })
      end
      for i = 1, 10 do assert.equal(v, d:get("live" .. i)) end
    end)

    it("safe_set and safe_add return false, 'no memory' instead of evicting", function()
      local d = fresh("16k")
      local v = string.rep("x", 200)
      fill(d, v)
      local i = 0
      repeat i = i + 1 until select(3, d:set("fill" .. i, v)) or i > 10
      local keys = #d:get_keys(0)
      assert.same({ false, "no memory", false }, { d:safe_set("s1", v) })
      assert.same({ false, "no memory", false }, { d:safe_add("s2", v) })
      assert.equal(keys, #d:get_keys(0))
      assert.is_nil(d:get("s1"))
      d:delete("fill" .. i)
      assert.same({ true, nil, false }, { d:safe_set("s1", v) })
      assert.equal(v, d:get("s1"))
    end)

    it("a value larger than the store fails with 'no memory' and evicts nothing", function()
      local d = fresh("16k")
      d:set("a", 1)
      assert.same({ false, "no memory", false }, { d:set("big", string.rep("x", 20000)) })
      assert.equal(1, d:get("a"))
    end)

    it("incr with init evicts like set when full", function()
      local d = fresh("16k")
      local n = fill(d, string.rep("x", 200))
      local forced = false
      for i = 1, 200 do
        local v, err, forcible = d:incr("c" .. i, 1, 0)
        assert.equal(1, v, err)
        if forcible then forced = true break end
      end
      assert.is_true(forced)
      assert.is_nil(d:get("k1"))
      assert.equal(string.rep("x", 200), d:get("k" .. n))
    end)
  end)

  describe("lists", function()
    it("lpush and rpush return the length; lpop and rpop take from each end", function()
      local d = fresh()
      assert.same({ 1 }, { d:rpush("l", "b") })
      assert.same({ 2 }, { d:lpush("l", "a") })
      assert.same({ 3 }, { d:rpush("l", 3) })
      assert.equal(3, d:llen("l"))
      assert.equal("a", d:lpop("l"))
      assert.equal(3, d:rpop("l"))
      assert.equal("b", d:rpop("l"))
      assert.same({}, { d:lpop("l") })
    end)

    it("the key goes when its last element does; a missing list has length 0", function()
      local d = fresh()
      d:rpush("l", "x")
      assert.same({ "l" }, d:get_keys())
      d:lpop("l")
      assert.same({}, d:get_keys())
      assert.equal(0, d:llen("l"))
      assert.is_nil(d:rpop("l"))
    end)

    it("list operations on a plain value fail with 'value not a list', get on a list with 'value is a list'", function()
      local d = fresh()
      d:set("s", "str")
      assert.same({ nil, "value not a list" }, { d:lpush("s", 1) })
      assert.same({ nil, "value not a list" }, { d:rpop("s") })
      assert.same({ nil, "value not a list" }, { d:llen("s") })
      d:rpush("l", 1)
      assert.same({ nil, "value is a list" }, { d:get("l") })
      assert.same({ nil, "not a number" }, { d:incr("l", 1) })
      assert.same({ nil, "bad value type" }, { d:rpush("l", true) })
      assert.same({ nil, "bad value type" }, { d:rpush("l", {}) })
    end)

    it("set replaces a list, and a list can expire", function()
      local d = fresh()
      local empty = d:free_space()
      for i = 1, 100 do d:rpush("l", "element " .. i) end
      d:set("l", "plain")
      assert.equal("plain", d:get("l"))
      d:delete("l")
      assert.equal(empty, d:free_space())
      for i = 1, 3 do d:rpush("e", i) end
      d:expire("e", 0.05)
      cohost.sleep(0.1)
      assert.equal(0, d:llen("e"))
      assert.same({ 1 }, { d:rpush("e", "fresh") })
      assert_consistent(d)
    end)
  end)

  describe("get_keys", function()
    it("lists live keys, least recently used first, at most 1024 by default, all with 0", function()
      local d = fresh("1m")
      for i = 1, 1100 do d:set("k" .. i, i) end
      d:get("k1")
      d:set("dead", 1, 0.01)
      cohost.sleep(0.05)
      local keys = d:get_keys()
      assert.equal(1024, #keys)
      assert.equal("k2", keys[1])
      local all = d:get_keys(0)
      assert.equal(1100, #all)
      assert.equal("k1", all[1100])
      assert.same({ "k2", "k3" }, d:get_keys(2))
    end)
  end)

  describe("capacity and free_space", function()
    it("free space is most of the capacity, and an entry costs 48 + key + value bytes rounded to 8", function()
      local d = fresh("1m")
      local cap, free = d:capacity(), d:free_space()
      assert.equal(1024 * 1024, cap)
      -- Fixed costs: the header (~1.9 KiB) and 4 bytes of bucket per 128.
      assert.is_true(free < cap and free > cap - cap / 32 - 4096, ("%d of %d"):format(free, cap))
      d:set("key", string.rep("v", 100))                    -- 48 + 3 + 100 = 151 -> 152
      assert.equal(free - 152, d:free_space())
      d:set("n", 1)                                         -- 48 + 1 + 8 = 57 -> 64
      assert.equal(free - 216, d:free_space())
      d:delete("key")
      d:delete("n")
      assert.equal(free, d:free_space())
    end)
  end)

  describe("misuse", function()
    it("raises on a bad self, TTL, flags, incr arguments or max", function()
      local d = fresh()
      for _, case in ipairs {
        { function() return d.get("k") end, "cohost.shdict expected" },
        { function() return d.set({}, "k", 1) end, "cohost.shdict expected" },
        { function() return d:set("k", 1, -1) end, "exptime" },
        { function() return d:set("k", 1, 0 / 0) end, "exptime" },
        { function() return d:set("k", 1, 0, -1) end, "flags" },
        { function() return d:set("k", 1, 0, 1.5) end, "flags" },
        { function() return d:set({}, 1) end, "string expected" },
        { function() return d:incr("k") end, "number expected" },
        { function() return d:incr("k", "x") end, "number expected" },
        { function() return d:incr("k", 1, nil, 5) end, "init" },
        { function() return d:incr("k", 1, 0, -5) end, "init_ttl" },
        { function() return d:expire("k") end, "number expected" },
        { function() return d:expire("k", -1) end, "exptime" },
        { function() return d:get_keys(-1) end, "negative" },
        { function() return d:flush_expired(-1) end, "negative" },
      } do
        local ok, err = pcall(case[1])
        assert.is_false(ok)
        assert.truthy(tostring(err):find(case[2], 1, true), tostring(err))
      end
    end)
  end)

  describe("under load", function()
    it("random stores, deletes, lists and evictions keep values intact and give all memory back", function()
      local d = fresh("64k")
      local empty = d:free_space()
      local model = {}
      local rnd = 12345
      local function random(n)   -- a small LCG: reproducible across runs
        rnd = (rnd * 1103515245 + 12345) % 2147483648
        return rnd % n + 1
      end
      for i = 1, 100000 do
        local k = "k" .. random(500)
        local r = random(100)
        if r <= 45 then
          local v = string.rep(string.char(64 + i % 26), random(600) - 1)
          local ok, err = (r <= 5 and d.safe_set or d.set)(d, k, v, random(4) == 1 and 0.001 or 0)
          model[k] = ok and v or nil
          if r > 5 then assert(ok, err) end
        elseif r <= 55 then
          d:delete(k)
          model[k] = nil
        elseif r <= 65 then
          if type(model[k]) ~= "table" then d:delete(k) end
          model[k] = {}
          for j = 1, random(5) do d:rpush(k, ("e%d"):format(j) .. string.rep("x", random(100))) end
          d:lpop(k)
        elseif r <= 70 then
          d:incr(k, 1, 0)
          model[k] = nil
        else
          local v = d:get(k)
          if type(v) == "string" and type(model[k]) == "string" then
            assert(v == model[k], "corrupt value for " .. k)
          end
        end
        if i % 10000 == 0 then assert_consistent(d) end
      end
      for _, k in ipairs(d:get_keys(0)) do d:delete(k) end
      d:flush_expired()
      assert_consistent(d)
      assert.equal(empty, d:free_space())
    end)
  end)

  describe("across workers", function()
    it("two workers incrementing one key 100,000 times each end at exactly 200,000", function()
      local script = h.tmpfile([[
local cohost = require "cohost"
local shared = require "cohost.shared"
local core = require "cohost.core.shdict"
local d = shared.new("counter", "1m")
-- Meet first, so that both workers increment at the same time.
d:incr("ready", 1, 0)
local t0 = cohost.monotonic()
while d:get("ready") < 2 do
  assert(cohost.monotonic() - t0 < 10, "the other worker never came")
  cohost.sleep(0.001)
end
for _ = 1, 100000 do d:incr("n", 1, 0) end
-- Then both churn a small store (allocation and eviction race if unlocked).
local small = shared.new("small", "16k")
for i = 1, 20000 do
  local k = "k" .. (i * 7 + cohost.worker_id()) % 300
  if i % 3 == 0 then small:rpush(k .. "l", i) small:lpop(k .. "l")
  else small:set(k, string.rep("v", i % 200)) end
end
if d:incr("done", 1, 0) == 2 then
  print(("total %d workers %d check %s"):format(d:get("n"), d:get("ready"), tostring(core.check(small))))
end
]])
      local code, out, err = h.run("-w 2 " .. h.shell_quote(script), { limit = 30 })
      assert.equal(0, code, err)
      assert.equal("total 200000 workers 2 check true\n", out)
    end)

    it("a dictionary one worker creates is visible to the other through get(name)", function()
      local script = h.tmpfile([[
local cohost = require "cohost"
local shared = require "cohost.shared"
local sync = shared.new("sync", "16k")
if cohost.worker_id() == 0 then
  local mine = shared.new("made-by-0", "32k")
  mine:set("greeting", "hello from worker 0")
  sync:set("made", true)
else
  local t0 = cohost.monotonic()
  while not sync:get("made") do
    assert(cohost.monotonic() - t0 < 10, "worker 0 never made it")
    cohost.sleep(0.001)
  end
  local theirs = shared.get("made-by-0")
  print(theirs:get("greeting"), theirs:capacity())
end
]])
      local code, out, err = h.run("-w 2 " .. h.shell_quote(script), { limit = 30 })
      assert.equal(0, code, err)
      assert.equal("hello from worker 0\t32768\n", out)
    end)
  end)
end)
