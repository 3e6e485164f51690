-- LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest
-- common subsequence of two strings, as Redis 7.0's lcsCommand finds it
-- (t_string.c): the dynamic programming table of LCS lengths, then a
-- walk back from its corner that spells the result and, with IDX, the
-- matching ranges (last first), so ties break the same way and the same
-- ranges come out. O(N*M) time and 4*(N+1)*(M+1) bytes of table, refused
-- past proto-max-bulk-len as Redis refuses it.
local ffi = require "ffi"
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local bytes = require "kv.bytes"
local ints = require "kv.ints"

local M = {}

local put, int, bulk = resp.put, resp.int, resp.bulk
local lower, tonumber, type = string.lower, tonumber, type

local u32, u8 = ffi.typeof("uint32_t[?]"), ffi.typeof("uint8_t[?]")

-- The value at k as a Lua string or buffer ("" when missing), or false
-- for another type. The caller holds it while it reads through
-- bytes.ptr.
local function string_value(k)
  local v = store.get(k)
  if v == nil then return "" end
  if type(v) == "number" then return tostring(v) end
  if type(v) == "table" and v.kind ~= "string" then return false end
  return v
end

R.register("lcs", function(_, argv, argc, out, n)
  local va, vb = string_value(argv[2]), string_value(argv[3])
  if va == false or vb == false then
    return put(out, n, "-ERR The specified keys must contain string values\r\n")
  end
  local getlen, getidx, withmatchlen, minmatchlen = false, false, false, 0
  local j = 4
  while j <= argc do
    local o = lower(argv[j])
    if o == "idx" then
      getidx = true
    elseif o == "len" then
      getlen = true
    elseif o == "withmatchlen" then
      withmatchlen = true
    elseif o == "minmatchlen" and j < argc then
      local m = ints.parse(argv[j + 1])
      if m == nil then return put(out, n, resp.NOT_INT) end
      minmatchlen = m < 0 and 0 or tonumber(m)
      j = j + 1
    else
      return put(out, n, resp.SYNTAX)
    end
    j = j + 1
  end
  if getlen and getidx then
    return put(out, n, "-ERR If you want both the length and indexes, please just use IDX.\r\n")
  end
  local a, alen = bytes.ptr(va)
  local b, blen = bytes.ptr(vb)
  local w = blen + 1
  if (alen + 1) * w * 4 > resp.MAX_BULK then
    return put(out, n, "-ERR Insufficient memory, transient memory for LCS exceeds "
               .. "proto-max-bulk-len\r\n")
  end
  local ok, t = pcall(u32, (alen + 1) * w)
  if not ok then
    return put(out, n, "-ERR Insufficient memory, failed allocating transient memory for LCS\r\n")
  end
  -- t[i * w + j]: the LCS length of a[0..i-1] and b[0..j-1]; row and
  -- column 0 stay 0 (ffi.new zero-fills).
  for i = 1, alen do
    local row, prev, ai = i * w, (i - 1) * w, a[i - 1]
    for jj = 1, blen do
      if ai == b[jj - 1] then
        t[row + jj] = t[prev + jj - 1] + 1
      else
        local l1, l2 = t[prev + jj], t[row + jj - 1]
        t[row + jj] = l1 > l2 and l1 or l2
      end
    end
  end
  local total = t[alen * w + blen]
  if getlen then return put(out, n, int(total)) end
  -- The walk back: the result's bytes from the end, and the ranges.
  local chars, ranges = u8(total > 0 and total or 1), {}
  local idx = total
  local i, jj = alen, blen
  local as, ae, bs, be = alen, 0, 0, 0   -- as == alen: no range open
  while i > 0 and jj > 0 do
    local emit = false
    if a[i - 1] == b[jj - 1] then
      chars[idx - 1] = a[i - 1]
      if as == alen then
        as, ae, bs, be = i - 1, i - 1, jj - 1, jj - 1
      elseif as == i and bs == jj then
        as, bs = as - 1, bs - 1
      else
        emit = true
      end
      if as == 0 or bs == 0 then emit = true end
      idx, i, jj = idx - 1, i - 1, jj - 1
    else
      if t[(i - 1) * w + jj] > t[i * w + jj - 1] then i = i - 1 else jj = jj - 1 end
      if as ~= alen then emit = true end
    end
    if emit then
      local len = ae - as + 1
      if minmatchlen == 0 or len >= minmatchlen then ranges[#ranges + 1] = { as, ae, bs, be, len } end
      as = alen
    end
  end
  if not getidx then
    return bulk(out, n, ffi.string(chars, total))
  end
  n = resp.map(out, n, 2)
  n = bulk(out, n, "matches")
  n = resp.array(out, n, #ranges)
  for _, r in ipairs(ranges) do
    n = resp.array(out, n, withmatchlen and 3 or 2)
    n = resp.array(out, n, 2)
    n = put(out, n, int(r[1]))
    n = put(out, n, int(r[2]))
    n = resp.array(out, n, 2)
    n = put(out, n, int(r[3]))
    n = put(out, n, int(r[4]))
    if withmatchlen then n = put(out, n, int(r[5])) end
  end
  n = bulk(out, n, "len")
  return put(out, n, int(total))
end)

return M
