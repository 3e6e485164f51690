-- The append-only log: every command that changed data, as RESP (the
-- format of Redis's own appendonly.aof, so redis-check-aof reads it),
-- replayed at start.
--
-- Commands append records to a memory buffer; one flusher thread writes
-- the whole buffer with one writev(2) whenever it has work, so every
-- connection served in one scheduler round shares one write (group
-- commit). With appendfsync always it then fdatasyncs, on the thread pool
-- (cohost.file), and only then are the replies of those commands sent.
-- With everysec a timer fdatasyncs once a second; with no, the kernel
-- decides. In every mode a reply waits until every record logged so far
-- is written to the file: a killed process (kill -9) loses nothing
-- acknowledged; a crashed machine loses up to a second with everysec,
-- nothing with always.
--
-- The log is rewritten from the data when it has doubled since the last
-- rewrite and passed 64 MiB, or on BGREWRITEAOF: the data is turned into
-- records in slices that yield (kv/snapshot.lua keeps it a point-in-time
-- image), written to a temp file and synced while commands go on; the
-- records logged meanwhile are appended too, and with the flusher paused
-- for that last catch-up the temp file is synced and renamed over the log.
--
-- A write error (disk full) keeps the records in memory, makes write
-- commands fail with -MISCONF (as Redis) and retries every second; the
-- file is cut back to its last good size first, so a partial record is
-- never left behind. A torn last record found at start (a crash mid-
-- write) is truncated with a log line; anything else wrong stops the
-- start with the record and its offset, unless --repair-log cuts it off.
local cohost = require "cohost"
local file = require "cohost.file"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local store = require "kv.store"
local snapshot = require "kv.snapshot"

local byte, sub = string.byte, string.sub

local M = {}

M.FILE = "appendonly.aof"
local CHUNK = 1024 * 1024   -- replay reads

local f                     -- the open log ("a+": appends, reads from 0)
local path
local mode                  -- "always", "everysec" or "no"
local buf, nbuf = {}, 0     -- records not yet written
M.seq = 0                   -- records appended since start
local written = 0           -- records in the file (write(2) done)
local synced = 0            -- records on disk (fdatasync done)
local size = 0              -- file bytes after the last good write
local wake = cohost.semaphore.new(0)
local wake_posted = false
local wseq, wsema, whead, wtail = {}, {}, 1, 0   -- waiters, FIFO by seq
local last_error
local fsyncs, last_sync_ms = 0, 0
local dirpath
local flushing = false      -- the flusher is writing or syncing a batch
local paused = false        -- a rewrite's last catch-up holds the flusher
local rewriting = false
local tail, ntail = nil, 0  -- records logged since a rewrite's snapshot
local base_size = 0         -- log size after the last rewrite (or load)
local rewrites = 0
M.AUTO_MIN = 64 * 1024 * 1024   -- auto-aof-rewrite-min-size
M.AUTO_PCT = 100                 -- auto-aof-rewrite-percentage (0: never by itself)

local function log(level, ...)
  cohost.log(level, "kv: ", ...)
end

-- Appends one RESP record. O(1); the flusher does the I/O.
function M.feed(rec)
  local n = nbuf + 1
  nbuf = n
  buf[n] = rec
  M.seq = M.seq + 1
  if tail then
    ntail = ntail + 1
    tail[ntail] = rec
  end
  if not wake_posted then
    wake_posted = true
    wake:post()
  end
end

-- Appends one record given as pieces (a request with a large value: the
-- pieces are written with one writev, never joined).
function M.feed_parts(parts)
  for i = 1, #parts do
    nbuf = nbuf + 1
    buf[nbuf] = parts[i]
    if tail then
      ntail = ntail + 1
      tail[ntail] = parts[i]
    end
  end
  M.seq = M.seq + 1
  if not wake_posted then
    wake_posted = true
    wake:post()
  end
end

-- Until the first rewrite of a log switched on at run time is in place,
-- the file does not hold the data: nothing waits for it (Redis's
-- AOF_WAIT_REWRITE).
local starting = false

local function durable()
  if starting then return M.seq end
  return mode == "always" and synced or written
end
M.durable = durable

local failures = 0           -- times the log went from good to failing

-- Yields. Returns true once record number seq is written (and synced
-- with always), or false if the log fails to be written meanwhile (the
-- caller may then wait for less: server.lua); sema is the caller's own
-- semaphore.
function M.wait(seq, sema)
  if durable() >= seq then return true end
  local seen = failures
  wtail = wtail + 1
  wseq[wtail], wsema[wtail] = seq, sema
  repeat sema:wait(1e6) until durable() >= seq or failures ~= seen
  return durable() >= seq
end

local function wake_waiters()
  local done = durable()
  while whead <= wtail and wseq[whead] <= done do
    local s = wsema[whead]
    wseq[whead], wsema[whead] = nil, nil
    whead = whead + 1
    s:post()
  end
  if whead > wtail then whead, wtail = 1, 0 end
end

-- Writes batch (an array of records) after the file's good size; on
-- failure cuts the file back. Returns true or nil, err.
local function write_batch(batch)
  local bytes, err = f:write(batch)
  if bytes then
    size = size + bytes
    return true
  end
  f:truncate(size)
  return nil, err
end

-- Every waiter wakes when the log starts failing: one whose batch only
-- had refusals waits for less then (server.lua), the others wait again.
local function wake_all()
  for i = whead, wtail do
    local sema = wsema[i]
    wseq[i], wsema[i] = nil, nil
    sema:post()
  end
  whead, wtail = 1, 0
end

local function fail(err)
  R.write_error = "-MISCONF Errors writing to the AOF file: " .. err .. "\r\n"
  if not last_error then
    log(cohost.ERR, "writing ", path, " failed: ", err, "; retrying every second")
    failures = failures + 1
    last_error = err
    wake_all()
  end
  last_error = err
end

local function recovered()
  if last_error then log(cohost.NOTICE, "writing ", path, " works again") end
  last_error = nil
  R.write_error = nil
end

local function sync(upto)
  local ok, err = f:fdatasync()
  if not ok then
    if mode == "always" then
      -- After a failed fsync the kernel may have dropped the dirty pages:
      -- nothing written since the last good sync can be trusted (Redis
      -- exits here too).
      log(cohost.ERR, "fdatasync of ", path, " failed with appendfsync always: ", err, "; exiting")
      cohost.exit(1)
    end
    fail(err)
    return false
  end
  fsyncs = fsyncs + 1
  last_sync_ms = cohost.now() * 1000
  if upto > synced then synced = upto end
  return true
end

-- Fault injection for the specs (spec/kv_robust_spec.lua): with
-- KV_FAULT=writer in the environment the log writer raises at its first
-- batch, as a bug, the CPU watchdog or an out-of-memory error would.
local FAULT = os.getenv("KV_FAULT")

local function flush_forever()
  while true do
    while nbuf == 0 or paused do
      wake_posted = false
      wake:wait(1e6)
    end
    if FAULT == "writer" then error("injected fault (KV_FAULT=writer)") end
    local batch, upto = buf, M.seq
    buf, nbuf = {}, 0
    flushing = true
    local ok, err = write_batch(batch)
    if ok then
      recovered()
      written = upto
      if mode == "always" then sync(upto) end
      flushing = false
      wake_waiters()
      if not rewriting and M.AUTO_PCT > 0 and size > M.AUTO_MIN
          and size > base_size * (1 + M.AUTO_PCT / 100) then
        M.rewrite()
      end
    else
      flushing = false
      -- Keep the records, in order, ahead of what came meanwhile.
      for i = 1, nbuf do batch[#batch + 1] = buf[i] end
      buf, nbuf = batch, #batch
      fail(err)
      cohost.sleep(1)
    end
  end
end

-- The log writer must never end quietly: writes would hang unanswered
-- while their values stay visible. If it fails (a bug, the CPU watchdog,
-- memory), the process exits: what was acknowledged is in the file, and
-- the clients waiting see their connections close.
local function flusher()
  local ok, err = pcall(flush_forever)
  log(cohost.ERR, "the log writer failed: ", ok and "it returned" or err, "; exiting")
  cohost.exit(1)
end

-- -- Replay ----------------------------------------------------------------

-- The tail of the log from byte good on is cut off and kept in
-- path.cut (what --repair-log does; as redis-check-aof --fix, but nothing
-- is thrown away). Raises on an I/O error.
local function cut_at(good, total)
  local keep = path .. ".cut"
  local out = assert(io.open(keep, "wb"))
  assert(f:seek("set", good))
  while true do
    local chunk = assert(f:read(CHUNK))
    if chunk == "" then break end
    assert(out:write(chunk))
  end
  assert(out:close())
  assert(f:truncate(good))
  assert(f:fdatasync())
  log(cohost.WARN, path, ": --repair-log: cut the log at byte ", good, " (the end of the last good ",
      "record); the ", total - good, " bytes that followed are in ", keep)
end

-- A load failure: with repair, the log is cut at the failing record;
-- without, the start stops with where it failed and how to repair.
local function bad_log(what, count, at, repair)
  local msg = ("%s: record %d at byte %d %s"):format(path, count + 1, at, what)
  if not repair then
    error(msg .. "; start with --repair-log to cut the log there (the rest is kept in "
          .. path .. ".cut), or fix it with redis-check-aof --fix", 0)
  end
  log(cohost.ERR, msg)
  cut_at(at, f:stat().size)
end

-- Replays the log at path through exec(argv, argc) -> nil or an error
-- reply. Returns the count of records, or raises on a bad file (unless
-- repair: then the log is cut before the bad record).
local function replay(exec, repair)
  local argv = {}
  local data, pos, len = "", 1, 0
  local offset = 0            -- file offset of data's first byte
  local eof, count, bad = false, 0, nil
  local partial               -- { n, a }: a record whose argument a - 1 was read apart
  local start = 0             -- file offset of the record being read
  local txn                   -- file offset of an open MULTI record
  local work = 0              -- arguments replayed since the last yield
  local function read(want) return f:read(want) end
  while true do
    local argc, nxt, x, bs, bl, bn
    if partial then
      argc, nxt, x, bs, bl, bn = resp.parse_rest(data, pos, len, argv, partial[1], partial[2], pos)
      if argc == false then bad = nxt end
    elseif pos <= len then
      start = offset + pos - 1
      if byte(data, pos) ~= 42 then
        bad = "expected '*'"
      else
        argc, nxt, x, bs, bl, bn = resp.parse(data, pos, len, argv)
        if argc == false then bad = nxt end
        -- "*0" and "*-1" are no command: Redis's loader calls them a bad
        -- format too.
        if argc == 0 then bad = "is empty ('" .. sub(data, pos, nxt - 3) .. "')" end
      end
    end
    if bad then break end
    if argc == nil and x and bl >= resp.BIG then
      -- A large value: read apart, as the connections do.
      local v, e = resp.read_value(read, sub(data, bs, len), bl)
      if v == false then break end   -- the file ends inside it: torn
      if not v then
        bad_log("failed: " .. e:sub(2, -3), count, start, repair)
        size = start
        return count
      end
      argv[x] = v
      offset = offset + bs - 1 + bl + 2
      data, pos, len = "", 1, 0
      partial = x < bn and { bn, x + 1 } or nil
      if not partial then argc, nxt = bn, 1 end
    end
    if argc then
      local name = argc == 1 and argv[1]:lower()
      if name == "multi" then txn = start elseif name == "exec" then txn = nil end
      local err = exec(argv, argc)
      if bl or partial then
        partial = nil
        for i = 1, argc do argv[i] = nil end
      end
      if err then
        bad_log("failed: " .. err:sub(2, -3), count, start, repair)
        size = start
        return count
      end
      count = count + 1
      pos = nxt
      -- A long replay is still one task: let the CPU watchdog see it move
      -- (every 2,048 arguments, about 5 ms of replay here, so a loaded
      -- machine running it 20 times slower stays inside a 0.2 s watchdog;
      -- an MSET of thousands of keys counts as its arguments). A yield
      -- costs about a microsecond.
      work = work + argc
      if work >= 2048 then
        work = 0
        cohost.sleep(0)
      end
    else
      if eof then break end
      local want = CHUNK
      if nxt and nxt - (len - pos + 1) > want then want = nxt - (len - pos + 1) end
      local more = assert(f:read(want))
      if more == "" then
        eof = true
      else
        offset = offset + pos - 1
        data = sub(data, pos) .. more
        pos, len = 1, #data
      end
    end
  end
  -- The end of the last whole record.
  local good = (bad or partial or pos <= len) and start or offset + pos - 1
  if txn and not bad then
    -- A transaction the log ends in (a crash before its EXEC was
    -- written): none of it was run; it goes, as Redis's loader does.
    log(cohost.WARN, path, ": the log ends inside a transaction (MULTI at byte ", txn,
        " without EXEC): truncated there")
    good = txn
  end
  local total = f:stat().size
  if good < total then
    local tail = ""
    if bad then
      assert(f:seek("set", good))
      tail = assert(f:read())
    end
    if bad and tail:find("[^%z]") then
      if not bad:find("^is ") then bad = "is bad (" .. bad .. ")" end
      bad_log(bad, count, good, repair)
    else
      log(cohost.WARN, path, ": the last record is torn (", total - good, " bytes at byte ", good,
          ", a crash mid-write): truncated to ", good, " bytes")
      assert(f:truncate(good))
      assert(f:fdatasync())
    end
  end
  size = good
  return count
end

-- -- Rewrite ---------------------------------------------------------------

-- Semaphores of the SAVEs waiting for the running rewrite to end.
local rewrite_waiters = {}

local function rewrite_ended()
  local w = rewrite_waiters
  rewrite_waiters = {}
  for i = 1, #w do w[i]:post() end
end

-- Yields. Writes the snapshot (taken in slices while commands go on)
-- and the records logged since to tf, then swaps it in for the log.
local function run_rewrite(tf, tmp, t0)
  local tsize = 0   -- bytes in tf
  local function put_tf(recs)
    tsize = tsize + assert(tf:write(recs))
  end
  local count = snapshot.take(function(recs, n)
    if n > 0 then put_tf(recs) end
  end)
  assert(tf:fdatasync())
  -- The last catch-up: the flusher waits, so no record goes to the old
  -- file any more; each round writes what came during the previous sync.
  paused = true
  while flushing do cohost.sleep(0.001) end
  local upto
  repeat
    local batch
    batch, upto = tail, M.seq
    tail, ntail = {}, 0
    if #batch > 0 then put_tf(batch) end
    assert(tf:fdatasync())
  until ntail == 0
  -- Every record so far is in tf, synced; no yield since the check.
  -- The rename yields: what comes meanwhile goes to buf after mark, for
  -- the flusher to write to whichever file is the log then (it stays
  -- paused, so nothing is acknowledged before the rename).
  tail = nil
  local mark = nbuf
  local ok, err = file.rename(tmp, path)
  if not ok then
    -- The old log stays the log; buf still holds everything it lacks.
    error("rename: " .. tostring(err), 0)
  end
  local rest, nrest = {}, 0
  for i = mark + 1, nbuf do
    nrest = nrest + 1
    rest[nrest] = buf[i]
  end
  buf, nbuf = rest, nrest
  written, synced = upto, upto
  local old = f
  f = tf
  size = tsize
  old:close()
  base_size = size
  rewrites = rewrites + 1
  paused, rewriting, starting = false, false, false
  wake_waiters()
  wake:post()
  log(cohost.NOTICE, ("rewrote %s from %d keys in %.3f s: %d bytes"):format(
    path, count, cohost.monotonic() - t0, size))
  file.sync_dir(dirpath)   -- the rename, for a machine crash
  rewrite_ended()
end

-- Starts a rewrite in the background. Returns true, or nil and an error
-- reply text.
function M.rewrite()
  if not f then return nil, "ERR the append-only log is off (appendonly no)" end
  if rewriting then return nil, "ERR Background append only file rewriting already in progress" end
  local tmp = path .. ".rewrite"
  local tf, err = file.open(tmp, "w", "644")
  if not tf then return nil, "ERR " .. err end
  local t0 = cohost.monotonic()
  rewriting = true
  tail, ntail = {}, 0   -- from the snapshot's start on
  cohost.spawn(function()
    local ok, e = pcall(run_rewrite, tf, tmp, t0)
    if not ok then
      log(cohost.ERR, "rewriting ", path, " failed: ", e, "; the log is kept as it was")
      if f ~= tf then
        pcall(tf.close, tf)
        file.unlink(tmp)
      end
      tail, ntail = nil, 0
      paused, rewriting = false, false
      if starting then
        -- A log switched on at run time never got its data: off again,
        -- and its file goes (it holds only what came since).
        starting = false
        buf, nbuf, written, synced = {}, 0, M.seq, M.seq
        pcall(f.close, f)
        f = nil
        file.unlink(path)
        if M.on_failed_start then M.on_failed_start() end
      end
      wake:post()
      rewrite_ended()
    end
  end)
  return true
end

R.register("bgrewriteaof", function(_, _, _, out, n)
  local ok, err = M.rewrite()
  return put(out, n, ok and "+Background append only file rewriting started\r\n" or resp.err(err))
end)

-- Yields until the running rewrite has ended (at once if none runs).
local function rewrite_wait()
  while rewriting do
    local sema = cohost.semaphore.new(0)
    rewrite_waiters[#rewrite_waiters + 1] = sema
    sema:wait(1e6)
  end
end

-- SAVE: kv writes no RDB snapshot, its snapshot is the rewritten log, so
-- SAVE rewrites the log and answers once the new one is synced and in
-- place (a rewrite already running is let finish first: it may lack what
-- came since it began). Yields: other clients are served meanwhile,
-- where Redis's SAVE stops them all. Not in MULTI (no_multi, as Redis).
R.register("save", function(_, _, _, out, n)
  if not f then
    return put(out, n, "-ERR kv's snapshot is its append-only log, which is off (CONFIG SET "
               .. "appendonly yes to keep one)\r\n")
  end
  rewrite_wait()
  local before = rewrites
  local ok, err = M.rewrite()
  if not ok then return put(out, n, resp.err(err)) end
  rewrite_wait()
  if rewrites == before then
    return put(out, n, "-ERR the log rewrite failed: the log is kept as it was (see the server's "
               .. "log)\r\n")
  end
  return put(out, n, resp.OK)
end)

-- -- Start and stop --------------------------------------------------------

-- The flusher and, for everysec, the fsync timer, once.
local started = false
local function start_threads()
  if started then return end
  started = true
  cohost.spawn(flusher)
  -- Once a second: with everysec, fdatasync what was written (the mode
  -- can change at run time: CONFIG SET appendfsync).
  cohost.timer.every(1, function(premature)
    if not premature and f and mode == "everysec" and written > synced then sync(written) end
  end)
end

-- Opens (creating) dir/appendonly.aof, replays it through exec, and
-- starts the flusher and the fsync timer. Returns the record count;
-- raises on a bad file.
function M.open(dir, fsync_mode, exec, repair)
  mode = fsync_mode
  dirpath = dir
  assert(file.mkdir_p(dir))
  path = dir .. "/" .. M.FILE
  local existed = file.exists(path)
  f = assert(file.open(path, "a+", "644"))
  if not existed then assert(file.sync_dir(dir)) end
  local count = replay(exec, repair)
  base_size = size
  file.unlink(path .. ".rewrite")   -- left by a crash mid-rewrite
  start_threads()
  return count
end

-- CONFIG SET appendonly yes on a server started without the log: a new
-- log is made by a rewrite of the data as it is (what was in the file
-- before goes), and records are kept from now on, in memory until the
-- rewrite is in place. Returns nil, or why it cannot.
function M.start(dir, fsync_mode)
  if f then return nil end
  mode = fsync_mode
  dirpath = dir
  local ok, err = file.mkdir_p(dir)
  if not ok then return "cannot make " .. dir .. ": " .. tostring(err) end
  path = dir .. "/" .. M.FILE
  local nf, e = file.open(path, "w", "644")
  if not nf then return e end
  f, size, base_size = nf, 0, 0
  buf, nbuf, written, synced = {}, 0, M.seq, M.seq
  starting, paused = true, true
  start_threads()
  local started_ok, why = M.rewrite()
  if not started_ok then
    starting, paused = false, false
    M.stop()
    return why
  end
  return nil
end

-- CONFIG SET appendonly no: what is buffered is written and synced, and
-- the log is closed (its file stays). Returns nil, or why it cannot.
function M.stop()
  if not f then return nil end
  if rewriting then return "a log rewrite is in progress" end
  M.close()
  f:close()
  f = nil
  buf, nbuf = {}, 0
  written, synced = M.seq, M.seq
  wake_waiters()
  return nil
end

-- CONFIG SET appendfsync: from the next batch on.
function M.set_mode(m)
  if f then mode = m end
end

-- Writes what is buffered and syncs: for an orderly stop.
function M.close()
  if not f or starting then return end
  if nbuf > 0 then
    local batch, upto = buf, M.seq
    buf, nbuf = {}, 0
    if write_batch(batch) then written = upto end
  end
  if mode ~= "no" then sync(written) end
end

-- Fields for INFO's Persistence section.
function M.status()
  return {
    { "aof_rewrite_in_progress", rewriting and 1 or 0 },
    { "aof_rewrites", rewrites },
    { "aof_base_size", base_size },
    { "aof_last_write_status", last_error and "err" or "ok" },
    { "aof_current_size", size },
    { "aof_buffer_length", nbuf },
    { "aof_appendfsync", mode or "none" },
    { "aof_fsyncs", fsyncs },
    { "aof_last_fsync_ms", math.floor(last_sync_ms) },
  }
end

return M
