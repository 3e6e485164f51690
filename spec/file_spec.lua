-- cohost.file: regular files with write/read on the page cache and
-- fsync/fdatasync on the runtime's thread pool. Runs inside the host; the
-- pool checks run in a fresh child process, where nothing has started
-- the pool before.
local cohost = require "cohost"
local file = require "cohost.file"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local tmpdir = h.tmpdir   -- a fresh empty directory, removed after the test

describe("cohost.file.open", function()
  it("writes a string and an array of strings and numbers, and reads them back", function()
    local p = tmpdir() .. "/a"
    local f = assert(file.open(p, "w"))
    assert.equal(6, f:write("hello "))
    assert.equal(9, f:write({ "wor", "ld", 42, "!!" }))
    assert.is_true(f:close())
    assert.equal("hello world42!!", h.slurp(p))
  end)

  it("writes arrays longer than one writev batch in order", function()
    local p = tmpdir() .. "/many"
    local parts = {}
    for i = 1, 1000 do parts[i] = i .. "," end
    local f = assert(file.open(p, "w"))
    f:write(parts)
    f:close()
    assert.equal(table.concat(parts), h.slurp(p))
  end)

  it("reads n bytes at a time, '' at the end, and everything left without n", function()
    local p = tmpdir() .. "/r"
    h.write_file(p, "0123456789")
    local f = assert(file.open(p))
    assert.equal("012", f:read(3))
    assert.equal("3456789", f:read())
    assert.equal("", f:read(5))
    assert.equal(0, f:seek("set"))
    assert.equal("0123456789", f:read(100))
    f:close()
  end)

  it("reads from the start with 'a+' and always writes at the end", function()
    local p = tmpdir() .. "/log"
    h.write_file(p, "one\n")
    local f = assert(file.open(p, "a+"))
    assert.equal("on", f:read(2))
    f:write("two\n")
    assert.equal(0, f:seek("set"))
    assert.equal("one\ntwo\n", f:read())
    f:close()
  end)

  it("seeks and truncates without moving the position", function()
    local p = tmpdir() .. "/t"
    local f = assert(file.open(p, "w+"))
    f:write("abcdefgh")
    assert.equal(8, f:seek())
    assert.equal(2, f:seek("set", 2))
    assert.equal(6, f:seek("end", -2))
    assert.is_true(f:truncate(3))
    assert.equal(3, f:stat().size)
    assert.equal(6, f:seek("cur"))
    f:close()
    assert.equal("abc", h.slurp(p))
  end)

  it("creates with the given mode, and 'x' refuses an existing file", function()
    local p = tmpdir() .. "/m"
    local f = assert(file.open(p, "w", "600"))
    f:close()
    assert.equal(tonumber("600", 8), file.stat(p).mode)
    local g, err, code = file.open(p, "wx")
    assert.is_nil(g)
    assert.equal(p .. ": File exists", err)
    assert.equal(17, code)
  end)

  it("returns nil, 'path: message', errno for a missing file", function()
    local f, err, code = file.open("/nonexistent-dir/x")
    assert.is_nil(f)
    assert.equal("/nonexistent-dir/x: No such file or directory", err)
    assert.equal(2, code)
  end)

  it("raises for a bad mode string and for use after close", function()
    assert.has_error(function() file.open("/tmp/x", "q") end)
    local f = assert(file.open(tmpdir() .. "/c", "w"))
    assert.is_true(f:close())
    assert.has_error(function() f:write("x") end, "attempt to use a closed file")
    assert.has_error(function() f:close() end)
    assert.equal("file (closed)", tostring(f))
  end)

  it("returns nil, err, errno for a write on a read-only file", function()
    local p = tmpdir() .. "/ro"
    h.write_file(p, "x")
    local f = assert(file.open(p, "r"))
    local ok, err, code = f:write("y")
    assert.is_nil(ok)
    assert.equal("Bad file descriptor", err)
    assert.equal(9, code)
    f:close()
  end)
end)

