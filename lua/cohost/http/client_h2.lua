-- cohost.http.client's HTTP/2 half: one multiplexed connection per origin
-- and worker (cohost.core.h2client, on nghttp2), shared by every task that
-- sends a request there; each request is a stream of its own and waits
-- only for it. client.lua decides when HTTP/2 is used (ALPN chose "h2" on
-- https, or http2 = "prior-knowledge" on http) and builds the request;
-- this file sends it and reads the answer into the same res shape as
-- HTTP/1.1 (res.version == 2), plus res.trailers. docs/http-client.md is
-- the user's reference.
local cohost = require "cohost"
local core = require "cohost.core.h2client"
local semaphore = require "cohost.semaphore"

local M = {}

local concat, lower = table.concat, string.lower

local DEFAULT_MS = 60000    -- a timeout left unset (the cosockets' default)
local READ_ALL = 1048576    -- read size while reading a whole body
local MAX_ORIGINS = 256     -- origins remembered as HTTP/1.1-only per worker
local MAX_TRIES = 4         -- sends of one request a server refuses (a GOAWAY
                            -- after N requests, as nginx's keepalive_requests,
                            -- refuses the rest of a burst once per connection)

-- Methods a retry may repeat (RFC 9110 9.2.2).
local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true, OPTIONS = true, TRACE = true }

-- Fields HTTP/2 forbids (RFC 9113 8.2.2): the connection's, not the
-- request's. Host becomes :authority.
local HOP = {
  host = true, connection = true, ["keep-alive"] = true, ["proxy-connection"] = true,
  ["transfer-encoding"] = true, upgrade = true, te = true,
}

-- Per worker (each has its own Lua state): the connection of each origin,
-- the dials in progress (tasks that find one wait for it rather than open
-- a connection of their own), and the origins whose ALPN chose HTTP/1.1
-- (no wait for them; the table starts afresh when full).
local conns, dialing = {}, {}
local h1_only, nh1 = {}, 0

