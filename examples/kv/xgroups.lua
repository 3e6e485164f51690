-- Stream consumer groups: XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER,
-- DELCONSUMER, HELP), XREADGROUP (BLOCK on the blocked-client machinery,
-- NOACK), XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO GROUPS, CONSUMERS and
-- STREAM FULL, as Redis 7.0 has them (t_stream.c), entries_read and lag
-- included.
--
-- A group is { name, last (key of the last ID delivered), read (the
-- entries_read counter, nil when unknown), pel (the pending keys, sorted),
-- nacks = { key = nack }, consumers = { name = consumer }, ncons }; a nack
-- { k, id, c (its consumer), time (ms), count }; a consumer { name, seen
-- (ms), pel = { key = nack }, npel }. Changes are logged as Redis
-- propagates them: a delivery as the XCLAIM ... TIME t RETRYCOUNT n FORCE
-- JUSTID LASTID id that recreates its pending entry, a group's new last ID
-- as XGROUP SETID ... ENTRIESREAD n, a consumer made on the way as XGROUP
-- CREATECONSUMER, so the log replays the same times and counters.
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local lists = require "kv.lists"
local ints = require "kv.ints"
local streams = require "kv.streams"

local reg = R.register
local put, bulk, int = resp.put, resp.bulk, resp.int
local WRONGTYPE, NOT_INT, SYNTAX = resp.WRONGTYPE, resp.NOT_INT, resp.SYNTAX
local lower, sub, format = string.lower, string.sub, string.format
local tinsert, tremove = table.insert, table.remove
local floor, type, tonumber = math.floor, type, tonumber

local stream_at, id_arg, id_key, id_str, key_id = streams.stream_at, streams.id_arg, streams.id_key,
  streams.id_str, streams.key_id
local ZERO_KEY, MAX_KEY, INVALID_ID = streams.ZERO_KEY, streams.MAX_KEY, streams.INVALID_ID

local M = {}

local function now()
  return floor(store.now_ms())
end

-- -- Groups, consumers, pending entries ---------------------------------------------

local function new_group(name, last, read)
  return { name = name, last = last, read = read, pel = {}, nacks = {}, consumers = {}, ncons = 0 }
end

local function consumer_of(g, name)
  return g.consumers[name]
end

-- The consumer name of g, made if missing (seen now). Returns it and
-- whether it was made.
local function consumer_get(g, name)
  local c = g.consumers[name]
  if c then return c, false end
  c = { name = name, seen = now(), pel = {}, npel = 0 }
  g.consumers[name] = c
  g.ncons = g.ncons + 1
  return c, true
end

-- The index of key k in the sorted array t, or where it would go.
local function find(t, k)
  local lo, hi = 1, #t + 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if t[mid] < k then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- O(pending) per entry (the insert moves the tail; Redis's rax is
-- O(log n)), cheap at the pending lists consumers keep acknowledged.
local function pel_add(g, nack)
  local i = find(g.pel, nack.k)
  tinsert(g.pel, i, nack.k)
  g.nacks[nack.k] = nack
end

local function pel_del(g, nack)
  local i = find(g.pel, nack.k)
  if g.pel[i] == nack.k then tremove(g.pel, i) end
  g.nacks[nack.k] = nil
  local c = nack.c
  if c and c.pel[nack.k] then
    c.pel[nack.k] = nil
    c.npel = c.npel - 1
  end
end

-- Gives nack to consumer c (from whoever had it).
local function assign(nack, c)
  local old = nack.c
  if old == c then return end
  if old and old.pel[nack.k] then
    old.pel[nack.k] = nil
    old.npel = old.npel - 1
  end
  nack.c = c
  c.pel[nack.k] = nack
  c.npel = c.npel + 1
end

-- -- entries_read and lag (Redis 7.0) --------------------------------------------------

-- Whether a deleted entry may lie between keys a and b (streamRangeHasTombstones).
local function has_tombstones(s, a, b)
  if s.n == 0 or s.maxdel == ZERO_KEY then return false end
  if s.first > s.maxdel then return false end
  return (a or ZERO_KEY) <= s.maxdel and s.maxdel <= (b or MAX_KEY)
end

-- The count of entries ever added up to key k, when it can be known
-- (streamEstimateDistanceFromFirstEverEntry), else nil.
local function distance(s, k)
  if s.added == 0 then return 0 end
  if s.n == 0 and k <= s.last then return s.added end
  if k == s.last then return s.added end
  if k > s.last then return nil end
  if s.maxdel == ZERO_KEY or s.maxdel < s.first then
    if k < s.first then return ints.add(s.added, -s.n) end
    if k == s.first then return ints.add(s.added, 1 - s.n) end
  end
  return nil
end

local function lag(s, g)
  if s.added == 0 then return 0 end
  if g.read ~= nil and not has_tombstones(s, g.last, nil) then return ints.add(s.added, -g.read) end
  local read = distance(s, g.last)
  if read ~= nil then return ints.add(s.added, -read) end
  return nil
end

