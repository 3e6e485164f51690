-- make bench's gRPC section: build/cohost scripts/bench/grpc/frame.lua
-- OUT writes the request h2load sends (its -d file): one gRPC message
-- frame (a 5-byte prefix and echo.proto's EchoMsg), and prints the
-- frame's length, which each response's body has too.
local pb = require "cohost.protobuf"
local frame = require "cohost.grpc.frame"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
assert(pb.load(here .. "/echo.proto"))
local msg = pb.encode("benchpb.EchoMsg", {
  id = 12345, stamp = 1700000000123, flag = true, score = 98.6, text = "hello, gRPC world",
})
local f = assert(io.open(assert(arg[1], "usage: frame.lua OUT"), "wb"))
f:write(frame.encode(msg))
f:close()
print(5 + #msg)
