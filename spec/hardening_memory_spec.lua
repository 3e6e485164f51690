-- Memory that a burst takes comes back when the burst is gone, with no
-- new traffic (issues 18 and 26): after thousands of connections that
-- each sent part of a request head, were held a few seconds and dropped,
-- or that finished a TLS handshake and were closed by the server's header
-- timeout, the server's RSS goes back to within 20 MB of its start
-- (docs/limits.md, "What a handler can take down"; docs/stacks.md). The
-- server is build/cohost as a child (h.start); the client is a plain
-- Python process (spec/hardening/burst.py), so its fds count against
-- neither the server nor this runner (20,000 per process).
--
-- The hold matters: the idle trim used to be armed by spawns alone, so a
-- burst dropped within a second of its last connection came back, and
-- one held longer (the trim had run while it was still open) stayed until
-- the next request. HARDENING_BURST=15000 runs the issue's own figure;
-- make test uses 4,000 connections (2,000 TLS), one round each.
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

local N = tonumber(os.getenv("HARDENING_BURST") or "") or 4000
local N_TLS = math.floor(N / 2)
local HOLD = 3          -- seconds the half-open burst stays: past the 1 s trim
local SLACK_KB = 20 * 1024

local function rss_kb(pid)
  return tonumber(h.slurp("/proc/" .. pid .. "/status"):match("VmRSS:%s*(%d+)"))
end

-- Starts the server (listener: the burst's target; plain: the baseline's
-- request), serves one request and returns it with its RSS then.
local function server(opts, tls)
  local dir = h.tmpdir()
  local cert, key = "nil", "nil"
  if tls then
    h.tls_ca(dir, "burst-ca")
    local c, k = h.tls_cert(dir, "server", "localhost", "subjectAltName=DNS:localhost")
    cert, key = ("%q"):format(c), ("%q"):format(k)
  end
  local plain_port = dir .. "/plain.port"
  local p = h.start(opts .. " -w 1 " .. q(h.tmpfile(h.server_script(([[
local http = require "cohost.http"
local function handler(req, res) res:send("ok") end
local plain = http.listen("127.0.0.1:0", handler)
listener = http.listen("127.0.0.1:0", handler, { header_timeout = %d, ssl_cert = %s, ssl_key = %s })
local f = io.open(%q, "w")
f:write((select(2, plain:addr())))
f:close()
]]):format(tls and HOLD or 60, cert, key, plain_port)))), 120)
  defer(p.stop)
  local port = tonumber(h.slurp(plain_port))
  assert.same({ 200, "ok" }, { h.get_to_close(port, "/") })
  return p, port, rss_kb(p.pid)
end

-- Runs burst.py's kind against p and waits for its "open" and "closed";
-- returns the RSS peak seen while the burst was open.
local function burst(p, args, n)
  local pid, log = h.spawn(("timeout 120 %s %s %s"):format(
    h.PYTHON, q(h.root .. "spec/hardening/burst.py"), args))
  defer(function()
    h.stop_pid(pid, "KILL")
    os.remove(log)
  end)
  assert.is_true(h.wait_for(function() return h.slurp(log):find("open ", 1, true) end, 90, 0.05),
                 h.slurp(log))
  local opened = tonumber(h.slurp(log):match("open (%d+)"))
  assert.is_true(opened >= n * 0.95, h.slurp(log))
  local peak = rss_kb(p.pid)
  assert.is_true(h.wait_for(function()
    peak = math.max(peak, rss_kb(p.pid))
    return h.slurp(log):find("closed", 1, true)
  end, 90, 0.1), h.slurp(log))
  return peak
end

-- The burst was real (it took memory), and goes: RSS back within 20 MB of
-- the start, with no request since (the target is 10 s after the last
-- close; the deadline is generous for a loaded machine). Then the server
-- still serves.
local function gives_back(p, port, start, peak, slack)
  slack = slack or SLACK_KB
  assert.is_true(peak > start + SLACK_KB, ("peak %d KiB, start %d KiB"):format(peak, start))
  local now
  local back = h.wait_for(function()
    now = rss_kb(p.pid)
    return now <= start + slack
  end, 20, 0.25)
  assert.is_true(back, ("RSS %d KiB at the start, %d KiB at the peak, %d KiB 20 s after the last close")
                 :format(start, peak, now))
  assert.same({ 200, "ok" }, { h.get_to_close(port, "/") })
  assert.is_nil(p.exited())
end

-- A WebSocket burst: each connection's handler ran Lua and parked in
-- ws:recv(), so what it left is in the Lua heap, which LuaJIT collects
-- only as new Lua allocations pace it (none come with no traffic), on an
-- allocator that never gave pages in the middle of its segments back:
-- 4,000 WebSockets kept about 15 MB after they closed, 15,000 about
-- 50 MB. The idle trim now collects that heap and purges its allocator
-- (host/vm/heap.c): about 5 MB after 4,000. Hence a slack of its own:
-- the issue's 20 MB would need over 6,000 connections to tell the two
-- apart.
local N_WS = N
local WS_SLACK_KB = 10 * 1024

local function ws_server(opts)
  local p = h.start(opts .. " -w 1 " .. q(h.tmpfile(h.server_script([[
local http = require "cohost.http"
local websocket = require "cohost.websocket"
listener = http.listen("127.0.0.1:0", function(req, res)
  if req.path == "/ws" then
    local ws = websocket.upgrade(req, res)
    if not ws then return end
    while true do
      local data, typ = ws:recv()
      if not data or typ == "close" then break end
    end
    return ws:close()
  end
  res:send("ok")
end)
]]))), 120)
  defer(p.stop)
  assert.same({ 200, "ok" }, { h.get_to_close(p.port, "/") })
  return p, p.port, rss_kb(p.pid)
end

local function half_open(opts)
  local p, port, start = server(opts, false)
  local peak = burst(p, ("half-open %d %d %d"):format(p.port, N, HOLD), N)
  gives_back(p, port, start, peak)
end

-- A sanitizer build (make test SAN=..., which sets ASAN_OPTIONS) keeps
-- freed memory in ASan's quarantine and has no copy-stack mode: RSS says
-- nothing about cohost there.
local san = os.getenv("ASAN_OPTIONS") ~= nil

describe("after a burst held open for seconds and dropped", function()
  it("gives the memory of half-open requests back with no new traffic (separate stacks)", function()
    if san then return pending("ASan's quarantine keeps freed memory") end
    half_open("--stack-mode=separate")
  end)

  it("gives the memory of half-open requests back with no new traffic (copy stacks)", function()
    if san then return pending("no copy-stack mode under ASan") end
    half_open("--stack-mode=copy")
  end)

  it("gives the Lua heap of a burst of WebSocket handlers back with no new traffic", function()
    if san then return pending("ASan's quarantine keeps freed memory") end
    local p, port, start = ws_server("--stack-mode=separate")
    local peak = burst(p, ("ws %d %d %d"):format(p.port, N_WS, HOLD), N_WS)
    gives_back(p, port, start, peak, WS_SLACK_KB)
  end)

  -- These end with no coroutine: an idle connection's timer closes them.
  it("gives the memory of TLS handshakes ended by the header timeout back", function()
    if san then return pending("ASan's quarantine keeps freed memory") end
    local p, port, start = server("--stack-mode=separate", true)
    local peak = burst(p, ("tls %d %d"):format(p.port, N_TLS), N_TLS)
    gives_back(p, port, start, peak)
  end)
end)
