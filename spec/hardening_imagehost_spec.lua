-- The image host's limits (issue 18): an over-limit form is a 413 (it was
-- a 500 "storage error" logged at error level), a PNG declaring
-- dimensions PNG does not allow is refused, and a pixel limit
-- (max_pixels, --max-pixels) guards whatever decodes images later. The
-- app runs as a child (h.start) on a fresh storage directory; the client
-- is curl.
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

local function start(opts)
  local script = h.tmpfile(h.server_script(([[
package.path = %q .. "examples/?.lua;" .. package.path
local app = require "imagehost.app"
local listener = assert(app.start { port = 0, dir = %q, max_pixels = %s })
]]):format(h.root, h.tmppath(), opts.max_pixels or "nil")))
  local p = h.start(q(script))
  defer(p.stop)
  return p
end

-- POSTs the file body to /images with content type ctype; status and the
-- decoded JSON answer.
local function post(p, body, ctype)
  local file = h.tmpfile(body)
  local rc, out, err = h.sh(("curl -sS --max-time 20 -w '\\n%%{http_code}' --data-binary @%s -H %s http://127.0.0.1:%d/images")
    :format(q(file), q("Content-Type: " .. ctype), p.port), 60)
  assert.equal(0, rc, err)
  local json, code = out:match("^(.*)\n(%d+)$")
  return tonumber(code), cjson.decode(json)
end

local BOUNDARY = "xYzBoUnDaRy"
local FORM = "multipart/form-data; boundary=" .. BOUNDARY

-- A multipart body of parts, each { name, value [, filename] }.
local function form(parts)
  local out = {}
  for _, part in ipairs(parts) do
    local disp = ('form-data; name="%s"'):format(part[1])
    if part[3] then disp = disp .. ('; filename="%s"'):format(part[3]) end
    out[#out + 1] = ("--%s\r\nContent-Disposition: %s\r\n%s\r\n%s\r\n"):format(
      BOUNDARY, disp, part[3] and "Content-Type: image/png\r\n" or "", part[2])
  end
  out[#out + 1] = "--" .. BOUNDARY .. "--\r\n"
  return table.concat(out)
end

-- The bytes of a PNG head: signature, IHDR declaring width x height, an
-- empty IDAT and IEND (CRCs are not checked by the host).
local function be32(n)
  return string.char(math.floor(n / 2^24) % 256, math.floor(n / 2^16) % 256, math.floor(n / 2^8) % 256, n % 256)
end
local function png(width, height)
  return "\137PNG\r\n\26\n" .. be32(13) .. "IHDR" .. be32(width) .. be32(height) .. "\8\2\0\0\0" .. be32(0)
         .. be32(0) .. "IDAT" .. be32(0) .. be32(0) .. "IEND" .. be32(0)
end

describe("imagehost limits", function()
  it("answers 413, not a 500 storage error, to a form with 5,000 fields", function()
    local p = start {}
    local parts = {}
    for i = 1, 5000 do parts[i] = { "f" .. i, "v" } end
    parts[#parts + 1] = { "file", png(4, 4), "a.png" }
    local status, body = post(p, form(parts), FORM)
    assert.equal(413, status)
    assert.matches("more than 32 fields and files", body.error)
    assert.is_nil(h.slurp(p.err):find("[error]", 1, true), h.slurp(p.err))
  end)

  it("answers 413 to a form with 200 file parts, and 413 to a field over 4 KiB", function()
    local p = start {}
    local parts = {}
    for i = 1, 200 do parts[i] = { "file" .. i, png(4, 4), i .. ".png" } end
    local status, body = post(p, form(parts), FORM)
    assert.equal(413, status)
    assert.matches("fields and files", body.error)
    status, body = post(p, form { { "note", ("n"):rep(5000) }, { "file", png(4, 4), "a.png" } }, FORM)
    assert.equal(413, status)
    assert.matches("form field is larger than 4096 bytes", body.error)
    assert.is_nil(h.slurp(p.err):find("[error]", 1, true), h.slurp(p.err))
  end)

  it("refuses a PNG declaring 4294967295x4294967295 (PNG allows up to 2^31-1)", function()
    local p = start { max_pixels = 0 }
    local status, body = post(p, png(4294967295, 4294967295), "image/png")
    assert.equal(415, status)
    assert.matches("unreadable header", body.error)
    status = post(p, png(2147483648, 1), "image/png")
    assert.equal(415, status)
    status, body = post(p, png(2147483647, 1), "image/png")
    assert.equal(201, status)
    assert.equal(2147483647, body.width)
  end)

  it("refuses an image over max_pixels with 413 (default 100,000,000), takes it with 0", function()
    local p = start {}
    local status, body = post(p, png(20000, 20000), "image/png")
    assert.equal(413, status)
    assert.matches("more than 100000000 pixels", body.error)
    assert.equal(201, (post(p, png(10000, 10000), "image/png")))
    local small = start { max_pixels = 100 }
    assert.equal(413, (post(small, png(11, 10), "image/png")))
    assert.equal(201, (post(small, png(10, 10), "image/png")))
    local any = start { max_pixels = 0 }
    assert.equal(201, (post(any, png(50000, 50000), "image/png")))
  end)
end)
