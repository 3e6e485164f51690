-- A typed gRPC service: `build/cohost examples/notes/main.lua [port]`
-- (default 50051). Its API is notes.proto beside this file, read through
-- Debian's protoc at start (pb.load); handlers get and return Lua tables.
-- The server also answers gRPC health checks (grpc.health.v1.Health) and
-- server reflection (grpc.reflection.v1alpha), so generic clients find
-- the API on their own (docs/grpc.md).
--
-- The notes live in memory, per worker: run it with one worker (the
-- default) to see every note from every call.
local cohost = require "cohost"
local grpc = require "cohost.grpc"
local pb = require "cohost.protobuf"
local semaphore = require "cohost.semaphore"

local port = tonumber(arg and arg[1]) or 50051
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local types = assert(pb.load(here .. "/notes.proto"))

local notes = {}      -- by id, and in order: notes[i].id == i
local watchers = {}   -- semaphores of the WatchNotes calls, posted on each new note

local function has_tag(note, tag)
  if tag == "" then return true end
  for _, t in ipairs(note.tags) do
    if t == tag then return true end
  end
  return false
end

local srv = grpc.server { reflection = true }

srv:service_from_proto(types, "notes.Notes", {
  AddNote = function(req)
    if req.title == "" then grpc.error(grpc.status.INVALID_ARGUMENT, "a note needs a title") end
    local now = cohost.now()
    local note = {
      id = #notes + 1, title = req.title, body = req.body, tags = req.tags,
      created = { seconds = math.floor(now), nanos = math.floor(now % 1 * 1e9) },
    }
    notes[note.id] = note
    for w in pairs(watchers) do w:post() end
    return note
  end,

  GetNote = function(req)
    local note = notes[req.id]
    if not note then grpc.error(grpc.status.NOT_FOUND, "no note " .. tostring(req.id)) end
    return note
  end,

  -- Yields: runs until the client cancels (or the server stops).
  WatchNotes = function(req, stream)
    local w = semaphore.new(0)
    watchers[w] = true
    local ok, err = pcall(function()
      local sent = 0
      while true do
        while sent < #notes do
          sent = sent + 1
          if has_tag(notes[sent], req.tag) then stream:send(notes[sent]) end
        end
        w:wait(3600)
      end
    end)
    watchers[w] = nil
    if not ok then error(err, 0) end
  end,
})

srv:set_health("notes.Notes", "SERVING")

assert(grpc.listen("*:" .. port, srv))
