-- The server of spec/fuzz/fuzz_http_conn.c: cohost.http on the unix socket
-- arg[1] (HTTP/2 too when arg[2] is "h2"), with small limits so the fuzzer reaches them, and a handler
-- whose answer depends on the path, to walk the server's paths:
--   /err...     raises after setting headers (the server answers 500)
--   /stream...  res:write in pieces, a yield between them
--   /read...    the body through req:read(7)
--   /chunks...  the body through req:chunks(5)
--   /sleep...   parks on a timer first
--   /close...   Connection: close from the handler
--   /hijack...  takes the socket, writes a raw response, closes
--   anything else: req:body(), answered with its length
-- Every answer but /__stats and /err's carries X-Seq (requests seen, in order),
-- X-Method and X-Version, so the harness can check order and framing.
-- GET /__stats answers the figures the harness compares between inputs.
local cohost = require "cohost"
local http = require "cohost.http"

local path = assert(arg[1], "usage: fuzz_http_conn_server.lua SOCKET_PATH")
local seq, errors = 0, 0

local function consume(req, how)
  if how == "read" then
    local n = 0
    while true do
      local s, err = req:read(7)
      if not s then return n, err end
      n = n + #s
    end
  elseif how == "chunks" then
    local n = 0
    local ok, err = pcall(function()
      for s in req:chunks(5) do n = n + #s end
    end)
    return n, not ok and tostring(err) or nil
  end
  local body, err = req:body()
  return body and #body or 0, err
end

local function handler(req, res)
  if req.target == "/__stats" then
    local st = cohost.stats()
    res:header("X-Coros", tostring(st.coros))
    res:header("X-Conns", tostring(st.connections))
    res:header("X-Seq-Now", tostring(seq))
    res:header("X-Errors", tostring(errors))
    res:header("X-Lua", tostring(st.lua_bytes))
    return res:send("")
  end
  local p = req.path or ""
  local word = p:match("^/(%a+)") or ""
  if word == "err" then
    -- Not counted in seq: its 500 carries no X-Seq.
    errors = errors + 1
    error("deliberate")
  end
  seq = seq + 1
  res:header("X-Seq", tostring(seq))
  res:header("X-Method", req.method)
  res:header("X-Version", tostring(req.version))
  if word == "sleep" then cohost.sleep(0.001) end
  if word == "hijack" and req.version == 2 then
    -- res:hijack() raises on HTTP/2: a 500, counted as deliberate.
    errors = errors + 1
    res:hijack()
  end
  if word == "hijack" then
    local sock = res:hijack()
    sock:send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Seq: " .. seq
      .. "\r\nX-Method: " .. req.method .. "\r\nConnection: close\r\n\r\nhj")
    sock:close()
    return
  end
  local n, err = consume(req, word)
  if err then res:header("X-Body-Err", (tostring(err):gsub("[^%w ]", "_"))) end
  if word == "close" then res:header("Connection", "close") end
  if word == "stream" then
    res:write("n=")
    cohost.sleep(0)
    res:write(tostring(n))
    return res:send("\n")
  end
  res:send("n=" .. n .. "\n")
end

local listener = assert(http.listen("unix:" .. path, handler, {
  max_body_size = 2048, max_request_line = 256, max_header_size = 512,
  header_timeout = 2, body_timeout = 2, keepalive_timeout = 5,
  keepalive_requests = 6, server = false,
  -- arg[2] "h2" (the h2_conn harness): a preface starts HTTP/2. Else the
  -- harness checks HTTP/1.x answers only, and a preface the fuzzer finds
  -- must stay an HTTP/1.1 error.
  http2 = arg[2] == "h2", http2_max_concurrent_streams = 8,
}))
local _ = listener
