-- Line-based chat room: every line a client sends goes to every connected
-- client, prefixed with the sender's name. Each client has a channel; one
-- coroutine per client drains it to the socket, so a slow client never
-- holds up the others (its channel grows instead, up to a cap).
--
--   build/cohost examples/chat.lua [port]          (default 8082)
--   then: nc 127.0.0.1 8082, type a name, then lines; /quit leaves.
--
-- With several workers each worker has its own room: clients are spread
-- over workers by the kernel (SO_REUSEPORT), so run one worker for one room.
local cohost = require "cohost"

local port = tonumber(arg and arg[1]) or 8082
local BACKLOG = 1000            -- lines queued for a slow client before it is dropped

local members = {}              -- channel -> name

local function broadcast(line)
  for ch in pairs(members) do
    if ch:len() >= BACKLOG then
      ch:close()                -- too slow: its writer will disconnect it
      members[ch] = nil
    else
      ch:send(line)
    end
  end
end

local function handler(sock, peer)
  sock:settimeouts(5000, 10000, 600000)   -- connect, send, read (idle 10 min)
  sock:send("name? ")
  local name, err = sock:receive("*l")
  if not name or name == "" then return end
  name = name:sub(1, 32)

  local inbox = cohost.channel()
  members[inbox] = name
  broadcast("* " .. name .. " joined\n")

  -- Writer: drains this client's channel until it is closed.
  local writer = cohost.spawn(function()
    while true do
      local line = inbox:receive()
      if not line or not sock:send(line) then return end
    end
  end)

  while true do
    local line
    line, err = sock:receive("*l")
    if not line or line == "/quit" then break end
    broadcast(name .. ": " .. line .. "\n")
  end

  members[inbox] = nil
  inbox:close()
  cohost.wait(writer)
  broadcast("* " .. name .. " left\n")
  cohost.log(cohost.INFO, "chat: ", name, " (", peer, ") left: ", err or "quit")
end

assert(cohost.listen("*:" .. port, handler))
if cohost.worker_id() == 0 then
  cohost.log(cohost.NOTICE, "chat: listening on port ", port)
end
