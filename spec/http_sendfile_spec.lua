-- res:sendfile (docs/http.md): a regular file served with sendfile(2),
-- validators (ETag, Last-Modified, 304), ranges (206, multipart, 416) and
-- Content-Type from the extension. The server runs in this process; its
-- peers are raw cosockets (exact bytes) and curl in the background.
local http = require "cohost.http"
local h = require "spec.helper"
h.cleanups(after_each)

-- -- Helpers (as in http_server_spec.lua) ----------------------------------------

local serve = h.http_serve   -- port of a server on 127.0.0.1:0, closed after the test

-- Reads one response (h.receive_response), which must be framed the way
-- sendfile answers: by Content-Length, never chunked or to the close
-- (none for head_only and 304).
local function read_response(sock, head_only)
  local r, err = h.receive_response(sock, head_only)
  if r and not head_only and r.status ~= 304 then
    assert.is_nil(r.headers["transfer-encoding"])
    assert(not r.until_close, "no Content-Length")
  end
  return r, err
end

local request = h.request_bytes   -- a request's bytes: (target, extra header lines, method)

-- Sends requests (an array of request byte strings) pipelined on one
-- connection and reads a response to each (head_only for HEADs).
local function pipeline(port, reqs)
  local s = h.dial(port)
  assert(s:send(table.concat(reqs)))
  local out = {}
  for i, r in ipairs(reqs) do out[i] = assert(read_response(s, r:find("^HEAD"))) end
  return out, s
end

