-- Statistics: cohost.stats() in-process, and the --status-addr endpoint
-- (/status JSON, /metrics Prometheus text) of a child cohost with two
-- workers, driven over 127.0.0.1.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local get = h.http_get

-- Parses Prometheus text: checks every line's shape and returns
-- { [series] = value } and { [family] = type }.
local function parse_metrics(text)
  local NAME = "^[a-zA-Z_:][a-zA-Z0-9_:]*$"
  local series, types, helps = {}, {}, {}
  assert.equal("\n", text:sub(-1))
  for line in text:gmatch("([^\n]*)\n") do
    if line:match("^# HELP ") then
      local name = assert(line:match("^# HELP (%S+) %S"), line)
      assert.truthy(name:match(NAME), name)
      helps[name] = true
    elseif line:match("^# TYPE ") then
      local name, typ = line:match("^# TYPE (%S+) (%S+)$")
      assert.truthy(name and name:match(NAME), line)
      assert.truthy(({ counter = 1, gauge = 1, histogram = 1, untyped = 1 })[typ], line)
      assert.is_nil(types[name], "TYPE twice for " .. name)
      types[name] = typ
    else
      local name, labels, value = line:match("^([^{ ]+)(%b{}) (%S+)$")
      if not name then name, value = line:match("^([^{ ]+) (%S+)$") end
      assert.truthy(name, "bad sample line: " .. line)
      assert.truthy(name:match(NAME), name)
      if labels then
        local inner = labels:sub(2, -2)
        for pair in (inner .. ","):gmatch("([^,]*),") do
          assert.truthy(pair:match('^[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"$'), "bad label " .. pair)
        end
      end
      -- A histogram's samples are its name with _bucket, _sum, _count.
      local family = name
      if not types[name] then
        local base = name:match("^(.*)_bucket$") or name:match("^(.*)_sum$") or name:match("^(.*)_count$")
        if base and types[base] == "histogram" then family = base end
      end
      assert.truthy(types[family], "sample before its TYPE: " .. line)
      assert.truthy(helps[family], "sample without HELP: " .. line)
      series[name .. (labels or "")] = assert(tonumber(value), line)
    end
  end
  return series, types
end

