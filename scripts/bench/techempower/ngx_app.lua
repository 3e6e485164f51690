-- TechEmpower's six tests as OpenResty code: ngx.* and pgmoon over
-- cosockets, the peer of app.lua. The same file runs in nginx +
-- lua-nginx-module (nginx.conf: one location per test calls the function
-- of that name) and on cohost through cohost.ngx (ngx_cohost.lua).
-- pgmoon is fetched at bench time, never committed: PGMOON_DIR names it.
--
--   local app = require "ngx_app"
--   app.configure { port = PG_PORT, pool = POOL_SIZE }   -- once per worker
--   app.db()                                             -- in a handler
--
-- Each request takes a connection from the cosocket pool (pgmoon's
-- connect with pool_size and backlog: at most pool_size connections, the
-- other requests queue) and gives it back with setkeepalive. Queries use
-- pgmoon's simple protocol with the integers written into the SQL text,
-- as TechEmpower's Lapis (OpenResty + pgmoon) entry does: one message per
-- query, where pgmoon's extended protocol sends five and parses nothing
-- less.
local pgmoon = require "pgmoon"
local cjson = require "cjson"

local random, concat, sort = math.random, table.concat, table.sort
local encode = cjson.encode

local M = {}

local config                    -- pgmoon's, set by configure
local POOL                      -- connections kept per worker

-- configure { port = N, pool = N [, backlog = N] }: where the database
-- is and how many connections each worker keeps.
function M.configure(opts)
  POOL = opts.pool or 64
  config = {
    host = "127.0.0.1", port = tostring(opts.port), database = "hello_world",
    user = "benchmarkdbuser", password = "benchmarkdbpass",
    pool_size = POOL, backlog = opts.backlog or 4096,
  }
end

local function connect()
  local db = pgmoon.new(config)
  local ok, err = db:connect()
  if not ok then return nil, err end
  return db
end

-- 0: no idle timeout; the pool keeps POOL connections.
local function release(db)
  db:keepalive(0, POOL)
end

local function fail(err)
  ngx.status = 500
  ngx.say(tostring(err))
  return ngx.exit(500)
end

local function send(body, ctype)
  ngx.header.content_type = ctype
  ngx.header.content_length = #body
  ngx.print(body)
end

-- The queries parameter clamped to 1..500; missing or not a number: 1.
local function queries()
  local q = ngx.req.get_uri_args().queries
  if type(q) == "table" then q = q[1] end
  local n = tonumber(q)
  if not n then return 1 end
  n = math.floor(n)
  return n < 1 and 1 or n > 500 and 500 or n
end

local function world(db, id)
  local rows, err = db:query("SELECT id, randomnumber FROM world WHERE id = " .. id)
  if not rows then return nil, err end
  local row = rows[1]
  return { id = row.id, randomNumber = row.randomnumber }
end

-- n rows, one query after the other; nil, err on a failure.
local function worlds(db, n)
  local list = {}
  for i = 1, n do
    local w, err = world(db, random(1, 10000))
    if not w then return nil, err end
    list[i] = w
  end
  return list
end

function M.plaintext()
  send("Hello, World!", "text/plain")
end

function M.json()
  send(encode({ message = "Hello, World!" }), "application/json")
end

function M.db()
  local db, err = connect()
  if not db then return fail(err) end
  local w
  w, err = world(db, random(1, 10000))
  if not w then return fail(err) end
  release(db)
  send(encode(w), "application/json")
end

function M.queries()
  local db, err = connect()
  if not db then return fail(err) end
  local list
  list, err = worlds(db, queries())
  if not list then return fail(err) end
  release(db)
  send(encode(list), "application/json")
end

local HTML = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

-- Most messages have nothing to escape: find costs no garbage, gsub
-- makes a new string either way.
local function escape_html(s)
  if not s:find("[&<>\"']") then return s end
  return (s:gsub("[&<>\"']", HTML))
end

local function by_message(a, b) return a.message < b.message end

function M.fortunes()
  local db, err = connect()
  if not db then return fail(err) end
  local rows
  rows, err = db:query("SELECT id, message FROM fortune")
  if not rows then return fail(err) end
  release(db)
  rows[#rows + 1] = { id = 0, message = "Additional fortune added at request time." }
  sort(rows, by_message)
  local out = { "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>",
                "<tr><th>id</th><th>message</th></tr>" }
  for i = 1, #rows do
    local f = rows[i]
    out[#out + 1] = "<tr><td>" .. f.id .. "</td><td>" .. escape_html(f.message) .. "</td></tr>"
  end
  out[#out + 1] = "</table></body></html>"
  send(concat(out), "text/html; charset=utf-8")
end

-- Rows read one after the other, given new random numbers, written back
-- by one statement in ascending id order (concurrent requests lock rows
-- in the same order: no deadlocks); a row read twice is written once,
-- with the last number it got.
function M.updates()
  local db, err = connect()
  if not db then return fail(err) end
  local list
  list, err = worlds(db, queries())
  if not list then return fail(err) end
  local last, ids = {}, {}
  for i = 1, #list do
    local w = list[i]
    w.randomNumber = random(1, 10000)
    if not last[w.id] then ids[#ids + 1] = w.id end
    last[w.id] = w.randomNumber
  end
  sort(ids)
  local values = {}
  for i = 1, #ids do values[i] = "(" .. ids[i] .. ", " .. last[ids[i]] .. ")" end
  local ok
  ok, err = db:query("UPDATE world SET randomnumber = v.r FROM (VALUES " .. concat(values, ", ") ..
                     ") AS v (id, r) WHERE world.id = v.id")
  if not ok then return fail(err) end
  release(db)
  send(encode(list), "application/json")
end

return M
