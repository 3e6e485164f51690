-- TLS (docs/tls.md): sock:sslhandshake on client cosockets, TLS listeners
-- for cohost.listen and http.listen. Peers are real: openssl s_client,
-- openssl s_server and curl, against a throwaway CA made here with the
-- openssl command line.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local dir, ca, srv_cert, srv_key, cli_cert, cli_key, self_cert, self_key

setup(function()
  dir = os.tmpname()
  os.remove(dir)
  h.must("mkdir " .. dir)
  ca = h.tls_ca(dir, "cohost-test-ca")
  srv_cert, srv_key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")
  cli_cert, cli_key = h.tls_cert(dir, "cli", "client", "extendedKeyUsage=clientAuth")
  self_cert, self_key = dir .. "/self.pem", dir .. "/self.key"
  h.must(("openssl req -x509 %s -keyout %s -out %s -days 2 -subj /CN=localhost "
        .. "-addext subjectAltName=DNS:localhost,IP:127.0.0.1"):format(h.TLS_NEWKEY, self_key, self_cert))
end)

teardown(function()
  if dir then os.execute("rm -rf " .. h.shell_quote(dir)) end
end)

-- A TLS echo listener: each line comes back until the client closes.
local function tls_echo(opts, seen)
  local o = { ssl_cert = srv_cert, ssl_key = srv_key }
  for k, v in pairs(opts or {}) do o[k] = v end
  local _, port = h.serve(function(sock)
    if seen then seen[#seen + 1] = assert(sock:sslinfo()) end
    while true do
      local line = sock:receive("*l")
      if not line then return end
      sock:send(line .. "\n")
      if line:find("^last ") then return end   -- s_client waits for our close
    end
  end, o)
  return port
end

-- A client cosocket connected to port, not yet handshaked; closed after
-- the test.
local dial = h.dial

-- openssl s_server on a free port with extra args, stopped (and seen to
-- be gone) after the test.
local function s_server(args)
  local port = h.free_port()
  local pidf = h.tmpfile()
  os.execute(("(timeout 30 openssl s_server -accept 127.0.0.1:%d -cert %s -key %s %s "
              .. ">/dev/null 2>&1 </dev/null & echo $! >%s)"):format(port, srv_cert, srv_key, args, pidf))
  local pid = tonumber(h.slurp(pidf))
  defer(function()
    os.execute("kill " .. pid .. " 2>/dev/null")
    assert(h.wait_for(function() return not h.listening(port, 500) end, 4), "openssl s_server still listening")
  end)
  h.wait_port(port)
  return port
end

describe("a TLS listener", function()
  it("echoes to openssl s_client verifying it against the CA", function()
    local port = tls_echo()
    local code, out, err = h.sh(("printf 'last hello tls\\n' | openssl s_client -connect 127.0.0.1:%d "
      .. "-CAfile %s -verify_return_error -verify_hostname localhost -quiet"):format(port, ca))
    assert.are.equal(0, code, err)
    assert.matches("hello tls", out)
  end)

  it("echoes to a cohost client that verifies it (sslhandshake verify=true)", function()
    local seen = {}
    local port = tls_echo(nil, seen)
    local s = dial(port)
    local sess, err = s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca })
    assert.is_nil(err)
    assert.are.equal("userdata", type(sess))
    local info = assert(s:sslinfo())
    assert.matches("^TLSv1%.[23]$", info.protocol)
    assert.are.equal("localhost", info.server_name)
    assert.are.equal(0, info.verify_result)
    for i = 1, 3 do
      local line = ("line %d %s"):format(i, ("x"):rep(i * 10000))   -- several records
      assert.are.equal(#line + 1, s:send(line .. "\n"))
      assert.are.equal(line, s:receive("*l"))
    end
    assert.are.equal("localhost", seen[1].server_name)
    -- receiveuntil and receiveany go through TLS too.
    s:send("abc--def\n")
    local it = s:receiveuntil("--")
    assert.are.equal("abc", it())
    assert.are.equal("def\n", s:receiveany(100))
  end)

  it("returns true instead of a session when reused_session is false", function()
    local s = dial(tls_echo())
    assert.are.equal(true, s:sslhandshake(false, "localhost", true, nil, { ca_file = ca }))
  end)

  it("resumes a session returned by an earlier handshake", function()
    local port = tls_echo()
    local s = dial(port)
    local sess = assert(s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca }))
    assert.is_false(s:sslinfo().session_reused)
    s:send("x\n")
    assert.are.equal("x", s:receive("*l"))   -- a TLS 1.3 ticket comes with data
    s:close()
    local s2 = dial(port)
    assert(s2:sslhandshake(sess, "localhost", true, nil, { ca_file = ca }))
    assert.is_true(s2:sslinfo().session_reused)
    s2:send("y\n")
    assert.are.equal("y", s2:receive("*l"))
  end)

  it("keeps a TLS connection with its SSL state through the keepalive pool", function()
    local port = tls_echo()
    local s = cohost.tcp()
    s:settimeout(5000)
    assert(s:connect("127.0.0.1", port, { pool = "tls-pool-" .. port }))
    assert(s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca }))
    s:send("one\n")
    assert.are.equal("one", s:receive("*l"))
    assert(s:setkeepalive())
    local s2 = cohost.tcp()
    s2:settimeout(5000)
    defer(function() s2:close() end)
    assert(s2:connect("127.0.0.1", port, { pool = "tls-pool-" .. port }))
    assert.are.equal(1, s2:getreusedtimes())
    -- Handshaked already: returns at once, and the bytes stay encrypted
    -- (the echo server only understands TLS).
    assert(s2:sslhandshake(nil, "localhost", true, nil, { ca_file = ca }))
    s2:send("two\n")
    assert.are.equal("two", s2:receive("*l"))
    -- Another server_name on the pooled connection is refused.
    assert(s2:setkeepalive())
    local s3 = cohost.tcp()
    s3:settimeout(5000)
    defer(function() s3:close() end)
    assert(s3:connect("127.0.0.1", port, { pool = "tls-pool-" .. port }))
    local ok, err = s3:sslhandshake(nil, "other.example", false)
    assert.is_nil(ok)
    assert.matches("another server_name", err)
  end)

  it("refuses a client without a certificate when ssl_verify_client is set", function()
    local seen = {}
    local port = tls_echo({ ssl_client_ca = ca, ssl_verify_client = true }, seen)
    local code = h.sh(("printf 'last hi\\n' | openssl s_client -connect 127.0.0.1:%d -CAfile %s -quiet")
      :format(port, ca))
    assert.are_not.equal(0, code)
    -- A cohost client without one: TLS 1.3 may finish the client's side of
    -- the handshake, but no byte comes back and the handler never runs.
    local s = dial(port)
    local ok = s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca })
    if ok then
      s:send("hi\n")
      local line, err = s:receive("*l")
      assert.is_nil(line)
      assert.is_string(err)
    end
    assert.are.equal(0, #seen)
  end)

  it("accepts a client certificate signed by ssl_client_ca", function()
    local seen = {}
    local port = tls_echo({ ssl_client_ca = ca, ssl_verify_client = true }, seen)
    local s = dial(port)
    assert(s:sslhandshake(nil, "localhost", true, nil,
                          { ca_file = ca, cert = cli_cert, key = cli_key }))
    s:send("with cert\n")
    assert.are.equal("with cert", s:receive("*l"))
    assert.matches("CN=client", seen[1].peer_subject)
    local code, out = h.sh(("printf 'last hi\\n' | openssl s_client -connect 127.0.0.1:%d -CAfile %s "
      .. "-cert %s -key %s -quiet"):format(port, ca, cli_cert, cli_key))
    assert.are.equal(0, code)
    assert.matches("hi", out)
  end)

  it("closes a connection whose handshake fails and keeps serving", function()
    local port = tls_echo()
    local s = dial(port)
    s:send("GET / HTTP/1.0\r\n\r\n")   -- plain text to a TLS port
    -- The close comes as a reset (bytes left unread) or a plain end of
    -- stream (the TLS layer read them all): either way receive returns,
    -- with at most an alert and never a plain-text answer.
    local data, err = s:receive("*a")
    assert.is_true(data ~= nil or type(err) == "string")
    assert.are_not.equal("timeout", err)
    assert.is_nil((data or ""):find("HTTP/", 1, true))
    local s2 = dial(port)
    assert(s2:sslhandshake(false, "localhost", true, nil, { ca_file = ca }))
  end)

  it("fails listen with a message for a missing certificate file", function()
    local l, err = cohost.listen("127.0.0.1:0", function() end,
                                 { ssl_cert = dir .. "/none.pem", ssl_key = srv_key })
    assert.is_nil(l)
    assert.matches("^ssl_cert .*none%.pem", err)
  end)