describe("fsync and fdatasync", function()
  it("return true and leave the data readable", function()
    local p = tmpdir() .. "/s"
    local f = assert(file.open(p, "w"))
    f:write("durable")
    assert.is_true(f:fsync())
    assert.is_true(f:fdatasync())
    f:close()
    assert.equal("durable", h.slurp(p))
  end)

  it("run on the thread pool: the pool's threads appear at the first sync", function()
    -- In a fresh process the pool has no threads until its first call;
    -- an inline fsync would leave the thread count as it was.
    local dir = tmpdir()
    local script = dir .. "/pool.lua"
    h.write_file(script, [[
local file = require "cohost.file"
local pid = io.open("/proc/self/stat"):read("*n")
local function threads()
  local p = io.popen("ls /proc/" .. pid .. "/task | wc -l")
  local n = tonumber(p:read("*a"))
  p:close()
  return n
end
local f = assert(file.open(arg[1] .. "/x", "w"))
f:write("x")
local before = threads()
assert(f:fsync())
io.write(before, " ", threads(), "\n")
]])
    local code, out, err = h.run(h.shell_quote(script) .. " " .. h.shell_quote(dir))
    assert.equal(0, code, err)
    local before, after = out:match("^(%d+) (%d+)")
    assert.is_truthy(before, out)
    assert.is_true(tonumber(after) > tonumber(before), out)
  end)

  it("let other threads run while a large sync goes to the disk", function()
    local p = tmpdir() .. "/big"
    local f = assert(file.open(p, "w"))
    local chunk = string.rep("x", 1024 * 1024)
    for _ = 1, 64 do f:write(chunk) end
    local moved, took = h.measure(function() assert(f:fsync()) end, 0.001)
    f:close()
    -- A sync that takes time must not have stopped the ticker.
    if took > 0.02 then
      assert.is_true(moved >= 1, ("ticker moved %d times in %.3f s"):format(moved, took))
    end
  end)

  it("defer a close that comes during another thread's sync", function()
    local p = tmpdir() .. "/d"
    local f = assert(file.open(p, "w"))
    f:write(string.rep("y", 4 * 1024 * 1024))
    local t = cohost.spawn(function() return f:fsync() end)
    cohost.sleep(0)
    assert.is_true(f:close())
    assert.same({ true, true }, { cohost.wait(t) })
    assert.equal("file (closed)", tostring(f))
    assert.equal(4 * 1024 * 1024, file.stat(p).size)
  end)
end)

describe("path functions", function()
  it("rename, unlink, mkdir, rmdir and stat", function()
    local d = tmpdir()
    h.write_file(d .. "/a", "1")
    assert.is_true(file.rename(d .. "/a", d .. "/b"))
    assert.is_false(file.exists(d .. "/a"))
    assert.equal("file", file.stat(d .. "/b").type)
    assert.equal(1, file.stat(d .. "/b").size)
    assert.is_true(file.mkdir(d .. "/sub"))
    assert.equal("directory", file.stat(d .. "/sub").type)
    local ok, err, code = file.mkdir(d .. "/sub")
    assert.is_nil(ok)
    assert.equal(d .. "/sub: File exists", err)
    assert.equal(17, code)
    assert.is_true(file.rmdir(d .. "/sub"))
    assert.is_true(file.unlink(d .. "/b"))
    ok, err = file.unlink(d .. "/b")
    assert.is_nil(ok)
    assert.equal(d .. "/b: No such file or directory", err)
  end)

  it("mkdir_p makes missing parents and accepts an existing directory", function()
    local d = tmpdir()
    assert.is_true(file.mkdir_p(d .. "/x/y/z"))
    assert.is_true(file.mkdir_p(d .. "/x/y/z"))
    assert.equal("directory", file.stat(d .. "/x/y/z").type)
    h.write_file(d .. "/f", "")
    local ok, err = file.mkdir_p(d .. "/f")
    assert.is_nil(ok)
    assert.equal(d .. "/f: Not a directory", err)
  end)

  it("write_atomic replaces a file whole and leaves no temp file", function()
    local d = tmpdir()
    assert.is_true(file.write_atomic(d .. "/cfg", "v1"))
    assert.is_true(file.write_atomic(d .. "/cfg", { "v", "2" }))
    assert.equal("v2", file.read_all(d .. "/cfg"))
    local p = io.popen("ls -A " .. h.shell_quote(d))
    local names = p:read("*a")
    p:close()
    assert.equal("cfg\n", names)
  end)

  it("read_all gives nil, err for a missing file and sync_dir syncs a directory", function()
    local d = tmpdir()
    local data, err = file.read_all(d .. "/none")
    assert.is_nil(data)
    assert.equal(d .. "/none: No such file or directory", err)
    assert.is_true(file.sync_dir(d))
  end)
end)
