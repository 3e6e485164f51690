-- cohost.protobuf.schema: turns decoded descriptor sets
-- (google.protobuf.FileDescriptorSet, what protoc --descriptor_set_out
-- writes) into the type tables the generated encoders and decoders work
-- from, and registers them by full name.
--
-- Descriptor sets are themselves protobuf messages: they are decoded by
-- the codec with types built from BOOT below, the part of
-- google/protobuf/descriptor.proto cohost reads, written in the shape a
-- decoded FileDescriptorProto has. What BOOT leaves out (options, source
-- info, extensions) is kept as unknown fields, so a file re-encodes whole.
local format, byte, char = string.format, string.byte, string.char

local M = {}

-- -- The bootstrap: descriptor.proto's part that cohost reads ------------------

local function field(label, name, number, ftype, type_name)
  return {
    name = name, number = number, type = "TYPE_" .. ftype:upper(), label = "LABEL_" .. label,
    type_name = type_name and ".google.protobuf." .. type_name,
  }
end
local function f(...) return field("OPTIONAL", ...) end
local function rep(...) return field("REPEATED", ...) end

local BOOT = {
  name = "google/protobuf/descriptor.proto", package = "google.protobuf", syntax = "proto2",
  message_type = {
    { name = "FileDescriptorSet", field = { rep("file", 1, "message", "FileDescriptorProto") } },
    { name = "FileDescriptorProto", field = {
      f("name", 1, "string"), f("package", 2, "string"), rep("dependency", 3, "string"),
      rep("message_type", 4, "message", "DescriptorProto"), rep("enum_type", 5, "message", "EnumDescriptorProto"),
      rep("service", 6, "message", "ServiceDescriptorProto"), f("syntax", 12, "string"),
    } },
    { name = "DescriptorProto", field = {
      f("name", 1, "string"), rep("field", 2, "message", "FieldDescriptorProto"),
      rep("nested_type", 3, "message", "DescriptorProto"), rep("enum_type", 4, "message", "EnumDescriptorProto"),
      f("options", 7, "message", "MessageOptions"), rep("oneof_decl", 8, "message", "OneofDescriptorProto"),
    } },
    { name = "FieldDescriptorProto", field = {
      f("name", 1, "string"), f("number", 3, "int32"),
      f("label", 4, "enum", "FieldDescriptorProto.Label"), f("type", 5, "enum", "FieldDescriptorProto.Type"),
      f("type_name", 6, "string"), f("default_value", 7, "string"), f("options", 8, "message", "FieldOptions"),
      f("oneof_index", 9, "int32"), f("json_name", 10, "string"), f("proto3_optional", 17, "bool"),
    }, enum_type = {
      { name = "Type", value = {
        { name = "TYPE_DOUBLE", number = 1 }, { name = "TYPE_FLOAT", number = 2 },
        { name = "TYPE_INT64", number = 3 }, { name = "TYPE_UINT64", number = 4 },
        { name = "TYPE_INT32", number = 5 }, { name = "TYPE_FIXED64", number = 6 },
        { name = "TYPE_FIXED32", number = 7 }, { name = "TYPE_BOOL", number = 8 },
        { name = "TYPE_STRING", number = 9 }, { name = "TYPE_GROUP", number = 10 },
        { name = "TYPE_MESSAGE", number = 11 }, { name = "TYPE_BYTES", number = 12 },
        { name = "TYPE_UINT32", number = 13 }, { name = "TYPE_ENUM", number = 14 },
        { name = "TYPE_SFIXED32", number = 15 }, { name = "TYPE_SFIXED64", number = 16 },
        { name = "TYPE_SINT32", number = 17 }, { name = "TYPE_SINT64", number = 18 },
      } },
      { name = "Label", value = {
        { name = "LABEL_OPTIONAL", number = 1 }, { name = "LABEL_REQUIRED", number = 2 },
        { name = "LABEL_REPEATED", number = 3 },
      } },
    } },
    { name = "OneofDescriptorProto", field = { f("name", 1, "string") } },
    { name = "EnumDescriptorProto", field = {
      f("name", 1, "string"), rep("value", 2, "message", "EnumValueDescriptorProto"),
    } },
    { name = "EnumValueDescriptorProto", field = { f("name", 1, "string"), f("number", 2, "int32") } },
    { name = "ServiceDescriptorProto", field = {
      f("name", 1, "string"), rep("method", 2, "message", "MethodDescriptorProto"),
    } },
    { name = "MethodDescriptorProto", field = {
      f("name", 1, "string"), f("input_type", 2, "string"), f("output_type", 3, "string"),
      f("client_streaming", 5, "bool"), f("server_streaming", 6, "bool"),
    } },
    { name = "MessageOptions", field = { f("map_entry", 7, "bool") } },
    { name = "FieldOptions", field = { f("packed", 2, "bool") } },
  },
}
M.BOOT = BOOT

