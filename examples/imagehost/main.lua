-- An image host: upload PNG, JPEG, GIF and WebP images, get them back by
-- the SHA-256 of their bytes. See docs/imagehost.md.
--
--   build/cohost examples/imagehost/main.lua [--port P] [--dir D]
--       [--host H] [--max-size BYTES[K|M]] [--max-pixels N] [--base-url URL]
--       [--access-log]
--
--   curl -F file=@cat.png localhost:8080/images          201 {id, url, ...}
--   curl --data-binary @cat.png -H 'Content-Type: image/png' localhost:8080/images
--   curl localhost:8080/i/<id>                            the bytes
--   curl -X DELETE -H 'X-Delete-Token: <token>' localhost:8080/i/<id>
--   curl 'localhost:8080/api/images?page=1'               newest first
--   open http://localhost:8080/                            upload page, gallery
local cohost = require "cohost"

-- The modules sit beside this file as imagehost.*, wherever it is run from.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local app = require "imagehost.app"

local USAGE = "usage: main.lua [--port P] [--dir D] [--host H] [--max-size BYTES[K|M]] " ..
              "[--max-pixels N] [--base-url URL] [--access-log]"

local function die(msg)
  io.stderr:write("imagehost: ", msg, "\n", USAGE, "\n")
  cohost.exit(2)
end

local function bytes(s)
  local n, unit = tostring(s):match("^(%d+)([KkMm]?)$")
  if not n then return nil end
  return tonumber(n) * (({ k = 1024, m = 1024 * 1024 })[unit:lower()] or 1)
end

local opts = { port = 8080, dir = "imagehost-data" }
local i = 1
while arg[i] do
  local a, v = arg[i], arg[i + 1]
  if a == "--port" then opts.port = tonumber(v) or die("bad --port")
  elseif a == "--dir" then opts.dir = v or die("--dir needs a value")
  elseif a == "--host" then opts.host = v or die("--host needs a value")
  elseif a == "--max-size" then opts.max_size = bytes(v) or die("bad --max-size")
  elseif a == "--max-pixels" then
    opts.max_pixels = (v and v:find("^%d+$") and tonumber(v)) or die("bad --max-pixels")
  elseif a == "--base-url" then opts.base_url = v and v:gsub("/$", "") or die("--base-url needs a value")
  elseif a == "--access-log" then opts.access_log = true; i = i - 1
  else die("unknown option " .. a) end
  i = i + 2
end

local listener, err = app.start(opts)
if not listener then die(err) end
if cohost.worker_id() == 0 then
  local host, port = listener:addr()
  cohost.log(cohost.NOTICE, ("imagehost: http://%s:%d/ storing in %s (images up to %d bytes)")
    :format(host, port, opts.dir, opts.max_size))
end
