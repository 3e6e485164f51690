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
local h = require "spec.helper"
local defer = h.cleanups(after_each)

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

-- A cohost child process serving 127.0.0.1 on a free port (see h.start).
-- Per connection it reads one byte at a time: "s" is answered with "s"
-- after 0.2 s, anything else is echoed at once.
local server, server_script

local SERVER = h.server_script [[
listener = assert(cohost.listen("127.0.0.1:0", function(sock)
  while true do
    local b = sock:receive(1)
    if not b then return end
    if b == "s" then cohost.sleep(0.2) end
    if not sock:send(b) then return end
  end
end))
]]

lazy_setup(function()
  server_script = os.tmpname()
  h.write_file(server_script, SERVER)
  server = h.start(h.shell_quote(server_script), 120)
end)

lazy_teardown(function()
  if server then server.stop() end
  os.remove(server_script)
end)

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
      ticker = h.ticker()
      cohost.sleep(0.02)
      local results = h.run_all(100, reader)
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
    local moved, took, got = h.measure(function()
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
    local script = h.tmpfile([[
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
    local _, _, log = h.run(h.shell_quote(script))
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
    local moved, took = h.measure(function()
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
    local moved, took = h.measure(function()
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
    local moved, took = h.measure(function()
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
    local moved, took = h.measure(function() C.qsort(arr, 4, ffi.sizeof("int"), cmp) end)
    assert.same({ 1, 2, 3, 4 }, { arr[0], arr[1], arr[2], arr[3] })
    assert.is_true(calls >= 1)
    assert.is_true(took >= 0.15, ("qsort took %.3f s"):format(took))
    assert.equal(0, moved)
  end)
end)

describe("a blocking call in a debug hook", function()
  it("blocks the worker instead of parking", function()
    local ran = false
    local moved, took = h.measure(function()
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
