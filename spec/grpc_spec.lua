-- cohost.grpc (docs/grpc.md): gRPC services on the HTTP/2 server. The
-- clients are real: Debian's python3-grpcio with identity serializers (no
-- generated code) for calls, python3-h2 where a test needs bytes no gRPC
-- client sends (a truncated prefix, a compressed flag), curl for plain
-- HTTP. The example runs as its own process; the other servers run in
-- this one (h.sh parks the spec's task while Python runs).
local cohost = require "cohost"
local cjson = require "cjson"
local grpc = require "cohost.grpc"
local h = require "spec.helper"
h.cleanups(after_each)

-- -- Clients ---------------------------------------------------------------------

-- Prelude of the grpcio programs: a channel to the port in argv[1];
-- rpc(kind, path, request, **kw) makes one call and returns its status
-- code (a number), details, response(s) and metadata values (bytes, as
-- hex: JSON has no byte strings; py() turns them back).
local GRPC_PY = [[
import grpc, json, sys
ch = grpc.insecure_channel("127.0.0.1:" + sys.argv[1])

def text(b):
    return (b.encode() if isinstance(b, str) else b).hex()

def md(pairs):
    return [[k, text(v)] for k, v in (pairs or [])]

def rpc(kind, path, request, **kw):
    kw.setdefault("timeout", 10)
    try:
        if kind in ("unary_unary", "stream_unary"):
            reply, call = getattr(ch, kind)(path).with_call(request, **kw)
            got = text(reply)
        else:
            call = getattr(ch, kind)(path)(request, **kw)
            got = [text(m) for m in call]
        return {"code": 0, "reply": got, "initial": md(call.initial_metadata()),
                "trailing": md(call.trailing_metadata())}
    except grpc.RpcError as e:
        return {"code": e.code().value[0], "details": e.details(),
                "trailing": md(e.trailing_metadata())}

def out(v):
    print(json.dumps(v))
]]

local function unhex(x)
  return (x:gsub("%x%x", function(b) return string.char(tonumber(b, 16)) end))
end

-- An rpc() result with its hex turned back into bytes; metadata becomes
-- a table by name (a repeated name: an array of its values in order).
local function from_rpc(r)
  if type(r.reply) == "string" then
    r.reply = unhex(r.reply)
  elseif type(r.reply) == "table" then
    for i, m in ipairs(r.reply) do r.reply[i] = unhex(m) end
  end
  for _, k in ipairs { "initial", "trailing" } do
    local t = {}
    for _, kv in ipairs(type(r[k]) == "table" and r[k] or {}) do
      local name, v, had = kv[1], unhex(kv[2]), t[kv[1]]
      if had == nil then
        t[name] = v
      elseif type(had) == "table" then
        had[#had + 1] = v
      else
        t[name] = { had, v }
      end
    end
    r[k] = t
  end
  return r
end

-- Runs a grpcio program body (after GRPC_PY) against port; returns its
-- JSON result, rpc() results (one, or a list of them) through from_rpc.
local function py(port, body)
  local code, out, err = h.python(GRPC_PY .. body, tostring(port), 40)
  assert(code == 0, "python client failed: " .. err .. out)
  local r = cjson.decode(out:match("[^\n]*\n?$"))
  if r.code then return from_rpc(r) end
  for _, one in ipairs(r) do from_rpc(one) end
  return r
end

-- One call from a fresh client: py(port, "out(rpc(kind, path, request))").
local function call(port, kind, path, request_expr, kw)
  return py(port, ("out(rpc(%q, %q, %s%s))"):format(kind, path, request_expr, kw and (", " .. kw) or ""))
end

-- A python3-h2 client sending one request of raw bytes: argv[2] the
-- path, argv[3] the body as hex, argv[4] extra headers as JSON pairs,
-- argv[5] (optional) the stream window it grants (0: no DATA can come).
-- Prints the response's headers, trailers, body length and reset code.
local RAW_PY = [[
import json, socket, sys
import h2.connection, h2.config, h2.events, h2.settings
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
c.initiate_connection()
if len(sys.argv) > 5:
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: int(sys.argv[5])})
hs = [(":method", "POST"), (":path", sys.argv[2]), (":scheme", "http"), (":authority", "localhost"),
      ("content-type", "application/grpc"), ("te", "trailers")] + [tuple(p) for p in json.loads(sys.argv[4])]
c.send_headers(1, hs)
c.send_data(1, bytes.fromhex(sys.argv[3]), end_stream=True)
s.sendall(c.data_to_send())
r = {"headers": None, "trailers": None, "data": 0, "reset": None}
done = False
while not done:
    d = s.recv(65536)
    if not d:
        break
    for e in c.receive_data(d):
        if isinstance(e, h2.events.ResponseReceived):
            r["headers"] = dict(e.headers)
        elif isinstance(e, h2.events.TrailersReceived):
            r["trailers"] = dict(e.headers)
        elif isinstance(e, h2.events.DataReceived):
            r["data"] += len(e.data)
            c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
            r["reset"] = getattr(e, "error_code", None) and int(e.error_code)
            done = True
    s.sendall(c.data_to_send())
print(json.dumps(r))
]]

