-- The image host example (examples/imagehost), run as a child process on
-- a fresh storage directory per test, driven by curl and raw sockets. The
-- images are written by a Python script below: a real PNG (zlib), a GIF,
-- baseline JPEGs that decoders accept (one behind 130 KB of EXIF-like
-- segments, to make the size scan seek), the 1x1 WebP images browsers
-- decode, and header-only WebPs of each coding (VP8, VP8L, VP8X).
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local MAX = 300000   -- --max-size of the servers here

-- -- Test images --------------------------------------------------------------

local GEN = [==[
import base64, os, struct, sys, zlib

out, limit = sys.argv[1], int(sys.argv[2])

def w(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

def png(width, height, seed=0):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    rows = b"".join(b"\0" + bytes(((x * 7 + y * 13 + seed) % 256) for x in range(width * 3))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

def gif(width, height):
    # A 1x1 image on a width x height logical screen, 2-colour global table.
    return (b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\xff\x00\x00\x00\x00\xff"
            + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00" + b"\x3b")

def jpeg(width, height, app_bytes=0):
    # Uniform grey baseline JPEG: one DC code (difference 0) and one AC code
    # (end of block) of one bit each, so every 8x8 block is the bits "00".
    def seg(m, d): return b"\xff" + bytes([m]) + struct.pack(">H", len(d) + 2) + d
    s = b"\xff\xd8" + seg(0xe0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0")
    while app_bytes > 0:
        n = min(app_bytes, 65000)
        s += seg(0xe1, b"Exif\0\0" + bytes(n))
        app_bytes -= n
    s += seg(0xdb, b"\x00" + bytes([1] * 64))
    s += seg(0xc0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    s += seg(0xc4, b"\x00" + bytes([1] + [0] * 15) + b"\x00")
    s += seg(0xc4, b"\x10" + bytes([1] + [0] * 15) + b"\x00")
    s += seg(0xda, b"\x01\x01\x00\x00\x3f\x00")
    nbits = ((width + 7) // 8) * ((height + 7) // 8) * 2
    data = bytearray((nbits + 7) // 8)
    if nbits % 8:
        data[-1] = (1 << (8 - nbits % 8)) - 1
    return s + bytes(data) + b"\xff\xd9"

def riff(chunk_type, d):
    body = b"WEBP" + chunk_type + struct.pack("<I", len(d)) + d + (b"\0" if len(d) % 2 else b"")
    return b"RIFF" + struct.pack("<I", len(body)) + body

w("a.png", png(37, 23))
w("b.gif", gif(7, 5))
w("c.jpg", jpeg(33, 17, app_bytes=130000))
w("small.jpg", jpeg(16, 8))
w("d.webp", base64.b64decode("UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="))
w("e.webp", base64.b64decode("UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA"))
w("x.webp", riff(b"VP8X", b"\0\0\0\0" + struct.pack("<I", 639)[:3] + struct.pack("<I", 479)[:3]))
w("l.webp", riff(b"VP8L", b"\x2f" + struct.pack("<I", 299 | (199 << 14)) + bytes(8)))
w("v.webp", riff(b"VP8 ", b"\x30\x01\x00\x9d\x01\x2a" + struct.pack("<HH", 123, 45) + bytes(8)))
w("text.txt", b"hello, this is not an image\n" * 10)
w("bad.png", b"\x89PNG\r\n\x1a\n" + bytes(40))
w("big.png", png(4, 4)[:33] + os.urandom(limit - 33 + 1))
w("huge.png", png(4, 4)[:33] + os.urandom(limit * 3))
for i in range(1, 51):
    w("p%d.png" % i, png(i, 51 - i, seed=i))
]==]

-- What each test image is: type, width, height.
local KNOWN = {
  ["a.png"] = { "image/png", 37, 23 }, ["b.gif"] = { "image/gif", 7, 5 },
  ["c.jpg"] = { "image/jpeg", 33, 17 }, ["small.jpg"] = { "image/jpeg", 16, 8 },
  ["d.webp"] = { "image/webp", 1, 1 }, ["e.webp"] = { "image/webp", 1, 1 },
  ["x.webp"] = { "image/webp", 640, 480 }, ["l.webp"] = { "image/webp", 300, 200 },
  ["v.webp"] = { "image/webp", 123, 45 },
}

local img_dir
local function img(name)
  if not img_dir then
    img_dir = os.tmpname()
    os.remove(img_dir)
    assert(os.execute("mkdir -p " .. img_dir) == 0)
    local gen = img_dir .. "/gen.py"
    h.write_file(gen, GEN)
    assert(os.execute(("python3 %s %s %d"):format(gen, img_dir, MAX)) == 0, "gen.py failed")
  end
  return img_dir .. "/" .. name
end

teardown(function()
  if img_dir then os.execute("rm -rf " .. h.shell_quote(img_dir)) end
end)

-- -- Processes and clients ------------------------------------------------------

local function sha256_file(path)
  local _, out = h.sh("sha256sum " .. h.shell_quote(path))
  return out:match("^(%x+)")
end

-- A fresh storage directory (the app makes it), removed after the test.
local data_dir = h.tmppath

-- Starts the app on port 0 with storage in dir through its module (the
-- same code main.lua runs), so h.start learns the port.
local function start(dir, cohost_args)
  local script = h.tmpfile()
  h.write_file(script, h.server_script(([[
package.path = %q .. "examples/?.lua;" .. package.path
local app = require "imagehost.app"
local listener = assert(app.start { port = 0, dir = %q, max_size = %d })
]]):format(h.root, dir, MAX)))
  local p = h.start((cohost_args or "") .. " " .. h.shell_quote(script))
  defer(p.stop)
  p.url = "http://127.0.0.1:" .. p.port
  p.dir = dir
  return p
end

-- curl with args (shell-quoted already) against url; returns the status,
-- the body and the response headers (lower-case names). The body goes to
-- the file out when given.
local function curl(args, url, out)
  local body, head = out or h.tmpfile(), h.tmpfile()
  local rc, code, err = h.sh(("curl -sS --max-time 20 -o %s -D %s -w '%%{http_code}' %s %s")
    :format(body, head, args, h.shell_quote(url)), 60)
  assert(rc == 0, "curl failed: " .. code .. err)
  local headers = {}
  for name, value in h.slurp(head):gmatch("([%w%-]+):%s*([^\r\n]*)") do
    headers[name:lower()] = value
  end
  return tonumber(code), h.slurp(body), headers
end

local function json(body)
  local ok, v = pcall(cjson.decode, body)
  assert(ok, "not JSON: " .. body)
  return v
end

local function upload_form(p, name)
  local code, body = curl("-F " .. h.shell_quote("file=@" .. img(name)), p.url .. "/images")
  return code, json(body)
end

local function upload_raw(p, name, ctype)
  local code, body = curl(("--data-binary @%s -H 'Content-Type: %s'")
    :format(h.shell_quote(img(name)), ctype or "application/octet-stream"), p.url .. "/images")
  return code, json(body)
end

local function listing(p, page)
  local code, body = curl("", p.url .. "/api/images?page=" .. page)
  assert.equal(200, code)
  return json(body)
end

-- -- Specs ----------------------------------------------------------------------

describe("imagehost", function()
  it("starts from the command line with --port and --dir", function()
    local dir, port = data_dir(), h.free_port()
    local log = h.tmpfile()
    local pidfile = h.tmpfile()
    os.execute(("(timeout 30 %s examples/imagehost/main.lua --port %d --dir %s >%s 2>&1 & echo $! >%s)")
      :format(h.COHOST, port, h.shell_quote(dir), log, pidfile))
    defer(function() os.execute("kill " .. h.slurp(pidfile):match("%d+") .. " 2>/dev/null") end)
    local code
    assert.is_true(h.wait_for(function()
      code = select(2, h.sh(("curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/"):format(port), 60))
      return code == "200"
    end), "no answer: " .. h.slurp(log))
    assert.equal("directory", (select(2, h.sh("stat -c %F " .. h.shell_quote(dir .. "/images")))):match("%S+"))
    assert.is_truthy(h.try_slurp(dir .. "/meta.db"))
  end)

  it("serves the upload page at / with its script and style", function()
    local p = start(data_dir())
    local code, body, hd = curl("", p.url .. "/")
    assert.equal(200, code)
    assert.matches("^text/html", hd["content-type"])
    assert.matches('<form[^>]+enctype="multipart/form%-data"', body)
    assert.matches('<input[^>]+name="file"[^>]+type="file"', body)
    assert.matches('src="/app.js"', body)
    code, body, hd = curl("", p.url .. "/app.js")
    assert.equal(200, code)
    assert.matches("javascript", hd["content-type"])
    assert.matches('fetch%("/images"', body)       -- uploads
    assert.matches("/api/images%?page=", body)      -- the gallery
    assert.matches("ondrop", body)                  -- drag and drop
    assert.equal(200, (curl("", p.url .. "/style.css")))
  end)

  it("stores a multipart upload under the SHA-256 of its bytes and serves it back", function()
    local p = start(data_dir())
    local code, r = upload_form(p, "a.png")
    assert.equal(201, code)
    local sum = sha256_file(img("a.png"))
    assert.equal(sum, r.id)
    assert.equal("/i/" .. sum, r.url)
    assert.same({ "image/png", 37, 23, 474 }, { r.type, r.width, r.height, r.size })
    assert.matches("^%x+$", r.delete_token)
    assert.is_true(#r.delete_token >= 32)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", r.uploaded)
    local out = h.tmpfile()
    local gcode, _, hd = curl("", p.url .. r.url, out)
    assert.equal(200, gcode)
    assert.equal("image/png", hd["content-type"])
    assert.equal(sum, sha256_file(out))
    assert.same({ sum }, h.ls(p.dir .. "/images"))
    assert.same({}, h.ls(p.dir .. "/tmp"))
  end)

  it("detects PNG, JPEG, GIF and WebP by their bytes and reads their dimensions", function()
    local p = start(data_dir())
    for name, want in pairs(KNOWN) do
      -- Raw bodies, declared as something else: the bytes decide.
      local code, r = upload_raw(p, name, "text/plain")
      assert.equal(201, code, name)
      assert.same({ want[1], want[2], want[3] }, { r.type, r.width, r.height }, name)
      assert.equal(sha256_file(img(name)), r.id, name)
      local _, body, hd = curl("", p.url .. r.url)
      assert.equal(want[1], hd["content-type"], name)
      assert.equal(h.slurp(img(name)), body, name)
    end
  end)

  it("gives the same bytes the same id: the second upload is a 200 without a token", function()
    local p = start(data_dir())
    local code1, r1 = upload_form(p, "b.gif")
    local code2, r2 = upload_raw(p, "b.gif", "image/gif")
    assert.equal(201, code1)
    assert.equal(200, code2)
    assert.equal(r1.id, r2.id)
    assert.is_nil(r2.delete_token)
    assert.equal(1, listing(p, 1).total)
    assert.same({}, h.ls(p.dir .. "/tmp"))
  end)

  it("refuses what is not an image with 415 and keeps nothing", function()
    local p = start(data_dir())
    local code, r = upload_form(p, "text.txt")
    assert.equal(415, code)
    assert.matches("not a PNG", r.error)
    assert.equal(415, (upload_raw(p, "text.txt", "image/png")))
    code, r = upload_form(p, "bad.png")    -- PNG magic, no IHDR
    assert.equal(415, code)
    assert.matches("unreadable header", r.error)
    assert.same({}, h.ls(p.dir .. "/images"))
    assert.same({}, h.ls(p.dir .. "/tmp"))
    assert.equal(0, listing(p, 1).total)
  end)

  it("answers 400 to a form without a file field", function()
    local p = start(data_dir())
    local code, body = curl("-F note=hello", p.url .. "/images")
    assert.equal(400, code)
    assert.matches('no "file" field', json(body).error)
    assert.same({}, h.ls(p.dir .. "/tmp"))
  end)

  it("answers 413 past the size limit, whatever the framing, and keeps nothing", function()
    local p = start(data_dir())
    -- Multipart, one byte over: the handler stops at the limit.
    local code, r = upload_form(p, "big.png")
    assert.equal(413, code)
    assert.matches("larger than " .. MAX, r.error)
    -- Raw, one byte over.
    assert.equal(413, (upload_raw(p, "big.png")))
    -- Raw with a Content-Length far over: the server refuses before the handler.
    code = curl("--data-binary @" .. h.shell_quote(img("huge.png")), p.url .. "/images")
    assert.equal(413, code)
    -- Chunked, no length announced.
    code = curl("-H 'Transfer-Encoding: chunked' --data-binary @" .. h.shell_quote(img("huge.png")),
                p.url .. "/images")
    assert.equal(413, code)
    assert.same({}, h.ls(p.dir .. "/images"))
    assert.same({}, h.ls(p.dir .. "/tmp"))
    -- The server still works.
    assert.equal(201, (upload_form(p, "a.png")))
  end)

  it("serves images with ETag, 304 and Range", function()
    local p = start(data_dir())
    local _, r = upload_form(p, "a.png")
    local code, _, hd = curl("", p.url .. r.url)
    assert.equal(200, code)
    local etag = assert(hd["etag"])
    assert.equal("474", hd["content-length"])
    code = curl("-H " .. h.shell_quote("If-None-Match: " .. etag), p.url .. r.url)
    assert.equal(304, code)
    local body
    code, body, hd = curl("-r 0-9", p.url .. r.url)
    assert.equal(206, code)
    assert.equal("bytes 0-9/474", hd["content-range"])
    assert.equal(h.slurp(img("a.png")):sub(1, 10), body)
    assert.equal(416, (curl("-r 5000-6000", p.url .. r.url)))
    assert.equal(404, (curl("", p.url .. "/i/" .. ("0"):rep(64))))
    assert.equal(404, (curl("", p.url .. "/i/nothex")))
  end)

  it("deletes an image only with its delete token, from a header or the query", function()
    local p = start(data_dir())
    local _, a = upload_form(p, "a.png")
    local _, b = upload_form(p, "b.gif")
    assert.equal(403, (curl("-X DELETE", p.url .. a.url)))
    assert.equal(403, (curl("-X DELETE -H 'X-Delete-Token: " .. b.delete_token .. "'", p.url .. a.url)))
    assert.equal(403, (curl("-X DELETE", p.url .. a.url .. "?token=" .. ("0"):rep(32))))
    assert.equal(200, (curl("", p.url .. a.url)))
    assert.equal(204, (curl("-X DELETE -H 'X-Delete-Token: " .. a.delete_token .. "'", p.url .. a.url)))
    assert.equal(204, (curl("-X DELETE", p.url .. b.url .. "?token=" .. b.delete_token)))
    assert.equal(404, (curl("", p.url .. a.url)))
    assert.equal(404, (curl("", p.url .. b.url)))
    assert.equal(404, (curl("-X DELETE -H 'X-Delete-Token: " .. a.delete_token .. "'", p.url .. a.url)))
    assert.same({}, h.ls(p.dir .. "/images"))
    assert.equal(0, listing(p, 1).total)
    -- Uploaded again, it is new: a fresh token.
    local code, again = upload_form(p, "a.png")
    assert.equal(201, code)
    assert.are_not.equal(a.delete_token, again.delete_token)
  end)

  it("lists images newest first, 20 a page, without their tokens", function()
    local p = start(data_dir())
    local ids = {}
    for i = 1, 25 do
      local code, r = upload_raw(p, "p" .. i .. ".png", "image/png")
      assert.equal(201, code)
      ids[i] = r.id
    end
    local l1, l2, l3 = listing(p, 1), listing(p, 2), listing(p, 3)
    assert.same({ 1, 20, 25, 2 }, { l1.page, l1.per_page, l1.total, l1.pages })
    assert.equal(20, #l1.images)
    assert.equal(5, #l2.images)
    assert.equal(0, #l3.images)
    assert.equal("table", type(l3.images))
    for k = 1, 20 do assert.equal(ids[26 - k], l1.images[k].id) end
    for k = 1, 5 do assert.equal(ids[6 - k], l2.images[k].id) end
    local first = l1.images[1]
    assert.same({ "image/png", 25, 26, "/i/" .. ids[25] }, { first.type, first.width, first.height, first.url })
    assert.is_nil(first.delete_token)
    assert.equal(1, listing(p, "1&x=y").page)
    assert.equal(400, (curl("", p.url .. "/api/images?page=0")))
    assert.equal(400, (curl("", p.url .. "/api/images?page=abc")))
    local code, body = curl("", p.url .. "/api/images")
    assert.equal(200, code)
    assert.equal(20, #json(body).images)
  end)

  it("never shows a partial file during a slow upload and removes its temp file on abort", function()
    local p = start(data_dir())
    local jpg = h.slurp(img("c.jpg"))      -- 130 KB
    local boundary = "XyZ123"
    local form_head = "--" .. boundary .. "\r\nContent-Disposition: form-data; name=\"file\"; " ..
                      "filename=\"c.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"
    for _, kind in ipairs { "raw", "multipart" } do
      local s = h.connect(p.port, 5000)
      local head, first
      if kind == "raw" then
        head = ("POST /images HTTP/1.1\r\nHost: t\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n")
          :format(#jpg)
        first = jpg:sub(1, 70000)
      else
        local total = #form_head + #jpg + #("\r\n--" .. boundary .. "--\r\n")
        head = ("POST /images HTTP/1.1\r\nHost: t\r\nContent-Type: multipart/form-data; boundary=%s\r\n" ..
                "Content-Length: %d\r\n\r\n"):format(boundary, total)
        first = form_head .. jpg:sub(1, 70000)
      end
      assert(s:send(head .. first))
      -- The upload sits in tmp/, growing; images/ has nothing under any name.
      local tmp = p.dir .. "/tmp"
      assert.is_true(h.wait_for(function()
        local names = h.ls(tmp)
        if #names ~= 1 then return false end
        local _, size = h.sh("stat -c %s " .. h.shell_quote(tmp .. "/" .. names[1]))
        return tonumber(size) >= 65536
      end), kind .. ": no temp file with the data so far")
      assert.matches("^upload%-", h.ls(tmp)[1])
      assert.same({}, h.ls(p.dir .. "/images"), kind)
      assert.equal(404, (curl("", p.url .. "/i/" .. sha256_file(img("c.jpg")))), kind)
      s:close()
      assert.is_true(h.wait_for(function() return #h.ls(tmp) == 0 end), kind .. ": the temp file stayed")
      assert.same({}, h.ls(p.dir .. "/images"), kind)
      assert.equal(0, listing(p, 1).total, kind)
    end
  end)

  it("stores 50 concurrent uploads of different images correctly", function()
    local p = start(data_dir())
    local out = h.tmpdir()
    local rc, log, err = h.sh(([[
for i in $(seq 1 50); do
  curl -sS --max-time 30 -o %s/r$i -w '%%{http_code}' -F file=@%s/p$i.png %s/images >%s/c$i &
done
wait]]):format(out, img("p1.png"):match("^(.*)/"), p.url, out), 60)
    assert.equal(0, rc, log .. err)
    local ids = {}
    for i = 1, 50 do
      assert.equal("201", h.slurp(out .. "/c" .. i), "upload " .. i)
      local r = json(h.slurp(out .. "/r" .. i))
      assert.equal(sha256_file(img("p" .. i .. ".png")), r.id, "upload " .. i)
      assert.same({ i, 51 - i }, { r.width, r.height }, "upload " .. i)
      ids[r.id] = i
    end
    local seen = 0
    for page = 1, 3 do
      for _, it in ipairs(listing(p, page).images) do
        assert.is_truthy(ids[it.id])
        seen = seen + 1
      end
    end
    assert.equal(50, seen)
    -- Every stored file holds exactly its bytes.
    local _, sums = h.sh(("cd %s/images && sha256sum *"):format(h.shell_quote(p.dir)))
    local n = 0
    for sum, name in sums:gmatch("(%x+)%s+(%x+)") do
      assert.equal(name, sum)
      n = n + 1
    end
    assert.equal(50, n)
    assert.same({}, h.ls(p.dir .. "/tmp"))
  end)

  it("with two workers, stores the same bytes uploaded at once on both as one image", function()
    local p = start(data_dir(), "-w 2")
    local out = h.tmpdir()
    local rc, log, err = h.sh(([[
for i in $(seq 1 40); do
  curl -sS --max-time 30 -o %s/r$i -w '%%{http_code}' -F file=@%s/p$(( i %% 10 + 1 )).png %s/images >%s/c$i &
done
wait]]):format(out, img("p1.png"):match("^(.*)/"), p.url, out), 60)
    assert.equal(0, rc, log .. err)
    local created, ids = 0, {}
    for i = 1, 40 do
      local code = h.slurp(out .. "/c" .. i)
      assert.is_truthy(code == "201" or code == "200", "upload " .. i .. ": " .. code)
      if code == "201" then created = created + 1 end
      ids[json(h.slurp(out .. "/r" .. i)).id] = true
    end
    local n = 0
    for _ in pairs(ids) do n = n + 1 end
    assert.equal(10, n)
    assert.equal(10, created)
    assert.equal(10, listing(p, 1).total)
    assert.equal(10, #h.ls(p.dir .. "/images"))
    assert.same({}, h.ls(p.dir .. "/tmp"))
  end)

  it("keeps its images across a restart and repairs files and rows that disagree", function()
    local dir = data_dir()
    local p = start(dir)
    local _, a = upload_form(p, "a.png")
    local _, b = upload_form(p, "b.gif")
    p.signal("KILL")
    assert.is_truthy(p.wait(10))
    -- As after a crash: b's file gone with its row left, c's file in place
    -- without a row, an old temp file.
    os.remove(dir .. "/images/" .. b.id)
    local c_id = sha256_file(img("c.jpg"))
    assert(os.execute(("cp %s %s/images/%s && touch -d '-1 hour' %s/images/%s"):format(
      h.shell_quote(img("c.jpg")), dir, c_id, dir, c_id)) == 0)
    assert(os.execute(("echo partial >%s/tmp/upload-old && touch -d '-1 hour' %s/tmp/upload-old"):format(dir, dir)) == 0)
    p = start(dir)
    local l = listing(p, 1)
    local got = {}
    for _, it in ipairs(l.images) do got[it.id] = it end
    assert.equal(2, l.total)
    assert.is_truthy(got[a.id])
    assert.is_nil(got[b.id])
    assert.same({ "image/jpeg", 33, 17 }, { got[c_id].type, got[c_id].width, got[c_id].height })
    local out = h.tmpfile()
    assert.equal(200, (curl("", p.url .. "/i/" .. c_id, out)))
    assert.equal(c_id, sha256_file(out))
    assert.equal(404, (curl("", p.url .. b.url)))
    assert.same({}, h.ls(dir .. "/tmp"))
    -- a's token from before the restart still works.
    assert.equal(204, (curl("-X DELETE -H 'X-Delete-Token: " .. a.delete_token .. "'", p.url .. a.url)))
  end)
end)
