-- The sampler of scripts/soak.sh: once a second, for SECONDS seconds,
-- appends one CSV row about the server PID and every process under it
-- (a master and its workers count as one server):
--
--   t           seconds since the first sample
--   rss_kb      VmRSS summed over the processes (/proc/P/status)
--   fds         open descriptors summed over them (/proc/P/fd)
--   procs       how many processes the tree has
--   coros, connections, requests, lua_kb
--               from GET /status on STATUS_PORT (docs/stats.md): totals'
--               coros, connections, requests and lua_bytes / 1024
--
-- With worker processes, /status covers every process's workers.
--
-- A field that could not be read is left empty (a missed sample, which the
-- trend check skips). The sampler's own scrape is one of the coroutines it
-- counts, the same one every second.
--
--   build/cohost scripts/soak/sample.lua OUT.csv SECONDS PID STATUS_PORT
local cohost = require "cohost"
local http = require "cohost.http"
local cjson = require "cjson.safe"
local lfs = require "lfs"

local out_path, seconds = arg[1], tonumber(arg[2])
local root, status_port = tonumber(arg[3]), tonumber(arg[4])
if not (out_path and seconds and root and status_port) then
  io.stderr:write("usage: cohost scripts/soak/sample.lua OUT.csv SECONDS PID STATUS_PORT\n")
  cohost.exit(2)
end

local function slurp(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- root and its descendants that are alive now. Reads every /proc/N/stat
-- once: O(processes on the machine), a few ms.
local function tree()
  local parent = {}
  for name in lfs.dir("/proc") do
    local pid = tonumber(name)
    local stat = pid and slurp("/proc/" .. name .. "/stat")
    -- The command name may hold spaces and parentheses: skip to the last ")".
    local ppid = stat and stat:match("^.*%) %S+ (%d+)")
    if ppid then parent[pid] = tonumber(ppid) end
  end
  local pids, seen = {}, {}
  if not parent[root] then return pids end
  pids[1], seen[root] = root, true
  -- Few processes: repeat passes until no new child turns up.
  local grew = true
  while grew do
    grew = false
    for pid, pp in pairs(parent) do
      if seen[pp] and not seen[pid] then
        seen[pid], grew = true, true
        pids[#pids + 1] = pid
      end
    end
  end
  return pids
end

local function process_sums(pids)
  local rss, fds = 0, 0
  for _, pid in ipairs(pids) do
    local status = slurp("/proc/" .. pid .. "/status")
    local kb = status and status:match("VmRSS:%s*(%d+)")
    -- A process gone between the scan and now counts for nothing.
    if kb then
      rss = rss + tonumber(kb)
      local ok, iter, dir = pcall(lfs.dir, "/proc/" .. pid .. "/fd")
      if ok then
        for name in iter, dir do
          if name ~= "." and name ~= ".." then fds = fds + 1 end
        end
      end
    end
  end
  return rss, fds
end

local url = "http://127.0.0.1:" .. status_port .. "/status"

local function status()
  local res = http.request(url, { timeout = 2000 })
  if not res or res.status ~= 200 then return {} end
  local doc = cjson.decode(res.body)
  return type(doc) == "table" and type(doc.totals) == "table" and doc.totals or {}
end

local f = assert(io.open(out_path, "w"))
f:write("t,rss_kb,fds,procs,coros,connections,requests,lua_kb\n")
f:flush()

local function field(v, scale)
  if type(v) ~= "number" then return "" end
  return ("%d"):format(v / (scale or 1))
end

local t0 = cohost.monotonic()
local i = 0
while true do
  local t = cohost.monotonic() - t0
  if t > seconds then break end
  local pids = tree()
  if #pids == 0 then
    io.stderr:write("sample.lua: process ", root, " is gone\n")
    break
  end
  local rss, fds = process_sums(pids)
  local st = status()
  -- The time of the reads, not of the loop's start: a scrape that waited
  -- would otherwise skew requests per second around it.
  t = cohost.monotonic() - t0
  f:write(("%.1f,%d,%d,%d,%s,%s,%s,%s\n"):format(t, rss, fds, #pids, field(st.coros),
    field(st.connections), field(st.requests), field(st.lua_bytes, 1024)))
  f:flush()
  i = i + 1
  -- On a 1 s grid from the start, so a slow scrape does not shift the rest.
  local wait = t0 + i - cohost.monotonic()
  if wait > 0 then cohost.sleep(wait) end
end
f:close()
