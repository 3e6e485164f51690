-- Hashes: HSET (and HMSET), HGET, HMGET, HDEL, HEXISTS, HGETALL, HLEN. A
-- hash is { kind = "hash", n = field count, f = { field = value } }; an
-- emptied hash is deleted, as in Redis.
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local ints = require "kv.ints"
local strings = require "kv.strings"

local reg = R.register
local get, set = store.get, store.set
local bulk, int, null = resp.bulk, resp.int, resp.null
local WRONGTYPE = resp.WRONGTYPE
local type = type
local account = store.account

local M = {}

local HASH_BYTES, FIELD_BYTES = 100, 90   -- a hash's tables; a field's strings and slot

local function new_hash()
  return { kind = "hash", n = 0, f = {}, bytes = HASH_BYTES }
end

-- Sets field of h to v (a string); returns true if the field is new.
local function put_field(h, field, v)
  local old = h.f[field]
  h.f[field] = v
  if old == nil then
    h.n = h.n + 1
    account(h, #field + #v + FIELD_BYTES)
    return true
  end
  account(h, #v - #old)
  return false
end

-- The hash at k: the hash, false for a missing key, nil for another type.
local function hash_at(k)
  local v = get(k)
  if v == nil then return false end
  if type(v) ~= "table" or v.kind ~= "hash" then return nil end
  return v
end

R.dumpers.hash = function(h)
  local t, n = {}, 0
  for field, v in pairs(h.f) do
    t[n + 1], t[n + 2] = field, v
    n = n + 2
  end
  return "HSET", t, n, 2
end

R.copiers.hash = function(h)
  local f = {}
  for field, v in pairs(h.f) do f[field] = v end
  return { kind = "hash", n = h.n, f = f, bytes = h.bytes }
end

-- HSET key field value [field value ...] -> fields added; HMSET -> OK.
local function hset(name, ok_reply)
  return function(_, argv, argc, out, n)
    if argc % 2 == 1 then
      return put(out, n, "-ERR wrong number of arguments for '" .. name .. "' command\r\n")
    end
    local k = argv[2]
    local h = hash_at(k)
    if h == nil then return put(out, n, WRONGTYPE) end
    if not h then
      h = new_hash()
      set(k, h)
    end
    local added = 0
    for i = 3, argc, 2 do
      if put_field(h, argv[i], argv[i + 1]) then added = added + 1 end
    end
    R.prop = true
    return put(out, n, ok_reply and resp.OK or int(added))
  end
end
reg("hset", hset("hset", false))
reg("hmset", hset("hmset", true))

reg("hget", function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  local v = h and h.f[argv[3]]
  if not v then return null(out, n) end
  return bulk(out, n, v)
end)

reg("hmget", function(_, argv, argc, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  n = n + 1
  out[n] = resp.array_head(argc - 2)
  for i = 3, argc do
    local v = h and h.f[argv[i]]
    if not v then
      n = null(out, n)
    else
      n = bulk(out, n, v)
    end
  end
  return n
end)

reg("hdel", function(_, argv, argc, out, n)
  local k = argv[2]
  local h = hash_at(k)
  if h == nil then return put(out, n, WRONGTYPE) end
  local removed = 0
  if h then
    local f = h.f
    for i = 3, argc do
      local field = argv[i]
      local old = f[field]
      if old ~= nil then
        f[field] = nil
        removed = removed + 1
        account(h, -(#field + #old + FIELD_BYTES))
      end
    end
    h.n = h.n - removed
    if h.n == 0 then store.del(k) end
  end
  if removed > 0 then R.prop = true end
  return put(out, n, int(removed))
end)

reg("hexists", function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, (h and h.f[argv[3]] ~= nil) and resp.ONE or resp.ZERO)
end)

reg("hlen", function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(h and h.n or 0))
end)

reg("hgetall", function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  if not h then return resp.map(out, n, 0) end
  n = resp.map(out, n, h.n)
  for field, v in pairs(h.f) do
    n = bulk(out, n, field)
    n = bulk(out, n, v)
  end
  return n
end)

-- HKEYS, HVALS
local function hlist(keys)
  return function(_, argv, _, out, n)
    local h = hash_at(argv[2])
    if h == nil then return put(out, n, WRONGTYPE) end
    if not h then return put(out, n, resp.EMPTY_ARRAY) end
    n = put(out, n, resp.array_head(h.n))
    for field, v in pairs(h.f) do n = bulk(out, n, keys and field or v) end
    return n
  end
end
reg("hkeys", hlist(true))
reg("hvals", hlist(false))

reg("hsetnx", function(_, argv, _, out, n)
  local k = argv[2]
  local h = hash_at(k)
  if h == nil then return put(out, n, WRONGTYPE) end
  if h and h.f[argv[3]] ~= nil then return put(out, n, resp.ZERO) end
  if not h then
    h = new_hash()
    set(k, h)
  end
  put_field(h, argv[3], argv[4])
  R.prop = true
  return put(out, n, resp.ONE)
end)

reg("hstrlen", function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  local v = h and h.f[argv[3]] or nil
  return put(out, n, int(v and #v or 0))
end)

-- HINCRBY key field increment (int64, Redis's overflow error).
reg("hincrby", function(_, argv, _, out, n)
  local by = ints.parse(argv[4])
  if by == nil then return put(out, n, resp.NOT_INT) end
  local k = argv[2]
  local h = hash_at(k)
  if h == nil then return put(out, n, WRONGTYPE) end
  local cur = 0
  local v = h and h.f[argv[3]] or nil
  if v then
    cur = ints.parse(v)
    if cur == nil then return put(out, n, "-ERR hash value is not an integer\r\n") end
  end
  local r = ints.add(cur, by)
  if r == nil then return put(out, n, "-ERR increment or decrement would overflow\r\n") end
  if not h then
    h = new_hash()
    set(k, h)
  end
  local s = ints.str(r)
  put_field(h, argv[3], s)
  R.prop = true
  return put(out, n, ":" .. s .. "\r\n")
end)

-- HINCRBYFLOAT key field increment: logged as HSET of the result, as Redis.
reg("hincrbyfloat", function(_, argv, _, out, n)
  local by = strings.float_arg(argv[4])
  if not by then return put(out, n, "-ERR value is not a valid float\r\n") end
  if by == math.huge or by == -math.huge then
    return put(out, n, "-ERR value is NaN or Infinity\r\n")
  end
  local k = argv[2]
  local h = hash_at(k)
  if h == nil then return put(out, n, WRONGTYPE) end
  local cur = 0
  local v = h and h.f[argv[3]] or nil
  if v then
    cur = strings.float_arg(v)
    if not cur then return put(out, n, "-ERR hash value is not a float\r\n") end
  end
  local r = cur + by
  if r ~= r or r == math.huge or r == -math.huge then
    return put(out, n, "-ERR increment would produce NaN or Infinity\r\n")
  end
  if not h then
    h = new_hash()
    set(k, h)
  end
  local s = strings.float_str(r)
  put_field(h, argv[3], s)
  R.prop = resp.encode({ "HSET", k, argv[3], s }, 4)
  return bulk(out, n, s)
end)

-- HRANDFIELD key [count [WITHVALUES]]: count > 0 distinct fields, < 0
-- with repeats; count is within -LONG_MAX..LONG_MAX, and with WITHVALUES
-- within half that (Redis 7.0 doubles it for the reply's length). O(n):
-- the fields are listed first (Redis samples its dict; a hash here has
-- no array to pick from). With repeats, RESP3 pairs each field with its
-- value.
local LONG_HALF = 4611686018427387903LL
reg("hrandfield", function(c, argv, argc, out, n)
  local count, withvalues
  if argc >= 3 then
    count = ints.parse(argv[3])
    if count == nil then return put(out, n, resp.NOT_INT) end
    if ints.is_min(count) then return put(out, n, resp.OUT_OF_RANGE) end
    if argc == 4 then
      if argv[4]:lower() ~= "withvalues" then return put(out, n, resp.SYNTAX) end
      withvalues = true
      if count > LONG_HALF or count < -LONG_HALF then
        return put(out, n, "-ERR value is out of range\r\n")
      end
    elseif argc > 4 then
      return put(out, n, resp.SYNTAX)
    end
    count = tonumber(count)
  end
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  if not h then
    if count then return resp.array(out, n, 0) end
    return null(out, n)
  end
  local fields = {}
  for field in pairs(h.f) do fields[#fields + 1] = field end
  local random = math.random
  if not count then return bulk(out, n, fields[random(#fields)]) end
  if count < 0 then
    -- With repeats: as SRANDMEMBER's (sets.lua), streamed when large.
    local values
    if withvalues then
      values = {}
      for i, field in ipairs(fields) do values[i] = h.f[field] end
    end
    return require("kv.sets").random_repeats(c, out, n, -count, fields, #fields, values)
  end
  local pairs3 = withvalues and resp.is3()
  local len = math.min(count, #fields)
  n = resp.array(out, n, (withvalues and not pairs3) and len * 2 or len)
  for i = #fields, 2, -1 do
    local j = random(i)
    fields[i], fields[j] = fields[j], fields[i]
  end
  for i = 1, len do
    if pairs3 then n = resp.array(out, n, 2) end
    n = bulk(out, n, fields[i])
    if withvalues then n = bulk(out, n, h.f[fields[i]]) end
  end
  return n
end)

-- HSCAN key cursor [MATCH pattern] [COUNT count]: the whole hash in one
-- reply, as SSCAN.
reg("hscan", function(_, argv, argc, out, n)
  local sets = require "kv.sets"
  if not strings.cursor(argv[3]) then return put(out, n, sets.INVALID_CURSOR) end
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  if not h then return put(out, n, sets.EMPTY_SCAN) end
  local match, err = sets.scan_args(argv, argc)
  if match == nil then return put(out, n, err) end
  local t, m = {}, 0
  for field, v in pairs(h.f) do
    if not match or match(field) then
      t[m + 1], t[m + 2] = field, v
      m = m + 2
    end
  end
  n = put(out, n, "*2\r\n$1\r\n0\r\n")
  return strings.bulk_array(out, n, t, m)
end)

return M
