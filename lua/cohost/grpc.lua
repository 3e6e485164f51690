-- cohost.grpc: gRPC services on cohost.http's HTTP/2 server
-- (docs/grpc.md). A call is an HTTP/2 request: its body is a stream of
-- length-prefixed messages (cohost.grpc.frame), its answer messages
-- then grpc-status/grpc-message trailers (cohost.grpc.status). Messages
-- are byte strings: any protobuf library encodes and decodes them.
--
-- A unary call runs its handler on the request's own task; with a
-- deadline (grpc-timeout), and for a streaming call, the handler runs on a
-- task of its own, which the request's task kills when the deadline
-- passes, so a handler parked in any call (a sleep, a database, a read)
-- is stopped there. The drain kills a streaming call's the same way
-- (below, "The drain").
local cohost = require "cohost"
local drain = require "cohost.drain"
local http = require "cohost.http"
local semaphore = require "cohost.semaphore"
local frame = require "cohost.grpc.frame"
local status = require "cohost.grpc.status"
local metadata = require "cohost.grpc.metadata"
local client = require "cohost.grpc.client"
local task = require "cohost.core.task"

local format, lower = string.format, string.lower
local monotonic = cohost.monotonic

local M = {}

M.status = status
M.frame = frame

-- channel(url [, opts]) -> a client channel (cohost.grpc.client).
M.channel = client.channel

-- -- Status errors ------------------------------------------------------------

-- One metatable for the server's and the client's status errors.
local Error = status.Error

local function check_code(code, level)
  if type(code) ~= "number" or code ~= math.floor(code) or code < 0 or code > 0xffffffff then
    error("bad status code (an integer expected, see grpc.status)", level + 1)
  end
end

-- error(code [, message]): raises a status error; the call ends with
-- that code and message, and nothing is logged. Raisable from any depth.
function M.error(code, message)
  check_code(code, 2)
  error(status.new_error(code, message and tostring(message)), 0)
end

-- is_error(v) -> true when v is a value grpc.error raised.
function M.is_error(v)
  return getmetatable(v) == Error
end

-- -- Metadata ------------------------------------------------------------------

-- Checks a metadata name and value a handler sets; returns the value
-- as it goes on the wire.
local wire_value = metadata.wire

-- -- The call context ----------------------------------------------------------

local Context = {}

-- ctx.metadata and ctx.peer are made on first use, and kept: most
-- handlers read neither, and each costs a walk of the headers or a
-- formatted address per call.
local LAZY = {
  metadata = function(ctx) return metadata.decode(ctx.req.headers) end,
  peer = function(ctx) return ctx.req.peer end,
}
Context.__index = function(ctx, k)
  local v = Context[k]
  if v ~= nil then return v end
  local make = LAZY[k]
  if make == nil then return nil end
  v = make(ctx)
  rawset(ctx, k, v)
  return v
end

-- ctx:remaining() -> seconds left before the deadline (0 once it passed),
-- or nil when the client set none.
function Context:remaining()
  local d = self.deadline
  if not d then return nil end
  local left = d - monotonic()
  return left > 0 and left or 0
end

-- ctx:set_header(name, value) -> ctx: response metadata sent with the
-- response's headers (before the first message; raises after it).
function Context:set_header(name, value)
  local v = wire_value(name, value, 2)
  local res = self._call.res
  if res:sent() then error("response headers already sent (set metadata before the first message)", 2) end
  res:header(name, v)
  return self
end

