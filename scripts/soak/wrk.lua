-- wrk script for scripts/soak.sh: well-behaved keep-alive clients of
-- examples/soak.lua, cycling through its routes (GET /, /json, /sleep,
-- /file, POST /echo). Every answer should be a 2xx. At the end it prints
-- one line that soak.sh reads:
--
--   wrk requests=123456 non2xx=0 connect=0 read=0 write=0 timeout=0
--
-- non2xx counts answers outside 200-299 (wrk's own status error counts
-- only >= 400); the other four are wrk's socket errors.
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
end

local reqs, n = {}, 0
bad = 0   -- a thread global: done() reads it with thread:get

function init()
  local body = ("soak "):rep(200)    -- 1000 bytes
  reqs = {
    wrk.format("GET", "/"),
    wrk.format("GET", "/json"),
    wrk.format("POST", "/echo", { ["Content-Type"] = "text/plain" }, body),
    wrk.format("GET", "/sleep"),
    wrk.format("GET", "/file"),
  }
end

function request()
  n = n % #reqs + 1
  return reqs[n]
end

function response(status)
  if status < 200 or status > 299 then bad = bad + 1 end
end

function done(summary)
  local non2xx = 0
  for _, t in ipairs(threads) do non2xx = non2xx + (tonumber(t:get("bad")) or 0) end
  local e = summary.errors
  io.write(("wrk requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d\n")
    :format(summary.requests, non2xx, e.connect, e.read, e.write, e.timeout))
end
