-- Reload, drain and restart of worker processes under load (docs/processes.md):
-- SIGHUP and SIGTERM to the master while wrk keeps 50 keep-alive connections
-- busy, a handler that outlives --shutdown-timeout, and a worker process
-- killed with SIGKILL. spec/process_spec.lua covers the same semantics
-- without load. The server is build/cohost started as a child (h.start),
-- the load is Debian's wrk in the background (bounded by timeout(1)), and
-- the requests we check one by one go through cohost.tcp.
local cohost = require "cohost"

local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- The server: answers ANSWER pid=P. /slow/N creates DIR/N (the test then
-- knows request N is in flight), sleeps SLOW seconds and answers a 64 KiB
-- body; /park creates DIR/park and sleeps 60 s. Worker 0 prints "port pid"
-- with the master's pid if there is a master (its parent is a cohost).
local function script(answer, dir, slow)
  return ([[
local cohost = require "cohost"
local http = require "cohost.http"
local port, answer, dir, slow = tonumber(arg[1]), %q, %q, %s
local pid = io.open("/proc/self/stat"):read("*n")
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  local n = req.path:match("^/slow/(%%d+)$")
  if n then
    io.open(dir .. "/" .. n, "w"):close()
    cohost.sleep(slow)
    return res:send(answer .. " slow " .. n .. " " .. ("x"):rep(65536))
  elseif req.path == "/park" then
    io.open(dir .. "/park", "w"):close()
    cohost.sleep(60)
  end
  res:send(answer .. " pid=" .. pid)
end))
]]):format(answer, dir or "/dev/null", tostring(slow or 0)) .. h.REPORT_PORT
end

