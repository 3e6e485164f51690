-- Debian's lua-nginx-redis (0.27, unmodified) on cohost.ngx against
-- redis-server's TLS port (Debian's redis 7.0 is linked with libssl).
-- A throwaway CA and server certificate are made here with the openssl
-- command line; redis-server listens for TLS only (--port 0).
--
-- Debian's 0.27 predates lua-resty-redis's ssl options (0.28+): its
-- connect hands all arguments to sock:connect, which takes only pool
-- options, so {ssl = true} is ignored and the connection stays plain.
-- What 0.28+ does for opts.ssl is a connect followed by sslhandshake on
-- the driver's socket; connect_tls below makes those same two calls on
-- the unmodified 0.27 object (its socket is the field _sock).
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
require "cohost.ngx"
local redis = require "resty.redis"

local dir, ca, srv   -- srv: { port, pid, log }

-- -- redis-server with TLS, in the background for the whole file ----------

setup(function()
  dir = os.tmpname()
  os.remove(dir)
  h.must("mkdir " .. dir)
  ca = h.tls_ca(dir, "cohost-redis-test-ca")
  local srv_cert, srv_key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")

  local port, log = h.free_port(), dir .. "/redis.log"
  local cmd = ("redis-server --port 0 --bind 127.0.0.1 --tls-port %d --tls-cert-file %s "
    .. "--tls-key-file %s --tls-ca-cert-file %s --tls-auth-clients no --save '' --appendonly no")
    :format(port, srv_cert, srv_key, ca)
  local pid = h.spawn(cmd, log)
  srv = { port = port, pid = pid, log = log }
  h.wait_port(port, log)
end)

teardown(function()
  if srv then h.stop_pid(srv.pid) end
  if dir then os.execute("rm -rf " .. h.shell_quote(dir)) end
end)

-- -- Clients -------------------------------------------------------------------

-- red:connect then sslhandshake(false, opts.server_name, opts.ssl_verify)
-- on the driver's socket, as lua-resty-redis 0.28+ does for opts.ssl;
-- opts.ssl_opts is cohost's fifth sslhandshake argument (ca_file ...).
local function connect_tls(red, opts)
  local ok, err = red:connect("127.0.0.1", srv.port, opts)
  if not ok then return nil, err end
  return red._sock:sslhandshake(false, opts.server_name, opts.ssl_verify, nil, opts.ssl_opts)
end

-- A new driver object with a 2 s timeout (or timeout_ms), closed after
-- the test.
local function new_client(timeout_ms)
  local red = assert(redis:new())
  red:set_timeout(timeout_ms or 2000)
  defer(function() red:close() end)
  return red
end

-- -- Specs -----------------------------------------------------------------------

