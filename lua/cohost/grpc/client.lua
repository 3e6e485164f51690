-- cohost.grpc.client: gRPC calls over cohost.http's HTTP/2 client
-- (docs/grpc.md, "Client"). A call is one HTTP/2 request on the origin's
-- shared connection: its body the length-prefixed request messages
-- (cohost.grpc.frame), its answer messages then grpc-status trailers
-- (cohost.grpc.status). Messages are byte strings, as on the server.
--
-- Failures are never raised: a call returns nil and a status error (the
-- server's errors' metatable, so a handler may re-raise it), with code
-- and message, and the headers and trailers the server sent. Misuse (a
-- bad path, a message that is not a string) raises.
local cohost = require "cohost"
local client = require "cohost.http.client"
local chan = require "cohost.channel"
local frame = require "cohost.grpc.frame"
local status = require "cohost.grpc.status"
local metadata = require "cohost.grpc.metadata"

local ceil, min = math.ceil, math.min
local format, lower = string.format, string.lower
local monotonic = cohost.monotonic

local M = {}

local CONNECT_MS = 20000   -- connect timeout without a deadline (grpc-core's
                           -- minimum connect timeout is 20 s)
local SLACK = 0.001        -- s: a timer may fire this early (ms rounding)

-- gRPC's doc/http-grpc-status-mapping.md: an HTTP status other than 200
-- on a response without grpc-status; any other is UNKNOWN.
local HTTP_STATUS = {
  [400] = status.INTERNAL, [401] = status.UNAUTHENTICATED, [403] = status.PERMISSION_DENIED,
  [404] = status.UNIMPLEMENTED, [429] = status.UNAVAILABLE, [502] = status.UNAVAILABLE,
  [503] = status.UNAVAILABLE, [504] = status.UNAVAILABLE,
}

-- RST_STREAM codes (PROTOCOL-HTTP2.md, "Errors"), as the HTTP/2 client
-- names them ("reset: CANCEL"); any other reset is INTERNAL.
local RESET = {
  CANCEL = status.CANCELLED, ENHANCE_YOUR_CALM = status.RESOURCE_EXHAUSTED,
  INADEQUATE_SECURITY = status.PERMISSION_DENIED, REFUSED_STREAM = status.UNAVAILABLE,
}

local function first(v)
  if type(v) == "table" then return v[1] end
  return v
end

-- -- Calls -----------------------------------------------------------------------

-- A call: ch, path, o (http.request's options), deadline (monotonic s or
-- nil), pending (the request sent, its answer not read yet), res (the
-- streamed response), reader (frame.reader on it), done, err (its status
-- error, nil once it ended OK), headers, trailers.
local Call = {}
Call.__index = Call

-- Ends the call with code and message (the first end stands); returns false.
local function fail(call, code, message, http_status)
  if not call.done then
    call.done = true
    call.ch.calls[call] = nil
    call.err = status.new_error(code, message, {
      headers = call.headers or {}, trailers = call.trailers or {}, http_status = http_status,
    })
    -- Resets a stream still open (and wakes a task waiting on it).
    if call.pending then call.pending:close() end
    if call.res then call.res:close() end
  end
  return false
end

-- The status an I/O error string stands for. A timeout is the deadline's
-- once it has passed (every timeout of a call with one is at most what is
-- left of it), else a connect timeout.
local function io_failed(call, err)
  if err == "timeout" then
    if call.deadline and monotonic() >= call.deadline - SLACK then
      return fail(call, status.DEADLINE_EXCEEDED, "deadline exceeded")
    end
    return fail(call, status.UNAVAILABLE, "timeout")
  end
  local reset = err:match("^reset: (.+)$")
  if reset then return fail(call, RESET[reset] or status.INTERNAL, "stream " .. err) end
  if err == "bad response head" then return fail(call, status.INTERNAL, err) end
  -- "closed", "refused", "connection refused", a TLS or DNS failure: the
  -- server is not there (or went away), gRPC's UNAVAILABLE.
  return fail(call, status.UNAVAILABLE, err)
end

-- Ends the call with the status in fields (the trailers, or the head of a
-- trailers-only response).
local function ended(call, fields)
  call.trailers = metadata.decode(fields)
  local code = tonumber(first(fields["grpc-status"]))
  if not code then return fail(call, status.INTERNAL, "the response ended without grpc-status") end
  if code == status.OK then
    call.done = true
    call.ch.calls[call] = nil
    return true
  end
  local msg = first(fields["grpc-message"])
  return fail(call, code, msg and status.decode_message(msg) or "")
end

