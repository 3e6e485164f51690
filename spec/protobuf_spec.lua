-- cohost.protobuf (docs/protobuf.md): types from .proto files through
-- Debian's protoc, the codec on its own. The interop with python3-protobuf
-- and grpcio (every golden case both ways) is spec/grpc_proto_spec.lua.
local pb = require "cohost.protobuf"
local cjson = require "cjson"
local golden = require "spec.proto.golden"
local h = require "spec.helper"
h.cleanups(after_each)

local T, L, CASES

setup(function()
  T = assert(pb.load("spec/proto/golden.proto"))
  L = assert(pb.load("spec/proto/legacy.proto"))
  CASES = golden.cases(pb)
end)

-- A varint's bytes, for hand-made input.
local function varint(n)
  local out = {}
  while n >= 128 do
    out[#out + 1] = string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  out[#out + 1] = string.char(n)
  return table.concat(out)
end

local function roundtrip(name, t)
  local got, err = pb.decode(name, pb.encode(name, t))
  assert(got, err)
  return got
end

describe("pb.load", function()
  it("loads a .proto with its imports and the well-known types, each type by its full name", function()
    assert.is_table(T:message("golden.All"))
    assert.is_table(T:message("golden.leaf.Leaf"))
    assert.is_table(T:message("google.protobuf.Timestamp"))
    assert.is_table(T:enum("golden.Color"))
    local kinds = {}
    for _, m in ipairs(T:service("golden.Golden").methods) do
      kinds[m.name] = (m.client_streaming and "c" or "-") .. (m.server_streaming and "s" or "-")
    end
    assert.same({ Check = "--", Repeat = "-s", Collect = "c-", Chat = "cs" }, kinds)
    assert.equal("leaf.proto", T:file_of("golden.leaf.Leaf"))
    assert.same({ "google/protobuf/any.proto", "google/protobuf/duration.proto", "google/protobuf/empty.proto",
      "google/protobuf/struct.proto", "google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto",
      "leaf.proto" }, (function() local d = T:dependencies("golden.proto"); table.sort(d); return d end)())
  end)

  it("returns protoc's error with its file:line:column text", function()
    local dir = h.tmpdir()
    h.write_file(dir .. "/bad.proto", 'syntax = "proto3";\nmessage A {\n  int32 x = 1\n}\n')
    local set, err = pb.load(dir .. "/bad.proto")
    assert.is_nil(set)
    assert.matches("^bad%.proto:4:1: Expected \";\"%.", err)
    set, err = pb.load(dir .. "/none.proto")
    assert.is_nil(set)
    assert.matches("none%.proto", err)
    set, err = pb.load(dir .. "/bad.proto", { protoc = "/nonexistent/protoc" })
    assert.is_nil(set)
    assert.matches("^protoc not found", err)
  end)

  it("loads a descriptor set made ahead of time, with no protoc", function()
    local bytes = assert(pb.descriptor("spec/proto/leaf.proto"))
    local set = assert(pb.load_descriptor(bytes))
    assert.equal(bytes, set.bytes)
    assert.same({ name = "n", weight = -1 }, set:decode("golden.leaf.Leaf", set:encode("golden.leaf.Leaf", { name = "n", weight = -1 })))
    local bad, err = pb.load_descriptor("\10\5ab")
    assert.is_nil(bad)
    assert.matches("cannot decode google%.protobuf%.FileDescriptorSet: length 5 past the end", err)
    assert.has_error(function() pb.encode("no.Such", {}) end, "unknown message type no.Such (load its .proto first)")
  end)
end)

describe("pb.encode and pb.decode", function()
  it("round-trip every golden case", function()
    for name, case in pairs(CASES) do
      local got = roundtrip("golden.All", case)
      assert.is_nil(golden.diff(case, got), name)
    end
  end)

  it("read 64-bit integers as numbers within +-2^53 and as int64/uint64 cdata beyond", function()
    local got = roundtrip("golden.Scalars", { i64 = 2 ^ 53, s64 = -2 ^ 53, u64 = 2 ^ 53, fx64 = 2 ^ 53, sfx64 = -2 ^ 53 })
    for _, k in ipairs { "i64", "s64", "u64", "fx64", "sfx64" } do assert.equal("number", type(got[k]), k) end
    got = roundtrip("golden.Scalars", {
      i64 = 9007199254740993LL, s64 = -9007199254740993LL, u64 = 9007199254740993ULL,
      fx64 = 9007199254740993ULL, sfx64 = -9007199254740993LL,
    })
    assert.equal("9007199254740993LL", tostring(got.i64))
    assert.equal("-9007199254740993LL", tostring(got.s64))
    assert.equal("9007199254740993ULL", tostring(got.u64))
    assert.equal("9007199254740993ULL", tostring(got.fx64))
    assert.equal("-9007199254740993LL", tostring(got.sfx64))
    -- Numbers past 2^53 are accepted as they are (a double is an integer there).
    assert.equal("4611686018427387904LL", tostring(roundtrip("golden.Scalars", { i64 = 2 ^ 62 }).i64))
    -- A negative int32 travels as 10 bytes (sign-extended), as protobuf says.
    assert.equal("\24" .. ("\255"):rep(9) .. "\1", pb.encode("golden.Scalars", { i32 = -1 }))
  end)

  it("raise on a wrong type or range naming the field's path", function()
    local function err_of(t)
      local ok, e = pcall(pb.encode, "golden.All", t)
      assert.is_false(ok)
      return e
    end
    assert.equal("all.names[3]: string expected, got table", err_of({ names = { "a", "b", {} } }))
    assert.equal('all.inners["a"].leaves[1].name: string expected, got 5',
      err_of({ inners = { a = { leaves = { [1] = { name = 5 } } } } }))
    assert.equal("all.scalars.i32: int32 expected, got 2147483648", err_of({ scalars = { i32 = 2 ^ 31 } }))
    assert.equal("all.scalars.u64: uint64 expected, got -1", err_of({ scalars = { u64 = -1 } }))
    assert.equal("all.scalars.i64: int64 expected, got 1.5", err_of({ scalars = { i64 = 1.5 } }))
    assert.equal("all.scalars.b: bool expected, got 1", err_of({ scalars = { b = 1 } }))
    assert.equal("all.list[2]: table (message golden.Scalars) expected, got string", err_of({ list = { {}, "x" } }))
    assert.equal("all.nme: no field nme in golden.All", err_of({ nme = 1 }))
    assert.equal('all.colors[1]: unknown value "BLUE" of enum golden.Color', err_of({ colors = { "BLUE" } }))
    assert.equal("all: oneof choice has more than one member set (text, number)", err_of({ text = "a", number = 1 }))
    assert.equal("all.packed64: table (array) expected, got 1", err_of({ packed64 = 1 }))
    assert.equal('all.by_id["x"]: uint64 expected, got string', err_of({ by_id = { x = "y" } }))
    assert.has_error(function() pb.encode("golden.All", "x") end, "bad message for golden.All (table expected, got string)")
  end)

  it("leave proto3 defaults out on encode and read them back through the metatable", function()
    local bytes = pb.encode("golden.All", { case = "", scalars = { i32 = 0, d = 0, s = "", b = false, color = "COLOR_UNSPECIFIED" } })
    assert.equal("\18\0", bytes)   -- only the (empty) message field
    local got = assert(pb.decode("golden.All", bytes))
    assert.equal(0, got.scalars.i32)
    assert.is_nil(rawget(got.scalars, "i32"))
    assert.equal("COLOR_UNSPECIFIED", got.scalars.color)
    assert.equal(false, got.scalars.b)
    assert.equal("", got.case)
    assert.same({}, got.names)        -- an unset repeated field reads as an empty table...
    table.insert(got.names, "kept")   -- ...kept in the message
    assert.same({ "kept" }, got.names)
    assert.is_nil(got.note)           -- fields with presence read nil when unset
    assert.is_nil(got.text)
    assert.is_nil(got.at)
    -- -0.0 is not a default: protobuf compares a float's bits.
    assert.equal("\9" .. ("\0"):rep(7) .. "\128", pb.encode("golden.Scalars", { d = -1 / math.huge }))
  end)

  it("keep optional presence: empty and zero are sent, unset is not", function()
    assert.equal("\114\0\120\0", pb.encode("golden.All", { note = "", count = 0 }))
    local got = assert(pb.decode("golden.All", "\114\0\120\0"))
    assert.equal("", rawget(got, "note"))
    assert.equal(0, rawget(got, "count"))
    assert.equal("", pb.encode("golden.All", {}))
    assert.equal("\130\1\0", pb.encode("golden.All", { empty_msg = {} }))
  end)

  it("read repeated scalars packed and unpacked both", function()
    -- legacy.Item: nums unpacked by default (proto2), packed_nums [packed = true]
    assert.equal("\8\1\40\1\40\2\50\2\3\4", pb.encode("legacy.Item", { id = 1, nums = { 1, 2 }, packed_nums = { 3, 4 } }))
    local got = assert(pb.decode("legacy.Item", "\8\1" .. "\42\3\1\2\3" .. "\48\7\48\8" .. "\40\9"))
    assert.same({ 1, 2, 3, 9 }, got.nums)
    assert.same({ 7, 8 }, got.packed_nums)
    -- proto3 packs by default; [packed = false] does not
    assert.equal("\34\2\1\2\40\1\40\2", pb.encode("golden.All", { packed64 = { 1, 2 }, unpacked32 = { 1, 2 } }))
    assert.same({ 1, 2 }, assert(pb.decode("golden.All", "\32\1\32\2")).packed64)
  end)

  it("keep unknown fields from decode to re-encode", function()
    -- golden.leaf.Leaf knows field 1 (a string, as All's case) and field 2
    -- as a varint (All's 2 is a message: another wire type, so unknown).
    local bytes = pb.encode("golden.All", CASES.maps)
    local leaf = assert(pb.decode("golden.leaf.Leaf", bytes))
    assert.equal("maps", leaf.name)
    assert.is_string(pb.unknown(leaf))
    leaf.name = "maps"
    local again = assert(pb.decode("golden.All", pb.encode("golden.leaf.Leaf", leaf)))
    assert.is_nil(golden.diff(CASES.maps, again))
    -- a copy of the table is a new message: no unknown fields
    local copy = {}
    for k, v in pairs(leaf) do copy[k] = v end
    assert.equal("\10\4maps", pb.encode("golden.leaf.Leaf", copy))
  end)

  it("keep the oneof member that came last on the wire", function()
    local got = assert(pb.decode("golden.All", pb.encode("golden.All", { text = "a" }) .. pb.encode("golden.All", { number = 5 })))
    assert.equal(5, got.number)
    assert.is_nil(rawget(got, "text"))
    got = assert(pb.decode("golden.All", pb.encode("golden.All", { nested = { i32 = 1 } }) .. pb.encode("golden.All", { text = "b" })))
    assert.equal("b", got.text)
    assert.is_nil(rawget(got, "nested"))
    -- a message field seen twice is merged
    got = assert(pb.decode("golden.All", pb.encode("golden.All", { scalars = { i32 = 1 } }) .. pb.encode("golden.All", { scalars = { s = "x" } })))
    assert.same({ i32 = 1, s = "x" }, got.scalars)
  end)

  it("check proto3 strings as UTF-8 both ways, and leave proto2 strings alone", function()
    for _, bad in ipairs { "\255", "a\192\128", "\237\160\128", "\244\144\128\128", "\226\130" } do
      local ok, err = pcall(pb.encode, "golden.Scalars", { s = bad })
      assert.is_false(ok)
      assert.equal("scalars.s: invalid UTF-8 in a string field", err)
      local got, derr = pb.decode("golden.Scalars", "\114" .. varint(#bad) .. bad)
      assert.is_nil(got)
      assert.equal("cannot decode golden.Scalars: invalid UTF-8 in string field golden.Scalars.s", derr)
    end
    assert.equal("\0\127\223\191\239\191\191\244\143\191\191", roundtrip("golden.Scalars", { s = "\0\127\223\191\239\191\191\244\143\191\191" }).s)
    assert.equal("\255", roundtrip("golden.Scalars", { by = "\255" }).by)   -- bytes are bytes
    assert.equal("\255", roundtrip("legacy.Item", { id = 1, label = "\255" }).label)
  end)

  it("proto2: refuse a missing required field, read explicit defaults", function()
    local ok, err = pcall(pb.encode, "legacy.Item", { label = "x" })
    assert.is_false(ok)
    assert.equal("item.id: required field missing", err)
    local got, derr = pb.decode("legacy.Item", "\18\1x")
    assert.is_nil(got)
    assert.equal("cannot decode legacy.Item: missing required field legacy.Item.id", derr)
    got = assert(pb.decode("legacy.Item", "\8\0"))
    assert.equal(0, got.id)
    assert.equal("none", got.label)
    assert.equal("-9007199254740993LL", tostring(got.big))
    assert.equal("SLOW", got.mode)
    assert.equal('a\1"b', got.raw)
    assert.equal(math.huge, got.ratio)
    assert.is_nil(got.text)
    assert.is_nil(got.child)
    assert.same({ id = 0 }, got)   -- only what was on the wire is in the table
  end)

  it("return nil and a clear error on malformed input, and raise nothing", function()
    local deep = ""
    for _ = 1, 10000 do deep = "\82" .. varint(#deep) .. deep end   -- legacy.Item.child, 10,000 deep
    local groups = ("\131\1"):rep(10000)                             -- 10,000 unknown groups started
    local cases = {
      { "golden.Scalars", "\24\255", "truncated varint" },
      { "golden.Scalars", "\24" .. ("\255"):rep(10) .. "\1", "varint longer than 10 bytes" },
      { "golden.Scalars", "\114\5ab", "length 5 past the end %(2 bytes left%)" },
      { "golden.Scalars", "\114\255\255\255\255\7", "length 2147483647 past the end %(0 bytes left%)" },
      { "golden.Scalars", "\114\128\128\128\128\8", "length 2147483648 over 2 GiB" },
      { "golden.Scalars", "\0\1", "field number 0" },
      { "golden.Scalars", "\2\0", "field number 0" },
      { "golden.Scalars", "\134\1\0", "wire type 6" },
      { "golden.Scalars", "\135\1\0", "wire type 7" },
      { "golden.Scalars", "\132\1", "end of group without a start" },
      { "golden.Scalars", "\13\1\2", "truncated fixed32" },
      { "golden.Scalars", "\9\1\2\3", "truncated fixed64" },
      { "golden.All", "\18\3\8", "length 3 past the end" },
      { "golden.All", "\18\1\8", "truncated varint" },
      { "legacy.Item", "\8\1" .. deep, "nesting deeper than 100 levels" },
      { "golden.Scalars", groups, "nesting deeper than 100 levels" },
      { "golden.Scalars", "\131\1\140\1", "mismatched end of group" },
    }
    for _, c in ipairs(cases) do
      local ok, got, err = pcall(pb.decode, c[1], c[2])
      assert.is_true(ok, got)
      assert.is_nil(got, c[3])
      assert.matches("^cannot decode " .. c[1]:gsub("%.", "%%.") .. ": " .. c[3], err)
    end
    -- and a good message decodes after them all
    assert.equal("maps", assert(pb.decode("golden.All", pb.encode("golden.All", CASES.maps))).case)
  end)

  it("decode corrupted messages to a table or nil, err, never an error", function()
    local seeds = { pb.encode("golden.All", CASES.extremes), pb.encode("golden.All", CASES.maps),
                    pb.encode("golden.All", CASES.wkt) }
    math.randomseed(42)
    local ok_n, bad_n = 0, 0
    for i = 1, 3000 do
      local s = seeds[i % 3 + 1]
      local bytes = { s:byte(1, -1) }
      for _ = 1, math.random(1, 4) do bytes[math.random(#bytes)] = math.random(0, 255) end
      if i % 7 == 0 then bytes[#bytes] = nil end
      local done, got, err = pcall(pb.decode, "golden.All", string.char(unpack(bytes)))
      assert(done, got)
      if got then ok_n = ok_n + 1 else bad_n = bad_n + 1; assert.is_string(err) end
    end
    assert.is_true(ok_n > 0 and bad_n > 0)
  end)

  it("refuse to encode a table nested deeper than 100 levels, or one that holds itself", function()
    local t = {}
    local deep = t
    for _ = 1, 10000 do deep.child = { id = 1 }; deep.id = 1; deep = deep.child end
    local ok, err = pcall(pb.encode, "legacy.Item", t)
    assert.is_false(ok)
    assert.matches("nesting deeper than 100 levels", err)
    local loop = { id = 1 }
    loop.child = loop
    ok, err = pcall(pb.encode, "legacy.Item", loop)
    assert.is_false(ok)
    assert.matches("^item%.child%.child.*: nesting deeper than 100 levels %(a table that contains itself%?%)$", err)
  end)

  it("write 64-bit cdata as exact digits in JSON", function()
    local got = roundtrip("golden.Scalars", { i64 = -9223372036854775808LL, u64 = 18446744073709551615ULL, i32 = 5 })
    local json = cjson.decode((cjson.encode(got):gsub("(%-?%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d+)", '"%1"')))
    assert.same({ i64 = "-9223372036854775808", u64 = "18446744073709551615", i32 = 5 }, json)
  end)

  it("handle a message of 1,000 fields", function()
    local dir = h.tmpdir()
    local lines = { 'syntax = "proto3";', "package wide;", "message W {" }
    for i = 1, 1000 do lines[#lines + 1] = ("  %s f%d = %d;"):format(i % 2 == 0 and "int64" or "string", i, i) end
    lines[#lines + 1] = "}"
    h.write_file(dir .. "/wide.proto", table.concat(lines, "\n"))
    local W = assert(pb.load(dir .. "/wide.proto"))
    local t = {}
    for i = 1, 1000 do t["f" .. i] = i % 2 == 0 and -i or ("s" .. i) end
    local got = assert(W:decode("wide.W", W:encode("wide.W", t)))
    assert.same(t, got)
  end)
end)
