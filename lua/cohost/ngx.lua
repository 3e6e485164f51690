-- cohost.ngx: OpenResty's ngx API on cohost, so lua-resty-* style drivers
-- run unmodified. require "cohost.ngx" installs the global ngx (once per
-- worker: each worker has its own Lua state); require("cohost.ngx").install()
-- is the explicit form and returns ngx. See docs/ngx.md.
--
-- Cosockets, threads, timers and semaphores are cohost's own, which
-- already follow OpenResty's names and error strings; ngx.re is PCRE2;
-- the request API (ngx.say, ngx.req, ngx.var ...) works inside cohost.http
-- handlers. A name OpenResty has and cohost does not is a function that
-- raises "not supported by cohost: ngx.X" when called, never a nil.
local cohost = require "cohost"
local http = require "cohost.http"
local core = require "cohost.core.re"
local sys = require "cohost.core.sys"
local cjson = require "cjson"
local re = require "cohost.ngx.re"
local util = require "cohost.ngx.util"
local req_api = require "cohost.ngx.http"

local M = {}

local type, select, error, setmetatable = type, select, error, setmetatable

-- -- Unsupported names -----------------------------------------------------

-- A function raising the clear error for ngx.<path>.
local function unsupported(path)
  return function()
    error("not supported by cohost: " .. path, 2)
  end
end

-- Makes tbl answer any lower-case name it lacks with unsupported(prefix
-- .. name); names starting with "_" or an upper-case letter (constants)
-- stay nil, so probing for internals or a missing constant still gives nil.
local function guard(tbl, prefix, extra)
  local mt = extra or {}
  local dyn_index = mt.__index
  mt.__index = function(t, k)
    if dyn_index then
      local v = dyn_index(t, k)
      if v ~= nil then return v end
    end
    if type(k) == "string" and k:match("^[a-z]") then return unsupported(prefix .. k) end
    return nil
  end
  return setmetatable(tbl, mt)
end

-- -- The ngx table ---------------------------------------------------------------

local ngx = {}

-- Return codes and log levels, as ngx_lua defines them.
ngx.OK, ngx.ERROR, ngx.AGAIN, ngx.DONE, ngx.DECLINED = 0, -1, -2, -4, -5
ngx.STDERR, ngx.EMERG, ngx.ALERT, ngx.CRIT, ngx.ERR = 0, 1, 2, 3, 4
ngx.WARN, ngx.NOTICE, ngx.INFO, ngx.DEBUG = 5, 6, 7, 8

local HTTP = {
  CONTINUE = 100, SWITCHING_PROTOCOLS = 101, OK = 200, CREATED = 201, ACCEPTED = 202,
  NO_CONTENT = 204, PARTIAL_CONTENT = 206, SPECIAL_RESPONSE = 300,
  MOVED_PERMANENTLY = 301, MOVED_TEMPORARILY = 302, SEE_OTHER = 303,
  NOT_MODIFIED = 304, TEMPORARY_REDIRECT = 307, PERMANENT_REDIRECT = 308,
  BAD_REQUEST = 400, UNAUTHORIZED = 401, PAYMENT_REQUIRED = 402, FORBIDDEN = 403,
  NOT_FOUND = 404, NOT_ALLOWED = 405, NOT_ACCEPTABLE = 406, REQUEST_TIMEOUT = 408,
  CONFLICT = 409, GONE = 410, UPGRADE_REQUIRED = 426, TOO_MANY_REQUESTS = 429,
  CLOSE = 444, ILLEGAL = 451, INTERNAL_SERVER_ERROR = 500, METHOD_NOT_IMPLEMENTED = 501,
  BAD_GATEWAY = 502, SERVICE_UNAVAILABLE = 503, GATEWAY_TIMEOUT = 504,
  VERSION_NOT_SUPPORTED = 505, INSUFFICIENT_STORAGE = 507,
  -- Methods, as ngx.req.get_method's numeric forms.
  GET = 2, HEAD = 4, POST = 8, PUT = 16, DELETE = 32, MKCOL = 64, COPY = 128,
  MOVE = 256, OPTIONS = 512, PROPFIND = 1024, PROPPATCH = 2048, LOCK = 4096,
  UNLOCK = 8192, PATCH = 16384, TRACE = 32768,
}
for k, v in pairs(HTTP) do ngx["HTTP_" .. k] = v end

ngx.null = cjson.null

