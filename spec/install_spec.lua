-- make install as a user runs it, into a DESTDIR staging tree: the
-- installed cohost finds its own Lua modules whatever PREFIX the build
-- had, and an outside C program that includes <poll.h> and "cohost.h"
-- builds with pkg-config's flags alone and runs (docs/runtime.md,
-- docs/cli.md "Installing"). Also the build tree's way: runtime/include/
-- and build/libcohost.a.
local h = require "spec.helper"
h.cleanups(after_each)
local q = h.shell_quote

local root = h.root == "" and "." or h.root:gsub("/$", "")
local PROGRAM = h.root .. "spec/c/outside/program.c"

-- The sanitizers the build has (make test SAN=...; build/.san): make
-- install gets the same SAN, so its `all` rebuilds nothing, and the
-- outside program links the same runtime, which needs them.
local SAN = (h.try_slurp(h.root .. "build/.san") or ""):gsub("%s+$", "")
local CC = "cc -Wall -Wextra -Werror" .. (SAN ~= "" and " -fsanitize=" .. SAN or "")

-- make install DESTDIR=<a new dir> PREFIX=prefix; returns the DESTDIR.
-- The parent make's MAKEFLAGS (its jobserver, its SAN) stay out.
local function install(prefix)
  local dest = h.tmpdir()
  local code, out, err = h.sh(("cd %s && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s --no-print-directory SAN=%s install DESTDIR=%s PREFIX=%s")
    :format(q(root), q(SAN), q(dest), q(prefix)), 300)
  assert(code == 0, "make install failed: " .. out .. err)
  return dest
end

-- Builds PROGRAM with flags (after the source) into dir and runs it.
local function build_and_run(dir, flags)
  local exe = dir .. "/program"
  local code, out, err = h.sh(("%s %s %s -o %s"):format(CC, q(PROGRAM), flags, q(exe)), 60)
  assert.are.same({ 0, "" }, { code, err }, "cc " .. flags .. ": " .. out .. err)
  code, out, err = h.sh(q(exe), 30)
  assert.are.same({ 0, "read: hello\n", "" }, { code, out, err })
end

describe("make install", function()
  it("installs a cohost that finds its own Lua modules under any PREFIX", function()
    local dest = install("/opt/cohost-spec")
    local script = h.tmpfile([[
local http = require "cohost.http"
print(type(http.listen), package.searchpath("cohost.http", package.path))
]])
    local code, out, err = h.sh(("%s/opt/cohost-spec/bin/cohost %s"):format(q(dest), q(script)))
    assert.are.same({ 0, "" }, { code, err })
    -- Its own copy, not one that happens to be installed elsewhere.
    local kind, path = out:match("^(%S+)\t(%S+)\n$")
    assert.equal("function", kind)
    assert.equal(dest .. "/opt/cohost-spec/", path:sub(1, #dest + 17))
  end)

  it("installs cohost.h, libcohost.a and cohost.pc, which build and link an outside C program", function()
    local dest = install("/usr")
    assert.is_truthy(h.try_slurp(dest .. "/usr/include/cohost.h"))
    assert.is_truthy(h.try_slurp(dest .. "/usr/lib/libcohost.a"))
    -- Nothing but cohost.h goes to the include directory.
    assert.are.same({ "cohost.h" }, h.ls(dest .. "/usr/include"))
    local pc = h.slurp(dest .. "/usr/lib/pkgconfig/cohost.pc")
    assert.truthy(pc:find("prefix=/usr\n", 1, true), pc)
    local env = ("PKG_CONFIG_SYSROOT_DIR=%s PKG_CONFIG_LIBDIR=%s"):format(q(dest), q(dest .. "/usr/lib/pkgconfig"))
    local code, flags, err = h.sh(env .. " pkg-config --cflags --libs cohost")
    assert.are.same({ 0, "" }, { code, err })
    build_and_run(dest, (flags:gsub("%s+$", "")))
  end)
end)

describe("the build tree's runtime", function()
  it("builds and links an outside C program with runtime/include and build/libcohost.a", function()
    -- docs/runtime.md's line (-luring is there by default, IO_URING=1).
    build_and_run(h.tmpdir(), ("-I%s %s -luring -ldl -lpthread")
      :format(q(h.root .. "runtime/include"), q(h.root .. "build/libcohost.a")))
  end)
end)
