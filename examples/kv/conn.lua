-- Connection commands: HELLO (RESP2 and RESP3), CLIENT (ID, SETNAME,
-- GETNAME, LIST, INFO, KILL, REPLY, UNBLOCK, HELP), RESET. Replies are
-- Redis 7.0's (networking.c). R.clients holds every connected client by
-- id (server.lua adds and removes them).
local ffi = require "ffi"
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local multi = require "kv.multi"
local ints = require "kv.ints"
local lists = require "kv.lists"
local monitor = require "kv.monitor"

local reg = R.register
local bulk, int = resp.bulk, resp.int
local lower, format, concat, floor = string.lower, string.format, table.concat, math.floor

local M = {}

M.VERSION = "7.0.0"

local function bad_name(name)
  return name:find("[^!-~]") ~= nil
end
local BAD_NAME = "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"

-- HELLO [protover [AUTH user pass] [SETNAME name]]: switches to RESP2 or
-- RESP3 and answers the server's properties (a map). The default user
-- has no password, as a Redis without requirepass: AUTH default takes
-- any password, another user is refused.
reg("hello", function(c, argv, argc, out, n)
  local j, proto = 2, c.proto
  if argc >= 2 then
    local v = ints.parse(argv[2])
    if v == nil then
      return put(out, n, "-ERR Protocol version is not an integer or out of range\r\n")
    end
    if v ~= 2 and v ~= 3 then return put(out, n, "-NOPROTO unsupported protocol version\r\n") end
    proto = tonumber(v)
    j = 3
  end
  local name
  while j <= argc do
    local o = lower(argv[j])
    if o == "setname" and j < argc then
      name = argv[j + 1]
      j = j + 2
    elseif o == "auth" and j + 2 <= argc then
      if argv[j + 1] ~= "default" then
        return put(out, n, "-WRONGPASS invalid username-password pair or user is disabled.\r\n")
      end
      j = j + 3
    else
      return put(out, n, resp.err("ERR Syntax error in HELLO option '" .. argv[j] .. "'"))
    end
  end
  if name then
    if bad_name(name) then return put(out, n, BAD_NAME) end
    c.name = name ~= "" and name or nil
  end
  c.proto = proto
  resp.use(proto)
  n = resp.map(out, n, 7)
  n = bulk(out, n, "server")
  n = bulk(out, n, "redis")
  n = bulk(out, n, "version")
  n = bulk(out, n, M.VERSION)
  n = bulk(out, n, "proto")
  n = put(out, n, int(proto))
  n = bulk(out, n, "id")
  n = put(out, n, int(c.id))
  for _, v in ipairs { "mode", "standalone", "role", "master", "modules" } do n = bulk(out, n, v) end
  return put(out, n, resp.EMPTY_ARRAY)
end)

-- -- CLIENT LIST's lines -------------------------------------------------------

ffi.cdef [[
long readlink(const char *path, char *buf, size_t size);
]]
local linkbuf = ffi.new("char[64]")

