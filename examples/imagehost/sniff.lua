-- imagehost.sniff: image types by magic bytes, dimensions from headers.
--
--   sniff.type(head)      -> "image/png" | "image/jpeg" | "image/gif" |
--                            "image/webp" | nil   (head: the first bytes)
--   sniff.size(type, f)   -> width, height | nil, "bad image header"
--
-- The declared Content-Type and file name are never trusted: the bytes
-- decide. size() reads from an open file (f:read, f:seek) so a JPEG whose
-- size marker sits behind large EXIF or ICC segments costs a few seeks,
-- not a buffer of everything before it.
local bit = require "bit"

local M = {}

local byte = string.byte
local band, rshift, lshift, bor = bit.band, bit.rshift, bit.lshift, bit.bor

-- Bytes type() needs to decide (RIFF size WEBP is 12).
M.MAGIC = 12

M.EXT = { ["image/png"] = "png", ["image/jpeg"] = "jpg",
          ["image/gif"] = "gif", ["image/webp"] = "webp" }

function M.type(head)
  if head:sub(1, 8) == "\137PNG\r\n\26\n" then return "image/png" end
  if head:sub(1, 3) == "\255\216\255" then return "image/jpeg" end
  local gif = head:sub(1, 6)
  if gif == "GIF87a" or gif == "GIF89a" then return "image/gif" end
  if head:sub(1, 4) == "RIFF" and head:sub(9, 12) == "WEBP" then return "image/webp" end
  return nil
end

local function be16(s, i) local a, b = byte(s, i, i + 1); return a * 256 + b end
local function le16(s, i) local a, b = byte(s, i, i + 1); return b * 256 + a end
local function le24(s, i) local a, b, c = byte(s, i, i + 2); return (c * 256 + b) * 256 + a end
local function be32(s, i) return be16(s, i) * 65536 + be16(s, i + 2) end

-- The largest width or height a PNG may declare (PNG spec 11.2.2: 1 to
-- 2^31 - 1, big-endian).
M.PNG_MAX_DIM = 0x7fffffff

-- PNG: the first chunk must be IHDR (width, height as 32-bit big-endian,
-- neither past PNG_MAX_DIM: 4294967295x4294967295 is no PNG).
local function png(h)
  if #h < 24 or h:sub(13, 16) ~= "IHDR" then return nil end
  local w, hgt = be32(h, 17), be32(h, 21)
  if w > M.PNG_MAX_DIM or hgt > M.PNG_MAX_DIM then return nil end
  return w, hgt
end

-- GIF: the logical screen descriptor follows the 6-byte signature.
local function gif(h)
  if #h < 10 then return nil end
  return le16(h, 7), le16(h, 9)
end

-- WebP: the first chunk after "RIFF size WEBP" says which coding it is.
local function webp(h)
  if #h < 30 then return nil end
  local fourcc = h:sub(13, 16)
  if fourcc == "VP8X" then            -- extended: 24-bit canvas size minus one
    return le24(h, 25) + 1, le24(h, 28) + 1
  elseif fourcc == "VP8 " then        -- lossy: key frame header, 14-bit sizes
    if h:sub(24, 26) ~= "\157\1\42" then return nil end
    return band(le16(h, 27), 0x3fff), band(le16(h, 29), 0x3fff)
  elseif fourcc == "VP8L" then        -- lossless: 0x2f, then 14 + 14 bits
    if byte(h, 21) ~= 0x2f then return nil end
    local a, b, c, d = byte(h, 22, 25)
    local v = bor(a, lshift(b, 8), lshift(c, 16), lshift(d, 24))
    return band(v, 0x3fff) + 1, band(rshift(v, 14), 0x3fff) + 1
  end
  return nil
end

-- Start-of-frame markers: C0-CF except DHT (C4), JPG (C8) and DAC (CC).
local SOF = {}
for m = 0xc0, 0xcf do SOF[m] = m ~= 0xc4 and m ~= 0xc8 and m ~= 0xcc end

-- JPEG: walks the marker segments from SOI to the first SOFn, seeking over
-- each segment's body. Bounded: a file of empty segments stops after 4096.
local function jpeg(f)
  f:seek("set", 2)
  for _ = 1, 4096 do
    local c = f:read(1)
    if c ~= "\255" then return nil end
    local m
    repeat                             -- any number of 0xFF fill bytes
      c = f:read(1)
      if not c then return nil end
      m = byte(c)
    until m ~= 0xff
    if m == 0xd9 or m == 0xda then return nil end   -- EOI or scan before a frame
    if not (m == 0x01 or (m >= 0xd0 and m <= 0xd7)) then   -- those have no length
      local len = f:read(2)
      if not len or #len < 2 or be16(len, 1) < 2 then return nil end
      if SOF[m] then
        local s = f:read(5)                -- precision, height, width
        if not s or #s < 5 then return nil end
        return be16(s, 4), be16(s, 2)
      end
      f:seek("cur", be16(len, 1) - 2)
    end
  end
  return nil
end

function M.size(typ, f)
  local w, hgt
  if typ == "image/jpeg" then
    w, hgt = jpeg(f)
  else
    f:seek("set", 0)
    local h = f:read(64) or ""
    if typ == "image/png" then w, hgt = png(h)
    elseif typ == "image/gif" then w, hgt = gif(h)
    elseif typ == "image/webp" then w, hgt = webp(h)
    end
  end
  if not w or w == 0 or hgt == 0 then return nil, "bad image header" end
  return w, hgt
end

return M
