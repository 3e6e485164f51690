-- The HTTP/1.1 client (cohost.http.client). Its peers are real: scripted
-- raw servers on cohost.listen that read the request with a cosocket and
-- answer exact bytes, Python's http.server in a child process, and the
-- cohost HTTP server. Everything listens on 127.0.0.1 (or ::1) port 0.
local cohost = require "cohost"
local client = require "cohost.http.client"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- -- Scripted servers ---------------------------------------------------------

-- Reads one request from a server-side socket: method, target, version,
-- headers (lower-case names; a repeated one is an array), lines (the head
-- as sent, without CRLFs), body (decoded) and chunked (true when it came
-- chunked, raw holding the chunked bytes). nil, err when the peer left.
local function read_request(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local req = { headers = {}, lines = { line } }
  req.method, req.target, req.version = line:match("^(%S+) (%S+) HTTP/(%d%.%d)$")
  while true do
    local l = assert(sock:receive("*l"))
    if l == "" then break end
    req.lines[#req.lines + 1] = l
    local k, v = l:match("^([^:]+): *(.-) *$")
    k = k:lower()
    local old = req.headers[k]
    if old == nil then req.headers[k] = v
    elseif type(old) == "table" then old[#old + 1] = v
    else req.headers[k] = { old, v } end
  end
  req.body = ""
  if req.headers["content-length"] then
    req.body, err = sock:receive(tonumber(req.headers["content-length"]))
    if not req.body then return nil, err end   -- the client gave up
  elseif req.headers["transfer-encoding"] == "chunked" then
    req.chunked = true
    local parts, raw = {}, {}
    while true do
      local size = assert(sock:receive("*l"))
      raw[#raw + 1] = size .. "\r\n"
      local n = assert(tonumber(size, 16))
      if n == 0 then
        assert.equal("", sock:receive("*l"))
        raw[#raw + 1] = "\r\n"
        break
      end
      parts[#parts + 1] = assert(sock:receive(n))
      assert.equal("\r\n", sock:receive(2))
      raw[#raw + 1] = parts[#parts] .. "\r\n"
    end
    req.body, req.raw = table.concat(parts), table.concat(raw)
  end
  return req
end

-- Serves answer(req, st, conn) on every request of every connection until
-- the client leaves: answer returns the exact bytes to send, or false to
-- close without answering. st counts connections (st.conns) and keeps the
-- requests in order (st.reqs, each with .conn, the connection's number).
-- Returns st and the port. After the test, the connections idle in the
-- client's pool are taken out and closed, so the handlers end (the
-- listener is closed by then: an empty pool ends the loop).
local function server(answer)
  local st = { conns = 0, reqs = {} }
  local port
  defer(function()
    for _, host in ipairs { "127.0.0.1", "localhost" } do
      while true do
        local s = cohost.tcp()
        if not s:connect(host, port, { pool = "http:" .. host .. ":" .. port }) then break end
        s:close()
      end
    end
  end)
  local _
  _, port = h.serve(function(sock)
    st.conns = st.conns + 1
    local conn = st.conns
    sock:settimeout(5000)
    while true do
      local req = read_request(sock)
      if not req then return end
      req.conn = conn
      st.reqs[#st.reqs + 1] = req
      local out = answer(req, st, conn)
      if not out then return end
      if type(out) == "function" then
        if out(sock) == false then return end
      else
        assert(sock:send(out))
      end
    end
  end)
  return st, port
end

-- A 200 response with body and Content-Length, plus extra header lines.
local function ok(body, extra)
  return ("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"):format(#body, extra or "", body)
end

-- Sends data one byte per TCP segment (a small pause between them), so
-- the client sees every boundary split.
local drip = h.drip

local function url(port, path)
  return ("http://127.0.0.1:%d%s"):format(port, path or "/")
end

-- -- Requests on the wire -----------------------------------------------------

describe("request on the wire", function()
  it("sends the method, target, Host with the port and a User-Agent", function()
    local st, port = server(function() return ok("x") end)
    local res = assert(client.request(url(port, "/a/b?x=1"), { method = "delete" }))
    assert.equal(200, res.status)
    local req = st.reqs[1]
    assert.equal("DELETE /a/b?x=1 HTTP/1.1", req.lines[1])
    assert.equal("127.0.0.1:" .. port, req.headers.host)
    assert.matches("^cohost/", req.headers["user-agent"])
  end)

  -- Port 80 needs root and a free port: pending where either is missing.
  local l80 = cohost.listen("127.0.0.1:80", function() end)
  if l80 then l80:close() end
  local port80 = l80 and it or pending
  port80("leaves the port out of Host for port 80", function()
    local l = assert(cohost.listen("127.0.0.1:80", function(sock)
      local req = read_request(sock)
      sock:send(ok(req.headers.host))
    end))
    defer(function() l:close() end)
    assert.equal("127.0.0.1", assert(client.request("http://127.0.0.1/", { keepalive = false })).body)
    assert.equal("127.0.0.1", assert(client.request("http://127.0.0.1:80/", { keepalive = false })).body)
  end)

  it("sends / for an empty path and lets Host be overridden", function()
    local st, port = server(function() return ok("") end)
    assert(client.request("http://127.0.0.1:" .. port))
    assert.equal("GET / HTTP/1.1", st.reqs[1].lines[1])
    assert(client.request(url(port), { headers = { Host = "example.com" } }))
    assert.equal("example.com", st.reqs[2].headers.host)
  end)

  it("appends an encoded query table to the URL's own query", function()
    local st, port = server(function() return ok("") end)
    assert(client.request(url(port, "/s?q=1"), {
      query = { name = "a b&c", list = { "1", "2" }, flag = true, off = false, n = 5 },
    }))
    assert.equal("/s?q=1&flag&list=1&list=2&n=5&name=a%20b%26c", st.reqs[1].target)
  end)

  it("percent-encodes bytes a request-target cannot carry and drops the fragment", function()
    local st, port = server(function() return ok("") end)
    assert(client.request(url(port, "/a b/\"x\"?k=v w#frag")))
    assert.equal("/a%20b/%22x%22?k=v%20w", st.reqs[1].target)
  end)

  it("turns userinfo into basic auth", function()
    local st, port = server(function() return ok("") end)
    assert(client.request("http://al%40ice:p%3Ass@127.0.0.1:" .. port .. "/"))
    -- base64("al@ice:p:ss")
    assert.equal("Basic YWxAaWNlOnA6c3M=", st.reqs[1].headers.authorization)
    assert.equal("127.0.0.1:" .. port, st.reqs[1].headers.host)
  end)

  it("reaches an IPv6 literal and sends it bracketed in Host", function()
    local st = { reqs = {} }
    local l = assert(cohost.listen("[::1]:0", function(sock)
      st.reqs[#st.reqs + 1] = read_request(sock)
      sock:send(ok("six"))
    end))
    defer(function() l:close() end)
    local _, port = l:addr()
    local res = assert(client.request(("http://[::1]:%d/v6"):format(port)))
    assert.equal("six", res.body)
    assert.equal("[::1]:" .. port, st.reqs[1].headers.host)
  end)

  it("merges headers case-insensitively, repeats array values and drops false ones", function()
    local st, port = server(function() return ok("") end)
    assert(client.request(url(port), {
      headers = { ["user-agent"] = false, ["X-Multi"] = { "a", "b" }, ["HOST"] = "h.example" },
    }))
    local req = st.reqs[1]
    assert.is_nil(req.headers["user-agent"])
    assert.same({ "a", "b" }, req.headers["x-multi"])
    assert.equal("h.example", req.headers.host)
    local hosts = 0
    for _, l in ipairs(req.lines) do
      if l:lower():match("^host:") then hosts = hosts + 1 end
    end
    assert.equal(1, hosts)
  end)

  it("raises on a header value that would split the request", function()
    assert.has_error(function()
      client.request("http://127.0.0.1:1/", { headers = { ["X-A"] = "a\r\nX-B: b" } })
    end)
    assert.has_error(function()
      client.request("http://127.0.0.1:1/", { headers = { ["Bad Name"] = "x" } })
    end)
  end)

  it("sends a string body with its Content-Length, replacing a wrong one", function()
    local st, port = server(function(req) return ok(req.body:upper()) end)
    local res = assert(client.request(url(port, "/up"), {
      method = "POST", body = "hello", headers = { ["Content-Length"] = "99" },
    }))
    assert.equal("HELLO", res.body)
    assert.equal("5", st.reqs[1].headers["content-length"])
  end)

  it("sends Content-Length: 0 for a POST without a body", function()
    local st, port = server(function() return ok("") end)
    assert(client.request(url(port), { method = "POST" }))
    assert.equal("0", st.reqs[1].headers["content-length"])
  end)

  it("sends a function body chunked, piece by piece", function()
    local st, port = server(function(req) return ok(req.body) end)
    local pieces = { "abc", "", "defgh", "i" }
    local i = 0
    local res = assert(client.request(url(port), {
      method = "PUT",
      body = function() i = i + 1; return pieces[i] end,
    }))
    assert.equal("abcdefghi", res.body)
    local req = st.reqs[1]
    assert.is_true(req.chunked)
    assert.equal("3\r\nabc\r\n5\r\ndefgh\r\n1\r\ni\r\n0\r\n\r\n", req.raw)
    assert.is_nil(req.headers["content-length"])
  end)

  it("sends a function body raw when Content-Length is given", function()
    local st, port = server(function(req) return ok(req.body) end)
    local pieces = { "ab", "cd" }
    local i = 0
    local res = assert(client.request(url(port), {
      method = "POST", headers = { ["content-length"] = 4 },
      body = function() i = i + 1; return pieces[i] end,
    }))
    assert.equal("abcd", res.body)
    assert.is_nil(st.reqs[1].chunked)
    assert.is_nil(st.reqs[1].headers["transfer-encoding"])
  end)

  it("fails a function body that does not match its Content-Length", function()
    local _, port = server(function(req) return ok(req.body) end)
    local res, err = client.request(url(port), {
      method = "POST", headers = { ["Content-Length"] = "10" },
      body = coroutine.wrap(function() coroutine.yield("abc") end),
    })
    assert.is_nil(res)
    assert.equal("body shorter than content-length", err)
  end)
end)

-- -- URLs -------------------------------------------------------------------------

describe("URLs", function()
  it("refuses other schemes and malformed URLs", function()
    assert.same({ nil, "unsupported scheme: ftp" }, { client.request("ftp://127.0.0.1/") })
    for _, u in ipairs { "127.0.0.1/", "http://", "http://h:99999/", "http://h:x/", "http://a b/" } do
      local res, err = client.request(u)
      assert.is_nil(res, u)
      assert.equal("bad url", err, u)
    end
  end)

  it("escapes all but unreserved bytes and unescapes %XX", function()
    assert.equal("a%20b%2F%3F%26%3D~-._%C3%A9", client.escape("a b/?&=~-._é"))
    assert.equal("a b/?&=é+%zz", client.unescape("a%20b%2F%3f&=%C3%A9+%zz"))
  end)
end)

-- -- Responses --------------------------------------------------------------------

describe("responses", function()
  it("parses status, reason, version and headers with case-insensitive lookup", function()
    local _, port = server(function()
      return ok("body!", "Set-Cookie: a=1\r\nX-Thing:  spaced  \r\nSet-Cookie: b=2\r\n")
    end)
    local res = assert(client.request(url(port)))
    assert.equal(200, res.status)
    assert.equal("OK", res.reason)
    assert.equal(1.1, res.version)
    assert.equal("body!", res.body)
    assert.equal("spaced", res.headers["x-thing"])
    assert.equal("spaced", res.headers["X-Thing"])
    assert.same({ "a=1", "b=2" }, res.headers["Set-Cookie"])
    assert.equal("a=1", res:header("set-cookie"))
    assert.equal("5", res.headers["content-length"])
  end)

  it("decodes a chunked body dripped one byte per write, with extensions and trailers", function()
    local body = "0123456789abcdefghijklmnopq"
    local wire = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      .. "1a;name=value;x\r\n" .. body:sub(1, 26) .. "\r\n"
      .. "01 ; ext\r\n" .. body:sub(27) .. "\r\n"
      .. "0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n"
    local st, port = server(function(req)
      if req.target == "/drip" then return drip(wire) end
      return ok("after")
    end)
    local res = assert(client.request(url(port, "/drip")))
    assert.equal(body, res.body)
    assert.is_nil(res.headers["x-trailer"])
    -- The trailers were consumed: the connection serves the next request.
    res = assert(client.request(url(port, "/next")))
    assert.equal("after", res.body)
    assert.equal(1, res.reused)
    assert.equal(1, st.conns)
  end)

  it("rejects bad chunk sizes and bad chunk framing", function()
    local bad = {
      "zz\r\nabc\r\n0\r\n\r\n",           -- not hex
      "-1\r\na\r\n0\r\n\r\n",              -- sign
      "+1\r\na\r\n0\r\n\r\n",
      " 1\r\na\r\n0\r\n\r\n",              -- leading space
      "0x1\r\na\r\n0\r\n\r\n",             -- C prefix
      "1 junk\r\na\r\n0\r\n\r\n",          -- junk that is not an extension
      "\r\na\r\n0\r\n\r\n",                -- empty size
      "1\na\r\n0\r\n\r\n",                 -- bare LF after the size
      "1\r\nab\r\n0\r\n\r\n",              -- data longer than the size
      "3\r\nabc0\r\n\r\n",                 -- no CRLF after the data
      "fffffffffffffffff\r\na\r\n",        -- overflows
      "1;" .. ("x"):rep(9000) .. "\r\na\r\n0\r\n\r\n",   -- size line past 8 KiB
      "1\r\na\r\n0\r\nX-T: " .. ("t"):rep(70000) .. "\r\n\r\n",   -- endless trailer
    }
    for i, chunks in ipairs(bad) do
      local _, port = server(function()
        return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" .. chunks
      end)
      local res, err = client.request(url(port, "/" .. i), { read_timeout = 2000 })
      assert.is_nil(res, chunks)
      assert.equal("bad chunked body", err, chunks)
    end
  end)

  it("reports a chunked body cut short as closed", function()
    local _, port = server(function()
      return function(sock)
        sock:send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
        return false
      end
    end)
    assert.same({ nil, "closed" }, { client.request(url(port)) })
  end)

  it("reads until close when there is no length, and does not reuse that connection", function()
    local st, port = server(function(req)
      if req.target == "/eof" then
        return function(sock)
          sock:send("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
          cohost.sleep(0.02)
          sock:send("the end")
          return false
        end
      end
      return ok("next")
    end)
    local res = assert(client.request(url(port, "/eof")))
    assert.equal("until the end", res.body)
    res = assert(client.request(url(port, "/n")))
    assert.equal("next", res.body)
    assert.equal(0, res.reused)
    assert.equal(2, st.conns)
  end)

  it("reads an HTTP/1.0 response and never reuses its connection", function()
    local st, port = server(function()
      return "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nold"
    end)
    local res = assert(client.request(url(port)))
    assert.equal(1.0, res.version)
    assert.equal("old", res.body)
    assert(client.request(url(port)))
    assert.equal(2, st.conns)
  end)

  it("does not reuse a connection the server marked Connection: close", function()
    local st, port = server(function() return ok("x", "Connection: keep-alive, Close\r\n") end)
    assert(client.request(url(port)))
    assert(client.request(url(port)))
    assert.equal(2, st.conns)
  end)

  it("skips 100 Continue and other interim responses", function()
    local _, port = server(function(req)
      return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
        .. ok("final:" .. req.body)
    end)
    local res = assert(client.request(url(port), { method = "POST", body = "b" }))
    assert.equal(200, res.status)
    assert.equal("final:b", res.body)
    assert.is_nil(res.headers.link)
  end)

  it("reads no body for 204, 304 and HEAD, and keeps the connection in sync", function()
    local st, port = server(function(req)
      if req.target == "/204" then return "HTTP/1.1 204 No Content\r\n\r\n" end
      if req.target == "/304" then return "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n" end
      if req.method == "HEAD" then return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" end
      return ok("tail")
    end)
    local res = assert(client.request(url(port, "/204")))
    assert.same({ 204, "" }, { res.status, res.body })
    res = assert(client.request(url(port, "/304")))
    assert.same({ 304, "" }, { res.status, res.body })
    res = assert(client.request(url(port, "/h"), { method = "HEAD" }))
    assert.same({ 200, "", "100" }, { res.status, res.body, res.headers["content-length"] })
    res = assert(client.request(url(port, "/get")))
    assert.equal("tail", res.body)
    assert.equal(3, res.reused)
    assert.equal(1, st.conns)
  end)

  it("rejects a malformed status line, header or Content-Length", function()
    local cases = {
      { "HTTP/1.1 20 OK\r\n\r\n", "bad status line" },
      { "ICY 200 OK\r\n\r\n", "bad status line" },
      { "HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n", "bad header" },
      { "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n", "bad header" },
      { "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "bad content-length" },
      { "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad content-length" },
      { "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", "bad content-length" },
      { "HTTP/1.1 200 OK\r\nX: a\1b\r\n\r\n", "bad header" },
      { "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "bad header" },
      { "HTTP/1.1 200 OK\r\nX: " .. ("x"):rep(9000) .. "\r\n\r\n", "header too large" },
      { "HTTP/1.1 200 OK\r\n" .. ("X: " .. ("x"):rep(1000) .. "\r\n"):rep(70) .. "\r\n",
        "header too large" },
    }
    for _, c in ipairs(cases) do
      local _, port = server(function() return c[1] end)
      local res, err = client.request(url(port))
      assert.is_nil(res, c[1])
      assert.equal(c[2], err, c[1])
    end
  end)

  it("tolerates bare LF line ends in the head", function()
    local _, port = server(function()
      return "HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\n\nok"
    end)
    local res = assert(client.request(url(port)))
    assert.same({ "ok", "b" }, { res.body, res.headers["x-a"] })
  end)

  it("accepts repeated identical Content-Length values", function()
    local _, port = server(function()
      return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"
    end)
    assert.equal("ok", assert(client.request(url(port))).body)
  end)

  it("lets chunked win over Content-Length and then drops the connection", function()
    local st, port = server(function()
      return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    end)
    assert.equal("hi", assert(client.request(url(port))).body)
    assert(client.request(url(port)))
    assert.equal(2, st.conns)
  end)

  it("enforces max_body_size on Content-Length, chunked and until-close bodies", function()
    local _, port = server(function(req)
      if req.target == "/cl" then return ok(("x"):rep(100)) end
      if req.target == "/chunked" then
        return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" .. ("x"):rep(64)
          .. "\r\n40\r\n" .. ("x"):rep(64) .. "\r\n0\r\n\r\n"
      end
      return function(sock)
        sock:send("HTTP/1.1 200 OK\r\n\r\n" .. ("x"):rep(100))
        return false
      end
    end)
    for _, path in ipairs { "/cl", "/chunked", "/close" } do
      local res, err = client.request(url(port, path), { max_body_size = 99 })
      assert.is_nil(res, path)
      assert.equal("body too large", err, path)
    end
    assert.equal(100, #assert(client.request(url(port, "/cl"), { max_body_size = 100 })).body)
  end)
end)

-- -- Connections ------------------------------------------------------------------

describe("connections", function()
  it("reuses one pooled connection for sequential requests", function()
    local st, port = server(function(req) return ok(req.target) end)
    for i = 1, 3 do
      local res = assert(client.request(url(port, "/" .. i)))
      assert.equal("/" .. i, res.body)
      assert.equal(i - 1, res.reused)
    end
    assert.equal(1, st.conns)
    assert.same({ 1, 1, 1 }, { st.reqs[1].conn, st.reqs[2].conn, st.reqs[3].conn })
    -- The idle connection waits in the pool "http:host:port" with its count.
    local s = cohost.tcp()
    assert(s:connect("127.0.0.1", port, { pool = "http:127.0.0.1:" .. port }))
    assert.equal(3, s:getreusedtimes())
    s:close()
  end)

  it("closes instead of pooling with keepalive = false, and says so", function()
    local st, port = server(function() return ok("") end)
    assert(client.request(url(port), { keepalive = false }))
    assert(client.request(url(port), { keepalive = false }))
    assert.equal("close", st.reqs[1].headers.connection)
    assert.equal(2, st.conns)
  end)

  it("keeps at most keepalive_pool idle connections per host", function()
    local st, port = server(function() return ok("") end)
    -- Three requests at once need three connections; a pool of one keeps one.
    h.run_all(3, function()
      return assert(client.request(url(port), { keepalive_pool = 1 }))
    end)
    assert.equal(3, st.conns)
    h.run_all(3, function()
      return assert(client.request(url(port), { keepalive_pool = 1 }))
    end)
    assert.equal(5, st.conns)
  end)

  -- The server reads the second request on its first connection and hangs
  -- up without answering: the race every pooled connection runs.
  local function hangs_up_second()
    local per = {}
    return server(function(req, _, conn)
      per[conn] = (per[conn] or 0) + 1
      if conn == 1 and per[conn] == 2 then return false end
      return ok(req.method .. " " .. req.target .. " " .. req.body)
    end)
  end

  it("retries an idempotent request once on a fresh connection when the pooled one died", function()
    local st, port = hangs_up_second()
    assert.equal("GET /1 ", assert(client.request(url(port, "/1"))).body)
    local res = assert(client.request(url(port, "/2"), { method = "PUT", body = "b" }))
    assert.equal("PUT /2 b", res.body)
    assert.equal(0, res.reused)
    assert.equal(2, st.conns)
    assert.equal(3, #st.reqs)   -- /2 reached the server twice
  end)

  it("does not retry a POST on a pooled connection that died", function()
    local st, port = hangs_up_second()
    assert(client.request(url(port, "/1")))
    assert.same({ nil, "closed" }, { client.request(url(port, "/2"), { method = "POST", body = "b" }) })
    assert.equal(1, st.conns)
    assert.equal(2, #st.reqs)
  end)

  it("gives 'timeout' when the server never answers", function()
    local _, port = h.serve(function(sock)
      -- Reads and never answers; ends when the client hangs up.
      sock:settimeout(5000)
      repeat until not sock:receive("*l")
    end)
    local t0 = cohost.monotonic()
    assert.same({ nil, "timeout" }, { client.request(url(port), { timeout = 200 }) })
    local took = cohost.monotonic() - t0
    assert.is_true(took >= 0.15 and took < 2, took)
    -- read_timeout overrides timeout.
    t0 = cohost.monotonic()
    assert.same({ nil, "timeout" },
      { client.request(url(port), { timeout = 10000, read_timeout = 100 }) })
    assert.is_true(cohost.monotonic() - t0 < 2)
  end)

  it("gives 'connection refused' when nothing listens", function()
    assert.same({ nil, "connection refused" }, { client.request(url(h.free_port())) })
  end)
end)

-- -- Streaming --------------------------------------------------------------------

describe("streamed responses", function()
  it("reads the body with res:read(n) and pools the connection only at its end", function()
    local st, port = server(function(req)
      if req.target == "/big" then
        return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          .. "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
      end
      return ok("small")
    end)
    local res = assert(client.request(url(port, "/big"), { stream = true }))
    assert.equal(200, res.status)
    assert.equal("hel", res:read(3))
    -- Mid-body, the connection is not in the pool: another request dials.
    assert.equal(0, assert(client.request(url(port, "/x"))).reused)
    assert.equal(2, st.conns)
    local rest = {}
    while true do
      local piece, err = res:read(4)
      assert.is_nil(err)
      if not piece then break end
      assert.is_true(#piece >= 1 and #piece <= 4)
      rest[#rest + 1] = piece
    end
    assert.equal("lo world", table.concat(rest))
    assert.is_nil(res:read(1))
    -- Now both connections are pooled; the most recent one comes first.
    local again = assert(client.request(url(port, "/y")))
    assert.equal(1, again.reused)
    assert.equal(2, st.conns)
  end)

  it("iterates with res:chunks() and reads the rest with res:body()", function()
    local st, port = server(function() return ok(("a"):rep(10) .. ("b"):rep(10)) end)
    local res = assert(client.request(url(port), { stream = true }))
    assert.is_nil(rawget(res, "body"))
    local pieces = {}
    for piece in res:chunks(7) do pieces[#pieces + 1] = piece end
    assert.equal(("a"):rep(10) .. ("b"):rep(10), table.concat(pieces))
    res = assert(client.request(url(port), { stream = true }))
    assert.equal("aaaa", res:read(4))
    assert.equal(("a"):rep(6) .. ("b"):rep(10), res:body())
    -- Both streams were read to their end: one connection served all three.
    assert.equal(2, assert(client.request(url(port))).reused)
    assert.equal(1, st.conns)
  end)

  it("streams an until-close body and reports errors from chunks()", function()
    local _, port = server(function(req)
      if req.target == "/bad" then
        return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nxyz\r\n"
      end
      return function(sock)
        sock:send("HTTP/1.0 200 OK\r\n\r\nto the end")
        return false
      end
    end)
    local res = assert(client.request(url(port, "/eof"), { stream = true }))
    assert.equal("to the end", res:body())
    res = assert(client.request(url(port, "/bad"), { stream = true }))
    assert.has_error(function()
      for _ in res:chunks() do end
    end, "response body: bad chunked body")
  end)

  it("res:close() drops a half-read connection", function()
    local st, port = server(function() return ok(("z"):rep(1000)) end)
    local res = assert(client.request(url(port), { stream = true }))
    assert.equal("z", res:read(1))
    res:close()
    assert.same({ nil, "closed" }, { res:read(1) })
    assert.equal(0, assert(client.request(url(port))).reused)
    assert.equal(2, st.conns)
  end)
end)

-- -- Redirects --------------------------------------------------------------------

describe("redirects", function()
  -- /r/<code>/<n> redirects n times with code, then /done answers with
  -- the method and body it got.
  local function redirector()
    return server(function(req)
      local code, n = req.target:match("^/r/(%d+)/(%d+)$")
      if code then
        n = tonumber(n)
        local loc = n > 1 and ("/r/%s/%d"):format(code, n - 1) or "done?x=1"
        return ("HTTP/1.1 %s Moved\r\nLocation: %s\r\nContent-Length: 5\r\n\r\nmoved"):format(code, loc)
      end
      return ok(req.method .. " " .. req.target .. " " .. req.body)
    end)
  end

  it("are not followed by default", function()
    local _, port = redirector()
    local res = assert(client.request(url(port, "/r/302/1")))
    assert.equal(302, res.status)
    assert.equal("done?x=1", res.headers.location)
    assert.equal("moved", res.body)
  end)

  it("are followed on request, relative Locations resolved, connections reused", function()
    local st, port = redirector()
    for _, code in ipairs { "301", "302", "303", "307", "308" } do
      local res = assert(client.request(url(port, "/r/" .. code .. "/2"), { follow_redirects = true }))
      assert.equal(200, res.status, code)
      assert.equal("GET /r/" .. code .. "/done?x=1 ", res.body, code)
      assert.equal(url(port, "/r/" .. code .. "/done?x=1"), res.url)
    end
    assert.equal(1, st.conns)
  end)

  it("turn a POST into a GET without body on 303 (and 302), keep both on 307/308", function()
    local st, port = redirector()
    local function post(code)
      return assert(client.request(url(port, "/r/" .. code .. "/1"), {
        method = "POST", body = "data", follow_redirects = true,
        headers = { ["Content-Type"] = "text/plain" },
      }))
    end
    assert.equal("GET /r/303/done?x=1 ", post(303).body)
    assert.is_nil(st.reqs[#st.reqs].headers["content-type"])
    assert.equal("GET /r/302/done?x=1 ", post(302).body)
    assert.equal("POST /r/307/done?x=1 data", post(307).body)
    assert.equal("text/plain", st.reqs[#st.reqs].headers["content-type"])
    assert.equal("POST /r/308/done?x=1 data", post(308).body)
  end)

  it("stop at max_redirects with 'too many redirects'", function()
    local st, port = server(function()
      return "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n"
    end)
    assert.same({ nil, "too many redirects" },
      { client.request(url(port, "/loop"), { follow_redirects = true }) })
    assert.equal(6, #st.reqs)   -- the request and 5 redirects
    assert.same({ nil, "too many redirects" },
      { client.request(url(port, "/loop"), { follow_redirects = true, max_redirects = 2 }) })
    assert.equal(9, #st.reqs)
  end)

  it("drop Authorization on a redirect to another host, keep it on the same one", function()
    local other, oport = server(function() return ok("other") end)
    local st, port = server(function(req)
      if req.target == "/same" then return ok("same") end
      local to = req.target == "/away" and ("http://localhost:%d/x"):format(oport) or "/same"
      return ("HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n"):format(to)
    end)
    local opts = { follow_redirects = true, headers = { Authorization = "Bearer t", ["X-Keep"] = "k" } }
    assert.equal("same", assert(client.request(url(port, "/stay"), opts)).body)
    assert.equal("Bearer t", st.reqs[2].headers.authorization)
    assert.equal("other", assert(client.request(url(port, "/away"), opts)).body)
    assert.is_nil(other.reqs[1].headers.authorization)
    assert.equal("k", other.reqs[1].headers["x-keep"])
    assert.equal("localhost:" .. oport, other.reqs[1].headers.host)
  end)

  it("drain a streamed redirect body and stream the final one", function()
    local st, port = redirector()
    local res = assert(client.request(url(port, "/r/307/1"), { follow_redirects = true, stream = true }))
    assert.equal("GET /r/307/done?x=1 ", res:body())
    assert.equal(1, st.conns)
  end)
end)

-- -- Clients ----------------------------------------------------------------------

describe("client objects", function()
  it("apply default options under per-call ones, headers merged case-insensitively", function()
    local st, port = server(function(req) return ok(req.method .. ":" .. req.body) end)
    local c = client.new({
      headers = { ["X-Default"] = "d", ["User-Agent"] = "mine/1" },
      query = { key = "k" },
    })
    local res = assert(c:request(url(port, "/a"), { headers = { ["user-agent"] = "call/2" } }))
    assert.equal("GET:", res.body)
    local req = st.reqs[1]
    assert.equal("d", req.headers["x-default"])
    assert.equal("call/2", req.headers["user-agent"])
    assert.equal("/a?key=k", req.target)
    assert.equal("POST:p", assert(c:post(url(port, "/b"), "p")).body)
    assert.equal("PUT:q", assert(c:put(url(port, "/b"), "q")).body)
    assert.equal("PATCH:r", assert(c:patch(url(port, "/b"), "r")).body)
    assert.equal("DELETE:", assert(c:delete(url(port, "/b"))).body)
    assert.equal("GET:", assert(c:get(url(port, "/b"), { query = { more = 1 } })).body)
    assert.equal("/b?key=k&more=1", st.reqs[#st.reqs].target)
    assert.equal(200, assert(c:head(url(port, "/b"))).status)
    assert.equal("mine/1", st.reqs[#st.reqs].headers["user-agent"])
  end)
end)

-- -- Python's http.server -----------------------------------------------------------

-- Runs a Python script that prints the port it listens on as its first
-- line; returns that port. The process is killed after the test.
local function python(source)
  local script = h.tmpfile(source)
  local out, pidf = h.tmpfile(), h.tmpfile()
  os.execute(("timeout 30 python3 %s >%s 2>&1 </dev/null & echo $! >%s"):format(script, out, pidf))
  local pid = tonumber(h.slurp(pidf))
  defer(function() os.execute("kill " .. pid .. " 2>/dev/null") end)
  -- 15 s: python starts slowly on a loaded machine.
  local port = h.eventually(function() return h.slurp(out):match("^(%d+)\n") end, 15)
  return tonumber(port) or error("python did not start: " .. h.slurp(out))
end

-- Starts a Python HTTP/1.1 server (http.server) on a free port: GET
-- answers the path and the request's X-Echo header, POST the body it got
-- reversed. Returns its port.
local function python_server()
  return python([[
import http.server, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(("%s %s" % (self.path, self.headers.get("X-Echo"))).encode())
    def do_POST(self):
        n = int(self.headers["Content-Length"])
        self.reply(self.rfile.read(n)[::-1])
    def log_message(self, *a):
        pass

srv = http.server.HTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
]])
end

describe("against Python peers", function()
  it("does a GET and a POST round trip on one kept-alive connection", function()
    local port = python_server()
    local res = assert(client.request(url(port, "/p?q=1"), { headers = { ["X-Echo"] = "hi" } }))
    assert.equal(200, res.status)
    assert.equal("/p?q=1 hi", res.body)
    assert.equal("text/plain", res.headers["Content-Type"])
    local big = ("0123456789"):rep(10000)
    res = assert(client.request(url(port, "/post"), { method = "POST", body = big }))
    assert.equal(big:reverse(), res.body)
    assert.equal(1, res.reused)
  end)

  it("gives 'timeout' when connecting takes longer than connect_timeout", function()
    -- A listener that never accepts, with a backlog of 0: once its queue
    -- holds a connection, the kernel drops further SYNs.
    local port = python([[
import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(0)
print(s.getsockname()[1], flush=True)
time.sleep(30)
]])
    local held = {}
    defer(function() for _, s in ipairs(held) do s:close() end end)
    for _ = 1, 10 do   -- fill the queue
      local s = cohost.tcp()
      s:settimeout(200)
      if not s:connect("127.0.0.1", port) then break end
      held[#held + 1] = s
    end
    local t0 = cohost.monotonic()
    assert.same({ nil, "timeout" },
      { client.request(url(port), { connect_timeout = 150, read_timeout = 10000 }) })
    local took = cohost.monotonic() - t0
    assert.is_true(took >= 0.1 and took < 2, took)
  end)
end)

-- -- The cohost HTTP server ---------------------------------------------------------

describe("against cohost.http's server", function()
  local http = require "cohost.http"
  local md5 = require("cohost.core.crypto").md5

  -- Listens with handler on 127.0.0.1 port 0; returns the port.
  local listen = h.http_serve

  it("streams a request body up and a response body down on one connection", function()
    local port = listen(function(req, res)
      res:header("X-Chunked", tostring(req.headers["transfer-encoding"]))
      local got = {}
      for piece in req:chunks(4096) do got[#got + 1] = piece end
      got = table.concat(got)
      -- Answer in several writes: chunked on the wire.
      for i = 1, 3 do res:write(("%d:%d:%s;"):format(i, #got, md5(got))) end
    end)
    local sent, count = {}, 0
    local res = assert(http.request(url(port, "/up"), {
      method = "POST",
      body = function()
        count = count + 1
        if count > 50 then return nil end
        sent[count] = string.char(64 + count):rep(10000)
        cohost.sleep(0)   -- a body source may park
        return sent[count]
      end,
    }))
    assert.equal(200, res.status)
    assert.equal("chunked", res.headers["x-chunked"])
    assert.equal("chunked", res.headers["transfer-encoding"])
    local want = "%d:500000:" .. md5(table.concat(sent)) .. ";"
    assert.equal(want:format(1) .. want:format(2) .. want:format(3), res.body)
    -- The same connection streams the next response to a streaming reader.
    res = assert(http.client():get(url(port, "/down"), { stream = true }))
    assert.equal(1, res.reused)
    local pieces = {}
    for p in res:chunks(5) do pieces[#pieces + 1] = p end
    want = "%d:0:" .. md5("") .. ";"
    assert.equal(want:format(1) .. want:format(2) .. want:format(3), table.concat(pieces))
  end)

  it("round-trips a large Content-Length body and reuses the connection", function()
    local port = listen(function(req, res)
      local body = assert(req:body())
      res:send(body:reverse())
    end)
    local c = http.client({ timeout = 5000 })
    local big = ("abcdefghij"):rep(50000)
    for i = 1, 3 do
      local res = assert(c:put(url(port, "/big"), big))
      assert.equal(big:reverse(), res.body)
      assert.equal(i - 1, res.reused)
    end
  end)

  it("skips the server's 100 Continue when the request asks for it", function()
    local port = listen(function(req, res) res:send("read " .. #assert(req:body())) end)
    local res = assert(http.request(url(port), {
      method = "POST", body = "12345", headers = { Expect = "100-continue" },
    }))
    assert.equal(200, res.status)
    assert.equal("read 5", res.body)
  end)

  it("reads no body after HEAD and follows the server's redirects", function()
    local port = listen(function(req, res)
      if req.path == "/old" then return res:redirect("/new") end
      res:send("at " .. req.path)
    end)
    local res = assert(http.request(url(port, "/x"), { method = "HEAD" }))
    assert.same({ 200, "", "5" }, { res.status, res.body, res.headers["content-length"] })
    res = assert(http.request(url(port, "/old"), { follow_redirects = true }))
    assert.equal("at /new", res.body)
    assert.equal(2, res.reused)
  end)
end)

-- -- https ------------------------------------------------------------------------

describe("https", function()
  local http = require "cohost.http"
  local dir, ca, cert, key, self_cert, self_key

  setup(function()
    -- Not h.tmpdir(): that one goes after each test, these outlive them.
    dir = os.tmpname()
    os.remove(dir)
    h.must("mkdir " .. dir)
    ca = h.tls_ca(dir, "cohost-client-test-ca")
    cert, key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    self_cert, self_key = dir .. "/self.pem", dir .. "/self.key"
    h.must(("openssl req -x509 %s -keyout %s -out %s -days 2 -subj /CN=localhost "
          .. "-addext subjectAltName=DNS:localhost"):format(h.TLS_NEWKEY, self_key, self_cert))
  end)

  teardown(function()
    if dir then os.execute("rm -rf " .. h.shell_quote(dir)) end
  end)

  -- A TLS cohost.http server on 127.0.0.1 port 0 with the CA-signed
  -- certificate (or the pair given); its port.
  local function serve(handler, c, k)
    return h.http_serve(handler, { ssl_cert = c or cert, ssl_key = k or key })
  end

  local function echo(req, res)
    res:header("X-Peer-Port", tostring(req.peer and req.peer.port or ""))
    res:send(req.method .. " " .. req.path .. " " .. (req:body() or ""))
  end

  it("verifies the server against ca_file and keeps the TLS connection alive", function()
    local port = serve(echo)
    local c = http.client({ ca_file = ca, timeout = 5000 })
    local base = ("https://localhost:%d"):format(port)
    local r1 = assert(c:get(base .. "/a"))
    local r2 = assert(c:post(base .. "/b", "body"))
    assert.same({ 200, "GET /a ", 0 }, { r1.status, r1.body, r1.reused })
    assert.same({ 200, "POST /b body", 1 }, { r2.status, r2.body, r2.reused })
  end)

  it("verifies an IP literal against the certificate's IP address", function()
    local port = serve(echo)
    local res = assert(http.request(("https://127.0.0.1:%d/ip"):format(port), { ca_file = ca }))
    assert.equal("GET /ip ", res.body)
  end)

  it("refuses an untrusted certificate unless verify is false", function()
    local port = serve(echo, self_cert, self_key)
    local u = ("https://localhost:%d/"):format(port)
    local res, err = http.request(u, { ca_file = ca })
    assert.is_nil(res)
    assert.matches("^%d+: ", err)   -- OpenSSL's verify code and text, as OpenResty
    -- The system store does not know the throwaway CA either.
    res, err = http.request(("https://localhost:%d/"):format(serve(echo)))
    assert.is_nil(res)
    assert.equal("20: unable to get local issuer certificate", err)
    res = assert(http.request(u, { verify = false }))
    assert.equal("GET / ", res.body)
  end)

  it("checks the name it was asked for, and server_name overrides it", function()
    local port = serve(function(req, res) res:send(req.headers.host) end)
    -- The certificate names localhost and 127.0.0.1, not other.example.
    local res, err = http.request(("https://127.0.0.1:%d/"):format(port),
                                  { ca_file = ca, server_name = "other.example" })
    assert.is_nil(res)
    assert.equal("certificate host mismatch", err)
    res = assert(http.request(("https://127.0.0.1:%d/"):format(port),
                              { ca_file = ca, server_name = "localhost" }))
    assert.equal("127.0.0.1:" .. port, res.body)   -- Host stays the URL's
  end)

  it("does not hand a connection verified for one setting to another", function()
    local port = serve(echo, self_cert, self_key)
    local u = ("https://localhost:%d/"):format(port)
    assert(http.request(u, { verify = false }))
    local res, err = http.request(u, { ca_file = ca })
    assert.is_nil(res, "a pooled unverified connection was reused for a verifying request")
    assert.matches("^%d+: ", err)
  end)

  it("resumes its TLS session on a new connection (openssl s_server)", function()
    local port = h.free_port()
    local pidf = h.tmpfile()
    os.execute(("(timeout 30 openssl s_server -accept 127.0.0.1:%d -cert %s -key %s -www "
                .. ">/dev/null 2>&1 </dev/null & echo $! >%s)"):format(port, cert, key, pidf))
    local pid = tonumber(h.slurp(pidf))
    defer(function() os.execute("kill " .. pid .. " 2>/dev/null") end)
    h.wait_port(port)
    local u = ("https://localhost:%d/"):format(port)
    -- s_server -www answers HTTP/1.0 and closes: each request is a new
    -- connection, and its status page says whether the session was new.
    local first = assert(http.request(u, { ca_file = ca }))
    assert.equal(200, first.status)
    assert.matches("\nNew, TLSv1%.3", first.body)
    local second = assert(http.request(u, { ca_file = ca }))
    assert.matches("\nReused, TLSv1%.3", second.body)
  end)

  it("follows a redirect from http to https, dropping credentials", function()
    local tls_port = serve(function(req, res) res:send("auth=" .. tostring(req.headers.authorization)) end)
    local port = h.http_serve(function(_, res)
      res:redirect(("https://localhost:%d/there"):format(tls_port))
    end)
    local res = assert(http.request(("http://127.0.0.1:%d/"):format(port), {
      follow_redirects = true, ca_file = ca, headers = { Authorization = "Bearer x" },
    }))
    assert.same({ 200, "auth=nil" }, { res.status, res.body })
  end)

  it("gives a plain-text peer's failure as a handshake error and keeps working", function()
    local port = h.http_serve(function(_, res) res:send("plain") end)
    local res, err = http.request(("https://127.0.0.1:%d/"):format(port), { ca_file = ca, timeout = 3000 })
    assert.is_nil(res)
    assert.equal("handshake failed", err)
    res = assert(http.request(("http://127.0.0.1:%d/"):format(port)))
    assert.equal("plain", res.body)
  end)
end)
