-- cohost.broadcast: publish/subscribe within a worker (in this process),
-- across worker threads (a child cohost -w 3), and examples/chat.lua with
-- six WebSocket clients spread over the workers of -w 2 and of
-- --processes 2, each receiving every message.
local cohost = require "cohost"
local websocket = require "cohost.websocket"
local broadcast = require "cohost.broadcast"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

describe("cohost.broadcast in one worker", function()
  it("delivers every message of a channel to each of its subscribers, in order", function()
    local a, b = broadcast.subscribe("news"), broadcast.subscribe("news")
    local other = broadcast.subscribe("sport")
    defer(function() a:close(); b:close(); other:close() end)
    assert.is_true(broadcast.publish("news", "one"))
    assert.is_true(broadcast.publish("news", "two"))
    for _, s in ipairs { a, b } do
      assert.equal("one", s:receive(1))
      assert.equal("two", s:receive(1))
    end
    assert.same({ nil, "timeout" }, { other:receive(0.01) })
  end)

  it("wakes a parked subscriber when a message comes", function()
    local s = broadcast.subscribe("wake")
    defer(function() s:close() end)
    local got
    local t = cohost.spawn(function() got = { s:receive(10) } end)
    cohost.sleep(0)   -- the receiver parks
    broadcast.publish("wake", "now")
    assert.is_true((cohost.wait(t)))
    assert.same({ "now" }, got)
  end)

  it("close ends a parked receive with 'closed' and unsubscribes", function()
    local s = broadcast.subscribe("bye")
    local got
    local t = cohost.spawn(function() got = { s:receive(10) } end)
    cohost.sleep(0)
    s:close()
    cohost.wait(t)
    assert.same({ nil, "closed" }, got)
    local before = broadcast.stats().delivered
    broadcast.publish("bye", "x")
    assert.equal(before, broadcast.stats().delivered)
  end)

  it("a full queue closes its subscriber, which gets what was queued, then 'overflow'; the publisher never waits", function()
    local slow = broadcast.subscribe("flood", { queue = 3 })
    local fast = broadcast.subscribe("flood", { queue = 100000 })
    defer(function() slow:close(); fast:close() end)
    for i = 1, 10000 do assert.is_true(broadcast.publish("flood", tostring(i))) end
    assert.equal("1", slow:receive(0))
    assert.equal("2", slow:receive(0))
    assert.equal("3", slow:receive(0))
    assert.same({ nil, "overflow" }, { slow:receive(0) })
    assert.equal(10000, fast:len())
  end)

  it("refuses a message over the size limit and bad arguments", function()
    assert.same({ nil, "message too large" }, { broadcast.publish("c", ("x"):rep(broadcast.MAX)) })
    assert.has_error(function() broadcast.publish("c", 1) end, "bad message: string expected")
    assert.has_error(function() broadcast.subscribe(nil) end, "bad channel: string expected")
  end)
end)

describe("cohost.broadcast across worker threads", function()
  it("every worker's subscriber gets every worker's messages", function()
    -- Each worker subscribes, counts itself in a shared dict, waits for
    -- the others, publishes one message and reads the three.
    local code, out, err = h.run_script([[
local cohost = require "cohost"
local broadcast = require "cohost.broadcast"
local dict = require("cohost.shared").new("ready", "64k")
local sub = broadcast.subscribe("all")
dict:incr("n", 1, 0)
while dict:get("n") < 3 do cohost.sleep(0.005) end
broadcast.publish("all", "from " .. cohost.worker_id())
local got = {}
for i = 1, 3 do got[i] = assert(sub:receive(10)) end
table.sort(got)
-- One string, one write: the pieces of io.write(a, b, c) from three
-- threads interleave on stdout.
io.write(cohost.worker_id() .. ": " .. table.concat(got, ",") .. "\n")
sub:close()
]], "-w 3")
    assert.equal(0, code, err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    table.sort(lines)
    assert.same({ "0: from 0,from 1,from 2", "1: from 0,from 1,from 2", "2: from 0,from 1,from 2" }, lines)
  end)
end)

-- examples/chat.lua's web door: n WebSocket clients, spread over at least
-- two workers (the kernel picks: more clients are connected while all sit
-- on one, 40 at most), each told its worker once it is in the room.
local function chat_clients(web_port, n)
  local clients, workers, distinct = {}, {}, 0
  while #clients < n or (distinct < 2 and #clients < 40) do
    local i = #clients + 1
    local ws = assert(websocket.connect(("ws://127.0.0.1:%d/ws?name=c%d"):format(web_port, i), { timeout = 10000 }))
    local worker
    repeat
      local msg = assert(ws:recv())
      worker = msg:match("^%* you are c%d+ on worker (%d+)$")
    until worker
    clients[i] = ws
    if not workers[worker] then
      workers[worker] = true
      distinct = distinct + 1
    end
  end
  return clients, distinct
end

local function chat_spreads(opts)
  local port, web_port = h.free_port(), h.free_port()
  local pid, log = h.spawn(("timeout 60 %s %s examples/chat.lua %d %d"):format(h.COHOST, opts, port, web_port))
  defer(function() h.stop_pid(pid) end)
  h.wait_port(port, log)
  h.wait_port(web_port, log)
  local clients, distinct = chat_clients(web_port, 6)
  defer(function() for _, ws in ipairs(clients) do ws:close() end end)
  assert.is_true(distinct >= 2, "all clients on one worker")
  for i, ws in ipairs(clients) do assert(ws:send("hello from " .. i)) end
  for i, ws in ipairs(clients) do
    local want = {}
    for j = 1, #clients do want[("c%d: hello from %d"):format(j, j)] = true end
    local left = #clients
    while left > 0 do
      local msg, e = ws:recv()
      assert(msg, ("client %d: %s; still waiting for %d messages"):format(i, tostring(e), left))
      if want[msg] then
        want[msg] = nil
        left = left - 1
      end
    end
  end
end

describe("examples/chat.lua through cohost.broadcast", function()
  it("6 WebSocket clients over 2 worker threads all receive every message", function()
    chat_spreads("-w 2")
  end)

  it("6 WebSocket clients over 2 worker processes all receive every message", function()
    chat_spreads("--processes 2")
  end)

  it("serves its page", function()
    local port, web_port = h.free_port(), h.free_port()
    local pid, log = h.spawn(("timeout 60 %s examples/chat.lua %d %d"):format(h.COHOST, port, web_port))
    defer(function() h.stop_pid(pid) end)
    h.wait_port(web_port, log)
    local res = assert(require("cohost.http").request(("http://127.0.0.1:%d/"):format(web_port)))
    assert.equal(200, res.status)
    assert.matches("new WebSocket", res.body, 1, true)
  end)
end)