end)

describe("sslhandshake", function()
  it("talks to openssl s_server, and resumes its session", function()
    local port = s_server("-www")
    local s = dial(port)
    local sess = assert(s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca }))
    s:send("GET / HTTP/1.0\r\n\r\n")
    assert.are.equal("HTTP/1.0 200 ok", s:receive("*l"))
    s:close()   -- s_server serves one connection at a time
    local s2 = dial(port)
    assert(s2:sslhandshake(sess, "localhost", true, nil, { ca_file = ca }))
    assert.is_true(s2:sslinfo().session_reused)
    s2:send("GET / HTTP/1.0\r\n\r\n")
    assert.are.equal("HTTP/1.0 200 ok", s2:receive("*l"))
  end)

  it("talks TLS 1.2 to openssl s_server", function()
    local port = s_server("-www -tls1_2")
    local s = dial(port)
    assert(s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca }))
    assert.are.equal("TLSv1.2", s:sslinfo().protocol)
    s:send("GET / HTTP/1.0\r\n\r\n")
    assert.are.equal("HTTP/1.0 200 ok", s:receive("*l"))
  end)

  it("reports an untrusted issuer as OpenResty does (system store)", function()
    local s = dial(tls_echo())
    local ok, err = s:sslhandshake(nil, "localhost", true)
    assert.is_nil(ok)
    assert.are.equal("20: unable to get local issuer certificate", err)
    assert.are.same({ nil, "closed" }, { s:send("x") })   -- a failure closes
  end)

  it("reports a self-signed certificate", function()
    local s = dial(tls_echo({ ssl_cert = self_cert, ssl_key = self_key }))
    local ok, err = s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca })
    assert.is_nil(ok)
    assert.are.equal("18: self-signed certificate", err)
  end)

  it("reports a certificate for another host", function()
    local s = dial(tls_echo())
    local ok, err = s:sslhandshake(nil, "example.com", true, nil, { ca_file = ca })
    assert.is_nil(ok)
    assert.are.equal("certificate host mismatch", err)
  end)

  it("accepts any certificate when verify is false", function()
    local s = dial(tls_echo({ ssl_cert = self_cert, ssl_key = self_key }))
    assert(s:sslhandshake(nil, "example.com", false))
    s:send("ok\n")
    assert.are.equal("ok", s:receive("*l"))
  end)

  it("times out against a peer that never answers", function()
    local _, port = h.serve(function(sock) sock:receive("*a") end)   -- plain, silent
    local s = dial(port)
    s:settimeout(200)
    local ok, err = s:sslhandshake(nil, "localhost", false)
    assert.is_nil(ok)
    assert.are.equal("timeout", err)
  end)
