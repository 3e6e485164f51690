-- cohost.protobuf.encode: writes a Lua table as a protobuf message. Each
-- message type gets an encoder of its own, generated as Lua source the
-- first time it is used and compiled with load(): straight-line code per
-- field, with the field's name, tag bytes and checks as constants, which
-- LuaJIT traces as one path. Values are written in field-number order
-- into the one buffer of cohost.protobuf.wire.
--
-- An encoder is fn(t, n, d) -> n: it writes t at offset n of the buffer,
-- d is the nesting depth (1 at the top). Wrong values raise naming the
-- field's path ("note.tags[3]: string expected, got table"), built from
-- PN/PI, the names and indexes of the levels above, which each level
-- records before it descends.
local ffi = require "ffi"
local wire = require "cohost.protobuf.wire"
local nkeys = require "table.nkeys"

local format, concat = string.format, table.concat
local S = wire.S

local M = {}

-- -- Errors with field paths ------------------------------------------------------

local PN, PI = {}, {}   -- per depth: the field name and index being encoded
local state = { root = "message" }
M.state = state

local function index_text(i)
  if i == nil or i == false then return "" end
  if type(i) == "string" then return format("[%q]", i) end
  return "[" .. tostring(i) .. "]"
end

local function path(d, name, idx)
  local parts = { state.root }
  for i = 1, d - 1 do parts[#parts + 1] = "." .. PN[i] .. index_text(PI[i]) end
  if name then parts[#parts + 1] = "." .. name .. index_text(idx) end
  return concat(parts)
end

local function describe(v)
  local t = type(v)
  if t == "number" then return format("%.17g", v) end
  if t == "cdata" then return tostring(v) end
  if t == "string" then return "string" end
  return t
end

-- fail(d, name, idx, expected, got): a value of the wrong type or range.
local function fail(d, name, idx, expected, got)
  error(format("%s: %s expected, got %s", path(d, name, idx), expected, describe(got)), 0)
end

local function fail_text(d, name, idx, text)
  error(format("%s: %s", path(d, name, idx), text), 0)
end

local function too_deep(d)
  error(format("%s: nesting deeper than %d levels (a table that contains itself?)", path(d), wire.MAX_DEPTH), 0)
end

-- A key of t that is no field of T (the generated code only counts).
local function extra_key(T, t, d)
  for k in pairs(t) do
    if type(k) ~= "string" then
      error(format("%s: key %s is not a field name of %s", path(d), describe(k), T.name), 0)
    end
    if not T.by_name[k] then error(format("%s: no field %s in %s", path(d, k), k, T.name), 0) end
  end
end

local function oneof_fail(T, t, d, o)
  local set = {}
  for _, F in ipairs(T.oneofs[o].fields) do
    if rawget(t, F.name) ~= nil then set[#set + 1] = F.name end
  end
  error(format("%s: oneof %s has more than one member set (%s)", path(d), T.oneofs[o].name, concat(set, ", ")), 0)
end

local function group_fail(d, name)
  fail_text(d, name, nil, "group fields are not supported (proto2 groups)")
end

-- -- Code generation -----------------------------------------------------------------

-- The bytes of a field's tag, as code writing them at B[n].
local function tag_code(number, wt)
  local v = number * 8 + wt
  local bytes = {}
  while v >= 128 do
    bytes[#bytes + 1] = v % 128 + 128
    v = math.floor(v / 128)
  end
  bytes[#bytes + 1] = v
  local out = {}
  for i, b in ipairs(bytes) do out[i] = format("B[n + %d] = %d", i - 1, b) end
  return concat(out, "; ") .. format("; n = n + %d", #bytes)
end

local function is_type(tname)
  return function(e) return format("(type(%s) == %q and %s or nil)", e, tname, e) end
end
local function call(fn) return function(e) return format("%s(%s)", fn, e) end end

-- Code checking expression e (a plain name) as a value of a kind: the
-- value as written, or nil.
local CHECK = {
  int32 = call "chk_i32", sint32 = call "chk_i32", sfixed32 = call "chk_i32",
  uint32 = call "chk_u32", fixed32 = call "chk_u32",
  int64 = call "chk_i64", sint64 = call "chk_i64", sfixed64 = call "chk_i64",
  uint64 = call "chk_u64", fixed64 = call "chk_u64",
  double = is_type "number", float = is_type "number",
  -- (not "and x or nil": false is a value)
  bool = function(e) return format("%s; if type(x) ~= 'boolean' then x = nil end", e) end,
  string = is_type "string", bytes = is_type "string",
}

local WRITE = {
  int32 = "put_int(B, n, x)", int64 = "put_int(B, n, x)", uint64 = "put_int(B, n, x)",
  enum = "put_int(B, n, x)", uint32 = "put_u32(B, n, x)",
  sint32 = "put_zz32(B, n, x)", sint64 = "put_zz64(B, n, x)",
  fixed32 = "put_fx32(B, n, x)", sfixed32 = "put_sfx32(B, n, x)", float = "put_f32(B, n, x)",
  fixed64 = "put_fx64(B, n, u64_of(x))", sfixed64 = "put_sfx64(B, n, x)", double = "put_f64(B, n, x)",
}

-- The name of a kind in errors.
local function expected(F)
  if F.kind == "enum" then return "enum " .. F.enum.name .. " name or number" end
  if F.kind == "string" and F.utf8 then return "string" end
  return F.kind
end

-- Code that sets local x to the checked value of expr, or fails naming
-- the field (name, default F's: a map's key and value name the map).
local function check_code(F, expr, ctx, idx, name)
  local q = format("%q", name or F.name)
  if F.kind == "enum" then
    return format([[
local x = %s
if type(x) == "string" then
  local num = EN[%d][x]
  if num == nil then fail_text(d, %s, %s, "unknown value " .. format("%%q", x) .. " of enum %s") end
  x = num
else
  x = chk_i32(x)
  if x == nil then fail(d, %s, %s, %q, %s) end
end]], expr, ctx.enum(F.enum), q, idx, F.enum.name, q, idx, expected(F), expr)
  end
  local code = format("local x = %s\nif x == nil then fail(d, %s, %s, %q, %s) end",
    CHECK[F.kind](expr), q, idx, F.kind == "bool" and "bool" or expected(F), expr)
  if F.utf8 then
    code = code .. format("\nif utf8_valid(cast(cu8p, x), #x) == 0 then fail_text(d, %s, %s, 'invalid UTF-8 in a string field') end",
      q, idx)
  end
  return code
end

-- Code that writes value x (checked) of F's kind, tag included unless
-- notag, with room made first.
local function write_code(F, number, notag, ctx, pi_expr, pname)
  local k = F.kind
  local out = {}
  local room = (k == "string" or k == "bytes") and "16 + #x" or "16"
  out[#out + 1] = format("if n + %s > S.cap then grow(n + %s) end", room, room)
  out[#out + 1] = "local B = S.B"
  local wt = (k == "message") and 2 or F.wt
  if not notag then out[#out + 1] = tag_code(number, wt) end
  if k == "string" or k == "bytes" then
    out[#out + 1] = "local len = #x\nif len < 128 then B[n] = len; n = n + 1 else n = put_u32(B, n, len) end"
    out[#out + 1] = "copy(B + n, x, len); n = n + len"
  elseif k == "bool" then
    out[#out + 1] = "B[n] = x and 1 or 0; n = n + 1"
  elseif k == "message" then
    out[#out + 1] = format("local st = n\nPN[d] = %q; PI[d] = %s", pname or F.name, pi_expr or "false")
    out[#out + 1] = format("n = fix_len(st, C[%d].enc(x, n + 1, d + 1))", ctx.child(F.msg))
  else
    out[#out + 1] = "n = " .. WRITE[k]
  end
  return concat(out, "\n")
end

-- Whether x (checked) is its kind's default, which proto3 leaves out:
-- -0.0 is not (protobuf compares a float's bits).
local NONDEFAULT = {
  double = "x ~= 0 or 1 / x < 0", float = "x ~= 0 or 1 / x < 0", bool = "x",
  string = "#x > 0", bytes = "#x > 0",
}

local function field_code(F, ctx)
  local q = format("%q", F.name)
  local out = { format("-- %s = %d (%s%s)", F.name, F.number, F.repeated and "repeated " or "", F.kind) }
  out[#out + 1] = format("v = rawget(t, %s)\nif v ~= nil then\nseen = seen + 1", q)
  if F.kind == "group" then
    out[#out + 1] = format("group_fail(d, %s)", q)
  elseif F.map then
    local K, V = F.key, F.value
    out[#out + 1] = format("if type(v) ~= 'table' then fail(d, %s, nil, 'table (map)', v) end", q)
    out[#out + 1] = "for key, val in pairs(v) do"
    out[#out + 1] = "if n + 16 > S.cap then grow(n + 16) end\nlocal B = S.B"
    out[#out + 1] = tag_code(F.number, 2)
    out[#out + 1] = "local est = n; n = n + 1"
    out[#out + 1] = "do\n" .. check_code(K, "key", ctx, "key", F.name) .. "\n" .. write_code(K, 1, false, ctx) .. "\nend"
    if V.kind == "message" then
      out[#out + 1] = format("if type(val) ~= 'table' then fail(d, %s, key, 'table (message %s)', val) end", q, V.msg.name)
      out[#out + 1] = "do\nlocal x = val\n" .. write_code(V, 2, false, ctx, "key", F.name) .. "\nend"
    else
      out[#out + 1] = "do\n" .. check_code(V, "val", ctx, "key", F.name) .. "\n" .. write_code(V, 2, false, ctx) .. "\nend"
    end
    out[#out + 1] = "n = fix_len(est, n)"
    out[#out + 1] = "end"
  elseif F.repeated then
    out[#out + 1] = format("if type(v) ~= 'table' then fail(d, %s, nil, 'table (array)', v) end", q)
    if F.kind == "message" then
      out[#out + 1] = "for i = 1, #v do\nlocal x = v[i]"
      out[#out + 1] = format("if type(x) ~= 'table' then fail(d, %s, i, 'table (message %s)', x) end", q, F.msg.name)
      out[#out + 1] = write_code(F, F.number, false, ctx, "i")
      out[#out + 1] = "end"
    elseif F.packed then
      out[#out + 1] = "local cnt = #v\nif cnt > 0 then"
      out[#out + 1] = "if n + 16 > S.cap then grow(n + 16) end\nlocal B = S.B"
      out[#out + 1] = tag_code(F.number, 2)
      out[#out + 1] = "local pst = n; n = n + 1"
      out[#out + 1] = "for i = 1, cnt do\nlocal e = v[i]"
      out[#out + 1] = check_code(F, "e", ctx, "i")
      out[#out + 1] = write_code(F, F.number, true, ctx)
      out[#out + 1] = "end\nn = fix_len(pst, n)\nend"
    else
      out[#out + 1] = "for i = 1, #v do\nlocal e = v[i]"
      out[#out + 1] = check_code(F, "e", ctx, "i")
      out[#out + 1] = write_code(F, F.number, false, ctx)
      out[#out + 1] = "end"
    end
  elseif F.kind == "message" then
    out[#out + 1] = format("if type(v) ~= 'table' then fail(d, %s, nil, 'table (message %s)', v) end", q, F.msg.name)
    out[#out + 1] = "local x = v"
    out[#out + 1] = write_code(F, F.number, false, ctx)
  else
    out[#out + 1] = check_code(F, "v", ctx, "nil")
    if F.presence then
      out[#out + 1] = write_code(F, F.number, false, ctx)
    else
      out[#out + 1] = format("if %s then\n%s\nend", NONDEFAULT[F.kind] or "x ~= 0", write_code(F, F.number, false, ctx))
    end
  end
  out[#out + 1] = "end"
  if F.required then
    out[#out + 1] = format("if v == nil then fail_text(d, %s, nil, 'required field missing') end", q)
  end
  return concat(out, "\n")
end

-- The names the generated code gets from its environment, in order.
local ENV = {
  "S", "C", "EN", "T", "PN", "PI", "UNK", "rawget", "type", "pairs", "format", "nkeys", "copy", "cast",
  "cu8p", "grow", "fix_len", "utf8_valid", "fail", "fail_text", "too_deep", "extra_key", "oneof_fail",
  "group_fail", "chk_i32", "chk_u32", "chk_i64", "chk_u64", "u64_of", "put_u32", "put_int",
  "put_zz32", "put_zz64", "put_fx32", "put_sfx32", "put_f32", "put_fx64", "put_sfx64", "put_f64",
}

-- source(T) -> the Lua source of T's encoder and its child and enum
-- tables.
function M.source(T)
  local C, EN, cidx, eidx = {}, {}, {}, {}
  local ctx = {
    child = function(U)
      if not cidx[U] then C[#C + 1] = U; cidx[U] = #C end
      return cidx[U]
    end,
    enum = function(E)
      if not eidx[E] then EN[#EN + 1] = E.values; eidx[E] = #EN end
      return eidx[E]
    end,
  }
  local body = {}
  for _, F in ipairs(T.fields) do body[#body + 1] = field_code(F, ctx) end
  for o, oneof in ipairs(T.oneofs) do
    local terms = {}
    for _, F in ipairs(oneof.fields) do terms[#terms + 1] = format("(rawget(t, %q) ~= nil and 1 or 0)", F.name) end
    body[#body + 1] = format("if %s > 1 then oneof_fail(T, t, d, %d) end", concat(terms, " + "), o)
  end
  local src = format([[
local %s = ...
return function(t, n, d)
if d > %d then too_deep(d) end
local seen, v = 0, nil
%s
if seen ~= nkeys(t) then extra_key(T, t, d) end
local u = UNK[t]
if u ~= nil then
  local len = #u
  if n + len > S.cap then grow(n + len) end
  copy(S.B + n, u, len); n = n + len
end
return n
end
]], concat(ENV, ", "), wire.MAX_DEPTH, concat(body, "\n"))
  return src, C, EN
end

-- compile(T, UNK) -> T's encoder. UNK: the weak table of unknown fields
-- kept by decoders (message -> bytes).
function M.compile(T, UNK)
  local src, C, EN = M.source(T)
  local fn, err = load(src, "=protobuf encoder " .. T.name)
  if not fn then error(format("cohost.protobuf: cannot generate the encoder of %s: %s", T.name, err), 0) end
  local env = {
    S = S, C = C, EN = EN, T = T, PN = PN, PI = PI, UNK = UNK, rawget = rawget, type = type,
    pairs = pairs, format = format, nkeys = nkeys, copy = ffi.copy, cast = ffi.cast, cu8p = wire.cu8p,
    grow = wire.grow, fix_len = wire.fix_len, utf8_valid = wire.utf8_valid, fail = fail, fail_text = fail_text,
    too_deep = too_deep, extra_key = extra_key, oneof_fail = oneof_fail, group_fail = group_fail,
    chk_i32 = wire.chk_i32, chk_u32 = wire.chk_u32, chk_i64 = wire.chk_i64, chk_u64 = wire.chk_u64,
    u64_of = wire.u64_of, put_u32 = wire.put_u32, put_int = wire.put_int, put_zz32 = wire.put_zz32,
    put_zz64 = wire.put_zz64, put_fx32 = wire.put_fx32, put_sfx32 = wire.put_sfx32,
    put_f32 = wire.put_f32, put_fx64 = wire.put_fx64, put_sfx64 = wire.put_sfx64, put_f64 = wire.put_f64,
  }
  local args = {}
  for i, name in ipairs(ENV) do args[i] = env[name] end
  return fn(unpack(args, 1, #ENV))
end

return M
