-- Where a coroutine must not park: inside an FFI call (interpreted or on a
-- JIT trace), an FFI callback, a __gc finalizer or a debug hook. There a
-- blocking call must behave like plain libc: it blocks the whole worker
-- (so no other coroutine runs meanwhile) and nothing crashes. Every test
-- proves "did not park" with a ticker coroutine whose count must not move
-- while the blocking call waits, and makes the data come from another
-- process (a cohost child serving 127.0.0.1, or a shell writing a pipe),
-- since a blocked worker cannot serve itself.
local cohost = require "cohost"
local ffi = require "ffi"

-- Cleanups for the running test, run in reverse order after it (busted
-- 2.1 keeps only the last finally() of a test, so specs use this instead).
local cleanups = {}
local function defer(fn) cleanups[#cleanups + 1] = fn end
after_each(function()
  local list = cleanups
  cleanups = {}
  local first
  for i = #list, 1, -1 do
    local ok, err = pcall(list[i])
    if not ok and not first then first = err end
  end
  if first then error(first, 0) end
end)

ffi.cdef [[
int socket(int domain, int type, int protocol);
struct cohost_spec_sockaddr_in { uint16_t family; uint16_t port; uint32_t addr; uint8_t zero[8]; };
int connect(int fd, const struct cohost_spec_sockaddr_in *addr, uint32_t len);
int64_t read(int fd, void *buf, size_t n);
int64_t write(int fd, const void *buf, size_t n);
int close(int fd);
typedef struct FILE FILE;
FILE *popen(const char *command, const char *mode);
int pclose(FILE *f);
int fileno(FILE *f);
void qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));
]]
local C = ffi.C

local root = debug.getinfo(1, "S").source:match("^@(.-)spec/[^/]*$") or ""
local COHOST = root .. "build/cohost"

