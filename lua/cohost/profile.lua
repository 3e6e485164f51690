-- cohost.profile: CPU profiles of the workers, as folded stacks and flame
-- graphs (docs/debugging.md). Each worker thread samples itself on its own
-- CPU clock (host/proc/profile.c); a stack is its Lua frames from the
-- outermost ("name@file:line", where the function is defined), under its
-- route with by_route, and the C function the sample interrupted where
-- naming it is cheap.
--   local profile = require "cohost.profile"   -- also cohost.profile
--   profile.start { hz = 99 }
--   ... load ...
--   local folded = profile.stop()
--   io.open("cpu.svg", "w"):write(profile.svg(folded))
local core = require "cohost.core.debug"
local cjson = require("cjson").new()   -- our own settings, not the app's

local M = {}

local concat, format, sort = table.concat, string.format, table.sort

-- merge(folded) -> the same stacks, each once (counts summed), the
-- largest first, and the total count.
function M.merge(folded)
  local counts, order, total = {}, {}, 0
  for line in (folded or ""):gmatch("[^\n]+") do
    local stack, n = line:match("^(.-)%s+(%d+)$")
    n = tonumber(n)
    if stack and n then
      if not counts[stack] then order[#order + 1] = stack end
      counts[stack] = (counts[stack] or 0) + n
      total = total + n
    end
  end
  sort(order, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return a < b
  end)
  local out = {}
  for i, stack in ipairs(order) do out[i] = format("%s %d", stack, counts[stack]) end
  return #out > 0 and concat(out, "\n") .. "\n" or "", total
end

-- What the workers said: { samples = total, workers = { {worker, process,
-- pid, answered, samples | error}, ... } }.
local function info(workers, total)
  local ok, list = pcall(cjson.decode, "[" .. (workers or "") .. "]")
  return { samples = total, workers = ok and list or {} }
end

-- start([opts]) -> true | nil, err. Every worker of this process starts
-- sampling, opts.hz times per second of its CPU time (default 99, at most
-- 1000), each stack under its route with opts.by_route. One profile at a
-- time: "busy" while another runs.
function M.start(opts)
  local workers, err = core.profile_start(opts or {})
  if not workers then return nil, err end
  return true
end

-- stop() -> folded, info | nil, err. Ends the profile start began.
function M.stop()
  local folded, workers = core.profile_stop()
  if not folded then return nil, workers end
  local merged, total = M.merge(folded)
  return merged, info(workers, total)
end

-- run(seconds [, opts]) -> folded, info | nil, err. Samples every worker
-- of every worker process (--processes) for seconds: what GET
-- /debug/profile answers.
function M.run(seconds, opts)
  opts = opts or {}
  local folded, workers = core.profile { seconds = seconds, hz = opts.hz, by_route = opts.by_route }
  if not folded then return nil, workers end
  local merged, total = M.merge(folded)
  return merged, info(workers, total)
end

-- svg(folded [, opts]) -> a flame graph (cohost.flamegraph).
function M.svg(folded, opts)
  return require("cohost.flamegraph").svg(folded, opts)
end

return M
