-- cohost.protobuf: Protocol Buffers for Lua tables (docs/protobuf.md).
-- Schemas come from .proto files through Debian's protoc (pb.load runs
-- protoc --descriptor_set_out --include_imports) or from a descriptor set
-- made ahead of time (pb.load_descriptor); messages are plain tables.
--
-- The codec is Lua: per message type an encoder and a decoder generated
-- as source on first use (cohost.protobuf.encode, .decode) over the wire
-- primitives of cohost.protobuf.wire. The types come from
-- cohost.protobuf.schema, which also holds the part of descriptor.proto
-- the codec needs to read descriptor sets at all.
local ffi = require "ffi"
local wire = require "cohost.protobuf.wire"
local schema = require "cohost.protobuf.schema"
local encode = require "cohost.protobuf.encode"
local decode = require "cohost.protobuf.decode"

local format, concat = string.format, table.concat
local cast, ffi_string = ffi.cast, ffi.string
local S, cu8p = wire.S, wire.cu8p

local M = {}

-- Unknown fields a decoder kept, by message table: weak, so a message
-- and its unknown bytes go together; a copy of the table has none.
local UNK = setmetatable({}, { __mode = "k" })

-- Every type loaded so far, by full name (pb.encode, pb.decode): a later
-- load of the same name replaces it.
local G = { messages = {}, enums = {}, services = {}, files = {} }

-- Gives each message type its encoder and decoder, generated on first
-- use (a set of a thousand types costs nothing until used).
local function install(R)
  for _, T in pairs(R.messages) do
    T.enc = function(...)
      T.enc = encode.compile(T, UNK)
      return T.enc(...)
    end
    T.dec = function(...)
      T.dec = decode.compile(T, UNK)
      return T.dec(...)
    end
    if T.map_entry then
      T.entry = function(...)
        T.entry = decode.compile(T, UNK, true)
        return T.entry(...)
      end
    end
  end
end

-- -- Encoding and decoding by type --------------------------------------------

local function encode_as(T, t)
  if type(t) ~= "table" then
    error(format("bad message for %s (table expected, got %s)", T.name, type(t)), 3)
  end
  encode.state.root = T.root
  local n = T.enc(t, 0, 1)
  if n > wire.MAX_SIZE then error(format("%s: message over protobuf's 2 GiB limit", T.root), 3) end
  local s = ffi_string(S.B, n)
  wire.trim()
  return s
end

