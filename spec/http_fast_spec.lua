-- The HTTP server's per-request fast paths (docs/http.md, "Cost per
-- request") behave as the general ones: req is made by a Lua dispatcher
-- with plain fields, res.status defaults through res's metatable, and a
-- request line the fast path takes gets what http-parser would give.
-- Servers run in this process; peers are raw cosockets, for exact bytes.
local cohost = require "cohost"
local http = require "cohost.http"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- Sends raw bytes on a new connection; returns the status (a number) and
-- the body of the first response (none for a HEAD), or nil, err.
local function exchange(port, bytes)
  local s = h.dial(port, 3000)
  assert(s:send(bytes))
  local line, err = s:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.1 (%d%d%d) "))
  local len
  while true do
    local l = assert(s:receive("*l"))
    if l == "" then break end
    len = len or tonumber(l:match("^[Cc]ontent%-[Ll]ength: *(%d+)"))
  end
  if bytes:find("^HEAD ") then len = 0 end
  local body = len and len > 0 and assert(s:receive(len)) or ""
  return status, body
end

local function get(port, target, method)
  return exchange(port, (method or "GET") .. " " .. target .. " HTTP/1.1\r\nHost: x\r\n\r\n")
end

-- A server whose handler stores what it saw in seen (cleared per request)
-- and answers "ok".
local function recorder(fn)
  local seen = {}
  local port = h.http_serve(function(req, res)
    for k in pairs(seen) do seen[k] = nil end
    fn(seen, req, res)
    if not res:sent() then res:send("ok") end
  end)
  return port, seen
end

