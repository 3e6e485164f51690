-- cohost.ngx: Debian's other OpenResty libraries, unmodified, each on its
-- main use: lua-nginx-string (resty.string, sha*, md5, random, aes through
-- the ngx_* C symbols cohost exports and OpenSSL's own), lua-resty-
-- lrucache, lua-nginx-cookie in an HTTP handler, lua-nginx-redis-connector
-- against a real redis-server and redis-sentinel, and lua-resty-core's
-- modules (what cohost serves, what it refuses, with one clear error).
local cohost = require "cohost"
local http = require "cohost.http"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
require "cohost.ngx"

local q = h.shell_quote

describe("resty.string and the digests (Debian's lua-nginx-string)", function()
  local str = require "resty.string"

  it("to_hex runs on the exported ngx_hex_dump", function()
    assert.equal("", str.to_hex(""))
    assert.equal("00ff10616263", str.to_hex("\0\255\16abc"))
  end)

  it("atoi follows nginx's ngx_atoi: digits only, -1 otherwise", function()
    assert.equal(12345, str.atoi("12345"))
    assert.equal(0, str.atoi("0"))
    assert.equal(-1, str.atoi(""))
    assert.equal(-1, str.atoi("-5"))
    assert.equal(-1, str.atoi("12a"))
    assert.equal(-1, str.atoi(" 1"))
    assert.equal(-1, str.atoi("99999999999999999999"))   -- past intptr_t
  end)

  it("sha1, sha224, sha256, sha384, sha512 and md5 give the standard digests", function()
    -- FIPS 180 and RFC 1321 test vectors for "abc", fed in two pieces.
    local want = {
      sha1 = "a9993e364706816aba3e25717850c26c9cd0d89d",
      sha224 = "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7",
      sha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      sha384 = "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed"
            .. "8086072ba1e7cc2358baeca134c825a7",
      sha512 = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
            .. "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
      md5 = "900150983cd24fb0d6963f7d28e17f72",
    }
    for name, hex in pairs(want) do
      local d = require("resty." .. name):new()
      assert.is_true(d:update("a"), name)
      assert.is_true(d:update("bc"), name)
      assert.equal(hex, str.to_hex(d:final()), name)
      assert.is_true(d:reset(), name)
      d:update("abc")
      assert.equal(hex, str.to_hex(d:final()), name .. " after reset")
    end
  end)

  it("random gives the bytes asked for, strong or not", function()
    local random = require "resty.random"
    for _, strong in ipairs { true, false } do
      local a, b = random.bytes(32, strong), random.bytes(32, strong)
      assert.equal(32, #a)
      assert.equal(32, #b)
      assert.not_equal(a, b)
    end
  end)

  it("aes encrypts as openssl enc does and decrypts back", function()
    local aes = require "resty.aes"
    local cipher = assert(aes:new("secret"))   -- AES-128-CBC, key and IV from MD5
    local enc = assert(cipher:encrypt("hello, cohost"))
    local code, out = h.sh("printf 'hello, cohost' | openssl enc -aes-128-cbc -k secret -nosalt -md md5 2>/dev/null | od -An -tx1 | tr -d ' \\n'")
    assert.equal(0, code)
    assert.equal(out, str.to_hex(enc))
    assert.equal("hello, cohost", cipher:decrypt(enc))
    local c256 = assert(aes:new("k", "saltsalt", aes.cipher(256, "cbc"), aes.hash.sha256, 3))
    assert.equal("x", c256:decrypt(c256:encrypt("x")))
  end)
end)

describe("resty.lrucache (Debian's lua-resty-lrucache)", function()
  for _, name in ipairs { "resty.lrucache", "resty.lrucache.pureffi" } do
    it(name .. " keeps the most recent items, expires by ttl, deletes and flushes", function()
      local lrucache = require(name)
      local c = assert(lrucache.new(2))
      c:set("a", 1)
      c:set("b", { 2 })
      assert.equal(1, c:get("a"))   -- a is now the most recent
      c:set("c", 3)                 -- evicts b
      assert.is_nil(c:get("b"))
      assert.equal(1, c:get("a"))
      assert.equal(3, c:get("c"))
      c:delete("a")
      assert.is_nil(c:get("a"))
      c:set("t", "soon", 0.05)
      assert.equal("soon", c:get("t"))
      h.wait_for(function() return c:get("t") == nil end, 5)
      local v, stale = c:get("t")
      assert.is_nil(v)
      assert.equal("soon", stale)   -- an expired item comes back as stale
      c:flush_all()
      assert.is_nil(c:get("c"))
    end)
  end
end)

describe("resty.cookie (Debian's lua-nginx-cookie)", function()
  it("reads the request's cookies and sets several in the response", function()
    local ck = require "resty.cookie"
    local got
    local port = h.http_serve(function()
      local cookie = assert(ck:new())
      got = { sid = cookie:get("sid"), all = cookie:get_all() }
      assert(cookie:set({ key = "a", value = "1", path = "/", httponly = true }))
      assert(cookie:set({ key = "b", value = "2", max_age = 60 }))
      ngx.say("ok")
    end)
    local res = assert(http.request("http://127.0.0.1:" .. port .. "/",
                                    { headers = { Cookie = "sid=abc; theme=dark" } }))
    assert.equal(200, res.status)
    assert.equal("abc", got.sid)
    assert.same({ sid = "abc", theme = "dark" }, got.all)
    assert.same({ "a=1; Path=/; HttpOnly", "b=2; Max-Age=60" }, res.headers["set-cookie"])
  end)

  it("get says so when the request has no cookie", function()
    local ck = require "resty.cookie"
    local a, b
    local port = h.http_serve(function()
      a, b = assert(ck:new()):get("sid")
      ngx.say("ok")
    end)
    assert(http.request("http://127.0.0.1:" .. port .. "/"))
    assert.is_nil(a)
    assert.equal("no cookie found in the current request", b)
  end)
end)

describe("resty.redis.connector (Debian's lua-nginx-redis-connector)", function()
  local master, replica, sentinel, dir

  -- A redis-server on a free port, its files (a replica's synced copy) in
  -- dir rather than the current directory.
  local function redis_server(extra)
    local s = { port = h.free_port() }
    s.pid, s.log = h.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no --dir %s %s")
      :format(s.port, q(dir), extra or ""))
    h.wait_port(s.port, s.log)
    return s
  end

  setup(function()
    dir = h.tmpdir()
    master = redis_server("--repl-diskless-sync-delay 0")   -- no 5 s wait for more replicas
    -- A replica, linked before the sentinel starts: the sentinel's first
    -- INFO to the master lists it.
    replica = redis_server("--replicaof 127.0.0.1 " .. master.port)
    local probe = require("resty.redis").new()
    assert(probe:connect("127.0.0.1", master.port))
    assert(h.wait_for(function() return probe:info("replication"):find("connected_slaves:1", 1, true) end, 15),
           "the replica never linked")
    probe:close()
    -- Sentinel rewrites its configuration file: a file of its own, in dir.
    sentinel = { port = h.free_port() }
    local conf = dir .. "/sentinel.conf"
    h.write_file(conf, ("port %d\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 %d 1\n")
      :format(sentinel.port, master.port))
    sentinel.pid, sentinel.log = h.spawn("redis-sentinel " .. q(conf))
    h.wait_port(sentinel.port, sentinel.log)
  end)

  teardown(function()
    h.stop_pid(sentinel and sentinel.pid)
    h.stop_pid(replica and replica.pid)
    h.stop_pid(master and master.pid)
    if dir then h.must("rm -rf " .. q(dir)) end
  end)

  it("connects straight to a redis-server from a DSN", function()
    local rc = require("resty.redis.connector").new()
    local red = assert(rc:connect({ url = "redis://127.0.0.1:" .. master.port .. "/1" }))
    assert.equal("OK", red:set("direct", "yes"))
    assert.equal("yes", red:get("direct"))
    assert.truthy(rc:set_keepalive(red))
  end)

  it("asks redis-sentinel for the master and talks to it", function()
    local rc = require("resty.redis.connector").new({ connect_timeout = 2000, read_timeout = 2000 })
    local red, err = rc:connect({
      url = "sentinel://mymaster:m/0",
      sentinels = { { host = "127.0.0.1", port = sentinel.port } },
    })
    assert.is_truthy(red, err)
    assert.equal("OK", red:set("via", "sentinel"))
    assert.matches("tcp_port:" .. master.port .. "\r\n", red:info("server"), 1, true)
    assert.matches("role:master", red:info("replication"), 1, true)
    red:close()
    -- And the value is in the master, read without the sentinel.
    local direct = assert(rc:connect({ host = "127.0.0.1", port = master.port }))
    assert.equal("sentinel", direct:get("via"))
    direct:close()
  end)

  it("asks redis-sentinel for a replica with role slave", function()
    local rc = require("resty.redis.connector").new({ connect_timeout = 2000, read_timeout = 2000 })
    local params = { master_name = "mymaster", role = "slave",
                     sentinels = { { host = "127.0.0.1", port = sentinel.port } } }
    -- The sentinel learns of the replica from its first INFO to the master.
    local red
    assert(h.wait_for(function()
      red = rc:connect(params)
      return red ~= nil
    end, 15), "the sentinel never named a replica")
    assert.matches("tcp_port:" .. replica.port .. "\r\n", red:info("server"), 1, true)
    assert.matches("role:slave", red:info("replication"), 1, true)
    red:close()
  end)

  it("fails cleanly for a master the sentinel does not know", function()
    local rc = require("resty.redis.connector").new({ connect_timeout = 2000, read_timeout = 2000 })
    -- (connector 0.06 returns nothing at all then, in OpenResty too)
    local red = rc:connect({
      master_name = "nosuchmaster",
      sentinels = { { host = "127.0.0.1", port = sentinel.port } },
    })
    assert.is_nil(red)
  end)
end)

describe("lua-resty-core's modules", function()
  it("resty.core.base is served: buffers, table helpers, FFI codes", function()
    local base = require "resty.core.base"
    assert.equal(-1, base.FFI_ERROR)
    assert.equal(-5, base.FFI_DECLINED)
    local t = base.new_tab(4, 0)
    t[1] = 1
    base.clear_tab(t)
    assert.is_nil(next(t))
    local buf = base.get_string_buf(16)
    assert.equal("cdata", type(buf))
    assert.equal(4096, base.get_string_buf_size())
    local refs = {}
    assert.equal(1, base.ref_in_table(refs, "x"))
    assert.has_no_error(function() base.allows_subsystem("http", "stream") end)
    assert.has_error(function() base.allows_subsystem("stream") end, "unsupported subsystem: http")
    assert.is_nil(base.get_request())
  end)

  it("require 'resty.core' and its parts load, and ngx's functions stay cohost's", function()
    local say = ngx.say
    require "resty.core"
    for _, name in ipairs { "var", "shdict", "time", "regex", "worker", "phase", "ctx", "exit" } do
      assert.is_table(require("resty.core." .. name), name)
    end
    assert.equal(say, ngx.say)
  end)

  it("its own ngx/base64.lua runs on the exported ngx_encode_base64url and ngx_decode_base64url", function()
    -- require "ngx.base64" gives cohost's; the Debian file is loaded by path.
    local deb = dofile(assert(package.searchpath("ngx.base64", package.path)))
    local ours = require "ngx.base64"
    for _, s in ipairs { "", "f", "fo", "foo", "foob", "fooba", "foobar", "\255\254\253\0" } do
      assert.equal(ours.encode_base64url(s), deb.encode_base64url(s))
      assert.equal(s, deb.decode_base64url(deb.encode_base64url(s)))
    end
    assert.equal("Zm9vYmFy", deb.encode_base64url("foobar"))
    assert.equal("__79AA", deb.encode_base64url("\255\254\253\0"))
    assert.equal("foo", deb.decode_base64url("Zm9v=="))   -- stops at the padding
    assert.same({ nil, "invalid input" }, { deb.decode_base64url("a") })
    assert.same({ nil, "invalid input" }, { deb.decode_base64url("ab+c") })
  end)

  it("ngx.process says single, and ngx.errlog's levels are --log-level's", function()
    local process = require "ngx.process"
    assert.equal("single", process.type())
    assert.is_nil(process.get_master_pid())
    local ok, err = process.enable_privileged_agent()
    assert.is_nil(ok)
    assert.matches("not supported by cohost", err, 1, true)
    local errlog = require "ngx.errlog"
    assert.is_number(errlog.get_sys_filter_level())
    assert.has_error(function() errlog.raw_log("x", "y") end, "bad argument #1 to 'raw_log' (must be a number)")
    assert.has_error(function() errlog.get_logs() end)
  end)

  it("ngx.errlog.raw_log logs the message as it is; signal_graceful_exit stops the process", function()
    local code, out, err = h.run_script([[
require "cohost.ngx"
local errlog = require "ngx.errlog"
print(errlog.get_sys_filter_level() == ngx.INFO)
errlog.raw_log(ngx.WARN, "raw message here")
errlog.raw_log(ngx.DEBUG, "filtered out")
assert(require("cohost").listen("127.0.0.1:0", function() end))
require("ngx.process").signal_graceful_exit()
]], "--log-level info")
    assert.equal(0, code, err)
    assert.equal("true\n", out)
    assert.matches("%[warn%][^\n]* raw message here\n", err)
    assert.not_matches("ngx/core.lua", err, 1, true)
    assert.not_matches("filtered out", err, 1, true)
  end)

  it("ngx.process says worker under --processes, with the master's pid", function()
    local p = h.start("--processes 1 " .. q(h.tmpfile(h.server_script([[
require "cohost.ngx"
local process = require "ngx.process"
listener = assert(require("cohost").listen("127.0.0.1:0", function(sock)
  sock:send(process.type() .. " " .. tostring(process.get_master_pid()) .. "\n")
  sock:close()
end))
]]))))
    defer(p.stop)
    local s = h.connect(p.port)
    local line = s:receive("*l")
    s:close()
    local master = tonumber(h.slurp("/proc/" .. p.pid .. "/stat"):match("%) %S+ (%d+)"))
    assert.equal("worker " .. master, line)
  end)

  it("ngx.resp.add_header and ngx.req.add_header add values, keeping those there", function()
    local seen
    local port = h.http_serve(function()
      ngx.header["X-A"] = "1"
      require("ngx.resp").add_header("X-A", "2")
      require("ngx.resp").add_header("X-B", { "3", 4 })
      require("ngx.req").add_header("X-In", "added")
      seen = ngx.req.get_headers()["x-in"]
      ngx.say("ok")
    end)
    local res = assert(http.request("http://127.0.0.1:" .. port .. "/", { headers = { ["X-In"] = "sent" } }))
    assert.equal(200, res.status)
    assert.same({ "1", "2" }, res.headers["x-a"])
    assert.same({ "3", "4" }, res.headers["x-b"])
    assert.same({ "sent", "added" }, seen)
    assert.has_error(function() require("ngx.resp").add_header("X", "y") end)   -- no request here
  end)

  it("ngx.ssl, ngx.balancer, ngx.ocsp, ngx.pipe and the like raise one clear error", function()
    for name in ("ngx.ssl ngx.ocsp ngx.balancer ngx.pipe resty.core.ndk"):gmatch("%S+") do
      for _ = 1, 2 do   -- and again: no "loop or previous error"
        local ok, err = pcall(require, name)
        assert.is_false(ok)
        assert.matches("^not supported by cohost: " .. name:gsub("%.", "%%.") .. " %(", err)
      end
    end
  end)
end)
