-- Writes the seed corpus of the HTTP parser fuzzer: one file per framing
-- case (spec/fuzz/http_cases.lua, as spec/http_framing_spec.lua sends it,
-- GET /canary behind it), plus valid pipelined and chunked streams cut
-- into reads at awkward places. From the repository root:
--   build/cohost spec/fuzz/make_corpus.lua [dir]   (default spec/fuzz/corpus/http_parse)
-- The harness's read marker is "~|~" (see fuzz_http_parse.c).
local C = require "spec.fuzz.http_cases"

local dir = arg and arg[1] or "spec/fuzz/corpus/http_parse"
local CUT = "~|~"
local CANARY = "GET /canary HTTP/1.1\r\nHost: t\r\n\r\n"
local head = C.head

local function slug(name)
  return (name:lower():gsub("[^%w]+", "-"):gsub("^-+", ""):gsub("-+$", ""))
end

local function write(name, data)
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(data)
  f:close()
end

-- Cuts s before every step-th byte.
local function every(s, step)
  local t = {}
  for i = 1, #s, step do t[#t + 1] = s:sub(i, i + step - 1) end
  return table.concat(t, CUT)
end

local n = 0
for _, c in ipairs(C.cases) do
  local data = c.parts and table.concat(c.parts, CUT) or c.raw
  write("case-" .. slug(c[1]), data .. CANARY)
  n = n + 1
end

local POST = "POST /p HTTP/1.1"
local chunked = head(POST, "Host: t", "Transfer-Encoding: chunked")
  .. "5;ext=1\r\nhello\r\n1a\r\n" .. ("z"):rep(26) .. "\r\n0\r\nX-T: 1\r\n\r\n"
local extra = {
  ["ok-pipelined-mixed"] = head("GET /a?x=1 HTTP/1.1", "Host: t")
    .. head(POST, "Host: t", "Content-Length: 5") .. "hello"
    .. chunked
    .. head("HEAD /h HTTP/1.1", "Host: t", "Connection: close"),
  ["ok-chunked-cut-everywhere"] = chunked:sub(1, 60) .. CUT .. every(chunked:sub(61), 1),
  ["ok-chunked-cut-in-size-and-crlf"] = head(POST, "Host: t", "Transfer-Encoding: chunked")
    .. "1" .. CUT .. "0\r" .. CUT .. "\n" .. ("d"):rep(15) .. CUT .. ("d"):rep(1) .. "\r"
    .. CUT .. "\n0\r\n" .. CUT .. "\r\n" .. CANARY,
  ["ok-content-length-cut"] = head(POST, "Host: t", "Content-Length: 11")
    .. "hello" .. CUT .. " world" .. CANARY,
  ["ok-head-cut-every-3"] = every(head("GET /x HTTP/1.1", "Host: t", "Accept: */*",
    "User-Agent: fuzz"), 3),
  ["ok-expect-continue"] = head(POST, "Host: t", "Content-Length: 3", "Expect: 100-continue")
    .. "abc",
  ["ok-http10-keepalive-pipelined"] = head("GET / HTTP/1.0", "Connection: keep-alive")
    .. head("POST /p HTTP/1.0", "Content-Length: 2") .. "ok",
  ["ok-options-star"] = head("OPTIONS * HTTP/1.1", "Host: t"),
  ["ok-connect-authority"] = head("CONNECT t:443 HTTP/1.1", "Host: t:443"),
  ["ok-leading-empty-lines-cut"] = "\r" .. CUT .. "\n\r\n" .. CUT .. head("GET / HTTP/1.1", "Host: t"),
  ["ok-many-chunks"] = head(POST, "Host: t", "Transfer-Encoding: chunked")
    .. ("1\r\nx\r\n"):rep(64) .. "0\r\n\r\n",
}
for name, data in pairs(extra) do
  write(name, data)
  n = n + 1
end
print(("%d seeds in %s"):format(n, dir))
