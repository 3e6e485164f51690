-- The cohost peer of make bench's gRPC section: build/cohost -w 1
-- scripts/bench/grpc/echo.lua PORT. The handler gets the request decoded
-- and returns a new table, which cohost encodes: the work a real
-- handler's messages cost.
local grpc = require "cohost.grpc"
local pb = require "cohost.protobuf"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local types = assert(pb.load(here .. "/echo.proto"))

local srv = grpc.server()
srv:service_from_proto(types, "benchpb.Echo", {
  Echo = function(req)
    return { id = req.id, stamp = req.stamp, flag = req.flag, score = req.score, text = req.text }
  end,
})
assert(grpc.listen("127.0.0.1:" .. assert(arg[1], "usage: echo.lua PORT"), srv))
