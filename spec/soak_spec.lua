-- scripts/soak.sh, the soak driver (docs/soak.md): its trend rule on
-- synthetic series, then two short end-to-end runs against build/cohost
-- serving examples/soak.lua: one that must pass, and one with the
-- example's deliberate leaks turned on, which the trend check must fail.
-- The runs need wrk, slowhttptest, gnuplot and python3 (scripts/deps.sh).
local h = require "spec.helper"
local trend = require "scripts.soak.trend"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- Columns as the sampler writes them: t from 0 to n-1 and values f(t).
local function series(n, f)
  local ts, ys = {}, {}
  for i = 1, n do ts[i], ys[i] = i - 1, f(i - 1) end
  return ts, ys
end

-- A deterministic pseudo-random sequence in [0, 1): noise that is the same
-- on every run.
local function noise(seed)
  local x = seed
  return function()
    x = (x * 1103515245 + 12345) % 2147483648
    return x / 2147483648
  end
end

describe("the soak trend rule", function()
  local rule = { rel = 0.05, abs = 10 }

  it("fails a series that rises steadily after the warm-up", function()
    local ts, ys = series(60, function(t) return 100 + 0.5 * t end)
    local r = trend.check_series(ts, ys, rule)
    assert.is_false(r.ok)
    assert.near(0.5, r.slope, 1e-9)
    assert.near(23.5, r.growth, 1e-6)   -- 0.5 a second over t = 12 .. 59
    assert.matches("grows by 23.5", r.why)
  end)

  it("passes a flat series with noise many times its limit", function()
    local rnd = noise(7)
    local ts, ys = series(60, function() return 100 + 60 * rnd() end)
    local r = trend.check_series(ts, ys, rule)
    assert.is_true(r.ok, r.why)
    assert.is_true(r.growth < r.margin + r.limit)
  end)

  it("fails a slow leak hidden in noise once the run is long enough", function()
    local rnd = noise(3)
    -- 0.1 a second: 60 over a 10-minute run, under noise of +-30.
    local ts, ys = series(600, function(t) return 100 + 0.1 * t + 60 * (rnd() - 0.5) end)
    assert.is_false(trend.check_series(ts, ys, rule).ok)
  end)

  it("ignores growth during the warm-up", function()
    local ts, ys = series(50, function(t) return t < 10 and 20 + 10 * t or 120 end)
    local r = trend.check_series(ts, ys, rule)
    assert.is_true(r.ok, r.why)
    assert.equal(0, r.growth)
  end)

  it("fails a series with too few samples after the warm-up", function()
    local ts, ys = series(4, function() return 1 end)
    local r = trend.check_series(ts, ys, rule)
    assert.is_false(r.ok)
    assert.matches("only 3 samples", r.why)
  end)

  it("skips missed samples in the CSV and checks every ruled column", function()
    local csv = { "t,rss_kb,fds,procs,coros,connections" }
    for t = 0, 29 do
      -- coros left empty every third second, as when a scrape times out.
      csv[#csv + 1] = ("%d,%d,%d,1,%s,5"):format(t, 20000, 50 + t, t % 3 == 0 and "" or "40")
    end
    local cols, names, nrows = trend.parse_csv(table.concat(csv, "\n") .. "\n")
    assert.equal(30, nrows)
    assert.equal("connections", names[6])
    assert.is_nil(cols.coros[1])
    local ok, results = trend.check(cols)
    assert.is_false(ok)
    local by = {}
    for _, r in ipairs(results) do by[r.name] = r end
    local names_checked = {}
    for i, r in ipairs(results) do names_checked[i] = r.name end
    assert.same({ "rss_kb", "fds", "coros", "procs" }, names_checked)
    assert.is_true(by.rss_kb.ok)
    assert.is_false(by.fds.ok)          -- one more fd every second
    assert.is_true(by.coros.ok)
    assert.equal(16, by.coros.n)        -- 24 measured seconds less the 8 missed
    assert.matches("fds%s+FAIL", trend.report(results))
  end)
end)

-- Runs scripts/soak.sh with env (a table) into a fresh directory; returns
-- its exit code, output and the directory.
local function soak(env)
  local p = io.popen("mktemp -d")
  local dir = p:read("*l")
  p:close()
  defer(function() os.execute("rm -rf " .. q(dir)) end)
  local vars = { "SOAK_DIR=" .. q(dir), "SOAK_COHOST=" .. q(h.COHOST) }
  -- A loadgen already built is used as it is: make inside a test could
  -- race a build.
  local loadgen = h.root .. "build/bench/loadgen"
  if io.open(loadgen) then vars[#vars + 1] = "SOAK_LOADGEN=" .. q(loadgen) end
  for k, v in pairs(env) do vars[#vars + 1] = k .. "=" .. q(v) end
  local out = os.tmpname()
  defer(function() os.remove(out) end)
  local ok, how, code = os.execute(("timeout 60 env %s bash %sscripts/soak.sh > %s 2>&1")
    :format(table.concat(vars, " "), h.root, out))
  if type(ok) == "number" then code = ok / 256 end   -- Lua 5.1's os.execute
  return code, h.slurp(out), dir
end

local function csv_rows(dir)
  local cols, _, nrows = trend.parse_csv(h.slurp(dir .. "/soak.csv"))
  return cols, nrows
end

-- A sanitizer build (make test SAN=..., which sets ASAN_OPTIONS) is no
-- soak target: ASan's quarantine holds up to 256 MiB of freed memory, so
-- RSS rises by design, and the load generator is instrumented too. Only
-- the failing soak below means something there.
local san = os.getenv("ASAN_OPTIONS") ~= nil

describe("scripts/soak.sh", function()
  local it_release = san and function(name) pending(name .. " (not in a sanitizer build: ASan's quarantine grows RSS)") end or it

  it_release("drives every load but reloads against cohost, writes the CSV and the PNG, and passes", function()
    -- Reloads are left out: they need --processes and take longer than
    -- this run (docs/soak.md). Few slow clients: in a 10 s run their
    -- 5 s cycles would otherwise swing the fd count past its limit.
    local env = { SOAK_SECONDS = "10", SOAK_LOADS = "wrk echo slowloris slowread reset", SOAK_SLOW_CONNS = "5" }
    local code, out, dir = soak(env)
    -- A 10 s run's trend verdict is noisy on a loaded machine (coroutines
    -- in flight went 41 -> 79 there, a "trend" of +37 against a limit of
    -- 12): a failure that is only a trend is run once more. A server that
    -- leaks fails both (the next test shows the rule catches leaks); any
    -- other failure counts at once.
    local function trend_only(text)
      local fails, trends = 0, 0
      for line in text:gmatch("soak: FAIL: ([^\n]*)") do
        fails = fails + 1
        if line:find("trends upward", 1, true) then trends = trends + 1 end
      end
      return fails > 0 and fails == trends
    end
    if code == 1 and trend_only(out) then
      io.stderr:write("  [soak_spec] trend-only failure, running again:\n", out)
      code, out, dir = soak(env)
    end
    assert.equal(0, code, out)
    assert.matches("soak: PASSED\n$", out)
    local cols, nrows = csv_rows(dir)
    assert.is_true(nrows >= 9, out)
    assert.is_true(cols.requests[nrows] > 1000, out)   -- the status endpoint's counter
    assert.is_true(cols.coros[nrows] > 0)
    local wrk_requests, non2xx = out:match("wrk requests=(%d+) non2xx=(%d+)")
    assert.is_true(tonumber(wrk_requests) > 1000, out)
    assert.equal("0", non2xx)
    assert.matches("echo rounds=%d+ msgs=[1-9]%d* errors=0 failed_rounds=0", out)
    assert.matches("slowloris rounds=[1-9]", out)
    assert.matches("slowread rounds=[1-9]", out)
    assert.matches("reset attempts=[1-9]%d* ", out)
    assert.equal("\137PNG\r\n\26\n", h.slurp(dir .. "/soak.png"):sub(1, 8))
  end)

  it("fails when the server leaks memory, descriptors and coroutines", function()
    local code, out, dir = soak { SOAK_SECONDS = "7", SOAK_LOADS = "wrk", SOAK_LEAK = "mem,coro,fd" }
    assert.equal(1, code, out)
    for _, name in ipairs { "rss_kb", "fds", "coros" } do
      assert.matches("trend " .. name .. "%s+FAIL", out)
    end
    assert.matches("trend procs%s+ok", out)
    -- The leak is the only reason: every request was answered.
    assert.matches("wrk requests=%d+ non2xx=0 connect=0 read=0 write=0 timeout=0", out)
    assert.is_true(select(2, csv_rows(dir)) >= 6)
    assert.matches("soak: FAILED\n$", out)
  end)
end)
