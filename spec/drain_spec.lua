-- The drain as handlers see it (cohost.drain, docs/lua-api.md
-- "Shutdown", docs/grpc.md "The drain"): cohost.on_shutdown functions run
-- when a worker's drain begins (SIGTERM at the signal, a reload's old
-- workers, cohost.shutdown()), in every worker thread and process;
-- cohost.exiting() turns true once the listeners closed; then gRPC
-- streams and WebSockets their handlers left open end (UNAVAILABLE, close
-- code 1001), so that a stop ends by the drain and not by
-- --shutdown-timeout. Servers are build/cohost children (h.start); the
-- clients are Debian's python3-grpcio, python3-websockets and python3-h2.
local cohost = require "cohost"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- -- Long-lived streams --------------------------------------------------------

-- The server: arg[1] the port, arg[2] a directory for marks. gRPC
-- /test.Watch/Watch and WebSockets on /ws stream until they are ended
-- (the handlers do nothing about a drain); with arg[3] "own",
-- /test.Watch/Own and /own end themselves from an on_shutdown function
-- (a last message then OK; close code 4000); /test.Watch/Slow is a unary
-- call that marks DIR/slow and answers after 1 s.
local STREAMS = [[
local cohost = require "cohost"
local grpc = require "cohost.grpc"
local semaphore = require "cohost.semaphore"
local websocket = require "cohost.websocket"
local port, dir, own = tonumber(arg[1]), arg[2], arg[3] == "own"

local own_ws, own_watch = {}, {}
if own then cohost.on_shutdown(function()
  for ws in pairs(own_ws) do ws:close(4000, "bye") end
  for w in pairs(own_watch) do w.stop = true; w.wake:post() end
  -- Until the watches have sent their last message: the closers come
  -- after this function returns.
  while next(own_watch) do cohost.sleep(0.01) end
end) end

local function ws_handler(req, res)
  local ws = assert(websocket.upgrade(req, res))
  if req.path == "/own" then own_ws[ws] = true end
  ws:send("hello")
  while true do
    local data, typ = ws:recv()
    if (not data and typ ~= "timeout") or typ == "close" then break end
  end
  own_ws[ws] = nil
end

local srv = grpc.server { fallback = ws_handler }
srv:method("/test.Watch/Watch", { server_stream = function(_, stream)
  stream:send("hello")
  while true do
    cohost.sleep(0.2)
    stream:send("tick")
  end
end })
srv:method("/test.Watch/Own", { server_stream = function(_, stream)
  local w = { wake = semaphore.new(0) }
  own_watch[w] = true
  stream:send("hello")
  while not w.stop do w.wake:wait(0.2) end
  stream:send("bye")
  own_watch[w] = nil
end })
srv:method("/test.Watch/Slow", function()
  io.open(dir .. "/slow", "w"):close()
  cohost.sleep(1)
  return "done"
end)
assert(grpc.listen("127.0.0.1:" .. port, srv))
]] .. h.REPORT_PORT

