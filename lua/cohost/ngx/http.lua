-- cohost.ngx.http: the request side of ngx (ngx.say, ngx.req, ngx.var,
-- ngx.header, ngx.ctx, ngx.exit ...) on cohost.http's req and res. The
-- request is found with http.current(), which maps the handler's Lua
-- thread to its req and res; threads spawned with ngx.thread.spawn from a
-- handler inherit its request (see spawn below). Code running in a plain
-- Lua coroutine inside a handler has no request: it is another Lua thread.
local http = require "cohost.http"
local core = require "cohost.core.re"
local sys = require "cohost.core.sys"
local cjson = require "cjson"
local util = require "cohost.ngx.util"
local crypto = require "cohost.core.crypto"

local M = {}

local type, tostring, pairs, select, setmetatable, error = type, tostring, pairs, select, setmetatable, error
local concat, lower, gsub, format = table.concat, string.lower, string.gsub, string.format
local co_running = coroutine.running
local http_current = http.current
local null = cjson.null

-- -- Finding the request ---------------------------------------------------

-- Threads spawned from a request: thread -> {thread = handler thread, req
-- = req}. Weak keys; an entry is trusted only while the handler thread
-- still serves that same req (Lua threads are pooled and reused).
local inherited = setmetatable({}, { __mode = "k" })

-- current() -> req, res, handler thread; or nothing outside a request.
local function current()
  local req, res = http_current()
  if req then return req, res, co_running() end
  local p = inherited[co_running()]
  if p then
    req, res = http_current(p.thread)
    if req == p.req then return req, res, p.thread end
  end
end
M.current = current

-- Per-request state: ctx, the body read, the ngx.header mirror (made on
-- the first set), a 101 head held back for ngx.req.socket(true), user
-- variables. Kept on req under a key no handler can name: it goes with
-- req, where an entry in a weak table keyed by req cost the collector
-- work on every request.
local STATE = {}

local function state(req)
  local st = req[STATE]
  if not st then
    st = {}
    req[STATE] = st
  end
  return st
end

