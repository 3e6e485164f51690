-- cohost.broadcast.resp: the few pieces of the Redis protocol (RESP2)
-- that cohost.broadcast's Redis backend (cohost.broadcast.redis) needs,
-- on cohost's cosockets: a redis:// URL's parts, a connection made ready
-- (AUTH, SELECT), a command's bytes, and one reply read off a socket.
-- Internal. A small client of its own rather than resty.redis: that one
-- needs the ngx global (cohost.ngx), which every app using broadcast
-- would then get, and the backend wants its replies read by one task
-- while others write commands, which resty.redis does not do.
local M = {}

local tcp = require("cohost").tcp

local byte, sub, concat, tonumber, tostring = string.byte, string.sub, table.concat, tonumber, tostring

-- A null bulk string or array ($-1, *-1).
M.null = setmetatable({}, { __tostring = function() return "null" end })

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- parse_url(url) -> { host, port, user, password, db }, or nil, err.
-- redis://[[user]:password@]host[:port][/db]; an IPv6 host in brackets;
-- %XX escapes in the user and password.
function M.parse_url(url)
  local usage = "bad url " .. tostring(url) .. ": redis://[[user]:password@]host[:port][/db] expected"
  local rest = type(url) == "string" and url:match("^redis://(.+)$")
  if not rest then return nil, usage end
  local c = { port = 6379, db = 0 }
  local userinfo, hostpart = rest:match("^(.*)@([^@]*)$")
  if userinfo then
    local user, password = userinfo:match("^([^:]*):(.*)$")
    if not user then return nil, usage end
    c.user = user ~= "" and unescape(user) or nil
    c.password = unescape(password)
    rest = hostpart
  end
  local host, tail = rest:match("^%[([%x:.]+)%](.*)$")
  if not host then host, tail = rest:match("^([^:/%[%]]+)(.*)$") end
  if not host then return nil, usage end
  c.host = host
  local port, after = tail:match("^:(%d+)(.*)$")
  if port then
    c.port = tonumber(port)
    tail = after
  end
  local db = tail:match("^/(%d*)$")
  if tail ~= "" and not db then return nil, usage end
  if db and db ~= "" then c.db = tonumber(db) end
  if c.port < 1 or c.port > 65535 then return nil, usage end
  return c
end

-- command(arg, ...) -> the bytes of one command (a RESP array of bulk
-- strings); the arguments are strings or numbers.
function M.command(...)
  local n = select("#", ...)
  local out = { "*" .. n .. "\r\n" }
  for i = 1, n do
    local a = tostring((select(i, ...)))
    out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  return concat(out)
end

-- Yields. read(sock [, line]) -> the next reply: a string (simple or
-- bulk), a number, a table (an array), M.null; or false, msg (the server
-- answered with an error); or nil, err (the connection failed: the
-- socket's error, or "protocol error"). line: the reply's first line,
-- when the caller has read it already (without its CRLF).
local function read(sock, line)
  if not line then
    local err
    line, err = sock:receive("*l")   -- drops the CR: RESP lines hold none
    if not line then return nil, err end
  end
  local t, rest = byte(line), sub(line, 2)
  if t == 43 then return rest end                    -- +simple
  if t == 45 then return false, rest end             -- -error
  if t == 58 then                                    -- :integer
    local n = tonumber(rest)
    if n then return n end
  elseif t == 36 then                                -- $bulk
    local n = tonumber(rest)
    if n and n < 0 then return M.null end
    if n then
      local data, err = sock:receive(n + 2)
      if not data then return nil, err end
      return sub(data, 1, n)
    end
  elseif t == 42 then                                -- *array
    local n = tonumber(rest)
    if n and n < 0 then return M.null end
    if n then
      local arr = {}
      for i = 1, n do
        local v, err = read(sock)
        if v == nil then return nil, err end
        -- An error inside an array (EXEC's) never comes to us: reading on
        -- after it would need a place for it, so the connection ends.
        if v == false then return nil, "protocol error" end
        arr[i] = v
      end
      return arr
    end
  end
  return nil, "protocol error"
end
M.read = read

-- Yields. connect(cfg [, pool]) -> a socket ready for commands, or nil,
-- err. cfg: a parse_url table plus timeout_ms (connect, send and read
-- timeouts). With pool, an idle connection of that keepalive pool is
-- taken if there is one (already authenticated); the caller gives it back
-- with sock:setkeepalive().
function M.connect(cfg, pool)
  local sock = tcp()
  sock:settimeouts(cfg.timeout_ms, cfg.timeout_ms, cfg.timeout_ms)
  local ok, err
  if pool then
    ok, err = sock:connect(cfg.host, cfg.port, { pool = pool })
  else
    ok, err = sock:connect(cfg.host, cfg.port)
  end
  if not ok then return nil, err end
  if pool and sock:getreusedtimes() > 0 then return sock end
  local cmds = {}
  if cfg.password then
    cmds[#cmds + 1] = cfg.user and M.command("AUTH", cfg.user, cfg.password) or M.command("AUTH", cfg.password)
  end
  if cfg.db ~= 0 then cmds[#cmds + 1] = M.command("SELECT", cfg.db) end
  if #cmds == 0 then return sock end
  ok, err = sock:send(cmds)
  for _ = 1, ok and #cmds or 0 do
    local r, rerr = read(sock)
    if not r then
      ok, err = nil, rerr
      break
    end
  end
  if not ok then
    sock:close()
    return nil, err
  end
  return sock
end

return M
