-- ngx_app.lua (OpenResty code: ngx.* and pgmoon over cosockets) served by
-- cohost through cohost.ngx: the row that shows what cohost's ngx API and
-- cosockets cost against nginx's on the same Lua.
--
--   PGMOON_DIR=/path/to/pgmoon build/cohost -w 1 scripts/bench/techempower/ngx_cohost.lua HTTP_PORT PG_PORT [POOL_SIZE]
local http = require "cohost.http"
require "cohost.ngx"

local port = assert(tonumber(arg[1]), "usage: ngx_cohost.lua HTTP_PORT PG_PORT [POOL_SIZE]")
local pgmoon_dir = assert(os.getenv("PGMOON_DIR"), "PGMOON_DIR (a checkout of leafo/pgmoon) is not set")
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. pgmoon_dir .. "/?.lua;" .. pgmoon_dir .. "/?/init.lua;" .. package.path

local app = require "ngx_app"
app.configure { port = assert(tonumber(arg[2]), "PG_PORT expected"), pool = tonumber(arg[3]) or 64 }

-- One path per test, as nginx.conf has one exact location per test: a
-- table lookup, where nginx matches locations in C.
local routes = {}
for _, name in ipairs { "plaintext", "json", "db", "queries", "fortunes", "updates" } do
  routes["/" .. name] = app[name]
end
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  local fn = routes[req.path]
  if not fn then
    res.status = 404
    return res:send("not found")
  end
  fn()
end))
