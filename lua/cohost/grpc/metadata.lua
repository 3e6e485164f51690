-- cohost.grpc.metadata: gRPC's custom metadata (PROTOCOL-HTTP2.md's
-- "Custom-Metadata"), the header fields a call carries besides gRPC's own:
-- which names are reserved, checking what a caller sets, and "-bin"
-- values, which travel as base64. Shared by the server and the client.
local crypto = require "cohost.core.crypto"

local format = string.format

local M = {}

-- Names gRPC reserves for itself: a caller neither sees them as metadata
-- nor sets them.
function M.reserved(name)
  return name:sub(1, 5) == "grpc-" or name == "te" or name == "content-type" or name:sub(1, 1) == ":"
end

local function map(v, fn)
  if type(v) ~= "table" then return fn(v) end
  local t = {}
  for i = 1, #v do t[i] = fn(v[i]) end
  return t
end

-- A "-bin" value is base64 (padding optional): decoded; one that is not
-- base64 is kept as sent.
local function from_bin(s) return crypto.decode_base64(s) or s end
local function to_bin(s) return crypto.encode_base64(s, true) end

-- decode(headers) -> the custom metadata of a header table (lower-case
-- names): reserved names left out, "-bin" values decoded. A repeated
-- name stays an array of its values.
function M.decode(headers)
  local md = {}
  for name, v in pairs(headers or {}) do
    if not M.reserved(name) then
      md[name] = name:sub(-4) == "-bin" and map(v, from_bin) or v
    end
  end
  return md
end

-- wire(name, value, level) -> value as it goes on the wire ("-bin" ones
-- base64-encoded), after checking both; misuse raises at level.
function M.wire(name, value, level)
  if type(name) ~= "string" or not name:match("^[0-9a-z_.%-]+$") then
    error("bad metadata name (lower-case letters, digits, '-', '_', '.' expected)", level + 1)
  end
  if M.reserved(name) then error(format("metadata name %q is reserved by gRPC", name), level + 1) end
  local t = type(value)
  if t ~= "string" and t ~= "table" then error("bad metadata value (string or array expected)", level + 1) end
  return name:sub(-4) == "-bin" and map(value, to_bin) or value
end

return M
