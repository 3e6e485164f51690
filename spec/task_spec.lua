-- Light threads: cohost.spawn, cohost.wait and cohost.kill. A thread runs
-- on its own native coroutine; its error value reaches wait unchanged;
-- kill raises "cancelled" from the call it is blocked in, again from
-- every later blocking call, so it unwinds through the thread's own
-- pcalls to its entry.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- Runs f(handle) in pcall on the thread handle names, from inside that
-- thread; returns what cohost.wait gives: true, then pcall's results.
local function on_itself(f)
  local handle
  local t = cohost.spawn(function()
    cohost.sleep(0.01)
    return pcall(f, handle)
  end)
  handle = t
  return cohost.wait(t)
end

describe("cohost.spawn", function()
  it("runs fn(...) on its own coroutine while the caller goes on", function()
    local log = {}
    local t = cohost.spawn(function(a, b)
      log[#log + 1] = "child starts " .. a .. b
      cohost.sleep(0.05)
      log[#log + 1] = "child ends"
    end, "x", "y")
    cohost.sleep(0.01)
    log[#log + 1] = "parent"
    cohost.wait(t)
    assert.same({ "child starts xy", "parent", "child ends" }, log)
  end)

  it("runs 1000 sleeping threads side by side", function()
    local threads = {}
    local t0 = cohost.monotonic()
    for i = 1, 1000 do
      threads[i] = cohost.spawn(function() cohost.sleep(0.2); return i end)
    end
    for i = 1, 1000 do
      assert.same({ true, i }, { cohost.wait(threads[i]) })
    end
    local took = cohost.monotonic() - t0
    assert.is_true(took >= 0.19 and took < 2, ("took %.2f s"):format(took))
  end)

  it("passes nil arguments through", function()
    local t = cohost.spawn(function(...) return select("#", ...), (select(2, ...)) end, nil, "b", nil)
    assert.same({ true, 3, "b" }, { cohost.wait(t) })
  end)

  it("gives each thread its own Lua thread (coroutine.running differs)", function()
    local me = coroutine.running()
    local t = cohost.spawn(function() return coroutine.running() end)
    local ok, other = cohost.wait(t)
    assert.is_true(ok)
    assert.equal("thread", type(other))
    assert.are_not.equal(me, other)
  end)

  it("raises on a non-function", function()
    assert.has_error(function() cohost.spawn(42) end)
    assert.has_error(function() cohost.spawn() end)
  end)
end)

describe("cohost.wait", function()
  it("returns true and every result of the thread", function()
    local t = cohost.spawn(function() return 1, nil, "three" end)
    local res = { cohost.wait(t) }
    assert.equal(4, table.maxn(res))
    assert.same({ true, 1, nil, "three" }, res)
  end)

  it("returns true alone for a thread that returns nothing", function()
    local t = cohost.spawn(function() end)
    assert.same({ true }, { cohost.wait(t) })
    assert.equal(1, select("#", cohost.wait(cohost.spawn(function() end))))
  end)

  it("waits for a thread that is still sleeping, parking meanwhile", function()
    local ticker = h.ticker()
    defer(ticker.stop)
    local t = cohost.spawn(function() cohost.sleep(0.2); return "late" end)
    local before, t0 = ticker.ticks(), cohost.monotonic()
    assert.same({ true, "late" }, { cohost.wait(t) })
    assert.is_true(cohost.monotonic() - t0 >= 0.18)
    assert.is_true(ticker.ticks() - before >= 10)
  end)

  it("returns the results of the first of several threads to finish", function()
    local slow = cohost.spawn(function() cohost.sleep(0.3); return "slow" end)
    local fast = cohost.spawn(function() cohost.sleep(0.05); return "fast" end)
    local t0 = cohost.monotonic()
    assert.same({ true, "fast" }, { cohost.wait(slow, fast) })
    assert.is_true(cohost.monotonic() - t0 < 0.25)
    -- The other one can still be waited for.
    assert.same({ true, "slow" }, { cohost.wait(slow, fast) })
  end)

  it("returns a thread that already finished at once", function()
    local t = cohost.spawn(function() return "done" end)
    cohost.sleep(0.01)
    local t0 = cohost.monotonic()
    assert.same({ true, "done" }, { cohost.wait(t) })
    assert.is_true(cohost.monotonic() - t0 < 0.5)
  end)

  it("returns nil, 'already waited or killed' for a thread waited for before", function()
    local t = cohost.spawn(function() return 1 end)
    cohost.wait(t)
    assert.same({ nil, "already waited or killed" }, { cohost.wait(t) })
  end)

  it("gives the results to one of two waiters and 'already waited or killed' to the other", function()
    local t = cohost.spawn(function() cohost.sleep(0.05); return "once" end)
    local other = cohost.spawn(function() return { cohost.wait(t) } end)
    local mine = { cohost.wait(t) }
    local _, theirs = cohost.wait(other)
    local got = { mine, theirs }
    table.sort(got, function(a, b) return tostring(a[1]) > tostring(b[1]) end)
    assert.same({ { true, "once" }, { nil, "already waited or killed" } }, got)
  end)

  it("wakes every one of many waiters on one thread, and waits on more than eight threads at once", function()
    local go, released = false, false
    local t = cohost.spawn(function()
      assert(h.wait_for(function() return go end, 10))
      return "once"
    end)
    local waiters = {}
    for i = 1, 6 do waiters[i] = cohost.spawn(function() return { cohost.wait(t) } end) end
    -- Ten threads, one of which ends: a wait on all ten at once.
    local many = {}
    for i = 1, 10 do
      many[i] = cohost.spawn(function()
        assert(h.wait_for(function() return go end, 10))
        if i ~= 7 then assert(h.wait_for(function() return released end, 10)) end
        return i
      end)
    end
    local any = cohost.spawn(function() return { cohost.wait(unpack(many)) } end)
    go = true
    local got = {}
    for i = 1, 6 do
      local _, r = cohost.wait(waiters[i])
      got[#got + 1] = r[1] and r[2] or r[2]
    end
    table.sort(got)
    assert.same({ "already waited or killed", "already waited or killed", "already waited or killed",
                  "already waited or killed", "already waited or killed", "once" }, got)
    assert.same({ true, { true, 7 } }, { cohost.wait(any) })
    released = true
    for i = 1, 10 do if i ~= 7 then assert.same({ true, i }, { cohost.wait(many[i]) }) end end
  end)

  it("raises when asked to wait for the current thread", function()
    local ok, pok, err = on_itself(cohost.wait)
    assert.is_true(ok)
    assert.is_false(pok)
    assert.matches("current thread", err)
  end)

  it("raises on something that is not a thread", function()
    assert.has_error(function() cohost.wait() end)
    assert.has_error(function() cohost.wait({}) end)
  end)
end)

describe("errors in a thread", function()
  it("reach wait as false and the error value unchanged (a table keeps its identity)", function()
    local e = { code = 42 }
    local t = cohost.spawn(function() error(e) end)
    local ok, err = cohost.wait(t)
    assert.is_false(ok)
    assert.equal(e, err)   -- the same table, not a copy or a string
  end)

  it("keep a string message exactly, with its position and no traceback", function()
    local t = cohost.spawn(function() error("boom") end)
    local ok, err = cohost.wait(t)
    assert.is_false(ok)
    assert.matches("^.-task_spec%.lua:%d+: boom$", err)
  end)

  it("keep a message raised with level 0 as it is", function()
    local t = cohost.spawn(function() cohost.sleep(0.01); error("plain", 0) end)
    assert.same({ false, "plain" }, { cohost.wait(t) })
  end)

  it("keep a value that is neither a string nor a table, such as true", function()
    local t = cohost.spawn(function() error(true) end)
    assert.same({ false, true }, { cohost.wait(t) })
  end)

  it("do not affect the spawner or other threads", function()
    local bad = cohost.spawn(function() cohost.sleep(0.01); error("bad") end)
    local good = cohost.spawn(function() cohost.sleep(0.05); return "good" end)
    assert.is_false((cohost.wait(bad)))
    assert.same({ true, "good" }, { cohost.wait(good) })
  end)

  it("are logged with their traceback", function()
    local script = h.tmpfile([[
local cohost = require "cohost"
local function inner() error("thread failed on purpose") end
local t = cohost.spawn(function() cohost.sleep(0.01); inner() end)
local ok, e = cohost.wait(t)
io.write(tostring(ok), " ", e, "\n")
]])
    local _, out, log = h.run(h.shell_quote(script))
    -- The error value stays clean ...
    assert.equal("false " .. script .. ":2: thread failed on purpose\n", out)
    -- ... and the log has the message with the traceback.
    assert.truthy(log:find("[error]", 1, true), log)
    assert.truthy(log:find(script .. ":2: thread failed on purpose", 1, true), log)
    assert.truthy(log:find("stack traceback:", 1, true), log)
    assert.truthy(log:find("in function 'inner'", 1, true) or log:find("in upvalue 'inner'", 1, true), log)
  end)
end)

describe("cohost.kill", function()
  it("raises 'cancelled' from the sleep the thread is blocked in", function()
    local seen
    local t = cohost.spawn(function()
      local ok, err = pcall(cohost.sleep, 10)
      seen = { ok, err }
    end)
    cohost.sleep(0.01)
    local t0 = cohost.monotonic()
    assert.is_true(cohost.kill(t))
    cohost.wait(t)
    assert.is_true(cohost.monotonic() - t0 < 0.5)
    assert.same({ false, "cancelled" }, seen)
  end)

  it("unwinds through the thread's own pcalls: every later blocking call raises again", function()
    local log = {}
    local t = cohost.spawn(function()
      local ok1, e1 = pcall(cohost.sleep, 10)
      log[#log + 1] = "first pcall: " .. tostring(ok1) .. " " .. tostring(e1)
      local ok2, e2 = pcall(function()
        pcall(cohost.sleep, 10)   -- swallowed, but the flag stays set
        cohost.sleep(0)
      end)
      log[#log + 1] = "second pcall: " .. tostring(ok2) .. " " .. tostring(e2)
      cohost.sleep(10)
      log[#log + 1] = "never reached"
    end)
    cohost.sleep(0.01)
    cohost.kill(t)
    local ok, err = cohost.wait(t)
    assert.is_false(ok)
    assert.equal("killed", err)
    assert.same({ "first pcall: false cancelled", "second pcall: false cancelled" }, log)
  end)

  it("reaches a thread blocked in a socket receive", function()
    local _, port = h.serve(function(sock) sock:receive() end)
    local seen
    local t = cohost.spawn(function()
      local s = h.connect(port, 5000)
      local ok, err = pcall(s.receive, s)
      seen = { ok, err }
      s:close()
    end)
    cohost.sleep(0.05)
    local t0 = cohost.monotonic()
    cohost.kill(t)
    cohost.wait(t)
    assert.is_true(cohost.monotonic() - t0 < 0.5)
    assert.same({ false, "cancelled" }, seen)
  end)

  it("reaches a thread blocked in cohost.wait", function()
    local sleeper = cohost.spawn(function() cohost.sleep(0.5); return "sleeper" end)
    local seen
    local t = cohost.spawn(function()
      local ok, err = pcall(cohost.wait, sleeper)
      seen = { ok, err }
    end)
    cohost.sleep(0.01)
    cohost.kill(t)
    cohost.wait(t)
    assert.same({ false, "cancelled" }, seen)
    -- The thread it was waiting for is untouched.
    assert.same({ true, "sleeper" }, { cohost.wait(sleeper) })
  end)

  it("reaches a thread blocked on a semaphore or a channel", function()
    local sema = cohost.semaphore.new(0)
    local ch = cohost.channel()
    local seen = {}
    local a = cohost.spawn(function() seen.sema = { pcall(sema.wait, sema, 10) } end)
    local b = cohost.spawn(function() seen.chan = { pcall(ch.receive, ch, 10) } end)
    cohost.sleep(0.01)
    local t0 = cohost.monotonic()
    cohost.kill(a)
    cohost.kill(b)
    cohost.wait(a)
    cohost.wait(b)
    assert.is_true(cohost.monotonic() - t0 < 0.5)
    assert.same({ false, "cancelled" }, seen.sema)
    assert.same({ false, "cancelled" }, seen.chan)
  end)

  it("stops a thread that has not run yet before it starts", function()
    local ran = false
    local t = cohost.spawn(function() ran = true end)
    assert.is_true(cohost.kill(t))
    local ok = cohost.wait(t)
    assert.is_false(ok)
    assert.is_false(ran)
  end)

  it("returns nil, err for a thread that already finished", function()
    local t = cohost.spawn(function() return 1 end)
    cohost.wait(t)
    local ok, err = cohost.kill(t)
    assert.is_nil(ok)
    assert.equal("already waited or killed", err)
  end)

  it("raises when a thread tries to kill itself", function()
    local ok, pok, err = on_itself(cohost.kill)
    assert.is_true(ok)
    assert.is_false(pok)
    assert.matches("current thread", err)
  end)

  it("does not affect the other threads", function()
    local victim = cohost.spawn(function() cohost.sleep(10) end)
    local others = {}
    for i = 1, 10 do others[i] = cohost.spawn(function() cohost.sleep(0.05); return i end) end
    cohost.sleep(0.01)
    cohost.kill(victim)
    for i = 1, 10 do assert.same({ true, i }, { cohost.wait(others[i]) }) end
    assert.is_false((cohost.wait(victim)))
  end)
end)
