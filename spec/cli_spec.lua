-- The cohost program, black box: options, exit codes, the arg table,
-- SIGTERM drain, error isolation between handlers, workers and the log
-- format. Every test starts build/cohost as a child process (bounded by
-- timeout(1)) with its output in temp files; servers listen on 127.0.0.1
-- port 0 and print "port pid" so this spec can reach and signal them.
local cohost = require "cohost"

local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q, tmpfile, run = h.shell_quote, h.tmpfile, h.run

-- Starts `build/cohost <args>` in the background (see h.start), stopped
-- after the test.
local function start(args)
  local p = h.start(args)
  defer(p.stop)
  return p
end

local function connect(port)
  return h.connect(port, 5000)
end

describe("cohost options", function()
  it("-v and --version print the version and exit 0", function()
    for _, opt in ipairs { "-v", "--version" } do
      local code, out = run(opt)
      assert.equal(0, code)
      assert.matches("^cohost " .. cohost.version:gsub("%.", "%%.") .. " %(LuaJIT [^)]+%)\n$", out)
    end
  end)

  it("-h and --help print the usage with every option and exit 0", function()
    for _, opt in ipairs { "-h", "--help" } do
      local code, out = run(opt)
      assert.equal(0, code)
      assert.matches("^usage: cohost %[options%] script%.lua %[args%.%.%.%]", out)
      for _, name in ipairs { "--workers", "--stack-size", "--max-connections", "--shutdown-timeout",
                              "--log-level", "-e CHUNK", "--check", "--version", "--help",
                              "--processes", "--shdict", "--stack-mode", "--lua-memory-limit",
                              "--cpu-watchdog", "--cpu-affinity", "--status-addr" } do
        assert.truthy(out:find(name, 1, true), name .. " missing from the usage")
      end
    end
  end)

  it("without a script or -e prints the usage on stderr and exits 2", function()
    local code, out, err = run("")
    assert.equal(2, code)
    assert.equal("", out)
    assert.matches("^usage: cohost", err)
  end)

  it("rejects an unknown option with exit code 2", function()
    local code, _, err = run("--no-such-option x.lua")
    assert.equal(2, code)
    assert.truthy(err:find("--no-such-option", 1, true), err)
  end)

  it("--check on a good file says so, exits 0 and does not run it", function()
    local marker = tmpfile()
    os.remove(marker)
    local script = tmpfile(("io.open(%q, 'w'):close()\nprint('ran')\n"):format(marker))
    local code, out = run("--check " .. q(script))
    assert.equal(0, code)
    assert.equal("cohost: " .. script .. ": syntax OK\n", out)
    assert.is_nil(io.open(marker))
  end)

  it("--check on a file with a syntax error prints file:line and exits 1", function()
    local script = tmpfile("local x = 1\nlocal y = = 2\n")
    local code, out, err = run("--check " .. q(script))
    assert.equal(1, code)
    assert.equal("", out)
    assert.truthy(err:find(script .. ":2:", 1, true), err)
  end)

  it("-e CHUNK runs the chunk", function()
    local code, out = run("-e " .. q("print(1 + 2)"))
    assert.equal(0, code)
    assert.equal("3\n", out)
  end)

  it("runs several -e chunks in order, before the script, in the same globals", function()
    local script = tmpfile("print(X)\n")
    local code, out = run("-e 'X = 1' -e 'X = X * 10' " .. q(script))
    assert.equal(0, code)
    assert.equal("10\n", out)
  end)

  it("sets arg like luajit: arg[0] the script, arg[1..] its arguments, arg[-n] what came before", function()
    local script = tmpfile([[
print(arg[-3], arg[-2], arg[-1], arg[0], arg[1], arg[2], #arg)
print(select("#", ...), ...)
]])
    local code, out = run("-e 'Y = 1' " .. q(script) .. " first 'sec ond'")
    assert.equal(0, code)
    assert.equal(table.concat({ h.COHOST, "-e", "Y = 1", script, "first", "sec ond", "2" }, "\t") .. "\n"
                 .. "2\tfirst\tsec ond\n", out)
  end)
end)

describe("the cohost process", function()
  it("exits by itself with 0 when the script leaves no listener and no coroutine", function()
    local script = tmpfile("print('hello')\n")
    local code, out, err, took = run(q(script))
    assert.equal(0, code, err)
    assert.equal("hello\n", out)
    assert.is_true(took < 2, ("took %.2f s"):format(took))
  end)

  it("waits for coroutines still running before it exits", function()
    local script = tmpfile([[
local cohost = require "cohost"
cohost.spawn(function() cohost.sleep(0.3); print("late") end)
print("main done")
]])
    local code, out, _, took = run(q(script))
    assert.equal(0, code)
    assert.equal("main done\nlate\n", out)
    assert.is_true(took >= 0.28, ("took %.2f s"):format(took))
  end)

  it("exits 1 on an uncaught error in the main chunk, with file:line: message and a traceback on stderr", function()
    local script = tmpfile([[
local function fail() error("main chunk fails on purpose") end
fail()
]])
    local code, out, err = run(q(script))
    assert.equal(1, code)
    assert.equal("", out)
    assert.truthy(err:find(script .. ":1: main chunk fails on purpose", 1, true), err)
    assert.truthy(err:find("stack traceback:", 1, true), err)
    assert.truthy(err:find(script .. ":2:", 1, true), err)   -- the caller's frame
  end)

  it("exits 1 when the script does not compile or does not exist", function()
    local bad = tmpfile("if then\n")
    local code, _, err = run(q(bad))
    assert.equal(1, code)
    assert.truthy(err:find(bad .. ":1:", 1, true), err)
    local missing = tmpfile()
    os.remove(missing)
    code, _, err = run(q(missing))
    assert.equal(1, code)
    assert.truthy(err:find(missing, 1, true), err)
  end)

  it("cohost.exit(3) exits 3 at once, with stdout flushed, even with a listener and a sleeping coroutine", function()
    local script = tmpfile([[
local cohost = require "cohost"
assert(cohost.listen("127.0.0.1:0", function() end))
cohost.spawn(function() cohost.sleep(30) end)
io.write("before exit")
cohost.sleep(0.05)
cohost.exit(3)
print("never")
]])
    local code, out, _, took = run(q(script))
    assert.equal(3, code)
    assert.equal("before exit", out)
    assert.is_true(took < 2, ("took %.2f s"):format(took))
  end)

  it("serves examples/echo.lua on a free port", function()
    local port = h.free_port()
    -- The -e chunk prints "port pid" before the example starts.
    local p = start("-e " .. q([[io.write(arg[1], " ", io.open("/proc/self/stat"):read("*n"), "\n") io.stdout:flush()]])
                    .. " " .. q(h.root .. "examples/echo.lua") .. " " .. port)
    local s = h.connect_retry(port, 1000, 4)
    assert.truthy(s, "examples/echo.lua never listened: " .. h.slurp(p.err))
    assert(s:send("echo me\n"))
    assert.equal("echo me", s:receive())
    s:close()
    p.signal("TERM")
    assert.equal(0, (p.wait(10)))
  end)
end)

describe("SIGTERM", function()
  local slow_server = h.server_script([[
listener = assert(cohost.listen("127.0.0.1:0", function(sock)
  local line = sock:receive()
  if not line then return end   -- a probe of wait_refused
  sock:send("busy\n")
  cohost.sleep(SLEEP)
  sock:send("reply to " .. line .. "\n")
end))
]])

  -- Starts slow_server with options opts and sends it a request; returns
  -- the process and the connection once the handler says it is busy with
  -- the request (a fixed sleep raced with a loaded child: a signal that
  -- came before the accept dropped the connection with the listener).
  local function start_busy(opts)
    local p = start(opts .. " " .. q(tmpfile(slow_server)))
    local s = connect(p.port)
    assert(s:send("req\n"))
    assert.equal("busy", s:receive())
    return p, s
  end

  -- Waits (5 s at most) until a new connection to port is refused: the
  -- listener has closed, so the process has handled a stop signal. A
  -- connect that meets the listener while it closes is reset instead (the
  -- kernel drops its half-open queue): that is not the end state yet.
  local function wait_refused(port)
    local t0, err = cohost.monotonic()
    repeat
      local s2 = cohost.tcp()
      s2:settimeout(1000)
      local ok
      ok, err = s2:connect("127.0.0.1", port)
      s2:close()
      if not ok and err ~= "connection reset by peer" then break end
      cohost.sleep(0.02)
    until cohost.monotonic() - t0 > 5
    return err
  end

  it("lets an in-flight request finish, stops accepting, and exits 0", function()
    local p, s = start_busy("-e 'SLEEP = 1'")   -- the handler is now sleeping
    local t0 = cohost.monotonic()
    p.signal("TERM")
    -- The listener is closed: a new connection is refused.
    assert.equal("connection refused", wait_refused(p.port))
    -- The request in flight still gets its reply.
    assert.equal("reply to req", s:receive())
    s:close()
    local code = p.wait(10)
    local took = cohost.monotonic() - t0
    assert.equal(0, code, h.slurp(p.err))
    assert.is_true(took >= 0.6 and took < 5, ("exited %.2f s after SIGTERM"):format(took))
  end)

  it("cancels handlers still running at --shutdown-timeout and exits 0", function()
    local p, s = start_busy("--shutdown-timeout 1 -e 'SLEEP = 60'")
    local t0 = cohost.monotonic()
    p.signal("TERM")
    local data, err = s:receive()
    s:close()
    local code = p.wait(10)
    local took = cohost.monotonic() - t0
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal(0, code, h.slurp(p.err))
    assert.is_true(took >= 0.9 and took < 4, ("exited %.2f s after SIGTERM"):format(took))
  end)

  -- A script that loops forever after listening (a ticker, a poller) has
  -- its main chunk cancelled by the shutdown timeout: that is the stop the
  -- operator asked for, so the exit code is still 0 (it was 1 before).
  it("exits 0 when the timeout cancels a main chunk that never returns", function()
    local looping = h.server_script([[
listener = assert(cohost.listen("127.0.0.1:0", function(sock) sock:close() end))
]]):gsub("io.stdout:flush%(%)", "io.stdout:flush()\nwhile true do cohost.sleep(0.05) end")
    local p = start("--shutdown-timeout 1 " .. q(tmpfile(looping)))
    local t0 = cohost.monotonic()
    p.signal("TERM")
    local code = p.wait(10)
    local took = cohost.monotonic() - t0
    assert.equal(0, code, h.slurp(p.err))
    assert.matches("shutdown timeout: cancelling 1 task", h.slurp(p.err))
    assert.is_true(took >= 0.9 and took < 4, ("exited %.2f s after SIGTERM"):format(took))
  end)

  it("still works after idle workers have ended (their schedulers are gone)", function()
    -- Workers 1-3 run a main chunk that does nothing and end at once; the
    -- signal must reach worker 0 only, never a freed scheduler.
    local script = [[
local cohost = require "cohost"
if cohost.worker_id() == 0 then
  local l = assert(cohost.listen("127.0.0.1:0", function(sock) sock:send("hi\n") end))
  local _, port = l:addr()
  io.write(port, " ", io.open("/proc/self/stat"):read("*n"), "\n")
  io.stdout:flush()
end
]]
    local p = start("-w 4 " .. q(tmpfile(script)))
    local s = connect(p.port)
    assert.equal("hi", s:receive())
    s:close()
    cohost.sleep(0.2)
    p.signal("TERM")
    assert.equal(0, (p.wait(10)), h.slurp(p.err))
  end)

  it("SIGINT drains the same way", function()
    local p, s = start_busy("-e 'SLEEP = 0.5'")
    p.signal("INT")
    assert.equal("reply to req", s:receive())
    s:close()
    assert.equal(0, (p.wait(10)))
  end)

  it("a second signal ends the process at once", function()
    local p, s = start_busy("--shutdown-timeout 30 -e 'SLEEP = 60'")
    p.signal("TERM")
    -- Two signals sent before the first is handled may merge into one.
    assert.equal("connection refused", wait_refused(p.port))
    local t0 = cohost.monotonic()
    p.signal("TERM")
    local code = p.wait(5)
    s:close()
    assert.is_not_nil(code, "still running 5 s after the second signal")
    assert.is_true(cohost.monotonic() - t0 < 2)
  end)
end)

describe("handler errors", function()
  it("a Lua error in one of 100 concurrent handlers leaves the other 99 intact, and is logged with a traceback", function()
    local p = start(q(tmpfile(h.server_script([[
local function check(n)
  if n == 37 then error("handler 37 fails on purpose") end
end
listener = assert(cohost.listen("127.0.0.1:0", function(sock)
  local line = sock:receive()
  cohost.sleep(0.2)
  check(tonumber(line))
  sock:send("ok " .. line .. "\n")
end))
]]))))
    local threads = {}
    for i = 1, 100 do
      threads[i] = cohost.spawn(function()
        local s = connect(p.port)
        s:send(i .. "\n")
        local line, err = s:receive()
        s:close()
        return line or err
      end)
    end
    for i = 1, 100 do
      local ok, res = cohost.wait(threads[i])
      assert.is_true(ok, res)
      assert.equal(i == 37 and "closed" or "ok " .. i, res)
    end
    -- The server still serves new connections.
    local s = connect(p.port)
    s:send("101\n")
    assert.equal("ok 101", s:receive())
    s:close()
    p.signal("TERM")
    assert.equal(0, (p.wait(10)))
    local log = h.slurp(p.err)
    local _, count = log:gsub("handler 37 fails on purpose", "")
    assert.equal(1, count, log)
    assert.matches("%[error%][^\n]*:3: handler 37 fails on purpose\nstack traceback:\n", log)
    assert.truthy(log:find("in function 'check'", 1, true) or log:find("in upvalue 'check'", 1, true)
                  or log:find("in local 'check'", 1, true), log)
  end)
end)

describe("--workers", function()
  local script = h.server_script([[
listener = assert(cohost.listen("127.0.0.1:0", function(sock)
  sock:send(cohost.worker_id() .. "/" .. cohost.worker_count() .. "\n")
end))
]])

  it("2 runs the main chunk once per worker, and port 0 gives both the same port", function()
    local p = start("--workers 2 " .. q(tmpfile(script)))
    local lines
    h.eventually(function()
      lines = {}
      for line in h.slurp(p.out):gmatch("[^\n]+") do lines[#lines + 1] = line end
      return #lines >= 2
    end)
    assert.equal(2, #lines)
    assert.equal(lines[1], lines[2])
    p.signal("TERM")
    assert.equal(0, (p.wait(10)))
  end)

  it("2 spreads connections over both workers", function()
    local p = start("-w 2 " .. q(tmpfile(script)))
    local seen = {}
    for _ = 1, 200 do
      local s = connect(p.port)
      local id = s:receive()
      s:close()
      seen[id] = (seen[id] or 0) + 1
    end
    assert.is_true((seen["0/2"] or 0) > 0, "worker 0 got no connection")
    assert.is_true((seen["1/2"] or 0) > 0, "worker 1 got no connection")
    assert.equal(200, (seen["0/2"] or 0) + (seen["1/2"] or 0))
    p.signal("TERM")
    assert.equal(0, (p.wait(10)))
  end)
end)

describe("logging", function()
  it("writes time, level, pid, generation, worker, coroutine id and the Lua call site before the message", function()
    local script = tmpfile([[
local cohost = require "cohost"

cohost.log(cohost.WARN, "hello ", 42, " ", true)
cohost.wait(cohost.spawn(function() cohost.log("warn", "from a thread") end))
]])
    local code, _, err = run(q(script))
    assert.equal(0, code, err)
    local lines = {}
    for line in err:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.equal(2, #lines, err)
    local pattern = "^(%d%d%d%d)/(%d%d)/(%d%d) (%d%d):(%d%d):(%d%d) %[warn%] pid=%d+ gen=0 w0 c(%d+): (.*)$"
    local y, mo, d, h, mi, s, c1, rest = lines[1]:match(pattern)
    assert.truthy(y, lines[1])
    assert.equal(script .. ":3: hello 42 true", rest)
    local stamp = os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = s }
    assert.is_true(math.abs(os.time() - stamp) < 30, "the time is not now")
    local _, _, _, _, _, _, c2, rest2 = lines[2]:match(pattern)
    assert.equal(script .. ":4: from a thread", rest2)
    assert.are_not.equal(c1, c2)   -- another coroutine
  end)

  it("--log-level chooses which levels are written (default notice)", function()
    local chunk = q([[
local cohost = require "cohost"
cohost.log(cohost.ERR, "E") cohost.log(cohost.WARN, "W") cohost.log(cohost.NOTICE, "N")
cohost.log(cohost.INFO, "I") cohost.log(cohost.DEBUG, "D")
]])
    local function levels(opts)
      local code, _, err = run(opts .. " -e " .. chunk)
      assert.equal(0, code, err)
      local got = {}
      for msg in err:gmatch(":%d+: (%u)\n") do got[#got + 1] = msg end
      return table.concat(got)
    end
    assert.equal("EWN", levels(""))
    assert.equal("E", levels("--log-level err"))
    assert.equal("EWNID", levels("--log-level debug"))
    assert.equal("EWNI", levels("--log-level=info"))
  end)
end)

describe("programs a script starts", function()
  it("do not inherit SIGINT and SIGTERM blocked", function()
    local code, out, err = run("-e " .. q([[os.execute("exec grep SigBlk /proc/self/status")]]))
    assert.equal(0, code, err)
    local mask = out:match("SigBlk:%s*(%x+)")
    assert.truthy(mask, out)
    local low = tonumber(mask:sub(-8), 16)
    assert.equal(0, bit.band(low, bit.lshift(1, 2 - 1)), "SIGINT is blocked in the child: " .. mask)
    assert.equal(0, bit.band(low, bit.lshift(1, 15 - 1)), "SIGTERM is blocked in the child: " .. mask)
  end)
end)
