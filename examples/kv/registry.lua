-- The command table and the state commands share with the connection
-- loop: how a command asks for its logging, which list keys got elements
-- while clients wait on them, and the server's counters.
local M = {}

-- name -> command, under the lower- and upper-case spellings (other
-- spellings are lowered first). A command is { name, arity, fn, write,
-- pubsub }: arity as Redis's (n: exactly n arguments with the name;
-- -n: at least n); fn(c, argv, argc, out, n) appends its reply to out
-- after position n and returns the new length; write marks commands that
-- change data (refused while the log cannot be written); pubsub marks
-- those allowed in subscribed mode; txn those that run at once inside
-- MULTI (the others are queued).
M.commands = {}

--
-- The keys a write command changes, for the log rewrite's snapshot (as
-- Redis's firstkey, lastkey, step): flags.first (default 2), flags.last
-- (default first; -1 the last argument, -2 the one before), flags.step
-- (default 1); or flags.keys = function(argv, argc, touch) calling
-- touch(k) for each; or flags.all for FLUSHALL.
function M.register(name, arity, fn, flags)
  flags = flags or {}
  local first = flags.first or 2
  local cmd = { name = name, arity = arity, fn = fn, write = flags.write or false,
                pubsub = flags.pubsub or false, first = first, last = flags.last or first,
                step = flags.step or 1, keys = flags.keys, all = flags.all or false,
                txn = flags.txn or false }
  M.commands[name] = cmd
  M.commands[name:upper()] = cmd
end

-- Set by a handler that changed data, read and reset by the dispatcher:
-- true logs the request as received; a string logs that RESP instead (a
-- relative expiry becomes an absolute one, BLPOP becomes LPOP).
M.prop = nil

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

-- key -> true for list keys that got elements while clients block on
-- them; the dispatcher serves them once the command is logged.
M.ready = {}
M.any_ready = false

-- Counters for INFO.
M.stats = {
  started = 0,            -- Unix seconds at start
  connections = 0,        -- total accepted
  clients = 0,            -- connected now
  blocked = 0,            -- in BLPOP/BRPOP now
  paused = 0,             -- inside a long command that let others run now
  commands = 0,           -- processed
  pubsub_channels = 0,
  pubsub_patterns = 0,
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
-- blocked client served after a push): the log rewrite's snapshot
-- records it first and WATCHers see it change (set by server.lua).
M.modified = function() end

-- kind -> function(v) -> an independent copy of v (COPY).
M.copiers = {}

-- Set by aof.lua: the reason writes are refused, or nil.
M.write_error = nil

return M
