-- Debian's LuaSocket (`require "socket"`), unmodified, inside cohost: its
-- classic C functions block in the hooked libc calls (connect, recv,
-- poll, select, nanosleep), so each wait parks only the calling coroutine
-- and the worker keeps serving the others. Servers are cohost listeners
-- on 127.0.0.1 port 0 in this same process: they can only answer if the
-- LuaSocket calls really park.
local cohost = require "cohost"
local socket = require "socket"

local h = require "spec.helper"
local defer = h.cleanups(after_each)
local serve = h.serve

-- Replies "<line> done" after delay seconds, once per line.
local function slow_replier(delay)
  return function(sock)
    while true do
      local line = sock:receive()
      if not line then return end
      cohost.sleep(delay)
      if not sock:send(line .. " done\n") then return end
    end
  end
end

-- A LuaSocket TCP client (timeout 2 s) connected to 127.0.0.1:port,
-- closed after the test.
local function client(port)
  local c = socket.tcp()
  c:settimeout(2)
  assert(c:connect("127.0.0.1", port))
  defer(function() c:close() end)
  return c
end

-- Measures receive() (see h.measure) while another coroutine runs send()
-- 0.2 s after it starts; returns what h.measure does once send is done.
-- The sender starts inside the measure: started before it, its 0.2 s
-- would overlap the measure's warm-up (longer on a loaded machine).
local function measure_until(send, receive)
  local sender
  local res = { h.measure(function()
    sender = cohost.spawn(function()
      cohost.sleep(0.2)
      send()
    end)
    return receive()
  end) }
  cohost.wait(sender)
  return unpack(res, 1, table.maxn(res))
end

