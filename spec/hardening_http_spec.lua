-- The smaller gaps of issue 18 in HTTP file serving: If-Match and
-- If-Unmodified-Since on res:sendfile and cohost.http.static (412, as
-- nginx answers), and several ranges in one Range header. The server runs
-- in this process; the peer is curl (a real client, in the background
-- through h.sh).
local http = require "cohost.http"
local static = require "cohost.http.static"
local h = require "spec.helper"
h.cleanups(after_each)
local q = h.shell_quote

local MTIME = "Thu, 02 Jan 2020 03:04:05 GMT"
local BEFORE = "Wed, 01 Jan 2020 00:00:00 GMT"
local AFTER = "Fri, 03 Jan 2020 00:00:00 GMT"

-- A directory with one file of known bytes and mtime, served at /f by
-- res:sendfile and under /s/ by cohost.http.static. Returns the port and
-- the file's bytes.
local function fixture()
  local dir = h.tmpdir()
  local data = ("0123456789"):rep(100)
  h.write_file(dir .. "/f.txt", data)
  assert(os.execute(("touch -d '2020-01-02 03:04:05 UTC' %s"):format(q(dir .. "/f.txt"))) == 0)
  local serve_static = static.new(dir)
  local port = h.http_serve(function(req, res)
    if req.path == "/f" then return res:sendfile(dir .. "/f.txt") end
    return serve_static(req, res, (req.path:gsub("^/s", "")))
  end)
  return port, data
end

-- curl with extra arguments against path: status, headers (lower-case
-- names) and body.
local function curl(port, path, args)
  local hdr = h.tmppath()
  local code, out, err = h.sh(("curl -s -D %s %s http://127.0.0.1:%d%s"):format(q(hdr), args or "", port, path))
  assert.equal(0, code, err)
  local head = h.slurp(hdr)
  os.remove(hdr)
  local headers = {}
  for k, v in head:gmatch("\n([^:\r\n]+):%s*([^\r\n]*)") do headers[k:lower()] = v end
  return tonumber(head:match("^HTTP/1%.1 (%d+)")), headers, out
end

local function etag_of(port, path)
  local status, headers = curl(port, path, "-I")
  assert.equal(200, status)
  return headers.etag
end

for _, path in ipairs { "/f", "/s/f.txt" } do
  describe("conditional requests on " .. (path == "/f" and "res:sendfile" or "cohost.http.static"), function()
    it("answers 412 to an If-Match that names another entity tag, 200 to its own or *", function()
      local port, data = fixture()
      local etag = etag_of(port, path)
      local status, _, body = curl(port, path, "-H 'If-Match: \"other\"'")
      assert.equal(412, status)
      assert.matches("412 Precondition Failed", body)
      assert.same({ 200, data }, { (curl(port, path, "-H " .. q("If-Match: \"x\", " .. etag))), select(3, curl(port, path, "-H " .. q("If-Match: " .. etag))) })
      assert.equal(200, (curl(port, path, "-H 'If-Match: *'")))
      -- A weak tag never matches If-Match (strong comparison).
      assert.equal(412, (curl(port, path, "-H " .. q("If-Match: W/" .. etag))))
    end)

    it("answers 412 to an If-Unmodified-Since before the file's mtime, 200 from it on", function()
      local port = fixture()
      assert.equal(412, (curl(port, path, "-H " .. q("If-Unmodified-Since: " .. BEFORE))))
      assert.equal(200, (curl(port, path, "-H " .. q("If-Unmodified-Since: " .. MTIME))))
      assert.equal(200, (curl(port, path, "-H " .. q("If-Unmodified-Since: " .. AFTER))))
      -- RFC 850 and asctime dates too; a value that is no date is ignored.
      assert.equal(412, (curl(port, path, "-H 'If-Unmodified-Since: Wednesday, 01-Jan-20 00:00:00 GMT'")))
      assert.equal(412, (curl(port, path, "-H 'If-Unmodified-Since: Wed Jan  1 00:00:00 2020'")))
      assert.equal(200, (curl(port, path, "-H 'If-Unmodified-Since: yesterday'")))
    end)

    it("lets If-Match decide over If-Unmodified-Since, and a 412 over a Range", function()
      local port = fixture()
      local etag = etag_of(port, path)
      assert.equal(200, (curl(port, path, "-H " .. q("If-Match: " .. etag) .. " -H " .. q("If-Unmodified-Since: " .. BEFORE))))
      assert.equal(412, (curl(port, path, "-r 0-9 -H " .. q("If-Unmodified-Since: " .. BEFORE))))
      assert.equal(206, (curl(port, path, "-r 0-9 -H " .. q("If-Unmodified-Since: " .. AFTER))))
    end)
  end)
end

-- The parts of a multipart/byteranges body: { range = "a-b/size", type,
-- body } each, in order.
local function parts(ctype, body)
  local boundary = assert(ctype:match("^multipart/byteranges; boundary=(%S+)$"), ctype)
  local out = {}
  local pos = 1
  while true do
    local s, e = body:find("\r\n--" .. boundary, pos, true)
    assert(s, "no delimiter after " .. pos)
    if body:sub(e + 1, e + 4) == "--\r\n" then
      assert.equal(#body, e + 4)
      return out
    end
    local head_end = assert(body:find("\r\n\r\n", e, true))
    local head = body:sub(e + 3, head_end + 1)
    local range = head:match("Content%-Range: bytes (%S+)\r\n")
    local nxt = assert(body:find("\r\n--" .. boundary, head_end + 4, true))
    out[#out + 1] = { range = range, type = head:match("Content%-Type: ([^\r]+)"),
                      body = body:sub(head_end + 4, nxt - 1) }
    pos = nxt
  end
end

for _, path in ipairs { "/f", "/s/f.txt" } do
  describe("several ranges on " .. (path == "/f" and "res:sendfile" or "cohost.http.static"), function()
    it("are served as multipart/byteranges, as nginx does", function()
      local port, data = fixture()
      local status, headers, body = curl(port, path, "-r 0-9,20-29,-5")
      assert.equal(206, status)
      assert.equal(tostring(#body), headers["content-length"])
      local got = parts(headers["content-type"], body)
      assert.same({
        { range = "0-9/1000", type = path == "/f" and nil or "text/plain; charset=utf-8", body = data:sub(1, 10) },
        { range = "20-29/1000", type = path == "/f" and nil or "text/plain; charset=utf-8", body = data:sub(21, 30) },
        { range = "995-999/1000", type = path == "/f" and nil or "text/plain; charset=utf-8", body = data:sub(996) },
      }, got)
      -- HEAD: the same head, no body.
      local hstatus, hheaders = curl(port, path, "-I -r 0-9,20-29,-5")
      assert.equal(206, hstatus)
      assert.equal(headers["content-length"], hheaders["content-length"])
    end)

    it("drop unsatisfiable ranges, and give the whole file when they add up to more than it", function()
      local port, data = fixture()
      local status, headers, body = curl(port, path, "-r 0-9,5000-6000")
      assert.equal(206, status)
      assert.equal("bytes 0-9/1000", headers["content-range"])
      assert.equal(data:sub(1, 10), body)
      assert.equal(416, (curl(port, path, "-r 5000-6000,7000-")))
      status, _, body = curl(port, path, "-r 0-,0-")
      assert.same({ 200, data }, { status, body })
      local many = {}
      for i = 1, 17 do many[i] = ("%d-%d"):format(i * 10, i * 10 + 1) end
      status, _, body = curl(port, path, "-r " .. table.concat(many, ","))
      assert.same({ 200, data }, { status, body })
    end)
  end)
end
