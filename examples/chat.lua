-- Chat room: every line a client sends goes to every connected client,
-- prefixed with the sender's name. Two doors to one room: a line-based
-- TCP port (nc) and an HTTP port with a page and a WebSocket endpoint.
-- Lines travel through cohost.broadcast, so the room is one room across
-- every worker thread (-w N) and worker process (--processes N), wherever
-- the kernel put each client. Each client has a subscription and one
-- coroutine draining it to its socket, so a slow client never holds up
-- the others: its queue fills instead, up to a cap, and then it is
-- dropped from the room (cohost.broadcast's overflow rule).
-- With a Redis URL, the room spans every chat server that names the same
-- Redis: run one per machine behind a load balancer, or two on one
-- machine on different ports, and a line said on one is heard on all.
--
--   build/cohost examples/chat.lua [port [web_port [redis://host:port]]]
--   (default 8082, 8083, no Redis)
--   then: nc 127.0.0.1 8082, type a name, then lines; /quit leaves;
--   or open http://127.0.0.1:8083/ in a browser.
local cohost = require "cohost"
local http = require "cohost.http"
local websocket = require "cohost.websocket"
local broadcast = require "cohost.broadcast"

local port = tonumber(arg and arg[1]) or 8082
local web_port = tonumber(arg and arg[2]) or port + 1
local redis_url = arg and arg[3]
if redis_url then broadcast.configure{ backend = "redis", url = redis_url } end
local ROOM = "chat"
local BACKLOG = 1000            -- lines queued for a slow client before it is dropped

-- Joins the room: send(line) is called, from a coroutine of its own, with
-- every line said in the room from now on, until it returns false or the
-- subscription overflows. Returns leave(), which waits for that
-- coroutine.
local function join(name, send)
  local sub = broadcast.subscribe(ROOM, { queue = BACKLOG })
  local writer = cohost.spawn(function()
    while true do
      local line = sub:receive()
      if not line or not send(line) then return end
    end
  end)
  broadcast.publish(ROOM, "* " .. name .. " joined")
  return function(why)
    sub:close()
    cohost.wait(writer)
    broadcast.publish(ROOM, "* " .. name .. " left")
    cohost.log(cohost.INFO, "chat: ", name, " left: ", why or "quit")
  end
end

local function say(name, line)
  broadcast.publish(ROOM, name .. ": " .. line)
end

-- The line door.
local function line_handler(sock)
  sock:settimeouts(5000, 10000, 600000)   -- connect, send, read (idle 10 min)
  sock:send("name? ")
  local name, err = sock:receive("*l")
  if not name or name == "" then return end
  name = name:sub(1, 32)
  local leave = join(name, function(line) return sock:send(line .. "\n") end)
  while true do
    local line
    line, err = sock:receive("*l")
    if not line or line == "/quit" then break end
    say(name, line)
  end
  leave(err)
end

local PAGE = [[<!doctype html>
<meta charset="utf-8"><title>cohost chat</title>
<style>body{font:15px sans-serif;max-width:40em;margin:2em auto}#log{white-space:pre-wrap;border:1px solid #ccc;height:20em;overflow:auto;padding:.5em}</style>
<div id="log"></div>
<form id="f"><input id="t" autocomplete="off" style="width:80%" placeholder="your name first"><button>send</button></form>
<script>
const log = document.getElementById("log"), t = document.getElementById("t");
let ws = null;
function show(line) { log.textContent += line + "\n"; log.scrollTop = log.scrollHeight; }
document.getElementById("f").onsubmit = (e) => {
  e.preventDefault();
  if (!ws) {
    ws = new WebSocket(location.href.replace(/^http/, "ws").replace(/\/?$/, "/ws?name=") + encodeURIComponent(t.value));
    ws.onmessage = (m) => show(m.data);
    ws.onclose = () => { show("* disconnected"); ws = null; };
    t.placeholder = "say something";
  } else {
    ws.send(t.value);
  }
  t.value = "";
};
</script>
]]

-- The web door: GET / is the page, GET /ws?name=NAME the WebSocket. Once
-- in the room, a client is told which worker serves it.
local function web_handler(req, res)
  if req.path == "/" then
    res:header("Content-Type", "text/html; charset=utf-8")
    return res:send(PAGE)
  end
  if req.path ~= "/ws" then
    res.status = 404
    return res:send("not found\n")
  end
  local name = (req.query.name or ""):sub(1, 32)
  if name == "" then
    res.status = 400
    return res:send("name? (/ws?name=NAME)\n")
  end
  local ws = websocket.upgrade(req, res, { timeout = 600000 })
  if not ws then return end
  local leave = join(name, function(line) return ws:send(line) end)
  ws:send("* you are " .. name .. " on worker " .. cohost.worker_id())
  local why
  while true do
    local data, typ = ws:recv()
    if not data or typ == "close" then why = typ or "closed"; break end
    if typ == "text" then say(name, data) end
  end
  leave(why)
  ws:close()
end

assert(cohost.listen("*:" .. port, line_handler))
assert(http.listen("*:" .. web_port, web_handler))
if cohost.worker_id() == 0 then
  cohost.log(cohost.NOTICE, "chat: listening on port ", port, " (lines) and ", web_port, " (web)",
             redis_url and ", one room with every server on " .. redis_url or "")
end
