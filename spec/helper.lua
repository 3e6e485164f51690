-- Helpers shared by the Lua specs. A spec loads it with
--   local h = require "spec.helper"
-- (busted runs inside build/cohost from the repository root, where
-- package.path's ./?.lua finds this file) and, if it uses defer or any
-- helper that cleans up after the test, wires the cleanups once at its top
-- level:
--   local defer = h.cleanups(after_each)
local cohost = require "cohost"
local cjson = require "cjson"

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
    -- A long property search defers thousands of shells (rm -rf): let
    -- the loop run between them, as the CPU watchdog wants.
    if i % 64 == 0 then cohost.sleep(0) end
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

-- A temp path that does not exist yet, for a file or directory that the
-- test (or a server it starts) makes there; whatever is there is removed
-- after the test.
function M.tmppath()
  local path = os.tmpname()
  os.remove(path)
  M.defer(function() os.execute("rm -rf " .. M.shell_quote(path)) end)
  return path
end

-- A new empty directory, removed with its contents after the test. Made
-- by mkdir(1) with the umask's mode: file_spec made its own with
-- cohost.file's mkdir and mode 700, which none of its tests looks at
-- (it tests mkdir on its own).
function M.tmpdir()
  local dir = M.tmppath()
  assert(os.execute("mkdir " .. M.shell_quote(dir)) == 0, "mkdir failed: " .. dir)
  return dir
end

-- The names in a directory, dot files included ("." and ".." left out).
-- ls(1) through io.popen blocks the worker, for the moment ls takes.
function M.ls(dir)
  local p = assert(io.popen("ls -A " .. M.shell_quote(dir)))
  local names = {}
  for name in p:lines() do names[#names + 1] = name end
  p:close()
  return names
end

-- Runs cmd (a shell command line) to completion with its output thrown
-- away, and raises if it fails. It blocks the worker: for setup and
-- teardown, while no server of the spec's own runs (use h.sh otherwise).
function M.must(cmd)
  local ok = os.execute(cmd .. " >/dev/null 2>&1")
  assert(ok == true or ok == 0, "failed: " .. cmd)
end

-- Starts cmd (a shell command line) in the background, bounded by
-- timeout(1) at limit seconds, with stdout and stderr going to the files
-- out and err. The file rc appears, holding the exit status, once cmd
-- has ended (written aside and renamed: never seen half-written).
local function background(cmd, limit, out, err, rc)
  os.execute(("(timeout %d %s >%s 2>%s </dev/null; echo $? >%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
    :format(limit, cmd, out, err, rc, rc, rc))
end

-- Runs cmd under sh in the background, bounded by timeout(1) at limit
-- seconds (default 20), and parks until it ends: a blocking os.execute
-- or io.popen would stall this worker, and with it any server the spec
-- runs in this process (curl against it would never be answered).
-- Returns the exit code, stdout and stderr, kept apart (imagehost_spec's
-- copy blocked, its servers being children, and merged the two: it now
-- shows stderr after stdout in its messages). Raises if cmd outlives its
-- limit by 5 s.
function M.sh(cmd, limit)
  limit = limit or 20
  local out, err, rc = M.tmpfile(), M.tmpfile(), M.tmpfile()
  os.remove(rc)   -- it appears when cmd ends
  background("sh -c " .. M.shell_quote(cmd), limit, out, err, rc)
  local deadline = cohost.monotonic() + limit + 5
  while true do
    local code = tonumber(M.try_slurp(rc) or "")
    if code then return code, M.slurp(out), M.slurp(err) end
    assert(cohost.monotonic() < deadline, "background command never ended: " .. cmd)
    cohost.sleep(0.005)   -- most commands end in milliseconds, and a spec may run hundreds
  end
end

-- Debian's python3, which has the modules the specs' scripts import
-- (websockets, h2); the first python3 on PATH may not (a pyenv shim,
-- which http_server_spec ran its http.client scripts with).
M.PYTHON = "/usr/bin/python3"

-- Runs the Python program source with args (a string, already quoted) as
-- h.sh does, in the background (limit default 20 s); returns its exit
-- code, stdout and stderr.
function M.python(source, args, limit)
  return M.sh(("%s %s %s"):format(M.PYTHON, M.shell_quote(M.tmpfile(source)), args or ""), limit)
end

-- TLS material

-- Throwaway keys and certificates, made in dir with the openssl command
-- line (through h.must: for setup): EC P-256 keys, valid for 2 days.
M.TLS_NEWKEY = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

-- A CA whose common name is cn: dir/ca.pem and dir/ca.key. Returns the
-- path of ca.pem.
function M.tls_ca(dir, cn)
  local q = M.shell_quote
  M.must(("openssl req -x509 %s -keyout %s -out %s -days 2 -subj /CN=%s")
    :format(M.TLS_NEWKEY, q(dir .. "/ca.key"), q(dir .. "/ca.pem"), cn))
  return dir .. "/ca.pem"
end

-- A certificate for common name cn signed by dir's CA (h.tls_ca), with
-- the X.509 extensions in ext (an openssl extfile line such as
-- "subjectAltName=DNS:localhost"): dir/NAME.pem and dir/NAME.key, whose
-- paths it returns.
function M.tls_cert(dir, name, cn, ext)
  local q, p = M.shell_quote, dir .. "/" .. name
  M.write_file(p .. ".ext", ext .. "\n")
  M.must(("openssl req -new %s -keyout %s -out %s -subj /CN=%s")
    :format(M.TLS_NEWKEY, q(p .. ".key"), q(p .. ".csr"), cn))
  M.must(("openssl x509 -req -in %s -CA %s -CAkey %s -CAcreateserial -days 2 -out %s -extfile %s")
    :format(q(p .. ".csr"), q(dir .. "/ca.pem"), q(dir .. "/ca.key"), q(p .. ".pem"), q(p .. ".ext")))
  return p .. ".pem", p .. ".key"
end

-- Data

-- n bytes from math.random (varied, not secret), 4096 to a string.char
-- call: unpack has a limit on the values it returns.
function M.random_bytes(n)
  local parts, t = {}, {}
  for i = 1, n do
    t[#t + 1] = math.random(0, 255)
    if #t == 4096 or i == n then
      parts[#parts + 1] = string.char(unpack(t))
      t = {}
    end
  end
  return table.concat(parts)
end

-- The bytes of s in lower-case hex.
function M.hex(s)
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- The value at fraction p (0.5: the median) of list, which is left as it
-- is: a sorted copy is taken, O(n log n) each call, also for a list
-- already sorted (hardening_spec's, which it sorts for its maximum).
function M.percentile(list, p)
  local sorted = { unpack(list) }
  table.sort(sorted)
  return sorted[math.max(1, math.ceil(#sorted * p))]
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

-- h.run on a script file holding the Lua source: `build/cohost <args>
-- <file>`, with h.run's opts.
function M.run_script(source, args, opts)
  return M.run((args or "") .. " " .. M.shell_quote(M.tmpfile(source)), opts)
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
  background(M.COHOST .. " " .. args, limit or 60, out, err, rc)
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
  -- Once only: a second stop would find no rc file and signal a pid the
  -- system may have given to another process since (and a spec that
  -- stops its processes and defers the stops too pays a shell per call).
  function p.stop()
    if p.stopped then return end
    p.stopped = true
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

-- Starts `build/cohost <args> <script> PORT` with h.start (60 s), PORT an
-- h.fixed_port, for a script that listens on arg[1]: the worker processes
-- a reload or a restart starts bind that same port again, which port 0
-- would not give them. Stopped after the test.
function M.start_fixed_port(args, script)
  local p = M.start(("%s %s %d"):format(args, M.shell_quote(script), M.fixed_port()), 60)
  M.defer(p.stop)
  return p
end

-- The pids of the children of pid (a master's worker processes), sorted
-- (status_processes_spec compares them with /status's; where only their
-- number matters the order does no harm).
function M.children(pid)
  local pids = {}
  local list = M.try_slurp(("/proc/%d/task/%d/children"):format(pid, pid)) or ""
  for child in list:gmatch("%d+") do pids[#pids + 1] = tonumber(child) end
  table.sort(pids)
  return pids
end

-- Waits (20 s at most) until n distinct worker processes of p (an
-- h.start process whose script answers GET / with "pid=PID" in its body)
-- have answered on p.port: they start one by one, and h.start waited for
-- the first only. Failed requests count as misses. Returns the set of
-- their pids (numbers); raises with p's log if fewer answered.
function M.wait_workers(p, n)
  local pids, count = {}, 0
  local t0 = cohost.monotonic()
  while count < n and cohost.monotonic() - t0 < 20 do
    local status, _, body = M.get(p.port, "/")
    local pid = status == 200 and tonumber(body:match("pid=(%d+)"))
    if pid and not pids[pid] then pids[pid], count = true, count + 1 end
  end
  assert(count == n, ("%d of %d worker processes answered: %s"):format(count, n, M.slurp(p.err)))
  return pids
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
    if M.listening(port, 200) then return end
    cohost.sleep(0.02)
  end
  error("server on port " .. port .. " never came up: " .. (log and M.try_slurp(log) or ""))
end

-- Starts a throwaway PostgreSQL 15 cluster (initdb in a temp directory,
-- fsync off) on a free loopback port, as the postgres user when we are
-- root (initdb and postgres refuse root; setpriv execs, so the pid is the
-- server's own). Returns { port, pid, dir, log, stop(), restart() }; for
-- a setup, with stop() in the teardown.
M.PGBIN = "/usr/lib/postgresql/15/bin/"

function M.postgres()
  local function as_pg(cmd)
    local me = io.popen("id -u"):read("*l")
    if me == "0" then return "setpriv --reuid=postgres --regid=postgres --init-groups " .. cmd end
    return cmd
  end
  local dir = io.popen("mktemp -d /tmp/cohost-pg.XXXXXX"):read("*l")
  local pg = { dir = dir }
  os.execute("chown postgres: " .. dir .. " 2>/dev/null")
  local rc = os.execute(as_pg(("%sinitdb -D %s/data -A trust -U postgres --no-sync -E UTF8 >%s/initdb.log 2>&1")
    :format(M.PGBIN, dir, dir)))
  assert(rc == 0 or rc == true, "initdb failed: " .. (M.try_slurp(dir .. "/initdb.log") or ""))
  pg.port = M.free_port()
  local cmd = as_pg(("%spostgres -D %s/data -p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50")
    :format(M.PGBIN, dir, pg.port, dir))
  function pg.stop()
    M.stop_pid(pg.pid, "QUIT")   -- immediate shutdown: the cluster is thrown away
    if pg.log then os.remove(pg.log) end
    if pg.dir:match("^/tmp/cohost%-pg%.") then os.execute("rm -rf " .. pg.dir) end
  end
  local function start()
    pg.pid, pg.log = M.spawn(cmd)
    M.wait_port(pg.port, pg.log)
    -- The port opens before recovery ends ("the database system is
    -- starting up"): wait for the server's own word that it is ready.
    local deadline = cohost.monotonic() + 15
    while not (M.try_slurp(pg.log) or ""):find("ready to accept connections", 1, true) do
      if cohost.monotonic() > deadline then
        local log = M.try_slurp(pg.log) or ""
        pg.stop()
        error("postgres never became ready: " .. log)
      end
      cohost.sleep(0.05)
    end
  end
  -- Stops the server as `pg_ctl stop -m fast` does (SIGINT: sessions are
  -- told and disconnected) and starts it again on the same port and data.
  function pg.restart()
    M.stop_pid(pg.pid, "INT")
    if pg.log then os.remove(pg.log) end
    start()
  end
  start()
  return pg
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
    if not M.listening(port) then return port end
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

-- A cohost.tcp connected to where (a port on 127.0.0.1, or an address
-- string such as "unix:/path"), with a timeout of timeout_ms (default
-- 2000); or nil and the error.
function M.try_connect(where, timeout_ms)
  local s = cohost.tcp()
  s:settimeout(timeout_ms or 2000)
  local ok, err
  if type(where) == "string" then ok, err = s:connect(where)
  else ok, err = s:connect("127.0.0.1", where) end
  if not ok then
    s:close()
    return nil, err
  end
  return s
end

-- h.try_connect tried again every 0.02 s while it fails, for limit
-- seconds (default 15: a sanitizer build starting on a loaded machine
-- is slow to listen): the socket, or nil and the last error. Unlike
-- h.wait_port, no probe connection reaches the server first.
function M.connect_retry(where, timeout_ms, limit)
  return M.eventually(function() return M.try_connect(where, timeout_ms) end, limit or 15)
end

-- Relays bytes both ways between sock and up until either side ends,
-- then closes both; up to sock runs on a task of its own. drop(), if
-- given, is asked before each piece from sock goes up: true ends the
-- relay there (a connection that drops mid-way).
function M.relay(sock, up, drop)
  cohost.spawn(function()
    while true do
      local d = up:receiveany(65536)
      if not d or not sock:send(d) then break end
    end
    sock:close()
  end)
  while true do
    local d = sock:receiveany(65536)
    if not d or (drop and drop()) or not up:send(d) then break end
  end
  up:close()
  sock:close()
end

-- h.try_connect that raises if the connection fails.
function M.connect(where, timeout_ms)
  return assert(M.try_connect(where, timeout_ms))
end

-- h.connect whose socket is closed after the test; the timeout is 5000
-- ms unless timeout_ms is given (a socket kept through a test waits for
-- servers that are slow on a loaded machine).
function M.dial(where, timeout_ms)
  local s = M.connect(where, timeout_ms or 5000)
  M.defer(function() s:close() end)
  return s
end

-- Whether 127.0.0.1:port accepts a connection now (the connect waits
-- timeout_ms at most, default 1000).
function M.listening(port, timeout_ms)
  local s = M.try_connect(port, timeout_ms or 1000)
  if s then s:close() end
  return s ~= nil
end

-- A cohost.listen handler that echoes each line back until the peer
-- goes away.
function M.echo_lines(sock)
  while true do
    local line = sock:receive()
    if not line then return end
    sock:send({ line, "\n" })
  end
end

-- A handler that sends data one byte per TCP segment (a 1 ms pause
-- between them), so the peer sees every boundary split; it stops quietly
-- if the peer leaves (http_client_spec's copy raised there, an error in
-- a handler that no test looks at), or else holds the connection hold
-- seconds (default 0: it closes at once).
function M.drip(data, hold)
  return function(sock)
    sock:setoption("tcp-nodelay", true)
    for i = 1, #data do
      if not sock:send(data:sub(i, i)) then return end   -- the client left
      cohost.sleep(0.001)
    end
    if hold and hold > 0 then cohost.sleep(hold) end
  end
end

-- HTTP clients. Each sends exact bytes over cohost.tcp; they differ in
-- what they return and in how much they forgive:
--   h.http_get          status, head, body; raises on any failure
--   h.get_to_close      status, body; or nil, err (read to the close)
--   h.get               status, headers, body; or nil, err (by
--                       Content-Length, so also on a kept-alive socket)
--   h.request           { status, headers, body } of any method
--   h.receive_response  a response whose framing it checks, for the
--                       HTTP server's own specs

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

-- GET path on a new connection to where (a port on 127.0.0.1, or
-- "unix:/path") with Connection: close, read to the close: status (a
-- number) and body; or nil and the error when the connection fails or no
-- whole response head comes. opts.timeout: milliseconds per operation
-- (default 5000). A read that ends in an error (a reset) is a failure,
-- as a client would see it, unless opts.partial: then what came is used
-- (limits_spec's handlers die under memory and CPU limits, and only the
-- answer they got out matters there).
function M.get_to_close(where, path, opts)
  opts = opts or {}
  local s, err = M.try_connect(where, opts.timeout or 5000)
  if not s then return nil, err end
  local ok
  ok, err = s:send(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):format(path))
  if not ok then
    s:close()
    return nil, err
  end
  local data, partial
  data, err, partial = s:receive("*a")
  s:close()
  if not data and opts.partial then data = partial end
  if not data then return nil, err end
  local status, body = data:match("^HTTP/1%.1 (%d+).-\r\n\r\n(.*)$")
  if not status then return nil, err or "no answer: " .. data:sub(1, 100) end
  return tonumber(status), body
end

-- Reads one response from sock: status (a number), headers (lower-case
-- names; a repeated one keeps the last) and body (Content-Length bytes,
-- or to the close without one: the servers here always send one, and
-- the copies this replaced would have read a line); or nil and the error
-- if the connection fails or ends first, a cut body included (where
-- process_spec's copy gave the status and a nil body: a failure all the
-- same). For servers that restart and drain, where any failure is an
-- answer to look at; h.receive_response is the strict reader for the
-- HTTP server's own specs.
function M.read_response(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.1 (%d+)"))
  local headers = {}
  while true do
    local l, lerr = sock:receive("*l")
    if not l then return nil, lerr end
    if l == "" then break end
    local k, v = l:match("^([^:]+):%s*(.*)$")
    headers[k:lower()] = v
  end
  local n = tonumber(headers["content-length"])
  local body, berr = sock:receive(n or "*a")
  if not body then return nil, berr end
  return status, headers, body
end

-- GET path and h.read_response's status, headers and body, or nil and
-- the error. to is a port on 127.0.0.1 or "unix:/path": a new connection
-- (5 s timeout) with Connection: close, closed after; or an open socket,
-- which the request keeps alive and leaves open.
function M.get(to, path)
  local s, fresh = to, type(to) ~= "userdata"
  local ok, err
  if fresh then
    s, err = M.try_connect(to, 5000)
    if not s then return nil, err end
  end
  ok, err = s:send(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n"):format(path, fresh and "Connection: close\r\n" or ""))
  local status, headers, body
  if ok then status, headers, body = M.read_response(s) end
  if fresh then s:close() end
  if not ok then return nil, err end
  return status, headers, body
end

-- Parses a whole response (as read to the close): a table with status (a
-- number), headers (lower-case names; a repeated one keeps the last) and
-- body. Raises if there is no response head.
function M.parse_response(data)
  local head, body = data:match("^(.-)\r\n\r\n(.*)$")
  assert(head, "no response head in: " .. data)
  local headers = {}
  for k, v in head:gmatch("\r\n([^:]+):%s*([^\r]*)") do headers[k:lower()] = v end
  return { status = tonumber(head:match("^HTTP/1%.%d (%d%d%d)")), headers = headers, body = body }
end

-- Sends bytes on a new connection to 127.0.0.1:port (5 s timeout) and
-- reads until the server closes; returns what came, also when the read
-- ended in an error (a server refusing a request may reset), and that
-- error.
function M.raw_request(port, bytes)
  local s = M.connect(port, 5000)
  assert(s:send(bytes))
  local all, err, partial = s:receive("*a")
  s:close()
  return all or partial, err
end

-- One request with Connection: close (h.raw_request): method, target,
-- headers (a table, or nil) and an optional body, sent with its
-- Content-Length. Returns the parsed response (h.parse_response).
function M.request(port, method, target, headers, body)
  local lines = { method .. " " .. target .. " HTTP/1.1", "Host: test", "Connection: close" }
  for k, v in pairs(headers or {}) do lines[#lines + 1] = k .. ": " .. v end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  return M.parse_response(assert(M.raw_request(port, table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""))))
end

-- The bytes of a request with no body: method (default GET) and target,
-- Host: t, then extra (header lines, each ending in CRLF) if given. Its
-- connection stays open (HTTP/1.1), for pipelining.
function M.request_bytes(target, extra, method)
  return (method or "GET") .. " " .. target .. " HTTP/1.1\r\nHost: t\r\n" .. (extra or "") .. "\r\n"
end

-- Reads one response from sock and checks its framing, raising on
-- anything malformed (a cut head, a bad status or header line, bad
-- chunks): the HTTP server's specs hold cohost to the letter with it.
-- Returns a table: status (a number), version ("1.1"), status_line,
-- headers (lower-case names, a repeated header is an array), lines (the
-- header lines as sent), body (decoded), chunked and raw (the body bytes
-- as they came) and until_close (no framing: read to EOF). A 1xx
-- response is returned after its head. head_only: a HEAD's response, no
-- body. nil and the error if the connection ended before a status line.
-- http_sendfile_spec checks on top that a body came by Content-Length.
function M.receive_response(sock, head_only)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local r = { status_line = line, headers = {}, lines = {} }
  local version, status = line:match("^HTTP/(%d%.%d) (%d%d%d) ")
  assert(status, "bad status line: " .. line)
  r.version, r.status = version, tonumber(status)
  while true do
    local l = assert(sock:receive("*l"))
    if l == "" then break end
    r.lines[#r.lines + 1] = l
    local k, v = l:match("^([^:]+):[ \t]*(.-)[ \t]*$")
    assert(k, "bad header line: " .. l)
    k = k:lower()
    local old = r.headers[k]
    if old == nil then r.headers[k] = v
    elseif type(old) == "table" then old[#old + 1] = v
    else r.headers[k] = { old, v } end
  end
  if r.status < 200 then return r end
  if head_only or r.status == 204 or r.status == 304 then
    r.body = ""
    return r
  end
  local te, cl = r.headers["transfer-encoding"], r.headers["content-length"]
  if te then
    assert(te == "chunked", "Transfer-Encoding: " .. tostring(te))
    r.chunked = true
    local parts, raw = {}, {}
    while true do
      local size = assert(sock:receive("*l"))
      raw[#raw + 1] = size .. "\r\n"
      local n = assert(tonumber(size, 16), "bad chunk size: " .. size)
      if n == 0 then
        local trailer = sock:receive("*l")
        assert(trailer == "", "no CRLF after the last chunk: " .. tostring(trailer))
        raw[#raw + 1] = "\r\n"
        break
      end
      parts[#parts + 1] = assert(sock:receive(n))
      local crlf = sock:receive(2)
      assert(crlf == "\r\n", "no CRLF after a chunk: " .. tostring(crlf))
      raw[#raw + 1] = parts[#parts] .. "\r\n"
    end
    r.body, r.raw = table.concat(parts), table.concat(raw)
  elseif cl then
    local n = assert(tonumber(cl))
    r.body = n == 0 and "" or assert(sock:receive(n))
  else
    r.until_close = true
    r.body = assert(sock:receive("*a"))
  end
  return r
end

-- The JSON of a --status-addr endpoint's /status on port, decoded, once
-- it answers 200: worker 0 starts the endpoint after its main chunk. 5 s
-- at most, by the clock (the copies counted tries: 200 and 250 of 0.02 s
-- plus a refused connect each).
function M.status_json(port)
  local st = M.eventually(function()
    local code, body = M.get_to_close(port, "/status")
    return code == 200 and cjson.decode(body)
  end, 5)
  return st or error("no /status on port " .. port)
end

-- Waiting

-- Calls fn every `every` seconds (default 0.02) until its first result
-- is truthy, for limit seconds at most (default 10); returns fn's
-- results: the truthy ones, or those of the last call at the deadline,
-- for the caller to assert on.
-- For a state another process, thread or worker reaches in its own time:
-- a fixed sleep before one check races with a loaded machine.
function M.eventually(fn, limit, every)
  local deadline = cohost.monotonic() + (limit or 10)
  while true do
    local res = { fn() }
    if res[1] or cohost.monotonic() > deadline then
      return unpack(res, 1, table.maxn(res))
    end
    cohost.sleep(every or 0.02)
  end
end

-- h.eventually for a condition: whether pred() came true within limit
-- seconds (default 10), polled every `every` seconds (default 0.02; make
-- it longer where one check costs much). Always a boolean, for
-- assert.is_true: pred may return any true value (a string.find index).
function M.wait_for(pred, limit, every)
  return not not M.eventually(pred, limit, every)
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
