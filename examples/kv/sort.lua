-- SORT and SORT_RO: the elements of a list, set or sorted set, by their
-- own value or by other keys' (BY pattern, "*" the element, "->field" a
-- hash field), numbers or ALPHA, ASC or DESC, a LIMIT, GET patterns
-- ("#" the element itself) and STORE into a list. Replies, error texts and
-- the order arguments are checked in are Redis 7.0's (sort.c).
--
-- The sort is a stable merge sort in Lua (the JIT compiles it): Redis
-- sorts with glibc's qsort, a stable merge sort too, so elements that
-- compare equal (ALPHA BY keys that are missing or equal) keep their
-- order, a list's as it is. A set and a sorted set are taken in kv's own
-- order (a set's members array, a sorted set's skiplist), where Redis
-- takes its hash table's; only such ties can show it. ALPHA compares
-- bytes; Redis compares with strcoll in its locale unless it STOREs,
-- the same in the C locale it usually runs with.
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local lists = require "kv.lists"
local strings = require "kv.strings"
local ints = require "kv.ints"

local reg = R.register
local get = store.get
local put, int, bulk, null = resp.put, resp.int, resp.bulk, resp.null
local WRONGTYPE, NOT_INT, SYNTAX = resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local parse_int = ints.parse
local find, sub, lower, match = string.find, string.sub, string.lower, string.match
local type, tonumber, huge = type, tonumber, math.huge

local M = {}

-- -- Patterns ----------------------------------------------------------------

-- Redis's lookupKeyByPattern: the value pattern names for element el:
-- "#" is el; else the first "*" is replaced by el, and a "->field" after
-- it (with something after the arrow) reads that field of a hash. A
-- string's value (a counter as its digits), a hash field's, or nil (no
-- "*", no key, another type, no field).
local function lookup(pattern, el)
  if pattern == "#" then return el end
  local star = find(pattern, "*", 1, true)
  if not star then return nil end
  local arrow = find(pattern, "->", star + 1, true)
  local field
  if arrow and arrow + 2 <= #pattern then
    field = sub(pattern, arrow + 2)
  else
    arrow = #pattern + 1
  end
  local v = get(sub(pattern, 1, star - 1) .. el .. sub(pattern, star + 1, arrow - 1))
  if v == nil then return nil end
  if field then
    if type(v) ~= "table" or v.kind ~= "hash" then return nil end
    return v.f[field]
  end
  v = strings.str(v)
  if v == nil then return nil end
  return type(v) == "number" and tostring(v) or v
end
M.lookup = lookup

