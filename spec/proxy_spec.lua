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

-- A v2 header: cmd 1 PROXY (or 0 LOCAL), TCP over IPv4 from a.b.c.d:sport.
local function v2(a, b, c, d, sport, cmd)
  local addrs = string.char(a, b, c, d, 10, 0, 0, 1, math.floor(sport / 256), sport % 256, 0, 80)
  local tlv = "\4\0\2ok"   -- a NOOP TLV after the addresses: skipped
  local body = addrs .. tlv
  return "\r\n\r\n\0\r\nQUIT\n" .. string.char(0x20 + (cmd or 1), 0x11, 0, #body) .. body
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

  it("is refused with TLS", function()
    local dir = h.tmpdir()
    h.tls_ca(dir, "ca")
    local cert, key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=DNS:localhost")
    local ok, err = pcall(http.listen, "127.0.0.1:0", function() end,
      { proxy_protocol = true, ssl_cert = cert, ssl_key = key })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("proxy_protocol is not supported with TLS", 1, true), tostring(err))
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
