-- Operating cohost (docs/deploy.md, docs/cli.md, docs/processes.md): who
-- may share a port, signals an operator sends (SIGUSR1 for log rotation,
-- SIGTERM, SIGHUP), what the logs say, and the HTTP answers a deployment
-- depends on. Servers are build/cohost children (h.start) on fixed ports
-- where a second process must find the port taken, or in-process
-- (h.http_serve) where only the answer matters.
local cohost = require "cohost"
local http = require "cohost.http"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- A server on 127.0.0.1:arg[1] answering "NAME pid=P" (NAME = arg[2]),
-- with an access log at arg[3] if given; worker 0 prints "port pid".
local SERVER = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port, name, log = tonumber(arg[1]), arg[2], arg[3]
local pid = io.open("/proc/self/stat"):read("*n")
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  res:send(name .. " pid=" .. pid)
end, { access_log = log }))
]] .. h.REPORT_PORT

local function start(args, port, name, log)
  local p = h.start(("%s %s %d %s %s"):format(args, q(h.tmpfile(SERVER)), port, name, log and q(log) or ""))
  defer(p.stop)
  return p
end

-- Bodies of n requests to port, counted by their first word.
local function answers(port, n)
  local seen = {}
  for _ = 1, n do
    local status, _, body = h.get(port, "/")
    local who = status == 200 and body:match("^(%S+)") or ("failed " .. tostring(status))
    seen[who] = (seen[who] or 0) + 1
  end
  return seen
end

describe("a port", function()
  for _, args in ipairs { "", "--processes 2" } do
    it(("is not shared with another cohost (%s)"):format(args == "" and "one process" or args), function()
      local port = h.fixed_port()
      local a = start(args, port, "a")
      if args ~= "" then h.wait_workers(a, 2) end
      local code, _, err = h.run(("%s %s %d b"):format(args, q(h.tmpfile(SERVER)), port))
      assert.are_not.equal(0, code, err)
      assert.truthy(err:find("address already in use", 1, true), err)
      assert.same({ a = 20 }, answers(port, 20))
      a.signal("TERM")
      assert.equal(0, (a.wait(20)))
    end)
  end

  it("is shared by the generations of one cohost across a reload", function()
    local port = h.fixed_port()
    local a = start("--processes 1", port, "a")
    local before = h.wait_workers(a, 1)
    a.signal("HUP")
    -- The new generation binds the same port: a new pid answers.
    assert.is_true(h.wait_for(function()
      local status, _, body = h.get(port, "/")
      local pid = status == 200 and tonumber(body:match("pid=(%d+)"))
      return pid and not before[pid]
    end, 20), h.slurp(a.err))
    assert.falsy(h.slurp(a.err):find("address already in use", 1, true))
  end)
end)

