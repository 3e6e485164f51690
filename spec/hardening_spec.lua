-- Hardening against hostile and broken clients (issue 7's acceptance
-- criteria): slowloris, a client that never reads, running out of file
-- descriptors, and clients resetting mid-upload. Every test runs
-- spec/hardening/server.lua as a child (h.start) on 127.0.0.1 and watches
-- it from outside: /proc/PID (fds, RSS, CPU time) and its /stats route
-- (cohost.stats()'s coroutines and connections). Real peers: slowhttptest,
-- python3 (spec/hardening/*.py), prlimit; normal clients are cohost.tcp.
local cohost = require "cohost"

local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

local SERVER = h.root .. "spec/hardening/server.lua"
local PY = h.root .. "spec/hardening/"

-- The server with these header and send timeouts (seconds), stopped
-- after the test.
local function start(header_timeout, send_timeout)
  local p = h.start(("%s %s %s"):format(q(SERVER), header_timeout, send_timeout), 60)
  defer(p.stop)
  return p
end

-- One request on a new connection (Connection: close); returns the status
-- and the body, or nil and the error. 2 s unless timeout_ms: a normal
-- client's request slower than that under attack counts as failed.
local function get(port, path, timeout_ms)
  return h.get_to_close(port, path, { timeout = timeout_ms or 2000 })
end

-- The server's live coroutines and open connections (its /stats route;
-- the request's own coroutine and connection are in both, every time).
local function stats(port)
  local status, body = get(port, "/stats")
  assert(status == 200, body)
  local coros, conns = body:match("^(%d+) (%d+)$")
  return tonumber(coros), tonumber(conns)
end

local function fd_count(pid)
  local f = assert(io.popen("ls /proc/" .. pid .. "/fd | wc -l"))
  local n = tonumber(f:read("*a"))
  f:close()
  return n
end

local function rss_kb(pid)
  return tonumber(h.slurp("/proc/" .. pid .. "/status"):match("VmRSS:%s*(%d+)"))
end

-- utime + stime of the process, in clock ticks (fields 14 and 15, counted
-- after the parenthesised name).
local function cpu_ticks(pid)
  local rest = h.slurp("/proc/" .. pid .. "/stat"):match("%) (.*)$")
  local f = {}
  for w in rest:gmatch("%S+") do f[#f + 1] = w end
  return tonumber(f[12]) + tonumber(f[13])   -- fields 14, 15 of the line
end

local CLK_TCK = (function()
  local f = io.popen("getconf CLK_TCK")
  local n = tonumber(f:read("*a"))
  f:close()
  return n or 100
end)()

-- Runs a shell command in the background, bounded by timeout(1) at limit
-- seconds; returns done() -> exit code or nil, and output() -> its stdout
-- and stderr so far. Killed (if still running) and cleaned up after the
-- test.
local function background(cmd, limit)
  local out, rc = h.tmpfile(), os.tmpname()
  os.remove(rc)
  local pidfile = h.tmpfile()
  os.execute(("(timeout -s KILL %d %s >%s 2>&1 & echo $! >%s; wait $!; echo $? >%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
    :format(limit, cmd, out, pidfile, rc, rc, rc))
  local job = {}
  function job.done() return tonumber(h.try_slurp(rc) or "") end
  function job.output() return h.slurp(out) end
  function job.wait(secs)
    local t0 = cohost.monotonic()
    while not job.done() and cohost.monotonic() - t0 < secs do cohost.sleep(0.05) end
    return job.done()
  end
  defer(function()
    local pid = tonumber(h.try_slurp(pidfile) or "")
    if pid and not job.done() then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
    job.wait(5)
    os.remove(rc)
  end)
  return job
end

-- The polling period of waits: a check here costs a request, ls and
-- /proc reads, beside a server under attack.
local POLL = 0.05

-- HARDENING_VERBOSE=1 in the environment prints the figures measured.
local function note(fmt, ...)
  if os.getenv("HARDENING_VERBOSE") then io.stderr:write(fmt:format(...), "\n") end
end

describe("hardening: slowloris", function()
  -- Without the header deadline a client sending one byte of its head
  -- every 0.5 s would keep its connection (and its coroutine) as long as
  -- it likes: 60 s by default, forever with no deadline at all. Here the
  -- drip goes on for 10 s and the test fails unless the server answers 408
  -- and closes near the 2 s deadline.
  it("answers 408 and closes a client dripping its head, at the header timeout", function()
    local p = start(2, 60)
    local s = h.connect(p.port, 500)
    local t0 = cohost.monotonic()
    assert(s:send("GET / HTTP/1.1\r\nHost: hardening\r\n"))
    local drip = "X-Drip: " .. ("d"):rep(40)
    local got, closed_at = "", nil
    for i = 1, #drip do
      s:send(drip:sub(i, i))   -- fails once the server has closed: fine
      local data, err, partial = s:receive("*a")   -- at most 0.5 s
      if data then
        got, closed_at = got .. data, cohost.monotonic() - t0
        break
      end
      got = got .. (partial or "")
      if err ~= "timeout" then
        closed_at = cohost.monotonic() - t0
        break
      end
    end
    s:close()
    note("drip: closed after %s s", tostring(closed_at))
    assert.is_not_nil(closed_at, "still open after 10 s of dripping; got: " .. got)
    assert.matches("^HTTP/1%.1 408 Request Timeout\r\n", got)
    assert.matches("\r\nConnection: close\r\n", got)
    assert.is_true(closed_at >= 1.5 and closed_at < 4, "closed after " .. closed_at .. " s")
  end)

  -- Without the per-connection state being small (an fd and a parked
  -- coroutine) and the header reads being non-blocking, 500 slowloris
  -- connections would exhaust a thread or process pool (Apache's classic
  -- failure) and normal clients would wait or fail. The header timeout is
  -- 30 s here so that the 500 stay open through the whole attack.
  it("keeps serving normal clients through slowhttptest -H with 500 connections", function()
    local p = start(30, 60)
    local slow = background(("slowhttptest -H -c 500 -r 500 -i 1 -x 24 -l 12 -p 3 -u %s")
      :format(q("http://127.0.0.1:" .. p.port .. "/")), 30)
    -- The attack is on: most of its connections are open at the server.
    local _, base_conns = stats(p.port)
    local peak = 0
    local up = h.wait_for(function()
      local _, conns = stats(p.port)
      peak = math.max(peak, conns)
      return conns >= base_conns + 400
    end, 8, POLL)
    assert.is_true(up, ("slowhttptest never held 400 connections (peak %d): %s"):format(peak, slow.output()))
    -- A normal client, one connection per request, for 6 s.
    local lat, failures = {}, {}
    local t_end = cohost.monotonic() + 6
    while cohost.monotonic() < t_end do
      local t0 = cohost.monotonic()
      local status, body = get(p.port, "/", 2000)
      local dt = cohost.monotonic() - t0
      if status == 200 and body == "ok" then
        lat[#lat + 1] = dt
      else
        failures[#failures + 1] = tostring(body or status)
      end
      cohost.sleep(0.01)
    end
    local _, conns = stats(p.port)
    assert.is_true(conns >= base_conns + 400, "the attack ended before the normal client did: " .. conns)
    assert.is_nil(slow.done(), "slowhttptest ended early: " .. slow.output())
    slow.wait(20)
    assert.same({}, failures)
    assert.is_true(#lat >= 100, "only " .. #lat .. " requests in 6 s")
    table.sort(lat)
    local median, p99 = h.percentile(lat, 0.5), h.percentile(lat, 0.99)
    note("slowloris: %d requests, median %.2f ms, p99 %.2f ms, max %.2f ms, peak connections %d",
      #lat, median * 1000, p99 * 1000, lat[#lat] * 1000, conns)
    -- A request on loopback takes well under a millisecond; 50 ms at the
    -- 99th percentile holds on this noisy 2-core VM with slowhttptest, the
    -- server and this spec sharing the CPUs, also while other busy loops
    -- run (they can take a 10+ ms time slice now and then).
    assert.is_true(median < 0.01, ("median %.1f ms"):format(median * 1000))
    assert.is_true(p99 < 0.05, ("p99 %.1f ms"):format(p99 * 1000))
    assert.is_nil(p.exited())
  end)
end)


describe("hardening: slow read", function()
  -- Without the send timeout a client that asks for 8 MiB and never reads
  -- keeps its connection, and the response it pins, forever; without
  -- writing straight from the handler's string (an output buffer copying
  -- the body instead), each such client would also cost 8 MiB of RSS.
  it("closes a client that never reads an 8 MiB answer at the send timeout, RSS flat, others served", function()
    local p = start(60, 2)
    for _ = 1, 3 do assert.equal(200, (get(p.port, "/"))) end
    local base_fds, base_rss = fd_count(p.pid), rss_kb(p.pid)
    local reader = background(("python3 %s %d 7 keep"):format(q(PY .. "slow_read.py"), p.port), 20)
    assert.is_true(h.wait_for(function() return reader.output():find("sent") end, 5, POLL), reader.output())
    local t0 = cohost.monotonic()
    -- The slow client is connected and its answer is stuck.
    assert.is_true(h.wait_for(function() return fd_count(p.pid) > base_fds end, 10, POLL))
    local max_rss, served, closed_at = base_rss, 0, nil
    -- 6 s, or longer (20 s at most) until 20 others were served: on a
    -- loaded machine each round (a request, ls, /proc) can take a while.
    while cohost.monotonic() - t0 < 6 or (served < 20 and cohost.monotonic() - t0 < 20) do
      max_rss = math.max(max_rss, rss_kb(p.pid))
      local status = get(p.port, "/", 1000)
      assert.equal(200, status)
      served = served + 1
      if not closed_at and fd_count(p.pid) == base_fds then closed_at = cohost.monotonic() - t0 end
      cohost.sleep(0.1)
    end
    note("slow read: closed after %s s, RSS +%d KiB, %d others served", tostring(closed_at), max_rss - base_rss, served)
    assert.is_true(served >= 20)
    assert.is_true(max_rss - base_rss < 2048, ("RSS grew by %d KiB"):format(max_rss - base_rss))
    assert.is_not_nil(closed_at, "the slow reader's connection is still open 6 s after its request")
    assert.is_true(closed_at < 4.5, "closed after " .. closed_at .. " s")
    -- The client then reads: a cut answer, then the end of the connection.
    assert.equal(0, reader.wait(15))
    local got, how = reader.output():match("got=(%d+) end=(%a+)")
    assert.is_not_nil(got, reader.output())
    assert.is_true(tonumber(got) < 8 * 1024 * 1024, "the whole answer came: " .. got)
    assert.is_true(how == "eof" or how == "reset", how)
  end)
end)

describe("hardening: out of file descriptors", function()
  -- Linux's accept says EMFILE before looking at the queue, so without the
  -- reserved fd a full table leaves connections pending forever (clients
  -- hang) and the acceptor, woken again and again by the same queue, spins
  -- at 100% CPU. With it, each pending connection is accepted and closed
  -- at once: the client gets EOF, the CPU stays idle.
  it("serves or closes 200 connections at once under prlimit --nofile=64, without spinning, and recovers", function()
    local p = start(60, 60)
    local r = os.execute(("prlimit --pid %d --nofile=64:64"):format(p.pid))
    assert.is_true(r == 0 or r == true, "prlimit failed")
    assert.equal(200, (get(p.port, "/")))
    -- 200 clients at once, each asking one keep-alive request; the served
    -- ones keep their connection open, filling the server's fd table.
    local held = {}
    local outcomes = h.run_all(200, function(i)
      local s = cohost.tcp()
      s:settimeout(5000)
      local ok, err = s:connect("127.0.0.1", p.port)
      if not ok then return "connect " .. err end
      ok, err = s:send("GET / HTTP/1.1\r\nHost: hardening\r\n\r\n")
      if not ok then s:close() return "closed" end
      local line
      line, err = s:receive("*l")
      if line == "HTTP/1.1 200 OK" then
        held[i] = s
        return "served"
      end
      s:close()
      if err == "closed" or (err and err:find("reset")) then return "closed" end
      return tostring(line or err)
    end)
    defer(function() for _, s in pairs(held) do s:close() end end)
    local count = {}
    for _, o in ipairs(outcomes) do count[o] = (count[o] or 0) + 1 end
    local n_served, n_closed = count.served or 0, count.closed or 0
    assert.equal(200, n_served + n_closed, require("cjson").encode(count))
    assert.is_true(n_served > 10 and n_served < 64, "served " .. n_served)
    assert.is_true(n_closed > 100, "closed " .. n_closed)
    assert.is_true(fd_count(p.pid) >= 60, "fds " .. fd_count(p.pid))
    -- Saturated: the table is full and a client keeps connecting (about
    -- 100 a second), each of which must end with EOF, not hang. The
    -- server's CPU time over 1.5 s stays under 5%.
    local stop, attempts, hangs = false, 0, 0
    local pest = cohost.spawn(function()
      while not stop do
        local s = cohost.tcp()
        s:settimeout(2000)
        if s:connect("127.0.0.1", p.port) then
          s:send("GET / HTTP/1.1\r\nHost: hardening\r\n\r\n")
          local _, err = s:receive("*l")
          if err == "timeout" then hangs = hangs + 1 end
          attempts = attempts + 1
        end
        s:close()
        cohost.sleep(0.01)
      end
    end)
    cohost.sleep(0.2)
    local c0, t0 = cpu_ticks(p.pid), cohost.monotonic()
    cohost.sleep(1.5)
    -- At least 50 attempts in the window, however long a loaded machine
    -- makes them take (each one needs the server to run).
    h.eventually(function() return attempts >= 50 end, 15)
    local cpu = (cpu_ticks(p.pid) - c0) / CLK_TCK / (cohost.monotonic() - t0)
    stop = true
    cohost.wait(pest)
    note("nofile: served %d closed %d; saturated: %d attempts, %d hangs, CPU %.1f%%",
      n_served, n_closed, attempts, hangs, cpu * 100)
    assert.is_true(attempts >= 50, "attempts " .. attempts)
    assert.equal(0, hangs)
    assert.is_true(cpu < 0.05, ("server CPU %.1f%% while saturated"):format(cpu * 100))
    -- Recovery: the held connections close; new requests succeed.
    for i, s in pairs(held) do s:close(); held[i] = nil end
    assert.is_true(h.wait_for(function() return get(p.port, "/", 1000) == 200 end, 3, POLL))
    for _ = 1, 30 do assert.equal(200, (get(p.port, "/", 1000))) end
    assert.is_nil(p.exited())
  end)
end)

describe("hardening: resets mid-upload", function()
  -- Without closing on a reset read and freeing the connection's state on
  -- every path out of a body read, each reset upload would leave an fd, a
  -- parked coroutine and its stack behind (until the 60 s body timeout at
  -- best): 1000 of them would show as 1000 fds and coroutines above the
  -- baseline.
  it("stays up and returns to its fd and coroutine baseline after 1000 clients reset mid-upload", function()
    local p = start(60, 60)
    for _ = 1, 3 do assert.equal(200, (get(p.port, "/"))) end
    local base_coros, base_conns = stats(p.port)
    local base_fds = fd_count(p.pid)
    local job = background(("python3 %s %d 1000 100"):format(q(PY .. "reset_upload.py"), p.port), 40)
    assert.equal(0, job.wait(40), job.output())
    local out = job.output()
    local attempts, errors, peak_coros, peak_conns =
      out:match("attempts=(%d+) errors=(%d+) peak_coros=(%d+) peak_conns=(%d+)")
    assert.equal("1000", attempts, out)
    assert.equal("0", errors, out)
    -- The uploads were in flight together: their coroutines and
    -- connections showed in the server's figures.
    assert.is_true(tonumber(peak_coros) >= base_coros + 50, out)
    assert.is_true(tonumber(peak_conns) >= base_conns + 50, out)
    local coros, conns, fds
    local t0 = cohost.monotonic()
    local back = h.wait_for(function()
      coros, conns = stats(p.port)
      fds = fd_count(p.pid)
      return coros == base_coros and conns == base_conns and fds == base_fds
    end, 15, POLL)
    local took = cohost.monotonic() - t0
    assert.is_true(back, ("not back to the baseline: coros %d/%d conns %d/%d fds %d/%d")
      :format(coros, base_coros, conns, base_conns, fds, base_fds))
    note("resets: %s; back to baseline after %.2f s", out:gsub("\n", ""), took)
    -- Usually at once; the bound (the wait's 15 s, well below the 60 s
    -- body timeout that would otherwise free them) is loose for a loaded
    -- machine, where the server's closes can lag behind the clients'.
    assert.is_nil(p.exited())
    assert.equal(200, (get(p.port, "/")))
  end)
end)
