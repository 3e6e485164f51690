-- cohost.flamegraph: a flame graph, as SVG, from folded stacks ("a;b;c 12"
-- lines, as cohost.profile gives them): Brendan Gregg's layout, drawn
-- here so that no tool is needed where cohost runs. Each frame is a box
-- as wide as the samples it was on the stack for, its callers below it;
-- the widest boxes at the top of a tower (the plateaus) are where the
-- time was spent. Hovering a box shows its name, samples and share.
local M = {}

local concat, format, floor, byte = table.concat, string.format, math.floor, string.byte

local WIDTH = 1200      -- pixels
local FRAME = 16        -- a frame's height
local PAD = 10          -- left and right
local TOP = 56          -- room for the title
local FONT = 12         -- px; a character is about FONT * 0.59 wide (Verdana)

local function xml(s)
  return (s:gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&apos;" }))
end

-- The stacks as a tree: { name, n = samples, kids = { name -> node }, order }.
local function tree(folded)
  local root = { name = "all", n = 0, kids = {} }
  for line in folded:gmatch("[^\n]+") do
    local stack, n = line:match("^(.-)%s+(%d+)$")
    n = tonumber(n)
    if stack and n and n > 0 then
      root.n = root.n + n
      local node = root
      for frame in stack:gmatch("[^;]+") do
        local kid = node.kids[frame]
        if not kid then
          kid = { name = frame, n = 0, kids = {} }
          node.kids[frame] = kid
        end
        kid.n = kid.n + n
        node = kid
      end
    end
  end
  return root
end

-- A warm colour from the name, the same for the same name on every graph;
-- C functions (from the interrupted program counter) in grey-blue.
local function colour(name)
  local h = 0
  for i = 1, #name do h = (h * 31 + byte(name, i)) % 2147483647 end
  local v1, v2 = (h % 1000) / 1000, (floor(h / 1000) % 1000) / 1000
  if name:find("^%[") then
    return format("rgb(%d,%d,%d)", 150 + floor(40 * v1), 160 + floor(40 * v1), 200 + floor(40 * v2))
  end
  return format("rgb(%d,%d,%d)", 205 + floor(50 * v1), floor(230 * v2), floor(55 * v1))
end

-- The frame's label cut to w pixels ("" when not even 3 characters fit).
local function label(name, w)
  local fits = floor((w - 6) / (FONT * 0.59))
  if fits < 3 then return "" end
  if #name <= fits then return name end
  return name:sub(1, fits - 2) .. ".."
end

-- svg(folded [, opts]) -> the SVG text. opts.title (default "CPU
-- profile"), opts.subtitle (a line under it).
function M.svg(folded, opts)
  opts = opts or {}
  local root = tree(folded or "")
  local out, depth_max = {}, 0
  local scale = root.n > 0 and (WIDTH - 2 * PAD) / root.n or 0
  -- Lay out depth-first, children in name order (as flamegraph.pl does, so
  -- that two graphs of one program compare side by side).
  local boxes = {}
  local function walk(node, depth, x)
    if node.n * scale < 0.1 then return end   -- narrower than a tenth of a pixel
    if depth > depth_max then depth_max = depth end
    boxes[#boxes + 1] = { node, depth, x }
    local names = {}
    for name in pairs(node.kids) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local kid = node.kids[name]
      walk(kid, depth + 1, x)
      x = x + kid.n * scale
    end
  end
  walk(root, 0, PAD)
  local height = TOP + (depth_max + 1) * FRAME + 2 * PAD
  out[#out + 1] = format('<?xml version="1.0" standalone="no"?>\n<svg version="1.1" width="%d" height="%d" '
    .. 'viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg" font-family="Verdana, sans-serif" '
    .. 'font-size="%d">', WIDTH, height, WIDTH, height, FONT)
  out[#out + 1] = format('<rect x="0" y="0" width="%d" height="%d" fill="#f8f8f4"/>', WIDTH, height)
  out[#out + 1] = format('<text x="%d" y="24" text-anchor="middle" font-size="17">%s</text>', WIDTH / 2,
    xml(opts.title or "CPU profile"))
  out[#out + 1] = format('<text x="%d" y="44" text-anchor="middle" fill="#555">%s</text>', WIDTH / 2,
    xml(opts.subtitle or format("%d samples", root.n)))
  if root.n == 0 then
    out[#out + 1] = format('<text x="%d" y="%d" text-anchor="middle">no samples</text>', WIDTH / 2, TOP + FRAME)
  end
  for _, b in ipairs(boxes) do
    local node, depth, x = b[1], b[2], b[3]
    local w = node.n * scale
    local y = height - PAD - (depth + 1) * FRAME
    local share = 100 * node.n / root.n
    out[#out + 1] = format('<g><title>%s (%d samples, %.2f%%)</title><rect x="%.1f" y="%d" width="%.1f" '
      .. 'height="%d" fill="%s" rx="2"/><text x="%.1f" y="%d">%s</text></g>',
      xml(node.name), node.n, share, x, y, w, FRAME - 1, node.name == "all" and "#d8d8d0" or colour(node.name),
      x + 3, y + FRAME - 4, xml(label(node.name, w)))
  end
  out[#out + 1] = "</svg>\n"
  return concat(out, "\n")
end

return M