-- ngx.log(level, ...): OpenResty's nine levels onto cohost's five; the
-- arguments are concatenated (nil, booleans and ngx.null spelled out).
-- The tail call keeps the caller's line in the log.
local LEVEL = { [0] = 1, 1, 1, 1, 1, 2, 3, 4, 5 }
local slog = sys.log
local null = cjson.null

local function log_nulls(level, n, ...)
  local args = { ... }
  for i = 1, n do
    if args[i] == null then args[i] = "null" end
  end
  return slog(level, unpack(args, 1, n))
end

function ngx.log(level, ...)
  local lv = LEVEL[level]
  if not lv then error("bad log level", 2) end
  local n = select("#", ...)
  for i = 1, n do
    if select(i, ...) == null then return log_nulls(lv, n, ...) end
  end
  return slog(lv, ...)
end

-- print(...) as OpenResty's: ngx.log at NOTICE. Installed as the global
-- print only with install{print = true}.
function M.print(...)
  return ngx.log(ngx.NOTICE, ...)
end

-- Cosockets: cohost's are OpenResty's already.
ngx.socket = guard({
  tcp = cohost.tcp,
  stream = cohost.tcp,
  udp = cohost.udp,
  -- connect(host, port [, opts]) or connect("unix:/path") -> sock | nil, err
  connect = function(...)
    local sock = cohost.tcp()
    local ok, err = sock:connect(...)
    if not ok then return nil, err end
    return sock
  end,
}, "ngx.socket.")

-- Time.
ngx.sleep = function(s)
  if type(s) ~= "number" or s < 0 then error("bad argument #1 to 'sleep' (non-negative number expected)", 2) end
  return cohost.sleep(s)
end
ngx.now = util.now
ngx.time = util.time
ngx.update_time = util.update_time
ngx.today = util.today
ngx.localtime = util.localtime
ngx.utctime = util.utctime
ngx.http_time = util.http_time
ngx.cookie_time = util.cookie_time
ngx.parse_http_time = util.parse_http_time

-- Encodings and digests.
for _, name in ipairs { "escape_uri", "unescape_uri", "encode_args", "decode_args",
                        "encode_base64", "decode_base64", "md5", "md5_bin", "sha1_bin",
                        "hmac_sha1", "crc32_short", "crc32_long", "quote_sql_str" } do
  ngx[name] = util[name]
end

ngx.re = guard({
  match = re.match, find = re.find, gmatch = re.gmatch, sub = re.sub, gsub = re.gsub,
}, "ngx.re.")

-- Light threads; spawn from a handler keeps the request for ngx.say etc.
ngx.thread = guard({
  spawn = function(fn, ...) return req_api.spawn(cohost.spawn, fn, ...) end,
  wait = cohost.wait,
  kill = cohost.kill,
}, "ngx.thread.")

