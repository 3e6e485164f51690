-- Lua recursion through C must end as a Lua error in the handler that
-- recursed, never at the coroutine stack's guard (which ends the process
-- with status 86): docs/limits.md ("Recursion"), docs/stacks.md. LuaJIT
-- 2.1 counts no C-call depth, so cohost checks the C stack left where Lua
-- re-enters the VM from C (host/vm/ljvm.c, host/vm/cstack.c). One server
-- (build/cohost as a child, h.start, one worker, 127.0.0.1 port 0) serves
-- every path; each test recurses through one path, in a pcall and
-- without, and checks that the same process serves on.
local h = require "spec.helper"
h.cleanups(after_each)   -- h.tmpfile's; the server lives for the whole file
local q = h.shell_quote

-- Each route recurses through one path until an error stops it, and
-- answers the depth reached and the error; "/raw/..." recurses without a
-- pcall of its own, so the error ends the handler (a 500).
local SERVER = [[
local http = require "cohost.http"
local depth
local paths = {}
function paths.gsub()
  local function f() depth = depth + 1 return (("x"):gsub("x", f)) end
  return f()
end
function paths.sort()
  local function f() depth = depth + 1 table.sort({ 3, 2, 1 }, function(a, b) f() return a < b end) end
  return f()
end
-- __lt from table.sort (LuaJIT calls it from C) and __index from the
-- interpreter, each calling back into the other.
function paths.meta()
  local mt = {}
  mt.__lt = function(a, b) depth = depth + 1 return a.next < b end
  mt.__index = function(t, k) local l = { setmetatable({}, mt), setmetatable({}, mt) } table.sort(l) return l[1] end
  local a, b = setmetatable({}, mt), setmetatable({}, mt)
  return a < b
end
function paths.tostring()
  local mt = {}
  mt.__tostring = function() depth = depth + 1 return string.format("%s", setmetatable({}, mt)) end
  return tostring(setmetatable({}, mt))
end
function paths.pcall()
  local function f() depth = depth + 1 local ok, e = pcall(f) error(e, 0) end
  return f()
end
function paths.xpcall()
  local function f() depth = depth + 1 local ok, e = xpcall(f, function(e) return e end) error(e, 0) end
  return f()
end
function paths.load()
  local function f()
    depth = depth + 1
    local chunk, err = load(function() f() return nil end)
    error(err, 0)
  end
  return f()
end
-- A module whose body requires itself again (package.loaded cleared),
-- each level inside the last one's require.
function paths.require()
  package.preload.deep = function() depth = depth + 1 package.loaded.deep = nil return require "deep" end
  return require "deep"
end
function paths.coroutine()
  local function f() depth = depth + 1 return coroutine.wrap(f)() end
  return f()
end
-- cjson recurses in C, one level per nesting, bounded by its own depth
-- limits (1000 by default, "raised" to 10^7 here, where LuaJIT's limit
-- of 8000 slots on the Lua C API stack stops it first). depth is the
-- nesting asked for.
local cjson = require "cjson"
local raised = cjson.new()
raised.encode_max_depth(1e7)
raised.decode_max_depth(1e7)
local function nest(k) local t = {} for _ = 1, k do t = { t } end return t end
local DEEP = 100000
function paths.encode() depth = DEEP return cjson.encode(nest(DEEP)) end
function paths.encoderaised() depth = DEEP return raised.encode(nest(DEEP)) end
function paths.decode() depth = DEEP return cjson.decode(("["):rep(DEEP) .. ("]"):rep(DEEP)) end
function paths.decoderaised() depth = DEEP return raised.decode(("["):rep(DEEP) .. ("]"):rep(DEEP)) end
-- The same through the request: a client's deeply nested JSON body, read
-- with req:json() (cjson.safe under it).
local function decode_body(req, res)
  local v, err = req:json()
  res:send(("%s %s"):format(tostring(v ~= nil), tostring(err)))
end
-- A router whose middleware each call next() and go on after it (no
-- tail call: every level keeps its frames), 10^5 of them.
local deep_router = http.router { debug = true }
for _ = 1, DEEP do
  deep_router:use(function(req, res, nxt)
    depth = depth + 1
    nxt()
    return
  end)
end
deep_router:get("/router", function(req, res) res:send("reached") end)
listener = http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/router" then depth = 0 return deep_router(req, res) end
  if req.path == "/body" then return decode_body(req, res) end
  local raw, name = req.path:match("^/raw/(%a+)$"), req.path:match("(%a+)$")
  local f = paths[name]
  if not f then return res:send("ok") end
  depth = 0
  if raw then f() end
  local ok, err = pcall(f)
  res:send(("%d %s %s"):format(depth, tostring(ok), tostring(err):match("[^\n]*$")))
end, { debug = true })
]]

local p

setup(function()
  p = h.start("-w 1 " .. q(h.tmpfile(h.server_script(SERVER))), 120)
end)

