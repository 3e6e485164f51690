-- examples/kv against input that once crashed it or poisoned its log:
-- a backtracking glob, a long KEYS, expiries past int64, bad log records,
-- a rewrite under a short CPU watchdog, values of hundreds of MB.
local cohost = require "cohost"
local h = require "spec.helper"
local kv = require "spec.kv_util"
local defer = h.cleanups(after_each)

local KV, NULL, encode, client = kv.KV, kv.NULL, kv.encode, kv.client

local function start(opts)
  return kv.start(defer, opts)
end

-- Runs kv on dir until it exits (it must fail to start); returns the
-- exit code and its stderr.
local function start_fails(dir, args)
  local code, _, err = h.run(("%s --port 0 --dir %s %s"):format(KV, h.shell_quote(dir), args or ""))
  return code, err
end

describe("kv's glob matching and long commands", function()
  it("matches a backtracking KEYS pattern at once instead of stalling the server", function()
    -- A watchdog of 1 s: the old matcher ran ~20 s here and the process
    -- was stopped (exit 87).
    local p = start({ cohost = "--cpu-watchdog 1" })
    local c = client(p.port, 20000)
    assert.equal("OK", c:call("SET", string.rep("a", 40), "1"))
    local bad = string.rep("a*", 20) .. "b"
    assert.same({}, c:call("KEYS", bad))
    assert.same({ "0", {} }, c:call("SCAN", "0", "MATCH", bad, "COUNT", "100"))
    assert.same({ string.rep("a", 40) }, c:call("KEYS", string.rep("a*", 20)))
    -- PSUBSCRIBE's patterns go through the same matcher.
    local s = client(p.port, 20000)
    s:call("PSUBSCRIBE", bad)
    assert.equal(0, c:call("PUBLISH", string.rep("a", 40), "m"))
    assert.equal("PONG", c:call("PING"))
    assert.is_nil(p.exited())
  end)

  it("serves other clients while a KEYS over many keys runs", function()
    local p = start({ args = "--appendonly no" })
    local a, b = client(p.port, 60000), client(p.port, 60000)
    kv.fill(a, 200000)
    -- Twenty KEYS in one batch: each walks 200,000 keys.
    for _ = 1, 20 do assert(a.sock:send(encode({ "KEYS", "nomatch*" }))) end
    -- b is answered in the middle of a KEYS: the server reports a's
    -- command as paused for others while b's INFO runs.
    local seen = h.wait_for(function()
      return b:call("INFO", "clients"):find("kv_paused_clients:1", 1, true)
    end, 30, 0.001)
    for _ = 1, 20 do assert.same({}, a:read()) end
    assert.is_true(seen)
  end)
end)

describe("kv's expiry limits", function()
  it("refuses expiries past int64 with Redis's error and logs only loadable records", function()
    local p = start()
    local c = client(p.port)
    assert.same({ err = "ERR invalid expire time in 'set' command" },
                c:call("SET", "foo", "bar", "EX", "10000000000000000"))
    assert.same({ err = "ERR invalid expire time in 'setex' command" },
                c:call("SETEX", "foo", "10000000000000000", "bar"))
    assert.same({ err = "ERR invalid expire time in 'set' command" },
                c:call("SET", "foo", "bar", "PX", "9223372036854775807"))
    assert.same({ err = "ERR invalid expire time in 'expire' command" },
                c:call("EXPIRE", "foo", "9223372036854775807"))
    assert.equal(NULL, c:call("GET", "foo"))
    -- Large but valid: the deadline is logged exactly and loads again.
    assert.equal("OK", c:call("SET", "far", "v", "PXAT", "9223372036854775807"))
    assert.equal("OK", c:call("SET", "far2", "v"))
    assert.equal(1, c:call("PEXPIREAT", "far2", "9223372036854775807"))
    assert.equal("OK", c:call("SET", "far3", "v", "EX", "9000000000000000"))
    assert.is_true(c:call("PTTL", "far2") > 9.2e18)
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir })
    local d = client(q.port)
    assert.is_true(d:call("PTTL", "far") > 9.2e18)
    assert.is_true(d:call("PTTL", "far2") > 9.2e18)
    assert.is_true(d:call("TTL", "far3") > 8.9e15)
  end)
end)

