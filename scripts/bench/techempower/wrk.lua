-- wrk's script for scripts/bench/sections/techempower.sh: with
-- TFB_PIPELINE=N in the environment each write carries N requests
-- (TechEmpower's plaintext test pipelines 16); at the end it prints
-- "p99_us=..." and "samples=...". wrk 4.1.0's percentile ranks against
-- its count of samples; where that exceeds the samples it kept (seen
-- with pipelining) it answers 0, and then the 99th percentile is
-- computed here over the samples kept.
local depth = tonumber(os.getenv("TFB_PIPELINE") or "1") or 1

if depth > 1 then
  local req
  function init()
    local r = {}
    for i = 1, depth do r[i] = wrk.format() end
    req = table.concat(r)
  end
  function request() return req end
end

-- Each latency(i) call scans wrk's histogram from its minimum: a walk
-- over many distinct values is quadratic, so it is skipped past this.
local WALK_MAX = 20000

function done(_, latency)
  local p99 = latency:percentile(99)
  local n = 0
  if p99 == 0 and #latency <= WALK_MAX then
    -- latency(i): the i-th distinct value kept (us) and how many samples
    -- had it, in ascending order.
    local values, counts = {}, {}
    for i = 1, #latency do
      local v, c = latency(i)
      values[i], counts[i] = v, c
      n = n + c
    end
    local rank, seen = math.ceil(n * 0.99), 0
    for i = 1, #values do
      seen = seen + counts[i]
      if seen >= rank then p99 = values[i]; break end
    end
  end
  io.write(("p99_us=%s\nsamples=%d\n"):format(p99 > 0 and ("%d"):format(p99) or "", n))
end
