-- The status endpoint (--status-addr): GET /status answers every worker's
-- figures and the process totals as JSON, GET /metrics the same in the
-- Prometheus text exposition format 0.0.4. The host starts it on worker 0
-- once the script's main chunk has run; it serves from worker 0 and asks
-- the other workers, and under --processes the other worker processes,
-- for fresh figures on each request (see docs/stats.md). The debug
-- endpoints, GET /debug/tasks and /debug/profile (docs/debugging.md), are
-- served only here, and only when the listener is on loopback or cohost
-- was started with --debug-endpoints.
local M = {}

local sys = require "cohost.core.sys"
local debug_core = require "cohost.core.debug"
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

-- Whether a listen address is on loopback: 127.0.0.0/8, ::1, localhost,
-- or a unix socket (reached only from this machine, by its file's mode).
function M.loopback(addr)
  if addr:match("^unix:") then return true end
  local host = addr:match("^%[(.-)%]:%d+$") or addr:match("^(.*):%d+$") or ""
  return host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- Seconds a profile may last, at most.
M.PROFILE_MAX_SECONDS = 300

local function bad(res, status, msg)
  res.status = status
  res:header("Content-Type", "text/plain; charset=utf-8")
  return res:send(msg .. "\n")
end

-- GET /debug/tasks[?format=text][&state=S][&min_age=SECONDS][&route=PATTERN]
local function debug_tasks(req, res)
  local q = req.query
  local min_age = q.min_age and tonumber(q.min_age)
  if q.min_age and not (min_age and min_age >= 0) then return bad(res, 400, "bad min_age: seconds expected") end
  local text = q.format == "text"
  if q.format and not text and q.format ~= "json" then return bad(res, 400, "bad format: json or text expected") end
  local items, workers = debug_core.tasks { state = q.state, route = q.route, min_age = min_age, text = text }
  if not items then return bad(res, 503, "task dump: " .. tostring(workers)) end
  if not text then
    res:header("Content-Type", "application/json")
    return res:send('{"tasks":[' .. items .. '],"workers":[' .. workers .. ']}')
  end
  -- Text: the blocks, then a line per worker that did not answer.
  local notes = {}
  for _, w in ipairs(cjson.decode("[" .. workers .. "]")) do
    if not w.answered then
      notes[#notes + 1] = w.worker and format("worker %d (process %d) did not answer: a handler holds its thread?\n",
        w.worker, w.process or 0) or format("process %d did not answer in time\n", w.process or 0)
    end
  end
  res:header("Content-Type", "text/plain; charset=utf-8")
  return res:send(items .. concat(notes))
end

-- GET /debug/profile?seconds=N[&hz=99][&format=svg][&by=route]
local function debug_profile(req, res)
  local q = req.query
  local seconds, hz = tonumber(q.seconds or 10), tonumber(q.hz or 99)
  if not (seconds and seconds > 0 and seconds <= M.PROFILE_MAX_SECONDS) then
    return bad(res, 400, format("bad seconds: more than 0, at most %d expected", M.PROFILE_MAX_SECONDS))
  end
  if not (hz and hz >= 1 and hz <= 1000) then return bad(res, 400, "bad hz: 1 to 1000 expected") end
  if q.by and q.by ~= "route" then return bad(res, 400, "bad by: only by=route is known") end
  if q.format and q.format ~= "svg" and q.format ~= "folded" then
    return bad(res, 400, "bad format: folded or svg expected")
  end
  local profile = require "cohost.profile"
  local folded, info = profile.run(seconds, { hz = hz, by_route = q.by == "route" })
  if not folded then return bad(res, 503, "profile: " .. tostring(info)) end
  if q.format == "svg" then
    res:header("Content-Type", "image/svg+xml")
    return res:send(profile.svg(folded, {
      title = "cohost CPU profile" .. (q.by == "route" and ", by route" or ""),
      subtitle = format("%d samples in %g s at %g Hz, %d worker%s (%s)", info.samples, seconds, hz,
        #info.workers, #info.workers == 1 and "" or "s", os.date("!%Y-%m-%d %H:%M:%S UTC")),
    }))
  end
  res:header("Content-Type", "text/plain; charset=utf-8")
  return res:send(folded)
end

-- The endpoint's handler: GET (or HEAD) /status, /metrics and /healthz;
-- GET /debug/tasks and /debug/profile where allowed (M.debug).
local PATHS = { ["/status"] = true, ["/metrics"] = true, ["/healthz"] = true }
local DEBUG = { ["/debug/tasks"] = debug_tasks, ["/debug/profile"] = debug_profile }
function M.handler(req, res)
  local dbg = DEBUG[req.path]
  if dbg then
    if not M.debug then
      return bad(res, 403, "the debug endpoints are off: the status listener is not on loopback; "
        .. "start cohost with --debug-endpoints to serve them here")
    end
    if req.method ~= "GET" then
      res:header("Allow", "GET")
      return bad(res, 405, "method not allowed")
    end
    res:header("Cache-Control", "no-store")
    return dbg(req, res)
  end
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
  -- Decided before the first request can come.
  M.debug = debug_core.options().debug_endpoints or M.loopback(addr)
  -- Its own requests (scrapes, health checks) stay out of the app's
  -- cohost_http_* series, and out of --slow-request-ms's log (a profile
  -- takes its seconds by design).
  local ok, l, err = pcall(http.listen, addr, M.handler, { metrics = false, slow_request_ms = 0 })
  if not ok then l, err = nil, tostring(l):gsub("^.-bad argument #1 to '[^']*' %((.*)%)$", "%1") end
  if not l then error(("--status-addr %s: %s"):format(addr, tostring(err)), 0) end
  M.listener = l
  return l
end

return M
