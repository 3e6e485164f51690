-- Black-box specs of examples/: each starts build/cohost on an example as a
-- child process on a free loopback port, talks to it with cohost.tcp, and
-- stops it.
local cohost = require "cohost"
local h = require "spec.helper"
local free_port = h.free_port

-- Starts "build/cohost <args>" in the background (h.spawn); returns a
-- stop function, which ends it (h.stop_pid: SIGTERM, and SIGKILL if it
-- is still there after 5 s) and returns its output.
local function start(args)
  local pid, logfile = h.spawn(h.COHOST .. " " .. args)
  return function()
    h.stop_pid(pid)
    local log = h.try_slurp(logfile) or ""
    os.remove(logfile)
    return log
  end
end

-- Connects, retrying while the child starts (bounded: 15 s, for a
-- sanitizer build starting on a loaded machine).
local function connect(port)
  local sock, err = h.connect_retry(port, 2000)
  return sock or error("cannot connect: " .. err)
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
    local stop = start(("examples/chat.lua %d %d"):format(port, free_port()))
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
  local get = h.get

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
