-- cohost.ngx: OpenResty's ngx API on cohost. One describe per area: the
-- install and its guards, ngx.log, time, encodings and digests, ngx.re
-- (checked against the examples of OpenResty's documentation), threads,
-- timers, semaphores, workers, cosockets, ngx.shared, and the request API
-- inside cohost.http handlers (driven by cohost's HTTP client and raw
-- cosockets against an in-process server on 127.0.0.1 port 0).
local cohost = require "cohost"
local http = require "cohost.http"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local M = require "cohost.ngx"

-- Runs a script (text) in a child cohost; returns code, stdout, stderr.
local run = h.run_script   -- (script source, cohost options)

-- -- Install and guards ------------------------------------------------------

describe("cohost.ngx install", function()
  it("installs the global ngx, and install() returns that same table", function()
    assert.is_table(ngx)
    assert.equal(ngx, M.install())
    assert.equal(ngx, M.ngx)
    assert.equal(ngx, rawget(_G, "ngx"))
  end)

  it("raises 'not supported by cohost: ngx.X' for OpenResty names it lacks", function()
    local ok, err = pcall(ngx.location.capture, "/x")
    assert.is_false(ok)
    assert.matches("not supported by cohost: ngx.location.capture", err, 1, true)
    ok, err = pcall(ngx.req.set_uri, "/x")
    assert.matches("not supported by cohost: ngx.req.set_uri", err, 1, true)
    ok, err = pcall(ngx.exec, "/x")
    assert.matches("not supported by cohost: ngx.exec", err, 1, true)
    ok, err = pcall(function() return ngx.timer.pending_count() end)
    assert.matches("not supported by cohost: ngx.timer.pending_count", err, 1, true)
    -- Internals and constants stay nil, so probing code still sees nil.
    assert.is_nil(ngx._phase_ctx)
    assert.is_nil(ngx.HTTP_NO_SUCH_STATUS)
  end)

  it("has ngx_lua's constants", function()
    assert.equal(0, ngx.OK)
    assert.equal(-1, ngx.ERROR)
    assert.equal(4, ngx.ERR)
    assert.equal(8, ngx.DEBUG)
    assert.equal(0, ngx.STDERR)
    assert.equal(404, ngx.HTTP_NOT_FOUND)
    assert.equal(302, ngx.HTTP_MOVED_TEMPORARILY)
    assert.equal(2, ngx.HTTP_GET)
  end)

  it("makes ngx.null the light userdata cjson.null", function()
    assert.equal(cjson.null, ngx.null)
    assert.equal("userdata", type(ngx.null))
    assert.equal('[null]', cjson.encode({ ngx.null }))
  end)

  it("describes itself in ngx.config", function()
    assert.is_false(ngx.config.debug)
    assert.equal("http", ngx.config.subsystem)
    assert.is_true(ngx.config.ngx_lua_version >= 9011)
    local prefix = ngx.config.prefix()
    assert.matches("/$", prefix)
    assert.is_true(os.execute("test -d " .. h.shell_quote(prefix)) == 0)
  end)

  it("serves require 'resty.X' from Debian's nginx.X and shares the module", function()
    package.loaded["resty.memcached"] = nil
    local m = require "resty.memcached"
    assert.equal(require "nginx.memcached", m)
    local ok, err = pcall(require, "resty.no_such_driver")
    assert.is_false(ok)
    assert.matches("nginx.no_such_driver", err, 1, true)
  end)

  it("lets a user's own resty.X win over the alias", function()
    local dir = h.tmpdir()
    assert(os.execute("mkdir " .. dir .. "/resty") == 0)
    h.write_file(dir .. "/resty/redis.lua", "return { mine = true }")
    local saved = package.path
    package.path = dir .. "/?.lua;" .. package.path
    package.loaded["resty.redis"] = nil
    defer(function()
      package.path = saved
      package.loaded["resty.redis"] = nil
    end)
    assert.is_true(require("resty.redis").mine)
  end)

  it("serves ngx.semaphore, ngx.re and resty.core as cohost modules", function()
    local sema = require "ngx.semaphore"
    assert.equal(ngx.semaphore, sema)
    local s = assert(sema.new(0))
    cohost.spawn(function() cohost.sleep(0.02); s:post(1) end)
    assert.is_true(s:wait(1))
    assert.is_function(require("ngx.re").split)
    assert.is_table(require "resty.core")
    local b64 = require "ngx.base64"
    assert.equal("-_8", b64.encode_base64url("\251\255"))
    assert.equal("\251\255", b64.decode_base64url("-_8"))
  end)

  it("has LuaJIT's table.new and table.clear", function()
    local new_tab = require "table.new"
    local clear = require "table.clear"
    local t = new_tab(4, 4)
    t[1], t.x = 1, 2
    clear(t)
    assert.is_nil(next(t))
  end)
end)

-- -- ngx.log ---------------------------------------------------------------------

describe("ngx.log", function()
  it("maps OpenResty's levels onto cohost's and logs the caller's line", function()
    local code, _, err = run([[
require "cohost.ngx"
ngx.log(ngx.ERR, "err ", 1, " ", nil, " ", true, " ", ngx.null)
ngx.log(ngx.WARN, "warn")
ngx.log(ngx.CRIT, "crit")
ngx.log(ngx.NOTICE, "notice")
ngx.log(ngx.INFO, "info-hidden")
ngx.log(ngx.DEBUG, "debug-hidden")
print("stdout print")
require("cohost.ngx").install({ print = true })
print("logged print")
]])
    assert.equal(0, code)
    assert.matches("%[error%][^\n]*:2: err 1 nil true null\n", err)
    assert.matches("%[warn%][^\n]*:3: warn\n", err)
    assert.matches("%[error%][^\n]*:4: crit\n", err)
    assert.matches("%[notice%][^\n]*:5: notice\n", err)
    assert.not_matches("hidden", err)
    assert.matches("%[notice%][^\n]*logged print\n", err)
    assert.not_matches("stdout print", err)
  end)

  it("shows INFO and DEBUG at --log-level debug", function()
    local code, _, err = run([[
require "cohost.ngx"
ngx.log(ngx.INFO, "shown-info")
ngx.log(ngx.DEBUG, "shown-debug")
]], "--log-level debug")
    assert.equal(0, code)
    assert.matches("%[info%][^\n]*shown%-info", err)
    assert.matches("%[debug%][^\n]*shown%-debug", err)
  end)

  it("refuses an unknown level", function()
    assert.has_error(function() ngx.log(42, "x") end, "bad log level")
  end)
end)

-- -- Time ----------------------------------------------------------------------------

describe("ngx time functions", function()
  it("ngx.now has millisecond resolution and tracks the clock; update_time is harmless", function()
    local t = ngx.now()
    assert.equal(t, math.floor(t * 1000) / 1000)
    assert.is_true(math.abs(t - os.time()) <= 1)
    ngx.update_time()
    ngx.sleep(0.05)
    assert.is_true(ngx.now() - t >= 0.04)
    assert.equal(math.floor(ngx.time()), ngx.time())
  end)

  it("ngx.sleep parks only the caller", function()
    local moved = h.measure(function() ngx.sleep(0.1) end)
    assert.is_true(moved > 3)
    assert.has_error(function() ngx.sleep(-1) end)
  end)

  it("formats today, localtime and utctime", function()
    assert.matches("^%d%d%d%d%-%d%d%-%d%d$", ngx.today())
    assert.matches("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d$", ngx.localtime())
    assert.equal(os.date("!%Y-%m-%d %H:%M"), ngx.utctime():sub(1, 16))
  end)

  it("formats http_time and cookie_time as nginx does", function()
    assert.equal("Thu, 18 Nov 2010 11:27:35 GMT", ngx.http_time(1290079655))
    assert.equal("Thu, 18-Nov-10 11:27:35 GMT", ngx.cookie_time(1290079655))
    assert.equal("Thu, 01 Jan 1970 00:00:00 GMT", ngx.http_time(0))
    assert.equal("Fri, 01-Jan-2038 00:00:00 GMT", ngx.cookie_time(2145916800))
  end)

  it("parses the three HTTP date formats, and nothing else", function()
    assert.equal(1290079655, ngx.parse_http_time("Thu, 18 Nov 2010 11:27:35 GMT"))
    assert.equal(784111777, ngx.parse_http_time("Sunday, 06-Nov-94 08:49:37 GMT"))
    assert.equal(784111777, ngx.parse_http_time("Sun Nov  6 08:49:37 1994"))
    assert.equal(951782400, ngx.parse_http_time("Tue, 29 Feb 2000 00:00:00 GMT"))
    assert.is_nil(ngx.parse_http_time("yesterday"))
    assert.is_nil(ngx.parse_http_time("Thu, 18 Nov 2010 25:27:35 GMT"))
    assert.is_nil(ngx.parse_http_time("Thu, 18 Foo 2010 11:27:35 GMT"))
  end)
end)

-- -- Encodings and digests --------------------------------------------------------

describe("ngx encodings and digests", function()
  it("escape_uri escapes a URI component, or only what a URI cannot hold with type 0", function()
    assert.equal("a%20b%2Fc%3F%26%3D%25~-._", ngx.escape_uri("a b/c?&=%~-._"))
    assert.equal("%E7%AB%A0", ngx.escape_uri("章"))
    assert.equal("/a%20b/c%3Fd=e&f", ngx.escape_uri("/a b/c?d=e&f", 0))
  end)

  it("unescape_uri decodes %XX and '+', and keeps a bad escape", function()
    assert.equal("b r56 7", ngx.unescape_uri("b%20r56+7"))
    assert.equal("章/x", ngx.unescape_uri("%E7%AB%A0%2fx"))
    assert.equal("100%zz%", ngx.unescape_uri("100%zz%"))
  end)

  it("encode_args and decode_args round-trip arrays, bare keys and escapes", function()
    assert.equal("a=1&a=2&b%20r=hello%20world&flag&n=3",
                 ngx.encode_args({ a = { 1, 2 }, ["b r"] = "hello world", flag = true, off = false, n = 3 }))
    local t = ngx.decode_args("a=1&a=2&b%20r=hello+world&flag&empty=")
    assert.same({ a = { "1", "2" }, ["b r"] = "hello world", flag = true, empty = "" }, t)
    local few, why = ngx.decode_args("a=1&b=2&c=3", 2)
    assert.same({ a = "1", b = "2" }, few)
    assert.equal("truncated", why)
    assert.same({ a = "1", b = "2", c = "3" }, ngx.decode_args("a=1&b=2&c=3", 0))
  end)

  it("encodes and decodes base64, with and without padding", function()
    assert.equal("aGVsbG8=", ngx.encode_base64("hello"))
    assert.equal("aGVsbG8", ngx.encode_base64("hello", true))
    assert.equal("hello", ngx.decode_base64("aGVsbG8="))
    assert.is_nil(ngx.decode_base64("@@@"))
  end)

  it("computes md5, md5_bin, sha1_bin and hmac_sha1 (known vectors)", function()
    assert.equal("5d41402abc4b2a76b9719d911017c592", ngx.md5("hello"))
    assert.equal(16, #ngx.md5_bin("hello"))
    assert.equal("qvTGHdzF6KLavt4PO0gs2a6pQ00=", ngx.encode_base64(ngx.sha1_bin("hello")))
    -- RFC 2202 test case 2.
    local mac = ngx.hmac_sha1("Jefe", "what do ya want for nothing?")
    assert.equal("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79", (mac:gsub(".", function(c)
      return ("%02x"):format(c:byte())
    end)))
  end)

  it("computes CRC-32 for crc32_short and crc32_long", function()
    assert.equal(907060870, ngx.crc32_short("hello"))
    assert.equal(907060870, ngx.crc32_long("hello"))
    assert.equal(0xcbf43926, ngx.crc32_long("123456789"))
    assert.equal(0, ngx.crc32_short(""))
  end)

  it("quotes SQL strings", function()
    assert.equal([['it\'s \"a\"\n\\']], ngx.quote_sql_str("it's \"a\"\n\\"))
  end)
end)

-- -- ngx.re ---------------------------------------------------------------------------

describe("ngx.re", function()
  it("match returns captures with [0] and the groups", function()
    local m = ngx.re.match("hello, 1234", "[0-9]+")
    assert.equal("1234", m[0])
    m = ngx.re.match("hello, 1234", "([0-9])[0-9]+")
    assert.equal("1234", m[0])
    assert.equal("1", m[1])
    assert.is_nil(ngx.re.match("hello, world", "[0-9]+"))
  end)

  it("match gives named captures and false for groups that did not take part", function()
    local m = ngx.re.match("hello, 1234", "([0-9])(?<remaining>[0-9]+)")
    assert.equal("1234", m[0])
    assert.equal("1", m[1])
    assert.equal("234", m[2])
    assert.equal("234", m.remaining)
    m = ngx.re.match("hello, world", "(world)|(hello)|(?<named>howdy)")
    assert.equal("hello", m[0])
    assert.is_false(m[1])
    assert.equal("hello", m[2])
    assert.is_false(m[3])
    assert.is_false(m.named)
  end)

  it("match with D collects duplicate names into arrays", function()
    local m = ngx.re.match("hello, world", "(?<named>\\w+), (?<named>\\w+)", "D")
    assert.same({ "hello", "world" }, m.named)
    m = ngx.re.match("hello, !", "(?<named>\\w+), (?<named>\\w+)?!", "D")
    assert.same({ "hello" }, m.named)
  end)

  it("match applies the i, x, m, s, a and u flags", function()
    assert.equal("hello", ngx.re.match("hello, world", "HEL LO", "ix")[0])
    assert.is_nil(ngx.re.match("a\nb", "^b"))
    assert.equal("b", ngx.re.match("a\nb", "^b", "m")[0])
    assert.is_nil(ngx.re.match("a\nb", "a.b"))
    assert.equal("a\nb", ngx.re.match("a\nb", "a.b", "s")[0])
    assert.is_nil(ngx.re.match("hello, 1234", "[0-9]+", "a"))
    assert.equal("hello", ngx.re.match("hello, 1234", "[a-z]+", "a")[0])
    assert.equal("章亦", ngx.re.match("hello, 章亦春", "HELLO, (.{2})", "iu")[1])
    assert.equal(1, #ngx.re.match("章", ".", "")[0])   -- without u a dot is a byte
    assert.equal(3, #ngx.re.match("章", ".", "u")[0])
  end)

  it("gives the same results with JIT (j) and the compile cache (o)", function()
    for _, flags in ipairs { "", "j", "o", "jo" } do
      for _ = 1, 2 do
        local m = ngx.re.match("id=42;", "id=(?<id>\\d+)", flags)
        assert.equal("42", m.id)
        assert.equal(4, ngx.re.find("id=42;", "\\d+", flags))
      end
    end
  end)

  it("match honours and advances ctx.pos", function()
    local ctx = {}
    local m = ngx.re.match("1234, hello", "[0-9]+", "", ctx)
    assert.equal("1234", m[0])
    assert.equal(5, ctx.pos)
    ctx = { pos = 2 }
    m = ngx.re.match("1234, hello", "[0-9]+", "", ctx)
    assert.equal("234", m[0])
    assert.equal(5, ctx.pos)
  end)

  it("match fills the caller's res table", function()
    local res = {}
    local m = ngx.re.match("a1", "([a-z])(\\d)", "", nil, res)
    assert.equal(res, m)
    assert.same({ [0] = "a1", "a", "1" }, res)
  end)

  it("find returns 1-based inclusive positions, of the nth group if asked", function()
    assert.same({ 8, 11 }, { ngx.re.find("hello, 1234", "([0-9]+)", "jo") })
    assert.same({ 9, 11 }, { ngx.re.find("hello, 1234", "([0-9])([0-9]+)", "jo", nil, 2) })
    assert.same({ 1, 0 }, { ngx.re.find("abc", "x*") })
    assert.is_nil(ngx.re.find("hello", "[0-9]"))
    local from, to, err = ngx.re.find("hello", "(h)", "", nil, 3)
    assert.is_nil(from)
    assert.is_nil(to)
    assert.equal("nth out of bound", err)
    local ctx = { pos = 9 }
    assert.same({ 9, 11 }, { ngx.re.find("hello, 1234", "[0-9]+", "", ctx) })
    assert.equal(12, ctx.pos)
  end)

  it("gmatch iterates over every match, then returns nil", function()
    local words = {}
    for m in ngx.re.gmatch("hello, world", "([a-z]+)", "i") do
      words[#words + 1] = m[0] .. "/" .. m[1]
    end
    assert.same({ "hello/hello", "world/world" }, words)
    local it = assert(ngx.re.gmatch("a1b2", "\\d"))
    assert.equal("1", it()[0])
    assert.equal("2", it()[0])
    assert.is_nil(it())
    assert.is_nil(it())
    local n = 0
    for m in ngx.re.gmatch("ab", "") do
      assert.equal("", m[0])
      n = n + 1
    end
    assert.equal(3, n)
  end)

  it("sub and gsub expand $0, $N, ${N}, ${name} and $$", function()
    assert.same({ "hello, [12][1]34", 1 }, { ngx.re.sub("hello, 1234", "([0-9])[0-9]", "[$0][$1]") })
    assert.same({ "hello, 100234", 1 }, { ngx.re.sub("hello, 1234", "[0-9]", "${0}00") })
    assert.same({ "hello, $234", 1 }, { ngx.re.sub("hello, 1234", "[0-9]", "$$") })
    assert.same({ "[hello,h], [world,w]", 2 },
                { ngx.re.gsub("hello, world", "([a-z])[a-z]+", "[$0,$1]", "i") })
    assert.same({ "05/2024", 1 }, { ngx.re.gsub("2024-05", "(?<y>\\d+)-(?<m>\\d+)", "${m}/${y}") })
    assert.same({ "a<>c", 1 }, { ngx.re.sub("abc", "b", "<$9>") })   -- no such group: empty
    assert.same({ "abc", 0 }, { ngx.re.gsub("abc", "x", "y") })
  end)

  it("sub and gsub take a function replacement getting the captures table", function()
    local function func(m) return "[" .. m[0] .. "][" .. m[1] .. "]" end
    assert.same({ "hello, [12][1]34", 1 }, { ngx.re.sub("hello, 1234", "( [0-9] ) [0-9]", func, "x") })
    assert.same({ "[hello,h], [world,w]", 2 },
                { ngx.re.gsub("hello, world", "([a-z])[a-z]+", function(m)
                    return "[" .. m[0] .. "," .. m[1] .. "]"
                  end, "i") })
    assert.same({ "$1 2", 2 }, { ngx.re.gsub("a b", "[a-z]", function(m)
      return m[0] == "a" and "$1" or 2
    end) })
    -- The callback may use the same cached regex again.
    assert.same({ "<1>-<2>", 2 }, { ngx.re.gsub("1-2", "\\d", function(m)
      assert(ngx.re.match("9", "\\d", "o"))
      return "<" .. m[0] .. ">"
    end, "o") })
  end)

  it("gsub steps past empty matches as OpenResty does", function()
    assert.same({ "-a--b-", 4 }, { ngx.re.gsub("axb", "x*", "-") })
    assert.same({ "-a-b-c-", 4 }, { ngx.re.gsub("abc", "", "-") })
    assert.same({ "-章-", 2 }, { ngx.re.gsub("章", "", "-", "u") })
    assert.same({ "-a--b-", 4 }, { ngx.re.gsub("axb", "x*", function() return "-" end) })
  end)

  it("returns nil and an error for a bad regex, a bad template or bad UTF-8", function()
    local m, err = ngx.re.match("x", "(abc")
    assert.is_nil(m)
    assert.matches('pcre2_compile%(%) failed: .* in "%(abc"', err)
    local s, n
    s, n, err = ngx.re.sub("abc", "b", "$x")
    assert.is_nil(s)
    assert.is_nil(n)
    assert.equal("failed to compile the replacement template", err)
    s, n, err = ngx.re.sub("abc", "b", "${nosuchname}")
    assert.equal("failed to compile the replacement template", err)
    m, err = ngx.re.match("\255\254", ".", "u")
    assert.is_nil(m)
    assert.matches("^pcre_exec%(%) failed: %-%d+", err)
  end)

  it("raises for an unknown flag and for DFA mode", function()
    assert.has_error(function() ngx.re.match("a", "a", "z") end, 'unknown flag "z" (flags "z")')
    assert.has_error(function() ngx.re.match("a", "a", "d") end, 'flag "d" (DFA mode) is not supported by cohost')
  end)

  it("converts a non-string subject with tostring", function()
    assert.equal("42", ngx.re.match(42, "\\d+")[0])
  end)

  it("split (ngx.re module) splits on matches, keeps a capture and honours max", function()
    local split = require("ngx.re").split
    assert.same({ "a", "b", "c", "d" }, split("a,b,c,d", ","))
    assert.same({ "a", "b,c,d" }, split("a,b,c,d", ",", nil, nil, 2))
    assert.same({ "a", ",", "b" }, split("a,b", "(,)"))
    assert.same({ "a", "b", "c" }, split("abc", ""))
    assert.same({ "", "a", "b" }, split(",a,b,,", ","))
    assert.same({ "a", "b" }, split("a  b", "\\s+", "jo"))
  end)
end)

-- -- Threads, timers, semaphores, workers -------------------------------------------

describe("ngx.thread, ngx.timer, ngx.semaphore, ngx.worker", function()
  it("thread.spawn runs a light thread and thread.wait gives its results", function()
    local t = ngx.thread.spawn(function(a, b)
      ngx.sleep(0.01)
      return a + b, "x"
    end, 1, 2)
    assert.same({ true, 3, "x" }, { ngx.thread.wait(t) })
    local bad = ngx.thread.spawn(function() error("boom", 0) end)
    assert.same({ false, "boom" }, { ngx.thread.wait(bad) })
  end)

  it("thread.wait returns the first of several to finish, and kill stops one", function()
    local slow = ngx.thread.spawn(function() ngx.sleep(5) return "slow" end)
    local fast = ngx.thread.spawn(function() ngx.sleep(0.01) return "fast" end)
    assert.same({ true, "fast" }, { ngx.thread.wait(slow, fast) })
    assert.is_true(ngx.thread.kill(slow))
    assert.same({ false, "killed" }, { ngx.thread.wait(slow) })
  end)

  it("timer.at calls back with premature = false and the arguments, returning true", function()
    local got
    assert.is_true(ngx.timer.at(0.01, function(...) got = { ... } end, "a", 2))
    ngx.sleep(0.1)
    assert.same({ false, "a", 2 }, got)
    assert.has_error(function() ngx.timer.at(0, "not a function") end)
    local ok, err = ngx.timer.at(-1, function() end)
    assert.is_nil(ok)
    assert.is_string(err)
  end)

  it("timer.every calls back repeatedly with its arguments", function()
    local code, out = run([[
require "cohost.ngx"
local n = 0
assert(ngx.timer.every(0.02, function(premature, step)
  n = n + step
  if n >= 3 then io.write("ticks ", n, "\n"); io.stdout:flush(); os.exit(0) end
end, 1))
]])
    assert.equal(0, code)
    assert.equal("ticks 3\n", out)
  end)

  it("semaphore waits and posts across threads, with timeouts", function()
    local sema = assert(ngx.semaphore.new())
    local ok, err = sema:wait(0.01)
    assert.is_nil(ok)
    assert.equal("timeout", err)
    ngx.thread.spawn(function() ngx.sleep(0.02); sema:post(2) end)
    assert.is_true(sema:wait(1))
    assert.equal(1, sema:count())
  end)

  it("worker.id, count, pid and exiting describe this worker", function()
    assert.equal(0, ngx.worker.id())
    assert.equal(1, ngx.worker.count())
    local stat = io.open("/proc/self/stat"):read("*n")
    assert.equal(stat, ngx.worker.pid())
    assert.is_false(ngx.worker.exiting())
    local code, out = run([[
require "cohost.ngx"
-- One string in one io.write: the two workers' lines cannot interleave.
io.write(ngx.worker.id() .. "/" .. ngx.worker.count() .. "\n")
]], "-w 2")
    assert.equal(0, code)
    assert.matches("0/2\n", out)
    assert.matches("1/2\n", out)
  end)

  it("ngx.exit outside a request ends only the calling thread", function()
    local after = false
    local t = ngx.thread.spawn(function()
      ngx.exit(0)
      after = true
    end)
    local ok = ngx.thread.wait(t)
    assert.is_false(ok)
    assert.is_false(after)
  end)

  it("get_phase says 'timer' outside a request", function()
    assert.equal("timer", ngx.get_phase())
  end)
end)

-- -- Cosockets -----------------------------------------------------------------------

describe("ngx.socket", function()
  local function echo_server()
    local _, port = h.serve(function(sock)
      while true do
        local line = sock:receive()
        if not line then return end
        sock:send(line .. "\n")
      end
    end)
    return port
  end

  it("tcp and stream are cohost's cosockets", function()
    local port = echo_server()
    for _, make in ipairs { ngx.socket.tcp, ngx.socket.stream } do
      local s = make()
      s:settimeout(1000)
      assert.equal(1, s:connect("127.0.0.1", port))
      assert.equal(3, s:send("hi\n"))
      assert.equal("hi", s:receive("*l"))
      local it = s:receiveuntil("--")
      s:send("a--\n")
      assert.equal("a", it())
      s:close()
    end
  end)

  it("connect returns a connected socket, or nil and 'connection refused'", function()
    local port = echo_server()
    local s = assert(ngx.socket.connect("127.0.0.1", port))
    s:send("x\n")
    assert.equal("x", s:receive())
    s:close()
    local none, err = ngx.socket.connect("127.0.0.1", h.free_port())
    assert.is_nil(none)
    assert.equal("connection refused", err)
  end)

  it("udp exchanges datagrams", function()
    local server = ngx.socket.udp()
    local port = h.free_port()
    -- The peer: Python upper-casing one datagram.
    local py = h.tmpfile([[
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.settimeout(5)
data, addr = s.recvfrom(100)
s.sendto(data.upper(), addr)
]])
    os.execute(("timeout 10 /usr/bin/python3 %s %d >/dev/null 2>&1 &"):format(py, port))
    server:settimeout(200)
    assert(server:setpeername("127.0.0.1", port))
    local got
    for _ = 1, 100 do   -- until python is up ("connection refused" before)
      server:send("ping")
      got = server:receive()
      if got then break end
      ngx.sleep(0.05)
    end
    assert.equal("PING", got)
    server:close()
  end)
end)

-- -- ngx.shared ------------------------------------------------------------------------

describe("ngx.shared", function()
  it("indexes cohost.shared dictionaries by name, and gives nil for an unknown one", function()
    local shared = require "cohost.shared"
    local d = shared.new("ngx_spec", "1m")
    assert.equal(d, ngx.shared.ngx_spec)
    assert.is_true((ngx.shared.ngx_spec:set("k", "v")))
    assert.equal("v", ngx.shared.ngx_spec:get("k"))
    assert.is_nil(ngx.shared.no_such_dict)
  end)
end)

-- -- The request API ---------------------------------------------------------------------

-- Serves handler with cohost.http on port 0 (closed after the test);
-- returns the base URL.
local function serve(handler)
  local port = h.http_serve(handler)
  return "http://127.0.0.1:" .. port, port
end

local function get(url, opts)
  return assert(http.request(url, opts))
end

-- Sends raw bytes to port and reads until the server closes (2 s bound).
local function raw(port, data)
  local s = h.connect(port)
  s:send(data)
  local out = s:receive("*a")
  s:close()
  return out
end

describe("ngx inside cohost.http handlers", function()
  it("say, print and flush stream the body; status and header set the head", function()
    local base = serve(function()
      ngx.status = ngx.HTTP_CREATED
      ngx.header.content_type = "text/x-test"
      ngx.header["X-Multi"] = { "a", "b" }
      ngx.header.x_number = 42
      assert.equal("text/x-test", ngx.header["Content-Type"])
      assert.is_false(ngx.headers_sent)
      assert.equal(1, ngx.say("hello ", 1, " ", true, " ", nil, " ", ngx.null))
      assert.is_true(ngx.headers_sent)
      ngx.print({ "a", { "b", 2 } }, "\n")
      assert.equal(1, ngx.flush(true))
      ngx.status = 500   -- too late: logged and ignored
      assert.equal(201, ngx.status)
    end)
    local r = get(base .. "/")
    assert.equal(201, r.status)
    assert.equal("text/x-test", r.headers["content-type"])
    assert.same({ "a", "b" }, r.headers["x-multi"])
    assert.equal("42", r.headers["x-number"])
    assert.equal("chunked", r.headers["transfer-encoding"])
    assert.equal("hello 1 true nil null\nab2\n", r.body)
  end)

  it("exit answers a status with nginx's error page and ends the handler", function()
    local after = false
    local base = serve(function()
      ngx.exit(ngx.HTTP_NOT_FOUND)
      after = true
    end)
    local r = get(base .. "/missing")
    assert.equal(404, r.status)
    assert.matches("<title>404 Not Found</title>", r.body, 1, true)
    assert.equal("text/html", r.headers["content-type"])
    assert.is_false(after)
  end)

  it("exit after output finishes the response and keeps the connection", function()
    local base = serve(function()
      ngx.say("partial")
      ngx.exit(ngx.OK)
    end)
    local r = get(base .. "/")
    assert.equal(200, r.status)
    assert.equal("partial\n", r.body)
    r = get(base .. "/")   -- the same pooled connection answers again
    assert.equal("partial\n", r.body)
  end)

  it("exit(444) closes the connection without an answer", function()
    local _, port = serve(function() ngx.exit(444) end)
    assert.equal("", raw(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
  end)

  it("redirect answers 302 (or the given status) with Location", function()
    local base = serve(function()
      if ngx.var.uri == "/perm" then return ngx.redirect("/new", 301) end
      ngx.redirect("/elsewhere")
    end)
    local r = get(base .. "/old")
    assert.equal(302, r.status)
    assert.equal("/elsewhere", r.headers.location)
    r = get(base .. "/perm")
    assert.equal(301, r.status)
    assert.equal("/new", r.headers.location)
  end)

  it("eof ends the response while the handler goes on", function()
    local done = false
    local base = serve(function()
      ngx.say("early")
      ngx.eof()
      ngx.sleep(0.05)
      done = true
      local ok, err = ngx.say("too late")
      assert.is_nil(ok)
      assert.is_string(err)
    end)
    local r = get(base .. "/")
    assert.equal("early\n", r.body)
    ngx.sleep(0.2)
    assert.is_true(done)
  end)

  it("send_headers sends the head before any body", function()
    local base = serve(function()
      ngx.header["X-Early"] = "yes"
      assert.equal(1, ngx.send_headers())
      assert.is_true(ngx.headers_sent)
      ngx.print("body")
    end)
    local r = get(base .. "/")
    assert.equal("yes", r.headers["x-early"])
    assert.equal("body", r.body)
  end)

  it("ngx.req gives method, version, headers and URI arguments", function()
    local seen
    local base = serve(function()
      local headers = ngx.req.get_headers()
      local args = ngx.req.get_uri_args()
      seen = {
        method = ngx.req.get_method(),
        version = ngx.req.http_version(),
        agent = headers.user_agent,
        custom = headers["X-Custom"],
        multi = headers["x-multi"],
        a = args.a, b = args.b, c = args.c, sp = args["s p"],
        internal = ngx.req.is_internal(),
      }
      ngx.req.set_header("X-Custom", "changed")
      seen.changed = ngx.req.get_headers()["x-custom"]
      seen.var_changed = ngx.var.http_x_custom
      ngx.req.clear_header("X-Multi")
      seen.cleared = ngx.req.get_headers()["x-multi"] == nil
      ngx.print("ok")
    end)
    get(base .. "/p?a=1&a=2&b&c=&s%20p=x+y", { method = "PUT", body = "data",
      headers = { ["X-Custom"] = "v", ["X-Multi"] = { "1", "2" } } })
    assert.equal("PUT", seen.method)
    assert.equal(1.1, seen.version)
    assert.matches("^cohost/", seen.agent)
    assert.equal("v", seen.custom)
    assert.same({ "1", "2" }, seen.multi)
    assert.same({ "1", "2" }, seen.a)
    assert.is_true(seen.b)
    assert.equal("", seen.c)
    assert.equal("x y", seen.sp)
    assert.is_false(seen.internal)
    assert.equal("changed", seen.changed)
    assert.equal("changed", seen.var_changed)
    assert.is_true(seen.cleared)
  end)

  it("read_body, get_body_data and get_post_args give the body", function()
    local seen
    local base = serve(function()
      local before = ngx.req.get_post_args()
      ngx.req.read_body()
      seen = { before = before, data = ngx.req.get_body_data(), args = ngx.req.get_post_args(),
               var = ngx.var.request_body }
      ngx.print("ok")
    end)
    get(base .. "/", { method = "POST", body = "name=a+b&x=%41&x=2",
      headers = { ["Content-Type"] = "application/x-www-form-urlencoded" } })
    assert.is_nil(seen.before)
    assert.equal("name=a+b&x=%41&x=2", seen.data)
    assert.same({ name = "a b", x = { "A", "2" } }, seen.args)
    assert.equal("name=a+b&x=%41&x=2", seen.var)
  end)

  it("discard_body reads and drops the body, keeping the connection", function()
    local base = serve(function()
      ngx.req.discard_body()
      ngx.print("dropped")
    end)
    for _ = 1, 2 do
      local r = get(base .. "/", { method = "POST", body = ("y"):rep(1000) })
      assert.equal("dropped", r.body)
    end
  end)

  it("read_body past max_body_size answers 413", function()
    local port = h.http_serve(function()
      ngx.req.read_body()
      ngx.print("not reached")
    end, { max_body_size = 10 })
    local r = get("http://127.0.0.1:" .. port .. "/", { method = "POST",
      body = coroutine.wrap(function() coroutine.yield(("x"):rep(100)) end) })
    assert.equal(413, r.status)
  end)

  it("req.socket() reads the body as a socket", function()
    local lines
    local base = serve(function()
      local sock = assert(ngx.req.socket())
      lines = { sock:receive("*l"), sock:receive(3) }
      local rest, err, partial = sock:receive(100)
      lines[3], lines[4], lines[5] = rest, err, partial
      ngx.print("ok")
    end)
    get(base .. "/", { method = "POST", body = "line one\nabcdef" })
    assert.same({ "line one", "abc", nil, "closed", "def" }, lines)
  end)

  it("req.socket(true) hands over the raw connection", function()
    local _, port = serve(function()
      local sock = assert(ngx.req.socket(true))
      sock:send("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\n")
      local extra = sock:receive(5)
      sock:send(extra:sub(1, 4))
    end)
    local out = raw(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\nhello")
    assert.matches("^HTTP/1.1 200 OK\r\n.*\r\n\r\nhell$", out)
  end)

  it("ngx.var gives the common nginx variables", function()
    local v
    local base, port = serve(function()
      v = {}
      for _, name in ipairs { "uri", "request_uri", "args", "query_string", "is_args", "arg_a",
                              "arg_missing", "http_user_agent", "http_x_thing", "cookie_sid",
                              "remote_addr", "remote_port", "request_method", "host", "scheme",
                              "server_port", "server_protocol", "content_length", "status",
                              "nonexistent" } do
        v[name] = ngx.var[name] or "<nil>"
      end
      ngx.var.my_var = 5
      v.my_var = ngx.var.my_var
      ngx.print("ok")
    end)
    get(base .. "/a%20b/c?a=x%20y&b=2", { headers = { ["X-Thing"] = "t", Cookie = "a=1; sid=abc" } })
    assert.equal("/a b/c", v.uri)
    assert.equal("/a%20b/c?a=x%20y&b=2", v.request_uri)
    assert.equal("a=x%20y&b=2", v.args)
    assert.equal("a=x%20y&b=2", v.query_string)
    assert.equal("?", v.is_args)
    assert.equal("x%20y", v.arg_a)   -- raw, as nginx's $arg_
    assert.equal("<nil>", v.arg_missing)
    assert.matches("^cohost/", v.http_user_agent)
    assert.equal("t", v.http_x_thing)
    assert.equal("abc", v.cookie_sid)
    assert.equal("127.0.0.1", v.remote_addr)
    assert.matches("^%d+$", v.remote_port)
    assert.equal("GET", v.request_method)
    assert.equal("127.0.0.1", v.host)
    assert.equal("http", v.scheme)
    assert.equal(tostring(port), v.server_port)
    assert.equal("HTTP/1.1", v.server_protocol)
    assert.equal("<nil>", v.content_length)
    assert.equal("200", v.status)
    assert.equal("<nil>", v.nonexistent)
    assert.equal("5", v.my_var)
  end)

  it("ngx.var gives the variables rate limiters and access logs use", function()
    local v = {}
    local port
    local base
    base, port = serve(function()
      ngx.req.read_body()
      ngx.print("0123456789")
      for _, name in ipairs { "binary_remote_addr", "request_time", "request_id", "request_length",
                              "bytes_sent", "body_bytes_sent", "server_name", "connection",
                              "connection_requests", "msec", "scheme", "https", "request" } do
        v[#v + 1] = { [name] = ngx.var[name] }
      end
      v[#v + 1] = { request_id_again = ngx.var.request_id }
    end)
    -- Two requests on one kept-alive connection, then one on another.
    local s = h.connect(port)
    local body = "x=1"
    for i = 1, 2 do
      s:send(("POST /p?i=%d HTTP/1.1\r\nHost: example.test:%d\r\nContent-Length: %d\r\n\r\n%s")
        :format(i, port, #body, body))
      assert.equal(200, h.receive_response(s).status)
    end
    s:close()
    local r = get(base .. "/third")
    assert.equal(200, r.status)
    local got = {}
    for i, kv in ipairs(v) do
      local k, val = next(kv)
      local n = math.floor((i - 1) / 14) + 1
      got[n] = got[n] or {}
      got[n][k] = val
    end
    local a, b, c = got[1], got[2], got[3]
    assert.equal("\127\0\0\1", a.binary_remote_addr)
    assert.matches("^%d+%.%d%d%d$", a.request_time)
    assert.matches("^%x+$", a.request_id)
    assert.equal(32, #a.request_id)
    assert.equal(a.request_id, a.request_id_again)
    assert.not_equal(a.request_id, b.request_id)
    local head = ("POST /p?i=1 HTTP/1.1\r\nHost: example.test:%d\r\nContent-Length: 3\r\n\r\n"):format(port)
    assert.equal(tostring(#head + #body), a.request_length)
    assert.equal("10", a.body_bytes_sent)
    assert.is_true(tonumber(a.bytes_sent) > 10 + #"HTTP/1.1 200 OK\r\n")
    assert.equal("example.test", a.server_name)
    assert.equal(a.connection, b.connection)   -- one kept-alive connection
    assert.not_equal(a.connection, c.connection)
    assert.equal("1", a.connection_requests)
    assert.equal("2", b.connection_requests)
    assert.matches("^%d+%.%d%d%d$", a.msec)
    assert.is_true(math.abs(tonumber(a.msec) - ngx.now()) < 60)
    assert.equal("http", a.scheme)
    assert.equal("", a.https)
    assert.equal("POST /p?i=1 HTTP/1.1", a.request)
  end)

  it("ngx.var.scheme and https say so on a TLS listener", function()
    local dir = h.tmpdir()
    defer(function() h.must("rm -rf " .. h.shell_quote(dir)) end)
    h.tls_ca(dir, "ca")
    local cert, key = h.tls_cert(dir, "srv", "localhost", "subjectAltName=IP:127.0.0.1")
    local port = h.http_serve(function()
      ngx.print(ngx.var.scheme, " ", ngx.var.https)
    end, { ssl_cert = cert, ssl_key = key })
    local code, out, err = h.sh(("curl -s --cacert %s https://127.0.0.1:%d/"):format(h.shell_quote(dir .. "/ca.pem"), port))
    assert.equal(0, code, err)
    assert.equal("https on", out)
  end)

  it("an unknown ngx.var name is nil and logged once at warn", function()
    local code, out, err = run([[
local cohost = require "cohost"
require "cohost.ngx"
local http = require "cohost.http"
local listener = http.listen("127.0.0.1:0", function()
  ngx.print(tostring(ngx.var.no_such_var), tostring(ngx.var.no_such_var), tostring(ngx.var.http_absent))
end)
local _, port = listener:addr()
cohost.spawn(function()
  for _ = 1, 2 do
    local res = assert(http.request("http://127.0.0.1:" .. port .. "/"))
    io.write(res.body, "\n")
  end
  cohost.shutdown()
end)
]])
    assert.equal(0, code, err)
    assert.equal("nilnilnil\nnilnilnil\n", out)
    local _, n = err:gsub("%[warn%][^\n]*ngx%.var%.no_such_var is not a variable cohost knows", "")
    assert.equal(1, n, err)
    assert.not_matches("http_absent", err, 1, true)
  end)

  it("ngx.header.content_type and the like go out in nginx's case", function()
    local base, port = serve(function()
      ngx.header.content_type = "text/plain"
      ngx.header.content_length = 2
      ngx.header.last_modified = "Thu, 01 Jan 1970 00:00:00 GMT"
      ngx.header.x_custom_thing = "kept"
      ngx.print("ok")
    end)
    local out = raw(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert.matches("\r\nContent%-Type: text/plain\r\n", out)
    assert.matches("\r\nContent%-Length: 2\r\n", out)
    assert.matches("\r\nLast%-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n", out)
    assert.matches("\r\nx%-custom%-thing: kept\r\n", out)   -- as nginx: as spelled
    assert.not_matches("content%-type", out)
  end)

  it("ngx.ctx is per request, and get_phase says 'content'", function()
    local base = serve(function()
      assert.equal("content", ngx.get_phase())
      local n = tonumber(ngx.var.arg_n)
      ngx.ctx.n = n
      ngx.sleep(0.05)   -- the other requests run meanwhile
      assert.equal(n, ngx.ctx.n)
      ngx.ctx = { replaced = n }
      ngx.print(ngx.ctx.replaced)
    end)
    local bodies = h.run_all(5, function(i) return get(base .. "/?n=" .. i).body end)
    assert.same({ "1", "2", "3", "4", "5" }, bodies)
  end)

  it("threads spawned from a handler share its request", function()
    local base = serve(function()
      ngx.ctx.who = "parent"
      local t = ngx.thread.spawn(function()
        ngx.sleep(0.01)
        ngx.say("from thread, ctx ", ngx.ctx.who, ", uri ", ngx.var.uri)
        return "done"
      end)
      local ok, res = ngx.thread.wait(t)
      ngx.say(tostring(ok), " ", res)
    end)
    local r = get(base .. "/t")
    assert.equal("from thread, ctx parent, uri /t\ntrue done\n", r.body)
  end)

  it("raises a clear error when the request API is used outside a request", function()
    assert.has_error(function() ngx.say("x") end,
                     "ngx.say: no request found (call it from a cohost.http handler)")
    assert.has_error(function() return ngx.var.uri end)
    assert.has_error(function() return ngx.status end)
    assert.has_error(function() ngx.header.x = 1 end)
    assert.has_error(function() ngx.req.get_headers() end)
  end)
end)
