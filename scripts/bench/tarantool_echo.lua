-- Tarantool's socket echo for scripts/bench/run.sh:
--
--   tarantool scripts/bench/tarantool_echo.lua PORT
--
-- socket.tcp_server runs handler on a new fiber per connection. The loop
-- is the same as examples/echo.lua's receiveany + send: a non-blocking
-- sysread of whatever has arrived (up to 16 KiB), and a wait for
-- readability only when nothing has. No box.cfg: the socket module alone.
local socket = require "socket"
local errno = require "errno"

local port = tonumber(arg[1]) or 8081

local function handler(s)
  while true do
    local data = s:sysread(16384)
    if data == nil then
      local e = s:errno()
      if e ~= errno.EAGAIN and e ~= errno.EWOULDBLOCK and e ~= errno.EINTR then
        break
      end
      s:readable()                 -- parks this fiber until data comes
    elseif data == "" then         -- end of stream
      break
    elseif not s:write(data) then
      break
    end
  end
end                                -- tcp_server closes s on return

-- With prepare given, tcp_server leaves SO_REUSEADDR to it; it returns the
-- listen backlog (4096: 10,000 idle clients connect in a burst).
local function prepare(s)
  s:setsockopt("SOL_SOCKET", "SO_REUSEADDR", true)
  return 4096
end

assert(socket.tcp_server("127.0.0.1", port, {handler = handler, prepare = prepare}))
