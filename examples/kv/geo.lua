-- GEO: GEOADD, GEODIST, GEOHASH, GEOPOS, GEORADIUS, GEORADIUSBYMEMBER
-- (and their _RO forms), GEOSEARCH, GEOSEARCHSTORE, on sorted sets as
-- Redis 7.0 has them (geo.c, geohash.c, geohash_helper.c): a point is a
-- member whose score is its 52-bit geohash (26 bits of latitude, from
-- -85.05112878 to 85.05112878, and 26 of longitude, interleaved), so a
-- search looks at the score ranges of the geohash box around the center
-- and its eight neighbours, at the precision the radius needs, and keeps
-- the points within the radius (or box) by the haversine distance on a
-- sphere of 6372797.560856 m. The same arithmetic in the same order, with
-- the C library's trigonometry, gives Redis's distances and coordinates
-- to the last digit, and the boxes are visited in Redis's order, so even
-- an unsorted search answers in the same order.
local ffi = require "ffi"
local R = require "kv.registry"
local resp = require "kv.resp"
local store = require "kv.store"
local zsets = require "kv.zsets"
local sl = require "kv.skiplist"
local ints = require "kv.ints"

local reg = R.register
local put, bulk, int, null = resp.put, resp.bulk, resp.int, resp.null
local WRONGTYPE, SYNTAX = resp.WRONGTYPE, resp.SYNTAX
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift
local floor, sin, cos, asin, sqrt, abs = math.floor, math.sin, math.cos, math.asin, math.sqrt,
  math.abs
local format, lower, tonumber = string.format, string.lower, tonumber

local M = {}

local U64 = ffi.typeof("uint64_t")

local LONG_MIN, LONG_MAX = -180, 180
local LAT_MIN, LAT_MAX = -85.05112878, 85.05112878
local STEP_MAX = 26
local D_R = math.pi / 180.0
local EARTH_RADIUS = 6372797.560856
local MERCATOR_MAX = 20037726.37

-- -- Geohash ---------------------------------------------------------------------

-- The bits of x (the latitude) at the even places and of y at the odd
-- ones (interleave64).
local function interleave(x, y)
  local B = { 0x5555555555555555ULL, 0x3333333333333333ULL, 0x0F0F0F0F0F0F0F0FULL,
              0x00FF00FF00FF00FFULL, 0x0000FFFF0000FFFFULL }
  local S = { 1, 2, 4, 8, 16 }
  x, y = U64(x), U64(y)
  for i = 5, 1, -1 do
    x = band(bor(x, lshift(x, S[i])), B[i])
    y = band(bor(y, lshift(y, S[i])), B[i])
  end
  return bor(x, lshift(y, 1))
end

-- The even bits and the odd bits of h, each packed (deinterleave64).
local function deinterleave(h)
  local B = { 0x5555555555555555ULL, 0x3333333333333333ULL, 0x0F0F0F0F0F0F0F0FULL,
              0x00FF00FF00FF00FFULL, 0x0000FFFF0000FFFFULL, 0x00000000FFFFFFFFULL }
  local S = { 0, 1, 2, 4, 8, 16 }
  local x, y = h, rshift(h, 1)
  for i = 1, 6 do
    x = band(bor(x, rshift(x, S[i])), B[i])
    y = band(bor(y, rshift(y, S[i])), B[i])
  end
  return tonumber(x), tonumber(y)
end

-- The geohash of a point in the given ranges at step bits a coordinate:
-- a uint64_t (geohashEncode). The point must be in range.
local function encode(lon, lat, step, lon_min, lon_max, lat_min, lat_max)
  local lat_off = (lat - lat_min) / (lat_max - lat_min) * 2 ^ step
  local lon_off = (lon - lon_min) / (lon_max - lon_min) * 2 ^ step
  return interleave(floor(lat_off), floor(lon_off))
end