teardown(function()
  if p then p.stop() end
end)

local function get(path)
  return h.get_to_close(p.port, path, { timeout = 30000 })
end

-- The path's depth and error, and that the worker serves on.
local function recurse(name)
  local status, body = get("/" .. name)
  assert.is_nil(p.exited(), h.slurp(p.err))
  assert.equal(200, status, body)
  local depth, ok, err = body:match("^(%d+) (%a+) (.*)$")
  assert.equal("false", ok, body)
  assert.same({ 200, "ok" }, { get("/") })
  return tonumber(depth), err
end

-- Without a pcall the handler fails with the error (a debug 500 shows it),
-- and the worker serves on.
local function recurse_raw(name, want)
  local status, body = get("/raw/" .. name)
  assert.is_nil(p.exited(), h.slurp(p.err))
  assert.equal(500, status)
  assert.matches(want, body)
  assert.same({ 200, "ok" }, { get("/") })
end

describe("Lua recursion through C", function()
  -- 30 levels ended the process ("coroutine 3 stack overflow", status 86).
  it("ends in a string.gsub callback with \"C stack overflow\", about 100 levels down", function()
    local depth, err = recurse("gsub")
    assert.equal("C stack overflow", err)
    assert.is_true(depth >= 80, depth)
    recurse_raw("gsub", "C stack overflow")
  end)

  it("ends in table.sort comparators with \"C stack overflow\"", function()
    local depth, err = recurse("sort")
    assert.equal("C stack overflow", err)
    assert.is_true(depth >= 1000, depth)
    recurse_raw("sort", "C stack overflow")
  end)

  it("ends in __lt and __index metamethods calling each other with an error", function()
    local depth, err = recurse("meta")
    assert.matches("stack overflow", err)
    assert.is_true(depth >= 100, depth)
    recurse_raw("meta", "stack overflow")
  end)

  it("ends in __tostring through string.format with \"C stack overflow\"", function()
    local depth, err = recurse("tostring")
    assert.equal("C stack overflow", err)
    assert.is_true(depth >= 1000, depth)
    recurse_raw("tostring", "C stack overflow")
  end)

  it("ends pcall recursion with LuaJIT's own \"stack overflow\"", function()
    local depth, err = recurse("pcall")
    assert.matches("stack overflow", err)
    assert.is_true(depth >= 1000, depth)
  end)

  it("ends xpcall recursion with LuaJIT's own \"stack overflow\"", function()
    local depth, err = recurse("xpcall")
    assert.matches("stack overflow", err)
    assert.is_true(depth >= 1000, depth)
  end)

  it("ends load recursion through its reader function with \"C stack overflow\"", function()
    local depth, err = recurse("load")
    assert.matches("C stack overflow", err)
    assert.is_true(depth >= 1000, depth)
    recurse_raw("load", "C stack overflow")
  end)

  it("ends require recursion with \"C stack overflow\"", function()
    local depth, err = recurse("require")
    assert.matches("C stack overflow", err)
    assert.is_true(depth >= 1000, depth)
    recurse_raw("require", "C stack overflow")
  end)

  it("ends coroutine.wrap recursion with \"C stack overflow\"", function()
    local depth, err = recurse("coroutine")
    assert.matches("C stack overflow", err)
    assert.is_true(depth >= 1000, depth)
    recurse_raw("coroutine", "C stack overflow")
  end)
end)

describe("deep JSON through cjson", function()
  it("ends deep tables in cjson.encode with its nesting error", function()
    local _, err = recurse("encode")
    assert.equal("Cannot serialise, excessive nesting (1001)", err)
    _, err = recurse("encoderaised")
    assert.matches("^Cannot serialise, excessive nesting %(%d+%)$", err)
  end)

  it("ends deep text in cjson.decode with its nesting error", function()
    local _, err = recurse("decode")
    assert.equal("Found too many nested data structures (1001) at character 1001", err)
    _, err = recurse("decoderaised")
    assert.matches("^Found too many nested data structures %(%d+%) at character %d+$", err)
  end)

  it("refuses a client's deeply nested JSON body with an error", function()
    local body = ('{"a":['):rep(50000) .. "1" .. ("]}"):rep(50000)
    local r = h.request(p.port, "POST", "/body", { ["Content-Type"] = "application/json" }, body)
    assert.is_nil(p.exited(), h.slurp(p.err))
    assert.equal(200, r.status)
    assert.matches("^false bad json: Found too many nested data structures %(1001%)", r.body)
    assert.same({ 200, "ok" }, { get("/") })
  end)
end)

describe("a deep cohost.http router middleware chain", function()
  it("ends with LuaJIT's \"stack overflow\" answered 500 by the router, and serves on", function()
    local status, body = get("/router")
    assert.is_nil(p.exited(), h.slurp(p.err))
    assert.equal(500, status)
    assert.matches("stack overflow", body)
    assert.same({ 200, "ok" }, { get("/") })
  end)
end)

