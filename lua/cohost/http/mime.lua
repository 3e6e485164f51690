-- cohost.http.mime: file extension -> Content-Type.
--
-- The table is /etc/mime.types (when the machine has one) overlaid with a
-- built-in table of the common web types, so a page served here gets the
-- same types on every machine. Text types carry "; charset=utf-8".
local M = {}

-- The built-in types win over /etc/mime.types: Debian's file still says
-- application/javascript for .js, and browsers refuse module scripts or
-- stylesheets served with a surprising type.
local builtin = {
  html = "text/html", htm = "text/html", css = "text/css",
  js = "text/javascript", mjs = "text/javascript", json = "application/json",
  map = "application/json", webmanifest = "application/manifest+json",
  txt = "text/plain", md = "text/markdown", csv = "text/csv",
  xml = "application/xml", xhtml = "application/xhtml+xml",
  svg = "image/svg+xml", png = "image/png", jpg = "image/jpeg",
  jpeg = "image/jpeg", gif = "image/gif", webp = "image/webp",
  avif = "image/avif", ico = "image/x-icon", bmp = "image/bmp",
  woff = "font/woff", woff2 = "font/woff2", ttf = "font/ttf", otf = "font/otf",
  wasm = "application/wasm", pdf = "application/pdf", zip = "application/zip",
  gz = "application/gzip", tar = "application/x-tar",
  mp3 = "audio/mpeg", ogg = "audio/ogg", wav = "audio/wav",
  mp4 = "video/mp4", webm = "video/webm",
}

M.default = "application/octet-stream"

local types   -- built on first use: reading /etc/mime.types costs ~1 ms

-- Adds "; charset=utf-8" to text types that do not name a charset.
local function with_charset(t)
  if t:find("^text/") and not t:find(";") then return t .. "; charset=utf-8" end
  return t
end

local function load()
  types = {}
  local f = io.open("/etc/mime.types")
  if f then
    -- Lines are "type ext ext ...", with # comments.
    for line in f:lines() do
      local t, exts = line:match("^%s*([^#%s]+)%s+([^#]+)")
      if t then
        for ext in exts:gmatch("%S+") do types[ext:lower()] = with_charset(t) end
      end
    end
    f:close()
  end
  for ext, t in pairs(builtin) do types[ext] = with_charset(t) end
end

-- type(path_or_ext) -> Content-Type for a file name, a path or a bare
-- extension ("a/b.HTML", "html"); M.default when unknown.
function M.type(name)
  if not types then load() end
  local ext = name:match("%.([^./]+)$") or name:match("^[^./]+$")
  return ext and types[ext:lower()] or M.default
end

M.type_of = M.type

-- Sets or overrides the type of an extension (without the dot).
function M.set(ext, t)
  if not types then load() end
  types[ext:lower()] = with_charset(t)
end

return M
