-- TechEmpower's six tests on cohost, written to TechEmpower's rules with
-- what an application uses: cohost.http's router and res:json, and
-- cohost.postgres as docs/postgres.md documents it (a pool per worker,
-- bound parameters, prepared statements, db:pipeline). The peer is
-- ngx_app.lua, the same tests on nginx + OpenResty's Lua module + pgmoon.
--
--   build/cohost -w 1 scripts/bench/techempower/app.lua HTTP_PORT PG_PORT [POOL_SIZE]
--
-- PostgreSQL on 127.0.0.1:PG_PORT holds TechEmpower's hello_world
-- database (db.sh). Routes:
--   /plaintext              "Hello, World!"
--   /json                   {"message":"Hello, World!"}
--   /db                     one random World row
--   /queries?queries=N      N rows (N clamped to 1..500; not a number: 1),
--                           one query after the other
--   /fortunes               the Fortune rows and one added at request time,
--                           sorted by message, as an HTML table
--   /updates?queries=N      N rows read one after the other, given new
--                           random numbers, written back by one statement
--   /pipeline/queries, /pipeline/updates   the same with the N reads sent
--                           at once with db:pipeline (one round trip)
local http = require "cohost.http"
local pg = require "cohost.postgres"

local random, tonumber, concat, sort = math.random, tonumber, table.concat, table.sort

local port = assert(tonumber(arg[1]), "usage: app.lua HTTP_PORT PG_PORT [POOL_SIZE]")
local db = pg.pool {
  host = "127.0.0.1", port = assert(tonumber(arg[2]), "PG_PORT expected"),
  database = "hello_world", user = "benchmarkdbuser", password = "benchmarkdbpass",
  size = tonumber(arg[3]) or 64,
}

local WORLD = "SELECT id, randomnumber FROM world WHERE id = $1"

-- queries(req) -> the queries parameter clamped to 1..500 (TechEmpower:
-- missing or not a number gives 1). A repeated parameter takes its first.
local function queries(req)
  local q = req.query.queries
  if type(q) == "table" then q = q[1] end
  local n = tonumber(q)
  if not n then return 1 end
  n = math.floor(n)
  return n < 1 and 1 or n > 500 and 500 or n
end

local function failed(res, err)
  res.status = 500
  return res:send(tostring(err))
end

-- The World row id as TechEmpower's JSON names it, read on conn (the
-- pool itself, or one connection of it).
local function world(conn, id)
  local rows, err = conn:query(WORLD, id)
  if not rows then return nil, err end
  local row = rows[1]
  return { id = row.id, randomNumber = row.randomnumber }
end

-- n rows on conn (one connection: db:with holds it, as the peer holds
-- one pgmoon connection for all n), read one query at a time; nil, err
-- on a failure.
local function worlds(conn, n)
  local list = http.array()
  for i = 1, n do
    local w, err = world(conn, random(1, 10000))
    if not w then return nil, err end
    list[i] = w
  end
  return list
end

-- n rows on conn (a connection or the pool) read in one round trip: the
-- n statements go out together with db:pipeline.
local function worlds_pipelined(conn, n)
  local results, err = conn:pipeline(function(p)
    for _ = 1, n do p:query(WORLD, random(1, 10000)) end
  end)
  if not results then return nil, err end
  local list = http.array()
  for i = 1, n do
    local r = results[i]
    if r.err then return nil, r.err end
    local row = r.rows[1]
    list[i] = { id = row.id, randomNumber = row.randomnumber }
  end
  return list
end

-- UPDATE statements by row count: "... FROM (VALUES ($1::int, $2::int),
-- ...) AS v (id, r)". One prepared statement per count.
local update_sql = setmetatable({}, { __index = function(t, n)
  local values = {}
  for i = 1, n do values[i] = ("($%d::int, $%d::int)"):format(2 * i - 1, 2 * i) end
  local sql = "UPDATE world SET randomnumber = v.r FROM (VALUES " .. concat(values, ", ") ..
              ") AS v (id, r) WHERE world.id = v.id"
  t[n] = sql
  return sql
end })

-- Gives each row of list a new random number and writes them back in one
-- statement, by id in ascending order: concurrent requests lock their
-- rows in the same order, so they never deadlock. A row read twice is
-- written once, with the last number it got (the one the answer shows
-- last).
local function update(conn, list)
  local last = {}
  for i = 1, #list do
    local w = list[i]
    w.randomNumber = random(1, 10000)
    last[w.id] = w.randomNumber
  end
  local ids = {}
  for id in pairs(last) do ids[#ids + 1] = id end
  sort(ids)
  local params = {}
  for i = 1, #ids do
    params[2 * i - 1] = ids[i]
    params[2 * i] = last[ids[i]]
  end
  return conn:query(update_sql[#ids], unpack(params, 1, 2 * #ids))
end

-- http.escape_html: C, and no new string when there is nothing to escape
-- (ngx_app.lua has Lua's string.find and gsub, as OpenResty code does).
local escape_html = http.escape_html

local function by_message(a, b) return a.message < b.message end

local r = http.router()

r:get("/plaintext", function(_, res)
  res:header("Content-Type", "text/plain")
  res:send("Hello, World!")
end)

r:get("/json", function(_, res)
  res:json({ message = "Hello, World!" })
end)

r:get("/db", function(_, res)
  local w, err = world(db, random(1, 10000))
  if not w then return failed(res, err) end
  res:json(w)
end)

r:get("/queries", function(req, res)
  local n = queries(req)
  local list, err = db:with(function(conn) return worlds(conn, n) end)
  if not list then return failed(res, err) end
  res:json(list)
end)

r:get("/pipeline/queries", function(req, res)
  local list, err = worlds_pipelined(db, queries(req))
  if not list then return failed(res, err) end
  res:json(list)
end)

r:get("/fortunes", function(_, res)
  local rows, err = db:query("SELECT id, message FROM fortune")
  if not rows then return failed(res, err) end
  rows[#rows + 1] = { id = 0, message = "Additional fortune added at request time." }
  sort(rows, by_message)
  local out = { "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>",
                "<tr><th>id</th><th>message</th></tr>" }
  for i = 1, #rows do
    local f = rows[i]
    out[#out + 1] = "<tr><td>" .. f.id .. "</td><td>" .. escape_html(f.message) .. "</td></tr>"
  end
  out[#out + 1] = "</table></body></html>"
  res:header("Content-Type", "text/html; charset=utf-8")
  res:send(concat(out))
end)

-- Reads with read(conn, n), then writes back, on one connection.
local function read_update(read, n)
  return db:with(function(conn)
    local list, err = read(conn, n)
    if not list then return nil, err end
    local ok, uerr = update(conn, list)
    if not ok then return nil, uerr end
    return list
  end)
end

r:get("/updates", function(req, res)
  local list, err = read_update(worlds, queries(req))
  if not list then return failed(res, err) end
  res:json(list)
end)

r:get("/pipeline/updates", function(req, res)
  local list, err = read_update(worlds_pipelined, queries(req))
  if not list then return failed(res, err) end
  res:json(list)
end)

assert(http.listen("127.0.0.1:" .. port, r))
