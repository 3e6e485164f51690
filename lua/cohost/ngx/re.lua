-- cohost.ngx.re: ngx.re.match/find/gmatch/sub/gsub (and ngx.re.split from
-- lua-resty-core's ngx.re) on PCRE2 through cohost.core.re, with
-- OpenResty's semantics: 1-based positions, ctx.pos, captures tables with
-- [0] and false for unset groups, named groups, "$1 ${1} ${name} $$"
-- templates. Flags: i m s x u U a D J (PCRE options), j (JIT), o (compile
-- once: a per-worker cache, each worker having its own Lua state); d (DFA)
-- is refused.
local core = require "cohost.core.re"

local M = {}

local type, tostring, tonumber, error = type, tostring, tonumber, error
local sub, byte, find, concat = string.sub, string.byte, string.find, table.concat

-- -- Flags and the compile cache ----------------------------------------

local VALID = {}
for c in ("imsxuUaDJjo"):gmatch(".") do VALID[c] = true end

-- flags string -> true once checked, so hot paths skip the scan.
local checked_flags = { [""] = true }

-- Raises, at the caller of the ngx.re function, for an unknown flag, as
-- OpenResty does (a bad flag is a programming error, not a failure).
local function check_flags(flags)
  if checked_flags[flags] then return end
  if type(flags) ~= "string" then
    error("bad argument: regex options must be a string", 4)
  end
  for i = 1, #flags do
    local c = sub(flags, i, i)
    if c == "d" then
      error('flag "d" (DFA mode) is not supported by cohost', 4)
    elseif not VALID[c] then
      error(('unknown flag "%s" (flags "%s")'):format(c, flags), 4)
    end
  end
  checked_flags[flags] = true
end

-- The compile-once cache: pattern .. "\0" .. flags -> regex. Bounded like
-- OpenResty's lua_regex_cache_max_entries (1024): once full, new 'o'
-- patterns are compiled per call and not kept.
local MAX_CACHED = 1024
local cache, ncached = {}, 0

-- compile(regex, flags) -> rx, or nil, err. flags already checked.
local function compile(regex, flags)
  if type(regex) ~= "string" then regex = tostring(regex) end
  local once = find(flags, "o", 1, true)
  local key
  if once then
    key = regex .. "\0" .. flags
    local rx = cache[key]
    if rx then return rx end
  end
  local rx, err = core.compile(regex, flags)
  if not rx then return nil, err end
  if once and ncached < MAX_CACHED then
    cache[key] = rx
    ncached = ncached + 1
  end
  return rx
end

-- The pieces every entry point does first. Returns rx, subject, dupnames
-- or nil, err.
local function prepare(subj, regex, flags)
  flags = flags or ""
  check_flags(flags)
  if type(subj) ~= "string" then subj = tostring(subj) end
  local rx, err = compile(regex, flags)
  if not rx then return nil, err end
  return rx, subj, find(flags, "D", 1, true) ~= nil
end

-- The 0-based start offset from ctx.pos (1-based, default 1).
local function start_of(ctx)
  local pos = ctx and ctx.pos
  if not pos or pos <= 0 then return 0 end
  return pos - 1
end

-- -- match, find, gmatch ------------------------------------------------

-- match(subject, regex [, flags [, ctx [, res]]]) -> captures | nil | nil, err
function M.match(subj, regex, flags, ctx, res)
  local rx, s, dup = prepare(subj, regex, flags)
  if not rx then return nil, s end
  local from, to = rx:exec(s, start_of(ctx))
  if not from then
    if from == false then return nil, "pcre_exec() failed: " .. to end
    return nil
  end
  if ctx then ctx.pos = to + 1 end
  return rx:captures(s, res, dup)
end

-- find(subject, regex [, flags [, ctx [, nth]]]) -> from, to | nil | nil, nil, err
-- Positions are 1-based and inclusive (to may be from - 1 for an empty
-- match), as string.find; nth picks a capture group (0: the whole match).
function M.find(subj, regex, flags, ctx, nth)
  local rx, s = prepare(subj, regex, flags)
  if not rx then return nil, nil, s end
  local from, to = rx:exec(s, start_of(ctx))
  if not from then
    if from == false then return nil, nil, "pcre_exec() failed: " .. to end
    return nil
  end
  if ctx then ctx.pos = to + 1 end
  if not nth or nth < 0 then nth = 0 end
  if nth > rx:ncaptures() then return nil, nil, "nth out of bound" end
  if nth > 0 then
    from, to = rx:group(nth)
    if not from then return nil end
  end
  return from + 1, to
end

-- gmatch(subject, regex [, flags]) -> iterator | nil, err. The iterator
-- returns a captures table per match, then nil (or nil, err). After an
-- empty match the next search starts one byte later; an empty match at
-- the very end is the last.
function M.gmatch(subj, regex, flags)
  local rx, s, dup = prepare(subj, regex, flags)
  if not rx then return nil, s end
  local pos, len, utf_ok = 0, #s, false
  return function()
    if not pos then return nil end
    local from, to = rx:exec(s, pos, utf_ok)
    if not from then
      pos = nil
      if from == false then return nil, "pcre_exec() failed: " .. to end
      return nil
    end
    utf_ok = true
    local caps = rx:captures(s, nil, dup)
    if to == from then
      to = to + 1
      if to > len then
        pos = nil
        return caps
      end
    end
    pos = to
    return caps
  end
end

-- -- sub, gsub --------------------------------------------------------------

-- Parses a replacement template into literal strings and group numbers:
-- "$0", "$12" (every digit after the $), "${12}", "${name}" (a named
-- group of rx), "$$" (a dollar). Returns the parts or nil, err.
local function parse_template(rx, tmpl)
  local parts, lit, i, n = {}, {}, 1, #tmpl
  local names
  while i <= n do
    local j = find(tmpl, "$", i, true)
    if not j then
      lit[#lit + 1] = sub(tmpl, i)
      break
    end
    lit[#lit + 1] = sub(tmpl, i, j - 1)
    local c = sub(tmpl, j + 1, j + 1)
    local group, stop
    if c == "$" then
      lit[#lit + 1] = "$"
      stop = j + 1
    elseif c:match("%d") then
      local digits = tmpl:match("^%d+", j + 1)
      group, stop = tonumber(digits), j + #digits
    elseif c == "{" then
      local close = find(tmpl, "}", j + 2, true)
      if not close then return nil end
      local name = sub(tmpl, j + 2, close - 1)
      if name:match("^%d+$") then
        group = tonumber(name)
      elseif name:match("^[%a_][%w_]*$") then
        if not names then
          names = {}
          for _, e in ipairs(rx:names() or {}) do
            names[e[1]] = names[e[1]] or e[2]
          end
        end
        group = names[name]
        if not group then return nil end
      else
        return nil
      end
      stop = close
    else
      return nil   -- "$" before anything else, or at the end
    end
    if group then
      if #lit > 0 then parts[#parts + 1] = concat(lit) end
      lit = {}
      parts[#parts + 1] = group
    end
    i = stop + 1
  end
  if #lit > 0 then parts[#parts + 1] = concat(lit) end
  return parts
end

-- Parsed templates per regex object (weak keys: they go with the regex).
local templates = setmetatable({}, { __mode = "k" })

local function template_of(rx, tmpl)
  local per = templates[rx]
  if not per then
    per = {}
    templates[rx] = per
  end
  local parts = per[tmpl]
  if parts == nil then
    parts = parse_template(rx, tmpl) or false
    per[tmpl] = parts
  end
  return parts
end

-- Bytes in the UTF-8 sequence starting at byte b.
local function utf8_len(b)
  if b >= 0xf0 then return 4 elseif b >= 0xe0 then return 3 elseif b >= 0xc0 then return 2 end
  return 1
end

-- A function replacement: fn(captures) -> string (numbers are converted;
-- anything else goes through tostring, as OpenResty does).
local function subst_func(rx, s, fn, global, dup, utf)
  local out, count, pos, copied, len, utf_ok = {}, 0, 0, 0, #s, false
  while pos <= len do
    local from, to = rx:exec(s, pos, utf_ok)
    if not from then
      if from == false then return nil, nil, "pcre_exec() failed: " .. to end
      break
    end
    utf_ok = true
    count = count + 1
    -- Take everything from the match before calling user code, which may
    -- run this same (cached) regex again.
    local caps = rx:captures(s, nil, dup)
    out[#out + 1] = sub(s, copied + 1, from)
    out[#out + 1] = tostring(fn(caps))
    copied, pos = to, to
    if from == to then
      if to >= len then break end
      pos = pos + (utf and utf8_len(byte(s, to + 1)) or 1)
    end
    if not global then break end
  end
  if count == 0 then return s, 0 end
  out[#out + 1] = sub(s, copied + 1)
  return concat(out), count
end

local function substitute(subj, regex, replace, flags, global)
  local rx, s, dup = prepare(subj, regex, flags)
  if not rx then return nil, nil, s end
  local kind = type(replace)
  if kind == "function" then
    local utf = flags and (find(flags, "u", 1, true) or find(flags, "U", 1, true)) ~= nil
    return subst_func(rx, s, replace, global, dup, utf)
  end
  if kind == "number" then
    replace = tostring(replace)
  elseif kind ~= "string" then
    error("bad argument #3: string, number or function expected, got " .. kind, 3)
  end
  local parts = template_of(rx, replace)
  if not parts then return nil, nil, "failed to compile the replacement template" end
  local res, n = rx:subst(s, parts, global)
  if not res then return nil, nil, n end
  return res, n
end

-- sub(subject, regex, replace [, flags]) -> newstr, n | nil, nil, err
function M.sub(subj, regex, replace, flags)
  return substitute(subj, regex, replace, flags, false)
end

-- gsub(subject, regex, replace [, flags]) -> newstr, n | nil, nil, err
function M.gsub(subj, regex, replace, flags)
  return substitute(subj, regex, replace, flags, true)
end

-- -- split (lua-resty-core's ngx.re module) ---------------------------------

-- split(subject, regex [, flags [, ctx [, max [, res]]]]) -> array | nil, err,
-- as lua-resty-core's: the pieces between matches from ctx.pos on, each
-- followed by the separator's first capture group when it has one and it
-- took part; an empty match splits between characters; max > 0 makes at
-- most max pieces (the last holds the rest); without max, empty pieces
-- at the end are dropped when the subject ends with a separator.
function M.split(subj, regex, flags, ctx, max, res)
  if type(subj) ~= "string" then subj = tostring(subj) end
  max = max or 0
  if res == nil then res = {} elseif type(res) ~= "table" then error("res is not a table", 2) end
  local start = ctx and ctx.pos or 1
  local len = #subj
  if start > len then
    res[1] = nil
    return res
  end
  local rx, s = prepare(subj, regex, flags)
  if not rx then return nil, s end
  local piece, search = start, start - 1   -- 1-based piece start, 0-based search offset
  local n, count, last_empty = 0, 1, nil
  local utf_ok = false
  while max <= 0 or count < max do
    local from, to = rx:exec(s, search, utf_ok)
    if not from then
      if from == false then return nil, "pcre_exec() failed: " .. to end
      break
    end
    utf_ok = true
    search = from == to and to + 1 or to
    from, to = from + 1, to + 1   -- 1-based: separator start, first byte after it
    if last_empty then piece = last_empty end
    if from == to then last_empty = from end
    if from > piece or not last_empty then
      count = count + 1
      n = n + 1
      res[n] = sub(s, piece, from - 1)
      local gf, gt = rx:group(1)
      if gf then
        n = n + 1
        res[n] = sub(s, gf + 1, gt)
      end
      piece = to
      if piece > len then break end
    end
  end
  if max <= 0 and piece > len then
    while n > 0 and res[n] == "" do
      res[n] = nil
      n = n - 1
    end
  else
    n = n + 1
    res[n] = sub(s, piece)
  end
  res[n + 1] = nil
  return res
end

-- opt(name, value): lua-resty-core's knobs. "jit_stack_size" is accepted
-- and ignored: each worker has a 1 MiB JIT stack already.
function M.opt(name)
  if name ~= "jit_stack_size" then error("unrecognized option name", 2) end
end

return M
