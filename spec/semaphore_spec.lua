-- cohost.semaphore: ngx.semaphore's API. new(n), post([n]),
-- wait([timeout]) -> true or nil, "timeout", count(). Waiting parks only
-- the waiter; posts wake waiters in the order they came.
local cohost = require "cohost"
local h = require "spec.helper"
local semaphore = cohost.semaphore

describe("cohost.semaphore", function()
  it("starts with n resources, and with none by default", function()
    assert.equal(3, semaphore.new(3):count())
    assert.equal(0, semaphore.new():count())
  end)

  it("wait takes a resource at once while there is one", function()
    local s = semaphore.new(2)
    local t0 = cohost.monotonic()
    assert.is_true(s:wait(1))
    assert.is_true(s:wait(1))
    assert.is_true(cohost.monotonic() - t0 < 0.5)   -- not the 1 s timeout
    assert.equal(0, s:count())
  end)

  it("wait without a timeout does not wait when there is none (nil, 'timeout')", function()
    local s = semaphore.new(0)
    local t0 = cohost.monotonic()
    local ok, err = s:wait()
    assert.is_true(cohost.monotonic() - t0 < 0.5)   -- returned, did not block
    assert.is_nil(ok)
    assert.equal("timeout", err)
    assert.same({ nil, "timeout" }, { s:wait(0) })
  end)

  it("wait(timeout) gives up with nil, 'timeout' after the timeout, parking meanwhile", function()
    local s = semaphore.new(0)
    local moved, took, ok, err = h.measure(function() return s:wait(0.2) end)
    assert.same({ nil, "timeout" }, { ok, err })
    assert.is_true(took >= 0.19 and took < 0.5, ("timed out after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
    assert.equal(0, s:count())
  end)

  it("post wakes a waiter, which takes the resource", function()
    local s = semaphore.new(0)
    local t = cohost.spawn(function()
      local t0 = cohost.monotonic()
      local ok = s:wait(5)
      return ok, cohost.monotonic() - t0
    end)
    cohost.sleep(0)   -- t is waiting now: the 0.1 s below are all its wait
    cohost.sleep(0.1)
    assert.is_true(s:post())
    local ok, waited, took = cohost.wait(t)
    assert.is_true(ok)
    assert.is_true(waited)
    assert.is_true(took >= 0.09 and took < 1)
    assert.equal(0, s:count())
  end)

  it("post without waiters adds to the count", function()
    local s = semaphore.new(1)
    s:post()
    s:post(3)
    assert.equal(5, s:count())
  end)

  it("wakes waiters in the order they started waiting", function()
    local s = semaphore.new(0)
    local order = {}
    local threads = {}
    for i = 1, 5 do
      threads[i] = cohost.spawn(function()
        assert(s:wait(5))
        order[#order + 1] = i
      end)
      cohost.sleep(0.005)
    end
    for _ = 1, 5 do
      s:post()
      cohost.sleep(0.005)
    end
    for i = 1, 5 do cohost.wait(threads[i]) end
    assert.same({ 1, 2, 3, 4, 5 }, order)
  end)

  it("post(n) wakes n waiters at once and leaves the rest waiting", function()
    local s = semaphore.new(0)
    local threads = {}
    for i = 1, 5 do
      threads[i] = cohost.spawn(function()
        local ok, err = s:wait(1)
        return ok, err, cohost.monotonic()
      end)
    end
    cohost.sleep(0.02)
    local t0 = cohost.monotonic()
    s:post(3)
    local woke, timedout = 0, 0
    for i = 1, 5 do
      local ok, res, err, at = cohost.wait(threads[i])
      assert.is_true(ok)
      if res == true then
        woke = woke + 1
        assert.is_true(at - t0 < 0.5, "a posted waiter woke late")   -- well before its 1 s timeout
      elseif err == "timeout" then
        timedout = timedout + 1
      end
    end
    assert.equal(3, woke)
    assert.equal(2, timedout)
    assert.equal(0, s:count())
  end)

  it("a woken waiter whose resource was taken first goes back to waiting", function()
    local s = semaphore.new(0)
    local t = cohost.spawn(function() return s:wait(0.2) end)
    cohost.sleep(0.01)
    s:post()                   -- wakes t, which has not run yet
    assert.is_true(s:wait())   -- this thread takes the resource first
    local t0 = cohost.monotonic()
    assert.same({ true, nil, "timeout" }, { cohost.wait(t) })
    assert.is_true(cohost.monotonic() - t0 >= 0.1, "the waiter did not wait again")
    assert.equal(0, s:count())
  end)

  it("limits how many threads are inside a section at once", function()
    local s = semaphore.new(3)
    local inside, most = 0, 0
    local threads = {}
    for i = 1, 20 do
      threads[i] = cohost.spawn(function()
        assert(s:wait(5))
        inside = inside + 1
        if inside > most then most = inside end
        cohost.sleep(0.01)
        inside = inside - 1
        s:post()
      end)
    end
    for i = 1, 20 do assert.is_true((cohost.wait(threads[i]))) end
    assert.equal(3, most)
    assert.equal(3, s:count())
  end)

  it("a waiter that is killed does not take a resource", function()
    local s = semaphore.new(0)
    local victim = cohost.spawn(function() return s:wait(5) end)
    cohost.sleep(0.01)
    cohost.kill(victim)
    assert.is_false((cohost.wait(victim)))
    s:post()
    assert.equal(1, s:count())
    assert.is_true(s:wait())
  end)

  it("a post made just after a waiter was killed, before it ran again, wakes the next waiter", function()
    local s = semaphore.new(0)
    local waiting, got = 0, nil
    local victim = cohost.spawn(function()
      waiting = waiting + 1
      return s:wait(30)
    end)
    local next_one = cohost.spawn(function()
      waiting = waiting + 1
      got = s:wait(30)
    end)
    assert(h.wait_for(function() return waiting == 2 end, 10))
    cohost.kill(victim)   -- in one turn: the victim has not run since
    s:post()
    local woke = h.wait_for(function() return got ~= nil end, 10)
    if not woke then cohost.kill(next_one) end
    assert(woke, "the post never woke the next waiter")
    assert.is_true(got)
    assert.same({ false, "killed" }, { cohost.wait(victim) })
    assert.equal(0, s:count())
  end)

  it("raises on a bad resource or post count", function()
    assert.has_error(function() semaphore.new(-1) end)
    assert.has_error(function() semaphore.new("two") end)
    local s = semaphore.new(0)
    assert.has_error(function() s:post(0) end)
    assert.has_error(function() s:post(-2) end)
  end)
end)
