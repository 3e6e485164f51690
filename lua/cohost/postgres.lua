-- cohost.postgres: PostgreSQL through Debian's LuaSQL driver
-- (lua-sql-postgres: libpq, whose blocking socket calls park only the
-- calling coroutine), with what LuaSQL lacks: a per-worker connection
-- pool, safe quoting of values into SQL ($1 placeholders), transactions
-- and timeouts. docs/postgres.md.
--   local pg = require "cohost.postgres"
--   local db = pg.pool { database = "app", user = "app", host = "127.0.0.1" }
--   local rows = db:query("SELECT id, name FROM items WHERE owner = $1", owner)
local cohost = require "cohost"

local M = {}

local type, tostring, error, select, format = type, tostring, error, select, string.format
local null = require("cjson").null

-- -- Quoting ----------------------------------------------------------------------

-- quote(v) -> SQL text for the value v: NULL for nil and cjson.null
-- (ngx.null), TRUE/FALSE, a number (finite; integers without exponent),
-- or a string as an E'' literal with backslashes and quotes escaped. An
-- E'' literal means the same whatever standard_conforming_strings says,
-- so nothing the value holds can end it early. Raises for a string with a
-- NUL byte (PostgreSQL text cannot hold one) and for other types.
function M.quote(v)
  local t = type(v)
  if v == nil or v == null then return "NULL" end
  if t == "boolean" then return v and "TRUE" or "FALSE" end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      error("cannot quote a non-finite number", 2)
    end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return format("%d", v) end
    return format("%.17g", v)
  end
  if t == "string" then
    if v:find("\0", 1, true) then error("cannot quote a string with a NUL byte", 2) end
    return "E'" .. v:gsub("\\", "\\\\"):gsub("'", "''") .. "'"
  end
  error("cannot quote a " .. t, 2)
end

-- quote_ident(name) -> name as a quoted identifier ("My Table").
function M.quote_ident(name)
  if type(name) ~= "string" or name == "" or name:find("\0", 1, true) then
    error("bad identifier", 2)
  end
  return '"' .. name:gsub('"', '""') .. '"'
end

