-- The I/O backends from the host's side (docs/runtime.md#io-backends):
-- --io-backend uring and CH_IO_BACKEND put the workers on io_uring, and
-- what a handler sees does not change; where the kernel refuses io_uring
-- (here: build/spec/no_uring, a seccomp filter refusing io_uring_setup),
-- the workers run on epoll after one notice. The whole suite runs on the
-- ring with `make test IO_BACKEND=uring` (.ci/run does).
local h = require "spec.helper"
h.cleanups(after_each)

local NO_URING = h.root .. "build/spec/no_uring"

-- A script that echoes through a listener of its own, with a reader
-- parked meanwhile, and prints what the worker's stats say.
local ECHO = [[
local cohost = require "cohost"
local l = assert(cohost.listen("127.0.0.1:0", function(sock)
  while true do
    local data = sock:receiveany(4096)
    if not data then return end
    sock:send(data)
  end
end))
local _, port = l:addr()
local c = assert(cohost.tcp())
assert(c:connect("127.0.0.1", port))
local got = {}
local reader = cohost.spawn(function()
  for i = 1, 3 do got[i] = c:receive(5) end
end)
cohost.sleep(0.05)   -- the reader parks in its receive
local st = cohost.stats()
for i = 1, 3 do c:send(("msg%02d"):format(i)) end
cohost.wait(reader)
print(st.io_backend, st.ring_inflight > 0, table.concat(got, ","))
c:close()
l:close()
]]

-- Whether this kernel gives cohost a ring at all (a CI machine's might
-- not): the one thing that skips, said as pending.
local function ring_available()
  local code, out = h.run_script("print(require('cohost').stats().io_backend)", "--io-backend uring")
  return code == 0 and out == "uring\n"
end

describe("--io-backend", function()
  it("runs handlers on the ring with their bytes unchanged", function()
    if not ring_available() then return pending("no io_uring on this kernel") end
    local code, out, err = h.run_script(ECHO, "--io-backend uring")
    assert.are.equal(0, code, err)
    -- A parked receive is a ring operation in flight.
    assert.are.equal("uring\ttrue\tmsg01,msg02,msg03\n", out)
    assert.is_nil(err:find("io_uring is not available", 1, true))
  end)

  it("takes CH_IO_BACKEND=uring from the environment, and is epoll without", function()
    if not ring_available() then return pending("no io_uring on this kernel") end
    local script = h.shell_quote(h.tmpfile(ECHO))
    local code, out, err = h.sh(("CH_IO_BACKEND=uring %s %s"):format(h.COHOST, script))
    assert.are.equal(0, code, err)
    assert.are.equal("uring\ttrue\tmsg01,msg02,msg03\n", out)
    -- Neither: epoll, nothing parked on a ring (env -u: make test
    -- IO_BACKEND=uring sets it for the whole suite).
    code, out, err = h.sh(("env -u CH_IO_BACKEND %s %s"):format(h.COHOST, script))
    assert.are.equal(0, code, err)
    assert.are.equal("epoll\tfalse\tmsg01,msg02,msg03\n", out)
  end)

  it("falls back to epoll with one notice where the kernel refuses io_uring", function()
    local script = h.tmpfile(ECHO)
    local code, out, err = h.sh(("%s %s -w 2 --io-backend uring %s"):format(
      NO_URING, h.COHOST, h.shell_quote(script)))
    assert.are.equal(0, code, err)
    -- Both workers run the script; each echoes on epoll.
    assert.are.equal("epoll\tfalse\tmsg01,msg02,msg03\nepoll\tfalse\tmsg01,msg02,msg03\n", out)
    local notices = 0
    for line in err:gmatch("[^\n]+") do
      if line:find("io_uring is not available here (Operation not permitted): the workers use epoll",
                   1, true) then
        notices = notices + 1
      end
    end
    assert.are.equal(1, notices, err)
  end)

  -- io_uring queues a plain stream's sends (write-behind, docs/runtime.md):
  -- a handler returns, and its connection closes, with bytes still queued
  -- when its client reads slowly. They must all arrive, in order, before
  -- the EOF, as on epoll, where the kernel holds them.
  it("delivers every byte a handler sent before it ended to a slow client, then EOF", function()
    local script = h.tmpfile([[
local cohost = require "cohost"
local PIECES, SIZE = 2000, 4096
local l = assert(cohost.listen("127.0.0.1:0", function(sock)
  for i = 1, PIECES do
    assert(sock:send(string.rep(string.char(65 + i % 26), SIZE)))
  end
end))
local _, port = l:addr()
local c = assert(cohost.tcp())
c:settimeout(10000)
assert(c:connect("127.0.0.1", port))
cohost.sleep(0.3)   -- the handler fills the socket and its queue meanwhile
local n, bad = 0, 0
while true do
  local piece, err = c:receive(SIZE)
  if not piece then print(n, bad, err) break end
  n = n + 1
  if piece ~= string.rep(string.char(65 + n % 26), SIZE) then bad = bad + 1 end
end
c:close()
l:close()
]])
    for _, backend in ipairs({ "epoll", "uring" }) do
      if backend == "epoll" or ring_available() then
        local code, out, err = h.run(("--io-backend %s %s"):format(backend, h.shell_quote(script)))
        assert.are.equal(0, code, err)
        assert.are.equal("2000\t0\tclosed\n", out, backend)
      end
    end
  end)

  it("refuses a backend it does not know", function()
    local code, _, err = h.run("--io-backend kqueue -e 'print(1)'")
    assert.are_not.equal(0, code)
    assert.matches("%-%-io%-backend: expected uring or epoll, not kqueue", err)
  end)
end)
