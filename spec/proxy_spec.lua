-- Behind a load balancer (docs/deploy.md): the PROXY protocol v1 and v2 on
-- cohost.listen and http.listen (proxy_protocol = true), and the
-- http.real_ip middleware for X-Forwarded-For and Forwarded. Servers run
-- in this process; the balancer's side is a raw cosocket sending the
-- header's exact bytes (spec/deploy_spec.lua has Debian's HAProxy).
local cohost = require "cohost"
local http = require "cohost.http"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local function v1(src, sport)
  return ("PROXY TCP4 %s 10.0.0.1 %d 80\r\n"):format(src, sport)
end

-- A v2 header: cmd 1 PROXY (or 0 LOCAL), TCP over IPv4 from a.b.c.d:sport;
-- size, if given, is its whole length: a NOOP TLV pads it.
local function v2(a, b, c, d, sport, cmd, size)
  local addrs = string.char(a, b, c, d, 10, 0, 0, 1, math.floor(sport / 256), sport % 256, 0, 80)
  local pad = size and size - 16 - #addrs - 3 or 2
  local tlv = "\4" .. string.char(math.floor(pad / 256), pad % 256) .. ("o"):rep(pad)   -- skipped
  local body = addrs .. tlv
  return "\r\n\r\n\0\r\nQUIT\n" .. string.char(0x20 + (cmd or 1), 0x11, math.floor(#body / 256), #body % 256) .. body
end

local GET = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"

-- Sends bytes on a new connection to port and reads to the close.
local function exchange(port, bytes)
  local s = h.dial(port, 3000)
  assert(s:send(bytes))
  local data, err, partial = s:receive("*a")
  s:close()
  return data or partial, err
end

local function peer_server()
  return h.http_serve(function(req, res) res:send("peer=" .. req.peer) end, { proxy_protocol = true })
end

describe("PROXY protocol on http.listen", function()
  it("takes req.peer from a v1 header", function()
    local data = exchange(peer_server(), v1("203.0.113.9", 4711) .. GET)
    assert.truthy(data:find("\r\n\r\npeer=203.0.113.9:4711$"), data)
  end)

  it("takes req.peer from a v2 header, skipping its TLVs", function()
    local data = exchange(peer_server(), v2(198, 51, 100, 7, 5555) .. GET)
    assert.truthy(data:find("\r\n\r\npeer=198.51.100.7:5555$"), data)
  end)

  it("takes a v2 header padded with TLVs to any length its 16-bit field allows (65,551 bytes)", function()
    -- A 16,400-byte header is past the 16 KiB buffer of a listener with
    -- small limits, 40,000 and 65,551 past the default limits' 20 KiB:
    -- the TLVs are skipped as they come, never buffered whole.
    local small = h.http_serve(function(req, res) res:send("peer=" .. req.peer) end,
      { proxy_protocol = true, max_request_line = 1024, max_header_size = 1024 })
    local data = exchange(small, v2(198, 51, 100, 7, 5555, 1, 16400) .. GET)
    assert.truthy(data:find("\r\n\r\npeer=198.51.100.7:5555$"), data)
    local port = peer_server()
    for _, size in ipairs { 40000, 65551 } do
      data = exchange(port, v2(198, 51, 100, 8, 5556, 1, size) .. GET)
      assert.truthy(data:find("\r\n\r\npeer=198.51.100.8:5556$"), size .. ": " .. data)
    end
    data = exchange(port, v2(1, 2, 3, 4, 9, 0, 30000) .. GET)   -- LOCAL, padded
    assert.truthy(data:find("\r\n\r\npeer=127.0.0.1:%d+$"), data)
  end)

  it("keeps the socket's peer for a v2 LOCAL header (a balancer's health check)", function()
    local data = exchange(peer_server(), v2(1, 2, 3, 4, 9, 0) .. GET)
    assert.truthy(data:find("\r\n\r\npeer=127.0.0.1:%d+$"), data)
  end)

  it("reads the header sent in pieces, and keeps the connection for more requests", function()
    local port = peer_server()
    local s = h.dial(port, 3000)
    local hdr = v1("192.0.2.1", 1000)
    assert(s:send(hdr:sub(1, 3)))
    cohost.sleep(0.01)
    assert(s:send(hdr:sub(4) .. "GET / HTTP/1.1\r\nHost: t\r\n\r\n"))
    local r = assert(h.receive_response(s))
    assert.equal("peer=192.0.2.1:1000", r.body)
    assert(s:send(GET))
    r = assert(h.receive_response(s))
    assert.equal("peer=192.0.2.1:1000", r.body)
    s:close()
  end)

  it("closes a connection without a valid header and serves the next", function()
    local port = peer_server()
    for _, bad in ipairs { GET, "PROXY TCP4 nonsense\r\n" .. GET, "PROXY TCP9 1.2.3.4 1.2.3.4 1 2\r\n" .. GET,
                           "\r\n\r\n\0\r\nQUIT\n\x31\x11\0\0" .. GET } do
      local data, err = exchange(port, bad)
      assert.equal("", data, err)
    end
    local data = exchange(port, v1("203.0.113.9", 1) .. GET)
    assert.truthy(data:find("peer=203.0.113.9:1", 1, true), data)
  end)

end)

-- TLS after the header (HAProxy's send-proxy in front of SSL passthrough):
-- one server process with both listeners, so its log can be read.
local TLS_SERVER = h.server_script [[
local http = require "cohost.http"
local cert, key, http_port = arg[1], arg[2], tonumber(arg[3])
local tls = { proxy_protocol = true, ssl_cert = cert, ssl_key = key }
listener = assert(cohost.listen("127.0.0.1:0", function(sock, peer)
  local ip, pport = sock:getpeername()
  sock:send(peer .. " " .. ip .. " " .. pport .. " " .. tostring(sock:receive("*l")) .. "\n")
end, tls))
assert(http.listen("127.0.0.1:" .. http_port, function(req, res) res:send("peer=" .. req.peer) end, tls))
]]

describe("PROXY protocol before TLS", function()
  local dir, ca, srv, http_port
  setup(function()
    -- Kept for every test of the block (h.tmpdir's goes after the first).
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. h.shell_quote(dir)) == 0)
    ca = h.tls_ca(dir, "ca")
    local cert, key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost")
    http_port = h.fixed_port()
    srv = h.start(("%s %s %s %d"):format(h.shell_quote(h.tmpfile(TLS_SERVER)), h.shell_quote(cert),
      h.shell_quote(key), http_port))
    h.wait_port(http_port, srv.err)
  end)
  teardown(function()
    srv.stop()
    os.execute("rm -rf " .. h.shell_quote(dir))
  end)

  -- Sends header in clear, then handshakes (verifying the certificate)
  -- and sends bytes through TLS; returns what came back to the close, or
  -- nil and the handshake's error.
  local function tls_exchange(port, header, bytes)
    local s = h.dial(port, 3000)
    assert(s:send(header))
    local sess, err = s:sslhandshake(nil, "localhost", true, nil, { ca_file = ca })
    if not sess then
      s:close()
      return nil, err
    end
    assert(s:send(bytes))
    local data, rerr, partial = s:receive("*a")
    s:close()
    return data or partial, rerr
  end

  it("gives cohost.listen's handler the peer of a v1 or v2 header, then runs TLS", function()
    local data = tls_exchange(srv.port, v1("203.0.113.9", 4711), "hello\n")
    assert.equal("203.0.113.9:4711 203.0.113.9 4711 hello\n", data)
    data = tls_exchange(srv.port, v2(192, 0, 2, 200, 60000), "again\n")
    assert.equal("192.0.2.200:60000 192.0.2.200 60000 again\n", data)
  end)

  it("gives http.listen's req.peer from a v1 or v2 header, then serves HTTPS", function()
    local data = tls_exchange(http_port, v2(198, 51, 100, 7, 5555), GET)
    assert.truthy(data:find("^HTTP/1.1 200") and data:find("\r\n\r\npeer=198.51.100.7:5555$"), data)
    data = tls_exchange(http_port, v1("203.0.113.1", 80), GET)
    assert.truthy(data:find("\r\n\r\npeer=203.0.113.1:80$"), data)
  end)

  it("hands the bytes read past the header to TLS (header and ClientHello in one write, Python's ssl)", function()
    -- The ClientHello is made in memory (ssl.MemoryBIO) and sent with the
    -- header in one sendall: the server's first read takes both.
    local code, out, err = h.python([[
import socket, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
raw = socket.create_connection(("127.0.0.1", port), timeout=5)
addrs = bytes([203, 0, 113, 50, 10, 0, 0, 1, 0x1f, 0x90, 0, 80])
header = b"\r\n\r\n\0\r\nQUIT\n" + bytes([0x21, 0x11, 0, len(addrs)]) + addrs
ctx = ssl.create_default_context(cafile=ca)
inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(inc, outg, server_hostname="localhost")
first = True
def pump():
    global first
    data = outg.read()
    if first:
        data, first = header + data, False
    if data:
        raw.sendall(data)
def more():
    b = raw.recv(65536)
    if not b:
        raise SystemExit("closed by the server")
    inc.write(b)
while True:
    try:
        tls.do_handshake()
        break
    except ssl.SSLWantReadError:
        pump()
        more()
pump()
tls.write(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
pump()
data = b""
while True:
    try:
        b = tls.read(4096)
        if not b:
            break
        data += b
    except ssl.SSLWantReadError:
        b = raw.recv(65536)
        if not b:
            break
        inc.write(b)
    except ssl.SSLZeroReturnError:
        break
sys.stdout.write(tls.version() + "\n" + data.decode())
]], ("%d %s"):format(http_port, h.shell_quote(ca)))
    assert.equal(0, code, err)
    assert.truthy(out:find("\r\n\r\npeer=203.0.113.50:8080$"), out)
  end)

  it("closes a TLS connection without a valid header, logs why, and serves the next", function()
    -- A client that starts TLS at once: its ClientHello is no header.
    local data, err = tls_exchange(http_port, "", GET)
    assert.is_nil(data)
    assert.truthy(err, "handshake failed")
    data, err = tls_exchange(srv.port, "PROXY TCP4 nonsense\r\n", "x\n")
    assert.is_nil(data)
    assert.truthy(err)
    -- The first is logged; the next, within 10 s, only counted (a scanner
    -- would write a line per connection): its summary comes later.
    assert.is_true(h.wait_for(function()
      return h.slurp(srv.err):find("proxy protocol: 127%.0%.0%.1:%d+: no valid PROXY header; connection closed")
    end, 10), h.slurp(srv.err))
    data = tls_exchange(srv.port, v1("198.51.100.1", 2), "ok\n")
    assert.equal("198.51.100.1:2 198.51.100.1 2 ok\n", data)
  end)

  it("takes the client from Debian's HAProxy (mode tcp, send-proxy-v2, TLS passed through)", function()
    local front = h.fixed_port()
    local cfg = h.tmpfile(([[
defaults
  mode tcp
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend tls_in
  bind 127.0.0.1:%d
  default_backend nodes
backend nodes
  server n1 127.0.0.1:%d send-proxy-v2
]]):format(front, http_port))
    local hpid, hlog = h.spawn(("exec timeout 60 haproxy -db -f %s"):format(h.shell_quote(cfg)))
    defer(function() h.stop_pid(hpid); os.remove(hlog) end)
    h.wait_port(front, hlog)
    -- curl connects from 127.0.0.5: HAProxy's own connection comes from
    -- 127.0.0.1, so the address in req.peer can only be the header's.
    local code, out, err = h.sh(("curl -sS --interface 127.0.0.5 --cacert %s --resolve localhost:%d:127.0.0.1 "
      .. "https://localhost:%d/"):format(h.shell_quote(ca), front, front))
    assert.equal(0, code, err .. h.try_slurp(hlog))
    assert.truthy(out:match("^peer=127%.0%.0%.5:%d+$"), out)
  end)
end)

describe("PROXY protocol on cohost.listen", function()
  it("gives the handler and getpeername the header's peer, and the bytes after it", function()
    local _, port = h.serve(function(sock, peer)
      local ip, pport = sock:getpeername()
      sock:send(peer .. " " .. ip .. " " .. pport .. " " .. sock:receive("*l") .. "\n")
    end, { proxy_protocol = true })
    local data = exchange(port, v2(192, 0, 2, 200, 60000) .. "hello\n")
    assert.equal("192.0.2.200:60000 192.0.2.200 60000 hello\n", data)
    data = exchange(port, v1("198.51.100.1", 2) .. "again\n")
    assert.equal("198.51.100.1:2 198.51.100.1 2 again\n", data)
    assert.equal("", (exchange(port, "hello\n")))
  end)
end)

describe("http.real_ip", function()
  local function serve(opts)
    local r = http.router()
    r:use(http.real_ip(opts))
    r:get("/", function(req, res) res:send(req.peer .. " " .. tostring(req.real_ip)) end)
    return h.http_serve(r)
  end

  it("takes the client from X-Forwarded-For when the peer is trusted, skipping trusted hops", function()
    local port = serve { trusted = { "127.0.0.1", "10.0.0.0/8" } }
    local r = h.request(port, "GET", "/", { ["X-Forwarded-For"] = "6.6.6.6, 203.0.113.7, 10.1.2.3" })
    assert.equal("203.0.113.7:0 203.0.113.7", r.body)
  end)

  it("takes for= from Forwarded, IPv6 included", function()
    local port = serve { trusted = { "127.0.0.0/8" }, header = "Forwarded" }
    local r = h.request(port, "GET", "/", { Forwarded = 'for="[2001:db8::1]:4711";proto=https, for=127.0.0.2' })
    assert.equal("[2001:db8::1]:0 2001:db8::1", r.body)
  end)

  it("ignores the header from a peer that is not trusted", function()
    local port = serve { trusted = { "10.0.0.0/8" } }
    local r = h.request(port, "GET", "/", { ["X-Forwarded-For"] = "203.0.113.7" })
    assert.truthy(r.body:match("^127%.0%.0%.1:%d+ nil$"), r.body)
  end)

  it("rejects a bad trusted list", function()
    assert.has_error(function() http.real_ip { trusted = { "10.0.0.0/99" } } end)
    assert.has_error(function() http.real_ip { trusted = { "not an ip" } } end)
    assert.has_error(function() http.real_ip {} end)
  end)
end)
