-- The image host's page (examples/imagehost/public) in a real browser:
-- Debian's chromium, headless, driven over the Chrome DevTools Protocol
-- with cohost's own WebSocket client. The app runs as a child process on
-- a fresh directory; the page uploads a PNG a Python script writes, and
-- the test watches the gallery show it and the browser decode it. A
-- screenshot of the gallery is kept in build/artifacts/imagehost-gallery.png.
local cohost = require "cohost"
local cjson = require "cjson"
local crypto = require "cohost.core.crypto"
local http = require "cohost.http"
local websocket = require "cohost.websocket"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

local CHROMIUM = "/usr/bin/chromium"
local ARTIFACT = h.root .. "build/artifacts/imagehost-gallery.png"
local VIEW_W, VIEW_H = 1000, 700   -- the page's viewport, so the screenshot's size
local PNG_W, PNG_H = 48, 32        -- the uploaded image

-- A real PNG (zlib, CRCs) of a colour gradient, so a browser decodes it.
local GEN = [==[
import struct, sys, zlib
w, h = int(sys.argv[2]), int(sys.argv[3])
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
rows = b"".join(b"\0" + b"".join(bytes((x * 255 // w, y * 255 // h, 160)) for x in range(w))
                for y in range(h))
with open(sys.argv[1], "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
]==]

-- Polls fn() every 0.1 s (a call can be a round trip to the browser)
-- until it returns a truthy value other than JSON null, which is
-- returned; fails with what after limit seconds.
local function wait_for(what, limit, fn)
  local v = h.eventually(function()
    local got = fn()
    return got ~= cjson.null and got
  end, limit, 0.1)
  assert(v, "timed out waiting for " .. what)
  return v
end

-- -- The app and the browser ---------------------------------------------------

-- Starts the app on port 0 with storage in dir, as imagehost_spec does.
local function start_app(dir)
  local script = h.tmpfile()
  h.write_file(script, h.server_script(([[
package.path = %q .. "examples/?.lua;" .. package.path
local app = require "imagehost.app"
local listener = assert(app.start { port = 0, dir = %q })
]]):format(h.root, dir)))
  local p = h.start(h.shell_quote(script))
  defer(p.stop)
  p.url = "http://127.0.0.1:" .. p.port
  return p
end

-- Starts headless chromium on a fresh profile with the DevTools port 0
-- (it writes the port it got into <profile>/DevToolsActivePort, so no
-- port is guessed) and returns that port. timeout(1) makes itself the
-- leader of a process group that holds every chromium process, so the
-- cleanup kills the group. --no-sandbox because the tests run as root;
-- --disable-dev-shm-usage because containers often have a tiny /dev/shm.
local function start_chromium()
  local profile = h.tmpdir()   -- deferred first, so removed after the kill
  local log, pidf = h.tmpfile(), h.tmpfile()
  os.execute(("timeout -k 2 60 %s --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
    .. " --no-default-browser-check --remote-debugging-port=0 --user-data-dir=%s about:blank"
    .. " >%s 2>&1 </dev/null & echo $! >%s"):format(CHROMIUM, h.shell_quote(profile), log, pidf))
  local pgid = assert(tonumber(h.slurp(pidf)))
  defer(function()
    -- dash's kill wants -s before the -- that lets a negative pid through.
    os.execute(("kill -s KILL -- -%d 2>/dev/null"):format(pgid))
    -- Let the processes go before their profile is removed.
    local deadline = cohost.monotonic() + 5
    while os.execute(("kill -s 0 -- -%d 2>/dev/null"):format(pgid)) == 0
      and cohost.monotonic() < deadline do
      cohost.sleep(0.05)
    end
  end)
  local port = wait_for("chromium's DevToolsActivePort", 15, function()
    local s = h.try_slurp(profile .. "/DevToolsActivePort")
    return s and tonumber(s:match("^(%d+)\n"))
  end)
  return port, log
end

-- -- A DevTools client -----------------------------------------------------------

-- Connects to a target's webSocketDebuggerUrl. cdp:call(method, params)
-- sends one command and returns its result, skipping the events that
-- arrive meanwhile; a protocol error raises. Every read waits 5 s at most.
local function cdp_connect(url)
  local ws = assert(websocket.connect(url, { timeout = 5000, close_timeout = 1000, max_message_size = 32 * 1024 * 1024 }))
  defer(function() ws:close() end)
  local c, last = {}, 0
  function c.call(method, params)
    last = last + 1
    assert(ws:send(cjson.encode { id = last, method = method, params = params or {} }))
    while true do
      local data, typ = ws:recv()
      assert(typ == "text", ("%s: recv: %s %s"):format(method, tostring(data), tostring(typ)))
      local msg = cjson.decode(data)
      if msg.id == last then
        assert(not msg.error, method .. ": " .. cjson.encode(msg.error or {}))
        return msg.result
      end
    end
  end
  -- The value of a JavaScript expression (promises awaited); a thrown
  -- exception raises.
  function c.eval(expr)
    local r = c.call("Runtime.evaluate", { expression = expr, returnByValue = true, awaitPromise = true })
    assert(not r.exceptionDetails, expr .. ": " .. cjson.encode(r.exceptionDetails or {}))
    return r.result.value
  end
  return c
end

-- The DevTools connection to chromium's first tab (about:blank).
local function open_tab(port)
  local res = assert(http.request(("http://127.0.0.1:%d/json/list"):format(port), { timeout = 5000 }))
  assert.equal(200, res.status)
  for _, t in ipairs(cjson.decode(res.body)) do
    if t.type == "page" and t.url == "about:blank" then
      return cdp_connect(t.webSocketDebuggerUrl)
    end
  end
  error("no about:blank page target: " .. res.body)
end

-- -- Setup: the page, loaded, with one PNG uploaded through its file picker ------

-- Returns the tab, the app, the PNG's path, bytes and id (its SHA-256).
local function uploaded()
  local dir = h.tmpdir()
  local png = dir .. "/gradient.png"
  local gen = h.tmpfile(GEN)
  assert(os.execute(("python3 %s %s %d %d"):format(gen, png, PNG_W, PNG_H)) == 0, "gen failed")
  local bytes = h.slurp(png)
  local id = h.hex(crypto.sha256_bin(bytes))

  local app = start_app(dir .. "/store")
  local tab = open_tab((start_chromium()))
  tab.call("Emulation.setDeviceMetricsOverride",
    { width = VIEW_W, height = VIEW_H, deviceScaleFactor = 1, mobile = false })
  tab.call("Page.navigate", { url = app.url .. "/" })
  -- The script ran and the gallery's first listing came back (empty).
  wait_for("the page and its first listing", 10, function()
    return tab.eval([[document.readyState === "complete" && document.location.pathname === "/"
                      && document.getElementById("count").textContent === "(0)"]])
  end)

  -- Picks the file the way a user would: the file input gets it and the
  -- browser fires its change event, on which the page uploads.
  local root = tab.call("DOM.getDocument", { depth = 0 }).root
  local input = tab.call("DOM.querySelector", { nodeId = root.nodeId, selector = "input[type=file]" })
  assert.is_true(input.nodeId > 0, "no file input on the page")
  tab.call("DOM.setFileInputFiles", { nodeId = input.nodeId, files = { png } })
  return tab, app, png, bytes, id
end

-- The gallery tile of image id as the browser sees it, once its image
-- has loaded (nil before).
local function tile_js(id)
  return ([[(() => {
    const li = document.querySelector('#gallery li[data-id="%s"]');
    const img = li && li.querySelector("img");
    if (!img || !img.complete || img.naturalWidth === 0) return null;
    const b = li.querySelector("button");
    return { src: img.src, w: img.naturalWidth, h: img.naturalHeight, tiles: document.querySelectorAll("#gallery li").length,
             button: b ? b.textContent : null, status: document.getElementById("status").textContent,
             token: JSON.parse(localStorage.getItem("imagehost-tokens") || "{}")["%s"] || null };
  })()]]):format(id, id)
end

-- -- Specs ------------------------------------------------------------------------

describe("imagehost page in headless chromium", function()
  it("uploads a PNG picked in the file input and shows it, decoded, in the gallery", function()
    local tab, app, _, bytes, id = uploaded()
    local t = wait_for("the uploaded image in the gallery", 10, function() return tab.eval(tile_js(id)) end)
    assert.equal(app.url .. "/i/" .. id, t.src)
    assert.same({ PNG_W, PNG_H }, { t.w, t.h })   -- the browser decoded the stored bytes
    assert.equal(1, t.tiles)
    assert.matches("gradient.png: stored as " .. id:sub(1, 12), t.status, 1, true)
    -- The page kept the delete token, so this browser's tile has a delete button.
    assert.equal("string", type(t.token))
    assert.equal("delete", t.button)

    -- The server has it: listed, and the same bytes back.
    local l = cjson.decode(assert(http.request(app.url .. "/api/images", { timeout = 5000 })).body)
    assert.equal(1, l.total)
    assert.equal(id, l.images[1].id)
    assert.equal(bytes, assert(http.request(app.url .. "/i/" .. id, { timeout = 5000 })).body)

    local shot = crypto.decode_base64(tab.call("Page.captureScreenshot", { format = "png" }).data)
    assert.equal("\137PNG\r\n\26\n", shot:sub(1, 8))
    -- IHDR: the screenshot is the viewport, and more than a blank page.
    local w1, w2, w3, w4, h1, h2, h3, h4 = shot:byte(17, 24)
    assert.same({ VIEW_W, VIEW_H }, { ((w1 * 256 + w2) * 256 + w3) * 256 + w4, ((h1 * 256 + h2) * 256 + h3) * 256 + h4 })
    assert.is_true(#shot > 10000, "screenshot of only " .. #shot .. " bytes")
    assert(os.execute("mkdir -p " .. h.shell_quote(h.root .. "build/artifacts")) == 0)
    h.write_file(ARTIFACT, shot)
    assert.equal(shot, h.slurp(ARTIFACT))
  end)

  it("deletes this browser's upload from its tile's button", function()
    local tab, app, _, _, id = uploaded()
    wait_for("the uploaded image in the gallery", 10, function() return tab.eval(tile_js(id)) end)
    tab.eval([[document.querySelector("#gallery li button").click()]])
    wait_for("the tile to go", 10, function()
      return tab.eval([[document.querySelectorAll("#gallery li").length === 0
                        && localStorage.getItem("imagehost-tokens") === "{}"]])
    end)
    assert.equal(404, assert(http.request(app.url .. "/i/" .. id, { timeout = 5000 })).status)
    local l = cjson.decode(assert(http.request(app.url .. "/api/images", { timeout = 5000 })).body)
    assert.equal(0, l.total)
  end)
end)
