-- Connections: one coroutine per client reads what has arrived
-- (receiveany, then the rest of the batch with ch_socket_take), runs
-- every complete request in it, and answers them all with one send,
-- so a pipelined batch costs one read and one write. A request that needs
-- more bytes than are buffered waits for them; a large bulk is read with
-- one receive(n) of the missing bytes.
local ffi = require "ffi"
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local aof = require "kv.aof"
local pubsub = require "kv.pubsub"
local lists = require "kv.lists"
local snapshot = require "kv.snapshot"
local multi = require "kv.multi"
local monitor = require "kv.monitor"
local now_us = monitor.now_us
local sleep = cohost.sleep
local cxpcall = cohost.xpcall   -- each handler compiled on its own (docs/kv.md)

local parse, parse_rest, BIG, read_value = resp.parse, resp.parse_rest, resp.BIG, resp.read_value
local sub, lower, upper, byte, concat, format = string.sub, string.lower, string.upper, string.byte,
  table.concat, string.format
local commands, stats = R.commands, R.stats

local M = {}

M.READ_MAX = 65536          -- bytes one read takes at most
-- A batch becomes one Lua string that starts with a stamp of STAMP bytes
-- no other batch has (the bytes taken through the FFI, ch_socket_take):
-- LuaJIT interns every string, and OpenResty's LuaJIT hashes one of 128
-- bytes or more from samples of its bytes (places drawn at start), so
-- batches of pipelined commands that differ only in some digits (random
-- keys) could all hash alike, and each new one was compared with every
-- one still in the string table (docs/benchmarks.md, issue 35's types).
-- LuaJIT's hashes all take in a string's first bytes, so the stamp keeps
-- the batches' hashes apart.
local STAMP = 8
pcall(ffi.cdef, [[
size_t ch_socket_take(void *u, void *dst, size_t max);
size_t ch_socket_buffered(const void *u);
]])
local take, buffered = ffi.C.ch_socket_take, ffi.C.ch_socket_buffered
local u8 = ffi.typeof("uint8_t[?]")
local fstring, copy, cast, u8p = ffi.string, ffi.copy, ffi.cast, ffi.typeof("const uint8_t *")
local BATCH = 2 * M.READ_MAX
local batch = u8(BATCH)        -- a batch is put together here, copied out at once
local stamp, stamps = ffi.new("uint64_t[1]"), 0   -- stamps: the last one given
M.SEND_TIMEOUT = 60000      -- ms a client may take to read our reply
M.PUBSUB_LIMIT = 32 * 1024 * 1024   -- bytes queued for a subscriber at most
local FOREVER = 2147483647  -- ms: the longest socket timeout; idle clients stay

local logging = false       -- set by M.start when the log is on

-- -- Clients ---------------------------------------------------------------

local Client = {}
Client.__index = Client
local next_id = 0

-- Not `return setmetatable(...)`: a trace that begins in a function and
-- returns from a builtin called as its tail call is aborted ("leaving loop
-- in root trace" in lj_record_ret: the return is not a RET bytecode), and
-- a small function called often enough is then blacklisted, and with it
-- every trace that calls it. The same holds for `return tonumber(v)`.
local function new_client(sock, peer)
  next_id = next_id + 1
  local c = setmetatable({ sock = sock, peer = peer, id = next_id, quit = false,
                           gone = false, nsubs = 0, proto = 2, waited = 0 }, Client)
  return c
end

-- Sends out[1..n] (or queues it for the writer thread, once there is
-- one) and clears it. Returns 0, the new reply count. Yields.
function Client:flush(out, n)
  if n == 0 then return 0 end
  if resp.big_reply and not self.writer then
    resp.big_reply = false
    return self:flush_big(out, n)
  end
  local data = n == 1 and out[1] or concat(out, "", 1, n)
  for i = 1, n do out[i] = nil end
  stats.net_out = stats.net_out + #data
  if self.writer then
    self:deliver(data)
  elseif not self.sock:send(data) then
    self.quit = true
  end
  return 0
end

-- flush for replies holding a large value: each such value is sent on
-- its own, as is (send would copy a table of pieces into one buffer),
-- and the pieces between them joined. Yields.
function Client:flush_big(out, n)
  local from = 1
  for i = 1, n + 1 do
    local p = out[i]
    if i > n or (type(p) == "string" and #p >= resp.BIG) then
      if i > from and not self.quit and not self.sock:send(concat(out, "", from, i - 1)) then
        self.quit = true
      end
      if i <= n and not self.quit and not self.sock:send(p) then self.quit = true end
      from = i + 1
    end
  end
  for i = 1, n do out[i] = nil end
  return 0
end

-- Sends the replies so far in the middle of a command whose reply is too
-- large to hold at once (SRANDMEMBER with a count of -10^9): once every
-- record logged so far is written, as the connection loop sends. Yields:
-- other clients run meanwhile. Returns 0, the new reply count. Only where
-- can_stream() says (not inside EXEC, whose commands run with nothing in
-- between, nor for the log's replay).
function Client:reply_now(out, n)
  self.streamed = true
  if self.reply_off or self.skip then
    for i = 1, n do out[i] = nil end
    return 0
  end
  if logging then
    local upto = aof.seq
    while upto > aof.durable() and not aof.wait(upto, self.aof_sema or self:make_aof_sema()) do end
  end
  local before = stats.net_out
  n = self:flush(out, n)
  -- Each piece is one large string and little else: LuaJIT's collector,
  -- which steps a little per allocation check, would fall behind (a heap
  -- of them a second); it is paid here for what was made.
  collectgarbage("step", (stats.net_out - before) / 1024)
  return n
end

function Client:can_stream()
  return self.sock ~= nil and not self.in_exec
end

-- Queues data for the writer thread. A subscriber whose queue passes the
-- limit is dropped (Redis's client-output-buffer-limit pubsub).
function Client:deliver(data)
  if self.gone then return end
  local q = self.q
  q.n = q.n + 1
  q[q.n] = data
  q.bytes = q.bytes + #data
  if q.bytes > M.PUBSUB_LIMIT then
    cohost.log(cohost.WARN, "kv: client ", self.peer, " reads too slowly: closing it")
    self.gone = true
    self.sock:close()
  end
  self.qsema:post()
end

-- Starts the thread that owns writing to this client from now on: what
-- publishers deliver and the client's own replies, in order.
function Client:start_writer()
  if self.writer then return end
  self.q = { n = 0, head = 1, bytes = 0 }
  self.qsema = cohost.semaphore.new(0)
  stats.pubsub_clients = (stats.pubsub_clients or 0) + 1
  self.writer = cohost.spawn(function()
    local q = self.q
    while true do
      if q.head > q.n then
        if self.gone then return end
        self.qsema:wait(1e6)
      else
        local data = q[q.head]
        q[q.head] = nil
        q.head = q.head + 1
        q.bytes = q.bytes - #data
        if q.head > q.n then q.head, q.n = 1, 0 end
        if not self.sock:send(data) then
          self.gone = true
          self.quit = true
          return
        end
      end
    end
  end)
end

-- -- Dispatch --------------------------------------------------------------

-- Redis's reply to an unknown command: the name and the first arguments,
-- quoted, up to about 128 bytes.
local function unknown(argv, argc)
  local args = {}
  local len = 0
  for i = 2, argc do
    if len >= 128 then break end
    local a = "'" .. sub(argv[i], 1, 128 - len) .. "' "
    args[#args + 1] = a
    len = len + #a - 3
  end
  return resp.err(format("ERR unknown command '%s', with args beginning with: %s",
                         sub(argv[1], 1, 128), concat(args)))
end

local each_key = R.each_key

-- Before a write command runs while the log rewrite takes its snapshot,
-- the keys it will change are recorded as they are now.
local touch = snapshot.touch

local PUBSUB_ONLY = "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
  .. "PING / QUIT / RESET are allowed in this context"
local OOM = "-OOM command not allowed when used memory > 'maxmemory'.\r\n"

local store = require "kv.store"
local evict = require "kv.evict"
local MULTI_REC, EXEC_REC = multi.MULTI_REC, multi.EXEC_REC

-- Logs one record of c's command (a string, or an array of pieces):
-- inside EXEC the transaction's MULTI record goes first, once. A script
-- that called redis.set_repl(redis.REPL_NONE) logs nothing (c.nolog).
local function log_rec(c, rec)
  if c.nolog then return end
  if c.in_exec and not c.multi_logged then
    c.multi_logged = true
    aof.feed(MULTI_REC)
  end
  if type(rec) == "table" then aof.feed_parts(rec) else aof.feed(rec) end
end

-- The clients that WATCH a key a command changed see it changed.
local changed = multi.changed

-- Keyspace notifications for the keys a command changed.
local notify = require "kv.notify"
local notify_cmd
local function notify_one(k) notify.changed(notify_cmd, k) end
local function flush_notes()
  local notes = R.notes
  R.notes = nil
  notify.flush(notes)
end

-- Commands whose replies show no stored value: while the log cannot be
-- written their replies need not wait for it (PING and INFO keep working
-- for health checks and monitoring; INFO's keyspace counts are the one
-- thing they tell of the data).
local DATA_FREE = { ping = true, echo = true, quit = true, select = true, time = true, info = true,
                    config = true, command = true, hello = true, client = true, reset = true,
                    slowlog = true, latency = true }

-- A refusal before the command runs (Redis's rejectCommand): counted as a
-- rejected call of cmd (if known) and an error; queued as the
-- transaction's abort inside MULTI.
local function reject(c, cmd, argv, argc, out, n, err)
  if cmd then cmd.rejected = cmd.rejected + 1 end
  monitor.error(err)
  if c.multi then return multi.queue(c, argv, argc, out, n, err) end
  return put(out, n, err)
end

-- The error a handler raised: kept as is when the heap ran out (the
-- command is answered with an error and the connection goes on), else
-- with its traceback (the connection ends and the error is logged).
local function is_memory(e)
  return type(e) == "string" and e:find("not enough memory", 1, true) ~= nil
end
local function handler_error(e)
  if is_memory(e) then return e end
  return debug.traceback(tostring(e), 2)
end

-- After a handler ran out of memory: the state it left half-set is
-- cleared, and its client gets an error. A write may have changed part
-- of its keys and is not logged: the log keeps what it can load.
local function out_of_memory(c, cmd, out, n0, e)
  if c.streamed then
    -- Part of its reply is out: no error can follow it, the connection ends.
    c.quit = true
    n0 = 0
  end
  for i = n0 + 1, #out do out[i] = nil end
  R.prop, R.changed, R.extra, R.notes, R.noted = nil, nil, nil, nil, false
  if c.in_exec then
    c.in_exec = false
    if c.multi_logged and logging then aof.feed(EXEC_REC) end
    c.multi_logged = false
  end
  collectgarbage()
  cohost.log(cohost.WARN, "kv: '", cmd.name, "' from ", c.peer or "the log", " ran out of memory",
             cmd.write and " (its change may be partly made, and is not logged)" or "")
  local err = "-ERR " .. (e:match("not enough memory") or "out of memory")
    .. " (command '" .. cmd.name .. "'; see --lua-memory-limit and maxmemory)\r\n"
  monitor.error(err)
  return put(out, n0, err)
end

-- Runs one request and appends its reply; logs it if it changed data.
-- buf[s, e) is its RESP text, logged as is when the command asks (nil
-- for inline requests, which are encoded instead; false for one read in
-- parts, logged as pieces). Returns the new reply count.
local function dispatch(c, argv, argc, out, n, buf, s, e)
  local name = argv[1]
  local cmd = commands[name] or commands[lower(name)]
  if not cmd then return reject(c, nil, argv, argc, out, n, unknown(argv, argc)) end
  local subs = cmd.subs
  if subs and argc >= 2 then
    local sc = subs[lower(argv[2])]
    if not sc then
      return reject(c, nil, argv, argc, out, n, resp.err(format(
        "ERR unknown subcommand '%s'. Try %s HELP.", sub(argv[2], 1, 128), upper(cmd.name))))
    end
    cmd = sc
  end
  local arity = cmd.arity
  if (arity > 0 and argc ~= arity) or argc < -arity then
    return reject(c, cmd, argv, argc, out, n,
                  "-ERR wrong number of arguments for '" .. cmd.name .. "' command\r\n")
  end
  if evict.limit > 0 and not c.in_exec and c.sock then
    -- maxmemory: make room first; refuse what may grow the data (and
    -- anything queued in MULTI but EXEC, DISCARD...) if it cannot be made.
    if not evict.run() then
      local mflag = cmd.flag
      if mflag.denyoom or (c.multi and not multi.runs_now(cmd))
          or (cmd.name == "exec" and c.multi and c.multi.denyoom) then
        return reject(c, cmd, argv, argc, out, n, OOM)
      end
    end
  end
  if cmd.write and R.write_error then return reject(c, cmd, argv, argc, out, n, R.write_error) end
  if c.nsubs > 0 and c.proto == 2 and not cmd.pubsub then
    return reject(c, cmd, argv, argc, out, n, resp.err(format(PUBSUB_ONLY, lower(name))))
  end
  if c.multi and cmd.flag.no_multi then
    return reject(c, cmd, argv, argc, out, n, "-ERR Command not allowed inside a transaction\r\n")
  end
  if c.multi and not multi.runs_now(cmd) then return multi.queue(c, argv, argc, out, n, nil, cmd) end
  if not DATA_FREE[cmd.parent and cmd.parent.name or cmd.name] then c.shows = true end
  stats.commands = stats.commands + 1
  c.last_cmd = cmd.name
  if cmd.write then
    if snapshot.active() then
      if cmd.all then snapshot.touch_all() else each_key(cmd, argv, argc, touch) end
    end
    if cmd.all and multi.watched > 0 then multi.changed_all(store.get) end
  end
  resp.use(c.proto)
  local n0 = n
  c.waited, c.streamed = 0, false
  local t0 = now_us()
  local ok, r = cxpcall(cmd.fn, handler_error, c, argv, argc, out, n)
  if not ok then
    if not is_memory(r) then error(r, 0) end
    return out_of_memory(c, cmd, out, n0, r)
  end
  n = r
  c.last_cmd = cmd.name   -- EXEC's, not its last command's
  if c.sock then monitor.ran(c, cmd, argv, argc, now_us() - t0 - c.waited) end
  local first = out[n0 + 1]
  if R.error_counted then
    R.error_counted = false   -- the handler counted its errors (EVAL, FCALL)
  elseif n == n0 + 1 and not c.streamed and type(first) == "string" and byte(first, 1) == 45 then
    cmd.failed = cmd.failed + 1
    monitor.error(first)
  end
  local prop = R.prop
  if prop then
    R.prop = nil
    local only = R.changed
    R.changed = nil
    if multi.watched > 0 and not cmd.all then
      if only then
        for i = 1, #only do changed(only[i]) end
      else
        each_key(cmd, argv, argc, changed)
      end
    end
    if notify.on and not cmd.all then
      -- Queued first: the command's own events, and "new" for the keys it
      -- created (which Redis sends as it adds them, before the command's).
      if R.notes then flush_notes() end
      if not R.noted then
        notify_cmd = cmd
        each_key(cmd, argv, argc, notify_one)
      end
    end
    if logging then
      if prop == true then
        if s then
          log_rec(c, sub(buf, s, e - 1))
        elseif s == false then
          log_rec(c, resp.encode_parts(argv, argc))
        else
          log_rec(c, resp.encode(argv, argc))
        end
      else
        log_rec(c, prop)
      end
    end
  end
  if R.notes then flush_notes() end
  R.noted = false
  if R.log_exec_end then
    R.log_exec_end = false
    if logging then aof.feed(EXEC_REC) end
  end
  -- Clients blocked on keys this command (or this whole transaction:
  -- never in the middle of one) gave elements to are served now, against
  -- the data as it is after it, as Redis's handleClientsBlockedOnKeys;
  -- serving one may feed another (BLMOVE into a watched list).
  if not c.in_exec then
    while R.any_ready do lists.serve() end
    if R.notes then flush_notes() end
    R.noted = false
    local extra = R.extra
    if extra then
      R.extra = nil
      if logging then
        for i = 1, #extra do log_rec(c, extra[i]) end
      end
    end
  end
  R.changed = nil
  -- A large value dropped: its memory is given back soon (store.lua).
  if store.freed >= store.COLLECT_NOW then store.collect() end
  -- CLIENT REPLY OFF or SKIP: the reply is dropped (what was streamed
  -- was dropped as it went).
  if (c.reply_off or c.skip) and not c.streamed then
    for i = n0 + 1, n do out[i] = nil end
    n = n0
  end
  if c.skip_next then
    c.skip, c.skip_next = true, false
  elseif c.skip then
    c.skip = false
  end
  return n
end
multi.dispatch = dispatch
R.modified = function(k)
  if snapshot.active() then touch(k) end
  if multi.watched > 0 then changed(k) end
end

-- A key created where there was none: clients blocked on it may be
-- served (RENAME, COPY or a push made it), and the "new" event.
store.on_added = function(k)
  lists.ready(k)
  R.event("n", "new", k)
end

-- A key its deadline deleted: WATCHers see it change (a watched key that
-- expires fails the EXEC, as in Redis), and the "expired" event.
store.on_expired = function(k)
  if multi.watched > 0 then changed(k) end
  if notify.on then notify.send("x", "expired", k) end
end

-- A key maxmemory evicts: recorded by a running rewrite's snapshot first,
-- seen changed by WATCHers, logged as a DEL (a replay must not bring it
-- back), and the "evicted" event.
evict.on_evict = function(k)
  R.modified(k)
  if logging then aof.feed(resp.encode({ "DEL", k }, 2)) end
  if notify.on then notify.send("e", "evicted", k) end
end

-- Runs a logged request at start: nil, or the error reply it gave.
local loader = new_client(nil, "aof")
local scratch = {}
function M.exec(argv, argc)
  local n = dispatch(loader, argv, argc, scratch, 0)
  local first = scratch[1]
  for i = 1, n do scratch[i] = nil end
  R.prop, R.extra = nil, nil
  if first and first:byte(1) == 45 then return first end   -- "-ERR ..."
  return nil
end

-- -- The connection loop ---------------------------------------------------

-- Sends the n replies in out, once every record logged so far is written
-- (and synced with always), its own and others': a reader must not see a
-- value a crash could still take back (Redis sends replies after its
-- beforeSleep has written the AOF, the same rule). While the log cannot
-- be written (MISCONF, retried every second) writes are refused, and a
-- batch of refusals and data-free commands waits only for the client's
-- own records (c.own), so refusals go out at once; any other still waits
-- for every record: what the failed batch stored is seen by nobody before
-- it is in the file. Returns 0. Yields.
local function answer(c, out, n)
  if logging then
    local all = aof.seq
    while true do   -- again when the log failed meanwhile: maybe less to wait for
      local upto = (R.write_error and not c.shows) and c.own or all
      if upto <= aof.durable() or aof.wait(upto, c.aof_sema or c:make_aof_sema()) then break end
    end
  end
  return c:flush(out, n)
end

-- Reads, runs and answers requests until the client leaves or must be
-- closed. The replies go out before the loop waits for input: after a
-- batch, every byte received then is parsed first.
local function loop(c, sock)
  local argv, out, n = resp.lazy_argv(), {}, 0
  local buf, pos, len, need = "", 1, 0, nil
  local partial = nil   -- { n, a }: a request whose argument a - 1 was read apart
  local refused = nil   -- the error reply for it, if its value could not be kept
  local idle_s = -1   -- the read timeout set, from R.config.timeout
  local taken = 0     -- bytes taken since the replies last went out
  while not c.quit and not c.gone do
    local data, err
    local have = len - pos + 1
    if idle_s ~= R.config.timeout then
      -- CONFIG SET timeout: idle clients are closed (not subscribers).
      idle_s = R.config.timeout
      sock:settimeouts(FOREVER, M.SEND_TIMEOUT, idle_s > 0 and math.min(idle_s * 1000, FOREVER)
                       or FOREVER)
    end
    local bulk = need and need - have > M.READ_MAX   -- the rest of a large bulk, read apart
    local one = true   -- true: bytes are there; else the byte a wait read
    if bulk or taken >= M.READ_MAX or buffered(sock) == 0 then
      -- Before a read that may wait (nothing more has arrived), or past
      -- READ_MAX of input, the replies so far go out.
      taken = 0
      if n > 0 then
        -- The other connections whose input is in go first, then the
        -- replies: as Redis writes every client's replies in beforeSleep,
        -- after reading them all. A send to a client that sleeps wakes
        -- it (an IPI, costly under a hypervisor); sent apart, one per
        -- connection as each batch was run, every send woke one, and
        -- the kernel took twice Redis's time a request (ZUNIONSTORE
        -- without pipelining, docs/benchmarks.md). Alone, this is a
        -- switch back to itself.
        sleep(0)
        n = answer(c, out, n)
        if c.quit or c.gone then break end
      end
      if bulk then
        one = nil
        data, err = sock:receive(need - have)
      else
        one, err = sock:receiveany(1)   -- the rest is taken below
      end
      if data or one then c.last = cohost.monotonic() end
    end
    local got = 0   -- the bytes new in data
    if one then
      -- The stamp, what was left, the byte read and what else has arrived.
      local at = STAMP + have
      local dst = at + 1 + M.READ_MAX <= BATCH and batch or u8(at + 1 + M.READ_MAX)
      stamps = stamps + 1
      stamp[0] = stamps
      copy(dst, stamp, STAMP)
      if have > 0 then copy(dst + STAMP, cast(u8p, buf) + pos - 1, have) end
      if one ~= true then
        dst[at] = byte(one)
        at, got = at + 1, 1
      end
      local more = tonumber(take(sock, dst + at, M.READ_MAX))
      data, got = fstring(dst, at + more), got + more
    elseif data then
      got = #data
    end
    if data then
      stats.net_in = stats.net_in + got
      taken = taken + got
      if c.killed then break end
      if one then
        buf, pos = data, STAMP + 1
      elseif pos > len then
        buf, pos = data, 1
      else
        buf, pos = sub(buf, pos) .. data, 1
      end
      len, need = #buf, nil
      local own = c.own or 0   -- raised below to the last record this batch logged
      -- Set by dispatch: a command that may show data ran (since the
      -- replies last went out).
      if n == 0 then c.shows = false end
      while pos <= len do
        local argc, nxt, x, bs, bl, bn
        if partial then
          argc, nxt, x, bs, bl, bn = parse_rest(buf, pos, len, argv, partial[1], partial[2], pos)
        else
          argc, nxt, x, bs, bl, bn = parse(buf, pos, len, argv)
        end
        local inline = argc and x
        if argc == nil and x and bl >= BIG then
          -- A large value: read apart; the request goes on after it.
          local v, e = read_value(function(want) return sock:receive(want) end, sub(buf, bs, len), bl)
          if v == false then
            c.quit = true
            break
          end
          -- The arguments before it are made now: buf goes (resp.lazy_argv).
          for i = 1, x - 1 do local _ = argv[i] end
          argv[x] = v or ""
          refused = refused or e
          buf, pos, len = "", 1, 0
          if x < bn then
            partial = { bn, x + 1 }
            break
          end
          argc, nxt = bn, 1
        end
        if not argc then
          if argc == false then
            out[n + 1] = resp.err("ERR " .. nxt)
            monitor.error(out[n + 1])
            n = n + 1
            c.quit = true
            c.linger = true
          else
            need = nxt
          end
          break
        end
        if argc > 0 then
          if refused then
            n = put(out, n, refused)
          else
            -- A request read in parts is logged from its arguments (false).
            local s = not inline and pos or nil
            if partial or bl then s = false end
            local before = aof.seq
            n = dispatch(c, argv, argc, out, n, buf, s, nxt)
            if aof.seq > before then own = aof.seq end
          end
          if partial or refused or bl then
            -- Let the large value go (argv would hold it until reused).
            partial, refused = nil, nil
            for i = 1, argc do argv[i] = nil end
          end
          if c.pending then
            -- Input that came while a blocking command waited.
            buf = sub(buf, nxt) .. c.pending
            c.pending = nil
            nxt, len = 1, #buf
          end
        end
        pos = nxt
        if c.quit or c.gone then break end
      end
      c.own = own
    elseif err ~= "timeout" then
      break
    elseif idle_s > 0 and c.nsubs == 0 and cohost.monotonic() - c.last >= idle_s then
      break   -- idle past CONFIG's timeout, as Redis's clientsCronHandleTimeout
    end
    if c.killed then break end
  end
  -- The replies of the last batch: QUIT's +OK, a protocol error's, those
  -- before CLIENT KILL.
  if n > 0 then answer(c, out, n) end
end

-- Takes client c off the list of connected clients (CLIENT LIST, INFO's
-- connected_clients): when its connection ends, or at once when CLIENT
-- KILL ends it. Idempotent.
function R.detach(c)
  if R.clients[c.id] == c then
    R.clients[c.id] = nil
    stats.clients = stats.clients - 1
  end
end

-- Lets the other clients run in the middle of a long command (KEYS):
-- c.pause of a connection's client. Yields.
local function pause()
  stats.paused = stats.paused + 1
  cohost.sleep(0)
  stats.paused = stats.paused - 1
end

-- After a protocol error: the reply is out, and closing with input still
-- unread would make the kernel send a reset, which can reach the client
-- before it read the reply. So, as nginx's lingering close: FIN first,
-- then read and drop what the client still sends, for at most 1 s and
-- 1 MiB, then close.
local LINGER_MS, LINGER_BYTES = 1000, 1024 * 1024

local function linger(sock)
  sock:shutdown("send")
  sock:settimeouts(LINGER_MS, LINGER_MS, LINGER_MS)
  local deadline, got = cohost.monotonic() + LINGER_MS / 1000, 0
  while got < LINGER_BYTES and cohost.monotonic() < deadline do
    local data = sock:receiveany(65536)
    if not data then return end
    got = got + #data
  end
end

local function serve(sock, peer)
  sock:settimeouts(FOREVER, M.SEND_TIMEOUT, FOREVER)
  sock:setoption("tcp-nodelay", true)
  if R.config.maxclients > 0 and stats.clients >= R.config.maxclients then
    sock:send("-ERR max number of clients reached\r\n")
    stats.rejected_conns = stats.rejected_conns + 1
    monitor.error("-ERR")
    return
  end
  local c = new_client(sock, peer)
  c.pause = pause
  c.since = cohost.monotonic()
  c.last = c.since
  c.fd = tonumber(tostring(sock):match("fd (%-?%d+)")) or -1
  R.clients[c.id] = c
  stats.clients = stats.clients + 1
  stats.connections = stats.connections + 1
  -- The cleanup runs whatever ended the loop (a bug, or "cancelled" at
  -- shutdown), so no channel keeps a dead subscriber; then the error
  -- goes on to be logged.
  local ok, err = pcall(loop, c, sock)
  c.gone = true
  R.detach(c)
  pubsub.forget(c)
  multi.forget(c)
  if c.writer then
    stats.pubsub_clients = stats.pubsub_clients - 1
    c.qsema:post()
    -- Let the writer send what is queued (QUIT's +OK), then end it.
    if ok then cohost.wait(c.writer) else cohost.kill(c.writer) end
  end
  if not ok then error(err, 0) end
  if c.linger then linger(sock) end
end

function Client:make_aof_sema()
  self.aof_sema = cohost.semaphore.new(0)
  return self.aof_sema
end

-- CONFIG SET appendonly: commands are logged from now on, or no longer.
function M.set_logging(on)
  logging = on
end

-- Listens on addr ("host:port"); logging says whether the log is on.
-- Returns the listener.
function M.start(addr, with_log)
  logging = with_log
  return assert(cohost.listen(addr, serve))
end

return M