-- ctx:set_trailer(name, value) -> ctx: response metadata sent with the
-- status at the end of the call.
function Context:set_trailer(name, value)
  local v = wire_value(name, value, 2)
  local t = self._call.trailers
  t[#t + 1] = { name, v }
  return self
end

-- -- Streams -------------------------------------------------------------------

-- The status message of a streaming call the drain ends.
local DRAINING = "the server is shutting down"

local Stream = {}
Stream.__index = Stream

-- Raises the status a failed request read stands for: the framing's own
-- code, or the HTTP layer's error string.
local function read_failed(code, message)
  if code then M.error(code, message) end
  if message == "too large" then
    M.error(status.RESOURCE_EXHAUSTED, "request stream is over the listener's max_body_size")
  end
  M.error(status.INTERNAL, "request stream: " .. tostring(message))
end

-- Yields. stream:recv() -> the next request message, or nil once the
-- client has ended its stream. A malformed stream raises its status.
function Stream:recv()
  local msg, code, message = self._call.reader:next()
  if msg == nil and (code or message) then read_failed(code, message) end
  return msg
end

-- stream:messages() -> an iterator of the request's messages.
function Stream:messages()
  return function() return self:recv() end
end

-- Yields (as the client's window allows). stream:send(msg): one response
-- message; the response's headers go out with the first.
function Stream:send(msg)
  if type(msg) ~= "string" then
    error(format("bad argument #1 to 'send' (string expected, got %s)", type(msg)), 2)
  end
  local call = self._call
  if call.ended then error("the call has ended", 2) end
  -- A write that does not block would not see the kill's "cancelled".
  if call.expired then M.error(status.DEADLINE_EXCEEDED, "deadline exceeded") end
  if #msg > call.srv.max_send then
    M.error(status.RESOURCE_EXHAUSTED,
      format("response message of %d bytes is over max_send_message_size (%d)", #msg, call.srv.max_send))
  end
  if call.drained then M.error(status.UNAVAILABLE, DRAINING) end
  local res = call.res
  call.writing = true   -- a kill in here leaves half a message queued
  if #msg < 16384 then
    res:write(frame.encode(msg))
  else
    res:write(frame.prefix(#msg))
    res:write(msg)
  end
  call.writing = false
end

-- -- Running a call --------------------------------------------------------------

-- Yields. The one request message of a unary or server-streaming call:
-- exactly one, then the end of the stream.
local function only_message(stream)
  local msg = stream:recv()
  if msg == nil then M.error(status.INTERNAL, "no request message") end
  if stream:recv() ~= nil then M.error(status.INTERNAL, "more than one request message for a single-message call") end
  return msg
end

-- What a handler returned: a reply, or nil with a status code and message.
local function reply_status(stream, kind, reply, code, message)
  if reply == nil and code ~= nil then
    check_code(code, 3)
    return code, message
  end
  if kind == "unary" or kind == "client_stream" then
    if type(reply) ~= "string" then
      error(format("%s handler returned %s, not a message (string)", kind, type(reply)), 0)
    end
    stream:send(reply)
  end
  return status.OK
end

-- Yields. Runs the handler of the call's kind; returns status, message.
local function body(call)
  local m, stream, ctx = call.method, call.stream, call.ctx
  local kind, fn = m.kind, m.fn
  if kind == "unary" then
    return reply_status(stream, kind, fn(only_message(stream), ctx))
  elseif kind == "server_stream" then
    return reply_status(stream, kind, fn(only_message(stream), stream, ctx))
  end
  return reply_status(stream, kind, fn(stream, ctx))   -- client_stream, bidi
end

-- The message handler of the call's xpcall: status errors and a client
-- gone away pass through, be it the HTTP layer's quiet error (a handler
-- parked on the stream) or "cancelled" (one parked anywhere else, a sleep
-- or a cosocket, its task cancelled by the stream's reset: the task's end
-- logs that at info); anything else is a bug in the handler, whose
-- traceback is taken here, where the stack still holds the frames that
-- raised it (conclude logs it, or drops it for a call killed at its
-- deadline or by the drain). One function for every call: a closure
-- made per call would stop LuaJIT's trace of the call there (making one
-- is not compiled).
local function traced(e)
  if getmetatable(e) == Error or task.cancelled() then return e end
  local quiet = debug.getregistry()["cohost.quiet_error"]
  if quiet and getmetatable(e) == quiet then return e end
  return { internal = true, traceback = debug.traceback(tostring(e), 2) }
end

-- grpc-status values, made once.
local CODE_TEXT = {}
for code = 0, 16 do CODE_TEXT[code] = tostring(code) end

-- Ends the response with code and message as trailers: after the
-- messages, or, when none was sent, a trailers-only response (the HTTP/2
-- layer makes a body-less response with trailers one HEADERS frame,
-- without content-length).
local function finish(call, code, message)
  call.ended = true
  local res = call.res
  -- A numeric for that runs no round for a call without trailers: an
  -- ipairs loop left at once would cut LuaJIT's trace of the call.
  local trailers = call.trailers
  for j = 1, #trailers do   -- res:trailer adds a field per call
    local kv = trailers[j]
    local v = kv[2]
    if type(v) == "table" then
      for i = 1, #v do res:trailer(kv[1], v[i]) end
    else
      res:trailer(kv[1], v)
    end
  end
  res:trailer("grpc-status", CODE_TEXT[code] or tostring(code))
  if message and message ~= "" then res:trailer("grpc-message", status.encode_message(message)) end
  res:send("")
end

-- Turns the xpcall's result into the call's end.
local function conclude(call, ok, code, message)
  local e = code
  -- Whatever a handler killed at its deadline or by the drain did after.
  if call.expired or call.drained then
    -- Half a message queued cannot be followed by trailers: the stream
    -- is reset instead (RST_STREAM INTERNAL_ERROR, an info line).
    if call.writing then
      call.res:reset()
      return
    end
    if call.expired then return finish(call, status.DEADLINE_EXCEEDED, "deadline exceeded") end
    cohost.log(cohost.INFO, "grpc ", call.ctx.method, ": the worker drains: ended with UNAVAILABLE")
    return finish(call, status.UNAVAILABLE, DRAINING)
  end
  if ok then return finish(call, code, message) end
  if getmetatable(e) == Error then return finish(call, e.code, e.message) end
  if type(e) == "table" and e.internal then
    cohost.log(cohost.ERR, "grpc ", call.ctx.method, " handler error: ", e.traceback)
    return finish(call, status.INTERNAL, "handler error (see the server's log)")
  end
  error(e, 0)   -- the client went away: the HTTP layer's quiet error
end

-- -- The drain ---------------------------------------------------------------------
--
-- A streaming call may never end on its own (a watch), and a worker that
-- goes must not keep its clients until --shutdown-timeout cancels them
-- (RST_STREAM, which a client may not retry). When the drain's closers
-- run (cohost.drain: after the on_shutdown functions, which may end their
-- calls themselves), each streaming call's connection gets its GOAWAY
-- (no new calls there), then its handler is killed and the call ends with
-- UNAVAILABLE, which a client retries, on another connection. Unary calls
-- finish as any request does. This worker's calls, call -> true:
local streams = {}

drain.closer(function()
  for call in pairs(streams) do call.res:goaway() end
  for call in pairs(streams) do
    if not call.drained then
      -- Set first: from here on the handler's sends raise. kill fails
      -- only if the task ended meanwhile: its result stands.
      call.drained = true
      if not cohost.kill(call.task) then call.drained = false end
    end
  end
end)

-- Yields. done:wait() until the call's deadline, or for as long as it
-- takes without one (sema:wait() without a timeout would not wait at
-- all: ngx.semaphore's default is 0).
local function wait_done(call, done)
  if call.ctx.deadline then return done:wait(call.ctx:remaining()) end
  while not done:wait(3600) do end
  return true
end

-- Yields. Runs the call on a task of its own: the request's task waits
-- for it and kills it when the deadline passes; the drain kills a
-- streaming one.
local function run_apart(call, run)
  local done = semaphore.new(0)
  local ok, code, message
  local t = cohost.spawn(function()
    ok, code, message = xpcall(run, traced, call)
    done:post()
  end)
  call.task = t
  local streaming = call.method.kind ~= "unary"
  if streaming then streams[call] = true end
  local waited, got = pcall(wait_done, call, done)
  streams[call] = nil
  if not waited then
    -- This task was killed itself: the handler's must not outlive it
    -- (req and res end with this task); its errors are nobody's now.
    call.expired = true
    cohost.kill(t)
    error(got, 0)
  end
  if not got then
    -- Set first: from here on the handler's sends raise. kill fails only
    -- if the task ended meanwhile: its result stands.
    call.expired = true
    if not cohost.kill(t) then call.expired = false end
    -- Its next blocking call raises "cancelled": wait until it unwound,
    -- since req and res must not outlive this task. (sema:wait() without
    -- a timeout would not wait at all: ngx.semaphore's default is 0.)
    while not done:wait(60) do end
  end
  return ok, code, message
end

local function is_grpc_type(ct)
  if type(ct) ~= "string" then return false end
  ct = lower(ct)
  return ct == "application/grpc" or ct:find("^application/grpc[+;]") ~= nil
end

-- Answers a request that is not a gRPC call as plain HTTP.
local function refuse(res, code, text)
  res.status = code
  res:send(text .. "\n")
end

-- Yields. Serves one request of srv.
local function serve(srv, fallback, req, res)
  -- req:header looks one name up in C: req.headers would build a table of
  -- every header on each call.
  if not is_grpc_type(req:header("content-type")) then
    if fallback then return fallback(req, res) end
    return refuse(res, 415, "gRPC expects content-type application/grpc")
  end
  if req.version ~= 2 then return refuse(res, 505, "gRPC needs HTTP/2") end
  if req.method ~= "POST" then
    res:header("Allow", "POST")
    return refuse(res, 405, "gRPC calls are POST")
  end
  res:header("content-type", "application/grpc")
  local path = req.target
  local m = srv.methods[path]
  local ctx = setmetatable({ method = path, req = req }, Context)
  if m then
    ctx.service, ctx.name = m.service, m.name
  else
    ctx.service, ctx.name = path:match("^/(.+)/([^/]+)$")
  end
  local call = { srv = srv, req = req, res = res, ctx = ctx, trailers = {} }
  ctx._call = call
  call.stream = setmetatable({ _call = call, ctx = ctx }, Stream)
  local enc = req:header("grpc-encoding")
  if enc ~= nil and enc ~= "identity" then
    res:header("grpc-accept-encoding", "identity")
    return finish(call, status.UNIMPLEMENTED, format("grpc-encoding %s is not supported", tostring(enc)))
  end
  local timeout = req:header("grpc-timeout")
  if timeout ~= nil then
    local secs = type(timeout) == "string" and status.parse_timeout(timeout)
    if not secs then return finish(call, status.INTERNAL, "malformed grpc-timeout") end
    ctx.deadline = monotonic() + secs
  end
  call.method = m
  if not m then
    return finish(call, status.UNIMPLEMENTED, "unknown method " .. path)
  end
  call.reader = frame.reader(req, srv.max_recv)   -- req:read, no closure per call
  -- A client or bidi stream may idle between messages for as long as the
  -- call lives: the listener's body_timeout is lifted (the deadline, if
  -- any, bounds the call; a client gone ends it through the connection).
  local kind = call.method.kind
  if kind == "client_stream" or kind == "bidi" then req:settimeout(0) end
  if kind == "unary" and not ctx.deadline then return conclude(call, xpcall(body, traced, call)) end
  if ctx.deadline and ctx:remaining() <= 0 then return finish(call, status.DEADLINE_EXCEEDED, "deadline exceeded") end
  if kind ~= "unary" and drain.closing then   -- it came after the closers ran
    res:goaway()
    return finish(call, status.UNAVAILABLE, DRAINING)
  end
  return conclude(call, run_apart(call, body))
end

-- -- Servers ---------------------------------------------------------------------

local KINDS = { "unary", "server_stream", "client_stream", "bidi" }

-- A method's spec: a function (unary) or a table with one of KINDS.
local function method_spec(path, spec, level)
  local service, name = path:match("^/(.+)/([^/]+)$")   -- ctx.service, ctx.name
  if type(spec) == "function" then return { kind = "unary", fn = spec, service = service, name = name } end
  if type(spec) ~= "table" then
    error(format("bad method %s (function or table expected)", path), level + 1)
  end
  local found
  for _, kind in ipairs(KINDS) do
    if spec[kind] ~= nil then
      if found then error(format("method %s has two kinds (%s and %s)", path, found.kind, kind), level + 1) end
      if type(spec[kind]) ~= "function" then error(format("method %s: %s must be a function", path, kind), level + 1) end
      found = { kind = kind, fn = spec[kind], service = service, name = name }
    end
  end
  return found or error(format("method %s has none of unary, server_stream, client_stream, bidi", path), level + 1)
end

local Server = {}
Server.__index = Server

local function opt_size(opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if type(v) ~= "number" or v < 0 then error(format("bad option %s (a byte count expected)", name), 3) end
  return v
end

-- server([opts]) -> a gRPC server: add services, then mount it with
-- http.listen(addr, srv) or grpc.listen. opts: max_receive_message_size
-- (4 MiB), max_send_message_size (4 MiB), fallback (a handler or router
-- for requests that are not gRPC calls, e.g. the HTTP/1.1 site).
function M.server(opts)
  opts = opts or {}
  local fb = opts.fallback
  if fb ~= nil and type(fb) ~= "function" and type(fb) ~= "table" then
    error("bad option fallback (handler or router expected)", 2)
  end
  local srv = setmetatable({
    methods = {},
    max_recv = opt_size(opts, "max_receive_message_size", frame.MAX_MESSAGE),
    max_send = opt_size(opts, "max_send_message_size", frame.MAX_MESSAGE),
    fallback = fb,
  }, Server)
  -- The standard services (docs/grpc.md): health checking unless
  -- health = false, reflection when reflection = true. Required here, so
  -- that a script that only calls pays nothing for them.
  if opts.health ~= false then require("cohost.grpc.health").install(srv) end
  if opts.reflection then require("cohost.grpc.reflection").install(srv) end
  return srv
end

-- srv:service_from_proto(types, "package.Service", handlers) -> srv: the
-- service's methods from a cohost.protobuf set (pb.load), each handler
-- getting and returning tables; the kind of each method (unary, server,
-- client or bidi streaming) is the .proto file's.
function Server:service_from_proto(types, name, handlers)
  require("cohost.grpc.typed").service(self, types, name, handlers, 2)
  return self
end

-- srv:set_health(name, status) -> srv: service name's health status
-- ("SERVING", "NOT_SERVING", "UNKNOWN", or nil to forget it); "" is the
-- server's as a whole.
function Server:set_health(name, st)
  require("cohost.grpc.health").set(self, name, st, 2)
  return self
end

-- srv:method(path, spec) -> srv: path is "/package.Service/Method".
function Server:method(path, spec)
  if type(path) ~= "string" or not path:match("^/[^/]+/[^/]+$") then
    error("bad method path (\"/package.Service/Method\" expected)", 2)
  end
  self.methods[path] = method_spec(path, spec, 2)
  return self
end

-- srv:service(name, methods) -> srv: each key of methods is a method name
-- of the service name ("package.Service").
function Server:service(name, methods)
  if type(name) ~= "string" or name:find("/", 1, true) then
    error("bad service name (\"package.Service\" expected)", 2)
  end
  if type(methods) ~= "table" then error("bad argument #2 to 'service' (table expected)", 2) end
  for mname, spec in pairs(methods) do
    local path = "/" .. name .. "/" .. tostring(mname)
    self.methods[path] = method_spec(path, spec, 2)
  end
  return self
end

-- srv:handler([opts]) -> function(req, res): what http.listen runs (it
-- calls this itself when given srv).
function Server:handler(opts)
  local fb = self.fallback
  if type(fb) == "table" then
    local r = fb
    if type(r.handler) == "function" then
      fb = r:handler(opts)
    else
      fb = function(req, res) return r(req, res) end
    end
  end
  return function(req, res) return serve(self, fb, req, res) end
end

-- listen(addr, srv [, opts]) -> listener | nil, err: http.listen with
-- max_body_size unlimited unless set (a call's stream may be long;
-- max_receive_message_size bounds each message instead).
function M.listen(addr, srv, opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.max_body_size == nil then o.max_body_size = 2 ^ 53 end
  return http.listen(addr, srv, o)
end

return M