-- Yields (what is left of the deadline at most). Up to n body bytes.
local function read_body(call, n)
  local d = call.deadline
  if d then
    local ms = (d - monotonic()) * 1000
    if ms <= 0 then return nil, "timeout" end
    call.res:set_timeout(ceil(ms))
  end
  return call.res:read(n)
end

-- What is left of call's deadline in ms (nil: no deadline), or nil,
-- true once it has passed.
local function left_ms(call)
  local d = call.deadline
  if not d then return nil end
  local ms = ceil((d - monotonic()) * 1000)
  if ms <= 0 then return nil, true end
  return ms
end

-- Yields. Sends the request: true once it is on its way (call.pending),
-- or false with call.err set. The answer is read_head's.
local function open(call)
  if call.ch.closed then return fail(call, status.CANCELLED, "the channel is closed") end
  local o = call.o
  local ms, passed = left_ms(call)
  if passed then return fail(call, status.DEADLINE_EXCEEDED, "deadline exceeded") end
  if ms then
    o.timeout, o.connect_timeout = ms, min(ms, call.ch.connect_timeout)
  else
    o.timeout, o.connect_timeout = 0, call.ch.connect_timeout   -- 0: no read or send timeout
  end
  local pending, err = client.start(call.ch.base .. call.path, o, call.ch.pools)
  if call.body_err ~= nil then   -- the caller's message function raised
    if pending then pending:close() end
    error(call.body_err, 0)
  end
  if not pending then return io_failed(call, err) end
  if call.done then   -- cancelled meanwhile
    pending:close()
    return false
  end
  call.pending = pending
  return true
end

-- Yields (what is left of the deadline at most). Reads the response's
-- head: true, or false with call.err set.
local function read_head(call)
  local pending = call.pending
  if not pending then return not call.done end
  local ms, passed = left_ms(call)
  local res, err
  if passed then
    pending:close()
    err = "timeout"
  else
    res, err = pending:finish(ms)
  end
  call.pending = nil
  if call.body_err ~= nil then   -- the caller's message function raised
    if res then res:close() end
    error(call.body_err, 0)
  end
  if call.done then   -- cancelled meanwhile
    if res then res:close() end
    return false
  end
  if not res then return io_failed(call, err) end
  call.res = res
  if res.version ~= 2 then
    return fail(call, status.UNAVAILABLE, "the server does not speak HTTP/2 (ALPN chose HTTP/1.1)")
  end
  local hs = res.headers
  if hs["grpc-status"] ~= nil then   -- trailers-only: the status is all there is
    res:close()
    call.headers = {}
    return ended(call, hs)
  end
  call.headers = metadata.decode(hs)
  if res.status ~= 200 then
    return fail(call, HTTP_STATUS[res.status] or status.UNKNOWN,
      format("HTTP status %d", res.status), res.status)
  end
  local ct = lower(tostring(first(hs["content-type"]) or ""))
  if ct ~= "application/grpc" and not ct:find("^application/grpc[+;]") then
    return fail(call, status.UNKNOWN, "the response's content-type is not application/grpc: " .. ct)
  end
  call.reader = frame.reader(function(n) return read_body(call, n) end, call.ch.max_recv)
  return true
end

-- Yields. The next response message from the stream, or nil at its end
-- (call.err then says how it ended).
local function next_message(call)
  if call.pending then read_head(call) end
  if call.done then return nil end
  local msg, code, message = call.reader:next()
  if msg then return msg end
  if code then
    fail(call, code, message)
  elseif message then
    io_failed(call, message)
  else
    ended(call, call.res.trailers or {})
  end
  return nil
end

-- Yields. call:recv() -> the next response message, or nil at the end of
-- the call: nil alone when it ended OK, nil, err when it failed.
function Call:recv()
  local msg
  if self.inbox then
    msg = self.inbox:receive()   -- the pump's; nil once it ended
  else
    msg = next_message(self)
  end
  if msg ~= nil then return msg end
  return nil, self.err
end

-- Yields. `for msg in call do`: call:recv() that raises the status error
-- when the call fails.
function Call:__call()
  local msg, err = self:recv()
  if err then error(err, 2) end
  return msg
end

-- call:cancel(): ends the call now with CANCELLED (its stream is reset;
-- what the server already did stands). Nothing when it had ended.
function Call:cancel()
  if self.done then return end
  fail(self, status.CANCELLED, "cancelled by the client")
  if self.q then self.q:close() end
  if self.task then cohost.kill(self.task) end   -- false once the pump has ended
end

-- -- Bidirectional streaming --------------------------------------------------------

