-- cohost.shared: dictionaries shared by all worker threads, with the API
-- of OpenResty's ngx.shared.DICT (docs/shared.md). Under --processes, a
-- dictionary is shared by every worker process only if the command line
-- made it before they were forked (--shdict NAME:SIZE, docs/processes.md);
-- one a script makes is its process's own (a warning says so).
--   local dict = require("cohost.shared").new("cache", "10m")
--   dict:set("k", "v", 60)          -- true, nil, forcible
--   dict:get("k")                   -- "v" (and flags when non-zero)
-- Every worker runs the script's main chunk, so new() with a name that
-- exists returns that dictionary. The store is C (host/shdict/); this
-- file parses sizes and keeps one Lua object per name for this worker.
local core = require "cohost.core.shdict"

local M = {}

-- This worker's objects by name (each worker has its own lua_State), so
-- new() and get() hand out the same object every time.
local dicts = {}

local units = { [""] = 1, k = 1024, m = 1024 * 1024, g = 1024 * 1024 * 1024 }

-- "10m", "512k", "1g", "65536" or a number -> bytes; raises otherwise.
local function parse_size(size)
  if type(size) == "number" then
    if size ~= size or size < 0 or size % 1 ~= 0 then
      error(("bad size %s: a whole number of bytes expected"):format(size), 3)
    end
    return size
  end
  if type(size) ~= "string" then
    error(("bad size: number or string expected, got %s"):format(type(size)), 3)
  end
  local num, unit = size:match("^(%d+)([kKmMgG]?)$")
  if not num then
    error(("bad size '%s': expected bytes, or a number with k, m or g"):format(size), 3)
  end
  return tonumber(num) * units[unit:lower()]
end

-- new(name, size) -> dict: the dictionary called name, created with size
-- bytes of capacity (8k .. 4095m) the first time any worker asks. Raises
-- on a bad name or size, or if name exists with another size. One made by
-- --shdict is returned whatever the size, which may then be omitted.
function M.new(name, size)
  if type(name) ~= "string" or name == "" then
    error("bad name: non-empty string expected", 2)
  end
  if size == nil then
    local d = M.get(name)
    if not d then
      error(("shared dict '%s': no size given, and --shdict did not make it"):format(name), 2)
    end
    return d
  end
  local bytes = parse_size(size)
  local d, err = core.open(name, bytes)   -- creates it, or checks the size
  if not d then error(err, 2) end
  local mine = dicts[name]
  if mine then return mine end
  dicts[name] = d
  return d
end

-- get(name) -> dict, or nil if no worker has created it yet. ngx.shared.NAME
-- (cohost.ngx) is this.
function M.get(name)
  local d = dicts[name]
  if d == nil and type(name) == "string" then
    d = core.find(name)
    if d then dicts[name] = d end
  end
  return d
end

return M
