-- A script read from stdin (`cohost -`) is read once at start and run by
-- every worker thread and every worker process, with its arguments and
-- "stdin" as its chunk name in errors.
local h = require "spec.helper"
local q = h.shell_quote
h.cleanups(after_each)

-- Runs `cohost OPTS - ARGS` with source on stdin; exit code, stdout, stderr.
local function run(opts, source, args)
  local src = h.tmpfile(source)
  local out, err, rc = h.tmpfile(), h.tmpfile(), h.tmpfile()
  os.execute(("(timeout 20 %s %s - %s <%s >%s 2>%s; echo $? >%s)")
    :format(h.COHOST, opts, args or "", q(src), out, err, rc))
  return tonumber(h.slurp(rc)), h.slurp(out), h.slurp(err)
end

-- The sorted worker ids a run printed, one per line.
local function ids(out)
  local t = {}
  for id in out:gmatch("worker (%d+)\n") do t[#t + 1] = tonumber(id) end
  table.sort(t)
  return table.concat(t, ",")
end

local SCRIPT = [[
local cohost = require "cohost"
-- One write of the whole line: the pieces of io.write(a, b, c) from
-- several threads interleave on stdout.
io.write(("worker %d\n"):format(cohost.worker_id()))
io.stdout:flush()
]]

describe("a script on stdin", function()
  it("runs on every worker thread", function()
    local code, out = run("-w 3", SCRIPT)
    assert.equal(0, code)
    assert.equal("0,1,2", ids(out))
  end)

  it("runs on every thread of every worker process", function()
    local code, out = run("--processes 2 -w 2", SCRIPT)
    assert.equal(0, code)
    assert.equal("0,1,2,3", ids(out))
  end)

  it("gets its arguments, and its errors name stdin", function()
    local code, out = run("", "print(select('#', ...), ...)", "a 'b c'")
    assert.equal(0, code)
    assert.equal("2\ta\tb c\n", out)
    local code2, _, err = run("", "\nerror('boom')")
    assert.equal(1, code2)
    assert.truthy(err:find("stdin:2: boom", 1, true), err)
  end)
end)
