-- Classic C modules: a lua_CFunction that calls a hooked libc function
-- parks only its coroutine, and an error it raises after resuming is
-- caught by the caller's pcall even while traces are hot (the cur_L
-- regression). Uses spec/mod/cohost_testmod.c, built by `make test` into
-- build/spec/mod/cohost_testmod.so.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

package.cpath = h.root .. "build/spec/mod/?.so;" .. package.cpath
local testmod = require "cohost_testmod"

describe("a classic C function that errors after parking", function()
  -- The pattern that crashed this LuaJIT when cur_L was not restored after
  -- a resume: usleep parks, another coroutine runs Lua, this one resumes
  -- and luaL_error unwinds into a Lua pcall, in loops hot enough to trace.
  local function hot_loop()
    local caught, other = 0, 0
    for _ = 1, 200 do
      local ok, err = pcall(testmod.sleep_then_error, 1000)
      if not ok and tostring(err):find("testmod: failed after sleeping", 1, true) then
        caught = caught + 1
      else
        other = other + 1
      end
    end
    return { caught = caught, other = other }
  end

  for round = 1, 3 do
    it("is caught by pcall in 200 hot iterations on each of 100 threads (round " .. round .. ")", function()
      local results, elapsed = h.run_all(100, hot_loop)
      for i = 1, 100 do
        assert.same({ caught = 200, other = 0 }, results[i])
      end
      -- 100 x 200 sleeps of 1 ms would take 20 s on one blocked worker;
      -- parked, the threads sleep side by side.
      assert.is_true(elapsed < 8, ("took %.2f s: usleep did not park"):format(elapsed))
    end)
  end

  it("hands pcall the error message the C function raised", function()
    local ok, err = pcall(testmod.sleep_then_error, 1000)
    assert.is_false(ok)
    assert.equal("testmod: failed after sleeping", err)
  end)
end)

describe("a classic C function blocking in read() on a socketpair", function()
  it("parks its coroutine: other coroutines run while it waits", function()
    local a, b = assert(testmod.socketpair())
    defer(function() testmod.close(a); testmod.close(b) end)
    local ticker = h.ticker()
    defer(ticker.stop)
    local writer = cohost.spawn(function()
      cohost.sleep(0.2)
      return testmod.write(b, "hello")
    end)
    local t0 = cohost.monotonic()
    local before = ticker.ticks()
    local data = testmod.read(a, 16)
    local during = ticker.ticks() - before
    local elapsed = cohost.monotonic() - t0
    assert.equal("hello", data)
    assert.is_true(elapsed >= 0.15, ("read returned after %.3f s"):format(elapsed))
    -- The writer ran (it lives in this process), and the ticker ran too.
    assert.same({ true, 5 }, { cohost.wait(writer) })
    assert.is_true(during >= 10, ("ticker advanced %d times during the read"):format(during))
  end)

  it("lets 100 coroutines each wait in read() at the same time", function()
    local pairs_ = {}
    for i = 1, 100 do pairs_[i] = { assert(testmod.socketpair()) } end
    defer(function()
      for i = 1, 100 do testmod.close(pairs_[i][1]); testmod.close(pairs_[i][2]) end
    end)
    local readers = {}
    for i = 1, 100 do
      readers[i] = cohost.spawn(function() return testmod.read(pairs_[i][1], 16) end)
    end
    cohost.sleep(0.1)   -- every reader is now parked in read()
    for i = 100, 1, -1 do testmod.write(pairs_[i][2], "r" .. i) end
    for i = 1, 100 do
      assert.same({ true, "r" .. i }, { cohost.wait(readers[i]) })
    end
  end)

  it("returns EOF as an empty string when the peer closes while it waits", function()
    local a, b = assert(testmod.socketpair())
    defer(function() testmod.close(a) end)
    local closer = cohost.spawn(function()
      cohost.sleep(0.05)
      testmod.close(b)
    end)
    assert.equal("", testmod.read(a, 16))
    cohost.wait(closer)
  end)
end)

describe("cancelling a thread blocked in a classic C function", function()
  -- docs/lua-api.md: the killed thread "gets a "cancelled" error raised
  -- from the call it is blocked in"; here that call is a C function.
  it("raises 'cancelled' from the C function's blocking read()", function()
    local a, b = assert(testmod.socketpair())
    defer(function() testmod.close(a); testmod.close(b) end)
    local seen
    local t = cohost.spawn(function()
      seen = { pcall(testmod.read, a, 16) }
    end)
    cohost.sleep(0.05)
    assert.is_true(cohost.kill(t))
    cohost.wait(t)
    assert.same({ false, "cancelled" }, seen)
  end)

  it("raises 'cancelled' from the C function's usleep()", function()
    local seen
    local t = cohost.spawn(function()
      seen = { pcall(testmod.usleep, 10 * 1000 * 1000) }
    end)
    cohost.sleep(0.05)
    local t0 = cohost.monotonic()
    assert.is_true(cohost.kill(t))
    cohost.wait(t)
    assert.is_true(cohost.monotonic() - t0 < 1)
    assert.same({ false, "cancelled" }, seen)
  end)
end)

describe("a classic C function calling usleep", function()
  it("parks only its coroutine", function()
    local moved, took, ok = h.measure(function() return testmod.usleep(100000) end)
    assert.is_true(ok)
    assert.is_true(took >= 0.09)
    assert.is_true(moved >= 5, ("the ticker moved %d times"):format(moved))
  end)
end)
