-- HTTP/2 on http.listen (docs/http2.md): h2c with prior knowledge beside
-- HTTP/1.1 on a plain port, h2 by ALPN on TLS, a task per stream, flow
-- control both ways, trailers, files, errors per stream, the drain's
-- GOAWAY. The servers run in this process; the clients are real: curl,
-- nghttp, h2load, and Debian's python3-h2 where a test needs frames
-- (windows, resets, the order of events on one connection).
local cohost = require "cohost"
local http = require "cohost.http"
local sema = require "cohost.semaphore"
local h = require "spec.helper"
h.cleanups(after_each)

local serve = h.http_serve

-- -- A python3-h2 client ------------------------------------------------------

-- Prelude of the Python clients: Client(port, tls, settings) speaks
-- HTTP/2 over one connection; request() opens a stream (its body sent
-- as the stream's window allows), until(pred) reads frames until pred()
-- holds (10 s socket timeout: a stall fails, never hangs). A stream in
-- hold has its DATA acknowledged on the connection only, so its own
-- window stays shut until release(). Results go to stdout as JSON.
local PY = [[
import json, socket, ssl, sys
import h2.connection, h2.config, h2.events, h2.settings, h2.exceptions

class Client:
    def __init__(self, port, tls=False, settings=None):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            s = ctx.wrap_socket(s, server_hostname="localhost")
        self.s = s
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.c.initiate_connection()
        if settings:
            self.c.update_settings(settings)
        self.streams, self.pending, self.held = {}, {}, {}
        self.ended = []          # stream ids in the order they ended
        self.goaway = None
        self.closed = False
        self.flush()

    def flush(self):
        d = self.c.data_to_send()
        if d:
            self.s.sendall(d)

    def request(self, path, method="GET", body=None, headers=(), hold=False):
        sid = self.c.get_next_available_stream_id()
        hs = [(":method", method), (":path", path), (":scheme", "http"),
              (":authority", "localhost")] + list(headers)
        self.c.send_headers(sid, hs, end_stream=body is None)
        self.streams[sid] = {"status": None, "headers": {}, "data": b"",
                             "trailers": None, "ended": False, "reset": None}
        if hold:
            self.held[sid] = 0
        if body is not None:
            self.pending[sid] = body
            self.pump()
        self.flush()
        return sid

    def pump(self):
        for sid, data in list(self.pending.items()):
            while data:
                w = min(self.c.local_flow_control_window(sid), self.c.max_outbound_frame_size)
                if w <= 0:
                    break
                self.c.send_data(sid, data[:w])
                data = data[w:]
            if data:
                self.pending[sid] = data
            else:
                del self.pending[sid]
                self.c.end_stream(sid)
        self.flush()

    def release(self, sid):
        n = self.held.pop(sid)
        if n:
            self.c.increment_flow_control_window(n, stream_id=sid)
        self.flush()

    def step(self):
        data = self.s.recv(65536)
        if not data:
            self.closed = True
            return
        for e in self.c.receive_data(data):
            st = self.streams.get(getattr(e, "stream_id", None) or 0)
            if st is None and getattr(e, "stream_id", 0):
                if isinstance(e, h2.events.DataReceived):   # a stream we reset
                    self.c.increment_flow_control_window(e.flow_controlled_length)
                continue
            if isinstance(e, h2.events.ResponseReceived):
                st["headers"] = dict(e.headers)
                st["status"] = int(st["headers"][":status"])
            elif isinstance(e, h2.events.DataReceived):
                st["data"] += e.data
                if e.stream_id in self.held:
                    self.held[e.stream_id] += e.flow_controlled_length
                    self.c.increment_flow_control_window(e.flow_controlled_length)
                else:
                    self.c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.TrailersReceived):
                st["trailers"] = dict(e.headers)
            elif isinstance(e, h2.events.StreamEnded):
                st["ended"] = True
                self.ended.append(e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                if st is not None:
                    st["reset"] = e.error_code
                    st["ended"] = True
                    self.ended.append(e.stream_id)
            elif isinstance(e, h2.events.WindowUpdated):
                pass
            elif isinstance(e, h2.events.ConnectionTerminated):
                self.goaway = {"code": int(e.error_code), "last": e.last_stream_id}
        self.pump()

    def until(self, pred):
        while not pred():
            if self.closed:
                raise SystemExit("connection closed before the condition held")
            self.step()

    def done(self, sid):
        return self.streams[sid]["ended"]

    def text(self, sid):
        return self.streams[sid]["data"].decode("latin-1")

def out(v):
    print(json.dumps(v))
]]

-- Runs the Python program body (after PY) with args; returns its JSON
-- result, failing the test with its stderr if it failed.
local function py(body, args)
  local code, out, err = h.python(PY .. body, args, 30)
  assert(code == 0, "python client failed: " .. err .. out)
  return require("cjson").decode(out:match("[^\n]*\n?$"))
end

-- -- Fixtures -------------------------------------------------------------------

local dir, cert, key
setup(function()
  dir = os.tmpname()
  os.remove(dir)
  h.must("mkdir " .. dir)
  h.tls_ca(dir, "cohost-h2-ca")
  cert, key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")
end)

teardown(function()
  if dir then os.execute("rm -rf " .. h.shell_quote(dir)) end
end)

local function tls(opts)
  opts = opts or {}
  opts.ssl_cert, opts.ssl_key = cert, key
  return opts
end

-- A handler that describes the request.
local function describe_req(req, res)
  res:header("X-Version", tostring(req.version))
  res:send(("%s %s %s q=%s host=%s peer=%s"):format(req.method, req.path,
    tostring(req.version), tostring(req.query.a), tostring(req.headers.host),
    tostring(req.peer:match("^127%.0%.0%.1:%d+$") ~= nil)))
end

local function curl(args)
  local code, out, err = h.sh("curl -sS --max-time 15 " .. args, 25)
  assert(code == 0, "curl failed: " .. err)
  return out
end

-- -- Protocol selection ----------------------------------------------------------

describe("HTTP/2 on http.listen", function()
  it("answers curl --http2-prior-knowledge with the same req fields and req.version 2", function()
    local port = serve(describe_req)
    local out = curl(("--http2-prior-knowledge -i 'http://127.0.0.1:%d/a/b?a=1'"):format(port))
    assert.matches("^HTTP/2 200", out)
    assert.matches("\nx%-version: 2\r?\n", out)
    assert.matches("GET /a/b 2 q=1 host=127%.0%.0%.1:" .. port .. " peer=true$", out)
  end)

  it("serves HTTP/1.1 on the same port", function()
    local port = serve(describe_req)
    local out = curl(("--http1.1 -i 'http://127.0.0.1:%d/x?a=2'"):format(port))
    assert.matches("^HTTP/1%.1 200", out)
    assert.matches("GET /x 1%.1 q=2", out)
  end)

  it("chooses h2 by ALPN on a TLS listener, and http/1.1 for a client that asks for it", function()
    local port = serve(describe_req, tls())
    local out = curl(("-k --http2 -w ' %%{http_version}' https://127.0.0.1:%d/t"):format(port))
    assert.matches("GET /t 2 .* 2$", out)
    out = curl(("-k --http1.1 -w ' %%{http_version}' https://127.0.0.1:%d/t"):format(port))
    assert.matches("GET /t 1%.1 .* 1%.1$", out)
  end)

  it("speaks only HTTP/1.1 with opts.http2 = false", function()
    local port = serve(describe_req, tls { http2 = false })
    local out = curl(("-k --http2 -w ' %%{http_version}' https://127.0.0.1:%d/t"):format(port))
    assert.matches("GET /t 1%.1 .* 1%.1$", out)
    local plain = serve(describe_req, { http2 = false })
    local code = h.sh(("curl -s --max-time 5 --http2-prior-knowledge http://127.0.0.1:%d/"):format(plain))
    assert.are_not.equal(0, code)
    assert.matches("GET / 1%.1", curl(("http://127.0.0.1:%d/"):format(plain)))
  end)

  it("advertises the concurrent stream limit (128 by default, opts.http2_max_concurrent_streams)", function()
    local body = [[
c = Client(int(sys.argv[1]))
c.until(lambda: c.c.remote_settings.max_concurrent_streams < 2**31 - 1 or c.closed)
a = c.c.remote_settings.max_concurrent_streams
out({"max": a})
]]
    assert.are.equal(128, py(body, tostring(serve(describe_req))).max)
    assert.are.equal(7, py(body, tostring(serve(describe_req, { http2_max_concurrent_streams = 7 }))).max)
  end)
end)

-- -- Streams and tasks ---------------------------------------------------------------

describe("HTTP/2 streams", function()
  it("run each on its own task: a handler parked on one stream does not delay another", function()
    local gate = sema.new(0)
    local threads = {}
    local port = serve(function(req, res)
      threads[#threads + 1] = tostring(coroutine.running())
      if req.path == "/park" then
        assert(gate:wait(10), "never released")
        return res:send("parked")
      end
      gate:post()
      res:send("released")
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/park")
b = c.request("/release")
c.until(lambda: c.done(a) and c.done(b))
out({"order": c.ended, "a": c.text(a), "b": c.text(b), "a_id": a, "b_id": b})
]], tostring(port))
    assert.are.same({ r.b_id, r.a_id }, r.order)
    assert.are.equal("parked", r.a)
    assert.are.equal("released", r.b)
    assert.are_not.equal(threads[1], threads[2])
  end)

  it("past http2_max_concurrent_streams are refused (REFUSED_STREAM) while the others run", function()
    local gate = sema.new(0)
    local port = serve(function(req, res)
      if req.path == "/release" then
        gate:post(2)
        return res:send("released")
      end
      assert(gate:wait(10), "never released")
      res:send("done")
    end, { http2_max_concurrent_streams = 2 })
    local r = py([=[
c = Client(int(sys.argv[1]))
# Sent before the server's SETTINGS are read, so the client does not
# hold the third back itself.
ids = [c.request("/park") for _ in range(3)]
c.until(lambda: c.done(ids[2]))
other = Client(int(sys.argv[1]))
rel = other.request("/release")
other.until(lambda: other.done(rel))
c.until(lambda: c.done(ids[0]) and c.done(ids[1]))
out({"statuses": [c.streams[i]["status"] for i in ids], "reset": c.streams[ids[2]]["reset"]})
]=], tostring(port))
    assert.are.same({ 200, 200 }, { r.statuses[1], r.statuses[2] })
    assert.are.equal(7, r.reset)   -- REFUSED_STREAM
  end)

  it("past the limit are refused after the client acknowledged SETTINGS too; the connection goes on", function()
    local gate = sema.new(0)
    local port = serve(function(req, res)
      if req.path == "/release" then
        gate:post(2)
        return res:send("released")
      end
      if req.path == "/park" then assert(gate:wait(10), "never released") end
      res:send("done " .. req.path)
    end, { http2_max_concurrent_streams = 2 })
    local r = py([=[
c = Client(int(sys.argv[1]))
# The server's SETTINGS read: the client's ACKs go out before the streams.
c.until(lambda: c.c.remote_settings.max_concurrent_streams == 2)
ids = [c.request("/park"), c.request("/park")]
# python-h2 would hold a third stream back itself: it is told the limit
# is higher, so the HEADERS go out.
rs = c.c.remote_settings
rs[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = 100
rs.acknowledge()
extra = c.request("/extra")
try:
    c.until(lambda: c.done(extra))
    other = Client(int(sys.argv[1]))
    rel = other.request("/release")
    other.until(lambda: other.done(rel))
    c.until(lambda: c.done(ids[0]) and c.done(ids[1]))
    retry = c.request("/retry")   # the refused stream, retried
    c.until(lambda: c.done(retry))
except SystemExit as e:
    out({"closed": str(e), "goaway": c.goaway})
    sys.exit(0)
out({"reset": c.streams[extra]["reset"], "statuses": [c.streams[i]["status"] for i in ids],
     "retry": c.text(retry), "goaway": c.goaway})
]=], tostring(port))
    assert.is_nil(r.closed, "the connection ended: GOAWAY " .. require("cjson").encode(r.goaway))
    assert.are.equal(7, r.reset)   -- REFUSED_STREAM
    assert.are.same({ 200, 200 }, r.statuses)
    assert.are.equal("done /retry", r.retry)
    assert.is_not_table(r.goaway)
  end)

  it("carry many concurrent requests on few connections (h2load -c 4 -m 10)", function()
    local port = serve(function(req, res) res:send("hello") end)
    local code, out = h.sh(("h2load -n 400 -c 4 -m 10 http://127.0.0.1:%d/"):format(port), 30)
    assert.are.equal(0, code, out)
    assert.matches("400 succeeded, 0 failed, 0 errored", out)
  end)

  it("cancel a handler parked outside req/res when the client resets its stream; its cleanup runs, the others go on", function()
    local started, finished = sema.new(0), sema.new(0)
    local seen
    local port = serve(function(req, res)
      if req.path == "/sleep" then
        started:post()
        local ok, e = pcall(cohost.sleep, 30)
        seen = ok and "slept" or tostring(e)
        finished:post()
        return
      end
      if req.path == "/started" then
        assert(started:wait(10), "the sleeper never started")
        return res:send("started")
      end
      assert(finished:wait(10), "the sleeper was not cancelled")
      res:send(seen)
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/sleep")
s = c.request("/started")
c.until(lambda: c.done(s))
c.c.reset_stream(a, error_code=8)
c.flush()
b = c.request("/seen")
c.until(lambda: c.done(b))
out({"seen": c.text(b), "status": c.streams[b]["status"], "reset_id": a})
]], tostring(port))
    assert.are.equal(200, r.status)
    assert.are.equal("cancelled", r.seen)
  end)

  it("answer a handler error with 500 on that stream only; the connection lives on", function()
    local port = serve(function(req, res)
      if req.path == "/err" then error("boom") end
      res:send("ok")
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/err")
c.until(lambda: c.done(a))
b = c.request("/ok")
c.until(lambda: c.done(b))
out({"a": c.streams[a]["status"], "b": c.streams[b]["status"], "body": c.text(b),
     "goaway": c.goaway is not None})
]], tostring(port))
    assert.are.equal(500, r.a)
    assert.are.equal(200, r.b)
    assert.are.equal("ok", r.body)
    assert.is_false(r.goaway)
  end)

  it("end with res:reset(code): RST_STREAM code, an info line, no handler error; HTTP/1.1 closes without a response", function()
    local script = h.tmpfile([[
local cohost = require "cohost"
local http = require "cohost.http"
assert(http.listen("127.0.0.1:" .. arg[1], function(req, res)
  if req.path == "/reset" then
    if not req.query.early then res:write("part") end
    res:reset(tonumber(req.query.code))
    local ok, err = pcall(res.write, res, "more")
    cohost.log(cohost.NOTICE, "after reset: ", tostring(ok), " ", tostring(err))
    return
  end
  res:send("fine")
end))
]])
    local port = h.free_port()
    local pid, log = h.spawn(("exec timeout 60 %s --log-level info %s %d"):format(h.COHOST, script, port))
    h.defer(function() h.stop_pid(pid); os.remove(log) end)
    h.wait_port(port, log)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/reset?code=8")
d = c.request("/reset")
b = c.request("/ok")
c.until(lambda: c.done(a) and c.done(b) and c.done(d))
out({"a": c.streams[a]["reset"], "d": c.streams[d]["reset"], "b": c.text(b)})
]], tostring(port))
    assert.are.same({ a = 8, d = 2, b = "fine" }, r)   -- queued body bytes may go unsent
    -- HTTP/1.1: no response (the head was never sent), the connection closed.
    local code, out = h.sh(("curl -sS --max-time 10 http://127.0.0.1:%d/reset?early=1"):format(port), 20)
    assert.are.equal(52, code)   -- curl: empty reply from server
    assert.are.equal("", out)
    local text
    assert(h.eventually(function()
      text = h.slurp(log)
      local _, n = text:gsub("after reset: false", "")
      return n == 3 and text
    end, 10), "the handlers did not go on after res:reset")
    assert.matches("the handler reset stream %d+ of 127%.0%.0%.1:%d+ %(code 8%)", text)
    assert.matches("the handler reset its response to 127%.0%.0%.1:%d+: connection closed", text)
    assert.matches("response already sent", text)
    assert.is_nil(text:find("error", 1, true), text)
  end)

  it("refuse res:hijack() with a clear error", function()
    local port = serve(function(_, res)
      local ok, err = pcall(res.hijack, res)
      res:send(tostring(ok) .. " " .. tostring(err))
    end)
    local out = curl(("--http2-prior-knowledge http://127.0.0.1:%d/"):format(port))
    assert.matches("^false .*hijack%(%) is not available on HTTP/2", out)
  end)