-- The fixture: a 3 MB random file with a known mtime, served at /f by a
-- handler that also serves /missing (404 by the handler itself). Returns
-- port, data, the handler's records (results of sendfile per request).
local MTIME = "Thu, 02 Jan 2020 03:04:05 GMT"
local function fixture(size)
  local data = h.random_bytes(size or 3 * 1000 * 1000 + 7)
  local dir = h.tmpdir()
  local path = dir .. "/blob.bin"
  h.write_file(path, data)
  assert(os.execute(("touch -d '2020-01-02 03:04:05 UTC' %s"):format(path)) == 0)
  local calls = {}
  local port = serve(function(req, res)
    local file = req.path == "/f" and path or dir .. req.path
    local ok, err = res:sendfile(file)
    calls[#calls + 1] = { ok, err }
    if not ok then
      res.status = 404
      res:send("handler 404: " .. err)
    end
  end)
  return port, data, calls, dir
end

-- -- Specs -----------------------------------------------------------------------

describe("res:sendfile", function()
  it("serves a 3 MB file intact to curl, with Content-Length", function()
    local port, data = fixture()
    local out, hdr = h.tmpfile(), h.tmpfile()
    local code, _, err = h.sh(("curl -sS -D %s -o %s http://127.0.0.1:%d/f"):format(hdr, out, port))
    assert.equal(0, code, err)
    assert.matches("^HTTP/1.1 200 OK\r\n", h.slurp(hdr))
    assert.matches("\r\nContent%-Length: " .. #data .. "\r\n", h.slurp(hdr))
    local got = h.slurp(out)
    assert.equal(#data, #got)
    assert.is_true(data == got)
  end)

  it("frames the file exactly: the connection serves the next pipelined request", function()
    local port, data = fixture(100000)
    local rs = pipeline(port, { request("/f"), request("/f") })
    assert.is_true(rs[1].body == data)
    assert.is_true(rs[2].body == data)
  end)

  it("sends ETag, Last-Modified (the file's mtime) and Accept-Ranges", function()
    local port = fixture(1000)
    local r = pipeline(port, { request("/f") })[1]
    assert.matches('^"[^"]+"$', r.headers.etag)
    assert.equal(MTIME, r.headers["last-modified"])
    assert.equal("bytes", r.headers["accept-ranges"])
  end)

  it("changes the ETag when the file changes", function()
    local port, _, _, dir = fixture(1000)
    local a = pipeline(port, { request("/f") })[1].headers.etag
    h.write_file(dir .. "/blob.bin", "shorter")
    local r = pipeline(port, { request("/f") })[1]
    assert.equal("shorter", r.body)
    assert.are_not.equal(a, r.headers.etag)
  end)

  it("answers If-None-Match with the ETag with 304 and no body", function()
    local port = fixture(5000)
    local etag = pipeline(port, { request("/f") })[1].headers.etag
    local rs = pipeline(port, {
      request("/f", "If-None-Match: " .. etag .. "\r\n"),
      request("/f", 'If-None-Match: "other", ' .. etag .. "\r\n"),
      request("/f", "If-None-Match: *\r\n"),
      request("/f", 'If-None-Match: "other"\r\n'),
    })
    for i = 1, 3 do
      assert.equal(304, rs[i].status, "case " .. i)
      assert.is_nil(rs[i].headers["content-length"])
    end
    assert.equal(etag, rs[1].headers.etag)
    -- read_response read no body for the 304s: had one been sent, the
    -- next status line would be garbage.
    assert.equal(200, rs[4].status)
    assert.equal(5000, #rs[4].body)
  end)

  it("answers an exact If-Modified-Since with 304 and another date with 200", function()
    local port = fixture(5000)
    local rs = pipeline(port, {
      request("/f", "If-Modified-Since: " .. MTIME .. "\r\n"),
      request("/f", "If-Modified-Since: Wed, 01 Jan 2020 03:04:05 GMT\r\n"),
      request("/f", "If-Modified-Since: " .. MTIME .. "\r\n"),
    })
    assert.equal(304, rs[1].status)
    assert.equal(200, rs[2].status)
    assert.equal(5000, #rs[2].body)
    assert.equal(304, rs[3].status)
  end)

  it("lets If-None-Match win over If-Modified-Since", function()
    local port = fixture(5000)
    local r = pipeline(port, {
      request("/f", 'If-None-Match: "nope"\r\nIf-Modified-Since: ' .. MTIME .. "\r\n"),
    })[1]
    assert.equal(200, r.status)
    assert.equal(5000, #r.body)
  end)

  it("answers single ranges with 206, Content-Range and the exact bytes", function()
    local port, data = fixture(10000)
    local rs = pipeline(port, {
      request("/f", "Range: bytes=0-99\r\n"),
      request("/f", "Range: bytes=100-\r\n"),
      request("/f", "Range: bytes=-50\r\n"),
      request("/f", "Range: bytes=9990-20000\r\n"),
      request("/f", "Range: bytes=-20000\r\n"),
    })
    local want = {
      { "bytes 0-99/10000", data:sub(1, 100) },
      { "bytes 100-9999/10000", data:sub(101) },
      { "bytes 9950-9999/10000", data:sub(-50) },
      { "bytes 9990-9999/10000", data:sub(9991) },
      { "bytes 0-9999/10000", data },
    }
    for i, w in ipairs(want) do
      assert.equal(206, rs[i].status, "case " .. i)
      assert.equal("HTTP/1.1 206 Partial Content", rs[i].status_line)
      assert.equal(w[1], rs[i].headers["content-range"], "case " .. i)
      assert.equal(tostring(#w[2]), rs[i].headers["content-length"])
      assert.is_true(w[2] == rs[i].body, "case " .. i .. ": wrong bytes")
    end
  end)

  it("curl --range gets the exact bytes", function()
    local port, data = fixture()
    local out = h.tmpfile()
    local code, status, err = h.sh(("curl -sS -r 1000000-1000999 -o %s -w '%%{http_code}' http://127.0.0.1:%d/f")
      :format(out, port))
    assert.equal(0, code, err)
    assert.equal("206", status)
    assert.is_true(data:sub(1000001, 1001000) == h.slurp(out))
  end)

  it("answers an unsatisfiable range with 416 and Content-Range: bytes */size", function()
    local port = fixture(1000)
    local rs = pipeline(port, {
      request("/f", "Range: bytes=1000-\r\n"),
      request("/f", "Range: bytes=5000-6000\r\n"),
      request("/f", "Range: bytes=-0\r\n"),
      request("/f"),
    })
    for i = 1, 3 do
      assert.equal(416, rs[i].status, "case " .. i)
      assert.equal("bytes */1000", rs[i].headers["content-range"])
    end
    assert.equal(200, rs[4].status)   -- framing intact
    assert.equal(1000, #rs[4].body)
  end)

  -- nginx's answer (hardening_http_spec.lua checks the parts with curl).
  it("answers several ranges with a multipart/byteranges 206, framed for the next request", function()
    local port, data = fixture(1000)
    local rs = pipeline(port, { request("/f", "Range: bytes=0-9,20-29\r\n"), request("/f") })
    assert.equal(206, rs[1].status)
    local boundary = rs[1].headers["content-type"]:match("^multipart/byteranges; boundary=(%S+)$")
    assert.truthy(boundary, rs[1].headers["content-type"])
    assert.is_nil(rs[1].headers["content-range"])
    assert.equal(("\r\n--%s\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 0-9/1000\r\n\r\n%s"
                  .. "\r\n--%s\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 20-29/1000\r\n\r\n%s"
                  .. "\r\n--%s--\r\n"):format(boundary, data:sub(1, 10), boundary, data:sub(21, 30), boundary),
                 rs[1].body)
    assert.equal(200, rs[2].status)
    assert.is_true(data == rs[2].body)
  end)

  it("ignores a Range whose If-Range does not match", function()
    local port, data = fixture(1000)
    local etag = pipeline(port, { request("/f") })[1].headers.etag
    local rs = pipeline(port, {
      request("/f", 'Range: bytes=0-9\r\nIf-Range: "stale"\r\n'),
      request("/f", "Range: bytes=0-9\r\nIf-Range: " .. etag .. "\r\n"),
    })
    assert.equal(200, rs[1].status)
    assert.is_true(data == rs[1].body)
    assert.equal(206, rs[2].status)
    assert.equal(data:sub(1, 10), rs[2].body)
  end)

  it("answers HEAD with the headers only", function()
    local port, data = fixture(20000)
    local rs = pipeline(port, { request("/f", nil, "HEAD"), request("/f", "Range: bytes=0-4\r\n") })
    assert.equal(200, rs[1].status)
    assert.equal("20000", rs[1].headers["content-length"])
    assert.is_not_nil(rs[1].headers.etag)
    -- A body after the HEAD's head would have broken this response.
    assert.equal(206, rs[2].status)
    assert.equal(data:sub(1, 5), rs[2].body)
  end)

  it("returns nil, 'not found' and sends nothing for a missing file or a directory", function()
    local port, _, calls = fixture(100)
    -- "/" is the fixture's directory itself.
    local rs = pipeline(port, { request("/nothing.bin"), request("/"), request("/f") })
    assert.same({ nil, "not found" }, calls[1])
    assert.same({ nil, "not found" }, calls[2])
    assert.equal(404, rs[1].status)
    assert.equal("handler 404: not found", rs[1].body)
    assert.equal(404, rs[2].status)
    assert.equal(200, rs[3].status)
    assert.same({ true }, calls[3])
  end)

  it("leaves no file headers behind when the file is missing", function()
    local port = fixture(100)
    local r = pipeline(port, { request("/missing.png") })[1]
    assert.equal(404, r.status)
    assert.is_nil(r.headers.etag)
    assert.is_nil(r.headers["last-modified"])
    -- The handler's own 404 text, not an image.
    assert.equal("text/plain; charset=utf-8", r.headers["content-type"])
  end)

  it("sets Content-Type from the extension unless the handler set one", function()
    local dir = h.tmpdir()
    for _, name in ipairs { "a.html", "b.css", "c.png", "d.json", "e.unknownext", "f.txt", "g.JS" } do
      h.write_file(dir .. "/" .. name, "x")
    end
    local port = serve(function(req, res)
      if req.path == "/typed.png" then
        res:header("Content-Type", "application/x-mine")
        return res:sendfile(dir .. "/c.png")
      end
      if req.path == "/opt" then return res:sendfile(dir .. "/e.unknownext", { content_type = "text/x-opt" }) end
      res:sendfile(dir .. req.path)
    end)
    local rs = pipeline(port, {
      request("/a.html"), request("/b.css"), request("/c.png"), request("/d.json"),
      request("/e.unknownext"), request("/f.txt"), request("/g.JS"), request("/typed.png"), request("/opt"),
    })
    local want = {
      "^text/html", "^text/css", "^image/png$", "^application/json", "^application/octet%-stream$",
      "^text/plain", "^text/javascript", "^application/x%-mine$", "^text/x%-opt",
    }
    for i, w in ipairs(want) do
      assert.equal(200, rs[i].status)
      local ct = rs[i].headers["content-type"]
      assert(ct and ct:find(w), ("case %d: Content-Type %s, want %s"):format(i, tostring(ct), w))
    end
  end)

  it("raises once the response has started", function()
    local dir = h.tmpdir()
    h.write_file(dir .. "/x", "x")
    local err
    local port = serve(function(_, res)
      res:write("a")
      err = select(2, pcall(res.sendfile, res, dir .. "/x"))
    end)
    local s = h.dial(port)
    assert(s:send(request("/")))
    assert.equal("HTTP/1.1 200 OK", s:receive("*l"))
    h.eventually(function() return err end, 5)   -- the handler goes on in its own time
    assert.matches("already", tostring(err))
  end)
end)
