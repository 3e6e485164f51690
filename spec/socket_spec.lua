-- Cosockets: cohost.tcp, cohost.udp and cohost.listen. Runs inside the
-- host (build/cohost /usr/bin/busted spec/socket_spec.lua), so every
-- socket call below parks only the spec's own task. Servers listen on
-- 127.0.0.1 port 0; each test closes what it opens.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- serve(handler, opts) -> listener, port: the listener is closed after
-- the test. connect(port) -> a connected cohost.tcp, timeout 2 s.
local serve, connect = h.serve, h.connect

-- Serves handler and connects to it; returns the socket and the port.
local function serve_and_connect(handler)
  local _, port = serve(handler)
  return connect(port), port
end

-- A handler that holds its connection, reading nothing, until the test
-- ends (20 s at most); call it, or the function it returns from a handler
-- of your own (hold()). A fixed hold of 1 s ended before a loaded machine
-- got through some tests: "closed" where "socket busy writing" was due.
local function holder()
  local done = cohost.semaphore.new(0)
  defer(function() done:post(1000) end)
  return function() done:wait(20) end
end

-- A handler that sends data one byte per packet, then holds the
-- connection for hold seconds (0: closes it at once).
local drip = h.drip

-- Echoes lines back until the client goes away.
local echo_lines = h.echo_lines

describe("cohost.listen", function()
  it("listens on port 0 and addr() gives the bound host and port", function()
    local l = assert(cohost.listen("127.0.0.1:0", echo_lines))
    defer(function() l:close() end)
    local host, port = l:addr()
    assert.equal("127.0.0.1", host)
    assert.is_true(port > 0)
    local s = connect(port)
    assert.equal(3, s:send("hi\n"))
    assert.equal("hi", s:receive())
    s:close()
  end)

  it("passes the handler the socket and the peer address", function()
    local seen
    local s = serve_and_connect(function(sock, peer)
      seen = peer
      sock:send("x")
    end)
    assert.equal("x", s:receive(1))
    assert.matches("^127%.0%.0%.1:%d+$", seen)
    s:close()
  end)

  it("closes a socket the handler leaves open when the handler returns", function()
    local s = serve_and_connect(function() end)
    local data, err, partial = s:receive()
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("", partial)
  end)

  it("stops accepting once closed, and a second close returns nil, 'closed'", function()
    local l, port = serve(echo_lines)
    assert.equal(1, l:close())
    local ok, err = l:close()
    assert.is_nil(ok)
    assert.equal("closed", err)
    local s = cohost.tcp()
    ok, err = s:connect("127.0.0.1", port)
    assert.is_nil(ok)
    assert.equal("connection refused", err)
  end)

  it("lets go of a closed listener's handler once this worker listens again", function()
    local gone = setmetatable({}, { __mode = "k" })
    local l = assert(cohost.listen("127.0.0.1:0", (function()
      local handler = function(sock) sock:send("x") end
      gone[handler] = true
      return handler
    end)()))
    assert.equal(1, l:close())
    l = nil   -- luacheck: ignore
    -- The handler's registry ref is dropped by the next listen (or
    -- connection) after the listener's last reference went.
    assert(h.wait_for(function()
      local other = assert(cohost.listen("127.0.0.1:0", echo_lines))
      other:close()
      collectgarbage()
      collectgarbage()
      return next(gone) == nil
    end, 10), "the closed listener's handler was never let go")
  end)

  it("returns nil, 'address already in use' when another socket holds the port", function()
    local socket = require "socket"
    local other = assert(socket.bind("127.0.0.1", 0))   -- no SO_REUSEPORT
    defer(function() other:close() end)
    local _, port = other:getsockname()
    local l, err = cohost.listen("127.0.0.1:" .. port, echo_lines)
    assert.is_nil(l)
    assert.equal("address already in use", err)
  end)

  it("raises on a malformed address", function()
    assert.has_error(function() cohost.listen("127.0.0.1:http", echo_lines) end)
    assert.has_error(function() cohost.listen("[::1]80", echo_lines) end)
  end)

  it("keeps the other 99 of 100 concurrent handlers intact when one raises a Lua error", function()
    local _, port = serve(function(sock)
      local line = sock:receive()
      if line == "boom" then error("boom on purpose") end
      cohost.sleep(0.01)   -- let the others overlap
      sock:send({ "re:", line, "\n" })
    end)
    local threads = {}
    for i = 1, 100 do
      threads[i] = cohost.spawn(function()
        local s = connect(port)
        s:send(i == 50 and "boom\n" or i .. "\n")
        return s:receive()
      end)
    end
    local good, closed = 0, 0
    for i = 1, 100 do
      local ok, line, err = cohost.wait(threads[i])
      assert.is_true(ok)
      if i == 50 then
        assert.is_nil(line)
        assert.equal("closed", err)
        closed = closed + 1
      else
        assert.equal("re:" .. i, line)
        good = good + 1
      end
    end
    assert.equal(99, good)
    assert.equal(1, closed)
  end)

  it("listens and connects on unix sockets", function()
    -- The pid, not math.random (the same seed in every process): two runs
    -- side by side must not share the path.
    local pid = io.open("/proc/self/stat"):read("*n")
    local path = string.format("/tmp/cohost-spec-%d-%d.sock", pid, math.floor(cohost.monotonic() * 1e6))
    local l = assert(cohost.listen("unix:" .. path, echo_lines))
    defer(function() l:close() end)
    assert.equal("unix:" .. path, l:addr())
    local s = cohost.tcp()
    assert.equal(1, s:connect("unix:" .. path))
    assert.equal(path, s:getpeername())
    s:send("over unix\n")
    assert.equal("over unix", s:receive())
    s:close()
    l:close()
    assert.is_nil(io.open(path))   -- the last close removes the file
  end)
