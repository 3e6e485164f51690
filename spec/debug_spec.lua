-- Seeing inside a running server (docs/debugging.md): GET /debug/tasks on
-- the status listener (every task, what it waits on, its traceback),
-- cohost.tasks(), SIGUSR2's dump to the log, --slow-request-ms and the
-- listener option, and where the debug endpoints are served. The servers
-- are child cohosts on 127.0.0.1; a silent peer is a listener of this
-- spec's own process.
local cohost = require "cohost"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local get = h.get_to_close

-- The child's script; its line numbers are asserted below (READ_LINE,
-- SLEEP_LINE, SEMA_LINE, SLOW_LINE): keep them where they are.
local APP = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port, silent = tonumber(arg[1]), tonumber(arg[2])
local sema = cohost.semaphore.new(0)
local r = http.router()
r:get("/read/:id", function(req, res)
  local s = cohost.tcp()
  s:settimeout(60000)
  assert(s:connect("127.0.0.1", silent))
  local line = s:receive()
  res:send(tostring(line))
end)
r:get("/sleep", function(req, res) cohost.sleep(60) res:send("slept") end)
r:get("/sema", function(req, res) sema:wait(60) res:send("got it") end)
r:get("/slow", function(req, res) cohost.sleep(0.3) res:send("slow") end)
r:get("/fast", function(req, res) cohost.sleep(0.005) res:send("fast") end)
r:get("/hello", function(req, res) cohost.sleep(0.002) res:send("hello") end)
assert(http.listen("127.0.0.1:" .. port, r))
-- A listener of its own threshold (the option over the flag), and one
-- that watches nothing.
assert(http.listen("127.0.0.1:" .. (port + 1), function(req, res)
  cohost.sleep(tonumber(req.query.s))
  res:send("ok")
end, { slow_request_ms = 50 }))
assert(http.listen("127.0.0.1:" .. (port + 2), function(req, res)
  cohost.sleep(tonumber(req.query.s))
  res:send("ok")
end, { slow_request_ms = 0 }))
]] .. h.REPORT_PORT
local READ_LINE, SLEEP_LINE, SEMA_LINE, SLOW_LINE = 10, 13, 14, 15