local function decode_as(T, s)
  if type(s) ~= "string" then
    error(format("bad bytes for %s (string expected, got %s)", T.name, type(s)), 3)
  end
  -- No pcall: malformed bytes make the decoder return nil (wire.fail).
  local t = T.dec(cast(cu8p, s), 0, #s, 1)
  if t == nil then return nil, format("cannot decode %s: %s", T.name, wire.err) end
  return t
end

local function message_type(R, name, level)
  if type(name) ~= "string" then error("bad message type name (string expected)", level + 1) end
  local T = R.messages[name]
  if not T then error(format("unknown message type %s (load its .proto first)", name), level + 1) end
  return T
end

-- encode(name, t) -> bytes. Raises on a value of the wrong type, naming
-- its path ("note.tags[3]: string expected, got table").
function M.encode(name, t)
  return encode_as(message_type(G, name, 2), t)
end

-- decode(name, bytes) -> t, or nil, err for malformed bytes.
function M.decode(name, s)
  return decode_as(message_type(G, name, 2), s)
end

-- unknown(t) -> the raw bytes of the unknown fields decoded into t, or nil.
function M.unknown(t)
  return UNK[t]
end

-- -- The bootstrap -------------------------------------------------------------------

local BOOT = assert(schema.build({ file = { schema.BOOT } }))
install(BOOT)
local SET_T = BOOT.messages["google.protobuf.FileDescriptorSet"]
local FILE_T = BOOT.messages["google.protobuf.FileDescriptorProto"]

-- -- Sets --------------------------------------------------------------------------------

local Set = {}
Set.__index = Set

-- set:encode(name, t) -> bytes, with the set's own types only.
function Set:encode(name, t)
  return encode_as(message_type(self, name, 2), t)
end

-- set:decode(name, bytes) -> t, or nil, err.
function Set:decode(name, s)
  return decode_as(message_type(self, name, 2), s)
end

-- set:message(name), set:enum(name), set:service(name) -> the type, or nil.
function Set:message(name) return self.messages[name] end
function Set:enum(name) return self.enums[name] end
function Set:service(name) return self.services[name] end

-- set:file(name) -> the FileDescriptorProto of a file of the set, as
-- bytes (what server reflection sends), or nil.
function Set:file(name)
  local fd = self.files[name]
  if not fd then return nil end
  local b = self.file_bytes[name]
  if not b then
    b = encode_as(FILE_T, fd)
    self.file_bytes[name] = b
  end
  return b
end

-- set:file_of(symbol) -> the name of the file that defines a message,
-- enum, service, or a service's method ("pkg.Svc.Method"), or nil.
function Set:file_of(symbol)
  local t = self.messages[symbol] or self.enums[symbol] or self.services[symbol]
  if t then return t.file end
  local svc, method = symbol:match("^(.+)%.([^.]+)$")
  local S = svc and self.services[svc]
  if S and S.by_name[method] then return S.file end
  return nil
end

-- set:dependencies(name) -> the names of the files name imports, directly
-- or not, each once, dependencies before the files that import them.
function Set:dependencies(name)
  local out, seen = {}, {}
  local function visit(f)
    if seen[f] then return end
    seen[f] = true
    local fd = self.files[f]
    if not fd then return end
    for _, dep in ipairs(fd.dependency or {}) do visit(dep) end
    if f ~= name then out[#out + 1] = f end
  end
  visit(name)
  return out
end

-- load_descriptor(bytes) -> set, or nil, err: a FileDescriptorSet (protoc
-- --descriptor_set_out, with --include_imports unless what it imports is
-- loaded already). Its types are registered for pb.encode and pb.decode.
function M.load_descriptor(bytes)
  if type(bytes) ~= "string" then error("bad descriptor set (string expected)", 2) end
  local set, err = decode_as(SET_T, bytes)
  if not set then return nil, err end
  local R, berr = schema.build(set, G)
  if not R then return nil, "bad descriptor set: " .. berr end
  install(R)
  for _, kind in ipairs { "messages", "enums", "services", "files" } do
    for name, v in pairs(R[kind]) do G[kind][name] = v end
  end
  R.bytes = bytes
  R.file_bytes = {}
  return setmetatable(R, Set)
end

-- -- protoc ----------------------------------------------------------------------------------

local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function basename(path)
  return path:match("([^/]*)$")
end

-- Whether path lies under dir, as protoc decides it (by text).
local function under(path, dir)
  dir = dir:gsub("/+$", "")
  if dir == "" or dir == "." then return path:sub(1, 1) ~= "/" end
  return path:sub(1, #dir + 1) == dir .. "/"
end

-- descriptor(path [, opts]) -> the bytes of a FileDescriptorSet of path
-- (or of an array of paths) and everything it imports, or nil, err
-- (protoc's own message, with its file:line:column). Runs protoc: the
-- step to run ahead of time when a server is to load its types without
-- protoc (pb.load_descriptor).
function M.descriptor(path, opts)
  local files = type(path) == "table" and path or { path }
  for _, f in ipairs(files) do
    if type(f) ~= "string" then error("bad .proto path (string or array of strings expected)", 2) end
  end
  if #files == 0 then error("bad .proto path (no file)", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("bad options (table expected)", 2) end
  opts = opts or {}
  local paths = opts.import_paths
  if paths ~= nil and type(paths) ~= "table" then error("bad option import_paths (array expected)", 2) end
  local args, inc, names = { quote(opts.protoc or "protoc") }, {}, {}
  local function include(dir)
    if not inc[dir] then
      inc[dir] = true
      args[#args + 1] = "-I" .. quote(dir)
    end
  end
  -- Each file goes to protoc by its name under an import path: the one
  -- given that holds it, else its own directory (then named by its base
  -- name, as "notes.proto" in the descriptors and in reflection).
  for _, p in ipairs(paths or {}) do include(p) end
  for i, f in ipairs(files) do
    local inside = false
    for _, p in ipairs(paths or {}) do
      if under(f, p) then inside = true end
    end
    if inside then
      names[i] = f
    else
      include(dirname(f))
      names[i] = basename(f)
    end
  end
  local out = os.tmpname()
  args[#args + 1] = "--include_imports"
  args[#args + 1] = "--descriptor_set_out=" .. quote(out)
  for _, n in ipairs(names) do args[#args + 1] = quote(n) end
  local cmd = concat(args, " ")
  local p = io.popen(cmd .. " 2>&1; echo \"exit:$?\"")
  local text = p:read("*a")
  p:close()
  local code = tonumber(text:match("exit:(%d+)%s*$"))
  text = text:gsub("exit:%d+%s*$", ""):gsub("%s+$", "")
  if code ~= 0 then
    os.remove(out)
    if code == 127 then
      return nil, "protoc not found (Debian: protobuf-compiler); or load a descriptor set made ahead with pb.load_descriptor"
    end
    return nil, text ~= "" and text or ("protoc exited with status " .. tostring(code))
  end
  local f = io.open(out, "rb")
  local bytes = f and f:read("*a")
  if f then f:close() end
  os.remove(out)
  if not bytes then return nil, "protoc wrote no descriptor set" end
  return bytes
end

-- load(path [, opts]) -> set, or nil, err: the .proto at path (or the
-- ones of an array of paths) and what they import, through protoc. opts: import_paths (protoc's -I; default the
-- file's directory), protoc (the program, default "protoc").
function M.load(path, opts)
  local bytes, err = M.descriptor(path, opts)
  if not bytes then return nil, err end
  return M.load_descriptor(bytes)
end

return M