describe("cohost.stats()", function()
  it("reports this worker's coroutines, memory and stacks", function()
    local st = cohost.stats()
    for _, k in ipairs { "worker", "coros", "ready", "waiting", "sleeping", "spawned", "switches", "timers",
                         "stacks_free", "stack_bytes", "connections", "accepted", "requests", "lua_bytes" } do
      assert.equal("number", type(st[k]), k)
    end
    assert.equal(cohost.worker_id(), st.worker)
    assert.is_true(st.coros >= 1 and st.stack_bytes > 0 and st.lua_bytes > 10000)
    local t = cohost.spawn(function() cohost.sleep(0.3) end)
    cohost.sleep(0.01)
    local during = cohost.stats()
    assert.is_true(during.sleeping >= st.sleeping + 1)
    assert.is_true(during.timers >= 1)
    local big = {}
    for i = 1, 200000 do big[i] = i end
    assert.is_true(cohost.stats().lua_bytes > st.lua_bytes + 1000000)
    big = nil
    cohost.wait(t)
  end)

  it("counts requests served by cohost.http and their open connections", function()
    local port = h.http_serve(function(req, res) res:send("ok") end)
    local before = cohost.stats()
    for _ = 1, 5 do assert.equal(200, (get(port, "/"))) end
    local s = h.dial(port, 5000)   -- kept open: one more connection
    assert(s:send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert(s:receive("*l"))
    local after = cohost.stats()
    assert.equal(before.requests + 6, after.requests)
    assert.equal(before.connections + 1, after.connections)
    assert.is_true(after.switches > before.switches)
  end)

  it("counts accepted connections", function()
    local l, port = h.serve(function(sock) sock:close() end)
    local before = cohost.stats().accepted
    for _ = 1, 4 do
      local s = h.connect(port, 5000)
      s:receive("*a")
      s:close()
    end
    assert.equal(before + 4, cohost.stats().accepted)
    l:close()
  end)

  it("gathers every worker and the totals with stats('all')", function()
    local all = cohost.stats("all")
    assert.equal(cohost.worker_count(), #all.workers)
    assert.equal(cohost.worker_count(), all.totals.workers)
    assert.is_true(all.totals.rss_bytes > 1000000)
    local w = all.workers[cohost.worker_id() + 1]
    assert.is_true(w.running)
    assert.equal(all.totals.requests, w.requests)
    assert.equal(all.totals.coros, w.coros)
    assert.has_error(function() cohost.stats("some") end)
  end)
end)

describe("--status-addr", function()
  local app = h.server_script [[
local http = require "cohost.http"
listener = assert(http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/slow" then cohost.sleep(tonumber(req.query.s)) end
  res:send("hello")
end))
]]

  local function start(status_port)
    local flag = status_port and ("--status-addr 127.0.0.1:%d "):format(status_port) or ""
    local p = h.start("-w 2 " .. flag .. h.shell_quote(h.tmpfile(app)), 30)
    defer(p.stop)
    return p
  end

  -- /status once it answers (worker 0 starts it after its main chunk).
  local status = h.status_json

  it("serves every worker's requests, connections and coroutines as JSON", function()
    local sport = h.free_port()
    local p = start(sport)
    status(sport)   -- up (one request on worker 0)
    local N = 40
    for _ = 1, N do assert.equal(200, (get(p.port, "/"))) end
    -- Three idle keep-alive connections and one handler sleeping 3 s.
    local socks = {}
    for i = 1, 3 do
      socks[i] = h.connect(p.port, 5000)
      assert(socks[i]:send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
      assert(socks[i]:receive("*l"))
    end
    local slow = h.connect(p.port, 5000)
    defer(function() slow:close() for _, s in ipairs(socks) do s:close() end end)
    assert(slow:send("GET /slow?s=3 HTTP/1.1\r\nHost: x\r\n\r\n"))
    -- Scrapes until the figures show that state: a loaded machine may
    -- answer a scrape before the slow request has started, or before a
    -- closed connection is counted out, or leave worker 1's snapshot stale
    -- past the scrape's 0.2 s wait (older figures). Each scrape counts itself.
    local scrapes = 1   -- the first status() above
    local function check(st)
      if #st.workers ~= 2 then return nil, "workers: " .. #st.workers end
      local sum = 0
      for i, w in ipairs(st.workers) do
        assert.equal(i - 1, w.worker)
        assert.is_true(w.running)
        assert.is_true(w.lua_bytes > 10000)
        if w.age >= 1 then return nil, ("worker %d's snapshot is %.3f s old"):format(w.worker, w.age) end
        sum = sum + w.requests
      end
      assert.equal(sum, st.totals.requests)
      -- N + 3 app requests, the slow one (counted as it starts) and the
      -- scrapes, this one included.
      if sum ~= N + 3 + 1 + scrapes then return nil, ("requests %d, want %d"):format(sum, N + 4 + scrapes) end
      -- 3 keep-alive + 1 slow + this scrape's own connection.
      if st.totals.connections ~= 5 then return nil, "connections " .. st.totals.connections end
      if st.totals.sleeping < 1 then return nil, "nothing sleeping" end
      -- the scrape's wait on the other worker, listeners
      if st.totals.waiting < 1 then return nil, "nothing waiting" end
      if st.totals.coros < st.totals.sleeping + 1 then return nil, "coros " .. st.totals.coros end
      return true
    end
    local ok, why
    for _ = 1, 60 do
      cohost.sleep(0.05)
      scrapes = scrapes + 1
      ok, why = check(status(sport))
      if ok then break end
    end
    assert(ok, why)
    for _, s in ipairs(socks) do s:close() end
    slow:close()
    local settled
    for _ = 1, 100 do
      settled = status(sport)
      if settled.totals.connections == 1 then break end
      cohost.sleep(0.05)
    end
    assert.equal(1, settled.totals.connections)
  end)

  it("serves /metrics as Prometheus text whose counters only grow", function()
    local sport = h.free_port()
    local p = start(sport)
    status(sport)
    for _ = 1, 10 do get(p.port, "/") end
    local code, head, body = get(sport, "/metrics")
    assert.equal(200, code)
    assert.truthy(head:lower():find("content-type: text/plain; version=0.0.4", 1, true))
    local first, types = parse_metrics(body)
    assert.equal(2, first.cohost_workers)
    assert.is_true(first.process_resident_memory_bytes > 1000000)
    assert.truthy(first['cohost_worker_http_requests_total{worker="0"}'])
    assert.truthy(first['cohost_worker_http_requests_total{worker="1"}'])
    assert.truthy(first['cohost_lua_memory_bytes{worker="1"}'] > 10000)
    assert.truthy(first['cohost_coroutines_by_state{worker="0",state="waiting"}'])
    for _ = 1, 10 do get(p.port, "/") end
    local _, _, body2 = get(sport, "/metrics")
    local second = parse_metrics(body2)
    local counters = 0
    for series, v in pairs(first) do
      local name = series:match("^[^{]+")
      if types[name] == "counter" then
        counters = counters + 1
        assert.is_true(second[series] >= v, series)
      end
    end
    assert.is_true(counters >= 8)
    local r1 = first['cohost_worker_http_requests_total{worker="0"}'] + first['cohost_worker_http_requests_total{worker="1"}']
    local r2 = second['cohost_worker_http_requests_total{worker="0"}'] + second['cohost_worker_http_requests_total{worker="1"}']
    assert.equal(r1 + 11, r2)   -- 10 app requests and the first scrape
    assert.equal(404, (get(sport, "/nothing")))
  end)

  it("keeps its own requests (health checks, scrapes) out of cohost_http_requests_total", function()
    local sport = h.free_port()
    local p = start(sport)
    status(sport)
    for _ = 1, 3 do assert.equal(200, (get(sport, "/healthz"))) end
    assert.equal(200, (get(sport, "/metrics")))
    assert.equal(404, (get(sport, "/nothing")))
    for _ = 1, 5 do assert.equal(200, (get(p.port, "/"))) end
    local _, _, body = get(sport, "/metrics")
    -- Summed over every label set of the family (whatever labels it has):
    -- only the app's 5 requests.
    local function sum(family)
      local n = 0
      for name, value in body:gmatch("\n(" .. family .. "%b{}) (%S+)") do n = n + tonumber(value) end
      for value in body:gmatch("\n" .. family .. " (%S+)") do n = n + tonumber(value) end
      return n
    end
    assert.equal(5, sum("cohost_http_requests_total"), body)
    assert.equal(5, sum("cohost_http_request_duration_seconds_count"), body)
    -- The per-worker count of requests begun still has them all, this
    -- scrape included (counted as it began).
    local m = parse_metrics(body)
    assert.equal(1 + 3 + 1 + 1 + 5 + 1, m['cohost_worker_http_requests_total{worker="0"}'] +
                                    m['cohost_worker_http_requests_total{worker="1"}'])
  end)

  it("listens nowhere else without the flag", function()
    local p = start(nil)
    assert.equal(200, (get(p.port, "/")))
    -- The child's listening TCP sockets, by pid, from ss(8).
    local f = io.popen(("ss -Hltnp 2>/dev/null | grep 'pid=%d,'"):format(p.pid))
    local ports = {}
    for line in f:lines() do
      local port = line:match("127%.0%.0%.1:(%d+)")
      if port then ports[port] = true end
    end
    f:close()
    assert.same({ [tostring(p.port)] = true }, ports)
    -- With the flag, ss sees the status port too: the check above can fail.
    local sport = h.free_port()
    local q = start(sport)
    status(sport)
    f = io.popen(("ss -Hltnp 2>/dev/null | grep 'pid=%d,'"):format(q.pid))
    local seen = f:read("*a")
    f:close()
    assert.truthy(seen:find("127.0.0.1:" .. sport, 1, true))
  end)

  it("exits with an error when the status address is bad", function()
    local code, _, err = h.run_script(app, "--status-addr 127.0.0.1:99999", { limit = 10 })
    assert.equal(1, code)
    assert.truthy(err:find("--status-addr 127.0.0.1:99999: bad address", 1, true), err)
  end)
end)