describe("resty.redis 0.27 over TLS to redis-server's --tls-port", function()
  it("is Debian's 0.27, whose connect ignores {ssl = true}: the TLS port drops the plain command", function()
    assert.equal("0.27", redis._VERSION)
    local red = new_client(1000)
    assert(red:connect("127.0.0.1", srv.port, { ssl = true, ssl_verify = false }))
    assert.is_nil(red._sock:sslinfo())   -- no handshake happened
    local t0 = cohost.monotonic()
    local res, err = red:set("k", "v")
    assert.is_nil(res)
    assert.is_not_nil(err)
    assert.are_not.equal("timeout", err)   -- redis closed on us; no hang
    assert.is_true(cohost.monotonic() - t0 < 1.5)
  end)

  it("sets and gets a key without verification (ssl_verify = false)", function()
    local red = new_client()
    local ok, err = connect_tls(red, { ssl = true, ssl_verify = false })
    assert.is_nil(err)
    assert.is_true(ok)
    local info = assert(red._sock:sslinfo())
    assert.matches("^TLSv1%.[23]$", info.protocol)
    assert.equal("OK", red:set("tls:dog", "an animal"))
    assert.equal("an animal", red:get("tls:dog"))
    local big = ("x"):rep(100000)   -- several TLS records each way
    assert.equal("OK", red:set("tls:big", big))
    assert.equal(big, red:get("tls:big"))
  end)

  it("fails verification (ssl_verify = true) against the system store, without the throwaway CA", function()
    local red = new_client()
    local ok, err = connect_tls(red, { ssl = true, ssl_verify = true, server_name = "localhost" })
    assert.is_nil(ok)
    -- redis-server sends its CA after the leaf (OpenSSL builds the chain
    -- from --tls-ca-cert-file), so the untrusted root is in the chain.
    assert.equal("19: self-signed certificate in certificate chain", err)
    -- A failed handshake closes the connection.
    local res, err2 = red:get("x")
    assert.is_nil(res)
    assert.equal("closed", err2)
  end)

  it("verifies with the CA given as cohost's ca_file, and checks the name", function()
    local red = new_client()
    local ok, err = connect_tls(red, {
      ssl = true, ssl_verify = true, server_name = "localhost", ssl_opts = { ca_file = ca },
    })
    assert.is_nil(err)
    assert.is_true(ok)
    assert.equal(0, red._sock:sslinfo().verify_result)
    assert.equal("PONG", red:ping())
    local other = new_client()
    ok, err = connect_tls(other, {
      ssl = true, ssl_verify = true, server_name = "redis.example", ssl_opts = { ca_file = ca },
    })
    assert.is_nil(ok)
    assert.equal("certificate host mismatch", err)
  end)

  it("verifies against install{ssl_trusted_certificate} when the driver names no CA", function()
    -- lua-resty-redis 0.28+ calls sslhandshake(false, name, verify) with no
    -- options: nginx's lua_ssl_trusted_certificate is the only way in.
    require("cohost.ngx").install { ssl_trusted_certificate = ca }
    defer(function() require("cohost.core.ssl").set_default_ca(nil) end)
    local red = new_client()
    local ok, err = connect_tls(red, { ssl = true, ssl_verify = true, server_name = "localhost" })
    assert.is_nil(err)
    assert.is_true(ok)
    assert.equal(0, red._sock:sslinfo().verify_result)
    assert.equal("PONG", red:ping())
  end)

  it("runs a pipeline over TLS", function()
    local red = new_client()
    assert(connect_tls(red, { ssl = true, ssl_verify = false }))
    red:del("tls:list")
    red:init_pipeline()
    red:set("tls:cat", "Marry")
    red:set("tls:horse", "Bob")
    for i = 1, 50 do red:rpush("tls:list", ("item %d %s"):format(i, ("y"):rep(1000))) end
    red:get("tls:cat")
    red:get("tls:horse")
    red:llen("tls:list")
    red:get("tls:no:such:key")
    local results, err = red:commit_pipeline()
    assert.is_nil(err)
    assert.equal(56, #results)
    assert.same({ "OK", "OK" }, { results[1], results[2] })
    for i = 1, 50 do assert.equal(i, results[2 + i]) end
    assert.same({ "Marry", "Bob", 50, ngx.null }, { results[53], results[54], results[55], results[56] })
  end)

  it("reuses a TLS connection put back with set_keepalive, still encrypted", function()
    local red = assert(redis:new())
    red:set_timeout(2000)
    assert(connect_tls(red, { ssl = true, ssl_verify = false }))
    assert.equal(0, red:get_reused_times())
    assert.equal("OK", red:set("tls:k", "v"))
    assert.equal(1, red:set_keepalive(10000, 10))
    local again = new_client()
    -- The same two calls: the handshake on a pooled TLS connection
    -- returns at once, as in OpenResty.
    local ok, err = connect_tls(again, { ssl = true, ssl_verify = false })
    assert.is_nil(err)
    assert.is_true(ok)
    assert.equal(1, again:get_reused_times())
    assert(again._sock:sslinfo())
    assert.equal("v", again:get("tls:k"))
    assert.equal("OK", again:set("tls:k", "w"))
    assert.equal("w", again:get("tls:k"))
  end)

  it("fails cleanly (an error, not a hang) for a plain connect to the TLS port", function()
    local red = new_client(1000)
    assert(red:connect("127.0.0.1", srv.port))
    local t0 = cohost.monotonic()
    local res, err = red:ping()
    assert.is_nil(res)
    assert.is_true(err == "closed" or err == "connection reset by peer", "got: " .. tostring(err))
    assert.is_true(cohost.monotonic() - t0 < 1.5)
  end)
end)
