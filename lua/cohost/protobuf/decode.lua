-- cohost.protobuf.decode: reads a protobuf message into a Lua table. As
-- for encoders, each message type gets a decoder generated as Lua source
-- on first use: a loop over the fields on the wire with one branch per
-- known tag, whose reads (through an FFI pointer, bounds checked against
-- the end of the message) LuaJIT traces without a call per byte.
--
-- A decoder is fn(P, p, e, d [, t]) -> t: it reads the bytes P[p .. e-1]
-- (P a const uint8_t * into the input string, which the caller keeps
-- alive), at nesting depth d, into t (a new table when nil: a singular
-- message field seen twice merges into what is there, as protobuf says).
-- Malformed input makes it return nil, the reason in wire.err (no error
-- is raised: see wire.fail). Unknown fields (and known ones with another
-- wire type, as protobuf treats them) are kept as their raw bytes in
-- UNK[t], written back by the encoder.
local ffi = require "ffi"
local bit = require "bit"
local wire = require "cohost.protobuf.wire"
local new_tab = require "table.new"

local format, concat = string.format, table.concat

local M = {}

local unrolled

-- Everything on the path of a well-formed message is inline code, with
-- no call to a Lua helper: a small helper called a few times per message
-- grows hot before the decoder does and gets a trace of its own, and a
-- trace being recorded stops where it calls a function that has one
-- ("cannot continue across a compiled function"), so the decoder's trace
-- would be cut at every such call. The helpers in cohost.protobuf.wire
-- serve only rare paths (varints of huge 64-bit values, tags of fields
-- past 2047, lengths of 16 KiB and more, errors).

-- The value of a varint of one or two bytes (held in x, < 2^14) by kind.
local SHORT = {
  int32 = "", uint32 = "", int64 = "", uint64 = "", enum = "",
  sint32 = "x = x % 2 == 0 and x / 2 or -(x + 1) / 2", sint64 = "x = x % 2 == 0 and x / 2 or -(x + 1) / 2",
  bool = "x = x ~= 0",
}
-- ... and of a longer one, from its halves lo and hi.
local LONG = {
  int32 = "x = tobit(lo)", uint32 = "x = lo", enum = "x = tobit(lo)",
  sint32 = "x = tobit(bxor(rshift(lo, 1), -band(lo, 1)))",
  bool = "x = lo ~= 0 or hi ~= 0",
  -- within +-2^53 as a number, inline; else the helper makes a cdata
  int64 = [[
if hi < 2097152 then x = hi * 4294967296 + lo
elseif hi >= 4292870144 then x = (hi - 4294967296) * 4294967296 + lo
else x = as_i64(lo, hi) end]],
  uint64 = "if hi < 2097152 then x = hi * 4294967296 + lo else x = as_u64(lo, hi) end",
  sint64 = [[
if hi < 2097152 then x = hi * 4294967296 + lo; x = x % 2 == 0 and x / 2 or -(x + 1) / 2
else x = as_zz64(lo, hi) end]],
}

-- Bits each byte of a varint adds past the first: byte k (0-based) adds
-- its low 7 bits times LO[k] to lo, or HI[k] to hi; byte 4 splits.
local LO = { 128, 16384, 2097152 }
local HI = { [5] = 8, [6] = 1024, [7] = 131072, [8] = 16777216 }

-- Code that reads a varint into local x (converted by kind), checked
-- against limit: one and two bytes on a short path, the rest unrolled.
local function varint_code(limit, kind)
  local steps = {}
  for k = 1, 9 do
    local add
    if k <= 3 then add = format("lo = lo + band(b, 127) * %d", LO[k])
    elseif k == 4 then add = "lo = lo + band(b, 15) * 268435456; hi = rshift(band(b, 127), 4)"
    elseif k <= 8 then add = format("hi = hi + band(b, 127) * %d", HI[k])
    else add = "hi = hi + band(b, 1) * 2147483648" end   -- bit 63; the rest of byte 9 is dropped
    steps[k] = format([[
if b >= 128 then
if q >= %s then return fail("truncated varint") end
b = P[q]; q = q + 1; %s
]], limit, add)
  end
  return format([[
if p >= %s then return fail("truncated varint") end
local x = P[p]
if x < 128 then
p = p + 1
%s
elseif p + 1 < %s and P[p + 1] < 128 then
x = x - 128 + P[p + 1] * 128; p = p + 2
%s
else
local lo, hi, b, q = band(x, 127), 0, x, p + 1
%s
if b >= 128 then return fail("varint longer than 10 bytes") end
%s
p = q
%s
end]], limit, SHORT[kind], limit, SHORT[kind], concat(steps), string.rep("end\n", 9), LONG[kind])
end

