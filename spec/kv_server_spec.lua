-- examples/kv as a server, next to a real redis-server (Debian's 7.0):
-- blocked clients woken by RENAME and served after EXEC, WATCH and
-- expiry, keyspace events, CLIENT KILL, REPLY and UNBLOCK, RESP3 pushes,
-- the slow log, INFO commandstats and errorstats. A scenario is a
-- function(port) run on both servers at once, each in its own thread;
-- what it returns must be equal. Then kv's own: its memory given back,
-- large SETRANGEs, maxmemory's eviction, the latency monitor.
-- One kv and one redis-server serve the whole file.
local cohost = require "cohost"
local h = require "spec.helper"
local kv = require "spec.kv_util"
h.cleanups(after_each)

local NULL = kv.NULL

local info, blocked = kv.info, kv.blocked

-- A client blocked in cmd: the thread that waits for its reply.
local function block(port, ...)
  local args = { ... }
  return cohost.spawn(function()
    local w = kv.client(port, 5000)
    return w:call(unpack(args))
  end)
end

local function result(thread)
  local ok, r = cohost.wait(thread)
  assert(ok, r)
  return r == nil and "<no reply>" or r
end

-- Everything sock receives until the server closes it.
local function read_to_close(sock)
  local got = {}
  while true do
    local data = sock:receiveany(65536)
    if not data then break end
    got[#got + 1] = data
  end
  return table.concat(got)
end

describe("kv and redis-server", function()
  local ports, redis_pid, redis_log = {}, nil, nil
  local stops = {}

  setup(function()
    ports.redis = h.free_port()
    redis_pid, redis_log = h.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no")
      :format(ports.redis))
    h.wait_port(ports.redis, redis_log)
    ports.kv = kv.start(function(fn) stops[#stops + 1] = fn end,
                        { args = "--appendonly no", dir = "/tmp" }).port
  end)

  teardown(function()
    h.stop_pid(redis_pid)
    if redis_log then os.remove(redis_log) end
    for _, fn in ipairs(stops) do fn() end
  end)

  before_each(function()
    for _, port in pairs(ports) do
      local c = kv.client(port)
      assert.equal("OK", c:call("FLUSHALL"))
      assert.equal("OK", c:call("CONFIG", "SET", "notify-keyspace-events", ""))
    end
  end)

  -- Runs scenario(port) on both servers at once; asserts the results are
  -- the same and returns kv's.
  local function both(scenario)
    local r = cohost.spawn(scenario, ports.redis)
    local k = cohost.spawn(scenario, ports.kv)
    local ok_r, want = cohost.wait(r)
    local ok_k, got = cohost.wait(k)
    assert(ok_r, want)
    assert(ok_k, got)
    assert.same(want, got)
    return got
  end

  it("wakes a client blocked on a key that RENAME, RENAMENX or COPY creates", function()
    both(function(port)
      local c = kv.client(port)
      local out = {}
      local w = block(port, "BLPOP", "foo", "0")
      out[#out + 1] = blocked(c, 1)
      c:call("LPUSH", "bob", "a", "b", "c")
      out[#out + 1] = c:call("RENAME", "bob", "foo")
      out[#out + 1] = result(w)
      w = block(port, "BLPOP", "nx", "0")
      out[#out + 1] = blocked(c, 1)
      c:call("RPUSH", "src", "x")
      out[#out + 1] = c:call("RENAMENX", "src", "nx")
      out[#out + 1] = result(w)
      w = block(port, "BRPOP", "copied", "0")
      out[#out + 1] = blocked(c, 1)
      c:call("RPUSH", "orig", "y", "z")
      out[#out + 1] = c:call("COPY", "orig", "copied")
      out[#out + 1] = result(w)
      w = block(port, "BZPOPMIN", "z2", "0")
      out[#out + 1] = blocked(c, 1)
      c:call("ZADD", "z1", "1", "m")
      out[#out + 1] = c:call("RENAME", "z1", "z2")
      out[#out + 1] = result(w)
      out[#out + 1] = c:call("LRANGE", "orig", "0", "-1")
      return out
    end)
  end)

  it("serves blocked clients after EXEC, against the transaction's final state", function()
    local got = both(function(port)
      local c = kv.client(port)
      local out = {}
      local w = block(port, "BLPOP", "list", "0")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      for _, v in ipairs { "a", "b", "c" } do c:call("LPUSH", "list", v) end
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w)
      -- Pushed and deleted in one transaction: nobody is woken.
      w = block(port, "BLPOP", "list2", "0.5")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      c:call("LPUSH", "list2", "a")
      c:call("DEL", "list2")
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w)
      w = block(port, "BZPOPMIN", "z", "0.5")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      c:call("ZADD", "z", "1", "a")
      c:call("DEL", "z")
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w)
      return out
    end)
    assert.same({ true, { 1, 2, 3 }, { "list", "c" }, true, { 1, 1 }, NULL, true, { 1, 1 }, NULL }, got)
  end)

  it("blocks BRPOPLPUSH into a key of another type and answers WRONGTYPE once the source has an element",
     function()
    local got = both(function(port)
      local c = kv.client(port)
      local out = {}
      c:call("SET", "target", "x")
      local w = block(port, "BRPOPLPUSH", "blist", "target", "0")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("RPUSH", "blist", "a")
      out[#out + 1] = result(w)
      out[#out + 1] = c:call("LRANGE", "blist", "0", "-1")
      out[#out + 1] = c:call("BRPOPLPUSH", "blist", "target", "0")
      return out
    end)
    assert.same({ err = "WRONGTYPE Operation against a key holding the wrong kind of value" }, got[3])
  end)

  it("fails a watched EXEC when the key expired meanwhile, not when SMOVE left it as it was", function()
    local got = both(function(port)
      local c, other = kv.client(port), kv.client(port)
      local out = {}
      c:call("SET", "x", "foo")
      c:call("PEXPIRE", "x", "100")
      c:call("WATCH", "x")
      -- Gone by the active expiry (DBSIZE reads no key).
      assert.is_true(h.wait_for(function() return c:call("DBSIZE") == 0 end))
      c:call("MULTI")
      c:call("PING")
      out[#out + 1] = c:call("EXEC")
      c:call("SADD", "src", "m")
      c:call("SADD", "dst", "m")
      c:call("WATCH", "dst")
      out[#out + 1] = other:call("SMOVE", "src", "dst", "m")
      c:call("MULTI")
      c:call("PING")
      out[#out + 1] = c:call("EXEC")
      c:call("SADD", "src", "n")
      c:call("WATCH", "src")
      other:call("SMOVE", "src", "dst", "n")
      c:call("MULTI")
      c:call("PING")
      out[#out + 1] = c:call("EXEC")
      return out
    end)
    assert.same({ NULL, 1, { "PONG" }, NULL }, got)
  end)

  it("publishes the keyspace events redis-server does, the n class included", function()
    both(function(port)
      local c, s = kv.client(port), kv.client(port)
      assert.equal("OK", c:call("CONFIG", "SET", "notify-keyspace-events", "KEAn"))
      s:call("PSUBSCRIBE", "__key*__:*")
      s:call("SUBSCRIBE", "end")
      local cmds = {
        { "SET", "k", "v" }, { "SET", "k", "w" }, { "SETEX", "t", "100", "v" },
        { "SET", "u", "v", "EX", "100" }, { "GETEX", "u", "PERSIST" }, { "GETEX", "u", "PX", "100000" },
        { "RPUSH", "l", "a", "b" }, { "LMOVE", "l", "l2", "LEFT", "RIGHT" }, { "RPOPLPUSH", "l", "l2" },
        { "LMOVE", "l2", "l2", "LEFT", "LEFT" }, { "SADD", "s", "a", "b" }, { "SMOVE", "s", "s2", "a" },
        { "SADD", "s2", "b" }, { "SMOVE", "s", "s2", "b" }, { "HSET", "h", "f", "v" }, { "HDEL", "h", "f" },
        { "ZADD", "z", "1", "a" }, { "ZPOPMIN", "z" }, { "RPUSH", "m", "x" }, { "LMPOP", "1", "m", "LEFT" },
        { "RENAME", "l2", "l3" }, { "COPY", "l3", "l4" }, { "INCRBYFLOAT", "f", "1.5" },
        { "EXPIRE", "k", "-1" }, { "SUNIONSTORE", "d", "s2" }, { "SINTERSTORE", "d", "none" },
        { "DEL", "s2", "l3" },
      }
      for _, cmd in ipairs(cmds) do c:call(unpack(cmd)) end
      c:call("PUBLISH", "end", "x")
      local got = {}
      while true do
        local m = s:read()
        if m[1] == "message" then break end
        if m[1] == "pmessage" then got[#got + 1] = m[3] .. " " .. m[4] end
      end
      return got
    end)
  end)

  it("counts CLIENT KILL's victims out of INFO and CLIENT LIST at once, which prints Redis's fields", function()
    local fields = {}
    local got = both(function(port)
      local c = kv.client(port)
      -- Connections of earlier tests may linger: they go first, and what
      -- is left is counted.
      c:call("CLIENT", "KILL", "SKIPME", "yes")
      h.wait_for(function() return info(c, "clients").connected_clients == "1" end, 2)
      local before = tonumber(info(c, "clients").connected_clients)
      local others = { kv.client(port), kv.client(port) }
      for _, o in ipairs(others) do assert.equal("PONG", o:call("PING")) end
      assert.is_true(h.wait_for(function()
        return tonumber(info(c, "clients").connected_clients) == before + 2
      end))
      local killed = c:call("CLIENT", "KILL", "SKIPME", "yes")
      local after = info(c, "clients").connected_clients
      local list = c:call("CLIENT", "LIST")
      local names = {}
      for name, value in list:gmatch("([%w-]+)=(%S*)") do
        names[#names + 1] = name
        fields[port] = fields[port] or {}
        fields[port][name] = value
      end
      local lines = select(2, list:gsub("\n", "\n"))
      return { killed, after, lines, names, c:call("CLIENT", "INFO"):match("cmd=(%S+)") }
    end)
    assert.same({ 2, "1", 1 }, { got[1], got[2], got[3] })
    local mine = fields[ports.kv]
    assert.equal("127.0.0.1:" .. ports.kv, mine.laddr)
    assert.is_true(tonumber(mine.fd) > 2)
    assert.equal("client|list", mine.cmd)
    assert.equal("client|info", got[5])
  end)

  it("drops replies with CLIENT REPLY OFF and SKIP, and ends a wait with CLIENT UNBLOCK", function()
    both(function(port)
      local c = kv.client(port)
      local out = {}
      -- OFF and SKIP answer nothing themselves: the replies read are ON's
      -- and the GETs'.
      assert(c.sock:send(kv.encode { "CLIENT", "REPLY", "OFF" } .. kv.encode { "SET", "a", "1" }
        .. kv.encode { "CLIENT", "REPLY", "ON" } .. kv.encode { "GET", "a" }
        .. kv.encode { "CLIENT", "REPLY", "SKIP" } .. kv.encode { "SET", "b", "2" }
        .. kv.encode { "GET", "b" }))
      for _ = 1, 3 do out[#out + 1] = c:read() end
      local id = kv.client(port):call("CLIENT", "ID")
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", tostring(id))
      local w = block(port, "BLPOP", "none", "0")
      out[#out + 1] = blocked(c, 1)
      local list = c:call("CLIENT", "LIST")
      local wid = nil
      for line in list:gmatch("[^\n]+") do
        if line:find("cmd=blpop", 1, true) then wid = line:match("^id=(%d+)") end
      end
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", wid, "FOO")
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", wid)
      out[#out + 1] = result(w)
      w = block(port, "BLPOP", "none", "0")
      out[#out + 1] = blocked(c, 1)
      list = c:call("CLIENT", "LIST")
      for line in list:gmatch("[^\n]+") do
        if line:find("cmd=blpop", 1, true) then wid = line:match("^id=(%d+)") end
      end
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", wid, "ERROR")
      out[#out + 1] = result(w)
      return out
    end)
  end)

  it("splits inline lines as redis-server does: blanks, \\v and \\f inside words, quotes", function()
    both(function(port)
      local sock = kv.client(port).sock
      assert(sock:send('SET  "a b"  x\r\nGET "a b"\r\nset\tk\vv \f 1\nget k\vv\r\n  \r\n\r\n'
        .. "PING\r\nset q 'x\\'y'\r\nget q\r\nset q \"x\\x41\\ny\"\r\nget q\r\necho a\"b\r\n"))
      return read_to_close(sock)
    end)
  end)

  it("answers a pipelined batch sent at once and in chunks that split its requests", function()
    -- Requests of 20 to about 330 bytes, RESP and inline, sent at once
    -- and then in chunks of 7 bytes: kv puts what is left of a request
    -- and what comes next together behind a stamp (server.lua).
    local parts = {}
    for i = 1, 300 do
      local k, v = "key:" .. string.rep("k", i % 7) .. i, string.rep(string.char(97 + i % 26), i)
      if i % 5 == 0 then
        parts[#parts + 1] = ("SET %s %s\r\nGET %s\r\n"):format(k, v, k)
      else
        parts[#parts + 1] = ("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*2\r\n$6\r\nSTRLEN\r\n$%d\r\n%s\r\n")
          :format(#k, k, #v, v, #k, k)
      end
    end
    local batch = table.concat(parts)
    both(function(port)
      local sock = kv.client(port).sock
      assert(sock:send(batch))
      for i = 1, #batch, 7 do assert(sock:send(batch:sub(i, i + 6))) end
      assert(sock:send("QUIT\r\n"))
      return read_to_close(sock)
    end)
  end)

  it("speaks RESP3 after HELLO 3: pushes for subscribers, who may run any command", function()
    both(function(port)
      local s, c = kv.client(port), kv.client(port)
      local out = {}
      out[#out + 1] = s:typed("HELLO", "3")[1]
      out[#out + 1] = kv.typed_string(s:typed("SUBSCRIBE", "ch"))
      out[#out + 1] = kv.typed_string(s:typed("GET", "k"))
      out[#out + 1] = kv.typed_string(s:typed("PING"))
      c:call("PUBLISH", "ch", "hi")
      out[#out + 1] = kv.typed_string(s:read_typed())
      out[#out + 1] = kv.typed_string(s:typed("UNSUBSCRIBE"))
      out[#out + 1] = kv.typed_string(s:typed("UNSUBSCRIBE"))
      out[#out + 1] = s:typed("INFO", "keyspace"):sub(1, 5)
      out[#out + 1] = s:typed("CLIENT", "INFO"):match("^=txt:id=") ~= nil
      out[#out + 1] = s:typed("CLIENT", "INFO"):match(" resp=(%d)")
      out[#out + 1] = s:typed("HELLO", "2")[6]
      out[#out + 1] = kv.typed_string(s:typed("HGETALL", "none"))
      return out
    end)
  end)

  it("keeps a slow log and counts commands and errors in INFO as redis-server does", function()
    both(function(port)
      local c = kv.client(port)
      local out = {}
      c:call("CONFIG", "SET", "slowlog-log-slower-than", "0")
      c:call("SLOWLOG", "RESET")
      c:call("CLIENT", "SETNAME", "slow")
      c:call("SET", "k", string.rep("x", 200))
      local many = { "RPUSH", "l" }
      for i = 1, 40 do many[#many + 1] = tostring(i) end
      c:call(unpack(many))
      local entries = c:call("SLOWLOG", "GET", "3")
      for _, e in ipairs(entries) do out[#out + 1] = { e[4], e[6], type(e[3]) } end
      c:call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
      out[#out + 1] = c:call("SLOWLOG", "LEN") >= 4
      c:call("CONFIG", "RESETSTAT")
      c:call("SET", "a", "1")
      c:call("GET", "a")
      c:call("GET")
      c:call("LPUSH", "a", "x")
      c:call("NOPE")
      c:call("SET", "a", "1", "XX", "NX")
      c:call("CONFIG", "GET", "timeout")
      c:call("MULTI")
      c:call("SET", "b")
      c:call("EXEC")
      local stats = {}
      for line in c:call("INFO", "commandstats"):gmatch("[^\r\n]+") do
        local name, calls, rejected, failed = line:match(
          "^cmdstat_(%S+):calls=(%d+),usec=%d+,usec_per_call=[%d.]+,rejected_calls=(%d+),failed_calls=(%d+)$")
        if name and name ~= "info" then stats[#stats + 1] = table.concat({ name, calls, rejected, failed }, " ") end
      end
      table.sort(stats)
      out[#out + 1] = stats
      out[#out + 1] = c:call("INFO", "errorstats")
      out[#out + 1] = info(c, "stats").total_error_replies
      local hist = c:call("LATENCY", "HISTOGRAM", "set", "nope")
      out[#out + 1] = { hist[1], hist[2][1], hist[2][2], hist[2][3] }
      return out
    end)
  end)
end)

-- -- kv's own ----------------------------------------------------------------

describe("kv", function()
  local port
  local stops = {}

  setup(function()
    port = kv.start(function(fn) stops[#stops + 1] = fn end, { args = "--appendonly no", dir = "/tmp" }).port
  end)

  teardown(function()
    for _, fn in ipairs(stops) do fn() end
  end)

  before_each(function()
    local c = kv.client(port)
    assert.equal("OK", c:call("FLUSHALL"))
    assert.equal("OK", c:call("CONFIG", "SET", "maxmemory", "0", "maxmemory-policy", "noeviction"))
  end)

  it("gives the memory of an UNLINKed 100,000-member set back within seconds", function()
    local c = kv.client(port)
    local batch = {}
    for i = 1, 100000, 1000 do
      local cmd = { "SADD", "big" }
      for j = i, i + 999 do cmd[#cmd + 1] = "member:" .. j end
      batch[#batch + 1] = kv.encode(cmd)
    end
    assert(c.sock:send(table.concat(batch)))
    for _ = 1, #batch do assert.equal(1000, c:read()) end
    local full = tonumber(info(c, "memory").used_memory)
    assert.equal(1, c:call("UNLINK", "big"))
    -- 100,000 members take several MB; most must be given back.
    assert.is_true(h.wait_for(function()
      return tonumber(info(c, "memory").used_memory) < full - 4e6
    end, 5, 0.05))
  end)

  it("runs a SETRANGE that makes a 300 MB string, and refuses one past 512 MB without touching the key",
     function()
    local c, other = kv.client(port, 20000), kv.client(port)
    assert.equal("OK", c:call("SET", "K", "hello"))
    assert.same({ err = "ERR string exceeds maximum allowed size (proto-max-bulk-len)" },
                c:call("SETRANGE", "K", "9223372036854775807", "A"))
    assert.equal("hello", c:call("GET", "K"))
    assert.equal(300000001, c:call("SETRANGE", "K", "300000000", "A"))
    assert.equal("PONG", other:call("PING"))
    assert.equal(300000001, c:call("STRLEN", "K"))
    assert.equal("A", c:call("GETRANGE", "K", "-1", "-1"))
    assert.equal("hello\0", c:call("GETRANGE", "K", "0", "5"))
    assert.equal(1, c:call("DEL", "K"))
  end)

  it("answers SRANDMEMBER and HRANDFIELD with -2^63 at once and keeps serving others", function()
    local c, other = kv.client(port), kv.client(port)
    c:call("SADD", "myset", "a")
    c:call("HSET", "myhash", "f", "v")
    local out_of_range = { err = "ERR value is out of range, value must between -9223372036854775807 "
      .. "and 9223372036854775807" }
    assert.same(out_of_range, c:call("SRANDMEMBER", "myset", "-9223372036854775808"))
    assert.same(out_of_range, c:call("HRANDFIELD", "myhash", "-9223372036854775808", "WITHVALUES"))
    assert.equal("PONG", other:call("PING"))
    assert.equal("PONG", c:call("PING"))
    -- A large count with repeats is sent in pieces as it is made.
    local reply = c:call("SRANDMEMBER", "myset", "-300000")
    assert.equal(300000, #reply)
    assert.equal("a", reply[300000])
    reply = c:call("HRANDFIELD", "myhash", "-100000", "WITHVALUES")
    assert.equal(200000, #reply)
    assert.same({ "f", "v" }, { reply[199999], reply[200000] })
    assert.equal("PONG", c:call("PING"))
  end)

  -- LRU keeps what was read last, LFU what was read most: the hot keys
  -- are read between batches of new keys that push the data past the
  -- limit. Under LRU the cold keys go first; under LFU they tie with the
  -- new ones (read never), so only the hot keys are sure to stay.
  for _, policy in ipairs { "allkeys-lru", "allkeys-lfu" } do
    it("evicts with maxmemory under " .. policy .. ", keeping the keys in use", function()
      local c = kv.client(port)
      local value = string.rep("v", 100)
      local function fill(prefix, from, to)
        local cmds = {}
        for i = from, to do cmds[#cmds + 1] = kv.encode { "SET", prefix .. i, value } end
        assert(c.sock:send(table.concat(cmds)))
        for _ = from, to do c:read() end
      end
      fill("cold:", 1, 1000)
      fill("hot:", 1, 100)
      local dataset = tonumber(info(c, "memory").used_memory_dataset)
      assert.equal("OK", c:call("CONFIG", "SET", "maxmemory", tostring(dataset), "maxmemory-policy", policy))
      for round = 1, 20 do
        local reads = {}
        for i = 1, 100 do reads[#reads + 1] = kv.encode { "GET", "hot:" .. i } end
        assert(c.sock:send(table.concat(reads)))
        for _ = 1, 100 do assert.equal(value, c:read()) end
        fill("new:" .. round .. ":", 1, 100)
      end
      assert.is_true(tonumber(info(c, "memory").used_memory_dataset) <= dataset)
      assert.is_true(tonumber(info(c, "stats").evicted_keys) >= 1000)
      local hot, cold = 0, 0
      for i = 1, 100 do hot = hot + c:call("EXISTS", "hot:" .. i) end
      for i = 1, 1000 do cold = cold + c:call("EXISTS", "cold:" .. i) end
      assert.equal(100, hot)
      if policy == "allkeys-lru" then assert.is_true(cold < 100, cold .. " cold keys left") end
    end)
  end

  it("evicts with maxmemory: soonest deadlines first under volatile-ttl, and refuses writes with -OOM when none is left",
     function()
    local c = kv.client(port)
    local value = string.rep("v", 100)
    for i = 1, 200 do c:call("SET", "ttl:" .. i, value, "EX", tostring(1000 + i)) end
    for i = 1, 200 do c:call("SET", "keep:" .. i, value) end
    local dataset = tonumber(info(c, "memory").used_memory_dataset)
    assert.equal("OK", c:call("CONFIG", "SET", "maxmemory", tostring(dataset), "maxmemory-policy",
                              "volatile-ttl"))
    for i = 1, 50 do assert.equal("OK", c:call("SET", "more:" .. i, value)) end
    -- Approximated as Redis does (samples and a pool of candidates): the
    -- keys evicted are the sooner ones, not exactly the soonest.
    local sooner, later = 0, 0
    for i = 1, 100 do sooner = sooner + c:call("EXISTS", "ttl:" .. i) end
    for i = 101, 200 do later = later + c:call("EXISTS", "ttl:" .. i) end
    assert.is_true(sooner + later < 200 and sooner < later, sooner .. " and " .. later .. " left")
    assert.equal(1, c:call("EXISTS", "ttl:200"))
    for i = 1, 200 do assert.equal(1, c:call("EXISTS", "keep:" .. i)) end
    -- No key with a deadline left to evict: writes are refused, reads
    -- and deletes go on.
    local refused
    for i = 1, 400 do
      refused = c:call("SET", "flood:" .. i, value)
      if type(refused) == "table" then break end
    end
    assert.same({ err = "OOM command not allowed when used memory > 'maxmemory'." }, refused)
    assert.equal(value, c:call("GET", "keep:1"))
    assert.equal(1, c:call("DEL", "keep:1"))
    assert.is_true(tonumber(info(c, "stats").evicted_keys) >= 200)
    -- As Redis, the check is made before a command: one that starts
    -- under the limit runs, the next is refused.
    assert.equal("OK", c:call("CONFIG", "SET", "maxmemory-policy", "noeviction"))
    assert.equal(1, c:call("LPUSH", "list", string.rep("x", 50000)))
    assert.same(refused, c:call("SET", "x", "y"))
    assert.equal(1, c:call("DEL", "list"))
  end)

  it("starts its log at run time with CONFIG SET appendonly yes, and stops it with no", function()
    local p = kv.start(h.defer, { args = "--appendonly no" })
    local c = kv.client(p.port)
    assert.equal("OK", c:call("SET", "before", "1"))
    assert.equal("OK", c:call("CONFIG", "SET", "appendonly", "yes"))
    assert.equal("OK", c:call("SET", "during", "2"))
    assert.is_true(h.wait_for(function()
      return info(c, "persistence").aof_rewrites == "1"
    end))
    assert.equal("OK", c:call("SET", "logged", "3"))
    assert.equal("OK", c:call("CONFIG", "SET", "appendonly", "no"))
    assert.equal("OK", c:call("SET", "after", "4"))
    p.stop()
    local q = kv.start(h.defer, { dir = p.dir })
    assert.same({ "1", "2", "3", NULL }, kv.client(q.port):call("MGET", "before", "during", "logged", "after"))
  end)

  it("records commands over latency-monitor-threshold in LATENCY LATEST and HISTORY", function()
    local c = kv.client(port)
    kv.fill(c, 50000)
    assert.equal("OK", c:call("CONFIG", "SET", "latency-monitor-threshold", "1"))
    assert.equal(50000, #c:call("KEYS", "*"))   -- several ms: a "command" sample
    assert.equal("OK", c:call("CONFIG", "SET", "latency-monitor-threshold", "0"))
    local latest = c:call("LATENCY", "LATEST")
    assert.equal("command", latest[1][1])
    assert.is_true(latest[1][3] >= 1 and latest[1][4] >= latest[1][3])
    local history = c:call("LATENCY", "HISTORY", "command")
    assert.is_true(#history >= 1 and history[1][2] >= 1)
    assert.equal(1, c:call("LATENCY", "RESET", "command"))
    assert.same({}, c:call("LATENCY", "LATEST"))
  end)
end)
