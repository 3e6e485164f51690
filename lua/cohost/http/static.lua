-- cohost.http.static: files under a directory, for a URL prefix.
--
--   local serve = static.new("public", { max_age = 3600 })
--   serve(req, res, "/css/site.css")   -- the path relative to the prefix
--
-- The router's r:static(prefix, dir) wires this up. Files go out through
-- res:sendfile, which does ETag, Last-Modified, 304, 412 (If-Match,
-- If-Unmodified-Since) and ranges (several as multipart/byteranges).
--
-- What a request may reach: a relative path is made of its decoded
-- segments, and a segment that is "..", ".", holds a NUL or a backslash is
-- a 400; dotfiles (".git", ".env") are a 404 unless opts.dotfiles. A
-- symbolic link inside dir is followed wherever it points: keep links that
-- leave dir out of it (this module does not resolve them).
local mime = require "cohost.http.mime"

local M = {}

local find, sub, byte = string.find, string.sub, string.byte

local ALLOW = "GET, HEAD, OPTIONS"

local function text(res, status, msg)
  res.status = status
  res:header("Content-Type", "text/plain; charset=utf-8")
  res:send(msg .. "\n")
end

-- Checks a relative path ("" or "/a/b"): "bad" (a 400), "hidden" (a
-- dotfile, a 404) or nil when it may be served.
local function check(rel, dotfiles)
  if find(rel, "[%z\\]") then return "bad" end
  for seg in rel:gmatch("[^/]+") do
    if seg == ".." or seg == "." then return "bad" end
    if not dotfiles and byte(seg, 1) == 46 then return "hidden" end   -- 46: "."
  end
end

-- True when path names a directory: fopen succeeds on one on Linux but a
-- read fails with EISDIR (21). Costs an open and a close.
local function is_dir(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local _, _, code = f:read(0)
  f:close()
  return code == 21
end

-- Percent-encodes a path for a Location header; "/" and the unreserved
-- characters stay.
local function encode_path(p)
  return (p:gsub("[^%w%-%._~/!$&'()*+,;=:@]", function(c)
    return ("%%%02X"):format(byte(c))
  end))
end

-- Serves a regular file; true when it was served, else false (nothing
-- sent).
local function send_file(req, res, path, max_age)
  res:header("Content-Type", mime.type(path))
  if max_age then res:header("Cache-Control", "max-age=" .. max_age) end
  local ok = res:sendfile(path)
  if ok then return true end
  res:header("Content-Type", nil)
  res:header("Cache-Control", nil)
  return false
end

-- new(dir [, opts]) -> serve(req, res [, rel]). rel is the path under dir
-- ("/a/b.css"; "" for the prefix itself; default req.path). opts:
--   index    file served for a directory (default "index.html"; false: none)
--   dotfiles serve names starting with "." (default false)
--   max_age  seconds for a Cache-Control: max-age header (default none)
function M.new(dir, opts)
  if type(dir) ~= "string" or dir == "" then error("static: dir is a path", 2) end
  opts = opts or {}
  local index = opts.index == nil and "index.html" or opts.index
  local dotfiles, max_age = opts.dotfiles, opts.max_age
  if sub(dir, -1) == "/" and #dir > 1 then dir = sub(dir, 1, -2) end

  return function(req, res, rel)
    rel = rel or req.path
    local method = req.method
    if method ~= "GET" and method ~= "HEAD" then
      res:header("Allow", ALLOW)
      if method == "OPTIONS" then
        res.status = 204
        return res:send()
      end
      return text(res, 405, "method not allowed")
    end
    local why = check(rel, dotfiles)
    if why == "bad" then return text(res, 400, "bad request") end
    if why == "hidden" then return text(res, 404, "not found") end

    local path = dir .. rel
    if rel == "" then
      if not is_dir(path) then return text(res, 404, "not found") end
    elseif sub(rel, -1) == "/" and sub(req.path, -1) == "/" then
      if index and send_file(req, res, path .. index, max_age) then return end
      return text(res, 404, "not found")
    elseif sub(rel, -1) == "/" then
      -- The directory of a mounted router's bare prefix ("/docs" seen as
      -- "/"): its URL needs the slash too.
      if not is_dir(path) then return text(res, 404, "not found") end
    elseif send_file(req, res, path, max_age) then
      return
    elseif not is_dir(path) then
      return text(res, 404, "not found")
    end
    -- A directory named without its slash: send the client to "dir/", so
    -- relative links in its index resolve under it. Leading slashes are
    -- collapsed: "//evil.example/x/" would be a protocol-relative URL.
    local loc = encode_path((req.path:gsub("^/+", "/"))) .. "/"
    local qs = req.query_string
    if qs and qs ~= "" then loc = loc .. "?" .. qs end
    res:header("Location", loc)
    return text(res, 301, "moved permanently")
  end
end

return M
