-- cohost.websocket: the server side behind cohost.http and the client,
-- each against Python's websockets library (Debian python3-websockets) as
-- the real peer, plus raw sockets for the protocol violations a library
-- would never send. Frames in the raw tests are built and parsed by this
-- file's own code, not the module's. Servers run in-process on 127.0.0.1
-- port 0; Python runs in the background while the spec's task polls, so
-- the in-process server keeps running.
local bit = require "bit"
local cohost = require "cohost"
local crypto = require "cohost.core.crypto"
local websocket = require "cohost.websocket"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local PY = h.PYTHON   -- Debian's, which has python3-websockets
local GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
local MIB = 1024 * 1024

-- -- Python peers ------------------------------------------------------

-- Starts `python3 <code> <args>` in the background (bounded by timeout(1)
-- at limit seconds); returns its out, err and rc file names. Files are
-- removed after the test.
local function py_spawn(code, args, limit)
  local script = h.tmpfile(code)
  local out, err, rc = h.tmpfile(), h.tmpfile(), os.tmpname()
  os.remove(rc)
  defer(function() os.remove(rc) end)
  os.execute(("(timeout %d %s %s %s >%s 2>%s </dev/null; echo $? >%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
    :format(limit or 20, PY, script, args or "", out, err, rc, rc, rc))
  return out, err, rc
end

-- The stdout of a Python client script, which must exit 0; its lines as
-- a table of "key value" pairs.
local function py_client(code, args)
  local rc, out, err = h.python(code, args)
  assert(rc == 0, "python client failed (" .. rc .. "):\n" .. out .. err)
  local res = {}
  for k, v in out:gmatch("(%S+) ([^\n]*)\n") do res[k] = v end
  return res
end

-- The Python client the server tests drive: python3 client.py port case.
local PY_CLIENT = [[
import asyncio, sys, time, websockets

port, case = sys.argv[1], sys.argv[2]

def say(k, v):
    print(k, v, flush=True)

async def main():
    url = "ws://127.0.0.1:%s/ws" % port
    async with websockets.connect(url, subprotocols=["x-none", "chat"], ping_interval=None,
                                  max_size=4 * 1024 * 1024) as ws:
        say("protocol", ws.subprotocol)
        if case == "echo":
            await ws.send("hello, wörld")
            say("text", await ws.recv())
            await ws.send(b"\x00\xffbin")
            say("binary", (await ws.recv()).hex())
        elif case == "frag":
            await ws.send(["frag", "mented ", "\u20ac"])
            say("text", await ws.recv())
            await ws.send([b"\x01", b"\x02", b"\x03"])
            say("binary", (await ws.recv()).hex())
        elif case == "ping":
            waiter = await ws.ping(b"heartbeat")
            await asyncio.wait_for(waiter, 5)
            say("pong", "ok")
            await ws.send("after ping")
            say("text", await ws.recv())
        elif case == "big":
            data = bytes(range(256)) * 4096
            t = time.time()
            await ws.send(data)
            back = await ws.recv()
            say("binary_ok", back == data)
            say("binary_secs", time.time() - t)
            text = "\u00e9" * (512 * 1024)
            await ws.send(text)
            say("text_ok", (await ws.recv()) == text)
        elif case == "client_close":
            await ws.send("hi")
            await ws.recv()
            await ws.close(1001, "going away")
            say("code", ws.close_code)
        elif case == "server_close":
            await ws.send("close-me")
            try:
                await ws.recv()
            except websockets.ConnectionClosed:
                pass
            say("code", ws.close_code)
            say("reason", ws.close_reason)
        elif case == "too_big":
            try:
                await ws.send("z" * 2000)
                await ws.recv()
            except websockets.ConnectionClosed:
                pass
            say("code", ws.close_code)
        say("done", "yes")

asyncio.run(main())
]]

-- The Python server the client tests talk to. Paths: /echo, /frag (sends
-- two fragmented messages, then echoes), /ping (pings, then says whether
-- the pong came), /close (closes with 4001 after one message), /headers
-- (sends the request's X-Test and Origin and the subprotocol), /big (sends
-- 2000 bytes), /forbidden (403). Each connection's close code and reason
-- are kept by the ?id=... of its URL; /last?id=... sends them once the
-- connection has ended.
local PY_SERVER = [[
import asyncio, http, json, os, sys, websockets
from urllib.parse import urlsplit, parse_qs

ended = {}

async def handler(ws):
    url = urlsplit(ws.path)
    path, ident = url.path, parse_qs(url.query).get("id", [""])[0]
    try:
        if path == "/echo":
            async for m in ws:
                await ws.send(m)
        elif path == "/frag":
            await ws.send(["ab", "cd", "\u00e9"])
            await ws.send([b"\x01", b"\x02", b""])
            async for m in ws:
                await ws.send(m)
        elif path == "/ping":
            waiter = await ws.ping(b"are you there")
            try:
                await asyncio.wait_for(waiter, 5)
                await ws.send("pong seen")
            except asyncio.TimeoutError:
                await ws.send("no pong")
            async for m in ws:
                pass
        elif path == "/close":
            await ws.recv()
            await ws.close(4001, "bye")
        elif path == "/headers":
            h = ws.request_headers
            await ws.send(json.dumps({"x_test": h.get("X-Test"), "origin": h.get("Origin"),
                                      "protocol": ws.subprotocol}))
            async for m in ws:
                pass
        elif path == "/big":
            await ws.send("y" * 2000)
            async for m in ws:
                pass
        elif path == "/last":
            for _ in range(500):
                if ident in ended:
                    break
                await asyncio.sleep(0.01)
            await ws.send(json.dumps(ended.get(ident)))
    except websockets.ConnectionClosed:
        pass
    finally:
        await ws.wait_closed()
        if path != "/last":
            ended[ident] = [ws.close_code, ws.close_reason]

async def process_request(path, headers):
    if path.startswith("/forbidden"):
        return (http.HTTPStatus.FORBIDDEN, [("Content-Type", "text/plain")], b"no\n")

async def main():
    async with websockets.serve(handler, "127.0.0.1", 0, subprotocols=["chat", "superchat"],
                                process_request=process_request, ping_interval=None,
                                max_size=4 * 1024 * 1024) as server:
        print(server.sockets[0].getsockname()[1], os.getpid(), flush=True)
        await asyncio.Future()

asyncio.run(main())
]]

-- -- Raw frames (this file's own encoder and decoder) ------------------

local function xor_bytes(data, key)
  local out = {}
  for i = 1, #data do
    out[i] = string.char(bit.bxor(data:byte(i), key:byte((i - 1) % 4 + 1)))
  end
  return table.concat(out)
end

-- A client frame: opts.fin (default true), opts.rsv (bits 0x70), opts.key
-- (4 bytes; false for an unmasked frame), opts.len (a lying length).
local function frame(op, payload, opts)
  opts = opts or {}
  payload = payload or ""
  local b1 = (opts.fin == false and 0 or 0x80) + (opts.rsv or 0) + op
  local key = opts.key
  if key == nil then key = "\1\2\3\4" end
  local m = key and 0x80 or 0
  local len = opts.len or #payload
  local hdr
  if len < 126 then
    hdr = string.char(b1, m + len)
  elseif len < 65536 then
    hdr = string.char(b1, m + 126, math.floor(len / 256), len % 256)
  else
    local bytes = {}
    for i = 8, 1, -1 do
      bytes[i] = len % 256
      len = math.floor(len / 256)
    end
    hdr = string.char(b1, m + 127, unpack(bytes))
  end
  if key then return hdr .. key .. xor_bytes(payload, key) end
  return hdr .. payload
end

local function close_body(code, reason)
  return string.char(math.floor(code / 256), code % 256) .. (reason or "")
end

-- Reads one unmasked frame from sock: op, payload, fin; nil, err on
-- failure. masked says whether the frame was masked (then unmasked).
local function read_frame(sock)
  local hdr, err = sock:receive(2)
  if not hdr then return nil, err end
  local b1, b2 = hdr:byte(1, 2)
  local len = b2 % 128
  if len == 126 then
    local x = assert(sock:receive(2))
    len = x:byte(1) * 256 + x:byte(2)
  elseif len == 127 then
    local x = assert(sock:receive(8))
    len = 0
    for i = 1, 8 do len = len * 256 + x:byte(i) end
  end
  local key = b2 >= 128 and assert(sock:receive(4))
  local payload = len > 0 and assert(sock:receive(len)) or ""
  if key then payload = xor_bytes(payload, key) end
  return b1 % 16, payload, b1 >= 128, key
end

-- Reads a close frame: its code and reason (nil code for an empty body).
local function read_close(sock)
  local op, payload = read_frame(sock)
  assert.equal(8, op, "expected a close frame")
  if #payload < 2 then return nil, payload end
  return payload:byte(1) * 256 + payload:byte(2), payload:sub(3)
end

-- True when the peer closes the TCP connection within 2 s.
local function sees_eof(sock)
  sock:settimeout(2000)
  while true do
    local data, err = sock:receiveany(4096)
    if not data then return err == "closed" or err == "connection reset by peer" end
  end
end

-- -- Servers -----------------------------------------------------------

-- An in-process cohost.http server whose handler upgrades with opts and
-- runs fn(ws, req) (default: echo text and binary until the close). The
-- handler's last recv results and upgrade error land in the returned
-- table's fields: events (every recv result), upgrade_err.
local function ws_server(opts, fn)
  local seen = { events = {} }
  local port = h.http_serve(function(req, res)
    local ws, err = websocket.upgrade(req, res, opts)
    if not ws then
      seen.upgrade_err = err
      return
    end
    seen.protocol = ws.protocol
    if fn then return fn(ws, req, seen) end
    while true do
      local data, typ, code = ws:recv()
      seen.events[#seen.events + 1] = { data, typ, code }
      if not data and typ ~= "timeout" then break end
      if typ == "close" then break end
      if data == "close-me" then
        seen.close = { ws:close(4000, "bye") }
        break
      end
      if typ == "text" or typ == "binary" then ws:send(data, typ) end
    end
    seen.done = true
  end)
  seen.port = port
  return seen
end

-- Waits up to 2 s for the server's handler to finish.
local function wait_done(seen)
  for _ = 1, 200 do
    if seen.done then return true end
    cohost.sleep(0.01)
  end
  return false
end

-- The last event the handler's recv saw.
local function last_event(seen)
  assert(wait_done(seen), "the handler did not finish")
  return unpack(seen.events[#seen.events])
end

-- Sends a handshake on a raw socket and reads the 101 head; returns the
-- socket (with the frames after the head still unread).
local function raw_upgrade(port, extra)
  local s = h.connect(port)
  local key = crypto.encode_base64(crypto.random_bytes(16))
  assert(s:send("GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n" ..
    "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: " .. key ..
    "\r\nSec-WebSocket-Version: 13\r\n" .. (extra or "") .. "\r\n"))
  local status = assert(s:receive("*l"))
  assert.equal("HTTP/1.1 101 Switching Protocols", status)
  local headers = {}
  while true do
    local line = assert(s:receive("*l"))
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.*)$")
    headers[k:lower()] = v
  end
  assert.equal(crypto.encode_base64(crypto.sha1_bin(key .. GUID)), headers["sec-websocket-accept"])
  assert.equal("websocket", headers["upgrade"]:lower())
  return s, headers
end

-- Sends a raw request head and returns the status code, headers and body.
local function raw_request(port, head)
  local s = h.dial(port, 2000)
  assert(s:send(head))
  local status = tonumber(assert(s:receive("*l")):match("^HTTP/1%.1 (%d+)"))
  local headers = {}
  while true do
    local line = assert(s:receive("*l"))
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.*)$")
    headers[k:lower()] = v
  end
  local body = headers["content-length"] and s:receive(tonumber(headers["content-length"]))
  return status, headers, body
end

local function handshake(lines)
  return "GET /ws HTTP/1.1\r\nHost: x\r\n" .. table.concat(lines, "\r\n") .. "\r\n\r\n"
end

local GOOD = {
  "Upgrade: websocket", "Connection: Upgrade",
  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
}

-- -- Server side -------------------------------------------------------

describe("websocket.upgrade with a python websockets client", function()
  it("echoes text and binary messages and picks the subprotocol both speak", function()
    local seen = ws_server { protocols = { "chat", "superchat" } }
    local r = py_client(PY_CLIENT, seen.port .. " echo")
    assert.equal("chat", r.protocol)
    assert.equal("hello, wörld", r.text)
    assert.equal("00ff62696e", r.binary)
    assert.equal("chat", seen.protocol)
  end)

  it("answers without a subprotocol when none of the offered ones is spoken", function()
    local seen = ws_server { protocols = { "mqtt" } }
    local r = py_client(PY_CLIENT, seen.port .. " echo")
    assert.equal("None", r.protocol)
    assert.is_nil(seen.protocol)
  end)

  it("reassembles fragmented text and binary messages", function()
    local seen = ws_server()
    local r = py_client(PY_CLIENT, seen.port .. " frag")
    assert.equal("fragmented €", r.text)
    assert.equal("010203", r.binary)
    assert.same({ "fragmented €", "text" }, seen.events[1])
    assert.same({ "\1\2\3", "binary" }, seen.events[2])
  end)

  it("answers a ping with a pong on its own and goes on", function()
    local seen = ws_server()
    local r = py_client(PY_CLIENT, seen.port .. " ping")
    assert.equal("ok", r.pong)
    assert.equal("after ping", r.text)
  end)

  it("round-trips 1 MiB binary and text messages within the default limits", function()
    local seen = ws_server()
    local r = py_client(PY_CLIENT, seen.port .. " big")
    assert.equal("True", r.binary_ok)
    assert.equal("True", r.text_ok)
    print(("\n1 MiB binary round trip, python client: %.1f ms"):format(tonumber(r.binary_secs) * 1000))
  end)

  it("echoes the client's close code and gives the handler the code and reason", function()
    local seen = ws_server()
    local r = py_client(PY_CLIENT, seen.port .. " client_close")
    assert.equal("1001", r.code)
    assert.same({ "going away", "close", 1001 }, { last_event(seen) })
    assert.equal("yes", r.done)
  end)

  it("closes with a code and reason the client sees, and close() waits for the echo", function()
    local seen = ws_server()
    local r = py_client(PY_CLIENT, seen.port .. " server_close")
    assert.equal("4000", r.code)
    assert.equal("bye", r.reason)
    assert(wait_done(seen))
    assert.same({ true }, seen.close)
  end)

  it("closes with 1009 when a message is over max_message_size", function()
    local seen = ws_server { max_message_size = 1000 }
    local r = py_client(PY_CLIENT, seen.port .. " too_big")
    assert.equal("1009", r.code)
    assert.same({ nil, "frame too large", 1009 }, { last_event(seen) })
  end)
end)

describe("websocket.upgrade handshake checks", function()
  it("answers the RFC 6455 sample key with its accept value", function()
    local seen = ws_server()
    local s = h.dial(seen.port, 2000)
    assert(s:send(handshake(GOOD)))
    assert.equal("HTTP/1.1 101 Switching Protocols", s:receive("*l"))
    local head = {}
    while true do
      local line = assert(s:receive("*l"))
      if line == "" then break end
      head[#head + 1] = line
    end
    assert.truthy(table.concat(head, "\n"):find("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 1, true))
  end)

  it("answers 426 with Sec-WebSocket-Version: 13 to another version", function()
    local seen = ws_server()
    local status, headers = raw_request(seen.port, handshake {
      "Upgrade: websocket", "Connection: Upgrade",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 8",
    })
    assert.equal(426, status)
    assert.equal("13", headers["sec-websocket-version"])
    assert.truthy(seen.upgrade_err)
  end)

  local bad = {
    { "no Upgrade header", { "Connection: Upgrade", GOOD[3], GOOD[4] } },
    { "an Upgrade other than websocket", { "Upgrade: h2c", "Connection: Upgrade", GOOD[3], GOOD[4] } },
    { "no upgrade token in Connection", { "Upgrade: websocket", "Connection: keep-alive", GOOD[3], GOOD[4] } },
    { "no key", { GOOD[1], GOOD[2], GOOD[4] } },
    { "a key of 15 bytes", { GOOD[1], GOOD[2], "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=", GOOD[4] } },
    { "a key that is not base64", { GOOD[1], GOOD[2], "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25j!!==", GOOD[4] } },
    { "two keys", { GOOD[1], GOOD[2], GOOD[3], "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==", GOOD[4] } },
  }
  for _, case in ipairs(bad) do
    it("answers 400 to a handshake with " .. case[1], function()
      local seen = ws_server()
      local status = raw_request(seen.port, handshake(case[2]))
      assert.equal(400, status)
      assert.truthy(seen.upgrade_err)
    end)
  end

  it("answers 400 to a POST handshake", function()
    local seen = ws_server()
    local status = raw_request(seen.port,
      "POST /ws HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" .. table.concat(GOOD, "\r\n") .. "\r\n\r\n")
    assert.equal(400, status)
    assert.truthy(seen.upgrade_err)
  end)

  it("answers 400 to a handshake with a body", function()
    local seen = ws_server()
    local status = raw_request(seen.port, "GET /ws HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n" ..
      table.concat(GOOD, "\r\n") .. "\r\n\r\nhello")
    assert.equal(400, status)
    assert.equal("websocket: handshake with a body", seen.upgrade_err)
  end)

  it("answers 403 to an Origin not in opts.origins and upgrades an allowed one", function()
    local seen = ws_server { origins = { "https://good.test" } }
    local status = raw_request(seen.port, handshake { GOOD[1], GOOD[2], GOOD[3], GOOD[4], "Origin: https://evil.test" })
    assert.equal(403, status)
    assert.equal("websocket: origin not allowed", seen.upgrade_err)
    status = raw_request(seen.port, handshake { GOOD[1], GOOD[2], GOOD[3], GOOD[4] })
    assert.equal(403, status)
    local s = raw_upgrade(seen.port, "Origin: https://good.test\r\n")
    s:close()
  end)

  it("accepts header names and the upgrade tokens in any case", function()
    local seen = ws_server()
    local s = h.dial(seen.port, 2000)
    assert(s:send(handshake {
      "upgrade: WebSocket", "CONNECTION: keep-alive, UPGRADE",
      "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==", "SEC-WEBSOCKET-VERSION: 13",
    }))
    assert.equal("HTTP/1.1 101 Switching Protocols", s:receive("*l"))
  end)
end)

describe("server protocol checks (raw client frames)", function()
  -- Sends bytes after the handshake and expects a close frame with code,
  -- then the TCP close; returns the handler's last recv results.
  local function violation(bytes, code, opts)
    local seen = ws_server(opts)
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    assert(s:send(bytes))
    assert.equal(code, (read_close(s)))
    -- The server drains input until the client closes too, as a real
    -- client does after a close frame.
    assert(s:shutdown("send"))
    assert.is_true(sees_eof(s))
    return last_event(seen)
  end

  it("closes with 1002 on an unmasked client frame", function()
    local data, err, code = violation(frame(1, "hi", { key = false }), 1002)
    assert.is_nil(data)
    assert.equal("unmasked frame from the client", err)
    assert.equal(1002, code)
  end)

  it("closes with 1002 on a reserved opcode", function()
    assert.equal("reserved opcode", select(2, violation(frame(3, "x"), 1002)))
    assert.equal("reserved opcode", select(2, violation(frame(0xB, "x"), 1002)))
  end)

  it("closes with 1002 when a reserved bit is set", function()
    assert.equal("reserved bits set", select(2, violation(frame(1, "x", { rsv = 0x40 }), 1002)))
  end)

  it("closes with 1002 on a control frame over 125 bytes", function()
    assert.equal("control frame too long", select(2, violation(frame(9, ("p"):rep(126)), 1002)))
  end)

  it("closes with 1002 on a fragmented control frame", function()
    assert.equal("fragmented control frame", select(2, violation(frame(9, "p", { fin = false }), 1002)))
  end)

  it("closes with 1002 on a continuation frame with no message started", function()
    assert.equal("continuation frame without a message", select(2, violation(frame(0, "x"), 1002)))
  end)

  it("closes with 1002 on a new message inside a fragmented one", function()
    local bytes = frame(1, "a", { fin = false }) .. frame(1, "b")
    assert.equal("new message inside a fragmented one", select(2, violation(bytes, 1002)))
  end)

  it("closes with 1002 on a 64-bit length with the top bit set", function()
    local bytes = string.char(0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1) .. "\1\2\3\4"
    assert.equal("frame length over 2^63", select(2, violation(bytes, 1002)))
  end)

  it("closes with 1007 on invalid UTF-8 text, fragmented or not", function()
    assert.equal("invalid UTF-8", select(2, violation(frame(1, "ok \xC0\xAF"), 1007)))
    assert.equal("invalid UTF-8", select(2, violation(frame(1, "\xED\xA0\x80"), 1007)))
    local bytes = frame(1, "ok", { fin = false }) .. frame(0, "\xFF")
    assert.equal("invalid UTF-8", select(2, violation(bytes, 1007)))
  end)

  it("accepts a UTF-8 character split across fragments", function()
    local seen = ws_server()
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    assert(s:send(frame(1, "\xE2\x82", { fin = false }) .. frame(0, "\xAC")))
    local op, payload = read_frame(s)
    assert.equal(1, op)
    assert.equal("€", payload)
  end)

  it("closes with 1009 on a frame over max_frame_size without reading its payload", function()
    -- Only the header goes out: the server must not wait for the payload.
    local hdr = frame(2, ("b"):rep(1001)):sub(1, 8)
    local _, err, code = violation(hdr, 1009, { max_frame_size = 1000 })
    assert.equal("frame too large", err)
    assert.equal(1009, code)
  end)

  it("drains an oversized frame's payload so the 1009 close frame reaches the client", function()
    local seen = ws_server { max_frame_size = 1000 }
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    local payload = ("b"):rep(300000)
    local sent = cohost.spawn(function() return s:send(frame(2, payload)) end)
    cohost.sleep(0.05)   -- the server has failed the connection with input unread
    assert.equal(1009, (read_close(s)))
    assert.same({ true, #payload + 14 }, { cohost.wait(sent) })
    assert(s:shutdown("send"))
    assert.is_true(sees_eof(s))
  end)

  it("closes with 1009 on a fragmented message over max_message_size", function()
    local bytes = frame(2, ("b"):rep(600), { fin = false }) .. frame(0, ("b"):rep(600))
    assert.equal("message too large", select(2, violation(bytes, 1009, { max_message_size = 1000 })))
  end)

  it("closes with 1002 on a close frame with a 1-byte body or a code no one may send", function()
    assert.equal("close frame with a 1-byte body", select(2, violation(frame(8, "\3"), 1002)))
    for _, code in ipairs { 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000 } do
      assert.equal("invalid close code", select(2, violation(frame(8, close_body(code)), 1002)))
    end
  end)

  it("closes with 1007 on a close reason that is not UTF-8", function()
    assert.equal("invalid UTF-8 in close reason",
      select(2, violation(frame(8, close_body(1000, "\xFF")), 1007)))
  end)

  it("echoes a close frame's code, gives the handler the reason, then closes TCP", function()
    for _, code in ipairs { 1000, 1001, 1003, 1008, 1011, 3000, 4999 } do
      local seen = ws_server()
      local s = raw_upgrade(seen.port)
      defer(function() s:close() end)
      assert(s:send(frame(8, close_body(code, "reason " .. code))))
      assert.equal(code, (read_close(s)))
      assert.is_true(sees_eof(s))
      assert.same({ "reason " .. code, "close", code }, { last_event(seen) })
    end
  end)

  it("answers a bodiless close with a bodiless close; recv gives no code", function()
    local seen = ws_server()
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    assert(s:send(frame(8, "")))
    local code, reason = read_close(s)
    assert.is_nil(code)
    assert.equal("", reason)
    assert.same({ "", "close" }, { last_event(seen) })
  end)

  it("answers a ping between fragments and still reassembles the message", function()
    local seen = ws_server()
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    assert(s:send(frame(1, "Hel", { fin = false }) .. frame(9, "mid") .. frame(0, "lo", { fin = false })
      .. frame(10, "unasked") .. frame(0, "!")))
    local op, payload = read_frame(s)
    assert.equal(10, op)
    assert.equal("mid", payload)
    op, payload = read_frame(s)
    assert.equal(1, op)
    assert.equal("Hello!", payload)
    -- The unsolicited pong surfaced to the handler, between the two.
    assert.same({ "unasked", "pong" }, seen.events[1])
  end)

  it("sends server frames unmasked and uses 16- and 64-bit lengths", function()
    local seen = ws_server()
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    for _, n in ipairs { 0, 125, 126, 65535, 65536, 70000 } do
      local data = ("q"):rep(n)
      assert(s:send(frame(2, data, { key = "\9\8\7\6" })))
      local op, payload, fin, key = read_frame(s)
      assert.equal(2, op)
      assert.is_true(fin)
      assert.is_false(key)
      assert.equal(n, #payload)
      assert.equal(data, payload)
    end
  end)

  it("survives read timeouts in the middle of a frame", function()
    local seen = ws_server(nil, function(ws, _, seen_)
      ws:settimeout(30)
      local timeouts = 0
      while true do
        local data, err = ws:recv()
        if data then
          seen_.got, seen_.timeouts = data, timeouts
          ws:send(data)
          break
        end
        assert.equal("timeout", err)
        timeouts = timeouts + 1
      end
      seen_.done = true
    end)
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    s:setoption("tcp-nodelay", true)
    local bytes = frame(1, ("slow "):rep(30))   -- a 16-bit length and a key
    for i = 1, #bytes, 3 do
      assert(s:send(bytes:sub(i, i + 2)))
      cohost.sleep(0.05)
    end
    local op, payload = read_frame(s)
    assert.equal(1, op)
    assert.equal(("slow "):rep(30), payload)
    assert(wait_done(seen))
    assert.is_true(seen.timeouts > 10)
  end)

  it("close() stops waiting for a silent peer after close_timeout", function()
    local seen = ws_server({ close_timeout = 100 }, function(ws, _, seen_)
      local t0 = cohost.monotonic()
      seen_.close = { ws:close(1001, "shutting down") }
      seen_.took = cohost.monotonic() - t0
      seen_.done = true
    end)
    local s = raw_upgrade(seen.port)
    defer(function() s:close() end)
    assert.same({ 1001, "shutting down" }, { read_close(s) })
    assert.is_true(sees_eof(s))   -- without the client answering
    assert(wait_done(seen))
    assert.same({ true }, seen.close)
    assert.is_true(seen.took < 2)
  end)

  it("hands surplus bytes after the handshake to the websocket", function()
    local seen = ws_server()
    local s = h.dial(seen.port, 2000)
    -- The handshake and the first frame in one write.
    assert(s:send(handshake(GOOD) .. frame(1, "early")))
    repeat local line = assert(s:receive("*l")) until line == ""
    local op, payload = read_frame(s)
    assert.equal(1, op)
    assert.equal("early", payload)
  end)
end)

-- -- Client side -------------------------------------------------------

describe("websocket.connect with a python websockets server", function()
  local server_port, server_pid

  -- One python server for the block; the python process is killed by
  -- its pid at the end (timeout(1) bounds it at 60 s in any case).
  setup(function()
    local out = py_spawn(PY_SERVER, "", 60)
    for _ = 1, 1000 do
      local port, pid = h.slurp(out):match("^(%d+) (%d+)\n")
      if port then
        server_port, server_pid = tonumber(port), tonumber(pid)
        return
      end
      cohost.sleep(0.01)
    end
    error("the python server did not start")
  end)

  teardown(function()
    if server_pid then os.execute("kill " .. server_pid .. " 2>/dev/null") end
  end)

  local function url(path)
    return ("ws://127.0.0.1:%d%s"):format(server_port, path)
  end

  -- How the python side saw connection id end: {code, reason}.
  local function ended(id)
    local ws = assert(websocket.connect(url("/last?id=" .. id), { timeout = 10000 }))
    local data = assert(ws:recv())
    ws:close()
    return require("cjson").decode(data)
  end

  it("exchanges text and binary messages", function()
    local ws = assert(websocket.connect(url("/echo"), { timeout = 5000 }))
    defer(function() ws:close() end)
    assert(ws:send("hello, wörld"))
    assert.same({ "hello, wörld", "text" }, { ws:recv() })
    assert(ws:send("\0\1\255", "binary"))
    assert.same({ "\0\1\255", "binary" }, { ws:recv() })
    assert(ws:send(""))
    assert.same({ "", "text" }, { ws:recv() })
  end)

  it("sends a message in fragments with send_frame", function()
    local ws = assert(websocket.connect(url("/echo"), { timeout = 5000 }))
    defer(function() ws:close() end)
    assert(ws:send_frame(false, "text", "fr"))
    assert(ws:send_frame(false, "continuation", "ag"))
    assert(ws:send_ping("between"))
    assert(ws:send_frame(true, "continuation", "ments"))
    assert.same({ "between", "pong" }, { ws:recv() })
    assert.same({ "fragments", "text" }, { ws:recv() })
  end)

  it("reassembles fragmented messages from the server", function()
    local ws = assert(websocket.connect(url("/frag"), { timeout = 5000 }))
    defer(function() ws:close() end)
    assert.same({ "abcdé", "text" }, { ws:recv() })
    assert.same({ "\1\2", "binary" }, { ws:recv() })
  end)

  it("answers the server's ping with a pong on its own", function()
    local ws = assert(websocket.connect(url("/ping"), { timeout = 5000 }))
    defer(function() ws:close() end)
    assert.same({ "pong seen", "text" }, { ws:recv() })
  end)

  it("surfaces pings instead with auto_pong = false", function()
    local ws = assert(websocket.connect(url("/ping"), { timeout = 5000, auto_pong = false }))
    defer(function() ws:close() end)
    assert.same({ "are you there", "ping" }, { ws:recv() })
    assert(ws:send_pong("are you there"))
    assert.same({ "pong seen", "text" }, { ws:recv() })
  end)

  it("round-trips a 1 MiB message", function()
    local ws = assert(websocket.connect(url("/echo"), { timeout = 10000, max_message_size = 2 * MIB }))
    defer(function() ws:close() end)
    local data = crypto.random_bytes(4096):rep(256)
    local t0 = cohost.monotonic()
    assert(ws:send(data, "binary"))
    local back, typ = ws:recv()
    local took = cohost.monotonic() - t0
    assert.equal("binary", typ)
    assert.is_true(back == data)
    print(("\n1 MiB binary round trip, cohost client to python: %.1f ms"):format(took * 1000))
  end)

  it("negotiates a subprotocol and sends extra headers and Origin", function()
    local ws = assert(websocket.connect(url("/headers"), {
      timeout = 5000, protocols = { "superchat", "mqtt" }, origin = "http://example.test",
      headers = { ["X-Test"] = "yes" },
    }))
    defer(function() ws:close() end)
    assert.equal("superchat", ws.protocol)
    local got = require("cjson").decode((assert(ws:recv())))
    assert.same({ x_test = "yes", origin = "http://example.test", protocol = "superchat" }, got)
  end)

  it("completes a close it starts with a code and reason the server sees", function()
    local ws = assert(websocket.connect(url("/echo?id=c1"), { timeout = 5000 }))
    assert.is_true(ws:close(1000, "done"))
    assert.same({ 1000, "done" }, ended("c1"))
    assert.same({ nil, "closed" }, { ws:recv() })
    assert.same({ nil, "closed" }, { ws:send("late") })
    assert.same({ nil, "closed" }, { ws:close() })
  end)

  it("gets the server's close code and reason from recv and echoes the code", function()
    local ws = assert(websocket.connect(url("/close?id=c2"), { timeout = 5000 }))
    assert(ws:send("go"))
    assert.same({ "bye", "close", 4001 }, { ws:recv() })
    assert.same({ nil, "closed" }, { ws:recv() })
    assert.same({ 4001, "" }, ended("c2"))
  end)

  it("closes with 1009 on a message over its max_message_size", function()
    local ws = assert(websocket.connect(url("/big?id=c3"), { timeout = 5000, max_message_size = 1000 }))
    assert.same({ nil, "frame too large", 1009 }, { ws:recv() })
    assert.equal(1009, ended("c3")[1])
  end)

  it("fails the handshake on a non-101 answer", function()
    assert.same({ nil, "handshake: status 403" }, { websocket.connect(url("/forbidden")) })
  end)
end)

describe("websocket.connect", function()
  it("refuses wss:// and malformed URLs", function()
    assert.same({ nil, "wss not supported yet" }, { websocket.connect("wss://127.0.0.1/") })
    for _, u in ipairs { "http://127.0.0.1/", "ws://", "ws://host:99999/", "ws://user@host/", "127.0.0.1:80" } do
      assert.same({ nil, "bad url" }, { websocket.connect(u) }, u)
    end
  end)

  it("reports a refused connection", function()
    local port = h.free_port()
    assert.same({ nil, "connection refused" }, { websocket.connect("ws://127.0.0.1:" .. port .. "/") })
  end)

  -- A raw server: reads the handshake, answers with respond(key, path)
  -- (default: a correct 101), then runs fn(sock).
  local function raw_server(fn, respond)
    local _, port = h.serve(function(sock)
      local request = assert(sock:receive("*l"))
      local key
      while true do
        local line = assert(sock:receive("*l"))
        if line == "" then break end
        key = line:match("^[Ss]ec%-[Ww]eb[Ss]ocket%-[Kk]ey: (.*)$") or key
      end
      local accept = crypto.encode_base64(crypto.sha1_bin(key .. GUID))
      sock:send(respond and respond(accept, request) or
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ..
        "Sec-WebSocket-Accept: " .. accept .. "\r\n\r\n")
      if fn then fn(sock) end
    end)
    return "ws://127.0.0.1:" .. port
  end

  it("masks every frame with a fresh key", function()
    local frames = {}
    local u = raw_server(function(sock)
      for i = 1, 3 do frames[i] = { read_frame(sock) } end
    end)
    local ws = assert(websocket.connect(u .. "/", { timeout = 2000 }))
    defer(function() ws:close() end)
    local big = ("m"):rep(70000)
    assert(ws:send("one"))
    assert(ws:send("one"))
    assert(ws:send(big, "binary"))
    for _ = 1, 100 do
      if frames[3] then break end
      cohost.sleep(0.01)
    end
    assert.equal("one", frames[1][2])
    assert.equal("one", frames[2][2])
    assert.equal(big, frames[3][2])
    assert.equal(4, #frames[1][4])
    assert.are_not.equal(frames[1][4], frames[2][4])
  end)

  it("fails the connection with 1002 on a masked server frame", function()
    local code
    local u = raw_server(function(sock)
      sock:send(frame(1, "masked"))
      code = read_close(sock)
    end)
    local ws = assert(websocket.connect(u .. "/", { timeout = 2000 }))
    assert.same({ nil, "masked frame from the server", 1002 }, { ws:recv() })
    for _ = 1, 100 do
      if code then break end
      cohost.sleep(0.01)
    end
    assert.equal(1002, code)
  end)

  it("rejects a wrong Sec-WebSocket-Accept", function()
    local u = raw_server(nil, function()
      return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ..
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
    end)
    assert.same({ nil, "handshake: bad Sec-WebSocket-Accept" }, { websocket.connect(u .. "/") })
  end)

  it("rejects a subprotocol it did not offer and an extension", function()
    local u = raw_server(nil, function(accept)
      return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ..
        "Sec-WebSocket-Accept: " .. accept .. "\r\nSec-WebSocket-Protocol: other\r\n\r\n"
    end)
    assert.same({ nil, "handshake: subprotocol not offered" },
      { websocket.connect(u .. "/", { protocols = { "chat" } }) })
    u = raw_server(nil, function(accept)
      return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ..
        "Sec-WebSocket-Accept: " .. accept .. "\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
    end)
    assert.same({ nil, "handshake: extension not offered" }, { websocket.connect(u .. "/") })
  end)

  it("sends the path and query of the URL and a Host header", function()
    local request
    local u = raw_server(nil, function(accept, line)
      request = line
      return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" ..
        "Sec-WebSocket-Accept: " .. accept .. "\r\n\r\n"
    end)
    local ws = assert(websocket.connect(u .. "/a/b?x=1#frag"))
    ws:close()
    assert.equal("GET /a/b?x=1 HTTP/1.1", request)
  end)
end)

-- -- Both sides cohost -------------------------------------------------

describe("cohost client to cohost server", function()
  it("round-trips 1 MiB text and binary messages in well under a second", function()
    local seen = ws_server { max_message_size = 2 * MIB }
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/", {
      timeout = 10000, max_message_size = 2 * MIB,
    }))
    defer(function() ws:close() end)
    local bin = crypto.random_bytes(4096):rep(256)
    local text = ("añ€𝄞"):rep(MIB / 10)
    local t0 = cohost.monotonic()
    assert(ws:send(bin, "binary"))
    local back = ws:recv()
    local took = cohost.monotonic() - t0
    assert.is_true(back == bin)
    assert(ws:send(text))
    local tback, typ = ws:recv()
    assert.equal("text", typ)
    assert.is_true(tback == text)
    print(("\n1 MiB binary round trip, cohost to cohost (masked one way): %.1f ms"):format(took * 1000))
    assert.is_true(took < 1)   -- quadratic masking would take minutes
  end)

  it("lets several tasks send at once without 'socket busy writing'", function()
    local got = {}
    local seen = ws_server(nil, function(ws, _, seen_)
      for _ = 1, 300 do
        local data = assert(ws:recv())
        got[#got + 1] = data
      end
      seen_.done = true
    end)
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/", { timeout = 5000 }))
    defer(function() ws:close() end)
    local results = h.run_all(3, function(i)
      local payload = ("t" .. i):rep(20000)
      for _ = 1, 100 do assert(ws:send(payload)) end
      return true
    end)
    assert.same({ true, true, true }, results)
    assert(wait_done(seen))
    assert.equal(300, #got)
    for _, m in ipairs(got) do assert.is_true(m == m:sub(1, 2):rep(20000)) end
  end)

  it("returns 'timeout' from recv and keeps working", function()
    local seen = ws_server()
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/"))
    defer(function() ws:close() end)
    ws:settimeout(50)
    assert.same({ nil, "timeout" }, { ws:recv() })
    ws:settimeout(2000)
    assert(ws:send("still here"))
    assert.same({ "still here", "text" }, { ws:recv() })
  end)

  it("returns 'socket busy reading' to a second reader", function()
    local seen = ws_server()
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/", { timeout = 2000 }))
    defer(function() ws:close() end)
    local t = cohost.spawn(function() return ws:recv() end)
    cohost.sleep(0.02)
    assert.same({ nil, "socket busy reading" }, { ws:recv() })
    assert(ws:send("x"))
    assert.same({ true, "x", "text" }, { cohost.wait(t) })
  end)

  it("close() from one task while another reads completes through the reader", function()
    local seen = ws_server()
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/", { timeout = 2000 }))
    local t = cohost.spawn(function() return ws:recv() end)
    cohost.sleep(0.02)
    assert.is_true(ws:close(1000, "bye"))
    assert.same({ true, "", "close", 1000 }, { cohost.wait(t) })   -- the echo has no reason
    assert.same({ "bye", "close", 1000 }, { last_event(seen) })
  end)

  it("reports an abrupt TCP close as 'closed'", function()
    -- The handler returns at once: the HTTP server closes the connection.
    local seen = ws_server(nil, function(_, _, seen_) seen_.done = true end)
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/", { timeout = 2000 }))
    assert.same({ nil, "closed" }, { ws:recv() })
  end)

  it("raises on misuse", function()
    local seen = ws_server()
    local ws = assert(websocket.connect("ws://127.0.0.1:" .. seen.port .. "/", { timeout = 2000 }))
    defer(function() ws:close() end)
    assert.has_error(function() ws:send(42) end)
    assert.has_error(function() ws:send("x", "ping") end)
    assert.has_error(function() ws:send_ping(("p"):rep(126)) end)
    assert.has_error(function() ws:close(1005) end)
    assert.has_error(function() ws:close(1000, ("r"):rep(124)) end)
  end)
end)
