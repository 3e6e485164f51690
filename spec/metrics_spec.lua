-- cohost.metrics and the request and process figures on /metrics
-- (docs/stats.md): a build/cohost child with --processes 2 -w 2 and a
-- status address, whose series must be the sums over every worker thread
-- and worker process; and the API's misuse in this process.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

local APP = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port = tonumber(arg[1])
local pid = io.open("/proc/self/stat"):read("*n")
local hits = cohost.metrics.counter("app_hits_total", "Hits.", { "path" })
local size = cohost.metrics.histogram("app_size", "Sizes.", { "path" }, { 1, 10 })
local open = cohost.metrics.gauge("app_open", "Open things.")
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  hits:inc(1, { req.path })
  size:observe(#req.path, { req.path })
  open:inc(2)
  open:dec()
  if req.path == "/missing" then res.status = 404 end
  res:send("pid=" .. pid)
end))
]] .. h.REPORT_PORT

-- /metrics as a table: sample line (name{labels}) -> value.
local function scrape(port)
  local code, body = h.get_to_close(port, "/metrics")
  assert.equal(200, code, body)
  local samples = {}
  for name, value in body:gmatch("\n([%w_:]+%b{}) (%S+)") do samples[name] = tonumber(value) end
  for name, value in body:gmatch("\n([%w_:]+) (%S+)") do samples[name] = tonumber(value) end
  return samples, body
end

describe("/metrics", function()
  it("counts requests by code, method and route, times them, and sums the app's series over every worker and process", function()
    local status = h.fixed_port()
    local p = h.start_fixed_port(("--processes 2 -w 2 --status-addr 127.0.0.1:%d"):format(status), h.tmpfile(APP))
    h.wait_workers(p, 2)   -- both processes answered: the sums below span them
    local before = scrape(status)
    local get0 = before['cohost_http_requests_total{code="200",method="GET",route=""}'] or 0
    for _ = 1, 20 do assert.equal(200, (h.get(p.port, "/a"))) end
    for _ = 1, 3 do assert.equal(404, (h.get(p.port, "/missing"))) end
    assert.equal(200, h.request(p.port, "POST", "/a", {}, "x").status)
    local m, body = scrape(status)
    -- The status endpoint's own scrape (the first one) is not counted.
    assert.equal(get0 + 20, m['cohost_http_requests_total{code="200",method="GET",route=""}'], body)
    assert.equal(3, m['cohost_http_requests_total{code="404",method="GET",route=""}'], body)
    assert.equal(1, m['cohost_http_requests_total{code="200",method="POST",route=""}'], body)
    -- The duration histogram: Prometheus' default buckets, cumulative.
    local total = m['cohost_http_request_duration_seconds_count{route=""}']
    assert.equal(get0 + 24, total, body)
    assert.equal(total, m['cohost_http_request_duration_seconds_bucket{route="",le="+Inf"}'])
    local last = 0
    for _, le in ipairs { "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10" } do
      local v = m['cohost_http_request_duration_seconds_bucket{route="",le="' .. le .. '"}']
      assert.is_number(v, le .. " in " .. body)
      assert.is_true(v >= last)
      last = v
    end
    assert.is_true(m['cohost_http_request_duration_seconds_sum{route=""}'] > 0)
    -- The app's metrics, summed (wait_workers' requests count too).
    local hits = m['app_hits_total{path="/a"}']
    assert.is_true(hits >= 21, body)
    assert.equal(3, m['app_hits_total{path="/missing"}'])
    assert.equal(hits, m['app_size_count{path="/a"}'])
    assert.equal(0, m['app_size_bucket{path="/a",le="1"}'])
    assert.equal(hits, m['app_size_bucket{path="/a",le="10"}'])
    assert.equal(2 * hits, m['app_size_sum{path="/a"}'])
    assert.equal(hits + 3 + (m['app_hits_total{path="/"}'] or 0), m["app_open"])
    assert.truthy(body:find("# TYPE app_size histogram\n", 1, true))
    -- Process figures.
    assert.is_true(m["process_open_fds"] > 6, body)
    assert.is_number(m["process_cpu_seconds_total"], body)
    local start = m["process_start_time_seconds"]
    assert.is_true(start > os.time() - 3600 and start <= os.time() + 1, body)
  end)
end)

describe("the route label", function()
  -- This process's registry (cohost.http here counts into it too): sample
  -- line -> value.
  local function samples()
    local t = {}
    for name, value in cohost.metrics.render():gmatch("\n([%w_:]+%b{}) (%S+)") do t[name] = tonumber(value) end
    return t
  end

  it("is the router's pattern on HTTP/1.1 and HTTP/2 alike, and empty when no route matched", function()
    local r = require("cohost.http.router").new()
    r:get("/spec-notes/:id", function(_, res) res:send("note") end)
    local api = require("cohost.http.router").new()
    api:post("/spec-items/*rest", function(_, res) res:send("item") end)
    r:mount("/spec-api", api)
    local port = h.http_serve(r)
    local NOTE = 'cohost_http_requests_total{code="200",method="GET",route="/spec-notes/:id"}'
    local ITEM = 'cohost_http_requests_total{code="200",method="POST",route="/spec-api/spec-items/*rest"}'
    local MISS = 'cohost_http_requests_total{code="404",method="GET",route=""}'
    local NOTE_T = 'cohost_http_request_duration_seconds_count{route="/spec-notes/:id"}'
    local before = samples()
    for i = 1, 3 do assert.equal(200, h.request(port, "GET", "/spec-notes/" .. i).status) end
    assert.equal(200, h.request(port, "POST", "/spec-api/spec-items/a/b", {}, "x").status)
    assert.equal(404, h.request(port, "GET", "/spec-nothing/1").status)
    -- Two streams of one HTTP/2 connection (nghttp: curl 7.88 does not
    -- reuse an h2c connection it has sent nothing on): the same series.
    local base = ("http://127.0.0.1:%d"):format(port)
    local code, _, err = h.sh(("nghttp -n %s/spec-notes/h2a %s/spec-notes/h2b"):format(base, base))
    assert.equal(0, code, err)
    local after = samples()
    assert.equal((before[NOTE] or 0) + 5, after[NOTE])
    assert.equal((before[ITEM] or 0) + 1, after[ITEM])
    assert.equal((before[MISS] or 0) + 1, after[MISS])
    assert.equal((before[NOTE_T] or 0) + 5, after[NOTE_T])
    -- Patterns, never paths: no series names a path the client sent.
    for name in pairs(after) do
      assert.falsy(name:find("spec-notes/[h%d]", 1) or name:find("spec-nothing", 1, true), name)
    end
  end)
end)

describe("cohost.metrics", function()
  it("refuses bad names, a second shape under one name, and bad values", function()
    local m = cohost.metrics
    assert.has_error(function() m.counter("1bad", "x") end)
    assert.has_error(function() m.counter("ok_name", "x", { "le" }) end)
    assert.has_error(function() m.histogram("h_bad", "x", nil, { 2, 1 }) end)
    local c = m.counter("spec_twice_total", "x", { "a" })
    assert.equal(c.id, m.counter("spec_twice_total", "x", { "a" }).id)
    assert.has_error(function() m.gauge("spec_twice_total", "x", { "a" }) end)
    assert.has_error(function() c:inc(-1, { "v" }) end)
    assert.has_error(function() c:inc(1, { "v", "extra" }) end)
    assert.has_error(function() c:set(1, { "v" }) end)
    c:inc(2, { 'quote"and\\back' })
    assert.truthy(m.render():find('spec_twice_total{a="quote\\"and\\\\back"} 2\n', 1, true), m.render())
  end)
end)
