-- Streams: XADD (NOMKSTREAM, MAXLEN/MINID with = or ~ and LIMIT), XRANGE,
-- XREVRANGE, XLEN, XDEL, XTRIM, XREAD (COUNT, BLOCK on the blocked-client
-- machinery), XSETID, XINFO STREAM, as Redis 7.0 has them (t_stream.c):
-- IDs of two unsigned 64-bit halves read as string2ull reads them,
-- entries_added, max_deleted_entry_id and the recorded first ID kept as
-- Redis keeps them, replies and error texts Redis's.
--
-- A stream is { kind = "stream", e = entries h..t (a deque, in ID order),
-- n live entries, nodes h..t, last = the last ID, ... }. An entry is
-- { k = its ID as 32 hex digits (so IDs compare as strings), id = "ms-seq",
-- f = { field, value, ... }, node, dead }; XDEL marks it dead, as Redis
-- flags it in its listpack, and it goes when its node does. Nodes are
-- Redis's listpacks as far as their count goes: a new one after 100
-- entries (stream-node-max-entries), gone when its last live entry is;
-- "~" trimming drops whole nodes as Redis does (Redis also starts a node
-- at 4096 bytes, stream-node-max-bytes, which kv does not count).
local ffi = require "ffi"
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local lists = require "kv.lists"
local ints = require "kv.ints"

local reg = R.register
local put, bulk, int = resp.put, resp.bulk, resp.int
local WRONGTYPE, NOT_INT, SYNTAX = resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local lower, sub, byte, find, format = string.lower, string.sub, string.byte, string.find,
  string.format
local type, tonumber, tostring = type, tonumber, tostring
local tohex = bit.tohex
local floor = math.floor

local M = {}

local U64 = ffi.typeof("uint64_t")
local MAX64 = 0xffffffffffffffffULL
local NODE_MAX = 100                 -- stream-node-max-entries
local STREAM_BYTES, ENTRY_BYTES = 200, 120

local INVALID_ID = "-ERR Invalid stream ID specified as stream command argument\r\n"

-- -- IDs -------------------------------------------------------------------------

-- An ID is { ms, seq } of uint64_t; its key is the 32 hex digits that
-- sort as it does.
local function id_key(ms, seq)
  return tohex(ms, 16) .. tohex(seq, 16)
end

local function u64_str(v)
  return (tostring(U64(v)):gsub("ULL$", ""))
end

local function id_str(ms, seq)
  return u64_str(ms) .. "-" .. u64_str(seq)
end

local function key_id(k)
  local ms = U64(tonumber(sub(k, 1, 8), 16)) * 4294967296ULL + tonumber(sub(k, 9, 16), 16)
  local seq = U64(tonumber(sub(k, 17, 24), 16)) * 4294967296ULL + tonumber(sub(k, 25, 32), 16)
  return ms, seq
end

local ZERO_KEY = id_key(0ULL, 0ULL)
local MAX_KEY = id_key(MAX64, MAX64)

-- The value of s as Redis's string2ull takes one (a canonical int64 that
-- is not negative; else what strtoull takes whole: blanks first, a sign,
-- digits, at most 2^64 - 1, a minus wrapping), a uint64_t; or nil.
local function u64_arg(s)
  local v = ints.parse(s)
  if v ~= nil then
    if v < 0 then return nil end
    return U64(v)
  end
  local i = find(s, "[^ \t\n\v\f\r]")
  if not i then return nil end
  local neg = false
  local c = byte(s, i)
  if c == 43 or c == 45 then
    neg = c == 45
    i = i + 1
  end
  local digits = sub(s, i)
  if digits == "" or find(digits, "[^0-9]") then return nil end
  digits = digits:gsub("^0+", "")
  if #digits > 20 or (#digits == 20 and digits > "18446744073709551615") then return nil end
  local r = 0ULL
  for j = 1, #digits do r = r * 10 + (byte(digits, j) - 48) end
  if neg then r = -r end
  return r
end

-- An ID argument (streamGenericParseIDOrReply): "-" and "+" (not when
-- strict), "ms" (seq is missing_seq) or "ms-seq"; with auto_seq, "ms-*".
-- Returns ms, seq (and false for "ms-*": the sequence is to be chosen);
-- or nil.
local function id_arg(s, missing_seq, strict, auto_seq)
  if #s > 127 then return nil end
  if s == "-" then
    if strict then return nil end
    return 0ULL, 0ULL, true
  elseif s == "+" then
    if strict then return nil end
    return MAX64, MAX64, true
  end
  local dash = find(s, "-", 1, true)
  local ms = u64_arg(dash and sub(s, 1, dash - 1) or s)
  if not ms then return nil end
  if not dash then return ms, U64(missing_seq), true end
  local rest = sub(s, dash + 1)
  if auto_seq and rest == "*" then return ms, 0ULL, false end
  local seq = u64_arg(rest)
  if not seq then return nil end
  return ms, seq, true
