-- cohost.http: an HTTP/1.1 server (C core: parsing, framing, limits,
-- keep-alive), a router, static files, forms and a client. See
-- docs/http.md.
require "cohost"   -- outside the program: its one-line hint (init.lua)
local core = require "cohost.core.http"
local json = require "cohost.cjson"
local cjson = json.safe

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
-- written {}. http.array(t) marks t as an array, which res:json (and
-- cjson.encode under cohost: cohost.cjson) writes as [] when it is empty;
-- cohost.cjson also writes a 64-bit integer cdata as its digits.
M.array = json.array
M.array_mt = json.array_mt

-- escape_html(s) -> s with & < > " ' as entities; s itself when it has
-- none (C: lib_http.c).
M.escape_html = core.escape_html

-- json_encode(value) -> JSON text | nil, err: res:json's encoding.
function M.json_encode(value)
  return cjson.encode(value)
end

-- res:json(value [, status])
function Response:json(value, status)
  local body, err = cjson.encode(value)
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
