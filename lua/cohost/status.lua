-- The status endpoint (--status-addr): GET /status answers every worker's
-- figures and the process totals as JSON, GET /metrics the same in the
-- Prometheus text exposition format 0.0.4. The host starts it on worker 0
-- once the script's main chunk has run; it serves from worker 0 and asks
-- the other workers, and under --processes the other worker processes,
-- for fresh figures on each request (see docs/stats.md).
local M = {}

local sys = require "cohost.core.sys"
local metrics = require "cohost.metrics"
local metrics_core = require "cohost.core.metrics"
local cjson = require("cjson").new()   -- our own settings, not the app's

local concat, format, floor = table.concat, string.format, math.floor

-- Seconds a scrape waits for each worker's snapshot.
M.timeout = 0.2

-- stats("all") as the /status JSON document.
function M.json(all)
  all = all or sys.stats("all", M.timeout)
  return cjson.encode(all)
end

-- Metric families, in exposition order: name, type, help, and how to get
-- the samples: field (one per worker) or fields (one per worker and label
-- value, { label, { value = field } }).
local FAMILIES = {
  { "cohost_coroutines", "gauge", "Live coroutines of the worker.", field = "coros" },
  { "cohost_coroutines_by_state", "gauge",
    "Coroutines queued to run (ready), parked on I/O or a wakeup (waiting), or on a timer only (sleeping).",
    fields = { "state", { ready = "ready", waiting = "waiting", sleeping = "sleeping" } } },
  { "cohost_coroutines_spawned_total", "counter", "Coroutines spawned.", field = "spawned" },
  { "cohost_context_switches_total", "counter", "Context switches into coroutines.", field = "switches" },
  { "cohost_coroutine_runs_total", "counter", "Switches into a coroutine, by priority class.",
    fields = { "class", { high = "runs_high", normal = "runs_normal", low = "runs_low" } } },
  { "cohost_timers", "gauge", "Armed timers, coroutine timeouts included.", field = "timers" },
  { "cohost_connections", "gauge", "Open connections accepted by the worker's listeners.", field = "connections" },
  { "cohost_connections_accepted_total", "counter", "Connections accepted.", field = "accepted" },
  { "cohost_worker_http_requests_total", "counter",
    "Requests cohost.http began on the worker (the status endpoint's own included).", field = "requests" },
  { "cohost_lua_memory_bytes", "gauge", "Lua heap of the worker's Lua state.", field = "lua_bytes" },
  { "cohost_stack_address_space_bytes", "gauge", "Address space mapped for coroutine stacks (not resident memory).",
    field = "stack_bytes" },
  { "cohost_stacks_free", "gauge", "Stacks kept in the worker's pool for reuse.", field = "stacks_free" },
  { "cohost_stack_saved_bytes", "gauge",
    "Copy-stack mode: stack bytes of parked coroutines saved to the heap.", field = "saved_bytes" },
  { "cohost_stats_age_seconds", "gauge", "Age of the worker's snapshot (0 unless it did not answer in time).",
    field = "age" },
}

-- A sample value: integers exactly (counters pass 2^31), others with
-- enough digits.
local function num(v)
  if v == floor(v) and v > -2^53 and v < 2^53 then return format("%.0f", v) end
  return format("%.6g", v)
end