end

-- A range bound: "(" before an ID makes it exclusive (and strict).
-- Returns ms, seq, exclusive; or nil.
local function bound_arg(s, missing_seq)
  if #s > 1 and byte(s, 1) == 40 then
    local ms, seq = id_arg(sub(s, 2), missing_seq, true)
    if not ms then return nil end
    return ms, seq, true
  end
  local ms, seq = id_arg(s, missing_seq, false)
  if not ms then return nil end
  return ms, seq, false
end

-- The ID after (or before) ms-seq; nil past the end.
local function incr(ms, seq)
  if seq == MAX64 then
    if ms == MAX64 then return nil end
    return ms + 1, 0ULL
  end
  return ms, seq + 1
end

local function decr(ms, seq)
  if seq == 0ULL then
    if ms == 0ULL then return nil end
    return ms - 1, MAX64
  end
  return ms, seq - 1
end

-- -- The stream ---------------------------------------------------------------------

local function new_stream()
  return { kind = "stream", e = {}, h = 1, t = 0, n = 0, nodes = {}, nh = 1, nt = 0,
           last = ZERO_KEY, first = ZERO_KEY, maxdel = ZERO_KEY, added = 0,
           groups = {}, ngroups = 0, bytes = STREAM_BYTES }
end
M.new = new_stream

local function stream_at(k)
  local v = store.get(k)
  if v == nil then return false end
  if type(v) ~= "table" or v.kind ~= "stream" then return nil end
  return v
end
M.stream_at = stream_at

local function entry_bytes(f)
  local b = ENTRY_BYTES
  for i = 1, #f do b = b + #f[i] + 24 end
  return b
end

-- The index of the first entry (live or dead) whose key is >= k, or t + 1.
local function lower_bound(s, k)
  local lo, hi = s.h, s.t + 1
  local e = s.e
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if e[mid].k < k then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- The first and last live entries, or nil.
local function first_live(s)
  for i = s.h, s.t do
    local x = s.e[i]
    if not x.dead then return x end
  end
  return nil
end

local function last_live(s)
  for i = s.t, s.h, -1 do
    local x = s.e[i]
    if not x.dead then return x end
  end
  return nil
end

-- The recorded first ID after a change: the first live entry's, or 0-0.
local function update_first(s)
  local x = first_live(s)
  s.first = x and x.k or ZERO_KEY
end

-- Drops the nodes from the front that no longer hold a live entry, and
-- the entries before the first node left; rebuilds the deque when dead
-- entries make up most of it (O(n), so amortized O(1) a deletion).
local function tidy(s)
  local nodes = s.nodes
  while s.nh <= s.nt and nodes[s.nh].live == 0 do
    nodes[s.nh] = nil
    s.nh = s.nh + 1
  end
  local e = s.e
  if s.nh > s.nt then
    for i = s.h, s.t do e[i] = nil end
    s.h, s.t = 1, 0
    s.nh, s.nt = 1, 0
    return
  end
  local first = nodes[s.nh]
  while s.h <= s.t and e[s.h].node ~= first do
    e[s.h] = nil
    s.h = s.h + 1
  end
  local span = s.t - s.h + 1
  if span > 64 and s.n * 2 < span then
    local ne, m = {}, 0
    for i = s.h, s.t do
      local x = e[i]
      if not x.dead or x.node.live > 0 then
        m = m + 1
        ne[m] = x
      end
    end
    s.e, s.h, s.t = ne, 1, m
  end
end

-- Appends an entry (its ID must be above every other), in the last node
-- or a new one.
local function append(s, ms, seq, f)
  local node = s.nodes[s.nt]
  local k = id_key(ms, seq)
  if not node or node.total >= NODE_MAX then
    node = { live = 0, total = 0, k = k }   -- k: its master ID, its rax key in Redis
    s.nt = s.nt + 1
    s.nodes[s.nt] = node
  end
  node.live, node.total = node.live + 1, node.total + 1
  local x = { k = k, id = id_str(ms, seq), f = f, node = node, dead = false }
  s.t = s.t + 1
  s.e[s.t] = x
  s.n = s.n + 1
  s.last = k
  s.added = ints.add(s.added, 1)
  if s.n == 1 then s.first = k end
  store.account(s, entry_bytes(f))
  return x
