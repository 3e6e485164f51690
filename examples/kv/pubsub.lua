-- Publish/subscribe: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE,
-- PUBLISH. A subscribed client gets a writer thread (c:deliver), so a
-- publisher never writes to another client's socket itself and a slow
-- subscriber never holds a publisher up.
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"

local reg = R.register
local bulk_str, int = resp.bulk_str, resp.int

local M = {}

local channels = {}   -- channel -> { [client] = true }
local patterns = {}   -- pattern -> { match = fn, clients = { [client] = true } }

local function count(c)
  return c.nsubs or 0
end

-- The reply for one (un)subscription to client c: kind, the name (nil:
-- null), count; for RESP3 a push.
local function sub_reply(c, kind, name, n)
  return resp.push_head(3, c.proto) .. bulk_str(kind)
    .. (name and bulk_str(name) or resp.null_for(c.proto)) .. int(n)
end

local function subscribe(c, ch)
  c.subs = c.subs or {}
  if c.subs[ch] then return end
  c.subs[ch] = true
  c.nsubs = count(c) + 1
  local set = channels[ch]
  if not set then
    set = {}
    channels[ch] = set
    R.stats.pubsub_channels = R.stats.pubsub_channels + 1
  end
  set[c] = true
end

local function unsubscribe(c, ch)
  if not (c.subs and c.subs[ch]) then return false end
  c.subs[ch] = nil
  c.nsubs = count(c) - 1
  local set = channels[ch]
  set[c] = nil
  if next(set) == nil then
    channels[ch] = nil
    R.stats.pubsub_channels = R.stats.pubsub_channels - 1
  end
  return true
end

local function psubscribe(c, pat)
  c.psubs = c.psubs or {}
  if c.psubs[pat] then return end
  c.psubs[pat] = true
  c.nsubs = count(c) + 1
  local p = patterns[pat]
  if not p then
    p = { match = store.matcher(pat), clients = {} }
    patterns[pat] = p
    R.stats.pubsub_patterns = R.stats.pubsub_patterns + 1
  end
  p.clients[c] = true
end

local function punsubscribe(c, pat)
  if not (c.psubs and c.psubs[pat]) then return false end
  c.psubs[pat] = nil
  c.nsubs = count(c) - 1
  local p = patterns[pat]
  p.clients[c] = nil
  if next(p.clients) == nil then
    patterns[pat] = nil
    R.stats.pubsub_patterns = R.stats.pubsub_patterns - 1
  end
  return true
end

reg("subscribe", function(c, argv, argc, out, n)
  c:start_writer()
  for i = 2, argc do
    subscribe(c, argv[i])
    n = n + 1
    out[n] = sub_reply(c, "subscribe", argv[i], count(c))
  end
  return n
end, { pubsub = true })

reg("psubscribe", function(c, argv, argc, out, n)
  c:start_writer()
  for i = 2, argc do
    psubscribe(c, argv[i])
    n = n + 1
    out[n] = sub_reply(c, "psubscribe", argv[i], count(c))
  end
  return n
end, { pubsub = true })

-- UNSUBSCRIBE/PUNSUBSCRIBE [name ...]: without names, from all; with
-- nothing to leave, one reply with a null name.
local function unsub(kind, list_of, leave)
  return function(c, argv, argc, out, n)
    local names = {}
    if argc > 1 then
      for i = 2, argc do names[#names + 1] = argv[i] end
    else
      for name in pairs(list_of(c) or {}) do names[#names + 1] = name end
    end
    if #names == 0 then
      n = n + 1
      out[n] = sub_reply(c, kind, nil, count(c))
      return n
    end
    for _, name in ipairs(names) do
      leave(c, name)
      n = n + 1
      out[n] = sub_reply(c, kind, name, count(c))
    end
    return n
  end
end
reg("unsubscribe", unsub("unsubscribe", function(c) return c.subs end, unsubscribe),
    { pubsub = true })
reg("punsubscribe", unsub("punsubscribe", function(c) return c.psubs end, punsubscribe),
    { pubsub = true })

-- Sends msg to the subscribers of channel ch and of matching patterns;
-- returns how many got it.
local function publish(ch, msg)
  local receivers = 0
  local set = channels[ch]
  if set then
    -- The frame's body once; its head is RESP2's array or RESP3's push.
    local body = "$7\r\nmessage\r\n" .. bulk_str(ch) .. bulk_str(msg)
    for c in pairs(set) do
      c:deliver(resp.push_head(3, c.proto) .. body)
      receivers = receivers + 1
    end
  end
  for pat, p in pairs(patterns) do
    if p.match(ch) then
      local body = "$8\r\npmessage\r\n" .. bulk_str(pat) .. bulk_str(ch) .. bulk_str(msg)
      for c in pairs(p.clients) do
        c:deliver(resp.push_head(4, c.proto) .. body)
        receivers = receivers + 1
      end
    end
  end
  return receivers
end
require("kv.notify").set_publisher(publish)

-- PUBLISH channel message -> the number of clients that got it.
reg("publish", function(_, argv, _, out, n)
  return put(out, n, int(publish(argv[2], argv[3])))
end)

-- PUBSUB CHANNELS [pattern], NUMSUB [channel ...], NUMPAT, HELP.
reg("pubsub", nil)

reg("pubsub|channels", function(_, argv, argc, out, n)
  local match = argc == 3 and store.matcher(argv[3]) or nil
  local t = {}
  for ch in pairs(channels) do
    if not match or match(ch) then t[#t + 1] = ch end
  end
  return resp.bulk_array(out, n, t, #t)
end)

reg("pubsub|numsub", function(_, argv, argc, out, n)
  n = resp.array(out, n, (argc - 2) * 2)
  for i = 3, argc do
    local count = 0
    for _ in pairs(channels[argv[i]] or {}) do count = count + 1 end
    n = resp.bulk(out, n, argv[i])
    n = put(out, n, int(count))
  end
  return n
end)

reg("pubsub|numpat", function(_, _, _, out, n)
  local count = 0
  for _ in pairs(patterns) do count = count + 1 end
  return put(out, n, int(count))
end)

reg("pubsub|help", function(_, _, _, out, n)
  return require("kv.monitor").help(out, n, {
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "HELP",
    "    Prints this help.",
  })
end)

-- Drops every subscription of a client that is leaving.
function M.forget(c)
  if c.subs then
    for ch in pairs(c.subs) do unsubscribe(c, ch) end
  end
  if c.psubs then
    for pat in pairs(c.psubs) do punsubscribe(c, pat) end
  end
end

return M
