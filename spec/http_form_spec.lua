-- Forms and JSON bodies (cohost.http.form, and req:form() / req:json()),
-- behind a real http.listen server on 127.0.0.1 port 0. Uploads come from
-- curl -F (run in the background: a blocking os.execute would hold up the
-- in-process server); malformed bodies go as raw cosocket requests.
local http = require "cohost.http"
local form = require "cohost.http.form"
local cjson = require "cjson"
local h = require "spec.helper"
h.cleanups(after_each)

-- -- Clients ------------------------------------------------------------------

local serve = h.http_serve   -- port of a server on 127.0.0.1:0, closed after the test

-- A POST to /form with Content-Type ct and body on a new connection; the
-- parsed response.
local function post(port, ct, body)
  return h.request(port, "POST", "/form", { ["Content-Type"] = ct }, body)
end

-- curl with args (already quoted) to /form; returns the status and body.
local function curl(port, args)
  local out = h.tmpfile()
  local code, status, err = h.sh(("curl -sS --max-time 15 -o %s -w '%%{http_code}' %s http://127.0.0.1:%d/form")
    :format(out, args, port))
  assert.equal(0, code, err)
  return tonumber(status), h.slurp(out)
end

-- Serves fn(req) -> value | nil, err on /form: 200 "ok" or 400 err. The
-- returned box gets value and err of the last request.
local function capture(fn, opts)
  local box = {}
  local port = serve(function(req, res)
    local v, err = fn(req)
    box.value, box.err = v, err
    if v == nil then
      res.status = 400
      return res:send(tostring(err))
    end
    res:send("ok")
  end, opts or { max_body_size = 8 * 1024 * 1024 })
  return port, box
end

-- n bytes of varied content that keeps spelling CRLF and dashes, the
-- bytes a multipart delimiter starts with.
local function content(n, seed)
  local t, x = {}, seed or 1
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    if i % 997 == 0 then t[i] = "\r\n--" else t[i] = string.char(math.floor(x / 65536) % 256) end
  end
  return table.concat(t):sub(1, n)
end

local MiB = 1024 * 1024

-- -- urlencoded ---------------------------------------------------------------

describe("urlencoded forms", function()
  it("decode like req.query: + is a space, repeated keys are arrays (curl -d)", function()
    local port, box = capture(function(req) return req:form() end)
    local status = curl(port, "-d " .. h.shell_quote("a=1&b=x+y%21&a=2&c&a=3&%C3%A9=%E2%82%AC"))
    assert.equal(200, status)
    assert.same({ a = { "1", "2", "3" }, b = "x y!", c = "", ["é"] = "€" }, box.value)
  end)

  it("bound the number of pairs", function()
    local port, box = capture(function(req) return form.form(req, { max_parts = 3 }) end)
    assert.equal(400, post(port, "application/x-www-form-urlencoded", "a=1&b=2&c=3&d=4").status)
    assert.equal("too many parts", box.err)
  end)

  it("refuse other media types", function()
    local port, box = capture(function(req) return req:form() end)
    assert.equal(400, post(port, "text/plain", "a=1").status)
    assert.equal("unsupported media type", box.err)
  end)
end)

-- -- multipart ----------------------------------------------------------------

