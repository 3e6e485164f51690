-- cohost.http.form: request bodies as forms and JSON.
--
--   form.form(req [, opts])      urlencoded or multipart -> table | nil, err
--   form.multipart(req [, opts]) multipart/form-data      -> table | nil, err
--   form.json(req)               application/json         -> value | nil, err
--   form.urlencoded(s)           "a=1&a=2&b" -> { a = { "1", "2" }, b = "" }
--
-- cohost.http wires these as req:form() and req:json(). The multipart
-- parser streams over req:read(n): it holds at most one read plus a
-- boundary in memory, and file contents go to temp files or to a callback.
-- Errors: "bad form" (malformed), "unsupported media type", "too many
-- parts", "field too large", "file too large", "bad json", or the error of
-- req:read / req:body ("too large", "timeout", "closed", "bad request").
local ffi = require "ffi"
local cjson = require("cjson.safe").new()   -- our own settings, not the app's
ffi.cdef "size_t ch_ljvm_stack_left(void);"
local stack_left = ffi.C.ch_ljvm_stack_left
local MAX_JSON_DEPTH = 1000    -- cjson's own default nesting limit

local M = {}

local find, sub, lower, gsub = string.find, string.sub, string.lower, string.gsub

local READ_SIZE = 65536        -- bytes asked of req:read at a time
local MAX_PART_HEADER = 8192   -- bytes of one part's header block

M.defaults = {
  max_parts = 1000,              -- fields and files together
  max_field_size = 1024 * 1024,  -- bytes of one non-file field
  max_file_size = nil,           -- bytes of one file (nil: the body limit only)
}

-- -- Shared -------------------------------------------------------------------

local function unhex(h) return string.char(tonumber(h, 16)) end

local function unescape(s)
  s = gsub(s, "+", " ")
  return (gsub(s, "%%(%x%x)", unhex))
end

