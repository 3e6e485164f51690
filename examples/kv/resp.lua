-- RESP2: the request parser and reply encoders. The parser works on a
-- string buffer with byte positions (no copies but the arguments
-- themselves), so a connection can parse every complete request it has
-- received in one go and answer them with one send. Limits and error
-- texts are Redis 7.0's (networking.c: processMultibulkBuffer,
-- processInlineBuffer).
local M = {}

local byte, find, sub, char = string.byte, string.find, string.sub, string.char
local tostring, tonumber, format = tostring, tonumber, string.format
local concat = table.concat
local type, rawget, setmetatable = type, rawget, setmetatable
local ints = require "kv.ints"

M.MAX_INLINE = 64 * 1024            -- PROTO_INLINE_MAX_SIZE
M.MAX_MBULK = 2147483647            -- INT_MAX, as Redis
M.MAX_BULK = 512 * 1024 * 1024      -- proto-max-bulk-len

local CR, LF, STAR, DOLLAR, MINUS = 13, 10, 42, 36, 45

-- Reads the decimal integer that starts at buf[i] and ends with CR, the
-- way Redis's string2ll accepts it (optional '-', no leading zeros, no
-- "-0", no spaces, within a long long). Returns value, position of the
-- CR; nil, nil if the CR has not arrived (or its LF); false if the text
-- is not such an integer. Past 2^53 the value is inexact, but it is only
-- ever compared with limits far below that (or with 0).
local LLONG_MAX, LLONG_MIN_ABS = "9223372036854775807", "9223372036854775808"

local function header_int_loop(buf, i, len)
  local neg = false
  if byte(buf, i) == MINUS then neg = true; i = i + 1 end
  local start, n = i, 0
  while true do
    if i > len then return nil end
    local c = byte(buf, i)
    if c == CR then break end
    if c < 48 or c > 57 or i - start >= 19 then return false end
    n = n * 10 + (c - 48)
    i = i + 1
  end
  if i + 1 > len then return nil end   -- the LF after the CR
  local digits = i - start
  if digits == 0 or (digits > 1 and byte(buf, start) == 48) or (neg and n == 0) then return false end
  -- Same-length decimal strings compare as their numbers.
  if digits == 19 and sub(buf, start, i - 1) > (neg and LLONG_MIN_ABS or LLONG_MAX) then return false end
  return neg and -n or n, i
end

