-- Echo server: every client gets back exactly what it sends, line or
-- chunk, as soon as it arrives.
--
--   build/cohost examples/echo.lua [port]          (default 8081)
--   build/cohost -w auto examples/echo.lua 9000    (one worker per CPU)
--
-- Each connection runs handler on its own coroutine; receiveany parks
-- only that coroutine until data comes.
local cohost = require "cohost"

local port = tonumber(arg and arg[1]) or 8081

local function handler(sock)
  while true do
    -- Whatever has arrived, up to 16 KiB: a line, part of one, or many.
    local data, err = sock:receiveany(16384)
    if data then
      if not sock:send(data) then return end
    elseif err ~= "timeout" then   -- "closed" or a socket error: done
      return
    end                            -- an idle minute: keep waiting
  end
end

assert(cohost.listen("*:" .. port, handler))
if cohost.worker_id() == 0 then
  cohost.log(cohost.NOTICE, "echo: listening on port ", port, " with ",
             cohost.worker_count(), " worker(s)")
end
