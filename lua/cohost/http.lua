-- cohost.http: an HTTP/1.1 server (C core: parsing, framing, limits,
-- keep-alive), a router, static files, forms and a client. See
-- docs/http.md.
require "cohost"   -- outside the program: its one-line hint (init.lua)
local core = require "cohost.core.http"
local cjson = require "cjson.safe"

local M = {}

-- The method tables of req and res: add methods here to extend them.
M.Request = core.Request
M.Response = core.Response

local Request, Response = core.Request, core.Response

local PRIORITY = { high = true, normal = true, low = true }

-- listen(addr, handler_or_router [, opts]) -> listener | nil, err
function M.listen(addr, handler, opts)
  if type(handler) == "table" then
    local r = handler
    if type(r.handler) == "function" then
      handler = r:handler(opts)
    else
      handler = function(req, res) return r(req, res) end
    end
  end
  if type(handler) ~= "function" then
    error("bad argument #2 to 'listen' (function or router expected)", 2)
  end
  opts = opts or {}
  if opts.priority ~= nil and not PRIORITY[opts.priority] then
    error("bad option priority (\"high\", \"normal\" or \"low\" expected)", 2)
  end
  local on_error = opts.on_error
  if on_error ~= nil and type(on_error) ~= "function" then
    error("bad option on_error (function expected)", 2)
  end
  -- on_error(req, res, status, err): a body declared over max_body_size.
  local server = core.server(handler, opts, on_error and function(req, res)
    return on_error(req, res, 413, "too large")
  end)
  return core.listen(addr, server, opts)
end

-- Lazily loaded parts, so a hello-world server loads none of them.
local function lazy(name)
  local mod
  return function()
    mod = mod or require(name)
    return mod
  end
end
local router_mod = lazy "cohost.http.router"
local form_mod = lazy "cohost.http.form"
local mime_mod = lazy "cohost.http.mime"
local client_mod = lazy "cohost.http.client"

-- current() -> req, res of the HTTP handler running on the calling Lua
-- thread, or nothing. Off by default (it costs a table write per request):
-- track_current(true) turns it on for this worker (cohost.ngx does).
M.current = core.current
M.track_current = core.track_current

local real_ip_mod = lazy "cohost.http.real_ip"

function M.router(...) return router_mod().new(...) end
function M.real_ip(opts) return real_ip_mod().new(opts) end
function M.request(url, opts) return client_mod().request(url, opts) end
function M.client(opts) return client_mod().new(opts) end

-- req:chunks([size]) -> iterator of body pieces; raises on a body error.
function Request:chunks(size)
  return function()
    local piece, err = self:read(size or 65536)
    if err then error("request body: " .. err, 2) end
    return piece
  end
end

-- req:json() -> value | nil, err
function Request:json()
  return form_mod().json(self)
end

-- req:form([opts]) -> table | nil, err
function Request:form(opts)
  return form_mod().form(self, opts)
end

-- -- JSON arrays -------------------------------------------------------------

-- Debian's lua-cjson (2.1.0) has no cjson.empty_array: an empty table is
-- written {}. http.array(t) marks t as an array, which res:json writes as
-- [] when it is empty. Marked empty arrays are swapped for a placeholder
-- string before encoding (in copies of the tables on their path: the
-- caller's value is not changed) and the placeholder for [] after; its
-- random part makes it one no data can spell.
local array_mt = {}
M.array_mt = array_mt
local marked = false   -- no walk at all until a worker marks an array

function M.array(t)
  marked = true
  return setmetatable(t or {}, array_mt)
end

local PLACEHOLDER = "\0cohost-empty-array-"
  .. require("cohost.core.crypto").random_bytes(12):gsub(".", function(c) return ("%02x"):format(c:byte()) end)
  .. "\0"
local ENCODED = cjson.encode(PLACEHOLDER):gsub("%p", "%%%0")
-- A 64-bit integer cdata (cohost.postgres's int8 past 2^53) is written as
-- its exact digits: swapped for NUMBER .. digits, and the encoded string
-- for the bare digits after.
local NUMBER = PLACEHOLDER .. "n"
local NUMBER_ENCODED = cjson.encode(NUMBER):sub(1, -2):gsub("%p", "%%%0") .. "(%-?%d+)\""

local ffi, int64_t, uint64_t
local function int64_digits(v)
  if not ffi then
    ffi = require "ffi"
    int64_t, uint64_t = ffi.typeof("int64_t"), ffi.typeof("uint64_t")
  end
  if ffi.istype(int64_t, v) or ffi.istype(uint64_t, v) then
    return (tostring(v):gsub("U?LL$", ""))
  end
end

-- v with marked empty arrays (http.array, or a metatable with
-- __jsonarray: cohost.postgres's rows) and 64-bit integer cdata replaced;
-- true if there were any. Depth is bounded as cjson's own (1000): deeper
-- values are left as they are.
local function swap_arrays(v, depth)
  local t = type(v)
  if t == "cdata" then
    local digits = int64_digits(v)
    if digits then return NUMBER .. digits, true end
    return v, false
  end
  if t ~= "table" or depth > 1000 then return v, false end
  local mt = getmetatable(v)
  if mt and (mt == array_mt or rawget(mt, "__jsonarray")) and next(v) == nil then return PLACEHOLDER, true end
  local copy
  for k, x in pairs(v) do
    local nx, changed = swap_arrays(x, depth + 1)
    if changed then
      if not copy then
        copy = {}
        for k2, x2 in pairs(v) do copy[k2] = x2 end
      end
      copy[k] = nx
    end
  end
  return copy or v, copy ~= nil
end

-- json_encode(value) -> JSON text | nil, err: res:json's encoding, cjson's
-- with marked empty arrays as [] and 64-bit integer cdata as digits.
function M.json_encode(value)
  local swapped = false
  if marked then value, swapped = swap_arrays(value, 1) end
  local body, err = cjson.encode(value)
  if not body and not marked and tostring(err):find("cdata", 1, true) then
    value, swapped = swap_arrays(value, 1)   -- int64 cdata: the slow path
    body, err = cjson.encode(value)
  end
  if not body then return nil, err end
  if swapped then body = body:gsub(ENCODED, "[]"):gsub(NUMBER_ENCODED, "%1") end
  return body
end

-- res:json(value [, status])
function Response:json(value, status)
  local body, err = M.json_encode(value)
  if not body then error("res:json: " .. err, 2) end
  if status then self.status = status end
  self:header("Content-Type", "application/json")
  return self:send(body)
end

-- res:redirect(url [, status])
function Response:redirect(url, status)
  self.status = status or 302
  self:header("Location", url)
  return self:send("")
end

-- res:sendfile(path [, opts]): Content-Type from the extension (or
-- opts.content_type) unless set; set only once the file is found.
local sendfile = Response.sendfile
function Response:sendfile(path, opts)
  local typ = opts and opts.content_type
  if not typ and not self:get_header("Content-Type") then
    local ok, mime = pcall(mime_mod)
    typ = ok and mime.type_of(path) or "application/octet-stream"
  end
  return sendfile(self, path, typ)
end

-- req:multipart(opts) -> streaming multipart parts (see docs/http-router.md)
function Request:multipart(opts)
  return form_mod().multipart(self, opts)
end

return M
