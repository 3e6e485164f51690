-- The /db handler of scripts/bench/pg_bench.sh: one random row of a
-- 10,000-row table, as JSON. Runs on the old cohost.postgres (LuaSQL)
-- and the new (libpq's asynchronous API) alike.
--   build/cohost scripts/bench/pg_db.lua HTTP_PORT PG_PORT [POOL_SIZE]
local http = require "cohost.http"
local pg = require "cohost.postgres"

local db = pg.pool { host = "127.0.0.1", port = tonumber(arg[2]), user = "postgres",
                     database = "postgres", size = tonumber(arg[3] or 16) }

http.listen("127.0.0.1:" .. arg[1], function(req, res)
  local rows, err = db:query("SELECT id, randomnumber FROM world WHERE id = $1", math.random(1, 10000))
  if not rows then
    res.status = 500
    return res:send(tostring(err))
  end
  res:json(rows[1])
end)
