-- TCP proxy: forwards every client connection to one upstream, both
-- directions at once, and passes half-closes and errors on.
--
--   build/cohost examples/proxy.lua listen_port upstream_host upstream_port
--
-- e.g. build/cohost examples/proxy.lua 8082 127.0.0.1 8081 in front of
-- examples/echo.lua. Each connection runs two light threads, one per
-- direction, on the same pair of sockets (one reader and one writer on
-- each socket at a time, which cosockets allow).
local cohost = require "cohost"

local listen_port = tonumber(arg and arg[1])
local upstream_host = arg and arg[2]
local upstream_port = tonumber(arg and arg[3])
if not (listen_port and upstream_host and upstream_port) then
  io.stderr:write("usage: cohost examples/proxy.lua listen_port upstream_host upstream_port\n")
  cohost.exit(2)
end

local CONNECT_TIMEOUT = 5000    -- ms to reach the upstream
local IDLE_TIMEOUT = 300000     -- ms a direction may stay silent
local CHUNK = 16384             -- most bytes forwarded per read

-- Copies src to dst until src ends. A clean end ("closed": the sender
-- shut down its side) is passed on as a half-close, so the other
-- direction can still finish. Returns the reason and which way it ran.
local function pipe(src, dst, name)
  while true do
    local data, err = src:receiveany(CHUNK)
    if not data then
      if err == "closed" then dst:shutdown("send") end
      return err, name
    end
    local ok, serr = dst:send(data)
    if not ok then return serr, name end
  end
end

local function handler(client, peer)
  local upstream = cohost.tcp()
  upstream:settimeouts(CONNECT_TIMEOUT, IDLE_TIMEOUT, IDLE_TIMEOUT)
  local ok, err = upstream:connect(upstream_host, upstream_port)
  if not ok then
    cohost.log(cohost.ERR, "proxy: ", peer, ": upstream ", upstream_host, ":",
               upstream_port, ": ", err)
    return   -- the client's socket closes when the handler returns
  end
  client:settimeouts(CONNECT_TIMEOUT, IDLE_TIMEOUT, IDLE_TIMEOUT)

  local up = cohost.spawn(pipe, client, upstream, "up")
  local down = cohost.spawn(pipe, upstream, client, "down")
  local _, why, name = cohost.wait(up, down)
  local other = name == "up" and down or up
  if why == "closed" then
    cohost.wait(other)   -- half-closed: let the other direction finish
  else
    if why ~= nil then   -- a timeout or a reset ends both directions
      cohost.log(cohost.INFO, "proxy: ", peer, ": ", name, ": ", why)
    end
    cohost.kill(other)
    cohost.wait(other)
  end
  upstream:close()
end

assert(cohost.listen("*:" .. listen_port, handler))
if cohost.worker_id() == 0 then
  cohost.log(cohost.NOTICE, "proxy: port ", listen_port, " -> ", upstream_host, ":",
             upstream_port)
end