-- Timers return true (OpenResty's handle) or nil, err.
local function timer(start)
  return function(delay, fn, ...)
    if type(fn) ~= "function" then error("bad argument #2 (function expected)", 2) end
    if type(delay) ~= "number" then error("bad argument #1 (number expected)", 2) end
    if sys.exiting() then return nil, "process exiting" end
    local ok, err = pcall(start, delay, fn, ...)
    if not ok then return nil, tostring(err) end
    return true
  end
end
ngx.timer = guard({
  at = timer(cohost.timer.at),
  every = timer(cohost.timer.every),
}, "ngx.timer.")

-- ngx.semaphore, also require "ngx.semaphore": new(n) -> sema | nil, err.
local semaphore = {
  new = function(n)
    local ok, sema = pcall(cohost.semaphore.new, n)
    if not ok then return nil, tostring(sema) end
    return sema
  end,
}
ngx.semaphore = semaphore

ngx.worker = guard({
  id = cohost.worker_id,
  count = cohost.worker_count,
  pid = core.pid,
  exiting = sys.exiting,
}, "ngx.worker.")

-- ngx.config: an ngx_lua 0.10.26 in the http subsystem, for code that
-- checks versions (the websocket client wants 0.9.11+ for TLS).
ngx.config = guard({
  debug = false,
  subsystem = "http",
  ngx_lua_version = 10026,
  nginx_version = 1025003,
  is_console = false,
  prefix = function()
    local dir = os.getenv("PWD") or "."
    return dir:sub(-1) == "/" and dir or dir .. "/"
  end,
  nginx_configure = function() return "" end,
}, "ngx.config.")

-- ngx.shared.DICT through cohost.shared, loaded on first use.
local shared_mod
ngx.shared = setmetatable({}, {
  __index = function(_, name)
    if shared_mod == nil then
      local ok, mod = pcall(require, "cohost.shared")
      shared_mod = ok and mod or false
    end
    if not shared_mod then error("not supported by cohost: ngx.shared (cohost.shared is missing)", 2) end
    return shared_mod.get(name)
  end,
})

-- The request API.
ngx.say, ngx.print, ngx.flush, ngx.eof = req_api.say, req_api.print, req_api.flush, req_api.eof
ngx.exit, ngx.redirect, ngx.send_headers = req_api.exit, req_api.redirect, req_api.send_headers
ngx.header, ngx.var = req_api.header, req_api.var
ngx.get_phase = req_api.get_phase
ngx.is_subrequest = false
ngx.req = guard(req_api.req, "ngx.req.")
ngx.resp = guard({}, "ngx.resp.")
ngx.location = guard({}, "ngx.location.")
ngx.arg = guard({}, "ngx.arg.")

guard(ngx, "ngx.", {
  __index = function(_, k)
    local d = req_api.dynamic[k]
    if d then return d[1]() end
  end,
  __newindex = function(t, k, v)
    local d = req_api.dynamic[k]
    if d then return d[2](v) end
    rawset(t, k, v)
  end,
})

M.ngx = ngx

-- -- Modules -----------------------------------------------------------------------

-- Debian packages OpenResty's drivers as nginx.* (lua-nginx-redis ships
-- nginx/redis.lua): require "resty.X" falls back to "nginx.X" once the
-- usual searchers found no resty.X, so a user's own resty.X wins. The
-- alias shares the module: require "resty.redis" == require "nginx.redis".
local function resty_alias(name)
  local rest = name:match("^resty%.(.+)$")
  if not rest then return nil end
  local alias = "nginx." .. rest
  if package.loaded[alias] == nil and not package.searchpath(alias, package.path) then
    return "\n\tno module '" .. alias .. "' (cohost.ngx's alias for " .. name .. ")"
  end
  return function() return require(alias) end
end

-- Modules of lua-resty-core that call into nginx through the FFI cannot
-- load here; these stand in for the ones cohost can serve.
local PRELOAD = {
  ["ngx.semaphore"] = function() return semaphore end,
  ["ngx.re"] = function() return { split = re.split, opt = re.opt } end,
  ["ngx.base64"] = function()
    return {
      encode_base64url = function(s)
        return (util.encode_base64(s, true):gsub("[+/]", { ["+"] = "-", ["/"] = "_" }))
      end,
      decode_base64url = function(s)
        if type(s) ~= "string" then error("string argument only", 2) end
        return util.decode_base64((s:gsub("[-_]", { ["-"] = "+", ["_"] = "/" })))
      end,
    }
  end,
  -- resty.core only switches ngx_lua's C API to FFI; nothing to do here.
  ["resty.core"] = function() return { version = ngx.config.ngx_lua_version } end,
}

local installed = false

-- install([opts]) -> ngx: sets the global ngx, turns on http.current()
-- for this worker, adds the resty.* aliases and the ngx.* modules.
-- opts.ssl_trusted_certificate = path sets the CA bundle handshakes trust
-- by default. opts.print = true also makes the global print log at NOTICE, as in
-- OpenResty (off by default: scripts and busted print to stdout).
function M.install(opts)
  if opts and opts.print then rawset(_G, "print", M.print) end
  -- opts.ssl_trusted_certificate: the CA bundle sslhandshake trusts when a
  -- driver names none (nginx's lua_ssl_trusted_certificate), per worker.
  if opts and opts.ssl_trusted_certificate then
    require("cohost.core.ssl").set_default_ca(opts.ssl_trusted_certificate)
  end
  -- opts.server_name: what ngx.var.server_name says (nginx's
  -- server_name; default the request's host).
  if opts and opts.server_name then req_api.server_name = opts.server_name end
  if installed then return ngx end
  installed = true
  http.track_current(true)
  rawset(_G, "ngx", ngx)
  for name, loader in pairs(PRELOAD) do
    if package.preload[name] == nil then package.preload[name] = loader end
  end
  for name, loader in pairs(require("cohost.ngx.core").preloads()) do
    if package.preload[name] == nil then package.preload[name] = loader end
  end
  local loaders = package.loaders
  loaders[#loaders + 1] = resty_alias
  return ngx
end

M.install()

return M