-- st.headers: lower-case name -> value as set, and in its array part the
-- names in the order they were first set (the 101 head's order).
local function headers_of(st)
  local hs = st.headers
  if not hs then
    hs = {}
    st.headers = hs
  end
  return hs
end

-- need(api) -> req, res, state; raises outside a request.
local function need(api)
  local req, res = current()
  if not req then
    error(api .. ": no request found (call it from a cohost.http handler)", 3)
  end
  return req, res, state(req)
end

-- Runs fn(...) on a new thread that sees the spawner's request, if any.
local function finish(me, ...)
  inherited[me] = nil
  return ...
end

local function run_child(p, fn, ...)
  local me = co_running()
  inherited[me] = p
  return finish(me, fn(...))
end

-- spawn(spawner, fn, ...): spawner is cohost.spawn.
function M.spawn(spawner, fn, ...)
  local req, _, thread = current()
  if not req then return spawner(fn, ...) end
  return spawner(run_child, { thread = thread, req = req }, fn, ...)
end

-- get_phase() -> "content" in a request, "timer" elsewhere (cosockets
-- work everywhere in cohost, which is what code asking usually wants).
function M.get_phase()
  if current() then return "content" end
  return "timer"
end

-- -- Output -------------------------------------------------------------------

-- Flattens ngx.print's arguments: strings, numbers, booleans, nil,
-- ngx.null and (nested) arrays of them, as OpenResty does.
local function flatten(out, v)
  local t = type(v)
  if t == "string" then
    out[#out + 1] = v
  elseif t == "number" then
    out[#out + 1] = tostring(v)
  elseif t == "nil" then
    out[#out + 1] = "nil"
  elseif t == "boolean" then
    out[#out + 1] = v and "true" or "false"
  elseif v == null then
    out[#out + 1] = "null"
  elseif t == "table" then
    for i = 1, #v do flatten(out, v[i]) end
  else
    error("bad argument to 'ngx.print' (" .. t .. " not allowed)", 4)
  end
end

local function output(api, newline, ...)
  local _, res, st = need(api)
  if st.eof then return nil, "response already finished (ngx.eof)" end
  if not newline and select("#", ...) == 1 and type((...)) == "string" then
    res:write((...))   -- the usual ngx.print(body): no table to flatten into
    return 1
  end
  local out = {}
  for i = 1, select("#", ...) do flatten(out, (select(i, ...))) end
  if newline then out[#out + 1] = "\n" end
  res:write(concat(out))   -- raises a quiet "closed" if the client left
  return 1
end

function M.say(...) return output("ngx.say", true, ...) end
function M.print(...) return output("ngx.print", false, ...) end

-- flush([wait]): res:write sends at once, so there is nothing buffered.
function M.flush()
  need("ngx.flush")
  return 1
end

-- send_headers(): sends the head now. A 101 head is held back instead,
-- for ngx.req.socket(true) to write on the raw connection (res:hijack
-- takes only a connection whose response has not started).
function M.send_headers()
  local _, res, st = need("ngx.send_headers")
  if res:sent() or st.pending then return nil, "header already sent" end
  if res.status == 101 then
    st.pending = true
    return 1
  end
  res:write("")
  return 1
end

local function headers_sent()
  local _, res, st = need("ngx.headers_sent")
  return res:sent() or st.pending == true
end

-- eof(): ends the response; the handler may go on working.
function M.eof()
  local _, res, st = need("ngx.eof")
  if not st.eof then
    st.eof = true
    if not st.pending then res:send("") end
  end
  return 1
end

local REASONS = {
  [301] = "Moved Permanently", [302] = "Found", [303] = "See Other",
  [304] = "Not Modified", [307] = "Temporary Redirect", [308] = "Permanent Redirect",
  [400] = "Bad Request", [401] = "Unauthorized", [403] = "Forbidden",
  [404] = "Not Found", [405] = "Not Allowed", [406] = "Not Acceptable",
  [408] = "Request Time-out", [409] = "Conflict", [410] = "Gone",
  [413] = "Request Entity Too Large", [429] = "Too Many Requests",
  [500] = "Internal Server Error", [501] = "Not Implemented", [502] = "Bad Gateway",
  [503] = "Service Temporarily Unavailable", [504] = "Gateway Time-out",
}

-- nginx's built-in error page for status.
local function error_page(status)
  local title = status .. (REASONS[status] and " " .. REASONS[status] or "")
  return "<html>\r\n<head><title>" .. title .. "</title></head>\r\n<body>\r\n<center><h1>"
    .. title .. "</h1></center>\r\n<hr><center>cohost</center>\r\n</body>\r\n</html>\r\n"
end

-- Finishes whatever response res has, ignoring a client that left.
local function finish_response(res, st)
  if st.eof or st.pending then return end
  st.eof = true
  pcall(res.send, res, "")
end

-- exit(status): in a handler, answers status if nothing was sent yet
-- (with nginx's error page from 300 on; 444 closes without an answer),
-- else finishes the response; then ends the handler. Elsewhere it ends
-- the calling thread. It raises a quiet error, so a pcall around it
-- catches it (OpenResty's cannot be caught).
function M.exit(status)
  if type(status) ~= "number" then error("bad argument #1 to 'ngx.exit' (number expected)", 2) end
  local req, res = current()
  if req then
    local st = state(req)
    if status == 444 and not res:sent() and not st.pending then
      st.eof = true
      res:hijack():close()
    elseif status >= 200 and not res:sent() and not st.pending and not st.eof then
      st.eof = true
      res.status = status
      if status >= 300 and status ~= 304 then
        res:header("Content-Type", "text/html")
        res:send(error_page(status))
      else
        res:send("")
      end
    else
      finish_response(res, st)
    end
  end
  core.quiet_exit("ngx.exit(" .. status .. ")")
end

-- redirect(uri [, status]): 302 by default, then ends the handler.
function M.redirect(uri, status)
  local _, res, st = need("ngx.redirect")
  status = status or 302
  if res:sent() or st.pending then error("ngx.redirect: response already started", 2) end
  st.eof = true
  res.status = status
  res:header("Location", uri)
  res:header("Content-Type", "text/html")
  res:send(error_page(status))
  core.quiet_exit("ngx.redirect")
end

-- -- ngx.status, ngx.header -------------------------------------------------------

local function get_status()
  local _, res = need("ngx.status")
  return res.status
end

local function set_status(v)
  local _, res, st = need("ngx.status")
  if res:sent() or st.pending then
    sys.log(1, "attempt to set ngx.status after sending out response headers")
    return
  end
  res.status = tonumber(v) or error("ngx.status: number expected", 3)
end

-- Header names as ngx.header spells them: ngx.header.content_type is
-- Content-Type.
local function header_name(k)
  return (gsub(k, "_", "-"))
end

-- The headers nginx's header filter writes with its own spelling,
-- whatever case the handler used (ngx.header.content_type goes out as
-- Content-Type); the others go out as the handler spelled them.
local CANONICAL = {
  ["content-type"] = "Content-Type", ["content-length"] = "Content-Length",
  ["location"] = "Location", ["last-modified"] = "Last-Modified",
  ["server"] = "Server", ["date"] = "Date",
}

-- The name a key of ngx.header goes out as, and its lower-case form:
-- worked out once per key a program uses (a gsub and two lowers on every
-- set cost more than the rest of it), up to NAMES_MAX keys.
local NAMES_MAX = 512
local out_name, out_key, nnames = {}, {}, 0

local function names_of(k)
  local name = out_name[k]
  if name then return name, out_key[k] end
  name = header_name(k)
  name = CANONICAL[lower(name)] or name
  local key = lower(name)
  if nnames < NAMES_MAX and type(k) == "string" then
    out_name[k], out_key[k], nnames = name, key, nnames + 1
  end
  return name, key
end

M.header = setmetatable({}, {
  __index = function(_, k)
    local _, res, st = need("ngx.header")
    local _, name = names_of(k)
    local v = st.headers and st.headers[name]
    if v ~= nil then return v end
    return res:get_header(name)
  end,
  __newindex = function(_, k, v)
    local _, res, st = need("ngx.header")
    if res:sent() or st.pending then
      sys.log(1, "attempt to set ngx.header.", k, " after sending out response headers")
      return
    end
    local name, key = names_of(k)
    if type(v) == "number" then v = tostring(v) end
    if type(v) == "table" then
      local copy = {}
      for i = 1, #v do copy[i] = tostring(v[i]) end
      v = copy
      if #v == 0 then v = nil end
    end
    res:header(name, v)
    local hs = headers_of(st)
    if hs[key] == nil and v ~= nil then hs[#hs + 1] = name end
    hs[key] = v
  end,
})

-- -- ngx.req ----------------------------------------------------------------------

M.req = {}

-- A copy of the request headers whose lookups are case-insensitive and
-- take "_" for "-" (headers.content_type), as OpenResty's.
local header_mt = {
  __index = function(t, k)
    if type(k) ~= "string" then return nil end
    local norm = lower(header_name(k))
    if norm == k then return nil end
    return rawget(t, norm)
  end,
}

function M.req.get_headers(max)
  local req = need("ngx.req.get_headers")
  max = max or 100
  local t, n = setmetatable({}, header_mt), 0
  for k, v in pairs(req.headers) do
    if max > 0 and n >= max then return t, "truncated" end
    n = n + 1
    t[k] = v
  end
  return t
end

-- set_header(name, value) / clear_header(name): change the request
-- headers that ngx.req.get_headers, ngx.var.http_* and req.headers see.
function M.req.set_header(name, value)
  local req = need("ngx.req.set_header")
  if type(value) == "number" then value = tostring(value) end
  req.headers[lower(header_name(name))] = value
end

function M.req.clear_header(name)
  M.req.set_header(name, nil)
end

-- cur (nil, a value or an array) with value (one or an array) after it:
-- a string, or an array when there is more than one.
local function merged(cur, value, api)
  if value == nil then error(api .. ": bad 'value' argument: string, number or table expected", 3) end
  local list = {}
  if type(cur) == "table" then
    for i = 1, #cur do list[#list + 1] = cur[i] end
  elseif cur ~= nil then
    list[1] = cur
  end
  if type(value) == "table" then
    for i = 1, #value do list[#list + 1] = tostring(value[i]) end
  else
    list[#list + 1] = tostring(value)
  end
  return #list == 1 and list[1] or list
end

-- ngx.resp.add_header(key, value) and ngx.req.add_header(key, value)
-- (lua-resty-core's ngx.resp and ngx.req modules): one more value for a
-- response or request header, keeping those it has.
function M.add_resp_header(key, value)
  if type(key) ~= "string" then error("ngx.resp.add_header: bad 'key' argument: string expected", 2) end
  M.header[key] = merged(M.header[key], value, "ngx.resp.add_header")
end

function M.add_req_header(key, value)
  if type(key) ~= "string" then error("ngx.req.add_header: bad 'key' argument: string expected", 2) end
  local req = need("ngx.req.add_header")
  local name = lower(header_name(key))
  req.headers[name] = merged(req.headers[name], value, "ngx.req.add_header")
end

function M.req.get_method()
  return (need("ngx.req.get_method")).method
end

function M.req.http_version()
  return (need("ngx.req.http_version")).version
end

function M.req.is_internal()
  need("ngx.req.is_internal")
  return false
end

function M.req.get_uri_args(max)
  local req = need("ngx.req.get_uri_args")
  return util.decode_args(req.query_string, max)
end

-- Reads the body once into the request's state. A body over the
-- server's max_body_size ends the handler with 413, as nginx's
-- client_max_body_size; a client gone ends it quietly.
local function read_body(req, st)
  if st.body ~= nil then return end
  local body, err = req:body()
  if not body then
    if err == "too large" then M.exit(413) end
    core.quiet_exit("request body: " .. tostring(err))
  end
  st.body = body
end

function M.req.read_body()
  local req, _, st = need("ngx.req.read_body")
  read_body(req, st)
end

function M.req.discard_body()
  local req, _, st = need("ngx.req.discard_body")
  read_body(req, st)
end

-- get_body_data() -> the body read by read_body, nil if none or unread.
function M.req.get_body_data()
  local _, _, st = need("ngx.req.get_body_data")
  if st.body == nil or st.body == "" then return nil end
  return st.body
end

-- get_post_args([max]) -> the urlencoded body's arguments | nil, err.
function M.req.get_post_args(max)
  local _, _, st = need("ngx.req.get_post_args")
  if st.body == nil then return nil, "request body not read (call ngx.req.read_body first)" end
  return util.decode_args(st.body, max)
end

-- The body socket of ngx.req.socket(): receive(size | "*l" | "*a"),
-- receiveany(max), receiveuntil(pattern), settimeout(s) over req:read.
local BodySock = {}
BodySock.__index = BodySock

local function fill(self)
  if self.done then return false end
  local piece, err = self.req:read(65536)
  if not piece then
    if err then return nil, err end
    self.done = true
    return false
  end
  self.buf = self.buf .. piece
  return true
end

function BodySock:receive(pat)
  pat = pat or "*l"
  if type(pat) == "number" then
    while #self.buf < pat do
      local ok, err = fill(self)
      if not ok then
        local part = self.buf
        self.buf = ""
        return nil, err or "closed", part
      end
    end
    local data = self.buf:sub(1, pat)
    self.buf = self.buf:sub(pat + 1)
    return data
  elseif pat == "*a" or pat == "a" then
    while true do
      local ok, err = fill(self)
      if ok == nil then return nil, err, self.buf end
      if not ok then break end
    end
    local data = self.buf
    self.buf = ""
    return data
  elseif pat == "*l" or pat == "l" then
    while not self.buf:find("\n", 1, true) do
      local ok, err = fill(self)
      if not ok then
        local part = self.buf
        self.buf = ""
        return nil, err or "closed", part
      end
    end
    local line, rest = self.buf:match("^(.-)\r?\n(.*)$")
    self.buf = rest
    return line
  end
  error("bad pattern argument", 2)
end

function BodySock:receiveany(max)
  if self.buf == "" then
    local ok, err = fill(self)
    if not ok then return nil, err or "closed" end
  end
  local data = self.buf:sub(1, max)
  self.buf = self.buf:sub(max + 1)
  return data
end

-- receiveuntil(pattern [, opts]) -> iterator(size): the data before the
-- next pattern, then nil once the pattern is consumed.
function BodySock:receiveuntil(pattern, opts)
  local inclusive = opts and opts.inclusive
  return function(size)
    while true do
      local s, e = self.buf:find(pattern, 1, true)
      if s then
        local data = self.buf:sub(1, inclusive and e or s - 1)
        if size and #data > size then
          self.buf = self.buf:sub(size + 1)
          return data:sub(1, size)
        end
        self.buf = self.buf:sub(e + 1)
        return data
      end
      if size and #self.buf - #pattern >= size then
        local data = self.buf:sub(1, size)
        self.buf = self.buf:sub(size + 1)
        return data
      end
      local ok, err = fill(self)
      if not ok then
        local part = self.buf
        self.buf = ""
        return nil, err or "closed", part
      end
    end
  end
end

function BodySock:settimeout() end
function BodySock:settimeouts() end
function BodySock:close() return 1 end

-- Writes the held-back 101 head (and the headers set through ngx.header)
-- on a hijacked connection, with "Connection: upgrade" as nginx adds it.
local function write_pending(sock, st)
  local lines = { "HTTP/1.1 101 Switching Protocols\r\n" }
  local hs = headers_of(st)
  if hs.connection == nil then lines[2] = "Connection: upgrade\r\n" end
  for _, name in ipairs(hs) do
    local v = hs[lower(name)]
    if type(v) == "table" then
      for _, item in ipairs(v) do lines[#lines + 1] = name .. ": " .. item .. "\r\n" end
    elseif v ~= nil then
      lines[#lines + 1] = name .. ": " .. v .. "\r\n"
    end
  end
  lines[#lines + 1] = "\r\n"
  local ok, err = sock:send(lines)
  if not ok then return nil, err end
  st.pending = nil
  st.eof = true
  return true
end

-- socket([raw]) -> a socket | nil, err. Without raw: the request body as
-- a socket to read. With raw: the connection itself (res:hijack()), for
-- protocols that take it over; a 101 head held back by send_headers is
-- written on it first.
function M.req.socket(raw)
  local req, res, st = need("ngx.req.socket")
  if not raw then
    if st.body ~= nil or st.bodysock then return nil, "request body already exists" end
    st.bodysock = true
    return setmetatable({ req = req, buf = "" }, BodySock)
  end
  if res:sent() then return nil, "response already started: cannot take the raw socket" end
  local sock = res:hijack()
  if st.pending then
    local ok, err = write_pending(sock, st)
    if not ok then return nil, err end
  end
  st.eof = true
  return sock
end

-- -- ngx.var ----------------------------------------------------------------------

local function host_of(req)
  local host = req:header("host")
  if not host then return nil end
  host = lower(host)
  return host:match("^(%[.-%])") or host:match("^[^:]*")
end

-- The raw (still escaped) value of query argument name, as nginx's $arg_.
local function raw_arg(qs, name)
  name = lower(name)
  for item in qs:gmatch("[^&]+") do
    local k, v = item:match("^([^=]*)=?(.*)$")
    if lower(k) == name then return v end
  end
end

local function cookie(req, name)
  local c = req.headers.cookie
  if type(c) == "table" then c = concat(c, "; ") end
  if not c then return nil end
  for k, v in c:gmatch("([^=;%s]+)=([^;]*)") do
    if k == name then return v end
  end
end

local function peer_parts(req)
  local peer = req.peer or ""
  local ip, port = peer:match("^%[(.*)%]:(%d+)$")
  if not ip then ip, port = peer:match("^(.*):(%d+)$") end
  return ip, port
end

-- Connection serial numbers ($connection), per process: the C side names
-- a connection by its address, which a later connection may reuse, so a
-- first request (nothing served before it) always takes a new number.
local serials, next_serial = {}, 0

local function connection(req)
  local c, nreq = req:conninfo()
  if nreq == 0 or not serials[c] then
    next_serial = next_serial + 1
    serials[c] = next_serial
  end
  return tostring(serials[c])
end

-- $request_id: 16 random bytes in hex, fixed for the request.
local function request_id(req)
  local st = state(req)
  if not st.request_id then
    st.request_id = (gsub(crypto.random_bytes(16), ".", function(ch)
      return format("%02x", ch:byte())
    end))
  end
  return st.request_id
end

local function is_tls(req) return (select(3, req:conninfo())) end

-- install{server_name = ...}; else the request's host, as a server block
-- whose server_name matched it would say.
M.server_name = nil

local VARS = {
  uri = function(req) return req.path end,
  document_uri = function(req) return req.path end,
  request_uri = function(req) return req.target end,
  request = function(req)
    return format("%s %s %s", req.method, req.target, req.version == 1.0 and "HTTP/1.0" or "HTTP/1.1")
  end,
  args = function(req) local q = req.query_string; return q ~= "" and q or nil end,
  query_string = function(req) local q = req.query_string; return q ~= "" and q or nil end,
  is_args = function(req) return req.query_string ~= "" and "?" or "" end,
  request_method = function(req) return req.method end,
  scheme = function(req) return is_tls(req) and "https" or "http" end,
  https = function(req) return is_tls(req) and "on" or "" end,
  server_protocol = function(req) return req.version == 1.0 and "HTTP/1.0" or "HTTP/1.1" end,
  remote_addr = function(req) return (peer_parts(req)) end,
  binary_remote_addr = function(req) return (select(7, req:conninfo())) end,
  remote_port = function(req) return select(2, peer_parts(req)) end,
  host = function(req) return host_of(req) or "" end,
  http_host = function(req) return req:header("host") end,
  server_name = function(req) return M.server_name or host_of(req) or "" end,
  server_addr = function(req) return req["local"] and req["local"]:match("^%[?(.-)%]?:%d+$") or nil end,
  server_port = function(req)
    local l = req["local"]
    if l then return l:match(":(%d+)$") end
    local h = req:header("host")
    return h and h:match(":(%d+)$") or "80"
  end,
  content_type = function(req) return req:header("content-type") end,
  content_length = function(req) return req:header("content-length") end,
  request_body = function(req) local st = state(req); return st.body ~= "" and st.body or nil end,
  request_length = function(req) return format("%d", select(4, req:conninfo())) end,
  request_time = function(req) return format("%.3f", select(6, req:conninfo())) end,
  request_id = request_id,
  bytes_sent = function(req) return format("%d", select(5, req:conninfo())) end,
  body_bytes_sent = function(req) return format("%d", select(8, req:conninfo())) end,
  connection = connection,
  connection_requests = function(req) return tostring(select(2, req:conninfo()) + 1) end,
  status = function(_, res) return tostring(res.status) end,
  pid = function() return tostring(core.pid()) end,
  msec = function() return format("%.3f", util.now()) end,
  time_local = function() return os.date("%d/%b/%Y:%H:%M:%S %z") end,
  time_iso8601 = function() return os.date("%Y-%m-%dT%H:%M:%S%z"):gsub("(%d%d)$", ":%1") end,
  hostname = function()
    local f = io.open("/proc/sys/kernel/hostname")
    local name = f and f:read("*l")
    if f then f:close() end
    return name
  end,
}

-- Names ngx.var does not know, each logged once per worker at warn: nginx
-- refuses an unknown variable when it loads the config; nil at run time
-- would hide the typo.
local warned = {}

M.var = setmetatable({}, {
  __index = function(_, k)
    local req, res, st = need("ngx.var")
    if type(k) ~= "string" then return nil end
    if st.vars and st.vars[k] ~= nil then return st.vars[k] end
    local f = VARS[k]
    if f then return f(req, res) end
    local name = k:match("^http_(.+)$")
    if name then
      local v = req.headers[header_name(name)]
      if type(v) == "table" then v = concat(v, name == "cookie" and "; " or ", ") end
      return v
    end
    name = k:match("^arg_(.+)$")
    if name then return raw_arg(req.query_string, name) end
    name = k:match("^cookie_(.+)$")
    if name then return cookie(req, name) end
    if not warned[k] then
      warned[k] = true
      sys.log_raw(2, "ngx.var." .. k .. " is not a variable cohost knows (docs/ngx.md lists them): nil")
    end
    return nil
  end,
  -- Writes keep a per-request variable (nginx would need a "set"
  -- directive first), read back by later ngx.var lookups.
  __newindex = function(_, k, v)
    local _, _, st = need("ngx.var")
    st.vars = st.vars or {}
    if v ~= nil then v = tostring(v) end
    st.vars[k] = v
  end,
})

-- -- ngx.ctx ----------------------------------------------------------------------

-- Outside a request, ngx.ctx is per Lua thread (timers, threads of a
-- cohost.listen handler): pooled threads may hand a stale table on, so
-- code that needs a clean one sets ngx.ctx = {} first.
local thread_ctx = setmetatable({}, { __mode = "k" })

local function get_ctx()
  local req = current()
  if req then
    local st = state(req)
    st.ctx = st.ctx or {}
    return st.ctx
  end
  local me = co_running() or 0
  local t = thread_ctx[me]
  if not t then
    t = {}
    thread_ctx[me] = t
  end
  return t
end

local function set_ctx(v)
  if type(v) ~= "table" then error("ngx.ctx must be a table", 3) end
  local req = current()
  if req then
    state(req).ctx = v
  else
    thread_ctx[co_running() or 0] = v
  end
end

-- Dynamic fields of ngx: name -> getter, setter.
M.dynamic = {
  status = { get_status, set_status },
  headers_sent = { headers_sent, function() error("ngx.headers_sent is read-only", 3) end },
  ctx = { get_ctx, set_ctx },
}

return M
