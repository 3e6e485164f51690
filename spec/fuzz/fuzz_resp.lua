-- Fuzz driver for examples/kv/resp.lua's request parser (M.parse), run by
-- spec/fuzz/fuzz_lua.c.
--
-- Input: one config byte, then a client's bytes, with "~|~" where one
-- read ends (the markers are dropped). Config bit 0: small limits
-- (MAX_INLINE 64, MAX_BULK 100, MAX_MBULK 16) so the "too big" and
-- "invalid length" paths are reachable with short inputs; else Redis's.
--
-- The stream is parsed the way examples/kv/server.lua's loop does
-- (unconsumed bytes kept, reads appended, parse until incomplete or an
-- error), once over the reads and once over the whole stream. Invariants
-- (each failure raises "invariant failed: ..."):
--   - parse returns argc, next[, true] with next past pos and within the
--     buffer and argc strings in argv; nil[, need]; or false, message;
--   - the whole-stream run equals a reference parser written from Redis
--     7.0's networking.c (processMultibulkBuffer, processInlineBuffer,
--     sdssplitargs, string2ll), below: same requests, same arguments,
--     same error text;
--   - the run over the reads gives the same requests and verdict, except
--     that it may stop early with a "too big" error (Redis's limits apply
--     to what is buffered, so they depend on the reads), and only when
--     more than MAX_INLINE bytes were buffered;
--   - "need" (the bytes a pending request still wants, from its start)
--     never exceeds the request's real length: the server blocks for
--     exactly that many bytes, so more would hang a well-behaved client;
--   - every request re-encoded with M.encode parses back to the same
--     arguments, and every inline one re-written with "\xHH" quoting too.
--
-- Known, accepted differences from Redis, which the reference follows:
--   - a NUL byte is an ordinary byte (Redis's strchr and sdssplitargs stop
--     at it, so there an inline request with a NUL waits for more input);
--   - a bad byte in a length line fails at once, without waiting for CR;
--   - a length of more than 19 digits is invalid (Redis: string2ll fails
--     past LLONG_MAX, which also means invalid).
local resp = require "kv.resp"

local byte, char, sub, find, concat = string.byte, string.char, string.sub, string.find, table.concat

local MARKER = "~|~"
local DEFAULTS = { inline = resp.MAX_INLINE, bulk = resp.MAX_BULK, mbulk = resp.MAX_MBULK }
local SMALL = { inline = 64, bulk = 100, mbulk = 16 }

local function check(cond, what, ...)
  if not cond then
    error("invariant failed: " .. string.format(what, ...), 2)
  end
end

-- -- The reference ---------------------------------------------------------

local function is_space(c)   -- C isspace
  return c == " " or c == "\t" or c == "\n" or c == "\r" or c == "\v" or c == "\f"
end

local ESC = { n = "\n", r = "\r", t = "\t", b = "\b", a = "\a" }

