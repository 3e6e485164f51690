-- cohost.websocket: RFC 6455 WebSocket over cosockets. upgrade(req, res)
-- turns a cohost.http request into a server-side connection, connect(url)
-- opens a client one; both give the same ws object (docs/websocket.md).
--
-- The ws object reads one frame header at a time and keeps every partial
-- read in its own fields, so a receive timeout at any byte leaves it able
-- to go on. Masking and UTF-8 checks run over FFI pointers, so they JIT to
-- a few instructions per word instead of a string per byte: a 1 MiB
-- message costs one copy and one pass, not a concatenation per byte.
local bit = require "bit"
local ffi = require "ffi"
local cohost = require "cohost"
local crypto = require "cohost.core.crypto"
local drainer = require "cohost.drain"   -- not drain(): a local below

local band, bxor, rshift = bit.band, bit.bxor, bit.rshift
local byte, char, sub, concat = string.byte, string.char, string.sub, table.concat
local floor, min = math.floor, math.min

local M = {}

local GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"   -- RFC 6455 section 1.3

local CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
local NAMES = { [CONT] = "continuation", [TEXT] = "text", [BINARY] = "binary",
                [CLOSE] = "close", [PING] = "ping", [PONG] = "pong" }
local OPCODES = {}
for op, name in pairs(NAMES) do OPCODES[name] = op end

-- python's websockets and browsers cap messages near here; a 1 MiB message
-- still fits, as the limits are inclusive.
local MAX_MESSAGE = 1024 * 1024

-- Milliseconds a client waits for the server to close TCP after the close
-- handshake (RFC 6455 7.1.1: the server closes first).
local CLIENT_LINGER_MS = 1000

-- Milliseconds close() waits for the peer's close frame by default (a
-- peer that never answers must not hold a handler for the 60 s I/O
-- timeout).
local CLOSE_TIMEOUT_MS = 5000

-- -- Masking and UTF-8 ---------------------------------------------------

-- One scratch buffer per worker (each has its own Lua state): mask() fills
-- it, XORs in place and copies out without yielding in between, so tasks
-- never share it. Buffers past SCRATCH_KEEP are not kept.
local SCRATCH_KEEP = 64 * 1024
local scratch, scratch_size = nil, 0
local key32 = ffi.new("uint32_t[1]")

-- mask(data, key): data XOR the repeated 4-byte key (masking and unmasking
-- are the same). O(n), one word per step.
local function mask(data, key)
  local n = #data
  if n == 0 then return data end
  local words = rshift(n + 3, 2)
  local buf = scratch
  if words * 4 > scratch_size then
    if words * 4 <= SCRATCH_KEEP then
      scratch_size = SCRATCH_KEEP
      scratch = ffi.new("uint8_t[?]", SCRATCH_KEEP)
      buf = scratch
    else
      buf = ffi.new("uint8_t[?]", words * 4)   -- freed by the GC
    end
  end
  ffi.copy(buf, data, n)
  ffi.copy(key32, key, 4)   -- the key's bytes in memory order, any endianness
  local k = key32[0]
  local w = ffi.cast("uint32_t *", buf)
  for i = 0, words - 1 do w[i] = bxor(w[i], k) end
  return ffi.string(buf, n)
end

