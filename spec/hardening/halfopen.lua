-- The client of spec/hardening_memory_spec.lua, a process of its own (its
-- fds must not count against the server's, nor the spec runner's):
--   cohost spec/hardening/halfopen.lua PORT N ROUNDS GO
-- Each round opens N connections to 127.0.0.1:PORT, sends each a request
-- head that never ends (no blank line), prints "open R COUNT", waits for
-- the file GO..R to appear, closes them all and prints "closed R".
local cohost = require "cohost"

local port, n, rounds, go = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), arg[4]
local PER = 250   -- connections per opening thread
local HEAD = "GET /some/path?q=1 HTTP/1.1\r\nHost: example\r\nUser-Agent: halfopen\r\n"
             .. "X-Pad: " .. ("p"):rep(300) .. "\r\n"

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

for r = 1, rounds do
  local socks, threads = {}, {}
  for k = 1, math.ceil(n / PER) do
    threads[k] = cohost.spawn(function()
      for _ = 1, math.min(PER, n - (k - 1) * PER) do
        local s = cohost.tcp()
        s:settimeout(20000)
        if s:connect("127.0.0.1", port) and s:send(HEAD) then socks[#socks + 1] = s else s:close() end
      end
    end)
  end
  for _, t in ipairs(threads) do cohost.wait(t) end
  io.write(("open %d %d\n"):format(r, #socks))
  io.stdout:flush()
  while not exists(go .. r) do cohost.sleep(0.01) end
  for _, s in ipairs(socks) do s:close() end
  io.write(("closed %d\n"):format(r))
  io.stdout:flush()
end
