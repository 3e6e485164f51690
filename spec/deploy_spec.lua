-- Many nodes behind a load balancer (docs/deploy.md): three cohost nodes
-- behind Debian's HAProxy, which health-checks each node's /healthz on its
-- status address, restarted one by one while wrk keeps 20 connections
-- busy through HAProxy: no request may fail. Once over plain HTTP, once
-- with the PROXY protocol (v2) between HAProxy and the nodes. Everything
-- runs for real on 127.0.0.1 fixed ports, bounded by timeout(1), stopped
-- after the test.
local cohost = require "cohost"
local cjson = require "cjson"
local h = require "spec.helper"
local defer = h.cleanups(after_each)
local q = h.shell_quote

-- A node: answers "node NAME" on arg[1], with the PROXY protocol if arg[3]
-- is "pp" (then it checks that a peer came from the header).
local NODE = [[
local cohost = require "cohost"
local http = require "cohost.http"
local port, name, pp = tonumber(arg[1]), arg[2], arg[3] == "pp"
assert(http.listen("127.0.0.1:" .. port, function(req, res)
  assert(req.peer:match("^127%.0%.0%.1:%d+$"), req.peer)
  res:send("node " .. name)
end, { proxy_protocol = pp }))
]] .. h.REPORT_PORT

local WRK_SCRIPT = [[
non2xx = 0
local threads = {}
function setup(thread) threads[#threads + 1] = thread end
function response(status) if status < 200 or status > 299 then non2xx = non2xx + 1 end end
function done(summary)
  local n = 0
  for _, t in ipairs(threads) do n = n + (tonumber(t:get("non2xx")) or 0) end
  local e = summary.errors
  io.write(("wrk requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d\n")
    :format(summary.requests, n, e.connect, e.read, e.write, e.timeout))
end
]]

-- Starts node i (its app and status ports in nodes[i]); returns the
-- h.start process. The status address serves /healthz; --drain-delay
-- keeps the node serving while HAProxy notices the 503.
local function start_node(node, pp)
  local p = h.start(("--status-addr 127.0.0.1:%d --drain-delay 1 --shutdown-timeout 5 %s %d %s %s")
    :format(node.status, q(node.script), node.port, node.name, pp and "pp" or "-"))
  defer(p.stop)
  return p
end

-- HAProxy's CSV stats of backend "nodes": a row per server, by name,
-- each a table of the columns by their header names (status, chkfail,
-- chkdown, ...).
local function server_rows(stats_port)
  local code, chunked = h.get_to_close(stats_port, "/stats;csv")
  local rows = {}
  if code ~= 200 then return rows end
  -- HAProxy sends it chunked.
  local body, pos = {}, 1
  while true do
    local size, from = chunked:match("^(%x+)[^\r]*\r\n()", pos)
    if not size or tonumber(size, 16) == 0 then break end
    body[#body + 1] = chunked:sub(from, from + tonumber(size, 16) - 1)
    pos = from + tonumber(size, 16) + 2
  end
  body = table.concat(body)
  local names
  for line in body:gmatch("[^\n]+") do
    local cols = {}
    for c in (line:gsub("^# ", "") .. ","):gmatch("([^,]*),") do cols[#cols + 1] = c end
    if not names then
      names = cols
    elseif cols[1] == "nodes" and cols[2] ~= "BACKEND" then
      local row = {}
      for i, name in ipairs(names) do row[name] = cols[i] end
      rows[cols[2]] = row
    end
  end
  return rows
end

-- HAProxy's state of each server ("UP", "DOWN", ...) from its CSV stats.
local function server_states(stats_port)
  local code, body = h.get_to_close(stats_port, "/stats;csv")
  local states = {}
  if code ~= 200 then return states end
  for line in body:gmatch("[^\n]+") do
    local px, sv, rest = line:match("^([^,]*),([^,]*),(.*)$")
    if px == "nodes" and sv ~= "BACKEND" then
      -- status is the 18th column: 15 after proxy and server name.
      local cols = {}
      for c in (rest .. ","):gmatch("([^,]*),") do cols[#cols + 1] = c end
      states[sv] = cols[16]
    end
  end
  return states
end

local function rolling_restart(pp)
  local front, stats = h.fixed_port(), h.fixed_port()
  local script = h.tmpfile(NODE)
  local nodes, procs = {}, {}
  for i = 1, 3 do
    nodes[i] = { name = "n" .. i, port = h.fixed_port(), status = h.fixed_port(), script = script }
    procs[i] = start_node(nodes[i], pp)
  end
  local servers = {}
  for i, n in ipairs(nodes) do
    servers[i] = ("  server %s 127.0.0.1:%d check port %d inter 100 fall 1 rise 2%s")
      :format(n.name, n.port, n.status, pp and " send-proxy-v2" or "")
  end
  local cfg = h.tmpfile(([[
global
  maxconn 1000
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response response-timeout
frontend web
  bind 127.0.0.1:%d
  default_backend nodes
listen stats
  bind 127.0.0.1:%d
  stats enable
  stats uri /stats
backend nodes
  balance roundrobin
  option httpchk GET /healthz
%s
]]):format(front, stats, table.concat(servers, "\n")))
  local hpid, hlog = h.spawn(("exec timeout 120 haproxy -db -f %s"):format(q(cfg)))
  defer(function() h.stop_pid(hpid); os.remove(hlog) end)
  local function all_up()
    local st = server_states(stats)
    return st.n1 == "UP" and st.n2 == "UP" and st.n3 == "UP"
  end
  assert.is_true(h.wait_for(all_up, 20), h.try_slurp(hlog))

  local lua = h.tmpfile(WRK_SCRIPT)
  local wpid, out = h.spawn(("exec timeout 60 wrk -t1 -c20 -d60s --timeout 5s -s %s http://127.0.0.1:%d/")
    :format(q(lua), front))
  defer(function() h.stop_pid(wpid, "KILL"); os.remove(out) end)
  -- wrk is connected and getting answers before the first restart.
  assert.is_true(h.wait_for(function() return h.get(front, "/") == 200 end, 10))
  for i = 1, 3 do
    procs[i].signal("TERM")
    -- /healthz says 503 for --drain-delay: HAProxy takes the node out
    -- before its listener closes.
    assert.is_true(h.wait_for(function() return server_states(stats)["n" .. i] ~= "UP" end, 10))
    assert.equal(0, (procs[i].wait(20)), h.slurp(procs[i].err))
    procs[i] = start_node(nodes[i], pp)
    assert.is_true(h.wait_for(all_up, 20), h.try_slurp(hlog))
  end
  -- SIGINT: wrk prints its summary and ends (timeout passes it on).
  os.execute("kill -INT " .. wpid)
  local text
  assert.is_true(h.wait_for(function()
    text = h.slurp(out)
    return text:find("wrk requests=", 1, true)
  end, 15), h.slurp(out))
  local r = {}
  for k, v in text:match("wrk (requests=[^\n]*)"):gmatch("(%w+)=(%d+)") do r[k] = tonumber(v) end
  io.stderr:write(("  [deploy_spec] rolling restart of 3 nodes%s: %d requests, non2xx %d, errors %d/%d/%d/%d\n")
    :format(pp and " (PROXY v2)" or "", r.requests, r.non2xx, r.connect, r.read, r.write, r.timeout))
  assert.is_true(r.requests > 100, text)
  assert.equal(0, r.non2xx, text)
  assert.equal(0, r.connect + r.read + r.write + r.timeout, text)
  -- Every node answers through HAProxy afterwards.
  local seen = {}
  for _ = 1, 12 do
    local status, _, body = h.get(front, "/")
    if status == 200 then seen[body] = true end
  end
  assert.same({ ["node n1"] = true, ["node n2"] = true, ["node n3"] = true }, seen)
end

describe("three nodes behind HAProxy", function()
  it("restart one by one under wrk with no failed request", function()
    rolling_restart(false)
  end)

  it("restart one by one under wrk with no failed request, with the PROXY protocol", function()
    rolling_restart(true)
  end)
end)

-- The reload of one node (docs/deploy.md, "One machine, with systemd"):
-- /healthz, which the old generation's worker 0 and the new one's serve
-- on the socket the master hands on, says 200 throughout; the old one
-- says 503 only when the node stops. Before, the old one turned 503 and
-- kept the port through --drain-delay, and the new one could not bind it
-- (a restart loop): HAProxy took the node out on every reload.
describe("a reload behind HAProxy", function()
  it("keeps /healthz at 200 through 20 SIGHUPs with --drain-delay: no refused check, no DOWN", function()
    local app, status, front, stats = h.fixed_port(), h.fixed_port(), h.fixed_port(), h.fixed_port()
    local p = h.start(("--processes 2 --status-addr 127.0.0.1:%d --drain-delay 2 --shutdown-timeout 5 %s %d n1 -")
      :format(status, q(h.tmpfile(NODE)), app))
    defer(p.stop)
    -- A check every 200 ms, two failures in a row take the node out: each
    -- reload's 2 s of 503 did, before.
    local cfg = h.tmpfile(([[
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
  timeout check 2s
frontend web
  bind 127.0.0.1:%d
  default_backend nodes
listen stats
  bind 127.0.0.1:%d
  stats enable
  stats uri /stats
backend nodes
  option httpchk GET /healthz
  server n1 127.0.0.1:%d check port %d inter 200 fall 2 rise 1
]]):format(front, stats, app, status))
    local hpid, hlog = h.spawn(("exec timeout 120 haproxy -db -f %s"):format(q(cfg)))
    defer(function() h.stop_pid(hpid); os.remove(hlog) end)
    assert.is_true(h.wait_for(function() return server_states(stats).n1 == "UP" end, 20), h.try_slurp(hlog))
    local before = server_rows(stats).n1

    -- A client of its own asks /healthz every 50 ms, on a new connection
    -- each time, as a balancer does; an answer is a status or an error.
    local answers, polling = {}, true
    local poller = cohost.spawn(function()
      while polling do
        local code, err = h.get_to_close(status, "/healthz")
        answers[#answers + 1] = code or tostring(err)
        cohost.sleep(0.05)
      end
    end)
    defer(function() polling = false end)
    local function reloads()
      local log = h.slurp(p.err)
      return select(2, log:gsub("master: reload: ", "")) + select(2, log:gsub("reload failed", ""))
    end
    assert.is_true(h.wait_for(function() return #answers > 0 end))
    -- Each SIGHUP after the last reload ended (the master ignores one
    -- while a reload waits for its workers) and /healthz answered since.
    for r = 1, 20 do
      local asked = #answers
      p.signal("HUP")
      assert.is_true(h.wait_for(function() return reloads() >= r end, 20), h.slurp(p.err))
      assert.is_true(h.wait_for(function() return #answers > asked + 1 end))
    end
    polling = false
    cohost.wait(poller)

    local seen = {}
    for _, a in ipairs(answers) do seen[tostring(a)] = (seen[tostring(a)] or 0) + 1 end
    io.stderr:write(("  [deploy_spec] 20 reloads: /healthz answered %s\n"):format(cjson.encode(seen)))
    assert.same({ ["200"] = #answers }, seen)
    local log = h.slurp(p.err)
    assert.equal(20, select(2, log:gsub("master: reload: 2 new worker processes started", "")), log)
    assert.falsy(log:find("cannot listen", 1, true), log)
    assert.falsy(log:find("restarting it", 1, true), log)
    assert.falsy(log:find("/healthz answers 503", 1, true), log)
    local after = server_rows(stats).n1
    assert.equal("UP", after.status)
    assert.equal(before.chkdown, after.chkdown, h.try_slurp(hlog))
    assert.equal(before.chkfail, after.chkfail, h.try_slurp(hlog))

    -- A stop still takes the node out: 503 during --drain-delay.
    p.signal("TERM")
    assert.is_true(h.wait_for(function() return (h.get_to_close(status, "/healthz")) == 503 end), h.slurp(p.err))
    assert.equal(0, (p.wait(20)), h.slurp(p.err))
  end)
end)
