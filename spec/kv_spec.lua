-- examples/kv: the Redis-protocol store, driven by real clients (redis-cli,
-- redis-benchmark, lua-resty-redis through cohost.ngx) and by raw RESP
-- over cohost.tcp. Every server is a child process (build/cohost
-- examples/kv/main.lua --port 0 --announce) with a fresh --dir, so the
-- crash tests can kill -9 it and start it again on the same log.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local kv = require "spec.kv_util"
local KV, NULL, encode, client = kv.KV, kv.NULL, kv.encode, kv.client

-- -- Helpers ---------------------------------------------------------------

local function start(opts)
  return kv.start(defer, opts)
end

-- Sends raw bytes and reads until the server closes or wait seconds pass
-- without data; with want (bytes), until that many came, and then 0.1 s
-- more for anything extra (a server that keeps the connection open can
-- be slow to answer on a loaded machine, so no fixed wait decides).
local function raw(port, bytes, wait, want)
  local s = h.dial(port, math.floor((wait or 0.5) * 1000))
  s:send(bytes)
  local got, n = {}, 0
  while true do
    local data, err = s:receiveany(65536)
    if not data then
      if err == "closed" then got[#got + 1] = "<EOF>" end
      break
    end
    got[#got + 1] = data
    n = n + #data
    if want and n >= want then s:settimeout(100) end
  end
  return table.concat(got)
end

-- redis-cli's output for one command (words are shell-quoted).
local function cli(port, ...)
  local words = {}
  for i, a in ipairs({ ... }) do words[i] = h.shell_quote(a) end
  local p = io.popen(("redis-cli -p %d %s 2>&1"):format(port, table.concat(words, " ")))
  local out = p:read("*a")
  p:close()
  return (out:gsub("\n+$", ""))
end

-- INFO clients once it shows n blocked clients (10 s at most; the last
-- answer then): a client's BLPOP, or its close, reaches the server in the
-- server's own time.
local function blocked(c, n)
  local info
  h.eventually(function()
    info = c:call("INFO", "clients")
    return info:find("blocked_clients:" .. n .. "%f[%D]")
  end)
  return info
end

local function sorted(t)
  table.sort(t)
  return t
end

-- -- redis-cli ---------------------------------------------------------------

describe("kv with redis-cli", function()
  local p
  before_each(function() p = start() end)

  it("answers PING, ECHO, SELECT 0 and refuses other databases", function()
    assert.equal("PONG", cli(p.port, "ping"))
    assert.equal("hi", cli(p.port, "ping", "hi"))
    assert.equal("hello world", cli(p.port, "echo", "hello world"))
    assert.equal("OK", cli(p.port, "select", "0"))
    assert.equal("ERR DB index is out of range", cli(p.port, "select", "1"))
    assert.equal("ERR value is not an integer or out of range", cli(p.port, "select", "x"))
  end)

  it("gives Redis's errors for unknown commands and wrong arity", function()
    assert.equal("ERR unknown command 'foo', with args beginning with: 'a' 'b c' ",
                 cli(p.port, "foo", "a", "b c"))
    assert.equal("ERR unknown command 'nope', with args beginning with: ", cli(p.port, "nope"))
    assert.equal("ERR wrong number of arguments for 'get' command", cli(p.port, "get"))
    assert.equal("ERR wrong number of arguments for 'set' command", cli(p.port, "SET", "k"))
    assert.equal("ERR wrong number of arguments for 'mset' command", cli(p.port, "mset", "a", "1", "b"))
    assert.equal("ERR wrong number of arguments for 'hset' command", cli(p.port, "hset", "h", "f"))
  end)

  it("runs SET with its options, GET, GETSET, MGET, MSET, APPEND, STRLEN, SETNX", function()
    assert.equal("OK", cli(p.port, "set", "k", "v1"))
    assert.equal("v1", cli(p.port, "get", "k"))
    assert.equal("", cli(p.port, "set", "k", "v2", "nx"))
    assert.equal("OK", cli(p.port, "set", "k", "v2", "xx"))
    assert.equal("", cli(p.port, "set", "new", "x", "xx"))
    assert.equal("v2", cli(p.port, "set", "k", "v3", "get"))
    assert.equal("ERR syntax error", cli(p.port, "set", "k", "v", "nx", "xx"))
    assert.equal("ERR syntax error", cli(p.port, "set", "k", "v", "ex", "10", "px", "100"))
    assert.equal("ERR value is not an integer or out of range", cli(p.port, "set", "k", "v", "ex", "ten"))
    assert.equal("ERR invalid expire time in 'set' command", cli(p.port, "set", "k", "v", "ex", "0"))
    assert.equal("v3", cli(p.port, "getset", "k", "v4"))
    assert.equal("OK", cli(p.port, "mset", "a", "1", "b", "2"))
    assert.equal("1\n2\n\nv4", cli(p.port, "mget", "a", "b", "none", "k"))
    assert.equal("7", cli(p.port, "append", "a", "234567"))
    assert.equal("7", cli(p.port, "strlen", "a"))
    assert.equal("0", cli(p.port, "strlen", "none"))
    assert.equal("1", cli(p.port, "setnx", "sn", "x"))
    assert.equal("0", cli(p.port, "setnx", "sn", "y"))
    assert.equal("x", cli(p.port, "getdel", "sn"))
    assert.equal("0", cli(p.port, "exists", "sn"))
  end)

  it("counts with INCR, INCRBY, DECR, DECRBY up to the int64 limits", function()
    assert.equal("1", cli(p.port, "incr", "n"))
    assert.equal("11", cli(p.port, "incrby", "n", "10"))
    assert.equal("10", cli(p.port, "decr", "n"))
    assert.equal("-5", cli(p.port, "decrby", "n", "15"))
    assert.equal("OK", cli(p.port, "set", "big", "9223372036854775806"))
    assert.equal("9223372036854775807", cli(p.port, "incr", "big"))
    assert.equal("ERR increment or decrement would overflow", cli(p.port, "incr", "big"))
    assert.equal("ERR decrement would overflow", cli(p.port, "decrby", "x", "-9223372036854775808"))
    cli(p.port, "set", "f", "1.5")
    assert.equal("ERR value is not an integer or out of range", cli(p.port, "incr", "f"))
    cli(p.port, "set", "z", "007")
    assert.equal("ERR value is not an integer or out of range", cli(p.port, "incr", "z"))
    assert.equal("ERR value is not an integer or out of range", cli(p.port, "incrby", "n", "x"))
  end)

  it("keeps lists with LPUSH, RPUSH, LPOP, RPOP, LLEN, LRANGE, LINDEX", function()
    assert.equal("3", cli(p.port, "lpush", "l", "a", "b", "c"))
    assert.equal("5", cli(p.port, "rpush", "l", "d", "e"))
    assert.equal("c\nb\na\nd\ne", cli(p.port, "lrange", "l", "0", "-1"))
    assert.equal("d\ne", cli(p.port, "lrange", "l", "-2", "100"))
    assert.equal("", cli(p.port, "lrange", "l", "5", "10"))
    assert.equal("a", cli(p.port, "lindex", "l", "2"))
    assert.equal("c", cli(p.port, "lpop", "l"))
    assert.equal("e", cli(p.port, "rpop", "l"))
    assert.equal("b\na", cli(p.port, "lpop", "l", "2"))
    assert.equal("1", cli(p.port, "llen", "l"))
    assert.equal("d", cli(p.port, "rpop", "l"))
    assert.equal("0", cli(p.port, "exists", "l"))   -- an emptied list is deleted
    assert.equal("", cli(p.port, "lpop", "l"))
    assert.equal("ERR value is out of range, must be positive", cli(p.port, "lpop", "l", "-1"))
  end)

  it("keeps hashes with HSET, HGET, HDEL, HGETALL, HLEN", function()
    assert.equal("2", cli(p.port, "hset", "h", "f1", "v1", "f2", "v2"))
    assert.equal("0", cli(p.port, "hset", "h", "f1", "v9"))
    assert.equal("v9", cli(p.port, "hget", "h", "f1"))
    assert.equal("", cli(p.port, "hget", "h", "none"))
    assert.equal("2", cli(p.port, "hlen", "h"))
    local all = {}
    for line in cli(p.port, "hgetall", "h"):gmatch("[^\n]+") do all[#all + 1] = line end
    assert.same({ "f1", "f2", "v2", "v9" }, sorted(all))
    assert.equal("1", cli(p.port, "hdel", "h", "f1", "none"))
    assert.equal("1", cli(p.port, "hlen", "h"))
  end)

  it("says WRONGTYPE for an operation against the wrong kind of value", function()
    local wrong = "WRONGTYPE Operation against a key holding the wrong kind of value"
    cli(p.port, "rpush", "l", "x")
    cli(p.port, "set", "s", "x")
    assert.equal(wrong, cli(p.port, "get", "l"))
    assert.equal(wrong, cli(p.port, "incr", "l"))
    assert.equal(wrong, cli(p.port, "lpush", "s", "y"))
    assert.equal(wrong, cli(p.port, "hget", "s", "f"))
    assert.equal(wrong, cli(p.port, "blpop", "s", "1"))
    assert.equal("list", cli(p.port, "type", "l"))
    assert.equal("string", cli(p.port, "type", "s"))
    assert.equal("none", cli(p.port, "type", "none"))
  end)

  it("deletes, counts and checks keys with DEL, EXISTS, DBSIZE, FLUSHALL", function()
    cli(p.port, "mset", "a", "1", "b", "2", "c", "3")
    assert.equal("3", cli(p.port, "exists", "a", "b", "none", "a"))
    assert.equal("2", cli(p.port, "del", "a", "b", "none"))
    assert.equal("1", cli(p.port, "dbsize"))
    assert.equal("OK", cli(p.port, "flushall"))
    assert.equal("0", cli(p.port, "dbsize"))
  end)

  it("expires keys with EXPIRE, PEXPIRE, TTL, PTTL, PERSIST and its options", function()
    cli(p.port, "set", "k", "v")
    assert.equal("-1", cli(p.port, "ttl", "k"))
    assert.equal("-2", cli(p.port, "ttl", "none"))
    assert.equal("1", cli(p.port, "expire", "k", "100"))
    local ttl = tonumber(cli(p.port, "ttl", "k"))
    assert.is_true(ttl >= 99 and ttl <= 100)
    assert.equal("0", cli(p.port, "expire", "k", "50", "gt"))
    assert.equal("1", cli(p.port, "expire", "k", "50", "lt"))
    assert.equal("0", cli(p.port, "expire", "k", "50", "nx"))
    assert.equal("ERR NX and XX, GT or LT options at the same time are not compatible",
                 cli(p.port, "expire", "k", "5", "nx", "xx"))
    assert.equal("1", cli(p.port, "persist", "k"))
    assert.equal("0", cli(p.port, "persist", "k"))
    -- 1.5 s: each redis-cli is a new process, slow to start when loaded.
    assert.equal("1", cli(p.port, "pexpire", "k", "1500"))
    local pttl = tonumber(cli(p.port, "pttl", "k"))
    assert.is_true(pttl > 0 and pttl <= 1500, tostring(pttl))
    cohost.sleep(1.6)
    assert.equal("", cli(p.port, "get", "k"))
    cli(p.port, "set", "gone", "v")
    assert.equal("1", cli(p.port, "expire", "gone", "0"))   -- a past deadline deletes
    assert.equal("0", cli(p.port, "exists", "gone"))
  end)

  it("sweeps expired keys that nobody reads", function()
    local c = client(p.port)
    for i = 1, 50 do c:call("SET", "t" .. i, "v", "PX", 300) end
    c:call("SET", "stays", "v")
    assert.equal(51, c:call("DBSIZE"))
    -- DBSIZE counts keys without looking at them: only the sweep removes.
    local size
    h.eventually(function()
      size = cli(p.port, "dbsize")
      return size == "1"
    end)
    assert.equal("1", size)
  end)

  it("lists keys with KEYS globs", function()
    cli(p.port, "mset", "user:1", "a", "user:2", "b", "user:10", "c", "order:1", "d", "a*b", "e")
    local function keys(pat)
      local t = {}
      for k in cli(p.port, "keys", pat):gmatch("[^\n]+") do t[#t + 1] = k end
      return sorted(t)
    end
    assert.same({ "a*b", "order:1", "user:1", "user:10", "user:2" }, keys("*"))
    assert.same({ "user:1", "user:2" }, keys("user:?"))
    assert.same({ "user:1", "user:10" }, keys("user:1*"))
    assert.same({ "order:1", "user:1" }, keys("[ou]*:1"))
    assert.same({ "user:2" }, keys("user:[^1]"))
    assert.same({ "user:1", "user:2" }, keys("user:[0-9]"))
    assert.same({ "a*b" }, keys("a\\*b"))
  end)

  it("iterates with SCAN, MATCH and COUNT, and redis-cli --scan sees every key", function()
    local args = {}
    for i = 1, 300 do
      args[#args + 1] = "key:" .. i
      args[#args + 1] = tostring(i)
    end
    cli(p.port, "mset", unpack(args))
    local c = client(p.port)
    local seen, cursor, rounds = {}, "0", 0
    repeat
      local r = c:call("SCAN", cursor, "COUNT", 17)
      cursor = r[1]
      for _, k in ipairs(r[2]) do seen[k] = (seen[k] or 0) + 1 end
      rounds = rounds + 1
    until cursor == "0"
    local n = 0
    for _, count in pairs(seen) do
      n = n + 1
      assert.equal(1, count)
    end
    assert.equal(300, n)
    assert.is_true(rounds >= 300 / 17)
    local r = c:call("SCAN", "0", "MATCH", "key:1?", "COUNT", 1000)
    assert.equal("0", r[1])
    assert.equal(10, #r[2])
    assert.same({ err = "ERR invalid cursor" }, c:call("SCAN", "x"))
    assert.same({ err = "ERR syntax error" }, c:call("SCAN", "0", "COUNT", "0"))
    local out = {}
    for k in cli(p.port, "--scan", "--pattern", "key:2*"):gmatch("[^\n]+") do out[#out + 1] = k end
    assert.equal(111, #out)   -- key:2, key:20-29, key:200-299
  end)

  it("returns every key present for a whole SCAN while others come and go", function()
    local c = client(p.port)
    for i = 1, 200 do c:call("SET", "stay" .. i, "v") end
    local seen, cursor, i = {}, "0", 0
    repeat
      local r = c:call("SCAN", cursor, "COUNT", 10)
      cursor = r[1]
      for _, k in ipairs(r[2]) do seen[k] = true end
      -- Churn between steps: new keys and deleted ones.
      i = i + 1
      c:call("SET", "new" .. i, "v")
      c:call("DEL", "new" .. (i - 1))
    until cursor == "0"
    for k = 1, 200 do assert.is_true(seen["stay" .. k], "stay" .. k) end
  end)

  it("answers INFO with server and keyspace sections and CONFIG GET for redis-benchmark", function()
    cli(p.port, "set", "a", "1")
    cli(p.port, "set", "b", "1", "ex", "100")
    local info = cli(p.port, "info")
    assert.matches("# Server", info, 1, true)
    assert.matches("redis_version:7%.", info)
    assert.matches("tcp_port:" .. p.port, info, 1, true)
    assert.matches("# Keyspace\r?\ndb0:keys=2,expires=1", info)
    assert.matches("aof_enabled:1", info, 1, true)
    local ks = cli(p.port, "info", "keyspace")
    assert.not_matches("# Server", ks, 1, true)
    assert.same({ "save", "" }, client(p.port):call("CONFIG", "GET", "save"))
    assert.equal("appendonly\nyes", cli(p.port, "config", "get", "appendonly"))
    assert.equal("ERR unknown subcommand 'foo'. Try CONFIG HELP.", cli(p.port, "config", "foo"))
  end)

  it("takes redis-cli --pipe mass insertion", function()
    local f = h.tmpfile()
    local t = {}
    for i = 1, 2000 do t[i] = encode({ "SET", "m" .. i, i }) end
    h.write_file(f, table.concat(t))
    local pipe = io.popen(("redis-cli -p %d --pipe < %s 2>&1"):format(p.port, f))
    local out = pipe:read("*a")
    pipe:close()
    assert.matches("errors: 0, replies: 2000", out, 1, true)
    assert.equal("2000", cli(p.port, "dbsize"))
    assert.equal("1234", cli(p.port, "get", "m1234"))
  end)

  it("survives a short redis-benchmark run of every benchmarked command", function()
    local pipe = io.popen(("redis-benchmark -p %d -t set,get,incr,lpush,lpop -n 2000 -c 10 -P 4 --csv 2>&1")
      :format(p.port))
    local out = pipe:read("*a")
    pipe:close()
    for _, t in ipairs { "SET", "GET", "INCR", "LPUSH", "LPOP" } do
      assert.matches('"' .. t .. '","[%d.]+"', out)
    end
    assert.not_matches("WARNING", out, 1, true)
    assert.equal("2000", cli(p.port, "get", "counter:__rand_int__"))
  end)
end)

-- -- The protocol ------------------------------------------------------------

describe("kv's RESP handling", function()
  local p
  before_each(function() p = start() end)

  it("answers a pipelined batch in order", function()
    local t = {}
    for i = 1, 200 do t[#t + 1] = encode({ "INCR", "c" }) end
    t[#t + 1] = encode({ "GET", "c" })
    local c = client(p.port)
    assert(c.sock:send(table.concat(t)))
    for i = 1, 200 do assert.equal(i, c:read()) end
    assert.equal("200", c:read())
  end)

  it("runs inline commands, with quotes and escapes", function()
    local want = '+OK\r\n$3\r\naA\n\r\n+PONG\r\n'
    assert.equal(want, raw(p.port, '  set k "a\\x41\\n" \r\nget k\r\n\r\nPING\n', 5, #want))
    want = "$4\r\nit's\r\n"
    assert.equal(want, raw(p.port, "echo 'it\\'s'\r\n", 5, #want))
  end)

  it("reads a request split across packets and a 2 MB value", function()
    local c = client(p.port)
    local req = encode({ "SET", "split", "value" })
    for i = 1, #req do
      c.sock:send(req:sub(i, i))
      cohost.sleep(0.001)
    end
    assert.equal("OK", c:read())
    local big = string.rep("0123456789abcdef", 128 * 1024)
    assert.equal("OK", c:call("SET", "big", big))
    assert.equal(big, c:call("GET", "big"))
  end)

  it("closes the connection after replying to a protocol error", function()
    assert.equal("-ERR Protocol error: invalid bulk length\r\n<EOF>", raw(p.port, "*1\r\n$x\r\n"))
    assert.equal("-ERR Protocol error: invalid multibulk length\r\n<EOF>", raw(p.port, "*x\r\n"))
    assert.equal("-ERR Protocol error: expected '$', got 'x'\r\n<EOF>", raw(p.port, "*1\r\nx\r\n"))
    assert.equal("-ERR Protocol error: unbalanced quotes in request\r\n<EOF>",
                 raw(p.port, 'echo "open\r\n'))
    -- Replies before the bad request still go out first.
    assert.equal("+PONG\r\n-ERR Protocol error: invalid bulk length\r\n<EOF>",
                 raw(p.port, "PING\r\n*1\r\n$-5\r\n"))
    assert.equal("-ERR Protocol error: too big inline request\r\n<EOF>",
                 raw(p.port, string.rep("a", 70 * 1024)))
  end)

  it("replies +OK to QUIT and closes", function()
    assert.equal("+OK\r\n<EOF>", raw(p.port, "QUIT\r\nPING\r\n"))
  end)
end)

-- -- Blocking pops -------------------------------------------------------------

describe("kv's BLPOP and BRPOP", function()
  local p
  before_each(function() p = start() end)

  it("wake when another connection pushes", function()
    local waiter = cohost.spawn(function()
      local c = client(p.port)
      local t0 = cohost.monotonic()
      return c:call("BLPOP", "q1", "q2", 5), cohost.monotonic() - t0
    end)
    local c = client(p.port)
    assert.matches("blocked_clients:1", blocked(c, 1), 1, true)
    assert.equal(2, c:call("RPUSH", "q2", "a", "b"))
    local ok, res, took = cohost.wait(waiter)
    assert.is_true(ok)
    assert.same({ "q2", "a" }, res)
    assert.is_true(took < 2)
    assert.same({ "b" }, c:call("LRANGE", "q2", 0, -1))
  end)

  it("serve waiters first come first served, BRPOP from the right", function()
    local order = {}
    local function waiter(cmd, name)
      return cohost.spawn(function()
        local c = client(p.port)
        local r = c:call(cmd, "q", 5)
        order[#order + 1] = name
        return r
      end)
    end
    -- Each waiter is blocked at the server before the next comes.
    local c = client(p.port)
    local w1 = waiter("BLPOP", "first")
    assert.matches("blocked_clients:1", blocked(c, 1), 1, true)
    local w2 = waiter("BRPOP", "second")
    assert.matches("blocked_clients:2", blocked(c, 2), 1, true)
    assert.equal(3, c:call("RPUSH", "q", "x", "y", "z"))
    assert.same({ true, { "q", "x" } }, { cohost.wait(w1) })
    assert.same({ true, { "q", "z" } }, { cohost.wait(w2) })
    assert.same({ "first", "second" }, order)
    assert.same({ "y" }, c:call("LRANGE", "q", 0, -1))
  end)

  it("time out with a null array, and pop at once when the list has elements", function()
    local c = client(p.port)
    local t0 = cohost.monotonic()
    assert.equal(NULL, c:call("BLPOP", "none", 0.3))
    local took = cohost.monotonic() - t0
    assert.is_true(took >= 0.25 and took < 2, ("took %.2f"):format(took))
    c:call("RPUSH", "now", "v")
    assert.same({ "now", "v" }, c:call("BRPOP", "now", 0))
    assert.same({ err = "ERR timeout is negative" }, c:call("BLPOP", "x", -1))
    assert.same({ err = "ERR timeout is not a float or out of range" }, c:call("BLPOP", "x", "y"))
  end)

  it("send earlier pipelined replies before blocking and run later ones after", function()
    local c = client(p.port)
    c.sock:send(encode({ "PING" }) .. encode({ "BLPOP", "q", 5 }) .. encode({ "ECHO", "after" }))
    assert.equal("PONG", c:read())
    local pusher = client(p.port)
    pusher:call("LPUSH", "q", "v")
    assert.same({ "q", "v" }, c:read())
    assert.equal("after", c:read())
  end)

  it("leave the element in the list when the blocked client went away", function()
    local s = h.connect(p.port)
    s:send(encode({ "BLPOP", "q", 10 }))
    local c = client(p.port)
    assert.matches("blocked_clients:1", blocked(c, 1), 1, true)
    s:close()
    -- The server sees the close in its own time.
    assert.matches("blocked_clients:0", blocked(c, 0), 1, true)
    assert.equal(1, c:call("LPUSH", "q", "kept"))
    assert.same({ "kept" }, c:call("LRANGE", "q", 0, -1))
  end)
end)

-- -- Pub/sub -------------------------------------------------------------------

describe("kv's pub/sub", function()
  local p
  before_each(function() p = start() end)

  it("delivers PUBLISH to subscribers of the channel and of matching patterns", function()
    local s1, s2 = client(p.port), client(p.port)
    assert.same({ "subscribe", "news", 1 }, s1:call("SUBSCRIBE", "news"))
    assert.same({ "psubscribe", "ne*", 1 }, s2:call("PSUBSCRIBE", "ne*"))
    local pub = client(p.port)
    assert.equal(2, pub:call("PUBLISH", "news", "hello"))
    assert.equal(0, pub:call("PUBLISH", "other", "x"))
    assert.same({ "message", "news", "hello" }, s1:read())
    assert.same({ "pmessage", "ne*", "news", "hello" }, s2:read())
  end)

  it("allows only (un)subscribe, PING and QUIT while subscribed", function()
    local s = client(p.port)
    s:call("SUBSCRIBE", "a", "b")
    assert.same({ "subscribe", "b", 2 }, s:read())
    assert.same({ err = "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                  .. "PING / QUIT / RESET are allowed in this context" }, s:call("GET", "x"))
    assert.same({ "pong", "" }, s:call("PING"))
    assert.same({ "unsubscribe", "a", 1 }, s:call("UNSUBSCRIBE", "a"))
    assert.same({ "unsubscribe", "b", 0 }, s:call("UNSUBSCRIBE"))
    assert.equal(NULL, s:call("GET", "x"))   -- out of subscribed mode
  end)

  it("works with redis-cli subscribe", function()
    local out = h.tmpfile()
    -- 10 s: redis-cli starts slowly on a loaded machine (it ends when the
    -- server does, after the test).
    os.execute(("timeout 10 redis-cli -p %d subscribe chan > %s 2>&1 &"):format(p.port, out))
    local c = client(p.port)
    local n = h.eventually(function()
      local got = c:call("PUBLISH", "chan", "hi there")
      return got == 1 and got
    end) or 0
    assert.equal(1, n)
    local text
    h.eventually(function()
      text = h.slurp(out)
      return text:find("hi there", 1, true)
    end)
    assert.equal("subscribe\nchan\n1\nmessage\nchan\nhi there\n", text)
  end)
end)

-- -- Durability ----------------------------------------------------------------

describe("kv's append-only log", function()
  it("brings every kind of value back after a restart", function()
    local p = start()
    local c = client(p.port)
    c:call("SET", "s", "string value")
    c:call("RPUSH", "l", "a", "b", "c")
    c:call("LPOP", "l")
    c:call("HSET", "h", "f", "v", "g", "w")
    c:call("HDEL", "h", "g")
    c:call("INCRBY", "n", 41)
    c:call("INCR", "n")
    c:call("SET", "ttl", "v", "EX", 1000)
    c:call("SET", "short", "v", "PX", 200)
    c:call("SET", "del", "v")
    c:call("DEL", "del")
    c.sock:send("SET inline \"with space\"\r\n")
    assert.equal("OK", c:read())
    p.signal("TERM")
    assert.equal(0, p.wait(10))
    cohost.sleep(0.3)   -- "short" expires while the server is down
    local q = start({ dir = p.dir })
    local d = client(q.port)
    assert.equal("string value", d:call("GET", "s"))
    assert.same({ "b", "c" }, d:call("LRANGE", "l", 0, -1))
    assert.same({ "f", "v" }, d:call("HGETALL", "h"))
    assert.equal("42", d:call("GET", "n"))
    local ttl = d:call("TTL", "ttl")
    assert.is_true(ttl > 990 and ttl <= 1000, tostring(ttl))
    assert.equal(NULL, d:call("GET", "short"))
    assert.equal(0, d:call("EXISTS", "del"))
    assert.equal("with space", d:call("GET", "inline"))
    assert.matches("replayed %d+ records", h.slurp(q.err))
  end)

  it("logs a served BLPOP as a pop, so the element stays taken after a restart", function()
    local p = start()
    local w = cohost.spawn(function() return client(p.port):call("BLPOP", "q", 5) end)
    local c = client(p.port)
    assert.matches("blocked_clients:1", blocked(c, 1), 1, true)
    c:call("RPUSH", "q", "a", "b")
    assert.same({ true, { "q", "a" } }, { cohost.wait(w) })
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir })
    assert.same({ "b" }, client(q.port):call("LRANGE", "q", 0, -1))
  end)

  -- Writers SET k<w>_<i> = i as fast as they can; each remembers the last i
  -- acknowledged. kill -9 after a second, restart on the same log, check.
  local function crash_and_check(fsync)
    local p = start({ args = "--appendfsync " .. fsync })
    local acked, stop = {}, false
    local writers = {}
    for w = 1, 4 do
      acked[w] = 0
      writers[w] = cohost.spawn(function()
        local c = client(p.port)
        local i = 0
        while not stop do
          i = i + 1
          local r = c:call("SET", ("k%d_%d"):format(w, i), tostring(i))
          if r ~= "OK" then return end
          acked[w] = i
        end
      end)
    end
    cohost.sleep(1)
    p.signal("KILL")
    stop = true
    for w = 1, 4 do cohost.wait(writers[w]) end
    assert.equal(137, p.wait(5))   -- 128 + SIGKILL, through timeout(1)
    local q = start({ dir = p.dir, args = "--appendfsync " .. fsync })
    local c = client(q.port)
    local total = 0
    for w = 1, 4 do
      assert.is_true(acked[w] > 0)
      total = total + acked[w]
      for i = 1, acked[w], 500 do
        local keys = {}
        for j = i, math.min(i + 499, acked[w]) do keys[#keys + 1] = ("k%d_%d"):format(w, j) end
        local vals = c:call("MGET", unpack(keys))
        for j, v in ipairs(vals) do
          assert.equal(tostring(i + j - 1), v, ("k%d_%d lost"):format(w, i + j - 1))
        end
      end
    end
    assert.is_true(c:call("DBSIZE") >= total)
  end

  it("loses nothing acknowledged when killed with -9 under load (appendfsync always)", function()
    crash_and_check("always")
  end)

  it("loses nothing acknowledged when killed with -9 under load (appendfsync everysec)", function()
    -- Replies wait for write(2), so a killed process loses nothing; a
    -- machine crash could lose the last second.
    crash_and_check("everysec")
  end)

  local wait_rewrites = kv.wait_rewrites

  for _, fsync in ipairs { "everysec", "always" } do
    it("rewrites the log on BGREWRITEAOF while writes go on, and replays the result (" .. fsync .. ")", function()
      local p = start({ args = "--appendfsync " .. fsync })
      local c = client(p.port)
      for i = 1, 10000 do c.sock:send(encode({ "SET", "k", i })) end
      for _ = 1, 10000 do c:read() end
      local items = {}
      for i = 1, 150 do items[i] = "e" .. i end
      c:call("RPUSH", "l", unpack(items))
      for i = 1, 100 do c:call("HSET", "h", "f" .. i, "v" .. i) end
      c:call("INCRBY", "n", 7)
      c:call("SET", "ttl", "v", "EX", 1000)
      local path = p.dir .. "/appendonly.aof"
      local before = #h.slurp(path)
      -- A writer runs through the rewrite; all it got acknowledged must stay.
      local stop, acked = false, 0
      local writer = cohost.spawn(function()
        local w = client(p.port)
        while not stop do
          if w:call("SET", "w" .. acked + 1, "x") ~= "OK" then return end
          acked = acked + 1
        end
      end)
      assert.is_truthy(h.eventually(function() return acked > 0 end), "the writer got nothing acknowledged")
      assert.equal("Background append only file rewriting started", c:call("BGREWRITEAOF"))
      wait_rewrites(c, 1)
      cohost.sleep(0.05)
      stop = true
      cohost.wait(writer)
      assert.is_true(acked > 0)
      p.signal("KILL")
      p.wait(5)
      local after = #h.slurp(path)
      assert.is_true(after < before, ("%d -> %d bytes"):format(before, after))
      assert.is_nil(io.open(path .. ".rewrite"))
      local q = start({ dir = p.dir })
      local d = client(q.port)
      assert.equal("10000", d:call("GET", "k"))
      assert.same(items, d:call("LRANGE", "l", 0, -1))
      assert.equal(100, d:call("HLEN", "h"))
      assert.equal("v77", d:call("HGET", "h", "f77"))
      assert.equal("7", d:call("GET", "n"))
      assert.is_true(d:call("TTL", "ttl") > 990)
      for i = 1, acked do assert.equal("x", d:call("GET", "w" .. i), "w" .. i) end
    end)
  end

  it("rewrites the log by itself once it doubles past --aof-rewrite-min-size", function()
    local p = start({ args = "--aof-rewrite-min-size 20000" })
    local c = client(p.port)
    for i = 1, 2000 do c.sock:send(encode({ "SET", "k" .. i % 10, i })) end
    for _ = 1, 2000 do c:read() end
    wait_rewrites(c, 1)
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir })
    assert.equal("2000", client(q.port):call("GET", "k0"))
    assert.matches("rewrote .- from 10 keys", h.slurp(p.err))
  end)

  it("truncates a torn last record with a log line and keeps the rest", function()
    local p = start()
    local c = client(p.port)
    c:call("SET", "a", "1")
    c:call("SET", "b", "2")
    p.signal("TERM")
    assert.equal(0, p.wait(10))
    local path = p.dir .. "/appendonly.aof"
    local whole = h.slurp(path)
    local good = #whole
    -- A record cut in the middle, as a crash during write(2) leaves it.
    h.write_file(path, whole .. encode({ "SET", "c", "3" }):sub(1, 20))
    local q = start({ dir = p.dir })
    assert.matches("the last record is torn %(20 bytes at byte " .. good .. ".-truncated", h.slurp(q.err))
    local d = client(q.port)
    assert.equal("2", d:call("GET", "b"))
    assert.equal(NULL, d:call("GET", "c"))
    assert.equal(good, #h.slurp(path))
    -- Appending goes on from the cut.
    assert.equal("OK", d:call("SET", "c", "4"))
    q.signal("TERM")
    assert.equal(0, q.wait(10))
    local r = start({ dir = p.dir })
    assert.equal("4", client(r.port):call("GET", "c"))
    assert.not_matches("torn", h.slurp(r.err))
  end)

  it("truncates a zero-filled tail, and refuses to start on garbage mid-log", function()
    local dir = h.tmpdir()
    local path = dir .. "/appendonly.aof"
    local good = encode({ "SET", "a", "1" })
    h.write_file(path, good .. string.rep("\0", 100))
    local p = start({ dir = dir })
    assert.matches("torn", h.slurp(p.err))
    assert.equal("1", client(p.port):call("GET", "a"))
    p.stop()
    h.write_file(path, good .. "garbage\r\n" .. encode({ "SET", "b", "2" }))
    local code, _, err = h.run(("%s --port 0 --dir %s"):format(KV, h.shell_quote(dir)))
    assert.equal(1, code)
    assert.matches("record 2 at byte " .. #good .. " is bad", err, 1, true)
  end)

  it("keeps no log with --appendonly no", function()
    local p = start({ args = "--appendonly no" })
    assert.equal("OK", client(p.port):call("SET", "a", "1"))
    assert.is_nil(io.open(p.dir .. "/appendonly.aof"))
  end)
end)

-- -- The process ---------------------------------------------------------------

describe("kv's command line", function()
  it("refuses more than one worker", function()
    local code, _, err = h.run("-w 2 " .. KV .. " --port 0 --appendonly no")
    assert.equal(2, code)
    assert.matches("one worker", err, 1, true)
  end)

  it("refuses an unknown option", function()
    local code, _, err = h.run(KV .. " --bogus")
    assert.equal(2, code)
    assert.matches("bad argument --bogus", err, 1, true)
  end)
end)

-- -- lua-resty-redis through cohost.ngx ----------------------------------------

local has_ngx = pcall(require, "cohost.ngx")
local ngx_it = has_ngx and it or pending

describe("kv with lua-resty-redis", function()
  ngx_it("runs commands, a pipeline and a blocking pop through resty.redis", function()
    local p = start()
    local redis = require "resty.redis"
    local r = redis:new()
    r:set_timeouts(2000, 2000, 2000)
    assert.equal(1, r:connect("127.0.0.1", p.port))
    assert.equal("OK", r:set("dog", "an animal"))
    assert.equal("an animal", r:get("dog"))
    assert.equal(ngx.null, r:get("none"))
    r:init_pipeline()
    r:set("cat", "Marry")
    r:incr("visits")
    r:rpush("list", "a", "b")
    r:lrange("list", 0, -1)
    local res = assert(r:commit_pipeline())
    assert.same({ "OK", 1, 2, { "a", "b" } }, res)
    local ok, err = r:incr("dog")
    assert.is_false(ok)
    assert.equal("ERR value is not an integer or out of range", err)
    assert.equal(ngx.null, r:blpop("empty", 0.2))
    assert.equal(1, r:hset("h", "f", "v"))
    assert.same({ "f", "v" }, r:hgetall("h"))
    assert.equal(1, r:set_keepalive(1000, 10))
  end)
end)

-- -- Transactions ----------------------------------------------------------------

describe("kv's transactions", function()
  it("answer EXEC with a null array when another client changed a WATCHed key", function()
    local p = start()
    local a, b = client(p.port), client(p.port)
    a:call("SET", "w", "1")
    assert.equal("OK", a:call("WATCH", "w", "other"))
    assert.equal("OK", b:call("SET", "w", "2"))
    assert.equal("OK", a:call("MULTI"))
    assert.equal("QUEUED", a:call("INCR", "w"))
    assert.equal(NULL, a:call("EXEC"))
    assert.equal("2", a:call("GET", "w"))
    -- FLUSHALL changes every watched key that existed.
    a:call("WATCH", "w")
    b:call("FLUSHALL")
    a:call("MULTI")
    a:call("SET", "w", "x")
    assert.equal(NULL, a:call("EXEC"))
    -- A write that changed nothing (SET NX on a present key) leaves it be.
    a:call("SET", "w", "1")
    a:call("WATCH", "w")
    assert.equal(NULL, b:call("SET", "w", "9", "NX"))
    a:call("MULTI")
    a:call("INCR", "w")
    assert.same({ 2 }, a:call("EXEC"))
  end)

  it("are logged between MULTI and EXEC, and a log cut inside one loads none of it", function()
    local p = start()
    local c = client(p.port)
    c:call("SET", "before", "1")
    c:call("MULTI")
    c:call("SET", "a", "1")
    c:call("RPUSH", "l", "x", "y")
    assert.same({ "OK", 2 }, c:call("EXEC"))
    p.signal("TERM")
    assert.equal(0, p.wait(10))
    local path = p.dir .. "/appendonly.aof"
    local whole = h.slurp(path)
    assert.matches(encode({ "MULTI" }) .. encode({ "SET", "a", "1" }), whole, 1, true)
    local q = start({ dir = p.dir })
    local d = client(q.port)
    assert.equal("1", d:call("GET", "a"))
    assert.same({ "x", "y" }, d:call("LRANGE", "l", 0, -1))
    q.signal("KILL")
    q.wait(5)
    -- A crash after the transaction's first records: none of it loads,
    -- and the log is cut back to before its MULTI.
    local cut = #whole - #encode({ "EXEC" })
    h.write_file(path, whole:sub(1, cut))
    local r = start({ dir = p.dir })
    assert.matches("the log ends inside a transaction", h.slurp(r.err), 1, true)
    local e = client(r.port)
    assert.equal("1", e:call("GET", "before"))
    assert.equal(NULL, e:call("GET", "a"))
    assert.equal(#encode({ "SET", "before", "1" }), #h.slurp(path))
  end)
end)

-- -- Connections, notifications, more blocking commands --------------------------

describe("kv's connection commands", function()
  it("list and kill clients, say HELLO, and close idle ones past CONFIG SET timeout", function()
    local p = start({ args = "--appendonly no" })
    local a, b = client(p.port), client(p.port)
    assert.equal("OK", b:call("CLIENT", "SETNAME", "victim"))
    local id = b:call("CLIENT", "ID")
    local list = a:call("CLIENT", "LIST")
    assert.matches("id=" .. id .. " addr=[%d.:]+ .- name=victim ", list)
    assert.equal(1, a:call("CLIENT", "KILL", "ID", tostring(id)))
    -- The killed client's next request finds the connection closed.
    b.sock:send(encode({ "PING" }))
    assert.is_nil(b:read())
    local hello = a:call("HELLO", "2")
    assert.same({ "server", "redis", "version", "7.0.0", "proto", 2 }, { unpack(hello, 1, 6) })
    assert.same({ err = "NOPROTO unsupported protocol version" }, a:call("HELLO", "4"))
    assert.equal("OK", a:call("CONFIG", "SET", "timeout", "1"))
    local idle = client(p.port)
    assert.equal("PONG", idle:call("PING"))
    assert.is_nil(idle:read())   -- closed after a second of silence (a too, by now)
    a = client(p.port)
    assert.equal("OK", a:call("CONFIG", "SET", "timeout", "0", "maxclients", "1"))
    local refused = client(p.port)
    assert.same({ err = "ERR max number of clients reached" }, refused:read())
  end)

  it("publish keyspace notifications for the classes set", function()
    local p = start({ args = "--appendonly no" })
    local c, s = client(p.port), client(p.port)
    assert.equal("OK", c:call("CONFIG", "SET", "notify-keyspace-events", "KEA"))
    s:call("PSUBSCRIBE", "__key*__:*")
    c:call("SET", "k", "v")
    c:call("LPUSH", "l", "x")
    c:call("INCR", "n")
    c:call("DEL", "k")
    c:call("SET", "t", "v", "PX", "50")
    local got = {}
    for _ = 1, 14 do
      local m = s:read()
      got[#got + 1] = m[3] .. " " .. m[4]
    end
    assert.same({
      "__keyspace@0__:k set", "__keyevent@0__:set k",
      "__keyspace@0__:l lpush", "__keyevent@0__:lpush l",
      "__keyspace@0__:n incrby", "__keyevent@0__:incrby n",
      "__keyspace@0__:k del", "__keyevent@0__:del k",
      "__keyspace@0__:t set", "__keyevent@0__:set t",
      "__keyspace@0__:t expire", "__keyevent@0__:expire t",
      "__keyspace@0__:t expired", "__keyevent@0__:expired t",
    }, got)
    assert.equal(1, c:call("PUBSUB", "NUMPAT"))
  end)
end)

describe("kv's other blocking commands", function()
  it("wake BLMOVE, BZPOPMIN and BLMPOP when another connection adds, and log what they took", function()
    local p = start()
    local waits = {
      cohost.spawn(function() return client(p.port):call("BLMOVE", "src", "dst", "LEFT", "RIGHT", 5) end),
      cohost.spawn(function() return client(p.port):call("BZPOPMIN", "z", 5) end),
      cohost.spawn(function() return client(p.port):call("BLMPOP", 5, 1, "m", "RIGHT", "COUNT", 2) end),
    }
    local c = client(p.port)
    assert.matches("blocked_clients:3", blocked(c, 3), 1, true)
    c:call("RPUSH", "src", "a", "b")
    c:call("ZADD", "z", 2, "two", 1, "one")
    c:call("RPUSH", "m", "x", "y", "z")
    assert.same({ true, "a" }, { cohost.wait(waits[1]) })
    assert.same({ true, { "z", "one", "1" } }, { cohost.wait(waits[2]) })
    assert.same({ true, { "m", { "z", "y" } } }, { cohost.wait(waits[3]) })
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir })
    local d = client(q.port)
    assert.same({ "b" }, d:call("LRANGE", "src", 0, -1))
    assert.same({ "a" }, d:call("LRANGE", "dst", 0, -1))
    assert.same({ "two" }, d:call("ZRANGE", "z", 0, -1))
    assert.same({ "x" }, d:call("LRANGE", "m", 0, -1))
  end)
end)