-- sdssplitargs: a list of arguments, or nil for unbalanced quotes.
local function ref_split(line)
  local args, i, n = {}, 1, #line
  while true do
    while i <= n and is_space(sub(line, i, i)) do i = i + 1 end
    if i > n then return args end
    local cur, inq, insq = {}, false, false
    while true do
      local c = sub(line, i, i)
      if inq then
        if c == "\\" and sub(line, i + 1, i + 1) == "x" and sub(line, i + 2, i + 3):match("^%x%x$") then
          cur[#cur + 1] = char(tonumber(sub(line, i + 2, i + 3), 16))
          i = i + 3
        elseif c == "\\" and i + 1 <= n then
          i = i + 1
          local e = sub(line, i, i)
          cur[#cur + 1] = ESC[e] or e
        elseif c == '"' then
          local nx = sub(line, i + 1, i + 1)
          if nx ~= "" and not is_space(nx) then return nil end
          i = i + 1
          break
        elseif c == "" then
          return nil
        else
          cur[#cur + 1] = c
        end
      elseif insq then
        if c == "\\" and sub(line, i + 1, i + 1) == "'" then
          i = i + 1
          cur[#cur + 1] = "'"
        elseif c == "'" then
          local nx = sub(line, i + 1, i + 1)
          if nx ~= "" and not is_space(nx) then return nil end
          i = i + 1
          break
        elseif c == "" then
          return nil
        else
          cur[#cur + 1] = c
        end
      else
        -- An unquoted argument ends at these only (not \v or \f).
        if c == " " or c == "\n" or c == "\r" or c == "\t" or c == "" then break end
        if c == '"' then inq = true
        elseif c == "'" then insq = true
        else cur[#cur + 1] = c end
      end
      i = i + 1
    end
    args[#args + 1] = concat(cur)
  end
end

-- string2ll over the line at s[i..]: "ok", value, CR position;
-- "incomplete" (no CR, or nothing after it, and nothing wrong yet);
-- "invalid".
local function ref_int(s, i)
  local j, n = i, #s
  if sub(s, j, j) == "-" then j = j + 1 end
  local d0 = j
  while j <= n and find(sub(s, j, j), "^%d$") do j = j + 1 end
  if j - d0 > 19 then return "invalid" end
  if j > n then return "incomplete" end
  if sub(s, j, j) ~= "\r" then return "invalid" end
  if j + 1 > n then return "incomplete" end
  local digits = sub(s, d0, j - 1)
  if digits == "" or (#digits > 1 and sub(digits, 1, 1) == "0") then return "invalid" end
  if digits == "0" and d0 > i then return "invalid" end   -- "-0"
  local neg = d0 > i
  if #digits == 19 and digits > (neg and "9223372036854775808" or "9223372036854775807") then
    return "invalid"
  end
  local v = tonumber(digits)
  return "ok", neg and -v or v, j
end

-- One request at s[pos..]: "req", args, next, inline | "incomplete" |
-- "error", message.
local function ref_parse(s, pos, lim)
  local len = #s
  if sub(s, pos, pos) ~= "*" then
    local nl = find(s, "\n", pos, true)
    if not nl then
      if len - pos + 1 > lim.inline then return "error", "Protocol error: too big inline request" end
      return "incomplete"
    end
    local line = sub(s, pos, nl - 1)
    if sub(line, -1) == "\r" then line = sub(line, 1, -2) end
    local args = ref_split(line)
    if not args then return "error", "Protocol error: unbalanced quotes in request" end
    return "req", args, nl + 1, true
  end
  local st, n, cr = ref_int(s, pos + 1)
  if st == "incomplete" then
    if len - pos + 1 > lim.inline then return "error", "Protocol error: too big mbulk count string" end
    return "incomplete"
  end
  if st == "invalid" or n > lim.mbulk then return "error", "Protocol error: invalid multibulk length" end
  local p = cr + 2
  local args = {}
  if n <= 0 then return "req", args, p end
  for _ = 1, n do
    if p > len then return "incomplete" end
    if sub(s, p, p) ~= "$" then
      return "error", "Protocol error: expected '$', got '" .. sub(s, p, p) .. "'"
    end
    local st2, l, cr2 = ref_int(s, p + 1)
    if st2 == "incomplete" then
      if len - p + 1 > lim.inline then return "error", "Protocol error: too big bulk count string" end
      return "incomplete"
    end
    if st2 == "invalid" or l < 0 or l > lim.bulk then return "error", "Protocol error: invalid bulk length" end
    local b = cr2 + 2
    -- Redis skips the two bytes after the body without looking at them.
    if b + l + 1 > len then return "incomplete" end
    args[#args + 1] = sub(s, b, b + l - 1)
    p = b + l + 2
  end
  return "req", args, p
end

-- The reference over the whole stream: requests { start, stop, args,
-- inline } and the verdict ("end", "incomplete" or the error text).
local function reference(s, lim)
  local reqs, pos = {}, 1
  while pos <= #s do
    local kind, a, nxt, inline = ref_parse(s, pos, lim)
    if kind == "incomplete" then return reqs, "incomplete" end
    if kind == "error" then return reqs, a end
    reqs[#reqs + 1] = { start = pos, stop = nxt, args = a, inline = inline or false }
    pos = nxt
  end
  return reqs, "end"
end

-- -- The module, as the server drives it ----------------------------------

-- One parse call with its contract checked.
local function parse1(buf, pos, len, argv)
  local argc, nxt, inline = resp.parse(buf, pos, len, argv)
  if argc then
    check(type(argc) == "number" and argc >= 0 and argc == math.floor(argc), "argc %s", tostring(argc))
    check(type(nxt) == "number" and nxt > pos and nxt <= len + 1, "next %s from %d of %d", tostring(nxt), pos, len)
    check(inline == nil or inline == true, "inline flag %s", tostring(inline))
    local args = {}
    for k = 1, argc do
      check(type(argv[k]) == "string", "argv[%d] is a %s", k, type(argv[k]))
      args[k] = argv[k]
    end
    return args, nxt, inline or false
  elseif argc == nil then
    check(nxt == nil or (type(nxt) == "number" and nxt > len - pos + 1),
      "need %s with %d bytes buffered", tostring(nxt), len - pos + 1)
    return nil, nxt
  end
  check(argc == false and type(nxt) == "string" and find(nxt, "^Protocol error: "),
    "parse returned %s, %s", tostring(argc), tostring(nxt))
  return false, nxt
end

-- server.lua's loop over reads: requests (positions in the whole stream),
-- the verdict, the needs { start, need } and the bytes buffered at an
-- error.
local function run(reads)
  local reqs, needs = {}, {}
  local argv = {}
  local buf, pos, len, base = "", 1, 0, 0   -- buf[1] is stream byte base + 1
  for _, data in ipairs(reads) do
    if data ~= "" then
      if pos > len then
        base, buf = base + len, data
      else
        base, buf = base + pos - 1, sub(buf, pos) .. data
      end
      pos, len = 1, #buf
      while pos <= len do
        local args, nxt, inline = parse1(buf, pos, len, argv)
        if args == false then return reqs, nxt, needs, len - pos + 1 end
        if not args then
          if nxt then needs[#needs + 1] = { start = base + pos, need = nxt } end
          break
        end
        reqs[#reqs + 1] = { start = base + pos, stop = base + nxt, args = args, inline = inline }
        pos = nxt
      end
    end
  end
  return reqs, pos <= len and "incomplete" or "end", needs
end

local function same_req(a, b, what, i)
  check(a.start == b.start and a.stop == b.stop, "%s: request %d at %d..%d, expected %d..%d",
    what, i, a.start, a.stop, b.start, b.stop)
  check(a.inline == b.inline, "%s: request %d inline=%s", what, i, tostring(a.inline))
  check(#a.args == #b.args, "%s: request %d has %d arguments, expected %d", what, i, #a.args, #b.args)
  for k = 1, #a.args do
    check(a.args[k] == b.args[k], "%s: request %d argument %d is %q, expected %q", what, i, k,
      a.args[k], b.args[k])
  end
end

local function hex_quote(args)
  local t = {}
  for k, a in ipairs(args) do
    t[k] = '"' .. a:gsub(".", function(c) return string.format("\\x%02x", byte(c)) end) .. '"'
  end
  return concat(t, " ") .. "\r\n"
end

-- The whole string s must parse as one request of args.
local function reparse(s, args, inline, what)
  local argv = {}
  local got, nxt, inl = parse1(s, 1, #s, argv)
  check(got, "%s of %d arguments does not parse: %s", what, #args, tostring(nxt))
  check(nxt == #s + 1 and inl == inline, "%s: next %d of %d, inline %s", what, nxt, #s, tostring(inl))
  same_req({ start = 1, stop = nxt, args = got, inline = inl },
           { start = 1, stop = #s + 1, args = args, inline = inline }, what, 1)
end

local function split(stream)
  local pieces, pos = {}, 1
  while true do
    local s, e = find(stream, MARKER, pos, true)
    if not s then break end
    pieces[#pieces + 1] = sub(stream, pos, s - 1)
    pos = e + 1
  end
  pieces[#pieces + 1] = sub(stream, pos)
  return pieces
end

return function(input)
  if #input < 1 then return end
  local lim = byte(input, 1) % 2 == 1 and SMALL or DEFAULTS
  resp.MAX_INLINE, resp.MAX_BULK, resp.MAX_MBULK = lim.inline, lim.bulk, lim.mbulk
  local reads = split(sub(input, 2))
  local whole = concat(reads)

  local ref, ref_verdict = reference(whole, lim)
  local one, one_verdict = run({ whole })
  for i = 1, math.min(#one, #ref) do same_req(one[i], ref[i], "whole", i) end
  check(#one == #ref, "whole: %d requests, expected %d", #one, #ref)
  check(one_verdict == ref_verdict, "whole: verdict %q, expected %q", one_verdict, ref_verdict)

  local many, verdict, needs, buffered = run(reads)
  for i = 1, math.min(#many, #one) do same_req(many[i], one[i], "reads", i) end
  if find(verdict, "too big") and (verdict ~= one_verdict or #many < #one) then
    -- Stopped early by what was buffered: allowed past MAX_INLINE only.
    check(#many <= #one and buffered > lim.inline,
      "reads: verdict %q after %d requests (%d bytes buffered), whole stream %q after %d",
      verdict, #many, buffered, one_verdict, #one)
  else
    check(verdict == one_verdict, "reads: verdict %q, whole stream %q", verdict, one_verdict)
    check(#many == #one, "reads: %d requests, expected %d", #many, #one)
  end
  -- A need is a lower bound on the request's length.
  local by_start = {}
  for _, r in ipairs(one) do by_start[r.start] = r end
  for _, nd in ipairs(needs) do
    local r = by_start[nd.start]
    if r then
      check(nd.need <= r.stop - r.start, "need %d for a request of %d bytes", nd.need, r.stop - r.start)
    end
  end

  for _, r in ipairs(one) do
    local fits = #r.args <= lim.mbulk
    for _, a in ipairs(r.args) do if #a > lim.bulk then fits = false end end
    if fits then reparse(resp.encode(r.args, #r.args), r.args, false, "encode") end
    if #r.args > 0 then reparse(hex_quote(r.args), r.args, true, "inline quoting") end
  end
  resp.MAX_INLINE, resp.MAX_BULK, resp.MAX_MBULK = DEFAULTS.inline, DEFAULTS.bulk, DEFAULTS.mbulk
end
