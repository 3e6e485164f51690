-- cohost.channel([capacity]): a FIFO between light threads. send(v
-- [, timeout]) -> true or nil, "closed" / "timeout"; receive([timeout]) ->
-- v or nil, "closed" / "timeout"; close(); len(). Unbounded without a
-- capacity; with one, send waits while it is full.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

describe("cohost.channel", function()
  it("delivers values in the order they were sent", function()
    local ch = cohost.channel()
    for i = 1, 5 do assert.is_true(ch:send(i)) end
    assert.equal(5, ch:len())
    for i = 1, 5 do assert.equal(i, ch:receive()) end
    assert.equal(0, ch:len())
  end)

  it("carries any non-nil value, tables by reference", function()
    local ch = cohost.channel()
    local t = {}
    ch:send(t)
    ch:send(false)
    ch:send("s")
    assert.equal(t, ch:receive())
    assert.is_false(ch:receive())
    assert.equal("s", ch:receive())
  end)

  it("receive waits for a send from another thread, parking meanwhile", function()
    local ch = cohost.channel()
    local sender
    -- The sender starts inside the measure: started before it, its 0.2 s
    -- would run during the measure's own warm-up, longer on a loaded
    -- machine, and the receive would seem to wait less.
    local moved, took, v = h.measure(function()
      sender = cohost.spawn(function() cohost.sleep(0.2); ch:send("late") end)
      return ch:receive(5)
    end)
    cohost.wait(sender)
    assert.equal("late", v)
    assert.is_true(took >= 0.18 and took < 1, ("received after %.3f s"):format(took))
    assert.is_true(moved >= 10, ("the ticker moved %d times"):format(moved))
  end)

  it("receive(timeout) gives up with nil, 'timeout'", function()
    local ch = cohost.channel()
    local t0 = cohost.monotonic()
    assert.same({ nil, "timeout" }, { ch:receive(0.1) })
    local took = cohost.monotonic() - t0
    assert.is_true(took >= 0.09 and took < 0.5, ("timed out after %.3f s"):format(took))
  end)

  it("wakes several receivers in the order they came, one value each", function()
    local ch = cohost.channel()
    local got = {}
    local threads = {}
    for i = 1, 3 do
      threads[i] = cohost.spawn(function()
        local v = ch:receive(5)
        got[#got + 1] = i .. ":" .. v
      end)
      cohost.sleep(0.005)
    end
    ch:send("a")
    ch:send("b")
    ch:send("c")
    for i = 1, 3 do cohost.wait(threads[i]) end
    assert.same({ "1:a", "2:b", "3:c" }, got)
  end)

  it("without a capacity never makes send wait", function()
    local ch = cohost.channel()
    local t0 = cohost.monotonic()
    for i = 1, 10000 do ch:send(i) end
    assert.is_true(cohost.monotonic() - t0 < 0.5)
    assert.equal(10000, ch:len())
  end)

  it("with a capacity makes send wait while it is full, until a receive", function()
    local ch = cohost.channel(2)
    assert.is_true(ch:send(1))
    assert.is_true(ch:send(2))
    local sent_at
    local sender = cohost.spawn(function()
      local ok = ch:send(3, 5)
      sent_at = cohost.monotonic()
      return ok
    end)
    cohost.sleep(0.1)
    assert.is_nil(sent_at)   -- still waiting: the channel is full
    assert.equal(2, ch:len())
    local t0 = cohost.monotonic()
    assert.equal(1, ch:receive())
    assert.same({ true, true }, { cohost.wait(sender) })
    assert.is_true(sent_at - t0 < 0.5)   -- woken by the receive, not left waiting
    assert.equal(2, ch:receive())
    assert.equal(3, ch:receive())
  end)

  it("send(v, timeout) on a full channel gives up with nil, 'timeout' and drops v", function()
    local ch = cohost.channel(1)
    ch:send("kept")
    local t0 = cohost.monotonic()
    assert.same({ nil, "timeout" }, { ch:send("dropped", 0.1) })
    assert.is_true(cohost.monotonic() - t0 >= 0.09)
    assert.equal(1, ch:len())
    assert.equal("kept", ch:receive())
    assert.same({ nil, "timeout" }, { ch:receive(0.01) })
  end)

  it("after close, receivers drain what is left and then get nil, 'closed'", function()
    local ch = cohost.channel()
    ch:send(1)
    ch:send(2)
    assert.is_true(ch:close())
    assert.equal(1, ch:receive())
    assert.equal(2, ch:receive())
    assert.same({ nil, "closed" }, { ch:receive() })
    assert.same({ nil, "closed" }, { ch:receive(1) })
  end)

  it("after close, send returns nil, 'closed'", function()
    local ch = cohost.channel()
    ch:close()
    assert.same({ nil, "closed" }, { ch:send("x") })
    assert.equal(0, ch:len())
  end)

  it("close wakes every blocked receiver and sender with nil, 'closed'", function()
    local empty, full = cohost.channel(), cohost.channel(1)
    full:send("x")
    local threads = {}
    for i = 1, 3 do threads[i] = cohost.spawn(function() return empty:receive(5) end) end
    for i = 4, 6 do threads[i] = cohost.spawn(function() return full:send(i, 5) end) end
    cohost.sleep(0.05)
    local t0 = cohost.monotonic()
    empty:close()
    full:close()
    for i = 1, 6 do
      assert.same({ true, nil, "closed" }, { cohost.wait(threads[i]) })
    end
    assert.is_true(cohost.monotonic() - t0 < 1)   -- woken, not left to their 5 s
    assert.equal("x", full:receive())
  end)

  it("raises on sending nil or a bad capacity", function()
    local ch = cohost.channel()
    assert.has_error(function() ch:send(nil) end)
    assert.has_error(function() cohost.channel(0) end)
    assert.has_error(function() cohost.channel("big") end)
  end)

  it("passes 10000 values between a producer and a consumer through a small buffer", function()
    local ch = cohost.channel(4)
    local producer = cohost.spawn(function()
      for i = 1, 10000 do assert(ch:send(i, 5)) end
      ch:close()
    end)
    local sum, n = 0, 0
    while true do
      local v = ch:receive(5)
      if v == nil then break end
      sum, n = sum + v, n + 1
      assert.equal(n, v)
    end
    assert.is_true((cohost.wait(producer)))
    assert.equal(10000, n)
    assert.equal(10000 * 10001 / 2, sum)
  end)

  it("fans a message out between connections (a chat room)", function()
    -- Every connection gets its own channel; a line read on one is sent
    -- into all the others'; a writer thread per connection drains its
    -- channel onto the socket.
    local members = {}
    local _, port = h.serve(function(sock)
      local me = cohost.channel()
      members[me] = true
      local writer = cohost.spawn(function()
        while true do
          local msg = me:receive()
          if not msg then return end
          sock:send(msg .. "\n")
        end
      end)
      while true do
        local line = sock:receive()
        if not line then break end
        for other in pairs(members) do
          if other ~= me then other:send(line) end
        end
      end
      members[me] = nil
      me:close()
      cohost.wait(writer)
    end)
    local clients = {}
    for i = 1, 3 do clients[i] = h.connect(port) end
    defer(function() for i = 1, 3 do clients[i]:close() end end)
    -- Wait until all three handlers have joined.
    for _ = 1, 100 do
      local n = 0
      for _ in pairs(members) do n = n + 1 end
      if n == 3 then break end
      cohost.sleep(0.01)
    end
    clients[1]:send("hello from 1\n")
    assert.equal("hello from 1", clients[2]:receive())
    assert.equal("hello from 1", clients[3]:receive())
    clients[3]:send("hi from 3\n")
    assert.equal("hi from 3", clients[1]:receive())
    assert.equal("hi from 3", clients[2]:receive())
    -- The sender does not get its own message back.
    clients[1]:settimeout(100)
    assert.same({ nil, "timeout", "" }, { clients[1]:receive() })
  end)
end)
