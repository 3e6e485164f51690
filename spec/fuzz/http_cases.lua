-- The HTTP framing cases: raw request bytes and what the server must do
-- with them. spec/http_framing_spec.lua sends each one on its own
-- connection, followed by GET /canary; spec/fuzz/make_corpus.lua writes
-- each one as a seed of the parser fuzzer (parts joined by the harness's
-- read marker "~|~").
--
-- A case is { name, raw = bytes | parts = {bytes...}, status, stage, echo }:
--   stage "head"  the head is rejected with status: the handler never runs
--   stage "body"  the head is fine, the body is rejected with status: the
--                 handler runs for this message only (its req:body() fails)
--   stage "ok"    accepted: the handler answers echo ("METHOD path bodylen")
--   stage "ok+bad" a good request answered 200, then garbage: status
-- status may be a list when more than one answer is right.
-- parts: the bytes arrive in separate reads (the spec pauses between them).
local M = {}

local MAX_BODY = 65536   -- the spec's max_body_size
M.MAX_BODY = MAX_BODY

-- A request head: request line, then header lines, then the blank line.
local function head(line, ...)
  local t = { line }
  for _, hdr in ipairs { ... } do t[#t + 1] = hdr end
  return table.concat(t, "\r\n") .. "\r\n\r\n"
end
M.head = head

local POST = "POST /p HTTP/1.1"
local HOST = "Host: t"
local TE = "Transfer-Encoding: chunked"
local CHUNKED = head(POST, HOST, TE)

-- n headers "X-Hk: v" (Host not counted).
local function many(n, size)
  local t = { POST:gsub("POST /p", "GET /"), HOST }
  local pad = ("v"):rep(size or 1)
  for i = 1, n do t[#t + 1] = ("X-H%d: %s"):format(i, pad) end
  return table.concat(t, "\r\n") .. "\r\n\r\n"
end

M.cases = {
  -- Request smuggling: two framings, or a framing read two ways.
  { "Content-Length and Transfer-Encoding together", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 6", TE) .. "0\r\n\r\nX" },
  { "Transfer-Encoding then Content-Length", stage = "head", status = 400,
    raw = head(POST, HOST, TE, "Content-Length: 6") .. "0\r\n\r\nX" },
  { "two equal Content-Length headers", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 5", "Content-Length: 5") .. "hello" },
  { "two different Content-Length headers", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 5", "Content-Length: 6") .. "hello!" },
  { "a Content-Length list '5, 5'", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 5, 5") .. "hello" },
  { "a Content-Length with a plus sign", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: +5") .. "hello" },
  { "a negative Content-Length", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: -5") .. "hello" },
  { "a Content-Length with a space inside", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 1 0") .. "0123456789" },
  { "a hex Content-Length", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 0x5") .. "hello" },
  { "a Content-Length past 64 bits", stage = "head", status = 400,
    raw = head(POST, HOST, "Content-Length: 99999999999999999999999") .. "hello" },
  { "a Content-Length with spaces around it", stage = "ok", echo = "POST /p 5",
    raw = head(POST, HOST, "Content-Length:  5  ") .. "hello" },
  { "a Content-Length with a trailing tab (OWS)", stage = "ok", echo = "POST /p 5",
    raw = head(POST, HOST, "Content-Length:\t5\t") .. "hello" },
  { "Transfer-Encoding: chunked continued by obs-fold", stage = "head", status = 400,
    raw = head(POST, HOST, "Transfer-Encoding:", " chunked") .. "0\r\n\r\n" },
  { "Transfer-Encoding: chunked, chunked", stage = "head", status = 400,
    raw = head(POST, HOST, "Transfer-Encoding: chunked, chunked") .. "0\r\n\r\n" },
  { "two Transfer-Encoding: chunked headers", stage = "head", status = 400,
    raw = head(POST, HOST, TE, TE) .. "0\r\n\r\n" },
  { "Transfer-Encoding: gzip, chunked", stage = "head", status = 501,
    raw = head(POST, HOST, "Transfer-Encoding: gzip, chunked") .. "0\r\n\r\n" },
  { "Transfer-Encoding: gzip", stage = "head", status = 501,
    raw = head(POST, HOST, "Transfer-Encoding: gzip") .. "0\r\n\r\n" },
  { "Transfer-Encoding: chunked, gzip (chunked not last)", stage = "head", status = 400,
    raw = head(POST, HOST, "Transfer-Encoding: chunked, gzip") .. "0\r\n\r\n" },
  { "whitespace before the colon of Transfer-Encoding", stage = "head", status = 400,
    raw = head(POST, HOST, "Transfer-Encoding : chunked") .. "0\r\n\r\n" },
  { "a vertical tab before chunked", stage = "head", status = 400,
    raw = head(POST, HOST, "Transfer-Encoding:\vchunked") .. "0\r\n\r\n" },
  { "Transfer-Encoding on HTTP/1.0", stage = "head", status = 400,
    raw = head("POST /p HTTP/1.0", TE) .. "0\r\n\r\n" },
  { "Transfer-Encoding: CHUNKED in capitals", stage = "ok", echo = "POST /p 5",
    raw = head(POST, HOST, "Transfer-Encoding: CHUNKED") .. "5\r\nhello\r\n0\r\n\r\n" },
  { "Transfer-Encoding: chunked with a trailing tab (OWS)", stage = "ok", echo = "POST /p 5",
    raw = head(POST, HOST, "Transfer-Encoding: chunked\t") .. "5\r\nhello\r\n0\r\n\r\n" },

  -- Chunked bodies.
  { "a valid chunked body with an extension and a trailer", stage = "ok", echo = "POST /p 8",
    raw = CHUNKED .. "5;name=value\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n" },
  { "a non-hex chunk size", stage = "body", status = 400,
    raw = CHUNKED .. "zz\r\nhello\r\n0\r\n\r\n" },
  { "a negative chunk size", stage = "body", status = 400,
    raw = CHUNKED .. "-5\r\nhello\r\n0\r\n\r\n" },
  { "a chunk size past 64 bits", stage = "body", status = 400,
    raw = CHUNKED .. "10000000000000000000\r\nhello\r\n0\r\n\r\n" },
  { "chunk data not followed by CRLF", stage = "body", status = 400,
    raw = CHUNKED .. "5\r\nhelloXY0\r\n\r\n" },
  { "chunk data followed by a bare LF", stage = "body", status = 400,
    raw = CHUNKED .. "5\r\nhello\n0\r\n\r\n" },
  { "a chunk size line ending in a bare LF", stage = "body", status = 400,
    raw = CHUNKED .. "5\nhello\r\n0\r\n\r\n" },
  { "a chunk size line ending in a bare CR", stage = "body", status = 400,
    raw = CHUNKED .. "5\rXhello\r\n0\r\n\r\n" },
  { "a chunk extension without its semicolon", stage = "body", status = 400,
    raw = CHUNKED .. "5 x\r\nhello\r\n0\r\n\r\n" },
  { "a bare LF inside a chunk extension", stage = "body", status = 400,
    raw = CHUNKED .. "5;a\nb\r\nhello\r\n0\r\n\r\n" },
  { "a NUL inside a chunk extension", stage = "body", status = 400,
    raw = CHUNKED .. "5;a\0b\r\nhello\r\n0\r\n\r\n" },
  -- Node (CVE-2024-22019) and Go (CVE-2023-39326) cap extension bytes:
  -- an endless extension is an unbounded read for a 5-byte body.
  { "32 KiB of chunk extension on a 5-byte chunk", stage = "body", status = { 400, 413 },
    raw = CHUNKED .. "5;" .. ("x"):rep(32768) .. "\r\nhello\r\n0\r\n\r\n" },
  -- The size line's cap, 4096 bytes before its CR: digits, ";" and the
  -- extension all count (the fuzzer found the ";" left out, a line of
  -- 4097 passing: one byte, but a parser that disagrees with the grammar
  -- by a byte is where smuggling starts).
  { "a chunk size line of 4096 bytes", stage = "ok", echo = "POST /p 5",
    raw = CHUNKED .. "5;" .. ("x"):rep(4094) .. "\r\nhello\r\n0\r\n\r\n" },
  { "a chunk size line of 4097 bytes", stage = "body", status = 400,
    raw = CHUNKED .. "5;" .. ("x"):rep(4095) .. "\r\nhello\r\n0\r\n\r\n" },
  { "a bare LF inside a trailer", stage = "body", status = 400,
    raw = CHUNKED .. "5\r\nhello\r\n0\r\nX: y\nZ: w\r\n\r\n" },
  { "an obs-fold line in a trailer", stage = "body", status = 400,
    raw = CHUNKED .. "5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n" },
  { "whitespace before the colon in a trailer", stage = "body", status = 400,
    raw = CHUNKED .. "5\r\nhello\r\n0\r\nX : a\r\n\r\n" },
  { "a chunk size beyond max_body_size", stage = "body", status = 413,
    raw = CHUNKED .. ("%x\r\n"):format(MAX_BODY * 16) .. "abc" },
  { "a chunked body growing past max_body_size", stage = "body", status = 413,
    raw = CHUNKED .. ("400\r\n" .. ("c"):rep(1024) .. "\r\n"):rep(MAX_BODY / 1024 + 1) .. "0\r\n\r\n" },

  -- Sizes.
  { "a request line over 8 KiB", stage = "head", status = 414,
    raw = head("GET /" .. ("a"):rep(9000) .. " HTTP/1.1", HOST) },
  { "a request line over 8 KiB that has not ended", stage = "head", status = 414,
    raw = "GET /" .. ("a"):rep(9000) },
  { "one header over 8 KiB", stage = "head", status = 431,
    raw = head("GET / HTTP/1.1", HOST, "X-Big: " .. ("b"):rep(9000)) },
  { "a header block over 8 KiB in 60 headers", stage = "head", status = 431,
    raw = many(60, 150) },
  { "101 headers", stage = "head", status = 431, raw = many(100) },
  { "100 headers (the limit)", stage = "ok", echo = "GET / 0", raw = many(99) },
  { "a Content-Length beyond max_body_size", stage = "head", status = 413,
    raw = head(POST, HOST, "Content-Length: " .. MAX_BODY * 4) },

  -- Line endings and bytes.
  { "a bare LF ending the request line", stage = "head", status = 400,
    raw = "GET / HTTP/1.1\nHost: t\r\n\r\n" },
  { "a bare LF ending a header", stage = "head", status = 400,
    raw = "GET / HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n" },
  { "a bare LF ending the head", stage = "head", status = 400,
    raw = "GET / HTTP/1.1\r\nHost: t\r\n\n" },
  { "a bare CR inside a header", stage = "head", status = 400,
    raw = "GET / HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n" },
  { "a bare CR inside the request line", stage = "head", status = 400,
    raw = "GET /\r HTTP/1.1\r\nHost: t\r\n\r\n" },
  { "a bare CR after a colon, at the end of a read", stage = "head", status = 400,
    parts = { "GET / HTTP/1.1\r\nHost: t\r\nX-A:\r", "X-Evil: 1\r\n\r\n" } },
  { "a bare CR before the request line, at the end of a read", stage = "head", status = 400,
    parts = { "\r", "GET / HTTP/1.1\r\nHost: t\r\n\r\n" } },
  { "a bare CR ending a header, at the end of a read", stage = "head", status = 400,
    parts = { "GET / HTTP/1.1\r\nHost: t\r", "X-A: b\r\n\r\n" } },
  { "a NUL in a header value", stage = "head", status = 400,
    raw = "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n" },
  { "a NUL in the target", stage = "head", status = 400,
    raw = "GET /a\0b HTTP/1.1\r\nHost: t\r\n\r\n" },
  { "a control byte in a header name", stage = "head", status = 400,
    raw = "GET / HTTP/1.1\r\nHost: t\r\nX\1A: b\r\n\r\n" },
  { "an obs-fold continuation line", stage = "head", status = 400,
    raw = head("GET / HTTP/1.1", HOST, "X-A: one", " two") },
  { "a header line starting with a space", stage = "head", status = 400,
    raw = head("GET / HTTP/1.1", " Host: t") },
  { "a header without a colon", stage = "head", status = 400,
    raw = head("GET / HTTP/1.1", HOST, "X-A b") },
  { "an empty header name", stage = "head", status = 400,
    raw = head("GET / HTTP/1.1", HOST, ": b") },
  { "empty lines before the request line", stage = "ok", echo = "GET / 0",
    raw = "\r\n\r\n" .. head("GET / HTTP/1.1", HOST) },

  -- Host and version.
  { "HTTP/1.1 without Host", stage = "head", status = 400,
    raw = head("GET / HTTP/1.1", "X-A: b") },
  { "two Host headers", stage = "head", status = 400,
    raw = head("GET / HTTP/1.1", HOST, "Host: u") },
  { "HTTP/1.0 without Host, keep-alive", stage = "ok", echo = "GET / 0",
    raw = head("GET / HTTP/1.0", "Connection: keep-alive") },
  { "HTTP/2.0", stage = "head", status = 505, raw = head("GET / HTTP/2.0", HOST) },
  -- A higher minor version is served as HTTP/1.1 (RFC 9110 2.5), kept alive.
  { "HTTP/1.2, served as HTTP/1.1", stage = "ok", echo = "GET / 0", raw = head("GET / HTTP/1.2", HOST) },
  -- With HTTP/2 on (the default) the preface starts HTTP/2 (http2_spec).
  { "the HTTP/2 connection preface with opts.http2 = false", stage = "head", status = 505,
    raw = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", opts = { http2 = false } },
  { "a lower-case version", stage = "head", status = 400, raw = head("GET / http/1.1", HOST) },
  { "a request line without a version", stage = "head", status = 400, raw = "GET /\r\n\r\n" },

  -- Request line.
  { "a garbage method", stage = "head", status = 400, raw = head("G(T / HTTP/1.1", HOST) },
  { "two spaces in the request line", stage = "head", status = 400,
    raw = head("GET  / HTTP/1.1", HOST) },
  { "a target climbing above the root", stage = "head", status = 400,
    raw = head("GET /../etc/passwd HTTP/1.1", HOST) },
  { "a percent-encoded target climbing above the root", stage = "head", status = 400,
    raw = head("GET /%2e%2e/etc/passwd HTTP/1.1", HOST) },
  { "a target climbing above the root from below it", stage = "head", status = 400,
    raw = head("GET /a/../../etc/passwd HTTP/1.1", HOST) },
  { "a target with dot segments staying below the root", stage = "ok", echo = "GET /b 0",
    raw = head("GET /a/./../b HTTP/1.1", HOST) },
  { "an absolute-form target", stage = "ok", echo = "GET /x 0",
    raw = head("GET http://t/x?y=1 HTTP/1.1", HOST) },

  -- Pipelining.
  { "pipelined garbage after a good request", stage = "ok+bad", status = 400, echo = "GET /a 0",
    raw = head("GET /a HTTP/1.1", HOST) .. "garbage\r\n\r\n" },
}

return M