end)

describe("cohost.tcp methods on something else", function()
  -- The type check reads the metatable where LuaJIT keeps it: every
  -- userdata that is not a cosocket, with a metatable or without, and
  -- every other value must still get luaL_checkudata's error.
  it("raise 'cohost.tcp expected' for other userdata, tables and nil, and leave real sockets working", function()
    local s = cohost.tcp()
    local receiveany, send = s.receiveany, s.send
    local plain = newproxy(false)                  -- no metatable
    local other = newproxy(true)                   -- a metatable of its own
    getmetatable(other).__index = getmetatable(s).__index
    local values = { plain, other, io.stdout, {}, "x", 42 }
    for _, v in ipairs(values) do
      local ok, err = pcall(receiveany, v, 10)
      assert.is_false(ok)
      assert.matches("bad argument #1 to '%?' %(cohost%.tcp expected, got %w+%)", err)
      ok, err = pcall(send, v, "x")
      assert.is_false(ok)
      assert.matches("cohost%.tcp expected", err)
    end
    assert.has_error(function() other:receiveany(10) end)
    local ok, err = pcall(receiveany)
    assert.is_false(ok)
    assert.matches("cohost%.tcp expected, got no value", err)
    -- A real one still passes the check: not connected, so "closed".
    assert.same({ nil, "closed" }, { s:receiveany(10) })
    s:close()
  end)
end)

