-- Shared dictionary micro-benchmark: operations per second of get, set
-- and incr on one dictionary, from every worker at once.
--   build/cohost scripts/bench/shdict_bench.lua [ops]        -- one worker
--   build/cohost -w 2 scripts/bench/shdict_bench.lua [ops]   -- two, contending
-- Each worker runs this main chunk; they meet at a barrier kept in the
-- dictionary, run each phase, and the last one to finish prints the total
-- (the sum of the workers' rates) and the per-worker figures.
local cohost = require "cohost"
local shared = require "cohost.shared"

local OPS = tonumber(arg[1]) or 1000000
local KEYS = 1000   -- distinct keys, so lookups walk real buckets
local d = shared.new("bench", "16m")
local workers = cohost.worker_count()
local me = cohost.worker_id()

local keys, values = {}, {}
for i = 1, KEYS do keys[i] = "key:" .. i end
for i = 1, 97 do values[i] = "value number " .. i end   -- made up front: time the store, not concatenation
for i = 1, KEYS do d:set(keys[i], "value number " .. i) end

-- Waits until every worker has reached barrier name.
local function barrier(name)
  d:incr(name, 1, 0)
  local t0 = cohost.monotonic()
  while d:get(name) < workers do
    assert(cohost.monotonic() - t0 < 30, "barrier " .. name .. " timed out")
    cohost.sleep(0.001)
  end
end

local phases = {
  { "get", function(i) return d:get(keys[i % KEYS + 1]) end },
  { "set", function(i) return d:set(keys[i % KEYS + 1], values[i % 97 + 1]) end },
  { "incr", function(i) return d:incr("counter", 1, 0) end },
  { "get (missing key)", function(i) return d:get("nope") end },
}

local lines = {}
for _, phase in ipairs(phases) do
  local name, op = phase[1], phase[2]
  barrier("start " .. name)
  local t0 = cohost.monotonic()
  for i = 1, OPS do op(i) end
  local rate = OPS / (cohost.monotonic() - t0)
  d:incr("rate " .. name, rate, 0)
  lines[#lines + 1] = ("worker %d %-18s %12.0f ops/s"):format(me, name, rate)
  barrier("end " .. name)
end

io.write(table.concat(lines, "\n"), "\n")
io.stdout:flush()
if d:incr("finished", 1, 0) == workers then
  print(("-- %d worker(s), %d ops each per phase"):format(workers, OPS))
  for _, phase in ipairs(phases) do
    print(("total    %-18s %12.0f ops/s"):format(phase[1], d:get("rate " .. phase[1])))
  end
end
