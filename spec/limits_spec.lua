-- The per-worker limits (docs/limits.md): --lua-memory-limit caps a
-- worker's Lua heap, --cpu-watchdog stops a coroutine that never yields.
-- Every test starts build/cohost as a child process (h.start, bounded by
-- timeout(1)) with an HTTP server on 127.0.0.1 port 0, and talks to it
-- with plain cosockets.
local cohost = require "cohost"
-- ASan builds have no copy-stack mode (docs/sanitizers.md).
local STACK_MODES = os.getenv("ASAN_OPTIONS") and { "separate" } or { "separate", "copy" }

local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- The server every test runs: one worker, the handlers below, debug 500s
-- (the error in the body). jit_off turns the JIT off before anything runs.
local SERVER = [[
local http = require "cohost.http"
local cohost = require "cohost"
local ffi = require "ffi"
ffi.cdef "int poll(void *fds, unsigned long n, int timeout)"
if arg[1] == "jit_off" then jit.off() end
local function inc(n) return n + 1 end
-- A loop the JIT compiles on its first calls. Entered again, the trace
-- runs from the interpreter right after stamp's C call, with no C call
-- in between (t[1] takes the fast path): LuaJIT's frame pointer
-- (lua_State.base) still names stamp's frame, whose function slot holds
-- the loop's index by then. A refusal from the trace crashed the process.
local function stamp() return os.time() end
local function fill(n)
  local t = { 0 }
  stamp()
  for i = 1, n do t[i] = i end
  return t
end
local handlers = {
  ["/jit"] = function() for _ = 1, 30 do fill(2000) end fill(1e9) end,
  ["/worker"] = function(req, res) res:send(tostring(cohost.worker_id())) end,
  ["/table"] = function() local t = {} for i = 1, 1e9 do t[i] = i end end,
  ["/string"] = function() local s = "x" while true do s = s .. s end end,
  ["/caught"] = function(req, res)
    local ok, err = pcall(function() local t = {} for i = 1, 1e9 do t[i] = {} end end)
    res:send(tostring(ok) .. " " .. tostring(err))
  end,
  ["/rep"] = function(req, res) res:send(#string.rep("x", 80 * 1024 * 1024)) end,
  ["/slow"] = function(req, res)
    cohost.sleep(0.5)
    res:send("slow " .. #string.rep("y", 1000))
  end,
  -- Big strings until the limit refuses one: a few hundred allocations
  -- at most (the issue's 1e6 of 1 MiB each does the same, more slowly).
  ["/big"] = function()
    local t = {}
    for i = 1, 1e4 do t[i] = string.rep("x", 8 * 1024 * 1024 - 64) .. i end
  end,
  ["/count"] = function(req, res) res:send(("%d"):format(collectgarbage("count") * 1024)) end,
  -- 1 MiB of garbage per request: a heap left near the limit fills again
  -- within a few dozen of these.
  ["/work"] = function(req, res) res:send(#(string.rep("w", 1024 * 1024) .. "!")) end,
  ["/fail"] = function() error("the same failure every time") end,
  ["/spin"] = function() while true do end end,
  ["/call"] = function() local n = 0 while true do n = inc(n) end end,
  ["/busy"] = function(req, res)
    local t0 = os.clock()
    while os.clock() - t0 < 2 do end
    res:send("busy done")
  end,
  ["/block"] = function(req, res)
    ffi.C.poll(nil, 0, 2500)   -- an FFI call never parks: the thread sleeps
    res:send("block done")
  end,
}
listener = http.listen("127.0.0.1:0", function(req, res)
  local f = handlers[req.path]
  if f then return f(req, res) end
  res:send("ok")
end, { debug = true })
]]

-- The line of the server script (h.server_script adds one line on top)
-- where text first appears in SERVER.
local function line_of(text)
  local before = SERVER:sub(1, SERVER:find(text, 1, true))
  local _, n = before:gsub("\n", "")
  return n + 2
end

-- Starts cohost with opts (a string of options) on SERVER; stopped after
-- the test.
local function start(opts, script_arg)
  local script = h.tmpfile(h.server_script(SERVER))
  local p = h.start(("-w 1 %s %s %s"):format(opts, q(script), script_arg or ""), 40)
  defer(p.stop)
  return p
end

-- One GET on a connection of its own: status and body, or nil and the
-- error when the connection fails or closes without an answer. 15 s: a
-- handler under the limits runs a while before it fails. What came before
-- a reset counts (opts.partial).
local function get(port, path)
  return h.get_to_close(port, path, { timeout = 15000, partial = true })
end

-- Starts get(port, path) on a thread of its own; returns the thread.
local function get_async(port, path)
  return cohost.spawn(function() return { get(port, path) } end)
end

local function result(thread)
  local ok, r = cohost.wait(thread)
  assert(ok, r)
  return r[1], r[2]
end

local function log(p)
  return h.slurp(p.err)
end

describe("--lua-memory-limit", function()
  it("fails a handler that builds a huge table with \"not enough memory\" and keeps the worker serving", function()
    local p = start("--lua-memory-limit 64m")
    local slow = get_async(p.port, "/slow")   -- parked while /table fails
    cohost.sleep(0.1)
    local status, body = get(p.port, "/table")
    assert.equal(500, status)
    assert.matches("not enough memory", body)
    assert.same({ 200, "slow 1000" }, { result(slow) })
    -- Its garbage goes with the next collections: new requests are served.
    for _ = 1, 3 do assert.same({ 200, "ok" }, { get(p.port, "/") }) end
    assert.same({ 200, "slow 1000" }, { get(p.port, "/slow") })
    assert.matches("handler: Lua memory limit reached %(64 MiB, %-%-lua%-memory%-limit%)", log(p))
    assert.is_nil(p.exited())
  end)

  it("fails a handler that doubles a string until it is too big, and the next one works", function()
    local p = start("--lua-memory-limit 64m")
    local status, body = get(p.port, "/string")
    assert.equal(500, status)
    assert.matches("not enough memory", body)
    assert.same({ 200, "ok" }, { get(p.port, "/") })
  end)

  it("is an ordinary error to pcall, and the handler goes on with the reserve above the limit", function()
    local p = start("--lua-memory-limit 64m")
    assert.same({ 200, "false not enough memory" }, { get(p.port, "/caught") })
    assert.same({ 200, "ok" }, { get(p.port, "/") })
  end)

  -- The frame LuaJIT raises the error on was stale on a trace, and lay
  -- past the stack's end at a function entry that grows it: the process
  -- crashed (segfault), with every other connection of every worker.
  for _, mode in ipairs(STACK_MODES) do
    it("fails a handler whose JIT-compiled loop is refused with a 500, and both workers serve on (" .. mode .. ")", function()
      local p = start("-w 2 --lua-memory-limit 64m --stack-mode " .. mode)
      local slow = get_async(p.port, "/slow")   -- parked while /jit fails
      for _ = 1, 3 do
        local status, body = get(p.port, "/jit")
        assert.equal(500, status)
        assert.matches("not enough memory", body)
      end
      assert.same({ 200, "slow 1000" }, { result(slow) })
      local seen = {}
      assert.is_true(h.wait_for(function()
        local status, id = get(p.port, "/worker")
        assert.equal(200, status)
        seen[id] = true
        return seen["0"] and seen["1"]
      end, 20, 0))
      assert.is_nil(p.exited())
    end)

    it("ends a refusal in JIT-compiled code as a memory error, for tables, strings and buffers (" .. mode .. ")", function()
      local code, out, err = h.run_script([[
local function stamp() return os.time() end
local shapes = {
  array = function(n) local t = { 0 } stamp() for i = 1, n do t[i] = i end return t end,
  hash = function(n) local t = {} stamp() for i = 1, n do t["k" .. i] = i end return t end,
  concat = function(n) local s = "" stamp() for i = 1, n do s = s .. "0123456789abcdef" end return s end,
  buffer = function(n)
    local b = require("string.buffer").new() stamp()
    for i = 1, n do b:put("0123456789abcdef", i) end
    return b
  end,
}
for _, name in ipairs { "array", "hash", "concat", "buffer" } do
  local f = shapes[name]
  for _ = 1, 30 do f(2000) end   -- compiles the loop and its side traces
  local ok, e = pcall(f, 1e9)
  io.write(name, " ", tostring(ok), " ", tostring(e), "\n")
  collectgarbage()
end
]], "--lua-memory-limit 8m --stack-mode " .. mode)
      assert.equal(0, code, err)
      assert.equal("array false not enough memory\nhash false not enough memory\n" ..
                   "concat false not enough memory\nbuffer false not enough memory\n", out)
    end)

    -- Its frame is not on the stack yet when the growth is refused: the
    -- error message went past the stack's end, into the heap, and a later
    -- collection crashed.
    it("ends a refused Lua stack growth at a function's entry as a memory error (" .. mode .. ")", function()
      local code, out, err = h.run_script([[
local function deep(n)
  local a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20,
        b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16, b17, b18, b19, b20,
        c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20,
        d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11, d12, d13, d14, d15, d16, d17, d18, d19, d20,
        e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15, e16, e17, e18, e19, e20
  if n > 0 then return (deep(n - 1)) end
  return 0
end
local function fill_then_recurse()
  local hold
  local function grab() while true do hold = { hold } end end
  pcall(grab)   -- the first refusal opens the reserve
  pcall(grab)   -- the second comes at its end: the stack cannot grow now
  local ok, e = pcall(deep, 1e5)
  hold = nil
  return ok, e
end
local ok, e = fill_then_recurse()
collectgarbage()
local t = {}
for i = 1, 1e4 do t[i] = { i } end
collectgarbage()
print(ok, e, #t)
]], "--lua-memory-limit 8m --stack-mode " .. mode)
      assert.equal(0, code, err)
      assert.equal("false\tnot enough memory\t10000\n", out)
    end)
  end

  it("refuses an 80 MiB string under 64m and allows it with 0 (no limit)", function()
    local capped = start("--lua-memory-limit 64m")
    local status, body = get(capped.port, "/rep")
    assert.equal(500, status)
    assert.matches("not enough memory", body)
    local free = start("--lua-memory-limit 0")
    assert.same({ 200, tostring(80 * 1024 * 1024) }, { get(free.port, "/rep") })
    assert.is_nil(log(free):find("memory limit", 1, true))
  end)

  -- Over the limit, a task that starts sets up its pcall, and a spawn
  -- allocates the Lua thread on the worker's main state: neither may be
  -- refused (an error there has no pcall to catch it; the first ended the
  -- process with "PANIC: unprotected error").
  it("still spawns, runs and waits for tasks while the heap is over the limit", function()
    local code, out, err = h.run_script([[
local cohost = require "cohost"
local tasks, got = {}, {}
for i = 1, 20 do tasks[i] = cohost.spawn(function() return i end) got[i] = false end
got[21], got[22] = false, false
local function late() return 21 end
-- The first refusal opens the reserve; the second fill uses it up too.
local keep = {}
for _ = 1, 2 do pcall(function() for i = 1, 1e7 do keep[#keep + 1] = { i } end end) end
-- Over limit and reserve now: the tasks start (their pcalls are set up
-- here), and one more is spawned. Nothing below allocates in this task.
for i = 1, 20 do got[i] = select(2, cohost.wait(tasks[i])) end
local spawned, t = pcall(cohost.spawn, late)
got[21] = spawned or t
if spawned then got[22] = select(2, cohost.wait(t)) end
keep = nil
collectgarbage()
for i = 1, 22 do io.write(tostring(got[i]), " ") end
print("done")
]], "--lua-memory-limit 8m")
    assert.equal(0, code, err)
    local want = {}
    for i = 1, 20 do want[i] = tostring(i) end
    -- The 21st spawn, asked for over the limit, fails in the asking task
    -- with the memory error itself (it was "function: 0x..." when the
    -- refusal hit the worker's main state), or succeeds.
    local head = table.concat(want, " ") .. " "
    assert.is_true(out == head .. "not enough memory false done\n" or out == head .. "true 21 done\n", out)
    assert.is_nil(err:find("PANIC", 1, true), err)
  end)

  -- A heap measured near the limit used to put LuaJIT's next collection
  -- at twice that, above the limit: the failed handler's garbage stayed,
  -- and every later request that allocated was refused (with 512m and the
  -- default 1g: "/status" and "/" answered 500 until a restart).
  for _, limit in ipairs { "64m", "512m", "default" } do
    it("goes back to its baseline heap after a refusal, and later requests that allocate succeed (" .. limit .. ")", function()
      local p = start(limit == "default" and "" or "--lua-memory-limit " .. limit)
      local s0, before = get(p.port, "/count")
      assert.equal(200, s0)
      local status, body = get(p.port, "/big")
      assert.equal(500, status)
      assert.matches("not enough memory", body)
      local s1, after = get(p.port, "/count")
      assert.equal(200, s1)
      assert.is_true(tonumber(after) < tonumber(before) + 16 * 1024 * 1024,
                     ("heap %s bytes after the refusal, %s before"):format(after, before))
      for i = 1, 150 do
        assert.same({ 200, tostring(1024 * 1024 + 1) }, { get(p.port, "/work") }, "request " .. i)
      end
      assert.matches("Lua memory limit reached %(" .. (limit == "default" and "1024" or limit:sub(1, -2)) .. " MiB", log(p))
      assert.is_nil(p.exited())
    end)
  end

  it("logs a handler failing the same way on every request once, then with a count", function()
    local p = start("")
    for _ = 1, 40 do assert.equal(500, (get(p.port, "/fail"))) end
    -- The held-back lines are written with the next identical one a
    -- second or more later: keep failing until it comes.
    assert.is_true(h.wait_for(function()
      assert.equal(500, (get(p.port, "/fail")))
      return log(p):find("%(repeated %d+ times%)")
    end, 10, 0.2))
    local text = log(p)
    local _, n = text:gsub("the same failure every time", "")
    assert.is_true(n < 10, text)
    -- Each written message stands for itself, or for N with a count.
    local total = n
    for count in text:gmatch("%(repeated (%d+) times%)") do total = total + tonumber(count) - 1 end
    assert.is_true(total >= 40, text)
  end)

  it("rejects a value that is no size, or under 4m, with status 2", function()
    for _, v in ipairs { "lots", "-1m", "64x", "1m", "0.5" } do
      local code, _, err = h.run("--lua-memory-limit " .. q(v) .. " -e ''")
      assert.equal(2, code, v)
      assert.matches("bad value for %-%-lua%-memory%-limit", err)
    end
    for _, v in ipairs { "64m", "1g", "1.5G", "8388608", "0" } do
      assert.equal(0, (h.run("--lua-memory-limit " .. v .. " -e ''")), v)
    end
  end)
end)

describe("--cpu-watchdog", function()
  -- The error the hook raises: logged by the task with its traceback, and
  -- in the debug 500's body.
  local function assert_stopped(p, path)
    local slow = get_async(p.port, "/slow")   -- waits behind the spinner
    cohost.sleep(0.1)
    local status, body = get(p.port, path)
    assert.equal(500, status)
    assert.matches("cpu watchdog: ran 1s without yielding", body)
    assert.same({ 200, "slow 1000" }, { result(slow) })
    assert.same({ 200, "ok" }, { get(p.port, "/") })
    local err = log(p)
    assert.matches("worker 0: coroutine %d+ has run 1s without yielding", err)
    -- The hook fires at whichever instruction comes next: in the handler's
    -- line or in a function it calls, which the traceback shows called
    -- from that line.
    assert.matches("handler error: cpu watchdog: ran 1s without yielding\nstack traceback:\n.-:"
                   .. line_of('["' .. path .. '"]') .. "[:>]", err)
    assert.is_nil(p.exited())
  end

  it("stops an interpreted endless loop with an error, and the worker serves on", function()
    assert_stopped(start("--cpu-watchdog 1", "jit_off"), "/spin")
  end)

  it("stops an interpreted endless loop of function calls the same way", function()
    assert_stopped(start("--cpu-watchdog 1", "jit_off"), "/call")
  end)

  it("ends the process with status 87 when the loop is JIT-compiled (hooks are not checked there)", function()
    local p = start("--cpu-watchdog 1")
    local s = h.connect(p.port, 15000)
    assert(s:send("GET /spin HTTP/1.1\r\nHost: x\r\n\r\n"))
    local code, took = p.wait(15)
    assert.equal(87, code)
    assert.is_true(took < 15)
    local data, _, partial = s:receive("*a")
    assert.is_nil((data or partial or ""):match("^HTTP"), "no answer from a killed process")
    s:close()
    local log_text = log(p)
    assert.matches("worker 0: coroutine %d+ has run 1s without yielding", log_text)
    assert.matches("worker 0: coroutine %d+ still runs 1s later without yielding %(JIT%-compiled code does not check hooks%); exiting with status 87", log_text)
  end)

  it("leaves a worker blocked in a call that cannot park alone, and says so", function()
    local p = start("--cpu-watchdog 1")
    assert.same({ 200, "block done" }, { get(p.port, "/block") })
    assert.matches("worker 0: coroutine %d+ has held the thread 1s without yielding, blocked in a call that cannot park", log(p))
    assert.is_nil(log(p):find("cpu watchdog: ran", 1, true))
  end)

  it("is off with 0: a handler may run 2 s without yielding", function()
    local p = start("--cpu-watchdog 0", "jit_off")
    assert.same({ 200, "busy done" }, { get(p.port, "/busy") })
    assert.equal("", log(p))
  end)

  it("rejects a value that is not a number of seconds with status 2", function()
    for _, v in ipairs { "soon", "-1", "10s", "100000" } do
      local code, _, err = h.run("--cpu-watchdog " .. q(v) .. " -e ''")
      assert.equal(2, code, v)
      assert.matches("bad value for %-%-cpu%-watchdog", err)
    end
    for _, v in ipairs { "0", "0.5", "10", "3600" } do
      assert.equal(0, (h.run("--cpu-watchdog " .. v .. " -e ''")), v)
    end
  end)
end)