describe("cohost.tcp receive", function()
  it("reads a line without its LF and drops every CR when given no pattern", function()
    local s = serve_and_connect(drip("one\r\ntw\ro\n", 1))
    assert.equal("one", s:receive())
    assert.equal("two", s:receive("*l"))
    s:close()
  end)

  it("reads until EOF with '*a', then returns an empty string", function()
    local s = serve_and_connect(function(sock)
      sock:send("abc")
      cohost.sleep(0.01)
      sock:send("def")
    end)
    assert.equal("abcdef", s:receive("*a"))
    assert.equal("", s:receive("*a"))
    s:close()
  end)

  it("reads exactly n bytes across packets", function()
    local s = serve_and_connect(drip("0123456789", 1))
    assert.equal("0123", s:receive(4))
    assert.equal("456789", s:receive(6))
    s:close()
  end)

  it("returns an empty string for receive(0) without reading", function()
    local s = serve_and_connect(holder())
    s:settimeout(10)
    assert.equal("", s:receive(0))
    s:close()
  end)

  it("raises on a bad pattern", function()
    local s = serve_and_connect(holder())
    assert.has_error(function() s:receive("*x") end)
    local ok, err = pcall(s.receive, s, "line")
    assert.is_false(ok)
    assert.matches("bad pattern argument", err)
    ok, err = pcall(s.receive, s, -1)
    assert.matches("bad pattern argument", err)
    s:close()
  end)

  it("returns nil, 'closed' and the partial data when the peer closes mid-read", function()
    local s, port = serve_and_connect(drip("abc\rd"))
    local data, err, partial = s:receive()
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("abcd", partial)
    data, err = s:receive(1)   -- the read part is closed now
    assert.is_nil(data)
    assert.equal("closed", err)
    s:close()

    s = connect(port)
    data, err, partial = s:receive(10)
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("abc\rd", partial)
    s:close()
  end)

  it("returns nil, 'timeout' and the partial data on a read timeout and keeps the socket usable", function()
    local hold = holder()
    local s = serve_and_connect(function(sock)
      sock:send("par")
      cohost.sleep(1)   -- far past the 50 ms read timeout, even when loaded
      sock:send("tial\nnext\n")
      hold()
    end)
    s:settimeout(50)
    local t0 = cohost.now()
    local data, err, partial = s:receive()
    assert.is_nil(data)
    assert.equal("timeout", err)
    assert.equal("par", partial)
    assert.is_true(cohost.now() - t0 < 0.8)
    s:settimeout(2000)
    assert.equal("tial", s:receive())
    assert.equal("next", s:receive())
    assert.equal(5, s:send("still"))
    s:close()
  end)

  it("applies the read timeout of settimeouts(connect, send, read)", function()
    local _, port = serve(holder())
    local s = cohost.tcp()
    s:settimeouts(1000, 1000, 30)
    assert(s:connect("127.0.0.1", port))
    local t0 = cohost.now()
    local data, err = s:receive(1)
    assert.is_nil(data)
    assert.equal("timeout", err)
    assert.is_true(cohost.now() - t0 < 0.9)   -- not the 1 s connect or send timeout
    assert.has_error(function() s:settimeout(-1) end, "bad timeout value")
    s:close()
  end)

  it("returns what has arrived, up to max, with receiveany", function()
    local hold = holder()
    local s = serve_and_connect(function(sock)
      sock:send("hello")
      hold()
    end)
    assert.equal("hel", s:receiveany(3))
    assert.equal("lo", s:receiveany("100"))   -- a numeric string, as lua_tonumber reads it
    for _, bad in ipairs({ 0, 0.5, -1, 0 / 0, "x", {}, true }) do
      local ok, err = pcall(s.receiveany, s, bad)
      assert.is_false(ok, tostring(bad))
      assert.matches("bad max argument", err)
    end
    s:close()
  end)

  it("hands what it has received to ch_socket_take through the FFI, in order and without waiting", function()
    local ffi = require "ffi"
    pcall(ffi.cdef, [[
size_t ch_socket_take(void *u, void *dst, size_t max);
size_t ch_socket_buffered(const void *u);
]])
    local C = ffi.C
    local hold = holder()
    local s = serve_and_connect(function(sock)
      sock:send("hello, world")   -- one segment: the first read takes it all
      hold()
    end)
    assert.equal("h", s:receive(1))
    assert.equal(11, tonumber(C.ch_socket_buffered(s)))
    local buf = ffi.new("uint8_t[8]")
    assert.equal(4, tonumber(C.ch_socket_take(s, buf, 4)))
    assert.equal("ello", ffi.string(buf, 4))
    assert.equal(7, tonumber(C.ch_socket_buffered(s)))
    assert.equal(", w", s:receive(3))   -- the reads go on after what was taken
    assert.equal(4, tonumber(C.ch_socket_take(s, buf, 8)))
    assert.equal("orld", ffi.string(buf, 4))
    assert.equal(0, tonumber(C.ch_socket_take(s, buf, 8)))   -- none left: 0 at once
    s:close()
    assert.equal(0, tonumber(C.ch_socket_buffered(s)))
  end)

  it("returns nil, 'closed' from receiveany at EOF", function()
    local s = serve_and_connect(function() end)
    local data, err = s:receiveany(10)
    assert.is_nil(data)
    assert.equal("closed", err)
  end)
end)

