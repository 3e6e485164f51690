-- An allocation-heavy Lua loop, for the Lua heap's allocator
-- (docs/benchmarks.md, "Memory after a burst"): each iteration makes a
-- string, three tables and a closure, every seventh a longer string, and
-- keeps the last 4,096 iterations' tables alive, so the collector frees
-- as much as the loop makes. Instructions per iteration are the
-- difference of two callgrind runs:
--   valgrind --tool=callgrind build/cohost scripts/bench/lua_alloc_loop.lua N [nojit]
-- for two N; "nojit" turns the JIT off, whose traces otherwise differ
-- from run to run (LuaJIT randomizes its hot-loop penalties).
local n = tonumber(arg and arg[1]) or 1000000
if arg and arg[2] == "nojit" then jit.off() end
local keep = {}
for i = 1, n do
  local s = "k" .. i
  local t = { i, s, { x = i, y = s }, function() return i end }
  if i % 7 == 0 then t[5] = string.rep(s, 8) end
  keep[i % 4096 + 1] = t
end
io.write(#keep, "\n")
