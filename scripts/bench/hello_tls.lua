-- examples/hello.lua's "hello" on a TLS listener, for make bench's http2
-- section: build/cohost scripts/bench/hello_tls.lua PORT CERT KEY. ALPN
-- offers h2 and http/1.1 (docs/http2.md).
local http = require "cohost.http"

local port, cert, key = tonumber(arg[1]), arg[2], arg[3]
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  if req.path == "/" then return res:send("hello") end
  res.status = 404
  res:send("not found\n")
end, { ssl_cert = cert, ssl_key = key }))
