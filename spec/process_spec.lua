-- Worker processes (--processes), shared dicts between them (--shdict),
-- reload on SIGHUP, drain on SIGTERM, and the 503 past --max-connections.
-- Every test starts build/cohost as a child (h.start, bounded by
-- timeout(1)); the server script prints "port pid" from worker 0 with the
-- master's pid (its parent's) if it has one, so signals go to the master. Requests go
-- through cohost.tcp (exact bytes) or curl.
local cohost = require "cohost"

local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- The server: answers ANSWER plus who served it (worker id, worker count,
-- pid). /slow touches MARK (the test then knows a request is in flight)
-- and answers after SLOW seconds; /incr bumps the "hits" dict; /lock takes
-- the hits dict's lock through the FFI and keeps it (the test then kills
-- this process with the lock held).
local function script(answer, mark, slow)
  return ([[
local cohost = require "cohost"
local http = require "cohost.http"
local shared = require "cohost.shared"
local port, answer, mark, slow = tonumber(arg[1]), %q, %q, %s
local function who()
  local pid = io.open("/proc/self/stat"):read("*n")
  return ("%%s id=%%d count=%%d cpu=%%s pid=%%d"):format(answer, cohost.worker_id(), cohost.worker_count(),
                                                    tostring(cohost.worker_cpu()), pid)
end
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  if req.path == "/slow" then
    io.open(mark, "w"):close()
    cohost.sleep(slow)
  elseif req.path == "/incr" then
    local n = assert(shared.get("hits"):incr("n", 1, 0))
    return res:send(who() .. " n=" .. n)
  elseif req.path == "/lock" or req.path == "/lock-damage" then
    local ffi = require "ffi"
    -- The dict object holds a struct ch_shdict *, whose second field is
    -- the store; the store begins with its mutex, then (host/shdict/store.c):
    local mutex_size = jit.arch == "x64" and 40 or 48   -- glibc's pthread_mutex_t
    ffi.cdef("int pthread_mutex_lock(void *m);" ..
             "typedef struct { char lock[" .. mutex_size .. "]; char name[64]; uint64_t seed;" ..
             " uint32_t size, nbuckets, buckets, lru_head, lru_tail, count; } spec_store;")
    local store = ffi.cast("void ***", shared.get("hits"))[0][1]
    assert(ffi.C.pthread_mutex_lock(store) == 0)
    if req.path == "/lock-damage" then   -- as if killed mid-update
      local st = ffi.cast("spec_store *", store)
      st.count = st.count + 1
    end
    res:send(who() .. " locked")
    return cohost.sleep(60)
  end
  res:send(who())
end))
]]):format(answer, mark or "/dev/null", tostring(slow or 0)) .. h.REPORT_PORT
end

-- Starts `cohost opts script PORT` on a fixed free port (new and
-- restarted workers bind it again); stopped after the test.
local start = h.start_fixed_port

-- GET path: status, headers (lower-case names), body; or nil, err. Over
-- a fresh connection to a port, or an open socket (kept alive).
local get = h.get

-- GETs path until answer(body) is true; returns that body (nil after
-- limit seconds). Failed connections count as a miss: during a restart a
-- connection can meet a closing listener.
local function until_body(port, path, answer, limit)
  return h.eventually(function()
    local status, _, body = get(port, path)
    return status == 200 and answer(body) and body
  end, limit) or nil
end

local function alive(pid)
  return os.execute(("kill -0 %d 2>/dev/null"):format(pid)) == 0
end

