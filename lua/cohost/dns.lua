-- cohost.dns: a stub resolver on cosockets. Names come from the hosts file
-- first, then from the nameservers of resolv.conf over UDP (TCP when a
-- reply is truncated), so a lookup parks only its caller: a silent
-- nameserver costs a parked coroutine and a socket, never a thread-pool
-- thread. Results are cached per worker with their TTL, and concurrent
-- lookups of one name share one query. install() routes cosocket connects
-- by name through it. See docs/dns.md.
--
-- Only core modules are required, so init.lua may require this file.
local socket = require "cohost.core.socket"
local udp = require "cohost.core.udp"
local task = require "cohost.core.task"
local sys = require "cohost.core.sys"
local bit = require "bit"
local ffi = require "ffi"

local M = {}

local byte, char, sub, find, lower, format = string.byte, string.char, string.sub,
  string.find, string.lower, string.format
local band, rshift = bit.band, bit.rshift
local concat = table.concat
local monotonic = sys.monotonic
local huge, min = math.huge, math.min

local TYPE_A, TYPE_CNAME, TYPE_SOA, TYPE_AAAA = 1, 5, 6, 28
local NOT_FOUND = "name not found"

-- Messages for the reply codes a server may send (RFC 1035 4.1.1). 0 and 3
-- are answers; the others make the resolver try the next nameserver.
local RCODE_ERR = { [1] = "format error", [2] = "server failure",
                    [4] = "not implemented", [5] = "refused" }

-- -- Files -----------------------------------------------------------------

-- statx(2) has one layout on every architecture, unlike struct stat. The
-- names are prefixed so another module's cdefs cannot clash with them.
ffi.cdef [[
struct cohost_dns_ts { int64_t sec; uint32_t nsec; int32_t pad; };
struct cohost_dns_statx {
  uint32_t mask, blksize; uint64_t attributes; uint32_t nlink, uid, gid;
  uint16_t mode, pad0; uint64_t ino, size, blocks, attributes_mask;
  struct cohost_dns_ts atime, btime, ctime, mtime;
  uint32_t rdev_major, rdev_minor, dev_major, dev_minor; uint64_t spare[14];
};
]]
-- Declared apart: another module may have declared statx already.
pcall(ffi.cdef, "int statx(int, const char *, int, unsigned int, struct cohost_dns_statx *);")
local statx_ok, statx_fn = pcall(function() return ffi.C.statx end)
local stx = ffi.new("struct cohost_dns_statx")

-- A string that changes when the file does (inode, size, mtime to the
-- nanosecond), or false if it cannot be read. Without statx, a string that
-- changes every call, so the file is simply re-read.
local function version(path)
  if not statx_ok then return monotonic() end
  if statx_fn(-100, path, 0, 0x7ff, stx) ~= 0 then return false end   -- AT_FDCWD, STATX_BASIC_STATS
  return format("%d %d %d.%d", tonumber(stx.ino), tonumber(stx.size),
                tonumber(stx.mtime.sec), tonumber(stx.mtime.nsec))
end

-- A file parsed by parse(text) and parsed again when its version changes,
-- looked at no more than once a second: a stat per lookup would double the
-- cost of a cache hit. get() -> the parsed value.
local function watched(parse)
  local w = { path = nil, ver = nil, checked = -huge, value = nil }
  function w.get()
    local now = monotonic()
    if now - w.checked < 1 then return w.value end
    w.checked = now
    local v = version(w.path)
    if v ~= w.ver or w.value == nil then
      local f = v and io.open(w.path)
      local text = f and f:read("*a") or ""
      if f then f:close() end
      w.ver, w.value = v, parse(text)
    end
    return w.value
  end
  function w.set(path)
    w.path, w.ver, w.checked, w.value = path, nil, -huge, nil
  end
  return w
end

-- The family of an IP literal (4 or 6) and the address without brackets,
-- or nil for a name. Loose on purpose: the C socket code has the last word.
local function literal(s)
  if find(s, ":", 1, true) then
    local inner = s:match("^%[(.*)%]$") or s
    if find(inner, "^[%x:.]+$") then return 6, inner end
    return nil
  end
  if find(s, "^%d+%.%d+%.%d+%.%d+$") then return 4, s end
  return nil
end

