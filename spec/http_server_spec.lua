-- The HTTP/1.1 server core (cohost.http.listen, req, res), held to
-- docs/http.md. Servers run in this process (http.listen on 127.0.0.1
-- port 0) or, where logs matter, as a child build/cohost. Their peers are
-- real: raw cosockets for exact bytes, curl and Python's http.client in
-- background processes (a blocking os.execute or io.popen would stall this
-- worker, and with it the server under test).
local cohost = require "cohost"
local http = require "cohost.http"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- -- Servers and clients -----------------------------------------------------

-- Serves handler with opts in this process; returns the port. The listener
-- is closed after the test.
local serve = h.http_serve   -- port of a server on 127.0.0.1:0, closed after the test

-- A raw connection to port, closed after the test; timeout in ms
-- (default 3000).
local function connect(port, ms)
  return h.dial(port, ms or 3000)
end

-- Reads one response, checking its framing: h.receive_response(sock,
-- head_only).
local read_response = h.receive_response

-- Sends bytes on a new connection and reads one response; returns it and
-- the socket.
local function exchange(port, bytes, head_only)
  local s = connect(port)
  assert(s:send(bytes))
  return assert(read_response(s, head_only)), s
end

-- A GET request's bytes, with extra header lines.
local get = h.request_bytes

-- Whether the peer closes sock within ms with nothing more sent; the
-- second value is the error seen ("timeout" when it stayed open).
local function closes(sock, ms)
  sock:settimeout(ms)
  local data, err, partial = sock:receive(1)
  sock:settimeout(3000)
  assert(not data, "unexpected byte after the response: " .. tostring(data))
  assert.equal("", partial or "")
  return err == "closed" or err == "connection reset by peer", err
end

