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

describe("grpc.channel against a cohost gRPC server in this process", function()
  local dir, cert, key, ca
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    h.must("mkdir " .. dir)
    ca = h.tls_ca(dir, "cohost-grpc-ca")
    cert, key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")
  end)
  teardown(function()
    if dir then os.execute("rm -rf " .. h.shell_quote(dir)) end
  end)

  -- A service that answers with what it was sent as metadata: the
  -- request's x-in as the header x-head, the trailer x-tail and (binary)
  -- x-bin-bin.
  local function server(opts)
    local srv = grpc.server(opts)
    srv:service("t.Meta", {
      Echo = function(msg, ctx)
        ctx:set_header("x-head", "h:" .. tostring(ctx.metadata["x-in"]))
        ctx:set_trailer("x-tail", "t:" .. tostring(ctx.metadata["x-chan"]))
        ctx:set_trailer("x-bin-bin", "\0\1\2" .. msg)
        return msg
      end,
      Fail = function() grpc.error(grpc.status.NOT_FOUND, "no such thing") end,
    })
    return srv
  end

  it("sends channel and call metadata and reads the reply's header and trailer metadata", function()
    local port = h.http_serve(server(), { http2 = true })
    local ch = grpc.channel("127.0.0.1:" .. port, { timeout = 10000, metadata = { ["x-chan"] = "c" } })
    local reply, err, call = ch:unary("/t.Meta/Echo", "m", { metadata = { ["x-in"] = "v1" } })
    assert.is_nil(err)
    assert.are.equal("m", reply)
    assert.are.equal("h:v1", call.headers["x-head"])
    assert.are.equal("t:c", call.trailers["x-tail"])
    assert.are.equal("\0\1\2m", call.trailers["x-bin-bin"])
  end)

  it("reads a trailers-only error with its message", function()
    local port = h.http_serve(server(), { http2 = true })
    local reply, err = grpc.channel("127.0.0.1:" .. port, { timeout = 10000 }):unary("/t.Meta/Fail", "x")
    assert.is_nil(reply)
    assert.are.equal(grpc.status.NOT_FOUND, err.code)
    assert.are.equal("no such thing", err.message)
  end)

  it("maps an HTTP status without grpc-status as gRPC's HTTP mapping says", function()
    local codes = { [503] = "UNAVAILABLE", [404] = "UNIMPLEMENTED", [403] = "PERMISSION_DENIED",
                    [401] = "UNAUTHENTICATED", [400] = "INTERNAL", [418] = "UNKNOWN" }
    local port = h.http_serve(function(req, res)
      res.status = tonumber(req.path:match("^/s%.Code/(%d+)$"))
      res:send("not grpc")
    end, { http2 = true })
    local ch = grpc.channel("127.0.0.1:" .. port, { timeout = 10000 })
    for http_status, name in pairs(codes) do
      local reply, err = ch:unary("/s.Code/" .. http_status, "x")
      assert.is_nil(reply)
      assert.are.equal(grpc.status[name], err.code, "HTTP " .. http_status)
      assert.are.equal(http_status, err.http_status)
    end
  end)

  it("cancels a call while its connection is being dialled: the dial ends, a call waiting on it dials anew", function()
    -- The origin is a TCP relay whose first connection takes the
    -- ClientHello and never answers (a TLS handshake that does not end);
    -- later connections go through to a cohost gRPC server.
    local real = h.http_serve(server(), { http2 = true, ssl_cert = cert, ssl_key = key })
    local accepted, hello, first_closed = 0, false, false
    local _, port = h.serve(function(sock)
      accepted = accepted + 1
      sock:settimeout(20000)
      if accepted == 1 then
        hello = sock:receiveany(65536) ~= nil
        first_closed = sock:receiveany(65536) == nil   -- the client let go
        return
      end
      h.relay(sock, assert(h.connect(real)))
    end)
    local ch = grpc.channel("https://localhost:" .. port, { ca_file = ca, connect_timeout = 60000 })
    local coros = cohost.stats().coros
    local c = ch:bidi("/t.Meta/Echo")   -- its task dials now
    -- Spawned after the call's task: it finds that dial under way and
    -- waits for it (not for its connect_timeout: the wait below is shorter).
    local waited
    local waiter = cohost.spawn(function()
      local reply, werr = ch:unary("/t.Meta/Echo", "after")
      waited = true
      return reply, werr
    end)
    assert(h.wait_for(function() return hello end, 10), "the dial never reached the server")
    local t0 = cohost.monotonic()
    c:cancel()
    local msg, err = c:recv()
    assert.is_nil(msg)
    assert.are.equal(grpc.status.CANCELLED, err.code)
    assert.is_true(cohost.monotonic() - t0 < 10)   -- not connect_timeout's 60 s
    assert(h.wait_for(function() return first_closed end, 10), "the cancelled dial's connection stayed open")
    assert(h.wait_for(function() return waited end, 10), "the call waiting on the dial is stuck")
    local ok, reply, werr = cohost.wait(waiter)
    assert.is_true(ok)
    assert.is_nil(werr)
    assert.are.equal("after", reply)
    assert.are.equal(2, accepted)
    assert.are.equal("again", ch:unary("/t.Meta/Echo", "again"))
    assert.are.equal(2, accepted)   -- the waiter's connection is the origin's
    -- The call's task ended; what is left is the new connection's reader
    -- and writer, and the relay's and server's side of it.
    require("cohost.http.client_h2").close_all()
    assert(h.wait_for(function() return cohost.stats().coros <= coros end, 10),
      "coroutines left: " .. cohost.stats().coros - coros)
  end)

  it("returns from server_stream once the request is sent: a watch whose first message the caller causes next", function()
    -- Watch sends its message only once Poke has come; Poke waits until
    -- the watch's request has reached the server. A server_stream that
    -- waited for the first message would never let the caller poke.
    local watching, poked = false, false
    local srv = grpc.server()
    srv:service("t.Watch", {
      Watch = { server_stream = function(_, stream)
        watching = true
        assert(h.wait_for(function() return poked end, 10))
        stream:send("event")
      end },
      Poke = function(msg)
        assert(h.wait_for(function() return watching end, 10))
        poked = true
        return msg
      end,
    })
    local port = h.http_serve(srv, { http2 = true })
    local ch = grpc.channel("127.0.0.1:" .. port, { timeout = 5000 })
    local call = ch:server_stream("/t.Watch/Watch", "")
    assert.are.equal("x", (ch:unary("/t.Watch/Poke", "x")))
    local msg, err = call:recv()
    assert.is_nil(err)
    assert.are.equal("event", msg)
    assert.is_nil(call:recv())
    assert.is_nil(call.err)
  end)

  it("ch:close() cancels the calls in flight, fails later ones, and closes the connection", function()
    local started = 0
    local srv = server()
    srv:service("t.Slow", {
      Hang = { server_stream = function()
        started = started + 1
        cohost.sleep(30)   -- cancelled when the client resets the stream
      end },
      Wait = function()
        started = started + 1
        cohost.sleep(30)
      end,
    })
    local real = h.http_serve(srv, { http2 = true })
    local open = 0
    local _, port = h.serve(function(sock)
      open = open + 1
      h.relay(sock, assert(h.connect(real)))
      open = open - 1
    end)
    local ch = grpc.channel("127.0.0.1:" .. port, { timeout = 20000 })
    assert.are.equal("m", (ch:unary("/t.Meta/Echo", "m")))
    local stream = ch:server_stream("/t.Slow/Hang", "")
    local unary = cohost.spawn(function() return ch:unary("/t.Slow/Wait", "") end)
    assert.is_true(h.wait_for(function() return started == 2 end, 10))
    local t0 = cohost.monotonic()
    ch:close()
    local msg, err = stream:recv()
    assert.is_nil(msg)
    assert.are.equal(grpc.status.CANCELLED, err.code)
    local ok, reply, uerr = cohost.wait(unary)
    assert.is_true(ok)
    assert.is_nil(reply)
    assert.are.equal(grpc.status.CANCELLED, uerr.code)
    assert.is_true(cohost.monotonic() - t0 < 10)   -- not the calls' 20 s deadline
    reply, err = ch:unary("/t.Meta/Echo", "again")
    assert.is_nil(reply)
    assert.are.equal(grpc.status.CANCELLED, err.code)
    assert.are.equal("the channel is closed", err.message)
    assert.is_true(h.wait_for(function() return open == 0 end, 10), "the connection stayed open")
  end)

  it("lets a script whose one call is done exit at once: the idle connection holds nothing", function()
    local port = h.http_serve(server(), { http2 = true })
    local src = [[
local grpc = require "cohost.grpc"
print((assert(grpc.channel("127.0.0.1:" .. arg[1], { timeout = 10000 }):unary("/t.Meta/Echo", "m"))))
]]
    -- 10 s: well under the 60 s idle timeout that held the script before;
    -- timeout(1) ends the child there (status 124).
    local code, out, err = h.sh(("%s %s %d"):format(h.COHOST, h.shell_quote(h.tmpfile(src)), port), 10)
    assert.are.equal(0, code, err)
    assert.are.equal("m\n", out)
  end)

  it("calls over https:// with the server's certificate verified, and refuses an unknown CA", function()
    local port = h.http_serve(server(), { http2 = true, ssl_cert = cert, ssl_key = key })
    local ch = grpc.channel("https://127.0.0.1:" .. port, { timeout = 10000, ca_file = ca })
    local reply, err = ch:unary("/t.Meta/Echo", "secure")
    assert.is_nil(err)
    assert.are.equal("secure", reply)
    local _, bad = grpc.channel("https://127.0.0.1:" .. port, { timeout = 10000 }):unary("/t.Meta/Echo", "x")
    assert.are.equal(grpc.status.UNAVAILABLE, bad.code)
  end)
end)

describe("docs/grpc.md", function()
  it("does not list the client among what is not done", function()
    local doc = h.slurp(h.root .. "docs/grpc.md")
    local todo = assert(doc:match("\n## Not done yet\n(.-)\n## "), "no Not done yet section")
    assert.is_nil(todo:lower():find("client", 1, true), todo)
    assert.truthy(doc:find("\n## Client\n", 1, true))
  end)
end)