-- Every path at each stack size, in both stack modes (issue 26): raw, the
-- handler fails with the error (500); under its pcall, the error is
-- caught. Either way the process serves on. At 64, 80 and 96 KiB the
-- uncaught ones ended the process at the guard (status 86): the task's
-- message handler and its log line took 16 KiB of stack more than the
-- quarter of the stack the check kept free.
local PATHS = { "gsub", "sort", "meta", "tostring", "pcall", "xpcall", "load", "require", "coroutine" }

local function every_path(size)
  local bad = {}
  -- ASan builds have no copy-stack mode (docs/sanitizers.md).
  local modes = os.getenv("ASAN_OPTIONS") and { "separate" } or { "separate", "copy" }
  for _, mode in ipairs(modes) do
    local small = h.start(("-w 1 --stack-size %s --stack-mode %s %s"):format(size, mode,
                          q(h.tmpfile(h.server_script(SERVER)))), 60)
    for _, name in ipairs(PATHS) do
      for _, raw in ipairs { true, false } do
        local path = (raw and "/raw/" or "/") .. name
        local status, body = h.get_to_close(small.port, path, { timeout = 30000 })
        local ended = small.exited()
        if ended then
          bad[#bad + 1] = ("%s %s: the process ended (%s): %s"):format(mode, path, ended,
                                                                      h.slurp(small.err):match("[^\n]*\n?$"))
          small.stop()
          small = h.start(("-w 1 --stack-size %s --stack-mode %s %s"):format(size, mode,
                          q(h.tmpfile(h.server_script(SERVER)))), 60)
        elseif raw and not (status == 500 and body:find("stack overflow", 1, true)) then
          bad[#bad + 1] = ("%s %s: %s %s"):format(mode, path, tostring(status), tostring(body))
        elseif not raw and not (status == 200 and body:match("^%d+ false .*stack overflow$")) then
          bad[#bad + 1] = ("%s %s: %s %s"):format(mode, path, tostring(status), tostring(body))
        end
      end
    end
    local status = h.get_to_close(small.port, "/")
    if status ~= 200 then bad[#bad + 1] = mode .. ": / answered " .. tostring(status) end
    small.stop()
  end
  assert.same({}, bad)
end

describe("every Lua recursion path on small stacks, separate and copy", function()
  it("ends as a Lua error on 48 KiB stacks, the smallest --stack-size", function() every_path("48K") end)
  it("ends as a Lua error on 64 KiB stacks", function() every_path("64K") end)
  it("ends as a Lua error on 80 KiB stacks", function() every_path("80K") end)
  it("ends as a Lua error on 96 KiB stacks", function() every_path("96K") end)
  it("ends as a Lua error on 112 KiB stacks", function() every_path("112K") end)
  it("ends as a Lua error on 1 MiB stacks (the default)", function() every_path("1M") end)

  it("refuses a --stack-size below 48K at start-up, naming the minimum", function()
    for _, size in ipairs { "16K", "47K", "0" } do
      local code, out, err = h.run(("--stack-size %s -e 'print(\"ran\")'"):format(size))
      assert.equal(2, code, err)
      assert.equal("", out)
      assert.equal(("cohost: --stack-size %s is too small: the minimum is 48K\n"):format(size), err)
    end
    local code, out = h.run("--stack-size 48K -e 'print(\"ran\")'")
    assert.equal(0, code)
    assert.equal("ran\n", out)
  end)
end)

describe("Lua recursion with a small --stack-size", function()
  it("still ends with \"C stack overflow\" on 64 KiB stacks", function()
    local small = h.start("-w 1 --stack-size 64K " .. q(h.tmpfile(h.server_script(SERVER))), 60)
    local status, body = h.get_to_close(small.port, "/gsub", { timeout = 30000 })
    local alive = small.exited() == nil
    small.stop()
    assert.is_true(alive)
    assert.equal(200, status)
    assert.matches("^%d+ false C stack overflow$", body)
  end)

  it("refuses a client's 1,000-deep JSON body on 64 KiB stacks instead of hitting the guard", function()
    -- cjson's own limit (1,000 levels, ~90 bytes each) does not fit in
    -- 64 KiB: req:json() bounds the depth by the stack left.
    local small = h.start("-w 1 --stack-size 64K " .. q(h.tmpfile(h.server_script(SERVER))), 60)
    local body = ("["):rep(1000) .. ("]"):rep(1000)
    local r = h.request(small.port, "POST", "/body", { ["Content-Type"] = "application/json" }, body)
    local ok = h.request(small.port, "POST", "/body", { ["Content-Type"] = "application/json" },
                         ("["):rep(100) .. ("]"):rep(100))
    local alive = small.exited() == nil
    small.stop()
    assert.is_true(alive)
    assert.equal(200, r.status)
    assert.matches("^false bad json: Found too many nested data structures", r.body)
    assert.equal(200, ok.status)
    assert.equal("true nil", ok.body)
  end)
end)
