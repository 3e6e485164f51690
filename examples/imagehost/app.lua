-- imagehost.app: the HTTP face of the image host.
--
--   app.start(opts) -> listener, collection | nil, err
--     opts.host (default "127.0.0.1"), opts.port (default 8080, 0: any),
--     opts.dir (storage, default "imagehost-data"), opts.max_size (bytes of
--     one image, default 10 MiB), opts.max_pixels (width x height of one
--     image, default 100,000,000; 0: any), opts.base_url (prefix of the "url" field,
--     default none: "/i/<id>"), opts.access_log (see docs/http.md)
--
--   POST   /images          multipart field "file", or the raw bytes as the body
--   GET    /i/<id>          the image (ETag, Range, 304 by res:sendfile)
--   DELETE /i/<id>          with its delete token (X-Delete-Token or ?token=)
--   GET    /api/images?page=N   newest first, 20 a page
--   GET    /                the upload page (public/)
local cohost = require "cohost"
local http = require "cohost.http"
local cjson = require("cjson.safe").new()
local images = require "imagehost.images"

local M = {}

local READ_SIZE = 65536          -- bytes asked of req:read at a time
local MAX_PARTS = 32             -- fields and files of one upload form
local MAX_FIELD = 4096           -- bytes of one non-file form field
local MAX_PIXELS = 100000000     -- default opts.max_pixels: 10,000 x 10,000
local FORM_SLACK = 64 * 1024     -- multipart headers and fields around the file

-- The directory of this file: the static page sits beside it.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

-- Answers with value as JSON. lua-cjson 2.1.0 escapes every "/" as "\/"
-- and has no switch for it; "\/" only ever stands for "/", so it is undone.
local function json(res, value, status)
  local body = assert(cjson.encode(value)):gsub("\\/", "/")
  if status then res.status = status end
  res:header("Content-Type", "application/json")
  res:send(body)
end

-- Failures of an upload: status and the message the client gets. Only
-- what is no fault of the request is a 500 (a temp file that cannot be
-- made or written).
local function failure(err, opts)
  if err == "too large" or err == "file too large" then
    return 413, ("the image is larger than %d bytes"):format(opts.max_size)
  elseif err == "too many parts" then
    return 413, ("the form has more than %d fields and files"):format(MAX_PARTS)
  elseif err == "field too large" then
    return 413, ("a form field is larger than %d bytes"):format(MAX_FIELD)
  elseif err == "too many pixels" then
    return 413, ("the image has more than %d pixels"):format(opts.max_pixels)
  elseif err == "unsupported" or err == "bad image header" then
    return 415, "not a PNG, JPEG, GIF or WebP image" ..
                (err == "bad image header" and " (unreadable header)" or "")
  elseif err == "bad form" or err == "bad request" or err == "no file"
         or err == "unsupported media type" then
    return 400, err == "no file" and 'no "file" field in the form' or "malformed body"
  elseif err == "timeout" then
    return 408, "the body was too slow"
  end
  return 500, "storage error"
end

-- What the client gets for an image row.
local function describe(row, base_url)
  return {
    id = row.id, url = (base_url or "") .. "/i/" .. row.id, size = tonumber(row.size),
    type = row.type, width = tonumber(row.width), height = tonumber(row.height),
    uploaded = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(tonumber(row.created))),
  }
end

-- Streams the raw body into the upload.
local function receive_raw(req, up)
  while true do
    local piece, err = req:read(READ_SIZE)
    if not piece then
      if err then return nil, err end
      return true
    end
    local ok, werr = up:write(piece)
    if not ok then return nil, werr end
  end
end

-- Streams the multipart field "file" into an upload it begins (the first
-- such part; other files are skipped unread). Returns the upload, or
-- nil, err with the upload (if begun) in box.up for the caller to abort.
local function receive_form(req, col, box)
  local form, err = req:multipart {
    max_parts = MAX_PARTS, max_field_size = MAX_FIELD,
    on_file = function(part)
      if part.name ~= "file" or box.up then return nil end
      local up, berr = col:begin()
      if not up then return nil, berr end
      box.up = up
      while true do
        local piece, perr = part:read()
        if not piece then
          if perr then return nil, perr end
          return true
        end
        local ok, werr = up:write(piece)
        if not ok then return nil, werr end
      end
    end,
  }
  if not form then return nil, err end
  if not box.up then return nil, "no file" end
  return box.up
end

-- Reads and drops the rest of a body, so the client, still sending, reads
-- the answer instead of a reset. Bounded by the listener's max_body_size
-- (past it req:read fails and the server closes lingering) and its
-- body_timeout.
local function drain(req)
  while req:read(READ_SIZE) do end
