-- Debian's LuaSocket (`require "socket"`), unmodified, inside cohost: its
-- classic C functions block in the hooked libc calls (connect, recv,
-- poll, select, nanosleep), so each wait parks only the calling coroutine
-- and the worker keeps serving the others. Servers are cohost listeners
-- on 127.0.0.1 port 0 in this same process: they can only answer if the
-- LuaSocket calls really park.
local cohost = require "cohost"
local socket = require "socket"

-- Cleanups for the running test, run in reverse order after it (busted
-- 2.1 keeps only the last finally() of a test, so specs use this instead).
local cleanups = {}
local function defer(fn) cleanups[#cleanups + 1] = fn end
after_each(function()
  local list = cleanups
  cleanups = {}
  local first
  for i = #list, 1, -1 do
    local ok, err = pcall(list[i])
    if not ok and not first then first = err end
  end
  if first then error(first, 0) end
end)

local root = debug.getinfo(1, "S").source:match("^@(.-)spec/[^/]*$") or ""
local COHOST = root .. "build/cohost"

local function slurp(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

local function serve(handler)
  local l = assert(cohost.listen("127.0.0.1:0", handler))
  local _, port = l:addr()
  return l, port
end

-- A coroutine counting every 5 ms; ticks() moves only while others park.
local function start_ticker()
  local n, stop = 0, false
  local t = cohost.spawn(function()
    while not stop do
      n = n + 1
      cohost.sleep(0.005)
    end
  end)
  return {
    ticks = function() return n end,
    stop = function() stop = true; cohost.wait(t) end,
  }
end

-- Runs fn with a ticker: returns the ticks during fn, seconds taken, and
-- fn's results packed.
local function measure(fn)
  local ticker = start_ticker()
  cohost.sleep(0.01)
  local before, t0 = ticker.ticks(), cohost.monotonic()
  local res = { pcall(fn) }
  local moved, took = ticker.ticks() - before, cohost.monotonic() - t0
  ticker.stop()
  assert(res[1], res[2])
  return moved, took, { unpack(res, 2, table.maxn(res)) }
end

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

describe("LuaSocket inside cohost", function()
  it("lets 50 concurrent handlers each fetch from a server answering after 1 s in about 1 s, not 50", function()
    local backend, bport = serve(slow_replier(1))
    defer(function() backend:close() end)
    -- Each connection's handler fetches from the backend with LuaSocket.
    local front, fport = serve(function(sock)
      local req = sock:receive()
      local c = socket.tcp()
      c:settimeout(30)
      assert(c:connect("127.0.0.1", bport))
      assert(c:send(req .. "\n"))
      local reply, err = c:receive("*l")
      c:close()
      sock:send((reply or ("error " .. tostring(err))) .. "\n")
    end)
    defer(function() front:close() end)
    local t0 = cohost.monotonic()
    local clients = {}
    for i = 1, 50 do
      clients[i] = cohost.spawn(function()
        local s = cohost.tcp()
        s:settimeout(30000)
        assert(s:connect("127.0.0.1", fport))
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
    local l, port = serve(slow_replier(0.2))
    defer(function() l:close() end)
    local moved, took, res = measure(function()
      local c = socket.tcp()   -- default timeout: block forever
      assert(c:connect("127.0.0.1", port))
      assert.equal(6, c:send("hello\n"))
      local line = c:receive("*l")
      c:close()
      return line
    end)
    assert.equal("hello done", res[1])
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
    local moved, took = measure(function() socket.sleep(0.2) end)
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("accepts on a LuaSocket server while a cohost client connects later", function()
    local srv = assert(socket.bind("127.0.0.1", 0))
    defer(function() srv:close() end)
    local _, port = srv:getsockname()
    srv:settimeout(5)
    local client = cohost.spawn(function()
      cohost.sleep(0.2)
      local s = cohost.tcp()
      assert(s:connect("127.0.0.1", tonumber(port)))
      s:send("over luasocket\n")
      s:close()
    end)
    local moved, took, res = measure(function()
      local conn = assert(srv:accept())
      local line = conn:receive("*l")
      conn:close()
      return line
    end)
    assert.equal("over luasocket", res[1])
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    cohost.wait(client)
  end)

  it("receives a UDP datagram that a cohost coroutine sends later", function()
    local u = assert(socket.udp())
    defer(function() u:close() end)
    assert(u:setsockname("127.0.0.1", 0))
    local _, port = u:getsockname()
    u:settimeout(5)
    local sender = cohost.spawn(function()
      cohost.sleep(0.2)
      local s = cohost.udp()
      assert(s:setpeername("127.0.0.1", tonumber(port)))
      s:send("datagram")
      s:close()
    end)
    local moved, took, res = measure(function() return u:receive() end)
    assert.equal("datagram", res[1])
    assert.is_true(took >= 0.18)
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    cohost.wait(sender)
  end)
end)

describe("LuaSocket settimeout", function()
  local l, port
  before_each(function()
    -- Sends "first\n" at once and "second\n" after 0.5 s.
    l, port = serve(function(sock)
      sock:send("first\n")
      cohost.sleep(0.5)
      sock:send("second\n")
      sock:receive()   -- until the client leaves
    end)
  end)
  after_each(function() l:close() end)

  it("times out a receive after the timeout, parking meanwhile, and the socket stays usable", function()
    local c = socket.tcp()
    c:settimeout(2)
    assert(c:connect("127.0.0.1", port))
    defer(function() c:close() end)
    assert.equal("first", c:receive("*l"))
    c:settimeout(0.2)
    local moved, took, res = measure(function() return c:receive("*l") end)
    assert.same({ nil, "timeout", "" }, { res[1], res[2], res[3] })
    assert.is_true(took >= 0.18 and took < 0.45, ("timed out after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    c:settimeout(2)
    assert.equal("second", c:receive("*l"))
  end)

  it("with 0 returns 'timeout' at once when nothing is there", function()
    local c = socket.tcp()
    c:settimeout(2)
    assert(c:connect("127.0.0.1", port))
    defer(function() c:close() end)
    assert.equal("first", c:receive("*l"))
    c:settimeout(0)
    local t0 = cohost.monotonic()
    local data, err = c:receive("*l")
    assert.is_true(cohost.monotonic() - t0 < 0.1)
    assert.is_nil(data)
    assert.equal("timeout", err)
  end)
end)

describe("socket.select", function()
  it("waits for a socket to become readable, parking meanwhile", function()
    local l, port = serve(slow_replier(0.2))
    defer(function() l:close() end)
    local c = socket.tcp()
    c:settimeout(2)
    assert(c:connect("127.0.0.1", port))
    defer(function() c:close() end)
    c:send("ping\n")
    local moved, took, res = measure(function() return socket.select({ c }, nil, 2) end)
    local readable = res[1]
    assert.equal(1, #readable)
    assert.equal(c, readable[1])
    assert.truthy(readable[c])
    assert.is_true(took >= 0.18 and took < 1.5, ("select returned after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    assert.equal("ping done", c:receive("*l"))
  end)

  it("returns 'timeout' after its timeout when nothing happens, parking meanwhile", function()
    local l, port = serve(function(sock) sock:receive() end)
    defer(function() l:close() end)
    local c = socket.tcp()
    c:settimeout(2)
    assert(c:connect("127.0.0.1", port))
    defer(function() c:close() end)
    local moved, took, res = measure(function() return socket.select({ c }, nil, 0.2) end)
    assert.same({}, res[1])
    assert.same({}, res[2])
    assert.equal("timeout", res[3])
    assert.is_true(took >= 0.18 and took < 0.6, ("select returned after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("reports a writable socket at once", function()
    local l, port = serve(function(sock) sock:receive() end)
    defer(function() l:close() end)
    local c = socket.tcp()
    c:settimeout(2)
    assert(c:connect("127.0.0.1", port))
    defer(function() c:close() end)
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
    local script, out, err = os.tmpname(), os.tmpname(), os.tmpname()
    defer(function() os.remove(script); os.remove(out); os.remove(err) end)
    local f = assert(io.open(script, "w"))
    f:write([[
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
    f:close()
    local t0 = cohost.monotonic()
    os.execute(("timeout -s KILL 5 %s %s >%s 2>%s"):format(COHOST, script, out, err))
    local took = cohost.monotonic() - t0
    assert.equal("receive false cancelled\nsleep false cancelled\nselect false cancelled\nwait false\n", slurp(out))
    assert.is_true(took < 5, ("took %.2f s"):format(took))
  end)
end)
