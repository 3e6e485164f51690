-- cohost.timer.at and cohost.timer.every: fn(premature, ...) as with
-- ngx.timer, each run on its own coroutine; premature is true when
-- shutdown cut the wait short. Shutdown is tested in child processes
-- (build/cohost on a script in a temp file), since it would stop this one.
local cohost = require "cohost"
local timer = cohost.timer

local h = require "spec.helper"
h.cleanups(after_each)

describe("cohost.timer.at", function()
  it("calls fn(false, ...) after the delay, without blocking the caller", function()
    local got, at
    local t0 = cohost.monotonic()
    timer.at(0.1, function(...) got = { ... }; at = cohost.monotonic() end, "a", nil, 3)
    assert.is_true(cohost.monotonic() - t0 < 0.09)   -- returned before the delay
    assert.is_nil(got)
    cohost.sleep(1)
    assert.same({ false, "a", nil, 3 }, got)
    assert.equal(4, table.maxn(got))
    -- Near its delay, not when the caller woke (1 s); loose for a loaded
    -- machine.
    assert.is_true(at - t0 >= 0.095 and at - t0 < 0.6, ("fired after %.3f s"):format(at - t0))
  end)

  it("with delay 0 runs as soon as the caller yields", function()
    local fired = false
    timer.at(0, function() fired = true end)
    cohost.sleep(0.01)
    assert.is_true(fired)
  end)

  it("runs each callback on its own coroutine: a sleeping callback does not hold up others", function()
    local order = {}
    timer.at(0.01, function() cohost.sleep(0.2); order[#order + 1] = "slow" end)
    timer.at(0.05, function() order[#order + 1] = "quick" end)
    cohost.sleep(0.35)
    assert.same({ "quick", "slow" }, order)
  end)

  it("fires 1000 timers at about the same time", function()
    local n = 0
    local t0 = cohost.monotonic()
    for _ = 1, 1000 do timer.at(0.1, function() n = n + 1 end) end
    cohost.sleep(0.3)
    assert.equal(1000, n)
    assert.is_true(cohost.monotonic() - t0 < 1)
  end)

  it("can be waited for with cohost.wait", function()
    local t = timer.at(0.05, function() end)
    local t0 = cohost.monotonic()
    assert.is_true((cohost.wait(t)))
    assert.is_true(cohost.monotonic() - t0 >= 0.04)
  end)

  it("never calls fn with premature = false once killed before its delay", function()
    local calls = {}
    local t = timer.at(0.1, function(premature) calls[#calls + 1] = premature end)
    cohost.sleep(0.01)
    assert.is_true(cohost.kill(t))
    cohost.sleep(0.2)
    for _, premature in ipairs(calls) do assert.is_true(premature) end
  end)

  it("raises on a bad delay or callback", function()
    assert.has_error(function() timer.at(-1, function() end) end)
    assert.has_error(function() timer.at("soon", function() end) end)
    assert.has_error(function() timer.at(1) end)
  end)
end)

describe("cohost.timer.every", function()
  it("calls fn(false, ...) every interval", function()
    local times = {}
    local t0 = cohost.monotonic()
    local t = timer.every(0.05, function(premature, x)
      times[#times + 1] = { premature, x, cohost.monotonic() - t0 }
    end, "x")
    cohost.sleep(0.33)
    cohost.kill(t)
    cohost.wait(t)
    local normal = {}
    for _, r in ipairs(times) do
      if r[1] == false then
        assert.equal("x", r[2])
        normal[#normal + 1] = r[3]
      end
    end
    assert.is_true(#normal >= 4 and #normal <= 7, ("%d runs in 0.33 s"):format(#normal))
    assert.is_true(normal[1] >= 0.045, "the first run came before one interval")
    for i = 2, #normal do
      assert.is_true(normal[i] - normal[i - 1] >= 0.045, "runs closer than the interval")
    end
  end)

  it("keeps running after one run raises an error", function()
    local runs = 0
    local t = timer.every(0.02, function(premature)
      if premature then return end
      runs = runs + 1
      if runs == 1 then error("first run fails on purpose") end
    end)
    cohost.sleep(0.15)
    cohost.kill(t)
    cohost.wait(t)
    assert.is_true(runs >= 3, ("only %d runs"):format(runs))
  end)

  it("stops for good when killed", function()
    local normal = 0
    local t = timer.every(0.02, function(premature)
      if not premature then normal = normal + 1 end
    end)
    cohost.sleep(0.07)
    cohost.kill(t)
    cohost.wait(t)
    local seen = normal
    assert.is_true(seen >= 1)
    cohost.sleep(0.1)
    assert.equal(seen, normal)
  end)

  it("raises on a bad interval or callback", function()
    assert.has_error(function() timer.every(0, function() end) end)
    assert.has_error(function() timer.every(-1, function() end) end)
    assert.has_error(function() timer.every(1, "f") end)
  end)
end)

describe("timers at shutdown", function()
  local script = [[
local cohost = require "cohost"
cohost.timer.at(10, function(premature, a)
  print("at", premature, a)
end, "A")
cohost.timer.every(10, function(premature, b)
  print("every", premature, b)
end, "B")
cohost.timer.at(0.05, function(premature) print("due", premature) end)
local l = assert(cohost.listen("127.0.0.1:0", function() end))
io.stdout:flush()
]]

  local function lines(s)
    local t = {}
    for line in s:gmatch("[^\n]+") do t[#t + 1] = line end
    table.sort(t)
    return t
  end

  it("run pending callbacks at once with premature = true when cohost.shutdown() is called", function()
    local code, out, err, took = h.run_script(script .. "cohost.sleep(0.2)\ncohost.shutdown()\n")
    assert.equal(0, code, err)
    assert.same({ "at\ttrue\tA", "due\tfalse", "every\ttrue\tB" }, lines(out))
    assert.is_true(took < 5, ("took %.2f s"):format(took))
  end)

  it("run pending callbacks at once with premature = true on SIGTERM", function()
    local code, out, err, took = h.run_script(script, nil, { signal = "TERM", after = 0.5 })
    assert.equal(0, code, err)
    assert.same({ "at\ttrue\tA", "due\tfalse", "every\ttrue\tB" }, lines(out))
    assert.is_true(took < 5, ("took %.2f s"):format(took))
  end)

  it("a pending timer keeps the process alive until it fires", function()
    local code, out, err, took = h.run_script([[
require("cohost").timer.at(0.3, function(premature) print("fired", premature) end)
]])
    assert.equal(0, code, err)
    assert.equal("fired\tfalse\n", out)
    assert.is_true(took >= 0.28 and took < 5, ("took %.2f s"):format(took))
  end)

  it("an error in a timer.every run is logged with its traceback", function()
    local code, _, err = h.run_script([[
local cohost = require "cohost"
local t = cohost.timer.every(0.02, function(premature)
  if not premature then error("tick failed on purpose") end
end)
cohost.sleep(0.05)
cohost.kill(t)
]])
    assert.equal(0, code, err)
    assert.matches("%[error%].-tick failed on purpose", err)
    assert.matches("stack traceback:", err)
  end)
end)