-- The client: python3 client.py PORT WATCH OWN WS OWN_WS SLOW opens that
-- many of each, prints "ready" once every stream has its first message
-- (and the slow calls are sent), then, once all have ended, one JSON
-- line: per kind, per call [status code, details, the last message], per
-- WebSocket [close code, reason].
local CLIENT = [[
import asyncio, json, sys, threading
import grpc, websockets
port = sys.argv[1]
n_watch, n_own, n_ws, n_own_ws, n_slow = (int(a) for a in sys.argv[2:7])
res = {"watch": [], "own": [], "ws": [], "own_ws": [], "slow": []}
first = threading.Semaphore(0)

def watch(kind, path):
    ch = grpc.insecure_channel("127.0.0.1:" + port)
    call = ch.unary_stream(path)(b"x", timeout=60)
    last, told = None, False
    try:
        for m in call:
            last = m.decode()
            if not told: first.release(); told = True
        out = [0, "", last]
    except grpc.RpcError as e:
        out = [e.code().value[0], e.details(), last]
    if not told: first.release()
    res[kind].append(out)

def slow():
    ch = grpc.insecure_channel("127.0.0.1:" + port)
    try:
        reply = ch.unary_unary("/test.Watch/Slow")(b"x", timeout=60)
        res["slow"].append([0, "", reply.decode()])
    except grpc.RpcError as e:
        res["slow"].append([e.code().value[0], e.details(), None])

threads = [threading.Thread(target=watch, args=("watch", "/test.Watch/Watch")) for _ in range(n_watch)]
threads += [threading.Thread(target=watch, args=("own", "/test.Watch/Own")) for _ in range(n_own)]
for t in threads: t.start()

async def ws(kind, path, ready):
    async with websockets.connect("ws://127.0.0.1:" + port + path, open_timeout=20,
                                  close_timeout=10, ping_interval=None) as c:
        await c.recv()
        ready.set()
        try:
            while True: await c.recv()
        except websockets.ConnectionClosed:
            res[kind].append([c.close_code, c.close_reason])

async def main():
    loop = asyncio.get_running_loop()
    readies, tasks = [], []
    for kind, path, n in (("ws", "/ws", n_ws), ("own_ws", "/own", n_own_ws)):
        for _ in range(n):
            r = asyncio.Event()
            readies.append(r)
            tasks.append(asyncio.create_task(ws(kind, path, r)))
    for r in readies: await r.wait()
    for _ in range(n_watch + n_own): await loop.run_in_executor(None, first.acquire)
    for _ in range(n_slow):
        t = threading.Thread(target=slow)
        t.start()
        threads.append(t)
    print("ready", flush=True)
    await asyncio.gather(*tasks)

asyncio.run(main())
for t in threads: t.join()
print(json.dumps(res), flush=True)
]]

