-- Helpers for the examples/kv specs (kv_spec, kv_robust_spec,
-- kv_compat_spec, kv_roundtrip_spec): servers as child processes, RESP
-- requests and replies over cohost.tcp.
local cohost = require "cohost"
local h = require "spec.helper"

local M = {}

M.KV = "examples/kv/main.lua"
M.NULL = setmetatable({}, { __tostring = function() return "NULL" end })
local NULL = M.NULL

-- Starts a kv server on opts.dir (a fresh one by default) with opts.args
-- after the script and opts.cohost (cohost's own options) before it;
-- stopped after the test through defer. Returns the process (port, pid,
-- dir, err).
function M.start(defer, opts)
  opts = opts or {}
  local dir = opts.dir or h.tmpdir()
  local p = h.start(("%s %s --port 0 --announce --dir %s %s"):format(opts.cohost or "", M.KV,
                    h.shell_quote(dir), opts.args or ""))
  p.dir = dir
  defer(p.stop)
  return p
end

-- A RESP request for the strings in args.
function M.encode(args)
  local t = { "*" .. #args .. "\r\n" }
  for _, a in ipairs(args) do
    a = tostring(a)
    t[#t + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  return table.concat(t)
end

-- Reads one reply: a string for +, a number for :, NULL for nulls,
-- { err = text } for -, a table for arrays; nil, err on a socket error.
local function read_reply(s)
  local line, err = s:receive("*l")
  if not line then return nil, err end
  local kind, rest = line:sub(1, 1), line:sub(2)
  if kind == "+" then return rest end
  if kind == "-" then return { err = rest } end
  if kind == ":" then return tonumber(rest) end
  if kind == "$" then
    local n = tonumber(rest)
    if n < 0 then return NULL end
    local data = assert(s:receive(n + 2))
    return data:sub(1, n)
  end
  if kind == "*" then
    local n = tonumber(rest)
    if n < 0 then return NULL end
    local t = {}
    for i = 1, n do t[i] = read_reply(s) end
    return t
  end
  error("bad reply line: " .. line)
end
M.read_reply = read_reply

-- Reads one reply keeping its RESP2 or RESP3 type: a string for the
-- scalars, tagged by their first byte ("+OK", "$hello", ":5", ",1.5",
-- "#t", "_", "-ERR ...", "=txt:..."), a table { t = "*" | "%" | "~" | ">",
-- ... } for the aggregates (a map's keys and values in turn); nil, err
-- on a socket error. Sets and maps come sorted (RESP3 says they are
-- unordered; Redis's order is its dict's), so two servers compare equal.
local typed_string
local function read_typed(s)
  local line, err = s:receive("*l")
  if not line then return nil, err end
  local kind, rest = line:sub(1, 1), line:sub(2)
  if kind == "+" or kind == "-" or kind == ":" or kind == "," or kind == "#" or kind == "(" then
    return line
  end
  if kind == "_" then return "_" end
  if kind == "$" or kind == "=" or kind == "!" then
    local n = tonumber(rest)
    if n < 0 then return "$-1" end
    local data = assert(s:receive(n + 2))
    return kind .. data:sub(1, n)
  end
  if kind == "*" or kind == "%" or kind == "~" or kind == ">" then
    local n = tonumber(rest)
    if n < 0 then return "*-1" end
    if kind == "%" then n = n * 2 end
    local t = { t = kind }
    for i = 1, n do t[i] = read_typed(s) end
    if kind == "~" then
      table.sort(t, function(a, b) return typed_string(a) < typed_string(b) end)
    elseif kind == "%" then
      local pairs_ = {}
      for i = 1, n, 2 do pairs_[#pairs_ + 1] = { t[i], t[i + 1] } end
      table.sort(pairs_, function(a, b) return typed_string(a[1]) < typed_string(b[1]) end)
      for i, p in ipairs(pairs_) do t[2 * i - 1], t[2 * i] = p[1], p[2] end
    end
    return t
  end
  error("bad reply line: " .. line)
end
M.read_typed = read_typed

-- A typed reply as one line of text (for comparing and showing).
function typed_string(v)
  if type(v) ~= "table" then return tostring(v) end
  local t = {}
  for i, x in ipairs(v) do t[i] = typed_string(x) end
  return v.t .. "[" .. table.concat(t, ", ") .. "]"
end
M.typed_string = typed_string

-- A connection: c:call(...) sends one request and returns its reply
-- (c:typed(...) with its RESP type, as read_typed).
function M.client(port, timeout_ms)
  local s = h.dial(port, timeout_ms or 5000)
  return {
    sock = s,
    call = function(_, ...)
      assert(s:send(M.encode({ ... })))
      return read_reply(s)
    end,
    typed = function(_, ...)
      assert(s:send(M.encode({ ... })))
      return read_typed(s)
    end,
    read = function() return read_reply(s) end,
    read_typed = function() return read_typed(s) end,
  }
end

-- Stores n keys key:<i> = i with pipelined MSETs of 1000.
function M.fill(c, n, prefix)
  prefix = prefix or "key:"
  local batches = 0
  for i = 1, n, 1000 do
    local args = { "MSET" }
    for j = i, math.min(i + 999, n) do
      args[#args + 1] = prefix .. j
      args[#args + 1] = tostring(j)
    end
    assert(c.sock:send(M.encode(args)))
    batches = batches + 1
  end
  for _ = 1, batches do assert(c:read() == "OK") end
end

-- Polls INFO persistence until aof_rewrites reaches n (limit seconds).
function M.wait_rewrites(c, n, limit)
  local r = h.eventually(function()
    local info = assert(c:call("INFO", "persistence"), "the server closed the connection")
    local r = tonumber(info:match("aof_rewrites:(%d+)"))
    return r >= n and r
  end, limit or 20)
  return r or error("no rewrite")
end

-- A command whose reply is compared as a set: run_cmds sorts it.
function M.sorted(cmd)
  cmd.sort = true
  return cmd
end

-- Runs cmds on connection c (after FLUSHALL); returns the replies. With
-- proto 3 the connection says HELLO 3 first and the replies keep their
-- RESP types (read_typed: maps and sets sorted).
function M.run_cmds(c, cmds, proto)
  if proto == 3 then
    local hello = c:typed("HELLO", "3")
    assert(type(hello) == "table" and hello.t == "%", "no RESP3")
  end
  assert(c:call("FLUSHALL") == "OK")
  local replies = {}
  for i, cmd in ipairs(cmds) do
    local r
    if proto == 3 then
      r = c:typed(unpack(cmd))
      if cmd.sort and type(r) == "table" then
        table.sort(r, function(a, b) return typed_string(a) < typed_string(b) end)
      end
      if r ~= nil then r = typed_string(r) end
    else
      r = c:call(unpack(cmd))
      if cmd.sort and type(r) == "table" and not r.err then table.sort(r) end
    end
    if r ~= nil and cmd.norm then r = cmd.norm(r) end
    replies[i] = r == nil and "<no reply>" or r
  end
  return replies
end

-- Both replies side by side, for a failure message (as many lines as the
-- longer list: a missing command shows as "...").
function M.show_replies(cmds, want, got)
  local function s(v)
    if v == NULL then return "(nil)" end
    if type(v) == "table" then
      if v.err then return "(error) " .. v.err end
      local t = {}
      for i, x in ipairs(v) do t[i] = s(x) end
      return "[" .. table.concat(t, ", ") .. "]"
    end
    return ("%q"):format(v)
  end
  local lines = {}
  for i = 1, math.max(#cmds, #want, #got) do
    local cmd = cmds[i] and table.concat(cmds[i], " ") or "..."
    local mark = s(want[i]) == s(got[i]) and "  " or "!!"
    lines[i] = ("%s %s\n     redis: %s\n     kv:    %s"):format(mark, cmd, s(want[i]), s(got[i]))
  end
  return table.concat(lines, "\n")
end

-- INFO's fields as a table.
function M.info(c, section)
  local t = {}
  local text = assert(c:call("INFO", section))
  for k, v in text:gmatch("([%w_]+):([^\r\n]*)") do t[k] = v end
  return t
end

-- Waits until the server has n blocked clients (a blocking command
-- reaches it in its own time); false if it never does (5 s), which the
-- scenario reports.
function M.blocked(c, n)
  return h.wait_for(function() return M.info(c, "clients").blocked_clients == tostring(n) end, 5)
end

return M
