-- Connection commands: HELLO (RESP2 only), CLIENT (ID, SETNAME, GETNAME,
-- LIST, INFO, KILL, HELP), RESET. Replies are Redis 7.0's (networking.c).
-- R.clients holds every connected client by id (server.lua adds and
-- removes them).
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local multi = require "kv.multi"
local ints = require "kv.ints"

local reg = R.register
local bulk, int = resp.bulk, resp.int
local lower, format, concat, floor = string.lower, string.format, table.concat, math.floor

local M = {}

M.VERSION = "7.0.0"

-- HELLO [protover [AUTH user pass] [SETNAME name]]: RESP2 only; the
-- reply is the server's properties as a flat array.
reg("hello", -1, function(c, argv, argc, out, n)
  local j = 2
  if argc >= 2 then
    local v = ints.parse(argv[2])
    if v == nil then
      return put(out, n, "-ERR Protocol version is not an integer or out of range\r\n")
    end
    if v ~= 2 then return put(out, n, "-NOPROTO unsupported protocol version\r\n") end
    j = 3
  end
  local name
  while j <= argc do
    local o = lower(argv[j])
    if o == "setname" and j < argc then
      name = argv[j + 1]
      j = j + 2
    elseif o == "auth" and j + 2 <= argc then
      return put(out, n, "-ERR AUTH <password> called without any password configured for the "
                 .. "default user. Are you sure your configuration is correct?\r\n")
    else
      return put(out, n, resp.err("ERR Syntax error in HELLO option '" .. argv[j] .. "'"))
    end
  end
  if name then
    if name:find("[^!-~]") then
      return put(out, n, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n")
    end
    c.name = name
  end
  n = put(out, n, "*14\r\n")
  for _, v in ipairs { "server", "redis", "version", M.VERSION, "proto" } do n = bulk(out, n, v) end
  n = put(out, n, ":2\r\n")
  n = bulk(out, n, "id")
  n = put(out, n, int(c.id))
  for _, v in ipairs { "mode", "standalone", "role", "master", "modules" } do n = bulk(out, n, v) end
  return put(out, n, resp.EMPTY_ARRAY)
end)

-- One CLIENT LIST line, with Redis's fields (those kv has no notion of
-- are 0 or empty, as an idle Redis client shows them).
local function info_line(c)
  local now = cohost.monotonic()
  local flags = ""
  if c.multi then flags = flags .. "x" end
  if c.nsubs > 0 then flags = flags .. "P" end
  if c.blocked then flags = flags .. "b" end
  if flags == "" then flags = "N" end
  return format("id=%d addr=%s laddr=%s fd=0 name=%s age=%d idle=%d flags=%s db=0 sub=%d psub=%d "
    .. "ssub=0 multi=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 "
    .. "omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=2",
    c.id, c.peer or "", c.laddr or "", c.name or "", floor(now - (c.since or now)),
    floor(now - (c.last or now)), flags, c.subs and M.count(c.subs) or 0,
    c.psubs and M.count(c.psubs) or 0, c.multi and c.multi.n or -1, c.last_cmd or "NULL")
end

function M.count(t)
  local k = 0
  for _ in pairs(t) do k = k + 1 end
  return k
end

-- Ends client c: it gets no more replies, and its connection closes at
-- its next request (its socket is shut for sending now, so a client
-- that waits for a reply sees the end at once).
local function kill(c)
  c.quit = true
  c.killed = true
  if c.sock then c.sock:shutdown("send") end
end

local CLIENT_HELP = {
  "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
  "GETNAME", "    Return the name of the current connection.",
  "ID", "    Return the ID of the current connection.",
  "INFO", "    Return information about the current client connection.",
  "KILL <ip:port>", "    Kill connection made from <ip:port>.",
  "KILL <option> <value> [<option> <value> [...]]",
  "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, SKIPME (YES|NO).",
  "LIST [TYPE (NORMAL|PUBSUB)] [ID <client-id> [<client-id> ...]]",
  "    Return information about client connections.",
  "SETNAME <name>", "    Assign the name <name> to the current connection.",
  "HELP", "    Print this help.",
}

