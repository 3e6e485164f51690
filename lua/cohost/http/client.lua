-- cohost.http.client: an HTTP/1.1 client in pure Lua over cosockets, with
-- keep-alive pools, timeouts, chunked bodies both ways, opt-in redirects,
-- streamed response bodies and https (the cosockets' sslhandshake:
-- verification on by default, sessions resumed). cohost.http exposes it as http.request and
-- http.client; docs/http-client.md is the user's reference.
--
-- Every function that sends or receives yields (parks the calling
-- coroutine only). Misuse (a bad header name, a body of the wrong type)
-- raises; I/O and protocol failures return nil, err with OpenResty's
-- socket strings ("timeout", "closed", "connection refused") or ours
-- ("bad chunked body", "bad status line", ...).
local cohost = require "cohost"
local crypto = require "cohost.core.crypto"
local socket = require "cohost.core.socket"
local h2 = require "cohost.http.client_h2"

local M = {}

local byte, char, find, format, gsub, lower, match, sub, upper =
  string.byte, string.char, string.find, string.format, string.gsub,
  string.lower, string.match, string.sub, string.upper
local concat, sort = table.concat, table.sort
local min = math.min

local KEEPALIVE_MS = 60000      -- idle time of a pooled connection (OpenResty's default)
local POOL_SIZE = 30            -- connections kept per host:port (OpenResty's default)
local MAX_REDIRECTS = 5
local MAX_HEADER_SIZE = 65536   -- response head limit, status line excluded
local MAX_LINE = 8192           -- status line, header line, chunk-size or trailer line
local MAX_INTERIM = 32          -- 1xx responses skipped before giving up
local READ_ALL = 1048576        -- receiveany size while reading a whole body
local CHUNK = 65536             -- default piece size of res:chunks()
local USER_AGENT = "cohost/" .. cohost.version
local DEFAULT_PORT = { http = 80, https = 443 }
local MAX_SESSIONS = 256        -- TLS sessions kept per worker for resumption

-- Methods a retry may repeat (RFC 9110 9.2.2).
local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true, OPTIONS = true, TRACE = true }
local REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
-- Socket errors that mean a pooled connection was already dead.
local STALE = { closed = true, ["connection reset by peer"] = true, ["broken pipe"] = true }

-- -- Percent-encoding ---------------------------------------------------------

local function hex(c) return format("%%%02X", byte(c)) end

-- Encodes every byte but RFC 3986's unreserved ones (letters, digits,
-- "-._~"): safe in a path segment, a query key or a query value.
function M.escape(s)
  return (gsub(tostring(s), "[^%w%-%._~]", hex))
end

