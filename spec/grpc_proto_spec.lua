-- gRPC from .proto files (docs/grpc.md): srv:service_from_proto,
-- ch:stub, the health and reflection services, interop with code nobody
-- here wrote: Python stubs that Debian's protoc generates from the same
-- .proto files (spec/grpc_proto_peer.py, one server process for the file).
local cohost = require "cohost"
local grpc = require "cohost.grpc"
local pb = require "cohost.protobuf"
local golden = require "spec.proto.golden"
local h = require "spec.helper"
h.cleanups(after_each)

local q = h.shell_quote
local BIG = 8 * 1024 * 1024
local PEER = "spec/grpc_proto_peer.py"

local T, CASES, STUBS
local peer_pid, peer_log, peer_port
local srv_port, srv

-- Runs the peer in mode with args to its end; returns its stdout lines.
local function peer(mode, args, limit)
  local code, out, err = h.sh(("%s %s %s %s %s"):format(h.PYTHON, PEER, q(STUBS), mode, args), limit or 60)
  assert(code == 0, ("peer %s exited %d: %s%s"):format(mode, code, out, err))
  local lines = {}
  for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
  return lines
end

-- Starts the peer in mode in the background: pid, log.
local function peer_bg(mode, args)
  return h.spawn(("exec timeout 60 %s %s %s %s %s"):format(h.PYTHON, PEER, q(STUBS), mode, args))
end

local function lines_of(log)
  local out = {}
  for line in (h.try_slurp(log) or ""):gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

-- The handlers of golden.Golden in cohost, mirroring the peer's.
local function verdict(msg)
  local want = CASES[msg.case]
  if not want then return { ok = false, diff = "no case " .. tostring(msg.case) } end
  local d = golden.diff(want, msg)
  return { message = want, ok = d == nil, diff = d or "" }
end

