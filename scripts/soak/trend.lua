-- The trend rule of scripts/soak.sh (docs/soak.md): does a sampled series
-- (RSS, open fds, coroutines...) grow over a run once it has warmed up?
--
-- The first warm fraction of the run (by time) is dropped: caches, pools
-- and the Lua heap grow to their working size there, and the loads ramp up.
-- A least-squares line is fitted to the rest; the series fails when the
-- line rises over the measured window by more than rel * (the line's value
-- at the window's start) + abs, even after taking off z = 2 standard errors
-- of that rise. A straight-line fit rather than last minus first, so one
-- late spike (a reload, a GC cycle) does not decide. The standard-error
-- margin keeps short runs of noisy series (coroutines in flight swing by
-- dozens between samples) from failing by chance; it shrinks as the run
-- gets longer (by n^1.5 for n samples), so a long soak is strict.
local M = {}

-- The default rules: series name (a CSV column) -> { rel, abs } with abs
-- in the column's unit. RSS is in KiB: 10% + 2 MiB.
M.rules = {
  rss_kb = { rel = 0.10, abs = 2048 },
  fds = { rel = 0.05, abs = 10 },
  coros = { rel = 0.05, abs = 10 },
  procs = { rel = 0, abs = 1 },     -- master + workers: one more is a leak
}
M.order = { "rss_kb", "fds", "coros", "procs" }
M.warm = 0.2            -- fraction of the run's time treated as warm-up
M.min_samples = 5       -- fewer measured samples than this: no verdict, a failure
M.z = 2                 -- standard errors of the growth given to noise

-- Least-squares fit of ys on xs (arrays of numbers, same length >= 2):
-- returns slope, intercept and the slope's standard error (0 with fewer
-- than 3 points). O(n).
function M.fit(xs, ys)
  local n, sx, sy = #xs, 0, 0
  for i = 1, n do sx, sy = sx + xs[i], sy + ys[i] end
  local mx, my = sx / n, sy / n
  local sxx, sxy = 0, 0
  for i = 1, n do
    local dx = xs[i] - mx
    sxx, sxy = sxx + dx * dx, sxy + dx * (ys[i] - my)
  end
  if sxx == 0 then return 0, my, 0 end
  local b = sxy / sxx
  local a = my - b * mx
  if n < 3 then return b, a, 0 end
  local rss = 0
  for i = 1, n do
    local r = ys[i] - (a + b * xs[i])
    rss = rss + r * r
  end
  return b, a, math.sqrt(rss / (n - 2) / sxx)
end

-- Checks one series: ts and ys are arrays of sample times (seconds) and
-- values, nil values being missed samples. Returns a table:
--   ok (boolean), base (fitted value at the window's start), growth (the
--   line's rise over the window), margin (z standard errors of growth),
--   limit, slope (per second), n (samples used), t0, t1 (the window), why
--   (a message when not ok).
function M.check_series(ts, ys, rule, warm)
  warm = warm or M.warm
  local tlast = ts[#ts] or 0
  local tfirst = ts[1] or 0
  local from = tfirst + warm * (tlast - tfirst)
  local xs, vs = {}, {}
  for i = 1, #ts do
    if ts[i] >= from and ys[i] ~= nil then
      xs[#xs + 1], vs[#vs + 1] = ts[i], ys[i]
    end
  end
  local r = { n = #xs, t0 = xs[1], t1 = xs[#xs] }
  if #xs < M.min_samples then
    r.ok, r.why = false, ("only %d samples after warm-up (need %d)"):format(#xs, M.min_samples)
    return r
  end
  local b, a, se = M.fit(xs, vs)
  local span = r.t1 - r.t0
  r.slope = b
  r.base = math.max(a + b * r.t0, 0)
  r.growth = b * span
  r.margin = M.z * se * span
  r.limit = rule.rel * r.base + rule.abs
  r.ok = r.growth - r.margin <= r.limit
  if not r.ok then
    r.why = ("grows by %.1f +- %.1f over %.0f s (limit %.1f)"):format(r.growth, r.margin, span, r.limit)
  end
  return r
end

-- Parses CSV text with a header line of column names; every field is a
-- number or empty (a missed sample, kept as nil). Returns the columns as
-- name -> array (indexed by row), the header's names in order and the row
-- count.
function M.parse_csv(text)
  local names, cols, nrows = nil, {}, 0
  for line in text:gmatch("[^\r\n]+") do
    local fields = {}
    for f in (line .. ","):gmatch("([^,]*),") do fields[#fields + 1] = f end
    if not names then
      names = fields
      for _, name in ipairs(names) do cols[name] = {} end
    else
      nrows = nrows + 1
      for i, name in ipairs(names) do cols[name][nrows] = tonumber(fields[i]) end
    end
  end
  return cols, names or {}, nrows
end

-- Checks every column of cols that has a rule (rules defaults to M.rules)
-- against the time column t. Returns ok (all passed) and a list of
-- { name = column, ... check_series's fields } in M.order, then any other
-- ruled columns by name.
function M.check(cols, rules, warm)
  rules = rules or M.rules
  local ts, out, ok = cols.t or {}, {}, true
  local names = {}
  for _, name in ipairs(M.order) do
    if rules[name] then names[#names + 1] = name end
  end
  local extra = {}
  for name in pairs(rules) do
    local listed = false
    for _, n in ipairs(names) do listed = listed or n == name end
    if not listed then extra[#extra + 1] = name end
  end
  table.sort(extra)
  for _, name in ipairs(extra) do names[#names + 1] = name end
  for _, name in ipairs(names) do
    if cols[name] then
      local r = M.check_series(ts, cols[name], rules[name], warm)
      r.name = name
      out[#out + 1] = r
      ok = ok and r.ok
    end
  end
  return ok, out
end

-- One line per result, for people.
function M.report(results)
  local lines = {}
  for _, r in ipairs(results) do
    if r.slope then
      lines[#lines + 1] = ("%-7s %-4s start %.0f, trend %+.1f +- %.1f over %.0f s (limit %.1f, %d samples)")
        :format(r.name, r.ok and "ok" or "FAIL", r.base, r.growth, r.margin, r.t1 - r.t0, r.limit, r.n)
    else
      lines[#lines + 1] = ("%-7s FAIL %s"):format(r.name, r.why)
    end
  end
  return table.concat(lines, "\n")
end

return M
