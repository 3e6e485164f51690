-- The log round trip, as a property: whatever sequence of commands kv
-- takes, the data it holds is what it loads again from its log, after a
-- plain replay and after a rewrite. Random sequences from a printed seed
-- (KV_ROUNDTRIP_SEED=n repeats one), over a few keys so types collide,
-- with arguments at the edges (int64 limits, past and far deadlines,
-- errors that must log nothing). KV_ROUNDTRIP_SECONDS (default 3) bounds
-- the run; raise it for a longer search.
local cohost = require "cohost"
local h = require "spec.helper"
local kv = require "spec.kv_util"
local defer = h.cleanups(after_each)

local SECONDS = tonumber(os.getenv("KV_ROUNDTRIP_SECONDS") or "") or 3
local SEED = tonumber(os.getenv("KV_ROUNDTRIP_SEED") or "")

-- -- The generator -----------------------------------------------------------

local R   -- math.random, reseeded per round

local KEYS = { "k1", "k2", "k3", "k4", "k5", "k6" }
local function key() return KEYS[R(#KEYS)] end

local INTS = { "0", "1", "-1", "7", "100", "9223372036854775807", "-9223372036854775808",
               "9223372036854775806", "4611686018427387904", "x", "1.5", "" }
local function int() return INTS[R(#INTS)] end

local function value()
  local r = R(10)
  if r == 1 then return "" end
  if r == 2 then return int() end
  if r == 3 then return "with space\r\n\0bin" end
  return "v" .. R(1000)
end

-- Expiry arguments: far ones, past ones, huge ones, bad ones; never one
-- that lands within the run (it would expire between dump and reload).
local function when(unit)
  local now = os.time()
  local r = R(8)
  if r == 1 then return "-5" end
  if r == 2 then return "9223372036854775807" end
  if r == 3 then return "10000000000000000" end
  if r == 4 then return ({ "0", "-1", "-9223372036854775808", "x", "1.5", "" })[R(6)] end
  if unit == "exat" then return tostring(now + 100000 + R(1000)) end
  if unit == "pxat" then return tostring((now + 100000) * 1000 + R(1000)) end
  if unit == "px" then return tostring(100000000 + R(1000)) end
  return tostring(100000 + R(1000))
end

local SET_OPTS = { "NX", "XX", "GET", "KEEPTTL" }

local gens = {
  function()
    local t = { "SET", key(), value() }
    for _ = 1, R(3) - 1 do
      local r = R(6)
      if r <= 4 then
        t[#t + 1] = SET_OPTS[r]
      else
        local u = ({ "EX", "PX", "EXAT", "PXAT" })[R(4)]
        t[#t + 1] = u
        t[#t + 1] = when(u:lower())
      end
    end
    return t
  end,
  function() return { "SETNX", key(), value() } end,
  function() return { ({ "SETEX", "PSETEX" })[R(2)], key(), when("ex"), value() } end,
  function() return { "GETSET", key(), value() } end,
  function() return { "GETDEL", key() } end,
  function() return { "MSET", key(), value(), key(), value() } end,
  function() return { ({ "INCR", "DECR" })[R(2)], key() } end,
  function() return { ({ "INCRBY", "DECRBY" })[R(2)], key(), int() } end,
  function() return { "APPEND", key(), value() } end,
  function() return { ({ "DEL", "UNLINK" })[R(2)], key(), key() } end,
  function()
    local cmd = ({ "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT" })[R(4)]
    local unit = ({ EXPIRE = "ex", PEXPIRE = "px", EXPIREAT = "exat", PEXPIREAT = "pxat" })[cmd]
    local t = { cmd, key(), when(unit) }
    if R(3) == 1 then t[4] = ({ "NX", "XX", "GT", "LT" })[R(4)] end
    return t
  end,
  function() return { "PERSIST", key() } end,
  function()
    local t = { ({ "LPUSH", "RPUSH" })[R(2)], key() }
    for _ = 1, R(4) do t[#t + 1] = value() end
    return t
  end,
  function()
    local t = { ({ "LPOP", "RPOP" })[R(2)], key() }
    if R(2) == 1 then t[3] = tostring(R(4) - 1) end
    return t
  end,
  function()
    local t = { "HSET", key() }
    for _ = 1, R(3) do
      t[#t + 1] = "f" .. R(5)
      t[#t + 1] = value()
    end
    return t
  end,
  function() return { "HDEL", key(), "f" .. R(5), "f" .. R(5) } end,
  function() return { "HMGET", key(), "f1", "f2" } end,
  function() if R(20) == 1 then return { "FLUSHALL" } end return { "GET", key() } end,
  function()
    local t = { "SADD", key() }
    for _ = 1, R(3) do t[#t + 1] = "m" .. R(6) end
    return t
  end,
  function() return { "SREM", key(), "m" .. R(6), "m" .. R(6) } end,
  function() return { "SPOP", key(), tostring(R(3) - 1) } end,
  function() return { "SMOVE", key(), key(), "m" .. R(6) } end,
  function() return { ({ "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE" })[R(3)], key(), key(), key() } end,
  function()
    local t = { "ZADD", key() }
    for _ = 1, R(3) - 1 do t[#t + 1] = ({ "NX", "XX", "GT", "LT", "CH", "INCR" })[R(6)] end
    for _ = 1, R(2) do
      t[#t + 1] = ({ "1", "-2.5", "0.1", "inf", "-inf", "1e300", int() })[R(7)]
      t[#t + 1] = "z" .. R(5)
    end
    return t
  end,
  function() return { "ZINCRBY", key(), ({ "0.1", "-3", "inf", "x" })[R(4)], "z" .. R(5) } end,
  function() return { "ZREM", key(), "z" .. R(5) } end,
  function() return { ({ "ZPOPMIN", "ZPOPMAX" })[R(2)], key(), tostring(R(3)) } end,
  function() return { "ZREMRANGEBYSCORE", key(), "(0", "+inf" } end,
  function() return { "ZREMRANGEBYRANK", key(), "0", tostring(R(3) - 2) } end,
  function()
    local u = ({ "EX", "PX", "EXAT", "PXAT", "PERSIST" })[R(5)]
    if u == "PERSIST" then return { "GETEX", key(), u } end
    return { "GETEX", key(), u, when(u:lower()) }
  end,
  function() return { "INCRBYFLOAT", key(), ({ "0.5", "-1.25", "1e10", "x", "inf" })[R(5)] } end,
  function() return { "SETRANGE", key(), tostring(R(6) - 2), value() } end,
  function() return { ({ "RENAME", "RENAMENX" })[R(2)], key(), key() } end,
  function()
    local t = { "COPY", key(), key() }
    if R(2) == 1 then t[4] = "REPLACE" end
    return t
  end,
  function() return { "MSETNX", key(), value(), key(), value() } end,
  function() return { "LTRIM", key(), tostring(R(4) - 2), tostring(R(4) - 2) } end,
  function() return { "LREM", key(), tostring(R(5) - 3), value() } end,
  function() return { "LSET", key(), tostring(R(5) - 3), value() } end,
  function() return { "LINSERT", key(), ({ "BEFORE", "AFTER" })[R(2)], value(), value() } end,
  function()
    local sides = { "LEFT", "RIGHT" }
    return { "LMOVE", key(), key(), sides[R(2)], sides[R(2)] }
  end,
  function() return { "LMPOP", "2", key(), key(), ({ "LEFT", "RIGHT" })[R(2)], "COUNT", tostring(R(3)) } end,
  function()
    local op = ({ "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE" })[R(3)]
    local t = { op, key(), "2", key(), key() }
    if op ~= "ZDIFFSTORE" and R(2) == 1 then
      t[#t + 1] = "WEIGHTS"
      t[#t + 1] = ({ "2", "-1", "0.5", "inf", "x" })[R(5)]
      t[#t + 1] = "1"
    end
    if op ~= "ZDIFFSTORE" and R(2) == 1 then
      t[#t + 1] = "AGGREGATE"
      t[#t + 1] = ({ "SUM", "MIN", "MAX" })[R(3)]
    end
    return t
  end,
  function() return { "ZRANGESTORE", key(), key(), tostring(R(3) - 2), tostring(R(4) - 2) } end,
  function() return { "ZMPOP", "2", key(), key(), ({ "MIN", "MAX" })[R(2)], "COUNT", tostring(R(3)) } end,
  function() return { "SETBIT", key(), tostring(R(40) - 2), tostring(R(3) - 1) } end,
  function() return { "BITOP", ({ "AND", "OR", "XOR", "NOT" })[R(4)], key(), key() } end,
  function()
    return { "BITFIELD", key(), "OVERFLOW", ({ "WRAP", "SAT", "FAIL" })[R(3)],
             ({ "SET", "INCRBY" })[R(2)], ({ "i5", "u3", "i64", "u63" })[R(4)], "#" .. R(5), int() }
  end,
  function()
    local t = { "SORT", key() }
    if R(2) == 1 then t[#t + 1] = "ALPHA" end
    if R(3) == 1 then t[#t + 1] = "DESC" end
    if R(3) == 1 then
      t[#t + 1] = "BY"
      t[#t + 1] = ({ "nosort", "k*", "k*->f1" })[R(3)]
    end
    if R(3) == 1 then
      t[#t + 1] = "GET"
      t[#t + 1] = ({ "#", "k*", "k*->f2" })[R(3)]
    end
    t[#t + 1] = "STORE"
    t[#t + 1] = key()
    return t
  end,
  function() return { ({ "LPUSHX", "RPUSHX" })[R(2)], key(), value(), value() } end,
  function()
    local t = { "PFADD", key() }
    for _ = 1, R(40) - 1 do t[#t + 1] = "e" .. R(3000) end
    return t
  end,
  function() return { "PFMERGE", key(), key(), key() } end,
  function() return { "PFCOUNT", key() } end,
  function()
    return { "GEOADD", key(), tostring(R(360) - 181 + R(99) / 100), tostring(R(170) - 86 + R(99) / 100), "g" .. R(5) }
  end,
  function()
    return { "GEOSEARCHSTORE", key(), key(), "FROMLONLAT", tostring(R(360) - 181), "0", "BYRADIUS", "5000", "km",
             ({ "ASC", "DESC", "STOREDIST" })[R(3)] }
  end,
  function()
    local t = { "XADD", key() }
    local r = R(4)
    if r == 1 then
      t[#t + 1] = "MAXLEN"
      t[#t + 1] = ({ "~", "=" })[R(2)]
      t[#t + 1] = tostring(R(5))
    elseif r == 2 then
      t[#t + 1] = "MINID"
      t[#t + 1] = tostring(R(50))
    end
    t[#t + 1] = ({ "*", tostring(R(100)) .. "-*", tostring(R(100)) .. "-" .. R(3) })[R(3)]
    t[#t + 1] = "f" .. R(3)
    t[#t + 1] = value()
    return t
  end,
  function() return { "XDEL", key(), R(100) .. "-" .. R(3), R(100) .. "-0" } end,
  function() return { "XTRIM", key(), ({ "MAXLEN", "MINID" })[R(2)], ({ "~", "=" })[R(2)], tostring(R(40)) } end,
  function() return { "XGROUP", "CREATE", key(), "g" .. R(2), ({ "0", "$", R(100) .. "-1" })[R(3)], "MKSTREAM" } end,
  function()
    local t = { "XREADGROUP", "GROUP", "g" .. R(2), "c" .. R(3), "COUNT", tostring(R(3)) }
    if R(4) == 1 then t[#t + 1] = "NOACK" end
    t[#t + 1] = "STREAMS"
    t[#t + 1] = key()
    t[#t + 1] = R(3) == 1 and "0" or ">"
    return t
  end,
  function() return { "XACK", key(), "g" .. R(2), R(100) .. "-" .. R(3), R(100) .. "-0" } end,
  function()
    local t = { "XCLAIM", key(), "g" .. R(2), "c" .. R(3), "0", R(100) .. "-" .. R(3), R(100) .. "-0" }
    if R(2) == 1 then t[#t + 1] = "FORCE" end
    if R(2) == 1 then t[#t + 1] = "JUSTID" end
    return t
  end,
  function() return { "XAUTOCLAIM", key(), "g" .. R(2), "c" .. R(3), "0", "0", "COUNT", tostring(R(3)) } end,
  function()
    return ({ { "XGROUP", "DELCONSUMER", key(), "g" .. R(2), "c" .. R(3) },
              { "XGROUP", "CREATECONSUMER", key(), "g" .. R(2), "c" .. R(4) },
              { "XGROUP", "SETID", key(), "g" .. R(2), R(100) .. "-0" },
              { "XGROUP", "DESTROY", key(), "g" .. R(2) } })[R(4)]
  end,
  function() return { "HINCRBY", key(), "f" .. R(5), int() } end,
  function() return { "HINCRBYFLOAT", key(), "f" .. R(5), ({ "0.5", "x", "-2" })[R(3)] } end,
  function() return { "HSETNX", key(), "f" .. R(5), value() } end,
}

-- A transaction of a few generated commands (or an aborted one).
local function transaction(send)
  send({ "MULTI" })
  for _ = 1, R(4) do send(gens[R(#gens)]()) end
  if R(5) == 1 then send({ "SET" }) end   -- a queued error: EXECABORT
  send({ R(6) == 1 and "DISCARD" or "EXEC" })
end

-- -- The dataset ---------------------------------------------------------------

-- The whole dataset as one comparable table: key -> { type, value, deadline }.
local function dump(c)
  local t = {}
  local keys = c:call("KEYS", "*")
  for _, k in ipairs(keys) do
    local kind = c:call("TYPE", k)
    local v
    if kind == "string" then
      v = c:call("GET", k)
    elseif kind == "list" then
      v = c:call("LRANGE", k, 0, -1)
    elseif kind == "set" then
      v = c:call("SMEMBERS", k)
      table.sort(v)
    elseif kind == "zset" then
      v = c:call("ZRANGE", k, 0, -1, "WITHSCORES")
    elseif kind == "stream" then
      local info = c:call("XINFO", "STREAM", k)
      -- With its groups (XINFO STREAM FULL), but not the consumers'
      -- seen-times, which are the replay's (as Redis's AOF).
      local full = c:call("XINFO", "STREAM", k, "FULL")
      for _, g in ipairs(full[18]) do
        for _, cons in ipairs(g[14]) do cons[4] = "?" end
      end
      v = { c:call("XRANGE", k, "-", "+"), info[8], info[10], info[12], info[14], full }
    elseif kind == "hash" then
      local all, pairs_ = c:call("HGETALL", k), {}
      for i = 1, #all, 2 do pairs_[#pairs_ + 1] = all[i] .. "=" .. all[i + 1] end
      table.sort(pairs_)
      v = pairs_
    else
      error("no dump for type " .. tostring(kind))
    end
    t[k] = { kind, v, c:call("PEXPIRETIME", k) }
  end
  return t
end

local function show(cmd)
  local t = {}
  for i, a in ipairs(cmd) do t[i] = ("%q"):format(a) end
  return table.concat(t, " ")
end

-- -- The property --------------------------------------------------------------

describe("kv's log round trip", function()
  it("loads again exactly the data that random command sequences left, with and without a rewrite", function()
    local deadline = cohost.monotonic() + SECONDS
    local rounds, commands = 0, 0
    repeat
      rounds = rounds + 1
      local seed = SEED or (os.time() * 1000 + rounds * 7919 + math.floor(cohost.monotonic() * 1000) % 1000)
      math.randomseed(seed)
      R = math.random
      print(("kv round trip: seed %d (KV_ROUNDTRIP_SEED=%d repeats it)"):format(seed, seed))
      local p = kv.start(defer, { args = "--appendfsync always" })
      local c = kv.client(p.port)
      local n = 100 + R(300)
      local rewrite_at = R(2) == 1 and R(n) or nil
      local sent = {}
      for i = 1, n do
        if i == rewrite_at then
          assert.equal("Background append only file rewriting started", c:call("BGREWRITEAOF"))
        end
        local function send(cmd)
          sent[#sent + 1] = show(cmd)
          local r = c:call(unpack(cmd))
          assert.is_not_nil(r, "no reply to " .. sent[#sent] .. " (seed " .. seed .. ")")
        end
        if R(15) == 1 then transaction(send) else send(gens[R(#gens)]()) end
      end
      if rewrite_at then kv.wait_rewrites(c, 1) end
      local before = dump(c)
      p.signal("KILL")
      p.wait(5)
      local q = kv.start(defer, { dir = p.dir })
      local after = dump(kv.client(q.port))
      assert.same(before, after, ("seed %d, commands:\n%s"):format(seed, table.concat(sent, "\n")))
      commands = commands + n
      q.stop()
      p.stop()
    until SEED or cohost.monotonic() > deadline
    print(("kv round trip: %d rounds, %d commands"):format(rounds, commands))
  end)
end)
