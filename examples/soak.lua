-- The target of scripts/soak.sh: a small HTTP service and a TCP echo in one
-- process, so one set of samples covers both kinds of load.
--
--   build/cohost examples/soak.lua [http_port] [echo_port]   (8080, 8081)
--
--   GET  /        "hello"               GET /json   a small JSON document
--   POST /echo    the body back         GET /sleep  "slept", after 5 ms
--   GET  /big     256 KiB (slow readers hold it)    GET /file   this file
--   anything else: 404
--
-- The timeouts are short so that scripts/soak.sh's slow clients are cut off
-- every few seconds: those paths (408, send timeouts, resets) run many times
-- in a run instead of once.
--
-- SOAK_LEAK (environment) turns on deliberate leaks in the HTTP handler, to
-- check that the soak catches them; a comma-separated list of:
--   mem    keep 1 KiB per request forever (RSS grows)
--   coro   every 20th request spawns a coroutine that never ends
--   fd     every 200th request opens /dev/null and never closes it
local cohost = require "cohost"
local http = require "cohost.http"

local http_port = tonumber(arg and arg[1]) or 8080
local echo_port = tonumber(arg and arg[2]) or 8081

local leak = {}
for kind in (os.getenv("SOAK_LEAK") or ""):gmatch("[%w_]+") do leak[kind] = true end
local kept, served = {}, 0     -- what the leaks keep; requests seen

-- GET /file serves this script with sendfile(2): an open and a close per
-- request, so a descriptor leak on that path shows in the fd count.
local script = arg and arg[0] or "examples/soak.lua"
local big = ("0123456789abcdef"):rep(256 * 1024 / 16)

local function leaky()
  served = served + 1
  if leak.mem then
    -- Unique content: LuaJIT interns strings, so a repeated one costs nothing.
    kept[#kept + 1] = served .. ("x"):rep(1024)
  end
  if leak.coro and served % 20 == 0 then
    cohost.spawn(function() cohost.sleep(1e9) end)
  end
  if leak.fd and served % 200 == 0 then
    kept[#kept + 1] = io.open("/dev/null")
  end
end

local function handler(req, res)
  leaky()
  local path = req.path
  if path == "/" then
    res:send("hello")
  elseif path == "/json" then
    res:json({ message = "hello", worker = cohost.worker_id() })
  elseif path == "/echo" and req.method == "POST" then
    local body, err = req:body()
    if not body then
      res.status = 400
      return res:send(err)
    end
    res:header("Content-Type", "application/octet-stream")
    res:send(body)
  elseif path == "/sleep" then
    cohost.sleep(0.005)
    res:send("slept")
  elseif path == "/file" then
    res:sendfile(script)
  elseif path == "/big" then
    res:header("Content-Type", "text/plain")
    res:send(big)
  else
    res.status = 404
    res:send("not found\n")
  end
end

assert(http.listen("*:" .. http_port, handler, {
  header_timeout = 5, body_timeout = 5, send_timeout = 10, keepalive_timeout = 10,
}))

assert(cohost.listen("*:" .. echo_port, function(sock)
  while true do
    local data = sock:receiveany(4096)
    if not data or not sock:send(data) then return end
  end
end))

if cohost.worker_id() == 0 then
  cohost.log(cohost.NOTICE, "soak target: http on ", http_port, ", echo on ", echo_port,
             next(leak) and ", leaking: " .. os.getenv("SOAK_LEAK") or "")
end
