-- cohost.grpc.frame: gRPC's message framing ("Length-Prefixed-Message" in
-- gRPC's PROTOCOL-HTTP2.md): a compressed-flag byte, a 4-byte big-endian
-- length, the message. Knows nothing of HTTP: a server reads request
-- bodies with it, and a client can read response bodies the same way.
-- Errors are gRPC status codes (cohost.grpc.status) with a message, so
-- the caller only has to send them.
local status = require "cohost.grpc.status"

local byte, char, sub, concat = string.byte, string.char, string.sub, table.concat
local floor = math.floor

local M = {}

-- gRPC's default limit on a received message (grpc-go, grpc-java and
-- grpc-core all use 4 MiB).
M.MAX_MESSAGE = 4 * 1024 * 1024

-- prefix(n) -> the 5-byte prefix of an uncompressed message of n bytes.
-- The caller writes the message after it (two writes spare a large
-- message a concatenation).
function M.prefix(n)
  return char(0, floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end

-- encode(msg) -> prefix and message as one string.
function M.encode(msg)
  return M.prefix(#msg) .. msg
end

-- -- Reading ---------------------------------------------------------------

local Reader = {}
Reader.__index = Reader

-- reader(read, max) -> a reader of messages from read(n), which returns
-- up to n bytes, nil at the end, or nil and an error string; or from
-- read:read(n) when read is an object (an HTTP request: no closure to
-- make per call). max is the largest message accepted (default
-- M.MAX_MESSAGE).
function M.reader(read, max)
  local r = { max = max or M.MAX_MESSAGE, buf = "", pos = 1 }
  if type(read) == "function" then r.read = read else r.src = read end
  return setmetatable(r, Reader)
end

-- Yields. Up to n bytes from the reader's source.
local function source_read(r, n)
  local src = r.src
  if src then return src:read(n) end
  return r.read(n)
end

-- Bytes buffered and not yet consumed.
local function avail(r)
  return #r.buf - r.pos + 1
end

-- Yields (read may park). Reads more into the buffer: true, false at
-- the end, or nil and the read's error.
local function fill(r)
  local piece, err = source_read(r, 65536)
  if not piece then
    if err then return nil, err end
    return false
  end
  if r.pos > 1 then r.buf, r.pos = sub(r.buf, r.pos), 1 end
  r.buf = r.buf .. piece   -- short: at most one prefix's bytes plus a piece
  return true
end

-- Takes n buffered bytes out of the buffer.
local function take(r, n)
  local s = sub(r.buf, r.pos, r.pos + n - 1)
  r.pos = r.pos + n
  return s
end

-- Yields. reader:next() -> the next message (a string), nil at a clean
-- end (between messages), or nil, code, message: a truncated prefix or
-- message (INTERNAL), a compressed message (INTERNAL: cohost negotiates
-- no compression, so a client may not send one; gRPC says so), a flag
-- other than 0 or 1 (INTERNAL), a message over max (RESOURCE_EXHAUSTED),
-- or a read error (code nil, message the read's error string).
function Reader:next()
  -- The first fill is out of the loop: a small message comes whole in
  -- one read, and then no loop runs (a loop entered on every call cuts
  -- LuaJIT's trace of it).
  if avail(self) < 5 then
    local more, err = fill(self)
    while more and avail(self) < 5 do more, err = fill(self) end
    if more == nil then return nil, nil, err end
    if not more then
      if avail(self) == 0 then return nil end
      return nil, status.INTERNAL, ("truncated message prefix (%d of 5 bytes)"):format(avail(self))
    end
  end
  local flag, b1, b2, b3, b4 = byte(self.buf, self.pos, self.pos + 4)
  self.pos = self.pos + 5
  local n = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  if flag == 1 then
    return nil, status.INTERNAL, "compressed message, but no grpc-encoding was agreed (cohost accepts identity only)"
  elseif flag ~= 0 then
    return nil, status.INTERNAL, ("bad message flag %d"):format(flag)
  end
  if n > self.max then
    return nil, status.RESOURCE_EXHAUSTED,
      ("message of %d bytes is over the limit of %d bytes"):format(n, self.max)
  end
  if avail(self) >= n then return take(self, n) end
  -- A message longer than the buffer: its pieces go in a table, joined
  -- once (a concatenation per piece would be quadratic).
  local parts, got = { take(self, avail(self)) }, 0
  got = #parts[1]
  while got < n do
    local piece, err = source_read(self, n - got < 65536 and n - got or 65536)
    if not piece then
      if err then return nil, nil, err end
      return nil, status.INTERNAL, ("truncated message (%d of %d bytes)"):format(got, n)
    end
    parts[#parts + 1] = piece
    got = got + #piece
  end
  -- read(n) never returns more than n bytes, so nothing is left over.
  return concat(parts)
end

return M
