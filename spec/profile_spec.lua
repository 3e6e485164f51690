-- The CPU profiler (docs/debugging.md): GET /debug/profile's folded
-- stacks and flame graph from a child cohost whose handler spends its
-- time in one slow Lua function, by route; cohost.profile.start/stop in
-- this process; bad arguments.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local get = h.get_to_close

-- slow_sum is where the time goes: a JIT-compiled loop, whose samples
-- are taken when it leaves its trace (host/proc/profile.c names traces).
local APP = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port = tonumber(arg[1])
local function slow_sum(n)
  local s = 0
  for i = 1, n do s = s + (i % 7) * 0.5 end
  return s
end
local function render(n) return tostring(slow_sum(n)) end
local r = http.router()
r:get("/cpu/:n", function(req, res) res:send(render(tonumber(req.params.n))) end)
r:get("/idle", function(req, res) res:send("idle") end)
assert(http.listen("127.0.0.1:" .. port, r))
]] .. h.REPORT_PORT

-- Starts the app with a status listener; keeps n clients asking /cpu/...
-- until the test ends. Returns the status port.
local function busy_app(n)
  local sport = h.fixed_port()
  local p = h.start(("-w 1 --status-addr 127.0.0.1:%d %s %d"):format(sport, h.shell_quote(h.tmpfile(APP)),
    h.fixed_port()))
  defer(p.stop)
  assert.is_true(h.wait_for(function() return get(sport, "/healthz") == 200 end), "no status listener")
  local on = true
  defer(function() on = false end)
  for _ = 1, n do
    cohost.spawn(function()
      while on do get(p.port, "/cpu/2000000") end
    end)
  end
  return sport
end

-- Self samples of each frame of a folded profile: what the last Lua frame
-- of each stack (the C function after it left aside) was running.
local function self_counts(folded)
  local counts = {}
  for stack, n in folded:gmatch("([^\n]*) (%d+)\n") do
    local leaf
    for frame in stack:gmatch("[^;]+") do
      if not frame:find("^%[C%] ") then leaf = frame end
    end
    if leaf then counts[leaf] = (counts[leaf] or 0) + tonumber(n) end
  end
  return counts
end

local function widest(counts)
  local best, n = nil, -1
  for k, v in pairs(counts) do
    if v > n then best, n = k, v end
  end
  return best, n
end

-- The boxes of a flame graph: { title, text, x, y, w } each.
local function boxes(svg)
  local list = {}
  for g in svg:gmatch("<g>(.-)</g>") do
    local title = g:match("<title>(.-)</title>")
    local x, y, w = g:match('<rect x="([%d.]+)" y="(%d+)" width="([%d.]+)"')
    local text = g:match("<text[^>]*>(.-)</text>")
    if title and x then
      list[#list + 1] = { title = title, text = text, x = tonumber(x), y = tonumber(y), w = tonumber(w) }
    end
  end
  return list
end

-- The box whose own width (its width less its callees', the boxes right
-- above it) is the largest: where the time was spent.
local function widest_box(list)
  local best, most = nil, -1
  for _, b in ipairs(list) do
    local own = b.w
    for _, c in ipairs(list) do
      if c.y < b.y and b.y - c.y <= 16 and c.x >= b.x - 0.05 and c.x < b.x + b.w then own = own - c.w end
    end
    if own > most then best, most = b, own end
  end
  return best
end

describe("GET /debug/profile", function()
  it("names the slow Lua function as the widest frame, in folded stacks and in the flame graph", function()
    local sport = busy_app(2)
    local code, folded = get(sport, "/debug/profile?seconds=1.5&hz=500")
    assert.equal(200, code)
    local counts = self_counts(folded)
    local leaf, n = widest(counts)
    assert.truthy(leaf and leaf:find("^slow_sum@.*:4$"), folded)
    assert.truthy(n >= 10, folded)
    -- The stack under it: the route's handler, render, slow_sum.
    assert.truthy(folded:find("render@[^;]*:9;slow_sum@[^;]*:4"), folded)

    local svg
    code, svg = get(sport, "/debug/profile?seconds=1.5&hz=500&format=svg")
    assert.equal(200, code)
    assert.truthy(svg:find('^<%?xml version="1.0" standalone="no"%?>\n<svg '), svg:sub(1, 200))
    assert.truthy(svg:find("</svg>\n$"))
    local b = widest_box(boxes(svg))
    assert.truthy(b and b.text:find("^slow_sum@"), b and b.title)
    assert.truthy(b.title:find("%(%d+ samples, [%d.]+%%%)$"), b.title)
  end)

  it("puts each stack under its route with by=route", function()
    local sport = busy_app(1)
    local code, folded = get(sport, "/debug/profile?seconds=1&hz=500&by=route")
    assert.equal(200, code)
    local under = 0
    for stack, n in folded:gmatch("([^\n]*) (%d+)\n") do
      if stack:find("^/cpu/:n;") then under = under + tonumber(n) end
    end
    assert.truthy(under > 0, folded)
    assert.truthy(folded:find("^/cpu/:n;[^\n]*slow_sum@"), folded)
  end)

  it("refuses bad arguments", function()
    local sport = h.fixed_port()
    local p = h.start(("-w 1 --status-addr 127.0.0.1:%d %s %d"):format(sport, h.shell_quote(h.tmpfile(APP)),
      h.fixed_port()))
    defer(p.stop)
    assert.is_true(h.wait_for(function() return get(sport, "/healthz") == 200 end), "no status listener")
    for _, q in ipairs { "seconds=0", "seconds=9999", "seconds=x", "hz=0", "hz=5000", "by=worker", "format=png" } do
      local code, body = get(sport, "/debug/profile?" .. q)
      assert.equal(400, code, q)
      assert.truthy(body:find("^bad "), body)
    end
  end)
end)

describe("cohost.profile", function()
  it("start and stop sample this process's workers", function()
    assert.is_true(cohost.profile.start { hz = 500 })
    local ok, err = cohost.profile.start()
    assert.is_nil(ok)
    assert.equal("busy: another profile runs", err)
    -- Burn CPU here, yielding now and then, in a function of our own.
    local function spin_here(until_t)
      local x = 0
      while cohost.monotonic() < until_t do
        for i = 1, 20000 do x = x + i % 3 end
        cohost.sleep(0)
      end
      return x
    end
    spin_here(cohost.monotonic() + 0.5)
    local folded, info = cohost.profile.stop()
    assert.is_string(folded)
    assert.truthy(info.samples > 0, folded)
    assert.equal(info.samples, select(2, cohost.profile.merge(folded)))
    assert.truthy(folded:find("spin_here@spec/profile_spec.lua:%d+"), folded)
    assert.is_true(info.workers[1].answered)
    ok, err = cohost.profile.stop()
    assert.is_nil(ok)
    assert.equal("no profile runs", err)
    local svg = cohost.profile.svg(folded, { title = "mine" })
    assert.truthy(svg:find(">mine</text>", 1, true))
    assert.truthy(svg:find("spin_here@", 1, true))
  end)
end)