local function put_num(out, n, v)
  if v == nil then return resp.null(out, n) end
  return put(out, n, ":" .. ints.str(v) .. "\r\n")
end

-- -- Records for the log ------------------------------------------------------------------

-- Marks the command's change to log: rec is true (the request as it
-- came) or RESP records. As Redis 7.0, a group change touches no WATCH
-- (made is the key XGROUP CREATE MKSTREAM made, which does) and sends no
-- keyspace event but the xgroup-* ones noted.
local function changed(rec, made)
  R.prop = rec
  R.changed = made and { made } or {}
  if R.notifying then R.noted = true end
end

local function xclaim_rec(key, g, nack)
  return resp.encode({ "XCLAIM", key, g.name, nack.c.name, "0", nack.id, "TIME", tostring(nack.time),
                       "RETRYCOUNT", tostring(nack.count), "FORCE", "JUSTID", "LASTID",
                       id_str(key_id(g.last)) }, 14)
end

local function setid_rec(key, g)
  return resp.encode({ "XGROUP", "SETID", key, g.name, id_str(key_id(g.last)), "ENTRIESREAD",
                       g.read ~= nil and ints.str(g.read) or "-1" }, 7)
end

local function consumer_rec(key, g, name)
  return resp.encode({ "XGROUP", "CREATECONSUMER", key, g.name, name }, 5)
end

-- -- XGROUP --------------------------------------------------------------------------------

local NEED_KEY = "-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may "
  .. "want to use the MKSTREAM option to create an empty stream automatically.\r\n"

local function nogroup(key, group)
  return resp.err(format("NOGROUP No such consumer group '%s' for key name '%s'", group, key))
end

local function subcommand_error(argv)
  return resp.err(format("ERR unknown subcommand or wrong number of arguments for '%s'. Try XGROUP HELP.",
                         sub(argv[2], 1, 128)))
end

-- An ENTRIESREAD value: a count, or -1 (unknown): returns it (nil for
-- -1) and true; or nil, false and the error.
local function entries_read_arg(s)
  local v = ints.parse(s)
  if v == nil then return nil, false, NOT_INT end
  if v < 0 and v ~= -1 then return nil, false, "-ERR value for ENTRIESREAD must be positive or -1\r\n" end
  if v == -1 then return nil, true end
  return v, true
end

reg("xgroup", nil)

-- XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
reg("xgroup|create", function(_, argv, argc, out, n)
  local mkstream, read = false, nil
  local i = 6
  while i <= argc do
    local o = lower(argv[i])
    if o == "mkstream" then
      mkstream = true
      i = i + 1
    elseif o == "entriesread" and i < argc then
      local v, ok, err = entries_read_arg(argv[i + 1])
      if not ok then return put(out, n, err) end
      read = v
      i = i + 2
    else
      return put(out, n, subcommand_error(argv))
    end
  end
  local k, name = argv[3], argv[4]
  local s = stream_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s and not mkstream then return put(out, n, NEED_KEY) end
  if argc > 8 then return put(out, n, subcommand_error(argv)) end
  local last
  if argv[5] == "$" then
    last = s and s.last or ZERO_KEY
  else
    local ms, seq = id_arg(argv[5], 0, true)
    if not ms then return put(out, n, INVALID_ID) end
    last = id_key(ms, seq)
  end
  local made = nil
  if not s then
    s = streams.new()
    store.set(k, s)
    made = k
  end
  if s.groups[name] then return put(out, n, "-BUSYGROUP Consumer Group name already exists\r\n") end
  s.groups[name] = new_group(name, last, read)
  s.ngroups = s.ngroups + 1
  R.note("t", "xgroup-create", k)
  changed(true, made)
  return put(out, n, resp.OK)
end)

-- The stream and group an XGROUP subcommand names: s, g; or nil and the
-- error reply.
local function named(argv)
  local k, name = argv[3], argv[4]
  local s = stream_at(k)
  if s == nil then return nil, WRONGTYPE end
  if not s then return nil, NEED_KEY end
  local g = s.groups[name]
  return s, g
end

-- XGROUP SETID key group id|$ [ENTRIESREAD n]
reg("xgroup|setid", function(_, argv, argc, out, n)
  local s, g = named(argv)
  if not s then return put(out, n, g) end
  if not g then return put(out, n, nogroup(argv[3], argv[4])) end
  if argc ~= 5 and argc ~= 7 then return put(out, n, subcommand_error(argv)) end
  local last
  if argv[5] == "$" then
    last = s.last
  else
    local ms, seq = id_arg(argv[5], 0, false)
    if not ms then return put(out, n, INVALID_ID) end
    last = id_key(ms, seq)
  end
  local read = nil
  if argc == 7 then
    if lower(argv[6]) ~= "entriesread" then return put(out, n, subcommand_error(argv)) end
    local v, ok, err = entries_read_arg(argv[7])
    if not ok then return put(out, n, err) end
    read = v
  end
  g.last, g.read = last, read
  R.note("t", "xgroup-setid", argv[3])
  changed(true)
  return put(out, n, resp.OK)
end)

