-- imagehost.images: the image collection, keeping the files (store.lua)
-- and their rows (db.lua) in step.
--
--   images.new(dir, max_size [, max_pixels]) -> col | nil, err
--   col:begin() -> upload          (store.lua: write pieces, then col:add)
--   col:add(upload) -> row, created | nil, err
--   col:get(id) -> row | nil       col:type(id) -> mime | nil (cached)
--   col:delete(id, token) -> true | nil, "not found" | "forbidden"
--   col:page(n) -> rows, total     col:reconcile(before)
--
-- Invariants: a file <id> appears only complete (store.lua); its row is
-- written after the file is in place and removed after the file is gone,
-- so a crash leaves at worst a file without a row, which reconcile()
-- adds back at the next start, or a row without a file, which it drops.
-- Uploads and deletes of one id are serialized per worker by a lock on
-- the id. Across workers (-w N) the rows' primary key settles two uploads
-- of the same bytes; a delete racing an upload of the very same bytes on
-- another worker may leave a row without its file until the next start.
local bit = require "bit"
local cohost = require "cohost"
local crypto = require "cohost.core.crypto"
local semaphore = require "cohost.semaphore"
local db_mod = require "imagehost.db"
local store_mod = require "imagehost.store"
local sniff = require "imagehost.sniff"

local M = {}

M.PER_PAGE = 20
local TYPE_CACHE_MAX = 10000   -- ids whose type is cached; then the cache restarts

local Col = {}
Col.__index = Col

function M.new(dir, max_size, max_pixels)
  local store, err = store_mod.new(dir, max_size, max_pixels)
  if not store then return nil, err end
  local db
  db, err = db_mod.open(dir .. "/meta.db")
  if not db then return nil, "open " .. dir .. "/meta.db: " .. tostring(err) end
  return setmetatable({ store = store, db = db, locks = {}, types = {}, ntypes = 0 }, Col)
end

local function hex(s)
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- 128 random bits from OpenSSL's generator.
function M.new_token() return hex(crypto.random_bytes(16)) end

-- Runs fn() holding id's lock: one upload or delete of an id at a time in
-- this worker. The lock goes away when nobody holds or waits for it.
function Col:locked(id, fn, ...)
  local l = self.locks[id]
  if not l then
    l = { sem = semaphore.new(1), users = 0 }
    self.locks[id] = l
  end
  l.users = l.users + 1
  assert(l.sem:wait(3600))
  local res = { pcall(fn, ...) }
  l.users = l.users - 1
  l.sem:post()
  if l.users == 0 then self.locks[id] = nil end
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

function Col:begin() return self.store:begin() end

-- Stores a finished upload (upload:finish() done). Returns the row and
-- true when it is new; the existing row and false for bytes already
-- stored. The upload's temp file is gone once this returns or raises.
function Col:add(up)
  local res = { pcall(self.locked, self, up.id, self.insert, self, up) }
  up:abort()
  if not res[1] then error(res[2], 0) end
  return res[2], res[3]
end

-- Holding up.id's lock: the file into place, then its row.
function Col:insert(up)
  local old = self.db:get(up.id)
  if old then return old, false end
  local ok, err = self.store:commit(up)
  if not ok then
    if not up.path then self.store:remove(up.id) end   -- renamed, not synced
    error(err, 0)
  end
  local row = { id = up.id, type = up.type, size = up.size, width = up.width,
                height = up.height, created = cohost.now(), token = M.new_token() }
  local ins, ierr = self.db:insert(row)
  if ins then
    self:cache_type(row.id, row.type)
    return row, true
  end
  -- Another worker stored the same bytes between get and insert.
  if ierr == "exists" then return assert(self.db:get(up.id)), false end
  self.store:remove(up.id)
  error(ierr, 0)
end

function Col:cache_type(id, typ)
  if self.ntypes >= TYPE_CACHE_MAX then self.types, self.ntypes = {}, 0 end
  if not self.types[id] then self.ntypes = self.ntypes + 1 end
  self.types[id] = typ
end

function Col:get(id) return self.db:get(id) end

-- The type of image id, or nil when there is no such row. Cached: the
-- bytes behind an id, so its type, never change; a deleted image is found
-- out when its file is missing (the caller then calls forget).
function Col:type(id)
  local typ = self.types[id]
  if typ then return typ end
  local row = self.db:get(id)
  if not row then return nil end
  self:cache_type(id, row.type)
  return row.type
end

function Col:forget(id)
  if self.types[id] then self.types[id], self.ntypes = nil, self.ntypes - 1 end
end

-- Compares two strings in time that does not depend on where they differ.
local function same(a, b)
  if #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(a:byte(i), b:byte(i))) end
  return diff == 0
end

function Col:delete(id, token)
  return self:locked(id, function()
    local row = self.db:get(id)
    if not row then return nil, "not found" end
    if type(token) ~= "string" or not same(token, row.token) then return nil, "forbidden" end
    -- The file goes first: a crash in between leaves a row without a file,
    -- which reconcile drops, never a file that would come back.
    self.store:remove(id)
    self.db:delete(id)
    self:forget(id)
    return true
  end)
end

function Col:page(n) return self.db:page(n, M.PER_PAGE) end

-- Start-up repair after a crash or power failure: temp files older than
-- `before` are removed, files without a row get one (a new delete token,
-- logged), rows without a file are dropped. Files changed since `before`
-- are left alone: another worker may be storing them right now.
function Col:reconcile(before)
  local removed = self.store:clean_tmp(before)
  local ids, added = self.db:ids(), 0
  for id, attr in self.store:images() do
    if ids[id] then
      ids[id] = nil
    elseif attr.modification < before then
      local f = io.open(self.store:path(id), "rb")
      local head = f and f:read(sniff.MAGIC) or ""
      local typ = sniff.type(head)
      local w, h = nil, "unsupported"
      if typ then w, h = sniff.size(typ, f) end
      if f then f:close() end
      if w then
        local token = M.new_token()
        self.db:insert { id = id, type = typ, size = attr.size, width = w, height = h,
                         created = attr.modification, token = token }
        cohost.log(cohost.WARN, "imagehost: ", id, " had no row: added back, delete token ", token)
        added = added + 1
      else
        cohost.log(cohost.WARN, "imagehost: ", id, " is not a readable image (", h, "): left as is")
      end
    end
  end
  local dropped = 0
  for id in pairs(ids) do
    self.db:delete(id)
    dropped = dropped + 1
  end
  if removed + added + dropped > 0 then
    cohost.log(cohost.NOTICE, ("imagehost: start-up repair: %d temp files removed, %d rows added, %d rows without a file dropped")
      :format(removed, added, dropped))
  end
end

return M