describe("signals", function()
  for _, args in ipairs { "", "--processes 2" } do
    it(("SIGUSR1 reopens the error and access logs and kills nothing (%s)"):format(args == "" and "one process" or args), function()
      local dir = h.tmpdir()
      local access = dir .. "/access.log"
      local p = start(args, h.fixed_port(), "a", access)
      if args ~= "" then h.wait_workers(p, 2) end
      assert.equal(200, (h.get(p.port, "/before")))
      assert.is_true(h.wait_for(function() return (h.try_slurp(access) or ""):find("/before", 1, true) end))
      -- What logrotate does: rename, then signal.
      assert(os.rename(access, access .. ".1"))
      assert(os.rename(p.err, p.err .. ".1"))
      defer(function() os.remove(p.err .. ".1") end)
      p.signal("USR1")
      local reopened = args == "" and 1 or 3   -- each worker process and the master
      assert.is_true(h.wait_for(function()
        local _, n = (h.try_slurp(p.err) or ""):gsub("log files reopened", "")
        return n >= reopened
      end), h.try_slurp(p.err .. ".1"))
      assert.equal(200, (h.get(p.port, "/after")))
      assert.is_true(h.wait_for(function() return (h.try_slurp(access) or ""):find("/after", 1, true) end))
      assert.falsy(h.slurp(access .. ".1"):find("/after", 1, true))
      assert.is_nil(p.exited())
      p.signal("TERM")
      assert.equal(0, (p.wait(20)))
    end)
  end

  it("an idle server ends on SIGTERM without waiting for --shutdown-timeout", function()
    local p = start("--shutdown-timeout 60", h.fixed_port(), "a")
    p.signal("TERM")
    assert.equal(0, (p.wait(20)))
  end)

  it("a failed reload logs its new workers as new, not old", function()
    local flag = h.tmpfile("ok")
    local script = h.tmpfile(([[
if io.open(%q):read("*a") ~= "ok" then error("broken script") end
]]):format(flag) .. SERVER)
    local p = h.start(("--processes 2 %s %d a"):format(q(script), h.fixed_port()))
    defer(p.stop)
    h.wait_workers(p, 2)
    h.write_file(flag, "broken")
    p.signal("HUP")
    assert.is_true(h.wait_for(function()
      local log = h.slurp(p.err)
      local _, ended = log:gsub("failed reload", "")
      return log:find("reload failed", 1, true) and ended >= 1
    end, 20), h.slurp(p.err))
    local log = h.slurp(p.err)
    assert.falsy(log:find("old worker process %d+ %(pid %d+%) exited with code 1"), log)
    assert.truthy(log:find("new worker process %d+ %(pid %d+%) of the failed reload"), log)
    assert.same({ a = 5 }, answers(p.port, 5))
  end)
end)

