-- A task may block anywhere a classic C function is on the path: inside
-- pcall and xpcall, require, metamethods, iterators, table.sort
-- comparators and string.gsub callbacks. Each test blocks there twice
-- over, with cohost.sleep and with a socket receive from a server in this
-- same process, and proves that other coroutines ran meanwhile.
local cohost = require "cohost"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

-- The server answers each line after 20 ms; it can only answer if the
-- receive parks.
local server, port

lazy_setup(function()
  server = assert(cohost.listen("127.0.0.1:0", function(sock)
    while true do
      local line = sock:receive()
      if not line then return end
      cohost.sleep(0.02)
      if not sock:send(line .. "!\n") then return end
    end
  end))
  port = select(2, server:addr())
end)

lazy_teardown(function() server:close() end)

-- Two ways to block; each returns its argument, changed, so the result
-- shows the call really completed.
local ways = {
  {
    name = "cohost.sleep",
    block = function(x)
      cohost.sleep(0.02)
      return x
    end,
  },
  {
    name = "a socket receive",
    block = function(x)
      local s = h.connect(port)
      assert(s:send(tostring(x) .. "\n"))
      local line, err = s:receive()
      s:close()
      assert(line, err)
      return x
    end,
  },
}

-- Runs fn and returns its results, asserting that another coroutine ran
-- while fn was blocked: a ticker counts each time it gets to run, and
-- nothing else can run between reading its count and calling fn unless
-- fn parks.
local function others_ran(fn)
  local ticker = h.ticker(0.001)
  cohost.sleep(0.005)
  local before = ticker.ticks()
  local res = { fn() }
  local moved = ticker.ticks() - before
  ticker.stop()
  assert.is_true(moved > 0, "no other coroutine ran while blocked")
  return unpack(res, 1, table.maxn(res))
end

