-- examples/hello.lua's GET / answered through cohost.http.router, with a
-- parameter route beside it: http_profile.sh's SCRIPT for what routing,
-- req.route and the metrics' route label cost a keep-alive hello.
--   bash scripts/bench/http_profile.sh scripts/bench/hello_router.lua
local http = require "cohost.http"

local port = tonumber(arg and arg[1]) or 8080

local r = http.router()
r:get("/", function(_, res) res:send("hello") end)
r:get("/notes/:id", function(req, res) res:send("note " .. req.params.id) end)
assert(http.listen("*:" .. port, r))
