-- Strings that commands change in place: the value SETBIT, BITFIELD,
-- SETRANGE and PFADD write to, so that setting one bit of a 100 MB bitmap
-- costs O(1), not a copy of the string (a Lua string cannot change).
--
-- A string value is a Lua string, a number (a counter INCR made), or
-- such a buffer (a struct kv_buf cdata, below) whose first len bytes
-- are the value and the rest of its cap zeros. Its TYPE is
-- string; the string commands read it through flat() (a Lua string of
-- it, O(len), as GET is in Redis). A bit command turns a Lua string into
-- a buffer once (of()); a buffer stays one until a command replaces the
-- value. The bytes come from ffi.new, so they are in the Lua heap
-- (--lua-memory-limit counts them) and zero-filled.
local ffi = require "ffi"
local R = require "kv.registry"
local store = require "kv.store"

local M = {}

local STR_BYTES = 64      -- the buffer's header, about
local GREEDY = 1024 * 1024   -- growth doubles up to 1 MiB, then adds 1 MiB (Redis's sds)

-- A buffer is one cdata: its header (buf, the bytes; len; cap; ones,
-- BITCOUNT's count or -1; bytes and live, as a collection's, for store.lua)
-- and, in the same allocation, the bytes it was made with (tail). A
-- SETBIT on a key then reads one header and one byte: as a table with a
-- cdata of bytes it read the table, the cache lines of its fields and the
-- cdata, and with 10,000 bitmaps of 1 KiB those misses were most of
-- SETBIT's cost (docs/benchmarks.md, issue 35's types). Its TYPE is
-- string: v.kind reads "string" through the metatype, as a collection's
-- kind field does.
--
-- A buffer keeps its identity when it grows (callers hold it): the
-- larger bytes are a cdata of their own, kept alive by grown[b] (weak
-- keys: they go with the buffer), and buf points at them.
ffi.cdef [[
struct kv_buf { uint8_t *buf; double ones, bytes; int32_t len, cap, live; uint8_t tail[?]; };
]]
local BUF = ffi.metatype("struct kv_buf", { __index = { kind = "string" } })
local grown = setmetatable({}, { __mode = "k" })

local u8 = ffi.typeof("uint8_t[?]")
local copy, fstring, istype = ffi.copy, ffi.string, ffi.istype
local type = type

local function new(len, cap)
  cap = cap or len
  if cap < 8 then cap = 8 end
  local b = BUF(cap)
  b.buf, b.len, b.cap, b.ones, b.bytes = b.tail, len, cap, -1, STR_BYTES + cap
  return b
end

-- A buffer of len zero bytes.
function M.new(len)
  return new(len)
end

-- Whether v is such a buffer.
local function is(v)
  return type(v) == "cdata" and istype(BUF, v)
end
M.is = is

