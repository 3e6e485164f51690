-- What the server measures about its commands: the per-command counters
-- and latency histograms of INFO commandstats and LATENCY HISTOGRAM, the
-- error counts of INFO errorstats, the slow log (SLOWLOG) and the latency
-- monitor (LATENCY LATEST, HISTORY, RESET). Replies and rules are Redis
-- 7.0's (slowlog.c, latency.c, server.c's call()).
local ffi = require "ffi"
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local ints = require "kv.ints"

local put, bulk, int = resp.put, resp.bulk, resp.int
local floor, log, min, format, sub, lower = math.floor, math.log, math.min, string.format,
  string.sub, string.lower

local M = {}

-- Settings (CONFIG SET): slowlog-log-slower-than in us (negative: off),
-- slowlog-max-len, latency-monitor-threshold in ms (0: off),
-- latency-tracking (the histograms).
M.config = { slower_than = 10000, max_len = 128, latency_ms = 0, tracking = true }

-- -- The clock --------------------------------------------------------------

pcall(ffi.cdef, "double ch_clock_us(void);")

-- Microseconds on a clock that never jumps: the worker loop's TSC clock
-- (runtime/include/cohost.h), an FFI call the JIT compiles, two a
-- command. clock_gettime cost 25 ns a read here, 9% of a --pipe SETBIT.
M.now_us = ffi.C.ch_clock_us

-- -- Latency histograms -------------------------------------------------------

-- Bucket b counts the calls that took up to 1024 * 2^b ns; it is printed
-- as Redis's hdr_histogram prints that bound with two significant digits
-- (1, 2, 4, 8, 16, 33, 66, 132 ... us), so the two servers' histograms
-- line up.
local LOG2 = log(2)
local NBUCKETS = 40
local bound_us = {}
for b = 0, NBUCKETS - 1 do bound_us[b] = floor((1024 * 2 ^ b * 129 / 128 - 1) / 1000) end

local function bucket(us)
  if us <= 1.024 then return 0 end   -- most commands: no logarithm
  local ns = us * 1000
  local b = math.ceil(log(ns / 1024) / LOG2)
  return b < NBUCKETS and b or NBUCKETS - 1
end

-- -- Recording a command ------------------------------------------------------

-- The slow log: entries by id, ids first_id .. next_id - 1 kept (adding
-- and trimming are O(1) whatever slowlog-max-len is).
local slowlog, first_id, next_id = {}, 0, 0
local events = {}                -- latency monitor: event -> { max, n, [i] = { time, ms } }
local HISTORY = 160              -- samples kept per event (LATENCY_TS_LEN)

-- Records a latency sample of ms for event (if the monitor is on and it
-- is at the threshold): samples in the same second merge into their max.
function M.latency(event, ms)
  local threshold = M.config.latency_ms
  if threshold <= 0 or ms < threshold then return end
  ms = floor(ms)
  local e = events[event]
  if not e then
    e = { max = 0, n = 0 }
    events[event] = e
  end
  local now = floor(cohost.now())
  local last = e[e.n]
  if last and last[1] == now then
    if ms > last[2] then last[2] = ms end
  else
    e.n = e.n + 1
    e[e.n] = { now, ms }
    if e.n > HISTORY then
      table.remove(e, 1)
      e.n = e.n - 1
    end
  end
  if ms > e.max then e.max = ms end
end