-- Two free ports in a row after port (the app's extra listeners).
local function app_port()
  for _ = 1, 50 do
    local p = h.fixed_port()
    if not h.listening(p + 1) and not h.listening(p + 2) then return p end
  end
  error("no three free ports in a row")
end

-- Starts the app with args before the script; returns the child, the
-- status port and the script's path.
local function start(args, silent)
  local script = h.tmpfile(APP)
  local port = app_port()
  local p = h.start(("%s %s %d %d"):format(args, h.shell_quote(script), port, silent or 1))
  defer(p.stop)
  return p, script
end

-- Waits until the status listener on sport answers (it starts once the
-- script's main chunk has run, after the child printed its port).
local function status_up(sport)
  assert.is_true(h.wait_for(function() return get(sport, "/healthz") == 200 end), "no status listener")
end

-- A peer that accepts and never says a word; its port.
local function silent_peer()
  local _, port = h.serve(function(sock)
    sock:settimeout(60000)
    sock:receive()   -- until the client goes
  end)
  return port
end

-- Sends a GET on a connection left open (the handler is to stay parked);
-- the socket is closed after the test.
local function fire(port, path)
  local s = h.dial(port)
  assert(s:send(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n"):format(path)))
  return s
end

-- /debug/tasks decoded, once it has tasks for which pred is true (10 s).
local function tasks_until(sport, query, pred)
  local doc
  assert.is_true(h.wait_for(function()
    local code, body = get(sport, "/debug/tasks" .. (query or ""))
    if code ~= 200 then return false end
    doc = cjson.decode(body)
    return pred(doc.tasks)
  end), "tasks never matched: " .. (doc and cjson.encode(doc) or "no answer"))
  return doc
end

local function find(tasks, field, value)
  for _, t in ipairs(tasks) do
    if t[field] == value then return t end
  end
end

describe("GET /debug/tasks", function()
  it("shows a handler parked on a read from a silent peer (fd, peer, traceback), one asleep, one on a semaphore", function()
    local silent = silent_peer()
    local sport = h.fixed_port()
    local p, script = start(("-w 2 --status-addr 127.0.0.1:%d"):format(sport), silent)
    fire(p.port, "/read/7")
    fire(p.port, "/sleep")
    fire(p.port, "/sema")
    -- Each parked where it waits (a handler may still be connecting).
    local function on(tasks, route, what)
      local t = find(tasks, "route", route)
      return t and t.on == what
    end
    local doc = tasks_until(sport, "", function(tasks)
      return on(tasks, "/read/:id", "read") and on(tasks, "/sleep", "sleep") and on(tasks, "/sema", "semaphore")
    end)
    local read = find(doc.tasks, "route", "/read/:id")
    assert.equal("http", read.kind)
    assert.equal("parked", read.state)
    assert.equal("read", read.on)
    assert.is_number(read.fd)
    assert.equal("127.0.0.1:" .. silent, read.fd_peer)
    assert.truthy(read.peer:match("^127%.0%.0%.1:%d+$"), read.peer)
    assert.truthy(read.timeout > 50 and read.timeout <= 60, read.timeout)
    assert.truthy(read.age >= 0 and read.age < 30, read.age)
    assert.truthy(read.traceback:find(script .. ":" .. READ_LINE .. ":", 1, true), read.traceback)
    assert.truthy(read.traceback:find("in function 'receive'", 1, true), read.traceback)
    local sleep = find(doc.tasks, "route", "/sleep")
    assert.equal("sleep", sleep.on)
    assert.is_nil(sleep.fd)
    assert.truthy(sleep.timeout > 50 and sleep.timeout <= 60, sleep.timeout)
    assert.truthy(sleep.traceback:find(script .. ":" .. SLEEP_LINE .. ":", 1, true), sleep.traceback)
    local sema = find(doc.tasks, "route", "/sema")
    assert.equal("semaphore", sema.on)
    assert.truthy(sema.traceback:find(script .. ":" .. SEMA_LINE .. ":", 1, true), sema.traceback)
    -- The request asking is the one running; both workers answered.
    assert.equal("running", find(doc.tasks, "state", "running").state)
    assert.equal(2, #doc.workers)
    for _, w in ipairs(doc.workers) do assert.is_true(w.answered) end

    -- Filters, and the text form.
    local code, body = get(sport, "/debug/tasks?state=semaphore")
    assert.equal(200, code)
    local only = cjson.decode(body).tasks
    assert.equal(1, #only)
    assert.equal("/sema", only[1].route)
    code, body = get(sport, "/debug/tasks?route=/read/:id")
    assert.equal(1, #cjson.decode(body).tasks)
    code, body = get(sport, "/debug/tasks?min_age=3600")
    assert.equal(0, #cjson.decode(body).tasks)
    code, body = get(sport, "/debug/tasks?format=text&state=read")
    assert.equal(200, code)
    assert.truthy(body:find("^task %d+ worker %d http %(handler%) route /read/:id peer 127%.0%.0%.1:%d+ age [%d.]+s parked on read fd %d+ %(127%.0%.0%.1:" .. silent .. "%)"), body)
    assert.truthy(body:find("\nstack traceback:\n\t[C]: in function 'receive'\n\t" .. script .. ":" .. READ_LINE .. ":", 1, true), body)
    assert.equal(400, (get(sport, "/debug/tasks?min_age=soon")))
  end)

  it("lists the tasks of every worker process under --processes", function()
    local sport = h.fixed_port()
    local script = h.tmpfile(APP)
    local p = h.start_fixed_port(("--processes 2 -w 1 --status-addr 127.0.0.1:%d"):format(sport), script)
    local pids = {}
    -- Each process's listener takes some of the connections (SO_REUSEPORT):
    -- keep parking handlers until both processes hold one.
    local doc = tasks_until(sport, "?state=sleep", function(tasks)
      for _, t in ipairs(tasks) do pids[t.pid] = true end
      local n = 0
      for _ in pairs(pids) do n = n + 1 end
      if n < 2 then fire(p.port, "/sleep") end
      return n >= 2
    end)
    local processes = {}
    for _, t in ipairs(doc.tasks) do processes[t.process] = true end
    assert.is_true(processes[0] and processes[1])
    assert.equal(2, #doc.workers)
  end)
end)

describe("cohost.tasks()", function()
  it("lists this process's tasks, one parked on a channel among them", function()
    local ch = cohost.channel(1)
    local t = cohost.spawn(function()
      local v = ch:receive(30)   -- not a tail call: its frame stays
      return v
    end)
    local list, workers
    assert.is_true(h.wait_for(function()
      list, workers = cohost.tasks { state = "channel" }
      return list and #list >= 1
    end))
    local mine = list[1]
    assert.equal("spawned", mine.kind)
    assert.equal("parked", mine.state)
    assert.equal("channel", mine.on)
    assert.truthy(mine.traceback:find("debug_spec.lua:%d+: in function"), mine.traceback)
    assert.is_true(workers[1].answered)
    -- The caller is listed, running.
    local me = cohost.tasks { state = "running" }
    assert.equal(1, #me)
    assert.truthy(me[1].traceback:find("in function 'tasks'", 1, true), me[1].traceback)
    ch:send("done")
    assert.same({ true, "done" }, { cohost.wait(t) })
  end)
end)

describe("SIGUSR2", function()
  it("writes every task to the log under load, fails no request, and SIGQUIT still stops at once", function()
    local p = start("-w 1")
    -- wrk keeps 20 connections busy on a handler that parks for 2 ms.
    local wrk = h.tmpfile()
    local wpid = h.spawn(("exec timeout 30 wrk -t1 -c20 -d3s --timeout 5s http://127.0.0.1:%d/hello"):format(p.port), wrk)
    defer(function() h.stop_pid(wpid, "KILL") end)
    assert.is_true(h.wait_for(function() return h.alive(wpid) end))
    -- Dumps until one catches handlers parked (wrk is connecting at first).
    local TASK = "task %d+ worker 0 http %(handler%) route /hello peer 127%.0%.0%.1:%d+ age [%d.]+s parked on sleep"
    assert.is_true(h.wait_for(function()
      p.signal("USR2")
      return h.slurp(p.err):find(TASK)
    end, 10, 0.2), h.slurp(p.err):sub(1, 2000))
    p.signal("USR2")   -- and one more while wrk runs on
    assert.is_true(h.wait_for(function() return not h.alive(wpid) end, 20))
    local log = h.slurp(p.err)
    assert.truthy(log:find("stack traceback:\n\t[C]: in function 'sleep'", 1, true))
    local summary = h.slurp(wrk)
    local requests = tonumber(summary:match("(%d+) requests in"))
    assert.truthy(requests and requests > 0, summary)
    assert.is_nil(summary:find("Socket errors"), summary)
    assert.is_nil(summary:find("Non%-2xx"), summary)
    assert.is_nil(p.exited())   -- the dumps stopped nothing
    p.signal("QUIT")
    local code, took = p.wait(5)
    assert.equal(1, code)
    assert.truthy(took < 2, took)
    assert.truthy(h.slurp(p.err):find("SIGQUIT, exiting now", 1, true))
  end)
end)

describe("--slow-request-ms", function()
  it("logs a 300 ms request with where its time went, not a 5 ms one; a listener's option wins", function()
    local p, script = start("-w 1 --slow-request-ms 100")
    assert.equal(200, (get(p.port, "/fast")))
    assert.equal(200, (get(p.port, "/slow")))
    assert.equal(200, (get(p.port + 1, "/?s=0.1")))    -- its own 50 ms
    assert.equal(200, (get(p.port + 2, "/?s=0.15")))   -- watches nothing
    local line
    assert.is_true(h.wait_for(function()
      line = h.slurp(p.err):match("[^\n]*slow request: GET /%?s=0%.1 [^\n]*")
      return line
    end))
    local log = h.slurp(p.err)
    local at = log:find("slow request: GET /slow route /slow ", 1, true)
    assert.truthy(at, log)
    local slow = log:sub(at, at + 1500)
    local took = tonumber(slow:match("took ([%d.]+) ms %(over 100 ms%)"))
    assert.truthy(took and took >= 300 and took < 5000, slow)
    local running = tonumber(slow:match("handler running ([%d.]+) ms"))
    local parked = tonumber((slow:match("parked ([%d.]+) ms %(sleep [%d.]+ ms%)")))
    assert.truthy(running and parked and parked >= 295 and running < parked, slow)
    assert.truthy(slow:find("longest park [%d.]+ ms on sleep; at the longest park:\nstack traceback:\n\t%[C%]: in function 'sleep'\n"), slow)
    assert.truthy(slow:find(script .. ":" .. SLOW_LINE .. ":", 1, true), slow)
    assert.is_nil(log:find("GET /fast", 1, true))
    assert.is_nil(log:find("GET /?s=0.15", 1, true))
    assert.truthy(line:find("(over 50 ms)", 1, true), line)
  end)
end)

describe("the debug endpoints", function()
  it("are absent on an app listener", function()
    local p = start("-w 1")
    local code, body = get(p.port, "/debug/tasks")
    assert.equal(404, code)   -- the app's router
    assert.is_nil(body:find("traceback", 1, true))
    assert.equal(404, (get(p.port, "/debug/profile?seconds=1")))
  end)

  it("are refused on a status listener off loopback without --debug-endpoints, and served with it", function()
    local sport = h.fixed_port()
    local p = start(("-w 1 --status-addr 0.0.0.0:%d"):format(sport))
    status_up(sport)
    local code, body = get(sport, "/debug/tasks")
    assert.equal(403, code)
    assert.truthy(body:find("--debug-endpoints", 1, true), body)
    assert.equal(403, (get(sport, "/debug/profile?seconds=1")))
    assert.equal(200, (get(sport, "/status")))
    p.stop()
    sport = h.fixed_port()
    start(("-w 1 --debug-endpoints --status-addr 0.0.0.0:%d"):format(sport))
    status_up(sport)
    code, body = get(sport, "/debug/tasks")
    assert.equal(200, code)
    assert.is_table(cjson.decode(body).tasks)
  end)
end)