-- Adds a value under key: a repeated key becomes an array of its values
-- in order (multi records which keys already hold an array, since a file
-- value is a table too).
local function add(t, multi, key, value)
  local old = t[key]
  if old == nil then
    t[key] = value
  elseif multi[key] then
    old[#old + 1] = value
  else
    t[key] = { old, value }
    multi[key] = true
  end
end

-- The media type of a request, lower-case without parameters, and the
-- whole Content-Type header.
local function media_type(req)
  local ct = req:header("content-type") or ""
  return lower(ct:match("^%s*([^;%s]*)")), ct
end

-- -- urlencoded ---------------------------------------------------------------

-- urlencoded(s [, max_parts]) -> table, or nil, "too many parts".
function M.urlencoded(s, max_parts)
  local t, multi, n = {}, {}, 0
  max_parts = max_parts or M.defaults.max_parts
  for pair in s:gmatch("[^&]+") do
    n = n + 1
    if n > max_parts then return nil, "too many parts" end
    local eq = find(pair, "=", 1, true)
    if eq then
      add(t, multi, unescape(sub(pair, 1, eq - 1)), unescape(sub(pair, eq + 1)))
    else
      add(t, multi, unescape(pair), "")
    end
  end
  return t
end

-- -- multipart ----------------------------------------------------------------

ffi.cdef [[ int mkstemp(char *template); int close(int fd); ]]

-- A new empty temp file under dir (default: where os.tmpname puts them);
-- returns its path and a file opened for writing, or nil, err.
local function temp_file(dir)
  local path
  if dir then
    local tmpl = dir .. "/cohost-upload-XXXXXX"
    local buf = ffi.new("char[?]", #tmpl + 1, tmpl)
    local fd = ffi.C.mkstemp(buf)
    if fd < 0 then return nil, "cannot create a temp file in " .. dir end
    ffi.C.close(fd)
    path = ffi.string(buf)
  else
    path = os.tmpname()
  end
  local f, err = io.open(path, "wb")
  if not f then os.remove(path); return nil, err end
  return path, f
end

-- The parser reads the body into buf; pos is the first unconsumed byte.
local Parser = {}
Parser.__index = Parser

-- Reads more of the body into the buffer: true, or nil, err ("bad form"
-- when the body ends before the closing boundary; eof is then true).
function Parser:fill()
  local data, err = self.req:read(READ_SIZE)
  if not data then
    if err then return nil, err end
    return nil, "bad form", true
  end
  if self.pos > 1 then
    self.buf = sub(self.buf, self.pos) .. data
    self.pos = 1
  else
    self.buf = self.buf .. data
  end
  return true
end

-- The next piece of the current part's content (a non-empty string),
-- false once the part's delimiter has been consumed, or nil, err. Keeps
-- back the last #delim - 1 bytes, which may be the start of a delimiter.
function Parser:piece()
  local delim = self.delim
  while true do
    local buf, pos = self.buf, self.pos
    local s, e = find(buf, delim, pos, true)
    if s then
      self.pos = s > pos and s or e + 1
      if s > pos then return sub(buf, pos, s - 1) end
      return false
    end
    local safe = #buf - #delim + 1
    if safe >= pos then
      self.pos = safe + 1
      return sub(buf, pos, safe)
    end
    local ok, err = self:fill()
    if not ok then return nil, err end
  end
end

-- After a delimiter: true when a part follows, false after the closing
-- "--", or nil, err. Allows the transport padding (spaces, tabs) RFC 2046
-- puts before the CRLF.
function Parser:after_delimiter()
  while true do
    local s = find(self.buf, "\r\n", self.pos, true)
    if s then
      local line = sub(self.buf, self.pos, s - 1)
      self.pos = s + 2
      if find(line, "^%-%-") then return false end
      if find(line, "^[ \t]*$") then return true end
      return nil, "bad form"
    end
    if #self.buf - self.pos > 256 then return nil, "bad form" end
    local ok, err, eof = self:fill()
    if not ok then
      -- The closing "--" may end the body without a CRLF.
      if eof and find(self.buf, "^%-%-", self.pos) then return false end
      return nil, err
    end
  end
end

-- The parameters of a header value ('form-data; name="a"; filename=b')
-- as a table with lower-case names, or nil when malformed. Values are
-- tokens or quoted strings.
local function params(value)
  local t, pos, len = {}, (find(value, ";", 1, true) or #value + 1), #value
  while pos <= len do
    local name, stop = value:match("^;%s*([^=%s;]+)%s*=%s*()", pos)
    if not name then
      -- A trailing ";" or one with only spaces after it is tolerated.
      if value:find("^;?%s*$", pos) then break end
      return nil
    end
    pos = stop
    local v
    if sub(value, pos, pos) == '"' then
      local parts, i = {}, pos + 1
      while true do
        local c = sub(value, i, i)
        if c == "" then return nil end          -- unterminated
        if c == '"' then break end
        if c == "\\" then
          -- Only \" and \\ are escapes: browsers send backslashes as is
          -- (HTML's form encoding writes a quote as %22, not \").
          local c2 = sub(value, i + 1, i + 1)
          if c2 == '"' or c2 == "\\" then i = i + 1; c = c2 end
        end
        parts[#parts + 1] = c
        i = i + 1
      end
      v, pos = table.concat(parts), i + 1
    else
      v = value:match("^[^;%s]*", pos)
      pos = pos + #v
    end
    t[lower(name)] = v
    pos = value:match("^%s*()", pos)
  end
  return t
end

-- The part's headers (lower-case names), or nil, err.
function Parser:headers()
  while true do
    if sub(self.buf, self.pos, self.pos + 1) == "\r\n" then
      self.pos = self.pos + 2
      return {}
    end
    local s = find(self.buf, "\r\n\r\n", self.pos, true)
    if s then
      local block = sub(self.buf, self.pos, s + 1)
      self.pos = s + 4
      local h = {}
      for line in block:gmatch("(.-)\r\n") do
        local name, value = line:match("^([^:%s]+):%s*(.-)%s*$")
        if not name then return nil, "bad form" end
        h[lower(name)] = value
      end
      return h
    end
    if #self.buf - self.pos > MAX_PART_HEADER then return nil, "bad form" end
    local ok, err = self:fill()
    if not ok then return nil, err end
  end
end

-- A part as the on_file callback sees it: name, filename, content_type,
-- headers, size (bytes read so far) and read() -> the next piece of its
-- content, nil at its end, or nil, err.
local Part = {}
Part.__index = Part

function Part:read()
  if self.done then return nil end
  local piece, err = self.parser:piece()
  if piece == nil then
    self.err = err
    self.done = true
    return nil, err
  end
  if piece == false then
    self.done = true
    return nil
  end
  self.size = self.size + #piece
  if self.limit and self.size > self.limit then
    self.err = "file too large"
    self.done = true
    return nil, self.err
  end
  return piece
end

-- Reads a field's content whole, up to limit bytes.
local function read_field(p, limit)
  local pieces, size = {}, 0
  while true do
    local piece, err = p:piece()
    if piece == nil then return nil, err end
    if piece == false then return table.concat(pieces) end
    size = size + #piece
    if size > limit then return nil, "field too large" end
    pieces[#pieces + 1] = piece
  end
end

-- Writes a file part to a temp file; returns the file table or nil, err
-- (its temp file already removed).
local function save_file(part, dir)
  local path, f = temp_file(dir)
  if not path then return nil, f end
  while true do
    local piece, err = part:read()
    if not piece then
      f:close()
      if err then os.remove(path); return nil, err end
      break
    end
    local ok, werr = f:write(piece)
    if not ok then
      f:close()
      os.remove(path)
      return nil, werr
    end
  end
  return {
    filename = part.filename, content_type = part.content_type,
    size = part.size, path = path,
  }
end

-- The boundary of a multipart Content-Type (1 to 70 characters).
local function boundary_of(ct)
  local b = (params(ct) or {}).boundary
  if not b or #b < 1 or #b > 70 then return nil end
  return b
end

-- multipart(req [, opts]) -> table, or nil, err. opts:
--   dir             where temp files go (default: os.tmpname's directory)
--   on_file(part)   streams each file part instead of saving it: see Part;
--                   its return value (if not nil) becomes the field's
--                   value; returning nil, err stops parsing with err
--   max_parts, max_field_size, max_file_size: see M.defaults
-- Files saved to disk are { filename, content_type, size, path }; the
-- caller owns (and removes) path. On failure none is left behind.
function M.multipart(req, opts)
  opts = opts or {}
  local mt, ct = media_type(req)
  if mt ~= "multipart/form-data" then return nil, "unsupported media type" end
  local boundary = boundary_of(ct)
  if not boundary then return nil, "bad form" end
  local d = M.defaults
  local max_parts = opts.max_parts or d.max_parts
  local max_field = opts.max_field_size or d.max_field_size
  local max_file = opts.max_file_size or d.max_file_size

  -- The body is read as if it began with a CRLF, so the first delimiter
  -- looks like the others and any preamble is skipped as a part's content.
  local p = setmetatable({ req = req, buf = "\r\n", pos = 1,
                           delim = "\r\n--" .. boundary }, Parser)
  local t, multi, files, n = {}, {}, {}, 0

  local function fail(err)
    for _, path in ipairs(files) do os.remove(path) end
    return nil, err
  end

  -- Skip the preamble.
  while true do
    local piece, err = p:piece()
    if piece == nil then return fail(err) end
    if piece == false then break end
  end
  while true do
    local more, err = p:after_delimiter()
    if more == nil then return fail(err) end
    if not more then break end
    n = n + 1
    if n > max_parts then return fail("too many parts") end
    local h
    h, err = p:headers()
    if not h then return fail(err) end
    local cd = h["content-disposition"] or ""
    local ps = lower(cd):match("^%s*form%-data%s*;") and params(cd)
    local name = ps and ps.name
    if not name then return fail("bad form") end
    local filename = ps.filename
    local value
    if filename then
      local part = setmetatable({
        parser = p, name = name, filename = filename, headers = h,
        content_type = h["content-type"] or "application/octet-stream",
        size = 0, limit = max_file,
      }, Part)
      if opts.on_file then
        local v, cerr = opts.on_file(part)
        if v == nil and cerr then return fail(cerr) end
        -- Skip what the callback left unread.
        while part:read() do end
        if part.err then return fail(part.err) end
        value = v
        if value == nil then
          value = { filename = filename, content_type = part.content_type, size = part.size }
        end
      else
        value, err = save_file(part, opts.dir)
        if not value then return fail(err) end
        files[#files + 1] = value.path
      end
    else
      value, err = read_field(p, max_field)
      if not value then return fail(err) end
    end
    add(t, multi, name, value)
  end
  -- Read the epilogue, if any, so the connection can serve the next request.
  while true do
    local data, err = req:read(READ_SIZE)
    if not data then
      if err then return fail(err) end
      break
    end
  end
  return t
end

-- -- form and json ------------------------------------------------------------

-- form(req [, opts]) -> table, or nil, err: urlencoded bodies decoded as
-- req.query is, multipart/form-data as M.multipart.
function M.form(req, opts)
  local mt = media_type(req)
  if mt == "multipart/form-data" then return M.multipart(req, opts) end
  if mt ~= "application/x-www-form-urlencoded" then return nil, "unsupported media type" end
  local body, err = req:body()
  if not body then return nil, err end
  return M.urlencoded(body, opts and opts.max_parts)
end

-- json(req) -> the decoded body, or nil, err: "unsupported media type"
-- unless Content-Type is application/json or */*+json; "bad json: ..."
-- when it does not parse (an empty body included).
function M.json(req)
  local mt = media_type(req)
  if mt ~= "application/json" and not find(mt, "^[%w%.%-]+/[%w%.%-]+%+json$") then
    return nil, "unsupported media type"
  end
  local body, err = req:body()
  if not body then return nil, err end
  -- cjson recurses in C, about 90 bytes a nesting level: on a small
  -- coroutine stack (--stack-size 64K) its own limit of 1,000 levels runs
  -- past the guard and a client's body would end the process. Bound the
  -- depth by the stack left (128 bytes a level, 16 KiB kept for the
  -- rest): 1,000 from about 144 KiB up.
  local left = tonumber(stack_left())
  local depth = left > 16384 + 128 * MAX_JSON_DEPTH and MAX_JSON_DEPTH
                or math.max(1, math.floor((left - 16384) / 128))
  cjson.decode_max_depth(depth)
  local value, jerr = cjson.decode(body)
  if value == nil then return nil, "bad json: " .. tostring(jerr) end
  return value
end

return M
