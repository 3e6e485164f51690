-- String and keyspace commands: GET, SET and friends, counters, expiry,
-- DEL/EXISTS/TYPE, KEYS and SCAN, DBSIZE, FLUSHALL. Replies and error
-- texts are Redis 7.0's (t_string.c, expire.c, db.c).
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local ints = require "kv.ints"
local bytes = require "kv.bytes"

local reg = R.register
local get, set, read = store.get, store.set, store.read
local bulk, int, null = resp.bulk, resp.int, resp.null
local OK, WRONGTYPE, NOT_INT, SYNTAX = resp.OK, resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local lower, floor, format = string.lower, math.floor, string.format
local type, tonumber = type, tonumber
local parse_int = ints.parse

local M = {}

-- A string value as a Lua string or a counter, a buffer the bit commands
-- keep (kv/bytes.lua) flattened; nil for another type.
local function str(v)
  local t = type(v)
  if t == "cdata" then return bytes.flat(v) end
  if t ~= "table" then return v end
  return nil
end
M.str = str

local function invalid_expire(cmd)
  return "-ERR invalid expire time in '" .. cmd .. "' command\r\n"
end

-- An integer argument as a Lua number (int64 values past 2^53 lose
-- precision, which no expiry or count needs), or nil.
local function num_arg(s)
  local v = parse_int(s)
  if v == nil then return nil end
  return tonumber(v)
end
M.num_arg = num_arg

local SECONDS_MAX, SECONDS_MIN = 9223372036854775LL, -9223372036854775LL   -- LLONG_MAX/MIN / 1000

-- The deadline (Unix ms, exact: a number or an int64) that expiry
-- argument s asks for, checked as Redis 7.0 does (getExpireMillisecondsOrReply,
-- expireGenericCommand): in seconds (scale 1000) or ms, relative to now
-- or absolute; positive: SET's rule that it must be above 0. Returns it,
-- or nil and the error reply. Nothing out of int64 gets through: a
-- deadline is logged as its exact text, and must load again.
local function deadline_arg(s, name, scale, relative, positive)
  local v = parse_int(s)
  if v == nil then return nil, NOT_INT end
  if positive and v <= 0 then return nil, invalid_expire(name) end
  if scale == 1000 then
    if v > SECONDS_MAX or v < SECONDS_MIN then return nil, invalid_expire(name) end
    v = ints.mul(v, 1000)
  end
  if relative then
    v = ints.add(v, floor(store.now_ms()))
    if v == nil then return nil, invalid_expire(name) end
  end
  return v
end
M.deadline_arg = deadline_arg

-- -- Strings ---------------------------------------------------------------

reg("get", function(_, argv, _, out, n)
  local v = read(argv[2])
  if v == nil then return null(out, n) end
  v = str(v)
  if v == nil then return put(out, n, WRONGTYPE) end
  return bulk(out, n, v)
end)

-- SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
reg("set", function(_, argv, argc, out, n)
  local nx, xx, want_get, keep, unit, when
  local j = 4
  while j <= argc do
    local o = lower(argv[j])
    local nxt = argv[j + 1]
    local timed = unit ~= nil
    if o == "nx" and not xx then nx = true
    elseif o == "xx" and not nx then xx = true
    elseif o == "get" then want_get = true
    elseif o == "keepttl" and not timed then keep = true
    elseif (o == "ex" or o == "px" or o == "exat" or o == "pxat") and not keep
        and (not timed or unit == o) and j < argc then
      unit, when = o, nxt
      j = j + 1
    else
      return put(out, n, SYNTAX)
    end
    j = j + 1
  end
  local deadline
  if unit then
    local err
    deadline, err = deadline_arg(when, "set", (unit == "ex" or unit == "exat") and 1000 or 1,
                                 unit == "ex" or unit == "px", true)
    if not deadline then return put(out, n, err) end
  end
  local k = argv[2]
  local old = get(k)
  if want_get and old ~= nil then
    old = str(old)
    if old == nil then return put(out, n, WRONGTYPE) end
  end
  if (nx and old ~= nil) or (xx and old == nil) then
    if want_get and old ~= nil then return bulk(out, n, old) end
    return null(out, n)
  end
  set(k, argv[3], keep)
  if deadline then
    store.expire_at(k, tonumber(deadline))
    R.prop = resp.encode({ "SET", k, argv[3], "PXAT", ints.str(deadline) }, 5)
    R.note("$", "set", k)
    R.note("g", "expire", k)
  else
    R.prop = true
  end
  if want_get then
    if old == nil then return null(out, n) end
    return bulk(out, n, old)
  end
  return put(out, n, OK)
end)

