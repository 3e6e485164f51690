-- imagehost.fsio: the few file-system calls the store makes, in one place.
--
--   fsio.create(dir)      -> path, file | nil, err   a new file, mode 0600
--                            (file:write(s) -> truthy | nil, err; file:close())
--   fsio.sync(path)       -> true | nil, err   Yields. fsync(2) of a written file
--   fsio.sync_dir(dir)    -> true | nil, err   Yields. fsync(2) of a directory
--   fsio.rename(a, b), fsio.unlink(path) -> true | nil, err
--
-- On cohost.file: writes land in the page cache and return at once; fsync,
-- the call that waits for the disk (milliseconds, more under load), runs on
-- the runtime's thread pool and parks only the calling coroutine, so other
-- connections of the worker keep going.
--
-- TEMPORARY: cohost.file was not committed yet when this was written.
-- Without it, files are written with io and fsync runs on the worker
-- thread through the FFI, stalling the worker for as long as it takes.
local bit = require "bit"
local crypto = require "cohost.core.crypto"

local M = {}

local have_file, file = pcall(require, "cohost.file")

local EEXIST = 17

-- A name no other upload has: 64 random bits.
local function unique(dir)
  return dir .. "/upload-" .. crypto.random_bytes(8):gsub(".", function(c)
    return ("%02x"):format(c:byte())
  end)
end

if have_file then
  function M.create(dir)
    for _ = 1, 8 do   -- a clash is unlikely; more than a few means trouble
      local path = unique(dir)
      local f, err, code = file.open(path, "wx", "600")
      if f then return path, f end
      if code ~= EEXIST then return nil, err end
    end
    return nil, "cannot make a unique name in " .. dir
  end

  function M.sync(path)
    local f, err = file.open(path, "r")
    if not f then return nil, err end
    local ok, serr = f:fsync()
    f:close()
    return ok, serr
  end

  M.sync_dir = file.sync_dir
  M.rename = file.rename
  M.unlink = file.unlink
  return M
end

-- -- Fallback: io and a blocking fsync ------------------------------------------

local ffi = require "ffi"
for _, decl in ipairs {
  "int open(const char *path, int flags, ...);",
  "int close(int fd);",
  "int fsync(int fd);",
  "char *strerror(int errnum);",
} do
  pcall(ffi.cdef, decl)   -- another module may have declared it already
end
local C = ffi.C
local O_RDONLY, O_DIRECTORY, O_CLOEXEC = 0, 0x10000, 0x80000   -- Linux values

function M.create(dir)
  local path = unique(dir)
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  return path, f
end

local function fsync_path(path, flags)
  local fd = C.open(path, bit.bor(O_RDONLY, O_CLOEXEC, flags))
  if fd < 0 then return nil, path .. ": " .. ffi.string(C.strerror(ffi.errno())) end
  local rc = C.fsync(fd)
  local err = rc ~= 0 and ffi.string(C.strerror(ffi.errno()))
  C.close(fd)
  if err then return nil, path .. ": " .. err end
  return true
end

function M.sync(path) return fsync_path(path, 0) end
function M.sync_dir(dir) return fsync_path(dir, O_DIRECTORY) end
function M.rename(a, b) return os.rename(a, b) end
function M.unlink(path) return os.remove(path) end

return M