-- The wrk script: counts answers that are not 2xx and answers by the first
-- word of their body (gen1 .. gen4), and prints one line at the end:
--   wrk requests=N non2xx=N connect=N read=N write=N timeout=N gen1=N ... gen4=N
local WRK_SCRIPT = [[
local threads = {}
function setup(thread) threads[#threads + 1] = thread end
non2xx, gen1, gen2, gen3, gen4 = 0, 0, 0, 0, 0   -- thread globals: done() reads them
function response(status, headers, body)
  if status < 200 or status > 299 then non2xx = non2xx + 1 end
  local g = body and body:match("^(gen%d)")
  if g then _G[g] = _G[g] + 1 end
end
function done(summary)
  local sum = { non2xx = 0, gen1 = 0, gen2 = 0, gen3 = 0, gen4 = 0 }
  for _, t in ipairs(threads) do
    for k in pairs(sum) do sum[k] = sum[k] + (tonumber(t:get(k)) or 0) end
  end
  local e = summary.errors
  io.write(("wrk requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d gen1=%d gen2=%d gen3=%d gen4=%d\n")
    :format(summary.requests, sum.non2xx, e.connect, e.read, e.write, e.timeout,
            sum.gen1, sum.gen2, sum.gen3, sum.gen4))
end
]]

-- Starts `cohost opts script PORT` on a fixed free port (new and
-- restarted workers bind it again); stopped after the test.
local start = h.start_fixed_port

-- GET path on a fresh connection: status, headers, body; or nil, err.
local get = h.get

local function count(s, pattern)
  return select(2, s:gsub(pattern, ""))
end

-- Starts `wrk -t1 -c50` on port for secs seconds in the background; wait()
-- returns its counts (the line WRK_SCRIPT prints, as a table, with the raw
-- output as .out); stop() ends it early, counts printed all the same (a
-- SIGINT, which timeout(1) passes on). Killed after the test if it still
-- runs.
local function wrk(port, secs, path)
  local lua, out, pidf, rc = h.tmpfile(WRK_SCRIPT), h.tmpfile(), h.tmpfile(), h.tmpfile()
  os.remove(rc)
  os.execute(("(timeout %d wrk -t1 -c50 -d%ds --timeout 5s -s %s http://127.0.0.1:%d%s >%s 2>&1 & echo $! >%s; wait $!; echo $? >%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
    :format(secs + 10, secs, q(lua), port, path or "/", out, pidf, rc, rc, rc))
  defer(function()
    if not h.try_slurp(rc) then
      local pid = tonumber(h.slurp(pidf))
      if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    end
    os.remove(rc .. ".tmp")
  end)
  local w = {}
  function w.stop()
    local pid = tonumber(h.slurp(pidf))
    if pid then os.execute("kill -INT " .. pid .. " 2>/dev/null") end
  end
  function w.wait()
    assert(h.wait_for(function() return h.try_slurp(rc) end, secs + 15), "wrk did not end")
    local text = h.slurp(out)
    local r = { out = text }
    local line = text:match("wrk (requests=[^\n]*)")
    assert(line, "no counts from wrk: " .. text)
    for k, v in line:gmatch("(%w+)=(%d+)") do r[k] = tonumber(v) end
    r.errors = r.connect + r.read + r.write + r.timeout
    return r
  end
  return w
end

-- Figures seen (request and error counts, times) go to stderr, one line
-- each, so a run shows them beside busted's output.
local function note(fmt, ...)
  io.stderr:write("  [reload_spec] ", fmt:format(...), "\n")
end

describe("under wrk -c50 load", function()
  it("SIGHUP three times fails no request, and answers come from every script generation", function()
    local path = h.tmpfile(script("gen1"))
    local p = start("--processes 2 --shutdown-timeout 5", path)
    h.wait_workers(p, 2)
    -- wrk runs until stopped, 1 s after the last reload: a loaded machine
    -- can take a while to start the new workers, and a fixed duration
    -- could end before the last generation answered.
    local w = wrk(p.port, 40)
    cohost.sleep(1)
    for g = 2, 4 do
      h.write_file(path, script("gen" .. g))
      p.signal("HUP")
      -- A SIGHUP while a reload waits for its new workers is ignored: wait
      -- for this one to have started its workers before the next.
      assert.is_true(h.wait_for(function()
        return count(h.slurp(p.err), "reload: 2 new worker processes started") == g - 1
      end, 10), h.slurp(p.err))
      cohost.sleep(1)
    end
    w.stop()
    local r = w.wait()
    note("SIGHUP x3 under load: %d requests, non2xx %d, socket errors %d (connect %d read %d write %d timeout %d), per generation %d/%d/%d/%d",
         r.requests, r.non2xx, r.errors, r.connect, r.read, r.write, r.timeout, r.gen1, r.gen2, r.gen3, r.gen4)
    assert.equal(0, r.non2xx, r.out)
    assert.equal(0, r.errors, r.out)
    assert.is_true(r.requests > 1000, r.out)
    for g = 1, 4 do assert.is_true(r["gen" .. g] > 0, "no answer from gen" .. g .. ": " .. r.out) end
    assert.equal(r.requests, r.gen1 + r.gen2 + r.gen3 + r.gen4, r.out)
    -- The old generations are gone; the last one answers.
    assert.is_true(h.wait_for(function() return count(h.slurp(p.err), "old worker process %d %(pid %d+%) exited with code 0") == 6 end),
                   h.slurp(p.err))
    for _ = 1, 10 do assert.matches("^gen4 ", select(3, get(p.port, "/"))) end
    assert.is_nil(p.exited())
  end)

  it("SIGTERM lets 20 requests in flight finish with full bodies, then the master exits 0", function()
    local dir = h.tmpdir()
    local p = start("--processes 2 --shutdown-timeout 5", h.tmpfile(script("v1", dir, 1)))
    h.wait_workers(p, 2)
    local w = wrk(p.port, 3)
    cohost.sleep(0.5)
    local results = {}
    local clients = {}
    for i = 1, 20 do
      clients[i] = cohost.spawn(function()
        local s = h.connect(p.port, 10000)
        assert(s:send(("GET /slow/%d HTTP/1.1\r\nHost: x\r\n\r\n"):format(i)))
        results[i] = { h.read_response(s) }
        s:close()
      end)
    end
    assert.is_true(h.wait_for(function()
      for i = 1, 20 do
        if not h.try_slurp(dir .. "/" .. i) then return false end
      end
      return true
    end, 5), "not every /slow request started")
    local t0 = cohost.monotonic()
    p.signal("TERM")
    for i = 1, 20 do
      local ok, err = cohost.wait(clients[i])
      assert(ok, err)
      local status, headers, body = unpack(results[i])
      assert.equal(200, status, tostring(headers))
      -- Connection: close shows the response began after the drain did:
      -- the request was in flight at SIGTERM.
      assert.equal("close", headers.connection)
      assert.equal("v1 slow " .. i .. " " .. ("x"):rep(65536), body)
    end
    local code = p.wait(10)
    note("SIGTERM under load: 20 in-flight requests completed; master exited %s %.2f s after SIGTERM",
         tostring(code), cohost.monotonic() - t0)
    assert.equal(0, code, h.slurp(p.err))
    assert.is_true(cohost.monotonic() - t0 < 5, ("exited %.2f s after SIGTERM"):format(cohost.monotonic() - t0))
    assert.truthy(h.slurp(p.err):find("master: draining 2 worker processes", 1, true), h.slurp(p.err))
    local r = w.wait()   -- its errors after the exit are expected: nothing listens
    note("  wrk meanwhile: %d requests, non2xx %d, socket errors %d", r.requests, r.non2xx, r.errors)
    assert.equal(0, r.non2xx, r.out)
  end)

  it("a worker process killed with SIGKILL is restarted and the port keeps answering", function()
    local p = start("--processes 2", h.tmpfile(script("v1")))
    local before = h.wait_workers(p, 2)
    local w = wrk(p.port, 5)
    cohost.sleep(1.5)
    local victim = next(before)
    os.execute("kill -KILL " .. victim)
    local replacement
    assert.is_true(h.wait_for(function()
      local status, _, body = get(p.port, "/")
      local pid = status == 200 and tonumber(body:match("pid=(%d+)"))
      if pid and not before[pid] then replacement = pid end
      return replacement ~= nil
    end, 10), "no replacement answered: " .. h.slurp(p.err))
    local r = w.wait()
    note("SIGKILL of a worker under load: %d requests, non2xx %d, socket errors %d (connect %d read %d write %d timeout %d)",
         r.requests, r.non2xx, r.errors, r.connect, r.read, r.write, r.timeout)
    assert.truthy(h.slurp(p.err):find(("worker process %%d %%(pid %d%%) was killed by signal SIGKILL"):format(victim)),
                  h.slurp(p.err))
    -- Only connections of the killed process can fail (reset): the ones
    -- it held (about half of wrk's 50), and those wrk opened again while
    -- its listener was still being torn down, which the kernel had queued
    -- there (seen here: 11 to 62 read errors in all). 500 allows ten such
    -- rounds per connection; failures that went on past the restart would
    -- exceed it by far. No answer is ever anything but 200.
    assert.equal(0, r.non2xx, r.out)
    assert.is_true(r.errors <= 500, r.out)
    assert.is_true(r.requests > 1000, r.out)
    -- After the restart, every request succeeds, and both processes answer.
    local pids = {}
    for _ = 1, 200 do
      local status, _, body = get(p.port, "/")
      assert.equal(200, status)
      pids[tonumber(body:match("pid=(%d+)"))] = true
    end
    assert.is_nil(pids[victim])
    assert.is_true(pids[replacement], "the replacement got none of 200 connections")
    assert.is_nil(p.exited())
  end)
end)

describe("SIGTERM during a reload", function()
  -- SIGHUP, then SIGTERM while the new generation is still loading: the
  -- old worker drains once. (It once got a second SIGTERM when the new
  -- worker reported started, which means "stop at once", and its
  -- in-flight request was cut.)
  it("lets the old worker's in-flight request finish, and the master exits 0", function()
    local dir = h.tmpdir()
    local path = h.tmpfile(script("v1", dir, 2))
    local p = start("--processes 1 --shutdown-timeout 10", path)
    h.wait_workers(p, 1)
    local result
    local client = cohost.spawn(function()
      local s = h.connect(p.port, 10000)
      assert(s:send("GET /slow/1 HTTP/1.1\r\nHost: x\r\n\r\n"))
      result = { h.read_response(s) }
      s:close()
    end)
    assert.is_true(h.wait_for(function() return h.try_slurp(dir .. "/1") end, 5), "/slow/1 did not start")
    -- The new generation listens, then takes a second more to start.
    local f = assert(io.open(path, "w"))
    f:write(script("v2", dir, 0), "\nrequire('cohost').sleep(1)\n")
    f:close()
    local t0 = cohost.monotonic()
    p.signal("HUP")
    cohost.sleep(0.1)
    p.signal("TERM")
    assert(cohost.wait(client))
    local status, headers, body = unpack(result)
    assert.equal(200, status, tostring(headers) .. h.slurp(p.err))
    assert.equal("v1 slow 1 " .. ("x"):rep(65536), body)
    local code = p.wait(15)
    assert.equal(0, code, h.slurp(p.err))
    note("SIGTERM 0.1 s after SIGHUP: in-flight request completed, master exited %.2f s after", cohost.monotonic() - t0)
  end)
end)

describe("--shutdown-timeout", function()
  for _, opts in ipairs { "", "--processes 2" } do
    it("bounds the exit on SIGTERM even with a handler asleep for 60 s" .. (opts == "" and "" or " (" .. opts .. ")"), function()
      local dir = h.tmpdir()
      local p = start(opts .. " --shutdown-timeout 2", h.tmpfile(script("v1", dir)))
      if opts ~= "" then h.wait_workers(p, 2) end
      local s = h.connect(p.port, 15000)
      assert(s:send("GET /park HTTP/1.1\r\nHost: x\r\n\r\n"))
      assert.is_true(h.wait_for(function() return h.try_slurp(dir .. "/park") ~= nil end, 5), "/park never started")
      local t0 = cohost.monotonic()
      p.signal("TERM")
      local data, err, partial = s:receive("*a")
      local closed_after = cohost.monotonic() - t0
      local code = p.wait(8)
      local exited_after = cohost.monotonic() - t0
      note("--shutdown-timeout 2 %s: parked client saw %s after %.2f s; exit code %s after %.2f s",
           opts, data and ("data " .. #data .. " bytes: " .. (data:match("^[^\r]*") or "")) or ("error " .. tostring(err) .. " partial " .. #(partial or "")),
           closed_after, tostring(code), exited_after)
      -- The 60 s client sees its connection closed, not a hang: receive
      -- "*a" returns what came before the close (a 500 from the cancelled
      -- handler, or nothing), never a timeout or a 200.
      assert.is_true(closed_after < 6, "the parked request's connection stayed open")
      assert.truthy(data, err)
      assert.is_falsy(data:find("^HTTP/1%.1 200"), data)
      assert.equal(0, code, h.slurp(p.err))
      assert.is_true(exited_after < 6, ("exited %.2f s after SIGTERM"):format(exited_after))
    end)
  end
end)
