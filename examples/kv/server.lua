-- Connections: one coroutine per client reads what has arrived
-- (receiveany), runs every complete request in it, and answers them all
-- with one send, so a pipelined batch costs one read and one write. A
-- request that needs more bytes than are buffered waits for them; a large
-- bulk is read with one receive(n) of the missing bytes.
local cohost = require "cohost"
local R = require "kv.registry"
local resp = require "kv.resp"
local put = resp.put
local aof = require "kv.aof"
local pubsub = require "kv.pubsub"
local lists = require "kv.lists"

local parse = resp.parse
local sub, lower, concat, format = string.sub, string.lower, table.concat, string.format
local commands, stats = R.commands, R.stats

local M = {}

M.READ_MAX = 65536          -- bytes one read takes at most
M.SEND_TIMEOUT = 60000      -- ms a client may take to read our reply
M.PUBSUB_LIMIT = 32 * 1024 * 1024   -- bytes queued for a subscriber at most
local FOREVER = 2147483647  -- ms: the longest socket timeout; idle clients stay

local logging = false       -- set by M.start when the log is on

-- -- Clients ---------------------------------------------------------------

local Client = {}
Client.__index = Client
local next_id = 0

local function new_client(sock, peer)
  next_id = next_id + 1
  return setmetatable({ sock = sock, peer = peer, id = next_id, quit = false,
                        gone = false, nsubs = 0 }, Client)
end

-- Sends out[1..n] (or queues it for the writer thread, once there is
-- one) and clears it. Returns 0, the new reply count. Yields.
function Client:flush(out, n)
  if n == 0 then return 0 end
  local data = n == 1 and out[1] or concat(out, "", 1, n)
  for i = 1, n do out[i] = nil end
  if self.writer then
    self:deliver(data)
  elseif not self.sock:send(data) then
    self.quit = true
  end
  return 0
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

local PUBSUB_ONLY = "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
  .. "PING / QUIT / RESET are allowed in this context"

-- Runs one request and appends its reply; logs it if it changed data.
-- buf[s, e) is its RESP text, logged as is when the command asks
-- (nil for inline requests, which are encoded instead). Returns the new
-- reply count.
local function dispatch(c, argv, argc, out, n, buf, s, e)
  local name = argv[1]
  local cmd = commands[name]
  if not cmd then
    cmd = commands[lower(name)]
    if not cmd then return put(out, n, unknown(argv, argc)) end
  end
  local arity = cmd.arity
  if (arity > 0 and argc ~= arity) or argc < -arity then
    return put(out, n, "-ERR wrong number of arguments for '" .. cmd.name .. "' command\r\n")
  end
  if c.nsubs > 0 and not cmd.pubsub then
    return put(out, n, resp.err(format(PUBSUB_ONLY, lower(name))))
  end
  if cmd.write and R.write_error then return put(out, n, R.write_error) end
  stats.commands = stats.commands + 1
  n = cmd.fn(c, argv, argc, out, n)
  local prop = R.prop
  if prop then
    R.prop = nil
    if logging then
      if prop == true then
        aof.feed(s and sub(buf, s, e - 1) or resp.encode(argv, argc))
      else
        aof.feed(prop)
      end
    end
  end
  if R.any_ready then lists.serve() end
  local extra = R.extra
  if extra then
    R.extra = nil
    if logging then
      for i = 1, #extra do aof.feed(extra[i]) end
    end
  end
  return n
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

-- Reads, runs and answers requests until the client leaves or must be
-- closed.
local function loop(c, sock)
  local argv, out, n = {}, {}, 0
  local buf, pos, len, need = "", 1, 0, nil
  while not c.quit and not c.gone do
    local data, err
    local have = len - pos + 1
    if need and need - have > M.READ_MAX then
      data, err = sock:receive(need - have)
    else
      data, err = sock:receiveany(M.READ_MAX)
    end
    if data then
      if pos > len then buf = data else buf = sub(buf, pos) .. data end
      pos, len, need = 1, #buf, nil
      local seq = aof.seq
      while pos <= len do
        local argc, nxt, inline = parse(buf, pos, len, argv)
        if not argc then
          if argc == false then
            out[n + 1] = resp.err("ERR " .. nxt)
            n = n + 1
            c.quit = true
          else
            need = nxt
          end
          break
        end
        if argc > 0 then
          n = dispatch(c, argv, argc, out, n, buf, not inline and pos or nil, nxt)
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
      if n > 0 then
        if aof.seq > seq and logging then aof.wait(aof.seq, c.aof_sema or c:make_aof_sema()) end
        n = c:flush(out, n)
      end
    elseif err ~= "timeout" then
      break
    end
  end
end

local function serve(sock, peer)
  sock:settimeouts(FOREVER, M.SEND_TIMEOUT, FOREVER)
  sock:setoption("tcp-nodelay", true)
  local c = new_client(sock, peer)
  stats.clients = stats.clients + 1
  stats.connections = stats.connections + 1
  -- The cleanup runs whatever ended the loop (a bug, or "cancelled" at
  -- shutdown), so no channel keeps a dead subscriber; then the error
  -- goes on to be logged.
  local ok, err = pcall(loop, c, sock)
  c.gone = true
  stats.clients = stats.clients - 1
  pubsub.forget(c)
  if c.writer then
    stats.pubsub_clients = stats.pubsub_clients - 1
    c.qsema:post()
    -- Let the writer send what is queued (QUIT's +OK), then end it.
    if ok then cohost.wait(c.writer) else cohost.kill(c.writer) end
  end
  if not ok then error(err, 0) end
end

function Client:make_aof_sema()
  self.aof_sema = cohost.semaphore.new(0)
  return self.aof_sema
end

-- Listens on addr ("host:port"); logging says whether the log is on.
-- Returns the listener.
function M.start(addr, with_log)
  logging = with_log
  return assert(cohost.listen(addr, serve))
end

return M
