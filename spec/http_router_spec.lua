-- The router (cohost.http.router) behind a real http.listen server on
-- 127.0.0.1 port 0, driven by raw cosocket requests and curl; the error
-- log and examples/webapp.lua run as child processes, whose output the
-- spec reads. curl and python run in the background (a blocking
-- os.execute would hold up the in-process server).
local cohost = require "cohost"
local http = require "cohost.http"
local router = require "cohost.http.router"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- -- Clients ------------------------------------------------------------------

-- Starts an HTTP server for handler (a router or a function) on port 0,
-- closed after the test; returns the port.
local serve = h.http_serve   -- port of a server on 127.0.0.1:0, closed after the test

-- One request with Connection: close (h.request); the parsed response.
local request = h.request

local function get(port, target, headers) return request(port, "GET", target, headers) end

-- Shorthand: a router serving a handler that answers its route's name and
-- params as JSON.
local function echo_route(name)
  return function(req, res) res:json { route = name, params = req.params } end
end

-- -- Matching -----------------------------------------------------------------

describe("router matching", function()
  local port
  before_each(function()
    local r = router.new()
    r:get("/", echo_route("root"))
    r:get("/users/:id", echo_route("user"))
    r:get("/users/new", echo_route("new user"))   -- registered after :id, still wins
    r:get("/users/:id/posts/:post", echo_route("post"))
    r:get("/files/*path", echo_route("files"))
    r:get("/files/special", echo_route("special file"))
    r:get("/any/*", echo_route("bare splat"))
    r:get("/a/:x/c", echo_route("a-x-c"))
    r:get("/a/*rest", echo_route("a-rest"))
    port = serve(r)
  end)

  local function route(target)
    local res = get(port, target)
    assert.equal(200, res.status, res.body)
    return cjson.decode(res.body)
  end

  it("matches the root and literal paths", function()
    assert.same({ route = "root", params = {} }, route("/"))
    assert.same({ route = "new user", params = {} }, route("/users/new"))
  end)

  it("fills :name parameters, percent-decoded one segment at a time", function()
    assert.same({ route = "user", params = { id = "42" } }, route("/users/42"))
    assert.same({ route = "user", params = { id = "a/b c" } }, route("/users/a%2Fb%20c"))
    assert.same({ route = "post", params = { id = "7", post = "x y" } }, route("/users/7/posts/x%20y"))
  end)

  it("fills a trailing *splat with the rest of the path, possibly empty", function()
    assert.same({ route = "files", params = { path = "a/b/c.txt" } }, route("/files/a/b/c.txt"))
    assert.same({ route = "files", params = { path = "" } }, route("/files/"))
    assert.same({ route = "files", params = { path = "sp ace/x" } }, route("/files/sp%20ace/x"))
    assert.same({ route = "bare splat", params = { ["*"] = "q/r" } }, route("/any/q/r"))
    assert.equal(404, get(port, "/files").status)
  end)

  it("takes the server's normalized path when escaped segments climb", function()
    -- The server decodes "/files/a/..%2fb" and removes the dot segments:
    -- "/files/b". The raw segment "..%2fb" must not reach the route.
    assert.same({ route = "files", params = { path = "b" } }, route("/files/a/..%2fb"))
    assert.same({ route = "files", params = { path = "c" } }, route("/files/a%2fb/%2e%2e/%2e%2e/c"))
  end)

  it("prefers a literal segment to a parameter and a parameter to a splat", function()
    assert.same({ route = "special file", params = {} }, route("/files/special"))
    assert.same({ route = "a-x-c", params = { x = "b" } }, route("/a/b/c"))
    -- The parameter route fails on its last segment: the search backtracks
    -- to the splat.
    assert.same({ route = "a-rest", params = { rest = "b/d" } }, route("/a/b/d"))
  end)

  it("does not let a parameter match an empty segment", function()
    assert.equal(404, get(port, "/users/").status)
  end)

  it("raises on malformed patterns", function()
    local r = router.new()
    assert.has_error(function() r:get("no-slash", echo_route("x")) end)
    assert.has_error(function() r:get("/a/*rest/b", echo_route("x")) end)
    assert.has_error(function() r:get("/a/:", echo_route("x")) end)
    assert.has_error(function() r:get("/a", "not a function") end)
  end)
end)

