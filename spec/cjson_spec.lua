-- require "cjson" and "cjson.safe" inside cohost (lua/cohost/cjson.lua,
-- preloaded by host/main.c; docs/lua-api.md): Debian's lua-cjson C module
-- with an encode that writes arrays marked by http.array (or
-- cjson.empty_array_mt) as [] when empty; everything else the C module's.
local http = require "cohost.http"
local cjson = require "cjson"
local safe = require "cjson.safe"

-- The C module as plain Lua would load it, for comparison.
local so = assert(package.searchpath("cjson", package.cpath))
local raw = assert(package.loadlib(so, "luaopen_cjson"))()

describe("require \"cjson\" under cohost", function()
  it("writes a table marked by http.array as [] when it is empty, and leaves the value alone", function()
    local v = { items = http.array(), tags = {}, list = http.array { 1, 2 }, deep = { { a = http.array() } } }
    local s = cjson.encode(v)
    assert.same({ items = {}, tags = {}, list = { 1, 2 }, deep = { { a = {} } } }, cjson.decode(s))
    assert.truthy(s:find('"items":[]', 1, true))
    assert.truthy(s:find('"a":[]', 1, true))
    assert.truthy(s:find('"tags":{}', 1, true))
    assert.equal("[]", cjson.encode(http.array()))
    assert.equal(http.array_mt, getmetatable(v.items))   -- not swapped for good
    assert.equal(0, #v.items)
  end)

  it("is what cjson.safe gives too, whose encode returns nil, err instead of raising", function()
    assert.equal('{"a":[]}', safe.encode({ a = http.array() }))
    local s, err = safe.encode({ a = http.array(), f = print })
    assert.is_nil(s)
    assert.equal("Cannot serialise function: type not supported", err)
    assert.has_error(function() cjson.encode({ a = http.array(), f = print }) end)
  end)

  it("raises at the caller's line, as lua-cjson does", function()
    local ok, err = pcall(function() local s = cjson.encode({ a = http.array(), f = print }) return s end)
    assert.is_false(ok)
    assert.matches("^spec/cjson_spec%.lua:%d+: Cannot serialise function: type not supported$", err)
  end)

  it("encodes with the C module: new() instances keep their own settings and honour the mark", function()
    local c = cjson.new()
    c.encode_max_depth(2)
    local ok, err = pcall(c.encode, { { { http.array() } } })
    assert.is_false(ok)
    assert.equal("Cannot serialise, excessive nesting (3)", err)
    assert.equal("[[]]", c.encode({ http.array() }))
    assert.equal("[[[]]]", cjson.encode({ { http.array() } }))   -- the module's own settings are untouched
    local s = safe.new()
    assert.is_nil((s.encode(print)))
    assert.equal('{"x":[]}', s.encode({ x = http.array() }))
  end)

  it("decodes, and knows null, with lua-cjson's own C functions", function()
    assert.equal("C", debug.getinfo(cjson.decode, "S").what)
    assert.equal("C", debug.getinfo(cjson.encode_max_depth, "S").what)
    assert.equal(raw.null, cjson.null)
    assert.equal(raw._VERSION, cjson._VERSION)
    assert.same({ a = { 1, cjson.null } }, cjson.decode('{"a":[1,null]}'))
    assert.same(raw.decode('{"k":[]}'), cjson.decode('{"k":[]}'))
    -- Unmarked values encode byte for byte as lua-cjson does.
    local v = { 1, 2.5, "x\0y/", { n = cjson.null, t = true } }
    assert.equal(raw.encode(v), cjson.encode(v))
  end)

  it("has OpenResty's cjson.empty_array_mt, the same mark", function()
    local s = cjson.encode({ a = setmetatable({}, cjson.empty_array_mt), b = {} })
    assert.truthy(s == '{"a":[],"b":{}}' or s == '{"b":{},"a":[]}', s)   -- in either key order
    assert.equal(http.array_mt, safe.empty_array_mt)
  end)

  it("writes int64 and uint64 cdata as their exact digits, as values and as keys", function()
    local v = { a = -9223372036854775808LL, b = 18446744073709551615ULL, list = { 9007199254740993LL, 1 } }
    assert.equal('{"list":[9007199254740993,1]}', cjson.encode({ list = v.list }))
    local s = cjson.encode(v)
    assert.truthy(s:find('"a":-9223372036854775808', 1, true), s)
    assert.truthy(s:find('"b":18446744073709551615', 1, true), s)
    assert.equal('{"42":"k"}', safe.encode({ [42ULL] = "k" }))
    assert.equal('{"n":7,"e":[]}', cjson.encode({ n = 7LL, e = http.array() }):gsub('^{"e":%[%],"n":7}$', '{"n":7,"e":[]}'))
    assert.equal(-9223372036854775808LL, v.a)   -- the caller's values are left alone
    -- Other cdata are refused as before.
    assert.is_nil((safe.encode({ p = require("ffi").new("int[1]") })))
  end)

  it("is what require gives whatever package.path and package.cpath say", function()
    package.loaded["cjson"] = nil
    local path, cpath = package.path, package.cpath
    package.path, package.cpath = "./?.lua", so:gsub("cjson%.so$", "?.so")
    local again = require "cjson"
    package.path, package.cpath = path, cpath
    assert.equal('{"a":[]}', again.encode({ a = http.array() }))
    package.loaded["cjson"] = cjson
  end)
end)
