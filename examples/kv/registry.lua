-- The command table and the state commands share with the connection
-- loop: how a command asks for its logging, which keys got elements
-- while clients wait on them, and the server's counters.
local M = {}

local lower, upper, find, gmatch = string.lower, string.upper, string.find,
  string.gmatch
local tonumber = tonumber

-- Redis's facts about each command (kv/commands.lua, and
-- kv/commands_scripting.lua for EVAL, SCRIPT, FUNCTION and FCALL): arity,
-- flags, key specs and documentation, by name ("config|get" for a
-- subcommand).
local meta = {}
for _, m in ipairs(require "kv.commands") do meta[m.name] = m end
for _, m in ipairs(require "kv.commands_scripting") do meta[m.name] = m end
M.meta = meta

-- -- Key specs ----------------------------------------------------------------

-- A key spec string of commands.lua as a table: flags (a list and a set),
-- begin search and find keys, as Redis's keySpec.
local function parse_spec(s)
  local f, b, k, notes = s:match("^([^|]*)|([^|]*)|([^|]*)|?(.*)$")
  local spec = { flags = {}, is = {}, notes = notes ~= "" and notes or nil }
  for w in gmatch(f, "%S+") do
    spec.flags[#spec.flags + 1] = w
    spec.is[w] = true
  end
  local bw = {}
  for w in gmatch(b, "%S+") do bw[#bw + 1] = w end
  spec.bs = bw[1]
  if bw[1] == "index" then spec.index = tonumber(bw[2])
  elseif bw[1] == "keyword" then spec.keyword, spec.startfrom = bw[2], tonumber(bw[3]) end
  local kw = {}
  for w in gmatch(k, "%S+") do kw[#kw + 1] = w end
  spec.fk = kw[1]
  if kw[1] == "range" then
    spec.lastkey, spec.keystep, spec.limit = tonumber(kw[2]), tonumber(kw[3]), tonumber(kw[4])
  elseif kw[1] == "keynum" then
    spec.keynumidx, spec.firstkey, spec.keystep = tonumber(kw[2]), tonumber(kw[3]), tonumber(kw[4])
  end
  return spec
end

-- Calls fn(i, spec) for the position i of each key spec finds in argv
-- (0-based as Redis counts: argv[i + 1] is the key). Returns false when
-- the arguments do not hold what the spec says (getKeysUsingKeySpecs's
-- "invalid spec"), else true. O(arguments).
local function spec_keys(spec, argv, argc, fn)
  local first
  if spec.bs == "index" then
    first = spec.index
  elseif spec.bs == "keyword" then
    local from, to, step = spec.startfrom, argc - 1, 1
    if from < 0 then from, to, step = argc + from, 1, -1 end
    local kw = lower(spec.keyword)
    for i = from, to - step, step do   -- as Redis: the end itself is not looked at
      if i < 1 or i >= argc then break end
      if lower(argv[i + 1]) == kw then
        first = i + 1
        break
      end
    end
    if not first then return true end   -- no keyword: no keys
  else
    return false
  end
  local last, step
  if spec.fk == "range" then
    step = spec.keystep
    if spec.lastkey >= 0 then
      last = first + spec.lastkey
    elseif spec.limit == 0 then
      last = argc + spec.lastkey
    else
      last = first + math.floor((argc - first) / spec.limit) + spec.lastkey
    end
  elseif spec.fk == "keynum" then
    local at = first + spec.keynumidx
    if at >= argc then return false end
    local num = tonumber(argv[at + 1])
    if not num or num < 0 or num % 1 ~= 0 or not find(argv[at + 1], "^%-?%d+$") then return false end
    first = first + spec.firstkey
    last = first + num - 1
    step = spec.keystep
  else
    return false
  end
  if last >= argc or last < first or first >= argc then return false end
  for i = first, last, step do fn(i, spec) end
  return true
end
M.spec_keys = spec_keys

-- -- The table ------------------------------------------------------------------

-- name -> command, under the lower- and upper-case spellings (other
-- spellings are lowered first). A command is { name, arity, fn, write,
-- pubsub, txn, all, meta, subs, parent, specs, wkeys, stats }: name as
-- Redis prints it ("config|get"); arity as Redis's (n: exactly n
-- arguments with the name; -n: at least n); fn(c, argv, argc, out, n)
-- appends its reply to out after position n and returns the new length;
-- write marks commands that change data (refused while the log cannot be
-- written); pubsub those allowed in a RESP2 subscriber's context; txn
-- those that run at once inside MULTI (the others are queued); subs the
-- subcommands of a container (CONFIG, CLIENT...), by lower-case name.
M.commands = {}

-- Every command and subcommand, by full name, in registration order.
M.all = {}

-- Registers handler fn for name ("get", or "config|get" for a
-- subcommand, whose container is registered first). arity, the flags and
-- the key specs come from commands.lua. flags: pubsub, txn (above); all
-- (FLUSHALL: every key changes); keys = function(argv, argc, fn) calling
-- fn(k) for each key the command changes, where the key specs do not say
-- it (SORT's STORE); getkeys = function(argv, argc) -> { { i, flags } }
-- the positions (0-based) of all its keys with their flags, for COMMAND
-- GETKEYS where the key specs do not find them (Redis's getkeys_proc).
function M.register(name, fn, flags)
  flags = flags or {}
  local m = meta[name]
  if not m then error("kv: no entry for command '" .. name .. "' in commands.lua", 2) end
  local mflags = {}
  for w in gmatch(m.flags, "%S+") do mflags[w] = true end
  local specs = {}
  for i, s in ipairs(m.opt.keys or {}) do specs[i] = parse_spec(s) end
  local cmd = { name = name, arity = m.arity, fn = fn, write = mflags.write or false,
                flag = mflags, pubsub = flags.pubsub or false, txn = flags.txn or false,
                all = flags.all or false, keys = flags.keys, getkeys = flags.getkeys, meta = m,
                specs = specs,
                calls = 0, usec = 0, rejected = 0, failed = 0 }
  -- The keys a write command may change: those of its key specs that
  -- write (RW, OW, RM), as the snapshot, WATCH and notifications need.
  local wspecs = {}
  for _, s in ipairs(specs) do
    if s.is.RW or s.is.OW or s.is.RM then wspecs[#wspecs + 1] = s end
  end
  cmd.wspecs = wspecs
  local top, subname = name:match("^([^|]+)|(.+)$")
  if top then
    local parent = M.commands[top]
    if not parent then error("kv: register " .. top .. " before " .. name, 2) end
    parent.subs = parent.subs or {}
    parent.subs[subname] = cmd
    cmd.parent = parent
  else
    M.commands[name] = cmd
    M.commands[upper(name)] = cmd
  end
  M.all[#M.all + 1] = cmd
  return cmd
end

-- Calls fn(k) for each key a write command may change (its writing key
-- specs, or its keys function). O(keys).
function M.each_key(cmd, argv, argc, fn)
  if cmd.keys then return cmd.keys(argv, argc, fn) end
  local specs = cmd.wspecs
  for i = 1, #specs do
    local s = specs[i]
    if s.bs == "index" and s.fk == "range" and s.limit == 0 then
      -- The usual case, without a closure: keys from index to lastkey.
      local last = s.lastkey >= 0 and s.index + s.lastkey or argc + s.lastkey
      if last >= argc then last = argc - 1 end
      for j = s.index, last, s.keystep do fn(argv[j + 1]) end
    else
      spec_keys(s, argv, argc, function(j) fn(argv[j + 1]) end)
    end
  end
end

-- The command for argv (its container's subcommand when it has them), or
-- nil; and for a container, whether the subcommand was unknown.
function M.lookup(argv, argc)
  local name = argv[1]
  local cmd = M.commands[name] or M.commands[lower(name)]
  if cmd and cmd.subs and argc >= 2 then
    local s = cmd.subs[lower(argv[2])]
    if s then return s end
    return cmd, true
  end
  return cmd
end

-- Set by a handler that changed data, read and reset by the dispatcher:
-- true logs the request as received; a string logs that RESP instead (a
-- relative expiry becomes an absolute one, BLPOP becomes LPOP).
M.prop = nil

-- Set by a handler that changed only some of the keys it names (SMOVE
-- into a set that had the member): the keys that changed, for WATCH.
M.changed = nil

-- Keyspace notifications a command sends itself, where its keys change
-- in different ways (LMOVE pops one key and pushes the other): note()
-- appends an event, noted says the command's own replace the default
-- (notify.lua). notifying mirrors notify.on, so handlers note nothing
-- while no one listens.
M.notifying = false
M.notes = nil
M.noted = false

-- Queues an event (sent once the command is done, in order).
function M.event(class, event, key)
  if not M.notifying then return end
  local t = M.notes
  if not t then
    t = {}
    M.notes = t
  end
  t[#t + 1], t[#t + 2], t[#t + 3] = class, event, key
end

-- Queues one of the command's own events (which replace the default).
function M.note(class, event, key)
  if not M.notifying then return end
  M.event(class, event, key)
  M.noted = true
end

-- Set by a handler that counted its own error replies in INFO's
-- errorstats and its failed calls (EVAL, FCALL: a script's reply may
-- hold errors anywhere, some counted already by the commands it ran);
-- read and reset by the dispatcher.
M.error_counted = false

-- Extra records a command logs after itself (the pops that serve blocked
-- clients); an array of RESP strings, or nil.
M.extra = nil

-- Logs rec (a RESP string) after the current command's own record.
function M.log_after(rec)
  local e = M.extra
  if not e then
    e = {}
    M.extra = e
  end
  e[#e + 1] = rec
end

-- key -> true for keys that got elements while clients block on them;
-- the dispatcher serves them once the command (or the whole EXEC) is
-- logged.
M.ready = {}
M.any_ready = false

-- Counters for INFO.
M.stats = {
  started = 0,            -- Unix seconds at start
  connections = 0,        -- total accepted
  rejected_conns = 0,     -- refused past maxclients
  clients = 0,            -- connected now
  blocked = 0,            -- in BLPOP/BRPOP now
  paused = 0,             -- inside a long command that let others run now
  commands = 0,           -- processed
  pubsub_channels = 0,
  pubsub_patterns = 0,
  errors = {},            -- error code ("ERR", "WRONGTYPE") -> replies with it
  error_replies = 0,      -- error replies, of commands and refusals
  evicted = 0,            -- keys maxmemory evicted
  net_in = 0,             -- bytes read from clients
  net_out = 0,            -- bytes sent to clients
}

-- id -> client, for every connection (CLIENT LIST, KILL).
M.clients = {}

-- Settings from the command line (main.lua fills them) and CONFIG SET.
M.config = {
  maxclients = 10000,     -- connections at most (0: no limit)
  timeout = 0,            -- seconds an idle client may stay (0: for ever)
  notify = "",            -- notify-keyspace-events, as Redis's flags
  port = 6379,
  bind = "127.0.0.1",
  dir = ".",
  appendonly = true,
  appendfsync = "everysec",
}

-- kind -> function(v) -> command, flat array of arguments after the key,
-- their count, arguments per item: how the log rewrite records a value of
-- that kind (a copy: the rewrite yields while it writes it out).
M.dumpers = {}

-- Called before a key changes outside the command that names it (a
-- blocked client served after a push, a key maxmemory evicts): the log
-- rewrite's snapshot records it first and WATCHers see it change (set by
-- server.lua).
M.modified = function() end

-- kind -> function(v) -> an independent copy of v (COPY).
M.copiers = {}

-- kind -> function(v) -> bytes v holds, about (maxmemory's accounting).
M.sizers = {}

-- Set by aof.lua: the reason writes are refused, or nil.
M.write_error = nil

return M
