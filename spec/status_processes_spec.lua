-- Statistics across worker processes: with --processes, cohost.stats("all")
-- and the --status-addr endpoint cover every worker of every process, each
-- process answering for its own workers through shared memory
-- (host/stats/stats_procs.c, docs/stats.md). Every test starts build/cohost
-- --processes 2 -w 2 as a child; the script prints "port master-pid".
local cohost = require "cohost"
local cjson = require "cjson"
local h = require "spec.helper"
h.cleanups(after_each)

local app = [[
local cohost = require "cohost"
local http = require "cohost.http"
local cjson = require "cjson"
local port = tonumber(arg[1])
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  if req.path == "/all" then
    local all = cohost.stats("all", 2)
    all.me = io.open("/proc/self/stat"):read("*n")
    return res:send(cjson.encode(all))
  end
  res:send("hello")
end))
]] .. h.REPORT_PORT

-- GET on a new connection: status, body; or nil, err.
local get = h.get_to_close

-- Starts the app with a status endpoint; returns the child (p.port, p.pid
-- the master's) and the status port.
local function start()
  local sport = h.fixed_port()
  local p = h.start_fixed_port(("--processes 2 -w 2 --status-addr 127.0.0.1:%d"):format(sport), h.tmpfile(app))
  return p, sport
end

-- /status decoded, once it answers; scrapes counts the answers.
local scrapes = 0
local function status(port)
  local st = h.status_json(port)
  scrapes = scrapes + 1
  return st
end

-- Why st is not a full picture of two running processes of 2 workers whose
-- pids are those of master's children, or nil.
local function incomplete(st, master)
  if #st.workers ~= 4 then return "workers: " .. #st.workers end
  if #st.processes ~= 2 then return "processes: " .. #st.processes end
  local kids = h.children(master)
  if #kids ~= 2 then return "the master has " .. #kids .. " children" end
  local pids = {}
  for i, pr in ipairs(st.processes) do
    assert.equal(i - 1, pr.process)
    if pr.age ~= 0 then return ("process %d answered %.3f s ago"):format(pr.process, pr.age) end
    pids[#pids + 1] = pr.pid
  end
  table.sort(pids)
  if pids[1] ~= kids[1] or pids[2] ~= kids[2] then
    return ("pids %s, children %s"):format(table.concat(pids, ","), table.concat(kids, ","))
  end
  for i, w in ipairs(st.workers) do
    assert.equal(i - 1, w.worker)
    assert.equal(math.floor((i - 1) / 2), w.process)
    if w.pid ~= st.processes[w.process + 1].pid then return "worker " .. w.worker .. "'s pid" end
    if not w.running then return "worker " .. w.worker .. " not running" end
    if w.lua_bytes < 10000 then return "worker " .. w.worker .. " has no Lua heap" end
  end
end

-- Scrapes until incomplete(st) is nil (10 s at most); returns st.
local function settled(sport, master, more)
  local st, why
  for _ = 1, 200 do
    st = status(sport)
    why = incomplete(st, master) or (more and more(st))
    if not why then return st end
    cohost.sleep(0.05)
  end
  error("status never settled: " .. why)
end

describe("statistics across --processes", function()
  it("/status has every worker of both processes, with their requests summed", function()
    local p, sport = start()
    scrapes = 0
    status(sport)
    local N = 40
    for _ = 1, N do assert.equal(200, (get(p.port, "/"))) end
    local st = settled(sport, p.pid, function(s)
      -- N app requests and every scrape, this one included.
      if s.totals.requests ~= N + scrapes then
        return ("requests %d, want %d"):format(s.totals.requests, N + scrapes)
      end
    end)
    assert.equal(4, st.totals.workers)
    assert.equal(2, st.totals.processes)
    assert.equal(st.processes[1].rss_bytes + st.processes[2].rss_bytes, st.totals.rss_bytes)
    assert.is_true(st.processes[2].rss_bytes > 1000000)
    -- Both processes served some of the 40 (SO_REUSEPORT spreads them).
    local by_process = { 0, 0 }
    for _, w in ipairs(st.workers) do
      by_process[w.process + 1] = by_process[w.process + 1] + w.requests
    end
    assert.is_true(by_process[2] > 0, "process 1 served none")
    local code, body = get(sport, "/metrics")
    assert.equal(200, code)
    assert.truthy(body:find('\ncohost_worker_http_requests_total{worker="3"} ', 1, true))
    assert.truthy(body:find("\ncohost_processes 2\n", 1, true))
    assert.truthy(body:find("\ncohost_workers 4\n", 1, true))
  end)

  it("cohost.stats('all') in a handler of either process sees both", function()
    local p, sport = start()
    settled(sport, p.pid)
    local seen, nseen = {}, 0
    for _ = 1, 30 do
      local code, body = get(p.port, "/all")
      assert.equal(200, code)
      local all = cjson.decode(body)
      assert.equal(4, #all.workers)
      for _, w in ipairs(all.workers) do assert.is_true(w.running) end
      if not seen[all.me] then seen[all.me], nseen = true, nseen + 1 end
    end
    assert.equal(2, nseen)   -- 2^-29 that SO_REUSEPORT sent all 30 to one
  end)

  it("reports a killed worker process's replacement, and answers while it is gone", function()
    local p, sport = start()
    local st = settled(sport, p.pid)
    local victim = st.processes[2].pid
    os.execute("kill -9 " .. victim)
    -- While process 1 is down or restarting, scrapes still answer: its
    -- workers come stale or not running, never fresh under the dead pid.
    local t0 = cohost.monotonic()
    local during = status(sport)
    assert.is_true(cohost.monotonic() - t0 < 5)
    if during.processes[2].pid == victim then
      assert.is_true(during.processes[2].age > 0)
    end
    st = settled(sport, p.pid)
    assert.are_not.equal(victim, st.processes[2].pid)
  end)

  it("follows a reload (SIGHUP) to the new processes", function()
    local p, sport = start()
    local before = settled(sport, p.pid)
    p.signal("HUP")
    local after = settled(sport, p.pid, function(s)
      for i = 1, 2 do
        if s.processes[i].pid == before.processes[i].pid then return "process " .. (i - 1) .. " not reloaded" end
      end
    end)
    assert.equal(4, #after.workers)
  end)
end)
