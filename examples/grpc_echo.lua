-- A gRPC service: `build/cohost examples/grpc_echo.lua [port]` (default
-- 50051). Messages are raw bytes (no protobuf): any gRPC client with
-- identity serializers can call it (docs/grpc.md).
--   /cohost.Echo/Echo    answers the request message unchanged;
--   /cohost.Echo/Repeat  answers the rest of the message N times, as N
--                        messages, N being the message's first byte;
--   any other method     status 12 (UNIMPLEMENTED).
-- Plain HTTP requests on the same port get a short text answer.
local grpc = require "cohost.grpc"

local port = tonumber(arg and arg[1]) or 50051

local srv = grpc.server {
  fallback = function(req, res)
    res:send("a gRPC echo service: POST /cohost.Echo/Echo or /cohost.Echo/Repeat\n")
  end,
}

srv:service("cohost.Echo", {
  Echo = function(msg)
    return msg
  end,
  Repeat = { server_stream = function(msg, stream)
    local n, rest = msg:byte(1) or 0, msg:sub(2)
    for _ = 1, n do stream:send(rest) end
  end },
})

assert(grpc.listen("*:" .. port, srv))
