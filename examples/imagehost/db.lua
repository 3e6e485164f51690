-- imagehost.db: image metadata in SQLite, through Debian's lua-sql-sqlite3
-- (LuaSQL).
--
--   db.open(path) -> db | nil, err
--   db:get(id) -> row | nil        db:insert(row) -> true | nil, "exists" | nil, err
--   db:delete(id)                  db:page(n, per) -> rows, total
--   db:ids() -> { id = true, ... }
--
-- A row is { id, type, size, width, height, created (epoch seconds), token }.
--
-- LuaSQL is a blocking C library and the database is a local file: each
-- statement runs on the worker thread and holds it for its duration (tens
-- of microseconds for these one-row statements on a warm page cache). The
-- database is in WAL mode with synchronous=NORMAL, so a commit writes the
-- log without fsync; SQLite fsyncs at checkpoints (every 1000 pages), and
-- those do stall the worker for a few milliseconds. The price: a power
-- failure (not a crash of the process) can lose the last commits; the
-- store then finds image files without rows at start-up and adds them
-- back (see store.lua).
--
-- Statements are serialized per worker with a semaphore: SQLite's busy
-- handler sleeps when another worker holds the write lock, that sleep is
-- hooked and parks the coroutine mid-statement, and no other coroutine may
-- use the connection meanwhile.
local luasql = require "luasql.sqlite3"
local semaphore = require "cohost.semaphore"

local M = {}

local DB = {}
DB.__index = DB

local SCHEMA = [[
CREATE TABLE IF NOT EXISTS images (
  id      TEXT PRIMARY KEY,   -- SHA-256 of the bytes, lower-case hex
  type    TEXT NOT NULL,      -- image/png, image/jpeg, image/gif, image/webp
  size    INTEGER NOT NULL,   -- bytes
  width   INTEGER NOT NULL,   -- pixels
  height  INTEGER NOT NULL,   -- pixels
  created REAL NOT NULL,      -- upload time, seconds since the epoch
  token   TEXT NOT NULL       -- delete token, hex
)]]

function M.open(path)
  local env = luasql.sqlite3()
  local conn, err = env:connect(path)
  if not conn then return nil, err end
  for _, sql in ipairs {
    -- First: ms to wait while another worker holds a lock (all workers
    -- open the database at once on start-up).
    "PRAGMA busy_timeout=5000",
    "PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
    SCHEMA,
    "CREATE INDEX IF NOT EXISTS images_created ON images (created)",
  } do
    local res, serr = conn:execute(sql)
    if not res then conn:close(); return nil, serr end
    if type(res) == "userdata" then res:close() end   -- PRAGMAs answer a row
  end
  return setmetatable({ env = env, conn = conn, mutex = semaphore.new(1) }, DB)
end

-- Runs fn(conn) holding the connection; returns what fn returns. An error
-- in fn is raised again once the connection is released.
function DB:with(fn)
  assert(self.mutex:wait(3600))
  local res = { pcall(fn, self.conn) }
  self.mutex:post()
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

function DB:quote(s) return "'" .. self.conn:escape(s) .. "'" end

local COLUMNS = "id, type, size, width, height, created, token"

-- All rows of a query as tables with named fields.
local function rows(conn, sql)
  local cur = assert(conn:execute(sql))
  local list = {}
  while true do
    local row = cur:fetch({}, "a")
    if not row then break end
    list[#list + 1] = row
  end
  cur:close()
  return list
end

function DB:get(id)
  return self:with(function(conn)
    return rows(conn, "SELECT " .. COLUMNS .. " FROM images WHERE id = " .. self:quote(id))[1]
  end)
end

function DB:insert(r)
  local sql = ("INSERT INTO images (%s) VALUES (%s, %s, %d, %d, %d, %.3f, %s)")
    :format(COLUMNS, self:quote(r.id), self:quote(r.type), r.size, r.width, r.height,
            r.created, self:quote(r.token))
  return self:with(function(conn)
    local ok, err = conn:execute(sql)
    if ok then return true end
    if tostring(err):find("UNIQUE", 1, true) then return nil, "exists" end
    return nil, err
  end)
end

function DB:delete(id)
  return self:with(function(conn)
    return assert(conn:execute("DELETE FROM images WHERE id = " .. self:quote(id)))
  end)
end

-- Page n (from 1) of per rows, newest first, and the number of rows.
function DB:page(n, per)
  return self:with(function(conn)
    local list = rows(conn, ("SELECT %s FROM images ORDER BY created DESC, rowid DESC LIMIT %d OFFSET %d")
      :format(COLUMNS, per, (n - 1) * per))
    local total = rows(conn, "SELECT count(*) AS n FROM images")[1].n
    return list, tonumber(total)
  end)
end

-- Every id, as a set (start-up reconciliation only: O(rows) in memory).
function DB:ids()
  return self:with(function(conn)
    local set = {}
    for _, row in ipairs(rows(conn, "SELECT id FROM images")) do set[row.id] = true end
    return set
  end)
end

return M
