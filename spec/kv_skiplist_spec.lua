-- examples/kv/skiplist.lua (the sorted sets' order) against a sorted
-- array, over random inserts, deletes and score changes: order, ranks,
-- the node at each rank, back links and range starts.
package.path = "examples/?.lua;" .. package.path
local sl = require "kv.skiplist"

local function before(a, b) return a.s < b.s or (a.s == b.s and a.m < b.m) end

-- Checks zl against the sorted array ref: order, back links, ranks, the
-- node at each rank, the tail and range starts.
local function check(zl, ref)
  assert.equal(#ref, zl.n)
  local x, prev = zl.head[1], nil
  for i, want in ipairs(ref) do
    assert.equal(want.m, x.m)
    assert.equal(prev, x.b)
    assert.equal(i, sl.rank(zl, x.s, x.m))
    assert.equal(x, sl.at(zl, i))
    prev, x = x, x[1]
  end
  assert.is_nil(x)
  assert.equal(prev, zl.tail)
  local first = sl.first_in(zl, function(n) return n.s >= 0 end)
  local want
  for _, r in ipairs(ref) do if r.s >= 0 then want = r.m break end end
  assert.equal(want, first and first.m)
  local last = sl.last_in(zl, function(n) return n.s <= 0 end)
  want = nil
  for _, r in ipairs(ref) do if r.s <= 0 then want = r.m end end
  assert.equal(want, last and last.m)
end

describe("kv's skiplist", function()
  it("keeps order, ranks and spans through random inserts and deletes", function()
    math.randomseed(12345)
    local zl, ref, scores = sl.new(), {}, {}
    for step = 1, 4000 do
      local m = "m" .. math.random(600)
      if scores[m] and math.random(3) == 1 then
        sl.delete(zl, scores[m], m)
        for i, x in ipairs(ref) do
          if x.m == m then table.remove(ref, i) break end
        end
        scores[m] = nil
      elseif not scores[m] then
        local s = math.random(50) - 25 + (math.random(2) == 1 and 0.5 or 0)
        sl.insert(zl, s, m)
        scores[m] = s
        ref[#ref + 1] = { m = m, s = s }
        table.sort(ref, before)
      end
      if step % 200 == 0 then check(zl, ref) end
    end
  end)

  it("builds from sorted members in one pass, and stays right through inserts and deletes after", function()
    math.randomseed(54321)
    for _, n in ipairs { 0, 1, 2, 7, 500 } do
      local ref, ms, ss = {}, {}, {}
      for i = 1, n do ref[i] = { m = "m" .. i, s = math.random(40) - 20 } end
      table.sort(ref, before)
      for i, r in ipairs(ref) do ms[i], ss[i] = r.m, r.s end
      local zl = sl.new()
      sl.build(zl, ms, ss, n)
      check(zl, ref)
      for step = 1, 300 do
        if #ref > 0 and math.random(2) == 1 then
          local r = table.remove(ref, math.random(#ref))
          sl.delete(zl, r.s, r.m)
        else
          local r = { m = "x" .. step, s = math.random(40) - 20 }
          sl.insert(zl, r.s, r.m)
          ref[#ref + 1] = r
          table.sort(ref, before)
        end
        if step % 50 == 0 then check(zl, ref) end
      end
    end
  end)
end)
