-- Hashes: HSET (and HMSET), HGET, HMGET, HDEL, HEXISTS, HGETALL, HLEN. A
-- hash is { kind = "hash", n = field count, f = { field = value } }; an
-- emptied hash is deleted, as in Redis.
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"

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

return M
