-- cohost.broadcast across machines through Redis (the backend in
-- lua/cohost/broadcast/redis.lua): a redis-server started here, and
-- examples/chat.lua nodes, each a separate cohost with two workers
-- (threads, or processes) on ports of its own with the same Redis URL. A line said on one node reaches WebSocket
-- and TCP clients on every node, once each, whichever worker holds them;
-- a client's 1,000 lines arrive in order on the other nodes; Redis
-- killed and restarted while a client talks: the nodes keep serving,
-- local delivery never stops, remote delivery resumes, and what was lost
-- is counted on /metrics (and logged once per worker). Then configure's
-- checks, in this process.
local cohost = require "cohost"
local websocket = require "cohost.websocket"
local broadcast = require "cohost.broadcast"
local resp = require "cohost.broadcast.resp"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- -- Parts ------------------------------------------------------------------

local function start_redis(port)
  port = port or h.free_port()
  local pid, log = h.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no"):format(port))
  h.wait_port(port, log)
  return { port = port, pid = pid, log = log }
end

local function stop_redis(r)
  h.stop_pid(r.pid, "KILL")
  os.remove(r.log)
end

-- One command to the Redis on port, on a connection of its own: its reply.
local function redis_call(port, ...)
  local sock = h.connect(port, 5000)
  assert(sock:send(resp.command(...)))
  local r, err = resp.read(sock)
  sock:close()
  assert(r ~= nil, err)
  return r
end

-- How many connections are subscribed to chat's room.
local function room_subscribers(port)
  return redis_call(port, "PUBSUB", "NUMSUB", "cohost:broadcast:chat")[2]
end

-- examples/chat.lua on free ports, in the room on redis_port's Redis,
-- with a status endpoint for /metrics; two workers: threads (-w 2), or
-- processes (workers = "--processes 2").
local function start_node(redis_port, workers)
  local n = { port = h.free_port(), web = h.free_port(), status = h.free_port() }
  n.pid, n.log = h.spawn(("timeout 120 %s %s --status-addr 127.0.0.1:%d examples/chat.lua %d %d redis://127.0.0.1:%d")
    :format(h.COHOST, workers or "-w 2", n.status, n.port, n.web, redis_port))
  h.wait_port(n.port, n.log)
  h.wait_port(n.web, n.log)
  h.wait_port(n.status, n.log)
  return n
end

local function stop_node(n)
  h.stop_pid(n.pid)
  os.remove(n.log)
end

-- The value of an unlabelled series on node n's /metrics (0 if absent).
local function metric(n, name)
  local code, body = h.get_to_close(n.status, "/metrics")
  assert.equal(200, code, body)
  return tonumber(body:match("\n" .. name .. " (%S+)")) or 0
end

-- A client, as { recv = fn -> line or nil, err; send = fn(line); close,
-- worker }: recv gives every line the room sends it.
local function tcp_client(n, name)
  local sock = h.connect(n.port, 10000)
  defer(function() sock:close() end)
  assert.equal("name? ", sock:receive(6))
  assert(sock:send(name .. "\n"))
  -- Its own join comes once its worker's subscription is confirmed.
  repeat
    local line = assert(sock:receive("*l"))
  until line == "* " .. name .. " joined"
  return {
    recv = function() return sock:receive("*l") end,
    send = function(line) return assert(sock:send(line .. "\n")) end,
    close = function() sock:close() end,
  }
end

