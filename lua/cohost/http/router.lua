-- cohost.http.router: routes (req, res) to handlers by method and path.
--
--   local r = router.new()
--   r:use(function(req, res, next) ... next() end)
--   r:get("/users/:id", function(req, res) res:json { id = req.params.id } end)
--   r:static("/assets", "public")
--   http.listen("*:8080", r)
--
-- Patterns are compiled into a tree of path segments: literal segments
-- first, then a `:param` (one non-empty segment), then a trailing `*splat`
-- (the rest of the path), with backtracking, so the most specific route
-- wins whatever the order of registration (a plain descent finds it
-- unless a deeper segment fails). Patterns with no parameter are also
-- kept in a hash for an exact lookup, so the common case costs one table
-- lookup. See docs/http-router.md.
local cohost = require "cohost"
local log_at = require("cohost.core.sys").log_at
local MY_SRC = debug.getinfo(1, "S").short_src   -- this file, as tracebacks name it
local static = require "cohost.http.static"
local route_id = require("cohost.core.http").route_id

local M = {}

local Router = {}
Router.__index = Router

local byte, sub, find, concat = string.byte, string.sub, string.find, table.concat
local debug_traceback = debug.traceback

-- The segments of "/", which a mounted router sees for its bare prefix.
local ROOT = { "" }

local METHODS = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS" }

-- -- Paths --------------------------------------------------------------------

local function unhex(h) return string.char(tonumber(h, 16)) end

-- Percent-decodes one segment ("+" stays: it means a space only in
-- queries).
local function decode(s)
  if not find(s, "%", 1, true) then return s end
  return (s:gsub("%%(%x%x)", unhex))
end
M.decode = decode

-- Splits "/a/b/" into { "a", "b", "" }; "/" gives { "" }.
local function split(path, out)
  local n, pos = 0, 2
  while true do
    local slash = find(path, "/", pos, true)
    n = n + 1
    if not slash then
      out[n] = sub(path, pos)
      return n
    end
    out[n] = sub(path, pos, slash - 1)
    pos = slash + 1
  end
end

-- The request's path segments, each percent-decoded, when its target has
-- escapes in the path: those segments come from the raw target, so
-- "/files/a%2Fb" gives the one segment "a/b"; but only when they spell
-- req.path, which the server decoded and normalized: otherwise
-- ("/a/..%2fb", "/a/%2e%2e/b") the segments of req.path count. Returns
-- false when req.path alone will do (route splits it only if needed).
local function segments(req)
  local target = req.target
  if not target then return false end
  local q = find(target, "?", 1, true)
  local pct = find(target, "%", 1, true)
  if not pct or (q and pct > q) or byte(target, 1) ~= 47 then return false end   -- 47: "/"
  local segs = {}
  local n = split(q and sub(target, 1, q - 1) or target, segs)
  for i = 1, n do segs[i] = decode(segs[i]) end
  if "/" .. concat(segs, "/", 1, n) ~= req.path then return false end
  segs.raw = true
  return segs, n
end

-- -- Patterns -----------------------------------------------------------------

-- A tree node: lit (segment -> node), param (node), splat (node), and at
-- the end of a pattern, routes (method or "*" -> route). A route is
-- { fn =, names = { param names in order }, mount = subrouter or nil,
-- route = its pattern, id = route_id(pattern), under = { mount prefix ->
-- { prefix .. pattern, its id } } }; a mount's prefix is its pattern
-- without the "/*" or trailing "/".
local function node() return {} end