end)

-- -- Request bodies --------------------------------------------------------------------

describe("HTTP/2 idle connections", function()
  -- Raw h2c frames from a cohost.tcp socket (this process serves them).
  local function be(n, bytes)
    local t = {}
    for i = bytes, 1, -1 do
      t[i] = string.char(n % 256)
      n = math.floor(n / 256)
    end
    return table.concat(t)
  end
  local function frame(ty, flags, id, payload)
    return be(#payload, 3) .. string.char(ty, flags) .. be(id, 4) .. payload
  end
  local function lit(name, value)   -- HPACK literal, no indexing, no Huffman
    return string.char(0, #name) .. name .. string.char(#value) .. value
  end
  local function get(id)
    return frame(1, 5, id, lit(":method", "GET") .. lit(":scheme", "http") .. lit(":path", "/")
      .. lit(":authority", "x"))
  end
  -- Reads frames until stream id ends; returns its DATA.
  local function answer(s, id)
    local data = {}
    while true do
      local hd = assert(s:receive(9))
      local len = hd:byte(1) * 65536 + hd:byte(2) * 256 + hd:byte(3)
      local ty, fl = hd:byte(4), hd:byte(5)
      local sid = ((hd:byte(6) % 128) * 16777216) + hd:byte(7) * 65536 + hd:byte(8) * 256 + hd:byte(9)
      local payload = len > 0 and assert(s:receive(len)) or ""
      if ty == 4 and fl % 2 == 0 then assert(s:send(frame(4, 1, 0, ""))) end   -- ACK SETTINGS
      if sid == id and ty == 0 then data[#data + 1] = payload end
      if sid == id and (ty == 0 or ty == 1) and fl % 2 == 1 then return table.concat(data) end
    end
  end

  it("hold no coroutine, and serve their next stream when it comes", function()
    local port = serve(function(req, res) res:send("hi " .. req.path) end)
    cohost.sleep(0.05)
    local before = cohost.stats()
    local socks = {}
    for i = 1, 50 do
      local s = h.connect(port, 5000)
      socks[i] = s
      assert(s:send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" .. frame(4, 0, 0, "") .. get(1)))
      assert.equal("hi /", answer(s, 1))
    end
    h.defer(function() for _, s in ipairs(socks) do s:close() end end)
    local after
    h.eventually(function()
      after = cohost.stats()
      return after.coros - before.coros < 10
    end, 5)
    assert.is_true(after.coros - before.coros < 10,
      ("live coroutines grew from %d to %d with 50 idle HTTP/2 connections"):format(before.coros, after.coros))
    assert.is_true(after.connections - before.connections >= 50)
    for i = 1, 50 do   -- each one serves a second stream on the same connection
      assert(socks[i]:send(get(3)))
      assert.equal("hi /", answer(socks[i], 3))
    end
  end)
end)

describe("HTTP/2 metrics", function()
  -- cohost.metrics' series as a table: sample line (name{labels}) -> value.
  local function samples()
    local t = {}
    for name, value in require("cohost.metrics").render():gmatch("\n([%w_:]+%b{}) (%S+)") do
      t[name] = tonumber(value)
    end
    for name, value in require("cohost.metrics").render():gmatch("\n([%w_:]+) (%S+)") do
      t[name] = tonumber(value)
    end
    return t
  end

  it("count each stream in cohost_http_requests_total and the duration histogram, as HTTP/1.1 requests", function()
    local port = serve(function(req, res)
      if req.path == "/missing" then res.status = 404 end
      res:send("x")
    end)
    local A = 'cohost_http_requests_total{code="200",method="GET",route=""}'
    local B = 'cohost_http_requests_total{code="404",method="PUT",route=""}'
    local D = 'cohost_http_request_duration_seconds_count{route=""}'
    local before = samples()
    -- Three streams on one connection (nghttp: curl 7.88 fails to reuse
    -- an h2c connection before it sends anything), then a PUT.
    local base = ("http://127.0.0.1:%d"):format(port)
    local code, _, err = h.sh(("nghttp -n %s/a %s/b %s/c"):format(base, base, base), 20)
    assert.equal(0, code, err)
    curl(("--http2-prior-knowledge -o /dev/null -X PUT %s/missing"):format(base))
    local after = samples()
    assert.equal((before[A] or 0) + 3, after[A])
    assert.equal((before[B] or 0) + 1, after[B])
    assert.equal((before[D] or 0) + 4, after[D])
  end)
end)

describe("HTTP/2 request bodies", function()
  it("stream through req:chunks, larger than a window", function()
    local port = serve(function(req, res)
      local n, pieces = 0, 0
      for piece in req:chunks(8192) do n, pieces = n + #piece, pieces + 1 end
      res:send(n .. " " .. pieces)
    end)
    local file = h.tmpfile(h.random_bytes(300000))
    local out = curl(("--http2-prior-knowledge --data-binary @%s http://127.0.0.1:%d/"):format(file, port))
    local n, pieces = out:match("^(%d+) (%d+)$")
    assert.are.equal(300000, tonumber(n))
    assert.is_true(tonumber(pieces) > 1)
  end)

  it("arrive whole through req:body() past the stream window, and req:json works", function()
    local port = serve(function(req, res)
      if req.path == "/json" then return res:json(req:json()) end
      res:send(assert(req:body()))   -- back whole: a large send too
    end)
    local data = h.random_bytes(500000)
    local out = curl(("--http2-prior-knowledge --data-binary @%s http://127.0.0.1:%d/"):format(h.tmpfile(data), port))
    assert.are.equal(#data, #out)
    assert.is_true(out == data)
    out = curl(("--http2-prior-knowledge -H 'Content-Type: application/json' -d '{\"a\":[1,2]}' http://127.0.0.1:%d/json"):format(port))
    assert.are.equal('{"a":[1,2]}', out)
  end)

  it("stall only their own stream while the handler does not read", function()
    local gate = sema.new(0)
    local port = serve(function(req, res)
      if req.path == "/upload" then
        assert(gate:wait(10), "never released")
        return res:send(#assert(req:body()))
      end
      if req.path == "/release" then gate:post() end
      res:send("ok")
    end, { max_body_size = 1048576 })
    local r = py([[
c = Client(int(sys.argv[1]))
up = c.request("/upload", "POST", b"u" * 300000)
ok = c.request("/ok")
c.until(lambda: c.done(ok))
stalled = len(c.pending.get(up, b""))
rel = c.request("/release")
c.until(lambda: c.done(up) and c.done(rel))
out({"ok": c.text(ok), "stalled": stalled, "up": c.text(up)})
]], tostring(port))
    assert.are.equal("ok", r.ok)
    assert.is_true(r.stalled > 0, "the upload was not held back by its window")
    assert.are.equal("300000", r.up)
  end)

  it("wait past body_timeout for a handler that lifts it with req:settimeout (0: no limit, or ms)", function()
    local port = serve(function(req, res)
      local t = req.query.t
      if t then req:settimeout(tonumber(t)) end
      local d, err = req:read()
      res:send(tostring(d) .. " " .. tostring(err))
    end, { body_timeout = 0.3 })
    local r = py([[
c = Client(int(sys.argv[1]))
hs = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost")]
ids = {}
for path in ("/default", "/lifted?t=0", "/longer?t=30000"):
    sid = c.c.get_next_available_stream_id()
    c.c.send_headers(sid, hs + [(":path", path)])
    c.streams[sid] = {"status": None, "headers": {}, "data": b"", "trailers": None, "ended": False, "reset": None}
    ids[path] = sid
c.flush()
c.until(lambda: c.done(ids["/default"]))
for path in ("/lifted?t=0", "/longer?t=30000"):
    c.c.send_data(ids[path], b"late", end_stream=True)
c.flush()
c.until(lambda: all(c.done(s) for s in ids.values()))
out({p: c.text(s) for p, s in ids.items()})
]], tostring(port))
    assert.are.same({ ["/default"] = "nil timeout", ["/lifted?t=0"] = "late nil",
                      ["/longer?t=30000"] = "late nil" }, r)
  end)

  it("past max_body_size get 413", function()
    local port = serve(function(req, res)
      local b, err = req:body()
      if not b then error(err) end
      res:send("read")
    end, { max_body_size = 1000 })
    local out = curl(("--http2-prior-knowledge -o /dev/null -w '%%{http_code}' --data-binary @%s http://127.0.0.1:%d/")
      :format(h.tmpfile(("z"):rep(5000)), port))
    assert.are.equal("413", out)
    out = curl(("--http2-prior-knowledge -o /dev/null -w '%%{http_code}' --data-binary @%s http://127.0.0.1:%d/")
      :format(h.tmpfile(("z"):rep(500)), port))
    assert.are.equal("200", out)
  end)
end)

-- -- Responses --------------------------------------------------------------------------

describe("HTTP/2 responses", function()
  it("stream under flow control: a small window gets every byte and other streams proceed", function()
    local written, TOTAL = 0, 400000
    local port = serve(function(req, res)
      if req.path == "/big" then
        local piece = ("0123456789"):rep(1000)
        while written < TOTAL do
          res:write(piece)
          written = written + #piece
        end
        return
      end
      res:send("written " .. written)
    end)
    local r = py([[
c = Client(int(sys.argv[1]), settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 4096})
big = c.request("/big", hold=True)
c.until(lambda: len(c.streams[big]["data"]) >= 4096)
small = c.request("/small")
c.until(lambda: c.done(small))
seen = len(c.streams[big]["data"])
c.release(big)
c.until(lambda: c.done(big))
out({"small": c.text(small), "seen": seen, "big": len(c.streams[big]["data"]),
     "status": c.streams[big]["status"], "data_ok": c.text(big) == "0123456789" * 40000})
]], tostring(port))
    assert.are.equal(4096, r.seen)
    local during = tonumber(r.small:match("^written (%d+)$"))
    assert.is_true(during < 400000, "the handler was not held back: " .. r.small)
    assert.are.equal(400000, r.big)
    assert.is_true(r.data_ok)
  end)

  it("carry trailers set with res:trailer", function()
    local port = serve(function(_, res)
      res:trailer("grpc-status", "0")
      res:write("part1 ")
      res:trailer("X-Checksum", "abc")
      res:send("part2")
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/")
c.until(lambda: c.done(a))
out({"body": c.text(a), "trailers": c.streams[a]["trailers"]})
]], tostring(port))
    assert.are.equal("part1 part2", r.body)
    assert.are.same({ ["grpc-status"] = "0", ["x-checksum"] = "abc" }, r.trailers)
  end)

  it("without a body but with trailers are trailers-only: one HEADERS frame, no content-length", function()
    local port = serve(function(req, res)
      res:header("content-type", "application/grpc")
      if req.path == "/only" then res:trailer("grpc-status", "5") end
      res:send("")
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/only")
b = c.request("/empty")
c.until(lambda: c.done(a) and c.done(b))
out({"a": c.streams[a]["headers"], "a_trailers": c.streams[a]["trailers"],
     "b": c.streams[b]["headers"]})
]], tostring(port))
    assert.are.equal("5", r.a["grpc-status"])
    assert.is_nil(r.a["content-length"])
    assert.are.equal(require("cjson").null, r.a_trailers)   -- no second HEADERS frame
    assert.are.equal("0", r.b["content-length"])   -- an ordinary empty response keeps it
    assert.is_nil(r.b["grpc-status"])
  end)

  it("carry trailers after a chunked HTTP/1.1 body too", function()
    local port = serve(function(_, res)
      res:write("abc")
      res:trailer("X-Sum", "3")
    end)
    local s = h.dial(port)
    assert(s:send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    local all = s:receive("*a")
    assert.matches("\r\n\r\n3\r\nabc\r\n0\r\nX%-Sum: 3\r\n\r\n$", all)
  end)

  it("make an HTTP/1.1 res:send chunked when trailers are set", function()
    local port = serve(function(_, res)
      res:trailer("X-Sum", "5")
      res:send("hello")
    end)
    local s = h.dial(port)
    assert(s:send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    local all = s:receive("*a")
    assert.matches("\r\nTransfer%-Encoding: chunked\r\n", all)
    assert.matches("\r\n\r\n5\r\nhello\r\n0\r\nX%-Sum: 5\r\n\r\n$", all)
  end)

  it("serve files with res:sendfile, ranges included, over h2c and h2", function()
    local data = h.random_bytes(200000)
    local file = h.tmpfile(data)
    local port = serve(function(_, res) assert(res:sendfile(file)) end)
    local got = h.tmpfile()
    curl(("--http2-prior-knowledge -o %s http://127.0.0.1:%d/f"):format(got, port))
    assert.is_true(h.slurp(got) == data)
    local out = curl(("--http2-prior-knowledge -i -H 'Range: bytes=10-19' http://127.0.0.1:%d/f"):format(port))
    assert.matches("^HTTP/2 206", out)
    assert.is_true(out:sub(-10) == data:sub(11, 20))
    local tport = serve(function(_, res) assert(res:sendfile(file)) end, tls())
    curl(("-k --http2 -o %s https://127.0.0.1:%d/f"):format(got, tport))
    assert.is_true(h.slurp(got) == data)
  end)

  it("are written to the access_log, one line per stream", function()
    local log = h.tmpfile()
    local port = serve(function(_, res) res:send("hello") end, { access_log = log })
    -- One URL per curl: 7.88 fails a second request on a prior-knowledge
    -- connection it reuses (nginx's too).
    curl(("--http2-prior-knowledge -A 'h2-agent' 'http://127.0.0.1:%d/a?x=1'"):format(port))
    curl(("--http2-prior-knowledge -A 'h2-agent' 'http://127.0.0.1:%d/b'"):format(port))
    local text = h.eventually(function()
      local t = h.slurp(log)
      return select(2, t:gsub("\n", "")) >= 2 and t
    end, 3)
    assert.matches('^127%.0%.0%.1 %- %- %[[^]]+%] "GET /a%?x=1 HTTP/2%.0" 200 5 "%-" "h2%-agent"\n', text)
    assert.matches('"GET /b HTTP/2%.0" 200 5', text)
  end)

  it("answer HEAD with the headers only", function()
    local port = serve(function(_, res) res:send("twelve bytes") end)
    local out = curl(("--http2-prior-knowledge -I http://127.0.0.1:%d/"):format(port))
    assert.matches("^HTTP/2 200", out)
    assert.matches("content%-length: 12", out)
  end)
end)

-- -- Bad input ------------------------------------------------------------------------------

describe("HTTP/2 bad input", function()
  it("a bad preface on a plain port is an HTTP/1.1 error and a close; the server serves on", function()
    local port = serve(describe_req)
    local s = h.dial(port)
    assert(s:send("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"))
    local all = s:receive("*a")
    assert.matches("^HTTP/1%.1 [45]%d%d", all)
    assert.matches("GET / 2", curl(("--http2-prior-knowledge http://127.0.0.1:%d/"):format(port)))
  end)

  it("garbage after ALPN h2 closes that connection cleanly; the server serves on", function()
    local port = serve(describe_req, tls())
    local r = py([[
import ssl
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["h2"])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10),
                    server_hostname="localhost")
alpn = s.selected_alpn_protocol()
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
got = b""
try:
    while True:
        d = s.recv(4096)
        if not d: break
        got += d
except (ssl.SSLError, ConnectionResetError):
    pass
out({"alpn": alpn, "http1": got.startswith(b"HTTP/1")})
]], tostring(port))
    assert.are.equal("h2", r.alpn)
    assert.is_false(r.http1)
    assert.matches("GET / 2", curl(("-k --http2 https://127.0.0.1:%d/"):format(port)))
  end)

  it("joins split Cookie fields into one header, as HTTP/1.1 has it", function()
    local port = serve(function(req, res) res:send(req.headers.cookie) end)
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/", headers=[("cookie", "a=1"), ("x-o", "p"), ("cookie", "b=2")])
c.until(lambda: c.done(a))
out({"body": c.text(a)})
]], tostring(port))
    assert.are.equal("a=1; b=2", r.body)
  end)

  it("ends a rapid reset (streams opened and reset at once) with GOAWAY ENHANCE_YOUR_CALM", function()
    local started = 0
    local port = serve(function(_, res)
      started = started + 1
      res:send("x")
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
hs = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")]
try:
    for i in range(1000):
        sid = c.c.get_next_available_stream_id()
        c.c.send_headers(sid, hs, end_stream=True)
        c.c.reset_stream(sid)
        if i % 20 == 0:
            c.flush()
    c.flush()
    c.until(lambda: c.goaway is not None)
except (BrokenPipeError, ConnectionResetError, SystemExit, h2.exceptions.ProtocolError):
    pass
out({"goaway": c.goaway})
]], tostring(port))
    assert.is_table(r.goaway, "no GOAWAY")
    assert.are.equal(11, r.goaway.code)   -- ENHANCE_YOUR_CALM
    assert.is_true(started < 1000, "every reset stream ran its handler")
    assert.matches("GET /d 2", curl(("--http2-prior-knowledge http://127.0.0.1:%d/d"):format(serve(describe_req))))
  end)

  it("logs the first of many connections' rapid resets, then a summary line with their count", function()
    -- One line per connection filled the log (7,362 lines in 12 s from
    -- one client). 30 connections over both workers of -w 2, each opening
    -- 400 streams and resetting each at once, from raw bytes: the
    -- preface, an empty SETTINGS, then HEADERS (GET / from HPACK's static
    -- table) and RST_STREAM CANCEL per stream, all in one write.
    local p = h.start("-w 2 " .. h.shell_quote(h.tmpfile(h.server_script([[
local http = require "cohost.http"
listener = assert(http.listen("127.0.0.1:0", function(req, res) res:send("hi") end))
]]))), 60)
    h.defer(p.stop)
    local function frame(t, flags, id, payload)
      local n = #payload
      return string.char(math.floor(n / 65536), math.floor(n / 256) % 256, n % 256, t, flags,
        math.floor(id / 16777216), math.floor(id / 65536) % 256, math.floor(id / 256) % 256, id % 256) .. payload
    end
    local parts = { "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", frame(4, 0, 0, "") }
    for i = 1, 400 do
      parts[#parts + 1] = frame(1, 5, 2 * i - 1, "\130\134\132\1\1x") .. frame(3, 0, 2 * i - 1, "\0\0\0\8")
    end
    local bytes = table.concat(parts)
    local function attack(n)
      h.run_all(n, function()
        local s = h.dial(p.port, 10000)
        assert(s:send(bytes))
        s:receive("*a")   -- GOAWAY, then the close
      end)
    end
    local function count(pattern)
      local _, n = h.slurp(p.err):gsub(pattern, "")
      return n
    end
    local FULL = "http2: 127%.0%.0%.1:%d+ resets streams too fast %(rapid reset%): GOAWAY\n"
    local SUMMARY = "http2: a client resets streams too fast %(rapid reset%): GOAWAY %.%.%. and (%d+) more in the last %d+ s\n"
    attack(30)
    assert.are.equal(1, count(FULL), h.slurp(p.err))
    -- The count comes when the 10 s window ends, from a timer.
    assert.is_true(h.wait_for(function() return count(SUMMARY) == 1 end, 40), h.slurp(p.err))
    assert.are.equal("29", h.slurp(p.err):match(SUMMARY))
    -- One more opens the next window: the exit writes its count.
    attack(1)
    p.signal("TERM")
    assert.is_not_nil(p.wait(20), "no exit after SIGTERM")
    local log = h.slurp(p.err)
    assert.are.equal(2, count(SUMMARY), log)
    assert.matches("%.%.%. and 1 more in the last %d+ s\n", log)
    assert.are.equal(1, count(FULL), log)
  end)

  it("ends a CONTINUATION flood (CVE-2024-27316) and serves on", function()
    local calls = 0
    local port = serve(function(req, res)
      calls = calls + 1
      describe_req(req, res)
    end)
    local r = py([[
import hpack
from hyperframe.frame import HeadersFrame, ContinuationFrame
c = Client(int(sys.argv[1]))
enc = hpack.Encoder()
f = HeadersFrame(1)
f.data = enc.encode([(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")])
sent, closed = 0, False
try:
    c.s.sendall(f.serialize())
    for i in range(10000):
        k = ContinuationFrame(1)
        k.data = enc.encode([("x-flood-%d" % i, "v" * 100)])
        c.s.sendall(k.serialize())
        sent += 1
    while c.s.recv(65536):
        pass
    closed = True
except (BrokenPipeError, ConnectionResetError):
    closed = True
out({"closed": closed, "sent": sent})
]], tostring(port))
    assert.is_true(r.closed)
    assert.are.equal(0, calls)
    assert.matches("GET / 2", curl(("--http2-prior-knowledge http://127.0.0.1:%d/"):format(port)))
  end)

  it("resets a stream whose window never opens after send_timeout; the others go on", function()
    local err
    local port = serve(function(req, res)
      if req.path == "/big" then
        local ok, e = pcall(function()
          for _ = 1, 100 do res:write(("w"):rep(10000)) end
        end)
        err = not ok and tostring(e)
        if not ok then error(e) end
        return
      end
      res:send("fine")
    end, { send_timeout = 0.3 })
    local r = py([[
c = Client(int(sys.argv[1]), settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
big = c.request("/big", hold=True)
c.until(lambda: c.done(big))
ok = c.request("/ok")
c.until(lambda: c.done(ok))
out({"reset": c.streams[big]["reset"], "got": len(c.streams[big]["data"]), "ok": c.text(ok)})
]], tostring(port))
    assert.are.equal(8, r.reset)   -- CANCEL
    assert.are.equal(1000, r.got)
    assert.are.equal("fine", r.ok)
    assert.matches("timeout", err)
  end)

  it("closes an idle connection after keepalive_timeout with GOAWAY", function()
    local port = serve(describe_req, { keepalive_timeout = 0.3 })
    local r = py([[
c = Client(int(sys.argv[1]))
a = c.request("/")
c.until(lambda: c.done(a))
try:
    c.until(lambda: c.closed)
except SystemExit:
    pass
out({"goaway": c.goaway, "closed": c.closed})
]], tostring(port))
    assert.are.equal(0, r.goaway.code)
    assert.is_true(r.closed)
  end)

  it("closes after keepalive_timeout a connection whose client left a stream half open", function()
    local port = serve(function(_, res) res:send("answered") end, { keepalive_timeout = 0.3 })
    local r = py([[
c = Client(int(sys.argv[1]))
sid = c.c.get_next_available_stream_id()
c.c.send_headers(sid, [(":method", "POST"), (":path", "/"), (":scheme", "http"),
                       (":authority", "x")], end_stream=False)   # a body that never comes
c.streams[sid] = {"status": None, "headers": {}, "data": b"", "trailers": None,
                  "ended": False, "reset": None}
c.flush()
c.until(lambda: c.done(sid))
try:
    c.until(lambda: c.closed)
except SystemExit:
    pass
out({"body": c.text(sid), "goaway": c.goaway, "closed": c.closed})
]], tostring(port))
    assert.are.equal("answered", r.body)
    assert.are.equal(0, r.goaway.code)
    assert.is_true(r.closed)
  end)

  it("ends a PING flood from a client that never reads", function()
    local port = serve(describe_req)
    local r = py([[
from hyperframe.frame import PingFrame
c = Client(int(sys.argv[1]))
c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
c.s.settimeout(2)   # the server stops reading once it has had enough
ping = PingFrame(0, opaque_data=b"12345678").serialize() * 64
try:
    for i in range(10000):   # 10.9 MB of PINGs, more than socket buffers hold
        c.s.sendall(ping)
except (BrokenPipeError, ConnectionResetError, socket.timeout):
    pass
c.s.settimeout(10)
closed = False
try:
    while c.s.recv(1 << 20):   # its ACKs, then the end
        pass
    closed = True
except ConnectionResetError:
    closed = True
out({"closed": closed})
]], tostring(port))
    assert.is_true(r.closed)
    assert.matches("GET / 2", curl(("--http2-prior-knowledge http://127.0.0.1:%d/"):format(port)))
  end)

  it("answers an HPACK bomb (a small block decoding to a huge list) with 431", function()
    local calls = 0
    local port = serve(function(req, res)
      calls = calls + 1
      describe_req(req, res)
    end)
    local r = py([[
c = Client(int(sys.argv[1]))
# One 4000-byte field enters the dynamic table, then each repeat costs a
# byte: 2000 repeats decode to 8 MB.
a = c.request("/", headers=[("x-bomb", "b" * 4000)] * 2000)
c.until(lambda: c.done(a))
out({"status": c.streams[a]["status"]})
]], tostring(port))
    assert.are.equal(431, r.status)
    assert.are.equal(0, calls)
  end)

  it("a header list past the limit gets 431 on that stream", function()
    -- The limit is max_request_line + max_header_size: 9216 bytes here.
    local port = serve(describe_req, { max_header_size = 1024 })
    local out = curl(("--http2-prior-knowledge -o /dev/null -w '%%{http_code}' -H 'X-Big: %s' http://127.0.0.1:%d/")
      :format(("b"):rep(12000), port))
    assert.are.equal("431", out)
  end)
end)

-- -- The drain ---------------------------------------------------------------------------

-- A server in a process of its own (a drain ends it): /slow writes a
-- first piece, creates the file arg[1], and finishes once arg[2] exists.
local DRAIN_SERVER = [[
local cohost = require "cohost"
local http = require "cohost.http"
local marker, go = arg[1], arg[2]
local l = assert(http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/fast" then return res:send("fast") end
  res:write("start ")
  io.open(marker, "w"):close()
  local t0 = cohost.monotonic()
  while not io.open(go) and cohost.monotonic() - t0 < 10 do cohost.sleep(0.01) end
  res:send("end")
end))
local _, port = l:addr()
io.write(port .. " " .. io.open("/proc/self/stat"):read("*n") .. "\n")
io.stdout:flush()
]]

-- A server that says "hi" and reports its port and pid.
local HI_SERVER = [[
local http = require "cohost.http"
local l = assert(http.listen("127.0.0.1:0", function(req, res) res:send("hi") end))
local _, port = l:addr()
io.write(port .. " " .. io.open("/proc/self/stat"):read("*n") .. "\n")
io.stdout:flush()
]]

describe("HTTP/2 past --max-connections", function()
  it("gets SETTINGS and GOAWAY REFUSED_STREAM (last stream 0), an HTTP/1.1 client still its 503", function()
    local p = h.start("--max-connections 1 " .. h.shell_quote(h.tmpfile(HI_SERVER)), 30)
    h.defer(p.stop)
    local held = h.connect(p.port, 5000)   -- the one slot
    h.defer(function() held:close() end)
    assert(held:send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert.equal("HTTP/1.1 200 OK", held:receive("*l"))
    local _, out, err = h.sh(("nghttp -v http://127.0.0.1:%d/"):format(p.port), 20)
    assert.truthy(out:find("recv SETTINGS frame", 1, true), out .. err)
    assert.matches("recv GOAWAY frame <length=25, flags=0x00, stream_id=0>\n%s*%(last_stream_id=0, "
      .. "error_code=REFUSED_STREAM%(0x07%), opaque_data%(17%)=%[%-%-max%-connections%]%)", out .. err)
    local _, one = h.sh(("curl -sS -i -m 5 http://127.0.0.1:%d/"):format(p.port), 20)
    assert.matches("^HTTP/1%.1 503 Service Unavailable\r\n", one)
  end)
end)

describe("HTTP/2 and the drain", function()
  it("keeps serving new streams after SIGTERM, and sends GOAWAY (last stream served) once idle", function()
    local marker, go = h.tmppath(), h.tmppath()
    local p = h.start(("%s %s %s"):format(h.shell_quote(h.tmpfile(DRAIN_SERVER)), marker, go), 30)
    h.defer(p.stop)
    local r = py([[
import os, signal, time
port, pid, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = Client(port)
slow = c.request("/slow")
c.until(lambda: "start" in c.text(slow))
os.kill(pid, signal.SIGTERM)
deadline = time.time() + 10
while True:   # the drain began once the listener is closed
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        break
    if time.time() > deadline:
        raise SystemExit("no drain")
    time.sleep(0.01)
fast = c.request("/fast")   # a new stream on the draining connection
c.until(lambda: c.done(fast))
goaway_before = c.goaway is not None
open(go, "w").close()
c.until(lambda: c.done(slow))
c.until(lambda: c.goaway is not None)
out({"fast": c.text(fast), "fast_status": c.streams[fast]["status"], "slow": c.text(slow),
     "goaway_before": goaway_before, "goaway": c.goaway, "fast_id": fast})
]], ("%d %d %s"):format(p.port, p.pid, h.shell_quote(go)))
    assert.equal(200, r.fast_status)
    assert.equal("fast", r.fast)
    assert.equal("start end", r.slow)
    assert.is_false(r.goaway_before)   -- no GOAWAY while a stream runs
    assert.same({ code = 0, last = r.fast_id }, r.goaway)
    assert.are.equal(0, p.wait(15))
  end)

  it("at the drain deadline (half --shutdown-timeout) sends GOAWAY to a busy connection, lets the stream in flight finish, then exits", function()
    local marker, go = h.tmppath(), h.tmppath()
    local p = h.start(("--shutdown-timeout 2 %s %s %s"):format(h.shell_quote(h.tmpfile(DRAIN_SERVER)), marker, go), 30)
    h.defer(p.stop)
    local out, rc = h.tmppath(), h.tmppath()
    -- stdbuf: nghttp's frame log line by line, to watch for the GOAWAY.
    os.execute(("(timeout 20 stdbuf -oL nghttp -v http://127.0.0.1:%d/slow >%s 2>&1; echo $? >%s) >/dev/null 2>&1 &")
      :format(p.port, out, rc))
    assert(h.wait_for(function() return io.open(marker) end, 10), "the request never reached the handler")
    p.signal("TERM")
    assert(h.wait_for(function() return (h.try_slurp(out) or ""):find("recv GOAWAY") end, 10),
      "no GOAWAY: " .. (h.try_slurp(out) or ""))
    h.write_file(go, "")
    assert.are.equal(0, p.wait(15))
    assert(h.wait_for(function() return h.try_slurp(rc) end, 10))
    assert.are.equal("0", h.slurp(rc):match("%d+"))
    local log = h.slurp(out)
    assert.matches("error_code=NO_ERROR", log)
    assert.matches("start ", log)
    assert.matches("end%[[^\n]*recv DATA frame <length=3, flags=0x01", log)
  end)

  -- A reload under load (issue 13): the old workers keep serving the
  -- streams their connections open and send GOAWAY once a connection is
  -- idle, so h2load, which does not resend streams refused after a
  -- GOAWAY, loses none.
  it("loses no stream of h2load across a --processes 2 reload", function()
    local mark = h.tmppath()
    local path = h.tmpfile([[
local cohost = require "cohost"
local http = require "cohost.http"
local port, mark = tonumber(arg[1]), arg[2]
local gen, n = "old", 0
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  n = n + 1
  if n == 1000 and mark then io.open(mark, "w"):close() end   -- the load is on
  res:send(gen)
end))
]] .. h.REPORT_PORT)
    local p = h.start(("--processes 2 --shutdown-timeout 20 %s %d %s"):format(h.shell_quote(path),
      h.fixed_port(), h.shell_quote(mark)), 60)
    h.defer(p.stop)
    local out, rc = h.tmppath(), h.tmppath()
    -- 8 connections, all opened at the start (on the old workers), for 5 s.
    os.execute(("(timeout 30 h2load -c 8 -m 10 -D 5 http://127.0.0.1:%d/ >%s 2>&1; echo $? >%s) >/dev/null 2>&1 &")
      :format(p.port, out, rc))
    assert.is_true(h.wait_for(function() return h.try_slurp(mark) ~= nil end, 10), h.try_slurp(out))
    h.write_file(path, (h.slurp(path):gsub('"old"', '"new"')))
    p.signal("HUP")
    assert.is_true(h.wait_for(function()
      return h.slurp(p.err):find("reload: 2 new worker processes started, 2 old draining", 1, true) ~= nil
    end, 15), h.slurp(p.err))
    local _, _, body = h.get(p.port, "/")
    assert.equal("new", body)
    assert.is_true(h.wait_for(function() return h.try_slurp(rc) end, 20), h.try_slurp(out))
    local report = h.slurp(out)
    local total, done, ok, failed, errored = report:match(
      "requests: (%d+) total, %d+ started, (%d+) done, (%d+) succeeded, (%d+) failed, (%d+) errored")
    assert.truthy(total, report)
    assert.equal("0", failed, report)
    assert.equal("0", errored, report)
    assert.equal(done, ok, report)
    assert.is_true(tonumber(ok) > 1000, report)
    -- Then the old workers, their connections closed, exit.
    assert.is_true(h.wait_for(function()
      local log = h.slurp(p.err)
      return log:find("old worker process 0", 1, true) and log:find("old worker process 1", 1, true)
    end, 15), h.slurp(p.err))
  end)
end)