-- format(sql, ...) -> sql with each $n replaced by quote(n-th argument).
-- $n inside a '...' literal, a "..." identifier or a -- comment is left
-- alone. Raises for a $n past the arguments given.
function M.format(sql, ...)
  local n = select("#", ...)
  if n == 0 then return sql end
  local args = { ... }
  local out, i, len = {}, 1, #sql
  while i <= len do
    local c = sql:sub(i, i)
    local j
    if c == "'" or c == '"' then
      -- To the closing quote; a doubled quote is part of the literal.
      j = i + 1
      while j <= len do
        if sql:sub(j, j) == c then
          if sql:sub(j + 1, j + 1) ~= c then break end
          j = j + 1
        end
        j = j + 1
      end
      out[#out + 1] = sql:sub(i, j)
      i = j + 1
    elseif c == "-" and sql:sub(i + 1, i + 1) == "-" then
      j = sql:find("\n", i, true) or len
      out[#out + 1] = sql:sub(i, j)
      i = j + 1
    elseif c == "$" and sql:find("^%d", i + 1) then
      local digits = sql:match("^%d+", i + 1)
      local k = tonumber(digits)
      if k < 1 or k > n then error(format("$%d: only %d argument%s given", k, n, n == 1 and "" or "s"), 2) end
      out[#out + 1] = M.quote(args[k])
      i = i + 1 + #digits
    else
      j = sql:find("['\"$-]", i + 1) or len + 1
      out[#out + 1] = sql:sub(i, j - 1)
      i = j
    end
  end
  return table.concat(out)
end

-- -- Connections ------------------------------------------------------------------

local Conn = {}
Conn.__index = Conn

-- Rows of a cursor as arrays of tables keyed by column name (LuaSQL gives
-- every value as a string, NULL as nil).
local function rows_of(cur)
  local rows = {}
  while true do
    local row = cur:fetch({}, "a")
    if not row then break end
    rows[#rows + 1] = row
  end
  cur:close()
  return rows
end

-- conn:query(sql, ...) -> rows (a SELECT), or the number of rows a
-- command touched; nil, err on failure (PostgreSQL's message).
function Conn:query(sql, ...)
  local res, err = self.luasql:execute(M.format(sql, ...))
  if not res then
    self.failed = err
    return nil, err
  end
  if type(res) == "number" then return res end
  return rows_of(res)
end

-- conn:close(): closes the connection (a pool's connections are given
-- back with pool:release instead).
function Conn:close()
  self.luasql:close()
  self.env:close()
end

-- conninfo for PQsetdbLogin: with an "=" in it the database name is a
-- whole connection string, which carries the timeouts.
local function conninfo(opts)
  local function q(v) return "'" .. tostring(v):gsub("\\", "\\\\"):gsub("'", "\\'") .. "'" end
  local parts = { "dbname=" .. q(opts.database or "postgres") }
  if opts.connect_timeout then parts[#parts + 1] = "connect_timeout=" .. math.ceil(opts.connect_timeout) end
  if opts.statement_timeout then
    parts[#parts + 1] = "options=" .. q("-c statement_timeout=" .. math.floor(opts.statement_timeout * 1000))
  end
  if opts.application_name then parts[#parts + 1] = "application_name=" .. q(opts.application_name) end
  if opts.conninfo then parts[#parts + 1] = opts.conninfo end
  return table.concat(parts, " ")
end

-- connect(opts) -> conn, or nil, err. opts: database, user, password,
-- host, port, connect_timeout (s), statement_timeout (s: the server
-- cancels a statement running longer), application_name, conninfo (more
-- libpq "key=value" settings, as written: "sslmode=require keepalives_idle=30").
function M.connect(opts)
  opts = opts or {}
  local driver = require "luasql.postgres"
  local env = driver.postgres()
  local c, err = env:connect(conninfo(opts), opts.user, opts.password, opts.host, opts.port and tostring(opts.port))
  if not c then
    env:close()
    return nil, err
  end
  return setmetatable({ luasql = c, env = env }, Conn)
end

-- -- Pool -----------------------------------------------------------------------------

local Pool = {}
Pool.__index = Pool

-- pool(opts) -> pool: at most opts.size (default 10) connections, made as
-- needed with connect(opts) and kept for reuse. A pool belongs to the
-- worker that made it (each worker has its own Lua state, and so its own
-- pool: size connections per worker). opts.wait_timeout (s, default 10):
-- how long acquire waits for a free connection.
function M.pool(opts)
  opts = opts or {}
  local size = opts.size or 10
  return setmetatable({
    opts = opts, size = size, idle = {}, count = 0,
    free = cohost.semaphore.new(size), wait_timeout = opts.wait_timeout or 10,
  }, Pool)
end

-- Yields. acquire() -> conn, or nil, err ("timeout": all size
-- connections stayed busy for wait_timeout; or connect's error).
function Pool:acquire()
  local ok, err = self.free:wait(self.wait_timeout)
  if not ok then return nil, err end
  local conn = table.remove(self.idle)
  if conn then return conn end
  conn, err = M.connect(self.opts)
  if not conn then
    self.free:post()
    return nil, err
  end
  self.count = self.count + 1
  return conn
end

-- release(conn): gives conn back. A connection whose last query failed
-- is checked first and closed if the server is gone, or a transaction it
-- left open cannot be rolled back.
function Pool:release(conn)
  if self.closed then
    pcall(conn.close, conn)
    self.count = self.count - 1
    return
  end
  if conn.failed then
    conn.failed = nil
    if not conn.luasql:execute("ROLLBACK") or not conn.luasql:execute("SELECT 1") then
      pcall(conn.close, conn)
      self.count = self.count - 1
      self.free:post()
      return
    end
  end
  self.idle[#self.idle + 1] = conn
  self.free:post()
end

-- Yields. query(sql, ...) on a pooled connection: acquire, query, release.
function Pool:query(sql, ...)
  local conn, err = self:acquire()
  if not conn then return nil, err end
  local res, qerr = conn:query(sql, ...)
  self:release(conn)
  return res, qerr
end

-- Yields. transaction(fn) -> fn's results after COMMIT, or nil, err after
-- ROLLBACK: fn(conn) runs between BEGIN and COMMIT on one connection, and
-- a raised error or a first result of nil rolls back.
function Pool:transaction(fn)
  local conn, err = self:acquire()
  if not conn then return nil, err end
  local ok
  ok, err = conn:query("BEGIN")
  if not ok then
    self:release(conn)
    return nil, err
  end
  local res = { pcall(fn, conn) }
  -- After a failed statement PostgreSQL has aborted the transaction
  -- (COMMIT would answer ROLLBACK without an error): rolled back, and the
  -- failure returned, even if fn went on.
  if res[1] and res[2] ~= nil and conn.failed then res = { true, nil, conn.failed } end
  if res[1] and res[2] ~= nil then
    ok, err = conn:query("COMMIT")
    self:release(conn)
    if not ok then return nil, err end
    return select(2, unpack(res, 1, table.maxn(res)))
  end
  conn:query("ROLLBACK")
  self:release(conn)
  if not res[1] then return nil, tostring(res[2]) end
  return nil, res[3]
end

-- close(): closes the idle connections now and the busy ones when they
-- are released.
function Pool:close()
  self.closed = true
  for i = #self.idle, 1, -1 do
    pcall(self.idle[i].close, self.idle[i])
    self.idle[i] = nil
    self.count = self.count - 1
  end
end

return M
