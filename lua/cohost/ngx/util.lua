-- cohost.ngx.util: ngx's request-free helpers: URI escaping, query
-- arguments, digests, base64, CRC-32, SQL quoting and the time formats
-- (today, localtime, utctime, http_time, cookie_time, parse_http_time).
local crypto = require "cohost.core.crypto"
local re = require "cohost.core.re"
local sys = require "cohost.core.sys"

local M = {}

local type, tostring, tonumber, pairs, ipairs = type, tostring, tonumber, pairs, ipairs
local byte, char, format, gsub = string.byte, string.char, string.format, string.gsub
local concat, sort, floor = table.concat, table.sort, math.floor

-- -- URI escaping -------------------------------------------------------

local function hex(c)
  return format("%%%02X", byte(c))
end

-- escape_uri(s [, type]): type 2 (the default) escapes everything but
-- RFC 3986's unreserved characters, as a URI component; type 0 escapes
-- only what cannot stand in a full URI (space, "#", "%", "?", controls
-- and bytes above 0x7e), as nginx's NGX_ESCAPE_URI.
function M.escape_uri(s, kind)
  if type(s) ~= "string" then s = tostring(s) end
  if kind == 0 then return (gsub(s, "[%c #%%?\127-\255]", hex)) end
  return (gsub(s, "[^%w%-%._~]", hex))
end

local function unhex(h)
  return char(tonumber(h, 16))
end

-- unescape_uri(s): %XX decoded, "+" becomes a space (as OpenResty), and a
-- "%" not followed by two hex digits is kept as it is.
function M.unescape_uri(s)
  if type(s) ~= "string" then s = tostring(s) end
  s = gsub(s, "+", " ")
  return (gsub(s, "%%(%x%x)", unhex))
end

-- -- Query arguments -----------------------------------------------------

local escape_uri = M.escape_uri

