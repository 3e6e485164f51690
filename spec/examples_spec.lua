-- Black-box specs of examples/: each starts build/cohost on an example as a
-- child process on a free loopback port, talks to it with cohost.tcp, and
-- stops it.
local cohost = require "cohost"
local h = require "spec.helper"
local free_port = h.free_port

-- Starts "build/cohost <args>" in the background; returns a stop function.
local function start(args)
  local pidfile = os.tmpname()
  local logfile = os.tmpname()
  assert(os.execute(("%s %s >%s 2>&1 & echo $! >%s"):format(h.COHOST, args, logfile, pidfile)) == 0)
  local f = assert(io.open(pidfile))
  local pid = assert(tonumber(f:read("*l")))
  f:close()
  os.remove(pidfile)
  return function()
    os.execute("kill " .. pid .. " 2>/dev/null; sleep 0.1; kill -9 " .. pid .. " 2>/dev/null")
    local lf = io.open(logfile)
    local log = lf and lf:read("*a") or ""
    if lf then lf:close() end
    os.remove(logfile)
    return log
  end
end

-- Connects, retrying while the child starts (bounded: 15 s, for a
-- sanitizer build starting on a loaded machine).
local function connect(port)
  local deadline = cohost.monotonic() + 15
  while true do
    local sock = cohost.tcp()
    sock:settimeout(2000)
    local ok, err = sock:connect("127.0.0.1", port)
    if ok then return sock end
    if cohost.monotonic() > deadline then error("cannot connect: " .. err) end
    cohost.sleep(0.05)
  end
end

describe("examples/echo.lua", function()
  it("echoes lines and binary chunks back to each client", function()
    local port = free_port()
    local stop = start("examples/echo.lua " .. port)
    local a, b = connect(port), connect(port)
    assert(a:send("hello\n"))
    assert(b:send("\0\1\2binary\n"))
    assert.are.equal("hello", a:receive("*l"))
    assert.are.equal("\0\1\2binary", b:receive("*l"))
    local big = ("x"):rep(200000)
    assert(a:send(big))
    assert.are.equal(big, a:receive(#big))
    a:close()
    b:close()
    stop()
  end)
end)

describe("examples/chat.lua", function()
  it("fans every line out to every member, with joins and leaves", function()
    local port = free_port()
    local stop = start("examples/chat.lua " .. port)
    local a, b = connect(port), connect(port)
    assert.are.equal("name? ", a:receive(6))
    assert.are.equal("name? ", b:receive(6))
    assert(a:send("alice\n"))
    assert.are.equal("* alice joined", a:receive("*l"))
    assert(b:send("bob\n"))
    assert.are.equal("* bob joined", a:receive("*l"))
    assert.are.equal("* bob joined", b:receive("*l"))
    assert(a:send("hi bob\n"))
    assert.are.equal("alice: hi bob", a:receive("*l"))
    assert.are.equal("alice: hi bob", b:receive("*l"))
    assert(a:send("/quit\n"))
    assert.are.equal("* alice left", b:receive("*l"))
    b:close()
    stop()
  end)
end)

describe("examples/proxy.lua", function()
  it("relays both directions to the upstream and back", function()
    local up = assert(cohost.listen("127.0.0.1:0", function(sock)
      while true do
        local line = sock:receive("*l")
        if not line then return end
        sock:send("upstream says " .. line .. "\n")
      end
    end))
    local _, upport = up:addr()
    local port = free_port()
    local stop = start(("examples/proxy.lua %d 127.0.0.1 %d"):format(port, upport))
    local c = connect(port)
    for i = 1, 3 do
      assert(c:send("ping " .. i .. "\n"))
      assert.are.equal("upstream says ping " .. i, c:receive("*l"))
    end
    c:close()
    stop()
    up:close()
  end)

  it("closes the client when the upstream refuses", function()
    local dead = free_port()   -- nothing listens here
    local port = free_port()
    local stop = start(("examples/proxy.lua %d 127.0.0.1 %d"):format(port, dead))
    local c = connect(port)
    local data, err = c:receive("*l")
    assert.is_nil(data)
    assert.are.equal("closed", err)
    local log = stop()
    assert.truthy(log:find("connection refused", 1, true))
  end)
end)

describe("examples/hello.lua", function()
  -- One request on sock; returns status, headers (lower-case keys), body.
  local function get(sock, path)
    assert(sock:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
    local status = tonumber(assert(sock:receive("*l")):match("^HTTP/1%.1 (%d+)"))
    local headers = {}
    while true do
      local line = assert(sock:receive("*l"))
      if line == "" then break end
      local k, v = line:match("^([^:]+):%s*(.*)$")
      headers[k:lower()] = v
    end
    return status, headers, assert(sock:receive(tonumber(headers["content-length"])))
  end

  it("answers hello and a JSON document on one keep-alive connection", function()
    local port = free_port()
    local stop = start("examples/hello.lua " .. port)
    local sock = connect(port)
    local status, headers, body = get(sock, "/")
    assert.are.equal(200, status)
    assert.are.equal("hello", body)
    assert.truthy(headers["date"])
    status, headers, body = get(sock, "/json")
    assert.are.equal(200, status)
    assert.are.equal("application/json", headers["content-type"])
    assert.are.equal("hello", require("cjson").decode(body).message)
    status = get(sock, "/missing")
    assert.are.equal(404, status)
    sock:close()
    stop()
  end)
end)
