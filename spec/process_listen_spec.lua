-- Listeners that need one owner above the worker processes of --processes
-- (host/master_listen.c): a unix socket, which the master binds once and
-- hands to every process of every generation, and port 0, for which the
-- master reserves one port they all bind. Every test starts build/cohost
-- --processes 2 as a child (h.start); the script prints "port master-pid"
-- from worker 0 and appends "pid port" to a file from each process.
local cohost = require "cohost"
local lfs = require "lfs"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- Listens on ADDR (arg[1]) with an HTTP handler answering its pid;
-- appends "pid port" to arg[2] from each process's first worker.
local app = [[
local cohost = require "cohost"
local http = require "cohost.http"
local pid = io.open("/proc/self/stat"):read("*n")
local l = assert(http.listen(arg[1], function(req, res) res:send(tostring(pid)) end))
local _, port = l:addr()
if cohost.worker_id() % 2 == 0 then   -- each process's first worker (-w 2)
  local f = io.open(arg[2], "a")
  f:write(pid, " ", tonumber(port) or 0, "\n")
  f:close()
end
]] .. h.REPORT_PORT

local function start(addr)
  local log = h.tmpfile()
  local p = h.start(("--processes 2 -w 2 %s %s %s"):format(q(h.tmpfile(app)), q(addr), q(log)), 60)
  defer(p.stop)
  return p, log
end

-- The pids the worker processes wrote to log, with their ports.
local function written(log)
  local t = {}
  for pid, port in (h.try_slurp(log) or ""):gmatch("(%d+) (%d+)\n") do
    t[#t + 1] = { pid = tonumber(pid), port = tonumber(port) }
  end
  return t
end

-- Waits (10 s at most) until fn() is true; raises with what otherwise.
local function until_true(fn, what)
  assert(h.eventually(fn), "timed out waiting: " .. what)
end

-- One HTTP request over a unix socket (a path) or 127.0.0.1 (a port): the
-- pid that answered, or nil and the error (or the body).
local function request(path_or_port)
  local where = type(path_or_port) == "string" and "unix:" .. path_or_port or path_or_port
  local status, body = h.get_to_close(where, "/")
  if not status then return nil, body end
  return tonumber(body:match("^(%d+)$")), body
end

describe("--processes with", function()
  local path
  before_each(function()
    path = os.tmpname()
    os.remove(path)
    path = path .. ".sock"
  end)
  after_each(function() os.remove(path) end)

  it("a unix socket: both processes start and serve it; the master removes it at exit", function()
    local p, log = start("unix:" .. path)
    until_true(function() return #written(log) == 2 end, "both processes listening")
    assert.equal(2, #h.children(p.pid))
    assert.equal("socket", lfs.attributes(path, "mode"))
    for _ = 1, 20 do
      local pid, err = request(path)
      assert(pid, err)
    end
    p.signal("TERM")
    assert.equal(0, (p.wait(20)))
    assert.is_nil(lfs.attributes(path), "the socket file outlived the master")
    assert.is_nil(h.slurp(p.err):find("rror"), h.slurp(p.err))
  end)

  it("a unix socket: a reload hands the same socket on, losing no request", function()
    local p, log = start("unix:" .. path)
    until_true(function() return #written(log) == 2 end, "both processes listening")
    local before = written(log)
    local old = { [before[1].pid] = true, [before[2].pid] = true }
    -- Requests one after another, across the reload: every one answered.
    local n, new_seen = 0, false
    local t0 = cohost.monotonic()
    p.signal("HUP")
    while cohost.monotonic() - t0 < 15 do
      local pid, err = request(path)
      assert(pid, err)
      n = n + 1
      if not old[pid] then new_seen = true end
      -- Done once only the new generation is left and answers.
      if new_seen and #written(log) == 4 and #h.children(p.pid) == 2 then break end
    end
    assert.is_true(new_seen, "no answer from a new process")
    assert.equal(4, #written(log))
    assert.is_true(n > 1)
    assert.equal("socket", lfs.attributes(path, "mode"), "the socket file is gone after the reload")
  end)

  it("port 0: every process, and a reload's, binds the one port the master reserved", function()
    local p, log = start("127.0.0.1:0")
    until_true(function() return #written(log) == 2 end, "both processes listening")
    local w = written(log)
    assert.is_true(w[1].port > 0)
    assert.equal(w[1].port, w[2].port)
    assert.equal(p.port, w[1].port)
    assert.truthy((request(p.port)))
    p.signal("HUP")
    until_true(function() return #written(log) == 4 end, "the new processes listening")
    w = written(log)
    assert.equal(w[1].port, w[3].port)
    assert.equal(w[1].port, w[4].port)
    until_true(function() return #h.children(p.pid) == 2 end, "the old processes gone")
    assert.truthy((request(p.port)))
  end)

  it("a unix path the master cannot bind: a clear error and no start", function()
    local bad = "/nonexistent-dir-" .. math.random(1e9) .. "/x.sock"
    local rc, _, err = h.run(("--processes 2 %s %s %s"):format(q(h.tmpfile(app)), q("unix:" .. bad),
                                                          q(h.tmpfile())), { limit = 20 })
    assert.are_not.equal(0, rc)
    assert.truthy(err:find(bad, 1, true), err)
    assert.truthy(err:lower():find("no such file or directory", 1, true), err)
  end)
end)
