-- OpenResty drivers and a classic C database module, unmodified, on
-- cohost.ngx: Debian's lua-nginx-redis against a real redis-server,
-- lua-nginx-memcached against a real memcached, lua-nginx-websocket's
-- client and server against cohost.websocket, and lua-sql-postgres
-- (LuaSQL, blocking libpq underneath) against a real PostgreSQL. Every
-- server is started by this file on a free loopback port (PostgreSQL in a
-- temporary data directory) and stopped after its block.
local cohost = require "cohost"
local http = require "cohost.http"
local websocket = require "cohost.websocket"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
require "cohost.ngx"

-- -- Background servers --------------------------------------------------

local spawn, stop, wait_port = h.spawn, h.stop_pid, h.wait_port

local function start_redis(extra)
  local port = h.free_port()
  local pid, log = spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no %s")
    :format(port, extra or ""))
  wait_port(port, log)
  return { port = port, pid = pid, log = log }
end

-- -- lua-nginx-redis ---------------------------------------------------------

describe("resty.redis (Debian's lua-nginx-redis, unmodified)", function()
  local redis_mod, srv

  setup(function()
    redis_mod = require "resty.redis"
    srv = start_redis()
  end)

  teardown(function()
    if srv then
      stop(srv.pid)
      os.remove(srv.log)
    end
  end)

  -- A connected client, closed after the test.
  local function client(timeout)
    local red = redis_mod:new()
    red:set_timeout(timeout or 2000)
    assert(red:connect("127.0.0.1", srv.port))
    defer(function() red:close() end)
    return red
  end

  it("is the nginx.redis module found through the resty.* alias", function()
    assert.equal(require "nginx.redis", redis_mod)
    assert.equal("0.27", redis_mod._VERSION)
  end)

  it("sets and gets a key", function()
    local red = client()
    assert.equal("OK", red:set("dog", "an animal"))
    assert.equal("an animal", red:get("dog"))
  end)

  it("gives ngx.null for a missing key", function()
    local red = client()
    red:del("no:such:key")
    local res, err = red:get("no:such:key")
    assert.is_nil(err)
    assert.equal(ngx.null, res)
  end)

  it("returns false and the server's ERR for a bad command", function()
    local red = client()
    local res, err = red:nosuchcommand("x")
    assert.is_false(res)
    assert.matches("^ERR unknown command", err)
    -- The connection is still usable afterwards.
    assert.equal("PONG", red:ping())
  end)

  it("runs a pipeline with init_pipeline and commit_pipeline", function()
    local red = client()
    red:init_pipeline()
    red:set("cat", "Marry")
    red:set("horse", "Bob")
    red:get("cat")
    red:get("horse")
    red:get("no:such:key")
    local results, err = red:commit_pipeline()
    assert.is_nil(err)
    assert.same({ "OK", "OK", "Marry", "Bob", ngx.null }, results)
  end)

  it("runs MULTI/EXEC and reports an error inside the transaction", function()
    local red = client()
    assert.equal("OK", red:set("word", "not a number"))
    assert.equal("OK", red:multi())
    assert.equal("QUEUED", red:set("dog", "an animal"))
    assert.equal("QUEUED", red:incr("word"))   -- fails at EXEC time
    assert.equal("QUEUED", red:get("dog"))
    local res, err = red:exec()
    assert.is_nil(err)
    assert.equal("OK", res[1])
    assert.is_false(res[2][1])
    assert.matches("^ERR value is not an integer", res[2][2])
    assert.equal("an animal", res[3])
  end)

  it("subscribes and keeps the subscription across read_reply timeouts", function()
    local sub = client()
    local pub = client()
    assert.same({ "subscribe", "news", 1 }, sub:subscribe("news"))
    sub:set_timeout(100)
    for _ = 1, 3 do   -- a read timeout is not fatal: retry
      local res, err = sub:read_reply()
      assert.is_nil(res)
      assert.equal("timeout", err)
    end
    assert.equal(1, pub:publish("news", "hello"))
    sub:set_timeout(2000)
    assert.same({ "message", "news", "hello" }, sub:read_reply())
    assert.same({ "unsubscribe", "news", 0 }, sub:unsubscribe("news"))
    assert.equal("PONG", sub:ping())
  end)

  it("reuses a connection put back with set_keepalive", function()
    local red = redis_mod:new()
    red:set_timeout(2000)
    assert(red:connect("127.0.0.1", srv.port))
    assert.equal(0, red:get_reused_times())
    assert.equal("OK", red:set("k", "v"))
    assert.equal(1, red:set_keepalive(10000, 10))
    local again = redis_mod:new()
    again:set_timeout(2000)
    assert(again:connect("127.0.0.1", srv.port))
    defer(function() again:close() end)
    assert.equal(1, again:get_reused_times())
    assert.equal("v", again:get("k"))
  end)

  it("gives 'timeout' for a blpop outlasting the read timeout", function()
    local red = client(100)
    red:del("empty:list")
    local t0 = cohost.monotonic()
    local res, err = red:blpop("empty:list", 2)
    assert.is_nil(res)
    assert.equal("timeout", err)
    assert.is_true(cohost.monotonic() - t0 < 1.5)
  end)

  it("gives exactly 'connection refused' for a closed port", function()
    local red = redis_mod:new()
    red:set_timeout(1000)
    local ok, err = red:connect("127.0.0.1", h.free_port())
    assert.is_nil(ok)
    assert.equal("connection refused", err)
  end)

  it("authenticates with AUTH against requirepass", function()
    local secure = start_redis("--requirepass s3cret")
    defer(function()
      stop(secure.pid)
      os.remove(secure.log)
    end)
    local red = redis_mod:new()
    red:set_timeout(2000)
    assert(red:connect("127.0.0.1", secure.port))
    defer(function() red:close() end)
    local res, err = red:get("x")
    assert.is_false(res)
    assert.matches("^NOAUTH", err)
    res, err = red:auth("wrong")
    assert.is_false(res)
    assert.matches("WRONGPASS", err)
    assert.equal("OK", red:auth("s3cret"))
    assert.equal("OK", red:set("x", "1"))
    assert.equal("1", red:get("x"))
  end)

  it("serves many coroutines over pooled connections at once", function()
    local results = h.run_all(20, function(i)
      local red = redis_mod:new()
      red:set_timeout(2000)
      assert(red:connect("127.0.0.1", srv.port))
      assert.equal("OK", red:set("n:" .. i, tostring(i)))
      local v = red:get("n:" .. i)
      assert(red:set_keepalive(10000, 20))
      return v
    end)
    for i = 1, 20 do assert.equal(tostring(i), results[i]) end
  end)
end)