-- True when s is well-formed UTF-8 (RFC 3629: no overlong forms, no
-- surrogates, nothing above U+10FFFF). ASCII runs go 4 bytes per step.
local function utf8_valid(s)
  local n = #s
  local p = ffi.cast("const uint8_t *", s)
  local i = 0
  while i < n do
    local c = p[i]
    if c < 0x80 then
      i = i + 1
      -- Skip aligned ASCII words: the cast reads inside s (i + 4 <= n).
      if band(i, 3) == 0 then
        local w = ffi.cast("const uint32_t *", p + i)
        local j, last = 0, rshift(n - i, 2)
        while j < last and band(w[j], 0x80808080) == 0 do j = j + 1 end
        i = i + j * 4
      end
    elseif c < 0xC2 then
      return false   -- continuation byte or overlong 2-byte lead
    elseif c < 0xE0 then
      if i + 1 >= n or band(p[i + 1], 0xC0) ~= 0x80 then return false end
      i = i + 2
    elseif c < 0xF0 then
      if i + 2 >= n then return false end
      local c1 = p[i + 1]
      if band(c1, 0xC0) ~= 0x80 or band(p[i + 2], 0xC0) ~= 0x80
        or (c == 0xE0 and c1 < 0xA0)      -- overlong
        or (c == 0xED and c1 > 0x9F) then -- UTF-16 surrogates
        return false
      end
      i = i + 3
    elseif c < 0xF5 then
      if i + 3 >= n then return false end
      local c1 = p[i + 1]
      if band(c1, 0xC0) ~= 0x80 or band(p[i + 2], 0xC0) ~= 0x80
        or band(p[i + 3], 0xC0) ~= 0x80
        or (c == 0xF0 and c1 < 0x90)      -- overlong
        or (c == 0xF4 and c1 > 0x8F) then -- above U+10FFFF
        return false
      end
      i = i + 4
    else
      return false
    end
  end
  return true
end

M.utf8_valid = utf8_valid   -- for the spec; not documented

-- -- Frames ----------------------------------------------------------------

-- The header of a frame of len payload bytes, with the mask key if given.
local function header(fin, op, len, key)
  local b1 = (fin and 0x80 or 0) + op
  local m = key and 0x80 or 0
  local h
  if len < 126 then
    h = char(b1, m + len)
  elseif len < 65536 then
    h = char(b1, m + 126, rshift(len, 8), band(len, 255))
  else
    local hi, lo = floor(len / 4294967296), len % 4294967296
    h = char(b1, m + 127,
      band(rshift(hi, 24), 255), band(rshift(hi, 16), 255), band(rshift(hi, 8), 255), band(hi, 255),
      band(rshift(lo, 24), 255), band(rshift(lo, 16), 255), band(rshift(lo, 8), 255), band(lo, 255))
  end
  return key and h .. key or h
end

-- RFC 6455 7.4: the codes an endpoint may put in a close frame (1004-1006
-- and 1015 are reserved for reporting, 1016-2999 unassigned, 3000-4999
-- for libraries and applications).
local function close_code_ok(code)
  return (code >= 1000 and code <= 1003) or (code >= 1007 and code <= 1014)
    or (code >= 3000 and code <= 4999)
end

local WS = {}
WS.__index = WS

-- -- Sending ---------------------------------------------------------------

-- Writers take turns: a frame goes out in one sock:send, and a second
-- writer (say a reader answering a ping while a task sends) waits for the
-- first instead of getting "socket busy writing". The semaphore is made
-- only when two writers meet.
local function lock(self)
  if not self.wbusy then
    self.wbusy = true
    return true
  end
  local sema = self.wsema
  if not sema then
    sema = cohost.semaphore.new(0)
    self.wsema = sema
  end
  self.wwaiting = self.wwaiting + 1
  local ok = sema:wait(self.timeout / 1000)
  self.wwaiting = self.wwaiting - 1
  if not ok then return nil, "timeout" end
  return true   -- the lock was handed over: wbusy stays true
end

local function unlock(self)
  if self.wwaiting > 0 then
    self.wsema:post()
  else
    self.wbusy = false
  end
end

