-- cohost.postgres: PostgreSQL on libpq's asynchronous API (the C core
-- cohost.core.postgres: host/lib_postgres.c over host/net/pg.c), with
-- bound parameters, typed rows, prepared statements per connection, a
-- per-worker pool, transactions, pipelines, COPY and LISTEN/NOTIFY.
-- docs/postgres.md.
--   local pg = require "cohost.postgres"
--   local db = pg.pool { database = "app", user = "app", host = "127.0.0.1" }
--   local rows, err = db:query("SELECT id, name FROM items WHERE owner = $1", owner)
local core = require "cohost.core.postgres"
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"
local semaphore = require "cohost.semaphore"
local http = require "cohost.http"
local ffi = require "ffi"
local cjson = require "cjson"

local M = {}

local type, tostring, error, select, pcall, unpack = type, tostring, error, select, pcall, unpack
local setmetatable, format, monotonic = setmetatable, string.format, sys.monotonic
local null = cjson.null

-- SQL NULL, in parameters and in rows: cjson.null (ngx.null), so a row
-- goes to res:json as it is.
M.null = null

local Error = core.error_mt
M.error_mt = Error

-- An error table of cohost's own (no SQLSTATE), as the C core's are.
local function failure(message, fields)
  local e = fields or {}
  e.message = message
  return setmetatable(e, Error)
end

-- -- Values the C core needs from Lua ---------------------------------------------

local int64_t, uint64_t = ffi.typeof("int64_t"), ffi.typeof("uint64_t")
local int64_ptr, char_ptr = ffi.typeof("const int64_t *"), ffi.typeof("const char *")

-- pg.bytea(s): s bound as bytea (binary, NUL bytes and all).
local Bytea = {}
function M.bytea(s)
  if type(s) ~= "string" then error("pg.bytea: a string expected", 2) end
  return setmetatable({ s }, Bytea)
end

-- pg.json(v): v encoded as JSON (cohost.http's encoding: http.array marks,
-- int64 digits) and bound as text whose type the server infers (json or
-- jsonb from the column; text where nothing says).
local Json = {}
function M.json(v)
  local text, err = http.json_encode(v)
  if not text then error("pg.json: " .. err, 2) end
  return setmetatable({ text }, Json)
end

core.setup {
  array_mt = http.array_mt,
  -- An int8 outside +-2^53 comes as its 8 bytes, read back as int64_t.
  int64 = function(bytes) return ffi.cast(int64_ptr, ffi.cast(char_ptr, bytes))[0] end,
  -- A cdata parameter: its digits if it is a 64-bit integer, else nil.
  int64text = function(v)
    if ffi.istype(int64_t, v) or ffi.istype(uint64_t, v) then
      return (tostring(v):gsub("U?LL$", ""))
    end
  end,
  bytea_mt = Bytea,
  json_mt = Json,
}

-- Rows carry empty arrays (no rows, '{}' columns, JSON []): res:json must
-- look for marked arrays once this module is in use.
http.array()

-- -- Quoting: the low-level path --------------------------------------------------

-- quote(v) -> SQL text for the value v: NULL for nil and pg.null,
-- TRUE/FALSE, a number (finite; integers without exponent), or a string
-- as an E'' literal with backslashes and quotes escaped. An E'' literal
-- means the same whatever standard_conforming_strings says, so nothing
-- the value holds can end it early. Raises for a string with a NUL byte
-- (PostgreSQL text cannot hold one) and for other types. Queries bind
-- their parameters instead; this is for SQL built by hand.
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

-- -- Connecting ------------------------------------------------------------------

-- An IPv4 or IPv6 address, not a name.
local function is_ip(s)
  return s:find("^%d+%.%d+%.%d+%.%d+$") ~= nil or s:find(":", 1, true) ~= nil
end

