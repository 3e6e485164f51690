-- Writes the seed corpora of the Lua-parser and connection harnesses:
--   spec/fuzz/corpus/ws_frame/   (spec/fuzz/fuzz_ws_frame.lua's format)
--   spec/fuzz/corpus/resp/       (spec/fuzz/fuzz_resp.lua's format)
--   spec/fuzz/corpus/http_conn/  (spec/fuzz/fuzz_http_conn.c's format; the
--                                 http_parse seeds are used as well)
--   spec/fuzz/corpus/h2_conn/    (the same harness built with -DFUZZ_H2:
--                                 HTTP/2 connections from the preface on)
-- Run from the repository root: build/cohost spec/fuzz/make_seeds.lua
-- (or any LuaJIT: it needs only the bit library).
local bit = require "bit"

local char, byte, concat = string.char, string.byte, table.concat
local T = "~|~"   -- a timeout / read boundary

local function write(dir, name, data)
  os.execute("mkdir -p " .. dir)
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(data)
  f:close()
end

-- -- WebSocket frames -------------------------------------------------------

-- A frame; masked with key when key is given.
local function frame(fin, op, payload, key, rsv)
  local b1 = (fin and 0x80 or 0) + (rsv or 0) + op
  local m = key and 0x80 or 0
  local n = #payload
  local h
  if n < 126 then
    h = char(b1, m + n)
  elseif n < 65536 then
    h = char(b1, m + 126, bit.rshift(n, 8), n % 256)
  else
    h = char(b1, m + 127, 0, 0, 0, 0, bit.rshift(n, 24) % 256, bit.rshift(n, 16) % 256,
             bit.rshift(n, 8) % 256, n % 256)
  end
  if not key then return h .. payload end
  local t = {}
  for i = 1, n do t[i] = char(bit.bxor(byte(payload, i), byte(key, (i - 1) % 4 + 1))) end
  return h .. key .. concat(t)
end

local function ws_seeds()
  local dir = "spec/fuzz/corpus/ws_frame"
  local K = "\1\2\3\4"
  local close = function(code, reason)
    return char(math.floor(code / 256), code % 256) .. (reason or "")
  end
  -- name -> function(key): the frames a peer sends (key nil for a server
  -- peer, whose frames are unmasked).
  local cases = {
    text = function(k) return frame(true, 1, "hello", k) end,
    text_utf8 = function(k) return frame(true, 1, "h\195\169llo \226\130\172 \240\159\152\128", k) end,
    binary = function(k) return frame(true, 2, "\0\1\2\255", k) end,
    empty_text = function(k) return frame(true, 1, "", k) end,
    fragments = function(k)
      return frame(false, 1, "hel", k) .. frame(false, 0, "l", k) .. T .. frame(true, 0, "o", k)
    end,
    fragments_ping_between = function(k)
      return frame(false, 2, "ab", k) .. frame(true, 9, "p", k) .. frame(true, 0, "cd", k)
    end,
    utf8_split_across_fragments = function(k)
      return frame(false, 1, "\226\130", k) .. frame(true, 0, "\172", k)
    end,
    ping_pong = function(k) return frame(true, 9, "ping!", k) .. frame(true, 10, "pong", k) end,
    close_1000 = function(k) return frame(true, 8, close(1000, "bye"), k) end,
    close_empty = function(k) return frame(true, 8, "", k) end,
    close_1005 = function(k) return frame(true, 8, close(1005), k) end,
    close_3000 = function(k) return frame(true, 8, close(3000, "app"), k) end,
    close_bad_utf8 = function(k) return frame(true, 8, close(1000, "\192\175"), k) end,
    close_one_byte = function(k) return frame(true, 8, "\3", k) end,
    len16 = function(k) return frame(true, 2, ("x"):rep(200), k) end,
    len16_text_timeouts = function(k)
      local f = frame(true, 1, ("y"):rep(300), k)
      return f:sub(1, 1) .. T .. f:sub(2, 3) .. T .. f:sub(4, 9) .. T .. f:sub(10)
    end,
    len64 = function(k)
      return char(0x82, (k and 0x80 or 0) + 127, 0, 0, 0, 0, 0, 0, 0, 3) .. (k or "") .. "abc"
    end,
    len64_top_bit = function(k)
      return char(0x82, (k and 0x80 or 0) + 127, 0x80, 0, 0, 0, 0, 0, 0, 3) .. (k or "") .. "abc"
    end,
    len64_huge = function(k)
      return char(0x82, (k and 0x80 or 0) + 127, 0, 0, 1, 0, 0, 0, 0, 0) .. (k or "")
    end,
    rsv1 = function(k) return frame(true, 1, "x", k, 0x40) end,
    reserved_opcode = function(k) return frame(true, 3, "x", k) end,
    reserved_control = function(k) return frame(true, 11, "", k) end,
    fragmented_ping = function(k) return frame(false, 9, "x", k) end,
    long_ping = function(k) return char(0x89, (k and 0x80 or 0) + 126, 0, 126) .. (k or "") .. ("p"):rep(126) end,
    continuation_first = function(k) return frame(true, 0, "x", k) end,
    text_inside_fragments = function(k) return frame(false, 1, "a", k) .. frame(true, 1, "b", k) end,
    bad_utf8 = function(k) return frame(true, 1, "\237\160\128", k) end,
    overlong = function(k) return frame(true, 1, "\192\175", k) end,
    truncated = function(k) return frame(true, 1, "hello", k):sub(1, 4) end,
    timeout_everywhere = function(k)
      local f = frame(true, 1, "abcdef", k)
      local t = {}
      for i = 1, #f do t[i] = f:sub(i, i) end
      return concat(t, T)
    end,
    too_big_message = function(k)
      return frame(false, 2, ("m"):rep(40), k) .. frame(true, 0, ("n"):rep(40), k)
    end,
  }
  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local f = cases[name]
    -- config: bit 0 client, 1 auto_pong off, 2 close first, 3-4 limits.
    write(dir, name .. "-server", char(0) .. f(K))
    write(dir, name .. "-client", char(1) .. f(nil))
    write(dir, name .. "-server-small", char(0x08) .. f(K))
    write(dir, name .. "-server-frame16", char(0x10 + 2) .. f(K))
    write(dir, name .. "-client-closefirst", char(1 + 4 + 0x18) .. f(nil))
  end
  -- The wrong side's masking.
  write(dir, "unmasked-from-client", char(0) .. frame(true, 1, "x"))
  write(dir, "masked-from-server", char(1) .. frame(true, 1, "x", K))
end

-- -- RESP -------------------------------------------------------------------

local function resp_seeds()
  local dir = "spec/fuzz/corpus/resp"
  local function mb(...)
    local t = { "*" .. select("#", ...) .. "\r\n" }
    for i = 1, select("#", ...) do
      local a = select(i, ...)
      t[#t + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end
    return concat(t)
  end
  local cases = {
    get = mb("GET", "k"),
    set_pipeline = mb("SET", "k", "v") .. mb("GET", "k") .. T .. mb("DEL", "k"),
    split_everywhere = (function()
      local s, t = mb("SET", "key", "value"), {}
      for i = 1, #s do t[i] = s:sub(i, i) end
      return concat(t, T)
    end)(),
    binary_arg = mb("SET", "k", "\0\r\n\255"),
    empty_arg = mb("SET", "", ""),
    zero = "*0\r\n" .. mb("PING"),
    neg = "*-1\r\n" .. mb("PING"),
    neg_zero = "*-0\r\n",
    lead_zero = "*01\r\n$4\r\nPING\r\n",
    bulk_neg = "*1\r\n$-1\r\n",
    bulk_neg_zero = "*1\r\n$-0\r\n\r\n",
    bulk_lead_zero = "*1\r\n$04\r\nPING\r\n",
    no_dollar = "*1\r\n:4\r\nPING\r\n",
    big_count = "*2147483648\r\n",
    count_19 = "*-9223372036854775808\r\n" .. mb("PING"),
    count_19_over = "*9223372036854775808\r\n",
    bulk_19 = "*1\r\n$9223372036854775807\r\n",
    body_no_crlf = "*1\r\n$4\r\nPINGxx" .. mb("PING"),
    inline = "PING\r\nSET k v\r\nGET k\n",
    inline_quotes = 'SET "a b" \'c d\'\r\nSET "\\x41\\n\\"" \'it\\\'s\'\r\n',
    inline_unbalanced = 'SET "a b\r\n',
    inline_quote_glued = 'SET "a"b\r\n',
    inline_blanks = "  \t SET\tk \v v\f \r\n\r\n\n",
    inline_vt_inside = "SET a\vb c\fd\r\n",
    inline_nul = "SET a\0b c\r\n",
    inline_split = "SE" .. T .. "T k" .. T .. " v\r" .. T .. "\n",
    mixed = "PING\r\n" .. mb("ECHO", "x") .. "ECHO \"y\"\r\n",
    long_inline = ("a"):rep(100) .. T .. ("b"):rep(100) .. "\r\n",
    long_count = "*" .. ("1"):rep(70),
  }
  for name, data in pairs(cases) do
    write(dir, name, char(0) .. data)
    write(dir, name .. "-small", char(1) .. data)
  end
end

-- -- Whole HTTP connections -------------------------------------------------

local function conn_seeds()
  local dir = "spec/fuzz/corpus/http_conn"
  local H = "Host: f\r\n"
  local cases = {
    get = "GET / HTTP/1.1\r\n" .. H .. "\r\n",
    pipelined = "GET /a HTTP/1.1\r\n" .. H .. "\r\nHEAD /b HTTP/1.1\r\n" .. H .. "\r\n"
      .. "GET /c HTTP/1.1\r\n" .. H .. "\r\n",
    post_read = "POST /read HTTP/1.1\r\n" .. H .. "Content-Length: 10\r\n\r\n01234" .. T .. "56789",
    post_chunks = "POST /chunks HTTP/1.1\r\n" .. H .. "Transfer-Encoding: chunked\r\n\r\n"
      .. "3\r\nabc\r\n" .. T .. "4;x=y\r\ndefg\r\n0\r\n\r\n",
    stream = "GET /stream HTTP/1.1\r\n" .. H .. "\r\nGET /stream HTTP/1.0\r\n\r\n",
    err = "GET /err HTTP/1.1\r\n" .. H .. "\r\nGET / HTTP/1.1\r\n" .. H .. "\r\n",
    sleep = "GET /sleep HTTP/1.1\r\n" .. H .. "\r\n" .. T .. "GET /sleep HTTP/1.1\r\n" .. H .. "\r\n",
    close = "GET /close HTTP/1.1\r\n" .. H .. "\r\nGET / HTTP/1.1\r\n" .. H .. "\r\n",
    hijack = "GET /hijack HTTP/1.1\r\n" .. H .. "\r\nGET / HTTP/1.1\r\n" .. H .. "\r\n",
    expect = "POST /read HTTP/1.1\r\n" .. H .. "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n"
      .. T .. "abc",
    expect_unread = "POST /close HTTP/1.1\r\n" .. H .. "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    too_large = "POST / HTTP/1.1\r\n" .. H .. "Content-Length: 5000\r\n\r\n" .. ("z"):rep(100),
    keepalive_limit = ("GET / HTTP/1.1\r\n" .. H .. "\r\n"):rep(7),
    http10_keepalive = "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
    bad_then_good = "GET / HTTP/1.1\r\nBad Header\r\n\r\nGET / HTTP/1.1\r\n" .. H .. "\r\n",
    incomplete = "GET / HTTP/1.1\r\n" .. H,
    body_cut = "POST /read HTTP/1.1\r\n" .. H .. "Content-Length: 10\r\n\r\nabc",
    chunked_bad = "POST / HTTP/1.1\r\n" .. H .. "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    long_line = "GET /" .. ("a"):rep(300) .. " HTTP/1.1\r\n" .. H .. "\r\n",
    upgrade = "GET / HTTP/1.1\r\n" .. H .. "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
  }
  for name, data in pairs(cases) do write(dir, name, data) end
end

-- -- HTTP/2 connections -----------------------------------------------------

local function be(n, bytes)
  local t = {}
  for i = bytes, 1, -1 do
    t[i] = char(n % 256)
    n = math.floor(n / 256)
  end
  return concat(t)
end

-- A frame: type, flags, stream id, payload (RFC 9113 4.1).
local function h2frame(ty, flags, id, payload)
  return be(#payload, 3) .. char(ty, flags) .. be(id, 4) .. payload
end

-- A header block of literal fields without indexing, no Huffman (RFC 7541
-- 6.2.2), each name and value under 127 bytes.
local function hpack(fields)
  local t = {}
  for _, f in ipairs(fields) do t[#t + 1] = char(0, #f[1]) .. f[1] .. char(#f[2]) .. f[2] end
  return concat(t)
end

local function h2_seeds()
  local dir = "spec/fuzz/corpus/h2_conn"
  local PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
  local DATA, HEADERS, PRIORITY, RST, SETTINGS, PING, GOAWAY, WU, CONT = 0, 1, 2, 3, 4, 6, 7, 8, 9
  local ES, EH, PADDED, PRIO = 1, 4, 8, 32
  local function req(method, path, extra)
    local f = { { ":method", method }, { ":scheme", "http" }, { ":path", path }, { ":authority", "f" } }
    for _, e in ipairs(extra or {}) do f[#f + 1] = e end
    return hpack(f)
  end
  local function get(id, path) return h2frame(HEADERS, ES + EH, id, req("GET", path)) end
  local start = PREFACE .. h2frame(SETTINGS, 0, 0, "")
  local post = req("POST", "/read", { { "content-length", "10" } })
  local cases = {
    get = start .. get(1, "/"),
    settings_ack = start .. T .. h2frame(SETTINGS, 1, 0, "") .. get(1, "/"),
    settings_values = PREFACE .. h2frame(SETTINGS, 0, 0, be(1, 2) .. be(0, 4) .. be(4, 2) .. be(10, 4)
      .. be(5, 2) .. be(16384, 4)) .. get(1, "/stream"),
    streams = start .. get(1, "/a") .. get(3, "/stream") .. get(5, "/sleep") .. get(7, "/err")
      .. get(9, "/hijack") .. get(11, "/close"),
    post_read = start .. h2frame(HEADERS, EH, 1, post) .. h2frame(DATA, 0, 1, "01234") .. T
      .. h2frame(DATA, ES, 1, "56789"),
    post_chunks = start .. h2frame(HEADERS, EH, 1, req("POST", "/chunks"))
      .. h2frame(DATA, PADDED, 1, char(3) .. "abcdefg" .. "\0\0\0") .. h2frame(DATA, ES, 1, "hij"),
    body_too_large = start .. h2frame(HEADERS, EH, 1, req("POST", "/", { { "content-length", "5000" } }))
      .. h2frame(DATA, 0, 1, ("z"):rep(3000)) .. get(3, "/"),
    body_unread = start .. h2frame(HEADERS, EH, 1, req("POST", "/close")) .. T
      .. h2frame(DATA, 0, 1, ("y"):rep(1000)),
    length_mismatch = start .. h2frame(HEADERS, EH, 1, post) .. h2frame(DATA, ES, 1, "abc"),
    trailers = start .. h2frame(HEADERS, EH, 1, req("POST", "/read")) .. h2frame(DATA, 0, 1, "abc")
      .. h2frame(HEADERS, ES + EH, 1, hpack({ { "x-t", "1" } })),
    continuation = start .. h2frame(HEADERS, ES, 1, req("GET", "/a"):sub(1, 20)) .. T
      .. h2frame(CONT, EH, 1, req("GET", "/a"):sub(21)),
    rst = start .. h2frame(HEADERS, EH, 1, post) .. h2frame(RST, 0, 1, be(8, 4)) .. get(3, "/"),
    rst_sleep = start .. get(1, "/sleep") .. h2frame(RST, 0, 1, be(0, 4)),
    ping_window = start .. h2frame(PING, 0, 0, "12345678") .. h2frame(WU, 0, 0, be(1000, 4))
      .. h2frame(WU, 0, 1, be(1, 4)) .. get(1, "/stream"),
    priority = start .. h2frame(PRIORITY, 0, 3, be(1, 4) .. char(16))
      .. h2frame(HEADERS, ES + EH + PRIO, 1, be(0, 4) .. char(200) .. req("GET", "/")),
    goaway = start .. get(1, "/sleep") .. h2frame(GOAWAY, 0, 0, be(1, 4) .. be(0, 4)),
    bad_header = start .. h2frame(HEADERS, ES + EH, 1, req("GET", "/", { { "Upper", "x" } })) .. get(3, "/"),
    big_header = start .. h2frame(HEADERS, ES + EH, 1, req("GET", "/", { { "x-a", ("a"):rep(120) },
      { "x-b", ("b"):rep(120) }, { "x-c", ("c"):rep(120) }, { "x-d", ("d"):rep(120) },
      { "x-e", ("e"):rep(120) } })),
    window_zero = PREFACE .. h2frame(SETTINGS, 0, 0, be(4, 2) .. be(0, 4)) .. get(1, "/stream") .. T
      .. h2frame(WU, 0, 1, be(100, 4)) .. h2frame(WU, 0, 0, be(100, 4)),
    even_stream = start .. get(2, "/"),
    preface_split = PREFACE:sub(1, 10) .. T .. PREFACE:sub(11) .. h2frame(SETTINGS, 0, 0, "") .. get(1, "/"),
    cut = start .. h2frame(HEADERS, EH, 1, post):sub(1, 12),
  }
  for name, data in pairs(cases) do write(dir, name, data) end
end

ws_seeds()
resp_seeds()
conn_seeds()
h2_seeds()
