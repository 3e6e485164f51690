-- Keyspace notifications (notify-keyspace-events, Redis's notify.c): a
-- change to key k publishes the event name on __keyspace@0__:k and k on
-- __keyevent@0__:<event>, for the classes the setting names. The
-- dispatcher calls changed() after a write command that changed data,
-- for each key it names; the event is the command's name, or Redis's
-- name for it (INCR -> incrby, HMSET -> hset...), its class the key's
-- type after the command ('g' for DEL, EXPIRE, RENAME, ...). A command
-- whose keys change in different ways (LMOVE pops one and pushes the
-- other, SETEX sets and expires) sends its own events with R.note and
-- the dispatcher sends those instead. Expiry sends "expired" (class x),
-- eviction "evicted" (e), a key created where there was none "new" (n),
-- a read of a missing key "keymiss" (m).
local R = require "kv.registry"
local store = require "kv.store"

local M = {}

-- flag letter -> class bit names; 'A' is every class but m and n.
local CLASSES = "g$lshzxetd"
local VALID = "Ag$lshzxeKEtmdn"

local flags = {}   -- letter -> true, from the setting
M.on = false       -- any class and K or E: notifications are sent

-- Parses a setting; returns the flags table or nil for a bad one.
local function parse(s)
  local f = {}
  for ch in s:gmatch(".") do
    if not VALID:find(ch, 1, true) then return nil end
    if ch == "A" then
      for c in CLASSES:gmatch(".") do f[c] = true end
    else
      f[ch] = true
    end
  end
  return f
end

-- The setting as Redis prints it.
function M.get()
  local all = true
  for c in CLASSES:gmatch(".") do if not flags[c] then all = false end end
  local t = {}
  if all then
    t[1] = "A"
  else
    for c in ("g$lshzxetdn"):gmatch(".") do if flags[c] then t[#t + 1] = c end end
  end
  for c in ("KEm"):gmatch(".") do if flags[c] then t[#t + 1] = c end end
  return table.concat(t)
end

local send

-- CONFIG SET notify-keyspace-events: true, or nil for a bad value.
function M.set(s)
  local f = parse(s)
  if not f then return nil end
  flags = f
  local any = false
  for c in (CLASSES .. "mn"):gmatch(".") do if f[c] then any = true end end
  M.on = any and (f.K or f.E) or false
  R.notifying = M.on
  store.on_miss = (M.on and f.m) and function(k) send("m", "keymiss", k) end or false
  return true
end

local publish   -- set by pubsub.lua: publish(channel, message)
function M.set_publisher(fn) publish = fn end

-- Publishes event on key k if its class is on.
function send(class, event, key)
  if not flags[class] then return end
  if flags.K then publish("__keyspace@0__:" .. key, event) end
  if flags.E then publish("__keyevent@0__:" .. event, key) end
end
M.send = send

local EVENTS = {
  incr = "incrby", decr = "decrby", setnx = "set", getset = "set", mset = "set", msetnx = "set",
  getdel = "del", unlink = "del", pexpire = "expire", expireat = "expire", pexpireat = "expire",
  hmset = "hset", hsetnx = "hset", zincrby = "zincr", copy = "copy_to",
}
local GENERIC = { del = true, unlink = true, expire = true, pexpire = true, expireat = true,
                  pexpireat = true, persist = true, rename = true, renamenx = true, copy = true,
                  getdel = true }
local CLASS = { string = "$", list = "l", set = "s", hash = "h", zset = "z", stream = "t" }
M.CLASS = CLASS

-- The class of a command's events by its group (commands.lua): for a
-- key the command emptied, whose type is gone with it.
local GROUP_CLASS = { string = "$", list = "l", set = "s", hash = "h", ["sorted-set"] = "z",
                      stream = "t" }

-- After command cmd changed key k.
function M.changed(cmd, k)
  local name = cmd.name
  local v = store.get(k)
  if name == "rename" or name == "renamenx" then
    -- k is the source or the destination: the one left holds the value.
    send("g", v == nil and "rename_from" or "rename_to", k)
    return
  end
  local event = EVENTS[name] or name
  if GENERIC[name] then
    send("g", event, k)
  elseif v ~= nil then
    send(CLASS[store.type_of(v)], event, k)
  else
    -- A collection the command emptied: its event, then "del".
    local class = GROUP_CLASS[cmd.meta.doc:match("^%S+")]
    if class then send(class, event, k) end
    send("g", "del", k)
  end
end

-- Sends the events a command noted itself (R.note): class, event, key
-- triples.
function M.flush(notes)
  for i = 1, #notes, 3 do send(notes[i], notes[i + 1], notes[i + 2]) end
end

return M