describe("cohost.tcp receiveuntil", function()
  local stream = "hello, world! -agentzh\r\n--abcedhb blah blah"

  it("returns the data before the pattern, fed 1 byte at a time", function()
    local s = serve_and_connect(drip(stream, 1))
    local reader = s:receiveuntil("\r\n--abcedhb")
    assert.equal("hello, world! -agentzh", reader())
    assert.equal(" blah", s:receive(5))
    s:close()
  end)

  it("returns chunks of at most size bytes, then nil with no error, fed 1 byte at a time", function()
    local s = serve_and_connect(drip(stream, 1))
    local reader = s:receiveuntil("\r\n--abcedhb")
    local chunks = {}
    while true do
      local data, err, partial = reader(4)
      if not data then
        assert.is_nil(err)
        assert.is_nil(partial)
        break
      end
      chunks[#chunks + 1] = data
    end
    assert.same({ "hell", "o, w", "orld", "! -a", "gent", "zh" }, chunks)
    assert.equal(" blah", s:receive(5))
    s:close()
  end)

  it("includes the pattern with inclusive = true, after a false start, fed 1 byte at a time", function()
    local s = serve_and_connect(drip("xx--ab--abcyy", 1))
    local reader = s:receiveuntil("--abc", { inclusive = true })
    assert.equal("xx--ab--abc", reader())
    assert.equal("yy", s:receive(2))
    s:close()
  end)

  it("ends the last sized chunk with the pattern when inclusive", function()
    local s = serve_and_connect(drip("abcdefg\r\n--b;", 1))
    local reader = s:receiveuntil("\r\n--b", { inclusive = true })
    assert.equal("abc", reader(3))
    assert.equal("def", reader(3))
    assert.equal("g\r\n--b", reader(3))
    assert.is_nil(reader(3))
    assert.equal(";", s:receive(1))
    s:close()
  end)

  it("returns an empty chunk when the pattern follows a full chunk, as OpenResty does", function()
    local s = serve_and_connect(drip("abcd|", 1))
    local reader = s:receiveuntil("|")
    assert.equal("abcd", reader(4))
    assert.equal("", reader(4))
    assert.is_nil(reader(4))
    s:close()
  end)

  it("starts over on the next occurrence of the pattern", function()
    local s = serve_and_connect(drip("a|b|c|d|", 1))
    local reader = s:receiveuntil("|")
    assert.equal("a", reader())
    assert.equal("b", reader())
    assert.equal("c", reader(10))
    assert.is_nil(reader(10))
    assert.equal("d", reader(10))
    s:close()
  end)

  it("returns nil, 'pattern is empty' for an empty pattern", function()
    local s = cohost.tcp()
    local r, err = s:receiveuntil("")
    assert.is_nil(r)
    assert.equal("pattern is empty", err)
  end)

  it("returns nil, 'closed' and the partial data at EOF", function()
    local s = serve_and_connect(drip("abc--"))
    local reader = s:receiveuntil("--x")
    local data, err, partial = reader()
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("abc--", partial)
    s:close()
  end)

  it("returns nil, 'timeout' and the data that cannot be the pattern on a timeout", function()
    local hold = holder()
    local s = serve_and_connect(function(sock)
      sock:send("abc-")
      cohost.sleep(0.6)   -- far past the 50 ms read timeout, even when loaded
      sock:send("-x rest")
      hold()
    end)
    s:settimeout(50)
    local reader = s:receiveuntil("--x")
    local data, err, partial = reader()
    assert.is_nil(data)
    assert.equal("timeout", err)
    assert.equal("abc", partial)
    s:settimeout(2000)
    assert.equal("", reader())   -- the kept "-" was the pattern's start
    assert.equal(" rest", s:receive(5))
    s:close()
  end)
end)

describe("cohost.tcp send", function()
  it("sends nested arrays of strings and numbers and returns the byte count", function()
    local s = serve_and_connect(function(sock)
      local data = sock:receive(7)
      sock:send(data)
    end)
    assert.equal(7, s:send({ "a", { "b", 1, { 2.5 } }, "c" }))
    assert.equal("ab12.5c", s:receive(7))
    assert.equal(0, s:send(""))
    s:close()
  end)

  it("raises on tables that are not arrays of strings and numbers", function()
    local s = serve_and_connect(holder())
    local ok, err = pcall(s.send, s, { a = 1 })
    assert.is_false(ok)
    assert.matches("non%-array table found", err)
    ok, err = pcall(s.send, s, { "a", true })
    assert.is_false(ok)
    assert.matches("bad data type boolean found", err)
    ok, err = pcall(s.send, s, print)
    assert.is_false(ok)
    assert.matches("array table expected, got function", err)
    s:close()
  end)

  it("half-closes with shutdown('send'): the peer reads EOF and still answers", function()
    local s = serve_and_connect(function(sock)
      local req = sock:receive("*a")
      sock:send("got " .. req)
    end)
    s:send("request")
    assert.equal(1, s:shutdown("send"))
    local data, err = s:send("more")
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("got request", s:receive("*a"))
    s:close()
  end)
end)

describe("cohost.tcp errors", function()
  it("returns nil, 'closed' for every operation on a closed socket", function()
    local s = cohost.tcp()
    for _, call in ipairs({
      function() return s:send("x") end,
      function() return s:receive() end,
      function() return s:receiveany(1) end,
      function() return s:receiveuntil("x")() end,
      function() return s:close() end,
      function() return s:getreusedtimes() end,
      function() return s:setkeepalive() end,
      function() return s:getpeername() end,
    }) do
      local ok, err = call()
      assert.is_nil(ok)
      assert.equal("closed", err)
    end
    s = serve_and_connect(holder())
    assert.equal(1, s:close())
    local ok, err = s:send("x")
    assert.is_nil(ok)
    assert.equal("closed", err)
    ok, err = s:close()
    assert.is_nil(ok)
    assert.equal("closed", err)
  end)

  it("returns nil, 'connection refused' when nobody listens", function()
    local l, port = serve(echo_lines)
    l:close()
    local s = cohost.tcp()
    local ok, err = s:connect("127.0.0.1", port)
    assert.is_nil(ok)
    assert.equal("connection refused", err)
  end)

  it("returns nil, 'timeout' when a connect gets no answer", function()
    -- A listener that never accepts, with a backlog of 0: once its queue
    -- holds one connection the kernel drops further SYNs.
    local socket = require "socket"
    local master = assert(socket.tcp())
    assert(master:bind("127.0.0.1", 0))
    assert(master:listen(0))
    local _, port = master:getsockname()
    local socks, timeouts = {}, 0
    for i = 1, 6 do
      local s = cohost.tcp()
      s:settimeout(100)
      local ok, err = s:connect("127.0.0.1", port)
      if not ok then
        assert.equal("timeout", err)
        timeouts = timeouts + 1
      end
      socks[i] = s
    end
    for _, s in ipairs(socks) do s:close() end
    master:close()
    assert.is_true(timeouts > 0)
  end)

  it("resolves names such as localhost", function()
    local _, port = serve(echo_lines)
    local s = cohost.tcp()
    assert.equal(1, s:connect("localhost", port))
    s:send("named\n")
    assert.equal("named", s:receive())
    s:close()
  end)

  it("returns nil, '<host> could not be resolved' for a name that does not exist", function()
    local s = cohost.tcp()
    local ok, err = s:connect("nonexistent.invalid", 80)
    assert.is_nil(ok)
    assert.matches("^nonexistent%.invalid could not be resolved", err)
  end)

  it("returns nil, 'missing the port number' or 'bad port number'", function()
    local s = cohost.tcp()
    local ok, err = s:connect("127.0.0.1")
    assert.is_nil(ok)
    assert.equal("missing the port number", err)
    ok, err = s:connect("127.0.0.1", 70000)
    assert.is_nil(ok)
    assert.equal("bad port number: 70000", err)
  end)

  it("gives a second concurrent reader nil, 'socket busy reading'", function()
    local hold = holder()
    local s = serve_and_connect(function(sock)
      cohost.sleep(0.1)
      sock:send("late\n")
      hold()
    end)
    local t = cohost.spawn(function() return s:receive() end)
    cohost.sleep(0.01)
    local data, err = s:receive()
    assert.is_nil(data)
    assert.equal("socket busy reading", err)
    local ok
    ok, err = s:close()
    assert.is_nil(ok)
    assert.equal("socket busy reading", err)
    local done, line = cohost.wait(t)
    assert.is_true(done)
    assert.equal("late", line)
    s:close()
  end)

  it("gives a second concurrent writer nil, 'socket busy writing'", function()
    local s = serve_and_connect(holder())   -- never reads
    local big = string.rep("x", 64 * 1024 * 1024)
    local t = cohost.spawn(function() return s:send(big) end)
    cohost.sleep(0.05)
    local ok, err = s:send("y")
    assert.is_nil(ok)
    assert.equal("socket busy writing", err)
    cohost.kill(t)
    cohost.wait(t)
    s:settimeout(20)   -- the killed writer let go: this one may go on
    ok, err = s:send("y")
    assert.is_true(ok == 1 or err == "timeout")
    s:close()
  end)

  it("frees the socket for the next reader when a parked reader is killed", function()
    local hold = holder()
    local s = serve_and_connect(function(sock)
      cohost.sleep(0.1)
      sock:send("after kill\n")
      hold()
    end)
    local t = cohost.spawn(function() return s:receive() end)
    cohost.sleep(0.01)
    cohost.kill(t)
    cohost.sleep(0.01)
    assert.equal("after kill", s:receive())
    s:close()
  end)
end)

describe("cohost.tcp full duplex", function()
  it("reads and writes one socket at once from two tasks", function()
    local size = 4 * 1024 * 1024   -- well past both socket buffers
    local chunk = string.rep("d", 64 * 1024)
    local function pump(sock)
      for _ = 1, size / #chunk do assert(sock:send(chunk)) end
      return true
    end
    local s = serve_and_connect(function(sock)
      sock:settimeout(5000)
      local w = cohost.spawn(pump, sock)
      local data = sock:receive(size)
      cohost.wait(w)
      sock:send(data and "ok\n" or "short\n")
    end)
    s:settimeout(5000)
    local w = cohost.spawn(pump, s)
    local data = s:receive(size)
    assert.equal(size, #data)
    assert.is_true((cohost.wait(w)))
    assert.equal("ok", s:receive())
    s:close()
  end)
end)

describe("cohost.tcp keepalive pool", function()
  it("reuses a pooled connection: getreusedtimes is 0, then 1", function()
    local accepted = 0
    local s, port = serve_and_connect(function(sock)
      accepted = accepted + 1
      echo_lines(sock)
    end)
    assert.equal(0, s:getreusedtimes())
    s:send("one\n")
    assert.equal("one", s:receive())
    assert.equal(1, s:setkeepalive())
    local ok, err = s:send("x")
    assert.is_nil(ok)
    assert.equal("closed", err)

    local s2 = connect(port)
    assert.equal(1, s2:getreusedtimes())
    s2:send("two\n")
    assert.equal("two", s2:receive())
    assert.equal(1, s2:setkeepalive(0, 10))
    local s3 = connect(port)
    assert.equal(2, s3:getreusedtimes())
    s3:close()
    assert.equal(1, accepted)
  end)

  it("keeps separate pools per opts.pool name", function()
    local _, port = serve(echo_lines)
    local s = cohost.tcp()
    assert(s:connect("127.0.0.1", port, { pool = "a" }))
    assert.equal(1, s:setkeepalive())
    s = cohost.tcp()
    assert(s:connect("127.0.0.1", port, { pool = "b" }))
    assert.equal(0, s:getreusedtimes())
    s:close()
    s = cohost.tcp()
    assert(s:connect("127.0.0.1", port, { pool = "a" }))
    assert.equal(1, s:getreusedtimes())
    s:close()
  end)

  it("keeps pool_size from the pool's creation, and an emptied pool takes a new one", function()
    local _, port = serve(echo_lines)
    local key = "size-" .. port
    local function open(n)
      local t = {}
      for i = 1, n do
        t[i] = cohost.tcp()
        assert(t[i]:connect("127.0.0.1", port, { pool = key }))
      end
      return t
    end
    -- Created with size 1: a second idle connection evicts the first.
    for _, c in ipairs(open(2)) do assert.equal(1, c:setkeepalive(0, 1)) end
    local again = open(2)
    assert.same({ 1, 0 }, { again[1]:getreusedtimes(), again[2]:getreusedtimes() })
    -- The pool is empty now: size 3 applies, all three stay.
    for _, c in ipairs(again) do c:close() end
    for _, c in ipairs(open(3)) do assert.equal(1, c:setkeepalive(0, 3)) end
    local reused = 0
    for _, c in ipairs(open(3)) do
      if c:getreusedtimes() > 0 then reused = reused + 1 end
      c:close()
    end
    assert.equal(3, reused)
  end)

  -- connect's backlog (OpenResty 0.10.14): a pool of pool_size
  -- connections at most, the other connects queued up to backlog.
  describe("with a backlog", function()
    -- An echo server counting the connections it accepted.
    local function counting()
      local n = { accepted = 0 }
      local _, port = serve(function(sock)
        n.accepted = n.accepted + 1
        echo_lines(sock)
      end)
      return n, port
    end

    local function pooled(port, key, size, backlog, connect_ms)
      local s = cohost.tcp()
      if connect_ms then s:settimeouts(connect_ms, 2000, 2000) end
      local ok, err = s:connect("127.0.0.1", port, { pool = key, pool_size = size, backlog = backlog })
      if not ok then return nil, err end
      return s
    end

    it("opens at most pool_size connections and queues the other connects", function()
      local n, port = counting()
      local key = "backlog-" .. port
      local tasks = {}
      for i = 1, 10 do
        tasks[i] = cohost.spawn(function()
          local s = assert(pooled(port, key, 2, 10))
          -- A round trip parks the task holding its connection, so all
          -- ten have connected (or queued) before any gives one back.
          assert(s:send("x" .. i .. "\n"))
          assert.equal("x" .. i, s:receive())
          return s:setkeepalive(0)
        end)
      end
      for i = 1, 10 do
        local ok, res = cohost.wait(tasks[i])
        assert.is_true(ok, tostring(res))
        assert.equal(1, res)
      end
      assert.equal(2, n.accepted)
    end)

    it("fails a connect past the backlog at once, and a queued one gets the next free connection", function()
      local n, port = counting()
      local key = "full-" .. port
      local a = assert(pooled(port, key, 1, 1))
      local started = false
      local b = cohost.spawn(function()
        started = true
        local s = assert(pooled(port, key, 1, 1))
        return s:getreusedtimes(), s:close()
      end)
      -- Once b ran, it is parked in its connect: queued.
      assert.is_true(h.eventually(function() return started end, 5))
      local s, err = pooled(port, key, 1, 1)
      assert.is_nil(s)
      assert.equal("too many waiting connect operations", err)
      assert(a:send("a\n"))
      assert.equal("a", a:receive())
      assert.equal(1, a:setkeepalive(0))
      local ok, reused = cohost.wait(b)
      assert.is_true(ok)
      assert.equal(1, reused)
      assert.equal(1, n.accepted)
    end)

    it("times a queued connect out after the connect timeout", function()
      local _, port = counting()
      local key = "slow-" .. port
      local a = assert(pooled(port, key, 1, 5))
      local s, err = pooled(port, key, 1, 5, 50)
      assert.is_nil(s)
      assert.equal("timeout", err)
      a:close()
      -- The slot a held is free again: a connect gets a new connection.
      s = assert(pooled(port, key, 1, 5, 2000))
      assert.equal(0, s:getreusedtimes())
      s:close()
    end)

    it("lets a queued connect dial when a connection of the pool closes", function()
      local n, port = counting()
      local key = "close-" .. port
      local a = assert(pooled(port, key, 1, 5))
      local started = false
      local b = cohost.spawn(function()
        started = true
        local s = assert(pooled(port, key, 1, 5))
        assert(s:send("b\n"))
        return s:receive(), s:getreusedtimes(), s:close()
      end)
      assert.is_true(h.eventually(function() return started end, 5))
      a:close()
      local ok, line, reused = cohost.wait(b)
      assert.is_true(ok, tostring(line))
      assert.equal("b", line)
      assert.equal(0, reused)
      assert.equal(2, n.accepted)
    end)

    it("takes a killed task's connect off the queue", function()
      local _, port = counting()
      local key = "kill-" .. port
      local a = assert(pooled(port, key, 1, 1))
      local started = 0
      local b = cohost.spawn(function()
        started = 1
        return pooled(port, key, 1, 1)
      end)
      assert.is_true(h.eventually(function() return started == 1 end, 5))
      cohost.kill(b)
      cohost.wait(b)
      -- b's place in the backlog of 1 is free: c queues, and gets a's.
      local c = cohost.spawn(function()
        started = 2
        local s = assert(pooled(port, key, 1, 1))
        return s:getreusedtimes(), s:close()
      end)
      assert.is_true(h.eventually(function() return started == 2 end, 5))
      assert.equal(1, a:setkeepalive(0))
      local ok, reused = cohost.wait(c)
      assert.is_true(ok, tostring(reused))
      assert.equal(1, reused)
    end)
  end)

  it("refuses to pool a socket with unread data", function()
    local hold = holder()
    local s = serve_and_connect(function(sock)
      sock:send("a\nb\n")
      hold()
    end)
    assert.equal("a", s:receive())
    local ok, err = s:setkeepalive()
    assert.is_nil(ok)
    assert.equal("unread data in buffer", err)
    assert.equal("b", s:receive())
    s:close()
  end)

  it("closes pooled connections after their idle timeout", function()
    local closed = false
    local s, port = serve_and_connect(function(sock)
      echo_lines(sock)
      closed = true
    end)
    s:send("x\n")
    s:receive()
    assert.equal(1, s:setkeepalive(30))
    -- The server sees the close on a later loop turn: poll (2 s, far
    -- past the 30 ms) rather than one look after a fixed sleep.
    assert.is_true(h.eventually(function() return closed end, 2))
    s = connect(port)
    assert.equal(0, s:getreusedtimes())
    s:close()
  end)

  it("does not hand out a pooled connection the peer has closed", function()
    local s, port = serve_and_connect(function(sock)
      sock:receive()
      sock:send("bye\n")
      cohost.sleep(0.05)
    end)
    s:send("hi\n")
    assert.equal("bye", s:receive())
    assert.equal(1, s:setkeepalive())
    cohost.sleep(0.15)   -- the server closed meanwhile
    s = connect(port)
    assert.equal(0, s:getreusedtimes())
    s:close()
  end)
end)

describe("cohost.tcp options and names", function()
  it("returns the peer's ip and port from getpeername", function()
    local s, port = serve_and_connect(holder())
    local ip, p = s:getpeername()
    assert.equal("127.0.0.1", ip)
    assert.equal(port, p)
    s:close()
  end)

  it("sets and reads socket options", function()
    local s = serve_and_connect(holder())
    assert.is_true(s:setoption("tcp-nodelay", true))
    assert.are_not.equal(0, s:getoption("tcp-nodelay"))
    assert.is_true(s:setoption("keepalive", 1))
    assert.is_true(s:setoption("sndbuf", 65536))
    local ok, err = s:setoption("bogus", 1)
    assert.is_nil(ok)
    assert.equal("unsupported option bogus", err)
    ok, err = s:setoption("keepalive")
    assert.is_nil(ok)
    assert.equal('missing the "value" argument', err)
    s:close()
  end)
end)

describe("cohost.udp", function()
  -- A LuaSocket datagram server answering "re:" .. data once, polled
  -- without blocking so it works whatever the hooks do with LuaSocket.
  local function udp_server()
    local socket = require "socket"
    local srv = assert(socket.udp())
    assert(srv:setsockname("127.0.0.1", 0))
    srv:settimeout(0)
    local _, port = srv:getsockname()
    local t = cohost.spawn(function()
      for _ = 1, 400 do
        local data, ip, p = srv:receivefrom()
        if data then
          srv:sendto("re:" .. data, ip, p)
          return true
        end
        cohost.sleep(0.005)
      end
    end)
    return srv, port, t
  end

  it("sends a datagram and receives the answer", function()
    local srv, port, t = udp_server()
    defer(function() srv:close() end)
    local u = cohost.udp()
    assert.equal(1, u:setpeername("127.0.0.1", port))
    assert.equal(1, u:send({ "pi", "ng" }))
    u:settimeout(2000)
    assert.equal("re:ping", u:receive())
    assert.is_true((cohost.wait(t)))
    assert.equal(1, u:close())
    local ok, err = u:send("x")
    assert.is_nil(ok)
    assert.equal("closed", err)
  end)

  it("returns nil, 'timeout' when no datagram comes, and stays usable", function()
    local srv, port, t = udp_server()
    defer(function() srv:close() end)
    local u = cohost.udp()
    assert.equal(1, u:setpeername("127.0.0.1", port))
    u:settimeout(30)
    local data, err = u:receive()
    assert.is_nil(data)
    assert.equal("timeout", err)
    u:send("again")
    u:settimeout(2000)
    assert.equal("re:again", u:receive())
    cohost.wait(t)
    u:close()
  end)
end)

describe("parked handlers' memory", function()
  -- Copy-stack mode keeps a parked handler's C stack on the heap; handlers
  -- parked through the same calls are stored as deltas against one
  -- reference image (runtime/coro.c), so each keeps a fraction of its
  -- stack's bytes. A child cohost in copy mode, whatever mode this suite
  -- runs in.
  it("keeps under 400 heap bytes of stack per handler parked in receiveany in copy mode", function()
    -- A sanitizer build (make test SAN=..., which sets ASAN_OPTIONS) has
    -- no copy-stack mode.
    if os.getenv("ASAN_OPTIONS") then return pending("no copy-stack mode under ASan") end
    local rc, out, err = h.run_script([[
local cohost = require "cohost"
local N, parked = 200, 0
local l = assert(cohost.listen("127.0.0.1:0", function(sock)
  parked = parked + 1
  sock:receiveany(16)             -- parks until its client closes
end))
local _, port = l:addr()
local clients = {}
for i = 1, N do
  local s = cohost.tcp()
  assert(s:connect("127.0.0.1", port))
  clients[i] = s
end
while parked < N do cohost.sleep(0.01) end
while cohost.stats().waiting < N do cohost.sleep(0.01) end   -- all in receiveany
local t = cohost.stats()
print(t.saved_bytes, t.saved_alloc, t.waiting)
for i = 1, N do clients[i]:close() end
l:close()
]], "--stack-mode copy")
    assert.equal(0, rc, err)
    local bytes, alloc, waiting = out:match("^(%d+)%s+(%d+)%s+(%d+)")
    bytes, alloc, waiting = tonumber(bytes), tonumber(alloc), tonumber(waiting)
    assert.is_true(waiting >= 200, out)
    -- Every handler's image counts in saved_bytes at its full length.
    assert.is_true(bytes / 200 > 400, out)
    assert.is_true(alloc / 200 < 400, out)
  end)
end)