local HANDLERS = {
  Check = function(req) return verdict(req) end,
  Repeat = function(req, stream)
    for _ = 1, 3 do stream:send(CASES[req.case]) end
  end,
  Collect = function(stream)
    local seen, bad = {}, nil
    for m in stream:messages() do
      seen[#seen + 1] = m.case
      bad = bad or golden.diff(CASES[m.case], m)
    end
    return { ok = bad == nil, diff = bad or "", message = { case = table.concat(seen, ",") } }
  end,
  Chat = function(stream)
    for m in stream:messages() do
      local v = verdict(m)
      stream:send({ case = (v.ok and "ok:" or "bad:") .. m.case .. ":" .. v.diff })
    end
  end,
}

setup(function()
  T = assert(pb.load("spec/proto/golden.proto"))
  CASES = golden.cases(pb)
  -- The Python side's stubs, generated once for the file.
  STUBS = os.tmpname()
  os.remove(STUBS)
  local code, out, err = h.sh(("mkdir -p %s && protoc -Ispec/proto -Ilua/cohost/grpc/proto --python_out=%s --grpc_out=%s "
    .. "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin golden.proto leaf.proto "
    .. "grpc/health/v1/health.proto grpc/reflection/v1alpha/reflection.proto"):format(q(STUBS), q(STUBS), q(STUBS)))
  assert(code == 0, out .. err)
  peer_pid, peer_log = peer_bg("server", "")
  peer_port = h.eventually(function() return tonumber((h.try_slurp(peer_log) or ""):match("^(%d+)\n")) end, 30)
  assert(peer_port, "the python server did not start: " .. (h.try_slurp(peer_log) or ""))
  -- A cohost server of the same service, with reflection.
  srv = grpc.server { reflection = true, max_receive_message_size = BIG, max_send_message_size = BIG }
  srv:service_from_proto(T, "golden.Golden", HANDLERS)
  srv_port = h.free_port()
  assert(grpc.listen("127.0.0.1:" .. srv_port, srv))
end)

teardown(function()
  h.stop_pid(peer_pid)
  if peer_log then os.remove(peer_log) end
  if STUBS then os.execute("rm -rf " .. q(STUBS)) end
end)

describe("a cohost stub and a Python server generated from the same .proto", function()
  local stub
  before_each(function()
    stub = grpc.channel("127.0.0.1:" .. peer_port, { timeout = 20000, max_receive_message_size = BIG })
      :stub(T, "golden.Golden")
  end)

  it("exchange every golden case equal both ways (unary)", function()
    for name, case in pairs(CASES) do
      local v, err = stub:Check(case)
      assert(v, tostring(err))
      assert.is_true(v.ok, name .. ": python saw " .. v.diff)                -- cohost's bytes, decoded by python
      assert.is_nil(golden.diff(case, v.message), name)                      -- python's bytes, decoded by cohost
    end
  end)

  it("stream tables: server streaming, client streaming, bidi", function()
    local got = {}
    for m in stub:Repeat({ case = "maps" }) do got[#got + 1] = m end
    assert.equal(3, #got)
    for _, m in ipairs(got) do assert.is_nil(golden.diff(CASES.maps, m)) end
    local v = assert(stub:Collect({ CASES.extremes, CASES.wkt, CASES.floats }))
    assert.is_true(v.ok, v.diff)
    assert.equal("extremes,wkt,floats", v.message.case)
    local c = stub:Chat()
    assert.is_true(c:send(CASES.oneof_text))
    assert.is_true(c:send(CASES.unknown_enum))
    c:close_send()
    assert.equal("ok:oneof_text:", c:recv().case)
    assert.equal("ok:unknown_enum:", c:recv().case)
    local m, err = c:recv()
    assert.is_nil(m)
    assert.is_nil(err)
  end)

  it("send a message made of two on the wire: the oneof member that came last stands", function()
    -- A string is sent as the encoded message it is.
    local v = assert(stub:Check(pb.encode("golden.All", { case = "oneof_text", number = 7 })
      .. pb.encode("golden.All", { text = "t" })))
    assert.is_true(v.ok, v.diff)
  end)
end)

describe("a cohost server from .proto", function()
  it("answers a Python client with every golden case, all kinds of call", function()
    local lines = peer("client", tostring(srv_port))
    local n = 0
    for name in pairs(CASES) do n = n + 1 end
    assert.equal(n + 3, #lines, table.concat(lines, "\n"))
    for _, line in ipairs(lines) do
      if line:match("^check ") or line:match("^repeat") then assert.matches(": ok$", line) end
    end
    assert.is_truthy(table.concat(lines, "\n"):find("collect: extremes,wkt,floats", 1, true))
    assert.is_truthy(table.concat(lines, "\n"):find("chat: ok:oneof_text: ok:unknown_enum:", 1, true))
  end)

  it("ends a call whose request does not decode with INTERNAL, and one whose reply is not its type as a handler error", function()
    local ch = grpc.channel("127.0.0.1:" .. srv_port, { timeout = 10000 })
    local _, err = ch:unary("/golden.Golden/Check", "\10\5ab")
    assert.equal(grpc.status.INTERNAL, err.code)
    assert.equal("cannot decode the request: cannot decode golden.All: length 5 past the end (2 bytes left)", err.message)
    local bad = grpc.server { health = false }
    bad:service_from_proto(T, "golden.Golden", { Check = function() return { ok = "yes" } end })
    local port = h.free_port()
    local l = assert(grpc.listen("127.0.0.1:" .. port, bad))
    h.defer(function() l:close() end)
    local _, e2 = grpc.channel("127.0.0.1:" .. port):stub(T, "golden.Golden"):Check({ case = "x" })
    assert.equal(grpc.status.INTERNAL, e2.code)
    assert.equal("handler error (see the server's log)", e2.message)
  end)

  it("refuses a method its service does not have, and a service the types do not have", function()
    local s = grpc.server { health = false }
    assert.has_error(function() s:service_from_proto(T, "golden.Golden", { Nope = function() end }) end,
      "golden.Golden has no method Nope (it has: Check, Repeat, Collect, Chat)")
    assert.has_error(function() s:service_from_proto(T, "golden.None", {}) end,
      "no service golden.None in these types (they have: golden.Golden)")
    assert.has_error(function() s:service_from_proto({}, "golden.Golden", {}) end,
      "bad types (a set of cohost.protobuf's pb.load or pb.load_descriptor expected)")
  end)
end)

describe("health checking", function()
  it("answers a Python client's Check: SERVING for the server, NOT_FOUND for a service it does not know", function()
    local s = grpc.server()
    s:service_from_proto(T, "golden.Golden", HANDLERS)
    s:set_health("golden.Golden", "NOT_SERVING")
    local port = h.free_port()
    local l = assert(grpc.listen("127.0.0.1:" .. port, s))
    h.defer(function() l:close() end)
    assert.same({ "SERVING", "NOT_SERVING", "error NOT_FOUND unknown service nope" },
      peer("check", port .. " '' golden.Golden nope"))
  end)

  it("tells a Python client's Watch each change set_health makes", function()
    local s = grpc.server()
    local port = h.free_port()
    local l = assert(grpc.listen("127.0.0.1:" .. port, s))
    h.defer(function() l:close() end)
    local pid, log = peer_bg("watch", port .. " golden.Golden")
    h.defer(function() h.stop_pid(pid); os.remove(log) end)
    assert.is_true(h.wait_for(function() return lines_of(log)[1] end, 30), h.try_slurp(log))
    assert.same({ "SERVICE_UNKNOWN" }, lines_of(log))
    s:set_health("golden.Golden", "SERVING")
    assert.is_true(h.wait_for(function() return lines_of(log)[2] end, 10), h.try_slurp(log))
    s:set_health("golden.Golden", "SERVING")   -- no change: nothing sent
    s:set_health("golden.Golden", "NOT_SERVING")
    assert.is_true(h.wait_for(function() return lines_of(log)[3] end, 10), h.try_slurp(log))
    assert.same({ "SERVICE_UNKNOWN", "SERVING", "NOT_SERVING" }, lines_of(log))
  end)

  it("is off with health = false; bad statuses are refused", function()
    local s = grpc.server { health = false }
    local port = h.free_port()
    local l = assert(grpc.listen("127.0.0.1:" .. port, s))
    h.defer(function() l:close() end)
    local _, err = grpc.channel("127.0.0.1:" .. port):unary("/grpc.health.v1.Health/Check", "")
    assert.equal(grpc.status.UNIMPLEMENTED, err.code)
    assert.has_error(function() s:set_health("x", "SERVING") end,
      "this server has no health service (grpc.server{ health = false })")
    assert.has_error(function() grpc.server():set_health("x", "UP") end,
      'bad status UP ("SERVING", "NOT_SERVING", "UNKNOWN" or nil expected)')
  end)
end)

describe("reflection", function()
  it("lets a Python client list the services and build the descriptors it fetches", function()
    local lines = peer("reflect", tostring(srv_port))
    assert.same({
      "services: golden.Golden grpc.health.v1.Health grpc.reflection.v1alpha.ServerReflection",
      "files: golden.proto google/protobuf/any.proto google/protobuf/duration.proto google/protobuf/empty.proto "
        .. "google/protobuf/struct.proto google/protobuf/timestamp.proto google/protobuf/wrappers.proto "
        .. "grpc/health/v1/health.proto grpc/reflection/v1alpha/reflection.proto leaf.proto",
      "methods golden.Golden: Check(golden.All) golden.Verdict Repeat(golden.All) stream golden.All "
        .. "Collect(stream golden.All) golden.Verdict Chat(stream golden.All) stream golden.All",
      "methods grpc.health.v1.Health: Check(grpc.health.v1.HealthCheckRequest) grpc.health.v1.HealthCheckResponse "
        .. "Watch(grpc.health.v1.HealthCheckRequest) stream grpc.health.v1.HealthCheckResponse",
      "methods grpc.reflection.v1alpha.ServerReflection: ServerReflectionInfo(stream "
        .. "grpc.reflection.v1alpha.ServerReflectionRequest) stream grpc.reflection.v1alpha.ServerReflectionResponse",
      "by filename: grpc/health/v1/health.proto grpc.health.v1",
      "unknown symbol: 5 symbol not found: no.Such",
      "by method: 1 files",
    }, lines)
  end)

  it("is off unless the server is made with reflection = true", function()
    local port = h.free_port()
    local l = assert(grpc.listen("127.0.0.1:" .. port, grpc.server()))
    h.defer(function() l:close() end)
    local _, err = grpc.channel("127.0.0.1:" .. port):bidi("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"):recv()
    assert.equal(grpc.status.UNIMPLEMENTED, err.code)
  end)

  it("serves the descriptors protoc makes now from the standard services' .proto files", function()
    -- lua/cohost/grpc/descriptors.lua is generated (scripts/grpc_descriptors.lua):
    -- compared as decoded FileDescriptorSets, with descriptor.proto's own types.
    local D = assert(pb.load("/usr/include/google/protobuf/descriptor.proto"))
    local now = assert(pb.descriptor({ "lua/cohost/grpc/proto/grpc/health/v1/health.proto",
      "lua/cohost/grpc/proto/grpc/reflection/v1alpha/reflection.proto" }, { import_paths = { "lua/cohost/grpc/proto" } }))
    local want = assert(D:decode("google.protobuf.FileDescriptorSet", now))
    local got = assert(D:decode("google.protobuf.FileDescriptorSet", require "cohost.grpc.descriptors"))
    assert.is_nil(golden.diff(want, got), "run build/cohost scripts/grpc_descriptors.lua")
  end)
end)

describe("examples/notes", function()
  local ROOT = "--processes 1 --shutdown-timeout 5 examples/notes/main.lua"

  it("serves notes.Notes with health and reflection; a stop turns health NOT_SERVING, a reload does not", function()
    local port = h.fixed_port()
    local pid, log = h.spawn(("%s %s %d"):format(h.COHOST, ROOT, port))
    h.defer(function() h.stop_pid(pid); os.remove(log) end)
    h.wait_port(port, log)
    local types = assert(pb.load("examples/notes/notes.proto"))
    local notes = grpc.channel("127.0.0.1:" .. port, { timeout = 10000 }):stub(types, "notes.Notes")
    local watch = notes:WatchNotes({ tag = "t" })
    local n = assert(notes:AddNote({ title = "first", body = "b", tags = { "t" } }))
    assert.equal(1, n.id)
    assert.equal("first", assert(notes:GetNote({ id = 1 })).title)
    local _, err = notes:GetNote({ id = 9 })
    assert.equal(grpc.status.NOT_FOUND, err.code)
    assert.equal("first", watch:recv().title)
    watch:cancel()
    -- A balancer's watch across a reload: the old worker ends it
    -- (UNAVAILABLE, retried on the new one), never with NOT_SERVING.
    local wpid, wlog = peer_bg("watch", port .. " notes.Notes")
    h.defer(function() h.stop_pid(wpid); os.remove(wlog) end)
    assert.is_true(h.wait_for(function() return lines_of(wlog)[1] end, 30), h.try_slurp(wlog))
    os.execute("kill -HUP " .. pid)
    assert.is_true(h.wait_for(function() return lines_of(wlog)[2] end, 30), h.try_slurp(log))
    assert.same({ "SERVING", "error UNAVAILABLE" }, lines_of(wlog))
    -- The new generation serves, and a stop tells a watch NOT_SERVING.
    local w2pid, w2log = peer_bg("watch", port .. " ''")
    h.defer(function() h.stop_pid(w2pid); os.remove(w2log) end)
    assert.is_true(h.wait_for(function() return lines_of(w2log)[1] end, 30), h.try_slurp(w2log))
    h.stop_pid(pid, "TERM")
    assert.is_true(h.wait_for(function() return lines_of(w2log)[2] end, 30), h.try_slurp(w2log))
    assert.same({ "SERVING", "NOT_SERVING" }, { lines_of(w2log)[1], lines_of(w2log)[2] })
  end)
end)
