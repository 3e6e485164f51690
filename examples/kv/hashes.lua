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
local bulk, int = resp.bulk, resp.int
local NULL, WRONGTYPE = resp.NULL, resp.WRONGTYPE
local type = type

local M = {}

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
  return { kind = "hash", n = h.n, f = f }
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
      h = { kind = "hash", n = 0, f = {} }
      set(k, h)
    end
    local f, added = h.f, 0
    for i = 3, argc, 2 do
      local field = argv[i]
      if f[field] == nil then added = added + 1 end
      f[field] = argv[i + 1]
    end
    h.n = h.n + added
    R.prop = true
    return put(out, n, ok_reply and resp.OK or int(added))
  end
end
reg("hset", -4, hset("hset", false), { write = true })
reg("hmset", -4, hset("hmset", true), { write = true })

reg("hget", 3, function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  local v = h and h.f[argv[3]]
  if not v then return put(out, n, NULL) end
  return bulk(out, n, v)
end)

reg("hmget", -3, function(_, argv, argc, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  n = n + 1
  out[n] = resp.array_head(argc - 2)
  for i = 3, argc do
    local v = h and h.f[argv[i]]
    if not v then
      n = n + 1
      out[n] = NULL
    else
      n = bulk(out, n, v)
    end
  end
  return n
end)

reg("hdel", -3, function(_, argv, argc, out, n)
  local k = argv[2]
  local h = hash_at(k)
  if h == nil then return put(out, n, WRONGTYPE) end
  local removed = 0
  if h then
    local f = h.f
    for i = 3, argc do
      if f[argv[i]] ~= nil then
        f[argv[i]] = nil
        removed = removed + 1
      end
    end
    h.n = h.n - removed
    if h.n == 0 then store.del(k) end
  end
  if removed > 0 then R.prop = true end
  return put(out, n, int(removed))
end, { write = true })

reg("hexists", 3, function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, (h and h.f[argv[3]] ~= nil) and resp.ONE or resp.ZERO)
end)

reg("hlen", 2, function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(h and h.n or 0))
end)

reg("hgetall", 2, function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  if not h then return put(out, n, resp.EMPTY_ARRAY) end
  n = n + 1
  out[n] = resp.array_head(h.n * 2)
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
reg("hkeys", 2, hlist(true))
reg("hvals", 2, hlist(false))

reg("hsetnx", 4, function(_, argv, _, out, n)
  local k = argv[2]
  local h = hash_at(k)
  if h == nil then return put(out, n, WRONGTYPE) end
  if h and h.f[argv[3]] ~= nil then return put(out, n, resp.ZERO) end
  if not h then
    h = { kind = "hash", n = 0, f = {} }
    set(k, h)
  end
  h.f[argv[3]] = argv[4]
  h.n = h.n + 1
  R.prop = true
  return put(out, n, resp.ONE)
end, { write = true })

reg("hstrlen", 3, function(_, argv, _, out, n)
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  local v = h and h.f[argv[3]] or nil
  return put(out, n, int(v and #v or 0))
end)

-- HINCRBY key field increment (int64, Redis's overflow error).
reg("hincrby", 4, function(_, argv, _, out, n)
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
    h = { kind = "hash", n = 0, f = {} }
    set(k, h)
  end
  if not v then h.n = h.n + 1 end
  local s = ints.str(r)
  h.f[argv[3]] = s
  R.prop = true
  return put(out, n, ":" .. s .. "\r\n")
end, { write = true })

-- HINCRBYFLOAT key field increment: logged as HSET of the result, as Redis.
reg("hincrbyfloat", 4, function(_, argv, _, out, n)
  local by = strings.float_arg(argv[4])
  if not by then return put(out, n, "-ERR value is not a valid float\r\n") end
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
    h = { kind = "hash", n = 0, f = {} }
    set(k, h)
  end
  if not v then h.n = h.n + 1 end
  local s = strings.float_str(r)
  h.f[argv[3]] = s
  R.prop = resp.encode({ "HSET", k, argv[3], s }, 4)
  return bulk(out, n, s)
end, { write = true })

-- HRANDFIELD key [count [WITHVALUES]]: count > 0 distinct fields, < 0
-- with repeats. O(n): the fields are listed first (Redis samples its
-- dict; a hash here has no array to pick from).
reg("hrandfield", -2, function(_, argv, argc, out, n)
  local count, withvalues
  if argc >= 3 then
    count = ints.parse(argv[3])
    if count == nil then return put(out, n, resp.NOT_INT) end
    count = tonumber(count)
    if argc == 4 then
      if argv[4]:lower() ~= "withvalues" then return put(out, n, resp.SYNTAX) end
      withvalues = true
    elseif argc > 4 then
      return put(out, n, resp.SYNTAX)
    end
  end
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  if not h then return put(out, n, count and resp.EMPTY_ARRAY or NULL) end
  local fields = {}
  for field in pairs(h.f) do fields[#fields + 1] = field end
  local random = math.random
  if not count then return bulk(out, n, fields[random(#fields)]) end
  local pick = {}
  if count < 0 then
    for i = 1, -count do pick[i] = fields[random(#fields)] end
  else
    for i = #fields, 2, -1 do
      local j = random(i)
      fields[i], fields[j] = fields[j], fields[i]
    end
    for i = 1, math.min(count, #fields) do pick[i] = fields[i] end
  end
  n = put(out, n, resp.array_head(#pick * (withvalues and 2 or 1)))
  for _, field in ipairs(pick) do
    n = bulk(out, n, field)
    if withvalues then n = bulk(out, n, h.f[field]) end
  end
  return n
end)

-- HSCAN key cursor [MATCH pattern] [COUNT count]: the whole hash in one
-- reply, as SSCAN.
reg("hscan", -3, function(_, argv, argc, out, n)
  local match, err = require("kv.sets").scan_args(argv, argc)
  if match == nil then return put(out, n, err) end
  local h = hash_at(argv[2])
  if h == nil then return put(out, n, WRONGTYPE) end
  local t, m = {}, 0
  if h then
    for field, v in pairs(h.f) do
      if not match or match(field) then
        t[m + 1], t[m + 2] = field, v
        m = m + 2
      end
    end
  end
  n = put(out, n, "*2\r\n$1\r\n0\r\n")
  return strings.bulk_array(out, n, t, m)
end)

return M