describe("LuaSocket inside cohost", function()
  it("lets 50 concurrent handlers each fetch from a server answering after 1 s in about 1 s, not 50", function()
    local _, bport = serve(slow_replier(1))
    -- Each connection's handler fetches from the backend with LuaSocket.
    local _, fport = serve(function(sock)
      local req = sock:receive()
      local c = socket.tcp()
      c:settimeout(30)
      assert(c:connect("127.0.0.1", bport))
      assert(c:send(req .. "\n"))
      local reply, err = c:receive("*l")
      c:close()
      sock:send((reply or ("error " .. tostring(err))) .. "\n")
    end)
    local t0 = cohost.monotonic()
    local clients = {}
    for i = 1, 50 do
      clients[i] = cohost.spawn(function()
        local s = h.connect(fport, 30000)
        s:send("req" .. i .. "\n")
        local line, err = s:receive()
        s:close()
        return line or err
      end)
    end
    for i = 1, 50 do
      assert.same({ true, "req" .. i .. " done" }, { cohost.wait(clients[i]) })
    end
    local elapsed = cohost.monotonic() - t0
    assert.is_true(elapsed >= 0.95, ("finished after %.2f s"):format(elapsed))
    assert.is_true(elapsed < 10, ("took %.2f s: LuaSocket blocked the worker"):format(elapsed))
  end)

  it("connects, sends and receives a line, parking while the server thinks", function()
    local _, port = serve(slow_replier(0.2))
    local moved, took, line = h.measure(function()
      local c = socket.tcp()   -- default timeout: block forever
      assert(c:connect("127.0.0.1", port))
      assert.equal(6, c:send("hello\n"))
      local line = c:receive("*l")
      c:close()
      return line
    end)
    assert.equal("hello done", line)
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("reports 'connection refused' for a port nobody listens on", function()
    local l, port = serve(function() end)
    l:close()
    local c = socket.tcp()
    c:settimeout(2)
    local ok, err = c:connect("127.0.0.1", port)
    c:close()
    assert.is_nil(ok)
    assert.equal("connection refused", err)
  end)

  it("socket.sleep parks only the caller", function()
    local moved, took = h.measure(function() socket.sleep(0.2) end)
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("accepts on a LuaSocket server while a cohost client connects later", function()
    local srv = assert(socket.bind("127.0.0.1", 0))
    defer(function() srv:close() end)
    local _, port = srv:getsockname()
    srv:settimeout(5)
    local moved, took, line = measure_until(function()
      local s = cohost.tcp()
      assert(s:connect("127.0.0.1", tonumber(port)))
      s:send("over luasocket\n")
      s:close()
    end, function()
      local conn = assert(srv:accept())
      local line = conn:receive("*l")
      conn:close()
      return line
    end)
    assert.equal("over luasocket", line)
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("receives a UDP datagram that a cohost coroutine sends later", function()
    local u = assert(socket.udp())
    defer(function() u:close() end)
    assert(u:setsockname("127.0.0.1", 0))
    local _, port = u:getsockname()
    u:settimeout(5)
    local moved, took, data = measure_until(function()
      local s = cohost.udp()
      assert(s:setpeername("127.0.0.1", tonumber(port)))
      s:send("datagram")
      s:close()
    end, function() return u:receive() end)
    assert.equal("datagram", data)
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)
end)

describe("LuaSocket settimeout", function()
  local port
  before_each(function()
    -- Sends "first\n" at once and "second\n" after 0.5 s.
    port = select(2, serve(function(sock)
      sock:send("first\n")
      cohost.sleep(0.5)
      sock:send("second\n")
      sock:receive()   -- until the client leaves
    end))
  end)

  it("times out a receive after the timeout, parking meanwhile, and the socket stays usable", function()
    local c = client(port)
    assert.equal("first", c:receive("*l"))
    c:settimeout(0.2)
    local moved, took, data, err, partial = h.measure(function() return c:receive("*l") end)
    assert.same({ nil, "timeout", "" }, { data, err, partial })
    assert.is_true(took >= 0.18 and took < 1, ("timed out after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    c:settimeout(2)
    assert.equal("second", c:receive("*l"))
  end)

  it("with 0 returns 'timeout' at once when nothing is there", function()
    local c = client(port)
    assert.equal("first", c:receive("*l"))
    c:settimeout(0)
    local t0 = cohost.monotonic()
    local data, err = c:receive("*l")
    assert.is_true(cohost.monotonic() - t0 < 0.3)   -- not until "second", 0.5 s after "first"
    assert.is_nil(data)
    assert.equal("timeout", err)
  end)
end)

describe("socket.select", function()
  it("waits for a socket to become readable, parking meanwhile", function()
    local _, port = serve(slow_replier(0.2))
    local c = client(port)
    -- Sent inside the measure, so the server's 0.2 s starts after it.
    local moved, took, readable = h.measure(function()
      c:send("ping\n")
      return socket.select({ c }, nil, 2)
    end)
    assert.equal(1, #readable)
    assert.equal(c, readable[1])
    assert.truthy(readable[c])
    assert.is_true(took >= 0.18 and took < 1.5, ("select returned after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    assert.equal("ping done", c:receive("*l"))
  end)

  it("returns 'timeout' after its timeout when nothing happens, parking meanwhile", function()
    local _, port = serve(function(sock) sock:receive() end)
    local c = client(port)
    local moved, took, r, w, err = h.measure(function() return socket.select({ c }, nil, 0.2) end)
    assert.same({}, r)
    assert.same({}, w)
    assert.equal("timeout", err)
    assert.is_true(took >= 0.18 and took < 1, ("select returned after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("reports a writable socket at once", function()
    local _, port = serve(function(sock) sock:receive() end)
    local c = client(port)
    local t0 = cohost.monotonic()
    local r, w = socket.select(nil, { c }, 2)
    assert.is_true(cohost.monotonic() - t0 < 0.1)
    assert.same({}, r)
    assert.equal(c, w[1])
  end)
end)

describe("cohost.kill on a thread blocked in LuaSocket", function()
  -- In a child process, bounded by timeout(1): a LuaSocket retry loop
  -- that never ends must not hang this spec.
  it("raises 'cancelled' from the LuaSocket call, again from the next one, and ends the thread", function()
    local script = h.tmpfile([[
local cohost = require "cohost"
local socket = require "socket"
local l = assert(cohost.listen("127.0.0.1:0", function(sock) sock:receive() end))
local _, port = l:addr()
local function note(...)
  local t = {}
  for i = 1, select("#", ...) do t[i] = tostring((select(i, ...))) end
  io.write(table.concat(t, " "), "\n")
  io.stdout:flush()
end
local t = cohost.spawn(function()
  local c = socket.tcp()
  c:settimeout(30)
  assert(c:connect("127.0.0.1", port))
  note("receive", pcall(c.receive, c))
  note("sleep", pcall(socket.sleep, 30))
  note("select", pcall(socket.select, { c }, nil, 30))
  c:close()
end)
cohost.sleep(0.05)
cohost.kill(t)
note("wait", (cohost.wait(t)))
l:close()
]])
    local _, out, _, took = h.run(h.shell_quote(script), { limit = 5, kill_signal = "KILL" })
    assert.equal("receive false cancelled\nsleep false cancelled\nselect false cancelled\nwait false\n", out)
    assert.is_true(took < 5, ("took %.2f s"):format(took))
  end)
end)