-- The local address of an IPv4 or IPv6 socket from /proc/net, by the
-- socket's inode (a listener bound to a wildcard accepts on any local
-- address, and cohost's sockets have no getsockname). O(sockets); asked
-- once a client, by CLIENT LIST or INFO.
local function proc_local_addr(fd)
  local len = ffi.C.readlink("/proc/self/fd/" .. fd, linkbuf, 64)
  if len <= 0 then return nil end
  local inode = ffi.string(linkbuf, len):match("^socket:%[(%d+)%]$")
  if not inode then return nil end
  for _, file in ipairs { "/proc/net/tcp", "/proc/net/tcp6" } do
    local f = io.open(file)
    if f then
      for line in f:lines() do
        local addr, port, ino = line:match("^%s*%d+: (%x+):(%x+) %x+:%x+ %x+ %x+:%x+ %x+:%x+ %x+%s+%d+%s+%d+%s+(%d+)")
        if ino == inode then
          f:close()
          local p = tonumber(port, 16)
          if #addr == 8 then
            local b = {}
            for i = 4, 1, -1 do b[#b + 1] = tonumber(addr:sub(2 * i - 1, 2 * i), 16) end
            return format("%d.%d.%d.%d:%d", b[1], b[2], b[3], b[4], p)
          end
          -- IPv6: four 32-bit words, each in host (little-endian) order.
          local groups = {}
          for w = 0, 3 do
            local word = addr:sub(8 * w + 1, 8 * w + 8)
            local bytes = {}
            for i = 4, 1, -1 do bytes[#bytes + 1] = word:sub(2 * i - 1, 2 * i) end
            local h = concat(bytes)
            groups[#groups + 1] = format("%x", tonumber(h:sub(1, 4), 16))
            groups[#groups + 1] = format("%x", tonumber(h:sub(5, 8), 16))
          end
          return concat(groups, ":") .. ":" .. p
        end
      end
      f:close()
    end
  end
  return nil
end

local WILDCARD = { ["0.0.0.0"] = true, ["::"] = true, ["*"] = true, [""] = true }

-- The address the client connected to (Redis's laddr).
local function laddr(c)
  if c.laddr then return c.laddr end
  local bind = R.config.bind
  if not WILDCARD[bind] then
    c.laddr = (bind:find(":") and "[" .. bind .. "]" or bind) .. ":" .. R.config.port
  else
    c.laddr = c.fd and proc_local_addr(c.fd) or ""
  end
  return c.laddr
end

local function count(t)
  local k = 0
  for _ in pairs(t or {}) do k = k + 1 end
  return k
end
M.count = count

-- One CLIENT LIST line with Redis 7.0's fields. Buffer and memory sizes
-- kv does not keep per client are 0.
local function info_line(c)
  local now = cohost.monotonic()
  local flags = ""
  if c.multi then flags = flags .. "x" end
  if c.nsubs > 0 then flags = flags .. "P" end
  if c.blocked then flags = flags .. "b" end
  if c.dirty then flags = flags .. "d" end
  if c.killed then flags = flags .. "A" end
  if flags == "" then flags = "N" end
  return format("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=0 sub=%d psub=%d "
    .. "ssub=0 multi=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 "
    .. "omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=%d",
    c.id, c.peer or "", laddr(c), c.fd or -1, c.name or "", floor(now - (c.since or now)),
    floor(now - (c.last or now)), flags, count(c.subs), count(c.psubs),
    c.multi and c.multi.n or -1, c.last_cmd or "NULL", c.proto)
end

-- Ends client c: it gets no more replies, leaves the client list at once
-- and its connection closes at its next request (its socket is shut for
-- sending now, so a client waiting for a reply sees the end at once); a
-- blocked wait ends.
local function kill(c)
  c.quit = true
  c.killed = true
  R.detach(c)
  if c.blocked then lists.finish(c.blocked) end
  if c.sock and not c.gone then c.sock:shutdown("send") end
end

-- -- CLIENT ---------------------------------------------------------------------

reg("client", nil)

reg("client|id", function(c, _, _, out, n)
  return put(out, n, int(c.id))
end)

reg("client|getname", function(c, _, _, out, n)
  if not c.name then return resp.null(out, n) end
  return bulk(out, n, c.name)
end)

reg("client|setname", function(c, argv, _, out, n)
  local name = argv[3]
  if bad_name(name) then return put(out, n, BAD_NAME) end
  c.name = name ~= "" and name or nil
  return put(out, n, resp.OK)
end)

reg("client|info", function(c, _, _, out, n)
  return resp.verbatim(out, n, info_line(c) .. "\n")
end)

local TYPES = { normal = true, pubsub = true, master = true, replica = true, slave = true }

local function kind(c)
  return c.nsubs > 0 and "pubsub" or "normal"
end

-- CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id [id ...]]
reg("client|list", function(_, argv, argc, out, n)
  local want_type, ids
  local j = 3
  while j <= argc do
    local o = lower(argv[j])
    if o == "type" and j < argc then
      want_type = lower(argv[j + 1])
      if not TYPES[want_type] then
        return put(out, n, resp.err("ERR Unknown client type '" .. argv[j + 1] .. "'"))
      end
      j = j + 2
    elseif o == "id" and j < argc then
      ids = {}
      for q = j + 1, argc do
        local id = ints.parse(argv[q])
        if id == nil then return put(out, n, "-ERR Invalid client ID\r\n") end
        ids[tonumber(id)] = true
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
    if (not ids or ids[id]) and (not want_type or want_type == kind(x)) then
      lines[#lines + 1] = info_line(x) .. "\n"
    end
  end
  return resp.verbatim(out, n, concat(lines))
end)

-- CLIENT KILL addr:port, or CLIENT KILL filter value [filter value ...]
-- with ID, ADDR, LADDR, TYPE, USER, SKIPME: the number killed.
reg("client|kill", function(c, argv, argc, out, n)
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
  local id, addr, local_addr, want_type, skipme = nil, nil, nil, nil, true
  local j = 3
  while j < argc do
    local o, v = lower(argv[j]), argv[j + 1]
    if o == "id" then
      id = ints.parse(v)
      if id == nil or id <= 0 then return put(out, n, "-ERR client-id should be greater than 0\r\n") end
      id = tonumber(id)
    elseif o == "addr" then
      addr = v
    elseif o == "laddr" then
      local_addr = v
    elseif o == "type" then
      want_type = lower(v)
      if not TYPES[want_type] then return put(out, n, resp.err("ERR Unknown client type '" .. v .. "'")) end
    elseif o == "user" then
      if v ~= "default" then return put(out, n, resp.err("ERR No such user '" .. v .. "'")) end
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
  local victims = {}
  for _, x in pairs(R.clients) do
    if (not id or x.id == id) and (not addr or x.peer == addr)
        and (not local_addr or laddr(x) == local_addr)
        and (not want_type or want_type == kind(x)) and not (skipme and x == c) then
      victims[#victims + 1] = x
    end
  end
  for _, x in ipairs(victims) do kill(x) end
  return put(out, n, int(#victims))
end)

-- CLIENT REPLY ON|OFF|SKIP: OFF and SKIP get no reply themselves; the
-- dispatcher drops the replies while OFF, and the next one after SKIP.
reg("client|reply", function(c, argv, _, out, n)
  local mode = lower(argv[3])
  if mode == "on" then
    c.reply_off, c.skip, c.skip_next = false, false, false
    return put(out, n, resp.OK)
  elseif mode == "off" then
    c.reply_off = true
    return n
  elseif mode == "skip" then
    if not c.reply_off then c.skip_next = true end
    return n
  end
  return put(out, n, resp.SYNTAX)
end)

-- CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends a blocking command's wait, as
-- if it timed out or with an error. 1 if the client was blocked.
reg("client|unblock", function(_, argv, argc, out, n)
  local id = ints.parse(argv[3])
  if id == nil then return put(out, n, resp.NOT_INT) end
  local err
  if argc == 4 then
    local why = lower(argv[4])
    if why == "error" then
      err = "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    elseif why ~= "timeout" then
      return put(out, n, "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n")
    end
  end
  local x = R.clients[tonumber(id)]
  if not x or not x.blocked or x.blocked.done then return put(out, n, resp.ZERO) end
  lists.finish(x.blocked, nil, err)
  return put(out, n, resp.ONE)
end)

reg("client|help", function(_, _, _, out, n)
  return monitor.help(out, n, {
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "HELP",
    "    Print this help.",
  })
end)

-- RESET: the connection as new (no transaction, watches, subscriptions,
-- name, RESP2, replies on).
reg("reset", function(c, _, _, out, n)
  c.multi = nil
  multi.forget(c)
  require("kv.pubsub").forget(c)
  c.nsubs, c.subs, c.psubs = 0, nil, nil
  c.name = nil
  c.proto = 2
  resp.use(2)
  c.reply_off, c.skip, c.skip_next = false, false, false
  return put(out, n, "+RESET\r\n")
end, { pubsub = true, txn = true })

return M