end

local function upload(req, res, col, opts, box)
  local ct = (req:header("content-type") or ""):lower()
  local up, err
  if ct:find("^%s*multipart/form%-data") then
    up, err = receive_form(req, col, box)
  else
    -- Any other body is the image itself, whatever its declared type (curl
    -- --data-binary says application/x-www-form-urlencoded): the bytes decide.
    up, err = col:begin()
    if up then
      box.up = up
      local ok
      ok, err = receive_raw(req, up)
      if not ok then up = nil end
    end
  end
  if up then
    local ok
    ok, err = up:finish()
    if not ok then up = nil end
  end
  if not up then
    if err == "closed" then return end   -- the client left: nobody to answer
    local status, msg = failure(err, opts)
    if status == 500 then cohost.log(cohost.ERR, "imagehost: upload failed: ", err) end
    if status ~= 408 then drain(req) end
    return json(res, { error = msg }, status)
  end
  local row, created = col:add(up)
  local body = describe(row, opts.base_url)
  if created then
    body.delete_token = row.token
    cohost.log(cohost.INFO, "imagehost: stored ", row.id, " (", row.type, ", ", row.size, " bytes)")
  end
  res:header("Location", body.url)
  json(res, body, created and 201 or 200)
end

local function valid_id(id) return #id == 64 and not id:find("[^0-9a-f]") end

local function first(v) if type(v) == "table" then return v[1] end return v end

function M.start(opts)
  opts = opts or {}
  opts.max_size = opts.max_size or 10 * 1024 * 1024
  opts.max_pixels = opts.max_pixels or MAX_PIXELS
  local col, err = images.new(opts.dir or "imagehost-data", opts.max_size, opts.max_pixels)
  if not col then return nil, err end
  if cohost.worker_id() == 0 then col:reconcile(cohost.now()) end

  local r = http.router()
  r:use(function(_, res, nxt)
    res:header("X-Content-Type-Options", "nosniff")
    nxt()
  end)

  r:post("/images", function(req, res)
    local box = {}
    local ok, uerr = pcall(upload, req, res, col, opts, box)
    if box.up then box.up:abort() end   -- nothing is left in tmp/, whatever happened
    if not ok then error(uerr, 0) end
  end)

  r:get("/i/:id", function(req, res)
    local id = req.params.id
    local typ = valid_id(id) and col:type(id)
    if not typ then return json(res, { error = "no such image" }, 404) end
    -- The bytes behind an id never change: caches may keep them for a year.
    res:header("Cache-Control", "public, max-age=31536000, immutable")
    if not res:sendfile(col.store:path(id), { content_type = typ }) then
      col:forget(id)
      res:header("Cache-Control", nil)
      json(res, { error = "no such image" }, 404)
    end
  end)

  r:delete("/i/:id", function(req, res)
    local id = req.params.id
    if not valid_id(id) then return json(res, { error = "no such image" }, 404) end
    local token = req:header("x-delete-token") or first(req.query.token)
    local ok, derr = col:delete(id, token)
    if ok then
      res.status = 204
      return res:send()
    end
    if derr == "not found" then return json(res, { error = "no such image" }, 404) end
    json(res, { error = "wrong or missing delete token" }, 403)
  end)

  r:get("/api/images", function(req, res)
    local page = first(req.query.page) or "1"
    if not page:find("^%d+$") or tonumber(page) < 1 or #page > 9 then
      return json(res, { error = "page must be a whole number from 1" }, 400)
    end
    page = tonumber(page)
    local rows, total = col:page(page)
    -- The list is encoded by hand: lua-cjson writes an empty table as {}.
    local items = {}
    for i, row in ipairs(rows) do
      items[i] = assert(cjson.encode(describe(row, opts.base_url))):gsub("\\/", "/")
    end
    res:header("Content-Type", "application/json")
    res:header("Cache-Control", "no-store")
    res:send(('{"page":%d,"per_page":%d,"total":%d,"pages":%d,"images":[%s]}')
      :format(page, images.PER_PAGE, total, math.ceil(total / images.PER_PAGE),
              table.concat(items, ",")))
  end)

  r:static("/", here .. "/public")

  local listener
  listener, err = http.listen((opts.host or "127.0.0.1") .. ":" .. (opts.port or 8080), r, {
    max_body_size = opts.max_size + FORM_SLACK,
    access_log = opts.access_log,
  })
  if not listener then return nil, err end
  return listener, col
end

return M
