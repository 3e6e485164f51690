-- wrk's script for scripts/bench/sections/techempower.sh: with
-- TFB_PIPELINE=N in the environment each write carries N requests
-- (TechEmpower's plaintext test pipelines 16); at the end it prints
-- "p99_us=..." and "samples=...", the 99th percentile over the latency
-- samples wrk kept. wrk 4.1.0's own percentiles rank against a count
-- that can exceed the samples it kept, and then print 0 (seen with
-- pipelining); walking the kept samples gives the real figure.
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

function done(_, latency)
  -- latency(i): the i-th distinct value kept (us) and how many samples
  -- had it, in ascending order.
  local values, counts, n = {}, {}, 0
  for i = 1, #latency do
    local v, c = latency(i)
    values[i], counts[i] = v, c
    n = n + c
  end
  local rank, seen, p99 = math.ceil(n * 0.99), 0, 0
  for i = 1, #values do
    seen = seen + counts[i]
    if seen >= rank then p99 = values[i]; break end
  end
  io.write(("p99_us=%d\nsamples=%d\n"):format(p99, n))
end
