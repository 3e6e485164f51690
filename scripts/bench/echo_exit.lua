-- examples/echo.lua's handler, for counting tools: the process exits once
-- CONNS connections (argument 2) have ended, so a run under cachegrind
-- writes its counts without a signal (scripts/bench/echo_misses.sh, which
-- sends SIGTERM otherwise: under valgrind a worker waiting in io_uring_enter
-- never lets the thread that turns SIGTERM into a shutdown run).
--
--   build/cohost scripts/bench/echo_exit.lua PORT CONNS
local cohost = require "cohost"

local port = assert(tonumber(arg[1]), "usage: echo_exit.lua PORT CONNS")
local conns = assert(tonumber(arg[2]), "usage: echo_exit.lua PORT CONNS")
local ended = 0

local function handler(sock)
  while true do
    local data, err = sock:receiveany(16384)
    if data then
      if not sock:send(data) then break end
    elseif err ~= "timeout" then
      break
    end
  end
  sock:close()
  ended = ended + 1
  if ended == conns then os.exit(0) end
end

assert(cohost.listen("127.0.0.1:" .. port, handler))
