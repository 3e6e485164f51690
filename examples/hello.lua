-- The smallest web service: `build/cohost examples/hello.lua [port]`.
-- GET / answers "hello"; GET /json answers a small JSON document.
local http = require "cohost.http"

local port = tonumber(arg and arg[1]) or 8080

local listener, err = http.listen("*:" .. port, function(req, res)
  if req.path == "/json" then
    res:json({ message = "hello", worker = require("cohost").worker_id() })
  elseif req.path == "/" then
    res:send("hello")
  else
    res.status = 404
    res:send("not found\n")
  end
end)
assert(listener, err)
