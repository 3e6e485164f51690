-- The server of spec/hardening_spec.lua, started as a child:
--   cohost spec/hardening/server.lua HEADER_TIMEOUT SEND_TIMEOUT
-- It prints "port pid" once listening. Routes: /big answers 8 MiB (one
-- string built at start, so a server that streams it from the string adds
-- nothing per client, and one that copies it whole adds 8 MiB); /upload
-- reads the whole body; /stats answers "coros connections" from
-- cohost.stats() (this request's own coroutine included, the same every
-- time); anything else answers "ok".
local cohost = require "cohost"
local http = require "cohost.http"

local header_timeout, send_timeout = tonumber(arg[1]) or 60, tonumber(arg[2]) or 60
local BIG = string.rep("0123456789abcdef", 8 * 1024 * 1024 / 16)

local listener = assert(http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/big" then return res:send(BIG) end
  if req.path == "/upload" then
    local body = req:body()
    return res:send(body and tostring(#body) or "none")
  end
  if req.path == "/stats" then
    local s = cohost.stats()
    return res:send(("%d %d"):format(s.coros, s.connections))
  end
  res:send("ok")
end, { header_timeout = header_timeout, send_timeout = send_timeout, body_timeout = 5 }))

local _, port = listener:addr()
local stat = io.open("/proc/self/stat")
local pid = stat:read("*n")
stat:close()   -- the specs count this process's fds
io.write(port .. " " .. pid .. "\n")   -- one write: workers run this at once
io.stdout:flush()