-- A slow log argument as Redis keeps it: past 128 bytes, cut with a note
-- (SLOWLOG_ENTRY_MAX_STRING).
local function slow_arg(a)
  if #a <= 128 then return a end
  return sub(a, 1, 128) .. format("... (%d more bytes)", #a - 128)
end

local function slow_push(c, argv, argc, us)
  local n = min(argc, 32)   -- SLOWLOG_ENTRY_MAX_ARGC
  local args = {}
  for i = 1, n do args[i] = slow_arg(argv[i]) end
  if argc > 32 then args[32] = format("... (%d more arguments)", argc - 31) end
  slowlog[next_id] = { next_id, floor(cohost.now()), floor(us), args, c.peer or "", c.name or "" }
  next_id = next_id + 1
  while next_id - first_id > M.config.max_len do
    slowlog[first_id] = nil
    first_id = first_id + 1
  end
end

-- After a command ran: its counters, histogram, the slow log and the
-- latency monitor. us: how long it ran (not counting a blocking wait).
function M.ran(c, cmd, argv, argc, us)
  cmd.calls = cmd.calls + 1
  cmd.usec = cmd.usec + us
  if M.config.tracking then
    local h = cmd.hist
    if not h then
      h = {}
      for b = 0, NBUCKETS - 1 do h[b] = 0 end
      cmd.hist = h
    end
    local b = bucket(us)
    h[b] = h[b] + 1
  end
  local flag = cmd.flag
  local slower = M.config.slower_than
  if slower >= 0 and us >= slower and not flag.skip_slowlog then slow_push(c, argv, argc, us) end
  if M.config.latency_ms > 0 then
    M.latency(flag.fast and "fast-command" or "command", us / 1000)
  end
end

-- -- Errors -----------------------------------------------------------------

-- Counts an error reply (a RESP "-CODE text" string) under its code.
function M.error(reply)
  local code = reply:match("^%-(%S+)") or "ERR"
  local errors = R.stats.errors
  errors[code] = (errors[code] or 0) + 1
  R.stats.error_replies = R.stats.error_replies + 1
end

-- -- INFO sections -------------------------------------------------------------

-- The lines of INFO commandstats, sorted by command.
function M.commandstats()
  local t = {}
  for _, cmd in ipairs(R.all) do
    if cmd.calls > 0 or cmd.rejected > 0 or cmd.failed > 0 then
      t[#t + 1] = format("cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,"
        .. "failed_calls=%d", cmd.name, cmd.calls, floor(cmd.usec),
        cmd.calls > 0 and cmd.usec / cmd.calls or 0, cmd.rejected, cmd.failed)
    end
  end
  table.sort(t)
  return t
end

function M.errorstats()
  local t = {}
  for code, count in pairs(R.stats.errors) do t[#t + 1] = format("errorstat_%s:count=%d", code, count) end
  table.sort(t)
  return t
end

-- A double as Redis prints percentiles: "%f" without trailing zeros.
function M.trim_double(v)
  return (format("%f", v):gsub("0+$", ""):gsub("%.$", ""))
end

-- The lines of INFO latencystats: for each command that ran, the
-- percentiles asked (latency-tracking-info-percentiles) from its
-- histogram, as the bound of the bucket they fall in.
function M.latencystats(percentiles)
  local t = {}
  for _, cmd in ipairs(R.all) do
    local h = cmd.hist
    if h and cmd.calls > 0 then
      local total = 0
      for b = 0, NBUCKETS - 1 do total = total + h[b] end
      local parts = {}
      for i, p in ipairs(percentiles) do
        local want, seen, at = total * p / 100, 0, 0
        for b = 0, NBUCKETS - 1 do
          seen = seen + h[b]
          at = b
          if seen >= want and seen > 0 then break end
        end
        parts[i] = format("p%s=%.3f", M.trim_double(p), bound_us[at])
      end
      t[#t + 1] = "latency_percentiles_usec_" .. cmd.name .. ":" .. table.concat(parts, ",")
    end
  end
  table.sort(t)
  return t
end

-- CONFIG RESETSTAT: the counters, histograms and errors start again.
function M.reset()
  for _, cmd in ipairs(R.all) do
    cmd.calls, cmd.usec, cmd.rejected, cmd.failed, cmd.hist = 0, 0, 0, 0, nil
  end
  R.stats.errors = {}
  R.stats.error_replies = 0
end

-- -- SLOWLOG ------------------------------------------------------------------

local reg = R.register

reg("slowlog", nil)

reg("slowlog|get", function(_, argv, argc, out, n)
  local count = 10
  if argc == 3 then
    count = ints.parse(argv[3])
    if count == nil or count < -1 then
      return put(out, n, "-ERR count should be greater than or equal to -1\r\n")
    end
    if count == -1 then count = next_id - first_id end
  end
  count = min(tonumber(count), next_id - first_id)
  n = resp.array(out, n, count)
  for i = 1, count do
    local e = slowlog[next_id - i]   -- newest first
    n = resp.array(out, n, 6)
    n = put(out, n, int(e[1]))
    n = put(out, n, int(e[2]))
    n = put(out, n, int(e[3]))
    n = resp.bulk_array(out, n, e[4], #e[4])
    n = bulk(out, n, e[5])
    n = bulk(out, n, e[6])
  end
  return n
end)

reg("slowlog|len", function(_, _, _, out, n)
  return put(out, n, int(next_id - first_id))
end)

reg("slowlog|reset", function(_, _, _, out, n)
  slowlog, first_id = {}, next_id
  return put(out, n, resp.OK)
end)

-- The lines of a HELP reply, as simple strings.
function M.help(out, n, lines)
  n = resp.array(out, n, #lines)
  for _, l in ipairs(lines) do n = put(out, n, resp.simple(l)) end
  return n
end

reg("slowlog|help", function(_, _, _, out, n)
  return M.help(out, n, {
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
  })
end)

-- -- LATENCY -------------------------------------------------------------------

reg("latency", nil)

reg("latency|latest", function(_, _, _, out, n)
  local names = {}
  for name, e in pairs(events) do
    if e.n > 0 then names[#names + 1] = name end
  end
  table.sort(names)
  n = resp.array(out, n, #names)
  for _, name in ipairs(names) do
    local e = events[name]
    local last = e[e.n]
    n = resp.array(out, n, 4)
    n = bulk(out, n, name)
    n = put(out, n, int(last[1]))
    n = put(out, n, int(last[2]))
    n = put(out, n, int(e.max))
  end
  return n
end)

reg("latency|history", function(_, argv, _, out, n)
  local e = events[argv[3]]
  if not e then return resp.array(out, n, 0) end
  n = resp.array(out, n, e.n)
  for i = 1, e.n do
    n = resp.array(out, n, 2)
    n = put(out, n, int(e[i][1]))
    n = put(out, n, int(e[i][2]))
  end
  return n
end)

reg("latency|reset", function(_, argv, argc, out, n)
  local count = 0
  if argc == 2 then
    for _ in pairs(events) do count = count + 1 end
    events = {}
  else
    for i = 3, argc do
      if events[argv[i]] then
        events[argv[i]] = nil
        count = count + 1
      end
    end
  end
  return put(out, n, int(count))
end)

-- A command's calls and its cumulative histogram: the buckets where the
-- count grows, as Redis's fillCommandCDF.
local function histogram(out, n, cmd)
  n = resp.map(out, n, 2)
  n = bulk(out, n, "calls")
  n = put(out, n, int(cmd.calls))
  n = bulk(out, n, "histogram_usec")
  local h, pairs_, total = cmd.hist, {}, 0
  if h then
    for b = 0, NBUCKETS - 1 do
      if h[b] > 0 then
        total = total + h[b]
        pairs_[#pairs_ + 1] = { bound_us[b], total }
      end
    end
  end
  n = resp.map(out, n, #pairs_)
  for _, p in ipairs(pairs_) do
    n = put(out, n, int(p[1]))
    n = put(out, n, int(p[2]))
  end
  return n
end

-- LATENCY HISTOGRAM [command ...]: the commands that ran (all, or those
-- named; subcommands as "config|get"), in the order asked.
reg("latency|histogram", function(_, argv, argc, out, n)
  local list = {}
  if argc == 2 then
    for _, cmd in ipairs(R.all) do
      if cmd.calls > 0 then list[#list + 1] = cmd end
    end
  else
    local seen = {}
    for i = 3, argc do
      local name = lower(argv[i])
      for _, cmd in ipairs(R.all) do
        if cmd.name == name and cmd.calls > 0 and not seen[cmd] then
          seen[cmd] = true
          list[#list + 1] = cmd
        end
      end
    end
  end
  n = resp.map(out, n, #list)
  for _, cmd in ipairs(list) do
    n = bulk(out, n, cmd.name)
    n = histogram(out, n, cmd)
  end
  return n
end)

reg("latency|help", function(_, _, _, out, n)
  return M.help(out, n, {
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
  })
end)

return M