-- -- lua-nginx-memcached -------------------------------------------------------

describe("resty.memcached (Debian's lua-nginx-memcached, unmodified)", function()
  local memcached, srv

  setup(function()
    memcached = require "resty.memcached"
    local port = h.free_port()
    local pid, log = spawn(("memcached -l 127.0.0.1 -p %d -U 0 -u nobody -m 16"):format(port))
    srv = { port = port, pid = pid, log = log }
    wait_port(port, log)
  end)

  teardown(function()
    if srv then
      stop(srv.pid)
      os.remove(srv.log)
    end
  end)

  local function client()
    local memc = assert(memcached:new())
    memc:set_timeout(2000)
    assert(memc:connect("127.0.0.1", srv.port))
    defer(function() memc:close() end)
    return memc
  end

  it("sets, gets with flags, and misses with nil", function()
    local memc = client()
    assert.equal(1, memc:flush_all())
    assert.equal(1, memc:set("dog key", "an animal", 0, 7))   -- keys are escaped
    local value, flags, err = memc:get("dog key")
    assert.equal("an animal", value)
    assert.equal("7", flags)
    assert.is_nil(err)
    value, flags, err = memc:get("nothing")
    assert.is_nil(value)
    assert.is_nil(flags)
    assert.is_nil(err)
  end)

  it("refuses add on an existing key and counts with incr", function()
    local memc = client()
    assert.equal(1, memc:set("counter", "10"))
    local ok, err = memc:add("counter", "1")
    assert.is_nil(ok)
    assert.equal("NOT_STORED", err)
    assert.equal("15", memc:incr("counter", 5))
    assert.equal(1, memc:delete("counter"))
    ok, err = memc:delete("counter")
    assert.is_nil(ok)
    assert.equal("NOT_FOUND", err)
  end)

  it("gets several keys at once", function()
    local memc = client()
    memc:set("a", "1")
    memc:set("b", "2")
    local res = memc:get({ "a", "b", "c" })
    assert.same({ "1", "0" }, res.a)
    assert.same({ "2", "0" }, res.b)
    assert.is_nil(res.c)
  end)

  it("reuses a connection put back with set_keepalive", function()
    local memc = assert(memcached:new())
    assert(memc:connect("127.0.0.1", srv.port))
    assert.equal(1, memc:set_keepalive(10000, 10))
    local again = client()
    assert.equal(1, again:get_reused_times())
    assert.matches("^%d+%.%d+", again:version())
  end)
end)

-- -- lua-nginx-websocket -------------------------------------------------------

