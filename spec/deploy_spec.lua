-- Many nodes behind a load balancer (docs/deploy.md): three cohost nodes
-- behind Debian's HAProxy, which health-checks each node's /healthz on its
-- status address, restarted one by one while wrk keeps 20 connections
-- busy through HAProxy: no request may fail. Once over plain HTTP, once
-- with the PROXY protocol (v2) between HAProxy and the nodes. Everything
-- runs for real on 127.0.0.1 fixed ports, bounded by timeout(1), stopped
-- after the test.
local cohost = require "cohost"
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
