-- Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis 7.0's
-- rules (multi.c). Between MULTI and EXEC a client's commands are queued
-- (+QUEUED); one that is unknown or has the wrong number of arguments is
-- refused there and makes EXEC answer EXECABORT. EXEC runs the queue with
-- nothing in between (no command of the queue yields: KEYS does not
-- pause, blocking pops do not block) and answers an array of the
-- replies, or a null array if a key the client WATCHes changed since.
-- A transaction's records are logged between MULTI and EXEC records, so
-- a log cut inside one loads none of it (aof.lua drops the unfinished
-- transaction at the end of the log, as Redis's loader does).
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local put = resp.put

local reg = R.register

local M = {}

-- Set by server.lua: dispatch(c, argv, argc, out, n) -> n.
M.dispatch = nil

M.MULTI_REC = resp.encode({ "MULTI" }, 1)
M.EXEC_REC = resp.encode({ "EXEC" }, 1)

-- -- WATCH ---------------------------------------------------------------

local watchers = {}   -- key -> { [client] = true }
M.watched = 0         -- keys with watchers (the dispatcher skips the marking at 0)

local function unwatch_all(c)
  local w = c.watching
  if not w then return end
  for k in pairs(w) do
    local set = watchers[k]
    if set then
      set[c] = nil
      if next(set) == nil then
        watchers[k] = nil
        M.watched = M.watched - 1
      end
    end
  end
  c.watching, c.dirty = nil, false
end
M.forget = unwatch_all

-- Marks the clients watching k: k changed. Called by the dispatcher for
-- the keys of a write command that changed data.
function M.changed(k)
  local set = watchers[k]
  if set then
    for c in pairs(set) do c.dirty = true end
  end
end

-- FLUSHALL: every watched key that exists now changes.
function M.changed_all(exists)
  for k, set in pairs(watchers) do
    if exists(k) then
      for c in pairs(set) do c.dirty = true end
    end
  end
end

-- A key already past its deadline is deleted before it is watched, so its
-- deletion is not taken for a change later (Redis's watchedKey.expired).
reg("watch", function(c, argv, argc, out, n)
  if c.multi then return put(out, n, "-ERR WATCH inside MULTI is not allowed\r\n") end
  c.watching = c.watching or {}
  for i = 2, argc do
    local k = argv[i]
    store.get(k)
    if not c.watching[k] then
      c.watching[k] = true
      local set = watchers[k]
      if not set then
        set = {}
        watchers[k] = set
        M.watched = M.watched + 1
      end
      set[c] = true
    end
  end
  return put(out, n, resp.OK)
end, { txn = true })

reg("unwatch", function(c, _, _, out, n)
  unwatch_all(c)
  return put(out, n, resp.OK)
end, { txn = true })

-- -- MULTI / EXEC ----------------------------------------------------------

reg("multi", function(c, _, _, out, n)
  if c.multi then return put(out, n, "-ERR MULTI calls can not be nested\r\n") end
  c.multi = { n = 0, aborted = false }
  return put(out, n, resp.OK)
end, { txn = true })

reg("discard", function(c, _, _, out, n)
  if not c.multi then return put(out, n, "-ERR DISCARD without MULTI\r\n") end
  c.multi = nil
  unwatch_all(c)
  return put(out, n, resp.OK)
end, { txn = true })

-- EXEC: a watched key that reached its deadline since WATCH counts as
-- changed even if nothing deleted it yet (the lookup deletes it now).
reg("exec", function(c, _, _, out, n)
  local q = c.multi
  if not q then return put(out, n, "-ERR EXEC without MULTI\r\n") end
  c.multi = nil
  if c.watching and not c.dirty then
    for k in pairs(c.watching) do store.get(k) end
  end
  local dirty = c.dirty
  unwatch_all(c)
  if q.aborted then
    return put(out, n, "-EXECABORT Transaction discarded because of previous errors.\r\n")
  end
  if dirty then return resp.null_array(out, n) end
  n = resp.array(out, n, q.n)
  c.in_exec, c.multi_logged = true, false
  local pause = c.pause
  c.pause = nil
  local dispatch = M.dispatch
  for i = 1, q.n do
    local argv = q[i]
    n = dispatch(c, argv, #argv, out, n)
  end
  c.pause = pause
  c.in_exec = false
  if c.multi_logged then
    c.multi_logged = false
    R.log_exec_end = true
  end
  return n
end, { txn = true })

-- Queues a command (cmd) in c's transaction, or refuses it (err: the
-- error reply, which aborts the transaction). Returns the new reply count.
function M.queue(c, argv, argc, out, n, err, cmd)
  local q = c.multi
  if err then
    q.aborted = true
    return put(out, n, err)
  end
  if cmd.flag.denyoom then q.denyoom = true end   -- EXEC is refused while out of memory
  local copy = {}
  for i = 1, argc do copy[i] = argv[i] end
  q.n = q.n + 1
  q[q.n] = copy
  return put(out, n, "+QUEUED\r\n")
end

-- Whether a command name runs at once inside MULTI.
function M.runs_now(cmd)
  return cmd.txn or cmd.name == "quit" or cmd.name == "reset"
end

return M
