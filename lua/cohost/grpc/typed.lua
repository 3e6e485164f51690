-- cohost.grpc.typed: gRPC services and client stubs from .proto files
-- (docs/grpc.md). A service's methods, their kinds (unary, server, client
-- or bidi streaming) and their message types come from a set of
-- cohost.protobuf (pb.load, pb.load_descriptor); handlers and callers see
-- Lua tables, which this module encodes and decodes around the byte-level
-- server (cohost.grpc) and client (cohost.grpc.client).
local status = require "cohost.grpc.status"

local format, concat, sort = string.format, table.concat, table.sort

local M = {}

local function raise(code, message)
  error(status.new_error(code, message), 0)
end

local function check_set(set, level)
  if type(set) ~= "table" or type(set.service) ~= "function" or type(set.encode) ~= "function" then
    error("bad types (a set of cohost.protobuf's pb.load or pb.load_descriptor expected)", level + 1)
  end
end

local function find_service(set, name, level)
  if type(name) ~= "string" then error("bad service name (string expected)", level + 1) end
  local S = set:service(name)
  if not S then
    local names = {}
    for n in pairs(set.services) do names[#names + 1] = n end
    sort(names)
    error(format("no service %s in these types (they have: %s)", name,
      #names > 0 and concat(names, ", ") or "none"), level + 1)
  end
  return S
end

-- The kind of a method as cohost.grpc names it.
local function kind_of(m)
  if m.client_streaming then return m.server_streaming and "bidi" or "client_stream" end
  return m.server_streaming and "server_stream" or "unary"
end
M.kind_of = kind_of

-- -- Server side ------------------------------------------------------------------

-- A call's stream with tables for messages: send encodes, recv decodes.
local Stream = {}
Stream.__index = Stream

-- Yields. stream:recv() -> the next request message (a table), or nil
-- once the client ended its stream. Bytes that do not decode end the call
-- with INTERNAL.
function Stream:recv()
  local bytes = self.raw:recv()
  if bytes == nil then return nil end
  local t, err = self.set:decode(self.input, bytes)
  if not t then raise(status.INTERNAL, "cannot decode the request: " .. err) end
  return t
end

function Stream:messages()
  return function() return self:recv() end
end

-- Yields (as the client's window allows). stream:send(t): one response
-- message, a table (or a string, sent as the encoded message).
function Stream:send(t)
  if type(t) ~= "string" then t = self.set:encode(self.output, t) end
  return self.raw:send(t)
end

local function typed_stream(raw, set, m)
  return setmetatable({ raw = raw, ctx = raw.ctx, set = set, input = m.input.name, output = m.output.name }, Stream)
end

-- The byte-level spec (cohost.grpc's srv:method) of method m served by fn.
local function server_spec(set, m, fn)
  local input, output = m.input.name, m.output.name
  local function request(bytes)
    local t, err = set:decode(input, bytes)
    if not t then raise(status.INTERNAL, "cannot decode the request: " .. err) end
    return t
  end
  local function reply(kind, r, code, message)
    if r == nil then
      if code ~= nil then return nil, code, message end
      error(format("%s handler of %s returned nil, not a message (table)", kind, m.path), 0)
    end
    if type(r) == "string" then return r end
    return set:encode(output, r)
  end
  local kind = kind_of(m)
  if kind == "unary" then
    return { unary = function(bytes, ctx) return reply(kind, fn(request(bytes), ctx)) end }
  elseif kind == "server_stream" then
    return { server_stream = function(bytes, stream, ctx)
      return fn(request(bytes), typed_stream(stream, set, m), ctx)
    end }
  elseif kind == "client_stream" then
    return { client_stream = function(stream, ctx)
      return reply(kind, fn(typed_stream(stream, set, m), ctx))
    end }
  end
  return { bidi = function(stream, ctx) return fn(typed_stream(stream, set, m), ctx) end }
end

-- service(srv, set, name, handlers, level): each key of handlers a method
-- of service name in set, its value the handler: fn(req, ctx) -> reply,
-- fn(req, stream, ctx), fn(stream, ctx) -> reply or fn(stream, ctx) by the
-- method's kind. Methods without a handler answer UNIMPLEMENTED. The
-- server keeps the set for reflection (srv.proto_services).
function M.service(srv, set, name, handlers, level)
  level = level or 1
  check_set(set, level + 1)
  local S = find_service(set, name, level + 1)
  if type(handlers) ~= "table" then error("bad handlers (table expected)", level + 1) end
  local specs = {}
  for mname, fn in pairs(handlers) do
    local m = type(mname) == "string" and S.by_name[mname]
    if not m then
      local names = {}
      for _, x in ipairs(S.methods) do names[#names + 1] = x.name end
      error(format("%s has no method %s (it has: %s)", name, tostring(mname), concat(names, ", ")), level + 1)
    end
    if type(fn) ~= "function" then error(format("handler of %s is not a function", m.path), level + 1) end
    specs[m.path] = server_spec(set, m, fn)
  end
  for path, spec in pairs(specs) do srv:method(path, spec) end
  srv.proto_services = srv.proto_services or {}
  srv.proto_services[name] = set
end

-- -- Client side --------------------------------------------------------------------

-- A request message: a table to encode, or a string sent as the encoded
-- message it is.
local function encode(set, name, t)
  if type(t) == "string" then return t end
  return set:encode(name, t)
end

-- A client call with tables for messages; everything else (headers,
-- trailers, err, cancel, close_send) is the byte-level call's.
local Call = {}
local CallMT = {
  __index = function(c, k)
    local v = Call[k]
    if v ~= nil then return v end
    return c.raw[k]
  end,
}

local function decode_failed(c, err)
  local raw = c.raw
  raw:cancel()
  c.failed = status.new_error(status.INTERNAL, "cannot decode the response: " .. err,
    { headers = raw.headers or {}, trailers = raw.trailers or {} })
  return nil, c.failed
end

-- Yields. call:recv() -> the next response message (a table), or nil at
-- the end: nil alone when the call ended OK, nil, err when it failed.
function Call:recv()
  if self.failed then return nil, self.failed end
  local bytes, err = self.raw:recv()
  if bytes == nil then return nil, err end
  local t, derr = self.set:decode(self.output, bytes)
  if not t then return decode_failed(self, derr) end
  return t
end

-- `for msg in call do`: raises the status error when the call fails.
function CallMT.__call(c)
  local t, err = c:recv()
  if err then error(err, 2) end
  return t
end

-- Yields. call:send(t) -> true, or nil, err (bidi calls).
function Call:send(t)
  return self.raw:send(encode(self.set, self.input, t))
end

function Call:close_send() return self.raw:close_send() end
function Call:cancel() return self.raw:cancel() end

local function typed_call(raw, set, m)
  return setmetatable({ raw = raw, set = set, input = m.input.name, output = m.output.name }, CallMT)
end

-- The stub function of method m on channel ch.
local function stub_fn(ch, set, m)
  local path, input, output = m.path, m.input.name, m.output.name
  local function finish(reply, err, call)
    if reply == nil then return nil, err end
    local t, derr = set:decode(output, reply)
    if not t then
      return nil, status.new_error(status.INTERNAL, "cannot decode the response: " .. derr,
        { headers = call.headers or {}, trailers = call.trailers or {} })
    end
    return t, nil, call
  end
  local kind = kind_of(m)
  if kind == "unary" then
    -- stub:Method(req [, opts]) -> reply, nil, call | nil, err
    return function(_, req, opts)
      return finish(ch:unary(path, encode(set, input, req), opts))
    end
  elseif kind == "server_stream" then
    -- stub:Method(req [, opts]) -> call (call:recv(), `for msg in call`)
    return function(_, req, opts)
      return typed_call(ch:server_stream(path, encode(set, input, req), opts), set, m)
    end
  elseif kind == "client_stream" then
    -- stub:Method(msgs [, opts]) -> reply, nil, call | nil, err; msgs an
    -- array of tables or a function returning them, then nil
    return function(_, msgs, opts)
      local source
      if type(msgs) == "table" then
        local i = 0
        source = function()
          i = i + 1
          local t = msgs[i]
          if t == nil then return nil end
          return encode(set, input, t)
        end
      elseif type(msgs) == "function" then
        source = function()
          local t = msgs()
          if t == nil then return nil end
          return encode(set, input, t)
        end
      else
        error("bad request messages (array or function expected)", 2)
      end
      return finish(ch:client_stream(path, source, opts))
    end
  end
  -- stub:Method([opts]) -> call: send(t), close_send(), recv(), cancel()
  return function(_, opts) return typed_call(ch:bidi(path, opts), set, m) end
end

-- stub(ch, set, name) -> a table with a function per method of service
-- name: stub:GetNote({ id = 1 }) and the streaming forms.
function M.stub(ch, set, name, level)
  level = level or 1
  check_set(set, level + 1)
  local S = find_service(set, name, level + 1)
  local stub = {}
  for _, m in ipairs(S.methods) do stub[m.name] = stub_fn(ch, set, m) end
  return stub
end

return M
