-- Fuzz driver for cohost.websocket's frame reader (read_frame, recv,
-- on_close, fail), run by spec/fuzz/fuzz_lua.c. The module is loaded
-- unchanged, with fake "cohost" and "cohost.core.crypto" modules, and its
-- ws objects are made by the public upgrade() and connect() over a fake
-- socket that serves the fuzz input: no runtime, no network.
--
-- Input: one config byte, then the bytes the peer sends, with "~|~" where
-- a receive times out (the marker is dropped; the read that reaches it
-- returns nil, "timeout", partial). Config bits:
--   0    client side (connect) instead of server side (upgrade)
--   1    auto_pong off
--   2    close first: ws:close() before reading (reads inside close)
--   3-4  limits: default (1 MiB) | message 64, frame 64 | message 64,
--        frame 16 | message 1000, frame 200
--
-- Invariants (each failure raises "invariant failed: ..."):
--   - recv returns (data, typ[, code]) or (nil, err[, code]), never raises;
--   - the events equal those of a reference decoder written from RFC 6455
--     (below, independent of the module): messages, pings/pongs, the
--     peer's close (its code valid, its reason valid UTF-8), and on a
--     violation the close code 1002, 1007 or 1009; "closed" at EOF;
--   - the run with the timeouts gives the same events as the run without
--     (a timeout at any byte is resumable), and every timeout leaves the
--     ws usable;
--   - text is valid UTF-8 (checked by a codepoint decoder, not the
--     module's), data messages stay within max_message_size, control
--     payloads within 125 bytes;
--   - the bytes sent are well-formed frames, masked exactly when this is
--     the client; they are the reference's: a pong per ping (auto_pong),
--     then one close frame echoing the peer's code or carrying the
--     violation's code; nothing is sent after a close;
--   - after a close or a failure, the socket is closed and recv answers
--     nil, "closed".
local bit = require "bit"
local band, bor, bxor = bit.band, bit.bor, bit.bxor
local byte, char, sub, concat = string.byte, string.char, string.sub, table.concat

local MARKER = "~|~"

local function check(cond, what, ...)
  if not cond then
    error("invariant failed: " .. string.format(what, ...), 2)
  end
end

-- -- Fakes -------------------------------------------------------------------

-- Crypto: deterministic stand-ins. The handshake only needs the accept
-- key to be the same function on both sides; masking keys vary so that
-- unmasking is really checked.
local counter = 0
local fake_crypto = {
  random_bytes = function(n)
    local t = {}
    for i = 1, n do
      counter = (counter * 1103515245 + 12345) % 2147483648
      t[i] = char(counter % 251 + 1)
    end
    return concat(t)
  end,
  sha1_bin = function(s) return "sha1(" .. s .. ")" end,
  encode_base64 = function(s) return (s:gsub("[^%w]", "_")) end,
  decode_base64 = function(s) return #s == 24 and ("\0"):rep(16) or nil end,
}

local current_sock   -- what cohost.tcp() hands to connect()

local fake_cohost = {
  monotonic = function() return 0 end,   -- drain ends at EOF or a timeout
  tcp = function() return current_sock end,
  semaphore = { new = function() error("invariant failed: two writers met (no tasks here)") end },
}

package.loaded["cohost"] = fake_cohost
package.loaded["cohost.core.crypto"] = fake_crypto
-- The drain needs a worker's tasks; here only its closer is registered.
package.loaded["cohost.drain"] = { closer = function() end }
local websocket = require "cohost.websocket"

-- A socket serving pieces[1], pieces[2], ...: the end of each piece but
-- the last is a timeout. Sent bytes go to sock.out.
local Sock = {}
Sock.__index = Sock

local function new_sock(pieces)
  return setmetatable({ pieces = pieces, i = 1, pos = 1, out = {}, closed = false,
                        wshut = false, sends = 0 }, Sock)
end

-- Up to n bytes (all there are when n is nil) from the current piece; at
-- its end, "timeout" (the piece is then done) or "closed" (the last one).
function Sock:take(n)
  local p = self.pieces[self.i]
  local avail = #p - self.pos + 1
  local k = n and math.min(n, avail) or avail
  local s = sub(p, self.pos, self.pos + k - 1)
  self.pos = self.pos + k
  if n and k == n then return s end
  if self.i < #self.pieces then
    self.i, self.pos = self.i + 1, 1
    return s, "timeout"
  end
  return s, "closed"
end

function Sock:receive(pat)
  check(not self.closed, "receive on a closed socket")
  if pat == "*l" then
    -- Only connect()'s handshake reads lines; it comes from self.head.
    local line, rest = self.head:match("^(.-)\r\n(.*)$")
    self.head = rest
    return line
  end
  check(type(pat) == "number" and pat > 0 and pat == math.floor(pat), "receive(%s)", tostring(pat))
  local s, err = self:take(pat)
  if not err then return s end
  return nil, err, s
end

function Sock:receiveany(max)
  check(not self.closed, "receiveany on a closed socket")
  local s, err = self:take(max)
  if s ~= "" then return s end
  return nil, err or "timeout"
end

function Sock:send(data)
  if type(data) == "table" then data = concat(data) end
  check(type(data) == "string", "send of a %s", type(data))
  if self.closed or self.wshut then return nil, "closed" end
  self.out[#self.out + 1] = data
  return #data
end

function Sock:shutdown(dir)
  check(dir == "send", "shutdown(%s)", tostring(dir))
  self.wshut = true
  return 1
end

function Sock:close()
  if self.closed then return nil, "closed" end
  self.closed = true
  return 1
end

function Sock:settimeout() end

function Sock:connect() return 1 end

-- -- The reference -----------------------------------------------------------

-- Well-formed UTF-8 by decoding codepoints: the shortest form, no
-- surrogates, at most U+10FFFF.
local function utf8_ok(s)
  local i, n = 1, #s
  while i <= n do
    local c = byte(s, i)
    local len, cp, min
    if c < 0x80 then len, cp, min = 1, c, 0
    elseif c >= 0xC0 and c < 0xE0 then len, cp, min = 2, c - 0xC0, 0x80
    elseif c >= 0xE0 and c < 0xF0 then len, cp, min = 3, c - 0xE0, 0x800
    elseif c >= 0xF0 and c < 0xF8 then len, cp, min = 4, c - 0xF0, 0x10000
    else return false end
    if i + len - 1 > n then return false end
    for k = 1, len - 1 do
      local cc = byte(s, i + k)
      if cc < 0x80 or cc >= 0xC0 then return false end
      cp = cp * 64 + (cc - 0x80)
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return false end
    i = i + len
  end
  return true
end

local function code_ok(code)
  -- RFC 6455 7.4.1 and the IANA registry: 1000-1003, 1007-1014 sendable;
  -- 1004-1006, 1015 reserved; 3000-4999 private.
  if code >= 3000 and code <= 4999 then return true end
  for _, c in ipairs({ 1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014 }) do
    if c == code then return true end
  end
  return false
end

local function unmask(data, key)
  local t = {}
  for i = 1, #data do
    t[i] = char(bxor(byte(data, i), byte(key, (i - 1) % 4 + 1)))
  end
  return concat(t)
end

-- Splits one frame off s at pos: fin, op, masked, payload (unmasked),
-- next pos; or nil when the bytes end first. The length is taken as is:
-- callers check it before asking for the payload (lenonly).
local function split_frame(s, pos, lenonly)
  if #s - pos + 1 < 2 then return nil end
  local b1, b2 = byte(s, pos, pos + 1)
  local fin, op = b1 >= 0x80, b1 % 16
  local masked, len = b2 >= 0x80, b2 % 128
  local len64_hi = len == 127 and #s - pos + 1 >= 3 and byte(s, pos + 2) or nil
  local p = pos + 2
  if len == 126 then
    if #s - p + 1 < 2 then return nil end
    len = byte(s, p) * 256 + byte(s, p + 1)
    p = p + 2
  elseif len == 127 then
    if #s - p + 1 < 8 then return nil end
    len = 0
    for k = 0, 7 do len = len * 256 + byte(s, p + k) end
    p = p + 8
  end
  local key
  if masked then
    if #s - p + 1 < 4 then return nil end
    key = sub(s, p, p + 3)
    p = p + 4
  end
  local hdr = { b1 = b1, fin = fin, op = op, masked = masked, len = len,
                len7 = b2 % 128, len64_hi = len64_hi }
  if lenonly then return hdr end
  if #s - p + 1 < len then return nil end
  local payload = sub(s, p, p + len - 1)
  if key then payload = unmask(payload, key) end
  hdr.payload = payload
  return hdr, p + len
end

-- The expected events and sent frames for stream, from RFC 6455 alone:
-- events are { data, typ, code } or { nil, err, code } (err compared only
-- as "closed" or a protocol error); sent are { op, payload }.
local function reference(stream, cfg)
  local events, sent = {}, {}
  local close_sent = cfg.close_first
  if close_sent then sent[1] = { 8, "\3\232" } end
  local function fail(code)
    if not close_sent then sent[#sent + 1] = { 8, code } end
    events[#events + 1] = { nil, "protocol", code }
    return events, sent
  end
  local pos, frag_op, frags, frag_len = 1, nil, {}, 0
  while true do
    local h = split_frame(stream, pos, true)
    if not h then
      -- A header cut short: checks on its first bytes still apply, so
      -- look at what is there before calling it EOF.
      if #stream - pos + 1 < 2 then break end
      local b1, b2 = byte(stream, pos, pos + 1)
      -- (The length is not checked: the module reads the extended
      -- length and the key before looking at them, and gets EOF.)
      h = { b1 = b1, fin = b1 >= 0x80, op = b1 % 16, masked = b2 >= 0x80, len = b2 % 128, len7 = b2 % 128, short = true }
    end
    local op = h.op
    if band(h.b1, 0x70) ~= 0 then return fail(1002) end
    if not (op <= 2 or (op >= 8 and op <= 10)) then return fail(1002) end
    local control = op >= 8
    if control and not h.fin then return fail(1002) end
    if control and h.len7 > 125 then return fail(1002) end
    if op == 0 and not frag_op then return fail(1002) end
    if (op == 1 or op == 2) and frag_op then return fail(1002) end
    if cfg.client == h.masked then return fail(1002) end
    if h.short then break end
    if h.len64_hi and h.len64_hi >= 0x80 then return fail(1002) end
    if h.len > cfg.max_frame then return fail(1009) end
    if not control and frag_len + h.len > cfg.max_message then return fail(1009) end
    local f, nxt = split_frame(stream, pos)
    if not f then break end
    pos = nxt
    local data = f.payload
    if op == 9 then
      if cfg.auto_pong then
        if not close_sent then sent[#sent + 1] = { 10, data } end
      else
        events[#events + 1] = { data, "ping" }
      end
    elseif op == 10 then
      events[#events + 1] = { data, "pong" }
    elseif op == 8 then
      if #data == 1 then return fail(1002) end
      local code, reason = nil, ""
      if #data >= 2 then
        code, reason = byte(data, 1) * 256 + byte(data, 2), sub(data, 3)
        if not code_ok(code) then return fail(1002) end
        if not utf8_ok(reason) then return fail(1007) end
      end
      if not close_sent then
        sent[#sent + 1] = { 8, code and char(math.floor(code / 256), code % 256) or "" }
      end
      events[#events + 1] = { reason, "close", code }
      return events, sent
    else
      if op ~= 0 then frag_op, frags, frag_len = op, {}, 0 end
      frags[#frags + 1] = data
      frag_len = frag_len + #data
      if f.fin then
        local msg = concat(frags)
        if frag_op == 1 and not utf8_ok(msg) then return fail(1007) end
        events[#events + 1] = { msg, frag_op == 1 and "text" or "binary" }
        frag_op, frags, frag_len = nil, {}, 0
      end
    end
  end
  events[#events + 1] = { nil, "closed" }
  return events, sent
end

-- -- Running the module --------------------------------------------------------

local LIMITS = {
  [0] = { 1024 * 1024, nil },
  [1] = { 64, 64 },
  [2] = { 64, 16 },
  [3] = { 1000, 200 },
}

local function make_ws(cfg, pieces)
  local sock = new_sock(pieces)
  local opts = { auto_pong = cfg.auto_pong, max_message_size = cfg.lim[1],
                 max_frame_size = cfg.lim[2] }
  local ws, err
  if cfg.client then
    -- The handshake answer comes from sock.head, computed with the same
    -- fake crypto connect() uses (its key is the next random_bytes(16)).
    local saved = counter
    local key = fake_crypto.encode_base64(fake_crypto.random_bytes(16))
    counter = saved
    local accept = fake_crypto.encode_base64(fake_crypto.sha1_bin(key .. "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
    sock.head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
      .. "Connection: Upgrade\r\nSec-WebSocket-Accept: " .. accept .. "\r\n\r\n"
    current_sock = sock
    ws, err = websocket.connect("ws://127.0.0.1:1/", opts)
    current_sock = nil
  else
    local req = { method = "GET", version = "1.1", headers = {
      upgrade = "websocket", connection = "Upgrade", ["sec-websocket-version"] = "13",
      ["sec-websocket-key"] = "dGhlIHNhbXBsZSBub25jZQ==" } }
    local res = { hijack = function() return sock end,
                  header = function() error("invariant failed: refused the handshake") end }
    ws, err = websocket.upgrade(req, res, opts)
  end
  check(ws, "handshake failed: %s", tostring(err))
  sock.out = {}   -- only frames from here on
  return ws, sock
end

-- The frames in the bytes sent: { op, payload } each, checking the form.
local function sent_frames(sock, cfg)
  local s, pos, frames = concat(sock.out), 1, {}
  while pos <= #s do
    local f, nxt = split_frame(s, pos)
    check(f, "a partial frame was sent")
    check(f.fin and band(f.b1, 0x70) == 0, "sent a fragment or reserved bits")
    check(f.masked == cfg.client, "sent a frame masked=%s from the %s", tostring(f.masked),
      cfg.client and "client" or "server")
    frames[#frames + 1] = { f.op, f.payload }
    pos = nxt
  end
  return frames
end

local function same_events(a, b, what)
  check(#a == #b, "%s: %d events, expected %d", what, #a, #b)
  for i = 1, #a do
    local x, y = a[i], b[i]
    check(x[1] == y[1] and x[3] == y[3], "%s: event %d is (%s, %s, %s), expected (%s, %s, %s)", what, i,
      tostring(x[1] and #x[1]), tostring(x[2]), tostring(x[3]), tostring(y[1] and #y[1]), tostring(y[2]), tostring(y[3]))
    local xe = x[1] == nil and x[2] ~= "closed" and "protocol" or x[2]
    local ye = y[1] == nil and y[2] ~= "closed" and "protocol" or y[2]
    check(xe == ye, "%s: event %d is %s, expected %s", what, i, tostring(x[2]), tostring(y[2]))
  end
end

-- Runs the module over pieces; returns the events (timeouts dropped) and
-- the sent frames, checking the per-call invariants on the way.
local function run(cfg, pieces)
  local ws, sock = make_ws(cfg, pieces)
  local events = {}
  if cfg.close_first then
    local ok, err = ws:close(1000)
    check(ok == true, "close() returned %s, %s", tostring(ok), tostring(err))
    check(sock.closed, "close() left the socket open")
    return events, sent_frames(sock, cfg)
  end
  for _ = 1, 100000 do
    local data, typ, code = ws:recv()
    if data == nil and typ == "timeout" then
      check(code == nil and not sock.closed, "a timeout closed the ws")
    else
      events[#events + 1] = { data, typ, code }
      if data == nil then
        check(type(typ) == "string", "recv's error is a %s", type(typ))
        if typ == "closed" then
          check(code == nil, "closed with code %s", tostring(code))
        else
          check(code == 1002 or code == 1007 or code == 1009, "error %q with code %s", typ, tostring(code))
        end
      else
        check(type(data) == "string", "recv's data is a %s", type(data))
        if typ == "text" or typ == "binary" then
          check(#data <= cfg.max_message, "%d-byte message over the limit", #data)
          check(typ == "binary" or utf8_ok(data), "text message is not UTF-8")
          check(code == nil, "message with a code")
        elseif typ == "ping" or typ == "pong" then
          check(#data <= 125, "%d-byte %s", #data, typ)
          check(typ == "pong" or not cfg.auto_pong, "ping returned with auto_pong")
        else
          check(typ == "close", "recv's type %s", tostring(typ))
          check(code == nil or code_ok(code), "close code %s", tostring(code))
          check(utf8_ok(data) and #data <= 123, "close reason")
        end
      end
      if data == nil or typ == "close" then
        check(sock.closed, "the socket stays open after %s", tostring(typ))
        local d2, e2 = ws:recv()
        check(d2 == nil and e2 == "closed", "recv after the end gives %s, %s", tostring(d2), tostring(e2))
        return events, sent_frames(sock, cfg)
      end
    end
  end
  check(false, "recv loops")
end

local function split(stream)
  local pieces, pos = {}, 1
  while true do
    local s, e = stream:find(MARKER, pos, true)
    if not s then break end
    pieces[#pieces + 1] = sub(stream, pos, s - 1)
    pos = e + 1
    if #pieces >= 64 then break end
  end
  pieces[#pieces + 1] = sub(stream, pos)
  return pieces
end

return function(input)
  if #input < 1 then return end
  local c = byte(input, 1)
  local lim = LIMITS[band(c, 0x18) / 8]
  local cfg = { client = band(c, 1) ~= 0, auto_pong = band(c, 2) == 0,
                close_first = band(c, 4) ~= 0, lim = lim,
                max_message = lim[1], max_frame = lim[2] or lim[1] }
  local pieces = split(sub(input, 2))
  local whole = concat(pieces)
  local ev_ref, sent_ref = reference(whole, cfg)
  local ev1, sent1 = run(cfg, { whole })
  local ev2, sent2 = run(cfg, pieces)
  if not cfg.close_first then
    same_events(ev1, ev_ref, "one read")
    same_events(ev2, ev_ref, "with timeouts")
  end
  for _, s in ipairs({ sent1, sent2 }) do
    check(#s == #sent_ref, "%d frames sent, expected %d", #s, #sent_ref)
    for i = 1, #s do
      check(s[i][1] == sent_ref[i][1], "sent frame %d has opcode %d, expected %d", i, s[i][1], sent_ref[i][1])
      local want = sent_ref[i][2]
      if type(want) == "number" then
        -- A failure's close: the code, then the module's own reason.
        local got = s[i][2]
        check(#got >= 2 and byte(got, 1) * 256 + byte(got, 2) == want,
          "sent close code %s, expected %d", #got >= 2 and byte(got, 1) * 256 + byte(got, 2) or "none", want)
        check(#got <= 125 and utf8_ok(sub(got, 3)), "sent close reason")
      else
        check(s[i][2] == want, "sent frame %d's payload differs", i)
      end
    end
  end
end