-- Yields. One frame, masked by a client. Returns bytes sent or nil, err.
local function send_frame(self, fin, op, data)
  if self.sock_closed then return nil, "closed" end
  local key = self.client and crypto.random_bytes(4) or nil
  local frame = { header(fin, op, #data, key), key and mask(data, key) or data }
  local ok, err = lock(self)
  if not ok then return nil, err end
  -- pcall: a task killed inside send must still hand the lock on.
  local pok, bytes, serr = pcall(self.sock.send, self.sock, frame)
  unlock(self)
  if not pok then error(bytes, 0) end
  return bytes, serr
end

-- Yields. Sends a close frame once; later data frames are refused.
local function send_close(self, code, reason)
  if self.close_sent then return true end
  self.close_sent = true
  local body = code and char(rshift(code, 8), band(code, 255)) .. (reason or "") or ""
  return send_frame(self, true, CLOSE, body)
end

-- Closes the TCP connection for good.
local function shut(self)
  self.rclosed = true
  if not self.sock_closed then
    self.sock_closed = true
    self.sock:close()
  end
end

-- Yields. Reads and drops input until EOF, an error or ms have passed.
local function drain(sock, ms)
  local deadline = cohost.monotonic() + ms / 1000
  sock:settimeout(ms)
  repeat
    local data = sock:receiveany(65536)
  until not data or cohost.monotonic() > deadline
end

-- Yields. After the close handshake: the server closes TCP at once, a
-- client gives the server CLIENT_LINGER_MS to close first (RFC 6455
-- 7.1.1), so the TIME_WAIT lands on the server.
local function finish(self)
  if self.client and not self.sock_closed then
    drain(self.sock, min(self.timeout, CLIENT_LINGER_MS))
  end
  shut(self)
end

-- Milliseconds a failed connection drains what the peer still sends
-- before closing.
local LINGER_MS = 1000

-- Yields. Fails the connection (RFC 6455 7.1.7): a close frame with code,
-- then TCP closed. Returns nil, why, code for recv to pass on. Closing
-- with unread input (the rest of an oversized frame) would send an RST
-- that can destroy the close frame in the peer's buffers, so the input
-- is drained first for up to LINGER_MS, as nginx's lingering close does.
local function fail(self, code, why)
  if send_close(self, code, why) and self.sock:shutdown("send") then
    drain(self.sock, LINGER_MS)
  end
  shut(self)
  return nil, why, code
end

-- ws:send(data [, typ]): a text (default) or binary message in one frame.
-- Yields. Returns bytes sent or nil, err.
function WS:send(data, typ)
  assert(type(data) == "string", "data must be a string")
  local op = TEXT
  if typ ~= nil and typ ~= "text" then
    assert(typ == "binary", "typ must be \"text\" or \"binary\"")
    op = BINARY
  end
  if self.close_sent then return nil, "closed" end
  return send_frame(self, true, op, data)
end

-- ws:send_frame(fin, typ, data): one raw frame ("continuation", "text",
-- "binary", "ping", "pong"), for sending a message in fragments.
function WS:send_frame(fin, typ, data)
  local op = OPCODES[typ]
  assert(op and op ~= CLOSE, "bad frame type")
  data = data or ""
  assert(type(data) == "string", "data must be a string")
  assert(op < CLOSE or #data <= 125, "control frame payload over 125 bytes")
  if self.close_sent then return nil, "closed" end
  return send_frame(self, fin and true or false, op, data)
end

function WS:send_ping(data)
  return self:send_frame(true, "ping", data)
end

function WS:send_pong(data)
  return self:send_frame(true, "pong", data)
end

-- -- Receiving -------------------------------------------------------------

-- Yields. Exactly n bytes; on a timeout the partial bytes are kept in
-- self.part and the next call asks only for the rest.
local function read(self, n)
  local part = self.part
  local data, err, partial = self.sock:receive(part and n - #part or n)
  if not data then
    if err == "timeout" then
      if partial ~= "" then self.part = part and part .. partial or partial end
    else
      shut(self)
    end
    return nil, err
  end
  if part then
    self.part = nil
    return part .. data
  end
  return data
end

-- Yields. Reads one frame: op, fin, payload (unmasked) or nil, err, code.
-- The header lives in self.hdr until its payload is in, so a timeout at
-- any point is resumable.
local function read_frame(self)
  local hdr = self.hdr
  if not hdr then
    local err
    hdr, err = read(self, 2)
    if not hdr then return nil, err end
    self.hdr = hdr
  end
  local b1, b2 = byte(hdr, 1, 2)
  local fin, op = band(b1, 0x80) ~= 0, band(b1, 0x0F)
  if band(b1, 0x70) ~= 0 then return fail(self, 1002, "reserved bits set") end
  if not NAMES[op] then return fail(self, 1002, "reserved opcode") end
  local masked, len = band(b2, 0x80) ~= 0, band(b2, 0x7F)
  if op >= CLOSE then
    if not fin then return fail(self, 1002, "fragmented control frame") end
    if len > 125 then return fail(self, 1002, "control frame too long") end
  elseif op == CONT then
    if not self.frag_op then return fail(self, 1002, "continuation frame without a message") end
  elseif self.frag_op then
    return fail(self, 1002, "new message inside a fragmented one")
  end
  if self.client then
    if masked then return fail(self, 1002, "masked frame from the server") end
  elseif not masked then
    return fail(self, 1002, "unmasked frame from the client")
  end
  local extra = (len == 126 and 2 or len == 127 and 8 or 0) + (masked and 4 or 0)
  if #hdr == 2 and extra > 0 then
    local more, err = read(self, extra)
    if not more then return nil, err end
    hdr = hdr .. more
    self.hdr = hdr
  end
  local pos = 3
  if len == 126 then
    local x1, x2 = byte(hdr, 3, 4)
    len, pos = x1 * 256 + x2, 5
  elseif len == 127 then
    local x1, x2, x3, x4, x5, x6, x7, x8 = byte(hdr, 3, 10)
    if x1 >= 0x80 then return fail(self, 1002, "frame length over 2^63") end
    -- Exact up to 2^53; anything larger is over every limit anyway.
    len = ((((((x1 * 256 + x2) * 256 + x3) * 256 + x4) * 256 + x5) * 256 + x6) * 256 + x7) * 256 + x8
    pos = 11
  end
  if len > self.max_frame_size then return fail(self, 1009, "frame too large") end
  if op < CLOSE and self.frag_len + len > self.max_message_size then
    return fail(self, 1009, "message too large")
  end
  local payload = ""
  if len > 0 then
    local err
    payload, err = read(self, len)
    if not payload then return nil, err end
    if masked then payload = mask(payload, sub(hdr, pos, pos + 3)) end
  end
  self.hdr = nil
  return op, fin, payload
end

-- Yields. Handles a close frame: checks it, answers it if this side did
-- not start the handshake, ends the connection. Returns recv's values.
local function on_close(self, payload)
  local code, reason = nil, ""
  if #payload == 1 then return fail(self, 1002, "close frame with a 1-byte body") end
  if #payload >= 2 then
    local c1, c2 = byte(payload, 1, 2)
    code, reason = c1 * 256 + c2, sub(payload, 3)
    if not close_code_ok(code) then return fail(self, 1002, "invalid close code") end
    if not utf8_valid(reason) then return fail(self, 1007, "invalid UTF-8 in close reason") end
  end
  self.close_received = true
  -- Echo the peer's code (RFC 6455 5.5.1); a bodiless close gets one too.
  send_close(self, code)
  finish(self)
  return reason, "close", code
end

local function recv(self)
  while true do
    local op, fin, payload = read_frame(self)
    if not op then return nil, fin, payload end   -- nil, err, code
    if op == PING then
      if self.auto_pong then
        if not self.close_sent then
          local ok, err = send_frame(self, true, PONG, payload)
          if not ok then return nil, err end
        end
      else
        return payload, "ping"
      end
    elseif op == PONG then
      return payload, "pong"
    elseif op == CLOSE then
      return on_close(self, payload)
    elseif fin and op ~= CONT then
      if op == TEXT and not utf8_valid(payload) then return fail(self, 1007, "invalid UTF-8") end
      return payload, NAMES[op]
    else
      -- A fragment: the first names the type, the one with fin ends it.
      local frags = self.frags
      if op ~= CONT then
        self.frag_op, frags = op, {}
        self.frags = frags
      end
      frags[#frags + 1] = payload
      self.frag_len = self.frag_len + #payload
      if fin then
        local data, typ = concat(frags), self.frag_op
        self.frags, self.frag_op, self.frag_len = nil, nil, 0
        if typ == TEXT and not utf8_valid(data) then return fail(self, 1007, "invalid UTF-8") end
        return data, NAMES[typ]
      end
    end
  end
end

-- ws:recv() -> data, typ [, code]: the next message ("text", "binary"),
-- "pong" (and "ping" with auto_pong off), or the peer's close: reason,
-- "close", code (nil code for a bodiless close). nil, err [, code] on
-- failure: "timeout" (the ws stays usable), "closed", or a protocol error
-- with the close code this side sent. Yields.
function WS:recv()
  if self.rclosed then return nil, "closed" end
  if self.reading then return nil, "socket busy reading" end
  self.reading = true
  local ok, data, typ, code = pcall(recv, self)
  self.reading = false
  if not ok then error(data, 0) end
  return data, typ, code
end

-- ws:close([code [, reason]]): starts (or completes) the close handshake
-- with code (default 1000), waits up to close_timeout for the peer's
-- close frame unless another task is reading (it will see the answer),
-- then closes TCP. Returns true or nil, err. Yields.
function WS:close(code, reason)
  if self.sock_closed then return nil, "closed" end
  if code ~= nil then
    assert(type(code) == "number" and close_code_ok(code), "bad close code")
  end
  reason = reason or ""
  assert(type(reason) == "string" and #reason <= 123, "close reason over 123 bytes")
  if not self.close_sent then
    local ok, err = send_close(self, code or 1000, reason)
    if not ok then
      shut(self)
      return nil, err
    end
  end
  if self.reading then return true end
  -- Wait for the answer, dropping what arrives before it.
  self.sock:settimeout(min(self.timeout, self.close_timeout))
  while not self.rclosed do
    if not self:recv() then break end
  end
  shut(self)
  return true
end

-- ws:settimeout(ms): for every later read and write (default 60 s).
function WS:settimeout(ms)
  assert(type(ms) == "number" and ms > 0, "bad timeout")
  self.timeout = ms
  self.sock:settimeout(ms)
end

local function new_ws(sock, client, opts, protocol)
  local max_message = opts.max_message_size or MAX_MESSAGE
  local self = setmetatable({
    sock = sock,
    client = client,
    protocol = protocol,                 -- the negotiated subprotocol or nil
    max_message_size = max_message,
    max_frame_size = opts.max_frame_size or max_message,
    auto_pong = opts.auto_pong ~= false,
    timeout = opts.timeout or 60000,     -- ms, as cosockets
    close_timeout = opts.close_timeout or CLOSE_TIMEOUT_MS,
    frag_len = 0,                        -- bytes of the fragmented message so far
    wwaiting = 0,                        -- writers waiting for the lock
  }, WS)
  if opts.timeout then sock:settimeout(opts.timeout) end
  return self
end

-- -- Handshake helpers -----------------------------------------------------

-- A header value as one string: repeated headers joined by ", ".
local function joined(v)
  if type(v) == "table" then return concat(v, ", ") end
  return v
end

-- The comma-separated tokens of a header value, lower-cased, as a set and
-- in order.
local function tokens(v)
  local set, list = {}, {}
  for t in (joined(v) or ""):gmatch("[^,%s][^,]*") do
    t = t:match("^(.-)%s*$")
    set[t:lower()] = true
    list[#list + 1] = t
  end
  return set, list
end

local function accept_key(key)
  return crypto.encode_base64(crypto.sha1_bin(key .. GUID))
end

-- A Sec-WebSocket-Key must be the base64 of 16 bytes (RFC 6455 4.2.1).
local function key_ok(key)
  if type(key) ~= "string" or #key ~= 24 or not key:match("^[%w+/]+==$") then return false end
  local raw = crypto.decode_base64(key)
  return raw ~= nil and #raw == 16
end

-- -- Server ----------------------------------------------------------------

-- This worker's server-side connections, for the drain (weak: one its
-- handler let go of goes with it).
local open = setmetatable({}, { __mode = "k" })

-- Yields. The drain's end of a connection its handler left open: close
-- code 1001, "going away" (RFC 6455 7.4.1), unless a close was sent.
-- A handler parked in ws:recv() gets the client's answer as its close.
local function going_away(ws)
  if ws.close_sent or ws.sock_closed then return end
  ws:close(1001, "going away")
end

-- The drain's closer (cohost.drain: after the on_shutdown functions, which
-- may close their connections themselves with a code of their own).
drainer.closer(function()
  local list = {}
  for ws in pairs(open) do list[#list + 1] = ws end
  for _, ws in ipairs(list) do cohost.spawn(going_away, ws) end
end)

local function refuse(res, status, why)
  res.status = status
  if status == 426 then res:header("Sec-WebSocket-Version", "13") end
  res:send(why .. "\n")
  return nil, why
end

-- upgrade(req, res [, opts]) -> ws or nil, err: checks the handshake of a
-- cohost.http request, answers 101 on the hijacked connection and returns
-- the server side of it; answers 400 (426 for a version other than 13,
-- 403 for an Origin not in opts.origins) and returns nil, err otherwise.
-- opts: protocols (the subprotocols this server speaks, preferred first),
-- origins (the Origin values allowed; any when nil), headers (extra 101
-- headers), timeout, close_timeout (ms), max_frame_size,
-- max_message_size, auto_pong. Yields.
function M.upgrade(req, res, opts)
  opts = opts or {}
  local hd = req.headers
  if req.method ~= "GET" then return refuse(res, 400, "websocket: method must be GET") end
  if (tonumber(req.version) or 0) < 1.1 then return refuse(res, 400, "websocket: HTTP/1.1 required") end
  -- A body would reach the frame parser as frames.
  if hd["transfer-encoding"] or (hd["content-length"] and hd["content-length"] ~= "0") then
    return refuse(res, 400, "websocket: handshake with a body")
  end
  if not tokens(hd["upgrade"])["websocket"] then return refuse(res, 400, "websocket: no Upgrade: websocket") end
  if not tokens(hd["connection"])["upgrade"] then return refuse(res, 400, "websocket: no Connection: upgrade") end
  if hd["sec-websocket-version"] ~= "13" then return refuse(res, 426, "websocket: version must be 13") end
  local key = hd["sec-websocket-key"]
  if not key_ok(key) then return refuse(res, 400, "websocket: bad Sec-WebSocket-Key") end
  if opts.origins then
    local origin, allowed = hd["origin"], false
    for _, o in ipairs(opts.origins) do
      if o == origin then allowed = true end
    end
    if not allowed then return refuse(res, 403, "websocket: origin not allowed") end
  end

  local protocol
  if opts.protocols then
    local offered = tokens(hd["sec-websocket-protocol"])
    for _, p in ipairs(opts.protocols) do
      if offered[p:lower()] then
        protocol = p
        break
      end
    end
  end

  local sock = res:hijack()
  local head = {
    "HTTP/1.1 101 Switching Protocols\r\n",
    "Upgrade: websocket\r\n",
    "Connection: Upgrade\r\n",
    "Sec-WebSocket-Accept: ", accept_key(key), "\r\n",
  }
  if protocol then head[#head + 1] = "Sec-WebSocket-Protocol: " .. protocol .. "\r\n" end
  for name, value in pairs(opts.headers or {}) do
    head[#head + 1] = name .. ": " .. value .. "\r\n"
  end
  head[#head + 1] = "\r\n"
  if opts.timeout then sock:settimeout(opts.timeout) end
  local ok, err = sock:send(head)
  if not ok then
    sock:close()
    return nil, err
  end
  local ws = new_ws(sock, false, opts, protocol)
  open[ws] = true
  if drainer.closing then cohost.spawn(going_away, ws) end   -- upgraded in a drain
  return ws
end

-- -- Client ----------------------------------------------------------------

-- ws://host[:port][/path][?query] -> host, port, host header, resource.
local function parse_url(url)
  local scheme, rest = url:match("^(%a+)://(.*)$")
  scheme = scheme and scheme:lower()
  if scheme == "wss" then return nil, "wss not supported yet" end
  if scheme ~= "ws" then return nil, "bad url" end
  local authority, path = rest:match("^([^/?#]*)([^#]*)")
  if path == "" or path:sub(1, 1) == "?" then path = "/" .. path end
  local host, port = authority:match("^%[([%x:.]+)%]:?(%d*)$")
  if not host then host, port = authority:match("^([^:@%[%]]+):?(%d*)$") end
  if not host then return nil, "bad url" end
  port = port == "" and 80 or tonumber(port)
  if port < 1 or port > 65535 then return nil, "bad url" end
  return host, port, authority, path
end

-- Yields. Reads the response head: status and lower-cased headers
-- (repeated ones joined), or nil, err.
local MAX_HEAD_LINES = 100
local function read_head(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local status = line:match("^HTTP/1%.1 (%d%d%d)")
  if not status then return nil, "handshake: bad status line" end
  local headers = {}
  for _ = 1, MAX_HEAD_LINES do
    line, err = sock:receive("*l")
    if not line then return nil, err end
    if line == "" then return tonumber(status), headers end
    local name, value = line:match("^([^:%s]+):%s*(.-)%s*$")
    if not name then return nil, "handshake: bad header line" end
    name = name:lower()
    headers[name] = headers[name] and headers[name] .. ", " .. value or value
  end
  return nil, "handshake: too many header lines"
end

-- connect(url [, opts]) -> ws or nil, err: opens a ws:// connection.
-- opts: timeout (ms, for connect, handshake and later I/O), protocols
-- (offered, preferred first), headers (extra request headers, name ->
-- value), origin, close_timeout, max_frame_size, max_message_size,
-- auto_pong. The
-- negotiated subprotocol is ws.protocol. Yields.
function M.connect(url, opts)
  opts = opts or {}
  local host, port, authority, path = parse_url(url)
  if not host then return nil, port end
  local sock = cohost.tcp()
  if opts.timeout then sock:settimeout(opts.timeout) end
  local ok, err = sock:connect(host, port)
  if not ok then return nil, err end

  local key = crypto.encode_base64(crypto.random_bytes(16))
  local req = {
    "GET ", path, " HTTP/1.1\r\n",
    "Host: ", authority, "\r\n",
    "Upgrade: websocket\r\n",
    "Connection: Upgrade\r\n",
    "Sec-WebSocket-Key: ", key, "\r\n",
    "Sec-WebSocket-Version: 13\r\n",
  }
  if opts.protocols and #opts.protocols > 0 then
    req[#req + 1] = "Sec-WebSocket-Protocol: " .. concat(opts.protocols, ", ") .. "\r\n"
  end
  if opts.origin then req[#req + 1] = "Origin: " .. opts.origin .. "\r\n" end
  for name, value in pairs(opts.headers or {}) do
    req[#req + 1] = name .. ": " .. value .. "\r\n"
  end
  req[#req + 1] = "\r\n"
  ok, err = sock:send(req)
  local status, headers
  if ok then status, headers = read_head(sock) end
  local why
  if not ok then
    why = err
  elseif not status then
    why = headers
  elseif status ~= 101 then
    why = "handshake: status " .. status
  elseif not tokens(headers["upgrade"])["websocket"] then
    why = "handshake: no Upgrade: websocket"
  elseif not tokens(headers["connection"])["upgrade"] then
    why = "handshake: no Connection: upgrade"
  elseif headers["sec-websocket-accept"] ~= accept_key(key) then
    why = "handshake: bad Sec-WebSocket-Accept"
  elseif headers["sec-websocket-extensions"] then
    why = "handshake: extension not offered"   -- we offer none
  end
  local protocol = headers and headers["sec-websocket-protocol"]
  if not why and protocol then
    local offered = false
    for _, p in ipairs(opts.protocols or {}) do
      if p == protocol then offered = true end
    end
    if not offered then why = "handshake: subprotocol not offered" end
  end
  if why then
    sock:close()
    return nil, why
  end
  return new_ws(sock, true, opts, protocol)
end

return M