-- The box a geohash of step bits stands for: lon_min, lon_max, lat_min,
-- lat_max (geohashDecode).
local function decode(bits, step)
  local ilat, ilon = deinterleave(bits)
  local lat_scale, lon_scale = LAT_MAX - LAT_MIN, LONG_MAX - LONG_MIN
  local den = 2 ^ step
  return LONG_MIN + (ilon * 1.0 / den) * lon_scale, LONG_MIN + ((ilon + 1) * 1.0 / den) * lon_scale,
         LAT_MIN + (ilat * 1.0 / den) * lat_scale, LAT_MIN + ((ilat + 1) * 1.0 / den) * lat_scale
end

-- A point's 52-bit geohash as its sorted set score.
local function score_of(lon, lat)
  return tonumber(encode(lon, lat, STEP_MAX, LONG_MIN, LONG_MAX, LAT_MIN, LAT_MAX))
end

-- The center of the box of a score (decodeGeohash): lon, lat, kept
-- within the map (the last box's center lies past 180 and the top
-- latitude, as Redis clamps them).
local function point_of(score)
  local lon_min, lon_max, lat_min, lat_max = decode(U64(score), STEP_MAX)
  local lon, lat = (lon_min + lon_max) / 2, (lat_min + lat_max) / 2
  if lon > LONG_MAX then lon = LONG_MAX elseif lon < LONG_MIN then lon = LONG_MIN end
  if lat > LAT_MAX then lat = LAT_MAX elseif lat < LAT_MIN then lat = LAT_MIN end
  return lon, lat
end
M.point_of = point_of

-- The neighbour of a geohash one box along x (the longitude bits) or y.
local function move_x(bits, step, d)
  if d == 0 then return bits end
  local x = band(bits, 0xaaaaaaaaaaaaaaaaULL)
  local y = band(bits, 0x5555555555555555ULL)
  local zz = rshift(0x5555555555555555ULL, 64 - step * 2)
  if d > 0 then
    x = x + (zz + 1)
  else
    x = bor(x, zz)
    x = x - (zz + 1)
  end
  x = band(x, rshift(0xaaaaaaaaaaaaaaaaULL, 64 - step * 2))
  return bor(x, y)
end

local function move_y(bits, step, d)
  if d == 0 then return bits end
  local x = band(bits, 0xaaaaaaaaaaaaaaaaULL)
  local y = band(bits, 0x5555555555555555ULL)
  local zz = rshift(0xaaaaaaaaaaaaaaaaULL, 64 - step * 2)
  if d > 0 then
    y = y + (zz + 1)
  else
    y = bor(y, zz)
    y = y - (zz + 1)
  end
  y = band(y, rshift(0x5555555555555555ULL, 64 - step * 2))
  return bor(x, y)
end

local function neighbour(bits, step, dx, dy)
  return move_y(move_x(bits, step, dx), step, dy)
end

-- -- Distances -----------------------------------------------------------------------

local function deg_rad(a) return a * D_R end
local function rad_deg(a) return a / D_R end

-- The haversine distance in meters (geohashGetDistance).
local function distance(lon1, lat1, lon2, lat2)
  local lat1r, lon1r, lat2r, lon2r = deg_rad(lat1), deg_rad(lon1), deg_rad(lat2), deg_rad(lon2)
  local u = sin((lat2r - lat1r) / 2)
  local v = sin((lon2r - lon1r) / 2)
  return 2.0 * EARTH_RADIUS * asin(sqrt(u * u + cos(lat1r) * cos(lat2r) * v * v))
end

-- The bits a coordinate needs for boxes that cover a radius
-- (geohashEstimateStepsByRadius).
local function steps_for(range, lat)
  if range == 0 then return 26 end
  local step = 1
  while range < MERCATOR_MAX do
    range = range * 2
    step = step + 1
  end
  step = step - 2
  if lat > 66 or lat < -66 then
    step = step - 1
    if lat > 80 or lat < -80 then step = step - 1 end
  end
  if step < 1 then step = 1 end
  if step > 26 then step = 26 end
  return step