-- -- 404, 405, HEAD, OPTIONS --------------------------------------------------

describe("router answers", function()
  local port
  before_each(function()
    local r = router.new()
    r:get("/items/:id", function(req, res) res:send("item " .. req.params.id) end)
    r:delete("/items/:id", function(req, res) res:send("deleted " .. req.params.id) end)
    r:post("/items", function(_, res) res:send("created") end)
    r:put("/items/special", function(_, res) res:send("put special") end)
    r:any("/anything", function(req, res) res:send("any " .. req.method) end)
    port = serve(r)
  end)

  it("answers 404 in text, or in JSON when the client asks for JSON", function()
    local res = get(port, "/nowhere")
    assert.equal(404, res.status)
    assert.matches("^text/plain", res.headers["content-type"])
    assert.equal("not found\n", res.body)
    res = get(port, "/nowhere", { Accept = "application/json" })
    assert.equal(404, res.status)
    assert.equal("application/json", res.headers["content-type"])
    assert.same({ error = "not found" }, cjson.decode(res.body))
  end)

  it("answers 405 with an Allow header listing the methods of every route matching the path", function()
    local res = request(port, "PATCH", "/items/3")
    assert.equal(405, res.status)
    assert.equal("GET, HEAD, DELETE, OPTIONS", res.headers["allow"])
    -- /items/special matches the literal PUT route and the :id routes.
    res = request(port, "POST", "/items/special")
    assert.equal(405, res.status)
    assert.equal("GET, HEAD, PUT, DELETE, OPTIONS", res.headers["allow"])
    res = request(port, "GET", "/items")
    assert.equal(405, res.status)
    assert.equal("POST, OPTIONS", res.headers["allow"])
  end)

  it("reaches a less specific route that has the method", function()
    assert.equal("deleted special", request(port, "DELETE", "/items/special").body)
    assert.equal("put special", request(port, "PUT", "/items/special", nil, "").body)
  end)

  it("answers OPTIONS with 204 and Allow", function()
    local res = request(port, "OPTIONS", "/items/3")
    assert.equal(204, res.status)
    assert.equal("GET, HEAD, DELETE, OPTIONS", res.headers["allow"])
    assert.equal("", res.body)
  end)

  it("runs the GET route for HEAD, without a body (curl -I)", function()
    local code, out = h.sh(("curl -sS -I --max-time 10 http://127.0.0.1:%d/items/9"):format(port))
    assert.equal(0, code)
    assert.matches("^HTTP/1.1 200", out)
    assert.matches("\r\n[Cc]ontent%-[Ll]ength: 6\r\n", out)   -- "item 9"
    assert.matches("\r\n\r\n$", out)
  end)

  it("sends every method to an any route", function()
    for _, m in ipairs { "GET", "POST", "PUT", "DELETE", "PATCH" } do
      assert.equal("any " .. m, request(port, m, "/anything", nil, "").body)
    end
  end)

  it("lets on_method_not_allowed answer the 405s, routes' and r:static's, in the app's own format", function()
    local dir = h.tmpdir()
    h.write_file(dir .. "/a.txt", "file a")
    local function problem(res, status, title, extra)
      res.status = status
      res:header("Content-Type", "application/problem+json")
      local body = { title = title }
      for k, v in pairs(extra or {}) do body[k] = v end
      res:send(cjson.encode(body))
    end
    local seen
    local r = router.new()
      :on_not_found(function(_, res) problem(res, 404, "no such page") end)
      :on_method_not_allowed(function(req, res, methods)
        seen = res:get_header("Allow")
        problem(res, 405, "no " .. req.method .. " here", { allowed = methods })
      end)
    r:get("/items/:id", function(_, res) res:send("item") end)
    r:delete("/items/:id", function(_, res) res:send("gone") end)
    r:static("/files", dir)
    local p = serve(r)
    local res = request(p, "PATCH", "/items/3")
    assert.equal(405, res.status)
    assert.equal("application/problem+json", res.headers["content-type"])
    assert.equal("GET, HEAD, DELETE, OPTIONS", res.headers["allow"])
    assert.equal(res.headers["allow"], seen)
    assert.same({ title = "no PATCH here", allowed = { "GET", "HEAD", "DELETE", "OPTIONS" } }, cjson.decode(res.body))
    res = request(p, "POST", "/files/a.txt", { ["Content-Length"] = "0" })
    assert.equal(405, res.status)
    assert.equal("GET, HEAD, OPTIONS", res.headers["allow"])
    assert.same({ title = "no POST here", allowed = { "GET", "HEAD", "OPTIONS" } }, cjson.decode(res.body))
    -- The rest is as before: OPTIONS 204, the 404 hook, the file.
    res = request(p, "OPTIONS", "/items/3")
    assert.equal(204, res.status)
    assert.equal("GET, HEAD, DELETE, OPTIONS", res.headers["allow"])
    assert.same({ title = "no such page" }, cjson.decode(get(p, "/nowhere").body))
    assert.equal("file a", get(p, "/files/a.txt").body)
  end)

  it("lets on_not_found replace the 404", function()
    local r = router.new():on_not_found(function(req, res)
      res.status = 404
      res:send("nothing at " .. req.path)
    end)
    local p = serve(r)
    assert.equal("nothing at /x/y", get(p, "/x/y").body)
  end)
end)

