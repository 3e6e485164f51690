-- cohost.http's HTTP/2 client (docs/http-client.md, "HTTP/2"): h2c with
-- prior knowledge and h2 by ALPN against cohost's own HTTP/2 server (in
-- this process), and h2c against Debian's nginx (`listen ... http2`,
-- started on a free loopback port and stopped after). Servers count the
-- connections they accept (the request's peer, nginx's $connection), so
-- multiplexing is checked where it shows: on the server.
local cohost = require "cohost"
local http = require "cohost.http"
local h = require "spec.helper"
h.cleanups(after_each)

local H2C = { http2 = "prior-knowledge", timeout = 10000 }

-- Options: H2C with more.
local function h2c(more)
  local o = {}
  for k, v in pairs(H2C) do o[k] = v end
  for k, v in pairs(more or {}) do o[k] = v end
  return o
end

local function count(set)
  local n = 0
  for _ in pairs(set) do n = n + 1 end
  return n
end

-- -- Fixtures -------------------------------------------------------------------

local dir, cert, key, ca
setup(function()
  dir = os.tmpname()
  os.remove(dir)
  h.must("mkdir " .. dir)
  h.tls_ca(dir, "cohost-h2c-ca")
  ca = dir .. "/ca.pem"
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

-- A handler that holds each request (reading its body first) until the
-- batch of K it belongs to has arrived (the last batch: until all N
-- have), then answers "n:bytes"; and a function that says the most
-- requests it held at once. Only streams that wait their turn get
-- answers: one sent past a stream limit of K would be refused.
local function batch_holder(K, N)
  local arrived, running, most = 0, 0, 0
  local function hold(req, res)
    running = running + 1
    if running > most then most = running end
    local body = assert(req:body())
    arrived = arrived + 1
    local full = math.min(N, math.ceil(arrived / K) * K)
    assert(h.wait_for(function() return arrived >= full end, 10), "batch never filled")
    running = running - 1
    res:send(req.query.n .. ":" .. #body)
  end
  return hold, function() return most end
end

-- A cohost HTTP server whose handler(req, res) runs after the request's
-- peer (one per connection) is counted in the returned set.
local function serve(handler, opts)
  local peers = {}
  local port = h.http_serve(function(req, res)
    peers[req.peer] = true
    return handler(req, res)
  end, opts)
  return port, peers
end

-- -- Against cohost's server -----------------------------------------------------

describe("the HTTP/2 client against cohost's server", function()
  it("speaks h2c with prior knowledge: res.version 2, headers lower-case, the server sees HTTP/2", function()
    local port = serve(function(req, res)
      res:header("X-Version", tostring(req.version))
      res:header("X-Method", req.method)
      res:send("path=" .. req.path .. " q=" .. tostring(req.query.a) .. " host=" .. req.headers.host)
    end)
    local res = assert(http.request(("http://127.0.0.1:%d/p?a=1"):format(port), H2C))
    assert.are.equal(200, res.status)
    assert.are.equal(2, res.version)
    assert.are.equal("2", res.headers["x-version"])
    assert.are.equal("2", res.headers["X-Version"])
    assert.are.equal("GET", res:header("x-method"))
    assert.are.equal("path=/p q=1 host=127.0.0.1:" .. port, res.body)
  end)

  it("carries concurrent requests from many tasks on one connection, each waiting for its own stream", function()
    local N, arrived = 16, 0
    local port, peers = serve(function(req, res)
      arrived = arrived + 1
      -- Every request waits until all N are in: only concurrent streams
      -- get there.
      assert(h.wait_for(function() return arrived >= N end, 10))
      res:send("n=" .. req.query.n)
    end)
    local bodies = h.run_all(N, function(i)
      local res = assert(http.request(("http://127.0.0.1:%d/?n=%d"):format(port, i), H2C))
      assert.are.equal(2, res.version)
      return res.body
    end)
    for i = 1, N do assert.are.equal("n=" .. i, bodies[i]) end
    assert.are.equal(1, count(peers))
  end)

  it("queues streams past the server's SETTINGS_MAX_CONCURRENT_STREAMS on the one connection, body writers included", function()
    -- K slots, N = 4K + 1 requests from N tasks, each a POST whose
    -- function body (not sent again if refused) is over the 64 KiB a
    -- queued stream buffers, so its writer waits while the stream is
    -- queued. The server holds each stream until its batch of K has
    -- arrived (the last batch: until all have): only streams that wait
    -- their turn get answers; a stream sent past the limit would be
    -- refused, and the request would fail with "refused".
    local K, N, PIECE, PIECES = 2, 9, 16384, 6
    local hold, most = batch_holder(K, N)
    local port, peers = serve(hold, { http2_max_concurrent_streams = K })
    local bodies = h.run_all(N, function(i)
      local sent = 0
      local res, err = http.request(("http://127.0.0.1:%d/?n=%d"):format(port, i), h2c {
        method = "POST",
        body = function()
          sent = sent + 1
          if sent <= PIECES then return ("x"):rep(PIECE) end
        end,
      })
      return res and res.body or err
    end)
    for i = 1, N do assert.are.equal(i .. ":" .. PIECE * PIECES, bodies[i]) end
    assert.are.equal(K, most())
    assert.are.equal(1, count(peers))
  end)

  it("times out a request while it is queued past the stream limit: it is never sent, the queue goes on", function()
    local release, paths = false, {}
    local port, peers = serve(function(req, res)
      paths[#paths + 1] = req.path
      if req.path == "/held" then assert(h.wait_for(function() return release end, 10)) end
      res:send(req.path)
    end, { http2_max_concurrent_streams = 1 })
    local url = "http://127.0.0.1:" .. port
    assert.are.equal("/first", assert(http.request(url .. "/first", H2C)).body)   -- SETTINGS in
    local held = cohost.spawn(function() return assert(http.request(url .. "/held", H2C)).body end)
    assert(h.wait_for(function() return #paths == 2 end, 10))
    local res, err = http.request(url .. "/queued", h2c { timeout = 200 })
    assert.is_nil(res)
    assert.are.equal("timeout", err)
    release = true
    local ok, body = cohost.wait(held)
    assert.is_true(ok)
    assert.are.equal("/held", body)
    assert.are.equal("/after", assert(http.request(url .. "/after", H2C)).body)
    assert.are.same({ "/first", "/held", "/after" }, paths)
    assert.are.equal(1, count(peers))
  end)

  it("streams a function body: the server reads the first piece before the second is made", function()
    local first_seen = false
    local port = serve(function(req, res)
      local got = {}
      while true do
        local piece = req:read(65536)
        if not piece then break end
        got[#got + 1] = piece
        if table.concat(got) == "one," then first_seen = true end
      end
      res:send(table.concat(got))
    end)
    local pieces = 0
    local res = assert(http.request(("http://127.0.0.1:%d/up"):format(port), h2c {
      method = "POST",
      body = function()
        pieces = pieces + 1
        if pieces == 1 then return "one," end
        if pieces == 2 then
          -- Sent already, while this function has not returned again.
          assert(h.wait_for(function() return first_seen end, 10), "first piece not seen")
          return "two"
        end
      end,
    }))
    assert.are.equal(2, res.version)
    assert.are.equal("one,two", res.body)
  end)

  it("streams a response with res:read, and gives trailers (lower-case) once the body has ended", function()
    local client_read = false
    local port = serve(function(_, res)
      res:trailer("grpc-status", "0")
      res:trailer("X-Checksum", "abc")
      res:write("first")
      assert(h.wait_for(function() return client_read end, 10), "client never read")
      res:send("second")
    end)
    local res = assert(http.request(("http://127.0.0.1:%d/down"):format(port), h2c { stream = true }))
    assert.are.equal(2, res.version)
    assert.are.equal("first", res:read())
    assert.is_nil(res.trailers)
    client_read = true
    assert.are.equal("second", res:body())
    assert.are.equal("0", res.trailers["grpc-status"])
    assert.are.equal("abc", res.trailers["x-checksum"])
    assert.are.equal("abc", res.trailers["X-Checksum"])
  end)

  it("wakes every task reading one streamed response, not only the last one to wait", function()
    local step = 0
    local port = serve(function(_, res)
      res:write("a")
      assert(h.wait_for(function() return step >= 1 end, 10), "readers never parked")
      res:write("b")
      assert(h.wait_for(function() return step >= 2 end, 10), "b never read")
      res:send("c")
    end)
    local res = assert(http.request(("http://127.0.0.1:%d/two"):format(port), h2c { stream = true, timeout = 5000 }))
    assert.are.equal("a", res:read())
    -- Two tasks park on the one stream; "b" wakes them, one takes it and
    -- the other waits again for "c".
    local entered, got = 0, {}
    local function reader()
      entered = entered + 1
      local data, err = res:read()
      got[#got + 1] = data or err
      step = 2
    end
    local t1, t2 = cohost.spawn(reader), cohost.spawn(reader)
    assert(h.wait_for(function() return entered == 2 end, 10))
    step = 1
    cohost.wait(t1)
    cohost.wait(t2)
    table.sort(got)
    assert.are.same({ "b", "c" }, got)
  end)

  it("streams both ways at once with stream = true: the answer is read while the body is still sent", function()
    local port = serve(function(req, res)
      while true do
        local piece = req:read(65536)
        if not piece then break end
        res:write("echo:" .. piece .. ";")
      end
      res:send("end")
    end)
    local echoed = false
    local calls = 0
    local res = assert(http.request(("http://127.0.0.1:%d/bidi"):format(port), h2c {
      method = "POST", stream = true,
      body = function()
        calls = calls + 1
        if calls == 1 then return "a" end
        if calls == 2 then
          -- Only a request whose answer is read meanwhile gets past this.
          assert(h.wait_for(function() return echoed end, 10), "answer not read while sending")
          return "b"
        end
      end,
    }))
    assert.are.equal("echo:a;", res:read())
    echoed = true
    assert.are.equal("echo:b;end", res:body())
  end)

  it("times out one request alone: the connection goes on serving the next", function()
    local release = false
    local port, peers = serve(function(req, res)
      if req.path == "/slow" then h.wait_for(function() return release end, 10) end
      res:send(req.path)
    end)
    local res, err = http.request(("http://127.0.0.1:%d/slow"):format(port), h2c { timeout = 300 })
    assert.is_nil(res)
    assert.are.equal("timeout", err)
    res = assert(http.request(("http://127.0.0.1:%d/fast"):format(port), H2C))
    assert.are.equal("/fast", res.body)
    release = true
    assert.are.equal(1, count(peers))
  end)

end)

-- A raw TCP server in front of a cohost HTTP/2 server answering "fine":
-- it relays bytes both ways, except that it drops a connection (without
-- GOAWAY) when drop(n) says so, n being the connection's number, at its
-- next bytes from the client. Returns its port and the connections'
-- count so far as a function.
local function dropping_relay(drop)
  local real = serve(function(_, res) res:send("fine") end)
  local accepted = 0
  local _, port = h.serve(function(sock)
    accepted = accepted + 1
    local n = accepted
    h.relay(sock, assert(h.connect(real)), function() return drop(n) end)
  end)
  return port, function() return accepted end
end

describe("the HTTP/2 client when a connection drops", function()
  it("fails the requests in flight as closed, and dials anew after", function()
    -- The first connection goes at its first bytes (preface, SETTINGS,
    -- the request's HEADERS).
    local port, accepted = dropping_relay(function(n) return n == 1 end)
    local res, err = http.request(("http://127.0.0.1:%d/a"):format(port), h2c { method = "POST", body = "x" })
    assert.is_nil(res)
    assert.are.equal("closed", err)
    res = assert(http.request(("http://127.0.0.1:%d/b"):format(port), H2C))
    assert.are.equal("fine", res.body)
    assert.are.equal(2, res.version)
    assert.are.equal(2, accepted())
  end)

  it("sends an idempotent request again when a connection that served before ends under it", function()
    local dropping = false
    local port, accepted = dropping_relay(function(n) return n == 1 and dropping end)
    local url = ("http://127.0.0.1:%d/"):format(port)
    assert.are.equal("fine", assert(http.request(url, H2C)).body)
    dropping = true   -- the server "closes the idle connection" as the next request comes
    local res = assert(http.request(url, H2C))
    assert.are.equal("fine", res.body)
    assert.are.equal(2, accepted())
  end)
end)

-- -- The end of a script, and client:close() --------------------------------------

-- A relay to real counting the connections open through it: returns its
-- port and a function saying how many are open.
local function counting_relay(real)
  local open = 0
  local _, port = h.serve(function(sock)
    open = open + 1
    h.relay(sock, assert(h.connect(real)))
    open = open - 1
  end)
  return port, function() return open end
end

describe("the HTTP/2 client's idle connections", function()
  -- A child cohost running source with the port of a server in this
  -- process as arg[1]: they wait for its exit (h.sh, h.start), parking,
  -- so the server answers meanwhile.
  local REQUEST = [[
local http = require "cohost.http"
local res = assert(http.request("http://127.0.0.1:" .. arg[1] .. "/", { http2 = "prior-knowledge", timeout = 10000 }))
assert(res.version == 2 and res.body == "hi")
]]

  it("do not keep a script running: it exits once its request is done", function()
    local port = serve(function(_, res) res:send("hi") end)
    -- 10 s: well under the 60 s idle timeout a pooled connection had held
    -- the script for; timeout(1) ends the child there (status 124).
    local src = REQUEST .. 'print("done")\n'
    local code, out, err = h.sh(("%s %s %d"):format(h.COHOST, h.shell_quote(h.tmpfile(src)), port), 10)
    assert.are.equal(0, code, err)
    assert.are.equal("done\n", out)
  end)

  it("do not keep a server from stopping on SIGTERM at once", function()
    local port = serve(function(_, res) res:send("hi") end)
    local src = [[
local cohost = require "cohost"
local http = require "cohost.http"
local l = assert(http.listen("127.0.0.1:0", function(_, res) res:send("x") end))
]] .. REQUEST .. [[
local _, port = l:addr()
]] .. h.REPORT_PORT
    -- The shutdown timeout is longer than the wait: an idle server exits
    -- at once, the connection's reader and writer are no task to wait for.
    local p = h.start(("--shutdown-timeout 30 %s %d"):format(h.shell_quote(h.tmpfile(src)), port), 60)
    h.defer(p.stop)
    p.signal("TERM")
    assert.are.equal(0, (p.wait(10)))
  end)

  it("do not keep a stopping server past its shutdown timeout once its tasks are cancelled", function()
    local asked = false
    local port = serve(function(req, res)
      if req.path == "/hang" then
        asked = true
        cohost.sleep(30)   -- cancelled when the client goes
      end
      res:send("hi")
    end)
    local src = [[
local cohost = require "cohost"
local http = require "cohost.http"
local l = assert(http.listen("127.0.0.1:0", function(_, res) res:send("x") end))
]] .. REQUEST .. [[
cohost.spawn(function()   -- in flight at SIGTERM, cancelled at the timeout
  http.request("http://127.0.0.1:" .. arg[1] .. "/hang", { http2 = "prior-knowledge" })
end)
local _, port = l:addr()
]] .. h.REPORT_PORT
    local p = h.start(("--shutdown-timeout 1 %s %d"):format(h.shell_quote(h.tmpfile(src)), port), 60)
    h.defer(p.stop)
    assert.is_true(h.wait_for(function() return asked end, 10))
    p.signal("TERM")
    assert.are.equal(0, (p.wait(10)))
  end)
end)

describe("client:close()", function()
  it("closes the HTTP/2 and HTTP/1.1 connections its requests went on, after a response in flight", function()
    local go = false
    local real = serve(function(req, res)
      if req.path == "/slow" then
        res:write("a")
        assert(h.wait_for(function() return go end, 10))
      end
      res:send("b")
    end)
    local port2, open2 = counting_relay(real)
    local port1, open1 = counting_relay(real)
    local c = http.client({ timeout = 10000 })
    assert.are.equal(2, assert(c:get(("http://127.0.0.1:%d/"):format(port2), H2C)).version)
    assert.are.equal(1.1, assert(c:get(("http://127.0.0.1:%d/"):format(port1))).version)
    local res = assert(c:get(("http://127.0.0.1:%d/slow"):format(port2), h2c { stream = true }))
    assert.are.equal(1, open2())
    assert.are.equal(1, open1())
    c:close()
    -- HTTP/1.1's idle one at once; HTTP/2's once its stream has ended.
    assert.is_true(h.wait_for(function() return open1() == 0 end, 10))
    assert.are.equal(1, open2())
    go = true
    assert.are.equal("ab", res:body())
    assert.is_true(h.wait_for(function() return open2() == 0 end, 10))
    -- The client goes on, on new connections.
    assert.are.equal("b", assert(c:get(("http://127.0.0.1:%d/"):format(port2), H2C)).body)
    assert.are.equal(1, open2())
  end)
end)

describe("the HTTP/2 client with prior knowledge against a server that is not HTTP/2", function()
  it("fails every request on the connection with a clear error, at once, and never pools it", function()
    local port = serve(function(req, res) res:send("v" .. req.version) end, { http2 = false })
    local url = ("http://127.0.0.1:%d/"):format(port)
    local errs, took = h.run_all(3, function()
      local res, err = http.request(url, h2c { timeout = 60000 })
      return res and res.status or err
    end)
    for i = 1, 3 do assert.are.equal("the server does not speak HTTP/2", errs[i]) end
    assert.is_true(took < 10)   -- not the 60 s timeout
    -- HTTP/1.1 to the same origin is unaffected.
    assert.are.equal("v1.1", assert(http.request(url, { timeout = 10000 })).body)
  end)

  it("says so against Python's http.server too", function()
    local port = h.free_port()
    local pid, log = h.spawn("exec /usr/bin/python3 -m http.server --bind 127.0.0.1 " .. port)
    h.defer(function() h.stop_pid(pid) end)
    h.wait_port(port, log)
    local t0 = cohost.monotonic()
    local res, err = http.request(("http://127.0.0.1:%d/"):format(port), h2c { timeout = 60000 })
    assert.is_nil(res)
    assert.are.equal("the server does not speak HTTP/2", err)
    assert.is_true(cohost.monotonic() - t0 < 10)
  end)
end)

describe("the HTTP/2 client against cohost's server over TLS", function()

  it("negotiates h2 by ALPN on https, verified against ca_file", function()
    local port = serve(function(req, res) res:send("v" .. req.version) end, tls())
    local res = assert(http.request(("https://localhost:%d/"):format(port), { ca_file = ca }))
    assert.are.equal(2, res.version)
    assert.are.equal("v2", res.body)
    local bodies = h.run_all(6, function()
      return assert(http.request(("https://localhost:%d/"):format(port), { ca_file = ca })).version
    end)
    for i = 1, 6 do assert.are.equal(2, bodies[i]) end
  end)

  it("gives the tasks waiting on a dial its error: one connection attempt for all of them", function()
    -- A TLS origin that closes after the ClientHello: the handshake fails.
    -- The tasks spawned after the first find its dial under way.
    local accepted = 0
    local _, port = h.serve(function(sock)
      accepted = accepted + 1
      sock:settimeout(10000)
      sock:receiveany(65536)
      sock:close()
    end)
    local errs = h.run_all(4, function()
      local res, err = http.request(("https://localhost:%d/"):format(port), { ca_file = ca, timeout = 10000 })
      return res and res.status or err
    end)
    for i = 2, 4 do assert.are.equal(errs[1], errs[i]) end
    assert.is_string(errs[1])
    assert.are.equal(1, accepted)
  end)

  it("falls back to HTTP/1.1 where ALPN does not pick h2, and http2 = false never offers it", function()
    local h2port = serve(function(req, res) res:send("v" .. req.version) end, tls())
    local h1port = serve(function(req, res) res:send("v" .. req.version) end, tls { http2 = false })
    local c = http.client { ca_file = ca }
    local res = assert(c:get(("https://localhost:%d/"):format(h2port)))
    assert.are.equal(2, res.version)
    for _ = 1, 2 do   -- the second one on the pooled HTTP/1.1 connection
      res = assert(c:get(("https://localhost:%d/"):format(h1port)))
      assert.are.equal(1.1, res.version)
      assert.are.equal("v1.1", res.body)
    end
    res = assert(c:get(("https://localhost:%d/"):format(h2port), { http2 = false }))
    assert.are.equal(1.1, res.version)
    assert.are.equal("v1.1", res.body)
    assert.has_error(function() c:get("https://localhost:1/", { http2 = "yes" }) end)
  end)
end)

-- -- Against nginx -------------------------------------------------------------------

-- nginx (one worker) with an h2c listener on a free port: static files,
-- a location that resets its stream (return 444 is RST_STREAM on HTTP/2),
-- one with a trailer, and keepalive_requests requests per connection
-- (then GOAWAY); extra: more of the server block. Its access log lines
-- are "$connection $request_uri"; its error log is at level info (where
-- nginx reports a stream it refused).
local function nginx(keepalive_requests, extra)
  local d = h.tmpdir()
  local port = h.free_port()
  h.write_file(d .. "/index.html", "hello from nginx\n")
  h.write_file(d .. "/nginx.conf", ([[
worker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log info;
events { worker_connections 256; }
http {
  log_format conn '$connection $request_uri';
  client_body_temp_path %s; proxy_temp_path %s; fastcgi_temp_path %s;
  uwsgi_temp_path %s; scgi_temp_path %s;
  server {
    listen 127.0.0.1:%d http2;
    access_log %s/access.log conn;
    keepalive_requests %d;
    root %s;
    location /reset { return 444; }
    location /trail { add_trailer X-Sum abc; return 200 "trailed\n"; }
    %s
  }
}
]]):format(d, d, d, d, d, d, d, port, d, keepalive_requests, d, extra or ""))
  local pid, log = h.spawn(("exec nginx -p %s -c %s/nginx.conf"):format(d, d))
  h.defer(function()
    h.stop_pid(pid)
    os.execute("rm -rf " .. h.shell_quote(d))
  end)
  h.wait_port(port, log)
  local n = {}
  -- The access log as { { conn, uri }, ... } once it has want lines.
  function n.log(want)
    local lines
    assert(h.wait_for(function()
      lines = {}
      for c, uri in (h.try_slurp(d .. "/access.log") or ""):gmatch("(%d+) (%S+)\n") do
        lines[#lines + 1] = { c, uri }
      end
      return #lines >= want
    end, 10), "nginx logged too few requests")
    return lines
  end
  function n.error_log() return h.try_slurp(d .. "/error.log") or "" end
  n.url = "http://127.0.0.1:" .. port
  return n
end

describe("the HTTP/2 client against nginx's h2c", function()
  it("shares one connection among concurrent tasks and reads nginx's trailers", function()
    local ng = nginx(1000)
    local N = 12
    local bodies = h.run_all(N, function(i)
      local res = assert(http.request(ng.url .. "/index.html?i=" .. i, H2C))
      assert.are.equal(2, res.version)
      return res.body
    end)
    for i = 1, N do assert.are.equal("hello from nginx\n", bodies[i]) end
    local res = assert(http.request(ng.url .. "/trail", H2C))
    assert.are.equal("trailed\n", res.body)
    assert.are.equal("abc", res.trailers["x-sum"])
    local conns = {}
    for _, l in ipairs(ng.log(N + 1)) do conns[l[1]] = true end
    assert.are.equal(1, count(conns))
  end)

  it("sends the requests a GOAWAY refused again on new connections, each processed once", function()
    local ng = nginx(4)   -- GOAWAY after 4 requests: a burst of 10 needs 3 connections
    local N = 10
    local statuses = h.run_all(N, function(i)
      local res, err = http.request(ng.url .. "/index.html?i=" .. i, H2C)
      return res and res.status or err
    end)
    for i = 1, N do assert.are.equal(200, statuses[i]) end
    local conns, seen = {}, {}
    for _, l in ipairs(ng.log(N)) do
      conns[l[1]] = true
      assert.is_nil(seen[l[2]], "processed twice: " .. l[2])
      seen[l[2]] = true
    end
    assert.are.equal(N, count(seen))
    assert.is_true(count(conns) >= 3)
  end)

  it("queues streams past nginx's http2_max_concurrent_streams: none refused, one connection", function()
    -- nginx allows K streams and proxies /held to a cohost server that
    -- holds each request until its batch of K has arrived (the last
    -- batch: until all have). A stream sent past the limit is refused
    -- (nginx logs "concurrent streams exceeded"), and a POST with a
    -- function body is not sent again: it would fail with "refused".
    local K, N = 2, 7
    local hold, most = batch_holder(K, N)
    local backend = h.http_serve(hold)
    local ng = nginx(1000, ("http2_max_concurrent_streams %d; location /held { proxy_pass http://127.0.0.1:%d; }")
      :format(K, backend))
    local bodies = h.run_all(N, function(i)
      local sent = false
      local res, err = http.request(ng.url .. "/held?n=" .. i, h2c {
        method = "POST",
        body = function()
          if sent then return nil end
          sent = true
          return ("y"):rep(1000)
        end,
      })
      return res and res.body or err
    end)
    for i = 1, N do assert.are.equal(i .. ":1000", bodies[i]) end
    assert.are.equal(K, most())
    local conns = {}
    for _, l in ipairs(ng.log(N)) do conns[l[1]] = true end
    assert.are.equal(1, count(conns))
    assert.is_nil(ng.error_log():find("concurrent streams exceeded", 1, true))
  end)

  it("reports a stream nginx resets as nil, err, and goes on on the same connection", function()
    local ng = nginx(1000)
    local res, err = http.request(ng.url .. "/reset", H2C)
    assert.is_nil(res)
    assert.are.equal("reset: PROTOCOL_ERROR", err)
    res = assert(http.request(ng.url .. "/index.html", H2C))
    assert.are.equal("hello from nginx\n", res.body)
    local lines = ng.log(2)
    assert.are.equal(lines[1][1], lines[2][1])
  end)
end)
