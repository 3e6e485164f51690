-- imagehost.store: image files on disk, named by the SHA-256 of their bytes.
--
--   <dir>/images/<id>      finished images; a name appears only by rename(2)
--                          of a complete, fsynced file, so it never shows a
--                          partial image
--   <dir>/tmp/upload-*     uploads in progress (same file system: rename is
--                          atomic)
--
--   store.new(dir, max_size [, max_pixels]) -> store | nil, err
--                      (max_pixels: width x height allowed; nil or 0: any)
--   store:begin() -> upload | nil, err
--   upload:write(piece) -> true | nil, "too large" | "unsupported" | err
--   upload:finish() -> true | nil, "unsupported" | "bad image header" |
--                      "too many pixels" | err
--                      (then upload.id, .type, .size, .width, .height)
--   store:commit(upload) -> true | nil, err    the file becomes <id>
--   upload:abort()         removes the temp file (any time, any number of times)
--   store:remove(id), store:path(id), store:images(), store:clean_tmp(before)
local lfs = require "lfs"
local fsio = require "imagehost.fsio"
local sha256 = require "imagehost.sha256"
local sniff = require "imagehost.sniff"

local M = {}

local Store = {}
Store.__index = Store

local Upload = {}
Upload.__index = Upload

local function mkdir(path)
  if lfs.attributes(path, "mode") == "directory" then return true end
  local ok, err = lfs.mkdir(path)
  if not ok and lfs.attributes(path, "mode") ~= "directory" then return nil, err end
  return true
end

function M.new(dir, max_size, max_pixels)
  for _, d in ipairs { dir, dir .. "/images", dir .. "/tmp" } do
    local ok, err = mkdir(d)
    if not ok then return nil, "mkdir " .. d .. ": " .. tostring(err) end
  end
  return setmetatable({ dir = dir, images_dir = dir .. "/images", tmp_dir = dir .. "/tmp",
                        max_size = max_size,
                        max_pixels = max_pixels ~= 0 and max_pixels or nil }, Store)
end

function Store:path(id) return self.images_dir .. "/" .. id end

function Store:begin()
  local path, f = fsio.create(self.tmp_dir)
  if not path then return nil, f end
  return setmetatable({ store = self, path = path, f = f, hash = sha256.new(),
                        size = 0, head = "" }, Upload)
end

-- Streams one piece to the temp file and the hash. The type is decided as
-- soon as the first sniff.MAGIC bytes are in, so a text file is refused
-- after its first piece rather than after all of it.
function Upload:write(piece)
  local size = self.size + #piece
  if size > self.store.max_size then return nil, "too large" end
  if not self.type then
    self.head = self.head .. piece:sub(1, sniff.MAGIC - #self.head)
    if #self.head >= sniff.MAGIC then
      self.type = sniff.type(self.head)
      if not self.type then return nil, "unsupported" end
    end
  end
  local ok, err = self.f:write(piece)
  if not ok then return nil, err end
  self.hash:update(piece)
  self.size = size
  return true
end

-- Ends the body: closes the temp file, checks the type (a body shorter
-- than sniff.MAGIC is decided here), reads the dimensions and the id.
function Upload:finish()
  self.type = self.type or sniff.type(self.head)
  local ok, err = self.f:close()
  self.f = nil
  if not ok then return nil, err end
  if not self.type then return nil, "unsupported" end
  local f
  f, err = io.open(self.path, "rb")
  if not f then return nil, err end
  self.width, self.height = sniff.size(self.type, f)
  f:close()
  if not self.width then return nil, self.height end
  -- A decompression-bomb guard for whatever decodes the image later (a
  -- thumbnailer): a few KB of PNG can declare 50,000 x 50,000 pixels,
  -- 10 GB once decoded.
  local max = self.store.max_pixels
  if max and self.width * self.height > max then return nil, "too many pixels" end
  self.id = self.hash:hex()
  return true
end

function Upload:abort()
  if self.f then self.f:close(); self.f = nil end
  if self.path then fsio.unlink(self.path); self.path = nil end
end

-- fsync the data, rename it into place, fsync the directory so the new
-- name survives a crash. A rename over an existing <id> (the same bytes,
-- from another worker) replaces it atomically with identical content.
function Store:commit(up)
  local ok, err = fsio.sync(up.path)
  if not ok then return nil, err end
  ok, err = fsio.rename(up.path, self:path(up.id))
  if not ok then return nil, err end
  up.path = nil
  return fsio.sync_dir(self.images_dir)
end

-- Removes an image file; true if it was there.
function Store:remove(id)
  local ok = fsio.unlink(self:path(id))
  if ok then fsio.sync_dir(self.images_dir) end
  return ok ~= nil
end

-- Iterator over the finished images: id, attributes (lfs: size, modification).
function Store:images()
  local iter, state = lfs.dir(self.images_dir)
  return function()
    while true do
      local name = iter(state)
      if not name then return nil end
      if name:find("^%x+$") and #name == 64 then
        local attr = lfs.attributes(self.images_dir .. "/" .. name)
        if attr and attr.mode == "file" then return name, attr end
      end
    end
  end
end

-- Removes temp files last changed before `before` (epoch seconds): left by
-- a crash. Newer ones may be uploads another worker has in progress.
function Store:clean_tmp(before)
  local n = 0
  for name in lfs.dir(self.tmp_dir) do
    local path = self.tmp_dir .. "/" .. name
    if name:find("^upload%-") and (lfs.attributes(path, "modification") or before) < before then
      if fsio.unlink(path) then n = n + 1 end
    end
  end
  return n
end

return M