-- XGROUP DESTROY key group: 1 if it was there. Blocked readers of the
-- group get -NOGROUP (the key is made ready for them).
reg("xgroup|destroy", function(_, argv, _, out, n)
  local s, g = named(argv)
  if not s then return put(out, n, g) end
  if not g then return put(out, n, resp.ZERO) end
  s.groups[g.name] = nil
  s.ngroups = s.ngroups - 1
  g.dead = true
  R.note("t", "xgroup-destroy", argv[3])
  changed(true)
  lists.ready(argv[3])
  return put(out, n, resp.ONE)
end)

-- XGROUP CREATECONSUMER key group consumer: 1 if it was made.
reg("xgroup|createconsumer", function(_, argv, _, out, n)
  local s, g = named(argv)
  if not s then return put(out, n, g) end
  if not g then return put(out, n, nogroup(argv[3], argv[4])) end
  local _, made = consumer_get(g, argv[5])
  if made then
    R.note("t", "xgroup-createconsumer", argv[3])
    changed(true)
  end
  return put(out, n, made and resp.ONE or resp.ZERO)
end)

-- XGROUP DELCONSUMER key group consumer: its pending count (its entries
-- leave the group's pending list).
reg("xgroup|delconsumer", function(_, argv, _, out, n)
  local s, g = named(argv)
  if not s then return put(out, n, g) end
  if not g then return put(out, n, nogroup(argv[3], argv[4])) end
  local c = consumer_of(g, argv[5])
  local pending = 0
  if c then
    pending = c.npel
    local keys = {}
    for k in pairs(c.pel) do keys[#keys + 1] = k end
    for _, k in ipairs(keys) do pel_del(g, g.nacks[k]) end
    g.consumers[c.name] = nil
    g.ncons = g.ncons - 1
    R.note("t", "xgroup-delconsumer", argv[3])
  end
  changed(true)
  return put(out, n, int(pending))
end)

reg("xgroup|help", function(_, _, _, out, n)
  return require("kv.monitor").help(out, n, {
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
  })
end)

-- -- XREADGROUP ---------------------------------------------------------------------------

-- Delivers to consumer c of group g the new entries of stream s (after
-- g.last), at most count (0: all): moves g.last and entries_read as
-- Redis does, and (not noack) makes or takes over their pending entries.
-- Returns the entries and the records that log it.
local function deliver_new(key, s, g, c, count, noack)
  local ms, seq = streams.incr(key_id(g.last))
  if not ms then return {}, {} end
  local t = streams.range(s, id_key(ms, seq), MAX_KEY, false, count)
  local recs, time = {}, now()
  for _, x in ipairs(t) do
    if x.k > g.last then
      if g.read ~= nil and not has_tombstones(s, x.k, nil) then
        g.read = ints.add(g.read, 1)
      elseif s.added ~= 0 then
        g.read = distance(s, x.k)
      end
      g.last = x.k
    end
    if not noack then
      local nack = g.nacks[x.k]
      if not nack then
        nack = { k = x.k, id = x.id }
        pel_add(g, nack)
      end
      assign(nack, c)
      nack.time, nack.count = time, 1
      recs[#recs + 1] = xclaim_rec(key, g, nack)
    end
  end
  -- The group's last ID and entries_read, after the XCLAIMs (whose
  -- LASTID moves the last ID but not entries_read): Redis 7.0 logs this
  -- only after a NOACK read, so its replay can lose entries_read.
  if #t > 0 then recs[#recs + 1] = setid_rec(key, g) end
  return t, recs
end

-- Delivers again to consumer c its pending entries after key gt, at most
-- count (0: all): each still in the stream counts one more delivery, now.
-- Returns them as entries (a deleted one as { id }) and the records that
-- log it.
local function deliver_history(key, s, g, c, gt, count)
  local keys = {}
  for k in pairs(c.pel) do
    if k > gt then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local t, recs, time = {}, {}, now()
  for i = 1, #keys do
    if count > 0 and i > count then break end
    local nack = c.pel[keys[i]]
    local j = streams.lower_bound(s, nack.k)
    local x = s.e[j]
    if j <= s.t and x.k == nack.k and not x.dead then
      t[#t + 1] = x
      nack.time, nack.count = time, nack.count + 1
      recs[#recs + 1] = xclaim_rec(key, g, nack)
    else
      -- Deleted since: its id and no fields, the delivery not counted.
      t[#t + 1] = { id = nack.id }
    end
  end
  return t, recs
end

-- The entries of a group read: entries, and a deleted one as [id, nil].
local function put_group_entries(out, n, t)
  n = resp.array(out, n, #t)
  for _, x in ipairs(t) do
    if x.f then
      n = streams.put_entry(out, n, x)
    else
      n = resp.array(out, n, 2)
      n = bulk(out, n, x.id)
      n = resp.null_array(out, n)
    end
  end
  return n
end

local function put_streams(out, n, got)
  if resp.is3() then n = resp.map(out, n, #got) else n = resp.array(out, n, #got) end
  for _, g in ipairs(got) do
    if not resp.is3() then n = resp.array(out, n, 2) end
    n = bulk(out, n, g[1])
    n = put_group_entries(out, n, g[2])
  end
  return n
end

local function nogroup_read(key, group)
  return resp.err(format("NOGROUP No such key '%s' or consumer group '%s' in XREADGROUP with GROUP option",
                         key, group))
end

-- The arguments of XREADGROUP: streams.read_opts's { group, consumer,
-- count, block, noack } and { keys, ids (">" or a key) }, or nil and the
-- error reply.
local function xreadgroup_args(argv, argc)
  local a, err = streams.read_opts(argv, argc, true)
  if not a then return nil, err end
  local at, group = a.at, a.group
  local nstreams = (argc - at + 1) / 2
  local keys, ids = {}, {}
  for j = 1, nstreams do
    local k, ida = argv[at + j - 1], argv[at + nstreams + j - 1]
    local s = stream_at(k)
    if s == nil then return nil, WRONGTYPE end
    if not s or not s.groups[group] then return nil, nogroup_read(k, group) end
    keys[j] = k
    if ida == "$" then
      return nil, "-ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history "
        .. "of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would "
        .. "just return an empty result set.\r\n"
    elseif ida == ">" then
      ids[j] = ">"
    else
      local ms, seq = id_arg(ida, 0, true)
      if not ms then return nil, INVALID_ID end
      ids[j] = id_key(ms, seq)
    end
  end
  a.keys, a.ids = keys, ids
  return a
end

-- Reads stream k for the arguments a (id its ID): the entries to answer
-- with (nil when a ">" read found none) and the records that log it.
local function read_one(k, a, id)
  local s = stream_at(k)
  local g = s.groups[a.group]
  if id == ">" then
    -- As Redis: the consumer is made (and seen) only when a live entry
    -- after the group's last ID is there to serve.
    local lx = streams.last_live(s)
    if not lx or lx.k <= g.last then return nil, {} end
  end
  local c, made = consumer_get(g, a.consumer)
  c.seen = now()
  local recs = {}
  if made then
    recs[1] = consumer_rec(k, g, a.consumer)
    R.note("t", "xgroup-createconsumer", k)
  end
  local t, more
  if id == ">" then
    t, more = deliver_new(k, s, g, c, a.count, a.noack)
    if #t == 0 then t = nil end
  else
    t, more = deliver_history(k, s, g, c, id, a.count)
  end
  for _, r in ipairs(more) do recs[#recs + 1] = r end
  return t, recs
end

local GROUP_GONE = "-NOGROUP the consumer group this client was blocked on no longer exists\r\n"

-- A blocked XREADGROUP, woken when one of its keys gets entries (or its
-- group goes: -NOGROUP, as Redis's).
local xreadgroup_block = lists.blocking(function(k, a)
  local s = stream_at(k)
  if not s then return nil, nil, nil, true end
  if not s.groups[a.group] then return nil, GROUP_GONE end
  local t, recs = read_one(k, a, ">")
  if not t then return nil, nil, nil, true end
  R.changed = { k }
  return { { k, t } }, nil, table.concat(recs)
end, function(argv, argc)
  local a, err = xreadgroup_args(argv, argc)
  if not a then return nil, err end
  return a.keys, a.block, a
end, put_streams, resp.null_array, true)

-- XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK]
-- STREAMS key [key ...] id [id ...]: ">" new entries, an ID the
-- consumer's pending ones after it; with BLOCK and only ">" reads that
-- find nothing, waits.
reg("xreadgroup", function(c, argv, argc, out, n)
  local a, err = xreadgroup_args(argv, argc)
  if not a then return put(out, n, err) end
  local got, recs, history = {}, {}, false
  for j, k in ipairs(a.keys) do
    local id = a.ids[j]
    if id ~= ">" then history = true end
    local t, more = read_one(k, a, id)
    for _, r in ipairs(more) do recs[#recs + 1] = r end
    if t then got[#got + 1] = { k, t } end
  end
  if #recs > 0 then changed(table.concat(recs)) end
  if #got > 0 then return put_streams(out, n, got) end
  -- (Nothing was found, so no consumer was made: nothing to log.)
  if a.block and not history then return xreadgroup_block(c, argv, argc, out, n) end
  return resp.null_array(out, n)
end)

-- -- XACK, XPENDING ---------------------------------------------------------------------

local function stream_group(argv)
  local s = stream_at(argv[2])
  if s == nil then return nil, WRONGTYPE end
  local g = s and s.groups[argv[3]] or nil
  return s, g
end

-- XACK key group id [id ...]: how many were pending.
reg("xack", function(_, argv, argc, out, n)
  local s, g = stream_group(argv)
  if s == nil then return put(out, n, g) end
  if not g then return put(out, n, resp.ZERO) end
  local keys = {}
  for j = 4, argc do
    local ms, seq = id_arg(argv[j], 0, true)
    if not ms then return put(out, n, INVALID_ID) end
    keys[#keys + 1] = id_key(ms, seq)
  end
  local acked = 0
  for _, k in ipairs(keys) do
    local nack = g.nacks[k]
    if nack then
      pel_del(g, nack)
      acked = acked + 1
    end
  end
  if acked > 0 then changed(true) end
  return put(out, n, int(acked))
end)

local function nogroup_key(key, group)
  return resp.err(format("NOGROUP No such key '%s' or consumer group '%s'", key, group))
end

-- XPENDING key group [[IDLE min-idle] start end count [consumer]]: the
-- summary, or the pending entries in a range.
reg("xpending", function(_, argv, argc, out, n)
  local k, gname = argv[2], argv[3]
  local justinfo = argc == 3
  local minidle, startk, endk, count, cname = 0, nil, nil, nil, nil
  if not justinfo then
    local i = 4
    if lower(argv[i]) == "idle" then
      if argc < 8 then return put(out, n, SYNTAX) end
      local v = ints.parse(argv[5])
      if v == nil then return put(out, n, NOT_INT) end
      minidle = tonumber(v)
      i = 6
    end
    if argc - i + 1 < 3 or argc - i + 1 > 4 then return put(out, n, SYNTAX) end
    local sms, sseq, sex = nil, nil, nil
    local function bound(text, missing)
      if #text > 1 and sub(text, 1, 1) == "(" then
        local ms, seq = id_arg(sub(text, 2), missing, true)
        return ms, seq, true
      end
      local ms, seq = id_arg(text, missing, false)
      return ms, seq, false
    end
    sms, sseq, sex = bound(argv[i], 0)
    if not sms then return put(out, n, INVALID_ID) end
    if sex then
      sms, sseq = streams.incr(sms, sseq)
      if not sms then return put(out, n, "-ERR invalid start ID for the interval\r\n") end
    end
    local ems, eseq, eex = bound(argv[i + 1], 0xffffffffffffffffULL)
    if not ems then return put(out, n, INVALID_ID) end
    if eex then
      if eseq == 0ULL then
        if ems == 0ULL then return put(out, n, "-ERR invalid end ID for the interval\r\n") end
        ems, eseq = ems - 1, 0xffffffffffffffffULL
      else
        eseq = eseq - 1
      end
    end
    startk, endk = id_key(sms, sseq), id_key(ems, eseq)
    local v = ints.parse(argv[i + 2])
    if v == nil then return put(out, n, NOT_INT) end
    count = v < 0 and 0 or tonumber(v)
    if argc == i + 3 then cname = argv[i + 3] end
  end
  local s = stream_at(k)
  if s == nil then return put(out, n, WRONGTYPE) end
  local g = s and s.groups[gname]
  if not g then return put(out, n, nogroup_key(k, gname)) end
  if justinfo then
    local total = #g.pel
    n = resp.array(out, n, 4)
    n = put(out, n, int(total))
    if total == 0 then
      n = resp.null(out, n)
      n = resp.null(out, n)
      return resp.null_array(out, n)
    end
    n = bulk(out, n, g.nacks[g.pel[1]].id)
    n = bulk(out, n, g.nacks[g.pel[total]].id)
    local names, counts = {}, {}
    for q = 1, total do
      local c = g.nacks[g.pel[q]].c
      if not counts[c.name] then
        counts[c.name] = 0
        names[#names + 1] = c.name
      end
      counts[c.name] = counts[c.name] + 1
    end
    table.sort(names)
    n = resp.array(out, n, #names)
    for _, nm in ipairs(names) do
      n = resp.array(out, n, 2)
      n = bulk(out, n, nm)
      n = bulk(out, n, tostring(counts[nm]))
    end
    return n
  end
  local c = cname and consumer_of(g, cname)
  if cname and not c then return put(out, n, resp.EMPTY_ARRAY) end
  local t, time = {}, now()
  local list = g.pel
  if c then
    list = {}
    for key in pairs(c.pel) do list[#list + 1] = key end
    table.sort(list)
  end
  for q = find(list, startk), #list do
    local key = list[q]
    if key > endk or (count > 0 and #t >= count) or count == 0 then break end
    local nack = g.nacks[key]
    if time - nack.time >= minidle then t[#t + 1] = nack end
  end
  n = resp.array(out, n, #t)
  for _, nack in ipairs(t) do
    n = resp.array(out, n, 4)
    n = bulk(out, n, nack.id)
    n = bulk(out, n, nack.c.name)
    n = put(out, n, int(math.max(0, time - nack.time)))
    n = put(out, n, int(nack.count))
  end
  return n
end)

-- -- XCLAIM, XAUTOCLAIM --------------------------------------------------------------------

-- The consumer name of g that XCLAIM or XAUTOCLAIM gives entries to,
-- made when it first gets one (as Redis: a claim of nothing makes none).
local function claimer(g, key, name)
  local c, made = consumer_get(g, name)
  if made then R.note("t", "xgroup-createconsumer", key) end
  return c
end

-- Whether stream s has a live entry of key k.
local function exists(s, k)
  local j = streams.lower_bound(s, k)
  local x = s.e[j]
  return j <= s.t and x.k == k and not x.dead and x or nil
end

-- XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms]
-- [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id]
reg("xclaim", function(_, argv, argc, out, n)
  local k = argv[2]
  local s, g = stream_group(argv)
  if s == nil then return put(out, n, g) end
  if not g then return put(out, n, nogroup_key(k, argv[3])) end
  local minidle = ints.parse(argv[5])
  if minidle == nil then return put(out, n, "-ERR Invalid min-idle-time argument for XCLAIM\r\n") end
  minidle = minidle < 0 and 0 or tonumber(minidle)
  local j = 6
  local ids = {}
  while j <= argc do
    local ms, seq = id_arg(argv[j], 0, true)
    if not ms then break end
    ids[#ids + 1] = { id_key(ms, seq), id_str(ms, seq) }
    j = j + 1
  end
  local time_now = now()
  local retry, deliverytime, force, justid, lastid = -1, -1, false, false, ZERO_KEY
  while j <= argc do
    local o, more = lower(argv[j]), argc - j
    if o == "force" then force = true
    elseif o == "justid" then justid = true
    elseif o == "idle" and more >= 1 then
      local v = ints.parse(argv[j + 1])
      if v == nil then return put(out, n, "-ERR Invalid IDLE option argument for XCLAIM\r\n") end
      deliverytime = time_now - tonumber(v)
      j = j + 1
    elseif o == "time" and more >= 1 then
      local v = ints.parse(argv[j + 1])
      if v == nil then return put(out, n, "-ERR Invalid TIME option argument for XCLAIM\r\n") end
      deliverytime = tonumber(v)
      j = j + 1
    elseif o == "retrycount" and more >= 1 then
      local v = ints.parse(argv[j + 1])
      if v == nil then return put(out, n, "-ERR Invalid RETRYCOUNT option argument for XCLAIM\r\n") end
      retry = tonumber(v)
      j = j + 1
    elseif o == "lastid" and more >= 1 then
      local ms, seq = id_arg(argv[j + 1], 0, true)
      if not ms then return put(out, n, INVALID_ID) end
      lastid = id_key(ms, seq)
      j = j + 1
    else
      return put(out, n, resp.err(format("ERR Unrecognized XCLAIM option '%s'", argv[j])))
    end
    j = j + 1
  end
  local recs = {}
  local propagate_last = false
  if lastid > g.last then
    g.last = lastid
    propagate_last = true
  end
  if deliverytime ~= -1 then
    if deliverytime < 0 or deliverytime > time_now then deliverytime = time_now end
  else
    deliverytime = time_now
  end
  local consumer
  local results = {}
  for _, pair in ipairs(ids) do
    local key, id = pair[1], pair[2]
    local nack = g.nacks[key]
    local x = exists(s, key)
    if not x then
      -- Gone from the stream: gone from the pending list too.
      if nack then
        recs[#recs + 1] = resp.encode({ "XCLAIM", k, g.name, nack.c and nack.c.name or argv[4], "0", id,
                                        "TIME", tostring(nack.time), "RETRYCOUNT", tostring(nack.count),
                                        "FORCE", "JUSTID", "LASTID", id_str(key_id(g.last)) }, 14)
        propagate_last = false
        pel_del(g, nack)
      end
    else
      if force and not nack then
        nack = { k = key, id = id, time = time_now, count = 1 }   -- as streamCreateNACK
        pel_add(g, nack)
      end
      if nack and not (nack.c and minidle > 0 and time_now - nack.time < minidle) then
        if not consumer then consumer = claimer(g, k, argv[4]) end
        nack.time = deliverytime
        if retry >= 0 then
          nack.count = retry
        elseif not justid then
          nack.count = nack.count + 1
        end
        assign(nack, consumer)
        results[#results + 1] = justid and id or x
        recs[#recs + 1] = xclaim_rec(k, g, nack)
        propagate_last = false
      end
    end
  end
  if propagate_last then recs[#recs + 1] = setid_rec(k, g) end
  if #recs > 0 then changed(table.concat(recs)) end
  n = resp.array(out, n, #results)
  for _, r in ipairs(results) do
    if type(r) == "string" then n = bulk(out, n, r) else n = streams.put_entry(out, n, r) end
  end
  return n
end)

-- XAUTOCLAIM key group consumer min-idle-time start [COUNT count]
-- [JUSTID]: claims pending entries idle long enough from start on; the
-- reply is the ID to go on from, the entries and the IDs found deleted.
reg("xautoclaim", function(_, argv, argc, out, n)
  local k = argv[2]
  -- As Redis: the arguments are checked before the key and the group.
  local minidle = ints.parse(argv[5])
  if minidle == nil then return put(out, n, "-ERR Invalid min-idle-time argument for XAUTOCLAIM\r\n") end
  minidle = minidle < 0 and 0 or tonumber(minidle)
  local start = argv[6]
  local exclusive = #start > 1 and sub(start, 1, 1) == "("
  local sms, sseq = id_arg(exclusive and sub(start, 2) or start, 0, exclusive)
  if not sms then return put(out, n, INVALID_ID) end
  if exclusive then
    sms, sseq = streams.incr(sms, sseq)
    if not sms then return put(out, n, "-ERR invalid start ID for the interval\r\n") end
  end
  local count, justid = 100, false
  local j = 7
  while j <= argc do
    local o, more = lower(argv[j]), argc - j
    if o == "count" and more >= 1 then
      local v = ints.parse(argv[j + 1])
      if v == nil or v < 1 or v > 922337203685477580LL then   -- LONG_MAX / 10 (the attempts factor)
        return put(out, n, "-ERR COUNT must be > 0\r\n")
      end
      count = tonumber(v)
      j = j + 2
    elseif o == "justid" then
      justid = true
      j = j + 1
    else
      return put(out, n, SYNTAX)
    end
  end
  local s, g = stream_group(argv)
  if s == nil then return put(out, n, g) end
  if not g then return put(out, n, nogroup_key(k, argv[3])) end
  local time_now = now()
  local startk = id_key(sms, sseq)
  -- As Redis: at most count * 10 pending entries looked at; one found
  -- deleted from the stream leaves the pending list and counts toward
  -- count; the cursor is the entry after the last looked at.
  local attempts, remaining = count * 10, count
  local results, deleted, recs = {}, {}, {}
  local consumer
  local q = find(g.pel, startk)
  while attempts > 0 and remaining > 0 and q <= #g.pel do
    attempts = attempts - 1
    local key = g.pel[q]
    local nack = g.nacks[key]
    local x = exists(s, key)
    if not x then
      deleted[#deleted + 1] = nack.id
      recs[#recs + 1] = resp.encode({ "XCLAIM", k, g.name, nack.c.name, "0", nack.id, "TIME",
                                      tostring(nack.time), "RETRYCOUNT", tostring(nack.count), "FORCE",
                                      "JUSTID", "LASTID", id_str(key_id(g.last)) }, 14)
      pel_del(g, nack)
      remaining = remaining - 1
    elseif minidle > 0 and time_now - nack.time < minidle then
      q = q + 1
    else
      if not consumer then consumer = claimer(g, k, argv[4]) end
      nack.time = time_now
      if not justid then nack.count = nack.count + 1 end
      assign(nack, consumer)
      results[#results + 1] = justid and nack.id or x
      recs[#recs + 1] = xclaim_rec(k, g, nack)
      remaining = remaining - 1
      q = q + 1
    end
  end
  local nextk = g.pel[q] or ZERO_KEY
  if #recs > 0 then changed(table.concat(recs)) end
  n = resp.array(out, n, 3)
  n = bulk(out, n, id_str(key_id(nextk)))
  n = resp.array(out, n, #results)
  for _, r in ipairs(results) do
    if type(r) == "string" then n = bulk(out, n, r) else n = streams.put_entry(out, n, r) end
  end
  return resp.bulk_array(out, n, deleted, #deleted)
end)

-- -- XINFO GROUPS, CONSUMERS, STREAM FULL ---------------------------------------------------

local function sorted_names(t)
  local names = {}
  for name in pairs(t) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- XINFO GROUPS key
reg("xinfo|groups", function(_, argv, _, out, n)
  local s = stream_at(argv[3])
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, "-ERR no such key\r\n") end
  local names = sorted_names(s.groups)
  n = resp.array(out, n, #names)
  for _, name in ipairs(names) do
    local g = s.groups[name]
    n = resp.map(out, n, 6)
    n = bulk(out, n, "name")
    n = bulk(out, n, name)
    n = bulk(out, n, "consumers")
    n = put(out, n, int(g.ncons))
    n = bulk(out, n, "pending")
    n = put(out, n, int(#g.pel))
    n = bulk(out, n, "last-delivered-id")
    n = bulk(out, n, id_str(key_id(g.last)))
    n = bulk(out, n, "entries-read")
    n = put_num(out, n, g.read)
    n = bulk(out, n, "lag")
    n = put_num(out, n, lag(s, g))
  end
  return n
end)

-- XINFO CONSUMERS key group
reg("xinfo|consumers", function(_, argv, _, out, n)
  local s = stream_at(argv[3])
  if s == nil then return put(out, n, WRONGTYPE) end
  if not s then return put(out, n, "-ERR no such key\r\n") end
  local g = s.groups[argv[4]]
  if not g then return put(out, n, nogroup(argv[3], argv[4])) end
  local time = now()
  local names = sorted_names(g.consumers)
  n = resp.array(out, n, #names)
  for _, name in ipairs(names) do
    local c = g.consumers[name]
    n = resp.map(out, n, 3)
    n = bulk(out, n, "name")
    n = bulk(out, n, name)
    n = bulk(out, n, "pending")
    n = put(out, n, int(c.npel))
    n = bulk(out, n, "idle")
    n = put(out, n, int(math.max(0, time - c.seen)))
  end
  return n
end)

-- XINFO STREAM key FULL [COUNT n] (streams.lua answers the rest): the
-- entries, and every group with its pending entries and consumers.
streams.full = function(out, n, s, count)
  local t = streams.range(s, ZERO_KEY, MAX_KEY, false, count)
  n = streams.put_entries(out, n, t)
  n = bulk(out, n, "groups")
  local names = sorted_names(s.groups)
  n = resp.array(out, n, #names)
  for _, name in ipairs(names) do
    local g = s.groups[name]
    n = resp.map(out, n, 7)
    n = bulk(out, n, "name")
    n = bulk(out, n, name)
    n = bulk(out, n, "last-delivered-id")
    n = bulk(out, n, id_str(key_id(g.last)))
    n = bulk(out, n, "entries-read")
    n = put_num(out, n, g.read)
    n = bulk(out, n, "lag")
    n = put_num(out, n, lag(s, g))
    n = bulk(out, n, "pel-count")
    n = put(out, n, int(#g.pel))
    n = bulk(out, n, "pending")
    local shown = #g.pel
    if count > 0 and shown > count then shown = count end
    n = resp.array(out, n, shown)
    for q = 1, shown do
      local nack = g.nacks[g.pel[q]]
      n = resp.array(out, n, 4)
      n = bulk(out, n, nack.id)
      n = bulk(out, n, nack.c.name)
      n = put(out, n, int(nack.time))
      n = put(out, n, int(nack.count))
    end
    n = bulk(out, n, "consumers")
    local cnames = sorted_names(g.consumers)
    n = resp.array(out, n, #cnames)
    for _, cname in ipairs(cnames) do
      local c = g.consumers[cname]
      n = resp.map(out, n, 4)
      n = bulk(out, n, "name")
      n = bulk(out, n, cname)
      n = bulk(out, n, "seen-time")
      n = put(out, n, int(c.seen))
      n = bulk(out, n, "pel-count")
      n = put(out, n, int(c.npel))
      n = bulk(out, n, "pending")
      local keys = {}
      for key in pairs(c.pel) do keys[#keys + 1] = key end
      table.sort(keys)
      local cshown = #keys
      if count > 0 and cshown > count then cshown = count end
      n = resp.array(out, n, cshown)
      for q = 1, cshown do
        local nack = c.pel[keys[q]]
        n = resp.array(out, n, 3)
        n = bulk(out, n, nack.id)
        n = put(out, n, int(nack.time))
        n = put(out, n, int(nack.count))
      end
    end
  end
  return n
end

-- -- Copies and the log rewrite -------------------------------------------------------------

-- The groups of stream s copied into c (COPY copies them, as Redis).
streams.copy_groups = function(s, c)
  for name, g in pairs(s.groups) do
    local ng = new_group(name, g.last, g.read)
    for cname, cons in pairs(g.consumers) do
      ng.consumers[cname] = { name = cname, seen = cons.seen, pel = {}, npel = 0 }
      ng.ncons = ng.ncons + 1
    end
    for _, key in ipairs(g.pel) do
      local nack = g.nacks[key]
      local nn = { k = key, id = nack.id, time = nack.time, count = nack.count }
      pel_add(ng, nn)
      assign(nn, ng.consumers[nack.c.name])
    end
    c.groups[name] = ng
    c.ngroups = c.ngroups + 1
  end
end

-- The entries pending in some group of s that are no longer in it
-- (deleted or trimmed), as { k, id }, in ID order.
streams.ghosts = function(s)
  local seen, t = {}, {}
  for _, g in pairs(s.groups) do
    for _, key in ipairs(g.pel) do
      if not seen[key] and not exists(s, key) then
        seen[key] = true
        t[#t + 1] = { k = key, id = g.nacks[key].id }
      end
    end
  end
  table.sort(t, function(a, b) return a.k < b.k end)
  return t
end

-- The commands that make s's groups again (after its entries): each group,
-- its pending entries as XCLAIMs, its consumers with none as XGROUP
-- CREATECONSUMER (as Redis rewrites them).
streams.dump_groups = function(s, recs)
  for _, name in ipairs(sorted_names(s.groups)) do
    local g = s.groups[name]
    recs[#recs + 1] = { "XGROUP", "CREATE", false, name, id_str(key_id(g.last)), "ENTRIESREAD",
                        g.read ~= nil and ints.str(g.read) or "-1" }
    for _, key in ipairs(g.pel) do
      local nack = g.nacks[key]
      recs[#recs + 1] = { "XCLAIM", false, name, nack.c.name, "0", nack.id, "TIME", tostring(nack.time),
                          "RETRYCOUNT", tostring(nack.count), "JUSTID", "FORCE" }
    end
    for _, cname in ipairs(sorted_names(g.consumers)) do
      if g.consumers[cname].npel == 0 then
        recs[#recs + 1] = { "XGROUP", "CREATECONSUMER", false, name, cname }
      end
    end
  end
end

return M
