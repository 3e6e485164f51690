-- Static files (cohost.http.static through the router's r:static) and
-- MIME types (cohost.http.mime), behind a real http.listen server on
-- 127.0.0.1 port 0. Traversal attempts go as raw cosocket requests, so no
-- client normalizes them first; ranges, HEAD and conditional requests go
-- through curl, run in the background (a blocking os.execute would hold
-- up the in-process server).
local http = require "cohost.http"
local router = require "cohost.http.router"
local static = require "cohost.http.static"
local mime = require "cohost.http.mime"
local h = require "spec.helper"
h.cleanups(after_each)

-- -- Clients ------------------------------------------------------------------

local serve = h.http_serve   -- port of a server on 127.0.0.1:0, closed after the test

-- One request with Connection: close (h.request); the parsed response.
local request = h.request

local function get(port, target, headers) return request(port, "GET", target, headers) end

-- -- A site on disk -----------------------------------------------------------

-- A temp directory tree, removed after the test:
--   <root>/secret.txt                 outside the served directory
--   <root>/public/index.html, style.css, app.js, data.json, logo.svg,
--     pic.png, blob.bin, noext, .env, sub/index.html, empty/,
--     evil.example/dir/index.html
-- Returns root and the served directory.
local SECRET = "TOP SECRET outside the served directory"

local function site()
  local root = h.tmpdir()
  assert(os.execute("mkdir -p " .. root .. "/public/sub " .. root .. "/public/empty "
    .. root .. "/public/evil.example/dir") == 0)
  local pub = root .. "/public"
  h.write_file(root .. "/secret.txt", SECRET)
  h.write_file(pub .. "/index.html", "<h1>home</h1>")
  h.write_file(pub .. "/style.css", "body{}")
  h.write_file(pub .. "/app.js", "alert(1)")
  h.write_file(pub .. "/data.json", "{}")
  h.write_file(pub .. "/logo.svg", "<svg/>")
  h.write_file(pub .. "/pic.png", "\137PNG")
  h.write_file(pub .. "/noext", "plain bytes")
  h.write_file(pub .. "/.env", "PASSWORD=" .. SECRET)
  h.write_file(pub .. "/sub/index.html", "<h1>sub</h1>")
  h.write_file(pub .. "/evil.example/dir/index.html", "<h1>evil</h1>")
  -- 100 KiB of varied bytes, for ranges.
  local t = {}
  for i = 0, 102399 do t[#t + 1] = string.char((i * 7 + 3) % 256) end
  h.write_file(pub .. "/blob.bin", table.concat(t))
  return root, pub
end

-- Serves pub at prefix through a router; returns the port.
local function serve_site(prefix, pub, opts)
  local r = router.new()
  r:static(prefix, pub, opts)
  return serve(r)
end

-- -- Files --------------------------------------------------------------------

describe("r:static", function()
  local pub, port
  before_each(function()
    local _
    _, pub = site()
    port = serve_site("/static", pub)
  end)

  it("serves files with their content and a Content-Type from the extension", function()
    local cases = {
      { "/static/style.css", "text/css; charset=utf-8", "body{}" },
      { "/static/app.js", "text/javascript; charset=utf-8", "alert(1)" },
      { "/static/data.json", "application/json", "{}" },
      { "/static/logo.svg", "image/svg+xml", "<svg/>" },
      { "/static/pic.png", "image/png", "\137PNG" },
      { "/static/noext", "application/octet-stream", "plain bytes" },
      { "/static/index.html", "text/html; charset=utf-8", "<h1>home</h1>" },
    }
    for _, c in ipairs(cases) do
      local res = get(port, c[1])
      assert.equal(200, res.status, c[1])
      assert.equal(c[2], res.headers["content-type"], c[1])
      assert.equal(c[3], res.body, c[1])
    end
  end)

  it("serves index.html for a directory named with its slash", function()
    assert.equal("<h1>home</h1>", get(port, "/static/").body)
    assert.equal("<h1>sub</h1>", get(port, "/static/sub/").body)
  end)

  it("redirects a directory named without its slash with 301, keeping the query", function()
    local res = get(port, "/static/sub?x=1")
    assert.equal(301, res.status)
    assert.equal("/static/sub/?x=1", res.headers["location"])
    res = get(port, "/static")
    assert.equal(301, res.status)
    assert.equal("/static/", res.headers["location"])
  end)

  it("answers 404 for a missing file, a directory without an index and a dotfile", function()
    assert.equal(404, get(port, "/static/missing.txt").status)
    assert.equal(404, get(port, "/static/empty/").status)
    assert.equal(404, get(port, "/static/sub/missing/").status)
    assert.equal(404, get(port, "/static/index.html/").status)
    local res = get(port, "/static/.env")
    assert.equal(404, res.status)
    assert.is_nil(res.body:find(SECRET, 1, true))
  end)

  it("answers 405 with Allow to methods other than GET and HEAD", function()
    for _, m in ipairs { "POST", "PUT", "DELETE" } do
      local res = request(port, m, "/static/style.css", { ["Content-Length"] = "0" })
      assert.equal(405, res.status, m)
      assert.equal("GET, HEAD, OPTIONS", res.headers["allow"])
    end
  end)

  it("never serves a file outside the directory, however the path is spelled", function()
    local attempts = {
      "/static/../secret.txt",
      "/static/%2e%2e/secret.txt",
      "/static/%2E%2E/secret.txt",
      "/static/.%2e/secret.txt",
      "/static/..%2fsecret.txt",
      "/static/%2e%2e%2fsecret.txt",
      "/static/sub/../../secret.txt",
      "/static/sub/%2e%2e/%2e%2e/secret.txt",
      "/static/..%5csecret.txt",
      "/static/..\\secret.txt",
      "/static/%5c..%5csecret.txt",
      "/static/secret.txt%00",
      "/static/%00/../secret.txt",
      "/static/..%252fsecret.txt",
      "/static/%252e%252e/secret.txt",
      "/static//../secret.txt",
      "/static/./../secret.txt",
      "/../secret.txt",
      "/static/" .. ("../"):rep(20) .. "etc/passwd",
    }
    for _, target in ipairs(attempts) do
      local res = get(port, target)
      assert.is_true(res.status == 400 or res.status == 404,
        ("%s gave %d"):format(target, res.status))
      assert.is_nil(res.body:find(SECRET, 1, true), target)
      assert.is_nil(res.body:find("root:", 1, true), target)
    end
  end)

  it("checks the relative path it is given itself, not only the server's normalization", function()
    local serve_file = static.new(pub)
    -- The server leaves %00 in a query undecoded: "NUL" stands for one.
    local p = serve(function(req, res)
      serve_file(req, res, "/" .. req.query.p:gsub("NUL", "\0"))
    end)
    for _, rel in ipairs { "../secret.txt", "sub/../../secret.txt", "./../secret.txt",
                           "..\\secret.txt", "style.cssNUL", "NUL/style.css" } do
      local res = get(p, "/?p=" .. rel:gsub("[^%w]", function(c) return ("%%%02X"):format(c:byte()) end))
      assert.equal(400, res.status, rel)
      assert.is_nil(res.body:find(SECRET, 1, true), rel)
    end
    assert.equal("body{}", get(p, "/?p=style.css").body)
  end)

  it("redirects //host/dir to a path, never to another host", function()
    local p = serve_site("/", pub)
    local res = get(p, "//evil.example/dir")
    assert.equal(301, res.status)
    assert.equal("/evil.example/dir/", res.headers["location"])
  end)

  it("answers HEAD with the headers of GET and no body (curl -I)", function()
    local code, out, err = h.sh(("curl -sS -I --max-time 10 http://127.0.0.1:%d/static/blob.bin"):format(port))
    assert.equal(0, code, err)
    assert.matches("^HTTP/1.1 200", out)
    assert.matches("\r\n[Cc]ontent%-[Ll]ength: 102400\r\n", out)
    assert.matches("\r\n[Cc]ontent%-[Tt]ype: application/octet%-stream\r\n", out)
    assert.matches("\r\n\r\n$", out)
  end)

  it("serves a single range with 206 (curl -r)", function()
    local out = h.tmpfile()
    local code, status, err = h.sh(("curl -sS --max-time 10 -r 1000-1999 -o %s -w '%%{http_code}' http://127.0.0.1:%d/static/blob.bin")
      :format(out, port))
    assert.equal(0, code, err)
    assert.equal("206", status)
    assert.equal(h.slurp(pub .. "/blob.bin"):sub(1001, 2000), h.slurp(out))
  end)

  it("answers a conditional request with 304 (curl with If-None-Match)", function()
    local res = get(port, "/static/style.css")
    local etag = assert(res.headers["etag"])
    local code, status, err = h.sh(("curl -sS --max-time 10 -o /dev/null -w '%%{http_code}' -H %s http://127.0.0.1:%d/static/style.css")
      :format(h.shell_quote("If-None-Match: " .. etag), port))
    assert.equal(0, code, err)
    assert.equal("304", status)
  end)

  it("lets routes under the prefix win over files", function()
    local r = router.new()
    r:static("/static", pub)
    r:get("/static/style.css", function(_, res) res:send("from a route") end)
    local p = serve(r)
    assert.equal("from a route", get(p, "/static/style.css").body)
    assert.equal("alert(1)", get(p, "/static/app.js").body)
  end)
end)

describe("static options", function()
  it("serves dotfiles with dotfiles = true, and adds Cache-Control with max_age", function()
    local _, pub = site()
    local port = serve_site("/", pub, { dotfiles = true, max_age = 600 })
    local res = get(port, "/.env")
    assert.equal(200, res.status)
    assert.equal("max-age=600", res.headers["cache-control"])
  end)

  it("serves no index with index = false, and another name when given", function()
    local _, pub = site()
    h.write_file(pub .. "/sub/default.htm", "default")
    local r = router.new()
    r:static("/a", pub, { index = false })
    r:static("/b", pub, { index = "default.htm" })
    local port = serve(r)
    assert.equal(404, get(port, "/a/sub/").status)
    assert.equal("default", get(port, "/b/sub/").body)
  end)

  it("works without a router, on req.path", function()
    local _, pub = site()
    local port = serve(static.new(pub))
    assert.equal("body{}", get(port, "/style.css").body)
    assert.equal("<h1>home</h1>", get(port, "/").body)
  end)
end)

describe("cohost.http.mime", function()
  it("maps the common web types the same on every machine", function()
    assert.equal("text/html; charset=utf-8", mime.type("a/b/INDEX.HTML"))
    assert.equal("text/css; charset=utf-8", mime.type("x.css"))
    assert.equal("text/javascript; charset=utf-8", mime.type("x.mjs"))
    assert.equal("application/wasm", mime.type("x.wasm"))
    assert.equal("font/woff2", mime.type("x.woff2"))
    assert.equal("image/webp", mime.type("x.webp"))
    assert.equal("application/octet-stream", mime.type("x.nosuchext"))
    assert.equal("application/octet-stream", mime.type("dir.d/noext"))
  end)

  it("reads /etc/mime.types for the others, and set() overrides", function()
    if h.try_slurp("/etc/mime.types") then
      local f = io.open("/etc/mime.types")
      local text = f:read("*a")
      f:close()
      if text:find("\napplication/vnd%.oasis%.opendocument%.text%s+odt") then
        assert.equal("application/vnd.oasis.opendocument.text", mime.type("doc.odt"))
      end
    end
    mime.set("xyz", "text/x-xyz")
    assert.equal("text/x-xyz; charset=utf-8", mime.type("a.XYZ"))
  end)
end)