describe("multipart forms", function()
  local data, src
  before_each(function()
    data = content(MiB)
    src = h.tmpfile(data)
  end)

  it("save a 1 MiB file to a temp file, byte for byte, beside the fields (curl -F)", function()
    local dir = h.tmpdir()
    local port, box = capture(function(req) return form.form(req, { dir = dir }) end)
    local status, body = curl(port, ("-F title=hello -F %s -F tag=a -F tag=b")
      :format(h.shell_quote("upload=@" .. src .. ";type=application/x-test;filename=report.bin")))
    assert.equal(200, status, body)
    local t = box.value
    assert.equal("hello", t.title)
    assert.same({ "a", "b" }, t.tag)
    local f = t.upload
    assert.equal("report.bin", f.filename)
    assert.equal("application/x-test", f.content_type)
    assert.equal(MiB, f.size)
    assert.equal(dir .. "/", f.path:sub(1, #dir + 1))
    assert.is_true(h.slurp(f.path) == data, "the saved file differs from the upload")
  end)

  it("parse a chunked upload the same way", function()
    local dir = h.tmpdir()
    local port, box = capture(function(req) return req:form { dir = dir } end)
    local status, body = curl(port, ("-H 'Transfer-Encoding: chunked' -F %s")
      :format(h.shell_quote("upload=@" .. src)))
    assert.equal(200, status, body)
    assert.equal(MiB, box.value.upload.size)
    assert.is_true(h.slurp(box.value.upload.path) == data, "the saved file differs from the upload")
  end)

  it("stream files to on_file in pieces, never whole", function()
    local pieces, biggest, mismatch = 0, 0, nil
    local port, box = capture(function(req)
      return form.multipart(req, { on_file = function(part)
        assert.equal("upload", part.name)
        local at = 1
        while true do
          local piece, err = part:read()
          if not piece then assert(err == nil, err); break end
          pieces, biggest = pieces + 1, math.max(biggest, #piece)
          if piece ~= data:sub(at, at + #piece - 1) then mismatch = mismatch or at end
          at = at + #piece
        end
        return "streamed " .. part.size .. " bytes of " .. part.filename
      end })
    end)
    local status = curl(port, "-F note=n -F " .. h.shell_quote("upload=@" .. src .. ";filename=x.bin"))
    assert.equal(200, status)
    assert.is_nil(mismatch)
    assert.same({ note = "n", upload = "streamed 1048576 bytes of x.bin" }, box.value)
    assert.is_true(pieces > 1)
    assert.is_true(biggest <= 65536, "a piece of " .. biggest .. " bytes")
  end)

  it("skip what on_file leaves unread, and stop when it returns nil, err", function()
    local port, box = capture(function(req)
      return form.multipart(req, { on_file = function(part)
        part:read()
        if part.filename == "stop.bin" then return nil, "refused" end
      end })
    end)
    local status = curl(port, "-F " .. h.shell_quote("a=@" .. src) .. " -F after=yes")
    assert.equal(200, status)
    assert.same({ filename = src:match("[^/]+$"), content_type = "application/octet-stream", size = MiB },
      box.value.a)
    assert.equal("yes", box.value.after)
    assert.equal(400, curl(port, "-F " .. h.shell_quote("a=@" .. src .. ";filename=stop.bin")))
    assert.equal("refused", box.err)
  end)

  it("give several files of one name as an array", function()
    local dir = h.tmpdir()
    local small = h.tmpfile("second file")
    local port, box = capture(function(req) return form.multipart(req, { dir = dir }) end)
    local status = curl(port, ("-F %s -F %s"):format(h.shell_quote("f=@" .. src .. ";filename=one"),
      h.shell_quote("f=@" .. small .. ";filename=two")))
    assert.equal(200, status)
    local f = box.value.f
    assert.equal(2, #f)
    assert.equal("one", f[1].filename)
    assert.equal("two", f[2].filename)
    assert.equal("second file", h.slurp(f[2].path))
    assert.equal(2, #h.ls(dir))
  end)

  it("enforce max_parts, max_field_size and max_file_size, leaving no temp file", function()
    local dir = h.tmpdir()
    local limits
    local port, box = capture(function(req)
      local o = { dir = dir }
      for k, v in pairs(limits) do o[k] = v end
      return form.multipart(req, o)
    end)
    local cases = {
      { { max_parts = 2 }, "-F a=1 -F b=2 -F c=3", "too many parts" },
      { { max_field_size = 10 }, "-F a=12345678901", "field too large" },
      { { max_file_size = 1000 }, "-F " .. h.shell_quote("f=@" .. src), "file too large" },
      { { max_parts = 2 }, "-F " .. h.shell_quote("f=@" .. src) .. " -F a=1 -F b=2", "too many parts" },
    }
    for _, c in ipairs(cases) do
      limits = c[1]
      box.err = nil
      assert.equal(400, (curl(port, c[2])))
      assert.equal(c[3], box.err)
      assert.same({}, h.ls(dir))
    end
  end)

  local B = "b0undary"
  local CT = "multipart/form-data; boundary=" .. B

  local function part(headers, body)
    return "--" .. B .. "\r\n" .. headers .. "\r\n\r\n" .. body .. "\r\n"
  end

  it("skip a preamble, transport padding and an epilogue", function()
    local port, box = capture(function(req) return form.form(req) end)
    local body = "this is the preamble\r\n" ..
      "--" .. B .. " \t\r\n" .. 'Content-Disposition: form-data; name="a"\r\n\r\n1\r\n' ..
      "--" .. B .. "\r\n" .. 'content-disposition: form-data; name=b\r\n\r\n\r\n' ..
      "--" .. B .. "--\r\nthis is the epilogue"
    assert.equal(200, post(port, CT, body).status)
    assert.same({ a = "1", b = "" }, box.value)
    -- A quoted boundary and a body that ends right after the closing "--".
    body = part('Content-Disposition: form-data; name="x"', "y") .. "--" .. B .. "--"
    assert.equal(200, post(port, 'multipart/form-data; boundary="' .. B .. '"', body).status)
    assert.same({ x = "y" }, box.value)
  end)

  it("answer nil, 'bad form' to malformed bodies, leaving no temp file", function()
    local dir = h.tmpdir()
    local port, box = capture(function(req) return form.form(req, { dir = dir }) end)
    local file = 'Content-Disposition: form-data; name="f"; filename="f.bin"'
    local cases = {
      { CT, part(file, "truncated before the closing delimiter") },
      { CT, part(file, "abc"):sub(1, -3) },
      { CT, part('Content-Disposition: form-data; filename="noname"', "x") .. "--" .. B .. "--" },
      { CT, part('Content-Disposition: attachment; name="a"', "x") .. "--" .. B .. "--" },
      { CT, part("no colon here", "x") .. "--" .. B .. "--" },
      { CT, "--" .. B .. "garbage\r\n" .. part(file, "x") .. "--" .. B .. "--" },
      { CT, "no delimiter at all" },
      { CT, "" },
      { "multipart/form-data", part(file, "x") .. "--" .. B .. "--" },
      { "multipart/form-data; boundary=" .. ("x"):rep(71), "--" .. ("x"):rep(71) .. "--" },
      { CT, part('Content-Disposition: form-data; name="a', "x") .. "--" .. B .. "--" },
      { CT, "--" .. B .. "\r\n" .. ("X-Long: " .. ("v"):rep(9000)) .. "\r\n\r\nx\r\n--" .. B .. "--" },
    }
    for i, c in ipairs(cases) do
      box.err = "unset"
      local res = post(port, c[1], c[2])
      assert.equal(400, res.status, "case " .. i)
      assert.equal("bad form", box.err, "case " .. i)
    end
    assert.same({}, h.ls(dir))
  end)
end)

-- -- JSON ---------------------------------------------------------------------

describe("req:json()", function()
  it("decodes a JSON body", function()
    local port, box = capture(function(req) return req:json() end)
    assert.equal(200, post(port, "application/json; charset=utf-8", '{"a":[1,2,{"b":null}],"c":"é"}').status)
    assert.same({ a = { 1, 2, { b = cjson.null } }, c = "é" }, box.value)
    assert.equal(200, post(port, "application/vnd.api+json", "[true]").status)
    assert.same({ true }, box.value)
  end)

  it("answers nil, 'bad json: ...' to a body that does not parse", function()
    local port, box = capture(function(req) return req:json() end)
    for _, body in ipairs { '{"a":', "", "{'a':1}", "[1,]x" } do
      assert.equal(400, post(port, "application/json", body).status, body)
      assert.matches("^bad json: ", box.err)
    end
  end)

  it("answers nil, 'unsupported media type' to other types", function()
    local port, box = capture(function(req) return req:json() end)
    for _, ct in ipairs { "text/plain", "application/x-www-form-urlencoded", "application/jsonp" } do
      assert.equal(400, post(port, ct, "{}").status, ct)
      assert.equal("unsupported media type", box.err)
    end
  end)

  it("passes on the body error past max_body_size", function()
    local port, box = capture(function(req) return req:json() end, { max_body_size = 100 })
    -- Chunked, so the server cannot refuse it from its head: the handler
    -- runs and the limit shows while it reads.
    local body = '["' .. ("x"):rep(200) .. '"]'
    local res = h.parse_response(h.raw_request(port, ("POST /form HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" ..
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n")
      :format(#body, body)))
    assert.equal(400, res.status)   -- the handler's answer, not the server's 413
    assert.equal("too large", res.body)
    assert.equal("too large", box.err)
  end)
end)