-- CPU seconds and open fds summed over the worker processes (and the
-- master), and the start time of the first of them: from /proc.
local function process_totals(all)
  local pids = {}
  if all.processes then
    for _, p in ipairs(all.processes) do
      if p.pid and p.pid > 0 then pids[#pids + 1] = p.pid end
    end
    local stat = io.open("/proc/self/stat")
    local ppid = stat and tonumber(stat:read("*a"):match("^%d+ %b() %S+ (%d+)"))
    if stat then stat:close() end
    if ppid then pids[#pids + 1] = ppid end
  else
    local stat = io.open("/proc/self/stat")
    pids[1] = stat and stat:read("*n")
    if stat then stat:close() end
  end
  local cpu, start, fds = 0, nil, 0
  for _, pid in ipairs(pids) do
    local c, s, f = metrics_core.process(pid)
    if c then
      cpu, fds = cpu + c, fds + f
      if not start or s < start then start = s end
    end
  end
  return cpu, start or 0, fds
end

-- stats("all") in the Prometheus text format, with label worker="<id>"
-- on every per-worker sample. Sums over workers are left to the query
-- (sum by ...), as Prometheus wants; only process-wide figures have no
-- worker label.
function M.metrics(all)
  all = all or sys.stats("all", M.timeout)
  local out, n = {}, 0
  local function put(s) n = n + 1; out[n] = s end
  for _, f in ipairs(FAMILIES) do
    local name = f[1]
    put(format("# HELP %s %s", name, f[3]))
    put(format("# TYPE %s %s", name, f[2]))
    for _, w in ipairs(all.workers) do
      if f.field then
        put(format('%s{worker="%d"} %s', name, w.worker, num(w[f.field])))
      else
        local label, map = f.fields[1], f.fields[2]
        local keys = {}
        for k in pairs(map) do keys[#keys + 1] = k end
        table.sort(keys)
        for _, k in ipairs(keys) do
          put(format('%s{worker="%d",%s="%s"} %s', name, w.worker, label, k, num(w[map[k]])))
        end
      end
    end
  end
  put("# HELP cohost_workers Worker threads, in every worker process.")
  put("# TYPE cohost_workers gauge")
  put("cohost_workers " .. num(all.totals.workers))
  put("# HELP cohost_processes Worker processes (1 without --processes).")
  put("# TYPE cohost_processes gauge")
  put("cohost_processes " .. num(all.totals.processes))
  put("# HELP process_resident_memory_bytes Resident memory of the worker processes, summed (/proc/self/statm).")
  put("# TYPE process_resident_memory_bytes gauge")
  put("process_resident_memory_bytes " .. num(all.totals.rss_bytes))
  local cpu, start, fds = process_totals(all)
  put("# HELP process_cpu_seconds_total User and system CPU time of the cohost processes, summed.")
  put("# TYPE process_cpu_seconds_total counter")
  put("process_cpu_seconds_total " .. num(cpu))
  put("# HELP process_start_time_seconds Start time of cohost (its master under --processes), Unix seconds.")
  put("# TYPE process_start_time_seconds gauge")
  put("process_start_time_seconds " .. format("%.2f", start))
  put("# HELP process_open_fds Open file descriptors of the cohost processes, summed.")
  put("# TYPE process_open_fds gauge")
  put("process_open_fds " .. num(fds))
  -- cohost.http's request metrics and the application's (cohost.metrics).
  return concat(out, "\n") .. "\n" .. metrics.render()
end

-- The endpoint's handler: GET (or HEAD) /status, /metrics and /healthz.
local PATHS = { ["/status"] = true, ["/metrics"] = true, ["/healthz"] = true }
function M.handler(req, res)
  if not PATHS[req.path] then
    res.status = 404
    return res:send("not found\n")
  end
  if req.method ~= "GET" and req.method ~= "HEAD" then
    res.status = 405
    res:header("Allow", "GET, HEAD")
    return res:send("method not allowed\n")
  end
  res:header("Cache-Control", "no-store")
  if req.path == "/healthz" then
    -- 503 from the first SIGTERM on (through --drain-delay, while the
    -- listeners still serve), so a load balancer takes the node out
    -- before they close.
    if sys.draining() then
      res.status = 503
      return res:send("draining\n")
    end
    return res:send("ok\n")
  end
  if req.path == "/status" then
    res:header("Content-Type", "application/json")
    return res:send(M.json())
  end
  res:header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
  return res:send(M.metrics())
end

-- Listens on addr ("host:port") with the handler; raises when it cannot.
function M.start(addr)
  local http = require "cohost.http"
  -- Its own requests (scrapes, health checks) stay out of the app's
  -- cohost_http_* series.
  local ok, l, err = pcall(http.listen, addr, M.handler, { metrics = false })
  if not ok then l, err = nil, tostring(l):gsub("^.-bad argument #1 to '[^']*' %((.*)%)$", "%1") end
  if not l then error(("--status-addr %s: %s"):format(addr, tostring(err)), 0) end
  M.listener = l
  return l
end

return M