-- header_int for the common case first, without a loop: one to four
-- digits, no sign, no leading zero; else header_int_loop. The connection
-- loop (server.lua) can only be compiled as one trace if no loop inside
-- it has a trace of its own: LuaJIT aborts a root trace that meets a
-- compiled inner loop ("inner loop in root trace") and after a few tries
-- blacklists the outer loop, and then every trace that comes back to it
-- (docs/benchmarks.md, issue 35's types). A digit loop run for every
-- header of every request was the first to be compiled. (The handlers'
-- loops are out of its way: server.lua calls them through cohost.xpcall.)
local function header_int(buf, i, len)
  local c = byte(buf, i)
  if c and c >= 49 and c <= 57 and i + 2 <= len then
    local n, d = c - 48, byte(buf, i + 1)
    if d == CR then return n, i + 1 end
    if d >= 48 and d <= 57 and i + 3 <= len then
      n, d = n * 10 + d - 48, byte(buf, i + 2)
      if d == CR then return n, i + 2 end
      if d >= 48 and d <= 57 and i + 4 <= len then
        n, d = n * 10 + d - 48, byte(buf, i + 3)
        if d == CR then return n, i + 3 end
        if d >= 48 and d <= 57 and i + 5 <= len then
          n, d = n * 10 + d - 48, byte(buf, i + 4)
          if d == CR then return n, i + 4 end
        end
      end
    end
  end
  return header_int_loop(buf, i, len)
end

-- Splits an inline request line into arguments as Redis's sdssplitargs:
-- blanks separate, "double quotes" take \n \r \t \b \a \\ \" and \xHH,
-- 'single quotes' take \'; a closing quote must be followed by a blank.
-- Returns the count (filling argv), or nil for unbalanced quotes.
local escapes = { n = "\n", r = "\r", t = "\t", b = "\b", a = "\a" }

-- A line with a quote: byte by byte, as sdssplitargs reads it.
local function split_quoted(line, argv)
  local argc, i, len = 0, 1, #line
  while true do
    i = find(line, "[^ \t\n\r\v\f]", i)
    if not i then return argc end
    local parts, np = {}, 0
    local inq, insq = false, false
    while true do
      local c = sub(line, i, i)
      if inq then
        if c == "" then return nil end
        if c == "\\" and sub(line, i + 1, i + 1) == "x"
            and find(sub(line, i + 2, i + 3), "^%x%x$") then
          np = np + 1; parts[np] = char(tonumber(sub(line, i + 2, i + 3), 16))
          i = i + 3
        elseif c == "\\" and i < len then
          local e = sub(line, i + 1, i + 1)
          np = np + 1; parts[np] = escapes[e] or e
          i = i + 1
        elseif c == '"' then
          local nx = sub(line, i + 1, i + 1)
          if nx ~= "" and not find(nx, "^[ \t\n\r\v\f]") then return nil end
          inq = false
          i = i + 1
          break
        else
          np = np + 1; parts[np] = c
        end
      elseif insq then
        if c == "" then return nil end
        if c == "\\" and sub(line, i + 1, i + 1) == "'" then
          np = np + 1; parts[np] = "'"
          i = i + 1
        elseif c == "'" then
          local nx = sub(line, i + 1, i + 1)
          if nx ~= "" and not find(nx, "^[ \t\n\r\v\f]") then return nil end
          insq = false
          i = i + 1
          break
        else
          np = np + 1; parts[np] = c
        end
      else
        -- Unquoted, only these end an argument: sdssplitargs keeps \v
        -- and \f inside one, though it skips them between arguments.
        if c == "" or find(c, "^[ \t\n\r]") then break end
        if c == '"' then inq = true
        elseif c == "'" then insq = true
        else np = np + 1; parts[np] = c end
      end
      i = i + 1
    end
    argc = argc + 1
    argv[argc] = concat(parts)
  end
end

-- Splits the line buf[s..e] in place: the common line has no quote, and
-- its arguments are found byte by byte in loops the JIT compiles, one sub
-- each (patterns and a copy of the line cost several times as much: they
-- run in the interpreter's C matcher). A quote anywhere sends the line to
-- split_quoted, as sdssplitargs treats one inside a word too.
local function split_inline(buf, s, e, argv)
  local argc, i = 0, s
  while true do
    local b
    while i <= e do                                  -- blanks: isspace
      b = byte(buf, i)
      if b ~= 32 and (b < 9 or b > 13) then break end
      i = i + 1
    end
    if i > e then return argc end
    local j = i
    while j <= e do                                  -- a word: up to space, \t, \n, \r
      b = byte(buf, j)
      if b == 32 or b == 9 or b == 10 or b == 13 then break end
      if b == 34 or b == 39 then return split_quoted(sub(buf, s, e), argv) end
      j = j + 1
    end
    argc = argc + 1
    argv[argc] = sub(buf, i, j - 1)
    i = j + 1
  end
end

-- Parses one request at buf[pos..len] into argv. Returns:
--   argc, next              a request of argc arguments (argc may be 0:
--                           an empty line or "*0", nothing to run), and
--                           inline = true as a third value for inline ones
--   nil, need               incomplete; need is the byte count from pos
--                           that would complete it when known (a bulk)
--   nil, need, a, s, l, n   the same while waiting for the body of bulk
--                           a (of n) that starts at s and is l bytes
--                           long: the caller may read a large body apart
--                           and go on with parse_rest
--   false, message          a protocol error: reply it, then close
local parse_rest
function M.parse(buf, pos, len, argv)
  if byte(buf, pos) ~= STAR then
    -- Inline: a line of blank-separated words.
    local nl = find(buf, "\n", pos, true)
    if not nl then
      if len - pos + 1 > M.MAX_INLINE then return false, "Protocol error: too big inline request" end
      return nil
    end
    local e = nl - 1
    if e >= pos and byte(buf, e) == CR then e = e - 1 end
    if argv.at then argv.n = 0 end   -- a lazy argv: every word is a string
    local argc = split_inline(buf, pos, e, argv)
    if not argc then return false, "Protocol error: unbalanced quotes in request" end
    return argc, nl + 1, true
  end
  local n, i = header_int(buf, pos + 1, len)
  if n == nil then
    if len - pos + 1 > M.MAX_INLINE then return false, "Protocol error: too big mbulk count string" end
    return nil
  end
  if not n or n > M.MAX_MBULK then return false, "Protocol error: invalid multibulk length" end
  i = i + 2
  if n <= 0 then return 0, i end
  return parse_rest(buf, i, len, argv, n, 1, pos)
end

-- Parses argument a of a request of n at buf[i..len] into argv[a] (pos:
-- where the request started, for need). Returns the index after it, or
-- what parse returns for an incomplete or bad request.
local function one_arg(buf, i, len, argv, n, a, pos)
  if i > len then return nil end
  if byte(buf, i) ~= DOLLAR then
    return false, format("Protocol error: expected '$', got '%s'", sub(buf, i, i))
  end
  local l, e = header_int(buf, i + 1, len)
  if l == nil then
    if len - i + 1 > M.MAX_INLINE then return false, "Protocol error: too big bulk count string" end
    return nil
  end
  if not l or l < 0 or l > M.MAX_BULK then return false, "Protocol error: invalid bulk length" end
  local s = e + 2
  local stop = s + l + 1            -- the LF after the body
  if stop > len then return nil, stop - pos + 1 + (n - a) * 4, a, s, l, n end
  local at = argv.at
  if at then
    argv[a] = nil   -- made when read (M.lazy_argv)
    at[a], argv.len[a] = s, l
  else
    argv[a] = sub(buf, s, s + l - 1)
  end
  return stop + 1
end

-- Parses arguments first..n of a request of n at buf[i..len] (pos: where
-- the request started, for need). Returns as parse. Up to five arguments
-- (most commands) without a loop, as header_int.
function parse_rest(buf, i, len, argv, n, first, pos)
  if argv.at then argv.buf, argv.n = buf, n end
  if n - first < 5 then
    local a, r, x2, x3, x4, x5, x6 = first, i
    r, x2, x3, x4, x5, x6 = one_arg(buf, r, len, argv, n, a, pos)
    if not r or a == n then return r and n, r or x2, x3, x4, x5, x6 end
    a = a + 1
    r, x2, x3, x4, x5, x6 = one_arg(buf, r, len, argv, n, a, pos)
    if not r or a == n then return r and n, r or x2, x3, x4, x5, x6 end
    a = a + 1
    r, x2, x3, x4, x5, x6 = one_arg(buf, r, len, argv, n, a, pos)
    if not r or a == n then return r and n, r or x2, x3, x4, x5, x6 end
    a = a + 1
    r, x2, x3, x4, x5, x6 = one_arg(buf, r, len, argv, n, a, pos)
    if not r or a == n then return r and n, r or x2, x3, x4, x5, x6 end
    r, x2, x3, x4, x5, x6 = one_arg(buf, r, len, argv, n, a + 1, pos)
    return r and n, r or x2, x3, x4, x5, x6
  end
  for a = first, n do
    local r, x2, x3, x4, x5, x6 = one_arg(buf, i, len, argv, n, a, pos)
    if not r then return r, x2, x3, x4, x5, x6 end
    i = r
  end
  return n, i
end
M.parse_rest = parse_rest

-- -- Arguments made when read ---------------------------------------------

-- An argv for parse whose arguments are made into strings when a handler
-- first reads them, from where parse found them (argv.buf, argv.at[i],
-- argv.len[i], for i up to argv.n): one that is never read as a string
-- (SETBIT's offset, read by M.int_arg) is never made. Each new string is
-- interned: a lookup in LuaJIT's string table (a cache miss or two on a
-- table of some 10^5 strings), and a sweep later; a random offset per
-- request was a new string each time (docs/benchmarks.md). Only for
-- one request at a time, from the buffer it was parsed from: a caller
-- that lets go of the buffer first makes the strings it still needs.
local LAZY = {
  __index = function(argv, i)
    if type(i) ~= "number" or i > argv.n then return nil end
    local s = argv.at[i]
    local v = sub(argv.buf, s, s + argv.len[i] - 1)
    argv[i] = v
    return v
  end,
}

function M.lazy_argv()
  local argv = setmetatable({ at = {}, len = {}, n = 0, buf = "" }, LAZY)
  return argv   -- not a tail call: see server.lua's new_client
end

-- Argument i of argv as an integer the way ints.parse reads one, or nil;
-- from the request's bytes when argv is lazy and has not made its string.
function M.int_arg(argv, i)
  local at = argv.at
  if at and rawget(argv, i) == nil and i <= argv.n then
    return ints.parse_at(argv.buf, at[i], argv.len[i])
  end
  return ints.parse(argv[i])
end

-- A large value (resp.BIG or more) is read apart, into C memory (not the
-- Lua heap), and becomes one Lua string at the end: a 512 MB value costs
-- 512 MB of Lua heap, where appending reads to a buffer would cost two
-- or three times that. If the heap cannot take it, the request gets an
-- error and the connection goes on.
local ffi = require "ffi"
ffi.cdef [[
void *malloc(size_t size);
void free(void *p);
]]
local BIG_READ = 4 * 1024 * 1024   -- bytes per receive of a large value
local COLLECT_EVERY = 64 * 1024 * 1024   -- a full collection per this many read (O(heap))

-- Reads the l bytes of a value and its CRLF, of which have (a string) has
-- arrived, the rest through read(n) -> up to n bytes, or nil. Returns the
-- value; or nil and an error reply (the bytes were read all the same, so
-- the connection stays in step); or false when read failed. Yields if
-- read does.
function M.read_value(read, have, l)
  local total = l + 2
  local mem = ffi.cast("uint8_t *", ffi.C.malloc(total))
  local got = #have
  if mem ~= nil then ffi.copy(mem, have, got) end
  have = nil   -- luacheck: ignore
  while got < total do
    local want = total - got
    local data = read(want < BIG_READ and want or BIG_READ)
    if not data or data == "" then
      if mem ~= nil then ffi.C.free(mem) end
      return false
    end
    if mem ~= nil then ffi.copy(mem + got, data, #data) end
    got = got + #data
    data = nil   -- luacheck: ignore
    -- The pieces read are garbage the collector's pace would leave
    -- around for long: a 512 MB value would need twice that in the heap.
    if got % COLLECT_EVERY < BIG_READ then collectgarbage() end
  end
  if mem == nil then return nil, "-ERR no memory for a value of " .. l .. " bytes\r\n" end
  local ok, v = pcall(ffi.string, mem, l)
  ffi.C.free(mem)
  if not ok then
    collectgarbage()
    return nil, M.err(format("ERR the value of %d bytes does not fit in the memory left (%s)",
                                l, tostring(v)))
  end
  return v
end

-- -- Replies -------------------------------------------------------------
--
-- Every writer appends to out after position n and returns the new
-- length. The protocol is the answered client's, RESP2 or RESP3 (after
-- HELLO 3): the dispatcher sets it with use() before each command, so no
-- writer needs the client. RESP3 differs in nulls, maps, sets, doubles,
-- verbatim text and pushes; everything else is written the same.

local v3 = false

-- Answers from now on in RESP3 (proto 3) or RESP2.
function M.use(proto)
  v3 = proto == 3
end

-- Whether the client being answered speaks RESP3.
function M.is3()
  return v3
end

M.OK = "+OK\r\n"
M.PONG = "+PONG\r\n"
M.EMPTY_ARRAY = "*0\r\n"
M.ZERO = ":0\r\n"
M.ONE = ":1\r\n"
M.WRONGTYPE = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
M.NOT_INT = "-ERR value is not an integer or out of range\r\n"
M.SYNTAX = "-ERR syntax error\r\n"
M.OUT_OF_RANGE = "-ERR value is out of range, value must between -9223372036854775807 and "
  .. "9223372036854775807\r\n"

-- "$<n>\r\n" and "*<n>\r\n" for small n, made once.
local bulk_heads, array_heads = {}, {}
for n = 0, 1023 do
  bulk_heads[n] = "$" .. n .. "\r\n"
  array_heads[n] = "*" .. n .. "\r\n"
end
M.bulk_heads = bulk_heads

-- Integer replies for small values, made once.
local ints = {}
for n = -1, 1023 do ints[n] = ":" .. n .. "\r\n" end

-- A decimal integer as Redis prints it (tostring gives 1e+15 past 1e14).
local function int_str(n)
  if n > -1e14 and n < 1e14 then return tostring(n) end
  if n >= 2 ^ 63 then return "9223372036854775807" end   -- format would wrap
  return format("%d", n)
end
M.int_str = int_str

function M.int(n)
  return ints[n] or ":" .. int_str(n) .. "\r\n"
end

-- Appends an integer reply for n. Past the cached values it appends the
-- number itself, which table.concat prints into the batch: no string is
-- made per reply.
function M.int_into(out, n_out, n)
  local s = ints[n]
  if s then
    out[n_out + 1] = s
    return n_out + 1
  end
  if n <= -1e14 or n >= 1e14 then
    out[n_out + 1] = ":" .. int_str(n) .. "\r\n"
    return n_out + 1
  end
  out[n_out + 1] = ":"
  out[n_out + 2] = n
  out[n_out + 3] = "\r\n"
  return n_out + 3
end

-- Appends reply (a whole RESP string): what most handlers return with.
function M.put(out, n, reply)
  out[n + 1] = reply
  return n + 1
end

-- Appends a bulk string for s (a string, or a counter kept as a number).
-- Three pieces: the string is not copied.
M.BIG = 1024 * 1024   -- a value this large is never copied into a batch
M.big_reply = false   -- set when a reply holds a BIG value

function M.bulk(out, n, s)
  if type(s) == "number" then s = tostring(s) end
  local l = #s
  if l >= M.BIG then M.big_reply = true end
  out[n + 1] = bulk_heads[l] or "$" .. l .. "\r\n"
  out[n + 2] = s
  out[n + 3] = "\r\n"
  return n + 3
end

-- The same as one string, for a queue or a log.
function M.bulk_str(s)
  if type(s) == "number" then s = tostring(s) end
  local l = #s
  return (bulk_heads[l] or "$" .. l .. "\r\n") .. s .. "\r\n"
end

function M.array_head(count)
  return array_heads[count] or "*" .. count .. "\r\n"
end

-- The null reply: a missing value (RESP2 "$-1").
function M.null(out, n)
  out[n + 1] = v3 and "_\r\n" or "$-1\r\n"
  return n + 1
end

-- The null array (RESP2 "*-1": a timed-out BLPOP, an aborted EXEC).
function M.null_array(out, n)
  out[n + 1] = v3 and "_\r\n" or "*-1\r\n"
  return n + 1
end

-- The head of an array of count replies.
function M.array(out, n, count)
  out[n + 1] = array_heads[count] or "*" .. count .. "\r\n"
  return n + 1
end

-- The head of a map of count pairs (RESP2: an array of 2 * count).
function M.map(out, n, count)
  if v3 then
    out[n + 1] = "%" .. count .. "\r\n"
  else
    count = count * 2
    out[n + 1] = array_heads[count] or "*" .. count .. "\r\n"
  end
  return n + 1
end

-- The head of a set of count replies (RESP2: an array).
function M.set(out, n, count)
  out[n + 1] = v3 and "~" .. count .. "\r\n" or array_heads[count] or "*" .. count .. "\r\n"
  return n + 1
end

-- A double as Redis 7.0 prints one (a score): "%.17g", inf and -inf; RESP2
-- as a bulk string.
local huge = math.huge
local function double_str(v)
  if v == huge then return "inf" end
  if v == -huge then return "-inf" end
  return format("%.17g", v)
end
M.double_str = double_str

function M.double(out, n, v)
  if v3 then
    out[n + 1] = "," .. double_str(v) .. "\r\n"
    return n + 1
  end
  return M.bulk(out, n, double_str(v))
end

-- Text for people (INFO, CLIENT LIST): RESP3's verbatim string "txt".
function M.verbatim(out, n, s)
  if not v3 then return M.bulk(out, n, s) end
  out[n + 1] = "=" .. (#s + 4) .. "\r\ntxt:"
  out[n + 2] = s
  out[n + 3] = "\r\n"
  return n + 3
end

-- A boolean (RESP2: 1 or 0).
function M.bool(out, n, b)
  if v3 then out[n + 1] = b and "#t\r\n" or "#f\r\n"
  else out[n + 1] = b and ":1\r\n" or ":0\r\n" end
  return n + 1
end

-- The head of an out-of-band message of count items for a client of
-- protocol proto (pub/sub: RESP3's push type), built for another client
-- than the one being answered.
function M.push_head(count, proto)
  return (proto == 3 and ">" or "*") .. count .. "\r\n"
end

-- The null bulk for a client of protocol proto (as push_head).
function M.null_for(proto)
  return proto == 3 and "_\r\n" or "$-1\r\n"
end

-- An error reply for msg (which starts with its code, "ERR ...").
-- CR and LF would break the framing: Redis replaces them with spaces.
function M.err(msg)
  return "-" .. msg:gsub("[\r\n]", " ") .. "\r\n"
end

function M.simple(s)
  return "+" .. s .. "\r\n"
end

-- Appends an array of the count strings in list.
function M.bulk_array(out, n, list, count)
  n = n + 1
  out[n] = array_heads[count] or "*" .. count .. "\r\n"
  for i = 1, count do n = M.bulk(out, n, list[i]) end
  return n
end

-- The same as a set (SMEMBERS, SINTER...).
function M.bulk_set(out, n, list, count)
  n = M.set(out, n, count)
  for i = 1, count do n = M.bulk(out, n, list[i]) end
  return n
end

-- The same as an array of pieces, for a request with a large value: no
-- copy of the value is made (the log writes the pieces with writev).
function M.encode_parts(argv, argc)
  local t = { "*" .. argc .. "\r\n" }
  for i = 1, argc do
    local a = argv[i]
    t[#t + 1] = bulk_heads[#a] or "$" .. #a .. "\r\n"
    t[#t + 1] = a
    t[#t + 1] = "\r\n"
  end
  return t
end

-- A request as RESP (for the log): argv[1..argc]; as pieces (an array,
-- see encode_parts) when an argument is a large value, which the log
-- writes without joining.
function M.encode(argv, argc)
  for i = 1, argc do
    if #argv[i] >= M.BIG then return M.encode_parts(argv, argc) end
  end
  local t = { "*" .. argc .. "\r\n" }
  for i = 1, argc do
    local a = argv[i]
    t[#t + 1] = bulk_heads[#a] or "$" .. #a .. "\r\n"
    t[#t + 1] = a
    t[#t + 1] = "\r\n"
  end
  return concat(t)
end

return M
