-- cohost.grpc.reflection: gRPC server reflection,
-- grpc.reflection.v1alpha.ServerReflection
-- (lua/cohost/grpc/proto/grpc/reflection/v1alpha/reflection.proto), served
-- when a server is made with reflection = true (docs/grpc.md,
-- "Reflection"): generic clients (grpcurl, grpc_cli, a client built on
-- the reflection proto) list the services and fetch the descriptors of
-- their .proto files. It knows the services added from .proto files
-- (srv:service_from_proto) and the standard ones; services added as bytes
-- (srv:service) have no descriptor and are not listed.
local status = require "cohost.grpc.status"
local health = require "cohost.grpc.health"
local typed = require "cohost.grpc.typed"

local sort = table.sort

local M = {}

M.SERVICE = "grpc.reflection.v1alpha.ServerReflection"

-- The distinct sets of srv's typed services.
local function sets(srv)
  local out, seen = {}, {}
  for _, set in pairs(srv.proto_services or {}) do
    if not seen[set] then
      seen[set] = true
      out[#out + 1] = set
    end
  end
  return out
end

-- The serialized FileDescriptorProtos that answer for file name of set:
-- the file, then those it imports, directly or not, that this stream has
-- not sent yet (sent: names already sent), as grpc-core's reflection does.
local function files(set, name, sent)
  local out = { set:file(name) }
  sent[name] = true
  for _, dep in ipairs(set:dependencies(name)) do
    if not sent[dep] then
      sent[dep] = true
      out[#out + 1] = set:file(dep)
    end
  end
  return { file_descriptor_proto = out }
end

local function failure(code, message)
  return { error_code = code, error_message = message }
end

-- The response to one request of a stream.
local function answer(srv, req, sent)
  local res = { valid_host = req.host, original_request = req }
  if req.list_services ~= nil then
    local names = {}
    for name in pairs(srv.proto_services or {}) do names[#names + 1] = { name = name } end
    sort(names, function(a, b) return a.name < b.name end)
    res.list_services_response = { service = names }
  elseif req.file_by_filename ~= nil then
    local name = req.file_by_filename
    for _, set in ipairs(sets(srv)) do
      if set.files[name] then
        res.file_descriptor_response = files(set, name, sent)
        return res
      end
    end
    res.error_response = failure(status.NOT_FOUND, "file not found: " .. name)
  elseif req.file_containing_symbol ~= nil then
    local symbol = req.file_containing_symbol
    for _, set in ipairs(sets(srv)) do
      local file = set:file_of(symbol)
      if file then
        res.file_descriptor_response = files(set, file, sent)
        return res
      end
    end
    res.error_response = failure(status.NOT_FOUND, "symbol not found: " .. symbol)
  elseif req.file_containing_extension ~= nil then
    -- cohost.protobuf reads no extensions (proto2's), so none is known.
    res.error_response = failure(status.NOT_FOUND, "extension not found")
  elseif req.all_extension_numbers_of_type ~= nil then
    local name = req.all_extension_numbers_of_type
    for _, set in ipairs(sets(srv)) do
      if set:message(name) then
        res.all_extension_numbers_response = { base_type_name = name, extension_number = {} }
        return res
      end
    end
    res.error_response = failure(status.NOT_FOUND, "type not found: " .. name)
  else
    res.error_response = failure(status.INVALID_ARGUMENT, "no request set in message_request")
  end
  return res
end

-- install(srv): srv serves grpc.reflection.v1alpha.ServerReflection.
function M.install(srv)
  typed.service(srv, health.types(), M.SERVICE, {
    -- Yields. One response per request, until the client ends its stream.
    ServerReflectionInfo = function(stream)
      local sent = {}
      for req in stream:messages() do stream:send(answer(srv, req, sent)) end
    end,
  }, 2)
end

return M
