-- cohost.file: regular files that never stall the worker on the disk.
-- write and read go to the page cache with plain write(2)/read(2);
-- fsync and fdatasync run on the runtime's thread pool, parking only the
-- calling coroutine. Failures return nil, err, errno as Lua's io does.
-- See docs/file.md.
local core = require "cohost.core.file"

local M = {}

-- open(path [, flags [, mode]]) -> file or nil, err, errno. flags: "r"
-- (default), "w", "a", "r+", "w+", "a+", with "x" to insist on creating;
-- mode (default 0644, a number or an octal string "600") on creation.
-- A file has write(data), read([n]), seek([whence [, offset]]),
-- truncate(len), fsync(), fdatasync(), stat(), fileno(), close().
M.open = core.open

M.rename = core.rename
M.unlink = core.unlink
M.mkdir = core.mkdir
M.rmdir = core.rmdir
M.stat = core.stat

-- exists(path) -> true if stat succeeds (a file, a directory, ...).
function M.exists(path)
  return core.stat(path) ~= nil
end

-- mkdir_p(path [, mode]) -> true or nil, err, errno: creates path and its
-- missing parents; an existing directory is fine.
function M.mkdir_p(path, mode)
  local st = core.stat(path)
  if st then
    if st.type == "directory" then return true end
    return nil, path .. ": Not a directory", 20
  end
  local parent = path:match("^(.+)/[^/]+/*$")
  if parent and parent ~= path then
    local ok, err, code = M.mkdir_p(parent, mode)
    if not ok then return nil, err, code end
  end
  local ok, err, code = core.mkdir(path, mode)
  if not ok and code == 17 then   -- EEXIST: made meanwhile by someone else
    local again = core.stat(path)
    if again and again.type == "directory" then return true end
  end
  return ok, err, code
end

-- Yields. sync_dir(path) -> true or nil, err, errno: fsyncs a directory,
-- which makes the creations, renames and unlinks in it durable.
function M.sync_dir(path)
  local d, err, code = core.open(path, "r")
  if not d then return nil, err, code end
  local ok
  ok, err, code = d:fsync()
  d:close()
  return ok, err, code
end

-- read_all(path) -> the whole content or nil, err, errno.
function M.read_all(path)
  local f, err, code = core.open(path, "r")
  if not f then return nil, err, code end
  local data
  data, err, code = f:read()
  f:close()
  if not data then return nil, err, code end
  return data
end

local sys = require "cohost.core.sys"

-- Temp names: the process, the worker and a counter keep them apart.
local seq, pid = 0, nil

local function tmpname(path)
  if not pid then
    local f = io.open("/proc/self/stat")
    pid = f and f:read("*n") or 0
    if f then f:close() end
  end
  seq = seq + 1
  return ("%s.tmp.%d.%d.%d"):format(path, pid, sys.worker_id(), seq)
end

-- Yields. write_atomic(path, data [, mode]) -> true or nil, err, errno:
-- readers see the old content or all of data, never a part, even after a
-- crash. data (a string or an array of strings) goes to a temp file beside
-- path, which is fsynced, renamed over path, and the directory fsynced.
function M.write_atomic(path, data, mode)
  local tmp = tmpname(path)
  local f, err, code = core.open(tmp, "wx", mode)
  if not f then return nil, err, code end
  local ok
  ok, err, code = f:write(data)
  if ok then ok, err, code = f:fsync() end
  f:close()
  if ok then ok, err, code = core.rename(tmp, path) end
  if not ok then
    core.unlink(tmp)
    return nil, err, code
  end
  return M.sync_dir(path:match("^(.*)/[^/]*$") or ".")
end

return M