-- Code that reads a length into local len, checked against limit.
local function len_code(limit)
  return format([[
if p >= %s then return fail("truncated length") end
local len = P[p]
if len < 128 then p = p + 1
elseif p + 1 < %s and P[p + 1] < 128 then len = len - 128 + P[p + 1] * 128; p = p + 2
else len, p = get_len(P, p, %s); if len == nil then return nil end end
if len > %s - p then return fail(format("length %%d past the end (%%d bytes left)", len, %s - p)) end]],
    limit, limit, limit, limit, limit)
end

local FIXED = {
  fixed32 = { 4, "x = cast(cu32p, P + p)[0]" }, sfixed32 = { 4, "x = cast(ci32p, P + p)[0]" },
  float = { 4, "x = cast(cfp, P + p)[0]" }, double = { 8, "x = cast(cdp, P + p)[0]" },
  fixed64 = { 8, "x = cast(cu64p, P + p)[0]; if x <= 9007199254740992ULL then x = tonumber(x) end" },
  sfixed64 = { 8, [[
x = cast(ci64p, P + p)[0]
if x <= 9007199254740992LL and x >= -9007199254740992LL then x = tonumber(x) end]] },
}

-- Code that reads one value of F's kind (its tag read) into local x,
-- bounded by limit.
local function value_code(F, T, ctx, limit, entry)
  local k = F.kind
  if SHORT[k] then
    local code = varint_code(limit, k)
    if k == "enum" then code = code .. format("\nx = EN[%d][x] or x", ctx.enum(F.enum)) end
    return code
  end
  local fx = FIXED[k]
  if fx then
    return format([[
if %s - p < %d then return fail("truncated fixed%d") end
local x
%s
p = p + %d]], limit, fx[1], fx[1] * 8, fx[2], fx[1])
  end
  if k == "string" or k == "bytes" then
    local code = len_code(limit)
    if F.utf8 then
      code = code .. format("\nif utf8_valid(P + p, len) == 0 then return fail(%q) end",
        format("invalid UTF-8 in string field %s.%s", T.name, F.name))
    end
    return code .. "\nlocal x = ffi_string(P + p, len); p = p + len"
  end
  if k == "message" then
    -- A singular message seen twice is merged, as protobuf says.
    local into = (F.repeated or entry) and "nil" or format("rawget(t, %q)", F.name)
    return len_code(limit) .. format([[

local x = C[%d].dec(P, p, p + len, d + 1, %s)
if x == nil then return nil end
p = p + len]], ctx.child(F.msg), into)
  end
  error("no decoder for kind " .. k)
end

-- "while cond do body end" with its first UNROLL rounds as nested ifs:
-- a repeated field of a few elements is then straight-line code in the
-- decoder's trace. A loop there would be an inner loop, which LuaJIT
-- either refuses in the trace (splitting it) or unrolls only after its
-- own trace has been seen to exit early.
local UNROLL = 4

-- Past this many branches a message's decoder reads through a table of
-- functions (one per tag), with no straight-line pass.
local WIDE = 200
unrolled = function(cond, body)
  local code = format("while %s do\n%s\nend", cond, body)
  for _ = 1, UNROLL do code = format("if %s then\n%s\n%s\nend", cond, body, code) end
  return code
end

-- The tag of F with wire type wt as a number.
local function tag_of(F, wt) return F.number * 8 + wt end

