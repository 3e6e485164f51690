-- Listeners that need one owner above the worker processes of --processes
-- (host/proc/master_listen.c): a unix socket, which the master binds once and
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

-- TCP listeners belong to the master too (master_listen.h): each worker's
-- socket is handed to the same worker of the next generation, and to a
-- worker's replacement, with what the kernel queued on it. The script
-- answers "ANSWER pid=P"; /spin marks DIR/spinning and then keeps its
-- worker busy, never yielding, until DIR/release exists, so that the
-- connections made meanwhile wait in the kernel's queue, unaccepted;
-- /wait marks DIR/waiting and sleeps (yielding) until DIR/release exists.
local function tcp_app(answer, dir, extra)
  return ([[
local cohost = require "cohost"
local http = require "cohost.http"
local port, answer, dir = tonumber(arg[1]), %q, %q
local pid = io.open("/proc/self/stat"):read("*n")
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  if req.path == "/spin" then
    io.open(dir .. "/spinning", "w"):close()
    while not io.open(dir .. "/release") do end
  elseif req.path == "/wait" then
    io.open(dir .. "/waiting", "w"):close()
    while not io.open(dir .. "/release") do cohost.sleep(0.02) end
  end
  res:send(answer .. " pid=" .. pid)
end))
]]):format(answer, dir) .. (extra or "") .. h.REPORT_PORT
end

describe("--processes 1 with a TCP port", function()
  -- Sends GET /spin on a connection of its own and waits until the worker
  -- spins; then opens n connections and sends each a GET /. Returns the
  -- /spin socket and the n others.
  local function busy_then_queue(p, dir, n)
    local spin = h.dial(p.port, 20000)
    assert(spin:send("GET /spin HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert.is_true(h.wait_for(function() return h.try_slurp(dir .. "/spinning") end),
                   "the worker did not start spinning: " .. h.slurp(p.err))
    local queued = {}
    for i = 1, n do
      queued[i] = h.dial(p.port, 15000)
      assert(queued[i]:send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    end
    return spin, queued
  end

  -- Each socket in queued gets "ANSWER pid=P" from a process other than
  -- pid old.
  local function served_by_another(queued, answer, old)
    for i = 1, #queued do
      local status, _, body = h.read_response(queued[i])
      assert.equal(200, status, body)
      assert.matches("^" .. answer .. " pid=%d+$", body)
      assert.are_not.equal(old, tonumber(body:match("pid=(%d+)")))
    end
  end

  it("a reload's new process takes over the socket, with the connections queued while the old one was busy", function()
    local dir = h.tmpdir()
    local path = h.tmpfile(tcp_app("gen1", dir))
    local p = h.start_fixed_port("--processes 1 --shutdown-timeout 10", path)
    local old = next(h.wait_workers(p, 1))
    local spin, queued = busy_then_queue(p, dir, 5)
    h.write_file(path, tcp_app("gen2", dir))
    p.signal("HUP")
    -- The old process still spins: only the new one can accept them. With
    -- a socket of its own, they would wait for the old one's drain.
    served_by_another(queued, "gen2", old)
    h.write_file(dir .. "/release", "")
    local status, _, body = h.read_response(spin)
    assert.equal(200, status)
    assert.equal("gen1 pid=" .. old, body)
    assert.is_true(h.wait_for(function()
      return h.slurp(p.err):find("old worker process 0 (pid " .. old .. ") exited with code 0", 1, true)
    end, 20), h.slurp(p.err))
    assert.matches("^gen2 ", select(3, h.get(p.port, "/")))
  end)

  it("a worker process killed with SIGKILL: its replacement serves the connections queued on its socket", function()
    local dir = h.tmpdir()
    local p = h.start_fixed_port("--processes 1", h.tmpfile(tcp_app("one", dir)))
    local old = next(h.wait_workers(p, 1))
    local _, queued = busy_then_queue(p, dir, 3)
    os.execute("kill -KILL " .. old)
    os.remove(dir .. "/spinning")
    -- Not reset with the dead process's socket: the replacement answers.
    served_by_another(queued, "one", old)
    assert.truthy(h.slurp(p.err):find("worker process 0 (pid " .. old .. ") was killed by signal SIGKILL", 1, true))
  end)

  it("SIGTERM: the master keeps no socket open, so new connections are refused once the worker stopped listening", function()
    local dir = h.tmpdir()
    local p = h.start_fixed_port("--processes 1 --shutdown-timeout 10", h.tmpfile(tcp_app("one", dir)))
    h.wait_workers(p, 1)
    -- A request in flight keeps the draining worker, and the master, alive.
    local waiting = h.dial(p.port, 20000)
    assert(waiting:send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert.is_true(h.wait_for(function() return h.try_slurp(dir .. "/waiting") end), h.slurp(p.err))
    p.signal("TERM")
    local refused = h.wait_for(function()
      local s, err = h.try_connect(p.port, 2000)
      if s then s:close() end
      return not s and tostring(err):find("refused")
    end, 15)
    assert.is_nil(p.exited(), h.slurp(p.err))
    h.write_file(dir .. "/release", "")
    assert.is_true(refused, "connections were still taken after the drain began: " .. h.slurp(p.err))
    assert.equal(200, (h.read_response(waiting)))
    assert.equal(0, (p.wait(20)))
  end)

  it("a failed reload closes the port only its script listened on; the old one serves on", function()
    local dir = h.tmpdir()
    local other = h.fixed_port()
    local path = h.tmpfile(tcp_app("gen1", dir))
    local p = h.start_fixed_port("--processes 1", path)
    h.wait_workers(p, 1)
    h.write_file(path, tcp_app("gen2", dir, ([[
assert(http.listen("127.0.0.1:%d", function(req, res) res:send("other") end))
error("this script fails after its listens")
]]):format(other)))
    p.signal("HUP")
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("reload failed", 1, true) end, 20),
                   h.slurp(p.err))
    local s, err = h.try_connect(other, 2000)
    if s then s:close() end
    assert.is_nil(s, "the failed script's port still takes connections")
    assert.matches("refused", tostring(err))
    assert.matches("^gen1 ", select(3, h.get(p.port, "/")))
  end)
end)