-- -- Field kinds ---------------------------------------------------------------

-- kind, wire type
local KINDS = {
  TYPE_DOUBLE = { "double", 1 }, TYPE_FLOAT = { "float", 5 }, TYPE_INT64 = { "int64", 0 },
  TYPE_UINT64 = { "uint64", 0 }, TYPE_INT32 = { "int32", 0 }, TYPE_FIXED64 = { "fixed64", 1 },
  TYPE_FIXED32 = { "fixed32", 5 }, TYPE_BOOL = { "bool", 0 }, TYPE_STRING = { "string", 2 },
  TYPE_GROUP = { "group", 3 }, TYPE_MESSAGE = { "message", 2 }, TYPE_BYTES = { "bytes", 2 },
  TYPE_UINT32 = { "uint32", 0 }, TYPE_ENUM = { "enum", 0 }, TYPE_SFIXED32 = { "sfixed32", 5 },
  TYPE_SFIXED64 = { "sfixed64", 1 }, TYPE_SINT32 = { "sint32", 0 }, TYPE_SINT64 = { "sint64", 0 },
}
M.KINDS = KINDS

-- Kinds that may be packed: every scalar but strings and bytes.
local PACKABLE = {
  double = true, float = true, int64 = true, uint64 = true, int32 = true, fixed64 = true,
  fixed32 = true, bool = true, uint32 = true, enum = true, sfixed32 = true, sfixed64 = true,
  sint32 = true, sint64 = true,
}
M.PACKABLE = PACKABLE

-- The value of an unset field without presence, by kind.
local ZERO = {
  double = 0, float = 0, int64 = 0, uint64 = 0, int32 = 0, fixed64 = 0, fixed32 = 0,
  bool = false, string = "", bytes = "", uint32 = 0, sfixed32 = 0, sfixed64 = 0,
  sint32 = 0, sint64 = 0,
}

-- -- proto2 default values ---------------------------------------------------------