describe("the command line", function()
  it("rejects a worker or process count with trailing junk", function()
    for _, opt in ipairs { "--workers 2x", "--processes 3q", "-w ''", "--workers -1" } do
      local code, _, err = h.run(opt .. " -e ''")
      assert.equal(2, code, opt .. ": " .. err)
      assert.truthy(err:find("bad %a+ count"), err)
    end
  end)

  it("--log-format json writes one object a line with pid, generation, fields, and file and line apart", function()
    local code, _, err = h.run([[--log-format json -e 'require("cohost").log("warn", "hi \"there\" /a/b", { user = "bob", n = 3 })']])
    assert.equal(0, code, err)
    local line = assert(err:match("[^\n]+"), err)
    local o = cjson.decode(line)
    assert.same({ user = "bob", n = 3 }, o.fields)
    assert.equal("warn", o.level)
    assert.equal(0, o.worker)
    assert.equal(0, o.generation)
    assert.is_number(o.pid)
    assert.truthy(o.time:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"), o.time)
    assert.equal('hi "there" /a/b', o.message)
    assert.equal("(command line)", o.file)
    assert.equal(1, o.line)
    assert.truthy(line:find('"message":"hi \\"there\\" /a/b"', 1, true), line)   -- "/" as it is
  end)

  it("--log-format json puts a handler error's file and line in fields, and writes the access log as JSON", function()
    local access, plain = h.tmpfile(""), h.tmpfile("")
    local script = h.tmpfile(h.server_script([[
local http = require "cohost.http"
local r = http.router()
r:get("/notes/:id", function(req, res) res:send("note " .. req.params.id) end)
r:get("/boom", function() error("boom") end)
listener = assert(http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/raw" then error("raw boom") end
  return r(req, res)
end, { access_log = arg[1] }))
assert(http.listen("127.0.0.1:0", r, { access_log = arg[2], access_log_format = "text" }))
]]))
    local p = h.start(("--log-format json %s %s %s"):format(q(script), q(access), q(plain)))
    defer(p.stop)
    assert.equal(200, h.request(p.port, "GET", "/notes/7?x=a/b", { ["User-Agent"] = "spec/1", Referer = "http://r/" }).status)
    assert.equal(404, h.request(p.port, "GET", "/nothing").status)
    assert.equal(500, h.request(p.port, "GET", "/raw").status)
    assert.is_true(h.wait_for(function() return select(2, h.slurp(access):gsub("\n", "")) == 3 end))
    local lines = {}
    for l in h.slurp(access):gmatch("[^\n]+") do lines[#lines + 1] = l end
    local a = cjson.decode(lines[1])
    assert.truthy(a.time:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"), a.time)
    assert.is_number(a.duration)
    a.time, a.duration = nil, nil
    assert.same({ remote_addr = "127.0.0.1", method = "GET", target = "/notes/7?x=a/b", protocol = "HTTP/1.1",
                  status = 200, bytes = 6, route = "/notes/:id", referer = "http://r/", user_agent = "spec/1" }, a)
    assert.truthy(lines[1]:find('"target":"/notes/7?x=a/b"', 1, true), lines[1])   -- "/" as it is
    local miss = cjson.decode(lines[2])
    assert.equal(404, miss.status)
    assert.is_nil(miss.route)
    assert.equal(500, cjson.decode(lines[3]).status)
    -- The handler error: its place as fields, the message without it.
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("raw boom", 1, true) end))
    local e
    for l in h.slurp(p.err):gmatch("[^\n]+") do
      local o = cjson.decode(l)
      if o.message:find("raw boom", 1, true) then e = o end
    end
    assert.equal("error", e.level)
    assert.equal(script, e.file)
    assert.equal(7, e.line)
    assert.truthy(e.message:find("^handler error: raw boom\nstack traceback:\n"), e.message)
    -- access_log_format = "text" on a listener keeps the combined format.
    -- Its port: the second listener's, from the process's sockets.
    local f = io.popen(("ss -Hltnp 2>/dev/null | grep 'pid=%d,'"):format(p.pid))
    local other
    for l in f:lines() do
      local port = tonumber(l:match("127%.0%.0%.1:(%d+)"))
      if port and port ~= p.port then other = port end
    end
    f:close()
    assert.equal(200, h.request(assert(other), "GET", "/notes/8").status)
    assert.is_true(h.wait_for(function() return h.slurp(plain) ~= "" end))
    assert.truthy(h.slurp(plain):match('^127%.0%.0%.1 %- %- %[[^%]]+%] "GET /notes/8 HTTP/1%.1" 200 6 "%-" "%-"\n$'),
                  h.slurp(plain))
  end)

  it("writes a listener's access log as JSON with access_log_format = \"json\", over HTTP/2 too", function()
    local log = h.tmpfile("")
    local r = require("cohost.http.router").new()
    r:get("/spec-json/:id", function(_, res) res:send("ok") end)
    local port = h.http_serve(r, { access_log = log, access_log_format = "json" })
    local code, _, err = h.sh(("curl -sS --http2-prior-knowledge -o /dev/null http://127.0.0.1:%d/spec-json/1"):format(port))
    assert.equal(0, code, err)
    assert.is_true(h.wait_for(function() return h.slurp(log) ~= "" end))
    local a = cjson.decode(h.slurp(log))
    assert.same({ "GET", "/spec-json/1", "HTTP/2.0", 200, 2, "/spec-json/:id" },
                { a.method, a.target, a.protocol, a.status, a.bytes, a.route })
    assert.has_error(function() http.listen("127.0.0.1:0", r, { access_log_format = "xml" }) end,
                     'bad option access_log_format ("text" or "json" expected)')
  end)

  it("puts a log call's fields at the end of a text line", function()
    local code, _, err = h.run([[-e 'require("cohost").log("warn", "hi", { user = "bob" })']])
    assert.equal(0, code, err)
    assert.truthy(err:find(": %(command line%):1: hi user=bob\n$"), err)
  end)

  it("names the master in its log lines, with pid and generation", function()
    local p = start("--processes 1 --log-level info", h.fixed_port(), "a")
    p.signal("TERM")
    assert.equal(0, (p.wait(20)))
    local log = h.slurp(p.err)
    assert.truthy(log:find("%[info%] pid=" .. p.pid .. " gen=0 master: pid " .. p.pid), log)
    assert.falsy(log:find("w%-1"), log)
  end)
end)

