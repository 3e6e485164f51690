-- Helpers shared by the Lua specs. A spec loads it with
--   local h = require "spec.helper"
-- (busted runs inside build/cohost from the repository root, where
-- package.path's ./?.lua finds this file) and, if it uses defer or any
-- helper that cleans up after the test, wires the cleanups once at its top
-- level:
--   local defer = h.cleanups(after_each)
local cohost = require "cohost"

local M = {}

-- The repository root as a prefix ("" when run from the root itself) and
-- the cohost program, for starting child processes.
M.root = (debug.getinfo(1, "S").source:match("^@(.-)spec/[^/]*$") or ""):gsub("^%./", "")
M.COHOST = M.root .. "build/cohost"

-- Cleanups for the running test, run in reverse order after it. busted
-- 2.1 keeps only the last finally() of a test, so specs use this instead.
-- Every cleanup runs even if one fails; the first error fails the test.
local cleanups, wired = {}, false

local function run_cleanups()
  local list = cleanups
  cleanups = {}
  local first
  for i = #list, 1, -1 do
    local ok, err = pcall(list[i])
    if not ok and not first then first = err end
  end
  if first then error(first, 0) end
end

-- Registers fn to run after the current test.
function M.defer(fn)
  assert(wired, "spec.helper: call h.cleanups(after_each) at the spec's top level first")
  cleanups[#cleanups + 1] = fn
end

-- Call at a spec's top level with busted's after_each (a module does not
-- see busted's globals); returns defer.
function M.cleanups(after_each)
  after_each(run_cleanups)
  wired = true
  return M.defer
end

-- Files and the shell

function M.shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- The whole content of a file; raises if it cannot be opened.
function M.slurp(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

-- The whole content of a file, or nil if it cannot be opened.
function M.try_slurp(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, data)
  local f = assert(io.open(path, "w"))
  f:write(data)
  f:close()
end

-- A temp file removed after the test, holding content if given; returns
-- its path.
function M.tmpfile(content)
  local path = os.tmpname()
  M.defer(function() os.remove(path) end)
  if content then M.write_file(path, content) end
  return path
end

-- Child cohost processes

-- Lua to end a server script with, where locals `cohost` and `port` are in
-- scope: worker 0 prints "port pid", with the master's pid when there is
-- one (its parent is a cohost), so that h.start's p.pid is what signals go
-- to. A port that is not a number (a unix socket) prints as 0.
M.REPORT_PORT = [[
if cohost.worker_id() == 0 then
  local pid, ppid = io.open("/proc/self/stat"):read("*a"):match("^(%d+) %b() %S+ (%d+)")
  if io.open("/proc/" .. ppid .. "/comm"):read("*l") == "cohost" then pid = ppid end
  io.write((tonumber(port) or 0) .. " " .. pid .. "\n")
  io.stdout:flush()
end
]]

-- Runs `build/cohost <args>` (args already shell-quoted) to completion,
-- bounded by timeout(1): opts.limit seconds (default 20), then
-- opts.kill_signal (default TERM). With opts.signal, that signal goes to
-- cohost itself opts.after seconds after it started. Returns exit code,
-- stdout, stderr and seconds taken; its files are removed after the test.
function M.run(args, opts)
  opts = opts or {}
  local out, err, rc = M.tmpfile(), M.tmpfile(), M.tmpfile()
  local cmd = ("timeout -s %s %d %s %s >%s 2>%s </dev/null")
    :format(opts.kill_signal or "TERM", opts.limit or 20, M.COHOST, args, out, err)
  if opts.signal then
    -- The signal goes to cohost itself, the child of timeout.
    cmd = ("(%s & pid=$!; sleep %s; kill -%s $(ps -o pid= --ppid $pid); wait $pid; echo $? >%s)")
      :format(cmd, opts.after, opts.signal, rc)
  else
    cmd = ("(%s; echo $? >%s)"):format(cmd, rc)
  end
  local t0 = cohost.monotonic()
  os.execute(cmd)
  local took = cohost.monotonic() - t0
  return tonumber(M.slurp(rc)), M.slurp(out), M.slurp(err), took
end

-- A server script: body must set `listener`; the script then prints
-- "port pid" once the listener is up, as start() expects.
function M.server_script(body)
  return [[
local cohost = require "cohost"
]] .. body .. [[

local _, port = listener:addr()
local pid = io.open("/proc/self/stat"):read("*n")
-- One write of the whole line: every worker runs this, and the pieces of
-- io.write(a, b, c) from two threads interleave on stdout.
io.write(port .. " " .. pid .. "\n")
io.stdout:flush()
]]
end

-- Starts `build/cohost <args>` in the background, bounded by timeout(1)
-- at limit seconds (default 60), and waits for its first "port pid" line
-- on stdout. The returned process has port, pid, out, err (file names),
-- and: exited() -> code or nil; wait(limit) -> code (nil on timeout) and
-- the seconds waited; signal(name); stop(), which kills it if it still
-- runs and removes its files. Nothing is cleaned up after the test on its
-- own: call stop() (or defer it).
function M.start(args, limit)
  local out, err, rc = os.tmpname(), os.tmpname(), os.tmpname()
  os.remove(rc)   -- it appears when the process ends
  os.execute(("(timeout %d %s %s >%s 2>%s </dev/null; echo $? >%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
    :format(limit or 60, M.COHOST, args, out, err, rc, rc, rc))
  local p = { out = out, err = err }
  function p.exited() return tonumber(M.try_slurp(rc) or "") end
  function p.wait(wait_limit)
    local t0 = cohost.monotonic()
    while cohost.monotonic() - t0 < wait_limit do
      local code = p.exited()
      if code then return code, cohost.monotonic() - t0 end
      cohost.sleep(0.02)
    end
    return nil, cohost.monotonic() - t0
  end
  function p.signal(name) os.execute(("kill -%s %d 2>/dev/null"):format(name, p.pid)) end
  function p.stop()
    if p.pid and not p.exited() then p.signal("KILL") end
    for _, f in ipairs { out, err, rc } do os.remove(f) end
  end
  -- 20 s: a sanitizer build starting on a loaded machine is slow.
  local deadline = cohost.monotonic() + 20
  while cohost.monotonic() < deadline do
    local port, pid = M.slurp(out):match("^(%d+) (%d+)\n")
    if port then
      p.port, p.pid = tonumber(port), tonumber(pid)
      return p
    end
    if p.exited() then break end
    cohost.sleep(0.01)
  end
  local log = M.slurp(err)
  p.stop()
  error("the child did not start: " .. log)
end

-- Background servers (redis-server, memcached, postgres)

-- Starts cmd (a shell command line) in the background with its output in
-- log (default: a temp file); returns its pid and the log file name.
function M.spawn(cmd, log)
  log = log or os.tmpname()
  local p = assert(io.popen(("%s >%s 2>&1 </dev/null & echo $!"):format(cmd, log)))
  local pid = tonumber(p:read("*l"))
  p:close()
  assert(pid, "could not start: " .. cmd)
  return pid, log
end

-- Whether pid still runs: a zombie does not count (an orphaned server is
-- reaped by whatever init the machine has, maybe late).
function M.alive(pid)
  local stat = M.try_slurp("/proc/" .. pid .. "/stat")
  return stat ~= nil and stat:match("^%d+ %b() (%a)") ~= "Z"
end

-- Ends pid with signal (default TERM; KILL after 5 s) and waits for it.
function M.stop_pid(pid, signal)
  if not pid then return end
  os.execute(("kill -%s %d 2>/dev/null"):format(signal or "TERM", pid))
  for _ = 1, 250 do
    if not M.alive(pid) then return end
    cohost.sleep(0.02)
  end
  os.execute("kill -9 " .. pid .. " 2>/dev/null")
end

-- Waits until 127.0.0.1:port accepts a connection (15 s at most: servers
-- start slowly on a loaded machine); else raises with the server's log.
function M.wait_port(port, log)
  local deadline = cohost.monotonic() + 15
  while cohost.monotonic() < deadline do
    local s = cohost.tcp()
    s:settimeout(200)
    if s:connect("127.0.0.1", port) then
      s:close()
      return
    end
    cohost.sleep(0.02)
  end
  error("server on port " .. port .. " never came up: " .. (log and M.try_slurp(log) or ""))
end

-- Sockets

-- A port below the kernel's ephemeral range (32768 and up) that nothing
-- listens on now, for servers that need a fixed port (a restarted or new
-- worker process binds it again): h.free_port's comes from the ephemeral
-- range, where a listener of a spec running beside, bound to port 0 with
-- SO_REUSEPORT as cohost's are, could end up sharing it.
--
-- The candidates mix in this process's pid and the clock: math.random
-- starts from the same seed in every process, so two specs started side
-- by side (two engineers' suites on one machine) drew the same ports,
-- and with SO_REUSEPORT both servers bound one, each answering the
-- other's requests.
local port_draws = 0
function M.fixed_port()
  local pid = io.open("/proc/self/stat"):read("*n")
  for _ = 1, 100 do
    port_draws = port_draws + 1
    local port = 20000 + (pid * 7919 + port_draws * 104729 + math.floor(cohost.monotonic() * 1e6)) % 12000
    local s = cohost.tcp()
    s:settimeout(1000)
    local ok = s:connect("127.0.0.1", port)
    s:close()
    if not ok then return port end
  end
  error("no free port")
end

-- A port nothing listens on just now: listen on port 0, note the port,
-- close.
function M.free_port()
  local l = assert(cohost.listen("127.0.0.1:0", function() end))
  local _, port = l:addr()
  l:close()
  return port
end

-- Starts a listener on 127.0.0.1 port 0 running handler(sock, peer);
-- returns it and its port. It is closed after the test (a close of its
-- own before then is fine).
function M.serve(handler, opts)
  local l = assert(cohost.listen("127.0.0.1:0", handler, opts))
  M.defer(function() l:close() end)
  local _, port = l:addr()
  return l, port
end

-- An HTTP server (cohost.http) for handler (a function or a router) on
-- 127.0.0.1 port 0, closed after the test; returns its port.
function M.http_serve(handler, opts)
  local l = assert(require("cohost.http").listen("127.0.0.1:0", handler, opts))
  M.defer(function() l:close() end)
  local _, port = l:addr()
  return port
end

-- A cohost.tcp connected to 127.0.0.1:port, with a timeout of timeout_ms
-- (default 2000).
function M.connect(port, timeout_ms)
  local s = cohost.tcp()
  s:settimeout(timeout_ms or 2000)
  assert(s:connect("127.0.0.1", port))
  return s
end

-- GET path on 127.0.0.1:port over a new connection (Connection: close,
-- read to EOF): status (a number), the header block and the body.
function M.http_get(port, path)
  local s = M.connect(port, 5000)
  assert(s:send(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):format(path)))
  local data = assert(s:receive("*a"))
  s:close()
  local head, body = data:match("^(.-)\r\n\r\n(.*)$")
  return tonumber(head:match("^HTTP/1%.1 (%d+)")), head, body
end

-- Waiting

-- Calls fn every 0.02 s until its first result is truthy, for limit
-- seconds at most (default 10); returns fn's results: the truthy ones, or
-- those of the last call at the deadline, for the caller to assert on.
-- For a state another process, thread or worker reaches in its own time:
-- a fixed sleep before one check races with a loaded machine.
function M.eventually(fn, limit)
  local deadline = cohost.monotonic() + (limit or 10)
  while true do
    local res = { fn() }
    if res[1] or cohost.monotonic() > deadline then
      return unpack(res, 1, table.maxn(res))
    end
    cohost.sleep(0.02)
  end
end

-- Threads

-- A coroutine counting once every period seconds (default 0.005) while it
-- gets to run: ticks() moves only while others park, never while the
-- worker is blocked. stop() ends it and may be called more than once.
function M.ticker(period)
  period = period or 0.005
  local n, stop = 0, false
  local t = cohost.spawn(function()
    while not stop do
      n = n + 1
      cohost.sleep(period)
    end
  end)
  return {
    ticks = function() return n end,
    stop = function() stop = true; cohost.wait(t) end,
  }
end

-- Runs fn with a ticker (started 0.01 s before): returns how much the
-- ticker moved during fn, the seconds fn took, and fn's results. An error
-- in fn is raised again once the ticker is stopped.
function M.measure(fn, period)
  local ticker = M.ticker(period)
  cohost.sleep(0.01)
  local before, t0 = ticker.ticks(), cohost.monotonic()
  local res = { pcall(fn) }
  local moved, took = ticker.ticks() - before, cohost.monotonic() - t0
  ticker.stop()
  assert(res[1], res[2])
  return moved, took, unpack(res, 2, table.maxn(res))
end

-- Runs fn(i) on n threads at once; returns the result of each in order
-- (errors raised again here) and the wall time.
function M.run_all(n, fn)
  local threads = {}
  local t0 = cohost.monotonic()
  for i = 1, n do threads[i] = cohost.spawn(fn, i) end
  local results = {}
  for i = 1, n do
    local ok, res = cohost.wait(threads[i])
    assert(ok, res)
    results[i] = res
  end
  return results, cohost.monotonic() - t0
end

return M