for _, way in ipairs(ways) do
  local block = way.block

  describe("blocking with " .. way.name, function()
    it("works inside pcall and returns through it", function()
      local ok, v = others_ran(function() return pcall(block, 7) end)
      assert.is_true(ok)
      assert.equal(7, v)
    end)

    it("works inside nested pcalls and an error raised after it is caught", function()
      local ok, err = others_ran(function()
        return pcall(function()
          return pcall(function()
            block(1)
            error("after blocking", 0)
          end)
        end)
      end)
      assert.is_true(ok)
      assert.equal(false, err)
    end)

    it("works inside xpcall with a message handler", function()
      local ok, v = others_ran(function()
        return xpcall(function() return block(3) end, debug.traceback)
      end)
      assert.is_true(ok)
      assert.equal(3, v)
    end)

    it("works inside cohost.xpcall, and an error raised after it reaches the handler", function()
      local ok, v, w = others_ran(function()
        return cohost.xpcall(function(a, b) return block(a), b end, debug.traceback, 4, "b")
      end)
      assert.same({ true, 4, "b" }, { ok, v, w })
      local err
      ok, err = others_ran(function()
        return cohost.xpcall(function() block(1); error("after blocking") end, debug.traceback)
      end)
      assert.is_false(ok)
      assert.truthy(err:find("after blocking\nstack traceback:", 1, true), err)
    end)

    it("works inside the main chunk of a module being required", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir) == 0)
      local name = "cohost_yield_mod_" .. way.name:gsub("%W", "_")
      local f = assert(io.open(dir .. "/" .. name .. ".lua", "w"))
      f:write("local block = _G.COHOST_SPEC_BLOCK\n",
              "return { value = block(42) }\n")
      f:close()
      local saved = package.path
      package.path = dir .. "/?.lua;" .. package.path
      _G.COHOST_SPEC_BLOCK = block
      defer(function()
        package.path = saved
        package.loaded[name] = nil
        _G.COHOST_SPEC_BLOCK = nil
        os.remove(dir .. "/" .. name .. ".lua")
        os.remove(dir)
      end)
      local mod = others_ran(function() return require(name) end)
      assert.equal(42, mod.value)
    end)

    it("works inside __index", function()
      local t = setmetatable({}, { __index = function(_, k) return block(k .. "?") end })
      assert.equal("key?", others_ran(function() return t.key end))
    end)

    it("works inside __newindex", function()
      local store = {}
      local t = setmetatable({}, { __newindex = function(_, k, v) store[k] = block(v) end })
      others_ran(function() t.x = 5 end)
      assert.equal(5, store.x)
    end)

    it("works inside __call", function()
      local callable = setmetatable({}, { __call = function(_, a) return block(a * 2) end })
      assert.equal(10, others_ran(function() return callable(5) end))
    end)

    it("works inside arithmetic (__add) and concatenation (__concat)", function()
      local mt = {}
      mt.__add = function(a, b) return block(a.v + b.v) end
      mt.__concat = function(a, b) return block(a.v .. "|" .. b.v) end
      local a, b = setmetatable({ v = 1 }, mt), setmetatable({ v = 2 }, mt)
      assert.equal(3, others_ran(function() return a + b end))
      assert.equal("1|2", others_ran(function() return a .. b end))
    end)

    it("works inside comparisons (__eq, __lt, __le)", function()
      local mt = {}
      mt.__eq = function(a, b) return block(a.v == b.v) end
      mt.__lt = function(a, b) return block(a.v < b.v) end
      mt.__le = function(a, b) return block(a.v <= b.v) end
      local a, b = setmetatable({ v = 1 }, mt), setmetatable({ v = 1 }, mt)
      assert.is_true(others_ran(function() return a == b end))
      assert.is_false(others_ran(function() return a < b end))
      assert.is_true(others_ran(function() return a <= b end))
    end)

    it("works inside __len and __unm of a userdata", function()
      local u = newproxy(true)
      getmetatable(u).__len = function() return block(9) end
      getmetatable(u).__unm = function() return block(-1) end
      assert.equal(9, others_ran(function() return #u end))
      assert.equal(-1, others_ran(function() return -u end))
    end)

    it("works inside a for-in iterator function", function()
      local function iter(n, i)
        if i < n then return block(i + 1) end
      end
      local seen = {}
      others_ran(function()
        for i in iter, 3, 0 do seen[#seen + 1] = i end
      end)
      assert.same({ 1, 2, 3 }, seen)
    end)

    it("works inside a table.sort comparator", function()
      local t = { 3, 1, 2 }
      local first = true
      others_ran(function()
        table.sort(t, function(a, b)
          if first then first = false; block(0) end
          return a < b
        end)
      end)
      assert.same({ 1, 2, 3 }, t)
    end)

    it("works inside a string.gsub callback", function()
      local s = others_ran(function()
        return (string.gsub("a-b", "%a", function(c) return block(c:upper()) end))
      end)
      assert.equal("A-B", s)
    end)

    it("works several C calls deep: a comparator inside gsub inside pcall inside __index", function()
      local t = setmetatable({}, {
        __index = function(_, k)
          local ok, s = pcall(string.gsub, k, "%a+", function(w)
            local parts = { w, "z", "a" }
            table.sort(parts, function(x, y) block(0); return x < y end)
            return table.concat(parts, ",")
          end)
          assert(ok, s)
          return s
        end,
      })
      assert.equal("a,m,z", others_ran(function() return t.m end))
    end)
  end)
end

describe("cohost.xpcall", function()
  it("returns what the builtin xpcall returns", function()
    local function both(f, msgh, ...)
      local a = { xpcall(f, msgh, ...) }
      local b = { cohost.xpcall(f, msgh, ...) }
      assert.same(a, b)
      assert.equal(table.maxn(a), table.maxn(b))
      return b
    end
    local id = function(...) return ... end
    assert.same({ true }, both(id, id))
    assert.same({ true, 1, nil, 3 }, both(id, id, 1, nil, 3))
    assert.same({ true, nil, nil }, both(function() return nil, nil end, id))
    -- The handler sees the error value as raised, tables included.
    local obj = {}
    assert.equal(obj, both(function() error(obj) end, id)[2])
    assert.same({ false, "wrapped: 7" }, both(function() error(7, 0) end, function(e) return "wrapped: " .. e end))
    -- An error in the handler, and a call of something not callable.
    assert.is_false(both(function() error("x") end, function() error("again") end)[1])
    assert.same({ false, "not callable" }, both(42, function() return "not callable" end))
  end)

  it("wants a message handler", function()
    assert.has_error(function() cohost.xpcall(print) end)
  end)

  -- The reason it exists (docs/lua-api.md): a function that is hot on its
  -- own, called through the builtin xpcall from code that is not
  -- compiled, can never be compiled (its trace would return through the
  -- pcall frame, lj_record_ret's "NYI: return to lower frame"); called
  -- through cohost.xpcall it is. The caller is kept out of the JIT, so that
  -- f's own traces are the ones tried.
  it("lets a function it calls be compiled on its own, where the builtin's cannot", function()
    local function traces_of(call)
      local f = assert(load("return function(x) return x + 1 end"))()
      local caller = assert(load("return function(call, f, n) for i = 1, n do call(f, print, i) end end"))()
      jit.off(caller)
      local started, stopped, aborted = {}, 0, 0
      local function on_trace(what, tr, func)
        if what == "start" then started[tr] = func == f
        elseif what == "stop" and started[tr] then stopped = stopped + 1
        elseif what == "abort" and started[tr] then aborted = aborted + 1 end
      end
      jit.attach(on_trace, "trace")
      caller(call, f, 5000)
      jit.attach(on_trace)
      return stopped, aborted
    end
    local stopped, aborted = traces_of(xpcall)
    assert.is_true(aborted > 0 and stopped == 0, ("builtin: %d stopped, %d aborted"):format(stopped, aborted))
    stopped, aborted = traces_of(cohost.xpcall)
    assert.is_true(stopped > 0 and aborted == 0, ("cohost.xpcall: %d stopped, %d aborted"):format(stopped, aborted))
  end)
end)

describe("many tasks blocking inside metamethods at once", function()
  it("all make progress side by side", function()
    local mt = { __index = function(_, k) cohost.sleep(0.1); return k end }
    local t0 = cohost.monotonic()
    local threads = {}
    for i = 1, 100 do
      threads[i] = cohost.spawn(function()
        local proxy = setmetatable({}, mt)
        return proxy[i]
      end)
    end
    for i = 1, 100 do
      assert.same({ true, i }, { cohost.wait(threads[i]) })
    end
    assert.is_true(cohost.monotonic() - t0 < 1, "the sleeps ran one after another")
  end)
end)
