-- HTTP/1.1 request framing, from a raw socket: smuggling attempts, bad
-- chunks, oversized parts, stray bytes, versions. Every case (listed in
-- spec/fuzz/http_cases.lua, which also seeds the parser fuzzer) is sent on
-- its own connection with GET /canary pipelined right behind it, to a
-- server started in this process. A rejected message must get its status,
-- then the connection must close with nothing after it: no canary answer,
-- and the handler never ran for anything the server refused.
local cohost = require "cohost"
local h = require "spec.helper"
h.cleanups(after_each)
local C = require "spec.fuzz.http_cases"

local CANARY = "GET /canary HTTP/1.1\r\nHost: t\r\n\r\n"
local READ_MS = 3000   -- a reply or EOF this late is a hang

-- Starts the server: /canary answers "canary", anything else reads its
-- body and answers "METHOD path bodylen". A failed body read answers
-- nothing, so the server's own 400/413 goes out. st counts handler runs.
local function start(opts)
  local st = { calls = 0, canaries = 0 }
  local o = { max_body_size = C.MAX_BODY, body_timeout = 2, header_timeout = 5 }
  for k, v in pairs(opts or {}) do o[k] = v end
  local port = h.http_serve(function(req, res)
    st.calls = st.calls + 1
    if req.path == "/canary" then
      st.canaries = st.canaries + 1
      return res:send("canary")
    end
    local body, err = req:body()
    if not body then
      st.body_err = err
      return
    end
    res:send(("%s %s %d"):format(req.method, req.path, #body))
  end, o)
  st.port = port
  return st
end

-- Reads one response: { status, headers (lower-case names), body }, or
-- nil, err ("closed" at EOF). 1xx responses are skipped.
local function read_response(s)
  local line, err = s:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.1 (%d%d%d) "))
  if not status then return nil, "bad status line: " .. line end
  local hdrs = {}
  while true do
    local l2, e2 = s:receive("*l")
    if not l2 then return nil, e2 end
    if l2 == "" then break end
    local k, v = l2:match("^([^:]+):%s*(.-)%s*$")
    if not k then return nil, "bad header line: " .. l2 end
    hdrs[k:lower()] = v
  end
  if status < 200 then return read_response(s) end
  local body = ""
  local n = tonumber(hdrs["content-length"] or "")
  if n and n > 0 then
    body, err = s:receive(n)
    if not body then return nil, err end
  elseif hdrs["transfer-encoding"] == "chunked" then
    local t = {}
    while true do
      local size = tonumber((s:receive("*l") or ""):match("^%x+"), 16)
      if not size then return nil, "bad chunk" end
      if size == 0 then s:receive("*l"); break end
      t[#t + 1] = s:receive(size)
      s:receive("*l")
    end
    body = table.concat(t)
  end
  return { status = status, headers = hdrs, body = body }
end

-- Sends a case (its parts with a pause between them, the canary glued to
-- the last) and reads responses until the canary's, EOF or a timeout.
-- Returns the responses; .closed tells whether the server closed, .err
-- what ended the reading.
local function exchange(st, c)
  local s = h.dial(st.port, READ_MS)
  s:setoption("tcp-nodelay", true)
  local parts = c.parts or { c.raw }
  for i, p in ipairs(parts) do
    if i > 1 then cohost.sleep(0.2) end   -- so the server reads them apart
    if i == #parts then p = p .. CANARY end
    if not s:send(p) then break end   -- the server may have answered already
  end
  local out = {}
  while true do
    local r, err = read_response(s)
    if not r then
      out.err = err
      out.closed = err == "closed" or err == "connection reset by peer"
      break
    end
    out[#out + 1] = r
    if r.body == "canary" then break end
  end
  return out
end

local function statuses(out)
  local t = {}
  for i, r in ipairs(out) do t[i] = r.status end
  return table.concat(t, ",")
end

local function status_ok(want, got)
  if type(want) ~= "table" then return want == got end
  for _, w in ipairs(want) do if w == got then return true end end
  return false
end

-- The checks every rejection shares, for out[i] the rejected message.
local function rejected(st, c, out, i)
  local r = out[i]
  assert(r, ("no response to the message (%s)"):format(tostring(out.err)))
  assert(status_ok(c.status, r.status),
    ("status %s, expected %s"):format(r.status, type(c.status) == "table"
      and table.concat(c.status, " or ") or c.status))
  assert.equal(i, #out, "a response followed the rejection: " .. statuses(out))
  assert(out.closed, "the connection stayed open after the rejection (" .. tostring(out.err) .. ")")
  assert.equal(0, st.canaries, "the canary was answered after a rejected message")
end

describe("http framing", function()
  for _, c in ipairs(C.cases) do
    local what = c.stage == "ok" and "accepts " or c.stage == "ok+bad" and "answers then rejects "
      or ("rejects with %s "):format(type(c.status) == "table" and table.concat(c.status, "/") or c.status)
    it(what .. c[1], function()
      local st = start(c.opts)
      local out = exchange(st, c)
      if c.stage == "ok" then
        assert.equal("200,200", statuses(out), ("answered %s, then %s"):format(statuses(out), tostring(out.err)))
        assert.equal(c.echo, out[1].body)
        assert.equal("canary", out[2].body)
        assert.equal(2, st.calls)
      elseif c.stage == "ok+bad" then
        assert.equal(200, out[1] and out[1].status, tostring(out.err))
        assert.equal(c.echo, out[1].body)
        rejected(st, c, out, 2)
        assert.equal(1, st.calls)
      else
        rejected(st, c, out, 1)
        if c.stage == "head" then
          assert.equal(0, st.calls, "the handler ran for a rejected head")
        else
          assert.is_true(st.calls <= 1, "the handler ran after a rejected body")
        end
      end
    end)
  end

  it("says Connection: close on a rejected head", function()
    local st = start()
    local out = exchange(st, { raw = C.head("POST /p HTTP/1.1", "Host: t", "Content-Length: 1 0") })
    assert.equal(400, out[1] and out[1].status)
    assert.equal("close", out[1].headers.connection)
  end)

  it("says Connection: close on a rejected chunked body", function()
    local st = start()
    local out = exchange(st, {
      raw = C.head("POST /p HTTP/1.1", "Host: t", "Transfer-Encoding: chunked") .. "zz\r\n" })
    assert.equal(400, out[1] and out[1].status)
    assert.equal("close", out[1].headers.connection)
    assert.is_true(out.closed)
  end)

  it("lets the client read a 413 while it is still sending the body", function()
    local st = start()
    local s = h.dial(st.port, READ_MS)
    local size = C.MAX_BODY * 8
    assert(s:send(C.head("POST /up HTTP/1.1", "Host: t", "Content-Length: " .. size)))
    -- The writer keeps sending the body (then the canary) while the
    -- reader waits for the answer; its errors once the server closes are
    -- expected.
    local writer = cohost.spawn(function()
      local piece = ("u"):rep(16384)
      for _ = 1, size / #piece do
        if not s:send(piece) then return end
      end
      s:send(CANARY)
    end)
    local r, err = read_response(s)
    assert(r, "no answer while sending: " .. tostring(err))
    assert.equal(413, r.status)
    assert.equal("close", r.headers.connection)
    local r2, err2 = read_response(s)
    assert.is_nil(r2, "a response followed the 413")
    assert.is_true(err2 == "closed" or err2 == "connection reset by peer", tostring(err2))
    cohost.wait(writer)
    assert.equal(0, st.calls)
  end)

  it("lets the client read a 413 for a chunked body while it is still sending", function()
    local st = start()
    local s = h.dial(st.port, READ_MS)
    assert(s:send(C.head("POST /up HTTP/1.1", "Host: t", "Transfer-Encoding: chunked")))
    local writer = cohost.spawn(function()
      local chunk = "4000\r\n" .. ("u"):rep(16384) .. "\r\n"
      for _ = 1, 32 do
        if not s:send(chunk) then return end
      end
      s:send("0\r\n\r\n" .. CANARY)
    end)
    local r, err = read_response(s)
    assert(r, "no answer while sending: " .. tostring(err))
    assert.equal(413, r.status)
    local r2, err2 = read_response(s)
    assert.is_nil(r2, "a response followed the 413")
    assert.is_true(err2 == "closed" or err2 == "connection reset by peer", tostring(err2))
    cohost.wait(writer)
    assert.equal(0, st.canaries)
    assert.equal(1, st.calls)
  end)
end)