describe("resty.websocket (Debian's lua-nginx-websocket, unmodified)", function()
  it("client talks to a cohost.websocket server", function()
    local port = h.http_serve(function(req, res)
      local ws = websocket.upgrade(req, res, { timeout = 2000 })
      if not ws then return end
      while true do
        local data, typ = ws:recv()
        if not data or typ == "close" then break end
        ws:send("echo: " .. data, typ)
      end
      ws:close()
    end)
    local client = require "resty.websocket.client"
    local wb = assert(client:new({ timeout = 2000 }))
    assert(wb:connect("ws://127.0.0.1:" .. port .. "/chat"))
    assert(wb:send_text("hello"))
    local data, typ = wb:recv_frame()
    assert.equal("echo: hello", data)
    assert.equal("text", typ)
    assert(wb:send_binary("\0\1\2"))
    data, typ = wb:recv_frame()
    assert.equal("echo: \0\1\2", data)
    assert.equal("binary", typ)
    assert(wb:send_close(1000, "bye"))
    data, typ = wb:recv_frame()
    assert.equal("close", typ)
    wb:close()
  end)

  it("server (ngx.req.socket(true) over res:hijack) talks to a cohost.websocket client", function()
    local server = require "resty.websocket.server"
    local seen = {}
    local port = h.http_serve(function()
      local wb, err = server:new({ timeout = 2000, max_payload_len = 65535 })
      if not wb then
        seen.err = err
        return ngx.exit(400)
      end
      while true do
        local data, typ = wb:recv_frame()
        if not data and typ ~= "close" then break end
        if typ == "close" then
          wb:send_close(1000, "done")
          break
        end
        if typ == "text" then wb:send_text(data:upper()) end
      end
    end)
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. port .. "/", { timeout = 2000 }))
    assert(ws:send("shout"))
    local data, typ = ws:recv()
    assert.is_nil(seen.err)
    assert.equal("SHOUT", data)
    assert.equal("text", typ)
    ws:close()
  end)

  it("server refuses a plain GET with the driver's own error", function()
    local server = require "resty.websocket.server"
    local err_seen
    local port = h.http_serve(function()
      local wb, err = server:new()
      if not wb then
        err_seen = err
        return ngx.exit(400)
      end
    end)
    local res = assert(http.request("http://127.0.0.1:" .. port .. "/"))
    assert.equal(400, res.status)
    assert.equal('bad "upgrade" request header: nil', err_seen)
  end)
end)

-- -- lua-sql-postgres (LuaSQL) ---------------------------------------------------

describe("luasql.postgres (Debian's lua-sql-postgres, unmodified)", function()
  local pg   -- h.postgres(): { port, stop }

  setup(function() pg = h.postgres() end)
  teardown(function() if pg then pg.stop() end end)

  -- A LuaSQL connection; it and its environment close after the test.
  local function connect()
    local driver = require "luasql.postgres"
    local env = assert(driver.postgres())
    local conn = assert(env:connect("postgres", "postgres", nil, "127.0.0.1", pg.port))
    return conn, env
  end

  it("runs a query and fetches its rows", function()
    local conn, env = connect()
    defer(function() conn:close(); env:close() end)
    local cur = assert(conn:execute("SELECT 1 + 1 AS two, 'cohost'::text AS name"))
    local row = cur:fetch({}, "a")
    assert.equal("2", tostring(row.two))
    assert.equal("cohost", row.name)
    cur:close()
  end)

  it("runs 20 handlers of SELECT pg_sleep(1) in about 1 s while an echo client is served", function()
    -- The handlers are HTTP requests to an in-process server, each doing
    -- a blocking LuaSQL query: libpq's reads park only their coroutine.
    local port = h.http_serve(function(req, res)
      local conn, env = connect()
      local cur = assert(conn:execute("SELECT pg_sleep(1), 'done'::text AS d"))
      local row = cur:fetch({}, "a")
      cur:close()
      conn:close()
      env:close()
      res:send(row.d)
    end)
    local _, echo_port = h.serve(function(sock)
      while true do
        local line = sock:receive()
        if not line then return end
        sock:send(line .. "\n")
      end
    end)
    -- The echo client: one round trip every 10 ms; records the longest wait.
    local stop_echo, echoes, worst = false, 0, 0
    local echo = cohost.spawn(function()
      local s = h.connect(echo_port)
      while not stop_echo do
        local t0 = cohost.monotonic()
        s:send("ping\n")
        assert.equal("ping", s:receive())
        worst = math.max(worst, cohost.monotonic() - t0)
        echoes = echoes + 1
        cohost.sleep(0.01)
      end
      s:close()
    end)
    local bodies, took = h.run_all(20, function()
      local r = assert(http.request("http://127.0.0.1:" .. port .. "/", { timeout = 10000 }))
      return r.status .. " " .. r.body
    end)
    stop_echo = true
    assert(cohost.wait(echo))
    for i = 1, 20 do assert.equal("200 done", bodies[i]) end
    assert.is_true(took < 5, ("20 x pg_sleep(1) took %.2f s"):format(took))
    assert.is_true(took >= 1)
    assert.is_true(echoes >= 20, "the echo client got only " .. echoes .. " answers")
    assert.is_true(worst < 0.5, ("an echo waited %.3f s"):format(worst))
  end)
end)
