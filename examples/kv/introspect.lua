-- COMMAND and its subcommands: INFO, DOCS, LIST, COUNT, GETKEYS,
-- GETKEYSANDFLAGS, HELP, from the command table (registry.lua) and
-- Redis's facts about each command (commands.lua). Replies have Redis
-- 7.0's shapes (server.c's addReplyCommandInfo, addReplyCommandDocs),
-- sets and maps included for RESP3 clients.
local R = require "kv.registry"
local resp = require "kv.resp"
local monitor = require "kv.monitor"

local reg = R.register
local put, bulk, int = resp.put, resp.bulk, resp.int
local lower, gmatch = string.lower, string.gmatch

local M = {}

local function words(s)
  local t = {}
  for w in gmatch(s or "", "%S+") do t[#t + 1] = w end
  return t
end

-- A set of status strings (flags, ACL categories).
local function status_set(out, n, list)
  n = resp.set(out, n, #list)
  for _, w in ipairs(list) do n = put(out, n, "+" .. w .. "\r\n") end
  return n
end

-- -- The argument syntax of commands.lua --------------------------------------

-- Parses the args string of a command into Redis's argument trees:
-- { name, type, token, key_spec_index, since, deprecated_since, flags,
-- args }. Grammar in commands.lua's header.
local function parse_args(s)
  local i, len = 1, #s
  local function skip() i = s:find("[^ ]", i) or len + 1 end
  local parse_list
  local function item()
    local optional = false
    if s:sub(i, i) == "[" then
      optional = true
      i = i + 1
    end
    local head_end = (s:find("[=#{@!%.%+%] }]", i) or len + 1) - 1
    local head = s:sub(i, head_end)
    i = head_end + 1
    local a = { flags = {} }
    local name, typ = head:match("^(.*):([%w-]+)$")
    if name then
      a.name, a.type = name, typ
    else
      a.name, a.type = head, "pure-token"
    end
    if s:sub(i, i) == "=" then
      -- A token runs to the next mark (it may be "=", "~" or "*": XADD's).
      local tok = s:match("^=([^%s#{}@!%]%.%+]+)", i)
      a.token = tok
      i = i + 1 + #tok
    end
    if s:sub(i, i) == "#" then
      local d = s:match("^#(%d+)", i)
      a.key_spec_index = tonumber(d)
      i = i + 1 + #d
    end
    if s:sub(i, i) == "{" then
      i = i + 1
      a.args = parse_list("}")
      i = i + 1
    end
    if s:sub(i, i) == "@" then
      local v = s:match("^@([%d.]+)", i)
      a.since = v
      i = i + 1 + #v
    end
    if s:sub(i, i) == "!" then
      local v = s:match("^!([%d.]+)", i)
      a.deprecated_since = v
      i = i + 1 + #v
    end
    if s:sub(i, i + 2) == "..." then
      a.flags[#a.flags + 1] = "multiple"
      i = i + 3
    end
    if s:sub(i, i) == "+" then
      a.flags[#a.flags + 1] = "multiple_token"
      i = i + 1
    end
    if optional then
      assert(s:sub(i, i) == "]", "commands.lua: ']' expected in " .. s)
      i = i + 1
      table.insert(a.flags, 1, "optional")
    end
    return a
  end
  function parse_list(stop)
    local t = {}
    skip()
    while i <= len and s:sub(i, i) ~= stop do
      t[#t + 1] = item()
      skip()
    end
    return t
  end
  return parse_list(nil)
end

-- The parsed arguments of a command's meta (parsed once, when first asked).
local function args_of(m)
  if m.args_tree == nil then m.args_tree = m.opt.args and parse_args(m.opt.args) or false end
  return m.args_tree
end
M.args_of = args_of

-- -- COMMAND INFO ---------------------------------------------------------------

local function key_spec(out, n, spec)
  n = resp.map(out, n, spec.notes and 4 or 3)
  if spec.notes then
    n = bulk(out, n, "notes")
    n = bulk(out, n, spec.notes)
  end
  n = bulk(out, n, "flags")
  n = status_set(out, n, spec.flags)
  n = bulk(out, n, "begin_search")
  n = resp.map(out, n, 2)
  n = bulk(out, n, "type")
  n = bulk(out, n, spec.bs)
  n = bulk(out, n, "spec")
  if spec.bs == "index" then
    n = resp.map(out, n, 1)
    n = bulk(out, n, "index")
    n = put(out, n, int(spec.index))
  elseif spec.bs == "keyword" then
    n = resp.map(out, n, 2)
    n = bulk(out, n, "keyword")
    n = bulk(out, n, spec.keyword)
    n = bulk(out, n, "startfrom")
    n = put(out, n, int(spec.startfrom))
  else
    n = resp.map(out, n, 0)
  end
  n = bulk(out, n, "find_keys")
  n = resp.map(out, n, 2)
  n = bulk(out, n, "type")
  n = bulk(out, n, spec.fk)
  n = bulk(out, n, "spec")
  if spec.fk == "range" then
    n = resp.map(out, n, 3)
    n = bulk(out, n, "lastkey")
    n = put(out, n, int(spec.lastkey))
    n = bulk(out, n, "keystep")
    n = put(out, n, int(spec.keystep))
    n = bulk(out, n, "limit")
    n = put(out, n, int(spec.limit))
  elseif spec.fk == "keynum" then
    n = resp.map(out, n, 3)
    n = bulk(out, n, "keynumidx")
    n = put(out, n, int(spec.keynumidx))
    n = bulk(out, n, "firstkey")
    n = put(out, n, int(spec.firstkey))
    n = bulk(out, n, "keystep")
    n = put(out, n, int(spec.keystep))
  else
    n = resp.map(out, n, 0)
  end
  return n
end

-- The subcommands of a container, in registration order.
local function subs_of(cmd)
  local t = {}
  if cmd.subs then
    for _, c in ipairs(R.all) do
      if c.parent == cmd then t[#t + 1] = c end
    end
  end
  return t
end

local function info(out, n, cmd)
  local m = cmd.meta
  n = resp.array(out, n, 10)
  n = bulk(out, n, cmd.name)
  n = put(out, n, int(m.arity))
  n = status_set(out, n, words(m.flags))
  local range = words(m.range)
  for i = 1, 3 do n = put(out, n, int(tonumber(range[i]))) end
  n = status_set(out, n, words(m.acl))
  local tips = words(m.opt.tips)
  n = resp.set(out, n, #tips)
  for _, t in ipairs(tips) do n = bulk(out, n, t) end
  n = resp.set(out, n, #cmd.specs)
  for _, spec in ipairs(cmd.specs) do n = key_spec(out, n, spec) end
  local subs = subs_of(cmd)
  if #subs == 0 then return resp.set(out, n, 0) end
  n = resp.array(out, n, #subs)
  for _, s in ipairs(subs) do n = info(out, n, s) end
  return n
end

-- The command named name (a subcommand as "config|get"), or nil.
local function find(name)
  name = lower(name)
  local top, sub = name:match("^([^|]+)|(.+)$")
  if top then
    local c = R.commands[top]
    return c and c.subs and c.subs[sub] or nil
  end
  return R.commands[name]
end

-- Every top-level command, in registration order.
local function top_level()
  local t = {}
  for _, c in ipairs(R.all) do
    if not c.parent then t[#t + 1] = c end
  end
  return t
end

local function all_info(out, n)
  local list = top_level()
  n = resp.array(out, n, #list)
  for _, c in ipairs(list) do n = info(out, n, c) end
  return n
end

-- COMMAND: every command's INFO.
reg("command", function(_, _, _, out, n)
  return all_info(out, n)
end)

reg("command|info", function(_, argv, argc, out, n)
  if argc == 2 then return all_info(out, n) end
  n = resp.array(out, n, argc - 2)
  for i = 3, argc do
    local c = find(argv[i])
    if c then n = info(out, n, c) else n = resp.null(out, n) end
  end
  return n
end)

reg("command|count", function(_, _, _, out, n)
  return put(out, n, int(#top_level()))
end)

-- -- COMMAND DOCS -----------------------------------------------------------------

local function arg_doc(out, n, a)
  local len = 2
  for _, f in ipairs { "key_spec_index", "token", "since", "deprecated_since" } do
    if a[f] then len = len + 1 end
  end
  if #a.flags > 0 then len = len + 1 end
  if a.args then len = len + 1 end
  n = resp.map(out, n, len)
  n = bulk(out, n, "name")
  n = bulk(out, n, a.name)
  n = bulk(out, n, "type")
  n = bulk(out, n, a.type)
  if a.key_spec_index then
    n = bulk(out, n, "key_spec_index")
    n = put(out, n, int(a.key_spec_index))
  end
  for _, f in ipairs { "token", "since", "deprecated_since" } do
    if a[f] then
      n = bulk(out, n, f)
      n = bulk(out, n, a[f])
    end
  end
  if #a.flags > 0 then
    n = bulk(out, n, "flags")
    n = status_set(out, n, a.flags)
  end
  if a.args then
    n = bulk(out, n, "arguments")
    n = resp.array(out, n, #a.args)
    for _, x in ipairs(a.args) do n = arg_doc(out, n, x) end
  end
  return n
end

local function docs(out, n, cmd)
  local m = cmd.meta
  local group, since = m.doc:match("^(%S+) (%S+)$")
  local deprecated, replaced = nil, nil
  if m.opt.deprecated then deprecated, replaced = m.opt.deprecated:match("^(%S+) (.+)$") end
  local args, subs = args_of(m), subs_of(cmd)
  local history = m.opt.history
  local len = 4
  if deprecated then len = len + 3 end   -- doc_flags, deprecated_since, replaced_by
  if history then len = len + 1 end
  if args then len = len + 1 end
  if #subs > 0 then len = len + 1 end
  n = resp.map(out, n, len)
  n = bulk(out, n, "summary")
  n = bulk(out, n, m.summary)
  n = bulk(out, n, "since")
  n = bulk(out, n, since)
  n = bulk(out, n, "group")
  n = bulk(out, n, group)
  n = bulk(out, n, "complexity")
  n = bulk(out, n, m.complexity)
  if deprecated then
    n = bulk(out, n, "doc_flags")
    n = status_set(out, n, { "deprecated" })
    n = bulk(out, n, "deprecated_since")
    n = bulk(out, n, deprecated)
    n = bulk(out, n, "replaced_by")
    n = bulk(out, n, replaced)
  end
  if history then
    n = bulk(out, n, "history")
    n = resp.set(out, n, #history)
    for _, h in ipairs(history) do
      local v, text = h:match("^(%S+) (.*)$")
      n = resp.array(out, n, 2)
      n = bulk(out, n, v)
      n = bulk(out, n, text)
    end
  end
  if args then
    n = bulk(out, n, "arguments")
    n = resp.array(out, n, #args)
    for _, a in ipairs(args) do n = arg_doc(out, n, a) end
  end
  if #subs > 0 then
    n = bulk(out, n, "subcommands")
    n = resp.map(out, n, #subs)
    for _, s in ipairs(subs) do
      n = bulk(out, n, s.name)
      n = docs(out, n, s)
    end
  end
  return n
end

-- COMMAND DOCS [name ...]: a map of name to docs; unknown names are left
-- out.
reg("command|docs", function(_, argv, argc, out, n)
  local list = {}
  if argc == 2 then
    list = top_level()
  else
    for i = 3, argc do
      local c = find(argv[i])
      if c then list[#list + 1] = c end
    end
  end
  n = resp.map(out, n, #list)
  for _, c in ipairs(list) do
    n = bulk(out, n, c.name)
    n = docs(out, n, c)
  end
  return n
end)

-- -- COMMAND LIST -------------------------------------------------------------------

-- COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN glob]:
-- command names, subcommands included (Redis lists "config|get" too).
reg("command|list", function(_, argv, argc, out, n)
  local filter
  if argc > 2 then
    if argc ~= 5 or lower(argv[3]) ~= "filterby" then return put(out, n, resp.SYNTAX) end
    local by, what = lower(argv[4]), argv[5]
    if by == "module" then
      filter = function() return false end
    elseif by == "aclcat" then
      local cat = "@" .. lower(what)
      filter = function(c)
        for _, w in ipairs(words(c.meta.acl)) do
          if w == cat then return true end
        end
        return false
      end
    elseif by == "pattern" then
      local match = require("kv.store").matcher(what)
      filter = function(c) return match(c.name) end
    else
      return put(out, n, resp.SYNTAX)
    end
  end
  local names = {}
  for _, c in ipairs(R.all) do
    if not filter or filter(c) then names[#names + 1] = c.name end
  end
  return resp.bulk_array(out, n, names, #names)
end)

-- -- COMMAND GETKEYS ------------------------------------------------------------------

-- The keys of the command in argv[3..], with each key's spec flags:
-- a list of { key, flags }, or nil and the error reply.
local function keys_of(argv, argc)
  local c = find(argv[3])
  if not c then return nil, "-ERR Invalid command specified\r\n" end
  if #c.specs == 0 and not c.flag.movablekeys then
    return nil, "-ERR The command has no key arguments\r\n"
  end
  local sub_argc = argc - 2
  if (c.arity > 0 and c.arity ~= sub_argc) or sub_argc < -c.arity then
    return nil, "-ERR Invalid number of arguments specified for command\r\n"
  end
  local sub_argv = {}
  for i = 3, argc do sub_argv[i - 2] = argv[i] end
  local found = {}
  if c.getkeys then
    for _, kf in ipairs(c.getkeys(sub_argv, sub_argc)) do found[#found + 1] = { sub_argv[kf[1] + 1], kf[2] } end
    return found
  end
  for _, spec in ipairs(c.specs) do
    local flags = spec.flags
    if spec.is.variable_flags and c.name == "set" then
      -- SET's flags depend on its GET option (Redis's setGetKeys).
      flags = { "OW", "update" }
      for i = 4, sub_argc do
        if lower(sub_argv[i]) == "get" then flags = { "RW", "access", "update" } end
      end
    elseif spec.is.variable_flags and c.name == "bitfield" then
      -- BITFIELD reads only, unless a SET, an INCRBY or anything it does
      -- not know follows (Redis's bitfieldGetKeys).
      flags = { "RO", "access" }
      local i = 3
      while i <= sub_argc do
        local w, left = lower(sub_argv[i]), sub_argc - i
        if w == "get" and left >= 2 then
          i = i + 3
        elseif w == "overflow" and left >= 1 then
          i = i + 2
        else
          flags = { "RW", "access", "update" }
          break
        end
      end
    end
    local ok = R.spec_keys(spec, sub_argv, sub_argc, function(i)
      found[#found + 1] = { sub_argv[i + 1], flags }
    end)
    if not ok then return nil, "-ERR Invalid arguments specified for command\r\n" end
  end
  return found
end

reg("command|getkeys", function(_, argv, argc, out, n)
  local found, err = keys_of(argv, argc)
  if not found then return put(out, n, err) end
  n = resp.array(out, n, #found)
  for _, f in ipairs(found) do n = bulk(out, n, f[1]) end
  return n
end)

reg("command|getkeysandflags", function(_, argv, argc, out, n)
  local found, err = keys_of(argv, argc)
  if not found then return put(out, n, err) end
  n = resp.array(out, n, #found)
  for _, f in ipairs(found) do
    n = resp.array(out, n, 2)
    n = bulk(out, n, f[1])
    n = status_set(out, n, f[2])
  end
  return n
end)

reg("command|help", function(_, _, _, out, n)
  return monitor.help(out, n, {
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help.",
  })
end)

return M