local function ws_client(n, name)
  local ws = assert(websocket.connect(("ws://127.0.0.1:%d/ws?name=%s"):format(n.web, name), { timeout = 10000 }))
  defer(function() ws:close() end)
  local worker, early = nil, {}
  repeat
    local msg = assert(ws:recv())
    worker = msg:match("^%* you are " .. name .. " on worker (%d+)$")
    if not worker then early[#early + 1] = msg end
  until worker
  return {
    recv = function()
      if #early > 0 then return table.remove(early, 1) end
      return ws:recv()
    end,
    send = function(line) return assert(ws:send(line)) end,
    close = function() ws:close() end,
    worker = worker,
  }
end

-- WebSocket clients on node n, named prefix1, prefix2, ..., until they sit
-- on both of its workers (the kernel spreads connections; 40 at most).
local function spread(n, prefix)
  local clients, workers = {}, {}
  while #clients < 2 or (not next(workers, next(workers)) and #clients < 40) do
    local c = ws_client(n, prefix .. (#clients + 1))
    clients[#clients + 1] = c
    workers[c.worker] = true
  end
  local distinct = 0
  for _ in pairs(workers) do distinct = distinct + 1 end
  assert.equal(2, distinct, "all clients of a node on one worker")
  return clients
end

-- Reads c's lines until done(line, seen) is true; returns how often each
-- line came (added to seen, if given).
local function read_until(c, done, seen)
  local order = {}
  seen = seen or {}
  while true do
    local line, err = c.recv()
    assert(line, (err or "") .. "; had: " .. table.concat(order, " | "))
    order[#order + 1] = line
    seen[line] = (seen[line] or 0) + 1
    if done(line, seen) then return seen end
  end
end

-- -- Three nodes ------------------------------------------------------------

describe("cohost.broadcast over Redis, three chat nodes", function()
  local redis, nodes

  setup(function()
    redis = start_redis()
    -- Node 3's two workers are processes: its own messages, which Redis
    -- hands back to both, are told apart by the name they share.
    nodes = { start_node(redis.port), start_node(redis.port), start_node(redis.port, "--processes 2") }
  end)

  teardown(function()
    for _, n in ipairs(nodes or {}) do stop_node(n) end
    if redis then stop_redis(redis) end
  end)

  it("a line said on node 3 reaches a WebSocket client on node 1 and a TCP client on node 2, once each, and every client of node 3 once", function()
    local on1 = spread(nodes[1], "a")
    local b = tcp_client(nodes[2], "b")
    local on3 = spread(nodes[3], "c")
    local t = tcp_client(nodes[3], "t")
    t.send("hello")
    t.send("end")
    -- Once a1 has "t: end", a1's "fin" is published after Redis handed
    -- every node "t: hello" and "t: end": a copy of those that a node
    -- failed to drop (its own, echoed) or delivered twice comes before
    -- "fin" on each worker's connection.
    local first = read_until(on1[1], function(line) return line == "t: end" end)
    on1[1].send("fin")
    local everyone = { b, t }
    for _, c in ipairs(on1) do everyone[#everyone + 1] = c end
    for _, c in ipairs(on3) do everyone[#everyone + 1] = c end
    for i, c in ipairs(everyone) do
      local seen = read_until(c, function(_, s) return s["t: end"] and s["a1: fin"] end,
                              c == on1[1] and first or nil)
      assert.equal(1, seen["t: hello"], "client " .. i)
      assert.equal(1, seen["t: end"], "client " .. i)
      assert.equal(1, seen["a1: fin"], "client " .. i)
    end
    for _, n in ipairs(nodes) do assert.equal(0, metric(n, "cohost_broadcast_redis_unsent_total")) end
    -- One subscriber connection per worker with clients: both of node 1's
    -- and of node 3's, one of node 2's; none once every client has left.
    assert.equal(5, room_subscribers(redis.port))
    for _, c in ipairs(everyone) do c.close() end
    assert.is_true(h.wait_for(function() return room_subscribers(redis.port) == 0 end))
  end)

  it("a message another Redis client publishes reaches the room as it is", function()
    local a, b = ws_client(nodes[1], "a"), tcp_client(nodes[2], "b")
    assert.equal(2, redis_call(redis.port, "PUBLISH", "cohost:broadcast:chat", "* the admin says hi"))
    for _, c in ipairs { a, b } do
      read_until(c, function(line) return line == "* the admin says hi" end)
    end
  end)

  it("a client's 1,000 lines arrive in order, once each, on the other nodes", function()
    local r1 = ws_client(nodes[1], "r1")
    local r2 = tcp_client(nodes[2], "r2")
    local p = tcp_client(nodes[3], "p")
    local lines = {}
    for i = 1, 1000 do lines[i] = "m" .. i .. "\n" end
    assert(p.send(table.concat(lines):sub(1, -2)))
    for _, c in ipairs { r1, r2 } do
      local got = {}
      repeat
        local line = assert(c.recv())
        local i = line:match("^p: m(%d+)$")
        if i then got[#got + 1] = tonumber(i) end
      until i == "1000"
      assert.equal(1000, #got)
      for i = 1, 1000 do
        if got[i] ~= i then error(("line %d is m%s"):format(i, tostring(got[i]))) end
      end
    end
  end)

  it("a burst from Redis does not overflow a subscriber that keeps reading (queue 100, 5,000 messages)", function()
    -- The receiving worker reads what Redis sent without parking; it must
    -- still let the subscriber's task run between messages.
    local sub_script = h.tmpfile(([[
local cohost = require "cohost"
local broadcast = require "cohost.broadcast"
broadcast.configure{ backend = "redis", url = "redis://127.0.0.1:%d" }
local sub = broadcast.subscribe("burst", { queue = 100 })
io.write("ready\n")
io.stdout:flush()
local n, err = 0
while n < 5000 do
  local m
  m, err = sub:receive(10)
  if not m then break end
  n = n + 1
end
io.write(n, " ", tostring(err), "\n")
io.stdout:flush()
cohost.exit(0)
]]):format(redis.port))
    local pid, out = h.spawn(("timeout 60 %s %s"):format(h.COHOST, h.shell_quote(sub_script)))
    defer(function() h.stop_pid(pid); os.remove(out) end)
    assert.is_true(h.wait_for(function() return h.slurp(out):find("ready\n", 1, true) end), h.slurp(out))
    local code, _, err = h.run_script(([[
local cohost = require "cohost"
local broadcast = require "cohost.broadcast"
broadcast.configure{ backend = "redis", url = "redis://127.0.0.1:%d" }
for i = 1, 5000 do assert(broadcast.publish("burst", "message " .. i)) end
while broadcast.stats().redis_queued > 0 do cohost.sleep(0.001) end
cohost.exit(0)
]]):format(redis.port))
    assert.equal(0, code, err)
    assert.is_true(h.wait_for(function() return h.slurp(out):find("\n%d+ %S+\n") end), h.slurp(out))
    assert.equal("ready\n5000 nil\n", h.slurp(out))
  end)
end)

-- -- Redis killed and restarted ---------------------------------------------

describe("cohost.broadcast over Redis, Redis killed and restarted mid-stream", function()
  it("keeps serving and delivering locally, resumes remote delivery, and counts what was lost", function()
    local redis = start_redis()
    defer(function() stop_redis(redis) end)
    local P, R = start_node(redis.port), start_node(redis.port)
    defer(function() stop_node(P); stop_node(R) end)
    local remote = ws_client(R, "r")   -- on R: the only client there
    local watcher = tcp_client(P, "w") -- on P, beside the talker
    local p = tcp_client(P, "p")

    -- p says k1, k2, ... every 5 ms until told to stop; the two others
    -- note the numbers they get, until "p: last".
    local said, stop = 0, false
    local talker = cohost.spawn(function()
      while not stop do
        said = said + 1
        p.send("k" .. said)
        cohost.sleep(0.005)
      end
      p.send("last")
    end)
    defer(function() stop = true end)   -- should the test fail before it stops
    local function collect(c)
      local got = { n = 0 }
      got.thread = cohost.spawn(function()
        while true do
          local line = c.recv()
          if not line then return end   -- closed after a failed test
          if line == "p: last" then
            got.last = true
            return
          end
          local i = line:match("^p: k(%d+)$")
          if i then
            got.n = got.n + 1
            got[got.n] = tonumber(i)
          end
        end
      end)
      return got
    end
    local far, near = collect(remote), collect(watcher)

    assert.is_true(h.wait_for(function() return far.n >= 20 end), "no line reached the other node")
    h.stop_pid(redis.pid, "KILL")
    -- P's publisher finds Redis gone; its own node still hears p.
    assert.is_true(h.wait_for(function() return metric(P, "cohost_broadcast_redis_unsent_total") > 0 end))
    local n = near.n
    assert.is_true(h.wait_for(function() return near.n >= n + 20 end), "local delivery stopped")
    assert.equal(200, (h.get_to_close(R.web, "/")))
    -- A newcomer joins at once with Redis down (its own join is local).
    tcp_client(R, "x").send("/quit")

    redis = start_redis(redis.port)
    local at_restart = said
    assert.is_true(h.wait_for(function() return far.n > 0 and far[far.n] > at_restart end, 15),
                   "remote delivery did not resume")
    stop = true
    assert.is_true((cohost.wait(talker)))
    assert.is_true((cohost.wait(far.thread)))
    assert.is_true((cohost.wait(near.thread)))
    assert.is_true(far.last and near.last)

    -- Local: every line, in order. Remote: in order, none twice, some
    -- lost; and the loss is counted: the lines P could not hand to Redis
    -- plus those R's worker did not get from it.
    assert.equal(said, near.n)
    for i = 1, said do assert.equal(i, near[i]) end
    for i = 2, far.n do assert.is_true(far[i] > far[i - 1], "out of order or twice at " .. i) end
    local lost = said - far.n
    assert.is_true(lost > 0)
    assert.equal(lost, metric(P, "cohost_broadcast_redis_unsent_total") + metric(R, "cohost_broadcast_redis_missed_total"))

    -- Logged once per outage, not per message: a worker that lost Redis
    -- says so once, and once that it is back (a worker whose last
    -- subscriber left during the outage, as x's may have, has not said
    -- that yet).
    for _, node in ipairs { P, R } do
      local per, both
      assert.is_true(h.wait_for(function()
        per, both = {}, false
        for w, what in h.slurp(node.log):gmatch("w(%d+) c%d+: [^\n]- cohost%.broadcast: redis %S+ (%a+)") do
          per[w] = per[w] or { unreachable = 0, back = 0 }
          if per[w][what] then per[w][what] = per[w][what] + 1 end
          both = both or (per[w].unreachable > 0 and per[w].back > 0)
        end
        return both
      end), h.slurp(node.log))
      for w, c in pairs(per) do
        assert.equal(1, c.unreachable, "worker " .. w .. ": " .. h.slurp(node.log))
        assert.is_true(c.back <= 1, "worker " .. w)
      end
    end
  end)
end)

-- -- Redis unreachable --------------------------------------------------------

describe("cohost.broadcast over Redis, with no Redis", function()
  it("subscribe does not wait; publish delivers on this node and returns nil, err; counted", function()
    local port = h.free_port()   -- nothing listens there
    local code, out, err = h.run_script(([[
local cohost = require "cohost"
local broadcast = require "cohost.broadcast"
broadcast.configure{ backend = "redis", url = "redis://127.0.0.1:%d", timeout = 10 }
local t0 = cohost.monotonic()
local sub = broadcast.subscribe("c")
local waited = cohost.monotonic() - t0
local ok, perr = broadcast.publish("c", "one")
local st = broadcast.stats()
io.write(table.concat({ tostring(waited < 5), tostring(ok), perr, sub:receive(1), tostring(st.redis_up),
                        st.redis_unsent }, ","), "\n")
io.stdout:flush()
cohost.exit(0)
]]):format(port))
    assert.equal(0, code, err)
    assert.equal("true,nil,redis: connection refused,one,false,1\n", out)
    assert.matches("cohost.broadcast: redis 127.0.0.1:" .. port .. " unreachable (subscriber: connection refused)", err, 1, true)
  end)
end)

-- -- configure ----------------------------------------------------------------

describe("broadcast.configure", function()
  it("refuses bad options with a clear error", function()
    assert.has_error(function() broadcast.configure("redis") end, "bad options: table expected")
    assert.has_error(function() broadcast.configure { backend = "kafka" } end,
                     'bad backend: "local" or "redis" expected')
    assert.has_error(function() broadcast.configure { backend = "redis", url = "http://x" } end,
                     "broadcast.configure: bad url http://x: redis://[[user]:password@]host[:port][/db] expected")
    assert.has_error(function() broadcast.configure { backend = "redis", urls = "redis://x" } end,
                     "broadcast.configure: unknown option urls")
    assert.has_error(function() broadcast.configure { backend = "redis", timeout = 0 } end,
                     "broadcast.configure: bad timeout: seconds > 0 expected")
  end)

  it("reads redis:// URLs: user, password (%-escaped), host (IPv6 in brackets), port, db", function()
    assert.same({ host = "10.0.0.5", port = 6379, db = 0 }, resp.parse_url("redis://10.0.0.5"))
    assert.same({ host = "r.internal", port = 7000, db = 3, password = "p@ss:w" },
                resp.parse_url("redis://:p%40ss%3aw@r.internal:7000/3"))
    assert.same({ host = "::1", port = 6380, db = 0, user = "app", password = "pw" },
                resp.parse_url("redis://app:pw@[::1]:6380/"))
    for _, bad in ipairs { "redis://", "rediss://h", "redis://h:99999", "redis://h/x", "redis://pw@h" } do
      assert.is_nil((resp.parse_url(bad)), bad)
    end
  end)

  it("must come before the first subscribe or publish", function()
    local s = broadcast.subscribe("early")
    s:close()
    assert.has_error(function() broadcast.configure { backend = "redis" } end,
                     "broadcast.configure: call it before the first subscribe or publish (in the main chunk)")
  end)
end)
