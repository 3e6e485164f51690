-- examples/hello.lua with every worker sampled by the profiler from the
-- start, at PROFILE_HZ per CPU second (default 99): the "on" side of
-- scripts/bench/profile_overhead.sh and of http_profile.sh's callgrind
-- figure with profiling on (docs/benchmarks.md).
--   build/cohost -w 1 scripts/bench/hello_profiled.lua PORT
local cohost = require "cohost"
assert(cohost.profile.start { hz = tonumber(os.getenv("PROFILE_HZ") or 99) })
dofile((debug.getinfo(1, "S").source:match("^@(.-)scripts/bench/[^/]*$") or "") .. "examples/hello.lua")
