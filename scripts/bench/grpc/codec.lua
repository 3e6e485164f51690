-- make bench's protobuf section, cohost's side: build/cohost
-- scripts/bench/grpc/codec.lua N RUNS -> "roundtrip_s=... encode_s=...
-- decode_s=..." (medians of RUNS runs of N each, per second of CPU time):
-- pb.encode and pb.decode of record.proto's Record, a Lua table in and a
-- new table out. Also writes the encoded message to arg[3] if given, for
-- codec.py to decode the same bytes; with arg[4], the path of
-- capi_bound.so, also "capi_bound_s=...": what a C decoder could do at
-- best (capi_bound.c).
local pb = require "cohost.protobuf"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
assert(pb.load(here .. "/record.proto"))
local N, RUNS = tonumber(arg[1]) or 300000, tonumber(arg[2]) or 5
local NAME = "benchpb.Record"

local r = {
  id = 12345, created = 1700000000123, count = 42, total = 9876543210, delta = -17, offset = -123456789,
  crc = 3735928559, hash = 1234567890123, score = 98.6, ratio = 0.25, active = true, name = "Ada Lovelace",
  email = "ada@example.org", city = "London", note = "first programmer", token = "\1\2\3\4\5\6\7\8",
  level = "HIGH", samples = { 1, 2, 3, 500, 70000 }, tags = { "math", "engines", "poetry" },
  origin = { x = 3, y = -4 },
}
local bytes = pb.encode(NAME, r)
if arg[3] then
  local f = assert(io.open(arg[3], "wb"))
  f:write(bytes)
  f:close()
end

local encode, decode, clock = pb.encode, pb.decode, os.clock
local sink

local function rate(fn)
  fn(N / 10)   -- warm-up: the JIT compiles the loop
  local rates = {}
  for i = 1, RUNS do
    local t0 = clock()
    fn(N)
    rates[i] = N / (clock() - t0)
  end
  table.sort(rates)
  return rates[math.floor((RUNS + 1) / 2)]
end

local rt = rate(function(n) for _ = 1, n do sink = decode(NAME, encode(NAME, r)) end end)
local enc = rate(function(n) for _ = 1, n do sink = encode(NAME, r) end end)
local dec = rate(function(n) for _ = 1, n do sink = decode(NAME, bytes) end end)
assert(sink.origin.y == -4)
local bound = ""
if arg[4] then
  local build = assert(package.loadlib(arg[4], "luaopen_capi_bound"))()
  bound = (" capi_bound_s=%.0f"):format(rate(function(n) for _ = 1, n do sink = build(bytes) end end))
end
print(("roundtrip_s=%.0f encode_s=%.0f decode_s=%.0f bytes=%d%s"):format(rt, enc, dec, #bytes, bound))