end

-- A search shape: { lon, lat, conv (meters a unit), radius, or width and
-- height (in units) }.

-- The bounding box of a shape: lon_min, lat_min, lon_max, lat_max
-- (geohashBoundingBox).
local function bounding_box(s)
  local height = s.conv * (s.radius or s.height / 2)
  local width = s.conv * (s.radius or s.width / 2)
  local lat_delta = rad_deg(height / EARTH_RADIUS)
  local lon_delta_top = rad_deg(width / EARTH_RADIUS / cos(deg_rad(s.lat + lat_delta)))
  local lon_delta_bottom = rad_deg(width / EARTH_RADIUS / cos(deg_rad(s.lat - lat_delta)))
  local south = s.lat < 0
  return south and s.lon - lon_delta_bottom or s.lon - lon_delta_top, s.lat - lat_delta,
         south and s.lon + lon_delta_bottom or s.lon + lon_delta_top, s.lat + lat_delta
end

-- The boxes to search for a shape, in Redis's order (the center, north,
-- south, east, west, north-east, north-west, south-east, south-west),
-- each { bits, step } or false where it cannot hold a match
-- (geohashCalculateAreasByShapeWGS84).
local function boxes(s)
  local min_lon, min_lat, max_lon, max_lat = bounding_box(s)
  local radius = s.radius or sqrt((s.width / 2) * (s.width / 2) + (s.height / 2) * (s.height / 2))
  radius = radius * s.conv
  local step = steps_for(radius, s.lat)
  local function around(st)
    local h = encode(s.lon, s.lat, st, LONG_MIN, LONG_MAX, LAT_MIN, LAT_MAX)
    return h, { n = neighbour(h, st, 0, 1), s = neighbour(h, st, 0, -1), e = neighbour(h, st, 1, 0),
                w = neighbour(h, st, -1, 0), ne = neighbour(h, st, 1, 1), nw = neighbour(h, st, -1, 1),
                se = neighbour(h, st, 1, -1), sw = neighbour(h, st, -1, -1) }
  end
  local h, nb = around(step)
  local _, _, _, north_max = decode(nb.n, step)
  local _, _, south_min = decode(nb.s, step)
  local _, east_max = decode(nb.e, step)
  local west_min = decode(nb.w, step)
  if step > 1 and (north_max < max_lat or south_min > min_lat or east_max < max_lon or west_min > min_lon) then
    step = step - 1
    h, nb = around(step)
  end
  local alon_min, alon_max, alat_min, alat_max = decode(h, step)
  local keep = { n = true, s = true, e = true, w = true, ne = true, nw = true, se = true, sw = true }
  if step >= 2 then
    if alat_min < min_lat then keep.s, keep.sw, keep.se = false, false, false end
    if alat_max > max_lat then keep.n, keep.ne, keep.nw = false, false, false end
    if alon_min < min_lon then keep.w, keep.sw, keep.nw = false, false, false end
    if alon_max > max_lon then keep.e, keep.se, keep.ne = false, false, false end
  end
  local list = { { h, step } }
  for _, d in ipairs { "n", "s", "e", "w", "ne", "nw", "se", "sw" } do
    list[#list + 1] = keep[d] and { nb[d], step } or false
  end
  return list
end

-- Whether the point of a score is in the shape: its lon, lat and distance
-- from the center, or nil (geoWithinShape).
local function within(s, score)
  local lon, lat = point_of(score)
  if s.radius then
    local d = distance(s.lon, s.lat, lon, lat)
    if d > s.radius * s.conv then return nil end
    return lon, lat, d
  end
  local lon_d = distance(lon, lat, s.lon, lat)
  local lat_d = distance(lon, lat, lon, s.lat)
  if lon_d > s.width * s.conv / 2 or lat_d > s.height * s.conv / 2 then return nil end
  return lon, lat, distance(s.lon, s.lat, lon, lat)
end

-- The points of zset z in shape s, in the order the boxes and their score
-- ranges give them; at most limit (0: all) with ANY.
local function search(z, s, limit)
  local found = {}
  local last   -- the box searched last, once it is not the center's
  for i, b in ipairs(boxes(s)) do
    if b then
      -- Next to a huge radius neighbours can be one box: searched once
      -- (Redis compares a box with the last one searched, the center's
      -- left out, so a neighbour equal to the center is searched again).
      if not (last and b[1] == last[1] and b[2] == last[2]) then
        if limit > 0 and #found >= limit then break end
        local shift = 52 - b[2] * 2
        local min = tonumber(lshift(b[1], shift))
        local max = tonumber(lshift(b[1] + 1, shift))
        local x = sl.first_in(z.zl, function(node) return node.s >= min end)
        while x and x.s < max do
          local lon, lat, d = within(s, x.s)
          if lon then found[#found + 1] = { m = x.m, s = x.s, lon = lon, lat = lat, d = d } end
          if limit > 0 and #found >= limit then break end
          x = x[1]
        end
        last = i > 1 and b or nil
      end
    end
  end
  return found
end

-- -- Arguments ------------------------------------------------------------------------

local function float_arg(s)
  return zsets.score_of(s)
end

-- A longitude and latitude: lon, lat; or nil and the error reply.
local function lonlat_arg(a, b)
  local lon, lat = float_arg(a), float_arg(b)
  if lon == nil or lat == nil then return nil, "-ERR value is not a valid float\r\n" end
  if lon < LONG_MIN or lon > LONG_MAX or lat < LAT_MIN or lat > LAT_MAX then
    return nil, resp.err(format("ERR invalid longitude,latitude pair %f,%f", lon, lat))
  end
  return lon, lat
end

local UNITS = { m = 1, km = 1000, ft = 0.3048, mi = 1609.34 }
local BAD_UNIT = "-ERR unsupported unit provided. please use M, KM, FT, MI\r\n"

-- A radius and its unit: radius, meters a unit; or nil and the error.
local function radius_arg(r, u)
  local v = float_arg(r)
  if v == nil then return nil, "-ERR need numeric radius\r\n" end
  if v < 0 then return nil, "-ERR radius cannot be negative\r\n" end
  local conv = UNITS[lower(u)]
  if not conv then return nil, BAD_UNIT end
  return v, conv
end

-- A box's width, height and unit: width, height, meters a unit; or nil
-- and the error.
local function box_arg(w, h, u)
  local wv = float_arg(w)
  if wv == nil then return nil, "-ERR need numeric width\r\n" end
  local hv = float_arg(h)
  if hv == nil then return nil, "-ERR need numeric height\r\n" end
  if hv < 0 or wv < 0 then return nil, "-ERR height or width cannot be negative\r\n" end
  local conv = UNITS[lower(u)]
  if not conv then return nil, BAD_UNIT end
  return wv, hv, conv
end

-- The zset at k for a GEO command: the zset, false when missing, or nil
-- for another type.
local function geo_at(k)
  local v = store.get(k)
  if v == nil then return false end
  if type(v) ~= "table" or v.kind ~= "zset" then return nil end
  return v
end

-- A coordinate as Redis prints it (addReplyHumanLongDouble: "%.17Lf"
-- without the trailing zeros; a double in RESP3).
local function human(out, n, v)
  local s = format("%.17f", v)
  if s:find(".", 1, true) then s = s:gsub("0+$", ""):gsub("%.$", "") end
  if s == "-0" then s = "0" end
  if resp.is3() then return put(out, n, "," .. s .. "\r\n") end
  return bulk(out, n, s)
end

-- A distance as Redis prints it: four decimals, a bulk string.
local function dist_reply(out, n, d)
  return bulk(out, n, format("%.4f", d))
end

-- -- GEOADD ---------------------------------------------------------------------------

-- GEOADD key [NX|XX] [CH] lon lat member [...]: ZADD with each point's
-- geohash as its score, logged as that ZADD (as Redis propagates it).
reg("geoadd", function(c, argv, argc, out, n)
  local nx, xx, at = false, false, 3
  while at <= argc do
    local o = lower(argv[at])
    if o == "nx" then nx = true
    elseif o == "xx" then xx = true
    elseif o ~= "ch" then break end
    at = at + 1
  end
  if (argc - at + 1) % 3 ~= 0 or (xx and nx) then return put(out, n, SYNTAX) end
  local zargv = { "ZADD" }
  for i = 2, at - 1 do zargv[i] = argv[i] end
  local zn = at - 1
  for i = at, argc, 3 do
    local lon, lat = lonlat_arg(argv[i], argv[i + 1])
    if not lon then return put(out, n, lat) end
    zargv[zn + 1] = ints.str(score_of(lon, lat))
    zargv[zn + 2] = argv[i + 2]
    zn = zn + 2
  end
  n = R.commands.zadd.fn(c, zargv, zn, out, n)
  if R.prop then
    R.prop = resp.encode(zargv, zn)
    R.note("z", "zadd", argv[2])
  end
  return n
end)

-- -- GEODIST, GEOHASH, GEOPOS ----------------------------------------------------------

reg("geodist", function(_, argv, argc, out, n)
  local to_meter = 1
  if argc == 5 then
    to_meter = UNITS[lower(argv[5])]
    if not to_meter then return put(out, n, BAD_UNIT) end
  elseif argc > 5 then
    return put(out, n, SYNTAX)
  end
  local z = geo_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  if not z then return null(out, n) end
  local s1, s2 = z.s[argv[3]], z.s[argv[4]]
  if s1 == nil or s2 == nil then return null(out, n) end
  local lon1, lat1 = point_of(s1)
  local lon2, lat2 = point_of(s2)
  return dist_reply(out, n, distance(lon1, lat1, lon2, lat2) / to_meter)
end)

local ALPHABET = "0123456789bcdefghjkmnpqrstuvwxyz"

-- GEOHASH key member [...]: each point's standard 11-character geohash
-- (re-encoded from its center with latitudes from -90 to 90, as Redis).
reg("geohash", function(_, argv, argc, out, n)
  local z = geo_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  n = resp.array(out, n, argc - 2)
  for j = 3, argc do
    local score = z and z.s[argv[j]] or nil
    if score == nil then
      n = null(out, n)
    else
      local lon, lat = point_of(score)
      local bits = encode(lon, lat, 26, -180, 180, -90, 90)
      local t = {}
      for i = 0, 10 do
        local idx = 0
        if i < 10 then idx = tonumber(band(rshift(bits, 52 - (i + 1) * 5), 0x1fULL)) end
        t[i + 1] = ALPHABET:sub(idx + 1, idx + 1)
      end
      n = bulk(out, n, table.concat(t))
    end
  end
  return n
end)

-- GEOPOS key member [...]: each point's [longitude, latitude], or a null.
reg("geopos", function(_, argv, argc, out, n)
  local z = geo_at(argv[2])
  if z == nil then return put(out, n, WRONGTYPE) end
  n = resp.array(out, n, argc - 2)
  for j = 3, argc do
    local score = z and z.s[argv[j]] or nil
    if score == nil then
      n = resp.null_array(out, n)
    else
      local lon, lat = point_of(score)
      n = resp.array(out, n, 2)
      n = human(out, n, lon)
      n = human(out, n, lat)
    end
  end
  return n
end)

-- -- Searches ----------------------------------------------------------------------------

local COORDS, MEMBER, NOSTORE, SEARCH, SEARCHSTORE = 1, 2, 4, 8, 16

-- A stable merge sort of the points by distance (glibc's qsort is one).
local function sort_points(t, desc)
  local n = #t
  local a, b = t, {}
  local function after(x, y)   -- x strictly after y
    if desc then return x.d < y.d end
    return x.d > y.d
  end
  local width = 1
  while width < n do
    local i = 1
    while i <= n do
      local mid, hi = math.min(i + width, n + 1), math.min(i + 2 * width, n + 1)
      local l, r, k = i, mid, i
      while l < mid and r < hi do
        if after(a[l], a[r]) then
          b[k] = a[r]
          r = r + 1
        else
          b[k] = a[l]
          l = l + 1
        end
        k = k + 1
      end
      while l < mid do b[k] = a[l]; l, k = l + 1, k + 1 end
      while r < hi do b[k] = a[r]; r, k = r + 1, k + 1 end
      i = hi
    end
    a, b = b, a
    width = width * 2
  end
  return a
end

-- Redis's georadiusGeneric for all six commands: src is the key's index,
-- flags say which command it is.
local function georadius(src, flags)
  return function(c, argv, argc, out, n)
    local z = geo_at(argv[src])
    if z == nil then return put(out, n, WRONGTYPE) end
    local s = { conv = 1 }
    local base, storekey, storedist = nil, nil, false
    if band(flags, COORDS) ~= 0 then
      base = 6
      local lon, lat = lonlat_arg(argv[3], argv[4])
      if not lon then return put(out, n, lat) end
      s.lon, s.lat = lon, lat
      local r, conv = radius_arg(argv[5], argv[6])
      if not r then return put(out, n, conv) end
      s.radius, s.conv = r, conv
    elseif band(flags, MEMBER) ~= 0 and not z then
      base = 5   -- no key: the options are still parsed, for the reply's kind
    elseif band(flags, MEMBER) ~= 0 then
      base = 5
      local score = z.s[argv[3]]
      if score == nil then return put(out, n, "-ERR could not decode requested zset member\r\n") end
      s.lon, s.lat = point_of(score)
      local r, conv = radius_arg(argv[4], argv[5])
      if not r then return put(out, n, conv) end
      s.radius, s.conv = r, conv
    else
      base = 2
      if band(flags, SEARCHSTORE) ~= 0 then
        base = 3
        storekey = argv[2]
      end
    end
    local withdist, withhash, withcoord, any = false, false, false, false
    local frommember, fromloc, byradius, bybox = false, false, false, false
    local sort, count = nil, 0
    local search_cmd = band(flags, SEARCH) ~= 0
    local i = base + 1
    while i <= argc do
      local o, left = lower(argv[i]), argc - i
      if o == "withdist" then withdist = true
      elseif o == "withhash" then withhash = true
      elseif o == "withcoord" then withcoord = true
      elseif o == "any" then any = true
      elseif o == "asc" then sort = "asc"
      elseif o == "desc" then sort = "desc"
      elseif o == "count" and left >= 1 then
        local v = ints.parse(argv[i + 1])
        if v == nil then return put(out, n, resp.NOT_INT) end
        if v <= 0 then return put(out, n, "-ERR COUNT must be > 0\r\n") end
        count = tonumber(v)
        i = i + 1
      elseif (o == "store" or o == "storedist") and left >= 1 and band(flags, NOSTORE) == 0
          and not search_cmd then
        storekey, storedist = argv[i + 1], o == "storedist"
        i = i + 1
      elseif o == "storedist" and search_cmd and band(flags, SEARCHSTORE) ~= 0 then
        storedist = true
      elseif o == "frommember" and left >= 1 and search_cmd and not fromloc then
        if z then
          local score = z.s[argv[i + 1]]
          if score == nil then return put(out, n, "-ERR could not decode requested zset member\r\n") end
          s.lon, s.lat = point_of(score)
        end
        frommember = true
        i = i + 1
      elseif o == "fromlonlat" and left >= 2 and search_cmd and not frommember then
        local lon, lat = lonlat_arg(argv[i + 1], argv[i + 2])
        if not lon then return put(out, n, lat) end
        s.lon, s.lat = lon, lat
        fromloc = true
        i = i + 2
      elseif o == "byradius" and left >= 2 and search_cmd and not bybox then
        local r, conv = radius_arg(argv[i + 1], argv[i + 2])
        if not r then return put(out, n, conv) end
        s.radius, s.conv = r, conv
        byradius = true
        i = i + 2
      elseif o == "bybox" and left >= 3 and search_cmd and not byradius then
        local w, h, conv = box_arg(argv[i + 1], argv[i + 2], argv[i + 3])
        if not w then return put(out, n, h) end
        s.width, s.height, s.conv = w, h, conv
        bybox = true
        i = i + 3
      else
        return put(out, n, SYNTAX)
      end
      i = i + 1
    end
    if storekey and (withdist or withhash or withcoord) then
      return put(out, n, resp.err(format("ERR %s is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
        band(flags, SEARCHSTORE) ~= 0 and "GEOSEARCHSTORE" or "STORE option in GEORADIUS")))
    end
    if search_cmd and not (frommember or fromloc) then
      return put(out, n, resp.err("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for "
                                  .. argv[1]))
    end
    if search_cmd and not (byradius or bybox) then
      return put(out, n, resp.err("ERR exactly one of BYRADIUS and BYBOX can be specified for " .. argv[1]))
    end
    if any and count == 0 then return put(out, n, "-ERR the ANY argument requires COUNT argument\r\n") end
    if not z then
      if storekey then
        if store.del(storekey) then
          R.note("g", "del", storekey)
          R.prop = true
        end
        return put(out, n, resp.ZERO)
      end
      return put(out, n, resp.EMPTY_ARRAY)
    end
    -- COUNT without an order takes the nearest: ascending (not with ANY).
    if count ~= 0 and not sort and not any then sort = "asc" end
    local found = search(z, s, any and count or 0)
    if #found == 0 and not storekey then return put(out, n, resp.EMPTY_ARRAY) end
    local total = #found
    local returned = (count == 0 or total < count) and total or count
    if sort then found = sort_points(found, sort == "desc") end
    if not storekey then
      local extra = (withdist and 1 or 0) + (withcoord and 1 or 0) + (withhash and 1 or 0)
      n = resp.array(out, n, returned)
      for j = 1, returned do
        local p = found[j]
        if extra > 0 then n = resp.array(out, n, extra + 1) end
        n = bulk(out, n, p.m)
        if withdist then n = dist_reply(out, n, p.d / s.conv) end
        if withhash then n = put(out, n, int(p.s)) end
        if withcoord then
          n = resp.array(out, n, 2)
          n = human(out, n, p.lon)
          n = human(out, n, p.lat)
        end
      end
      return n
    end
    if returned > 0 then
      local ms, ss = {}, {}
      for j = 1, returned do
        ms[j] = found[j].m
        ss[j] = storedist and found[j].d / s.conv or found[j].s
      end
      local zsetops = require "kv.zsetops"
      ms, ss = zsetops.sort_pairs(ms, ss, returned)
      store.set(storekey, zsets.from_sorted(ms, ss, returned))
      zsetops.release(returned)
      R.note("z", search_cmd and "geosearchstore" or "georadiusstore", storekey)
      R.prop = true
    elseif store.del(storekey) then
      R.note("g", "del", storekey)
      R.prop = true
    end
    return put(out, n, int(returned))
  end
end

reg("georadius", georadius(2, COORDS))
reg("georadiusbymember", georadius(2, MEMBER))
reg("georadius_ro", georadius(2, bor(COORDS, NOSTORE)))
reg("georadiusbymember_ro", georadius(2, bor(MEMBER, NOSTORE)))
reg("geosearch", georadius(2, SEARCH))
reg("geosearchstore", georadius(3, bor(SEARCH, SEARCHSTORE)))

return M
