-- cohost.broadcast.redis: cohost.broadcast across machines, through Redis
-- pub/sub (docs/lua-api.md, "Across machines: Redis"). broadcast.lua
-- still hands a message to every worker of its own node (the bus); this
-- module carries it to the other nodes, and theirs to this worker.
-- Internal: broadcast.configure{ backend = "redis", ... } starts it.
--
-- Per worker, each part made only when used:
-- * a subscriber connection, open while the worker has subscribers,
--   SUBSCRIBEd to prefix .. channel for each channel they listen to. What
--   comes on it goes to this worker's subscribers only: every worker of a
--   node has its own, so none needs the bus for messages of other nodes
--   (and none is delivered twice on one worker).
-- * a publishing connection from a keepalive pool, on which one sender
--   task writes the queued PUBLISHes in the order they were published,
--   many per write, then reads their replies. One connection per worker,
--   not several: messages of one worker racing over several connections
--   could reach Redis out of order.
--
-- What travels is HEADER .. msg, HEADER = "\255cb1 NODE ORIGIN SEQ\n".
-- NODE names the publishing cohost instance (bus.instance(), hashed): a
-- node drops its own messages when Redis hands them back, since the bus
-- delivered them already. ORIGIN names the publishing worker's Lua state
-- (random), SEQ counts its messages per channel: a receiver drops a copy
-- it has had (a message sent again after a reconnection) and counts the
-- ones it never got (a gap) as missed. A message without the header
-- (another Redis client's PUBLISH) is delivered as it is.
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"
local bus = require "cohost.core.bus"
local crypto = require "cohost.core.crypto"
local metrics = require "cohost.metrics"
local resp = require "cohost.broadcast.resp"

local M = {}

M.BACKOFF_MIN = 0.1     -- seconds before the first reconnection attempt,
M.BACKOFF_MAX = 2       -- doubling up to this; each with +-25% jitter
M.RESEND = 10           -- seconds unconfirmed messages wait for Redis to come back
M.PING = 15             -- seconds of silence on the subscriber before a PING
M.BATCH = 1024 * 1024   -- bytes of PUBLISHes per write, at most (one message may pass it)
M.ORIGIN_CHANNELS = 10000   -- channels an origin counts before it is renewed
M.BURST = 64            -- replies the reader handles before it lets others run

local WARN, NOTICE = 2, 3
local type, pairs, tonumber, tostring, concat, min = type, pairs, tonumber, tostring, table.concat, math.min
local byte, format = string.byte, string.format

local cfg, deliver          -- set by M.new
local node                  -- this cohost instance's name, 16 hex digits
local origin, header        -- this Lua state's name; header without SEQ
local seqs, nseqs = {}, 0   -- channel -> last SEQ published; their count
local count = { sent = 0, received = 0, unsent = 0, missed = 0, duplicates = 0 }
local metric = {}

local function hex(s)
  return (s:gsub(".", function(c) return format("%02x", byte(c)) end))
end

-- A new ORIGIN: receivers see a new publisher, with no gap before it.
local function renew_origin()
  origin = hex(crypto.random_bytes(8))
  header = "\255cb1 " .. node .. " " .. origin .. " "
  seqs, nseqs = {}, 0
end

-- s, give or take a quarter, so that workers that lost Redis together do
-- not all come back in the same instant. Not math.random: seeding that
-- is the application's.
local function jitter(s)
  return s * (0.75 + 0.5 * byte(crypto.random_bytes(1)) / 255)
end

local function add(name, n)
  count[name] = count[name] + n
  metric[name]:inc(n)
end

-- -- Outages: one line when this worker loses Redis, one when it is back -------

-- While this worker finds Redis unreachable (a connection failed, and
-- none has had an answer since): { since, unsent (count.unsent then),
-- err (the last failure) }. publish refuses meanwhile.
local outage

local function lost(who, err)
  err = tostring(err)
  if outage then
    outage.err = err
    return
  end
  outage = { since = sys.monotonic(), unsent = count.unsent, err = err }
  metric.outages:inc()
  sys.log(WARN, "cohost.broadcast: redis ", cfg.addr, " unreachable (", who, ": ", err,
          "); messages reach this node's workers only until it is back")
end

-- Redis answered on one of the connections: publish takes messages again
-- (if the other still fails, the sender finds out).
local function regained()
  sys.log(NOTICE, format("cohost.broadcast: redis %s back after %.1f s; %d messages of this worker did not reach it",
                         cfg.addr, sys.monotonic() - outage.since, count.unsent - outage.unsent))
  outage = nil
end

-- -- Publishing ---------------------------------------------------------------

-- PUBLISH commands, oldest first, kept until Redis has answered them:
-- queue[qhead .. written] are on the connection, the rest wait.
local queue, qhead, qtail, qbytes, written = {}, 1, 0, 0, 0
local sending = false       -- the sender task runs
local probe = false         -- it runs to find out whether Redis is back
local backoff, next_try = M.BACKOFF_MIN, 0
local refused_logged = false

local function drop_queue(why)
  local n = qtail - qhead + 1
  if n == 0 then return end
  add("unsent", n)
  queue, qhead, qtail, qbytes, written = {}, 1, 0, 0, 0
  renew_origin()
  sys.log(WARN, "cohost.broadcast: ", n, " messages not sent to redis ", cfg.addr, ": ", why)
end

-- Yields. A publishing connection -> sock, proven; or nil, err. proven:
-- Redis answered on it. While Redis is thought down, a connection must
-- answer a PING first: a connect alone proves little (a Redis being
-- killed may still accept), and a pooled one may have died unseen.
local function connect_publisher()
  local sock, err = resp.connect(cfg, cfg.pool)
  if not sock then return nil, err end
  if not outage then return sock, false end
  local ok, r
  ok, err = sock:send("*1\r\n$4\r\nPING\r\n")
  if ok then r, err = resp.read(sock) end
  if r then return sock, true end
  sock:close()
  return nil, err or "no answer"
end

-- The sender task: runs while messages wait (or once, for a probe).
-- Yields.
local function send_loop()
  local sock, proven, since
  -- The first failure of a connection Redis has not answered on yet (a
  -- pooled one that died idle) is retried at once and not logged.
  local quick = true
  while qhead <= qtail or probe do
    local err
    if not sock then
      sock, err = connect_publisher()
      if sock then
        proven, err = err, nil
        written = qhead - 1     -- everything unanswered goes out again
      end
    end
    if sock and written < qtail then
      local last, bytes = written, 0
      repeat
        last = last + 1
        bytes = bytes + #queue[last]
      until last == qtail or bytes >= M.BATCH
      local ok
      ok, err = sock:send(concat(queue, "", written + 1, last))
      if ok then written = last end
    end
    while sock and not err and qhead <= written do
      local r, rerr = resp.read(sock)
      if r == nil then
        err = rerr
      else
        if r == false then
          -- An error answer (an ACL that forbids PUBLISH): that message
          -- is refused; the connection goes on.
          add("unsent", 1)
          if not refused_logged then
            refused_logged = true
            sys.log(WARN, "cohost.broadcast: redis ", cfg.addr, " refused a PUBLISH: ", rerr)
          end
        else
          add("sent", 1)
        end
        proven = true
        qbytes = qbytes - #queue[qhead]
        queue[qhead] = nil
        qhead = qhead + 1
        -- Emptied: back to index 1, which keeps the queue in the
        -- table's array part.
        if qhead > qtail then qhead, qtail, written = 1, 0, 0 end
      end
    end
    if sock and not err and proven then
      quick, since, backoff = true, nil, M.BACKOFF_MIN
      if outage then regained() end
      probe = false
    end
    if err then
      if sock then sock:close() end
      local first = quick and sock and not proven
      sock, quick = nil, false
      if not first then
        lost("publisher", err)
        local now = sys.monotonic()
        since = since or now
        next_try = now + jitter(backoff)
        backoff = min(backoff * 2, M.BACKOFF_MAX)
        probe = false           -- a probe is one attempt
        if qhead > qtail then break end
        if sys.exiting() then
          drop_queue("shutting down")
          break
        end
        if now - since >= M.RESEND then
          drop_queue(format("redis unreachable for %.0f s", now - since))
          break
        end
        task.sleep(next_try - now)
      end
    end
  end
  if sock then sock:setkeepalive() end
end

local function sender()
  local ok, err = pcall(send_loop)
  if not ok then sys.log(WARN, "cohost.broadcast: sender ended: ", err) end
  sending, probe = false, false
end

local function start_sender()
  if sending then return end
  sending = true
  task.spawn(sender)
end

-- publish(channel, msg) -> true, or nil, err. Never waits.
local function publish(channel, msg)
  if outage then
    add("unsent", 1)
    if not sending and sys.monotonic() >= next_try then
      probe = true
      start_sender()
    end
    return nil, "redis: " .. outage.err
  end
  if qbytes + #msg > cfg.backlog then
    add("unsent", 1)
    return nil, "redis: backlog full"
  end
  local seq = seqs[channel]
  if not seq then
    if nseqs >= M.ORIGIN_CHANNELS then renew_origin() end
    nseqs, seq = nseqs + 1, 0
  end
  seq = seq + 1
  seqs[channel] = seq
  local key, payload = cfg.prefix .. channel, header .. seq .. "\n" .. msg
  local cmd = "*3\r\n$7\r\nPUBLISH\r\n$" .. #key .. "\r\n" .. key .. "\r\n$" .. #payload .. "\r\n" .. payload .. "\r\n"
  qtail = qtail + 1
  queue[qtail] = cmd
  qbytes = qbytes + #cmd
  start_sender()
  return true
end

-- -- Subscribing ---------------------------------------------------------------

local conn                  -- the subscriber connection, while it is up
local state = "idle"        -- "connecting", "up", "waiting" (to retry), "idle" (no task)
local wanted, nwanted = {}, 0   -- channels this worker's subscribers listen to
local pending, npending = {}, 0 -- channel -> (UN)SUBSCRIBEs sent on conn and not answered
local subscribed = {}       -- channel -> the last of them was a SUBSCRIBE
local last = {}             -- wanted channel -> origin -> SEQ of the last message delivered
local outq = {}             -- commands for conn, not written yet
local writing = false
local changed = task.waitq("broadcast")    -- a SUBSCRIBE answered, or the connection came or went
local gap_logged

-- The writer task: writes outq on conn, whichever conn is current (the
-- reader makes a new one after a failure and queues its SUBSCRIBE first).
-- Yields.
local function writer()
  while conn and #outq > 0 do
    local s, data = conn, concat(outq)
    outq = {}
    local ok = s:send(data)
    -- A failure is the reader's to see; a connection replaced meanwhile
    -- is closed here, the reader's close having found it busy.
    if not ok or s ~= conn then s:close() end
  end
  writing = false
end

local function request(data)
  outq[#outq + 1] = data
  if not writing then
    writing = true
    task.spawn_daemon(writer)
  end
end

local function ask(verb, channel)
  subscribed[channel] = verb == "SUBSCRIBE"
  pending[channel] = (pending[channel] or 0) + 1
  npending = npending + 1
  request(resp.command(verb, cfg.prefix .. channel))
end

local function on_message(channel, payload)
  local seen = last[channel]
  if not seen then return end   -- its last subscriber left meanwhile
  if byte(payload) ~= 255 then  -- another client's
    add("received", 1)
    return deliver(channel, payload)
  end
  local n, o, seq, at = payload:match("^\255cb1 (%x+) (%x+) (%d+)\n()")
  if not n then
    add("received", 1)
    return deliver(channel, payload)
  end
  if n == node then return end  -- ours: the bus delivered it
  seq = tonumber(seq)
  local prev = seen[o]
  if prev then
    if seq <= prev then
      count.duplicates = count.duplicates + 1
      return
    end
    if seq > prev + 1 then
      add("missed", seq - prev - 1)
      if not gap_logged then
        gap_logged = true
        sys.log(WARN, "cohost.broadcast: missed ", seq - prev - 1, " messages of another node on channel ",
                channel, " (redis ", cfg.addr, "); more gaps until the next reconnection are counted, not logged")
      end
    end
  end
  seen[o] = seq
  add("received", 1)
  deliver(channel, payload:sub(at))
end

local function on_reply(r)
  local kind, key = r[1], r[2]
  if type(key) ~= "string" or key:sub(1, #cfg.prefix) ~= cfg.prefix then return end
  local channel = key:sub(#cfg.prefix + 1)
  if kind == "message" then
    if type(r[3]) == "string" then on_message(channel, r[3]) end
  elseif kind == "subscribe" or kind == "unsubscribe" then
    local p = pending[channel]
    if p then
      pending[channel] = p > 1 and p - 1 or nil
      npending = npending - 1
    end
    changed:broadcast()
  end
end

-- Connects and subscribes to every wanted channel. Yields.
local function open()
  state = "connecting"
  local s, err = resp.connect(cfg)
  if not s then return nil, err end
  -- Reads wait M.PING seconds: a silent connection is then PINGed.
  s:settimeouts(cfg.timeout_ms, cfg.timeout_ms, M.PING * 1000)
  pending, npending, subscribed, outq = {}, 0, {}, {}
  local args = { "SUBSCRIBE" }
  for channel in pairs(wanted) do
    subscribed[channel], pending[channel] = true, 1
    npending = npending + 1
    args[#args + 1] = cfg.prefix .. channel
    if #args > 1000 then
      outq[#outq + 1] = resp.command(unpack(args))
      args = { "SUBSCRIBE" }
    end
  end
  if #args > 1 then outq[#outq + 1] = resp.command(unpack(args)) end
  conn, state, gap_logged = s, "up", false
  if #outq > 0 and not writing then
    writing = true
    task.spawn_daemon(writer)
  end
  changed:broadcast()
  return true
end

local function close(err)
  if conn then conn:close() end
  conn, state = nil, "waiting"
  lost("subscriber", err)
  changed:broadcast()
end

-- The reader task: one per worker while it has channels. Yields.
local function read_loop()
  local delay, pinged, burst = M.BACKOFF_MIN, false, 0
  while nwanted > 0 or (conn and npending > 0) do
    if not conn then
      local ok, err = open()
      if ok then
        delay, pinged = M.BACKOFF_MIN, false
      else
        close(err)
        task.sleep(jitter(delay))
        delay = min(delay * 2, M.BACKOFF_MAX)
      end
    else
      local line, err, partial = conn:receive("*l")
      if line then
        pinged = false
        local r, rerr = resp.read(conn, line)
        if type(r) == "table" then
          -- An answer: Redis is back (a connect alone proves little).
          if outage then regained() end
          on_reply(r)
          -- Reading what is buffered never parks: without a pause, a
          -- burst from Redis would fill the subscribers' queues before
          -- the tasks that drain them could run.
          burst = burst + 1
          if burst >= M.BURST then
            burst = 0
            task.sleep(0)
          end
        elseif r == nil or r == false then
          close(rerr)
        end
      elseif err == "timeout" and partial == "" and not pinged then
        pinged = true
        request("*1\r\n$4\r\nPING\r\n")
      else
        close(err == "timeout" and "no answer to PING" or err)
      end
    end
  end
end

local function reader()
  local ok, err = pcall(read_loop)
  if not ok then sys.log(WARN, "cohost.broadcast: subscriber ended: ", err) end
  if conn then conn:close() end
  conn, state = nil, "idle"
  changed:broadcast()
end

-- Yields. want(channel): this worker has a first subscriber on channel.
-- Waits (cfg.timeout at most) until Redis confirms the subscription, so
-- that what other nodes publish from then on reaches it; returns at once
-- while Redis is unreachable.
local function want(channel)
  if not wanted[channel] then
    wanted[channel] = true
    nwanted = nwanted + 1
    last[channel] = {}
    if conn then ask("SUBSCRIBE", channel) end
    if state == "idle" then
      state = "connecting"
      task.spawn_daemon(reader)
    end
  end
  local deadline = sys.monotonic() + cfg.timeout
  while wanted[channel] and (state == "connecting" or (state == "up" and (pending[channel] or not subscribed[channel]))) do
    local left = deadline - sys.monotonic()
    if left <= 0 then return end
    changed:wait(left)
  end
end

-- unwant(channel): this worker's last subscriber on channel left. Never
-- waits.
local function unwant(channel)
  if not wanted[channel] then return end
  wanted[channel] = nil
  nwanted = nwanted - 1
  last[channel] = nil
  if conn then ask("UNSUBSCRIBE", channel) end
end

-- -- Setting up ----------------------------------------------------------------

local OPTIONS = { backend = true, url = true, password = true, db = true, channel_prefix = true,
                  timeout = true, backlog = true }

-- new(opts, deliver) -> backend, or nil, err (bad options). deliver(channel,
-- msg) hands a message of another node to this worker's subscribers.
function M.new(opts, deliver_fn)
  for k in pairs(opts) do
    if not OPTIONS[k] then return nil, "unknown option " .. tostring(k) end
  end
  local c, err = resp.parse_url(opts.url or "redis://127.0.0.1:6379")
  if not c then return nil, err end
  if opts.password ~= nil then
    if type(opts.password) ~= "string" then return nil, "bad password: string expected" end
    c.password = opts.password
  end
  if opts.db ~= nil then
    if type(opts.db) ~= "number" or opts.db < 0 or opts.db % 1 ~= 0 then return nil, "bad db: number >= 0 expected" end
    c.db = opts.db
  end
  c.prefix = opts.channel_prefix or "cohost:broadcast:"
  if type(c.prefix) ~= "string" then return nil, "bad channel_prefix: string expected" end
  c.timeout = opts.timeout or 3
  if type(c.timeout) ~= "number" or c.timeout <= 0 then return nil, "bad timeout: seconds > 0 expected" end
  c.timeout_ms = math.ceil(c.timeout * 1000)
  c.backlog = opts.backlog or 8 * 1024 * 1024
  if type(c.backlog) ~= "number" or c.backlog < 0 then return nil, "bad backlog: bytes >= 0 expected" end
  c.addr = c.host:find(":", 1, true) and "[" .. c.host .. "]:" .. c.port or c.host .. ":" .. c.port
  c.pool = "cohost.broadcast " .. c.addr
  cfg, deliver = c, deliver_fn
  node = crypto.md5(bus.instance()):sub(1, 16)
  renew_origin()
  local function counter(name, help)
    return metrics.counter("cohost_broadcast_redis_" .. name .. "_total", help)
  end
  metric.sent = counter("sent", "Messages published on this node that Redis took.")
  metric.received = counter("received", "Messages of other nodes delivered, once per worker that has subscribers on their channel.")
  metric.unsent = counter("unsent", "Messages published on this node that never reached Redis.")
  metric.missed = counter("missed", "Messages of other nodes a worker with subscribers on their channel never got.")
  metric.outages = counter("outages", "Times a worker lost its connection to Redis.")
  return {
    publish = publish,
    want = want,
    unwant = unwant,
    stats = function(t)
      t.redis_sent, t.redis_received, t.redis_unsent = count.sent, count.received, count.unsent
      t.redis_missed, t.redis_duplicates = count.missed, count.duplicates
      t.redis_queued = qtail - qhead + 1
      t.redis_up = outage == nil
      return t
    end,
  }
end

return M
