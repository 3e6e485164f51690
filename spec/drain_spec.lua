-- The drain as handlers see it (cohost.drain, docs/lua-api.md
-- "Shutdown"): cohost.on_shutdown functions run when a worker's drain
-- begins (SIGTERM at the signal, a reload's old workers,
-- cohost.shutdown()), in every worker thread and process; cohost.exiting()
-- turns true once the listeners closed. Servers are build/cohost children
-- (h.start).
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- -- cohost.on_shutdown --------------------------------------------------------

-- The server: marks DIR/begin-PID-ID with cohost.exiting() when its drain
-- begins, then DIR/exiting-PID-ID once exiting() is true; a first
-- function raises. GET /shutdown calls cohost.shutdown().
local HOOKS = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port, dir = tonumber(arg[1]), arg[2]
local pid = io.open("/proc/self/stat"):read("*n")
local function mark(name, text)
  local f = assert(io.open(("%s/%s-%d-%d"):format(dir, name, pid, cohost.worker_id()), "w"))
  f:write(text)
  f:close()
end
cohost.on_shutdown(function() error("boom in on_shutdown") end)
cohost.on_shutdown(function()
  mark("begin", tostring(cohost.exiting()))
  while not cohost.exiting() do cohost.sleep(0.01) end
  mark("exiting", "true")
end)
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  if req.path == "/shutdown" then cohost.shutdown() end
  res:send("pid=" .. pid)
end))
]] .. h.REPORT_PORT

local function marks(dir, name, pid)
  local found = {}
  for _, f in ipairs(h.ls(dir)) do
    local p, id = f:match("^" .. name .. "%-(%d+)%-(%d+)$")
    if p and (not pid or tonumber(p) == pid) then found[tonumber(id)] = h.slurp(dir .. "/" .. f) end
  end
  return found
end

describe("cohost.on_shutdown", function()
  it("runs in every worker at SIGTERM, before --drain-delay ends; exiting() turns true when the listeners close", function()
    local dir, status = h.tmpdir(), h.fixed_port()
    local p = h.start(("-w 2 --drain-delay 2 --status-addr 127.0.0.1:%d %s %d %s")
      :format(status, q(h.tmpfile(HOOKS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    assert.equal(200, (h.get_to_close(status, "/healthz")))
    p.signal("TERM")
    -- Both workers, while their listeners were open (exiting() false).
    assert.is_true(h.wait_for(function() return marks(dir, "begin")[1] end), h.slurp(p.err))
    assert.same({ [0] = "false", [1] = "false" }, marks(dir, "begin"))
    assert.equal(0, (p.wait(20)), h.slurp(p.err))
    assert.same({ [0] = "true", [1] = "true" }, marks(dir, "exiting"))
    -- The one that raised is logged with its traceback; the other ran.
    local log = h.slurp(p.err)
    assert.truthy(log:find("boom in on_shutdown\nstack traceback:", 1, true), log)
    assert.falsy(log:find("shutdown timeout", 1, true), log)
  end)

  it("runs in every worker of a reload's old process once the new one is ready", function()
    local dir = h.tmpdir()
    local p = h.start(("--processes 1 -w 2 --shutdown-timeout 5 %s %d %s")
      :format(q(h.tmpfile(HOOKS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    local _, _, body = h.get(p.port, "/")
    local old = tonumber(body:match("pid=(%d+)"))
    p.signal("HUP")
    assert.is_true(h.wait_for(function() return marks(dir, "exiting", old)[1] and marks(dir, "exiting", old)[0] end),
      h.slurp(p.err))
    -- A reload has no --drain-delay: the listeners close as the drain
    -- begins, so exiting() may already be true there.
    local begun = marks(dir, "begin", old)
    assert.truthy(begun[0] and begun[1])
    local _, _, now = h.get(p.port, "/")
    assert.are_not.equal(old, tonumber(now:match("pid=(%d+)")))
    assert.same({}, marks(dir, "begin", tonumber(now:match("pid=(%d+)"))))
  end)

  it("runs on cohost.shutdown(), with exiting() already true", function()
    local dir = h.tmpdir()
    local p = h.start(("%s %d %s"):format(q(h.tmpfile(HOOKS)), h.fixed_port(), q(dir)))
    defer(p.stop)
    h.get(p.port, "/shutdown")
    assert.equal(0, (p.wait(20)), h.slurp(p.err))
    assert.same({ [0] = "true" }, marks(dir, "begin"))
    assert.same({ [0] = "true" }, marks(dir, "exiting"))
  end)

  it("takes a function only", function()
    assert.has_error(function() cohost.on_shutdown(42) end,
      "bad argument #1 to 'on_shutdown' (function expected, got number)")
  end)
end)
