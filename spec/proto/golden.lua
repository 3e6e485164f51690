-- The golden messages of spec/proto/golden.proto as Lua tables, the same
-- cases as spec/grpc_proto_peer.py builds with Python's generated classes,
-- and a comparison that tells NaN from NaN and -0.0 from 0.0 (shared by
-- spec/protobuf_spec.lua and spec/grpc_proto_spec.lua).
--
-- A decoded message holds only what was on the wire: fields that proto3
-- leaves out at their default are absent here too (they read as defaults
-- through the decoded table's metatable).
local M = {}

local NAN = 0 / 0
local NEG0 = -1 / math.huge
local INF = math.huge

local ALL256 = {}
for i = 0, 255 do ALL256[#ALL256 + 1] = string.char(i) end
ALL256 = table.concat(ALL256)

-- cases(pb) -> name -> message (pb encodes the Any's payload).
function M.cases(pb)
  return {
    extremes = {
      case = "extremes",
      scalars = {
        d = 1.7976931348623157e308, f = 3.4028234663852886e38, i32 = -2 ^ 31,
        i64 = -9223372036854775808LL, u32 = 2 ^ 32 - 1, u64 = 18446744073709551615ULL,
        s32 = -2 ^ 31, s64 = 9223372036854775807LL, fx32 = 2 ^ 32 - 1, fx64 = 18446744073709551615ULL,
        sfx32 = -2 ^ 31, sfx64 = -9223372036854775808LL, b = true, s = "héllo ✓ 𝄞",
        by = "\0\255\1", color = "MINUS",
      },
      packed64 = { -1, 2 ^ 53, -2 ^ 53, 9007199254740993LL, 9223372036854775807LL },
      unpacked32 = { 0, 1, 2 ^ 32 - 1 },
      zigzags = { -2 ^ 31, 2 ^ 31 - 1, -1, 0 },
      fixeds = { 0, 18446744073709551615ULL },
      bools = { true, false, true },
      colors = { "RED", "MINUS", "COLOR_UNSPECIFIED" },
    },
    floats = {
      case = "floats",
      scalars = { d = NAN, f = NAN },
      list = { { d = NEG0 }, {}, { f = NEG0 }, { d = INF, f = -INF } },
      doubles = { NAN, NEG0, 0, 5e-324, -INF },
    },
    empty_vs_unset = {
      case = "empty_vs_unset", note = "", empty_msg = {}, names = { "", "x", "" },
      blobs = { "", "\0" }, list = { {}, { s = "x" } },
    },
    maps = {
      case = "maps",
      inners = {
        a = {
          leaves = { [1] = { name = "x", weight = -5 }, [-4611686018427387904LL] = { name = "neg" } },
          colors = { "RED", "MINUS" },
        },
        b = {},
      },
      by_id = { [18446744073709551615ULL] = "max", [0] = "zero", [7] = "" },
      flags = { [true] = "RED", [false] = "MINUS" },
    },
    oneof_text = { case = "oneof_text", text = "t" },
    oneof_nested = { case = "oneof_nested", nested = { i32 = 5 } },
    oneof_number0 = { case = "oneof_number0", number = 0 },
    wkt = {
      case = "wkt",
      at = { seconds = 1700000000, nanos = 123 },
      took = { seconds = -5, nanos = -500 },
      any = { type_url = "type.googleapis.com/golden.leaf.Leaf", value = pb.encode("golden.leaf.Leaf", { name = "in any" }) },
      meta = { fields = {
        k = { string_value = "v" }, n = { number_value = 1.5 },
        l = { list_value = { values = { { bool_value = true }, { null_value = "NULL_VALUE" } } } },
      } },
      wrapped = {},
      nothing = {},
      leaf = { name = "top", weight = 4611686018427387904LL },
    },
    unknown_enum = {
      case = "unknown_enum", scalars = { color = 42 }, colors = { "RED", 7, "MINUS" }, flags = { [true] = 99 },
    },
    big = { case = "big", big = ALL256:rep(16384) },
  }
end

-- -- Comparing -------------------------------------------------------------------

local function digits(v)
  return (tostring(v):gsub("[LU]+$", ""))
end

-- A key of a decoded map as text, whatever Lua value it is (a cdata key
-- is a new object in each table).
local function key_text(k)
  if type(k) == "cdata" then return "i64:" .. digits(k) end
  return type(k) .. ":" .. tostring(k)
end

local function show(v)
  if type(v) == "cdata" then return tostring(v) end
  if type(v) == "string" then return #v > 40 and ("%d bytes"):format(#v) or ("%q"):format(v) end
  if type(v) == "number" then return ("%.17g"):format(v) end
  return tostring(v)
end

-- diff(want, got [, path]) -> nil when got (a decoded message) holds
-- exactly want, else where they differ first. Numbers: NaN equals NaN,
-- -0.0 differs from 0.0, a number never equals a cdata (the 64-bit rule
-- decides which a value is).
function M.diff(want, got, path)
  path = path or "message"
  local tw, tg = type(want), type(got)
  if tw ~= tg then return ("%s: %s expected, got %s (%s)"):format(path, tw, tg, show(got)) end
  if tw == "number" then
    if want ~= want and got ~= got then return nil end
    if want == got and (want ~= 0 or 1 / want == 1 / got) then return nil end
    return ("%s: %s expected, got %s"):format(path, show(want), show(got))
  end
  if tw == "cdata" then
    if tostring(want) == tostring(got) then return nil end
    return ("%s: %s expected, got %s"):format(path, show(want), show(got))
  end
  if tw ~= "table" then
    if want == got then return nil end
    return ("%s: %s expected, got %s"):format(path, show(want), show(got))
  end
  local wk, gk = {}, {}
  for k, v in pairs(want) do wk[key_text(k)] = { k, v } end
  for k, v in pairs(got) do gk[key_text(k)] = { k, v } end
  for kt, kv in pairs(want == nil and {} or wk) do
    if not gk[kt] then return ("%s.%s: missing (want %s)"):format(path, tostring(kv[1]), show(kv[2])) end
    local d = M.diff(kv[2], gk[kt][2], path .. "." .. tostring(kv[1]))
    if d then return d end
  end
  for kt, kv in pairs(gk) do
    if not wk[kt] then return ("%s.%s: unexpected %s"):format(path, tostring(kv[1]), show(kv[2])) end
  end
  return nil
end

return M