reg("setnx", function(_, argv, _, out, n)
  if get(argv[2]) ~= nil then return put(out, n, resp.ZERO) end
  set(argv[2], argv[3])
  R.prop = true
  return put(out, n, resp.ONE)
end)

-- SETEX key seconds value, PSETEX key ms value.
local function setex(name, scale)
  return function(_, argv, _, out, n)
    local deadline, err = deadline_arg(argv[3], name, scale, true, true)
    if not deadline then return put(out, n, err) end
    local k = argv[2]
    set(k, argv[4])
    store.expire_at(k, tonumber(deadline))
    R.prop = resp.encode({ "SET", k, argv[4], "PXAT", ints.str(deadline) }, 5)
    R.note("$", "set", k)
    R.note("g", "expire", k)
    return put(out, n, OK)
  end
end
reg("setex", setex("setex", 1000))
reg("psetex", setex("psetex", 1))

reg("getset", function(_, argv, _, out, n)
  local k = argv[2]
  local old = get(k)
  if old ~= nil then
    old = str(old)
    if old == nil then return put(out, n, WRONGTYPE) end
  end
  set(k, argv[3])
  R.prop = true
  if old == nil then return null(out, n) end
  return bulk(out, n, old)
end)

reg("getdel", function(_, argv, _, out, n)
  local k = argv[2]
  local old = get(k)
  if old == nil then return null(out, n) end
  old = str(old)
  if old == nil then return put(out, n, WRONGTYPE) end
  store.del(k)
  R.prop = true
  return bulk(out, n, old)
end)

reg("mget", function(_, argv, argc, out, n)
  out[n + 1] = resp.array_head(argc - 1)
  n = n + 1
  for i = 2, argc do
    local v = read(argv[i])
    if v ~= nil then v = str(v) end
    if v ~= nil then
      n = bulk(out, n, v)
    else
      n = null(out, n)
    end
  end
  return n
end)

reg("mset", function(_, argv, argc, out, n)
  if argc % 2 == 0 then
    return put(out, n, "-ERR wrong number of arguments for 'mset' command\r\n")
  end
  for i = 2, argc, 2 do set(argv[i], argv[i + 1]) end
  R.prop = true
  return put(out, n, OK)
end)

