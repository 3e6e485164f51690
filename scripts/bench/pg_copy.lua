-- COPY of ROWS rows in and out through cohost.postgres (scripts/bench/pg_bench.sh):
--   build/cohost scripts/bench/pg_copy.lua PG_PORT ROWS
-- prints "in=SECONDS out=SECONDS rows=N".
local cohost = require "cohost"
local pg = require "cohost.postgres"

local db = pg.pool { host = "127.0.0.1", port = tonumber(arg[1]), user = "postgres", database = "postgres" }
local n, batch = tonumber(arg[2]), 10000
assert(db:query("DROP TABLE IF EXISTS copied"))
assert(db:query("CREATE TABLE copied (id int, name text)"))
local sent = 0
local t0 = cohost.monotonic()
assert(db:copy_in("COPY copied FROM STDIN", function()
  if sent >= n then return nil end
  local lines = {}
  for i = sent + 1, math.min(sent + batch, n) do lines[#lines + 1] = i .. "\tname " .. i .. "\n" end
  sent = sent + batch
  return table.concat(lines)
end))
local t1 = cohost.monotonic()
local rows = 0
assert(db:copy_out("COPY copied TO STDOUT", function(text)
  local _, k = text:gsub("\n", "")
  rows = rows + k
end))
local t2 = cohost.monotonic()
io.write(("in=%.2f out=%.2f rows=%d\n"):format(t1 - t0, t2 - t1, rows))
db:close()
cohost.exit(0)
