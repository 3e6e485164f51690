-- scripts/bench/techempower/ (docs/benchmarks.md#techempower): the bench's
-- verifier (verify.py) passes cohost's app.lua on a hello_world database
-- made by the bench's own db.sh, and fails a server that breaks each of
-- TechEmpower's rules it checks. No peer here: nginx + pgmoon is the
-- bench's (make bench, section techempower).
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local TFB = h.root .. "scripts/bench/techempower/"

-- Serves script (a file; args after it) with one worker on a free port
-- until the test ends; returns the port once /plaintext answers.
local function serve(script, pgport)
  local port = h.free_port()
  local pid, log = h.spawn(("%s -w 1 %s %d %d 4"):format(h.COHOST, h.shell_quote(script), port, pgport))
  defer(function()
    h.stop_pid(pid)
    os.remove(log)
  end)
  h.wait_port(port, log)
  return port
end

local function verify(port, pgport, flags)
  return h.sh(("%s %sverify.py http://127.0.0.1:%d %d %s"):format(h.PYTHON, TFB, port, pgport, flags or ""), 60)
end

describe("TechEmpower's tests", function()
  local dir, pgport

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    pgport = h.free_port()
    local code, _, err = h.sh(("bash %sdb.sh start %s %d 30"):format(TFB, dir, pgport), 60)
    assert(code == 0, "db.sh start: " .. err)
  end)

  teardown(function()
    h.sh(("bash %sdb.sh stop %s"):format(TFB, dir))
    os.execute("rm -rf " .. h.shell_quote(dir))
  end)

  it("cohost's app.lua passes the verifier, db:pipeline routes included", function()
    local port = serve(TFB .. "app.lua", pgport)
    local code, out, err = verify(port, pgport, "--pipeline")
    assert(code == 0, out .. err)
    assert.matches("all passed\n$", out)
    -- Every test was asked for: 4 answers' worth of checks at least each.
    for _, path in ipairs { "plaintext", "json", "db", "/queries?queries=501", "/pipeline/queries?queries=20",
                            "fortunes: the 13 rows, sorted by message", "fortunes: HTML-escaped",
                            "/updates?queries=20: new numbers persisted",
                            "/pipeline/updates?queries=501: new numbers persisted" } do
      assert.truthy(out:find("ok   " .. path, 1, true), path .. " not checked: " .. out)
    end
  end)

  it("the verifier fails a server that breaks the rules, naming each", function()
    -- Right headers, wrong answers: a message misspelt, rows made up, no
    -- clamping, fortunes in table order and not escaped, updates answered
    -- but never written.
    local script = h.tmpfile([[
local http = require "cohost.http"
local pg = require "cohost.postgres"
local db = pg.pool { host = "127.0.0.1", port = tonumber(arg[2]), database = "hello_world",
                     user = "benchmarkdbuser", password = "benchmarkdbpass", size = 2 }
local function rows(req)
  local list = http.array()
  for i = 1, tonumber(req.query.queries) or 1 do list[i] = { id = i, randomNumber = 10001 - i } end
  return list
end
local r = http.router()
r:get("/plaintext", function(_, res) res:header("Content-Type", "text/plain"); res:send("Hello, World!") end)
r:get("/json", function(_, res) res:json({ message = "Hello, world!" }) end)
r:get("/db", function(_, res) res:json({ id = 1, randomNumber = 0 }) end)
r:get("/queries", function(req, res) res:json(rows(req)) end)
r:get("/updates", function(req, res) res:json(rows(req)) end)
r:get("/fortunes", function(_, res)
  local out = { "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>" }
  for _, f in ipairs(assert(db:query("SELECT id, message FROM fortune ORDER BY id"))) do
    out[#out + 1] = ("<tr><td>%d</td><td>%s</td></tr>"):format(f.id, f.message)
  end
  out[#out + 1] = "</table></body></html>"
  res:header("Content-Type", "text/html; charset=utf-8")
  res:send(table.concat(out))
end)
assert(http.listen("127.0.0.1:" .. arg[1], r))
]])
    local port = serve(script, pgport)
    local code, out = verify(port, pgport)
    assert.equal(1, code)
    assert.truthy(out:find("ok   plaintext: body", 1, true), out)
    for _, fail in ipairs { "json: {\"message\":\"Hello, World!\"}", "db: one row {id, randomNumber}",
                            "/queries?queries=0: an array of 1 rows", "/queries?queries=501: an array of 500 rows",
                            "/queries?queries=20: rows as stored", "fortunes: the 13 rows, sorted by message",
                            "fortunes: HTML-escaped", "/updates?queries=20: new numbers persisted" } do
      assert.truthy(out:find("FAIL " .. fail, 1, true), fail .. " not failed: " .. out)
    end
  end)
end)