local function raw(port, path, body_hex, headers, window)
  local args = ("%d %s %s %s %s"):format(port, h.shell_quote(path), h.shell_quote(body_hex),
    h.shell_quote(cjson.encode(headers or {})), window or "")
  local code, out, err = h.python(RAW_PY, args, 30)
  assert(code == 0, "h2 client failed: " .. err .. out)
  return cjson.decode(out:match("[^\n]*\n?$"))
end

-- The status of a raw response: its trailers', or its headers' when it
-- was trailers-only.
local function raw_status(r)
  local t = r.trailers ~= cjson.null and r.trailers or r.headers
  return tonumber(t["grpc-status"]), t["grpc-message"]
end

-- A gRPC server in this process on 127.0.0.1 port 0, closed after the
-- test; returns its port.
local function serve(srv, opts)
  local l = assert(grpc.listen("127.0.0.1:0", srv, opts))
  h.defer(function() l:close() end)
  local _, port = l:addr()
  return port
end

-- -- The example -------------------------------------------------------------------

describe("examples/grpc_echo.lua", function()
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

  it("answers Echo with the request message unchanged, bytes of every value included", function()
    local r = py(port, [[
out([rpc("unary_unary", "/cohost.Echo/Echo", bytes(range(256))),
     rpc("unary_unary", "/cohost.Echo/Echo", b"")])
]])
    assert.are.equal(0, r[1].code)
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    assert.are.equal(table.concat(all), r[1].reply)
    assert.are.same({ code = 0, reply = "" }, { code = r[2].code, reply = r[2].reply })
  end)

  it("answers Repeat with the rest of the message as N messages, N its first byte", function()
    local r = py(port, [[
out([rpc("unary_stream", "/cohost.Echo/Repeat", b"\x05abc"),
     rpc("unary_stream", "/cohost.Echo/Repeat", b"\x00abc")])
]])
    assert.are.same({ code = 0, reply = { "abc", "abc", "abc", "abc", "abc" } },
      { code = r[1].code, reply = r[1].reply })
    assert.are.same({ code = 0, reply = {} }, { code = r[2].code, reply = r[2].reply })
  end)

  it("answers any other method with status 12 (UNIMPLEMENTED)", function()
    local r = py(port, [[
out([rpc("unary_unary", "/cohost.Echo/Nope", b"x"), rpc("unary_unary", "/other.Svc/Echo", b"x")])
]])
    assert.are.equal(12, r[1].code)
    assert.are.equal("unknown method /cohost.Echo/Nope", r[1].details)
    assert.are.equal(12, r[2].code)
  end)

  it("echoes a 3 MB message, and refuses one over 4 MiB with RESOURCE_EXHAUSTED", function()
    local r = py(port, [[
big = bytes(range(256)) * (3000000 // 256)
a = rpc("unary_unary", "/cohost.Echo/Echo", big)
a["same"] = a.pop("reply", None) == text(big)
out([a, rpc("unary_unary", "/cohost.Echo/Echo", b"z" * (4 * 1024 * 1024 + 1))])
]])
    assert.are.same({ code = 0, same = true }, { code = r[1].code, same = r[1].same })
    assert.are.equal(8, r[2].code)
    assert.matches("over the limit of 4194304 bytes", r[2].details)
  end)

  it("serves plain HTTP on the same port (HTTP/1.1 and HTTP/2) through its fallback", function()
    for _, v in ipairs { "--http1.1", "--http2-prior-knowledge" } do
      local code, out = h.sh(("curl -sS --max-time 10 %s http://127.0.0.1:%d/"):format(v, port))
      assert.are.equal(0, code)
      assert.matches("^a gRPC echo service", out)
    end
  end)
end)

-- -- Calls ---------------------------------------------------------------------------

describe("cohost.grpc calls", function()
  it("run client-streaming and bidirectional handlers on the same request stream", function()
    local srv = grpc.server():service("t.S", {
      Join = { client_stream = function(stream)
        local parts = {}
        for msg in stream:messages() do parts[#parts + 1] = msg end
        return table.concat(parts, "+")
      end },
      Upper = { bidi = function(stream)
        while true do
          local msg = stream:recv()
          if not msg then return end
          stream:send(msg:upper())
        end
      end },
    })
    local port = serve(srv)
    local r = py(port, [[
out([rpc("stream_unary", "/t.S/Join", iter([b"a", b"b", b"c"])),
     rpc("stream_stream", "/t.S/Upper", iter([b"x", b"yz"]))])
]])
    assert.are.same({ 0, "a+b+c" }, { r[1].code, r[1].reply })
    assert.are.same({ 0, { "X", "YZ" } }, { r[2].code, r[2].reply })
  end)

  it("let a bidi stream idle past the listener's body_timeout between messages", function()
    local srv = grpc.server({
      fallback = function(req, res)   -- the witness: a body that never comes
        local _, err = req:body()
        res:send(tostring(err))
      end,
    }):service("t.S", {
      Upper = { bidi = function(stream)
        for msg in stream:messages() do stream:send(msg:upper()) end
      end },
    })
    local port = serve(srv, { body_timeout = 0.3 })
    local r = py(port, [[
import socket, threading
first = threading.Event()
witness = []
def requests():
    yield b"a"
    first.wait(10)
    # An HTTP/1.1 request whose body never comes: its answer proves the
    # body_timeout passed since this stream's last message.
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
    witness.append(s.recv(4096).decode("latin-1").split("\r\n\r\n")[-1])
    yield b"b"
got = []
try:
    for m in ch.stream_stream("/t.S/Upper")(requests(), timeout=20):
        got.append(m.decode())
        first.set()
    out({"code": 0, "got": got, "witness": witness})
except grpc.RpcError as e:
    out({"code": e.code().value[0], "details": e.details(), "got": got, "witness": witness})
]])
    assert.are.same({ "timeout" }, r.witness)
    assert.are.same({ 0, { "A", "B" } }, { r.code, r.got }, r.details)
  end)

  it("are full duplex: a bidi handler answers each message before the client sends the next", function()
    local srv = grpc.server():service("t.S", {
      Ping = { bidi = function(stream)
        for msg in stream:messages() do stream:send("pong " .. msg) end
      end },
    })
    -- The client's next message waits for the answer to the last one:
    -- a server that read the whole stream first would never answer.
    local r = py(serve(srv), [[
import queue
answers = queue.Queue()
def pings():
    for i in range(3):
        yield b"%d" % i
        answers.get(timeout=5)
got = []
for m in ch.stream_stream("/t.S/Ping")(pings(), timeout=10):
    got.append(m.decode())
    answers.put(m)
out({"got": got})
]])
    assert.are.same({ "pong 0", "pong 1", "pong 2" }, r.got)
  end)

  it("end with the status a handler raises with grpc.error or returns, its message percent-encoded", function()
    local srv = grpc.server():service("t.S", {
      Raise = function() grpc.error(grpc.status.NOT_FOUND, "nö such thing: 100%") end,
      Return = function() return nil, grpc.status.PERMISSION_DENIED, "no" end,
    })
    local port = serve(srv)
    local r = py(port, [[
out([rpc("unary_unary", "/t.S/Raise", b""), rpc("unary_unary", "/t.S/Return", b"")])
]])
    assert.are.same({ 5, "nö such thing: 100%" }, { r[1].code, r[1].details })
    assert.are.same({ 7, "no" }, { r[2].code, r[2].details })
    -- On the wire: trailers-only, percent-encoded.
    local w = raw(port, "/t.S/Raise", "0000000000")
    assert.are.equal(cjson.null, w.trailers)
    assert.are.same({ 5, "n%C3%B6 such thing: 100%25" }, { raw_status(w) })
    assert.are.equal("application/grpc", w.headers["content-type"])
    assert.is_nil(w.headers["content-length"])   -- not in gRPC's Trailers-Only
  end)

  it("give a handler the request metadata and send the metadata it sets, -bin values in base64", function()
    local srv = grpc.server():service("t.S", {
      Md = function(msg, ctx)
        ctx:set_header("x-seen", ctx.metadata["x-user"])
        ctx:set_header("x-blob-bin", ctx.metadata["x-blob-bin"] .. "!")
        ctx:set_trailer("x-after", "t:" .. msg)
        ctx:set_trailer("x-after-bin", "\0\255")
        ctx:set_trailer("x-twice", "1"):set_trailer("x-twice", { "2", "3" })
        assert(ctx.metadata["grpc-timeout"] == nil and ctx.metadata["content-type"] == nil)
        assert(ctx.method == "/t.S/Md" and ctx.service == "t.S" and ctx.name == "Md")
        return "ok"
      end,
      Refused = function(_, ctx)   -- trailers-only: the metadata goes with the status
        ctx:set_trailer("x-twice", "1"):set_trailer("x-twice", { "2", "3" })
        return nil, grpc.status.ABORTED, "refused"
      end,
    })
    local port = serve(srv)
    local both = py(port, [[
out([rpc("unary_unary", "/t.S/Md", b"m", metadata=[("x-user", "alice"), ("x-blob-bin", b"\x00\x01\xff")]),
     rpc("unary_unary", "/t.S/Refused", b"")])
]])
    local r = both[1]
    assert.are.same({ "1", "2", "3" }, r.trailing["x-twice"])
    assert.are.same({ 10, "refused" }, { both[2].code, both[2].details })
    assert.are.same({ "1", "2", "3" }, both[2].trailing["x-twice"])
    assert.are.equal(0, r.code)
    local initial, trailing = r.initial, r.trailing
    assert.are.equal("alice", initial["x-seen"])
    assert.are.equal("\0\1\255!", initial["x-blob-bin"])
    assert.are.equal("t:m", trailing["x-after"])
    assert.are.equal("\0\255", trailing["x-after-bin"])
  end)

  it("refuse reserved metadata names", function()
    local srv = grpc.server():service("t.S", {
      Bad = function(_, ctx)
        local ok, err = pcall(ctx.set_header, ctx, "grpc-status", "0")
        return tostring(ok) .. " " .. tostring(err)
      end,
    })
    local r = call(serve(srv), "unary_unary", "/t.S/Bad", 'b""')
    assert.matches("^false .*reserved by gRPC", r.reply)
  end)

  it("honour max_receive_message_size with RESOURCE_EXHAUSTED", function()
    local srv = grpc.server { max_receive_message_size = 1000 }
    srv:service("t.S", { E = function(m) return m end })
    local r = py(serve(srv), [[
out([rpc("unary_unary", "/t.S/E", b"x" * 1000), rpc("unary_unary", "/t.S/E", b"x" * 1001)])
]])
    assert.are.equal(0, r[1].code)
    assert.are.same({ 8, "message of 1001 bytes is over the limit of 1000 bytes" }, { r[2].code, r[2].details })
  end)

  it("honour max_send_message_size with RESOURCE_EXHAUSTED", function()
    local srv = grpc.server { max_send_message_size = 10 }
    srv:service("t.S", { E = function(m) return m end })
    local r = py(serve(srv), [[
out([rpc("unary_unary", "/t.S/E", b"x" * 10), rpc("unary_unary", "/t.S/E", b"x" * 11)])
]])
    assert.are.equal(0, r[1].code)
    assert.are.same({ 8, "response message of 11 bytes is over max_send_message_size (10)" },
      { r[2].code, r[2].details })
  end)

  it("mount on http.listen beside a router, max_body_size bounding a call's request stream", function()
    local router = require("cohost.http").router()
    router:get("/page", function(_, res) res:send("a page") end)
    local srv = grpc.server { fallback = router }:service("t.S", { E = function(m) return m end })
    local port = h.http_serve(srv, { max_body_size = 100 })
    local r = py(port, [[
out([rpc("unary_unary", "/t.S/E", b"x" * 90), rpc("unary_unary", "/t.S/E", b"x" * 200)])
]])
    assert.are.same({ 0, ("x"):rep(90) }, { r[1].code, r[1].reply })
    assert.are.same({ 8, "request stream is over the listener's max_body_size" }, { r[2].code, r[2].details })
    local code, out = h.sh(("curl -sS --max-time 10 http://127.0.0.1:%d/page"):format(port))
    assert.are.same({ 0, "a page" }, { code, out })
  end)
end)

-- -- Failures -------------------------------------------------------------------------

describe("cohost.grpc failures", function()
  it("answer a handler's Lua error with INTERNAL, log its traceback, and go on serving", function()
    local p = h.start(h.shell_quote(h.tmpfile(h.server_script([[
local grpc = require "cohost.grpc"
local srv = grpc.server():service("t.S", {
  Boom = function(msg) local t = nil; return t.field end,
  Boom2 = function(msg) return msg .. {} end,
  Echo = function(msg) return msg end,
})
listener = assert(grpc.listen("127.0.0.1:0", srv))
]]))))
    h.defer(p.stop)
    local r = py(p.port, [[
out([rpc("unary_unary", "/t.S/Boom", b"x"), rpc("unary_unary", "/t.S/Boom2", b"x", timeout=None),
     rpc("unary_unary", "/t.S/Echo", b"after")])
]])
    -- With a deadline (the handler on a task of its own) and without.
    assert.are.same({ 13, "handler error (see the server's log)" }, { r[1].code, r[1].details })
    assert.are.same({ 13, "handler error (see the server's log)" }, { r[2].code, r[2].details })
    assert.are.same({ 0, "after" }, { r[3].code, r[3].reply })
    local log = h.slurp(p.err)
    -- Two messages: the log holds back a line repeated within a second.
    assert.matches("grpc /t%.S/Boom handler error: [^\n]*attempt to index local 't'", log)
    assert.matches("grpc /t%.S/Boom2 handler error: [^\n]*attempt to concatenate", log)
    assert.matches("stack traceback:", log)
    assert.is_nil(p.exited())
  end)

  it("end a streaming handler whose client cancelled: its next send raises \"closed\"", function()
    local state = { sent = 0 }
    local srv = grpc.server():service("t.S", {
      Forever = { server_stream = function(_, stream)
        local ok, err = pcall(function()
          while true do
            stream:send(("x"):rep(1000))
            state.sent = state.sent + 1
          end
        end)
        state.err = tostring(err)
        if not ok then error(err, 0) end   -- the quiet error, as raised
      end },
      Echo = function(m) return m end,
    })
    local port = serve(srv)
    local r = py(port, [[
it = ch.unary_stream("/t.S/Forever")(b"", timeout=None)
got = [next(it) for _ in range(3)]
it.cancel()
out(rpc("unary_unary", "/t.S/Echo", b"still"))
]])
    assert.are.same({ 0, "still" }, { r.code, r.reply })
    assert(h.eventually(function() return state.err end, 10), "the handler never ended")
    assert.are.equal("closed", state.err)
    assert.is_true(state.sent >= 3)
  end)

  it("cancel a handler parked outside the stream when its client cancels; its cleanup runs", function()
    local state = {}
    local srv = grpc.server():service("t.S", {
      Sleep = { server_stream = function(_, stream)
        stream:send("first")
        local ok, err = pcall(cohost.sleep, 30)
        state.err = ok and "slept" or tostring(err)
        if not ok then error(err, 0) end
      end },
      Seen = function()
        assert(h.eventually(function() return state.err end, 10), "the sleeper was not cancelled")
        return state.err
      end,
    })
    local port = serve(srv)
    local r = py(port, [[
it = ch.unary_stream("/t.S/Sleep")(b"", timeout=None)
first = next(it)
it.cancel()
out(rpc("unary_unary", "/t.S/Seen", b""))
]])
    assert.are.same({ 0, "cancelled" }, { r.code, r.reply })
  end)

  it("log a cancel at info, not as a handler error, wherever the handler was parked", function()
    -- Parked in cohost.sleep and in a cosocket read: the cancel raises
    -- "cancelled" there, which is no bug (stream:recv raises the quiet
    -- error instead, and was logged right before).
    local p = h.start("--log-level info " .. h.shell_quote(h.tmpfile(h.server_script([[
local grpc = require "cohost.grpc"
local mute = assert(cohost.listen("127.0.0.1:0", function(sock) sock:receive("*a") end))
local _, mute_port = mute:addr()
local srv = grpc.server():service("t.S", {
  Sleep = { server_stream = function(_, stream)
    stream:send("first")
    cohost.sleep(30)
  end },
  Read = { server_stream = function(_, stream)
    local s = cohost.tcp()
    assert(s:connect("127.0.0.1", mute_port))
    stream:send("first")
    s:receive("*l")
  end },
  Echo = function(msg) return msg end,
})
listener = assert(grpc.listen("127.0.0.1:0", srv))
]]))))
    h.defer(p.stop)
    local r = py(p.port, [[
for path in ("/t.S/Sleep", "/t.S/Read"):
    it = ch.unary_stream(path)(b"", timeout=None)
    next(it)
    it.cancel()
out(rpc("unary_unary", "/t.S/Echo", b"after", timeout=None))
]])
    assert.are.same({ 0, "after" }, { r.code, r.reply })
    assert.is_true(h.wait_for(function()
      local _, n = h.slurp(p.err):gsub("%[info%][^\n]*: handler cancelled\n", "")
      return n >= 2
    end), h.slurp(p.err))
    local log = h.slurp(p.err)
    assert.is_nil(log:find("handler error", 1, true), log)
    assert.is_nil(log:find("[error]", 1, true), log)
    assert.is_nil(p.exited())
  end)

  it("parse grpc-timeout into ctx.deadline and ctx:remaining()", function()
    local srv = grpc.server():service("t.S", {
      Left = function(_, ctx)
        return tostring(ctx:remaining()) .. " " .. tostring(ctx.deadline and ctx.deadline > cohost.monotonic())
      end,
    })
    local port = serve(srv)
    local r = py(port, [[
out([rpc("unary_unary", "/t.S/Left", b"", timeout=30), rpc("unary_unary", "/t.S/Left", b"", timeout=None)])
]])
    -- grpc-core rounds the grpc-timeout it sends up (30 s left 30.1 s
    -- here), so the server's deadline may be a little past the client's.
    local left = tonumber(r[1].reply:match("^(%S+) true$"))
    assert.is_true(left > 25 and left <= 31, r[1].reply)
    assert.are.equal("nil nil", r[2].reply)
  end)

  it("end a call whose deadline passes with DEADLINE_EXCEEDED, cancelling its handler", function()
    local state = {}
    local srv = grpc.server():service("t.S", {
      Slow = { server_stream = function(msg, stream)
        stream:send("first")
        state.started = true
        local ok, err = pcall(cohost.sleep, 30)
        state.err = ok and "slept" or tostring(err)
        -- Still before the call's end (the request waits for this task
        -- to unwind); a send that would not block raises all the same.
        local sent, late = pcall(stream.send, stream, "late")
        state.late = sent and "sent" or grpc.is_error(late) and late.code or tostring(late)
        if not sent then error(late, 0) end
        state.after = true
      end },
    })
    local port = serve(srv)
    -- A raw client: grpcio enforces its deadline itself, and would pass
    -- with a server that did nothing.
    local r = raw(port, "/t.S/Slow", "0000000000", { { "grpc-timeout", "1S" } })
    assert.are.same({ 4, "deadline exceeded" }, { raw_status(r) })
    assert.are.equal(10, r.data)   -- "first", framed
    assert.is_true(state.started)
    assert.are.equal("cancelled", state.err)
    assert.are.equal(4, state.late)
    assert.is_nil(state.after)
  end)

  it("reset the stream when the deadline passes in the middle of a message (the window shut)", function()
    local srv = grpc.server():service("t.S", {
      Big = function() return ("b"):rep(200000) end,   -- over the 64 KiB a stream queues
    })
    local port = serve(srv)
    local r = raw(port, "/t.S/Big", "0000000000", { { "grpc-timeout", "1S" } }, 0)
    assert.are.equal(0, r.data)
    assert.are.equal(2, r.reset)   -- RST_STREAM INTERNAL_ERROR: no trailers after half a message
    assert.are.equal(cjson.null, r.trailers)
  end)

  it("answer a truncated message prefix, a truncated message and a compressed message with INTERNAL", function()
    local srv = grpc.server():service("t.S", { E = function(m) return m end })
    local port = serve(srv)
    local a = raw(port, "/t.S/E", "000000")
    assert.are.same({ 13, "truncated message prefix (3 of 5 bytes)" }, { raw_status(a) })
    local b = raw(port, "/t.S/E", "000000000a6869")
    assert.are.same({ 13, "truncated message (2 of 10 bytes)" }, { raw_status(b) })
    local c = raw(port, "/t.S/E", "0100000002" .. "6869")
    local code, msg = raw_status(c)
    assert.are.equal(13, code)
    assert.matches("compressed message", msg)
    local d = raw(port, "/t.S/E", "0000000000" .. "0000000000")
    assert.are.same({ 13, "more than one request message for a single-message call" }, { raw_status(d) })
  end)

  it("answer an unknown grpc-encoding with UNIMPLEMENTED and a malformed grpc-timeout with INTERNAL", function()
    local srv = grpc.server():service("t.S", { E = function(m) return m end })
    local port = serve(srv)
    local a = raw(port, "/t.S/E", "0000000000", { { "grpc-encoding", "snappy" } })
    assert.are.same({ 12, "grpc-encoding snappy is not supported" }, { raw_status(a) })
    assert.are.equal("identity", a.headers["grpc-accept-encoding"])
    local b = raw(port, "/t.S/E", "0000000000", { { "grpc-timeout", "123456789S" } })
    assert.are.same({ 13, "malformed grpc-timeout" }, { raw_status(b) })
  end)

  it("answer a request without content-type application/grpc with 415, and gRPC over HTTP/1.1 with 505", function()
    local srv = grpc.server():service("t.S", { E = function(m) return m end })
    local port = serve(srv)
    local code, out = h.sh(("curl -sS --max-time 10 --http2-prior-knowledge -o /dev/null -w '%%{http_code}' "
      .. "-H 'content-type: text/plain' --data-binary x http://127.0.0.1:%d/t.S/E"):format(port))
    assert.are.equal(0, code)
    assert.are.equal("415", out)
    code, out = h.sh(("curl -sS --max-time 10 --http1.1 -o /dev/null -w '%%{http_code}' "
      .. "-H 'content-type: application/grpc' --data-binary x http://127.0.0.1:%d/t.S/E"):format(port))
    assert.are.equal(0, code)
    assert.are.equal("505", out)
  end)
end)

-- -- Framing helpers (shared with a client) ------------------------------------------

describe("cohost.grpc.frame and cohost.grpc.status", function()
  local frame, status = require "cohost.grpc.frame", require "cohost.grpc.status"

  -- A read function over s that gives at most step bytes a call.
  local function source(s, step)
    local pos = 1
    return function(n)
      if pos > #s then return nil end
      local piece = s:sub(pos, pos + math.min(n, step) - 1)
      pos = pos + #piece
      return piece
    end
  end

  it("read messages back whatever the read boundaries, then a clean end", function()
    local big = ("0123456789"):rep(20000)
    local wire = frame.encode("a") .. frame.encode("") .. frame.encode(big) .. frame.encode("zz")
    for _, step in ipairs { 1, 3, 5, 7, 4096, 65536 } do
      local r = frame.reader(source(wire, step))
      assert.are.same({ "a", "", big, "zz" }, { r:next(), r:next(), r:next(), r:next() })
      assert.is_nil(r:next())
    end
    assert.are.equal("\0\1\2\3\4", frame.prefix(0x01020304))
  end)

  it("pass a read error on with no status code", function()
    local r = frame.reader(function() return nil, "timeout" end)
    assert.are.same({ nil, nil, "timeout" }, { r:next() })
  end)

  it("parse and format grpc-timeout values and percent-encode grpc-message", function()
    assert.are.equal(2 * 3600, status.parse_timeout("2H"))
    assert.are.equal(0.25, status.parse_timeout("250m"))
    assert.are.equal(99999999e-9, status.parse_timeout("99999999n"))
    for _, bad in ipairs { "", "1", "123456789m", "1x", "-1S", "1.5S", " 1S" } do
      assert.is_nil(status.parse_timeout(bad), bad)
    end
    for _, secs in ipairs { 0.001, 0.25, 1, 59, 3600 * 24, 1e-9 } do
      local v = status.format_timeout(secs)
      assert.is_true(#v <= 9 and status.parse_timeout(v) >= secs - 1e-12, v)
    end
    assert.are.equal("0.25", tostring(status.parse_timeout(status.format_timeout(0.25))))
    local s = "ok %25 \n\0é"
    assert.are.equal("ok %2525 %0A%00%C3%A9", status.encode_message(s))
    assert.are.equal(s, status.decode_message(status.encode_message(s)))
    assert.are.equal("100% sure %zz", status.decode_message("100% sure %zz"))
    assert.are.equal(12, status.UNIMPLEMENTED)
    assert.are.equal("DEADLINE_EXCEEDED", status.names[4])
  end)
end)