-- protoc writes a bytes default C-escaped (\n, \", \\, \ooo octal, \xHH).
local ESC = { n = "\n", r = "\r", t = "\t", ['"'] = '"', ["'"] = "'", ["\\"] = "\\", a = "\a",
              b = "\b", f = "\f", v = "\v", ["?"] = "?" }
local function unescape(s)
  return (s:gsub("\\(%d%d?%d?)", function(o) return char(tonumber(o, 8) % 256) end)
           :gsub("\\x(%x%x?)", function(h) return char(tonumber(h, 16)) end)
           :gsub("\\(.)", function(c) return ESC[c] or c end))
end

-- A 64-bit default as the decoder would give it: a number within
-- +-2^53, else a cdata parsed digit by digit (tonumber would round).
local function int64_default(s, unsigned)
  local neg, digits = s:match("^(%-?)(%d+)$")
  if not digits then return nil end
  local x = unsigned and 0ULL or 0LL
  for i = 1, #digits do x = x * 10 + (byte(digits, i) - 48) end
  if neg == "-" then x = -x end
  if unsigned then
    if x <= 9007199254740992ULL then return tonumber(x) end
  elseif x <= 9007199254740992LL and x >= -9007199254740992LL then
    return tonumber(x)
  end
  return x
end

local function parse_default(fd, kind)
  local s = fd.default_value
  if s == nil then return nil end
  if kind == "string" then return s end
  if kind == "bytes" then return unescape(s) end
  if kind == "bool" then return s == "true" end
  if kind == "enum" then return s end
  if kind == "double" or kind == "float" then
    if s == "inf" then return math.huge elseif s == "-inf" then return -math.huge
    elseif s == "nan" then return 0 / 0 end
    return tonumber(s)
  end
  if kind == "int64" or kind == "sint64" or kind == "sfixed64" then return int64_default(s, false) end
  if kind == "uint64" or kind == "fixed64" then return int64_default(s, true) end
  return tonumber(s)
end

-- -- Building types ----------------------------------------------------------------

-- A message's name as the root of a field path in errors: its short name
-- with the first letter lower-cased ("Note" -> "note.tags[3]").
local function root_name(short)
  return short:sub(1, 1):lower() .. short:sub(2)
end

local function join(prefix, name)
  if prefix == nil or prefix == "" then return name end
  return prefix .. "." .. name
end

local function add_enum(R, ed, full, file)
  local E = { kind = "enum", name = full, file = file, values = {}, names = {}, list = {} }
  for i, v in ipairs(ed.value or {}) do
    E.values[v.name] = v.number
    if E.names[v.number] == nil then E.names[v.number] = v.name end
    E.list[i] = v.name
    if i == 1 then E.first = v.name end
  end
  E.zero = E.names[0]
  R.enums[full] = E
  return E
end

local function add_message(R, md, full, file, syntax)
  local T = {
    kind = "message", name = full, short = md.name, root = root_name(md.name), file = file,
    syntax = syntax, d = md, map_entry = md.options ~= nil and md.options.map_entry == true,
  }
  R.messages[full] = T
  for _, nd in ipairs(md.nested_type or {}) do add_message(R, nd, join(full, nd.name), file, syntax) end
  for _, ed in ipairs(md.enum_type or {}) do add_enum(R, ed, join(full, ed.name), file) end
  return T
end

-- Resolves a type_name (".pkg.Msg", always absolute in a descriptor set)
-- in R, then in the registry already loaded.
local function resolve(R, G, name)
  local n = name:sub(1, 1) == "." and name:sub(2) or name
  return R.messages[n] or R.enums[n] or (G and (G.messages[n] or G.enums[n]))
end

-- Fills in T's fields once every type of the set is known.
local function finish_message(R, G, T)
  local md = T.d
  local proto3 = T.syntax == "proto3"
  T.fields, T.by_name, T.by_number, T.oneofs = {}, {}, {}, {}
  for i, od in ipairs(md.oneof_decl or {}) do T.oneofs[i] = { name = od.name, fields = {} } end
  for _, fd in ipairs(md.field or {}) do
    local k = KINDS[fd.type]
    if not k then return nil, format("%s.%s: unknown field type %s", T.name, fd.name, tostring(fd.type)) end
    local F = {
      name = fd.name, number = fd.number, kind = k[1], wt = k[2],
      repeated = fd.label == "LABEL_REPEATED", required = fd.label == "LABEL_REQUIRED",
    }
    if type(F.name) ~= "string" or not F.name:match("^[%a_][%w_]*$") then
      return nil, format("%s: bad field name %s", T.name, tostring(F.name))
    end
    if type(F.number) ~= "number" or F.number < 1 or F.number > 536870911 then
      return nil, format("%s.%s: bad field number %s", T.name, F.name, tostring(F.number))
    end
    if F.kind == "message" or F.kind == "enum" or F.kind == "group" then
      local ref = fd.type_name and resolve(R, G, fd.type_name)
      if not ref or (F.kind == "enum") ~= (ref.kind == "enum") then
        return nil, format("%s.%s: unknown type %s", T.name, F.name, tostring(fd.type_name))
      end
      if F.kind == "enum" then F.enum = ref else F.msg = ref end
    end
    if fd.oneof_index ~= nil and not fd.proto3_optional then
      local o = T.oneofs[fd.oneof_index + 1]
      if not o then return nil, format("%s.%s: bad oneof index", T.name, F.name) end
      F.oneof = o
      o.fields[#o.fields + 1] = F
    end
    if F.repeated then
      if F.kind == "message" and F.msg.map_entry then
        F.map = true   -- F.key, F.value: set once every entry type is finished
      elseif PACKABLE[F.kind] then
        local opt = fd.options and fd.options.packed
        if proto3 then F.packed = opt ~= false else F.packed = opt == true end
      end
    else
      F.presence = F.kind == "message" or F.kind == "group" or F.oneof ~= nil
        or fd.proto3_optional == true or (not proto3 and not F.required)
    end
    F.utf8 = F.kind == "string" and proto3
    F.default = parse_default(fd, F.kind)
    if F.kind == "enum" and F.default ~= nil and F.enum.values[F.default] == nil then
      return nil, format("%s.%s: bad enum default %s", T.name, F.name, F.default)
    end
    if T.by_number[F.number] or T.by_name[F.name] then
      return nil, format("%s: field %s defined twice", T.name, F.name)
    end
    T.by_name[F.name], T.by_number[F.number] = F, F
    T.fields[#T.fields + 1] = F
  end
  table.sort(T.fields, function(a, b) return a.number < b.number end)
  -- Oneofs that are left without a member are protoc's synthetic ones
  -- for proto3 optional fields: no group to check.
  local oneofs = {}
  for _, o in ipairs(T.oneofs) do if #o.fields > 0 then oneofs[#oneofs + 1] = o end end
  T.oneofs = oneofs
  return true
end

-- The value an unset field reads as (through the metatable), or nil.
local function default_of(F)
  if F.repeated then return nil end
  if F.default ~= nil then return F.default end
  if F.presence then return nil end
  if F.kind == "enum" then
    return F.enum.zero or F.enum.first
  end
  return ZERO[F.kind]
end

-- A decoded message's metatable: unset fields read as their defaults,
-- and an unset repeated or map field reads as an empty table made on the
-- spot (and kept, so appending to it sticks).
local function make_mt(T)
  local defaults, lazy = {}, {}
  local any_lazy = false
  for _, F in ipairs(T.fields) do
    local d = default_of(F)
    if d ~= nil then defaults[F.name] = d end
    if F.repeated then lazy[F.name] = true; any_lazy = true end
  end
  T.defaults = defaults
  if not any_lazy then return { __index = defaults } end
  return { __index = function(t, k)
    local d = defaults[k]
    if d ~= nil then return d end
    if lazy[k] then
      local a = {}
      rawset(t, k, a)
      return a
    end
    return nil
  end }
end

-- build(set, G) -> R | nil, err: the types of a decoded FileDescriptorSet,
-- names resolved within it and then in G (the registry so far). R has
-- messages, enums, services by full name, and files (name -> decoded
-- FileDescriptorProto, in the set's order in R.file_list).
function M.build(set, G)
  local R = { messages = {}, enums = {}, services = {}, files = {}, file_list = {} }
  for _, fd in ipairs(set.file or {}) do
    local syntax = fd.syntax == "proto3" and "proto3" or "proto2"
    local file = fd.name or "?"
    R.files[file] = fd
    R.file_list[#R.file_list + 1] = fd
    for _, md in ipairs(fd.message_type or {}) do add_message(R, md, join(fd.package, md.name), file, syntax) end
    for _, ed in ipairs(fd.enum_type or {}) do add_enum(R, ed, join(fd.package, ed.name), file) end
    for _, sd in ipairs(fd.service or {}) do
      local S = { kind = "service", name = join(fd.package, sd.name), file = file, methods = {}, by_name = {}, d = sd }
      R.services[S.name] = S
    end
  end
  for _, T in pairs(R.messages) do
    local ok, err = finish_message(R, G, T)
    if not ok then return nil, err end
  end
  for _, T in pairs(R.messages) do
    if T.map_entry then
      T.key, T.value = T.by_number[1], T.by_number[2]
      if not T.key or not T.value then return nil, format("%s: map entry without key or value", T.name) end
    end
    T.mt = make_mt(T)
  end
  for _, T in pairs(R.messages) do
    for _, F in ipairs(T.fields) do
      if F.map then F.key, F.value = F.msg.key, F.msg.value end
    end
  end
  for _, S in pairs(R.services) do
    for _, md in ipairs(S.d.method or {}) do
      local input, output = resolve(R, G, md.input_type or ""), resolve(R, G, md.output_type or "")
      if not input or input.kind ~= "message" or not output or output.kind ~= "message" then
        return nil, format("%s.%s: unknown input or output type", S.name, tostring(md.name))
      end
      local m = {
        name = md.name, input = input, output = output, path = "/" .. S.name .. "/" .. md.name,
        client_streaming = md.client_streaming == true, server_streaming = md.server_streaming == true,
      }
      S.methods[#S.methods + 1] = m
      S.by_name[m.name] = m
    end
  end
  return R
end

return M