-- The request's header fields, pseudo-headers first, names lower-case.
local function fields(p)
  local f = { ":method", p.method, ":scheme", p.scheme, ":authority", p.authority,
              ":path", p.target }
  for _, kv in ipairs(p.hs.list) do
    local name = kv and kv[2] ~= false and lower(kv[1])
    if name and (not HOP[name] or (name == "te" and kv[2] == "trailers")) then
      local values = type(kv[2]) == "table" and kv[2] or { kv[2] }
      for _, v in ipairs(values) do
        f[#f + 1] = name
        f[#f + 1] = tostring(v)
      end
    end
  end
  return f
end

-- -- Body reader ----------------------------------------------------------------

-- What res:read() and friends use (client.lua dispatches on r.h2): the
-- stream until its body has been read, then the trailers on res.
local Reader = {}
Reader.__index = Reader

function Reader:fail(err)
  self.done, self.err = true, err
  if self.st then
    self.st:close()
    self.st = nil
  end
  return nil, err
end

-- Yields. Up to n bytes (at least 1), nil at the end, or nil, err.
function Reader:some(n)
  if self.done then return nil, self.err end
  local data, err = self.st:read(n, self.ms)
  if err and self.sender and self.sender.err then err = self.sender.err end
  if data then
    self.total = self.total + #data
    if self.max and self.total > self.max then return self:fail("body too large") end
    return data
  end
  if err then return self:fail(err) end
  self.done = true
  self.res.trailers = self.new_headers(self.st:trailers())
  self.st:close()
  self.st = nil
  return nil
end

-- Yields. The rest of the body, or nil, err.
function Reader:all()
  local parts = {}
  while true do
    local data, err = self:some(READ_ALL)
    if not data then
      if err then return nil, err end
      return concat(parts)
    end
    parts[#parts + 1] = data
  end
end

function Reader:close(err)
  if not self.done then self:fail(err) end
end

-- -- One exchange ---------------------------------------------------------------

-- Yields. Sends p's body on st: a string, or a function's pieces. true,
-- or nil, err, or raises what the function raised (the stream reset).
local function send_body(st, p, ms)
  local body = p.body
  if type(body) == "string" then return st:write(body, true, ms) end
  local sent = 0
  while true do
    local ok, piece = pcall(body)
    if not ok then
      st:reset()
      error(piece, 0)
    end
    if piece == nil then break end
    if type(piece) ~= "string" then
      st:reset()
      error("cohost.http: body function returned a " .. type(piece), 0)
    end
    sent = sent + #piece
    if p.length and sent > p.length then return nil, "body longer than content-length" end
    local err
    ok, err = st:write(piece, false, ms)
    if not ok then return nil, err end
  end
  if p.length and sent ~= p.length then return nil, "body shorter than content-length" end
  return st:write("", true, ms)
end

-- Yields. Opens p's stream on conn and sends its body (a function body
-- of a streamed request: hands it to a task of its own). Returns the
-- sent request x (st, sender, send_err, read_ms), or nil, err, retry where
-- retry says the request may go again on another connection: the server
-- did not take it (refused, or the connection was gone before the stream
-- opened).
local function send(conn, p)
  local has_body = p.body ~= nil and (type(p.body) == "function" or #p.body > 0)
  local st, err = conn:open(fields(p), has_body)
  if not st then return nil, err, true end
  local send_ms = p.send_timeout or DEFAULT_MS
  local x = { st = st, read_ms = p.read_timeout or DEFAULT_MS }
  if has_body and p.stream and type(p.body) == "function" then
    -- Both ways at once (gRPC's bidirectional streaming): the body has a
    -- task of its own, and the answer can be read while it is sent. What
    -- stops it (a raise, a timeout) resets the stream; the reader then
    -- reports that error instead of the reset.
    local sender = {}
    x.sender = sender
    cohost.spawn(function()
      local ok, sent, err = pcall(send_body, st, p, send_ms)
      if ok and sent then return end
      sender.err = ok and err or tostring(sent)
      if ok and err ~= "closed" then st:reset() end
    end)
  elseif has_body then
    local ok
    ok, err = send_body(st, p, send_ms)
    -- The server may have answered without reading it all (a 413): look
    -- for the answer before giving up, unless the request never went.
    if not ok then
      if err == "refused" or err == "timeout" or err == "no memory" or
         err:find("content-length", 1, true) then
        st:close()
        return nil, err, err == "refused" and type(p.body) ~= "function"
      end
      x.send_err = err
    end
  end
  return x
end

-- Yields. The answer to x, sent by send: waits up to ms (default
-- read_timeout) for its head. Returns res, or nil, err, retry where retry
-- says the request may go again on another connection: the server did
-- not take it (refused), or a connection that had served before ended
-- before any answer to an idempotent request (a server closing an idle
-- connection without GOAWAY, as HTTP/1.1's stale pooled connections).
local function answer(x, p, ui, ms)
  local st, sender = x.st, x.sender
  local status, list = st:head(ms or x.read_ms)
  if not status then
    st:close()
    if sender and sender.err then list = sender.err end
    local replayable = type(p.body) ~= "function"
    return nil, x.send_err or list, replayable and (list == "refused" or
      list == "closed" and p.h2_reused == 1 and IDEMPOTENT[p.method])
  end
  local res = setmetatable({
    status = status, reason = "", version = 2, headers = ui.new_headers(list),
    reused = p.h2_reused or 0,
  }, ui.Response)
  local r = setmetatable({
    h2 = true, st = st, res = res, ms = x.read_ms, total = 0, max = p.max_body_size,
    new_headers = ui.new_headers, sender = sender,
  }, Reader)
  if p.stream then
    res._reader = r
    return res
  end
  local body, err = r:all()
  if not body then return nil, err end
  res.body = body
  return res
end

-- -- Connections -------------------------------------------------------------------

-- The origin's usable connection, or nil (a spent one is dropped).
local function usable(key)
  local c = conns[key]
  if c and c:usable() then return c end
  conns[key] = nil
end

-- Yields. Waits while another task dials key. Returns true when no dial
-- is (any longer) under way: the caller then looks for the connection or
-- dials itself; or nil, err: that dial's error (its waiters share its
-- outcome, as they would have dialed the same address), or "timeout"
-- when the caller's connect_timeout passed first. A dial whose task was
-- killed has no outcome: its waiters go on, and the first of them to run
-- dials (the others wait for that one).
local function await_dial(key, p)
  local ms = p.connect_timeout
  local limited = ms and ms > 0
  while true do
    local d = dialing[key]
    if not d then return true end
    d.waiters = d.waiters + 1
    local ok = d.sema:wait((limited and ms or DEFAULT_MS) / 1000)
    if not ok and limited then return nil, "timeout" end
    if d.err then return nil, d.err end
  end
end

-- Yields. A new connection for p through client.lua's dial (which offers
-- h2 by ALPN on https): conn, or nil, err, or nil, nil, sock when the
-- server chose HTTP/1.1 (sock is that connection).
local function connect(p, dial)
  local key = p.pool.pool
  local d = { sema = semaphore.new(0), waiters = 0 }
  dialing[key] = d
  -- A raise (this task killed during the connect or the handshake) must
  -- end the dial too: left in dialing, its waiters would sit out their
  -- connect_timeout, and so would every later request to key.
  local ok, sock, err = pcall(dial, p, false)
  if dialing[key] == d then dialing[key] = nil end
  if ok and not sock then d.err = err end
  if d.waiters > 0 then d.sema:post(d.waiters) end
  if not ok then error(sock, 0) end
  if not sock then return nil, err end
  if p.tls then
    local info = sock:getreusedtimes() == 0 and sock:sslinfo()
    if not (info and info.alpn == "h2") then
      if not h1_only[key] then
        if nh1 >= MAX_ORIGINS then h1_only, nh1 = {}, 0 end
        h1_only[key], nh1 = true, nh1 + 1
      end
      return nil, nil, sock
    end
  end
  local conn
  conn, err = core.new(sock, p.keepalive_timeout or DEFAULT_MS)
  if not conn then return nil, err end
  conns[key] = conn
  return conn
end

-- A request sent whose answer is still to come (M.start).
local Pending = {}
Pending.__index = Pending

-- Yields. Sends p on the origin's connection (dialed if need be), from
-- attempt from of MAX_TRIES on. Returns res, or nil, err; or nil, nil,
-- sock when ALPN chose HTTP/1.1; with lazy, a Pending once the request is
-- sent instead of res.
local function run(p, dial, ui, from, lazy)
  local key = p.pool.pool
  if p.tls and h1_only[key] then
    local sock, err = dial(p, false)
    if not sock then return nil, err end
    return nil, nil, sock
  end
  -- Retries on a fresh connection: a GOAWAY or REFUSED_STREAM says the
  -- server did not process the request, and a connection that died
  -- before the stream opened never had it.
  for attempt = from, MAX_TRIES do
    local conn = usable(key)
    if not conn then
      local free, err = await_dial(key, p)
      if not free then return nil, err end
      conn = usable(key)
      if not conn and p.tls and h1_only[key] then   -- that dial found HTTP/1.1
        local sock, err = dial(p, false)
        if not sock then return nil, err end
        return nil, nil, sock
      end
    end
    p.h2_reused = conn and 1 or 0
    if not conn then
      local err, sock
      conn, err, sock = connect(p, dial)
      if not conn then return nil, err, sock end
    end
    local x, err, retry = send(conn, p)
    if x and lazy then
      return setmetatable({ x = x, p = p, dial = dial, ui = ui, attempt = attempt, conn = conn },
                          Pending)
    end
    local res
    if x then res, err, retry = answer(x, p, ui) end
    if res or not retry or attempt == MAX_TRIES then return res, err end
    if conns[key] == conn and not conn:usable() then conns[key] = nil end
  end
end

-- Yields. request(p, dial, ui): the request p (client.lua's prepare) over
-- HTTP/2. Returns res, or nil, err; or nil, nil, sock when ALPN chose
-- HTTP/1.1 (client.lua goes on with sock). ui: client.lua's Response
-- metatable, new_headers(list), and h1(p, sock), its HTTP/1.1 exchange
-- on sock (for Pending's retries).
function M.request(p, dial, ui)
  return run(p, dial, ui, 1, false)
end

-- Yields. start(p, dial, ui): request in two halves, for a caller that
-- must not wait for the answer before it goes on (gRPC's server
-- streaming: the server may answer only after something the caller does
-- next). Returns a pending request once its stream is open and its body
-- queued (a function body, once its task is started), or what request
-- returns when it does not get that far; pending:finish([ms]) waits for
-- the answer (res, or nil, err), pending:close() drops it.
function M.start(p, dial, ui)
  return run(p, dial, ui, 1, true)
end

-- Yields. The answer: res, or nil, err. A request the server did not
-- process goes again, as request would send it, with start's attempts
-- left.
function Pending:finish(ms)
  if self.closed then return nil, "closed" end
  local res, err, retry = answer(self.x, self.p, self.ui, ms)
  if self.closed then   -- closed meanwhile, by another task
    if res then res:close() end
    return nil, "closed"
  end
  self.closed = true
  if res or not retry or self.attempt == MAX_TRIES then return res, err end
  local key = self.p.pool.pool
  if conns[key] == self.conn and not self.conn:usable() then conns[key] = nil end
  if ms then self.p.read_timeout = ms end
  local sock
  res, err, sock = run(self.p, self.dial, self.ui, self.attempt + 1, false)
  if sock then return self.ui.h1(self.p, sock) end
  return res, err
end

-- Resets the stream of a request not finished (a task parked in finish
-- gets "closed").
function Pending:close()
  if self.closed then return end
  self.closed = true
  self.x.st:close()
end

-- Closes the worker's HTTP/2 connection to the origin of pool key key,
-- if any: GOAWAY once its streams have ended (the requests in flight
-- finish); later requests open a new one.
function M.close(key)
  local c = conns[key]
  if c then
    c:close()
    conns[key] = nil
  end
end

-- Closes this worker's HTTP/2 connections (GOAWAY once their streams end).
function M.close_all()
  for k, c in pairs(conns) do
    c:close()
    conns[k] = nil
  end
end

return M
