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

  it("writes a 64-bit integer cdata key as its digits (a protobuf map's), and leaves the value alone", function()
    assert.equal('{"42":"k"}', safe.encode({ [42ULL] = "k" }))
    assert.equal('{"-9223372036854775808":[1]}', cjson.encode({ [-9223372036854775808LL] = { 1 } }))
    local v = { by_id = { [18446744073709551615ULL] = 9007199254740993LL } }
    assert.equal('{"by_id":{"18446744073709551615":9007199254740993}}', cjson.encode(v))
    local k = next(v.by_id)
    assert.equal("cdata", type(k))   -- the caller's table still has its cdata key
    -- A key of another kind is refused as before.
    assert.is_nil((safe.encode({ [true] = 1 })))
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

  it("writes a 64-bit integer cdata as its digits and __jsonarray tables as []", function()
    assert.equal('[9223372036854775807,-9223372036854775808,18446744073709551615]',
                 cjson.encode({ 9223372036854775807LL, -9223372036854775807LL - 1, 18446744073709551615ULL }))
    assert.equal('{"a":[]}', safe.encode({ a = setmetatable({}, { __jsonarray = true }) }))
    -- Other cdata are still refused, with lua-cjson's message.
    local ok, err = pcall(cjson.encode, { require("ffi").new("int[1]") })
    assert.is_false(ok)
    assert.matches("cdata", err)
    local s, e = safe.encode({ require("ffi").new("int[1]") })
    assert.is_nil(s)
    assert.matches("cdata", e)
  end)
end)
