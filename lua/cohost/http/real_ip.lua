-- http.real_ip{ trusted = {...} [, header = "X-Forwarded-For" | "Forwarded"] }:
-- router middleware that puts the client's address in req.peer when the
-- connection comes from a trusted proxy, as nginx's realip module does
-- with real_ip_recursive on. The header is read from the right (the
-- hop nearest to us) and trusted addresses are skipped: the first one
-- that is not trusted is the client (if all are, the leftmost). A peer
-- that is no trusted proxy keeps its address: anyone can send the header.
-- req.peer becomes "ip:0" ("[ip]:0" for IPv6: the header has no port),
-- req.real_ip the bare address, req.proxy_peer the connection's peer.
local M = {}

local ffi = require "ffi"
local bit = require "bit"

ffi.cdef [[
int inet_pton(int af, const char *src, void *dst);
]]

local AF_INET, AF_INET6 = 2, 10
local buf = ffi.new("uint8_t[16]")

-- The address's bytes as a string (4 or 16), or nil for no IP literal.
local function pack(ip)
  if ffi.C.inet_pton(AF_INET, ip, buf) == 1 then return ffi.string(buf, 4) end
  if ffi.C.inet_pton(AF_INET6, ip, buf) == 1 then
    local b = ffi.string(buf, 16)
    -- An IPv4-mapped address (::ffff:a.b.c.d) is the IPv4 one.
    if b:sub(1, 12) == ("\0"):rep(10) .. "\255\255" then return b:sub(13) end
    return b
  end
end

-- A CIDR ("10.0.0.0/8", "::1", "fd00::/8") as { bytes, prefix bits }.
local function parse_cidr(s)
  local ip, bits = s:match("^([^/]+)/(%d+)$")
  ip = ip or s
  local b = pack(ip)
  if not b then error(("bad trusted address %q"):format(s), 3) end
  bits = tonumber(bits) or #b * 8
  if bits > #b * 8 then error(("bad prefix length in %q"):format(s), 3) end
  return { b, bits }
end

local function in_cidr(b, c)
  local net, bits = c[1], c[2]
  if #b ~= #net then return false end
  local whole = math.floor(bits / 8)
  if b:sub(1, whole) ~= net:sub(1, whole) then return false end
  local rest = bits % 8
  if rest == 0 then return true end
  local mask = bit.band(bit.lshift(0xff, 8 - rest), 0xff)
  return bit.band(b:byte(whole + 1), mask) == bit.band(net:byte(whole + 1), mask)
end

-- The host part of req.peer: "1.2.3.4:5" -> "1.2.3.4", "[::1]:5" -> "::1".
local function peer_ip(peer)
  return peer:match("^%[(.-)%]:%d+$") or peer:match("^(.-):%d+$") or peer
end

-- X-Forwarded-For's addresses, left to right.
local function xff_list(v)
  local out = {}
  for item in v:gmatch("[^,]+") do
    item = item:match("^%s*(.-)%s*$")
    -- Some proxies add a port: "1.2.3.4:5", "[::1]:5".
    item = item:match("^%[(.-)%]") or (item:match("^[%d.]+:%d+$") and item:match("^([%d.]+)")) or item
    out[#out + 1] = item
  end
  return out
end

-- Forwarded's for= values (RFC 7239), left to right.
local function forwarded_list(v)
  local out = {}
  for elem in v:gmatch("[^,]+") do
    local f = elem:match("[Ff][Oo][Rr]%s*=%s*(\"?[^;,\"]*\"?)")
    if f then
      f = f:gsub('^"(.*)"$', "%1")
      f = f:match("^%[(.-)%]") or f:match("^([^:]+):%d+$") or f
      out[#out + 1] = f
    end
  end
  return out
end

function M.new(opts)
  if type(opts) ~= "table" or type(opts.trusted) ~= "table" then
    error("http.real_ip: opts.trusted (a list of addresses or CIDRs) expected", 2)
  end
  local trusted = {}
  for i, s in ipairs(opts.trusted) do trusted[i] = parse_cidr(s) end
  local header = (opts.header or "X-Forwarded-For"):lower()
  if header ~= "x-forwarded-for" and header ~= "forwarded" then
    error('http.real_ip: header must be "X-Forwarded-For" or "Forwarded"', 2)
  end
  local list = header == "forwarded" and forwarded_list or xff_list

  local function is_trusted(ip)
    local b = pack(ip)
    if not b then return false end
    for _, c in ipairs(trusted) do
      if in_cidr(b, c) then return true end
    end
    return false
  end

  return function(req, res, next)
    local peer = req.peer
    if peer and is_trusted(peer_ip(peer)) then
      local v = req.headers[header]
      if type(v) == "table" then v = table.concat(v, ",") end
      if v then
        local hops = list(v)
        local client
        for i = #hops, 1, -1 do
          client = hops[i]
          if not is_trusted(client) then break end
        end
        if client and pack(client) then
          req.proxy_peer = peer
          req.real_ip = client
          req.peer = (client:find(":", 1, true) and "[" .. client .. "]" or client) .. ":0"
        end
      end
    end
    if next then return next() end
  end
end

return M