-- A buffer holding string s (O(#s)), with room for cap bytes if larger.
function M.of(s, cap)
  local b = new(#s, cap and cap > #s and cap or nil)
  copy(b.buf, s, #s)
  return b
end

-- The value of string value v as a Lua string: v itself, a counter's
-- digits, or a buffer's bytes (O(len)).
function M.flat(v)
  if type(v) == "cdata" then return fstring(v.buf, v.len) end
  if type(v) == "number" then return tostring(v) end
  return v
end

-- The value at k for a string command: its Lua string (a buffer
-- flattened), nil when missing, or false for another type.
function M.string_at(k)
  local v = store.get(k)
  if v == nil then return nil end
  if type(v) == "cdata" then return fstring(v.buf, v.len) end
  if type(v) == "table" then return false end
  return type(v) == "number" and tostring(v) or v
end

-- The length of string value v.
function M.len(v)
  if type(v) == "cdata" then return v.len end
  if type(v) == "number" then return #tostring(v) end
  return #v
end

-- The bytes of buffer b: its tail while they are its own (a buffer that
-- never outgrew the size it was made with, as a bitmap SETBIT made is),
-- else buf. Through tail, a byte's address is b's plus a constant, not a
-- pointer read from b's header, so the CPU fetches the header's cache
-- line and the byte's at once: with 10,000 bitmaps of 1 KiB, pipelined
-- SETBIT took 0.85-0.88 of the CPU it took through buf (docs/benchmarks.md).
local function base(b)
  local p = b.tail
  if b.buf ~= p then p = b.buf end
  return p
end
M.base = base

-- A pointer to the bytes of v (a Lua string or a buffer) and their
-- count, for reading while the caller holds v (a counter must be made a
-- string first, and that string held: the pointer does not keep it).
function M.ptr(v)
  if type(v) == "cdata" then return base(v), v.len end
  return ffi.cast("const uint8_t *", v), #v
end

-- Puts bytes (a uint8_t[cap] cdata, len of them used) in b, in place of
-- its own: grown[b] keeps them alive, and store.lua is told how many
-- more bytes b holds (its tail stays allocated however little it is used).
local function take(b, bytes, len, cap)
  local d = cap - (b.buf == b.tail and 0 or b.cap)
  grown[b] = bytes
  b.buf, b.len, b.cap = bytes, len, cap
  store.account(b, d)
end

-- Makes b at least len bytes long, the new bytes zero (the bytes past
-- len always are: a buffer never shrinks, and its new memory is zeroed).
-- Redis's growth (greedy: doubles below 1 MiB, then 1 MiB more), so a run
-- of SETBITs at rising offsets costs amortized O(1) each.
function M.grow(b, len)
  if len <= b.len then return end
  if len > b.cap then
    local cap = len < GREEDY and len * 2 or len + GREEDY
    local bytes = u8(cap)
    copy(bytes, b.buf, b.len)
    take(b, bytes, len, cap)
    return
  end
  b.len = len
end

-- Makes room for cap bytes in b, its length unchanged (a command that
-- will insert bytes, as HLL's sparse form does).
function M.reserve(b, cap)
  if cap <= b.cap then return end
  local bytes = u8(cap)
  copy(bytes, b.buf, b.len)
  take(b, bytes, b.len, cap)
end

-- Puts new bytes in b: bytes (a uint8_t[cap] cdata), len of them used
-- (zeros past len), as a change of representation does (HLL's sparse to
-- dense).
function M.swap(b, bytes, len, cap)
  take(b, bytes, len, cap)
  b.ones = -1
end

-- Writes string s into b at byte off, growing b (SETRANGE, APPEND).
-- Returns false when the heap cannot take the grown buffer (b is
-- unchanged then), else true.
function M.write(b, off, s)
  local ok = pcall(M.grow, b, off + #s)
  if not ok then return false end
  copy(b.buf + off, s, #s)
  b.ones = -1   -- BITCOUNT's count (bitmaps.lua) no longer holds
  return true
end

-- The bytes s..e (0-based, within the value) of buffer b, as a string.
function M.sub(b, s, e)
  return fstring(b.buf + s, e - s + 1)
end

-- The buffer at k for a command that writes bits up to byte len - 1: the
-- key's value made a buffer (a string one is converted, a missing key
-- created) and grown to len bytes; or nil if k holds another type.
-- Whether the key was created is the second value.
function M.writable(k, len)
  local v = store.get(k)
  if v == nil then
    local b = new(len)
    store.set(k, b)
    return b, true
  end
  if type(v) == "cdata" then
    M.grow(v, len)
    return v, false
  end
  if type(v) == "table" then return nil end
  local s = type(v) == "number" and tostring(v) or v
  local b = M.of(s, len)
  if len > b.len then b.len = len end
  store.set(k, b, true)   -- the same key: its deadline stays
  return b, false
end

-- COPY and the log rewrite see a buffer as the string it holds.
R.copiers.string = function(b)
  local c = new(b.len, b.cap)
  copy(c.buf, b.buf, b.len)
  return c
end

R.dumpers.string = function(b)
  return "SET", { fstring(b.buf, b.len) }, 1, 1
end

return M
