-- cohost.ngx.core: what cohost serves for lua-resty-core's modules
-- (Debian's lua-resty-core), whose files call ngx_http_lua_module's C
-- functions through the FFI and refuse to load outside nginx ("ngx_http_
-- lua_module 0.10.23 required"). Each name gets cohost's own version where
-- it makes sense, or a loader raising one clear "not supported by cohost:
-- ngx.X (why)" error. cohost.ngx puts these into package.preload; a
-- user's own preload wins. See docs/ngx.md.
local ffi = require "ffi"
local cohost = require "cohost"
local sys = require "cohost.core.sys"
local req_api = require "cohost.ngx.http"

local M = {}

local VERSION = "0.1.25"   -- the lua-resty-core Debian ships

-- -- resty.core.base ----------------------------------------------------------
-- Its helpers are plain Lua and FFI buffers, nothing of nginx: served
-- whole, so libraries written against it (lua-resty-* that share string
-- buffers, the FFI_* codes) load. get_request() is nil: there is no
-- ngx_http_request_t to hand to nginx's C functions.

local function base()
  if not pcall(ffi.typeof, "ngx_str_t") then
    ffi.cdef [[
      typedef struct {
        size_t                 len;
        const unsigned char   *data;
      } ngx_str_t;
    ]]
  end
  local new_tab = require "table.new"
  local str_buf_size, str_buf, size_ptr, errmsg = 4096, nil, nil, nil
  local FREE_LIST_REF = 0
  local B = {
    version = VERSION,
    new_tab = new_tab,
    clear_tab = require "table.clear",
    FFI_OK = 0, FFI_NO_REQ_CTX = -100, FFI_BAD_CONTEXT = -101, FFI_ERROR = -1,
    FFI_AGAIN = -2, FFI_BUSY = -3, FFI_DONE = -4, FFI_DECLINED = -5,
  }
  function B.get_errmsg_ptr()
    errmsg = errmsg or ffi.new("char *[1]")
    return errmsg
  end
  function B.set_string_buf_size(size)
    if size <= 0 then return end
    str_buf = nil
    str_buf_size = math.ceil(size)
  end
  function B.get_string_buf_size() return str_buf_size end
  function B.get_size_ptr()
    size_ptr = size_ptr or ffi.new("size_t[1]")
    return size_ptr
  end
  function B.get_string_buf(size, must_alloc)
    if size > str_buf_size or must_alloc then return ffi.new("char[?]", size) end
    str_buf = str_buf or ffi.new("char[?]", str_buf_size)
    return str_buf
  end
  function B.ref_in_table(tb, key)
    if key == nil then return -1 end
    local ref = tb[FREE_LIST_REF]
    if ref and ref ~= 0 then
      tb[FREE_LIST_REF] = tb[ref]
    else
      ref = #tb + 1
    end
    tb[ref] = key
    return ref
  end
  function B.allows_subsystem(...)
    for i = 1, select("#", ...) do
      if select(i, ...) == "http" then return end
    end
    error("unsupported subsystem: http", 2)
  end
  function B.get_request() return nil end
  return B
end

-- -- ngx.process ----------------------------------------------------------------

local function process()
  local P = { version = VERSION }
  -- "single" for one process, "worker" for a worker process under
  -- --processes' master (cohost never runs Lua in the master).
  function P.type()
    return sys.processes() > 0 and "worker" or "single"
  end
  function P.get_master_pid()
    if sys.processes() == 0 then return nil end
    local f = io.open("/proc/self/stat")
    local stat = f and f:read("*l")
    if f then f:close() end
    -- Field 4, after the command in parentheses (which may hold spaces).
    return stat and tonumber(stat:match("%) %S+ (%d+)"))
  end
  function P.signal_graceful_exit()
    cohost.shutdown()
  end
  function P.enable_privileged_agent()
    return nil, "not supported by cohost: ngx.process.enable_privileged_agent (no privileged agent process)"
  end
  return P
end

-- -- ngx.errlog -----------------------------------------------------------------

-- nginx's levels (ngx.STDERR 0 .. ngx.DEBUG 8) onto cohost's five, as
-- ngx.log maps them; and back, for get_sys_filter_level.
local LEVEL = { [0] = 1, 1, 1, 1, 1, 2, 3, 4, 5 }
local NGX_LEVEL = { 4, 5, 6, 7, 8 }   -- err, warn, notice, info, debug

local function errlog()
  local E = { version = VERSION }
  function E.raw_log(level, msg)
    if type(level) ~= "number" then error("bad argument #1 to 'raw_log' (must be a number)", 2) end
    if type(msg) ~= "string" then error("bad argument #2 to 'raw_log' (must be a string)", 2) end
    local lv = LEVEL[level]
    if not lv then error("bad log level", 2) end
    sys.log_raw(lv, msg)
  end
  function E.get_sys_filter_level()
    return NGX_LEVEL[sys.log_level()]
  end
  local why = " (cohost keeps no in-memory copy of its log: lua_capture_error_log)"
  function E.set_filter_level()
    error("not supported by cohost: ngx.errlog.set_filter_level" .. why, 2)
  end
  function E.get_logs()
    error("not supported by cohost: ngx.errlog.get_logs" .. why, 2)
  end
  return E
end

-- -- Modules refused ----------------------------------------------------------------

-- A loader raising the error. require marks the module as loading before
-- it calls a loader, and a loader that raises leaves the mark, so the
-- next require would say "loop or previous error": the mark is cleared
-- first, and every require says why.
local function refuse(name, why)
  return function()
    package.loaded[name] = nil
    error("not supported by cohost: " .. name .. " (" .. why .. ")", 0)
  end
end

-- resty.core's parts only swap ngx.* functions for FFI versions; in
-- cohost ngx.* is cohost's own already, so each loads as a module that
-- changes nothing. ndk (ndk.set_var) and the stream-only ones are
-- refused below.
local NO_OP = { "var", "worker", "regex", "shdict", "time", "hash", "uri", "exit",
                "base64", "request", "response", "phase", "socket", "coroutine",
                "param", "misc", "ctx" }

-- name -> loader, for cohost.ngx's install.
function M.preloads()
  local p = {
    ["resty.core.base"] = base,
    ["ngx.process"] = process,
    ["ngx.errlog"] = errlog,
    ["ngx.ssl"] = refuse("ngx.ssl", "certificates are set with ssl_cert and ssl_key on cohost.listen: docs/tls.md"),
    ["ngx.ssl.session"] = refuse("ngx.ssl.session", "no ssl_session_fetch/store phases"),
    ["ngx.ssl.clienthello"] = refuse("ngx.ssl.clienthello", "no ssl_client_hello phase"),
    ["ngx.ocsp"] = refuse("ngx.ocsp", "no OCSP stapling"),
    ["ngx.balancer"] = refuse("ngx.balancer", "no upstream blocks: connect with cosockets"),
    ["ngx.pipe"] = refuse("ngx.pipe", "no subprocess API: use io.popen or os.execute"),
    ["ngx.req"] = function() return { version = VERSION, add_header = req_api.add_req_header } end,
    ["ngx.resp"] = function() return { version = VERSION, add_header = req_api.add_resp_header } end,
    ["resty.core.ndk"] = refuse("resty.core.ndk", "no nginx directives to call"),
    ["resty.core.utils"] = refuse("resty.core.utils", "nginx's string helpers are not exported"),
  }
  for _, name in ipairs(NO_OP) do
    p["resty.core." .. name] = function() return { version = VERSION } end
  end
  return p
end

return M