describe("kv's log loading", function()
  local function log_with(...)
    local dir = h.tmpdir()
    h.write_file(dir .. "/appendonly.aof", table.concat({ ... }))
    return dir, dir .. "/appendonly.aof"
  end

  it("names the record and offset of a record that fails, and --repair-log cuts it off", function()
    local good = encode({ "SET", "a", "1" })
    local bad = encode({ "SET", "foo", "bar", "PXAT", "-9223372036854775808" })
    local after = encode({ "SET", "b", "2" })
    local dir, path = log_with(good, bad, after)
    local code, err = start_fails(dir)
    assert.equal(1, code)
    assert.matches("record 2 at byte " .. #good .. " failed: ERR invalid expire time in 'set' command",
                   err, 1, true)
    assert.matches("--repair-log", err, 1, true)
    local p = start({ dir = dir, args = "--repair-log" })
    assert.matches("cut the log at byte " .. #good, h.slurp(p.err), 1, true)
    local c = client(p.port)
    assert.equal("1", c:call("GET", "a"))
    assert.equal(NULL, c:call("GET", "b"))
    assert.equal(good, h.slurp(path))
    assert.equal(bad .. after, h.slurp(path .. ".cut"))
    -- The repaired log takes new records and loads.
    assert.equal("OK", c:call("SET", "c", "3"))
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = dir })
    assert.equal("3", client(q.port):call("GET", "c"))
  end)

  for _, empty in ipairs { "*0\r\n", "*-1\r\n" } do
    it("refuses a log holding an empty record (" .. empty:sub(1, -3) .. ") with its offset", function()
      local good = encode({ "SET", "a", "1" })
      local dir = log_with(good, empty, encode({ "SET", "b", "2" }))
      local code, err = start_fails(dir)
      assert.equal(1, code)
      assert.matches("record 2 at byte " .. #good .. " is empty", err, 1, true)
      local p = start({ dir = dir, args = "--repair-log" })
      assert.equal("1", client(p.port):call("GET", "a"))
    end)
  end

  it("names the record of garbage in the middle", function()
    local good = encode({ "SET", "a", "1" })
    local dir = log_with(good, good, "garbage\r\n", good)
    local code, err = start_fails(dir)
    assert.equal(1, code)
    assert.matches("record 3 at byte " .. 2 * #good .. " is bad (expected '*')", err, 1, true)
  end)
end)

describe("kv's log rewrite", function()
  it("takes its snapshot in slices under a short CPU watchdog, and replays it", function()
    -- 0.2 s: a snapshot of this data in one go runs longer than that.
    local p = start({ cohost = "--cpu-watchdog 0.2" })
    local c = client(p.port, 30000)
    kv.fill(c, 300000)
    local items = {}
    for i = 1, 1000 do items[i] = "e" .. i end
    for _ = 1, 200 do c.sock:send(encode({ "RPUSH", "list", unpack(items) })) end
    for _ = 1, 200 do c:read() end
    assert.equal("Background append only file rewriting started", c:call("BGREWRITEAOF"))
    -- Writes during the snapshot: changed keys keep their new values.
    for i = 1, 2000, 7 do assert.equal("OK", c:call("SET", "key:" .. i, "new")) end
    assert.equal(200001, c:call("RPUSH", "list", "last"))
    local ok, err = pcall(kv.wait_rewrites, c, 1, 60)
    assert(ok, tostring(err) .. "\n" .. h.slurp(p.err))
    assert.equal("OK", c:call("SET", "after", "yes"))
    p.signal("KILL")
    p.wait(5)
    assert.matches("rewrote .- from %d+ keys", h.slurp(p.err))
    local q = start({ dir = p.dir, cohost = "--cpu-watchdog 0.2" })
    local d = client(q.port, 30000)
    assert.equal(300002, d:call("DBSIZE"))
    assert.equal("new", d:call("GET", "key:1"))
    assert.equal("9", d:call("GET", "key:9"))
    assert.equal("299999", d:call("GET", "key:299999"))
    assert.equal(200001, d:call("LLEN", "list"))
    assert.equal("last", d:call("LINDEX", "list", -1))
    assert.equal("yes", d:call("GET", "after"))
  end)
end)

describe("kv's log writer", function()
  it("runs automatic rewrites under a short CPU watchdog and keeps answering writes", function()
    -- The rewrites start from the log writer itself (the log passes
    -- 1 MB and doubles): a snapshot that held it past the watchdog would
    -- end it, and every write after would wait for ever.
    local p = start({ cohost = "--cpu-watchdog 0.2", args = "--aof-rewrite-min-size 1000000" })
    local c = client(p.port, 30000)
    kv.fill(c, 300000)
    local ok, err = pcall(kv.wait_rewrites, c, 1, 60)
    assert(ok, tostring(err) .. "\n" .. h.slurp(p.err))
    local w = client(p.port, 10000)
    for i = 1, 100 do assert.equal("OK", w:call("SET", "after" .. i, "v")) end
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir, cohost = "--cpu-watchdog 0.2" })
    local d = client(q.port, 30000)
    assert.equal(300100, d:call("DBSIZE"))
    assert.equal("300000", d:call("GET", "key:300000"))
  end)
end)

