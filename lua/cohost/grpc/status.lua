-- cohost.grpc.status: gRPC's status codes and the header values around
-- them (gRPC's PROTOCOL-HTTP2.md): grpc-message's percent-encoding and
-- grpc-timeout's "digits and a unit". Shared by the server and a client.
local byte, char, format, gsub = string.byte, string.char, string.format, string.gsub

local M = {}

-- The codes of gRPC's doc/statuscodes.md, by name and by number.
local NAMES = {
  [0] = "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
  "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
  "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}
M.names = NAMES
for code = 0, #NAMES do M[NAMES[code]] = code end

-- -- Status errors ----------------------------------------------------------

-- The metatable of a status error: what grpc.error raises on the server
-- and what a client call returns (code, message, and on a client headers
-- and trailers). One table, so a handler can re-raise a client's error.
local Error = {}
Error.__index = Error
Error.__tostring = function(e)
  return format("grpc status %d (%s): %s", e.code, NAMES[e.code] or "?", e.message or "")
end
M.Error = Error

-- new_error(code, message [, fields]) -> a status error; fields (a table)
-- becomes the error itself, with code and message set.
function M.new_error(code, message, fields)
  local e = fields or {}
  e.code, e.message = code, message
  return setmetatable(e, Error)
end

-- -- grpc-message -----------------------------------------------------------

-- encode_message(s) -> s percent-encoded as grpc-message wants it: every
-- byte outside 0x20-0x7E, and '%' itself, as %XX (UTF-8 text stays
-- readable to a client, which decodes it).
function M.encode_message(s)
  return (gsub(s, "[^\32-\36\38-\126]", function(c) return format("%%%02X", byte(c)) end))
end

-- decode_message(s) -> s with its %XX decoded; a '%' not followed by two
-- hex digits stays as it is (gRPC: decode what can be, never fail).
function M.decode_message(s)
  return (gsub(s, "%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
end

-- -- grpc-timeout -----------------------------------------------------------

local UNIT = { H = 3600, M = 60, S = 1, m = 1e-3, u = 1e-6, n = 1e-9 }

-- parse_timeout(v) -> seconds, or nil when v is not 1 to 8 ASCII digits
-- and one of the units H M S m u n.
function M.parse_timeout(v)
  local digits, unit = v:match("^(%d%d?%d?%d?%d?%d?%d?%d?)([HMSmun])$")
  if not digits then return nil end
  return tonumber(digits) * UNIT[unit]
end

-- format_timeout(seconds) -> a grpc-timeout value for a client: the
-- finest unit that fits 8 digits, rounded up (a deadline never shrinks).
function M.format_timeout(secs)
  for _, u in ipairs { "n", "u", "m", "S", "M" } do
    local n = math.ceil(secs / UNIT[u])
    if n < 1e8 then return format("%d%s", n, u) end
  end
  return format("%dH", math.min(math.ceil(secs / 3600), 99999999))
end

return M