describe("--processes", function()
  it("is in the usage with --shdict", function()
    local code, out = h.run("--help")
    assert.equal(0, code)
    assert.truthy(out:find("--processes N|auto", 1, true))
    assert.truthy(out:find("--shdict NAME:SIZE", 1, true))
  end)

  it("rejects a bad process count and a bad --shdict", function()
    for _, args in ipairs { "--processes 0 -e ''", "--processes x -e ''", "--shdict nosize -e ''",
                            "--shdict d:1k -e ''" } do
      local code, _, err = h.run(args)
      assert.equal(2, code, args)
      assert.matches("^cohost: ", err)
    end
  end)

  it("gives every thread of every process its own worker id", function()
    local p = start("--processes 2 -w 2", h.tmpfile(script("v1")))
    h.wait_workers(p, 2)
    local ids, pids = {}, {}
    for _ = 1, 1000 do
      local status, _, body = get(p.port, "/")
      assert.equal(200, status)
      local id, count, pid = body:match("id=(%d+) count=(%d+) cpu=%S+ pid=(%d+)")
      assert.equal("4", count)
      ids[tonumber(id)], pids[pid] = true, true
      if ids[0] and ids[1] and ids[2] and ids[3] then break end
    end
    assert.same({ [0] = true, true, true, true }, ids)
    local n = 0
    for pid in pairs(pids) do
      n = n + 1
      assert.not_equal(tostring(p.pid), pid, "the master served a request")
    end
    assert.equal(2, n)
  end)

  it("--cpu-affinity pins worker id i of any process to the i-th CPU of the list", function()
    local cpus = {}
    local f = assert(io.popen("taskset -pc $$ 2>/dev/null"))
    local list = (f:read("*a") or ""):match(": ([%d,-]+)")
    f:close()
    for part in (list or ""):gmatch("[^,]+") do
      local lo, hi = part:match("^(%d+)-(%d+)$")
      for c = tonumber(lo or part), tonumber(hi or part) do cpus[#cpus + 1] = c end
    end
    if #cpus < 2 then
      pending("needs two CPUs")
      return
    end
    local p = start(("--processes 2 --cpu-affinity %d,%d"):format(cpus[2], cpus[1]), h.tmpfile(script("v1")))
    h.wait_workers(p, 2)
    local seen = {}
    for _ = 1, 1000 do
      local _, _, body = get(p.port, "/")
      local id, cpu = body:match("id=(%d+) count=2 cpu=(%d+)")
      seen[tonumber(id)] = tonumber(cpu)
      if seen[0] and seen[1] then break end
    end
    assert.same({ [0] = cpus[2], [1] = cpus[1] }, seen)
  end)

  it("restarts a worker killed with SIGKILL and logs the signal", function()
    local p = start("--processes 1", h.tmpfile(script("v1")))
    local _, _, body = get(p.port, "/")
    local pid = tonumber(body:match("pid=(%d+)"))
    os.execute("kill -KILL " .. pid)
    local again = until_body(p.port, "/", function(b) return not b:find("pid=" .. pid .. "$") end, 20)
    assert.truthy(again, "no replacement answered: " .. h.slurp(p.err))
    assert.matches("^v1 id=0 count=1", again)
    assert.truthy(h.slurp(p.err):find(("worker process 0 (pid %d) was killed by signal SIGKILL; restarting it in 0.1 s"):format(pid), 1, true),
                  h.slurp(p.err))
    -- It died young again: the back-off doubles.
    local pid2 = tonumber(again:match("pid=(%d+)"))
    os.execute("kill -KILL " .. pid2)
    assert.truthy(until_body(p.port, "/", function(b) return not b:find("pid=" .. pid2 .. "$") end, 20),
                  "no second replacement answered: " .. h.slurp(p.err))
    assert.truthy(h.slurp(p.err):find(("worker process 0 (pid %d) was killed by signal SIGKILL; restarting it in 0.2 s"):format(pid2), 1, true),
                  h.slurp(p.err))
  end)

  it("replaces at once a worker told to drain by a SIGTERM of its own, which finishes its requests", function()
    local mark = h.tmppath()
    local p = start("--processes 1", h.tmpfile(script("v1", mark, 1)))
    local _, _, body = get(p.port, "/")
    local pid = tonumber(body:match("pid=(%d+)"))
    local slow = h.connect(p.port, 10000)
    assert(slow:send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert.is_true(h.wait_for(function() return h.try_slurp(mark) ~= nil end), "/slow never started")
    os.execute("kill -TERM " .. pid)
    local again = until_body(p.port, "/", function(b) return not b:find("pid=" .. pid .. "$") end)
    assert.truthy(again, "no replacement answered")
    local rest = assert(slow:receive("*a"))
    assert.truthy(rest:find("Connection: close", 1, true), rest)
    assert.truthy(rest:find("\r\n\r\nv1 id=0 count=1 cpu=%d+ pid=" .. pid .. "$"), rest)
    assert.is_true(h.wait_for(function()
      return h.slurp(p.err):find(("old worker process 0 (pid %d) exited with code 0"):format(pid), 1, true)
    end), h.slurp(p.err))
    assert.truthy(h.slurp(p.err):find(("worker process 0 (pid %d) drains on a signal of its own; starting a replacement"):format(pid), 1, true))
    assert.is_nil(p.exited())
  end)

  it("stops with code 1 when a worker cannot start its script", function()
    local bad = h.tmpfile("error('no good')")
    local code, _, err = h.run("--processes 2 " .. q(bad), { limit = 10 })
    assert.equal(1, code)
    assert.truthy(err:find("no good", 1, true), err)
    assert.truthy(err:find("before it started; stopping", 1, true), err)
    -- One thread of two failing is enough: the process ends at once.
    local one = h.tmpfile([[
if require("cohost").worker_id() == 1 then error("thread one fails") end
require("cohost.http").listen("127.0.0.1:0", function(_, res) res:send("x") end)
]])
    code, _, err = h.run("--processes 1 -w 2 " .. q(one), { limit = 10 })
    assert.equal(1, code)
    assert.truthy(err:find("thread one fails", 1, true), err)
  end)
end)

describe("--shdict", function()
  it("is one store for every process: incr from all of them adds up", function()
    local p = start("--processes 2 --shdict hits:1m", h.tmpfile(script("v1")))
    h.wait_workers(p, 2)
    local pids, seen = {}, {}
    h.run_all(4, function()
      for _ = 1, 50 do
        local status, _, body = get(p.port, "/incr")
        assert.equal(200, status)
        local pid, n = body:match("pid=(%d+) n=(%d+)")
        pids[pid] = true
        assert.is_nil(seen[n], "two requests got n=" .. n)
        seen[n] = true
      end
    end)
    for i = 1, 200 do assert.truthy(seen[tostring(i)], "nobody got n=" .. i) end
    local n = 0
    for _ in pairs(pids) do n = n + 1 end
    assert.equal(2, n)
    assert.is_nil(h.slurp(p.err):find("is this worker process's own", 1, true))
  end)

  it("is found by shared.new(name) with any size or none, and ngx.shared.NAME", function()
    local code, out, err = h.run([[--shdict cache:64k -e "
      local shared = require 'cohost.shared'
      local d = shared.new('cache')
      require('cohost.ngx').install()
      print(d:capacity(), shared.new('cache', '1m') == d, ngx.shared.cache == d)
      print(pcall(shared.new, 'other'))"]])
    assert.equal(0, code, err)
    assert.equal("65536\ttrue\ttrue\nfalse\tshared dict 'other': no size given, and --shdict did not make it\n", out)
  end)

  it("is checked, found damaged and emptied after a holder died mid-update", function()
    local p = start("--processes 1 --shdict hits:1m", h.tmpfile(script("v1")))
    local _, _, body = get(p.port, "/incr")
    assert.matches("n=1$", body)
    _, _, body = get(p.port, "/lock-damage")
    local pid = tonumber(body:match("pid=(%d+) locked$"))
    assert.truthy(pid, body)
    os.execute("kill -KILL " .. pid)
    local after = until_body(p.port, "/incr", function(b) return not b:find("pid=" .. pid .. " ") end)
    assert.truthy(after, "the dict hangs after its lock holder died")
    assert.matches("n=1$", after)   -- counted afresh in the emptied store
    assert.truthy(h.slurp(p.err):find("shared dict 'hits': a process died holding its lock and left it damaged (LRU list ends): every entry was dropped", 1, true),
                  h.slurp(p.err))
  end)

  it("stays usable after a process is killed holding its lock", function()
    local p = start("--processes 1 --shdict hits:1m", h.tmpfile(script("v1")))
    local _, _, body = get(p.port, "/incr")
    assert.matches("n=1$", body)
    _, _, body = get(p.port, "/lock")
    local pid = tonumber(body:match("pid=(%d+) locked$"))
    assert.truthy(pid, body)
    os.execute("kill -KILL " .. pid)
    local after = until_body(p.port, "/incr", function(b) return not b:find("pid=" .. pid .. " ") end)
    assert.truthy(after, "the dict hangs after its lock holder died: " .. h.slurp(p.err))
    assert.matches("n=2$", after)
    assert.truthy(h.slurp(p.err):find("shared dict 'hits': a process died holding its lock; the store checked intact", 1, true),
                  h.slurp(p.err))
  end)
end)

describe("SIGHUP", function()
  it("reloads: in-flight requests finish on the old script, new ones get the new one", function()
    local mark = h.tmppath()
    local path = h.tmpfile(script("old", mark, 1.5))
    local p = start("--processes 2", path)
    h.wait_workers(p, 2)
    -- An idle keep-alive connection and a request in flight, both on old workers.
    local idle = h.connect(p.port, 5000)
    local status, headers, body = get(idle, "/")
    assert.equal(200, status)
    assert.is_nil(headers.connection)   -- HTTP/1.1: kept alive
    assert.matches("^old ", body)
    local slow = h.connect(p.port, 10000)
    assert(slow:send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert.is_true(h.wait_for(function() return h.try_slurp(mark) ~= nil end), "/slow never started")
    h.write_file(path, script("new", mark, 0))
    p.signal("HUP")
    -- The slow request ends with its old answer, and no keep-alive.
    local line = assert(slow:receive("*l"))
    assert.equal("HTTP/1.1 200 OK", line)
    headers = {}
    while true do
      local l = assert(slow:receive("*l"))
      if l == "" then break end
      local k, v = l:match("^([^:]+):%s*(.*)$")
      headers[k:lower()] = v
    end
    assert.equal("close", headers.connection)
    assert.matches("^old ", assert(slow:receive(tonumber(headers["content-length"]))))
    -- New connections reach the new script only, once the switch is done.
    assert.truthy(until_body(p.port, "/", function(b) return b:find("^new ") end), "the new script never answered")
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("old worker process 1", 1, true) and
                                              h.slurp(p.err):find("old worker process 0", 1, true) end),
                   h.slurp(p.err))
    for _ = 1, 20 do
      local st, _, b = get(p.port, "/")
      assert.equal(200, st)
      assert.matches("^new id=%d count=2", b)
    end
    -- The idle keep-alive connection was closed by its draining worker.
    local data, err = idle:receive("*l")
    assert.is_nil(data)
    assert.equal("closed", err)
    local log = h.slurp(p.err)
    assert.truthy(log:find("reload: 2 new worker processes started, 2 old draining", 1, true), log)
    assert.is_nil(p.exited())
  end)

  it("keeps the old workers when the new script fails", function()
    local path = h.tmpfile(script("old"))
    local p = start("--processes 1", path)
    h.write_file(path, "error('broken on purpose')")
    p.signal("HUP")
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("reload failed", 1, true) end), h.slurp(p.err))
    for _ = 1, 5 do
      local status, _, body = get(p.port, "/")
      assert.equal(200, status)
      assert.matches("^old ", body)
    end
  end)
end)

describe("SIGTERM to the master", function()
  it("drains every worker: in-flight requests complete, then exit 0", function()
    local mark = h.tmppath()
    local p = start("--processes 2", h.tmpfile(script("v1", mark, 1)))
    local slow = h.connect(p.port, 10000)
    assert(slow:send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert.is_true(h.wait_for(function() return h.try_slurp(mark) ~= nil end), "/slow never started")
    p.signal("TERM")
    assert.equal("HTTP/1.1 200 OK", slow:receive("*l"))
    local rest = assert(slow:receive("*a"))
    assert.truthy(rest:find("Connection: close", 1, true), rest)
    assert.truthy(rest:find("\r\n\r\nv1 id=", 1, true), rest)
    assert.equal(0, p.wait(10))
    assert.truthy(h.slurp(p.err):find("master: draining 2 worker processes", 1, true))
  end)

  it("a second SIGTERM, or SIGQUIT, stops every worker at once with code 1", function()
    for _, sigs in ipairs { { "TERM", "TERM" }, { "QUIT" } } do
      local mark = h.tmppath()
      local p = start("--processes 1 --shutdown-timeout 30", h.tmpfile(script("v1", mark, 30)))
      local _, _, body = get(p.port, "/")
      local pid = tonumber(body:match("pid=(%d+)"))
      local slow = h.connect(p.port, 10000)
      assert(slow:send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
      assert.is_true(h.wait_for(function() return h.try_slurp(mark) ~= nil end), "/slow never started")
      for i, sig in ipairs(sigs) do
        p.signal(sig)
        if i < #sigs then
          assert.is_true(h.wait_for(function() return h.slurp(p.err):find("master: draining", 1, true) end))
        end
      end
      assert.equal(1, p.wait(10), table.concat(sigs, ", "))
      assert.is_false(alive(pid), "the worker outlived its master")
      local data, err = slow:receive("*a")
      assert.equal("", data or "", err)
      assert.truthy(h.slurp(p.err):find("master: stopping 1 worker process at once", 1, true), h.slurp(p.err))
    end
  end)
end)

describe("a drain", function()
  it("serves one more request on an idle connection, new or kept alive, with Connection: close", function()
    local p = start("--log-level info", h.tmpfile(script("v1")))
    local early = h.connect(p.port, 5000)   -- connected, request not sent yet
    local kept = h.connect(p.port, 5000)
    assert.equal(200, (get(kept, "/")))   -- idle between requests now
    p.signal("TERM")
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("shutting down", 1, true) end))
    -- The drain gives each a moment (a second) to send its next request.
    for _, sock in ipairs { early, kept } do
      local status, headers, body = get(sock, "/")
      assert.equal(200, status, tostring(headers) .. h.slurp(p.err))
      assert.equal("close", headers.connection)
      assert.matches("^v1 ", body)
    end
    assert.equal(0, p.wait(10))
  end)

  it("closes a connection that stays idle, and exits", function()
    local p = start("", h.tmpfile(script("v1")))
    local kept = h.connect(p.port, 5000)
    assert.equal(200, (get(kept, "/")))
    p.signal("TERM")
    local data, err = kept:receive("*l")
    assert.is_nil(data)
    assert.equal("closed", err)
    assert.equal(0, p.wait(10))
  end)
end)

describe("--max-connections", function()
  it("answers 503 with Connection: close on an HTTP listener that is full", function()
    local p = start("--max-connections 1", h.tmpfile(script("v1")))
    local held = h.connect(p.port, 5000)
    local status = get(held, "/")   -- admitted: it holds the one slot
    assert.equal(200, status)
    local out = h.tmpfile()
    local rc = os.execute(("curl -sS -i -m 5 http://127.0.0.1:%d/ >%s 2>&1"):format(p.port, out))
    local answer = h.slurp(out)
    assert.equal(0, rc, answer)
    assert.matches("^HTTP/1%.1 503 Service Unavailable\r\n", answer)
    assert.truthy(answer:find("\r\nConnection: close\r\n", 1, true), answer)
    assert.matches("\r\n\r\n503 Service Unavailable\n$", answer)
    held:close()
    assert.truthy(until_body(p.port, "/", function(b) return b:find("^v1 ") end), "no 200 once the slot was free")
    assert.is_true(h.wait_for(function()
      return h.slurp(p.err):find("1 connections reached (--max-connections): answering 503 to new ones", 1, true)
    end))
  end)

  it("still closes a plain listener's extra connection cleanly, sending nothing", function()
    local path = h.tmpfile(h.server_script([[
listener = assert(cohost.listen("127.0.0.1:0", function(sock)
  sock:send("hi\n")
  sock:receive("*l")
end))
]]))
    local p = h.start("--max-connections 1 " .. q(path))
    defer(p.stop)
    local held = h.connect(p.port, 5000)
    assert.equal("hi", held:receive("*l"))
    local extra = h.connect(p.port, 5000)
    local data, err, partial = extra:receive("*a")
    assert.equal("", data, err)   -- an orderly close (FIN), not a reset
    assert.is_nil(partial)
    held:close()
    assert.is_true(h.wait_for(function() return h.slurp(p.err):find("(--max-connections): closing new ones", 1, true) end))
  end)
end)