-- The last header block curl dumped with -D (after any 100 Continue):
-- status and a table of lower-case header names.
local function curl_head(dump)
  local blocks = {}
  for block in (dump .. "\r\n\r\n"):gmatch("(HTTP/.-)\r\n\r\n") do blocks[#blocks + 1] = block end
  local last = assert(blocks[#blocks], "no response head in: " .. dump)
  local status = tonumber(last:match("^HTTP/%S+ (%d+)"))
  local hdrs = {}
  for k, v in last:gmatch("\r\n([^:\r\n]+):[ \t]*([^\r\n]*)") do hdrs[k:lower()] = v end
  return status, hdrs, blocks
end

-- Echoes method, target, path, query_string, version and peer as JSON.
local function echo_fields(req, res)
  res:json({ method = req.method, target = req.target, path = req.path,
             query_string = req.query_string, version = req.version,
             version_type = type(req.version), query = req.query, peer = req.peer })
end

-- -- req -----------------------------------------------------------------------

describe("http server req", function()
  it("has method, raw target, decoded path with dot segments removed, and raw query_string", function()
    local port = serve(echo_fields)
    local r = exchange(port, "PUT /a%20b/./c/../d%2Fe?x=1&y=a+b HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    assert.equal(200, r.status)
    local f = cjson.decode(r.body)
    assert.equal("PUT", f.method)
    assert.equal("/a%20b/./c/../d%2Fe?x=1&y=a+b", f.target)
    assert.equal("/a b/d/e", f.path)
    assert.equal("x=1&y=a+b", f.query_string)
    assert.equal(1.1, f.version)
    assert.equal("number", f.version_type)
  end)

  it("removes percent-encoded dot segments and ends a trailing '..' with '/'", function()
    local port = serve(echo_fields)
    local s = connect(port)
    local cases = {
      ["/a/%2e%2e/b"] = "/b", ["/a/b/.."] = "/a/", ["/a/./"] = "/a/",
      ["/x/.."] = "/", ["//a"] = "//a", ["/"] = "/",
    }
    for target, path in pairs(cases) do
      assert(s:send(get(target)))
      local r = assert(read_response(s))
      assert.equal(200, r.status)
      assert.equal(path, cjson.decode(r.body).path, "for " .. target)
    end
  end)

  it("answers 400 without running the handler for a path that climbs above the root", function()
    local ran = false
    local port = serve(function(_, res) ran = true; res:send("ran") end)
    for _, target in ipairs { "/../etc/passwd", "/a/../../b", "/%2e%2e/x", "/a/%2E%2E/%2e%2e/b" } do
      local r, s = exchange(port, get(target))
      assert.equal(400, r.status, "for " .. target)
      assert.is_true((closes(s, 3000)))
    end
    assert.is_false(ran)
  end)

  it("decodes the query with repeated keys as arrays, '+' as a space and bare keys as ''", function()
    local port = serve(echo_fields)
    local r = exchange(port, get("/q?a=1&a=2&b&c=x%3Dy+z&d=&e=%C3%A9&a=3"))
    local q = cjson.decode(r.body).query
    assert.same({ a = { "1", "2", "3" }, b = "", c = "x=y z", d = "", e = "é" }, q)
  end)

  it("gives query_string '' and an empty query when there is none", function()
    local port = serve(echo_fields)
    local f = cjson.decode(exchange(port, get("/p")).body)
    assert.equal("", f.query_string)
    assert.same({}, f.query)
  end)

  it("reports version 1.0 as the number 1.0", function()
    local port = serve(echo_fields)
    local r = exchange(port, "GET /v HTTP/1.0\r\n\r\n")
    local f = cjson.decode(r.body)
    assert.equal(1.0, f.version)
    assert.equal("number", f.version_type)
  end)

  it("has case-insensitive headers, a repeated header as an array in order, and req:header", function()
    local got
    local port = serve(function(req, res)
      got = {
        multi = req.headers["x-multi"], multi_upper = req.headers["X-MULTI"],
        ctype = req.headers["Content-Type"], ctype_lower = req.headers["content-type"],
        one = req:header("X-Multi"), one_lower = req:header("x-multi"),
        ctype_h = req:header("CONTENT-TYPE"), missing = req:header("x-absent"),
        missing_t = req.headers["x-absent"], host = req.headers.host,
        keys = {},
      }
      for k in pairs(req.headers) do got.keys[#got.keys + 1] = k end
      table.sort(got.keys)
      res:send("ok")
    end)
    local r = exchange(port, "GET / HTTP/1.1\r\nHost: t\r\nX-Multi: a\r\nContent-Type: text/x\r\nx-multi:  b  \r\nX-MULTI: c\r\n\r\n")
    assert.equal(200, r.status)
    assert.same({ "a", "b", "c" }, got.multi)
    assert.same({ "a", "b", "c" }, got.multi_upper)
    assert.equal("text/x", got.ctype)
    assert.equal("text/x", got.ctype_lower)
    assert.equal("a", got.one)
    assert.equal("a", got.one_lower)
    assert.equal("text/x", got.ctype_h)
    assert.is_nil(got.missing)
    assert.is_nil(got.missing_t)
    assert.equal("t", got.host)
    assert.same({ "content-type", "host", "x-multi" }, got.keys)
  end)

  it("has peer as the client's ip:port", function()
    local port = serve(echo_fields)
    local code, out, err = h.python(([[
import http.client, json
c = http.client.HTTPConnection("127.0.0.1", %d, timeout=5)
c.request("GET", "/peer")
mine = c.sock.getsockname()
r = c.getresponse()
print(json.loads(r.read())["peer"], "%%s:%%d" %% mine)
]]):format(port))
    assert.equal(0, code, err)
    local peer, mine = out:match("^(%S+) (%S+)\n$")
    assert.matches("^127%.0%.0%.1:%d+$", peer)
    assert.equal(mine, peer)
  end)

  it("lets handlers set their own fields on req", function()
    local port = serve(function(req, res)
      req.user = "ann"
      res:send(req.user)
    end)
    assert.equal("ann", exchange(port, get("/")).body)
  end)
end)

-- -- Request bodies -------------------------------------------------------------

describe("http server request body", function()
  -- Echoes the body read with req:body().
  local function echo_body(req, res)
    local body, err = req:body()
    if not body then
      res.status = 599
      return res:send(err)
    end
    res:send(body)
  end

  it("req:body() gives an upload curl sends with Content-Length", function()
    local data = h.random_bytes(300000)
    local file, out = h.tmpfile(data), h.tmpfile()
    local port = serve(echo_body)
    local code, _, err = h.sh(("curl -sS -o %s --data-binary @%s http://127.0.0.1:%d/up"):format(out, file, port))
    assert.equal(0, code, err)
    assert.equal(#data, #h.slurp(out))
    assert.is_true(data == h.slurp(out))
  end)

  it("req:body() gives a chunked upload from curl", function()
    local data = h.random_bytes(200000)
    local file, out = h.tmpfile(data), h.tmpfile()
    local seen
    local port = serve(function(req, res)
      seen = { te = req:header("transfer-encoding"), cl = req:header("content-length") }
      return echo_body(req, res)
    end)
    local code, _, err = h.sh(("curl -sS -o %s -H 'Transfer-Encoding: chunked' --data-binary @%s http://127.0.0.1:%d/up")
      :format(out, file, port))
    assert.equal(0, code, err)
    assert.equal("chunked", seen.te)
    assert.is_nil(seen.cl)
    assert.is_true(data == h.slurp(out))
  end)

  it("req:body() is '' and req:read() nil when there is no body", function()
    local got
    local port = serve(function(req, res)
      got = { req:body(), req:read() }
      res:send("ok")
    end)
    exchange(port, get("/"))
    assert.same({ "" }, got)
  end)

  it("req:read(n) hands out at most n bytes at a time, then nil", function()
    local pieces
    local port = serve(function(req, res)
      pieces = {}
      while true do
        local p, err = req:read(3)
        assert(not err, err)
        if not p then break end
        pieces[#pieces + 1] = p
      end
      res:send("ok")
    end)
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123"))
    cohost.sleep(0.05)
    assert(s:send("456789"))
    assert.equal(200, read_response(s).status)
    assert.equal("0123456789", table.concat(pieces))
    for _, p in ipairs(pieces) do assert.is_true(#p >= 1 and #p <= 3) end
    assert.is_true(#pieces >= 4)
  end)

  it("req:chunks() iterates a chunked body, decoded", function()
    local pieces
    local port = serve(function(req, res)
      pieces = {}
      for p in req:chunks(4) do pieces[#pieces + 1] = p end
      res:send(table.concat(pieces))
    end)
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"))
    cohost.sleep(0.05)
    assert(s:send("1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n"))
    local r = read_response(s)
    assert.equal("hello world!", r.body)
    for _, p in ipairs(pieces) do assert.is_true(#p >= 1 and #p <= 4) end
    -- The connection is still good for the next request.
    assert(s:send(get("/")))
    assert.equal(200, read_response(s).status)
  end)

  it("answers 413 before the handler runs when Content-Length is over max_body_size", function()
    local ran = false
    local port = serve(function(_, res) ran = true; res:send("ran") end, { max_body_size = 1000 })
    local r, s = exchange(port, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n")
    assert.equal(413, r.status)
    assert.is_true((closes(s, 4000)))
    -- curl, uploading: it sees the 413 too.
    local file = h.tmpfile(("x"):rep(5000))
    local code, out, err = h.sh(("curl -sS -o /dev/null -w '%%{http_code}' --data-binary @%s http://127.0.0.1:%d/")
      :format(file, port))
    assert.equal(0, code, err)
    assert.equal("413", out)
    assert.is_false(ran)
    -- At the limit is fine.
    r = exchange(port, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n" .. ("y"):rep(1000))
    assert.equal(200, r.status)
    assert.is_true(ran)
    -- With Expect: 100-continue the 413 comes instead of 100 Continue.
    ran = false
    r = exchange(port, "POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
    assert.equal(413, r.status)
    assert.is_false(ran)
  end)

  it("gives nil, 'too large' for a chunked body over max_body_size and then answers 413", function()
    local got
    local port = serve(function(req, res)
      got = { req:body() }
      -- answers nothing: the server's 413
    end, { max_body_size = 1000 })
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      .. "258\r\n" .. ("a"):rep(600) .. "\r\n258\r\n" .. ("b"):rep(600) .. "\r\n0\r\n\r\n"))
    local r = read_response(s)
    assert.equal(413, r.status)
    assert.same({ nil, "too large" }, got)
    assert.is_true((closes(s, 4000)))
  end)

  it("lets a handler answer itself after 'too large'", function()
    local port = serve(function(req, res)
      local body, err = req:body()
      res.status = 400
      res:send("mine: " .. tostring(body) .. " " .. tostring(err))
    end, { max_body_size = 10 })
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n" .. ("c"):rep(20) .. "\r\n0\r\n\r\n"))
    local r = read_response(s)
    assert.equal(400, r.status)
    assert.equal("mine: nil too large", r.body)
    -- The server closes after it, and the response must say so.
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 4000)))
  end)

  it("gives nil, 'bad request' for a malformed chunked body and closes after the response", function()
    local got
    local port = serve(function(req, res)
      got = { req:body() }
      res:send("answered")
    end)
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"))
    local r = read_response(s)
    assert.same({ nil, "bad request" }, got)
    assert.equal("answered", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 4000)))
  end)

  it("gives nil, 'timeout' when the body stalls past body_timeout", function()
    local got
    local port = serve(function(req, res)
      local t0 = cohost.monotonic()
      got = { req:body() }
      got.took = cohost.monotonic() - t0
      res:send("x")
    end, { body_timeout = 0.5 })
    local s = connect(port, 5000)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc"))
    local r = read_response(s)
    assert.equal(200, r.status)
    assert.equal(nil, got[1])
    assert.equal("timeout", got[2])
    assert.is_true(got.took >= 0.3 and got.took < 4, "took " .. got.took)
  end)

  it("waits past body_timeout for a handler that lifts it with req:settimeout(0)", function()
    local port = serve(function(req, res)
      if req.path == "/lifted" then req:settimeout(0) end
      local body, err = req:body()
      res:send(tostring(body) .. " " .. tostring(err))
    end, { body_timeout = 0.3 })
    local lifted = connect(port, 5000)
    assert(lifted:send("POST /lifted HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab"))
    -- The witness: started after, its stalled body times out first.
    local witness = connect(port, 5000)
    assert(witness:send("POST /default HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab"))
    assert.equal("nil timeout", read_response(witness).body)
    assert(lifted:send("cd"))
    assert.equal("abcd nil", read_response(lifted).body)
  end)

  it("skips a body the handler left unread and serves the request pipelined behind it", function()
    local port = serve(function(req, res) res:send("saw " .. req.method) end)
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nGET /evil\r\n"
      .. "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nGET \r\n0\r\n\r\n" .. get("/")))
    assert.equal("saw POST", read_response(s).body)
    assert.equal("saw POST", read_response(s).body)
    assert.equal("saw GET", read_response(s).body)
  end)

  it("gives nil, 'closed' when the client leaves mid-body", function()
    local got = cohost.channel()
    local port = serve(function(req, res)
      got:send({ req:body() })
      res:send("x")
    end)
    local s = connect(port)
    assert(s:send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc"))
    cohost.sleep(0.05)
    s:close()
    assert.same({ nil, "closed" }, got:receive(5))
  end)
end)

-- -- Expect: 100-continue ------------------------------------------------------

describe("http server request body where the handler may not park", function()
  -- Inside a __gc finalizer a read may not park: it blocks the worker in
  -- poll(2), and what poll(2) saw is never seen by epoll. The body comes
  -- after the head was read (that read drained the socket) while the
  -- handler never lets the loop run, so no input event is counted either:
  -- a read that still trusted "drained, no event since" would skip its
  -- read and wait again forever, holding the worker. The handler marks
  -- when it runs and spins until the test says the body was sent.
  it("req:read() in a finalizer gets a body that arrived while the handler held the worker", function()
    local started, sent = h.tmpfile(), h.tmpfile()
    os.remove(started)
    os.remove(sent)
    local script = h.tmpfile(h.server_script(([[
local http = require "cohost.http"
listener = assert(http.listen("127.0.0.1:0", function(req, res)
  io.open(%q, "w"):close()
  while not io.open(%q) do end   -- no park: the loop never runs
  local got
  getmetatable(newproxy(true)).__gc = function() got = { req:read() } end
  collectgarbage()
  res:send(tostring(got and got[1]) .. "|" .. tostring(got and got[2]))
end))
]]):format(started, sent)))
    local p = h.start(h.shell_quote(script), 30)
    defer(p.stop)
    local s = connect(p.port, 5000)
    assert(s:send("POST /gc HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n"))
    assert.is_truthy(h.eventually(function() return h.try_slurp(started) end), "the handler never ran")
    assert(s:send("body"))
    h.write_file(sent, "")
    local r, err = read_response(s)
    assert(r, "no answer (the read spun?): " .. tostring(err) .. "\n" .. h.slurp(p.err))
    assert.equal("body|nil", r.body)
  end)
end)

describe("http server Expect: 100-continue", function()
  it("sends 100 Continue only when the handler first reads the body", function()
    local go = cohost.channel()
    local port = serve(function(req, res)
      if req.path == "/wait" then go:receive(5) end
      res:send("got " .. assert(req:body()))
    end)
    local s = connect(port)
    assert(s:send("POST /wait HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"))
    s:settimeout(300)
    local data, err = s:receive(1)
    assert.is_nil(data)   -- nothing before the handler reads
    assert.equal("timeout", err)
    s:settimeout(3000)
    go:send(true)
    local cont = assert(read_response(s))
    assert.equal(100, cont.status)
    assert.equal("HTTP/1.1 100 Continue", cont.status_line)
    assert(s:send("hello"))
    local r = read_response(s)
    assert.equal(200, r.status)
    assert.equal("got hello", r.body)
    assert.is_nil(r.headers.connection)   -- the body came: kept
    assert(s:send(get("/again")))
    assert.equal(200, read_response(s).status)
  end)

  it("closes after answering without reading, never sending 100 Continue", function()
    local port = serve(function(_, res) res:send("no thanks") end)
    local r, s = exchange(port, "POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    assert.equal(200, r.status)
    assert.equal("no thanks", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 4000)))
  end)

  it("curl gets 100 Continue for a large upload the handler reads", function()
    local data = h.random_bytes(2 * 1024 * 1024 + 17)
    local file, out = h.tmpfile(data), h.tmpfile()
    local port = serve(function(req, res) res:send(assert(req:body())) end, { max_body_size = 4 * 1024 * 1024 })
    local code, _, err = h.sh(("curl -sS -v -o %s --data-binary @%s http://127.0.0.1:%d/big"):format(out, file, port))
    assert.equal(0, code, err)
    assert.matches("> Expect: 100%-continue", err)
    assert.matches("< HTTP/1.1 100 Continue", err)
    assert.is_true(data == h.slurp(out))
  end)

  it("curl gets no 100 Continue when the handler answers without reading", function()
    local file = h.tmpfile(("z"):rep(1000))
    local port = serve(function(_, res) res.status = 403; res:send("denied") end)
    local code, out, err = h.sh(("curl -sS -v -H 'Expect: 100-continue' --data-binary @%s http://127.0.0.1:%d/")
      :format(file, port))
    assert.equal(0, code, err)
    assert.equal("denied", out)
    assert.matches("< HTTP/1.1 403", err)
    assert.not_matches("100 Continue", err)
  end)
end)

-- -- res -------------------------------------------------------------------------

describe("http server res", function()
  it("sends res.status with its reason phrase", function()
    local port = serve(function(_, res) res.status = 201; res:send("made") end)
    local r = exchange(port, get("/"))
    assert.equal("HTTP/1.1 201 Created", r.status_line)
    assert.equal("made", r.body)
  end)

  it("res:send adds Content-Length and a default Content-Type, keeping the handler's", function()
    local port = serve(function(req, res)
      if req.path == "/typed" then res:header("Content-Type", "text/html") end
      if req.path == "/empty" then return res:send() end
      res:send("héllo")
    end)
    local s = connect(port)
    assert(s:send(get("/") .. get("/typed") .. get("/empty")))
    local a, b, c = read_response(s), read_response(s), read_response(s)
    assert.equal("6", a.headers["content-length"])
    assert.equal("héllo", a.body)
    assert.equal("text/plain; charset=utf-8", a.headers["content-type"])
    assert.equal("text/html", b.headers["content-type"])
    assert.equal("0", c.headers["content-length"])
    assert.equal("", c.body)
  end)

  it("res:header replaces case-insensitively, takes arrays, removes with nil and returns res", function()
    local chained
    local port = serve(function(_, res)
      chained = res:header("X-One", "1") == res
      res:header("x-one", "2")
      res:header("Set-Cookie", { "a=1", "b=2" })
      res:header("X-Gone", "g")
      res:header("X-GONE", nil)
      res:send("ok")
    end)
    local r = exchange(port, get("/"))
    assert.is_true(chained)
    assert.equal("2", r.headers["x-one"])
    assert.same({ "a=1", "b=2" }, r.headers["set-cookie"])
    assert.is_nil(r.headers["x-gone"])
    local n = 0
    for _, l in ipairs(r.lines) do if l:lower():find("^x%-one:") then n = n + 1 end end
    assert.equal(1, n)
  end)

  it("res:header raises for bad names and for values with CR, LF or NUL (no header injection)", function()
    local errs
    local port = serve(function(_, res)
      errs = {}
      local bad = {
        { "X-Evil", "a\r\nSet-Cookie: pwned=1" }, { "X-Evil", "a\nSet-Cookie: pwned=2" },
        { "X-Evil", "a\rb" }, { "X-Evil", "a\0b" }, { "X-Evil", { "ok", "b\r\nSet-Cookie: pwned=3" } },
        { "X-Evil\r\nSet-Cookie: pwned=4", "v" }, { "", "v" }, { "Bad Name", "v" },
        { "Bad:Name", "v" }, { "X-Evil\n", "v" },
      }
      for i, case in ipairs(bad) do
        local ok, err = pcall(res.header, res, case[1], case[2])
        errs[i] = ok and "no error" or tostring(err)
      end
      res:header("X-Tab", "a\tb")   -- a tab is allowed
      res:send("ok")
    end)
    local r, s = exchange(port, get("/"))
    assert.equal(10, #errs)
    for i, e in ipairs(errs) do assert.is_true(e ~= "no error", "case " .. i .. " did not raise") end
    assert.is_nil(r.headers["set-cookie"])
    assert.equal("a\tb", r.headers["x-tab"])
    for _, l in ipairs(r.lines) do assert.not_matches("pwned", l) end
    assert.equal("ok", r.body)
    -- The framing is intact: the connection serves another request.
    assert(s:send(get("/")))
    assert.equal("ok", read_response(s).body)
  end)

  it("res:get_header gives a set value case-insensitively, or nil", function()
    local got
    local port = serve(function(_, res)
      res:header("X-Thing", "v1")
      got = { res:get_header("x-thing"), res:get_header("X-THING"), res:get_header("x-none") }
      res:header("X-Thing", nil)
      got[4] = res:get_header("X-Thing")
      res:send("")
    end)
    exchange(port, get("/"))
    assert.equal("v1", got[1])
    assert.equal("v1", got[2])
    assert.is_nil(got[3])
    assert.is_nil(got[4])
  end)

  it("res:header, res:send and a second res:send raise once the response has started", function()
    local errs = {}
    local port = serve(function(_, res)
      res:write("a")
      errs.header = select(2, pcall(res.header, res, "X-Late", "1"))
      res:send("b")
      errs.send = select(2, pcall(res.send, res, "c"))
      errs.write = select(2, pcall(res.write, res, "d"))
    end)
    local r, s = exchange(port, get("/"))
    assert.equal("ab", r.body)
    assert.matches("sent", tostring(errs.header))
    assert.matches("already sent", tostring(errs.send))
    assert.matches("already sent", tostring(errs.write))
    assert(s:send(get("/")))
    assert.equal("ab", read_response(s).body)
  end)

  it("res:sent() says whether the response has started", function()
    local got
    local port = serve(function(_, res)
      got = { res:sent() }
      res:write("x")
      got[2] = res:sent()
    end)
    exchange(port, get("/"))
    assert.same({ false, true }, got)
  end)

  it("res:json encodes, sets application/json and takes a status", function()
    local port = serve(function(req, res)
      if req.path == "/s" then return res:json({ err = "nope" }, 422) end
      res:json({ a = 1, list = { 1, 2, 3 }, s = "x\"y" })
    end)
    local s = connect(port)
    assert(s:send(get("/") .. get("/s")))
    local a, b = read_response(s), read_response(s)
    assert.equal(200, a.status)
    assert.equal("application/json", a.headers["content-type"])
    assert.same({ a = 1, list = { 1, 2, 3 }, s = "x\"y" }, cjson.decode(a.body))
    assert.equal(422, b.status)
    assert.same({ err = "nope" }, cjson.decode(b.body))
  end)

  it("res:json writes an http.array() as [] when empty, leaving the value as it was", function()
    local value
    local port = serve(function(_, res)
      value = { items = http.array(), tags = http.array({ "a" }), deep = { { http.array() } },
                plain = {}, text = "[]" }
      res:json(value)
    end)
    local s = connect(port)
    assert(s:send(get("/")))
    local r = read_response(s)
    assert.equal(200, r.status)
    local body = r.body
    assert.matches('"items":%[%]', body)
    assert.matches('"tags":%["a"%]', body)
    assert.matches('"deep":%[%[%[%]%]%]', body)
    assert.matches('"plain":{}', body)
    assert.matches('"text":"%[%]"', body)
    assert.equal(http.array_mt, getmetatable(value.items))   -- the caller's tables untouched
    assert.is_nil(next(value.items))
    assert.equal("table", type(value.deep[1][1]))
  end)

  it("res:write streams chunked to HTTP/1.1 and keeps the connection", function()
    local port = serve(function(_, res)
      res:write("abc")
      res:write("")       -- nothing: must not end the body
      res:write("defgh")
    end)
    local r, s = exchange(port, get("/"))
    assert.is_true(r.chunked)
    assert.is_nil(r.headers["content-length"])
    assert.equal("abcdefgh", r.body)
    assert.equal("3\r\nabc\r\n5\r\ndefgh\r\n0\r\n\r\n", r.raw)
    assert(s:send(get("/")))
    assert.equal("abcdefgh", read_response(s).body)
  end)

  it("res:send after res:write sends its body as the last piece", function()
    local port = serve(function(_, res)
      res:write("one,")
      res:send("two")
    end)
    local r, s = exchange(port, get("/"))
    assert.is_true(r.chunked)
    assert.equal("one,two", r.body)
    assert(s:send(get("/")))
    assert.equal("one,two", read_response(s).body)
  end)

  it("res:write sends raw bytes when the handler set Content-Length", function()
    local port = serve(function(_, res)
      res:header("Content-Length", "8")
      res:write("abcd")
      res:write("efgh")
    end)
    local r, s = exchange(port, get("/"))
    assert.is_nil(r.headers["transfer-encoding"])
    assert.equal("8", r.headers["content-length"])
    assert.equal("abcdefgh", r.body)
    assert(s:send(get("/")))   -- framed exactly: still usable
    assert.equal("abcdefgh", read_response(s).body)
  end)

  it("closes when the handler writes less than its Content-Length", function()
    local port = serve(function(_, res)
      res:header("Content-Length", "10")
      res:write("abcd")
    end)
    local s = connect(port)
    assert(s:send(get("/") .. get("/")))
    local head = {}
    repeat head[#head + 1] = assert(s:receive("*l")) until head[#head] == ""
    local data, err, partial = s:receive(10)
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("abcd", partial)
  end)

  it("never sends more than a handler-set Content-Length on a kept connection", function()
    -- Bytes past the announced length would be read by the client as the
    -- start of the next response (a response desync).
    local port = serve(function(req, res)
      if req.path == "/next" then return res:send("next") end
      res:header("Content-Length", "4")
      res:write("ab")
      pcall(res.send, res, "cdefgh")   -- 6 bytes more than announced: may raise
    end)
    local s = connect(port)
    assert(s:send(get("/") .. get("/next")))
    -- The overrunning send raises before writing: the body stops at "ab"
    -- and the connection closes (a short body the client detects).
    local head = {}
    repeat head[#head + 1] = assert(s:receive("*l")) until head[#head] == ""
    local data, err, partial = s:receive(4)
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal("ab", partial)
  end)

  it("sends no body bytes with a 204 or 304, even from res:write", function()
    local port = serve(function(req, res)
      if req.path == "/next" then return res:send("next") end
      res.status = tonumber(req.path:sub(2))
      pcall(res.write, res, "abc")
      pcall(res.send, res, "def")
    end)
    for _, status in ipairs { 204, 304 } do
      local s = connect(port)
      assert(s:send(get("/" .. status) .. get("/next")))
      local r = assert(read_response(s))
      assert.equal(status, r.status)
      assert.is_nil(r.headers["transfer-encoding"])
      local r2, err = read_response(s)   -- "abc..." here would be a bad status line
      if r2 then assert.equal("next", r2.body) else assert.equal("closed", err) end
    end
  end)

  it("res:write streams to an HTTP/1.0 client raw, then closes", function()
    local port = serve(function(_, res)
      res:write("abc")
      res:write("def")
    end)
    local r, s = exchange(port, "GET / HTTP/1.0\r\n\r\n")
    assert.is_nil(r.headers["transfer-encoding"])
    assert.is_nil(r.headers["content-length"])
    assert.is_true(r.until_close)
    assert.equal("abcdef", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 1000)))
  end)

  it("res:write to an HTTP/1.0 keep-alive client still ends by closing", function()
    local port = serve(function(_, res) res:write("abc") end)
    local r = exchange(port, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert.is_true(r.until_close)
    assert.equal("abc", r.body)
  end)

  it("res:redirect answers 302 with Location, or the status given", function()
    local port = serve(function(req, res)
      if req.path == "/perm" then return res:redirect("/new", 301) end
      res:redirect("http://example.test/there?x=1")
    end)
    local s = connect(port)
    assert(s:send(get("/") .. get("/perm")))
    local a, b = read_response(s), read_response(s)
    assert.equal(302, a.status)
    assert.equal("http://example.test/there?x=1", a.headers.location)
    assert.equal(301, b.status)
    assert.equal("/new", b.headers.location)
  end)

  it("answers 200 with an empty body when the handler answers nothing", function()
    local port = serve(function(req, res)
      if req.path == "/204" then res.status = 204 end
    end)
    local s = connect(port)
    assert(s:send(get("/") .. get("/204")))
    local a = read_response(s)
    assert.equal(200, a.status)
    assert.equal("0", a.headers["content-length"])
    assert.equal("", a.body)
    local b = read_response(s)
    assert.equal(204, b.status)
    assert(s:send(get("/")))
    assert.equal(200, read_response(s).status)
  end)
end)

-- -- HEAD, Date, Server -----------------------------------------------------------

describe("http server HEAD and standard headers", function()
  local function hello(req, res)
    if req.path == "/stream" then
      res:write("abc")
      return res:write("def")
    end
    res:send("hello world")
  end

  it("answers HEAD with the GET's Content-Length and no body", function()
    local port = serve(hello)
    local s = connect(port)
    -- A pipelined GET right behind: any body bytes of the HEAD's response
    -- would land in front of its status line.
    assert(s:send("HEAD / HTTP/1.1\r\nHost: t\r\n\r\n" .. get("/")))
    local a = read_response(s, true)
    assert.equal(200, a.status)
    assert.equal("11", a.headers["content-length"])
    local b = read_response(s)
    assert.equal("hello world", b.body)
  end)

  it("answers HEAD to a streaming handler with no body bytes at all", function()
    local port = serve(hello)
    local s = connect(port)
    assert(s:send("HEAD /stream HTTP/1.1\r\nHost: t\r\n\r\n" .. get("/")))
    local a = read_response(s, true)
    assert.equal(200, a.status)
    -- If the connection is kept, the next bytes are the GET's status line.
    local b, err = read_response(s)
    if b then
      assert.equal("hello world", b.body)
    else
      assert.equal("closed", err)
    end
  end)

  it("curl -I gets the headers of GET", function()
    local port = serve(hello)
    local code, out, err = h.sh(("curl -sS -I http://127.0.0.1:%d/"):format(port))
    assert.equal(0, code, err)
    local status, hdrs = curl_head(out)
    assert.equal(200, status)
    assert.equal("11", hdrs["content-length"])
  end)

  it("sends Date (an IMF-fixdate) and Server: cohost by default", function()
    local port = serve(hello)
    local r = exchange(port, get("/"))
    assert.matches("^%a%a%a, %d%d %a%a%a %d%d%d%d %d%d:%d%d:%d%d GMT$", r.headers.date)
    assert.equal("cohost", r.headers.server)
  end)

  it("sends opts.server as Server, and none with server = false", function()
    local port = serve(hello, { server = "x" })
    assert.equal("x", exchange(port, get("/")).headers.server)
    port = serve(hello, { server = false })
    local r = exchange(port, get("/"))
    assert.is_nil(r.headers.server)
    assert.is_not_nil(r.headers.date)
  end)

  it("lets the handler set its own Server header", function()
    local port = serve(function(_, res) res:header("Server", "mine"); res:send("") end)
    assert.equal("mine", exchange(port, get("/")).headers.server)
  end)
end)

-- -- Connections --------------------------------------------------------------------

describe("http server connections", function()
  local function ok(req, res) res:send("ok " .. req.path) end

  it("keeps an HTTP/1.1 connection open and serves pipelined requests in order", function()
    local port = serve(ok)
    local s = connect(port)
    assert(s:send(get("/1") .. get("/2") .. get("/3")))
    for i = 1, 3 do
      local r = read_response(s)
      assert.equal("ok /" .. i, r.body)
      assert.is_nil(r.headers.connection)
    end
    assert.is_false((closes(s, 200)))
  end)

  it("honours a client's Connection: close, serving nothing pipelined behind it", function()
    local port = serve(ok)
    local r, s = exchange(port, get("/", "Connection: close\r\n") .. get("/behind"))
    assert.equal("ok /", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 3000)))
  end)

  it("closes after a response whose handler set Connection: close", function()
    local port = serve(function(_, res)
      res:header("Connection", "close")
      res:send("bye")
    end)
    local r, s = exchange(port, get("/"))
    assert.equal("bye", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 3000)))
  end)

  it("closes after an HTTP/1.0 response unless the client asked for keep-alive", function()
    local port = serve(ok)
    local r, s = exchange(port, "GET /a HTTP/1.0\r\n\r\n")
    assert.equal("ok /a", r.body)
    assert.is_true((closes(s, 3000)))

    r, s = exchange(port, "GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert.equal("ok /b", r.body)
    assert.equal("keep-alive", r.headers.connection:lower())
    assert.equal("5", r.headers["content-length"])
    assert(s:send("GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"))
    assert.equal("ok /c", read_response(s).body)
  end)

  it("says Connection: close on the keepalive_requests-th response and closes", function()
    local port = serve(ok, { keepalive_requests = 3 })
    local s = connect(port)
    for i = 1, 2 do
      assert(s:send(get("/" .. i)))
      local r = read_response(s)
      assert.equal("ok /" .. i, r.body)
      assert.is_nil(r.headers.connection)
    end
    assert(s:send(get("/3")))
    local r = read_response(s)
    assert.equal("ok /3", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 3000)))
  end)

  it("closes an idle keep-alive connection after keepalive_timeout", function()
    local port = serve(ok, { keepalive_timeout = 0.5 })
    local r, s = exchange(port, get("/"))
    assert.equal("ok /", r.body)
    local t0 = cohost.monotonic()
    assert.is_true((closes(s, 5000)))
    local took = cohost.monotonic() - t0
    assert.is_true(took > 0.3 and took < 4, "closed after " .. took)
  end)

  it("counts keepalive_timeout from the last request, not the first", function()
    -- The idle timer is lazy (host/http/conn.c): armed after the first
    -- request, it fires while later ones come and must move itself on.
    local port = serve(ok, { keepalive_timeout = 0.4 })
    local r, s = exchange(port, get("/0"))
    assert.equal("ok /0", r.body)
    local t0, i = cohost.monotonic(), 0
    while cohost.monotonic() - t0 < 1.0 do   -- requests across two and a half timeouts
      i = i + 1
      assert(s:send(get("/" .. i)))
      assert.equal("ok /" .. i, read_response(s).body)
      cohost.sleep(0.05)
    end
    local last = cohost.monotonic()
    assert.is_true((closes(s, 5000)))
    local took = cohost.monotonic() - last
    assert.is_true(took > 0.3 and took < 4, "closed " .. took .. " s after the last request")
  end)

  it("keeps an idle connection past a second while keepalive_timeout is longer", function()
    local port = serve(ok, { keepalive_timeout = 30 })
    local _, s = exchange(port, get("/"))
    assert.is_false((closes(s, 1200)))
    assert(s:send(get("/later")))
    assert.equal("ok /later", read_response(s).body)
  end)

  it("curl re-uses the connection for a second URL", function()
    local port = serve(ok)
    local url = ("http://127.0.0.1:%d"):format(port)
    local code, out, err = h.sh(("curl -sS -v %s/x %s/y"):format(url, url))
    assert.equal(0, code, err)
    assert.equal("ok /xok /y", out)
    assert.matches("Re%-using existing connection", err)
  end)

  it("answers 408 and closes a slowloris client after header_timeout from the first byte", function()
    local port = serve(ok, { header_timeout = 1 })
    local s = connect(port, 8000)
    local stop = false
    local t0 = cohost.monotonic()
    local writer = cohost.spawn(function()
      if not s:send("GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ") then return end
      for _ = 1, 40 do   -- 8 s of one byte every 200 ms
        if stop or not s:send("a") then return end
        cohost.sleep(0.2)
      end
    end)
    local line, err = s:receive("*l")
    local took = cohost.monotonic() - t0
    stop = true
    assert.equal("HTTP/1.1 408 Request Timeout", line, err)
    assert.is_true(took > 0.7 and took < 4, "408 after " .. took)
    local rest = s:receive("*a")   -- to the close
    assert.matches("Connection: close", rest)
    assert.is_true(cohost.monotonic() - t0 < 7.5)
    cohost.wait(writer)
  end)

  it("does not run the handler for a request head cut off by header_timeout", function()
    local ran = false
    local port = serve(function(_, res) ran = true; res:send("") end, { header_timeout = 0.5 })
    local s = connect(port, 5000)
    assert(s:send("GET / HTTP/1.1\r\nHost"))
    assert.equal("HTTP/1.1 408 Request Timeout", s:receive("*l"))
    assert.is_false(ran)
  end)

  it("serves 1000 sequential keep-alive requests from Python on one connection", function()
    local peers, n = {}, 0
    local port = serve(function(req, res)
      peers[req.peer] = true
      n = n + 1
      res:send("n" .. req.path:sub(2))
    end)
    local code, out, err = h.python(([[
import http.client
c = http.client.HTTPConnection("127.0.0.1", %d, timeout=10)
ports = set()
for i in range(1000):
    c.request("GET", "/%%d" %% i)
    ports.add(c.sock.getsockname()[1])
    r = c.getresponse()
    b = r.read()
    assert r.status == 200, r.status
    assert b == b"n%%d" %% i, b
print(len(ports), r.getheader("Connection"))
]]):format(port), nil, 30)
    assert.equal(0, code, err)
    assert.equal("1 close\n", out)   -- the 1000th is the default keepalive_requests
    assert.equal(1000, n)
    local distinct = 0
    for _ in pairs(peers) do distinct = distinct + 1 end
    assert.equal(1, distinct)
  end)

  it("serves 200 concurrent connections at once", function()
    local active, peak = 0, 0
    local port = serve(function(req, res)
      active = active + 1
      if active > peak then peak = active end
      -- Hold every handler until all 200 are in (or 5 s pass).
      local t0 = cohost.monotonic()
      while peak < 200 and cohost.monotonic() - t0 < 5 do cohost.sleep(0.01) end
      active = active - 1
      res:send("r" .. req.path:sub(2))
    end)
    local results = h.run_all(200, function(i)
      local s = h.connect(port, 10000)
      assert(s:send(get("/" .. i)))
      local r = assert(read_response(s))
      s:close()
      return r.body
    end)
    assert.equal(200, peak)
    for i = 1, 200 do assert.equal("r" .. i, results[i]) end
  end)

  it("keeps idle keep-alive connections without a coroutine each", function()
    local port = serve(function(req, res) res:send(req.peer) end)
    cohost.sleep(0.05)
    local before = cohost.stats()
    local socks, peers = {}, {}
    for i = 1, 200 do
      local s = h.connect(port, 5000)
      socks[i] = s
      assert(s:send(get("/")))
      peers[i] = assert(read_response(s)).body
    end
    defer(function() for _, s in ipairs(socks) do s:close() end end)
    -- Let every connection's coroutine end (in its own time).
    local after
    h.eventually(function()
      after = cohost.stats()
      return after.coros - before.coros < 20
    end, 5)
    assert.is_true(after.coros - before.coros < 20,
      ("live coroutines grew from %d to %d with 200 idle connections"):format(before.coros, after.coros))
    assert.is_true(after.connections - before.connections >= 200,
      ("connections went from %d to %d"):format(before.connections, after.connections))
    -- Every one serves a second request, on the same connection.
    for i = 1, 200 do
      assert(socks[i]:send(get("/")))
      assert.equal(peers[i], assert(read_response(socks[i])).body)
    end
  end)

  it("ends a handler whose client stops reading with 'timeout' after send_timeout", function()
    local outcome = cohost.channel()
    local port = serve(function(_, res)
      local piece = ("x"):rep(65536)
      local ok, err = pcall(function()
        for _ = 1, 1000 do res:write(piece) end   -- 64 MiB: more than the socket buffers
      end)
      outcome:send(ok and "completed" or tostring(err))
      if not ok then error(err, 0) end
    end, { send_timeout = 0.5 })
    local s = connect(port)
    assert(s:send(get("/")))
    local t0 = cohost.monotonic()
    assert.equal("timeout", outcome:receive(10))
    assert.is_true(cohost.monotonic() - t0 < 8)
  end)

  it("keeps serving others when a client resets mid-response", function()
    local outcome = cohost.channel()
    local port = serve(function(req, res)
      if req.path == "/big" then
        local piece = ("x"):rep(65536)
        local ok, err = pcall(function()
          for _ = 1, 400 do res:write(piece) end   -- 25 MiB
        end)
        outcome:send(ok and "completed" or tostring(err))
        if not ok then error(err, 0) end
        return
      end
      res:send("small")
    end)
    local a = connect(port)
    assert(a:send(get("/big")))
    assert(a:receive(1000))
    a:close()   -- unread data: the kernel answers further bytes with RST
    assert.matches("closed", outcome:receive(10))
    for _ = 1, 3 do
      local r = exchange(port, get("/"))
      assert.equal("small", r.body)
    end
  end)
end)

-- -- Framing errors ------------------------------------------------------------

describe("http server framing errors", function()
  -- Sends bytes and expects status with Connection: close, then the close,
  -- with the handler never run (not even for a good request behind).
  local function refused(opts, bytes, status)
    local ran = false
    local port = serve(function(_, res) ran = true; res:send("ran") end, opts)
    local r, s = exchange(port, bytes .. get("/after"))
    assert.equal(status, r.status)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(s, 4000)))
    assert.is_false(ran)
  end

  it("answers 414 to a request line over max_request_line", function()
    refused({ max_request_line = 100 }, get("/" .. ("a"):rep(120)), 414)
  end)

  it("answers 414 to a request line over the default 8192 bytes", function()
    refused(nil, get("/" .. ("a"):rep(9000)), 414)
  end)

  it("answers 431 to a header block over max_header_size", function()
    refused({ max_header_size = 200 }, get("/", "X-Big: " .. ("b"):rep(300) .. "\r\n"), 431)
  end)

  it("answers 501 to a transfer coding other than chunked", function()
    refused(nil, "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501)
  end)

  it("answers 505 to an HTTP version other than 1.0 and 1.1", function()
    refused(nil, "GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505)
  end)

  it("answers 400 to a malformed head", function()
    refused(nil, "GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400)
  end)

  it("answers 400 to ambiguous or malformed framing (request smuggling vectors)", function()
    local cases = {
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +3\r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",         -- obs-fold
      "GET / HTTP/1.1\nHost: t\n\n",                                -- bare LF
      "GET / HTTP/1.1\r\nHost : t\r\n\r\n",                        -- space before colon
      "GET / HTTP/1.1\r\nHost: t\0x\r\n\r\n",                       -- NUL
      "GET / HTTP/1.1\r\nHost: t\r\nX: a\127b\r\n\r\n",             -- DEL
      "GET / HTTP/1.1\r\n\r\n",                                      -- 1.1 without Host
      "GET /a b HTTP/1.1\r\nHost: t\r\n\r\n",
      "GET /a%00b HTTP/1.1\r\nHost: t\r\n\r\n",
      "GET /a%zz HTTP/1.1\r\nHost: t\r\n\r\n",
    }
    for i, bytes in ipairs(cases) do
      local ok, err = pcall(refused, nil, bytes, 400)
      assert(ok, "case " .. i .. ": " .. tostring(err))
    end
  end)

  it("accepts empty lines before the request line and an absolute-form target", function()
    local port = serve(function(req, res) res:send(req.path .. " " .. req.query_string) end)
    local s = connect(port)
    assert(s:send("\r\n\r\nGET http://h:1/x/../y?q=1 HTTP/1.1\r\nHost: t\r\n\r\n"))
    assert.equal("/y q=1", read_response(s).body)
  end)

  it("serves a request line at max_request_line", function()
    local port = serve(function(req, res) res:send(req.path) end, { max_request_line = 100 })
    local target = "/" .. ("a"):rep(100 - #"GET  HTTP/1.1" - 1)
    assert.equal(target, exchange(port, get(target)).body)
  end)
end)

-- -- Handler errors -----------------------------------------------------------------

describe("http server handler errors", function()
  local function failing(req, res)
    if req.path == "/boom" then error("boom-marker-7431") end
    if req.path == "/late" then
      res:write("abc")
      error("late-marker")
    end
    res:send("fine")
  end

  it("answers 500 without the message or a traceback in the body", function()
    local port = serve(failing)
    local r = exchange(port, get("/boom"))
    assert.equal(500, r.status)
    assert.not_matches("boom%-marker", r.body)
    assert.not_matches("traceback", r.body)
  end)

  it("puts the error message in the 500 body with opts.debug", function()
    local port = serve(failing, { debug = true })
    local r = exchange(port, get("/boom"))
    assert.equal(500, r.status)
    assert.matches("boom%-marker%-7431", r.body)
  end)

  it("drops the handler's headers from the 500", function()
    local port = serve(function(_, res)
      res:header("X-Half", "done")
      error("x")
    end)
    local r = exchange(port, get("/"))
    assert.equal(500, r.status)
    assert.is_nil(r.headers["x-half"])
  end)

  it("closes the connection on an error after res:write: no terminating chunk", function()
    local port = serve(failing)
    local s = connect(port)
    assert(s:send(get("/late")))
    local head = {}
    while true do
      local l = assert(s:receive("*l"))
      if l == "" then break end
      head[#head + 1] = l
    end
    assert.equal("HTTP/1.1 200 OK", head[1])
    local rest, err = s:receive("*a")
    assert(rest, err)
    assert.equal("3\r\nabc\r\n", rest)   -- then the close; no 0\r\n\r\n
  end)

  it("curl sees a truncated transfer after an error mid-stream", function()
    local port = serve(failing)
    local code, out = h.sh(("curl -sS http://127.0.0.1:%d/late"):format(port))
    assert.equal(18, code)   -- CURLE_PARTIAL_FILE
    assert.equal("abc", out)
  end)

  it("keeps serving other connections, and the same one, after a handler error", function()
    local port = serve(failing)
    local r, s = exchange(port, get("/boom"))
    assert.equal(500, r.status)
    assert.equal("fine", exchange(port, get("/")).body)
    local ok = s:send(get("/"))
    if ok then
      local r2, err = read_response(s)
      assert(r2 or err == "closed", err)
      if r2 then assert.equal("fine", r2.body) end
    end
  end)

  it("on SIGTERM closes idle keep-alive connections and finishes a request in flight with Connection: close", function()
    -- /slow creates the file mark, then sleeps: the test then knows the
    -- request is in flight (a fixed sleep raced with a loaded child).
    local mark = h.tmpfile()
    os.remove(mark)
    local script = h.tmpfile(h.server_script(([[
local http = require "cohost.http"
listener = assert(http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/slow" then
    io.open(%q, "w"):close()
    cohost.sleep(1)
  end
  res:send("done " .. req.path)
end))
]]):format(mark)))
    local p = h.start(h.shell_quote(script), 30)
    defer(p.stop)
    local idle = connect(p.port)
    assert(idle:send(get("/idle")))
    assert.equal("done /idle", read_response(idle).body)
    local busy = connect(p.port)
    assert(busy:send(get("/slow")))
    assert.is_truthy(h.eventually(function() return h.try_slurp(mark) end), "/slow never started")
    p.signal("TERM")
    assert.is_true((closes(idle, 3000)))
    local r = assert(read_response(busy))
    assert.equal("done /slow", r.body)
    assert.equal("close", r.headers.connection)
    assert.is_true((closes(busy, 3000)))
    assert.equal(0, p.wait(5))
  end)

  it("logs the traceback to stderr (child process)", function()
    local script = h.tmpfile(h.server_script([[
local http = require "cohost.http"
listener = assert(http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/boom" then error("child-boom-5521") end
  res:send("ok")
end))
]]))
    local p = h.start(h.shell_quote(script), 30)
    defer(p.stop)
    local code, out, err = h.sh(("curl -sS -w ' %%{http_code}' http://127.0.0.1:%d/boom http://127.0.0.1:%d/ok")
      :format(p.port, p.port))
    assert.equal(0, code, err)
    assert.matches(" 500", out)
    assert.not_matches("child%-boom", out)
    assert.matches("ok 200$", out)
    local log = h.eventually(function()
      local e = h.slurp(p.err)
      return e:find("stack traceback", 1, true) and e
    end, 3)
    assert(log, "no traceback in stderr: " .. h.slurp(p.err))
    assert.matches("child%-boom%-5521", log)
  end)
end)

-- -- The Lua face -----------------------------------------------------------------

describe("http.listen", function()
  it("lets modules add methods to http.Request and http.Response", function()
    defer(function()
      http.Request.shout = nil
      http.Response.hello = nil
    end)
    function http.Request:shout() return self.path:upper() end
    function http.Response:hello(who) return self:send("hello " .. who) end
    local port = serve(function(req, res) res:hello(req:shout()) end)
    assert.equal("hello /ABC", exchange(port, get("/abc")).body)
  end)

  it("takes a router object: a table with a handler method", function()
    local router = {}
    function router:handler() return function(_, res) res:send("routed") end end
    local port = serve(router)
    assert.equal("routed", exchange(port, get("/")).body)
  end)

  it("lets go of a closed server's handler and on_error once this worker serves again", function()
    local gone = setmetatable({}, { __mode = "k" })
    local l = assert(http.listen("127.0.0.1:0", (function()
      local handler = function(_, res) res:send("old") end
      gone[handler] = true
      return handler
    end)(), { on_error = (function()
      local on_error = function(_, res) res:send("bad") end
      gone[on_error] = true
      return on_error
    end)() }))
    assert.equal(1, l:close())
    l = nil   -- luacheck: ignore
    -- Their registry refs are dropped by the next request (or listen)
    -- after the server's last reference went.
    local port = serve(function(_, res) res:send("new") end)
    assert(h.wait_for(function()
      assert.equal("new", exchange(port, get("/")).body)
      collectgarbage()
      collectgarbage()
      return next(gone) == nil
    end, 10), "the closed server's handler or on_error was never let go")
  end)

  it("raises for a bad handler and a bad priority", function()
    assert.has_error(function() http.listen("127.0.0.1:0", 42) end)
    assert.has_error(function() http.listen("127.0.0.1:0", function() end, { priority = "urgent" }) end)
  end)

  -- The listener's methods came from cohost.core.socket's opener, so a
  -- script that required only cohost.http got a bare userdata.
  it("gives a listener with its methods to a script that never required cohost", function()
    local code, out, err = h.run("-e " .. h.shell_quote([[
local l = assert(require("cohost.http").listen("127.0.0.1:0", function() end))
local host, port = l:addr()
print(host, port > 0, l:close())]]))
    assert.equal(0, code, err)
    assert.equal("127.0.0.1\ttrue\t1\n", out)
  end)
end)

-- -- access_log, hijack, finished requests --------------------------------------------

describe("http server extras", function()
  it("writes one combined-format access_log line per request", function()
    local log = h.tmpfile()
    local port = serve(function(req, res)
      if req.path == "/missing" then
        res.status = 404
        return res:send("nope")
      end
      res:send("hello")
    end, { access_log = log })
    local url = ("http://127.0.0.1:%d"):format(port)
    local code, _, err = h.sh(("curl -sS -o /dev/null -A 'spec-agent/1.0' -e 'http://ref.test/' '%s/a?x=1' %s/missing %s/b")
      :format(url, url, url))
    assert.equal(0, code, err)
    local lines = h.eventually(function()
      local t = {}
      for l in h.slurp(log):gmatch("[^\n]+") do t[#t + 1] = l end
      return #t >= 3 and t
    end, 3)
    assert(lines, "access log: " .. h.slurp(log))
    assert.equal(3, #lines)
    local pat = '^127%%.0%%.0%%.1 %%- %%- %%[%%d%%d/%%a%%a%%a/%%d%%d%%d%%d:%%d%%d:%%d%%d:%%d%%d [+-]%%d%%d%%d%%d%%] '
      .. '"GET %s HTTP/1%%.1" %d %d "http://ref%%.test/" "spec%%-agent/1%%.0"$'
    assert.matches(pat:format("/a%?x=1", 200, 5), lines[1])
    assert.matches(pat:format("/missing", 404, 4), lines[2])
    assert.matches(pat:format("/b", 200, 5), lines[3])
  end)

  it("res:hijack hands over the connection with the bytes pipelined after the head", function()
    local got = cohost.channel()
    local port = serve(function(req, res)
      local sock = res:hijack()
      local first = assert(sock:receive(9))
      assert(sock:send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nfirst:" .. first))
      local more = assert(sock:receive(4))
      assert(sock:send("more:" .. more))
      got:send(req.path)
    end)
    local s = connect(port)
    assert(s:send("GET /up HTTP/1.1\r\nHost: t\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nPIPELINED"))
    local want = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nfirst:PIPELINED"
    assert.equal(want, s:receive(#want))
    assert(s:send("ping"))
    assert.equal("more:ping", s:receive(9))
    assert.equal("/up", got:receive(5))
    -- The handler returned: the cosocket is closed, nothing else was sent.
    local rest, err, partial = s:receive("*a")
    assert.equal("", rest or partial, err)
  end)

  it("raises 'request is finished' for req and res kept past the handler", function()
    local kept
    local port = serve(function(req, res)
      kept = { req = req, res = res }
      res:send("ok")
    end)
    assert.equal("ok", exchange(port, get("/")).body)
    cohost.sleep(0.05)
    local req, res = kept.req, kept.res
    local calls = {
      function() return res:send("again") end,
      function() return res:write("x") end,
      function() return res:header("X", "y") end,
      function() return res:get_header("X") end,
      function() return req:header("host") end,
      function() return req:body() end,
      function() return req:read(1) end,
      function() return req.headers end,   -- never built while the handler ran
    }
    for i, fn in ipairs(calls) do
      local ok, err = pcall(fn)
      assert.is_false(ok, "call " .. i .. " did not raise")
      assert.matches("request is finished", tostring(err))
    end
  end)
end)

describe("http.escape_html", function()
  it("writes & < > \" ' as entities and leaves the rest", function()
    assert.equal("&lt;script&gt;alert(&quot;x&quot;);&lt;/script&gt; &amp; it&#39;s",
                 http.escape_html([[<script>alert("x");</script> & it's]]))
    assert.equal("フレームワーク\0&amp;", http.escape_html("フレームワーク\0&"))
    assert.equal(("&lt;"):rep(3000), http.escape_html(("<"):rep(3000)))   -- past the stack buffer
  end)

  it("gives back a string with nothing to escape as it is, a number as its text", function()
    local s = "A computer scientist is someone who fixes things"
    assert.equal(s, http.escape_html(s))
    assert.equal("", http.escape_html(""))
    assert.equal("42", http.escape_html(42))
    assert.has_error(function() http.escape_html({}) end)
  end)
end)
