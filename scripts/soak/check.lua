-- Applies the trend rule (scripts/soak/trend.lua, docs/soak.md) to a soak
-- CSV: one line per series, exit status 0 when none grows, 1 otherwise.
--
--   build/cohost scripts/soak/check.lua build/soak/soak.csv [warm]
--
-- warm is the warm-up fraction of the run (default 0.2). Run by cohost as
-- a plain script runner, so the soak needs no other Lua.
local cohost = require "cohost"
local here = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/"
local trend = dofile(here .. "trend.lua")

local path = arg[1]
if not path then
  io.stderr:write("usage: cohost scripts/soak/check.lua FILE.csv [warm]\n")
  cohost.exit(2)
end
local f, err = io.open(path)
if not f then
  io.stderr:write("check.lua: ", err, "\n")
  cohost.exit(2)
end
local cols = trend.parse_csv(f:read("*a"))
f:close()
local ok, results = trend.check(cols, nil, tonumber(arg[2]))
print(trend.report(results))
cohost.exit(ok and 0 or 1)