-- -- Middleware ---------------------------------------------------------------

describe("router middleware", function()
  it("runs in order around the route, and next() returns after it", function()
    local trail = {}
    local r = router.new()
    r:use(function(_, _, next) trail[#trail + 1] = "a"; next(); trail[#trail + 1] = "a-after" end)
    r:use(function(req, _, next) trail[#trail + 1] = "b"; req.user = "ann"; next() end)
    r:get("/x", function(req, res) trail[#trail + 1] = "route"; res:send(req.user) end)
    local port = serve(r:handler())
    assert.equal("ann", get(port, "/x").body)
    assert.same({ "a", "b", "route", "a-after" }, trail)
  end)

  it("runs for requests no route matches", function()
    local seen
    local r = router.new()
    r:use(function(req, res, next) seen = req.path; res:header("X-Seen", "yes"); next() end)
    local res = get(serve(r), "/missing")
    assert.equal(404, res.status)
    assert.equal("/missing", seen)
    assert.equal("yes", res.headers["x-seen"])
  end)

  it("stops the chain when a middleware answers, and next() after that does nothing", function()
    local route_ran, later_ran = false, false
    local r = router.new()
    r:use("/admin", function(_, res, next)
      res.status = 403
      res:send("forbidden")
      next()   -- harmless: the response has started
    end)
    r:use(function(_, _, next) later_ran = true; next() end)
    r:get("/admin/panel", function(_, res) route_ran = true; res:send("panel") end)
    r:get("/administrator", function(_, res) res:send("not under /admin") end)
    local port = serve(r)
    local res = get(port, "/admin/panel")
    assert.equal(403, res.status)
    assert.equal("forbidden", res.body)
    assert.is_false(route_ran)
    assert.is_false(later_ran)
    res = get(port, "/administrator")
    assert.equal(200, res.status)
    assert.equal("not under /admin", res.body)
  end)

  it("runs the route once when next() is called twice", function()
    local runs = 0
    local r = router.new()
    r:use(function(_, _, next) next(); next() end)
    r:get("/", function(_, res) runs = runs + 1; res:send("once") end)
    local res = get(serve(r), "/")
    assert.equal(200, res.status)
    assert.equal("once", res.body)
    assert.equal(1, runs)
  end)
end)

-- -- Mounts -------------------------------------------------------------------

describe("router mount", function()
  it("hands the rest of the path to a subrouter with its own middleware and 404", function()
    local api = router.new()
    api:use(function(_, res, next) res:header("X-Api", "1"); next() end)
    api:get("/", function(_, res) res:send("api root") end)
    api:get("/items/:id", function(req, res) res:send("api item " .. req.params.id) end)
    local r = router.new()
    r:mount("/api", api)
    r:get("/", function(_, res) res:send("site root") end)
    local port = serve(r)
    assert.equal("api item 5", get(port, "/api/items/5").body)
    assert.equal("1", get(port, "/api/items/5").headers["x-api"])
    assert.equal("api root", get(port, "/api").body)
    assert.equal("api root", get(port, "/api/").body)
    assert.equal("site root", get(port, "/").body)
    local res = get(port, "/api/nothing")
    assert.equal(404, res.status)
    assert.equal("1", res.headers["x-api"])
    assert.equal(405, request(port, "POST", "/api/items/5", nil, "").status)
  end)

  it("serves a subrouter's static directory under the mount prefix", function()
    local dir = h.tmpdir()
    assert(os.execute("mkdir " .. dir .. "/guide") == 0)
    h.write_file(dir .. "/index.html", "docs home")
    h.write_file(dir .. "/guide/index.html", "guide")
    local docs = router.new():static("/", dir)
    local port = serve(router.new():mount("/docs", docs))
    local res = get(port, "/docs")
    assert.equal(301, res.status)
    assert.equal("/docs/", res.headers["location"])
    assert.equal("docs home", get(port, "/docs/").body)
    assert.equal("/docs/guide/", get(port, "/docs/guide").headers["location"])
    assert.equal("guide", get(port, "/docs/guide/").body)
  end)
end)

-- -- req.route -----------------------------------------------------------------

describe("req.route", function()
  it("is the matched pattern, behind the prefixes it is mounted under, and nil when no route matches", function()
    local function show(req, res) res:send(tostring(req.route)) end
    local v1 = router.new()
    v1:get("/notes/:id", show)
    v1:get("/", show)
    local api = router.new()
    api:mount("/v1", v1)
    api:get("/files/*path", show)
    local r = router.new()
    local after = {}   -- req.route as a middleware sees it once next() is back
    r:use(function(req, _, next)
      next()
      after[req.method .. " " .. req.path] = req.route or "nil"
    end)
    r:mount("/api", api)
    r:get("/notes/:id", show)
    r:get("/notes/new", show)
    r:any("/any", show)
    r:static("/assets", h.tmpdir())
    local port = serve(r)
    assert.equal("/notes/:id", get(port, "/notes/42").body)
    assert.equal("/notes/new", get(port, "/notes/new").body)
    assert.equal("/any", request(port, "POST", "/any", nil, "").body)
    assert.equal("/api/files/*path", get(port, "/api/files/a/b%20c").body)
    assert.equal("/api/v1/notes/:id", get(port, "/api/v1/notes/7").body)
    assert.equal("/api/v1/", get(port, "/api/v1").body)
    assert.equal("/api/v1/", get(port, "/api/v1/").body)
    assert.equal(200, request(port, "HEAD", "/notes/1").status)   -- GET's route
    assert.equal(404, get(port, "/assets/missing.css").status)
    assert.equal(404, get(port, "/nothing").status)
    assert.equal(404, get(port, "/api/v1/nothing").status)
    assert.equal(405, request(port, "DELETE", "/notes/1", nil, "").status)
    assert.same({
      ["GET /notes/42"] = "/notes/:id", ["GET /notes/new"] = "/notes/new", ["POST /any"] = "/any",
      ["GET /api/files/a/b c"] = "/api/files/*path", ["GET /api/v1/notes/7"] = "/api/v1/notes/:id",
      ["GET /api/v1"] = "/api/v1/", ["GET /api/v1/"] = "/api/v1/", ["HEAD /notes/1"] = "/notes/:id",
      ["GET /assets/missing.css"] = "/assets/*",
      ["GET /nothing"] = "nil", ["GET /api/v1/nothing"] = "nil", ["DELETE /notes/1"] = "nil",
    }, after)
  end)

  it("is nil without a router", function()
    local port = serve(function(req, res) res:send(tostring(req.route)) end)
    assert.equal("nil", get(port, "/notes/1").body)
  end)
end)

-- -- Errors -------------------------------------------------------------------

describe("router errors", function()
  it("answers 500 without the error or a traceback by default", function()
    local r = router.new()
    r:get("/boom", function() error("secret detail 42") end)
    local res = get(serve(r), "/boom")
    assert.equal(500, res.status)
    assert.equal("internal server error\n", res.body)
    local res2 = get(serve(r), "/boom", { Accept = "application/json" })
    assert.same({ error = "internal server error" }, cjson.decode(res2.body))
  end)

  it("puts the error and its traceback in the body with debug", function()
    local r = router.new { debug = true }
    r:get("/boom", function() error("secret detail 42") end)
    local res = get(serve(r), "/boom")
    assert.equal(500, res.status)
    assert.matches("secret detail 42", res.body)
    assert.matches("stack traceback", res.body)
  end)

  it("puts the traceback in the body when the handler was made with the listener's debug", function()
    local r = router.new()
    r:get("/boom", function() error("secret detail 42") end)
    local res = get(serve(r:handler { debug = true }), "/boom")
    assert.equal(500, res.status)
    assert.matches("secret detail 42", res.body)
    assert.matches("stack traceback", res.body)
  end)

  it("logs the error with its traceback", function()
    local script = h.tmpfile(h.server_script [[
local http = require "cohost.http"
local r = http.router()
local function deep() error("secret detail 42") end
r:get("/boom", function() deep() end)
listener = assert(http.listen("127.0.0.1:0", r))
]])
    local p = h.start(h.shell_quote(script))
    defer(p.stop)
    local res = get(p.port, "/boom")
    assert.equal(500, res.status)
    assert.is_nil(res.body:find("secret", 1, true))
    local log = h.slurp(p.err)
    assert.matches("secret detail 42", log)
    assert.matches("stack traceback", log)
    assert.matches("in %a* ?function 'deep'", log)
  end)

  it("lets a client that went away end the handler quietly, not as a handler error", function()
    local script = h.tmpfile(h.server_script [[
local http = require "cohost.http"
local r = http.router()
r:get("/stream", function(_, res)
  local piece = ("x"):rep(65536)
  for _ = 1, 100000 do res:write(piece) end   -- until the client leaves
end)
listener = assert(http.listen("127.0.0.1:0", r))
]])
    local p = h.start("--log-level info " .. h.shell_quote(script))
    defer(p.stop)
    local s = h.connect(p.port, 5000)
    assert(s:send("GET /stream HTTP/1.1\r\nHost: t\r\n\r\n"))
    assert(s:receive(100000))
    s:close()
    -- The server logs the end at info level; give it a moment.
    local deadline = cohost.monotonic() + 15
    while not h.slurp(p.err):find("closed", 1, true) and cohost.monotonic() < deadline do
      cohost.sleep(0.05)
    end
    local log = h.slurp(p.err)
    assert.matches("closed", log)
    assert.is_nil(log:find("[error]", 1, true), log)
  end)

  it("lets on_error answer, and falls back to the default when on_error raises", function()
    local r = router.new()
    r:get("/boom", function() error({ code = 418 }) end)
    r:get("/bad", function() error("plain") end)
    r:on_error(function(err, _, res)
      if type(err) == "table" then
        res.status = err.code
        return res:send("custom " .. err.code)
      end
      error("the error handler fails too")
    end)
    local port = serve(r)
    local res = get(port, "/boom")
    assert.equal(418, res.status)
    assert.equal("custom 418", res.body)
    res = get(port, "/bad")
    assert.equal(500, res.status)
    assert.equal("internal server error\n", res.body)
  end)

  it("closes the connection without ending the body when a streamed response fails", function()
    local r = router.new()
    r:get("/stream", function(_, res)
      res:write("first part\n")
      error("failed while streaming")
    end)
    local port = serve(r)
    local data = h.raw_request(port, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
    assert.matches("^HTTP/1.1 200", data)
    assert.matches("first part", data)
    -- A chunked body ends with a zero-size chunk; a cut one must not.
    assert.is_nil(data:find("\r\n0\r\n\r\n", 1, true))
  end)
end)

-- -- examples/webapp.lua ------------------------------------------------------

describe("examples/webapp.lua", function()
  local port, logfile

  -- The child, until it listens (15 s at most, for a sanitizer build on a
  -- loaded machine).
  before_each(function()
    port = h.free_port()
    logfile = h.tmpfile()
    local pid = h.spawn(("timeout 60 %s examples/webapp.lua %d"):format(h.COHOST, port), logfile)
    defer(function() h.stop_pid(pid) end)
    h.wait_port(port, logfile)
  end)

  local JSON = { ["Content-Type"] = "application/json" }

  local function call(method, target, body)
    local res = request(port, method, target, body and JSON, body)
    if res.body ~= "" and (res.headers["content-type"] or ""):find("json") then
      res.json = cjson.decode(res.body)
    end
    return res
  end

  it("creates, lists, reads, updates and deletes items", function()
    local res = call("GET", "/api/items")
    assert.equal(200, res.status)
    assert.equal("[]", res.body)

    res = call("POST", "/api/items", '{"name":"milk"}')
    assert.equal(201, res.status)
    assert.same({ id = 1, name = "milk", done = false }, res.json)
    assert.equal("/api/items/1", res.headers["location"])
    res = call("POST", "/api/items", '{"name":"bread","done":true}')
    assert.same({ id = 2, name = "bread", done = true }, res.json)

    res = call("GET", "/api/items")
    assert.same({ { id = 1, name = "milk", done = false }, { id = 2, name = "bread", done = true } }, res.json)
    assert.same({ id = 2, name = "bread", done = true }, call("GET", "/api/items/2").json)

    res = call("PATCH", "/api/items/1", '{"done":true}')
    assert.equal(200, res.status)
    assert.same({ id = 1, name = "milk", done = true }, res.json)
    res = call("PUT", "/api/items/1", '{"name":"oat milk"}')
    assert.same({ id = 1, name = "oat milk", done = false }, res.json)

    assert.equal(204, call("DELETE", "/api/items/1").status)
    res = call("GET", "/api/items/1")
    assert.equal(404, res.status)
    assert.same({ error = "no such item" }, res.json)
    assert.same({ { id = 2, name = "bread", done = true } }, call("GET", "/api/items").json)
  end)

  it("answers 400 with a JSON error for invalid input", function()
    local cases = {
      { "POST", "/api/items", '{"name":""}', "name must be a non-empty string" },
      { "POST", "/api/items", '{"name":5}', "name must be a non-empty string" },
      { "POST", "/api/items", '{"name":"x","done":"yes"}', "done must be true or false" },
      { "POST", "/api/items", '{"name":"x","colour":"red"}', "unknown field: colour" },
      { "POST", "/api/items", '"just a string"', "the body must be a JSON object" },
    }
    for _, c in ipairs(cases) do
      local res = call(c[1], c[2], c[3])
      assert.equal(400, res.status, c[3])
      assert.same({ error = c[4] }, res.json)
    end
    local res = call("POST", "/api/items", '{"name":')
    assert.equal(400, res.status)
    assert.matches("^bad json", res.json.error)
    res = request(port, "POST", "/api/items", { ["Content-Type"] = "text/plain" }, "x")
    assert.equal(415, res.status)
    assert.same({ error = "unsupported media type" }, cjson.decode(res.body))
    assert.equal("[]", call("GET", "/api/items").body)   -- nothing was created
  end)

  it("answers 405 and JSON 404s under /api", function()
    local res = call("POST", "/api/items/1", "{}")
    assert.equal(405, res.status)
    assert.equal("GET, HEAD, PUT, DELETE, PATCH, OPTIONS", res.headers["allow"])
    res = call("GET", "/api/nothing/here")
    assert.equal(404, res.status)
    assert.same({ error = "not found" }, res.json)
  end)

  it("serves its static page", function()
    local res = get(port, "/")
    assert.equal(200, res.status)
    assert.equal("text/html; charset=utf-8", res.headers["content-type"])
    assert.equal(h.slurp("examples/webapp/public/index.html"), res.body)
    assert.equal(404, get(port, "/missing.html").status)
  end)

  it("echoes WebSocket messages (python websockets)", function()
    local code, out, err = h.python([[
import asyncio, sys, websockets
async def main():
    async with websockets.connect(sys.argv[1]) as ws:
        await ws.send("hello")
        print(await ws.recv())
        await ws.send(bytes([0, 1, 255]))
        print((await ws.recv()).hex())
asyncio.run(main())
]], ("ws://127.0.0.1:%d/ws"):format(port))
    assert.equal(0, code, err)
    assert.equal("hello\n0001ff\n", out)
  end)
end)