-- Code storing x in F.
local function store_code(F, T)
  if F.repeated then
    return format("local a = rawget(t, %q)\nif a == nil then a = {}; t[%q] = a end\na[#a + 1] = x", F.name, F.name)
  end
  local out = { format("t[%q] = x", F.name) }
  if F.oneof then
    for _, G in ipairs(F.oneof.fields) do
      if G ~= F then out[#out + 1] = format("t[%q] = nil", G.name) end
    end
  end
  return concat(out, "\n")
end

-- The branches of one field: its own tag, and for packable repeated
-- fields the other form too (parsers accept packed and unpacked both).
local function branches(F, T, ctx, entry)
  local out = {}
  if F.kind == "group" then return out end   -- read as an unknown field
  local wt = F.kind == "message" and 2 or F.wt
  if F.map then
    out[#out + 1] = { tag_of(F, 2), len_code("e") .. format([[

local key, val = C[%d].entry(P, p, p + len, d + 1)
if key == nil then return nil end
p = p + len
local m = rawget(t, %q)
if m == nil then m = {}; t[%q] = m end
m[key] = val]], ctx.child(F.msg), F.name, F.name) }
    return out
  end
  local store = entry and format("%s = x", entry) or store_code(F, T)
  out[#out + 1] = { tag_of(F, wt), value_code(F, T, ctx, "e", entry) .. "\n" .. store }
  if F.repeated and wt ~= 2 then
    out[#out + 1] = { tag_of(F, 2), len_code("e") .. format([[

local pe = p + len
local a = rawget(t, %q)
if a == nil then a = {}; t[%q] = a end
local i = #a
%s]], F.name, F.name, unrolled("p < pe", value_code(F, T, ctx, "pe") .. "\ni = i + 1; a[i] = x")) }
  end
  return out
end

local ENV = {
  "C", "EN", "T", "MT", "UNK", "rawget", "setmetatable", "format", "concat", "new_tab", "ffi_string",
  "fail", "TOO_DEEP", "get_len", "get_tag", "skip", "utf8_valid", "as_i64", "as_u64", "as_zz64",
  "tobit", "band", "bxor", "rshift", "cast", "tonumber", "cu32p", "ci32p", "cfp", "cdp", "cu64p", "ci64p",
  "default_key", "default_val",
}

