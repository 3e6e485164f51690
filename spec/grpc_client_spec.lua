-- cohost.grpc's client (docs/grpc.md, "Client") against examples/grpc_echo.lua,
-- started for real as its own process.
local cohost = require "cohost"
local grpc = require "cohost.grpc"
local h = require "spec.helper"
h.cleanups(after_each)

describe("grpc.channel against examples/grpc_echo.lua", function()
  local port, pid, log
  setup(function()
    port = h.free_port()
    pid, log = h.spawn(("%s examples/grpc_echo.lua %d"):format(h.COHOST, port))
    h.wait_port(port, log)
  end)
  teardown(function()
    h.stop_pid(pid)
    os.remove(log)
  end)

  it("makes a unary call and gets the reply", function()
    local ch = grpc.channel("http://127.0.0.1:" .. port, { timeout = 10000 })
    local reply, err = ch:unary("/cohost.Echo/Echo", "hello\0bytes")
    assert.is_nil(err)
    assert.are.equal("hello\0bytes", reply)
  end)

  it("echoes a 3 MB message", function()
    local big = h.random_bytes(3 * 1024 * 1024)
    local reply = grpc.channel("127.0.0.1:" .. port):unary("/cohost.Echo/Echo", big)
    assert.are.equal(big, reply)
  end)

  it("iterates a server stream", function()
    local got = {}
    for m in grpc.channel("127.0.0.1:" .. port):server_stream("/cohost.Echo/Repeat", "\4ab") do
      got[#got + 1] = m
    end
    assert.are.same({ "ab", "ab", "ab", "ab" }, got)
  end)

  it("returns UNIMPLEMENTED as a status error with the server's message", function()
    local reply, err = grpc.channel("127.0.0.1:" .. port):unary("/cohost.Echo/Nope", "x")
    assert.is_nil(reply)
    assert.is_true(grpc.is_error(err))
    assert.are.equal(grpc.status.UNIMPLEMENTED, err.code)
    assert.are.equal("unknown method /cohost.Echo/Nope", err.message)
  end)

  it("sends and receives on a bidi call, then reads its OK end", function()
    local c = grpc.channel("127.0.0.1:" .. port, { timeout = 10000 }):bidi("/cohost.Echo/Echo")
    assert.is_true(c:send("ping"))
    c:close_send()
    assert.are.equal("ping", c:recv())
    local m, err = c:recv()
    assert.is_nil(m)
    assert.is_nil(err)
  end)

  it("runs 50 concurrent calls from 50 tasks", function()
    local ch = grpc.channel("127.0.0.1:" .. port, { timeout = 20000 })
    local ok, done = 0, 0
    for i = 1, 50 do
      cohost.spawn(function()
        if ch:unary("/cohost.Echo/Echo", "m" .. i) == "m" .. i then ok = ok + 1 end
        done = done + 1
      end)
    end
    local t0 = cohost.monotonic()
    while done < 50 and cohost.monotonic() - t0 < 20 do cohost.sleep(0.01) end
    assert.are.equal(50, ok)
  end)
end)

describe("grpc.channel without a server", function()
  it("fails a call with UNAVAILABLE", function()
    local _, err = grpc.channel("127.0.0.1:" .. h.free_port()):unary("/a.B/C", "x")
    assert.are.equal(grpc.status.UNAVAILABLE, err.code)
  end)
end)

describe("grpc.channel against a python3-grpcio server", function()
  local port, pid, log
  setup(function()
    pid, log = h.spawn("/usr/bin/python3 spec/grpc_client_server.py")
    local t0 = cohost.monotonic()
    while not port and cohost.monotonic() - t0 < 20 do   -- it prints its port once bound
      port = tonumber((h.try_slurp(log) or ""):match("^(%d+)\n"))
      if not port then cohost.sleep(0.02) end
    end
    assert(port, "the python server did not start: " .. (h.try_slurp(log) or ""))
  end)
  teardown(function()
    h.stop_pid(pid)
    os.remove(log)
  end)

  it("makes unary, server-streaming and client-streaming calls", function()
    local ch = grpc.channel("127.0.0.1:" .. port, { timeout = 10000 })
    assert.are.equal("hi", ch:unary("/pkg.Svc/Echo", "hi"))
    local got = {}
    for m in ch:server_stream("/pkg.Svc/Repeat", "ab") do got[#got + 1] = m end
    assert.are.same({ "ab", "ab", "ab" }, got)
    assert.are.equal("abc", ch:client_stream("/pkg.Svc/Join", { "a", "b", "c" }))
  end)

  it("returns the status and message the server aborted with", function()
    local _, err = grpc.channel("127.0.0.1:" .. port):unary("/pkg.Svc/NotFound", "x")
    assert.are.equal(grpc.status.NOT_FOUND, err.code)
    assert.are.equal("x", err.message)
  end)

  it("ends a call past its deadline with DEADLINE_EXCEEDED", function()
    local t0 = cohost.monotonic()
    local _, err = grpc.channel("127.0.0.1:" .. port):unary("/pkg.Svc/Slow", "x", { timeout = 300 })
    assert.are.equal(grpc.status.DEADLINE_EXCEEDED, err.code)
    assert.is_true(cohost.monotonic() - t0 < 2.5)   -- before the server's 3 s answer
  end)
end)