end)

describe("a TLS http.listen", function()
  local function serve(handler, opts)
    opts = opts or {}
    opts.ssl_cert, opts.ssl_key = srv_cert, srv_key
    return h.http_serve(handler, opts)
  end

  it("serves curl three requests on one kept-alive connection", function()
    local port = serve(function(req, res) res:send("path " .. req.path .. "\n") end)
    local u = ("https://127.0.0.1:%d"):format(port)
    local code, out, err = h.sh(("curl -sS --cacert %s -w 'connects=%%{num_connects}\\n' %s/a %s/b %s/c")
      :format(ca, u, u, u))
    assert.are.equal(0, code, err)
    assert.are.equal("path /a\nconnects=1\npath /b\nconnects=0\npath /c\nconnects=0\n", out)
  end)

  it("sends a 1 MiB file through TLS intact", function()
    local f = h.tmpfile()
    assert.are.equal(0, (h.sh(("head -c 1048576 /dev/urandom >%s"):format(f))))
    local port = serve(function(_, res) assert(res:sendfile(f)) end)
    local out = h.tmpfile()
    local code, _, err = h.sh(("curl -sS --cacert %s -o %s https://localhost:%d/f"):format(ca, out, port))
    assert.are.equal(0, code, err)
    assert.is_true(h.slurp(out) == h.slurp(f), "bodies differ")
  end)

  -- Through TLS the file goes in pieces read into a buffer; a sendfile
  -- parked on a full socket must find its piece as it left it, whatever
  -- another connection's sendfile read meanwhile (SSL_write's retry wants
  -- the same bytes).
  it("sends two files through TLS at once to slow readers, each intact", function()
    local f = { h.tmpfile(), h.tmpfile() }
    for i = 1, 2 do
      assert.are.equal(0, (h.sh(("head -c 16000000 /dev/urandom >%s"):format(f[i]))))
    end
    local port = serve(function(req, res) assert(res:sendfile(f[tonumber(req.path:sub(2))])) end)
    local out, codes = { h.tmpfile(), h.tmpfile() }, {}
    local threads = {}
    for i = 1, 2 do
      threads[i] = cohost.spawn(function()
        codes[i] = h.sh(("curl -sS --limit-rate 8M --cacert %s -o %s https://localhost:%d/%d")
          :format(ca, out[i], port, i), 30)
      end)
    end
    cohost.wait(threads[1])
    cohost.wait(threads[2])
    for i = 1, 2 do
      assert.are.equal(0, codes[i])
      assert.is_true(h.slurp(out[i]) == h.slurp(f[i]), "file " .. i .. " differs")
    end
  end)

  it("reads a POST body through TLS and echoes it", function()
    local f, out = h.tmpfile(), h.tmpfile()
    assert.are.equal(0, (h.sh(("head -c 300000 /dev/urandom >%s"):format(f))))
    local port = serve(function(req, res) res:send(assert(req:body())) end,
                       { max_body_size = 1048576 })
    local code, _, err = h.sh(("curl -sS --cacert %s --data-binary @%s -o %s https://127.0.0.1:%d/p")
      :format(ca, f, out, port))
    assert.are.equal(0, code, err)
    assert.is_true(h.slurp(out) == h.slurp(f), "bodies differ")
  end)

  it("closes quietly on a failed handshake and keeps serving", function()
    local port = serve(function(_, res) res:send("fine") end)
    local code = h.sh(("curl -sS http://127.0.0.1:%d/"):format(port))   -- plain to TLS
    assert.are_not.equal(0, code)
    local code2, out = h.sh(("curl -sS --cacert %s https://127.0.0.1:%d/"):format(ca, port))
    assert.are.equal(0, code2)
    assert.are.equal("fine", out)
  end)
end)