-- Reads the next tag into tag (its first byte's offset into ts), or -1
-- at the end.
local NEXT = [[
if p < e then
ts = p; tag = P[p]
if tag < 128 then p = p + 1
elseif p + 1 < e and P[p + 1] < 128 then tag = tag - 128 + P[p + 1] * 128; p = p + 2
else tag, p = get_tag(P, p, e); if tag == nil then return nil end end
else tag = -1 end]]

local function dispatch(list)
  local out = {}
  for i, b in ipairs(list) do
    out[#out + 1] = format("%s tag == %d then\n%s", i == 1 and "if" or "elseif", b[1], b[2])
  end
  return concat(out, "\n")
end

-- The fast path of one field, for input in field-number order (what
-- every protobuf runtime writes): its branches where the field is due,
-- repeated ones as long as they come.
local function in_order(F, list)
  if #list == 0 then return "" end
  local cond = {}
  for i, b in ipairs(list) do cond[i] = "tag == " .. b[1] end
  local body = (#list == 1 and list[1][2] or dispatch(list) .. "\nend") .. "\n" .. NEXT
  if F.repeated then return unrolled(concat(cond, " or "), body) end
  return format("if %s then\n%s\nend", concat(cond, " or "), body)
end

-- source(T [, entry]) -> the source of T's decoder (entry: of a map entry
-- type, returning key, value rather than a table), its child and enum
-- tables. The decoder reads the fields that come in number order in one
-- pass of straight-line code, which LuaJIT traces whole; the rest (out of
-- order, repeated, unknown) goes through a loop with every field's branch.
function M.source(T, entry)
  local C, EN, cidx, eidx = {}, {}, {}, {}
  local ctx = {
    child = function(U)
      if not cidx[U] then C[#C + 1] = U; cidx[U] = #C end
      return cidx[U]
    end,
    enum = function(E)
      if not eidx[E] then EN[#EN + 1] = E.names; eidx[E] = #EN end
      return eidx[E]
    end,
  }
  local list, fast = {}, {}
  for _, F in ipairs(T.fields) do
    local target = entry and (F.number == 1 and "key" or F.number == 2 and "val")
    if not entry or target then
      local bs = branches(F, T, ctx, target)
      for _, b in ipairs(bs) do list[#list + 1] = b end
      fast[#fast + 1] = in_order(F, bs)
    end
  end
  local unknown
  if entry then
    unknown = "p = skip(P, p, e, tag, d)\nif p == nil then return nil end"   -- a map entry's are dropped
  else
    unknown = [[
p = skip(P, p, e, tag, d)
if p == nil then return nil end
if unk == nil then unk = {} end
unk[#unk + 1] = ffi_string(P + ts, p - ts)]]
  end
  -- The loop for what does not come in order: one elseif per tag, or for
  -- a message of many fields (where a chain that long would pass the
  -- jump limits of a Lua function) a table of one function per tag.
  local slow, handlers = nil, {}
  if #list <= WIDE then
    slow = (#list > 0 and dispatch(list) .. "\nelse" or "do") .. "\n" .. unknown .. "\nend"
  else
    for _, b in ipairs(list) do
      handlers[#handlers + 1] = format("H[%d] = function(t, P, p, e, d)\n%s\nreturn p\nend", b[1], b[2])
    end
    slow = format([[
local h = H[tag]
if h ~= nil then
p = h(t, P, p, e, d)
if p == nil then return nil end
else
%s
end]], unknown)
    fast = {}   -- no straight-line pass either: the loop reads every field
  end
  local head, tail
  if entry then
    head = "local key, val"
    local vdefault = "default_val"
    if T.value.kind == "message" then
      vdefault = format("setmetatable({}, C[%d].mt)", ctx.child(T.value.msg))
    end
    tail = format([[
if key == nil then key = default_key end
if val == nil then val = %s end
return key, val]], vdefault)
  else
    local req = {}
    for _, F in ipairs(T.fields) do
      if F.required then
        req[#req + 1] = format("if rawget(t, %q) == nil then return fail(%q) end", F.name,
          format("missing required field %s.%s", T.name, F.name))
      end
    end
    local nf = #T.fields < 32 and #T.fields or 32
    -- The metatable goes on first: setmetatable right before the return
    -- would be a side effect a trace cannot return to a lower frame after
    -- ("NYI: return to lower frame"), which made every decoder with a
    -- loop (a repeated field past the unrolled ones) fall back to the
    -- interpreter from there on.
    head = format("if t == nil then t = setmetatable(new_tab(0, %d), MT) end\nlocal unk", nf)
    tail = concat(req, "\n") .. [[

if unk ~= nil then
  local old = UNK[t]
  UNK[t] = old and old .. concat(unk) or concat(unk)
end
return t]]
  end
  local src = format([[
local %s = ...
local H = {}
%s
return function(P, p, e, d, t)
if d > %d then return fail(TOO_DEEP) end
%s
local ts, tag = p, -1
%s
%s
while tag ~= -1 do
%s
%s
end
%s
end
]], concat(ENV, ", "), concat(handlers, "\n"), wire.MAX_DEPTH, head, NEXT, concat(fast, "\n"), slow, NEXT, tail)
  return src, C, EN
end

-- compile(T, UNK [, entry]) -> T's decoder (or map entry reader).
function M.compile(T, UNK, entry)
  local src, C, EN = M.source(T, entry)
  local fn, err = load(src, "=protobuf decoder " .. T.name)
  if not fn then error(format("cohost.protobuf: cannot generate the decoder of %s: %s", T.name, err), 0) end
  local zero = { int32 = 0, int64 = 0, uint32 = 0, uint64 = 0, sint32 = 0, sint64 = 0, fixed32 = 0,
                 fixed64 = 0, sfixed32 = 0, sfixed64 = 0, bool = false, string = "", bytes = "",
                 double = 0, float = 0 }
  local env = {
    C = C, EN = EN, T = T, MT = T.mt, UNK = UNK, rawget = rawget, setmetatable = setmetatable,
    format = format, concat = concat, new_tab = new_tab, ffi_string = ffi.string,
    fail = wire.fail, TOO_DEEP = format("nesting deeper than %d levels", wire.MAX_DEPTH), get_len = wire.get_len, get_tag = wire.get_tag,
    skip = wire.skip, utf8_valid = wire.utf8_valid, as_i64 = wire.as_i64, as_u64 = wire.as_u64,
    as_zz64 = wire.as_zz64, tobit = bit.tobit, band = bit.band, bxor = bit.bxor, rshift = bit.rshift,
    cast = ffi.cast, tonumber = tonumber, cu32p = ffi.typeof("const uint32_t *"),
    ci32p = ffi.typeof("const int32_t *"), cfp = ffi.typeof("const float *"),
    cdp = ffi.typeof("const double *"), cu64p = ffi.typeof("const uint64_t *"),
    ci64p = ffi.typeof("const int64_t *"),
  }
  if entry then
    env.default_key = zero[T.key.kind]
    local V = T.value
    if V.kind == "enum" then env.default_val = V.enum.zero or V.enum.first
    elseif V.kind ~= "message" then env.default_val = zero[V.kind] end
  end
  local args = {}
  for i, name in ipairs(ENV) do args[i] = env[name] end
  return fn(unpack(args, 1, #ENV))
end

return M