-- libpq keywords for opts. Host names are resolved here with cohost.dns
-- and passed as hostaddr (libpq's PQconnectStart would call a blocking
-- getaddrinfo); host stays the name, for TLS checks and .pgpass.
local function params_of(opts)
  local p = {}
  if opts.conninfo then
    local parsed, err = core.conninfo_parse(opts.conninfo)
    if not parsed then return nil, failure("conninfo: " .. err) end
    for k, v in pairs(parsed) do p[k] = v end
  end
  local function set(k, v) if v ~= nil then p[k] = tostring(v) end end
  set("host", opts.host)
  set("port", opts.port)
  set("dbname", opts.database)
  set("user", opts.user)
  set("password", opts.password)
  set("application_name", opts.application_name)
  set("sslmode", opts.sslmode)
  -- Timestamps are read as ISO 8601 (lib_postgres.c): whatever the
  -- server's default, this session's output style is ISO.
  p.options = "-c DateStyle=ISO" .. (p.options and " " .. p.options or "")
  local hosts = p.host or os.getenv("PGHOST")
  if hosts and not p.hostaddr and os.getenv("PGHOSTADDR") == nil then
    local addrs, named = {}, false
    for name in (hosts .. ","):gmatch("([^,]*),") do
      if name == "" or name:sub(1, 1) == "/" or name:sub(1, 1) == "@" then
        addrs[#addrs + 1] = ""   -- a socket directory: nothing to resolve
      elseif is_ip(name) then
        addrs[#addrs + 1] = name
      else
        local ip, err = require("cohost.dns").toip(name)
        if not ip then return nil, failure(format("%s: %s", name, tostring(err)), { connection = true }) end
        addrs[#addrs + 1] = ip
        named = true
      end
    end
    if named then
      p.host = hosts
      p.hostaddr = table.concat(addrs, ",")
    end
  end
  return p
end

-- Yields. connect(opts) -> conn | nil, err: one connection, outside any
-- pool (conn:close() when done). opts as pool's.
function M.connect(opts)
  opts = opts or {}
  local params, err = params_of(opts)
  if not params then return nil, err end
  local conn
  conn, err = core.connect(params, opts.connect_timeout or 10, opts.statement_cache)
  if not conn then return nil, err end
  if opts.statement_timeout then conn:settimeout(opts.statement_timeout) end
  return conn
end

-- -- One connection ----------------------------------------------------------------

-- conn:query, exec, close, status, settimeout, ... are C (lib_postgres.c);
-- these are built on them.
local Conn = core.conn_methods

local function pack(...) return { n = select("#", ...), ... } end

local isolations = {
  serializable = "SERIALIZABLE", ["repeatable read"] = "REPEATABLE READ",
  ["read committed"] = "READ COMMITTED", ["read uncommitted"] = "READ UNCOMMITTED",
}

local function begin_sql(opts)
  if not opts then return "BEGIN" end
  local sql = "BEGIN"
  if opts.isolation then
    local level = isolations[tostring(opts.isolation):lower():gsub("_", " ")]
    if not level then error("transaction: unknown isolation " .. tostring(opts.isolation), 3) end
    sql = sql .. " ISOLATION LEVEL " .. level
  end
  if opts.read_only then sql = sql .. " READ ONLY" end
  if opts.deferrable then sql = sql .. " DEFERRABLE" end
  return sql
end

-- Yields. conn:transaction(fn [, opts]) -> fn's results after COMMIT, or
-- nil, err after ROLLBACK (fn raised: err is what it raised; fn returned
-- nil, err; or a statement inside failed and fn went on: the failure).
-- A cancelled task (cohost.kill, its request gone) cannot wait for a
-- ROLLBACK: the connection is closed, which rolls back on the server,
-- and the cancellation goes on up.
function Conn:transaction(fn, opts)
  local ok, err = self:query(begin_sql(opts))
  if not ok then return nil, err end
  local res = pack(pcall(fn, self))
  if task.cancelled() then
    self:close()
    error(res[1] and "cancelled" or res[2], 0)
  end
  local st = self:status()
  if res[1] and res[2] ~= nil and st == "transaction" then
    ok, err = self:query("COMMIT")
    if not ok then return nil, err end
    return unpack(res, 2, res.n)
  end
  if st == "transaction" or st == "failed" then self:query("ROLLBACK") end
  if not res[1] then return nil, res[2] end
  if res[2] ~= nil then   -- fn went on after a failure
    return nil, self:last_error() or failure("transaction failed")
  end
  return nil, res[3]
end

-- The pipeline builder p of conn:pipeline(fn): p:query(sql, ...) adds a
-- query; nothing is sent until fn returns.
local Builder = {}
Builder.__index = Builder

function Builder:query(sql, ...)
  if type(sql) ~= "string" then error("pipeline: SQL text expected", 2) end
  self[#self + 1] = { sql, select("#", ...), ... }
end

local function build(fn)
  local b = setmetatable({}, Builder)
  fn(b)
  return b
end

-- Yields. conn:pipeline(fn) -> results | nil, err: fn(p) adds queries
-- with p:query(sql, ...); they go out together in libpq's pipeline mode
-- and come back in one round trip. results[i] is { rows = ..., affected
-- = n } or { err = err }; after a failed query the rest say
-- err.skipped. nil, err when the connection failed.
function Conn:pipeline(fn)
  local list = build(fn)
  if #list == 0 then return {} end
  return self:pipeline_run(list)
end

-- Yields. conn:copy_in(sql, source) -> rows copied | nil, err. sql is a
-- COPY ... FROM STDIN; source is a string, an array of strings, or a
-- function returning the next piece of COPY text (nil at the end; nil,
-- err aborts). Pieces split rows anywhere; each is sent before the next
-- is asked for, so memory stays one piece.
function Conn:copy_in(sql, source)
  local dir, err = self:copy_start(sql)
  if not dir then return nil, err end
  if dir ~= "in" then
    self:close()   -- a COPY TO would stream rows nobody reads
    return nil, failure("copy_in needs COPY ... FROM STDIN")
  end
  local put_err
  local function put(s)
    local ok, e = self:copy_put(s)
    if not ok then
      put_err = e
      error(e, 0)
    end
  end
  local ok, e = pcall(function()
    local t = type(source)
    if t == "string" then
      put(source)
    elseif t == "table" then
      for i = 1, #source do put(source[i]) end
    else
      while true do
        local piece, serr = source()
        if piece == nil then
          if serr ~= nil then error(serr, 0) end
          return
        end
        put(piece)
      end
    end
  end)
  if not ok then
    if task.cancelled() then
      self:close()
      error(e, 0)
    end
    if put_err then return nil, put_err end
    local _, aerr = self:copy_end("aborted by the client: " .. tostring(e))
    return nil, e, aerr
  end
  return self:copy_end()
end

-- Yields. conn:copy_out(sql, sink) -> rows copied | nil, err. sql is a
-- COPY ... TO STDOUT; sink(text) gets the rows as they come, whole rows
-- in pieces of up to 64 KiB. A sink that raises stops the copy (the
-- connection is closed: the server would go on sending) and its error is
-- returned.
function Conn:copy_out(sql, sink)
  local dir, err = self:copy_start(sql)
  if not dir then return nil, err end
  if dir ~= "out" then
    self:copy_end("copy_out needs COPY ... TO STDOUT")
    return nil, failure("copy_out needs COPY ... TO STDOUT")
  end
  while true do
    local piece, n = self:copy_get()
    if piece == nil then return nil, n end
    if piece == false then return n end
    local ok, e = pcall(sink, piece)
    if not ok then
      self:close()
      if task.cancelled() then error(e, 0) end
      return nil, e
    end
  end
end

-- -- The pool -------------------------------------------------------------------

local Pool = {}
Pool.__index = Pool

-- Seconds between two rounds of a pool's keeper (min, idle_timeout,
-- max_lifetime) at most.
local KEEP_EVERY = 1

local keeper

-- pool(opts) -> pool. A pool belongs to the worker that made it (each
-- worker has its own Lua state: size connections per worker). opts:
-- host, port, database, user, password, conninfo (libpq "key=value"
-- settings or a URI), application_name, sslmode; size (default 10),
-- min (opened at start and kept), acquire_timeout (s, default 10;
-- wait_timeout is its old name), connect_timeout (s, default 10),
-- statement_timeout (s: a cancel request after it), idle_timeout (s:
-- idle connections past min closed after it), max_lifetime (s),
-- statement_cache (prepared statements per connection, default 256).
function M.pool(opts)
  opts = opts or {}
  local size = opts.size or 10
  local min = opts.min or 0
  assert(type(size) == "number" and size >= 1, "pool: bad size")
  assert(type(min) == "number" and min >= 0 and min <= size, "pool: bad min")
  local self = setmetatable({
    opts = opts, size = size, min = min,
    idle = {},                           -- most recently released last
    count = 0,                           -- open or opening
    free = semaphore.new(size, "pool"),  -- connections not in use
    acquire_timeout = opts.acquire_timeout or opts.wait_timeout or 10,
    idle_timeout = opts.idle_timeout, max_lifetime = opts.max_lifetime,
    born = setmetatable({}, { __mode = "k" }),   -- conn -> monotonic()
    last = setmetatable({}, { __mode = "k" }),   -- conn -> its last release
    timeouts = 0,                        -- acquires that timed out
  }, Pool)
  if min > 0 or self.idle_timeout or self.max_lifetime then
    self.keeper = task.spawn_daemon(keeper, self)
  end
  return self
end

-- Yields. Opens one more connection of the pool (count taken already);
-- a cancelled task's error goes on up after the count is given back.
local function open(self)
  local ok, conn, err = pcall(M.connect, self.opts)
  if not ok or not conn then
    self.count = self.count - 1
    if not ok then error(conn, 0) end
    return nil, err
  end
  self.born[conn] = monotonic()
  return conn
end

local function expired(self, conn, now)
  return self.max_lifetime and now - (self.born[conn] or now) > self.max_lifetime
end

local function retire(self, conn)
  conn:close()
  self.count = self.count - 1
end

-- The keeper: opens connections up to min, closes those idle past
-- idle_timeout (above min) or older than max_lifetime, and drops dead
-- ones; once a second or as often as the timeouts need.
function keeper(self)
  local every = math.min(KEEP_EVERY, (self.idle_timeout or KEEP_EVERY) / 2,
                         (self.max_lifetime or KEEP_EVERY) / 2)
  while not self.closed do
    local now = monotonic()
    local idle = self.idle
    for i = #idle, 1, -1 do
      local c = idle[i]
      if expired(self, c, now) or not c:usable() or
         (self.idle_timeout and self.count > self.min and now - (self.last[c] or now) > self.idle_timeout) then
        table.remove(idle, i)
        retire(self, c)
      end
    end
    while not self.closed and self.count < self.min and self.count < self.size do
      self.count = self.count + 1
      local conn = open(self)
      if not conn then break end   -- the server is away: next round
      if self.closed then
        retire(self, conn)
      else
        self.last[conn] = monotonic()
        idle[#idle + 1] = conn
      end
    end
    task.sleep(every)
  end
end

-- Yields. acquire() -> conn | nil, err: a connection of the pool, for
-- the caller alone until release(conn). err.timeout when all size
-- connections stayed busy for acquire_timeout; err.connection when a new
-- one could not be opened. The low-level path: with, transaction and
-- query give it back in every case themselves.
function Pool:acquire()
  if self.closed then return nil, failure("pool closed") end
  local ok = self.free:wait(self.acquire_timeout)
  if not ok then
    self.timeouts = self.timeouts + 1
    return nil, failure(format("no free connection in %g s: all %d in use", self.acquire_timeout, self.size),
                        { timeout = true })
  end
  local idle = self.idle
  for i = #idle, 1, -1 do
    local conn = idle[i]
    idle[i] = nil
    if conn:usable() and not (self.max_lifetime and expired(self, conn, monotonic())) then return conn end
    retire(self, conn)
  end
  self.count = self.count + 1
  local okc, conn, err = pcall(open, self)
  if not okc or not conn then
    self.free:post()
    if not okc then error(conn, 0) end
    return nil, err
  end
  return conn
end

-- release(conn): gives conn back. A transaction it left open is rolled
-- back (a cancelled task cannot wait for that: the connection is closed
-- instead, which rolls back on the server), and a lost or broken one is
-- closed.
function Pool:release(conn)
  local st = conn:status()
  if st == "transaction" or st == "failed" then
    if task.cancelled() then
      conn:close()
    else
      local ok = pcall(conn.exec, conn, "ROLLBACK")
      if not ok then conn:close() end
    end
    st = conn:status()
  end
  if st ~= "idle" or self.closed or (self.max_lifetime and expired(self, conn, monotonic())) then
    retire(self, conn)
  else
    if self.idle_timeout then self.last[conn] = monotonic() end
    self.idle[#self.idle + 1] = conn
  end
  self.free:post()
end

-- Yields. with(fn) -> fn(conn)'s results | nil, err: one connection held
-- for fn, given back however fn ends (returns, raises, its task is
-- killed). A raised error is returned as err; a cancelled task's goes on
-- up, after the connection is back.
function Pool:with(fn)
  local conn, err = self:acquire()
  if not conn then return nil, err end
  local res = pack(pcall(fn, conn))
  self:release(conn)
  if not res[1] then
    if task.cancelled() then error(res[2], 0) end
    return nil, res[2]
  end
  return unpack(res, 2, res.n)
end

-- Yields. query(sql, ...) -> rows, affected | nil, err on a connection of
-- the pool.
function Pool:query(sql, ...)
  local conn, err = self:acquire()
  if not conn then return nil, err end
  local ok, rows, affected = pcall(conn.query, conn, sql, ...)
  self:release(conn)
  if not ok then error(rows, 0) end
  return rows, affected
end

-- Yields. exec(sql) -> rows, affected | nil, err: the simple protocol
-- (several statements, no parameters, nothing prepared).
function Pool:exec(sql)
  return self:with(function(conn) return conn:exec(sql) end)
end

-- Yields. transaction(fn [, opts]) as conn:transaction on one connection.
function Pool:transaction(fn, opts)
  return self:with(function(conn) return conn:transaction(fn, opts) end)
end

-- Yields. pipeline(fn) as conn:pipeline; the queries are gathered before
-- a connection is taken.
function Pool:pipeline(fn)
  local list = build(fn)
  if #list == 0 then return {} end
  return self:with(function(conn) return conn:pipeline_run(list) end)
end

-- Yields. copy_in(sql, source) and copy_out(sql, sink) as conn's.
function Pool:copy_in(sql, source)
  return self:with(function(conn) return conn:copy_in(sql, source) end)
end

function Pool:copy_out(sql, sink)
  return self:with(function(conn) return conn:copy_out(sql, sink) end)
end

-- stats() -> { size, count (open), idle, busy, timeouts, listen = {...} }.
function Pool:stats()
  local l = self.listener
  return {
    size = self.size, count = self.count, idle = #self.idle, busy = self.count - #self.idle,
    timeouts = self.timeouts,
    listen = l and { connected = l.conn ~= nil, reconnects = l.reconnects, lost = l.lost,
                     channels = l.nchannels } or nil,
  }
end

-- close(): closes the idle connections now and the busy ones when they
-- are released; stops the keeper and the listener.
function Pool:close()
  if self.closed then return end
  self.closed = true
  for i = #self.idle, 1, -1 do
    retire(self, self.idle[i])
    self.idle[i] = nil
  end
  if self.keeper then task.kill(self.keeper) end
  if self.listener then self.listener:close() end
end

-- -- LISTEN/NOTIFY -------------------------------------------------------------

-- One connection per pool (so per worker) carries every channel its
-- subscriptions name. A light thread owns it: it runs LISTEN/UNLISTEN
-- as subscriptions come and go, waits for notifications and hands each
-- to the subscriptions of its channel. When the connection is lost (a
-- server restart) it reconnects, with backoff, and listens again;
-- notifications sent meanwhile are lost (PostgreSQL keeps none for a
-- session that is not listening): each subscription counts such gaps.
local Listener = {}
Listener.__index = Listener
local Sub = {}
Sub.__index = Sub

local QUEUE_MAX = 10000   -- notifications a subscription keeps unread

local function listen_loop(l)
  local backoff = 0.05
  while not l.closed do
    if not l.conn then
      local ok, conn, err = pcall(M.connect, l.pool.opts)
      if not ok then return end   -- cancelled: the pool is closing
      if conn then
        conn:settimeout(nil)
        l.conn = conn
        backoff = 0.05
        for _, ch in pairs(l.channels) do ch.listening = false end
        l.dirty = true
        if l.connected_once then
          l.reconnects = l.reconnects + 1
          for _, ch in pairs(l.channels) do
            for sub in pairs(ch.subs) do sub.gaps = sub.gaps + 1 end
          end
        end
        l.connected_once = true
      else
        l.err = err
        l.changed:broadcast()
        task.sleep(backoff)
        backoff = math.min(backoff * 2, 2)
      end
    end
    local conn = l.conn
    if conn and l.dirty then
      l.dirty = false
      for name, ch in pairs(l.channels) do
        local sql
        if next(ch.subs) and not ch.listening then sql = "LISTEN "
        elseif not next(ch.subs) then sql = "UNLISTEN " end
        if sql then
          local ok, err = conn:exec(sql .. M.quote_ident(name))
          if not ok then
            l.err = err
            if err.connection then break end
          elseif next(ch.subs) then
            ch.listening = true
          else
            l.channels[name] = nil
            l.nchannels = l.nchannels - 1
          end
        end
      end
      l.changed:broadcast()
    end
    if conn and conn:status() ~= "closed" then
      local chan, payload = conn:wait_notify()
      if chan then
        local ch = l.channels[chan]
        if ch then
          for sub in pairs(ch.subs) do sub:push(payload) end
        end
      elseif payload ~= "timeout" then   -- the connection is gone
        l.err = payload
      end
    end
    if l.conn and l.conn:status() == "closed" then
      l.conn:close()
      l.conn = nil
      l.lost = l.lost + 1
      l.changed:broadcast()
    end
  end
end

local function listener_of(pool)
  local l = pool.listener
  if l then return l end
  l = setmetatable({
    pool = pool, channels = {}, nchannels = 0, changed = task.waitq("postgres"),
    reconnects = 0, lost = 0, dirty = false,
  }, Listener)
  pool.listener = l
  l.thread = task.spawn_daemon(listen_loop, l)
  return l
end

function Listener:close()
  self.closed = true
  for _, ch in pairs(self.channels) do
    for sub in pairs(ch.subs) do sub.closed = true; sub.q:broadcast() end
  end
  if self.conn then self.conn:wake() end
  task.kill(self.thread)
  if self.conn then
    self.conn:close()
    self.conn = nil
  end
end

-- Yields. db:listen(channel [, opts]) -> sub | nil, err: a subscription to
-- NOTIFY on channel, once the server has confirmed the LISTEN (waiting
-- up to acquire_timeout). opts.queue: notifications kept unread at most
-- (default 10000; past it the oldest go, counted in sub.dropped).
function Pool:listen(channel, opts)
  if type(channel) ~= "string" or channel == "" then error("listen: channel name expected", 2) end
  if self.closed then return nil, failure("pool closed") end
  local l = listener_of(self)
  local ch = l.channels[channel]
  if not ch then
    ch = { subs = {}, listening = false }
    l.channels[channel] = ch
    l.nchannels = l.nchannels + 1
  end
  local sub = setmetatable({
    listener = l, channel = channel, head = 1, tail = 0, q = task.waitq("postgres"),
    max = opts and opts.queue or QUEUE_MAX, dropped = 0, gaps = 0,
  }, Sub)
  ch.subs[sub] = true
  if not ch.listening then
    l.dirty = true
    if l.conn then l.conn:wake() end
    local deadline = monotonic() + self.acquire_timeout
    while not ch.listening do
      local left = deadline - monotonic()
      if left <= 0 or l.closed then
        sub:close()
        return nil, l.err or failure("listen: timeout", { timeout = true })
      end
      l.changed:wait(left)
    end
  end
  return sub
end

function Sub:push(payload)
  self.tail = self.tail + 1
  self[self.tail] = payload
  if self.tail - self.head >= self.max then
    self[self.head] = nil
    self.head = self.head + 1
    self.dropped = self.dropped + 1
  end
  self.q:signal()
end

-- Yields. sub:next([timeout]) -> payload | nil, "timeout" | nil, "closed".
function Sub:next(timeout)
  local deadline = timeout and monotonic() + timeout
  while true do
    if self.closed then return nil, "closed" end
    if self.head <= self.tail then
      local payload = self[self.head]
      self[self.head] = nil
      self.head = self.head + 1
      return payload
    end
    local left
    if deadline then
      left = deadline - monotonic()
      if left <= 0 then return nil, "timeout" end
    end
    self.q:wait(left)
  end
end

-- sub:close(): no more notifications; the channel is UNLISTENed when its
-- last subscription closes.
function Sub:close()
  if self.closed then return end
  self.closed = true
  local l = self.listener
  local ch = l.channels[self.channel]
  if ch then
    ch.subs[self] = nil
    if not next(ch.subs) then
      l.dirty = true
      if l.conn then l.conn:wake() end
    end
  end
  self.q:broadcast()
end

return M