describe("http", function()
  it("gives http.listen's listener its methods without require 'cohost'", function()
    local code, out, err = h.run_script([[
local http = require "cohost.http"
local l = assert(http.listen("127.0.0.1:0", function() end))
local ip, port = l:addr()
print(ip, port > 0)
l:close()
]])
    assert.equal(0, code, err)
    -- (cohost.http now loads cohost itself, to say "run inside cohost"
    -- when it is not: the methods must not depend on that either.)
    assert.equal("127.0.0.1\ttrue\n", out)
  end)

  it("lets a handler's Date header replace the default one", function()
    local port = h.http_serve(function(_, res)
      res:header("Date", "Tue, 01 Dec 2026 00:00:00 GMT")
      res:send("x")
    end)
    local s = h.dial(port, 3000)
    assert(s:send("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    local data = assert(s:receive("*a"))
    local _, dates = data:lower():gsub("\r\ndate:", "")
    assert.equal(1, dates, data)
    assert.truthy(data:find("\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\n", 1, true), data)
  end)

  it("lets on_error answer a Content-Length over max_body_size, in JSON", function()
    local ran, seen = false, nil
    local port = h.http_serve(function(_, res) ran = true; res:send("ran") end, {
      max_body_size = 100,
      on_error = function(req, res, status, err)
        seen = { status, err, req.method, req.path, req:body() }
        res.status = status
        res:header("Content-Type", "application/json")
        res:send(cjson.encode { error = err })
      end,
    })
    local s = h.dial(port, 3000)
    assert(s:send("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n"))
    local r = assert(h.receive_response(s))
    assert.equal(413, r.status)
    assert.equal("application/json", r.headers["content-type"])
    assert.same({ error = "too large" }, cjson.decode(r.body))
    assert.same({ 413, "too large", "POST", "/up", nil }, { seen[1], seen[2], seen[3], seen[4], seen[5] })
    assert.is_false(ran)
    -- At the limit, the handler.
    assert.equal(200, h.request(port, "POST", "/", {}, ("y"):rep(100)).status)
    assert.is_true(ran)
  end)

  it("logs a handler error raised through the router at the handler's line", function()
    local script = h.tmpfile([[
local cohost = require "cohost"
local http = require "cohost.http"
local r = http.router()
r:get("/boom", function(req, res)
  error("boom")
end)
listener = assert(http.listen("127.0.0.1:0", r))
]])
    h.write_file(script, h.server_script(h.slurp(script):gsub("^local cohost = require \"cohost\"\n", "")))
    local p = h.start(q(script))
    defer(p.stop)
    assert.equal(500, (h.get(p.port, "/boom")))
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("boom", 1, true) end))
    local log = h.slurp(p.err)
    local where = assert(log:match("c%d+: (%S+): http: GET /boom"), log)
    assert.equal(script .. ":5", where)
  end)
end)

describe("/healthz on the status address", function()
  it("answers 200 while serving and 503 from SIGTERM on, before the listeners close", function()
    local status = h.fixed_port()
    local p = start(("--status-addr 127.0.0.1:%d --drain-delay 4"):format(status), h.fixed_port(), "a")
    local function healthz()
      return h.get_to_close(status, "/healthz")
    end
    assert.is_true(h.wait_for(function() return healthz() == 200 end), h.slurp(p.err))
    local _, body = healthz()
    assert.equal("ok\n", body)
    p.signal("TERM")
    assert.is_true(h.wait_for(function() return healthz() == 503 end), h.slurp(p.err))
    -- Draining: the app still answers; /healthz tells the balancer to stop.
    assert.same({ a = 3 }, answers(p.port, 3))
    _, body = healthz()
    assert.equal("draining\n", body)
    assert.equal(0, (p.wait(30)))
  end)
end)
