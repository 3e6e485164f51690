-- cohost under systemd (docs/deploy.md), without a running systemd:
-- socket activation through systemd-socket-activate (from the systemd
-- package), which binds the sockets, sets LISTEN_FDS/LISTEN_PID/
-- LISTEN_FDNAMES and execs cohost on the first connection; and sd_notify
-- through a fake NOTIFY_SOCKET, a datagram socket that a small Python
-- reader (bounded by timeout(1)) copies into a file the spec reads.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- Answers "NAME pid=P" on each address in arg (NAME=ADDR pairs).
local SERVER = [[
local http = require "cohost.http"
local pid = io.open("/proc/self/stat"):read("*n")
for i = 1, #arg do
  local name, addr = arg[i]:match("^(%w+)=(.+)$")
  if name then assert(http.listen(addr, function(req, res) res:send(name .. " pid=" .. pid) end)) end
end
]]

-- Runs cmd in the background under timeout(1) with its output in a
-- file, stopped (TERM, then KILL) after the test; returns the pid of cmd
-- itself (timeout's child: timeout would pass a SIGHUP on and then end)
-- and the log file.
local function background(cmd)
  local pid, log = h.spawn("exec timeout 60 " .. cmd)
  defer(function() h.stop_pid(pid); os.remove(log) end)
  local child = h.eventually(function() return h.children(pid)[1] end, 10)
  return child or pid, log
end

-- Body of GET / on port, retried while cohost starts (the first
-- connection is what makes systemd-socket-activate exec it: it waits in
-- the socket's queue meanwhile).
local function get(port)
  local status, _, body = h.eventually(function() return h.get(port, "/") end, 20)
  return status, body
end

describe("socket activation", function()
  for _, args in ipairs { "", "--processes 2 -w 2" } do
    it(("adopts the passed sockets by name and by port, and never binds them again (%s)")
      :format(args == "" and "one process" or args), function()
      local p1, p2 = h.fixed_port(), h.fixed_port()
      local script = h.tmpfile(SERVER)
      -- by port: listens on 127.0.0.1:p1, systemd passed 0.0.0.0:p1.
      local _, log = background(("systemd-socket-activate -l 0.0.0.0:%d -l 127.0.0.1:%d --fdname=web:admin %s %s %s byport=127.0.0.1:%d named=systemd:admin")
        :format(p1, p2, h.COHOST, args, q(script), p1))
      local status, body = get(p1)
      assert.equal(200, status, h.slurp(log))
      assert.truthy(body:match("^byport pid=%d+$"), body)
      status, body = get(p2)
      assert.equal(200, status, h.slurp(log))
      assert.truthy(body:match("^named pid=%d+$"), body)
      -- One socket on each port: systemd's, which cohost's workers share.
      for _, port in ipairs { p1, p2 } do
        local _, out = h.sh(("ss -Hltn 'sport = :%d'"):format(port))
        local _, n = out:gsub("LISTEN", "")
        assert.equal(1, n, out)
      end
      assert.falsy(h.slurp(log):find("error", 1, true), h.slurp(log))
    end)
  end

  it("says which socket is missing for an unknown fd: or systemd: name", function()
    local port = h.fixed_port()
    local _, log = background(("systemd-socket-activate -l 127.0.0.1:%d --fdname=web %s %s x=systemd:nope")
      :format(port, h.COHOST, q(h.tmpfile(SERVER))))
    h.wait_port(port, log)   -- a connection makes it exec cohost, which fails
    assert.is_true(h.wait_for(function()
      return h.slurp(log):find("no such socket passed by systemd", 1, true)
    end, 20), h.slurp(log))
  end)
end)

-- A fake NOTIFY_SOCKET: returns its path and a function giving the
-- messages received so far (a list of strings).
local READER = [[
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[1] + ".up", "w").close()
with open(sys.argv[2], "a") as out:
    while True:
        msg = s.recv(4096).decode()
        out.write(msg.replace("\n", "|") + "\n")
        out.flush()
]]
local function notify_socket()
  local dir = h.tmpdir()
  local path, out = dir .. "/notify", dir .. "/messages"
  h.write_file(out, "")
  background(("%s %s %s %s"):format(h.PYTHON, q(h.tmpfile(READER)), q(path), q(out)))
  assert.is_true(h.wait_for(function() return h.try_slurp(path .. ".up") end, 10))
  return path, function()
    local list = {}
    for line in h.slurp(out):gmatch("[^\n]+") do list[#list + 1] = line end
    return list
  end
end

-- Index of the first message after `after` that starts with prefix.
local function find(list, prefix, after)
  for i = (after or 0) + 1, #list do
    if list[i]:sub(1, #prefix) == prefix then return i end
  end
end

describe("sd_notify", function()
  it("says READY, RELOADING then READY, STOPPING and STATUS under --processes, and pings the watchdog", function()
    local path, messages = notify_socket()
    local port = h.fixed_port()
    local pid = background(("env NOTIFY_SOCKET=%s WATCHDOG_USEC=400000 %s --processes 2 %s a=127.0.0.1:%d")
      :format(q(path), h.COHOST, q(h.tmpfile(SERVER)), port))
    local ready
    assert.is_true(h.wait_for(function() ready = find(messages(), "READY=1"); return ready end, 20))
    assert.truthy(messages()[ready]:find("MAINPID=" .. pid, 1, true), messages()[ready])
    assert.truthy(messages()[ready]:find("STATUS=serving", 1, true), messages()[ready])
    os.execute("kill -HUP " .. pid)
    local reloading, again
    assert.is_true(h.wait_for(function()
      reloading = find(messages(), "RELOADING=1", ready)
      again = reloading and find(messages(), "READY=1", reloading)
      return again
    end, 20), table.concat(messages(), "\n"))
    assert.truthy(messages()[reloading]:find("MONOTONIC_USEC=%d+"), messages()[reloading])
    assert.is_true(h.wait_for(function() return find(messages(), "WATCHDOG=1", again) end, 20))
    os.execute("kill -TERM " .. pid)
    assert.is_true(h.wait_for(function() return find(messages(), "STOPPING=1", again) end, 20))
  end)

  it("says READY and STOPPING without a master, and keeps NOTIFY_SOCKET from the script", function()
    local path, messages = notify_socket()
    local script = h.tmpfile([[
local f = io.open(arg[1], "w")
f:write(tostring(os.getenv("NOTIFY_SOCKET")), " ", tostring(os.getenv("LISTEN_FDS")))
f:close()
]] .. SERVER)
    local env_out = h.tmppath()
    local port = h.fixed_port()
    local pid = background(("env NOTIFY_SOCKET=%s %s %s %s a=127.0.0.1:%d")
      :format(q(path), h.COHOST, q(script), q(env_out), port))
    assert.is_true(h.wait_for(function() return find(messages(), "READY=1") end, 20))
    assert.equal("nil nil", h.slurp(env_out))
    os.execute("kill -TERM " .. pid)
    assert.is_true(h.wait_for(function() return find(messages(), "STOPPING=1") end, 20))
  end)
end)

describe("scripts/systemd", function()
  it("sends SIGUSR1 for log rotation to the master alone, in the unit's comment as in logrotate.conf", function()
    -- docs/deploy.md: the master reopens its logs and passes the signal
    -- on to every worker process. Without --kill-whom=main, systemctl
    -- kill signals every process of the unit.
    local n = 0
    for _, file in ipairs { "cohost.service", "logrotate.conf" } do
      for line in h.slurp(h.root .. "scripts/systemd/" .. file):gmatch("[^\n]+") do
        if line:find("systemctl kill", 1, true) then
          n = n + 1
          assert.truthy(line:find("-s USR1 --kill-whom=main", 1, true), file .. ": " .. line)
        end
      end
    end
    assert.equal(2, n)
  end)
end)