end

-- Marks entry x dead (XDEL, exact trimming); its node goes once empty.
local function kill(s, x)
  x.dead = true
  x.node.live = x.node.live - 1
  s.n = s.n - 1
  store.account(s, -entry_bytes(x.f))
end

-- The node a node's entries span in the deque: indexes from, to.
local function node_span(s, i)
  local node = s.e[i].node
  local j = i
  while j < s.t and s.e[j + 1].node == node do j = j + 1 end
  return j
end

-- Trims s (Redis's streamTrim): by maxlen or minid (a key), whole nodes
-- from the front while they may all go, then (not approx) entry by entry
-- inside the first node left; at most limit entries (0: no limit).
-- Returns the count deleted.
local function trim(s, strategy, maxlen, minid, approx, limit)
  local deleted = 0
  local i = s.h
  while i <= s.t do
    if strategy == "maxlen" and s.n <= maxlen then break end
    local x = s.e[i]
    local node = x.node
    local entries = node.live
    local j = node_span(s, i)
    if limit > 0 and deleted + entries > limit then break end
    local remove
    if strategy == "maxlen" then
      remove = s.n - entries >= maxlen
    else
      remove = s.e[j].k < minid   -- the node's last ID, deleted or not
    end
    if remove then
      for q = i, j do
        local y = s.e[q]
        if not y.dead then kill(s, y) end
      end
      deleted = deleted + entries
      i = j + 1
    else
      if approx then break end
      for q = i, j do
        local y = s.e[q]
        local stop
        if strategy == "maxlen" then stop = s.n <= maxlen else stop = y.k >= minid end
        if stop then break end
        if not y.dead then
          kill(s, y)
          deleted = deleted + 1
        end
      end
      break
    end
  end
  tidy(s)
  if s.n == 0 then s.first = ZERO_KEY else update_first(s) end
  return deleted
end

-- -- Replies -----------------------------------------------------------------------

local function put_entry(out, n, x)
  n = resp.array(out, n, 2)
  n = bulk(out, n, x.id)
  return resp.bulk_array(out, n, x.f, #x.f)
end

-- The live entries with keys from lo to hi (inclusive), in order or
-- reversed, at most count (0: all): an array.
local function range(s, lo, hi, rev, count)
  local t = {}
  if lo > hi then return t end
  if not rev then
    for i = lower_bound(s, lo), s.t do
      local x = s.e[i]
      if x.k > hi then break end
      if not x.dead then
        t[#t + 1] = x
        if count > 0 and #t >= count then break end
      end
    end
  else
    local i = lower_bound(s, hi)
    if i > s.t or s.e[i].k > hi then i = i - 1 end
    while i >= s.h do
      local x = s.e[i]
      if x.k < lo then break end
      if not x.dead then
        t[#t + 1] = x
        if count > 0 and #t >= count then break end
      end
      i = i - 1
    end
  end
  return t
end
M.range = range

local function put_entries(out, n, t)
  n = resp.array(out, n, #t)
  for i = 1, #t do n = put_entry(out, n, t[i]) end
  return n
end

-- -- XADD, XTRIM --------------------------------------------------------------------

-- The options of XADD (xadd) or XTRIM from argv[3] on
-- (streamParseAddOrTrimArgsOrReply). Returns { strategy, maxlen, minid,
-- approx, limit, nomk, ms, seq, seq_given, at = the index of the ID or
-- the last option, arg_at = the index of the threshold }, or nil and the
-- error reply.
local function trim_args(argv, argc, xadd, loading)
  local a = { limit = 0, approx = false }
  local limit_given = false
  local i = 3
  while i <= argc do
    local more = argc - i
    local o = argv[i]
    local lo = lower(o)
    if xadd and o == "*" then
      break
    elseif lo == "maxlen" and more >= 1 then
      if a.strategy then
        return nil, "-ERR syntax error, MAXLEN and MINID options at the same time are not compatible\r\n"
      end
      a.approx = false
      local nx = argv[i + 1]
      if more >= 2 and nx == "~" then
        a.approx = true
        i = i + 1
      elseif more >= 2 and nx == "=" then
        i = i + 1
      end
      local v = ints.parse(argv[i + 1])
      if v == nil then return nil, NOT_INT end
      if v < 0 then return nil, "-ERR The MAXLEN argument must be >= 0.\r\n" end
      i = i + 1
      a.strategy, a.maxlen, a.arg_at = "maxlen", tonumber(v), i
    elseif lo == "minid" and more >= 1 then
      if a.strategy then
        return nil, "-ERR syntax error, MAXLEN and MINID options at the same time are not compatible\r\n"
      end
      a.approx = false
      local nx = argv[i + 1]
      if more >= 2 and nx == "~" then
        a.approx = true
        i = i + 1
      elseif more >= 2 and nx == "=" then
        i = i + 1
      end
      local ms, seq = id_arg(argv[i + 1], 0, true)
      if not ms then return nil, INVALID_ID end
      i = i + 1
      a.strategy, a.minid, a.arg_at = "minid", id_key(ms, seq), i
    elseif lo == "limit" and more >= 1 then
      local v = ints.parse(argv[i + 1])
      if v == nil then return nil, NOT_INT end
      if v < 0 then return nil, "-ERR The LIMIT argument must be >= 0.\r\n" end
      a.limit = tonumber(v)
      limit_given = true
      i = i + 1
    elseif xadd and lo == "nomkstream" then
      a.nomk = true
    elseif xadd then
      local ms, seq, given = id_arg(o, 0, true, true)
      if not ms then return nil, INVALID_ID end
      a.ms, a.seq, a.seq_given, a.id_given = ms, seq, given, true
      break
    else
      return nil, SYNTAX
    end
    i = i + 1
  end
  a.at = i
  if a.limit ~= 0 and not a.strategy then
    return nil, "-ERR syntax error, LIMIT cannot be used without specifying a trimming strategy\r\n"
  end
  if not xadd and not a.strategy then
    return nil, "-ERR syntax error, XTRIM must be called with a trimming strategy\r\n"
  end
  if loading then
    a.limit = 0   -- as Redis for its AOF: the threshold was made exact
  elseif limit_given then
    if not a.approx then
      return nil, "-ERR syntax error, LIMIT cannot be used without the special ~ option\r\n"
    end
  else
    a.limit = a.approx and 100 * NODE_MAX or 0
  end
  return a
end

-- The record that logs an approximate trim as the exact one it was
-- (Redis's streamRewriteApproxSpecifier and streamRewriteTrimArgument):
-- argv with "~" made "=" and the threshold what the stream is now: its
-- length, or its first ID; for a stream trimmed empty the highest ID
-- there is (streamGetEdgeID), so that the replay trims it empty too.
local function exact_record(argv, argc, a, s, id_at, id)
  local t = {}
  for i = 1, argc do t[i] = argv[i] end
  if a.approx then
    t[a.arg_at - 1] = "="
    if a.strategy == "maxlen" then
      t[a.arg_at] = tostring(s.n)
    else
      local x = first_live(s)
      t[a.arg_at] = x and x.id or id_str(MAX64, MAX64)
    end
  end
  if id_at then t[id_at] = id end
  return resp.encode(t, argc)
end

-- XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]]
-- *|id field value [field value ...]: the new entry's ID. Logged with that
-- ID (and an approximate trim as the exact one it did).
reg("xadd", function(c, argv, argc, out, n)
  local a, err = trim_args(argv, argc, true, c.sock == nil)
  if not a then return put(out, n, err) end
  local fpos = a.at + 1
  if argc - fpos + 1 < 2 or (argc - fpos + 1) % 2 == 1 then
    return put(out, n, "-ERR wrong number of arguments for 'xadd' command\r\n")
  end
  if a.id_given and a.seq_given and a.ms == 0ULL and a.seq == 0ULL then
    return put(out, n, "-ERR The ID specified in XADD must be greater than 0-0\r\n")
  end
  local k = argv[2]
  local s = stream_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  local created = false
  if not s then
    if a.nomk then return resp.null(out, n) end
    s = new_stream()
    created = true
  end
  local lms, lseq = key_id(s.last)
  if lms == MAX64 and lseq == MAX64 then
    return put(out, n, "-ERR The stream has exhausted the last possible ID, unable to add more items\r\n")
  end
  local ms, seq
  if not a.id_given then
    local now = U64(floor(store.now_ms()))
    if now > lms then
      ms, seq = now, 0ULL
    else
      ms, seq = incr(lms, lseq)
    end
  elseif not a.seq_given then
    -- ms-*: the next sequence of that millisecond.
    if a.ms == lms then
      if lseq == MAX64 then
        return put(out, n, "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n")
      end
      ms, seq = lms, lseq + 1
    elseif a.ms > lms then
      ms, seq = a.ms, 0ULL
    else
      return put(out, n, "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n")
    end
  else
    ms, seq = a.ms, a.seq
    if id_key(ms, seq) <= s.last then
      return put(out, n, "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n")
    end
  end
  local f = {}
  for i = fpos, argc do f[i - fpos + 1] = argv[i] end
  if created then store.set(k, s) end
  local x = append(s, ms, seq, f)
  R.event("t", "xadd", k)
  if a.strategy then
    if trim(s, a.strategy, a.maxlen, a.minid, a.approx, a.limit) > 0 then R.event("t", "xtrim", k) end
  end
  R.noted = true
  R.prop = exact_record(argv, argc, a, s, a.at, x.id)
  lists.ready(k)
  return bulk(out, n, x.id)
end)

-- XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: the count trimmed.
reg("xtrim", function(c, argv, argc, out, n)
  local k = argv[2]
  local s = stream_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, resp.ZERO) end
  local a, err = trim_args(argv, argc, false, c.sock == nil)
  if not a then return put(out, n, err) end
  local deleted = trim(s, a.strategy, a.maxlen, a.minid, a.approx, a.limit)
  if deleted > 0 then
    R.note("t", "xtrim", k)
    R.prop = exact_record(argv, argc, a, s)
  end
  return put(out, n, int(deleted))
end)

-- -- XRANGE, XREVRANGE, XLEN, XDEL -------------------------------------------------

-- XRANGE key start end [COUNT count], XREVRANGE key end start [COUNT count].
local function xrange(rev)
  return function(_, argv, argc, out, n)
    local sa, ea = argv[3], argv[4]
    if rev then sa, ea = ea, sa end
    local sms, sseq, sex = bound_arg(sa, 0)
    if not sms then return put(out, n, INVALID_ID) end
    if sex then
      sms, sseq = incr(sms, sseq)
      if not sms then return put(out, n, "-ERR invalid start ID for the interval\r\n") end
    end
    local ems, eseq, eex = bound_arg(ea, MAX64)
    if not ems then return put(out, n, INVALID_ID) end
    if eex then
      ems, eseq = decr(ems, eseq)
      if not ems then return put(out, n, "-ERR invalid end ID for the interval\r\n") end
    end
    local count = -1
    local j = 5
    while j <= argc do
      if lower(argv[j]) == "count" and j < argc then
        local v = ints.parse(argv[j + 1])
        if v == nil then return put(out, n, NOT_INT) end
        count = v < 0 and 0 or tonumber(v)
        j = j + 2
      else
        return put(out, n, SYNTAX)
      end
    end
    local s = stream_at(argv[2])
    if s == nil then return put(out, n, WRONGTYPE) end
    if not s then return put(out, n, resp.EMPTY_ARRAY) end
    if count == 0 then return resp.null_array(out, n) end
    return put_entries(out, n, range(s, id_key(sms, sseq), id_key(ems, eseq), rev, count < 0 and 0 or count))
  end
end
reg("xrange", xrange(false))
reg("xrevrange", xrange(true))

reg("xlen", function(_, argv, _, out, n)
  local s = stream_at(argv[2])
  if s == nil then return put(out, n, WRONGTYPE) end
  return put(out, n, int(s and s.n or 0))
end)

-- XDEL key id [id ...]: how many were there.
reg("xdel", function(_, argv, argc, out, n)
  local k = argv[2]
  local s = stream_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, resp.ZERO) end
  local keys = {}
  for j = 3, argc do
    local ms, seq = id_arg(argv[j], 0, true)
    if not ms then return put(out, n, INVALID_ID) end
    keys[#keys + 1] = id_key(ms, seq)
  end
  local deleted, first_entry = 0, false
  for _, ik in ipairs(keys) do
    local i = lower_bound(s, ik)
    local x = s.e[i]
    if i <= s.t and x.k == ik and not x.dead then
      if ik == s.first then first_entry = true end
      if ik > s.maxdel then s.maxdel = ik end
      kill(s, x)
      deleted = deleted + 1
    end
  end
  if deleted > 0 then
    -- A node whose last entry went goes (Redis frees the listpack).
    local nodes, keep = s.nodes, {}
    local m = 0
    for q = s.nh, s.nt do
      if nodes[q].live > 0 then
        m = m + 1
        keep[m] = nodes[q]
      end
    end
    s.nodes, s.nh, s.nt = keep, 1, m
    tidy(s)
    if s.n == 0 then s.first = ZERO_KEY elseif first_entry then update_first(s) end
    R.prop = true
  end
  return put(out, n, int(deleted))
end)

-- XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID id]
reg("xsetid", function(_, argv, argc, out, n)
  local ms, seq = id_arg(argv[3], 0, true)
  if not ms then return put(out, n, INVALID_ID) end
  local idk = id_key(ms, seq)
  local added, maxdel = nil, nil
  local i = 4
  while i <= argc do
    local o = lower(argv[i])
    if o == "entriesadded" and i < argc then
      local v = ints.parse(argv[i + 1])
      if v == nil then return put(out, n, NOT_INT) end
      if v < 0 then return put(out, n, "-ERR entries_added must be positive\r\n") end
      added = v
      i = i + 2
    elseif o == "maxdeletedid" and i < argc then
      local dms, dseq = id_arg(argv[i + 1], 0, true)
      if not dms then return put(out, n, INVALID_ID) end
      maxdel = id_key(dms, dseq)
      if idk < maxdel then
        return put(out, n, "-ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id\r\n")
      end
      i = i + 2
    else
      return put(out, n, SYNTAX)
    end
  end
  local k = argv[2]
  local s = stream_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, "-ERR no such key\r\n") end
  if idk < s.maxdel then
    return put(out, n, "-ERR The ID specified in XSETID is smaller than current max_deleted_entry_id\r\n")
  end
  if s.n > 0 then
    if idk < last_live(s).k then
      return put(out, n, "-ERR The ID specified in XSETID is smaller than the target stream top item\r\n")
    end
    if added ~= nil and s.n > added then
      return put(out, n, "-ERR The entries_added specified in XSETID is smaller than the target stream length\r\n")
    end
  end
  s.last = idk
  if added ~= nil then s.added = added end
  if maxdel and maxdel ~= ZERO_KEY then s.maxdel = maxdel end
  R.prop = true
  return put(out, n, resp.OK)
end)

-- -- XREAD --------------------------------------------------------------------------

-- The options of XREAD, and of XREADGROUP when grouped (GROUP and NOACK
-- are its own), read in one loop as Redis's xreadCommand reads both.
-- Returns { count, block (the text or nil), at (the index of the first
-- key), group, consumer, noack }, or nil and the error reply.
function M.read_opts(argv, argc, grouped)
  local o = { count = 0 }
  local i = 2
  while i <= argc do
    local w, more = lower(argv[i]), argc - i
    if w == "block" and more >= 1 then
      o.block = argv[i + 1]
      local v = ints.parse(o.block)
      if v == nil then return nil, "-ERR timeout is not an integer or out of range\r\n" end
      if v < 0 then return nil, "-ERR timeout is negative\r\n" end
      i = i + 2
    elseif w == "count" and more >= 1 then
      local v = ints.parse(argv[i + 1])
      if v == nil then return nil, NOT_INT end
      o.count = v < 0 and 0 or tonumber(v)
      i = i + 2
    elseif w == "streams" and more >= 1 then
      o.at = i + 1
      if (argc - o.at + 1) % 2 ~= 0 then
        return nil, grouped
          and "-ERR Unbalanced XREADGROUP list of streams: for each stream key an ID or '>' must be specified.\r\n"
          or "-ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.\r\n"
      end
      break
    elseif w == "group" and more >= 2 then
      if not grouped then
        return nil, "-ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.\r\n"
      end
      o.group, o.consumer = argv[i + 1], argv[i + 2]
      i = i + 3
    elseif w == "noack" then
      if not grouped then
        return nil, "-ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.\r\n"
      end
      o.noack = true
      i = i + 1
    else
      return nil, SYNTAX
    end
  end
  if not o.at then return nil, SYNTAX end
  if grouped and not o.group then return nil, "-ERR Missing GROUP option for XREADGROUP\r\n" end
  return o
end

-- The arguments of XREAD: read_opts's and { keys, ids (keys "greater
-- than") }, or nil and the error reply.
local function xread_args(argv, argc)
  local a, err = M.read_opts(argv, argc, false)
  if not a then return nil, err end
  local streams_at = a.at
  local nstreams = (argc - streams_at + 1) / 2
  local keys, ids = {}, {}
  for j = 1, nstreams do
    local k, ida = argv[streams_at + j - 1], argv[streams_at + nstreams + j - 1]
    local s = stream_at(k)
    if s == nil then return nil, WRONGTYPE end
    keys[j] = k
    if ida == "$" then
      ids[j] = s and s.last or ZERO_KEY
    elseif ida == ">" then
      return nil, "-ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.\r\n"
    else
      local ms, seq = id_arg(ida, 0, true)
      if not ms then return nil, INVALID_ID end
      ids[j] = id_key(ms, seq)
    end
  end
  a.keys, a.ids = keys, ids
  return a
end

-- The entries of stream key k after key gt: at most count (0: all), or
-- nil when there is none.
local function after(k, gt, count)
  local s = stream_at(k)
  if not s or s.n == 0 then return nil end
  local ms, seq = key_id(gt)
  ms, seq = incr(ms, seq)
  if not ms then return nil end
  local t = range(s, id_key(ms, seq), MAX_KEY, false, count)
  if #t == 0 then return nil end
  return t
end

-- The reply of XREAD: one [key, entries] per stream with entries (RESP3:
-- a map of key to entries).
local function put_streams(out, n, got)
  if resp.is3() then n = resp.map(out, n, #got) else n = resp.array(out, n, #got) end
  for _, g in ipairs(got) do
    if not resp.is3() then n = resp.array(out, n, 2) end
    n = bulk(out, n, g[1])
    n = put_entries(out, n, g[2])
  end
  return n
end

-- A blocked XREAD, woken when one of its keys gets entries: the waiting
-- and the wake-ups are the lists' (lists.blocking, BLOCK in ms).
local xread_block = lists.blocking(function(k, ctx)
  local s = stream_at(k)
  if s == nil then return nil, nil, nil, true end   -- another type now: waits on, as Redis
  local t = after(k, ctx.gt[k], ctx.count)
  if not t then return nil, nil, nil, true end
  return { { k, t } }
end, function(argv, argc)
  local a, err = xread_args(argv, argc)
  if not a then return nil, err end
  local gt = {}
  for j, k in ipairs(a.keys) do
    if gt[k] == nil then gt[k] = a.ids[j] end
  end
  return a.keys, a.block, { gt = gt, count = a.count }
end, put_streams, resp.null_array, true)

-- XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]: every
-- stream with entries after its ID at once, or, with BLOCK, the first
-- one to get some (not inside EXEC).
reg("xread", function(c, argv, argc, out, n)
  local a, err = xread_args(argv, argc)
  if not a then return put(out, n, err) end
  local got = {}
  for j, k in ipairs(a.keys) do
    local t = after(k, a.ids[j], a.count)
    if t then got[#got + 1] = { k, t } end
  end
  if #got > 0 then return put_streams(out, n, got) end
  if a.block then return xread_block(c, argv, argc, out, n) end
  return resp.null_array(out, n)
end)

-- -- XINFO ---------------------------------------------------------------------------

reg("xinfo", nil)

-- The nodes of Redis's rax (rax.c) over the 16-byte keys of the sorted
-- array keys[lo..hi] (as hex strings, two digits a byte) that share their
-- first depth bytes: a compressed node for a longer common prefix, a
-- branching node where they part, and below it each part the same way; a
-- lone key's rest is a compressed node and its leaf. O(keys * 16).
local function rax_nodes(keys, lo, hi, depth)
  if lo == hi then return depth == 16 and 1 or 2 end
  local p = depth
  local a, b = keys[lo], keys[hi]   -- sorted: their common prefix is everyone's
  while p < 16 and sub(a, 2 * p + 1, 2 * p + 2) == sub(b, 2 * p + 1, 2 * p + 2) do p = p + 1 end
  local nodes = p > depth and 2 or 1   -- the compressed prefix, the branching node
  local i = lo
  while i <= hi do
    local c = sub(keys[i], 2 * p + 1, 2 * p + 2)
    local j = i
    while j < hi and sub(keys[j + 1], 2 * p + 1, 2 * p + 2) == c do j = j + 1 end
    nodes = nodes + rax_nodes(keys, i, j, p + 1)
    i = j + 1
  end
  return nodes
end

-- XINFO STREAM key [FULL [COUNT n]]: the stream's counters and its first
-- and last entries (FULL: its entries, at most n (10), and its groups);
-- radix-tree-keys counts its nodes, radix-tree-nodes the nodes of the
-- radix tree Redis would keep over their master IDs.
reg("xinfo|stream", function(_, argv, argc, out, n)
  local full, count = false, 10
  if argc > 3 then
    local bad = lower(argv[4]) ~= "full" or (argc ~= 4 and argc ~= 6)
    if not bad and argc == 6 then
      if lower(argv[5]) ~= "count" then
        bad = true
      else
        local v = ints.parse(argv[6])
        if v == nil then return put(out, n, NOT_INT) end
        count = v < 0 and 0 or tonumber(v)
      end
    end
    if bad then
      return put(out, n, resp.err(format("ERR unknown subcommand or wrong number of arguments for '%s'. Try XINFO HELP.",
                                         sub(argv[2], 1, 128))))
    end
    full = true
  end
  local s = stream_at(argv[3])
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, "-ERR no such key\r\n") end
  local keys, nk = {}, 0
  for i = s.nh, s.nt do
    nk = nk + 1
    keys[nk] = s.nodes[i].k
  end
  n = resp.map(out, n, full and 9 or 10)
  n = bulk(out, n, "length")
  n = put(out, n, int(s.n))
  n = bulk(out, n, "radix-tree-keys")
  n = put(out, n, int(nk))
  n = bulk(out, n, "radix-tree-nodes")
  n = put(out, n, int(nk == 0 and 1 or rax_nodes(keys, 1, nk, 0)))
  n = bulk(out, n, "last-generated-id")
  n = bulk(out, n, id_str(key_id(s.last)))
  n = bulk(out, n, "max-deleted-entry-id")
  n = bulk(out, n, id_str(key_id(s.maxdel)))
  n = bulk(out, n, "entries-added")
  n = put(out, n, ":" .. ints.str(s.added) .. "\r\n")
  n = bulk(out, n, "recorded-first-entry-id")
  n = bulk(out, n, id_str(key_id(s.first)))
  if full then
    n = bulk(out, n, "entries")
    return M.full(out, n, s, count)   -- with the groups (xgroups.lua)
  end
  n = bulk(out, n, "groups")
  n = put(out, n, int(s.ngroups))
  local fx, lx = first_live(s), last_live(s)
  n = bulk(out, n, "first-entry")
  if fx then n = put_entry(out, n, fx) else n = resp.null(out, n) end
  n = bulk(out, n, "last-entry")
  if lx then n = put_entry(out, n, lx) else n = resp.null(out, n) end
  return n
end)

reg("xinfo|help", function(_, _, _, out, n)
  return require("kv.monitor").help(out, n, {
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
  })
end)

-- -- Copies and the log rewrite --------------------------------------------------

R.copiers.stream = function(s)
  local c = new_stream()
  for i = s.h, s.t do
    local x = s.e[i]
    if not x.dead then
      local ms, seq = key_id(x.k)
      local f = {}
      for j = 1, #x.f do f[j] = x.f[j] end
      append(c, ms, seq, f)
    end
  end
  c.last, c.added, c.maxdel = s.last, s.added, s.maxdel
  c.first = s.first
  if M.copy_groups then M.copy_groups(s, c) end
  return c
end

-- A stream as commands: its entries' XADDs (an empty one made by an XADD
-- trimmed to nothing), then XSETID with its counters (as Redis rewrites
-- it).
R.dumpers.stream = function(s)
  -- Entries deleted or trimmed while still pending in a group (ghosts)
  -- are added back in ID order, claimed, then deleted again, so the
  -- pending lists come out whole (Redis's rewrite XCLAIMs only entries
  -- that exist; its RDB preamble keeps the rest).
  local ghosts = M.ghosts and M.ghosts(s) or {}
  local recs, gi = {}, 1
  for i = s.h, s.t do
    local x = s.e[i]
    if not x.dead then
      while ghosts[gi] and ghosts[gi].k < x.k do
        recs[#recs + 1] = { "XADD", false, ghosts[gi].id, "x", "y" }
        gi = gi + 1
      end
      local r = { "XADD", false, x.id }
      for j = 1, #x.f do r[j + 3] = x.f[j] end
      recs[#recs + 1] = r
    end
  end
  for j = gi, #ghosts do recs[#recs + 1] = { "XADD", false, ghosts[j].id, "x", "y" } end
  if #recs == 0 then
    -- An empty stream: one entry added and trimmed at once (0-1, as
    -- Redis's rewrite: the last ID may be 0-0, after XGROUP CREATE
    -- MKSTREAM, which XADD refuses), XSETID then sets the last ID.
    recs[1] = { "XADD", false, "MAXLEN", "0", "0-1", "x", "y" }
  end
  if M.dump_groups then M.dump_groups(s, recs) end
  if #ghosts > 0 then
    local del = { "XDEL", false }
    for j = 1, #ghosts do del[j + 2] = ghosts[j].id end
    recs[#recs + 1] = del
  end
  -- Last, so the counters XADD and XDEL moved are set back.
  recs[#recs + 1] = { "XSETID", false, id_str(key_id(s.last)), "ENTRIESADDED", ints.str(s.added),
                      "MAXDELETEDID", id_str(key_id(s.maxdel)) }
  return nil, recs, #recs
end

M.id_key, M.id_str, M.key_id, M.id_arg, M.first_live, M.last_live = id_key, id_str, key_id, id_arg,
  first_live, last_live
M.ZERO_KEY, M.MAX_KEY, M.INVALID_ID = ZERO_KEY, MAX_KEY, INVALID_ID
M.put_entries, M.put_entry, M.incr, M.lower_bound = put_entries, put_entry, incr, lower_bound

return M