-- A score as strtod reads one for SORT: leading blanks skipped, the rest
-- a C float literal (decimal, hexadecimal, inf, infinity); the empty
-- string is 0 (strtod stops at once, at the string's end). nil for
-- anything else, NaN, or a decimal that overflows or underflows (strtod's
-- ERANGE).
local function score_of(s)
  local i = find(s, "[^ \t\n\v\f\r]")
  if not i then return s == "" and 0 or nil end
  local body = lower(sub(s, i))
  local sign, rest = match(body, "^([+-]?)(.*)$")
  if rest == "inf" or rest == "infinity" then return sign == "-" and -huge or huge end
  local hex = sub(rest, 1, 2) == "0x"
  if hex then
    if not (match(rest, "^0x%x*%.?%x*$") or match(rest, "^0x%x*%.?%x*p[+-]?%d+$")) then return nil end
  elseif not (match(rest, "^%d+%.?%d*$") or match(rest, "^%.%d+$")
              or match(rest, "^%d+%.?%d*e[+-]?%d+$") or match(rest, "^%.%d+e[+-]?%d+$")) then
    return nil
  end
  local v = tonumber(body)
  if v == nil or v ~= v or v == huge or v == -huge then return nil end
  if not hex and v ~= 0 and v > -2.2250738585072014e-308 and v < 2.2250738585072014e-308 then
    return nil   -- subnormal: ERANGE
  end
  if not hex and v == 0 and find(match(rest, "^[^e]*"), "[1-9]") then return nil end   -- underflow
  return v
end
M.score_of = score_of

-- -- Sorting ------------------------------------------------------------------

-- A stable merge sort of the indexes idx[1..n] by cmp(a, b) -> < 0, 0 or
-- > 0 (equal ones keep their order). O(n log n).
local function stable_sort(idx, n, cmp)
  local a, b = idx, {}
  local width = 1
  while width < n do
    local i = 1
    while i <= n do
      local mid, hi = i + width, i + 2 * width
      if mid > n + 1 then mid = n + 1 end
      if hi > n + 1 then hi = n + 1 end
      local l, r, k = i, mid, i
      while l < mid and r < hi do
        if cmp(a[l], a[r]) <= 0 then
          b[k] = a[l]
          l = l + 1
        else
          b[k] = a[r]
          r = r + 1
        end
        k = k + 1
      end
      while l < mid do b[k] = a[l]; l, k = l + 1, k + 1 end
      while r < hi do b[k] = a[r]; r, k = r + 1, k + 1 end
      i = hi
    end
    a, b = b, a
    width = width * 2
  end
  return a
end

local function bytes_cmp(x, y)
  if x == y then return 0 end
  return x < y and -1 or 1
end

-- The keys of a SORT: the key, and the last STORE's destination
-- (Redis's sortGetKeys: LIMIT, GET and BY skip their arguments).
local SKIP = { limit = 2, get = 1, by = 1 }
local function store_key(argv, argc)
  local at
  local i = 3
  while i <= argc do
    local w = lower(argv[i])
    if SKIP[w] then
      i = i + SKIP[w]
    elseif w == "store" and i < argc then
      at = i + 1
    end
    i = i + 1
  end
  return at
end

-- -- SORT ---------------------------------------------------------------------

-- The elements of v (list, set or zset) in its own order, or in the range
-- first..last (0-based) of it, from the top with desc (the BY-constant
-- case of a list or sorted set, which Redis reads that way).
local function elements(v, first, last, desc)
  local t, n = {}, 0
  if v.kind == "list" then
    local all = lists.elements(v)
    if first then
      local len = #all
      for i = first, last do
        n = n + 1
        t[n] = desc and all[len - i] or all[i + 1]
      end
    else
      t, n = all, #all
    end
  elseif v.kind == "set" then
    for i = 1, v.n do t[i] = v.a[i] end
    n = v.n
  else
    local len = v.n
    local x = v.zl.head[1]
    local all = {}
    for i = 1, len do
      all[i] = x.m
      x = x[1]
    end
    if first then
      for i = first, last do
        n = n + 1
        t[n] = desc and all[len - i] or all[i + 1]
      end
    else
      t, n = all, len
    end
  end
  return t, n
end

local function sort_generic(ro)
  return function(_, argv, argc, out, n)
    local desc, alpha, dontsort = false, false, false
    local limit_start, limit_count = 0, -1
    local sortby, storekey
    local gets = {}
    local j = 3
    while j <= argc do
      local o, left = lower(argv[j]), argc - j
      if o == "asc" then
        desc = false
      elseif o == "desc" then
        desc = true
      elseif o == "alpha" then
        alpha = true
      elseif o == "limit" and left >= 2 then
        limit_start, limit_count = parse_int(argv[j + 1]), parse_int(argv[j + 2])
        if limit_start == nil or limit_count == nil then return put(out, n, NOT_INT) end
        j = j + 2
      elseif not ro and o == "store" and left >= 1 then
        storekey = argv[j + 1]
        j = j + 1
      elseif o == "by" and left >= 1 then
        sortby = argv[j + 1]
        -- A pattern without "*" names one key for all: nothing to sort by.
        if not find(sortby, "*", 1, true) then dontsort = true end
        j = j + 1
      elseif o == "get" and left >= 1 then
        gets[#gets + 1] = argv[j + 1]
        j = j + 1
      else
        return put(out, n, SYNTAX)
      end
      j = j + 1
    end
    local v = get(argv[2])
    if v ~= nil and (type(v) ~= "table" or (v.kind ~= "list" and v.kind ~= "set" and v.kind ~= "zset")) then
      return put(out, n, WRONGTYPE)
    end
    -- A set has no order of its own to keep: stored, it is sorted ALPHA
    -- so the result is the same wherever it is replayed.
    if dontsort and v and v.kind == "set" and storekey then
      dontsort, alpha, sortby = false, true, nil
    end
    local len = v and v.n or 0
    limit_start, limit_count = tonumber(limit_start), tonumber(limit_count)
    local start = limit_start < 0 and 0 or limit_start
    if start > len then start = len end
    local count = limit_count < -1 and -1 or limit_count
    if count > len then count = len end
    local stop = count < 0 and len - 1 or start + count - 1
    if start >= len then start, stop = len - 1, len - 2 end
    if stop >= len then stop = len - 1 end
    local els, nel = {}, 0
    if v then
      if dontsort and v.kind ~= "set" and (start ~= 0 or stop ~= len - 1) then
        if stop >= start then els, nel = elements(v, start, stop, desc) end
        stop, start = stop - start, 0
      elseif dontsort and v.kind ~= "set" then
        els, nel = elements(v, 0, len - 1, desc)
      else
        els, nel = elements(v)
      end
    end
    local order = {}
    for i = 1, nel do order[i] = i end
    if not dontsort then
      local keys, bad = {}, false
      for i = 1, nel do
        local by = els[i]
        if sortby then by = lookup(sortby, els[i]) end
        if alpha then
          if sortby then keys[i] = by end
        elseif by ~= nil then
          local sc = score_of(by)
          if sc == nil then bad = true end
          keys[i] = sc or 0
        else
          keys[i] = 0
        end
      end
      if bad then return put(out, n, "-ERR One or more scores can't be converted into double\r\n") end
      local cmp
      if not alpha then
        cmp = function(a, b)
          local x, y = keys[a], keys[b]
          if x ~= y then return x < y and -1 or 1 end
          return bytes_cmp(els[a], els[b])
        end
      elseif sortby then
        cmp = function(a, b)
          local x, y = keys[a], keys[b]
          if x == nil or y == nil then
            if x == y then return 0 end
            return x == nil and -1 or 1
          end
          return bytes_cmp(x, y)
        end
      else
        cmp = function(a, b) return bytes_cmp(els[a], els[b]) end
      end
      if desc then
        local asc = cmp
        cmp = function(a, b) return -asc(a, b) end
      end
      order = stable_sort(order, nel, cmp)
    end
    local rows = stop - start + 1
    if rows < 0 then rows = 0 end
    local outputlen = #gets > 0 and #gets * rows or rows
    if not storekey then
      n = resp.array(out, n, outputlen)
      for i = start + 1, stop + 1 do
        local el = els[order[i]]
        if #gets == 0 then n = bulk(out, n, el) end
        for g = 1, #gets do
          local val = lookup(gets[g], el)
          if val == nil then n = null(out, n) else n = bulk(out, n, val) end
        end
      end
      return n
    end
    local t, m = {}, 0
    for i = start + 1, stop + 1 do
      local el = els[order[i]]
      if #gets == 0 then
        m = m + 1
        t[m] = el
      end
      for g = 1, #gets do
        m = m + 1
        t[m] = lookup(gets[g], el) or ""
      end
    end
    if m > 0 then
      store.set(storekey, lists.from(t, m))
      R.note("l", "sortstore", storekey)
      R.prop = true
    elseif store.del(storekey) then
      R.note("g", "del", storekey)
      R.prop = true
    end
    return put(out, n, int(outputlen))
  end
end

-- The keys of SORT for the dispatcher (the destination it writes) and for
-- COMMAND GETKEYS (the key, then the destination).
local function sort_writes(argv, argc, fn)
  local at = store_key(argv, argc)
  if at then fn(argv[at]) end
end
local function sort_keys(argv, argc)
  local t = { { 1, { "RO", "access" } } }
  local at = store_key(argv, argc)
  if at then t[2] = { at - 1, { "OW", "update" } } end
  return t
end
local function sort_ro_keys()
  return { { 1, { "RO", "access" } } }
end

reg("sort", sort_generic(false), { keys = sort_writes, getkeys = sort_keys })
reg("sort_ro", sort_generic(true), { getkeys = sort_ro_keys })

return M