reg("client", -2, function(c, argv, argc, out, n)
  local sub = lower(argv[2])
  if sub == "id" and argc == 2 then
    return put(out, n, int(c.id))
  elseif sub == "getname" and argc == 2 then
    if not c.name or c.name == "" then return put(out, n, resp.NULL) end
    return bulk(out, n, c.name)
  elseif sub == "setname" and argc == 3 then
    local name = argv[3]
    if name:find("[^!-~]") then
      return put(out, n, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n")
    end
    c.name = name ~= "" and name or nil
    return put(out, n, resp.OK)
  elseif sub == "info" and argc == 2 then
    return bulk(out, n, info_line(c) .. "\n")
  elseif sub == "list" then
    local want_type, ids
    local j = 3
    while j <= argc do
      local o = lower(argv[j])
      if o == "type" and j < argc then
        want_type = lower(argv[j + 1])
        if want_type ~= "normal" and want_type ~= "pubsub" and want_type ~= "master"
            and want_type ~= "replica" then
          return put(out, n, resp.err("ERR Unknown client type '" .. argv[j + 1] .. "'"))
        end
        j = j + 2
      elseif o == "id" and j < argc then
        ids = {}
        for q = j + 1, argc do
          local id = ints.parse(argv[q])
          if id == nil or id <= 0 then return put(out, n, "-ERR Invalid client ID\r\n") end
          ids[id] = true
        end
        j = argc + 1
      else
        return put(out, n, resp.SYNTAX)
      end
    end
    local order = {}
    for id in pairs(R.clients) do order[#order + 1] = id end
    table.sort(order)
    local lines = {}
    for _, id in ipairs(order) do
      local x = R.clients[id]
      local kind = x.nsubs > 0 and "pubsub" or "normal"
      if (not ids or ids[id]) and (not want_type or want_type == kind) then
        lines[#lines + 1] = info_line(x) .. "\n"
      end
    end
    return bulk(out, n, concat(lines))
  elseif sub == "kill" and argc >= 3 then
    if argc == 3 then
      -- The old form: CLIENT KILL addr:port.
      for _, x in pairs(R.clients) do
        if x.peer == argv[3] then
          kill(x)
          return put(out, n, resp.OK)
        end
      end
      return put(out, n, "-ERR No such client\r\n")
    end
    local id, addr, skipme = nil, nil, true
    local j = 3
    while j < argc do
      local o, v = lower(argv[j]), argv[j + 1]
      if o == "id" then
        id = ints.parse(v)
        if id == nil or id <= 0 then return put(out, n, "-ERR client-id should be greater than 0\r\n") end
      elseif o == "addr" then
        addr = v
      elseif o == "skipme" then
        local yn = lower(v)
        if yn ~= "yes" and yn ~= "no" then return put(out, n, resp.SYNTAX) end
        skipme = yn == "yes"
      else
        return put(out, n, resp.SYNTAX)
      end
      j = j + 2
    end
    if j == argc then return put(out, n, resp.SYNTAX) end
    local killed = 0
    for _, x in pairs(R.clients) do
      if (not id or x.id == id) and (not addr or x.peer == addr) and not (skipme and x == c) then
        kill(x)
        killed = killed + 1
      end
    end
    return put(out, n, int(killed))
  elseif sub == "help" and argc == 2 then
    n = put(out, n, resp.array_head(#CLIENT_HELP))
    for _, l in ipairs(CLIENT_HELP) do n = put(out, n, resp.simple(l)) end
    return n
  end
  local known = { id = 1, getname = 1, setname = 1, info = 1, list = 1, kill = 1, help = 1 }
  if known[sub] then
    return put(out, n, "-ERR wrong number of arguments for 'client|" .. sub .. "' command\r\n")
  end
  return put(out, n, resp.err("ERR unknown subcommand '" .. argv[2]:sub(1, 128)
                              .. "'. Try CLIENT HELP."))
end)

-- RESET: the connection as new (no transaction, watches, subscriptions
-- or name).
reg("reset", 1, function(c, _, _, out, n)
  c.multi = nil
  multi.forget(c)
  require("kv.pubsub").forget(c)
  c.nsubs, c.subs, c.psubs = 0, nil, nil
  c.name = nil
  return put(out, n, "+RESET\r\n")
end, { pubsub = true, txn = true })

return M
