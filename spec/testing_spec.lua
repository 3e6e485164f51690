-- Testing a user's app (cohost.testing, docs/testing-apps.md): `cohost
-- --test` and `busted --lua=cohost` in a throwaway project directory of
-- its own (an app module, its spec in docs/testing-apps.md's template,
-- and a spec that leaves a listener and a task running), each bounded by
-- timeout(1): a run that hangs after busted is done shows as status 124.
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

local p = assert(io.popen("pwd"))
local COHOST = (h.COHOST:sub(1, 1) == "/" and "" or p:read("*l") .. "/") .. h.COHOST
p:close()
local LUA_DIR = COHOST:gsub("build/cohost$", "lua")

-- The app under test: a module that starts its server on an address and
-- returns the listener (the shape docs/testing-apps.md recommends).
local APP = [[
local http = require "cohost.http"
local M = {}
function M.start(addr)
  return assert(http.listen(addr, function(req, res)
    res:send("hello " .. (req.query.name or "world") .. "\n")
  end))
end
return M
]]

-- docs/testing-apps.md's template, as written there.
local APP_SPEC = [[
local http = require "cohost.http"
local app = require "app"

describe("app", function()
  local server, base
  setup(function()
    server = app.start("127.0.0.1:0")
    local _, port = server:addr()
    base = "http://127.0.0.1:" .. port
  end)
  teardown(function() server:close() end)

  it("greets by name", function()
    local res = assert(http.request(base .. "/?name=ann"))
    assert.equal(200, res.status)
    assert.equal("hello ann\n", res.body)
  end)
end)
]]

-- A spec that forgets its listener and leaves a task sleeping: the run
-- must still end when busted is done.
local LEAKY_SPEC = [[
local cohost = require "cohost"
describe("leaky", function()
  it("leaves a listener and a task behind", function()
    assert(cohost.listen("127.0.0.1:0", function(c) c:close() end))
    cohost.spawn(function() cohost.sleep(3600) end)
    assert.equal(%s, 1)
  end)
end)
]]

-- A project directory holding files (name -> content), removed after the
-- test.
local function project(files)
  local dir = h.tmpdir()
  defer(function() h.must("rm -rf " .. q(dir)) end)
  h.must("mkdir -p " .. q(dir .. "/spec") .. " " .. q(dir .. "/tests"))
  for name, content in pairs(files) do h.write_file(dir .. "/" .. name, content) end
  return dir
end

-- Runs cmd in dir with 20 s at most; returns status, stdout, stderr.
local function run_in(dir, cmd)
  return h.sh(("cd %s && timeout 20 %s"):format(q(dir), cmd), 30)
end

local function passing_project()
  return project {
    ["app.lua"] = APP,
    ["spec/app_spec.lua"] = APP_SPEC,
    ["spec/leaky_spec.lua"] = LEAKY_SPEC:format("1"),
  }
end

describe("cohost --test", function()
  it("runs ./spec and exits 0 once busted is done, though a listener and a task remain", function()
    local dir = passing_project()
    local code, out, err = run_in(dir, q(COHOST) .. " --test -o plainTerminal")
    assert.equal(0, code, out .. err)
    assert.matches("2 successes / 0 failures / 0 errors", out)
  end)

  it("exits 1 on a failing spec, without a nil error object logged", function()
    local dir = project {
      ["app.lua"] = APP,
      ["spec/app_spec.lua"] = APP_SPEC,
      ["spec/leaky_spec.lua"] = LEAKY_SPEC:format("2"),
    }
    local code, out, err = run_in(dir, q(COHOST) .. " --test -o plainTerminal")
    assert.equal(1, code, out .. err)
    assert.matches("1 success / 1 failure / 0 errors", out)
    assert.matches("leaky leaves a listener and a task behind", out, 1, true)
    assert.not_matches("error object", err)
    assert.not_matches("main error", err)
  end)

  it("passes busted's options and paths through and honours a .busted file", function()
    local dir = project {
      ["app.lua"] = APP,
      ["tests/app_test.lua"] = APP_SPEC,
      [".busted"] = 'return { default = { ROOT = { "tests" }, pattern = "_test" } }\n',
    }
    local code, out, err = run_in(dir, q(COHOST) .. " --test -o TAP")
    assert.equal(0, code, out .. err)
    assert.matches("ok 1 %- app greets by name", out)
    code, out, err = run_in(dir, q(COHOST) .. " --test -o TAP --filter=nothing-matches tests")
    assert.equal(0, code, out .. err)
    assert.matches("1%.%.0", out)
  end)

  it("runs the specs once with several workers", function()
    local dir = passing_project()
    local code, out, err = run_in(dir, q(COHOST) .. " -w 2 --test -o plainTerminal")
    assert.equal(0, code, out .. err)
    assert.matches("^[^\n]*\n2 successes / 0 failures", out)
  end)

  it("refuses --processes with a clear message", function()
    local dir = passing_project()
    local code, out, err = run_in(dir, q(COHOST) .. " --processes 2 --test")
    assert.equal(2, code, out .. err)
    assert.matches("--test runs in one process", err, 1, true)
  end)
end)

describe("arg[-1] under cohost --test", function()
  -- docs/testing-apps.md's multi-process template, as written there but
  -- for its port.
  local function multi_template()
    local doc = h.slurp(h.root .. "docs/testing-apps.md")
    local section = assert(doc:match("\n## Several workers and processes\n(.-)\n## "))
    local src = assert(section:match("```lua\n(.-)```"))
    local n
    src, n = src:gsub("local PORT = 18080", "local PORT = " .. h.free_port())
    assert.equal(1, n)
    return src
  end

  it("is the running cohost's full path, which the multi-process template starts the app with", function()
    local dir = project {
      ["app.lua"] = APP,
      ["main.lua"] = 'require("app").start(arg[1] or "0.0.0.0:8080")\n',
      ["spec/multi_spec.lua"] = multi_template(),
      ["spec/arg_spec.lua"] = [[
describe("arg", function()
  it("-1", function() io.stderr:write("arg[-1]=", tostring(arg[-1]), "\n") end)
end)
]],
    }
    -- No cohost on PATH: only arg[-1] finds it.
    for _, cmd in ipairs { q(COHOST) .. " --test -o plainTerminal",
                           "busted --lua=" .. q(COHOST) .. " -o plainTerminal" } do
      local code, out, err = run_in(dir, "env PATH=/usr/bin:/bin " .. cmd)
      assert.equal(0, code, cmd .. ": " .. out .. err)
      assert.matches("2 successes / 0 failures / 0 errors", out)
      assert.matches("arg[-1]=" .. COHOST .. "\n", err, 1, true)
    end
  end)
end)

describe("busted --lua=cohost", function()
  it("exits 0 once busted is done, though a listener and a task remain", function()
    local dir = passing_project()
    local code, out, err = run_in(dir, "busted --lua=" .. q(COHOST) .. " -o plainTerminal")
    assert.equal(0, code, out .. err)
    assert.matches("2 successes / 0 failures / 0 errors", out)
  end)

  it("is what plain busted runs when .busted says lua = cohost, and cohost --test then ignores it", function()
    local files = {
      ["app.lua"] = APP,
      ["spec/app_spec.lua"] = APP_SPEC,
      ["spec/leaky_spec.lua"] = LEAKY_SPEC:format("1"),
      [".busted"] = ("return { default = { lua = %q, output = 'plainTerminal' } }\n"):format(COHOST),
    }
    local dir = project(files)
    for _, cmd in ipairs { "busted", q(COHOST) .. " --test" } do
      local code, out, err = run_in(dir, cmd)
      assert.equal(0, code, cmd .. ": " .. out .. err)
      assert.matches("2 successes / 0 failures / 0 errors", out, 1, false)
    end
  end)

  it("exits 1 on a failing spec, without a nil error object logged", function()
    local dir = project { ["spec/leaky_spec.lua"] = LEAKY_SPEC:format("2") }
    local code, out, err = run_in(dir, "busted --lua=" .. q(COHOST) .. " -o plainTerminal")
    assert.equal(1, code, out .. err)
    assert.matches("0 successes / 1 failure", out)
    assert.not_matches("error object", err)
  end)
end)

describe("plain busted, outside cohost", function()
  it("fails with one line saying how to run the specs", function()
    -- .busted puts cohost's modules on the path, as LUA_PATH or an
    -- installed copy would; the C cores are still missing.
    local dir = project {
      ["spec/leaky_spec.lua"] = LEAKY_SPEC:format("1"),
      [".busted"] = ('return { default = { lpath = %q } }\n'):format(LUA_DIR .. "/?.lua;" .. LUA_DIR .. "/?/init.lua"),
    }
    local code, out, err = run_in(dir, "busted -o plainTerminal")
    assert.equal(1, code, out .. err)
    local _, n = out:gsub("run specs with `cohost %-%-test` or `busted %-%-lua=cohost`", "")
    assert.equal(1, n, out)
    assert.not_matches("no file", out)
  end)

  it("gets the same line from the cohost.lua make install puts in the Lua paths", function()
    local dir = project {
      ["spec/leaky_spec.lua"] = LEAKY_SPEC:format("1"),
      [".busted"] = ('return { default = { lpath = %q } }\n'):format(LUA_DIR .. "/outside/?.lua"),
    }
    local code, out, err = run_in(dir, "busted -o plainTerminal")
    assert.equal(1, code, out .. err)
    local _, n = out:gsub("run specs with `cohost %-%-test` or `busted %-%-lua=cohost`", "")
    assert.equal(1, n, out)
  end)
end)