-- Decodes %XX sequences (a stray "%" stays); "+" is left alone, as it
-- means a space only in form bodies and queries.
function M.unescape(s)
  return (gsub(s, "%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
end

-- query table -> "a=1&a=2&b": keys sorted so a request is reproducible;
-- an array value repeats its key, true gives the key alone, false none.
local function encode_query(q)
  local keys = {}
  for k in pairs(q) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  local out = {}
  local function put(k, v)
    if v == true then out[#out + 1] = M.escape(k)
    elseif v then out[#out + 1] = M.escape(k) .. "=" .. M.escape(v) end
  end
  for _, k in ipairs(keys) do
    local v = q[k]
    if v == nil then v = q[tonumber(k)] end
    if type(v) == "table" then
      for _, x in ipairs(v) do put(k, x) end
    else
      put(k, v)
    end
  end
  return concat(out, "&")
end

-- -- URLs ---------------------------------------------------------------------

-- "http[s]://user:pw@host:port/path?query#frag" -> { scheme, host, port,
-- ipv6, path, query (nil when absent), user, password } or nil, err. The
-- fragment is dropped: it never goes on the wire.
local function parse_url(url)
  if type(url) ~= "string" then return nil, "bad url" end
  local scheme, rest = match(url, "^(%a[%w+.-]*)://(.*)$")
  if not scheme then return nil, "bad url" end
  scheme = lower(scheme)
  if not DEFAULT_PORT[scheme] then return nil, "unsupported scheme: " .. scheme end
  rest = match(rest, "^[^#]*")
  local authority, target = match(rest, "^([^/?]*)(.*)$")
  -- The last "@" ends the userinfo: passwords with a raw "@" happen.
  local userinfo, hostport = match(authority, "^(.*)@(.*)$")
  if not userinfo then hostport = authority end
  local u = { scheme = scheme }
  local port
  if sub(hostport, 1, 1) == "[" then
    u.host, port = match(hostport, "^%[([%x:.]+)%](.*)$")
    u.ipv6 = true
  else
    u.host, port = match(hostport, "^([%w%-%._~%%!$&'()*+,;=]+)(.*)$")
  end
  if not u.host then return nil, "bad url" end
  if port == "" or port == ":" then
    u.port = DEFAULT_PORT[scheme]
  else
    port = match(port, "^:(%d%d?%d?%d?%d?)$")
    u.port = tonumber(port)
    if not u.port or u.port < 1 or u.port > 65535 then return nil, "bad url" end
  end
  if userinfo then
    local user, pw = match(userinfo, "^([^:]*):(.*)$")
    u.user, u.password = M.unescape(user or userinfo), pw and M.unescape(pw) or ""
  end
  local path, query = match(target, "^([^?]*)%?(.*)$")
  u.path, u.query = path or target, query
  if u.path == "" then u.path = "/" end
  return u
end

-- The Host header of u: brackets around IPv6, the port unless it is the
-- scheme's default.
local function authority(u)
  local host = u.ipv6 and "[" .. u.host .. "]" or u.host
  return u.port == DEFAULT_PORT[u.scheme] and host or host .. ":" .. u.port
end

-- Removes "." and ".." segments (RFC 3986 5.2.4) from an absolute path.
local function remove_dots(path)
  local out = {}
  local trailing = match(path, "/%.?%.?$") and true
  for seg in path:gmatch("[^/]+") do
    if seg == ".." then out[#out] = nil
    elseif seg ~= "." then out[#out + 1] = seg end
  end
  local s = "/" .. concat(out, "/")
  if trailing and s ~= "/" then s = s .. "/" end
  return s
end

-- The URL a Location header points to, relative to u.
local function resolve(u, loc)
  loc = match(loc, "^[^#]*")
  if match(loc, "^%a[%w+.-]*:") then return loc end
  if sub(loc, 1, 2) == "//" then return u.scheme .. ":" .. loc end
  local origin = u.scheme .. "://" .. authority(u)
  if sub(loc, 1, 1) == "/" then return origin .. loc end
  if sub(loc, 1, 1) == "?" then return origin .. u.path .. loc end
  if loc == "" then return origin .. u.path .. (u.query and "?" .. u.query or "") end
  local q = find(loc, "?", 1, true)
  local p, rest = loc, ""
  if q then p, rest = sub(loc, 1, q - 1), sub(loc, q) end
  return origin .. remove_dots((match(u.path, "^(.*/)") or "/") .. p) .. rest
end

-- -- Headers ------------------------------------------------------------------

-- Response headers: lower-case keys; other spellings find them through
-- __index (res.headers["Content-Type"]). A repeated header is an array of
-- its values in order, as the server's req.headers (docs/http.md).
local Headers = {
  __index = function(t, k)
    if type(k) ~= "string" then return nil end
    local l = lower(k)
    if l ~= k then return rawget(t, l) end
  end,
}

local function add_header(h, name, value)
  local k = lower(name)
  local old = rawget(h, k)
  if old == nil then h[k] = value
  elseif type(old) == "table" then old[#old + 1] = value
  else h[k] = { old, value } end
end

-- A Headers table from { name, value, ... } (HTTP/2's fields).
local function new_headers(list)
  local h = setmetatable({}, Headers)
  for i = 1, #list, 2 do add_header(h, list[i], list[i + 1]) end
  return h
end

local function first(v)
  if type(v) == "table" then return v[1] end
  return v
end

-- True if the header's comma-separated values hold token (lower-case).
local function has_token(v, token)
  if v == nil then return false end
  if type(v) == "table" then v = concat(v, ",") end
  for t in lower(v):gmatch("[^,%s]+") do
    if t == token then return true end
  end
  return false
end

local TOKEN = "^[!#$%%&'*+%-.^_`|~%w]+$"

-- An ordered, case-insensitive header set for a request: list of
-- {name, value} (false where removed) and index[lower name] -> position.
local function header_set()
  return { list = {}, index = {} }
end

local function hs_set(hs, name, value)
  local k = lower(name)
  local i = hs.index[k]
  if value == nil then
    if i then hs.list[i], hs.index[k] = false, nil end
  elseif i then
    hs.list[i] = { name, value }
  else
    hs.list[#hs.list + 1] = { name, value }
    hs.index[k] = #hs.list
  end
end

local function hs_get(hs, name)
  local i = hs.index[lower(name)]
  return i and hs.list[i][2]
end

-- Copies a user header table into hs. A value may be an array (repeated
-- header) or false (suppresses a header the client would add, such as
-- User-Agent). Names must be tokens and values free of CR, LF and NUL:
-- anything else could split the request, so it raises.
local function hs_merge(hs, headers)
  if headers == nil then return end
  if type(headers) ~= "table" then error("cohost.http: headers must be a table", 0) end
  for name, value in pairs(headers) do
    if type(name) ~= "string" or not match(name, TOKEN) then
      error("cohost.http: bad header name: " .. tostring(name), 0)
    end
    local values = type(value) == "table" and value or value == false and {} or { value }
    for _, v in ipairs(values) do
      if type(v) ~= "string" and type(v) ~= "number" then
        error("cohost.http: bad value for header " .. name, 0)
      end
      if find(tostring(v), "[%z\r\n]") then
        error("cohost.http: CR, LF or NUL in header " .. name, 0)
      end
    end
    hs_set(hs, name, value)
  end
end

-- -- Reading a response head --------------------------------------------------

-- Yields. One line through it, a receiveuntil iterator, never buffering
-- more than MAX_LINE bytes of it (a server cannot make us hold an endless
-- line). Returns the line, or nil, err, partial; too_long for a line of
-- MAX_LINE bytes or more.
local function read_line(it, too_long)
  local line, err, partial = it(MAX_LINE)
  if not line then return nil, err, partial end
  if #line >= MAX_LINE then return nil, too_long end
  it()   -- the pattern was consumed: this call only rearms the iterator
  return line
end

-- Yields. Reads one response head, status line and header block, through
-- lf (a receiveuntil("\n") iterator; a CR before the LF is dropped, a
-- bare LF tolerated as RFC 9112 2.2 allows). Returns status, reason,
-- version, headers, or nil, err, quiet where quiet is true when the
-- connection ended before any byte of the response (a stale pooled
-- connection).
local function read_head(lf)
  local line, err, partial = read_line(lf, "bad status line")
  if not line then return nil, err, partial == "" end
  local v, status, rest = match(line, "^HTTP/(%d%.%d) ([1-9]%d%d)([^%z\1-\8\10-\31\127]*)\r?$")
  if not v or (rest ~= "" and sub(rest, 1, 1) ~= " ") then return nil, "bad status line" end
  local headers = setmetatable({}, Headers)
  local size = 0
  while true do
    line, err = read_line(lf, "header too large")
    if not line then return nil, err end
    if line == "" or line == "\r" then break end
    size = size + #line + 1
    if size > MAX_HEADER_SIZE then return nil, "header too large" end
    -- Strict: no obs-fold, no whitespace before the colon, token names,
    -- no control bytes but tabs in values.
    local name, value = match(line, "^([^:]+):[ \t]*(.-)[ \t]*\r?$")
    if not name or not match(name, TOKEN) or find(value, "[%z\1-\8\10-\31\127]") then
      return nil, "bad header"
    end
    add_header(headers, name, value)
  end
  return tonumber(status), sub(rest, 2), tonumber(v), headers
end

-- How the body of a response is delimited (RFC 9112 6.3): "none",
-- "chunked", "length" (and the length) or "close"; nil, err for a bad
-- Content-Length. The third result is true when the framing headers
-- conflict, so the connection must not be reused.
local function framing(method, status, headers)
  if method == "HEAD" or status < 200 or status == 204 or status == 304 then
    return "none", 0
  end
  local te, cl = headers["transfer-encoding"], headers["content-length"]
  if te then
    if type(te) == "table" then te = concat(te, ",") end
    -- The last coding decides; anything but chunked runs until close.
    local last = match(lower(te), "([^,%s]*)[%s]*$")
    return last == "chunked" and "chunked" or "close", 0, cl ~= nil
  end
  if cl then
    -- Repeated or listed values must agree (RFC 9110 8.6).
    local n
    for x in ((type(cl) == "table" and concat(cl, ",") or cl) .. ","):gmatch("([^,]*),") do
      x = match(x, "^[ \t]*(%d+)[ \t]*$")
      if not x or #x > 15 or (n and tonumber(x) ~= n) then return nil, "bad content-length" end
      n = tonumber(x)
    end
    return "length", n
  end
  return "close", 0
end

-- -- Body readers -------------------------------------------------------------

-- A reader owns the socket until the body has been read: then the socket
-- goes to the pool (r.reuse) or is closed. Fields: sock, mode, left (bytes
-- left of the body or of the current chunk), total, max, reuse, idle,
-- pool_size, done, err, line (a CRLF reader for chunk framing).

local function finish(r)
  r.done = true
  local sock = r.sock
  if not sock then return end
  r.sock = nil
  if not (r.reuse and sock:setkeepalive(r.idle, r.pool_size)) then sock:close() end
end

local function fail(r, err)
  r.done, r.err = true, err
  if r.sock then
    r.sock:close()
    r.sock = nil
  end
  return nil, err
end

-- Strict chunk-size line: hex digits, then nothing or BWS ";" extensions
-- (ignored). Returns the size or nil.
local function chunk_size(line)
  local digits, ext = match(line, "^(%x+)(.*)$")
  if not digits then return nil end
  digits = match(digits, "^0*(.-)$")
  if #digits > 13 then return nil end   -- 2^52: exact in a double
  if ext ~= "" and (not match(ext, "^[ \t]*;") or find(ext, "[%z\1-\8\10-\31\127]")) then
    return nil
  end
  return tonumber(digits ~= "" and digits or "0", 16)
end

-- Yields. Starts the next chunk: true with r.left set, false at the end of
-- the body (trailers skipped, connection released), or nil, err.
local function next_chunk(r)
  local line, err = read_line(r.line, "bad chunked body")
  if not line then return nil, err end
  local size = chunk_size(line)
  if not size then return nil, "bad chunked body" end
  if size == 0 then
    local seen = 0
    repeat
      line, err = read_line(r.line, "bad chunked body")
      if not line then return nil, err end
      seen = seen + #line + 2
      if seen > MAX_HEADER_SIZE then return nil, "bad chunked body" end
    until line == ""
    finish(r)
    return false
  end
  if r.max and r.total + size > r.max then return nil, "body too large" end
  r.left = size
  return true
end

-- Yields. Up to n body bytes (at least 1), nil at the end, or nil, err.
local function read_some(r, n)
  if r.h2 then return r:some(n) end
  if r.done then return nil, r.err end
  local sock = r.sock
  if r.mode == "chunked" and r.left == 0 then
    local more, err = next_chunk(r)
    if more == nil then return fail(r, err) end
    if not more then return nil end
  end
  local want = r.mode == "close" and n or min(n, r.left)
  local data, err = sock:receiveany(want)
  if not data then
    if r.mode == "close" and err == "closed" then
      finish(r)
      return nil
    end
    return fail(r, err)
  end
  r.total = r.total + #data
  if r.max and r.total > r.max then return fail(r, "body too large") end
  if r.mode ~= "close" then
    r.left = r.left - #data
    if r.left == 0 then
      if r.mode == "length" then
        finish(r)
      else
        local crlf
        crlf, err = sock:receive(2)
        if crlf ~= "\r\n" then return fail(r, crlf and "bad chunked body" or err) end
      end
    end
  end
  return data
end

-- Yields. The rest of the body as one string, or nil, err.
local function read_all(r)
  if r.h2 then return r:all() end
  if r.done then
    if r.err then return nil, r.err end
    return ""
  end
  if r.mode == "length" then
    -- One receive of the exact size: no pieces to join.
    local data, err = r.sock:receive(r.left)
    if not data then return fail(r, err) end
    r.total, r.left = r.total + #data, 0
    finish(r)
    return data
  end
  local parts = {}
  while true do
    local data, err = read_some(r, READ_ALL)
    if not data then
      if err then return nil, err end
      return concat(parts)
    end
    parts[#parts + 1] = data
  end
end

local function new_reader(sock, mode, len, p, reuse)
  local r = {
    sock = sock, mode = mode, left = len, total = 0, max = p.max_body_size,
    reuse = reuse, idle = p.keepalive_timeout, pool_size = p.keepalive_pool,
  }
  if mode == "chunked" then r.line = sock:receiveuntil("\r\n") end
  if mode == "none" or (mode == "length" and len == 0) then finish(r)
  elseif mode == "length" and r.max and len > r.max then fail(r, "body too large") end
  return r
end

-- -- Responses ----------------------------------------------------------------

local Response = {}
Response.__index = Response

-- First value of a response header (case-insensitive), or nil.
function Response:header(name)
  return first(self.headers[name])
end

local function reader_of(res)
  local r = rawget(res, "_reader")
  if not r then error("cohost.http: res:read() needs a request made with opts.stream", 3) end
  return r
end

-- Yields. Streaming only: up to n bytes of the body (at least 1), nil at
-- the end, or nil, err.
function Response:read(n)
  return read_some(reader_of(self), n or CHUNK)
end

-- Streaming only: an iterator over body pieces of at most size bytes;
-- raises on error.
function Response:chunks(size)
  local r = reader_of(self)
  size = size or CHUNK
  return function()
    local data, err = read_some(r, size)
    if err then error("response body: " .. err, 2) end
    return data
  end
end

-- Yields. Streaming only (a non-streamed response has res.body, the
-- string): the rest of the body, or nil, err.
function Response:body()
  return read_all(reader_of(self))
end

-- Streaming only: ms (0: none on HTTP/2) for each later read of the body,
-- in place of the request's read_timeout (a caller with a deadline for
-- the whole response, as a gRPC stream, shortens it read by read).
function Response:set_timeout(ms)
  local r = reader_of(self)
  if r.h2 then r.ms = ms else r.sock:settimeout(ms) end
end

-- Drops the connection of a streamed body not read to its end (a body
-- read to its end has already released it). Idempotent.
function Response:close()
  local r = rawget(self, "_reader")
  if r and r.h2 then r:close("closed")
  elseif r and not r.done then fail(r, "closed") end
end

-- -- One exchange -------------------------------------------------------------

-- Yields. Sends the body: a string (already in the head's send), or a
-- function returning pieces then nil, framed chunked unless p.length is
-- known. Returns true or nil, err.
local function send_body(sock, p)
  local body = p.body
  local sent = 0
  while true do
    local ok, piece = pcall(body)
    if not ok then
      sock:close()
      error(piece, 0)
    end
    if piece == nil then break end
    if type(piece) ~= "string" then
      sock:close()
      error("cohost.http: body function returned a " .. type(piece), 0)
    end
    if #piece > 0 then
      local err
      if p.length then
        sent = sent + #piece
        if sent > p.length then return nil, "body longer than content-length" end
        ok, err = sock:send(piece)
      else
        ok, err = sock:send({ format("%x\r\n", #piece), piece, "\r\n" })
      end
      if not ok then return nil, err end
    end
  end
  if not p.length then return sock:send("0\r\n\r\n") end
  if sent ~= p.length then return nil, "body shorter than content-length" end
  return true
end

-- TLS sessions for resumption, by pool name: the latest one a handshake
-- with that peer gave (a TLS 1.3 ticket fills it in after the handshake).
-- Per worker, as each worker has its own Lua state. When MAX_SESSIONS
-- peers are held the table starts afresh: what that costs is one full
-- handshake per peer, nothing else.
local sessions, nsessions = {}, 0

-- Yields. The TLS handshake on a new connection, within the connect
-- timeout, resuming the peer's last session when there is one. true, or
-- nil, err (sslhandshake's: "handshake failed", "20: unable to get local
-- issuer certificate", "certificate host mismatch", "timeout"), the
-- connection then closed.
local function handshake(sock, p)
  local key = p.pool.pool
  local sess, err = sock:sslhandshake(sessions[key], p.server_name, p.verify, nil, p.tls)
  if not sess then return nil, err end
  if sessions[key] == nil then
    if nsessions >= MAX_SESSIONS then sessions, nsessions = {}, 0 end
    nsessions = nsessions + 1
  end
  sessions[key] = sess
  return true
end

-- Yields. fn(sock, ...); if it raises (the task killed), sock is closed
-- before the error goes on: a dial cut short leaves no half-made
-- connection for the garbage collector to find.
local function closing_on_raise(fn, sock, ...)
  local ok, a, b = pcall(fn, sock, ...)
  if not ok then
    sock:close()
    error(a, 0)
  end
  return a, b
end

-- Yields. A connected socket for p (handshaked, for https), or nil, err.
-- fresh skips pooled connections: each one taken from the pool is closed
-- (they are probably as stale as the one that failed). A pooled https
-- connection keeps its TLS state and is never handshaked again.
local function dial(p, fresh)
  while true do
    local sock = cohost.tcp()
    sock:settimeouts(p.connect_timeout or 0, p.send_timeout or 0, p.read_timeout or 0)
    local ok, err = closing_on_raise(sock.connect, sock, p.host, p.port, p.pool)
    if not ok then return nil, err end
    local reused = sock:getreusedtimes() > 0
    if not reused then
      if p.tls then
        ok, err = closing_on_raise(handshake, sock, p)
        if not ok then return nil, err end
      end
      return sock
    end
    if not fresh then return sock end
    sock:close()
  end
end

-- Yields. One request on one connection. Returns res, or nil, err, retry
-- where retry says a reused connection was found dead before any byte of
-- the response came, so the request may be sent again on a fresh one.
local function exchange(p, fresh)
  local sock, err = p.sock, nil
  p.sock = nil   -- a connection HTTP/2's ALPN gave back: used once
  if not sock then sock, err = dial(p, fresh) end
  if not sock then return nil, err end
  local times = sock:getreusedtimes()
  local reused = times > 0
  local ok
  if type(p.body) == "function" then
    ok, err = sock:send(p.head)
    if ok then ok, err = send_body(sock, p) end
  else
    ok, err = sock:send(p.body and { p.head, p.body } or p.head)
  end
  local send_err
  if not ok then
    if reused and STALE[err] then
      sock:close()
      return nil, err, true
    end
    -- A server may answer and close before reading the whole body (a
    -- 413): after a reset or a broken pipe, read what it said.
    if err ~= "broken pipe" and err ~= "connection reset by peer" then
      sock:close()
      return nil, err
    end
    send_err = err
  end
  local lf = sock:receiveuntil("\n")
  local status, reason, version, headers
  for i = 1, MAX_INTERIM do
    local quiet
    status, reason, version, headers = read_head(lf)
    if not status then
      err, quiet = reason, version
      sock:close()
      return nil, send_err or err, reused and quiet and i == 1 and STALE[err] and true
    end
    -- 1xx interim responses (100 Continue, 102, 103) precede the real
    -- one; 101 ends HTTP on this connection and is returned as is.
    if status >= 200 or status == 101 then break end
  end
  if status < 200 and status ~= 101 then
    sock:close()
    return nil, "too many interim responses"
  end
  local mode, len, conflict = framing(p.method, status, headers)
  if not mode then
    sock:close()
    return nil, len
  end
  local reuse = p.keepalive and not send_err and not conflict and version >= 1.1
    and status ~= 101 and mode ~= "close" and not has_token(headers["connection"], "close")
  local res = setmetatable({
    status = status, reason = reason, version = version, headers = headers, reused = times,
  }, Response)
  local r = new_reader(sock, mode, len, p, reuse)
  if p.stream then
    res._reader = r
    return res
  end
  local body
  body, err = read_all(r)
  if not body then return nil, err end
  res.body = body
  return res
end

-- -- Requests -----------------------------------------------------------------

-- The wire form of the request for URL u: p with host, port, pool, head,
-- body, length (nil: chunked) and the options exchange reads.
local function prepare(u, method, headers, body, opts)
  local hs = header_set()
  hs_set(hs, "Host", authority(u))
  hs_set(hs, "User-Agent", USER_AGENT)
  if u.user then
    hs_set(hs, "Authorization", "Basic " .. crypto.encode_base64(u.user .. ":" .. u.password))
  end
  hs_merge(hs, headers)
  local length
  if type(body) == "string" then
    length = #body
  elseif type(body) == "function" then
    local cl = hs_get(hs, "Content-Length")
    if cl then
      length = tonumber(match(tostring(first(cl)), "^%s*(%d+)%s*$"))
      if not length then error("cohost.http: bad Content-Length header", 0) end
    end
  elseif body ~= nil then
    error("cohost.http: body must be a string or a function", 0)
  elseif method == "POST" or method == "PUT" or method == "PATCH" then
    length = 0   -- servers may refuse a body-less POST without it (411)
  end
  -- The client frames the body itself: user framing headers would lie.
  hs_set(hs, "Content-Length", nil)
  hs_set(hs, "Transfer-Encoding", nil)
  if length then hs_set(hs, "Content-Length", tostring(length))
  elseif body ~= nil then hs_set(hs, "Transfer-Encoding", "chunked") end
  local keepalive = opts.keepalive ~= false
  if not keepalive then hs_set(hs, "Connection", "close") end
  -- Bytes a request-target cannot carry raw are percent-encoded.
  local target = gsub(u.path, "[%c \128-\255\"<>\\^`{|}]", hex)
  if u.query then target = target .. "?" .. gsub(u.query, "[%c \128-\255\"<>\\^`{|}]", hex) end
  local parts = { method, " ", target, " HTTP/1.1\r\n" }
  for _, kv in ipairs(hs.list) do
    if kv and kv[2] ~= false then
      local values = type(kv[2]) == "table" and kv[2] or { kv[2] }
      for _, v in ipairs(values) do
        parts[#parts + 1] = kv[1]
        parts[#parts + 1] = ": "
        parts[#parts + 1] = tostring(v)
        parts[#parts + 1] = "\r\n"
      end
    end
  end
  parts[#parts + 1] = "\r\n"
  local t = opts.timeout
  -- A pooled https connection was verified (or not) for one name, CA and
  -- client certificate: they are part of its pool's name.
  local pool = "http:" .. u.host .. ":" .. u.port
  local tls, server_name, verify
  local http2 = opts.http2
  if http2 ~= nil and http2 ~= false and http2 ~= true and http2 ~= "prior-knowledge" then
    error("cohost.http: http2 must be true, false or \"prior-knowledge\"", 0)
  end
  local use_h2 = http2 ~= false and (u.scheme == "https" or http2 == "prior-knowledge")
  if u.scheme == "https" then
    server_name, verify = opts.server_name or u.host, opts.verify ~= false
    tls = { ca_file = opts.ca_file, cert = opts.client_cert, key = opts.client_key,
            alpn = use_h2 and "\2h2\8http/1.1" or nil }
    pool = concat({ "https", u.host, u.port, server_name, verify and "verify" or "noverify",
                    tls.ca_file or "", tls.cert or "" }, ":")
  elseif use_h2 then
    pool = "h2c:" .. u.host .. ":" .. u.port   -- never an HTTP/1.1 pooled socket
  end
  return {
    tls = tls, server_name = server_name, verify = verify,
    host = u.host, port = u.port, method = method, head = concat(parts), body = body,
    h2 = use_h2, hs = hs, target = target, scheme = u.scheme, authority = authority(u),
    length = length, keepalive = keepalive, stream = opts.stream,
    max_body_size = opts.max_body_size,
    connect_timeout = opts.connect_timeout or t, send_timeout = opts.send_timeout or t,
    read_timeout = opts.read_timeout or t,
    keepalive_timeout = opts.keepalive_timeout or KEEPALIVE_MS,
    keepalive_pool = opts.keepalive_pool or POOL_SIZE,
    pool = { pool = pool, pool_size = opts.keepalive_pool or POOL_SIZE },
  }
end

-- What the HTTP/2 half fills in: the same res as HTTP/1.1's; and where
-- it goes on when a retry's new connection chose HTTP/1.1 by ALPN.
local H2_UI = { Response = Response, new_headers = new_headers }
function H2_UI.h1(p, sock)
  p.sock = sock
  return exchange(p, false)
end

-- Yields. One request to URL u (no redirects), retried once on a fresh
-- connection when a pooled one turns out dead and the request is safe to
-- send again. pools (a client's, or nil) gets the request's pool name.
local function request_once(u, method, headers, body, opts, pools)
  local p = prepare(u, method, headers, body, opts)
  if pools then pools[p.pool.pool] = true end
  if p.h2 then
    local res, err, sock = h2.request(p, dial, H2_UI)
    if not sock then return res, err end
    p.sock = sock   -- ALPN chose HTTP/1.1 on this connection
  end
  local res, err, retry = exchange(p, false)
  if retry and IDEMPOTENT[method] and type(body) ~= "function" then
    res, err = exchange(p, true)
  end
  return res, err
end

-- A copy of headers without the names in drop (lower-case set).
local function without(headers, drop)
  if not headers then return nil end
  local out = {}
  for k, v in pairs(headers) do
    if not drop[lower(k)] then out[k] = v end
  end
  return out
end

local BODY_HEADERS = { ["content-length"] = true, ["transfer-encoding"] = true, ["content-type"] = true }
local CREDENTIALS = { authorization = true, cookie = true, ["proxy-authorization"] = true }

-- Yields. request(url [, opts]) -> res or nil, err. See docs/http-client.md.
-- pools as request_once's.
local function request(url, opts, pools)
  opts = opts or {}
  local method = upper(opts.method or "GET")
  if not match(method, TOKEN) then error("cohost.http: bad method: " .. method, 2) end
  local headers, body = opts.headers, opts.body
  local u, err = parse_url(url)
  if not u then return nil, err end
  if opts.query then
    local q = encode_query(opts.query)
    if q ~= "" then u.query = u.query and u.query ~= "" and u.query .. "&" .. q or q end
  end
  local max = opts.max_redirects or MAX_REDIRECTS
  local hops = 0
  while true do
    local res
    res, err = request_once(u, method, headers, body, opts, pools)
    if not res then return nil, err end
    res.url = url
    local loc = first(res.headers["location"])
    if not (opts.follow_redirects and REDIRECT[res.status] and loc) then return res end
    local keep = res.status == 307 or res.status == 308
    -- A streamed body cannot be sent twice.
    if keep and type(body) == "function" then return res end
    if hops >= max then
      res:close()
      return nil, "too many redirects"
    end
    hops = hops + 1
    if rawget(res, "_reader") then
      -- Drain a streamed redirect body so its connection can be reused.
      read_all(res._reader)
    end
    -- 303, and 301/302 after a POST (what browsers and curl do), go on as
    -- GET without the body; 307 and 308 keep both.
    if not keep and (res.status == 303 and method ~= "HEAD" or method == "POST") then
      method, body = "GET", nil
      headers = without(headers, BODY_HEADERS)
    end
    url = resolve(u, loc)
    local nu
    nu, err = parse_url(url)
    if not nu then return nil, err end
    if lower(nu.host) ~= lower(u.host) or nu.port ~= u.port or nu.scheme ~= u.scheme then
      headers = without(headers, CREDENTIALS)
    end
    u = nu
  end
end

function M.request(url, opts)
  return request(url, opts)
end

-- An answer that was there at once (HTTP/1.1), in start's shape.
local Ready = {}
Ready.__index = Ready
function Ready:finish() return self.res, self.err end
function Ready:close()
  if self.res then self.res:close() end
end

-- Yields. start(url, opts [, pools]) -> pending, or nil, err: a request
-- in two halves, for cohost.grpc.client (not documented for users):
-- returns once the request is sent, and pending:finish([ms]) -> res, or
-- nil, err, waits for the answer; pending:close() drops it. HTTP/2
-- only in effect: over HTTP/1.1 (ALPN's choice) the whole exchange
-- happens here. No redirects, no opts.query. pools as request_once's.
function M.start(url, opts, pools)
  local method = upper(opts.method or "GET")
  if not match(method, TOKEN) then error("cohost.http: bad method: " .. method, 2) end
  local u, err = parse_url(url)
  if not u then return nil, err end
  local p = prepare(u, method, opts.headers, opts.body, opts)
  if pools then pools[p.pool.pool] = true end
  if p.h2 then
    local pending, sock
    pending, err, sock = h2.start(p, dial, H2_UI)
    if pending then return pending end
    if not sock then return nil, err end
    p.sock = sock
  end
  local res
  res, err = exchange(p, false)
  return setmetatable({ res = res, err = err }, Ready)
end

-- Closes the connections of the pools named in pools (a set): their idle
-- HTTP/1.1 connections at once, their HTTP/2 connection once its
-- streams have ended.
function M.close_pools(pools)
  for key in pairs(pools) do
    h2.close(key)
    socket.close_pool(key)
    pools[key] = nil
  end
end

-- -- Clients ------------------------------------------------------------------

local Client = {}
Client.__index = Client

-- Default options under per-call ones; headers and query merge key by key
-- (headers case-insensitively).
local function merge(defaults, opts)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  if not opts then return o end
  for k, v in pairs(opts) do o[k] = v end
  if defaults.headers and opts.headers then
    local h, names = {}, {}
    for k, v in pairs(defaults.headers) do
      h[k] = v
      names[lower(k)] = k
    end
    for k, v in pairs(opts.headers) do
      local old = names[lower(k)]
      if old then h[old] = nil end
      h[k] = v
    end
    o.headers = h
  end
  if defaults.query and opts.query then
    local q = {}
    for k, v in pairs(defaults.query) do q[k] = v end
    for k, v in pairs(opts.query) do q[k] = v end
    o.query = q
  end
  return o
end

-- new([opts]) -> a client holding default options for its requests.
function M.new(opts)
  if opts ~= nil and type(opts) ~= "table" then error("cohost.http: options must be a table", 2) end
  local defaults = {}
  for k, v in pairs(opts or {}) do defaults[k] = v end
  return setmetatable({ opts = defaults, pools = {} }, Client)
end

-- Yields. client:request(url [, opts]).
function Client:request(url, opts)
  return request(url, merge(self.opts, opts), self.pools)
end

-- client:close(): closes the connections this client's requests went on
-- (docs/http-client.md). The client stays usable.
function Client:close()
  M.close_pools(self.pools)
end

-- Yields. client:get(url [, opts]), and head, delete, options.
for _, m in ipairs { "get", "head", "delete", "options" } do
  Client[m] = function(self, url, opts)
    local o = merge(self.opts, opts)
    o.method = upper(m)
    return request(url, o, self.pools)
  end
end

-- Yields. client:post(url, body [, opts]), and put, patch.
for _, m in ipairs { "post", "put", "patch" } do
  Client[m] = function(self, url, body, opts)
    local o = merge(self.opts, opts)
    o.method, o.body = upper(m), body
    return request(url, o, self.pools)
  end
end

return M
