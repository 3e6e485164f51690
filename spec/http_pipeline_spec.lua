-- HTTP/1.1 pipelining and keep-alive: 100 mixed requests (GET, POST with
-- Content-Length, POST chunked) sent one byte per write get the same bytes
-- back (Date aside) as the same 100 sent in one write; Python's
-- http.client reuses one connection for sequential requests, and a raw
-- Python socket pipelines.
local cohost = require "cohost"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- The handler both servers run: "METHOD path?query bodylen body".
local function echo(req, res)
  local body = assert(req:body())
  local q = req.query_string ~= "" and "?" .. req.query_string or ""
  res:header("X-Peer", req.peer)
  res:send(("%s %s%s %d %s"):format(req.method, req.path, q, #body, body))
end

-- 100 requests: GET, POST with a Content-Length body, POST chunked (in
-- one to three chunks, some with extensions or a trailer), in turn. The
-- last asks to close. Returns the bytes and the bodies expected back.
local function hundred()
  local t, want = {}, {}
  for i = 1, 100 do
    local close = i == 100 and "Connection: close\r\n" or ""
    local kind = i % 3
    if kind == 0 then
      t[#t + 1] = ("GET /g%d?i=%d HTTP/1.1\r\nHost: t\r\n%s\r\n"):format(i, i, close)
      want[i] = ("GET /g%d?i=%d 0 "):format(i, i)
    elseif kind == 1 then
      local body = ("b%d-"):format(i):rep(i % 7 + 1)
      t[#t + 1] = ("POST /p%d HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s")
        :format(i, #body, close, body)
      want[i] = ("POST /p%d %d %s"):format(i, #body, body)
    else
      local parts, chunks = {}, {}
      for k = 1, i % 3 + 1 do
        local piece = ("c%d.%d;"):format(i, k):rep(k)
        parts[#parts + 1] = piece
        local ext = (i + k) % 4 == 0 and ";x=" .. k or ""
        chunks[#chunks + 1] = ("%x%s\r\n%s\r\n"):format(#piece, ext, piece)
      end
      local trailer = i % 5 == 0 and "X-Sum: 1\r\n" or ""
      local body = table.concat(parts)
      t[#t + 1] = ("POST /c%d HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n%s\r\n%s0\r\n%s\r\n")
        :format(i, close, table.concat(chunks), trailer)
      want[i] = ("POST /c%d %d %s"):format(i, #body, body)
    end
  end
  return table.concat(t), want
end

-- Sends data in writes of `step` bytes while another thread reads until
-- the server closes; returns everything read.
local function send_and_read(port, data, step)
  local s = h.dial(port, 10000)
  s:setoption("tcp-nodelay", true)   -- each write its own segment
  local reader = cohost.spawn(function() return s:receive("*a") end)
  for i = 1, #data, step do
    assert(s:send(data:sub(i, i + step - 1)))
  end
  local ok, all, err = cohost.wait(reader)
  assert(ok, all)
  assert(all, err)
  return all
end

-- The bodies of the responses in a stream of Content-Length responses.
local function bodies(stream)
  local out, pos = {}, 1
  while pos <= #stream do
    local head_end = assert(stream:find("\r\n\r\n", pos, true), "truncated response")
    local head = stream:sub(pos, head_end + 1)
    assert(head:match("^HTTP/1%.1 200 "), head)
    local n = tonumber(head:match("\r\nContent%-Length: (%d+)\r\n"))
    out[#out + 1] = stream:sub(head_end + 4, head_end + 3 + n)
    pos = head_end + 4 + n
  end
  return out
end

local function strip_date(s)
  return (s:gsub("\r\nDate: [^\r]*\r\n", "\r\n"))
end

describe("http pipelining", function()
  it("answers 100 pipelined requests sent one byte per write as when sent in one write", function()
    local port = h.http_serve(echo)
    local data, want = hundred()
    local whole = send_and_read(port, data, #data)
    local bytewise = send_and_read(port, data, 1)
    local got = bodies(whole)
    assert.equal(100, #got)
    for i = 1, 100 do
      -- X-Peer differs between the two connections; the bodies do not.
      assert.equal(want[i], got[i])
    end
    local function norm(s) return strip_date(s):gsub("\r\nX%-Peer: [^\r]*\r\n", "\r\n") end
    assert.equal(norm(whole), norm(bytewise))
    assert.truthy(whole:find("Connection: close\r\n", 1, true))
  end)
end)

-- Responses to pipelined requests are held back and written in one go
-- (host/http/conn.c, "Held output"); these hold what that must not change.
describe("http pipelining, answers held for one write", function()
  it("sends an answer while a later pipelined request's handler waits", function()
    local go = cohost.semaphore.new(0)
    defer(function() go:post(10) end)
    local port = h.http_serve(function(req, res)
      if req.path == "/slow" then go:wait(10) end
      res:send(req.path)
    end)
    local s = h.dial(port, 5000)
    assert(s:send("GET /fast HTTP/1.1\r\nHost: t\r\n\r\nGET /slow HTTP/1.1\r\nHost: t\r\n\r\n"))
    -- /slow waits until /fast's answer is here: held for the batch, it
    -- would never come.
    assert.equal("/fast", assert(h.receive_response(s)).body)
    go:post()
    assert.equal("/slow", assert(h.receive_response(s)).body)
    s:close()
  end)

  it("sends every answer of a batch to a client that half-closed after sending it", function()
    local port = h.http_serve(function(req, res) res:send(req.path) end)
    local s = h.dial(port, 5000)
    local batch = {}
    for i = 1, 40 do batch[i] = ("GET /%d HTTP/1.1\r\nHost: t\r\n\r\n"):format(i) end
    assert(s:send(table.concat(batch)))
    assert(s:shutdown("send"))
    local all = assert(s:receive("*a"))
    local got = bodies(all)
    assert.equal(40, #got)
    for i = 1, 40 do assert.equal("/" .. i, got[i]) end
  end)

  it("writes the answers before a hijacked connection's own bytes", function()
    local port = h.http_serve(function(req, res)
      if req.path ~= "/up" then return res:send(req.path) end
      local sock = res:hijack()
      sock:send("RAW")
      sock:close()
    end)
    local s = h.dial(port, 5000)
    assert(s:send("GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\nGET /up HTTP/1.1\r\nHost: t\r\n\r\n"))
    local all = assert(s:receive("*a"))
    local last = all:find("RAW", 1, true)
    assert.truthy(last, all)
    assert.equal(#all - 2, last)
    assert.same({ "/a", "/b" }, bodies(all:sub(1, last - 1)))
  end)
end)

-- A cohost child serving echo (Python runs through os.execute, which
-- blocks this worker: the server cannot live in this process).
local function child_server()
  local script = h.tmpfile(h.server_script([[
local http = require "cohost.http"
listener = assert(http.listen("127.0.0.1:0", function(req, res)
  local body = assert(req:body())
  local q = req.query_string ~= "" and "?" .. req.query_string or ""
  res:header("X-Peer", req.peer)
  res:send(("%s %s%s %d %s"):format(req.method, req.path, q, #body, body))
end))
]]))
  local p = h.start(h.shell_quote(script), 60)
  defer(p.stop)
  return p.port
end

-- Runs a Python script with the port as argv[1] (h.python, 30 s);
-- returns its JSON output.
local function python(port, source)
  local code, out, err = h.python(source, tostring(port), 30)
  assert(code == 0, "python failed: " .. out .. err)
  return cjson.decode(out)
end

describe("http keep-alive with Python", function()
  it("serves http.client's sequential requests on one reused connection", function()
    local port = child_server()
    local r = python(port, [[
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
out = []
for i in range(30):
    if i % 3 == 0:
        c.request("GET", "/g%d?i=%d" % (i, i))
    elif i % 3 == 1:
        c.request("POST", "/p%d" % i, body=b"x" * i)
    else:
        c.request("POST", "/c%d" % i, body=iter([b"ab", b"cd" * i]), encode_chunked=True)
    resp = c.getresponse()
    out.append({"status": resp.status, "body": resp.read().decode(),
                "peer": resp.getheader("X-Peer"), "conn": resp.getheader("Connection"),
                "sock": c.sock.getsockname()[1] if c.sock else None})
print(json.dumps(out))
]])
    assert.equal(30, #r)
    for i, x in ipairs(r) do
      local n = i - 1
      assert.equal(200, x.status)
      assert.equal(cjson.null, x.conn)   -- no Connection: close
      if n % 3 == 0 then
        assert.equal(("GET /g%d?i=%d 0 "):format(n, n), x.body)
      elseif n % 3 == 1 then
        assert.equal(("POST /p%d %d %s"):format(n, n, ("x"):rep(n)), x.body)
      else
        assert.equal(("POST /c%d %d ab%s"):format(n, 2 + 2 * n, ("cd"):rep(n)), x.body)
      end
      -- One connection: the server saw the same peer every time, and
      -- http.client never opened another socket.
      assert.equal(r[1].peer, x.peer)
      assert.equal(r[1].sock, x.sock)
    end
  end)

  it("answers requests a raw Python socket pipelines in one send, in order", function()
    local port = child_server()
    local r = python(port, [[
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
reqs = []
for i in range(20):
    if i % 2:
        body = b"y" * i
        reqs.append(b"POST /p%d HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (i, len(body), body))
    else:
        reqs.append(b"GET /g%d HTTP/1.1\r\nHost: t\r\n\r\n" % i)
reqs.append(b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
s.sendall(b"".join(reqs))
f = s.makefile("rb")
out = []
while True:
    line = f.readline()
    if not line:
        break
    status = int(line.split()[1])
    headers = {}
    while True:
        h = f.readline().rstrip(b"\r\n")
        if not h:
            break
        k, v = h.split(b":", 1)
        headers[k.strip().lower().decode()] = v.strip().decode()
    body = f.read(int(headers["content-length"])).decode()
    out.append({"status": status, "body": body, "peer": headers.get("x-peer"),
                "conn": headers.get("connection")})
print(json.dumps(out))
]])
    assert.equal(21, #r)
    for i = 1, 20 do
      local n, x = i - 1, r[i]
      assert.equal(200, x.status)
      if n % 2 == 1 then
        assert.equal(("POST /p%d %d %s"):format(n, n, ("y"):rep(n)), x.body)
      else
        assert.equal(("GET /g%d 0 "):format(n), x.body)
      end
      assert.equal(r[1].peer, x.peer)
    end
    assert.equal("GET /last 0 ", r[21].body)
    assert.equal("close", r[21].conn)
  end)
end)