-- Yields. call:send(msg) -> true, or nil, err once the call has ended (err
-- its status error; the call's end is read with recv). Waits while the
-- previous message has not gone to the connection yet.
function Call:send(msg)
  if type(msg) ~= "string" then
    error(format("bad argument #1 to 'send' (string expected, got %s)", type(msg)), 2)
  end
  if self.sent_all then error("send after close_send", 2) end
  local d = self.deadline
  local ok = not self.done and self.q:send(frame.encode(msg), d and d - monotonic() or nil)
  if ok then return true end
  return nil, self.err or status.new_error(status.FAILED_PRECONDITION, "the call has ended",
    { headers = self.headers or {}, trailers = self.trailers or {} })
end

-- call:close_send(): the end of the request messages (the server's recv
-- returns nil); recv goes on.
function Call:close_send()
  self.sent_all = true
  self.q:close()
end

-- The request body of a bidirectional call: the queue's messages, then
-- the end of the stream once closed; a deadline or a cancel resets it.
local function queued_body(call)
  return function()
    local d = call.deadline
    local piece, err = call.q:receive(d and d - monotonic() or nil)
    if piece ~= nil then return piece end
    if err == "timeout" or call.done then error("cancelled", 0) end
    return nil
  end
end

-- Yields. The task of a bidirectional call: opens it, then moves each
-- response message to the inbox (one at a time: the server's window stays
-- the caller's pace), and ends both queues with the call.
local function pump(call)
  local ok, e = pcall(function()
    if not (open(call) and read_head(call)) then return end
    while true do
      local msg = next_message(call)
      if msg == nil then return end
      local d = call.deadline
      local put, err = call.inbox:send(msg, d and d - monotonic() or nil)
      if not put then
        if err == "timeout" then fail(call, status.DEADLINE_EXCEEDED, "deadline exceeded") end
        return
      end
    end
  end)
  if not ok then fail(call, status.CANCELLED, tostring(e)) end   -- killed by cancel
  if call.pending then call.pending:close() end
  if call.res then call.res:close() end
  call.q:close()
  call.inbox:close()
end

-- -- Channels ----------------------------------------------------------------------

local Channel = {}
Channel.__index = Channel

local function check_ms(v, name, level)
  if v ~= nil and (type(v) ~= "number" or v <= 0) then
    error(format("bad option %s (ms > 0 expected)", name), level + 1)
  end
end

-- A new call of ch on path with the call's options copts.
local function new_call(ch, path, copts, level)
  if type(path) ~= "string" or not path:match("^/[^/]+/[^/]+$") then
    error("bad method path (\"/package.Service/Method\" expected)", level + 1)
  end
  if copts ~= nil and type(copts) ~= "table" then error("bad call options (table expected)", level + 1) end
  copts = copts or {}
  local timeout = copts.timeout
  if timeout == nil then timeout = ch.timeout end
  check_ms(timeout, "timeout", level + 1)
  local headers = { ["content-type"] = "application/grpc", te = "trailers" }
  for k, v in pairs(ch.metadata) do headers[k] = v end
  for k, v in pairs(copts.metadata or {}) do headers[k] = metadata.wire(k, v, level + 1) end
  local deadline
  if timeout then
    deadline = monotonic() + timeout / 1000
    headers["grpc-timeout"] = status.format_timeout(timeout / 1000)
  end
  local o = { method = "POST", headers = headers, stream = true }
  for k, v in pairs(ch.http) do o[k] = v end
  local call = setmetatable({ ch = ch, path = path, o = o, deadline = deadline }, Call)
  ch.calls[call] = true
  return call
end

local function check_msg(msg, level)
  if type(msg) ~= "string" then
    error(format("bad request message (string expected, got %s)", type(msg)), level + 1)
  end
end

-- Yields. The one reply of a call whose request is under way: reply, nil,
-- call, or nil, err.
local function single_reply(call)
  if not (open(call) and read_head(call)) then return nil, call.err end
  local reply = next_message(call)
  if reply == nil then
    if not call.err then fail(call, status.INTERNAL, "the call ended OK without a response message") end
    return nil, call.err
  end
  if next_message(call) ~= nil then
    fail(call, status.INTERNAL, "more than one response message for a single-reply call")
  end
  if call.err then return nil, call.err end
  return reply, nil, call
end

-- Yields. ch:unary(path, msg [, opts]) -> reply, nil, call, or nil, err.
-- call holds the response's headers and trailers (custom metadata).
function Channel:unary(path, msg, opts)
  check_msg(msg, 2)
  local call = new_call(self, path, opts, 2)
  call.o.body = frame.encode(msg)
  return single_reply(call)
end

-- Yields (until the request is sent). ch:server_stream(path, msg [, opts])
-- -> call: its messages by call:recv() or `for msg in call do` (which
-- raises the status error), the first of which waits for the response's
-- head. A failure to start shows there too.
function Channel:server_stream(path, msg, opts)
  check_msg(msg, 2)
  local call = new_call(self, path, opts, 2)
  call.o.body = frame.encode(msg)
  open(call)
  return call
end

-- Yields. ch:client_stream(path, msgs [, opts]) -> reply, nil, call, or
-- nil, err. msgs: an array of messages, or a function returning them
-- then nil (it may park; it runs on a task of its own, and what it raises
-- is raised here).
function Channel:client_stream(path, msgs, opts)
  local kind = type(msgs)
  if kind ~= "table" and kind ~= "function" then
    error("bad request messages (array or function expected)", 2)
  end
  local call = new_call(self, path, opts, 2)
  local i = 0
  call.o.body = function()
    local msg
    if kind == "table" then
      i = i + 1
      msg = msgs[i]
    else
      local ok, m = pcall(msgs)
      if not ok then
        call.body_err = m
        error(m, 0)   -- resets the stream
      end
      msg = m
    end
    if msg == nil then return nil end
    if type(msg) ~= "string" then
      call.body_err = format("bad request message (string expected, got %s)", type(msg))
      error(call.body_err, 0)
    end
    return frame.encode(msg)
  end
  return single_reply(call)
end

-- ch:bidi(path [, opts]) -> call, at once: call:send(msg), close_send(),
-- recv(), cancel(), in any order and from any tasks. The call runs on a
-- task of its own (it sends while the answer is awaited).
function Channel:bidi(path, opts)
  local call = new_call(self, path, opts, 2)
  call.q, call.inbox = chan.new(1), chan.new(1)
  call.o.body = queued_body(call)
  call.task = cohost.spawn(pump, call)
  return call
end

-- ch:close(): ends the channel's calls in flight with CANCELLED (as
-- call:cancel()), fails its later calls so, and closes the connections
-- its calls went on (the worker's connection to its origin: GOAWAY once
-- the streams of other users in flight have ended).
function Channel:close()
  self.closed = true
  for call in pairs(self.calls) do call:cancel() end
  client.close_pools(self.pools)
end

-- ch:stub(types, "package.Service") -> a table with a function per method
-- of the service in a cohost.protobuf set, taking and returning tables:
-- stub:GetNote({ id = 1 }) (cohost.grpc.typed).
function Channel:stub(types, name)
  return require("cohost.grpc.typed").stub(self, types, name, 2)
end

-- channel(target [, opts]) -> a channel: "http://host:port" (h2c, prior
-- knowledge), "https://host:port" (TLS, h2 by ALPN), or "host:port"
-- (http). opts: timeout (ms, each call's deadline unless the call sets
-- one; none by default), connect_timeout (ms, 20000), metadata (sent on
-- every call), max_receive_message_size (4 MiB), and for https verify,
-- ca_file, server_name, client_cert, client_key as cohost.http's client.
-- Calls of every task of the worker share one connection per origin.
function M.channel(target, opts)
  if type(target) ~= "string" then error("bad target (string expected)", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("bad options (table expected)", 2) end
  opts = opts or {}
  local base = target
  if not base:find("^%a[%w+.-]*://") then base = "http://" .. base end
  local scheme = lower(base:match("^(%a[%w+.-]*)://"))
  if scheme ~= "http" and scheme ~= "https" then error("bad target (http:// or https:// expected)", 2) end
  base = base:gsub("/+$", "")
  check_ms(opts.timeout, "timeout", 2)
  check_ms(opts.connect_timeout, "connect_timeout", 2)
  local md = {}
  for name, v in pairs(opts.metadata or {}) do md[name] = metadata.wire(name, v, 2) end
  local max = opts.max_receive_message_size
  if max ~= nil and (type(max) ~= "number" or max < 0) then
    error("bad option max_receive_message_size (a byte count expected)", 2)
  end
  return setmetatable({
    base = base, timeout = opts.timeout, connect_timeout = opts.connect_timeout or CONNECT_MS,
    metadata = md, max_recv = max or frame.MAX_MESSAGE,
    pools = {},   -- the pool names its calls used, for close
    calls = setmetatable({}, { __mode = "k" }),   -- those not ended, for close
    http = {
      http2 = scheme == "http" and "prior-knowledge" or true,
      verify = opts.verify, ca_file = opts.ca_file, server_name = opts.server_name,
      client_cert = opts.client_cert, client_key = opts.client_key,
      keepalive_timeout = opts.keepalive_timeout,
    },
  }, Channel)
end

return M