-- INCR, INCRBY, DECR, DECRBY. by: a fixed step, or nil to read argv[3]
-- (negated for DECRBY).
local function incr(by, negate)
  return function(_, argv, _, out, n)
    local step = by
    if not step then
      step = parse_int(argv[3])
      if step == nil then return put(out, n, NOT_INT) end
      if negate then
        step = ints.neg(step)
        if step == nil then return put(out, n, "-ERR decrement would overflow\r\n") end
      end
    end
    local k = argv[2]
    local v = get(k)
    local cur = 0
    if v ~= nil then
      if type(v) == "number" then
        cur = v
      elseif type(v) == "table" and v.kind ~= "string" then
        return put(out, n, WRONGTYPE)
      else
        cur = parse_int(str(v))
        if cur == nil then return put(out, n, NOT_INT) end
      end
    end
    local r = ints.add(cur, step)
    if r == nil then return put(out, n, "-ERR increment or decrement would overflow\r\n") end
    -- A counter is kept as a number (Redis's int encoding): no string is
    -- made per increment. Past 1e14 it is kept as text, which the reply
    -- and GET would otherwise print with an exponent.
    if type(r) ~= "number" or r <= -1e14 or r >= 1e14 then r = ints.str(r) end
    if v == nil then set(k, r) else store.replace(k, r) end
    R.prop = true
    -- Three pieces: table.concat prints the number into the batch's send.
    out[n + 1] = ":"
    out[n + 2] = r
    out[n + 3] = "\r\n"
    return n + 3
  end
end
reg("incr", incr(1))
reg("decr", incr(-1))
reg("incrby", incr(nil, false))
reg("decrby", incr(nil, true))

reg("append", function(_, argv, _, out, n)
  local k = argv[2]
  local v = get(k)
  if v == nil then
    set(k, argv[3])
    v = argv[3]
  elseif type(v) == "table" then
    return put(out, n, WRONGTYPE)
  elseif type(v) == "cdata" then
    -- A buffer grows in place: amortized O(1) per APPEND.
    if v.len + #argv[3] > resp.MAX_BULK then
      return put(out, n, "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n")
    end
    if not bytes.write(v, v.len, argv[3]) then
      return put(out, n, resp.err(format("ERR the value of %d bytes does not fit in the memory left",
                                         v.len + #argv[3])))
    end
    R.prop = true
    return put(out, n, int(v.len))
  else
    v = tostring(v)   -- a counter kept as a number
    if #v + #argv[3] > resp.MAX_BULK then
      return put(out, n, "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n")
    end
    v = v .. argv[3]
    store.replace(k, v)
  end
  R.prop = true
  return put(out, n, int(#v))
end)

reg("strlen", function(_, argv, _, out, n)
  local v = get(argv[2])
  if v ~= nil and type(v) == "table" and v.kind ~= "string" then return put(out, n, WRONGTYPE) end
  return put(out, n, int(v and bytes.len(v) or 0))
end)

-- GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]
reg("getex", function(_, argv, argc, out, n)
  local unit, when, persist
  local j = 3
  while j <= argc do
    local o = lower(argv[j])
    if o == "persist" and not unit and not persist then
      persist = true
    elseif (o == "ex" or o == "px" or o == "exat" or o == "pxat") and not unit and not persist
        and j < argc then
      unit, when = o, argv[j + 1]
      j = j + 1
    else
      return put(out, n, SYNTAX)
    end
    j = j + 1
  end
  local deadline
  if unit then
    local err
    deadline, err = deadline_arg(when, "getex", (unit == "ex" or unit == "exat") and 1000 or 1,
                                 unit == "ex" or unit == "px", true)
    if not deadline then return put(out, n, err) end
  end
  local k = argv[2]
  local v = read(k)
  if v == nil then return null(out, n) end
  v = str(v)
  if v == nil then return put(out, n, WRONGTYPE) end
  if deadline then
    if tonumber(deadline) <= store.now_ms() then
      store.del(k)
      R.prop = resp.encode({ "DEL", k }, 2)
      R.note("g", "del", k)
    else
      store.expire_at(k, tonumber(deadline))
      R.prop = resp.encode({ "PEXPIREAT", k, ints.str(deadline) }, 3)
      R.note("g", "expire", k)
    end
  elseif persist and store.persist(k) then
    R.prop = resp.encode({ "PERSIST", k }, 2)
    R.note("g", "persist", k)
  end
  return bulk(out, n, v)
end)

-- A float as Redis's string2ld takes it (no blanks, not NaN), or nil.
local function float_arg(s)
  if s == "" or s:find("%s") or #s > 5000 then return nil end
  local v = tonumber(s)
  if v == nil then
    local l = lower(s)
    if l == "inf" or l == "+inf" or l == "infinity" then return math.huge end
    if l == "-inf" or l == "-infinity" then return -math.huge end
    return nil
  end
  if v ~= v then return nil end
  return v
end
M.float_arg = float_arg

-- A float result as Redis prints INCRBYFLOAT's (fixed notation, no
-- trailing zeros). Redis computes in long double; kv in double, printed
-- with the fewest digits (15 to 17) that read back the same.
local function float_str(v)
  local s
  for p = 15, 17 do
    s = format("%." .. p .. "g", v)
    if tonumber(s) == v then break end
  end
  if s:find("e") then
    s = format("%.17f", v):gsub("0+$", ""):gsub("%.$", "")
  end
  return s
end
M.float_str = float_str

-- INCRBYFLOAT key increment: logged as SET key result KEEPTTL, as Redis.
reg("incrbyfloat", function(_, argv, _, out, n)
  local by = float_arg(argv[3])
  if not by then return put(out, n, "-ERR value is not a valid float\r\n") end
  local k = argv[2]
  local v = get(k)
  local cur = 0
  if v ~= nil then
    v = str(v)
    if v == nil then return put(out, n, WRONGTYPE) end
    cur = type(v) == "number" and v or float_arg(v)
    if not cur then return put(out, n, "-ERR value is not a valid float\r\n") end
  end
  local r = cur + by
  if r ~= r or r == math.huge or r == -math.huge then
    return put(out, n, "-ERR increment would produce NaN or Infinity\r\n")
  end
  local s = float_str(r)
  set(k, s, true)
  R.prop = resp.encode({ "SET", k, s, "KEEPTTL" }, 4)
  return bulk(out, n, s)
end)

-- SETRANGE key offset value. The new string is put together in C memory
-- and made a Lua string once (padding and pieces joined in Lua would
-- hold three copies at once: 300 MB would not fit a 1 GiB heap); if the
-- heap cannot take it, the answer is an error and the key is unchanged.
local ffi = require "ffi"
ffi.cdef [[
void *malloc(size_t size);
void free(void *p);
]]

local function splice(old, off, piece)
  local len = math.max(#old, off + #piece)
  local mem = ffi.cast("char *", ffi.C.malloc(len))
  if mem == nil then return nil end
  ffi.copy(mem, old, math.min(#old, off))
  if off > #old then ffi.fill(mem + #old, off - #old, 0) end
  ffi.copy(mem + off, piece, #piece)
  if off + #piece < #old then
    ffi.copy(mem + off + #piece, ffi.cast("const char *", old) + off + #piece, #old - off - #piece)
  end
  local ok, s = pcall(ffi.string, mem, len)
  ffi.C.free(mem)
  return ok and s or nil
end

reg("setrange", function(_, argv, _, out, n)
  local off = parse_int(argv[3])
  if off == nil then return put(out, n, NOT_INT) end
  if off < 0 then return put(out, n, "-ERR offset is out of range\r\n") end
  local k, piece = argv[2], argv[4]
  local v = get(k)
  if v ~= nil and type(v) == "table" and v.kind ~= "string" then return put(out, n, WRONGTYPE) end
  if #piece == 0 then return put(out, n, int(v and bytes.len(v) or 0)) end
  -- Compared before adding: an offset near 2^63 would wrap (checkStringLength).
  if off > resp.MAX_BULK - #piece then
    return put(out, n, "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n")
  end
  off = tonumber(off)
  if type(v) == "cdata" then
    -- A buffer the bit commands keep is written in place.
    if not bytes.write(v, off, piece) then
      return put(out, n, resp.err(format("ERR the value of %d bytes does not fit in the memory left",
                                         math.max(v.len, off + #piece))))
    end
    R.prop = true
    return put(out, n, int(v.len))
  end
  v = v and tostring(v) or nil
  local new = splice(v or "", off, piece)
  if not new then
    collectgarbage()
    return put(out, n, resp.err(format("ERR the value of %d bytes does not fit in the memory left",
                                       math.max(v and #v or 0, off + #piece))))
  end
  if v == nil then set(k, new) else store.replace(k, new) end
  R.prop = true
  return put(out, n, int(#new))
end)

-- GETRANGE key start end (Redis's clamping of negative indexes).
reg("getrange", function(_, argv, _, out, n)
  local s, e = parse_int(argv[3]), parse_int(argv[4])
  if s == nil or e == nil then return put(out, n, NOT_INT) end
  local v = get(argv[2])
  if v == nil then return bulk(out, n, "") end
  if type(v) == "table" and v.kind ~= "string" then return put(out, n, WRONGTYPE) end
  if type(v) == "number" then v = tostring(v) end
  local len = bytes.len(v)
  s, e = tonumber(s), tonumber(e)
  if s < 0 and e < 0 and s > e then return bulk(out, n, "") end
  if s < 0 then s = len + s end
  if e < 0 then e = len + e end
  if s < 0 then s = 0 end
  if e < 0 then e = 0 end
  if e >= len then e = len - 1 end
  if s > e or len == 0 then return bulk(out, n, "") end
  if type(v) == "cdata" then return bulk(out, n, bytes.sub(v, s, e)) end
  return bulk(out, n, v:sub(s + 1, e + 1))
end)

reg("msetnx", function(_, argv, argc, out, n)
  if argc % 2 == 0 then
    return put(out, n, "-ERR wrong number of arguments for 'msetnx' command\r\n")
  end
  for i = 2, argc, 2 do
    if get(argv[i]) ~= nil then return put(out, n, resp.ZERO) end
  end
  for i = 2, argc, 2 do set(argv[i], argv[i + 1]) end
  R.prop = true
  return put(out, n, resp.ONE)
end)

-- -- Keys ------------------------------------------------------------------

local function del(_, argv, argc, out, n)
  local count = 0
  for i = 2, argc do
    if store.del(argv[i]) then count = count + 1 end
  end
  if count > 0 then R.prop = true end
  return put(out, n, int(count))
end
reg("del", del)
reg("unlink", del)

reg("exists", function(_, argv, argc, out, n)
  local count = 0
  for i = 2, argc do
    if get(argv[i]) ~= nil then count = count + 1 end
  end
  return put(out, n, int(count))
end)

-- TOUCH key [key ...]: how many exist; each counts as an access (LRU,
-- LFU).
reg("touch", function(_, argv, argc, out, n)
  local count = 0
  for i = 2, argc do
    if get(argv[i]) ~= nil then count = count + 1 end
  end
  return put(out, n, int(count))
end)

reg("type", function(_, argv, _, out, n)
  local v = get(argv[2])
  return put(out, n, v == nil and "+none\r\n" or resp.simple(store.type_of(v)))
end)

reg("randomkey", function(_, _, _, out, n)
  local k = store.random_key()
  if not k then return null(out, n) end
  return bulk(out, n, k)
end)

reg("dbsize", function(_, _, _, out, n)
  return put(out, n, int(store.size()))
end)

local function flushall(_, argv, argc, out, n)
  if argc > 2 or (argc == 2 and lower(argv[2]) ~= "async" and lower(argv[2]) ~= "sync") then
    return put(out, n, SYNTAX)
  end
  store.flush()
  R.prop = true
  return put(out, n, OK)
end
reg("flushall", flushall, { all = true })
reg("flushdb", flushall, { all = true })

-- Moves src's value and deadline to dst (replacing it).
local function move(src, dst)
  local v, d = get(src), store.deadline(src)
  store.del(src)
  store.del(dst)
  set(dst, v)
  if d then store.expire_at(dst, d) end
end

-- RENAME src dst, RENAMENX src dst.
local function rename(nx)
  return function(_, argv, _, out, n)
    local src, dst = argv[2], argv[3]
    if get(src) == nil then return put(out, n, "-ERR no such key\r\n") end
    if src == dst then return put(out, n, nx and resp.ZERO or OK) end
    if nx and get(dst) ~= nil then return put(out, n, resp.ZERO) end
    move(src, dst)
    R.prop = true
    return put(out, n, nx and resp.ONE or OK)
  end
end
reg("rename", rename(false))
reg("renamenx", rename(true))

-- COPY source destination [DB 0] [REPLACE]: collections are copied
-- through their kind's copier (R.copiers).
reg("copy", function(_, argv, argc, out, n)
  local replace = false
  local j = 4
  while j <= argc do
    local o = lower(argv[j])
    if o == "replace" then
      replace = true
    elseif o == "db" and j < argc then
      local db = parse_int(argv[j + 1])
      if db == nil then return put(out, n, NOT_INT) end
      if db ~= 0 then return put(out, n, "-ERR DB index is out of range\r\n") end
      j = j + 1
    else
      return put(out, n, SYNTAX)
    end
    j = j + 1
  end
  local src, dst = argv[2], argv[3]
  if src == dst then
    return put(out, n, "-ERR source and destination objects are the same\r\n")
  end
  local v = get(src)
  if v == nil then return put(out, n, resp.ZERO) end
  if get(dst) ~= nil then
    if not replace then return put(out, n, resp.ZERO) end
    store.del(dst)
  end
  if type(v) == "table" or type(v) == "cdata" then v = R.copiers[v.kind](v) end
  set(dst, v)
  local d = store.deadline(src)
  if d then store.expire_at(dst, d) end
  R.prop = true
  return put(out, n, resp.ONE)
end)

-- -- Expiry ----------------------------------------------------------------

-- EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT key time [NX|XX|GT|LT]. scale
-- turns the argument into ms; absolute ones are not added to now.
local function expire(name, scale, absolute)
  return function(_, argv, argc, out, n)
    local nx, xx, gt, lt
    for j = 4, argc do
      local o = lower(argv[j])
      if o == "nx" then nx = true
      elseif o == "xx" then xx = true
      elseif o == "gt" then gt = true
      elseif o == "lt" then lt = true
      else
        return put(out, n, resp.err("ERR Unsupported option " .. argv[j]))
      end
    end
    if nx and (xx or gt or lt) then
      return put(out, n, "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n")
    end
    if gt and lt then
      return put(out, n, "-ERR GT and LT options at the same time are not compatible\r\n")
    end
    local exact, err = deadline_arg(argv[3], name, scale, not absolute, false)
    if not exact then return put(out, n, err) end
    local when = tonumber(exact)
    local k = argv[2]
    if get(k) == nil then return put(out, n, resp.ZERO) end
    local cur = store.deadline(k)
    if (nx and cur) or (xx and not cur) or (gt and (not cur or when <= cur))
        or (lt and cur and when >= cur) then
      return put(out, n, resp.ZERO)
    end
    if when <= store.now_ms() then
      store.del(k)
      R.prop = resp.encode({ "DEL", k }, 2)
      R.note("g", "del", k)
    else
      store.expire_at(k, when)
      R.prop = resp.encode({ "PEXPIREAT", k, ints.str(exact) }, 3)
    end
    return put(out, n, resp.ONE)
  end
end
reg("expire", expire("expire", 1000, false))
reg("pexpire", expire("pexpire", 1, false))
reg("expireat", expire("expireat", 1000, true))
reg("pexpireat", expire("pexpireat", 1, true))

-- TTL and PTTL: -2 for a missing key, -1 without a deadline; TTL rounds
-- to the nearest second as Redis does.
local function ttl(ms)
  return function(_, argv, _, out, n)
    local k = argv[2]
    if get(k) == nil then return put(out, n, int(-2)) end
    local d = store.deadline(k)
    if not d then return put(out, n, int(-1)) end
    local left = floor(d - store.now_ms())
    if left < 0 then left = 0 end
    return put(out, n, int(ms and left or floor((left + 500) / 1000)))
  end
end
reg("ttl", ttl(false))
reg("pttl", ttl(true))

-- EXPIRETIME and PEXPIRETIME: the absolute deadline, -1 without one, -2
-- for a missing key.
local function expiretime(ms)
  return function(_, argv, _, out, n)
    local k = argv[2]
    if get(k) == nil then return put(out, n, int(-2)) end
    local d = store.deadline(k)
    if not d then return put(out, n, int(-1)) end
    return put(out, n, ":" .. ints.str(ms and d or floor(d / 1000)) .. "\r\n")
  end
end
reg("expiretime", expiretime(false))
reg("pexpiretime", expiretime(true))

reg("persist", function(_, argv, _, out, n)
  local k = argv[2]
  if get(k) ~= nil and store.persist(k) then
    R.prop = true
    out[n + 1] = resp.ONE
  else
    out[n + 1] = resp.ZERO
  end
  return n + 1
end)

-- -- Iteration -------------------------------------------------------------

local bulk_array = resp.bulk_array
M.bulk_array = bulk_array

reg("keys", function(c, argv, _, out, n)
  local list, count = store.keys(argv[2], c.pause)
  return bulk_array(out, n, list, count)
end)

-- A SCAN cursor as Redis reads one (strtoul: an optional sign, digits,
-- up to 2^64 - 1; "" is 0): kv's cursors are slot numbers, and one past
-- the slots (a negative one wraps past them, as in C) ends the scan.
-- Returns it, or nil.
function M.cursor(s)
  if s == "" then return 0 end
  local sign, digits = s:match("^([+-]?)(%d+)$")
  if not digits then return nil end
  digits = digits:gsub("^0+", "")
  if #digits > 20 or (#digits == 20 and digits > "18446744073709551615") then return nil end
  if sign == "-" and digits ~= "" then return math.huge end
  return tonumber(digits) or 0
end

-- SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
reg("scan", function(c, argv, argc, out, n)
  local cur = M.cursor(argv[2])
  if not cur then return put(out, n, "-ERR invalid cursor\r\n") end
  local count, match, kind = 10, nil, nil
  local j = 3
  while j <= argc do
    local o = lower(argv[j])
    if j == argc then return put(out, n, SYNTAX) end
    if o == "count" then
      count = num_arg(argv[j + 1])
      if not count then return put(out, n, NOT_INT) end
      if count < 1 then return put(out, n, SYNTAX) end
    elseif o == "match" then
      match = argv[j + 1]
    elseif o == "type" then
      kind = lower(argv[j + 1])
    else
      return put(out, n, SYNTAX)
    end
    j = j + 2
  end
  local filter
  if match or kind then
    local m = match and match ~= "*" and store.matcher(match)
    filter = function(k, v)
      return (not m or m(k)) and (not kind or store.type_of(v) == kind)
    end
  end
  local nextc, list, found = store.scan(cur, count, filter, c.pause)
  out[n + 1] = "*2\r\n"
  n = bulk(out, n + 1, tostring(nextc))
  return bulk_array(out, n, list, found)
end)

return M