-- A raw HTTP/2 client (python3-h2 to send, its hyperframe and hpack to
-- read): one /test.Watch/Watch call; prints "ready" once its first
-- message came, then, as JSON, what the connection brought in order
-- until the server closed it: "goaway LAST_STREAM_ID", "trailers
-- GRPC_STATUS", "reset CODE".
local RAW = [[
import json, socket, sys
import h2.connection, h2.config, hpack
from hyperframe.frame import Frame, DataFrame, HeadersFrame, GoAwayFrame, RstStreamFrame, SettingsFrame
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
c.initiate_connection()
c.send_headers(1, [(":method", "POST"), (":path", "/test.Watch/Watch"), (":scheme", "http"),
                   (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers")])
c.send_data(1, bytes.fromhex("000000000178"), end_stream=True)
s.sendall(c.data_to_send())
# python3-h2 takes any GOAWAY as the end and refuses what follows it, so
# the frames are read here: hyperframe for their heads, hpack for headers.
dec, buf, seen, told = hpack.Decoder(), b"", [], False
while True:
    d = s.recv(65536)
    if not d:
        break
    buf += d
    while len(buf) >= 9:
        f, n = Frame.parse_frame_header(memoryview(buf[:9]))
        if len(buf) < 9 + n:
            break
        f.parse_body(memoryview(buf[9:9 + n]))
        buf = buf[9 + n:]
        if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
            s.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
        elif isinstance(f, DataFrame) and not told:
            print("ready", flush=True)
            told = True
        elif isinstance(f, GoAwayFrame):
            seen.append("goaway %d" % f.last_stream_id)
        elif isinstance(f, HeadersFrame):
            hs = dict((k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
                      for k, v in dec.decode(f.data))
            if "grpc-status" in hs:
                seen.append("trailers " + hs["grpc-status"])
        elif isinstance(f, RstStreamFrame):
            seen.append("reset %d" % f.error_code)
print(json.dumps(seen), flush=True)
]]

-- Starts the client against port in the background (60 s at most);
-- returns a function that waits for its JSON result.
local function clients(port, counts, source)
  local pid, out = h.spawn(("exec timeout 60 %s %s %d %s"):format(h.PYTHON, q(h.tmpfile(source or CLIENT)), port, counts))
  defer(function() h.stop_pid(pid, "KILL"); os.remove(out) end)
  assert.is_true(h.wait_for(function()
    return h.slurp(out):find("ready\n", 1, true) or not h.alive(pid)
  end, 30), h.slurp(out))
  assert.truthy(h.slurp(out):find("ready\n", 1, true), h.slurp(out))
  return function()
    assert.is_true(h.wait_for(function() return not h.alive(pid) end, 30), h.slurp(out))
    local line = h.slurp(out):match("(%b{})%s*$") or h.slurp(out):match("(%b[])%s*$")
    assert(line, "no result from the client: " .. h.slurp(out))
    return cjson.decode(line)
  end
end

-- SIGTERM to p; returns its exit code once it exited (40 s at most:
-- --shutdown-timeout 30 would end it, the drain must first) and the
-- seconds it took.
local function stop(p)
  p.signal("TERM")
  local code, took = p.wait(40)
  io.stderr:write(("  [drain_spec] stopped in %.2f s\n"):format(took))
  return code
end

-- What a stop that ended by the drain logs: no timeout, no traceback.
local function ended_by_drain(log)
  assert.falsy(log:find("shutdown timeout", 1, true), log)
  assert.falsy(log:find("traceback", 1, true), log)
end

-- How many of the client's results ended how: JSON of [code, details]
-- -> count.
local function endings(list)
  local seen = {}
  for _, r in ipairs(list) do
    local k = cjson.encode { r[1], r[2] }
    seen[k] = (seen[k] or 0) + 1
  end
  return seen
end

describe("a stop with long-lived streams connected", function()
  for _, args in ipairs { "-w 2", "--processes 2 -w 2" } do
    it(("ends by the drain: 10 gRPC watches get UNAVAILABLE, 10 WebSockets close code 1001 (%s)"):format(args), function()
      local p = h.start_fixed_port(args .. " --shutdown-timeout 30", h.tmpfile(STREAMS))
      local result = clients(p.port, "10 0 10 0 0")
      assert.equal(0, stop(p), h.slurp(p.err))
      ended_by_drain(h.slurp(p.err))
      local r = result()
      assert.same({ ['[14,"the server is shutting down"]'] = 10 }, endings(r.watch))
      assert.same({ ['[1001,"going away"]'] = 10 }, endings(r.ws))
    end)
  end

  it("sends a watch's connection its GOAWAY before the watch's UNAVAILABLE", function()
    local p = h.start_fixed_port("--shutdown-timeout 30", h.tmpfile(STREAMS))
    local result = clients(p.port, "", RAW)
    assert.equal(0, stop(p), h.slurp(p.err))
    ended_by_drain(h.slurp(p.err))
    -- The shutdown notice (2^31 - 1), the call's end, then the final
    -- GOAWAY naming the call's stream as the last one served.
    assert.same({ "goaway 2147483647", "trailers 14", "goaway 1" }, result())
  end)

  it("leaves alone what on_shutdown ends itself, and lets a unary call in flight finish", function()
    local dir = h.tmpdir()
    local p = h.start(("--shutdown-timeout 30 %s %d %s own"):format(q(h.tmpfile(STREAMS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    local result = clients(p.port, "1 2 1 2 1")
    assert.is_true(h.wait_for(function() return h.try_slurp(dir .. "/slow") end), h.slurp(p.err))
    assert.equal(0, stop(p), h.slurp(p.err))
    ended_by_drain(h.slurp(p.err))
    local r = result()
    assert.same({ { 0, "", "done" } }, r.slow)
    assert.same({ { 14, "the server is shutting down", "hello" } }, r.watch)
    assert.same({ { 0, "", "bye" }, { 0, "", "bye" } }, r.own)
    assert.same({ { 1001, "going away" } }, r.ws)
    assert.same({ { 4000, "bye" }, { 4000, "bye" } }, r.own_ws)
  end)
end)

-- -- cohost.on_shutdown --------------------------------------------------------

-- The server: marks DIR/begin-PID-ID with cohost.exiting() when its drain
-- begins, then DIR/exiting-PID-ID once exiting() is true; a first
-- function raises. GET /shutdown calls cohost.shutdown().
local HOOKS = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port, dir = tonumber(arg[1]), arg[2]
local pid = io.open("/proc/self/stat"):read("*n")
local function mark(name, text)
  local f = assert(io.open(("%s/%s-%d-%d"):format(dir, name, pid, cohost.worker_id()), "w"))
  f:write(text)
  f:close()
end
cohost.on_shutdown(function() error("boom in on_shutdown") end)
cohost.on_shutdown(function()
  mark("begin", tostring(cohost.exiting()))
  while not cohost.exiting() do cohost.sleep(0.01) end
  mark("exiting", "true")
end)
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  if req.path == "/shutdown" then cohost.shutdown() end
  res:send("pid=" .. pid)
end))
]] .. h.REPORT_PORT

local function marks(dir, name, pid)
  local found = {}
  for _, f in ipairs(h.ls(dir)) do
    local p, id = f:match("^" .. name .. "%-(%d+)%-(%d+)$")
    if p and (not pid or tonumber(p) == pid) then found[tonumber(id)] = h.slurp(dir .. "/" .. f) end
  end
  return found
end

describe("cohost.on_shutdown", function()
  it("runs in every worker at SIGTERM, before --drain-delay ends; exiting() turns true when the listeners close", function()
    local dir, status = h.tmpdir(), h.fixed_port()
    local p = h.start(("-w 2 --drain-delay 2 --status-addr 127.0.0.1:%d %s %d %s")
      :format(status, q(h.tmpfile(HOOKS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    -- The status endpoint listens once worker 0's main chunk has returned,
    -- which can be after the port report reached us.
    assert.is_true(h.wait_for(function() return h.get_to_close(status, "/healthz") == 200 end), h.slurp(p.err))
    p.signal("TERM")
    -- Both workers, while their listeners were open (exiting() false).
    assert.is_true(h.wait_for(function() return marks(dir, "begin")[1] end), h.slurp(p.err))
    assert.same({ [0] = "false", [1] = "false" }, marks(dir, "begin"))
    assert.equal(0, (p.wait(20)), h.slurp(p.err))
    assert.same({ [0] = "true", [1] = "true" }, marks(dir, "exiting"))
    -- The one that raised is logged with its traceback; the other ran.
    local log = h.slurp(p.err)
    assert.truthy(log:find("boom in on_shutdown\nstack traceback:", 1, true), log)
    assert.falsy(log:find("shutdown timeout", 1, true), log)
  end)

  it("runs in every worker of a reload's old process once the new one is ready", function()
    local dir = h.tmpdir()
    local p = h.start(("--processes 1 -w 2 --shutdown-timeout 5 %s %d %s")
      :format(q(h.tmpfile(HOOKS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    local _, _, body = h.get(p.port, "/")
    local old = tonumber(body:match("pid=(%d+)"))
    p.signal("HUP")
    assert.is_true(h.wait_for(function() return marks(dir, "exiting", old)[1] and marks(dir, "exiting", old)[0] end),
      h.slurp(p.err))
    -- A reload has no --drain-delay: the listeners close as the drain
    -- begins, so exiting() may already be true there.
    local begun = marks(dir, "begin", old)
    assert.truthy(begun[0] and begun[1])
    local _, _, now = h.get(p.port, "/")
    assert.are_not.equal(old, tonumber(now:match("pid=(%d+)")))
    assert.same({}, marks(dir, "begin", tonumber(now:match("pid=(%d+)"))))
  end)

  it("runs on cohost.shutdown(), with exiting() already true", function()
    local dir = h.tmpdir()
    local p = h.start(("%s %d %s"):format(q(h.tmpfile(HOOKS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    h.get(p.port, "/shutdown")
    assert.equal(0, (p.wait(20)), h.slurp(p.err))
    assert.same({ [0] = "true" }, marks(dir, "begin"))
    assert.same({ [0] = "true" }, marks(dir, "exiting"))
  end)

  it("takes a function only", function()
    assert.has_error(function() cohost.on_shutdown(42) end,
      "bad argument #1 to 'on_shutdown' (function expected, got number)")
  end)
end)