-- /etc/hosts: name -> array of {address, family, ttl = -1}, IPv4 first
-- (each family in file order). The first line naming an address wins.
local function parse_hosts(text)
  local map, v6 = {}, {}
  for line in text:gmatch("[^\n]+") do
    line = line:gsub("#.*", "")
    local addr, names = line:match("^%s*(%S+)%s+(.-)%s*$")
    local fam = addr and literal(addr)
    if fam and not find(addr, "[%[%%]") then
      for name in names:gmatch("%S+") do
        name = lower(name):gsub("%.$", "")
        local list = map[name]
        if not list then list = {}; map[name] = list; v6[name] = {} end
        local dup = false
        for _, a in ipairs(list) do dup = dup or a.address == addr end
        for _, a in ipairs(v6[name]) do dup = dup or a.address == addr end
        if not dup then
          local rec = { address = addr, family = fam, ttl = -1 }
          if fam == 4 then list[#list + 1] = rec else v6[name][#v6[name] + 1] = rec end
        end
      end
    end
  end
  for name, list in pairs(map) do
    for _, rec in ipairs(v6[name]) do list[#list + 1] = rec end
  end
  return map
end

-- A nameserver given as "ip", "ip:port", "[v6]:port" or {ip, port}: {ip, port}.
local function nameserver(ns)
  if type(ns) == "table" then
    assert(literal(tostring(ns[1])), "bad nameserver address")
    return { select(2, literal(ns[1])), tonumber(ns[2]) or 53 }
  end
  assert(type(ns) == "string", "bad nameserver")
  local ip, port = ns:match("^%[(.+)%]:(%d+)$")
  if not ip then ip, port = ns:match("^([%d.]+):(%d+)$") end
  ip = ip or ns
  assert(literal(ip), "bad nameserver address: " .. ns)
  return { select(2, literal(ip)), tonumber(port) or 53 }
end

-- resolv.conf(5), the parts a stub uses: at most 3 nameservers, the last
-- search or domain line, options ndots, timeout and attempts (with glibc's
-- defaults and caps). No nameserver means 127.0.0.1, as in glibc.
local function parse_resolv(text)
  local c = { nameservers = {}, search = {}, ndots = 1, timeout = 5, attempts = 2 }
  for line in text:gmatch("[^\n]+") do
    local key, rest = line:match("^%s*(%a+)%s+([^#;]*)")
    if key == "nameserver" and #c.nameservers < 3 then
      local ip = rest:match("^(%S+)")
      if ip and literal(ip) then c.nameservers[#c.nameservers + 1] = { select(2, literal(ip)), 53 } end
    elseif key == "search" or key == "domain" then
      c.search = {}
      for d in rest:gmatch("%S+") do c.search[#c.search + 1] = lower(d):gsub("%.$", "") end
    elseif key == "options" then
      for opt in rest:gmatch("%S+") do
        local k, v = opt:match("^(%a+):(%d+)$")
        v = tonumber(v)
        if k == "ndots" then c.ndots = min(v, 15)
        elseif k == "timeout" then c.timeout = min(math.max(v, 1), 30)
        elseif k == "attempts" then c.attempts = min(math.max(v, 1), 5) end
      end
    end
  end
  if #c.nameservers == 0 then c.nameservers[1] = { "127.0.0.1", 53 } end
  return c
end

local hosts = watched(parse_hosts)
local resolv = watched(parse_resolv)
local overrides = {}    -- what configure() was last given
hosts.set("/etc/hosts")
resolv.set("/etc/resolv.conf")

-- The settings in force: overrides over the resolv.conf file.
local function settings()
  local file, o = resolv.get(), overrides
  return {
    nameservers = o.nameservers or file.nameservers,
    search = o.search or file.search,
    ndots = o.ndots or file.ndots,
    timeout = o.timeout or file.timeout,
    attempts = o.attempts or file.attempts,
    negative_ttl = o.negative_ttl or 30,
  }
end

-- -- Wire format (RFC 1035) -----------------------------------------------

-- Query ids come from /dev/urandom, 256 at a time: a guessable id would
-- let an off-path host forge answers.
local rnd, rnd_pos = "", 1
local function random16()
  if rnd_pos + 1 > #rnd then
    local f = io.open("/dev/urandom", "rb")
    rnd = f and f:read(512) or ""
    if f then f:close() end
    rnd_pos = 1
    if #rnd < 2 then return math.random(0, 65535) end
  end
  local hi, lo = byte(rnd, rnd_pos, rnd_pos + 1)
  rnd_pos = rnd_pos + 2
  return hi * 256 + lo
end

-- A query for qname (no trailing dot) with recursion desired, or nil.
local function build_query(id, qname, qtype)
  local parts = { char(rshift(id, 8), band(id, 255), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0) }
  local len = 1
  for label in (qname .. "."):gmatch("([^.]*)%.") do
    if #label == 0 or #label > 63 then return nil end
    parts[#parts + 1] = char(#label) .. label
    len = len + #label + 1
  end
  if len > 255 then return nil end
  parts[#parts + 1] = char(0, 0, qtype, 0, 1)   -- root, QTYPE (< 256 here), QCLASS IN
  return concat(parts)
end

local function u16(s, i)
  local a, b = byte(s, i, i + 1)
  return a * 256 + b
end

local function u32(s, i)
  local a, b, c, d = byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- The lower-cased name at pos, following compression pointers, and the
-- position after it in the message; nil if malformed. The hop limit stops
-- pointer loops.
local function read_name(msg, pos)
  local labels, after = {}, nil
  for _ = 1, 128 do
    local len = byte(msg, pos)
    if not len then return nil end
    if len == 0 then
      return lower(concat(labels, ".")), after or pos + 1
    elseif len >= 0xC0 then
      local b2 = byte(msg, pos + 1)
      if not b2 then return nil end
      after = after or pos + 2
      pos = band(len, 0x3F) * 256 + b2 + 1
    elseif len >= 64 or pos + len > #msg then
      return nil
    else
      labels[#labels + 1] = sub(msg, pos + 1, pos + len)
      pos = pos + len + 1
    end
  end
  return nil
end

-- RFC 5952 text for the 16 bytes at pos: lower-case hex, the longest run
-- of two or more zero groups (the first on a tie) as "::".
local function ipv6_text(s, pos)
  local g = {}
  for i = 0, 7 do g[i + 1] = u16(s, pos + 2 * i) end
  local best, best_len, run = 0, 1, 0
  for i = 1, 8 do
    run = g[i] == 0 and run + 1 or 0
    if run > best_len then best, best_len = i - run + 1, run end
  end
  local out = {}
  for i = 1, 8 do out[i] = format("%x", g[i]) end
  if best == 0 then return concat(out, ":") end
  return concat(out, ":", 1, best - 1) .. "::" .. concat(out, ":", best + best_len, 8)
end

-- Parses a reply to (id, qname, qtype). Returns {tc, rcode, answers,
-- neg_ttl}, or nil if it does not answer that question (wrong id, not a
-- response, another question): such datagrams are ignored, not trusted.
-- answers holds {name, type, ttl, data} for A, AAAA and CNAME records.
local function parse_reply(msg, id, qname, qtype)
  if #msg < 12 or u16(msg, 1) ~= id then return nil end
  local f1, f2 = byte(msg, 3, 4)
  if band(f1, 0x80) == 0 or band(f1, 0x78) ~= 0 then return nil end   -- QR set, opcode QUERY
  if u16(msg, 5) ~= 1 then return nil end
  local an, ns = u16(msg, 7), u16(msg, 9)
  local name, pos = read_name(msg, 13)
  if name ~= qname or pos + 3 > #msg or u16(msg, pos) ~= qtype or u16(msg, pos + 2) ~= 1 then
    return nil
  end
  pos = pos + 4
  local r = { tc = band(f1, 0x02) ~= 0, rcode = band(f2, 0x0F), answers = {} }
  for i = 1, an + ns do
    local owner, p = read_name(msg, pos)
    if not owner or p + 9 > #msg then break end   -- a truncated tail
    local typ, ttl, rdlen = u16(msg, p), u32(msg, p + 4), u16(msg, p + 8)
    if ttl >= 0x80000000 then ttl = 0 end   -- RFC 2181 8: treat as zero
    local rd = p + 10
    if rd + rdlen - 1 > #msg then break end
    if i > an then
      -- Authority: an SOA bounds the negative TTL (RFC 2308 5).
      if typ == TYPE_SOA then
        local _, q = read_name(msg, rd)   -- MNAME
        if q then _, q = read_name(msg, q) end   -- RNAME
        -- SERIAL REFRESH RETRY EXPIRE MINIMUM follow the two names.
        if q and q + 19 <= #msg then r.neg_ttl = min(ttl, u32(msg, q + 16)) end
      end
    elseif typ == TYPE_A and rdlen == 4 then
      r.answers[#r.answers + 1] = { owner, typ, ttl, format("%d.%d.%d.%d", byte(msg, rd, rd + 3)) }
    elseif typ == TYPE_AAAA and rdlen == 16 then
      r.answers[#r.answers + 1] = { owner, typ, ttl, ipv6_text(msg, rd) }
    elseif typ == TYPE_CNAME then
      local target = read_name(msg, rd)
      if target then r.answers[#r.answers + 1] = { owner, typ, ttl, target } end
    end
    pos = rd + rdlen
  end
  return r
end

-- -- Exchanges ---------------------------------------------------------------

-- The C methods, taken before install() wraps them.
local tcp_mt = debug.getregistry()["cohost.tcp"]
local udp_mt = debug.getregistry()["cohost.udp"]
local c_connect, c_setpeername = tcp_mt.connect, udp_mt.setpeername

-- Yields. One question over UDP to ns, within timeout seconds. A fresh
-- socket per query gets a fresh random source port from the kernel.
local function udp_exchange(ns, pkt, id, qname, qtype, timeout)
  local s = udp.udp()
  local ok, err = c_setpeername(s, ns[1], ns[2])
  if ok then ok, err = s:send(pkt) end
  local deadline = monotonic() + timeout
  while ok do
    local left = deadline - monotonic()
    if left <= 0 then err = "timeout"; break end
    s:settimeout(math.max(1, left * 1000))
    local data
    data, err = s:receive()
    if not data then break end
    local r = parse_reply(data, id, qname, qtype)
    if r then
      s:close()
      return r
    end
    -- A stray or forged datagram: keep waiting for the real one.
  end
  s:close()
  return nil, err
end

-- Yields. The same question over TCP (RFC 1035 4.2.2: a 2-byte length
-- before each message), after a truncated UDP reply.
local function tcp_exchange(ns, pkt, id, qname, qtype, timeout)
  local s = socket.tcp()
  s:settimeout(timeout * 1000)
  local ok, err = c_connect(s, ns[1], ns[2])
  local r
  if ok then ok, err = s:send({ char(rshift(#pkt, 8), band(#pkt, 255)), pkt }) end
  if ok then
    local len
    len, err = s:receive(2)
    local msg = len and s:receive(u16(len, 1))
    r = msg and parse_reply(msg, id, qname, qtype)
    if msg and not r then err = "bad reply" end
    if len and not msg then err = "closed" end
  end
  s:close()
  if r then return r end
  return nil, err
end

-- Yields. Asks the nameservers in turn, `attempts` rounds, as glibc does.
-- Returns a reply with rcode 0 or 3, or nil and the last error.
local function exchange(cfg, qname, qtype)
  local err = "timeout"
  for _ = 1, cfg.attempts do
    for _, ns in ipairs(cfg.nameservers) do
      local id = random16()
      local pkt = build_query(id, qname, qtype)
      if not pkt then return nil, "bad name" end
      local r, e = udp_exchange(ns, pkt, id, qname, qtype, cfg.timeout)
      if r and r.tc then r, e = tcp_exchange(ns, pkt, id, qname, qtype, cfg.timeout) end
      if r and (r.rcode == 0 or r.rcode == 3) then return r end
      err = r and (RCODE_ERR[r.rcode] or "rcode " .. r.rcode) or e
    end
  end
  return nil, err
end

-- Yields. Addresses of type qtype for one absolute qname, following CNAME
-- chains, in the reply or with new queries for the target when a server
-- did not follow them. Returns addrs and the smallest TTL on the way, or
-- nil, err and (for NOT_FOUND) the negative TTL.
local function chase(cfg, qname, qtype)
  local ttl = huge
  for _ = 1, 8 do   -- queries per chain
    local r, err = exchange(cfg, qname, qtype)
    if not r then return nil, err end
    if r.rcode == 3 then return nil, NOT_FOUND, r.neg_ttl end
    local cur, ans = qname, r.answers
    for _ = 1, #ans do   -- each hop uses one CNAME record at most
      local target
      for i = 1, #ans do
        if ans[i][2] == TYPE_CNAME and ans[i][1] == cur then
          target, ttl = ans[i][4], min(ttl, ans[i][3])
          break
        end
      end
      if not target then break end
      cur = target
    end
    local addrs, fam = {}, qtype == TYPE_A and 4 or 6
    for i = 1, #ans do
      if ans[i][2] == qtype and ans[i][1] == cur then
        addrs[#addrs + 1] = { address = ans[i][4], family = fam, ttl = ans[i][3] }
        ttl = min(ttl, ans[i][3])
      end
    end
    if #addrs > 0 then return addrs, ttl end
    if cur == qname then return nil, NOT_FOUND, r.neg_ttl end   -- NODATA
    qname = cur
  end
  return nil, "server failure"   -- a CNAME chain too long or looping
end

-- Yields. name through the search list (resolv.conf(5): as given first when
-- it has ndots dots or more, else last; a trailing dot means as given
-- only). A timeout or server failure ends the search, as in glibc.
local function lookup(cfg, name, qtype)
  local cands = {}
  if sub(name, -1) == "." then
    cands[1] = sub(name, 1, -2)
  else
    local _, dots = name:gsub("%.", "")
    if dots >= cfg.ndots then cands[1] = name end
    for _, d in ipairs(cfg.search) do cands[#cands + 1] = name .. "." .. d end
    if dots < cfg.ndots then cands[#cands + 1] = name end
  end
  local neg = huge
  for _, cand in ipairs(cands) do
    local addrs, ttl, cand_neg = chase(cfg, cand, qtype)
    if addrs then return addrs, ttl end
    if ttl ~= NOT_FOUND then return nil, ttl end
    neg = min(neg, cand_neg or cfg.negative_ttl)
  end
  return nil, NOT_FOUND, neg
end

-- -- Cache and coalescing ---------------------------------------------------

-- cache[key] = {done = true, addrs = array or nil, err = string or nil,
-- expires = monotonic seconds}; key is the lower-cased name, "|" and the family (4,
-- 6, or "*" for both). Errors other than NOT_FOUND are never cached.
local cache, cached = {}, 0
local MAX_ENTRIES = 10000
local inflight = {}     -- key -> {q = waitq, done, addrs, err, expires}
local generation = 0    -- bumped by configure/flush: older fills are dropped

local function store(key, rec)
  if not cache[key] then
    cached = cached + 1
    if cached > MAX_ENTRIES then
      -- O(n), at most once per MAX_ENTRIES new names: drop the expired,
      -- or everything when nothing has expired.
      local now, left = monotonic(), 0
      for k, e in pairs(cache) do
        if e.expires <= now then cache[k] = nil else left = left + 1 end
      end
      if left >= MAX_ENTRIES then cache, left = {}, 0 end
      cached = left + 1
    end
  end
  cache[key] = rec
end

-- Runs on its own thread, so callers may give up at their own deadline
-- while the query goes on for the others and for the cache.
local function fill(f, key, name, qtype, gen)
  local ok, addrs, err, ttl = pcall(lookup, settings(), name, qtype)
  local failure = not ok and addrs
  if failure then addrs, err, ttl = nil, "server failure", nil end
  if addrs then ttl, err = err, nil end
  if ttl and ttl > 0 and (addrs or err == NOT_FOUND) then f.expires = monotonic() + ttl end
  f.done, f.addrs, f.err = true, addrs, err
  if gen == generation then
    inflight[key] = nil
    if f.expires then store(key, { done = true, addrs = addrs, err = err, expires = f.expires }) end
  end
  f.q:broadcast()
  if failure then error(failure, 0) end   -- cancelled at shutdown: end as killed
end

-- Starts the lookup for key unless it is cached or in flight; returns the
-- cached record or the in-flight one.
local function start(name, qtype, key)
  local e = cache[key]
  if e and e.expires > monotonic() then return e end
  local f = inflight[key]
  if not f then
    f = { q = task.waitq("dns") }
    inflight[key] = f
    task.spawn(fill, f, key, name, qtype, generation)
  end
  return f
end

-- Yields. Waits until f is done or the deadline passes.
local function finish(f, deadline)
  while not f.done do
    local left = deadline and deadline - monotonic()
    if left and left <= 0 then return nil, "timeout" end
    f.q:wait(left)
  end
  return f.addrs, f.err
end

local SUFFIX = { [4] = "|4", [6] = "|6" }

-- Yields. The lookup behind resolve, with an absolute deadline or nil.
local function resolve(name, family, deadline)
  local fam, addr = literal(name)
  if fam then
    if family and family ~= fam then return nil, NOT_FOUND end
    return { { address = addr, family = fam, ttl = -1 } }
  end
  name = lower(name)
  local list = hosts.get()[sub(name, -1) == "." and sub(name, 1, -2) or name]
  if list then
    if not family then return list end
    local out = {}
    for _, a in ipairs(list) do
      if a.family == family then out[#out + 1] = a end
    end
    if #out > 0 then return out end
  end
  local key = name .. (SUFFIX[family] or "|*")
  local e = cache[key]
  if e and e.expires > monotonic() then return e.addrs, e.err end
  if family then
    return finish(start(name, family == 4 and TYPE_A or TYPE_AAAA, key), deadline)
  end
  -- Both families at once, IPv4 first as for "localhost" elsewhere.
  local f4 = start(name, TYPE_A, name .. "|4")
  local f6 = start(name, TYPE_AAAA, name .. "|6")
  local a4, e4 = finish(f4, deadline)
  local a6, e6 = finish(f6, deadline)
  if e4 == "timeout" and not f4.done then return nil, "timeout" end
  local out, err = {}, nil
  for _, a in ipairs(a4 or {}) do out[#out + 1] = a end
  for _, a in ipairs(a6 or {}) do out[#out + 1] = a end
  if #out == 0 then
    out, err = nil, (e4 ~= NOT_FOUND and e4) or e6
  end
  if f4.expires and f6.expires then
    store(key, { done = true, addrs = out, err = err, expires = min(f4.expires, f6.expires) })
  end
  return out, err
end

-- -- The API -----------------------------------------------------------------

-- Yields. resolve(name [, opts]) -> array of {address, family, ttl} or
-- nil, err. opts.family: 4 or 6 (default both, IPv4 first); opts.timeout:
-- seconds this caller waits at most (the query itself goes on and fills
-- the cache). The array is shared with the cache: do not modify it.
function M.resolve(name, opts)
  assert(type(name) == "string", "bad name")
  local family, deadline
  if opts then
    family = opts.family
    assert(family == nil or family == 4 or family == 6, "bad family")
    deadline = opts.timeout and monotonic() + opts.timeout
  end
  return resolve(name, family, deadline)
end

-- Yields. toip(name) -> the first address (IPv4 first) or nil, err.
function M.toip(name, opts)
  local addrs, err = M.resolve(name, opts)
  if not addrs then return nil, err end
  return addrs[1].address
end

-- configure(opts): replaces the previous overrides (a field left out goes
-- back to the system files) and empties the cache. Fields: nameservers
-- (array of "ip", "ip:port", "[v6]:port" or {ip, port}), search (array of
-- domains), ndots, timeout (seconds per try), attempts, negative_ttl
-- (seconds, when the reply has no SOA), hosts and resolv_conf (paths).
function M.configure(opts)
  opts = opts or {}
  local o = {}
  if opts.nameservers then
    assert(type(opts.nameservers) == "table" and #opts.nameservers > 0, "bad nameservers")
    o.nameservers = {}
    for i, ns in ipairs(opts.nameservers) do o.nameservers[i] = nameserver(ns) end
  end
  if opts.search then
    o.search = {}
    for i, d in ipairs(opts.search) do o.search[i] = lower(d):gsub("%.$", "") end
  end
  for _, k in ipairs { "ndots", "timeout", "attempts", "negative_ttl" } do
    local v = opts[k]
    assert(v == nil or (type(v) == "number" and v >= 0), "bad " .. k)
    o[k] = v
  end
  assert(o.timeout ~= 0 and o.attempts ~= 0, "timeout and attempts must be positive")
  overrides = o
  hosts.set(opts.hosts or "/etc/hosts")
  resolv.set(opts.resolv_conf or "/etc/resolv.conf")
  M.flush()
end

-- flush(): empties this worker's cache; lookups in flight no longer fill it.
function M.flush()
  cache, cached, inflight = {}, 0, {}
  generation = generation + 1
end

-- config() -> the settings in force (a copy), for inspection.
function M.config()
  local c = settings()
  c.hosts, c.resolv_conf = hosts.path, resolv.path
  return c
end

-- -- install() -------------------------------------------------------------

-- nginx's resolver messages, as cosocket connects by name report them.
local CODE = {
  [NOT_FOUND] = "3: Host not found", timeout = "110: Operation timed out",
  ["format error"] = "1: Format error", ["server failure"] = "2: Server failure",
  ["not implemented"] = "4: Unimplemented", refused = "5: Operation refused",
}

local function resolve_error(host, err)
  return nil, format("%s could not be resolved (%s)", host, CODE[err] or "2: " .. err)
end

local installed = false

-- Hosts the C methods take as they are: IP literals and "unix:" paths
-- (anything with a colon). A pattern match does not compile in LuaJIT's
-- JIT and costs more than the rest of a wrapped call, so the answers for
-- up to 1000 literals are kept in direct; names are never put there.
local direct, ndirect = {}, 0
local function is_direct(host)
  if not (find(host, ":", 1, true) or find(host, "^[%d.]+$")) then return false end
  if ndirect < 1000 then
    direct[host], ndirect = true, ndirect + 1
  end
  return true
end

-- install(): cohost.tcp():connect and cohost.udp():setpeername resolve
-- names through this module. IP literals, "unix:" paths and misuse go
-- straight to the C methods; a name keeps "host:port" as the pool key,
-- and its lookup gives up at the socket's connect timeout.
function M.install()
  if installed then return end
  installed = true
  local settimeout, settimeouts = tcp_mt.settimeout, tcp_mt.settimeouts
  -- Connect timeouts in ms, as the C side keeps them out of Lua's sight.
  local connect_ms = setmetatable({}, { __mode = "k" })

  tcp_mt.settimeout = function(self, ...)
    settimeout(self, ...)
    connect_ms[self] = tonumber((...))
  end
  tcp_mt.settimeouts = function(self, ...)
    settimeouts(self, ...)
    connect_ms[self] = tonumber((...))
  end

  local function connect_by_name(self, host, port, opts)
    local p = tonumber(port)
    local ms = connect_ms[self]
    ms = ms and ms >= 1 and ms or 60000   -- the C default
    local addrs, err = resolve(host, nil, monotonic() + ms / 1000)
    if not addrs then return resolve_error(host, err) end
    local o = { pool = format("%s:%d", host, p - p % 1) }
    if opts then
      if opts.pool ~= nil then o.pool = opts.pool end
      o.pool_size, o.backlog = opts.pool_size, opts.backlog
    end
    local ok
    for i = 1, #addrs do
      ok, err = c_connect(self, addrs[i].address, port, o)
      if ok or err == "timeout" or err == "closed" then break end
    end
    return ok, err
  end

  tcp_mt.connect = function(self, host, ...)
    -- The fast path: a literal costs one table lookup once seen.
    if direct[host] or type(host) ~= "string" or is_direct(host) then
      return c_connect(self, host, ...)
    end
    local n, port, opts = select("#", ...), ...
    -- Bad arguments reach C, which reports them before any lookup.
    if n < 1 or n > 2 or not tonumber(port) or tonumber(port) < 0 or tonumber(port) > 65535
      or (n == 2 and opts ~= nil and type(opts) ~= "table") then
      return c_connect(self, host, ...)
    end
    return connect_by_name(self, host, port, opts)
  end

  udp_mt.setpeername = function(self, host, ...)
    if direct[host] or type(host) ~= "string" or is_direct(host) or select("#", ...) ~= 1 then
      return c_setpeername(self, host, ...)
    end
    local port = ...
    if not tonumber(port) or tonumber(port) < 0 or tonumber(port) > 65535 then
      return c_setpeername(self, host, ...)
    end
    local addrs, err = resolve(host, nil, nil)
    if not addrs then return resolve_error(host, err) end
    return c_setpeername(self, addrs[1].address, port)
  end
end

return M