-- Compiles "/users/:id/*rest" into its segments; raises on a bad pattern.
local function compile(pattern)
  if type(pattern) ~= "string" or byte(pattern, 1) ~= 47 then
    error("router: a pattern is a string starting with '/': " .. tostring(pattern), 3)
  end
  local segs = {}
  local n = split(pattern, segs)
  local parts, names = {}, {}
  for i = 1, n do
    local s = segs[i]
    local c = byte(s, 1)
    if c == 58 then                          -- ":name"
      local name = sub(s, 2)
      if not name:find("^[%w_]+$") then error("router: bad parameter in " .. pattern, 3) end
      parts[i] = { kind = "param" }
      names[#names + 1] = name
    elseif c == 42 then                      -- "*name" or "*", last only
      if i ~= n then error("router: a splat must end the pattern: " .. pattern, 3) end
      local name = sub(s, 2)
      if name == "" then name = "*"
      elseif not name:find("^[%w_]+$") then error("router: bad splat in " .. pattern, 3) end
      parts[i] = { kind = "splat" }
      names[#names + 1] = name
    else
      parts[i] = { kind = "lit", value = s }
    end
  end
  return parts, names
end

-- The node at the end of a compiled pattern, created as needed.
local function insert(root, parts)
  local nd = root
  for _, p in ipairs(parts) do
    if p.kind == "lit" then
      nd.lit = nd.lit or {}
      nd.lit[p.value] = nd.lit[p.value] or node()
      nd = nd.lit[p.value]
    else
      nd[p.kind] = nd[p.kind] or node()
      nd = nd[p.kind]
    end
  end
  nd.routes = nd.routes or {}
  return nd
end

-- The route for method in a node's routes: the method's own, GET's for
-- HEAD, else an `any` route.
local function pick(routes, method)
  if not routes then return nil end
  local rt = routes[method]
  if rt then return rt end
  if method == "HEAD" then rt = routes.GET; if rt then return rt end end
  return routes["*"]
end

-- Depth-first search for a route matching segs[i..n] and method; caps
-- gathers the parameter values in order. Returns the route and, when it
-- ends in a splat, the index of the splat's first segment.
local function search(nd, segs, i, n, method, caps)
  if i > n then return pick(nd.routes, method) end
  local s = segs[i]
  local child = nd.lit and nd.lit[s]
  if child then
    local rt, at = search(child, segs, i + 1, n, method, caps)
    if rt then return rt, at end
  end
  child = nd.param
  if child and s ~= "" then
    local k = #caps + 1
    caps[k] = s
    local rt, at = search(child, segs, i + 1, n, method, caps)
    if rt then return rt, at end
    caps[k] = nil
  end
  child = nd.splat
  if child then
    local rt = pick(child.routes, method)
    if rt then
      caps[#caps + 1] = i == n and s or concat(segs, "/", i, n)
      return rt, i
    end
  end
end

-- The search's first path, as a loop: at each segment the literal child,
-- else the parameter, else the splat. When it ends in a route that is the
-- search's answer; when it fails the search runs (backtracking is rare).
local function descend(nd, segs, i, n, method, caps)
  local nc = 0
  while i <= n do
    local s = segs[i]
    local lit = nd.lit
    local child = lit and lit[s]
    if child then
      nd = child
    elseif nd.param and s ~= "" then
      nc = nc + 1
      caps[nc] = s
      nd = nd.param
    else
      child = nd.splat
      if not child then return nil end
      local rt = pick(child.routes, method)
      if not rt then return nil end
      caps[nc + 1] = i == n and s or concat(segs, "/", i, n)
      return rt, i
    end
    i = i + 1
  end
  return pick(nd.routes, method)
end

-- Adds to allow every method some route matching segs[i..n] takes.
local function methods(nd, segs, i, n, allow)
  if i > n then
    for m in pairs(nd.routes or {}) do allow[m] = true end
    return
  end
  local s = segs[i]
  if nd.lit and nd.lit[s] then methods(nd.lit[s], segs, i + 1, n, allow) end
  if nd.param and s ~= "" then methods(nd.param, segs, i + 1, n, allow) end
  if nd.splat then for m in pairs(nd.splat.routes or {}) do allow[m] = true end end
end

-- -- Answers ------------------------------------------------------------------

-- True when the client would rather read JSON (its Accept names JSON, or
-- it sent JSON).
local function wants_json(req)
  local accept = req.header and req:header("accept") or ""
  if find(accept, "json", 1, true) then return true end
  local ct = req.header and req:header("content-type") or ""
  return find(ct, "json", 1, true) ~= nil
end

-- Ends the response with status and a short message, as JSON
-- ({"error": msg}) or text, whichever the client prefers.
local function answer(req, res, status, msg)
  res.status = status
  if wants_json(req) then
    res:json({ error = msg }, status)
  else
    res:header("Content-Type", "text/plain; charset=utf-8")
    res:send(msg .. "\n")
  end
end
M.answer = answer

-- The Allow header for a set of methods: the standard ones in their usual
-- order (HEAD wherever GET is, OPTIONS always), then others by name; and
-- that list as an array.
local function allow_header(allow)
  if allow.GET then allow.HEAD = true end
  allow.OPTIONS = true
  local list, others = {}, {}
  for _, m in ipairs(METHODS) do
    if allow[m] then list[#list + 1] = m; allow[m] = nil end
  end
  for m in pairs(allow) do others[#others + 1] = m end
  table.sort(others)
  for _, m in ipairs(others) do list[#list + 1] = m end
  return concat(list, ", "), list
end

-- The default error handler: 500, and the traceback only in debug.
local function default_on_error(_, req, res, trace, debug)
  answer(req, res, 500, debug and trace or "internal server error")
end

-- -- Dispatch -----------------------------------------------------------------

-- Sets req.route to rt's pattern, behind the prefixes of the routers it is
-- mounted under (outer, or nil at the top), and res[1] to its id, which
-- the server reads for the metrics' route label (lib_http.c's
-- run_handler): an int in a slot res already has, so the label costs no
-- string, no table and no C call per request. A mounted route's full
-- pattern is made once per prefix.
local function matched(req, res, rt, outer)
  if not outer then
    req.route = rt.route
    res[1] = rt.id
    return
  end
  local u = rt.under[outer]
  if not u then
    local full = outer .. rt.route
    u = { full, route_id(full) }
    rt.under[outer] = u
  end
  req.route = u[1]
  res[1] = u[2]
end

-- Routes a request whose path segments from index i on belong to this
-- router (a mounted router sees only what follows its prefix, and outer
-- is the prefixes it is mounted under).
-- segs is false for a top-level request whose target has no escapes: its
-- segments are split from req.path only if the exact lookup misses.
local function route(self, req, res, segs, i, n, outer)
  local method = req.method
  local rt, at, caps
  -- Exact lookup first: patterns without parameters are in a hash. Raw
  -- segments may hold a decoded "/", which only the tree tells apart.
  local key
  if not segs then key = req.path
  elseif not segs.raw then key = "/" .. concat(segs, "/", i, n) end
  local exact = key and self.exact[key]
  if exact then rt = pick(exact, method) end
  if rt then
    req.params = {}
    if rt.mount then return rt.mount:_dispatch(req, res, ROOT, 1, 1, (outer or "") .. rt.prefix) end
    matched(req, res, rt, outer)
    return rt.fn(req, res)
  end
  if not segs then
    segs = {}
    n = split(req.path, segs)
  end
  caps = {}
  rt, at = descend(self.root, segs, i, n, method, caps)
  if not rt then
    caps = {}
    rt, at = search(self.root, segs, i, n, method, caps)
  end
  if not rt then
    local allow = {}
    methods(self.root, segs, i, n, allow)
    if next(allow) == nil then
      return self.not_found(req, res)
    end
    local header, list = allow_header(allow)
    res:header("Allow", header)
    if method == "OPTIONS" then
      res.status = 204
      return res:send()
    end
    return self.not_allowed(req, res, list)
  end
  local params = {}
  local names = rt.names
  for k = 1, #names do params[names[k]] = caps[k] end
  req.params = params
  if rt.mount then
    local prefix = (outer or "") .. rt.prefix
    if at then return rt.mount:_dispatch(req, res, segs, at, n, prefix) end
    return rt.mount:_dispatch(req, res, ROOT, 1, 1, prefix)
  end
  matched(req, res, rt, outer)
  return rt.fn(req, res)
end

-- Runs the middleware matching the path in order, then the route. next()
-- does nothing once the response has started or when called again.
local function chain(self, req, res, segs, i, n, outer)
  local mw = self.middleware
  local count = #mw
  local path = segs and "/" .. concat(segs, "/", i, n) or req.path
  local k = 0
  local function step()
    while true do
      k = k + 1
      if res:sent() then return end
      if k > count then return route(self, req, res, segs, i, n, outer) end
      local m = mw[k]
      local p = m.prefix
      if not p or path == p or sub(path, 1, #p + 1) == p .. "/" or p == "/" then
        local called = false
        return m.fn(req, res, function()
          if called then return end
          called = true
          return step()
        end)
      end
    end
  end
  return step()
end

-- Dispatches the segments i..n of a request (all of them at the top;
-- what follows the prefix in a mounted router). Kept free of closures, so
-- it compiles when there is no middleware.
function Router:_dispatch(req, res, segs, i, n, outer)
  if self.middleware[1] then return chain(self, req, res, segs, i, n, outer) end
  return route(self, req, res, segs, i, n, outer)
end

-- An error value that must reach the server unchanged: the server's quiet
-- errors (the client went away: "closed", "timeout", raised as a table
-- with the registry's "cohost.quiet_error" metatable) and cancellation
-- (cohost.kill) are not handler bugs.
local registry = debug.getregistry()
local function passthrough(err)
  if err == "cancelled" then return true end
  local mt = type(err) == "table" and getmetatable(err)
  return mt and mt == registry["cohost.quiet_error"] or false
end

-- xpcall's message handler: wraps a handler error with its traceback
-- (taken where it was raised); passes the others on unchanged.
local Traced = {}
local getinfo = debug.getinfo
local function traced(e)
  if passthrough(e) then return e end
  -- Where it was raised: the first Lua frame below error() that is not
  -- this file (a handler, a middleware), for the log line's location.
  local where, line = "?", 0
  for level = 2, 40 do
    local info = getinfo(level, "Sl")
    if not info then break end
    if info.what ~= "C" and info.short_src ~= MY_SRC then
      where, line = info.short_src, info.currentline
      break
    end
  end
  return setmetatable({ e, debug_traceback(tostring(e), 2), where, line }, Traced)
end

-- Handles one request: dispatch under xpcall; a handler error is logged
-- with its traceback and answered by the error handler (500 by default)
-- when no response has started. Once one has, the error is raised again so
-- the server closes the connection rather than end a truncated response.
function Router:_handle(req, res, debug)
  local segs, n = segments(req)
  local ok, err = xpcall(self._dispatch, traced, self, req, res, segs, 1, n)
  if ok then return end
  if getmetatable(err) ~= Traced then error(err, 0) end
  local trace, where, line
  err, trace, where, line = err[1], err[2], err[3], err[4]
  if res:sent() then error(trace, 0) end
  log_at(cohost.ERR, where, line, "http: ", req.method, " ", req.path, ": ", trace)
  debug = debug or self.debug
  local ok2, err2 = xpcall(self.error_handler, debug_traceback, err, req, res, trace, debug)
  if not ok2 then
    cohost.log(cohost.ERR, "http: the error handler failed: ", err2)
    if not res:sent() then default_on_error(err, req, res, trace, debug) end
  end
end

-- -- API ----------------------------------------------------------------------

-- new([opts]) -> router. opts.debug: 500 bodies carry the traceback.
function M.new(opts)
  local self = setmetatable({
    root = node(),
    exact = {},        -- pattern without parameters -> routes
    middleware = {},   -- { prefix =, fn = } in order
    debug = opts and opts.debug or false,
  }, Router)
  self.error_handler = default_on_error
  self.not_found = function(req, res) answer(req, res, 404, "not found") end
  self.not_allowed = function(req, res) answer(req, res, 405, "method not allowed") end
  return self
end

-- add(method, pattern, fn): method "*" for any. Returns the router.
function Router:add(method, pattern, fn, mount)
  if not mount and type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    error("router: a handler is a function", 2)
  end
  local parts, names = compile(pattern)
  local nd = insert(self.root, parts)
  local rt = { fn = fn, names = names, mount = mount, route = pattern, under = {} }
  if mount then
    rt.prefix = pattern:gsub("/%*$", ""):gsub("/$", "")   -- "/api/*" -> "/api", "/*" -> ""
  else
    rt.id = route_id(pattern)
  end
  nd.routes[method] = rt
  if #names == 0 then self.exact[pattern] = nd.routes end
  return self
end

for _, m in ipairs(METHODS) do
  Router[m:lower()] = function(self, pattern, fn) return self:add(m, pattern, fn) end
end

function Router:any(pattern, fn) return self:add("*", pattern, fn) end

-- use([prefix,] fn): fn(req, res, next) runs before the route for every
-- request (under prefix when given), in the order of the use calls.
function Router:use(prefix, fn)
  if fn == nil then prefix, fn = nil, prefix end
  if prefix ~= nil and (type(prefix) ~= "string" or byte(prefix, 1) ~= 47) then
    error("router: a middleware prefix is a path starting with '/'", 2)
  end
  if type(fn) ~= "function" then error("router: middleware is a function", 2) end
  if prefix and #prefix > 1 and sub(prefix, -1) == "/" then prefix = sub(prefix, 1, -2) end
  self.middleware[#self.middleware + 1] = { prefix = prefix, fn = fn }
  return self
end

-- Joins a prefix and a pattern tail ("/" prefix adds nothing).
local function under(prefix, tail)
  if sub(prefix, -1) == "/" then prefix = sub(prefix, 1, -2) end
  return prefix .. tail
end

-- static(prefix, dir [, opts]): files under dir at prefix (see
-- cohost.http.static). "/prefix" itself redirects to "/prefix/". A method
-- files do not take gets the router's 405, as a route's would.
function Router:static(prefix, dir, opts)
  local serve = static.new(dir, opts)
  local function files(req, res, rel)
    local m = req.method
    if m ~= "GET" and m ~= "HEAD" and m ~= "OPTIONS" then
      res:header("Allow", "GET, HEAD, OPTIONS")
      return self.not_allowed(req, res, { "GET", "HEAD", "OPTIONS" })
    end
    return serve(req, res, rel)
  end
  if prefix ~= "/" then
    self:any(under(prefix, ""), function(req, res) return files(req, res, "") end)
  end
  self:any(under(prefix, "/*"), function(req, res)
    return files(req, res, "/" .. req.params["*"])
  end)
  return self
end

-- mount(prefix, subrouter): the subrouter routes what follows prefix, with
-- its own middleware, 404 and 405.
function Router:mount(prefix, sub_router)
  if getmetatable(sub_router) ~= Router then error("router: mount takes a router", 2) end
  if prefix ~= "/" then self:add("*", under(prefix, ""), nil, sub_router) end
  self:add("*", under(prefix, "/*"), nil, sub_router)
  return self
end

-- on_error(fn): fn(err, req, res, traceback, debug) answers a handler
-- error; it runs only when no response has started. Returns the router.
function Router:on_error(fn)
  self.error_handler = fn
  return self
end

-- on_not_found(fn): fn(req, res) answers when no route matches the path.
function Router:on_not_found(fn)
  self.not_found = fn
  return self
end

-- on_method_not_allowed(fn): fn(req, res, methods) answers when routes
-- match the path but none takes the method (not OPTIONS, which gets 204);
-- methods is the Allow header, already set, as an array.
function Router:on_method_not_allowed(fn)
  if type(fn) ~= "function" then error("router: on_method_not_allowed takes a function", 2) end
  self.not_allowed = fn
  return self
end

-- handler([opts]) -> function(req, res) for http.listen; opts.debug (the
-- listener's) puts tracebacks in 500 bodies as the router's own does.
function Router:handler(opts)
  local debug = opts and opts.debug or false
  return function(req, res) return self:_handle(req, res, debug) end
end

function Router:__call(req, res) return self:_handle(req, res) end

M.Router = Router

return M
