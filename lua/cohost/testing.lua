-- cohost.testing: runs busted inside the host (`cohost --test [busted
-- options] [paths]`, and `busted --lua=cohost`, which re-executes
-- `cohost /usr/bin/busted --ignore-lua ...`: main.c sends both here).
-- The process ends with busted's status as soon as busted is done,
-- whatever listeners, timers or tasks the specs left behind: an app's
-- spec that forgets a listener must not hang the run. See
-- docs/testing-apps.md.
local sys = require "cohost.core.sys"

local M = {}

-- Ends the process now with busted's status (0, or 1 for any failure, as
-- busted's own exit does), its output flushed first.
local function finish(code)
  io.stdout:flush()
  io.stderr:flush()
  sys.exit(code)
end

-- run(args): args are busted's command-line arguments (args[1..n]). Only
-- worker 0 runs the specs; with -w N the other workers stay idle, so a
-- spec sees one copy of itself (several workers: docs/testing-apps.md).
function M.run(args)
  if sys.worker_id() ~= 0 then return end
  -- busted's exit (busted.compatibility) raises a nil error under Lua 5.1
  -- instead of exiting when specs fail, so the host would log "main
  -- error: (error object is a nil value)". busted.runner and its cli
  -- module copy this function into a local when they load: replace it
  -- before they do.
  local compat = require "busted.compatibility"
  compat.exit = function(code)
    finish((code and code ~= 0) and 1 or 0)
  end
  -- busted reads the global arg; arg[0] names the program in its usage.
  -- --ignore-lua: we are the interpreter already, whatever a .busted
  -- file's lua setting says (it would re-execute "busted" as a script).
  -- arg[-1] is the running cohost's full path (main.c), for specs that
  -- start the app as a process of the same cohost.
  local a = { [-1] = args[-1], [0] = "busted", "--ignore-lua" }
  for i = 1, #args do
    if args[i] ~= "--ignore-lua" then a[#a + 1] = args[i] end
  end
  rawset(_G, "arg", a)
  local ok, err = pcall(function()
    require "busted.runner" ({ standalone = false })
  end)
  if not ok then
    io.stderr:write("cohost --test: busted failed: ", tostring(err), "\n")
    finish(1)
  end
  -- A passing run returns here (standalone = false) without exiting.
  finish(0)
end

return M