local function slurp(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function write_file(path, data)
  local f = assert(io.open(path, "w"))
  f:write(data)
  f:close()
end

-- A cohost child process serving 127.0.0.1 on a free port (it listens on
-- port 0 and prints the port and its pid). Per connection it reads one
-- byte at a time: "s" is answered with "s" after 0.2 s, anything else is
-- echoed at once.
local server = {}

local SERVER = [[
local cohost = require "cohost"
local l = assert(cohost.listen("127.0.0.1:0", function(sock)
  while true do
    local b = sock:receive(1)
    if not b then return end
    if b == "s" then cohost.sleep(0.2) end
    if not sock:send(b) then return end
  end
end))
local _, port = l:addr()
local pid = io.open("/proc/self/stat"):read("*n")
io.write(port, " ", pid, "\n")
io.stdout:flush()
]]

local function start_server()
  local script, out = os.tmpname(), os.tmpname()
  write_file(script, SERVER)
  os.execute(("timeout 120 %s %s >%s 2>&1 &"):format(COHOST, script, out))
  for _ = 1, 500 do
    local port, pid = (slurp(out) or ""):match("^(%d+) (%d+)\n")
    if port then
      server.port, server.pid = tonumber(port), tonumber(pid)
      server.files = { script, out }
      return
    end
    cohost.sleep(0.01)
  end
  error("the child server did not start: " .. (slurp(out) or ""))
end

local function stop_server()
  if server.pid then os.execute("kill -KILL " .. server.pid .. " 2>/dev/null") end
  for _, f in ipairs(server.files or {}) do os.remove(f) end
end

local function htons(p)
  return bit.bor(bit.rshift(p, 8), bit.lshift(bit.band(p, 0xff), 8))
end

-- A blocking TCP connection to the child server, made with FFI calls.
local function ffi_connect()
  local fd = C.socket(2, 1, 0)   -- AF_INET, SOCK_STREAM
  assert(fd >= 0, "socket failed")
  local sa = ffi.new("struct cohost_spec_sockaddr_in")
  sa.family = 2
  sa.port = htons(server.port)
  sa.addr = 0x0100007f           -- 127.0.0.1 in network order
  assert(C.connect(fd, sa, ffi.sizeof(sa)) == 0, "connect failed")
  return fd
end

-- A coroutine counting while it gets to run: ticks() must not move while
-- the worker is blocked, and moves by about 200 per second when it is not.
local function start_ticker()
  local n, stop = 0, false
  local t = cohost.spawn(function()
    while not stop do
      n = n + 1
      cohost.sleep(0.005)
    end
  end)
  cohost.sleep(0.02)
  return {
    ticks = function() return n end,
    stop = function() stop = true; cohost.wait(t) end,
  }
end

-- Runs fn with a ticker; returns how much the ticker moved during fn, the
-- seconds fn took, and fn's result.
local function measure(fn)
  local ticker = start_ticker()
  local before, t0 = ticker.ticks(), cohost.monotonic()
  local ok, res = pcall(fn)
  local moved, took = ticker.ticks() - before, cohost.monotonic() - t0
  ticker.stop()
  assert(ok, res)
  return moved, took, res
end

lazy_setup(start_server)
lazy_teardown(stop_server)

describe("an FFI read that would block", function()
  -- Each reader sends one byte and reads its echo from the child 100
  -- times: every read finds nothing yet (the echo needs a round trip
  -- through another process) and is made from a JIT trace once the loop
  -- is hot.
  local ticker
  local function reader()
    local fd = ffi_connect()
    local b = ffi.new("char[1]")
    local before, bad = ticker.ticks(), 0
    for i = 1, 100 do
      local c = 65 + i % 26
      b[0] = c
      if C.write(fd, b, 1) ~= 1 then bad = bad + 1 end
      if C.read(fd, b, 1) ~= 1 or b[0] ~= c then bad = bad + 1 end
    end
    local moved = ticker.ticks() - before
    C.close(fd)
    return { bad = bad, moved = moved }
  end

  for round = 1, 3 do
    it("never parks in a JIT-hot loop on each of 100 coroutines, and nothing crashes (round " .. round .. ")", function()
      jit.flush()   -- the loop is compiled afresh in every round
      local traces = 0
      local function on_trace(what, _, fn)
        if what == "stop" and fn == reader then traces = traces + 1 end
      end
      jit.attach(on_trace, "trace")
      ticker = start_ticker()
      local threads = {}
      for i = 1, 100 do threads[i] = cohost.spawn(reader) end
      local results = {}
      for i = 1, 100 do
        local ok, res = cohost.wait(threads[i])
        assert(ok, res)
        results[i] = res
      end
      jit.attach(on_trace)
      ticker.stop()
      for i = 1, 100 do
        -- All echoes right, and the ticker never ran during a whole loop
        -- of 100 reads: no read parked.
        assert.same({ bad = 0, moved = 0 }, results[i])
      end
      assert.is_true(traces >= 1, "the read loop was never JIT-compiled")
    end)
  end

  it("blocks the worker, from a JIT trace, while data is 0.2 s away in a pipe", function()
    -- 100 bytes at once, then 100 more after 0.2 s: the loop is hot by
    -- the 101st read, which waits for the shell.
    local f = C.popen("printf %0100d 0; sleep 0.2; printf %0100d 0", "r")
    assert(f ~= nil, "popen failed")
    local fd = C.fileno(f)
    local b = ffi.new("char[1]")
    local moved, took, got = measure(function()
      local n = 0
      for _ = 1, 200 do
        if C.read(fd, b, 1) == 1 and b[0] == 48 then n = n + 1 end
      end
      return n
    end)
    C.pclose(f)
    assert.equal(200, got)
    assert.is_true(took >= 0.15, ("the reads took %.3f s"):format(took))
    assert.equal(0, moved)
  end)

  it("logs a one-time warning naming the Lua call site", function()
    local script, err = os.tmpname(), os.tmpname()
    defer(function() os.remove(script); os.remove(err) end)
    write_file(script, [[
local ffi = require "ffi"
ffi.cdef "typedef struct FILE FILE; FILE *popen(const char *, const char *); int fileno(FILE *); int64_t read(int, void *, size_t); int pclose(FILE *);"
local f = ffi.C.popen("for i in 1 2 3; do sleep 0.05; printf x; done", "r")
local b = ffi.new("char[1]")
for _ = 1, 3 do
  assert(ffi.C.read(ffi.C.fileno(f), b, 1) == 1)
end
ffi.C.pclose(f)
print("done")
]])
    os.execute(("timeout 20 %s %s >/dev/null 2>%s"):format(COHOST, script, err))
    local log = slurp(err)
    local lines = {}
    for line in log:gmatch("[^\n]+") do
      if line:find("cannot park", 1, true) then lines[#lines + 1] = line end
    end
    assert.equal(1, #lines, log)
    assert.matches("%[warn%]", lines[1])
    assert.truthy(lines[1]:find(script .. ":6", 1, true), lines[1])
  end)
end)

describe("a blocking call in a __gc finalizer", function()
  it("blocks the worker instead of parking (cohost.sleep)", function()
    local ran = false
    local moved, took = measure(function()
      local p = newproxy(true)
      getmetatable(p).__gc = function()
        cohost.sleep(0.2)
        ran = true
      end
      p = nil   -- luacheck: ignore
      collectgarbage()
      collectgarbage()
    end)
    assert.is_true(ran)
    assert.is_true(took >= 0.15, ("the collection took %.3f s"):format(took))
    assert.equal(0, moved)
  end)

  it("blocks the worker instead of parking (a socket receive)", function()
    local sock = cohost.tcp()
    sock:settimeout(5000)
    assert(sock:connect("127.0.0.1", server.port))
    defer(function() sock:close() end)
    local got, err
    local moved, took = measure(function()
      local p = newproxy(true)
      getmetatable(p).__gc = function()
        assert(sock:send("s"))
        got, err = sock:receive(1)
      end
      p = nil   -- luacheck: ignore
      collectgarbage()
      collectgarbage()
    end)
    assert.equal("s", got, err)
    assert.is_true(took >= 0.15, ("the collection took %.3f s"):format(took))
    assert.equal(0, moved)
  end)

  it("blocks the worker instead of parking (an ffi.gc finalizer reading a socket)", function()
    local fd = ffi_connect()
    defer(function() C.close(fd) end)
    local b = ffi.new("char[1]", 115)   -- "s"
    local n
    local moved, took = measure(function()
      local obj = ffi.gc(ffi.new("int[1]"), function()
        C.write(fd, b, 1)
        n = C.read(fd, b, 1)
      end)
      obj = nil   -- luacheck: ignore
      collectgarbage()
      collectgarbage()
    end)
    assert.equal(1, tonumber(n))
    assert.is_true(took >= 0.15, ("the collection took %.3f s"):format(took))
    assert.equal(0, moved)
  end)
end)

describe("a blocking call in an FFI callback", function()
  it("blocks the worker instead of parking", function()
    local calls = 0
    local cmp = ffi.cast("int (*)(const void *, const void *)", function(a, b)
      if calls == 0 then cohost.sleep(0.2) end
      calls = calls + 1
      local x, y = ffi.cast("const int *", a)[0], ffi.cast("const int *", b)[0]
      return x < y and -1 or x > y and 1 or 0
    end)
    defer(function() cmp:free() end)
    local arr = ffi.new("int[4]", { 3, 1, 4, 2 })
    local moved, took = measure(function() C.qsort(arr, 4, ffi.sizeof("int"), cmp) end)
    assert.same({ 1, 2, 3, 4 }, { arr[0], arr[1], arr[2], arr[3] })
    assert.is_true(calls >= 1)
    assert.is_true(took >= 0.15, ("qsort took %.3f s"):format(took))
    assert.equal(0, moved)
  end)
end)

describe("a blocking call in a debug hook", function()
  it("blocks the worker instead of parking", function()
    local ran = false
    local moved, took = measure(function()
      debug.sethook(function()
        debug.sethook()
        cohost.sleep(0.2)
        ran = true
      end, "", 1)
      local x = 0
      for i = 1, 10 do x = x + i end
      return x
    end)
    assert.is_true(ran)
    assert.is_true(took >= 0.15, ("the hook took %.3f s"):format(took))
    assert.equal(0, moved)
  end)
end)