describe("kv's large values", function()
  it("takes a 100 MB value under a 160 MB heap, refuses a second with -ERR and keeps the connection", function()
    local p = start({ cohost = "--lua-memory-limit 160m" })
    local c = client(p.port, 60000)
    local big = string.rep("v", 100 * 1024 * 1024)
    assert.equal("OK", c:call("SET", "big", big))
    assert.equal(#big, c:call("STRLEN", "big"))
    local other = string.rep("w", 100 * 1024 * 1024)
    local r = c:call("SET", "other", other)
    assert.matches("^ERR the value of 104857600 bytes does not fit", r.err)
    assert.equal("PONG", c:call("PING"))
    assert.equal(big, c:call("GET", "big"))
    -- Restart: the value loads from the log.
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir, cohost = "--lua-memory-limit 160m" })
    local d = client(q.port, 60000)
    assert.equal(#big, d:call("STRLEN", "big"))
    assert.equal(1, d:call("DEL", "big"))
    local used
    assert.is_true(h.wait_for(function()
      used = tonumber(d:call("INFO", "memory"):match("used_memory:(%d+)"))
      return used < 50 * 1024 * 1024
    end), tostring(used))
  end)
end)

describe("kv's large values between other arguments", function()
  -- A value of 1 MiB or more is read apart from the batch, and the request
  -- goes on in the bytes that follow it: the arguments before it, parsed
  -- from the batch left behind, keep their text (the server makes
  -- arguments into strings only when read, resp.lazy_argv).
  it("keeps the arguments before and after each of them", function()
    local p = start({ args = "--appendonly no" })
    local c = client(p.port, 30000)
    local a, b = string.rep("a", 2 * 1024 * 1024), string.rep("b", 3 * 1024 * 1024 + 7)
    assert.equal("OK", c:call("SET", "big:one", a, "EX", "1000"))
    assert.equal(#a, c:call("STRLEN", "big:one"))
    local ttl = c:call("TTL", "big:one")
    assert.is_true(ttl > 0 and ttl <= 1000, tostring(ttl))
    assert.equal("OK", c:call("MSET", "m:1", a, "m:2", b, "m:3", "small"))
    local keys = c:call("KEYS", "m:*")
    table.sort(keys)
    assert.same({ "m:1", "m:2", "m:3" }, keys)
    assert.equal(#a, c:call("STRLEN", "m:1"))
    assert.equal(#b, c:call("STRLEN", "m:2"))
    assert.equal("small", c:call("GET", "m:3"))
    assert.equal(b, c:call("GET", "m:2"))
  end)
end)

describe("kv over its Lua memory limit", function()
  -- LRANGE builds its reply in a loop the JIT compiled on an earlier
  -- LRANGE; a refusal there crashed the server (segfault in LuaJIT's
  -- lj_err_mem) by the third or fourth request.
  it("answers LRANGE of a list too big for the heap with the list or -ERR, again and again, and serves on", function()
    local p = start({ cohost = "--lua-memory-limit 16m", args = "--appendonly no" })
    local c = client(p.port, 30000)
    for b = 0, 99 do
      local args = { "RPUSH", "l" }
      for i = 1, 1000 do args[i + 2] = tostring(b * 1000 + i) end
      assert(c.sock:send(encode(args)))
    end
    for b = 1, 100 do assert.equal(b * 1000, c:read()) end
    local refused = 0
    for _ = 1, 8 do
      -- LRANGE and PING in one batch: a refused LRANGE is answered and
      -- the rest of the batch runs after it, on the same connection.
      local d = client(p.port, 30000)
      assert(d.sock:send(encode({ "LRANGE", "l", "0", "-1" }) .. encode({ "PING" })))
      local r = assert(d:read())
      assert.equal("PONG", d:read())
      d.sock:close()
      if r.err then
        refused = refused + 1
        assert.matches("^ERR not enough memory %(command 'lrange'", r.err)
      else
        assert.equal(100000, #r)
        assert.equal("100000", r[100000])
      end
    end
    assert.is_true(refused > 0)
    assert.equal(100000, c:call("LLEN", "l"))
    assert.equal("PONG", client(p.port):call("PING"))
    assert.is_nil(p.exited())
  end)
end)

describe("kv's INFO", function()
  it("has the cpu section monitoring tools read", function()
    local p = start({ args = "--appendonly no" })
    local c = client(p.port)
    for _, text in ipairs { c:call("INFO", "cpu"), c:call("INFO") } do
      assert.matches("# CPU\r\n", text, 1, true)
      for _, f in ipairs { "used_cpu_sys", "used_cpu_user", "used_cpu_sys_children",
                           "used_cpu_user_children" } do
        assert.matches("\r\n" .. f .. ":%d+%.%d+\r\n", text)
      end
    end
  end)
end)

describe("kv when the log cannot be written", function()
  local ffi = require "ffi"
  pcall(ffi.cdef, "typedef void (*kv_sighandler)(int); kv_sighandler signal(int, kv_sighandler);")
  local SIGXFSZ = 25

  -- The log file's bytes.
  local function log_bytes(p)
    return h.slurp(p.dir .. "/appendonly.aof")
  end

  it("refuses writes with -MISCONF, shows no unlogged value, and recovers when the file can grow", function()
    -- A real write failure: RLIMIT_FSIZE on the running server (prlimit
    -- --pid), so write(2) past the limit fails with EFBIG. SIGXFSZ is
    -- ignored in the child (inherited through exec), as a server under a
    -- file size limit is run; its default would kill it instead.
    local old = ffi.C.signal(SIGXFSZ, ffi.cast("kv_sighandler", 1))   -- SIG_IGN
    local ok, p = pcall(start)
    ffi.C.signal(SIGXFSZ, old)
    assert(ok, p)
    local c = client(p.port)
    assert.equal("OK", c:call("SET", "before", "1"))
    -- The limit is on every file the server writes, its stderr too: the
    -- error line must still fit, the record of a 16 KiB value must not.
    local size = math.max(#log_bytes(p), #h.slurp(p.err))
    h.must(("prlimit --pid %d --fsize=%d:unlimited"):format(p.pid, size + 4096))   -- soft:hard
    -- The writer's record does not fit: its reply waits for the log.
    local value = string.rep("v", 16384)
    local w = client(p.port, 30000)
    assert(w.sock:send(encode({ "SET", "big", value })))
    local info = client(p.port)
    assert.is_true(h.wait_for(function()
      return info:call("INFO", "persistence"):find("aof_last_write_status:err", 1, true) ~= nil
    end, 20), h.slurp(p.err))
    assert.is_true(h.wait_for(function()
      return h.slurp(p.err):find("writing [^\n]*appendonly%.aof failed: [^\n]*File too large") ~= nil
    end, 10), h.slurp(p.err))
    -- Writes are refused at once, with Redis's error.
    local other = client(p.port)
    local r = other:call("SET", "x", "1")
    assert.matches("^MISCONF Errors writing to the AOF file", r.err)
    r = other:call("INCR", "before")
    assert.matches("^MISCONF", r.err)
    -- A reader asks for the value that is not in the log: its reply may
    -- only come once the record is written.
    local reader = client(p.port, 30000)
    assert(reader.sock:send(encode({ "GET", "big" })))
    assert.is_nil(log_bytes(p):find(value, 1, true))
    h.must(("prlimit --pid %d --fsize=unlimited:unlimited"):format(p.pid))
    assert.equal(value, reader:read())
    assert.truthy(log_bytes(p):find(value, 1, true), "GET answered before the record was in the log")
    assert.equal("OK", w:read())
    assert.is_true(h.wait_for(function()
      return info:call("INFO", "persistence"):find("aof_last_write_status:ok", 1, true) ~= nil
    end, 20))
    assert.is_true(h.wait_for(function()
      return h.slurp(p.err):find("writing [^\n]*appendonly%.aof works again") ~= nil
    end, 10), h.slurp(p.err))
    assert.equal("OK", other:call("SET", "x", "2"))
    -- Everything acknowledged is in the log; the refused writes are not.
    p.signal("KILL")
    p.wait(5)
    local q = start({ dir = p.dir })
    local d = client(q.port)
    assert.equal(value, d:call("GET", "big"))
    assert.equal("1", d:call("GET", "before"))
    assert.equal("2", d:call("GET", "x"))
  end)

  it("exits when the log writer itself fails, with no write acknowledged or kept", function()
    -- KV_FAULT=writer (aof.lua) makes the writer raise, as a bug or the
    -- CPU watchdog would; without its guard the task would end alone and
    -- every write after hang unanswered.
    pcall(ffi.cdef, "int setenv(const char *, const char *, int); int unsetenv(const char *);")
    ffi.C.setenv("KV_FAULT", "writer", 1)
    local ok, p = pcall(start)
    ffi.C.unsetenv("KV_FAULT")
    assert(ok, p)
    local c = client(p.port, 20000)
    local r, err = c:call("SET", "k", "v")
    assert.is_nil(r)
    assert.equal("closed", err)
    assert.equal(1, (p.wait(20)))
    assert.matches("the log writer failed: [^\n]*injected fault %(KV_FAULT=writer%); exiting", h.slurp(p.err))
    local q = start({ dir = p.dir })
    local d = client(q.port)
    assert.equal(NULL, d:call("GET", "k"))
    assert.equal("OK", d:call("SET", "k", "w"))
  end)
end)