-- encode_args(t) -> "a=1&b=x%20y": keys sorted (OpenResty's order follows
-- the table, so any order is valid), true gives a bare key, false leaves
-- the key out, an array repeats the key.
function M.encode_args(t)
  if type(t) ~= "table" then error("bad argument #1 to 'encode_args' (table expected)", 2) end
  local keys = {}
  for k in pairs(t) do
    if type(k) ~= "string" and type(k) ~= "number" then
      error("bad argument #1 to 'encode_args' (bad key type: " .. type(k) .. ")", 2)
    end
    keys[#keys + 1] = k
  end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local out = {}
  local function add(k, v)
    local tv = type(v)
    if v == true then
      out[#out + 1] = k
    elseif v == false then
      return
    elseif tv == "string" or tv == "number" then
      out[#out + 1] = k .. "=" .. escape_uri(tostring(v))
    else
      error("bad argument #1 to 'encode_args' (bad value type: " .. tv .. ")", 3)
    end
  end
  for _, k in ipairs(keys) do
    local v = t[k]
    local ek = escape_uri(tostring(k))
    if type(v) == "table" then
      for _, item in ipairs(v) do add(ek, item) end
    else
      add(ek, v)
    end
  end
  return concat(out, "&")
end

local unescape_uri = M.unescape_uri

-- decode_args(s [, max]) -> t: "a=1&a=2&b&c=" gives {a = {"1", "2"}, b =
-- true, c = ""}; keys and values are unescaped ("+" is a space). At most
-- max arguments (default 100, 0 for no limit); a second result
-- "truncated" says some were left out.
function M.decode_args(s, max)
  max = max or 100
  local t, n, truncated = {}, 0, nil
  if type(s) ~= "string" or s == "" then return t end
  for item in s:gmatch("[^&]+") do
    if max > 0 and n >= max then
      truncated = "truncated"
      break
    end
    n = n + 1
    local k, v = item:match("^([^=]*)=(.*)$")
    if k then
      k, v = unescape_uri(k), unescape_uri(v)
    else
      k, v = unescape_uri(item), true
    end
    local old = t[k]
    if old == nil then
      t[k] = v
    elseif type(old) == "table" then
      old[#old + 1] = v
    else
      t[k] = { old, v }
    end
  end
  return t, truncated
end

-- -- Digests and encodings -------------------------------------------------

M.md5 = crypto.md5
M.md5_bin = crypto.md5_bin
M.sha1_bin = crypto.sha1_bin
M.hmac_sha1 = crypto.hmac_sha1
M.crc32_short = re.crc32
M.crc32_long = re.crc32

function M.encode_base64(s, no_padding)
  if type(s) ~= "string" then
    if s == nil then s = "" else s = tostring(s) end
  end
  return crypto.encode_base64(s, no_padding)
end

function M.decode_base64(s)
  if type(s) ~= "string" then error("bad argument #1 to 'decode_base64' (string expected)", 2) end
  return crypto.decode_base64(s)
end

-- quote_sql_str(s) -> a quoted MySQL string literal, as ngx.quote_sql_str.
local SQL_ESC = { ["\0"] = "\\0", ["\b"] = "\\b", ["\n"] = "\\n", ["\r"] = "\\r",
                  ["\t"] = "\\t", ["\26"] = "\\Z", ["\\"] = "\\\\", ["'"] = "\\'",
                  ['"'] = '\\"' }
function M.quote_sql_str(s)
  if type(s) ~= "string" then s = tostring(s) end
  return "'" .. gsub(s, "[%z\b\n\r\t\26\\'\"]", SQL_ESC) .. "'"
end

-- -- Time -------------------------------------------------------------------

-- now() with ngx.now's millisecond resolution; cohost reads the clock on
-- every call, so update_time() has nothing to do.
function M.now()
  return floor(sys.now() * 1000) / 1000
end

function M.update_time() end

M.time = sys.time

function M.today() return os.date("%Y-%m-%d") end
function M.localtime() return os.date("%Y-%m-%d %H:%M:%S") end
function M.utctime() return os.date("!%Y-%m-%d %H:%M:%S") end

local WDAY = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" }
local MON = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" }
local MON_NUM = {}
for i, m in ipairs(MON) do MON_NUM[m:lower()] = i end

-- Day and month names are spelled out here, not taken from the locale.
local function utc(sec)
  if type(sec) ~= "number" then error("bad argument #1 (number expected)", 3) end
  return os.date("!*t", floor(sec))
end

-- http_time(sec) -> "Thu, 18 Nov 2010 11:27:35 GMT"
function M.http_time(sec)
  local t = utc(sec)
  return format("%s, %02d %s %04d %02d:%02d:%02d GMT", WDAY[t.wday], t.day, MON[t.month],
                t.year, t.hour, t.min, t.sec)
end

-- cookie_time(sec) -> "Thu, 18-Nov-10 11:27:35 GMT": nginx writes two
-- digits of the year up to 2037 and four after.
function M.cookie_time(sec)
  local t = utc(sec)
  local year = t.year > 2037 and format("%d", t.year) or format("%02d", t.year % 100)
  return format("%s, %02d-%s-%s %02d:%02d:%02d GMT", WDAY[t.wday], t.day, MON[t.month],
                year, t.hour, t.min, t.sec)
end

-- Seconds since the epoch of a UTC civil date (days_from_civil, valid for
-- any Gregorian date).
local function epoch(y, m, d, hh, mm, ss)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + hh * 3600 + mm * 60 + ss
end

-- parse_http_time(s) -> seconds, or nil: RFC 1123 ("Sun, 06 Nov 1994
-- 08:49:37 GMT"), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime
-- ("Sun Nov  6 08:49:37 1994"), as nginx's ngx_parse_http_time.
function M.parse_http_time(s)
  if type(s) ~= "string" then return nil end
  local d, mon, y, hh, mm, ss = s:match("^%a+, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT")
  if not d then
    d, mon, y, hh, mm, ss = s:match("^%a+, (%d%d)%-(%a%a%a)%-(%d%d) (%d%d):(%d%d):(%d%d) GMT")
    if y then
      y = tonumber(y)
      y = y < 70 and 2000 + y or 1900 + y
    end
  end
  if not d then
    mon, d, hh, mm, ss, y = s:match("^%a+ (%a%a%a) +(%d%d?) (%d%d):(%d%d):(%d%d) (%d%d%d%d)")
  end
  if not d then return nil end
  local m = MON_NUM[mon:lower()]
  d, y, hh, mm, ss = tonumber(d), tonumber(y), tonumber(hh), tonumber(mm), tonumber(ss)
  if not m or d < 1 or d > 31 or hh > 23 or mm > 59 or ss > 59 then return nil end
  return epoch(y, m, d, hh, mm, ss)
end

return M
