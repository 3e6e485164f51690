-- A small web application on the router: a JSON API over an in-memory
-- table, a static directory and a WebSocket echo.
--
--   build/cohost examples/webapp.lua [port]          (default 8080)
--
--   curl localhost:8080/                              the static page
--   curl -d '{"name":"milk"}' -H 'Content-Type: application/json' \
--        localhost:8080/api/items                     201, the new item
--   curl localhost:8080/api/items                     every item
--   curl -X PATCH -d '{"done":true}' -H 'Content-Type: application/json' \
--        localhost:8080/api/items/1
--   curl -X DELETE localhost:8080/api/items/1         204
--
-- The items live in the worker's memory: with several workers (-w) each
-- has its own table, so run one worker for one list.
local cohost = require "cohost"
local http = require "cohost.http"
local router = require "cohost.http.router"
local form = require "cohost.http.form"
local websocket = require "cohost.websocket"
local cjson = require "cjson"

local port = tonumber(arg and arg[1]) or 8080
-- The static files sit beside this script, wherever it is run from.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."

local items, next_id = {}, 1   -- id -> { id, name, done }

-- Checks an item's fields as sent by a client; partial allows missing
-- fields (PATCH). Returns the fields to store or nil, message.
local function validate(body, partial)
  if type(body) ~= "table" then return nil, "the body must be a JSON object" end
  local out = {}
  for k in pairs(body) do
    if k ~= "name" and k ~= "done" then return nil, "unknown field: " .. tostring(k) end
  end
  if body.name ~= nil or not partial then
    local name = body.name
    if type(name) ~= "string" or name:find("^%s*$") then
      return nil, "name must be a non-empty string"
    end
    if #name > 200 then return nil, "name must be at most 200 bytes" end
    out.name = name
  end
  if body.done ~= nil then
    if type(body.done) ~= "boolean" then return nil, "done must be true or false" end
    out.done = body.done
  elseif not partial then
    out.done = false
  end
  return out
end

-- The request's JSON body checked by validate, or nil after answering 400.
local function input(req, res, partial)
  local body, err = form.json(req)
  if body == nil then
    res:json({ error = err }, err == "unsupported media type" and 415 or 400)
    return nil
  end
  local fields, why = validate(body, partial)
  if not fields then
    res:json({ error = why }, 400)
    return nil
  end
  return fields
end

-- The item named by :id, or nil after answering 404.
local function find(req, res)
  local id = req.params.id
  local item = id:find("^%d+$") and items[tonumber(id)]
  if not item then res:json({ error = "no such item" }, 404) end
  return item
end

-- The API is a router of its own, mounted at /api: its routes see the
-- paths without the prefix, and its 404s are JSON.
local api = router.new()
api:on_not_found(function(_, res) res:json({ error = "not found" }, 404) end)

api:get("/items", function(_, res)
  local list = {}
  for _, item in pairs(items) do list[#list + 1] = item end
  table.sort(list, function(a, b) return a.id < b.id end)
  -- Encoded by hand: lua-cjson would write an empty list as {}.
  for i, item in ipairs(list) do list[i] = cjson.encode(item) end
  res:header("Content-Type", "application/json")
  res:send("[" .. table.concat(list, ",") .. "]")
end)

api:post("/items", function(req, res)
  local fields = input(req, res, false)
  if not fields then return end
  local item = { id = next_id, name = fields.name, done = fields.done }
  items[item.id], next_id = item, next_id + 1
  res:header("Location", "/api/items/" .. item.id)
  res:json(item, 201)
end)

api:get("/items/:id", function(req, res)
  local item = find(req, res)
  if item then res:json(item) end
end)

-- PUT replaces an item (every field required), PATCH changes some.
local function update(partial)
  return function(req, res)
    local item = find(req, res)
    if not item then return end
    local fields = input(req, res, partial)
    if not fields then return end
    for k, v in pairs(fields) do item[k] = v end
    res:json(item)
  end
end
api:put("/items/:id", update(false))
api:patch("/items/:id", update(true))

api:delete("/items/:id", function(req, res)
  if not find(req, res) then return end
  items[tonumber(req.params.id)] = nil
  res.status = 204
  res:send()
end)

local r = router.new()

-- Middleware runs before every route; the route runs inside next(), so
-- the line after it sees the finished response.
r:use(function(req, res, next)
  local t0 = cohost.monotonic()
  res:header("X-Content-Type-Options", "nosniff")
  next()
  cohost.log(cohost.DEBUG, req.method, " ", req.path, " ", res.status, " ",
             ("%.1f ms"):format((cohost.monotonic() - t0) * 1000))
end)

r:mount("/api", api)

-- Echoes every message back, text as text and binary as binary.
r:get("/ws", function(req, res)
  local ws = websocket.upgrade(req, res)
  if not ws then return end   -- not a WebSocket handshake: answered 400
  while true do
    local data, typ = ws:recv()
    if not data or typ == "close" then break end
    if typ == "text" or typ == "binary" then
      if not ws:send(data, typ) then break end
    end
  end
  ws:close()
end)

r:static("/", here .. "/webapp/public")

assert(http.listen("*:" .. port, r))
if cohost.worker_id() == 0 then
  cohost.log(cohost.NOTICE, "webapp: listening on port ", port)
end