describe("req made by the dispatcher", function()
  it("has method, target, version, path and query_string as plain fields", function()
    local port, seen = recorder(function(seen, req)
      for _, k in ipairs { "method", "target", "version", "path", "query_string" } do
        seen[k] = rawget(req, k)
      end
      local keys = {}
      for k in pairs(req) do
        if type(k) == "string" then keys[#keys + 1] = k end
      end
      table.sort(keys)
      seen.keys = table.concat(keys, " ")
    end)
    assert.equal(200, get(port, "/a/b?x=1"))
    assert.equal("GET", seen.method)
    assert.equal("/a/b?x=1", seen.target)
    assert.equal(1.1, seen.version)
    assert.equal("/a/b", seen.path)
    assert.equal("x=1", seen.query_string)
    assert.equal("method path query_string target version", seen.keys)
  end)

  it("makes path the target itself, and query_string empty, for a plain target", function()
    local port, seen = recorder(function(seen, req)
      seen.path, seen.qs, seen.target = req.path, req.query_string, req.target
    end)
    assert.equal(200, get(port, "/plain/path"))
    assert.equal("/plain/path", seen.path)
    assert.equal("/plain/path", seen.target)
    assert.equal("", seen.qs)
  end)

  it("decodes the path and removes dot segments, keeping the raw target", function()
    local port, seen = recorder(function(seen, req)
      seen.path, seen.target, seen.a = req.path, req.target, req.query.a
    end)
    assert.equal(200, get(port, "/x/%41b/./c/../d%20e?a=1%202"))
    assert.equal("/x/Ab/d e", seen.path)
    assert.equal("/x/%41b/./c/../d%20e?a=1%202", seen.target)
    assert.equal("1 2", seen.a)
  end)

  it("takes the path of an absolute-form target and * for OPTIONS *", function()
    local port, seen = recorder(function(seen, req) seen.path = req.path end)
    assert.equal(200, get(port, "http://example.com/abs?q=1"))
    assert.equal("/abs", seen.path)
    assert.equal(200, get(port, "*", "OPTIONS"))
    assert.equal("*", seen.path)
  end)

  it("keeps req's fields readable after the handler returned", function()
    local kept
    local port = h.http_serve(function(req, res)
      kept = req
      res:send("ok")
    end)
    assert.equal(200, get(port, "/later?z=9"))
    assert.equal("GET", kept.method)
    assert.equal("/later", kept.path)
    assert.equal("z=9", kept.query_string)
    assert.has_error(function() kept:body() end,
      "request is finished (req and res work only while its handler runs)")
  end)

  it("lets the handler add fields and methods to req", function()
    http.Request.fast_spec_hello = function(self) return "hi " .. self.path end
    defer(function() http.Request.fast_spec_hello = nil end)
    local port, seen = recorder(function(seen, req)
      req.user = "ann"
      seen.user, seen.hello = req.user, req:fast_spec_hello()
    end)
    assert.equal(200, get(port, "/p"))
    assert.equal("ann", seen.user)
    assert.equal("hi /p", seen.hello)
  end)

  it("gives a handler error's level 2 to the server, as when C called it", function()
    local port = h.http_serve(function() error("boom", 2) end, { debug = true })
    local status, body = get(port, "/")
    assert.equal(500, status)
    assert.matches("boom", body)
    assert.not_matches("cohost.core.http", body:match("^[^\n]*\n([^\n]*)") or "")
  end)
end)

describe("res.status", function()
  it("reads 200 from res's metatable until the handler sets it", function()
    local port, seen = recorder(function(seen, _, res)
      seen.before, seen.raw = res.status, rawget(res, "status")
      res.status = 201
      seen.after, seen.raw_after = res.status, rawget(res, "status")
    end)
    assert.equal(201, get(port, "/"))
    assert.equal(200, seen.before)
    assert.is_nil(seen.raw)
    assert.equal(201, seen.after)
    assert.equal(201, seen.raw_after)
  end)

  it("answers 200 when the handler sets nothing, and the status it set otherwise", function()
    local port = h.http_serve(function(req, res)
      if req.path == "/teapot" then res.status = 418 end
    end)
    assert.equal(200, get(port, "/"))
    assert.equal(418, get(port, "/teapot"))
  end)

  it("falls back to 200 when set to nil", function()
    local port = h.http_serve(function(_, res)
      res.status = 404
      res.status = nil
      res:send("x")
    end)
    assert.equal(200, get(port, "/"))
  end)

  it("still refuses a status out of range", function()
    local port = h.http_serve(function(_, res)
      res.status = 42
      res:send("x")
    end)
    assert.equal(500, get(port, "/"))
  end)

  it("does not hide the methods behind the default", function()
    local port, seen = recorder(function(seen, _, res)
      seen.send, seen.header = type(res.send), type(res.header)
    end)
    assert.equal(200, get(port, "/"))
    assert.equal("function", seen.send)
    assert.equal("function", seen.header)
  end)
end)

describe("the request line", function()
  -- Each line goes through the fast path or http-parser; the verdicts are
  -- those http-parser gives alone.
  local port
  before_each(function()
    port = h.http_serve(function(req, res) res:send(req.method .. " " .. req.target) end)
  end)

  local function line(l)
    return exchange(port, l .. "\r\nHost: x\r\n\r\n")
  end

  it("serves the methods of the fast path", function()
    for _, m in ipairs { "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH" } do
      local status, body = line(m .. " /m HTTP/1.1")
      assert.equal(200, status, m)
      if m ~= "HEAD" then assert.equal(m .. " /m", body) end
    end
  end)

  it("serves methods http-parser knows beyond them", function()
    for _, m in ipairs { "PROPFIND", "MKCOL", "PURGE", "SEARCH" } do
      local status, body = line(m .. " /m HTTP/1.1")
      assert.equal(200, status, m)
      assert.equal(m .. " /m", body)
    end
  end)

  it("refuses methods http-parser does not know, and lower case", function()
    assert.equal(400, line("get / HTTP/1.1"))
    assert.equal(400, line("FETCH / HTTP/1.1"))
    assert.equal(400, line("GETS / HTTP/1.1"))
  end)

  it("takes every visible byte in a target, and a fragment the slow way", function()
    local t = "/!\"$&'()*+,-.:;<=>@[\\]^_`{|}~?a=/?b"
    local status, body = line("GET " .. t .. " HTTP/1.1")
    assert.equal(200, status)
    assert.equal("GET " .. t, body)
    status, body = line("GET /f#frag HTTP/1.1")
    assert.equal(200, status)
    assert.equal("GET /f#frag", body)
  end)

  it("keeps HTTP/1.0 and 1.1 apart", function()
    local port2, seen = recorder(function(seen, req) seen.version = req.version end)
    assert.equal(200, exchange(port2, "GET / HTTP/1.0\r\n\r\n"))
    assert.equal(1.0, seen.version)
    assert.equal(200, get(port2, "/"))
    assert.equal(1.1, seen.version)
  end)
end)
