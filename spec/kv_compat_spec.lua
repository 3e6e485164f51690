-- examples/kv against a real redis-server (Debian's 7.0), case by case:
-- each case is a list of commands run on both, from an empty database,
-- and kv's replies must equal redis-server's, error texts included. The
-- reference is redis-server, so a difference fails as kv's. A case is
-- { name, { command, ... } }; a command is an array of its words, with
-- sort = true when the reply is an unordered array (KEYS, HGETALL,
-- SMEMBERS). Add cases to the tables below: nothing else is needed.
local cohost = require "cohost"
local h = require "spec.helper"
local kv = require "spec.kv_util"
h.cleanups(after_each)   -- the connections each test opens

local NULL = kv.NULL

-- -- The cases -----------------------------------------------------------------

local sorted = kv.sorted

local BIG = "9223372036854775807"

-- A reply compared as a double: kv keeps a deadline near 2^63 ms as one
-- (docs/kv.md), so PEXPIRETIME there agrees to about 1024 ms.
local function inexact(cmd)
  cmd.norm = function(r)
    if type(r) == "string" then return tonumber(r:match("^:(.*)$")) or r end
    return r
  end
  return cmd
end

local families = {}

families["strings and keys"] = {
  { "SET with its options", {
    { "SET", "k", "v", "NX" }, { "SET", "k", "w", "NX" }, { "SET", "k", "w", "XX" },
    { "SET", "n", "v", "XX" }, { "SET", "k", "x", "GET" }, { "SET", "k", "v", "NX", "XX" },
    { "SET", "k", "v", "EX", "10", "PX", "100" }, { "SET", "k", "v", "EX", "ten" },
    { "SET", "k", "v", "EX", "0" }, { "SET", "k", "v", "PX", "-1" }, { "SET", "k", "v", "KEEPTTL", "EX", "5" },
    { "GET", "k" }, { "GET", "none" },
  } },
  { "expiries past int64 and far ones", {
    { "SET", "foo", "bar", "EX", "10000000000000000" }, { "SET", "foo", "bar", "PX", BIG },
    { "SET", "foo", "bar", "EXAT", "10000000000000000" }, { "SETEX", "foo", "10000000000000000", "v" },
    { "PSETEX", "foo", BIG, "v" }, { "GET", "foo" }, { "SET", "foo", "bar" },
    { "EXPIRE", "foo", BIG }, { "EXPIRE", "foo", "-9223372036854775808" }, { "PEXPIRE", "foo", BIG },
    { "EXPIREAT", "foo", "9223372036854775" }, { "EXPIREAT", "foo", "9223372036854776" },
    { "PEXPIREAT", "foo", BIG }, { "PEXPIRETIME", "foo" }, { "EXPIRETIME", "foo" },
    { "SET", "bar", "x", "PXAT", BIG }, { "PEXPIRETIME", "bar" },
    { "SET", "baz", "x", "EXAT", "9223372036854775" }, inexact { "PEXPIRETIME", "baz" },
    { "EXPIRE", "foo", "x" }, { "EXPIRETIME", "none" }, { "PEXPIRETIME", "baz", "x" },
  } },
  { "EXPIRE options and TTLs", {
    { "SET", "k", "v" }, { "TTL", "k" }, { "PTTL", "none" }, { "EXPIRETIME", "k" },
    { "EXPIRE", "k", "100", "XX" }, { "EXPIRE", "k", "100", "NX" }, { "EXPIRE", "k", "50", "GT" },
    { "EXPIRE", "k", "50", "LT" }, { "EXPIRE", "k", "5", "NX", "XX" }, { "EXPIRE", "k", "5", "GT", "LT" },
    { "EXPIRE", "k", "5", "BOGUS" }, { "TTL", "k" }, { "PERSIST", "k" }, { "PERSIST", "k" },
    { "EXPIRE", "k", "-1" }, { "EXISTS", "k" }, { "EXPIRE", "none", "10" },
  } },
  { "counters at the int64 limits", {
    { "INCR", "n" }, { "INCRBY", "n", "10" }, { "DECR", "n" }, { "DECRBY", "n", "15" },
    { "SET", "big", "9223372036854775806" }, { "INCR", "big" }, { "INCR", "big" },
    { "DECRBY", "x", "-9223372036854775808" }, { "SET", "f", "1.5" }, { "INCR", "f" },
    { "SET", "z", "007" }, { "INCR", "z" }, { "INCRBY", "n", "x" }, { "INCRBY", "n", "" },
    -- Not integers for Redis, though each is how LuaJIT prints one.
    { "INCRBY", "n", "1e+14" }, { "SET", "e", "1e+15" }, { "INCR", "e" }, { "SETBIT", "b", "1e+14", "1" },
    { "INCRBY", "n", "10.0" }, { "INCRBY", "n", "-0" }, { "INCRBY", "n", "+5" }, { "INCRBY", "n", "5 " },
    { "INCRBY", "n", "-12" }, { "INCRBY", "n", "99999999999999" }, { "GET", "n" },
  } },
  { "GETSET, GETDEL, MGET, MSET, APPEND, STRLEN, SETNX", {
    { "GETSET", "k", "a" }, { "GETSET", "k", "b" }, { "GETDEL", "k" }, { "GETDEL", "k" },
    { "MSET", "a", "1", "b", "2" }, { "MSET", "a", "1", "b" }, { "MGET", "a", "b", "none" },
    { "APPEND", "a", "234" }, { "APPEND", "new", "x" }, { "STRLEN", "a" }, { "STRLEN", "none" },
    { "SETNX", "a", "x" }, { "SETNX", "s", "x" }, { "RPUSH", "l", "x" }, { "GETDEL", "l" },
    { "GETSET", "l", "x" }, { "APPEND", "l", "x" }, { "STRLEN", "l" }, { "MGET", "l", "s" },
  } },
  { "DEL, EXISTS, TYPE, DBSIZE, KEYS and SCAN", {
    { "MSET", "user:1", "a", "user:2", "b", "user:10", "c", "a*b", "d" }, { "RPUSH", "l", "x" },
    { "HSET", "h", "f", "v" }, { "TYPE", "l" }, { "TYPE", "h" }, { "TYPE", "user:1" }, { "TYPE", "none" },
    sorted { "KEYS", "user:?" }, sorted { "KEYS", "user:[0-9]*" }, sorted { "KEYS", "a\\*b" },
    sorted { "KEYS", "*[" }, sorted { "KEYS", "user:[^1]" }, sorted { "KEYS", "[a-u]*" },
    { "KEYS", string.rep("a*", 20) .. "b" }, { "EXISTS", "l", "h", "none", "l" },
    { "DEL", "l", "h", "none" }, { "DBSIZE" }, { "SCAN", "x" }, { "SCAN", "0", "COUNT", "0" },
    { "SCAN", "0", "MATCH" },
  } },
}

-- Glob patterns, every corner of stringmatchlen's syntax.
local GLOBS = { "*", "?", "??", "*a*", "a*b", "*[", "[", "[]", "[]a]*", "[^]*", "[a-]*", "[z-a]*",
                "[\\]]*", "\\*", "a\\", "\\", "[^a-c]*", "*\\[*", "[ab", "?*?", "[-a]*",
                "*?*?*?*?*?*?*?*?x", "[a\\-c]*", "a**", "**" }
local glob_case = { { "MSET", "a", "1", "ab", "1", "ba", "1", "a]b", "1", "]", "1", "[x", "1",
                      "-", "1", "b-c", "1", "zz", "1", "a\\", "1", "*", "1", "axxxxxxxxx", "1", "\\", "1" } }
for _, g in ipairs(GLOBS) do glob_case[#glob_case + 1] = sorted { "KEYS", g } end

families["strings and keys, more"] = {
  { "KEYS with every glob form", glob_case },
  { "GETEX", {
    { "SET", "k", "v" }, { "GETEX", "k" }, { "GETEX", "k", "EX", "100" }, { "TTL", "k" },
    { "GETEX", "k", "PERSIST" }, { "TTL", "k" }, { "GETEX", "k", "EX", "0" }, { "GETEX", "k", "EX", "x" },
    { "GETEX", "k", "EX", "10000000000000000" }, { "GETEX", "k", "PX", "10", "EX", "10" },
    { "GETEX", "k", "BOGUS" }, { "GETEX", "none", "EX", "10" }, { "GETEX", "k", "PXAT", "1" },
    { "EXISTS", "k" }, { "RPUSH", "l", "a" }, { "GETEX", "l" },
  } },
  { "INCRBYFLOAT, SETRANGE, GETRANGE", {
    -- (Redis adds in long double, kv in double: 10.5 + 0.1 + 5e3 prints
    -- 5005.60000000000000009 there, 5005.6 here; these sums agree.)
    { "SET", "f", "10.50" }, { "INCRBYFLOAT", "f", "0.25" }, { "INCRBYFLOAT", "f", "-5" },
    { "INCRBYFLOAT", "f", "5.0e3" }, { "INCRBYFLOAT", "f", "x" }, { "INCRBYFLOAT", "new", "3" },
    { "INCRBYFLOAT", "f", "inf" }, { "SET", "s", "abc" }, { "INCRBYFLOAT", "s", "1" },
    { "SETRANGE", "s", "1", "XY" }, { "GET", "s" }, { "SETRANGE", "s", "5", "!" }, { "GET", "s" },
    { "SETRANGE", "none", "0", "" }, { "EXISTS", "none" }, { "SETRANGE", "s", "-1", "x" },
    { "SETRANGE", "s", "536870912", "x" }, { "GETRANGE", "s", "0", "2" }, { "GETRANGE", "s", "-3", "-1" },
    { "GETRANGE", "s", "5", "1" }, { "GETRANGE", "s", "-1", "-5" }, { "GETRANGE", "s", "0", "100" },
    { "GETRANGE", "none", "0", "1" }, { "GETRANGE", "s", "x", "1" },
  } },
  { "MSETNX, RENAME, RENAMENX, COPY", {
    { "MSETNX", "a", "1", "b", "2" }, { "MSETNX", "b", "3", "c", "4" }, { "MGET", "a", "b", "c" },
    { "MSETNX", "a" }, { "EXPIRE", "a", "100" }, { "RENAME", "a", "x" }, { "TTL", "x" }, { "GET", "a" },
    { "RENAME", "none", "y" }, { "RENAME", "x", "x" }, { "RENAMENX", "x", "b" }, { "RENAMENX", "x", "y" },
    { "RPUSH", "l", "1", "2" }, { "COPY", "l", "l2" }, { "RPUSH", "l2", "3" }, { "LRANGE", "l", "0", "-1" },
    { "LRANGE", "l2", "0", "-1" }, { "COPY", "l", "l2" }, { "COPY", "l", "l2", "REPLACE" },
    { "LRANGE", "l2", "0", "-1" }, { "COPY", "l", "l" }, { "COPY", "none", "z" }, { "COPY", "l", "z", "DB", "0" },
    { "HSET", "h", "f", "v" }, { "COPY", "h", "h2" }, { "HGETALL", "h2" }, { "SADD", "s", "m" },
    { "COPY", "s", "s2" }, { "SMEMBERS", "s2" }, { "ZADD", "z", "1", "m" }, { "COPY", "z", "z2" },
    { "ZRANGE", "z2", "0", "-1", "WITHSCORES" }, { "COPY", "l", "z", "BOGUS" },
  } },
}

families["lists, more"] = {
  { "LTRIM, LREM, LSET, LINSERT", {
    { "RPUSH", "l", "a", "b", "a", "c", "a", "d" }, { "LREM", "l", "2", "a" }, { "LRANGE", "l", "0", "-1" },
    { "RPUSH", "l", "a" }, { "LREM", "l", "-1", "a" }, { "LRANGE", "l", "0", "-1" }, { "LREM", "l", "0", "x" },
    { "LSET", "l", "0", "B" }, { "LSET", "l", "-1", "D" }, { "LSET", "l", "10", "x" }, { "LSET", "none", "0", "x" },
    { "LINSERT", "l", "BEFORE", "c", "pre" }, { "LINSERT", "l", "AFTER", "c", "post" },
    { "LINSERT", "l", "AFTER", "none", "x" }, { "LINSERT", "l", "MIDDLE", "c", "x" },
    { "LINSERT", "none", "BEFORE", "a", "x" }, { "LRANGE", "l", "0", "-1" }, { "LTRIM", "l", "1", "-2" },
    { "LRANGE", "l", "0", "-1" }, { "LTRIM", "l", "5", "1" }, { "EXISTS", "l" }, { "LTRIM", "none", "0", "1" },
  } },
  { "LPOS", {
    { "RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c" }, { "LPOS", "l", "c" },
    { "LPOS", "l", "c", "RANK", "2" }, { "LPOS", "l", "c", "RANK", "-1" }, { "LPOS", "l", "c", "COUNT", "0" },
    { "LPOS", "l", "c", "COUNT", "2", "RANK", "-1" }, { "LPOS", "l", "c", "MAXLEN", "2" },
    { "LPOS", "l", "x" }, { "LPOS", "l", "x", "COUNT", "1" }, { "LPOS", "l", "c", "RANK", "0" },
    { "LPOS", "l", "c", "COUNT", "-1" }, { "LPOS", "l", "c", "MAXLEN", "-1" }, { "LPOS", "l", "c", "BOGUS", "1" },
    { "LPOS", "none", "a" },
  } },
  { "LMOVE, RPOPLPUSH, LMPOP and their blocking forms", {
    { "RPUSH", "a", "1", "2", "3" }, { "LMOVE", "a", "b", "LEFT", "RIGHT" }, { "RPOPLPUSH", "a", "b" },
    { "LRANGE", "b", "0", "-1" }, { "LMOVE", "a", "a", "RIGHT", "LEFT" }, { "LMOVE", "none", "b", "LEFT", "LEFT" },
    { "LMOVE", "a", "b", "UP", "LEFT" }, { "BLMOVE", "a", "b", "LEFT", "LEFT", "0" },
    { "BRPOPLPUSH", "b", "c", "0" }, { "LRANGE", "c", "0", "-1" }, { "EXISTS", "a" },
    { "RPUSH", "m1", "x", "y", "z" }, { "LMPOP", "2", "none", "m1", "LEFT" },
    { "LMPOP", "2", "none", "m1", "RIGHT", "COUNT", "5" }, { "LMPOP", "1", "m1", "LEFT" },
    { "LMPOP", "0", "m1", "LEFT" }, { "LMPOP", "3", "m1", "LEFT" }, { "LMPOP", "1", "m1", "UP" },
    { "LMPOP", "1", "m1", "LEFT", "COUNT", "0" }, { "RPUSH", "m2", "q" }, { "BLMPOP", "0", "1", "m2", "LEFT" },
    { "SET", "s", "x" }, { "LMOVE", "s", "b", "LEFT", "LEFT" }, { "LMOVE", "c", "s", "LEFT", "LEFT" },
    { "LMPOP", "1", "s", "LEFT" },
  } },
}

families["hashes, more"] = {
  { "HKEYS, HVALS, HSETNX, HSTRLEN, HINCRBY, HINCRBYFLOAT, HSCAN", {
    { "HSET", "h", "a", "1", "b", "hello" }, sorted { "HKEYS", "h" }, sorted { "HVALS", "h" },
    { "HKEYS", "none" }, { "HSETNX", "h", "a", "x" }, { "HSETNX", "h", "c", "3" }, { "HSTRLEN", "h", "b" },
    { "HSTRLEN", "h", "none" }, { "HINCRBY", "h", "a", "5" }, { "HINCRBY", "h", "b", "1" },
    { "HINCRBY", "h", "a", "x" }, { "HINCRBY", "h", "new", "-3" }, { "HSET", "h", "big", BIG },
    { "HINCRBY", "h", "big", "1" }, { "HINCRBYFLOAT", "h", "a", "0.5" }, { "HINCRBYFLOAT", "h", "b", "1" },
    { "HINCRBYFLOAT", "h", "a", "x" }, { "HGET", "h", "a" }, { "HLEN", "h" },
    { "HSET", "one", "f", "v" }, { "HSCAN", "one", "0" }, { "HSCAN", "one", "0", "MATCH", "x*" },
    { "HRANDFIELD", "one" }, { "HRANDFIELD", "one", "1", "WITHVALUES" }, { "HRANDFIELD", "one", "-2" },
    { "HRANDFIELD", "none" }, { "HRANDFIELD", "none", "3" }, { "HRANDFIELD", "one", "x" },
    { "SET", "s", "x" }, { "HKEYS", "s" }, { "HSETNX", "s", "a", "b" }, { "HINCRBY", "s", "a", "1" },
    { "HSCAN", "s", "0" }, { "HRANDFIELD", "s" },
  } },
}

families["lists"] = {
  { "pushes, pops, ranges and indexes", {
    { "LPUSH", "l", "a", "b", "c" }, { "RPUSH", "l", "d", "e" }, { "LRANGE", "l", "0", "-1" },
    { "LRANGE", "l", "-2", "100" }, { "LRANGE", "l", "5", "10" }, { "LRANGE", "l", "-100", "1" },
    { "LINDEX", "l", "2" }, { "LINDEX", "l", "-1" }, { "LINDEX", "l", "99" }, { "LINDEX", "l", "x" },
    { "LPOP", "l" }, { "RPOP", "l" }, { "LPOP", "l", "2" }, { "LPOP", "l", "-1" }, { "LLEN", "l" },
    { "RPOP", "l", "5" }, { "EXISTS", "l" }, { "LPOP", "l" }, { "LPOP", "l", "2" }, { "LLEN", "none" },
    { "LRANGE", "none", "0", "-1" },
  } },
  { "wrong types", {
    { "SET", "s", "x" }, { "LPUSH", "s", "y" }, { "LPOP", "s" }, { "LRANGE", "s", "0", "1" },
    { "LLEN", "s" }, { "LINDEX", "s", "0" }, { "BLPOP", "s", "1" },
  } },
  { "blocking pops that need not block", {
    { "RPUSH", "q", "a" }, { "BLPOP", "none", "q", "1" }, { "BLPOP", "q", "x" }, { "BLPOP", "q", "-1" },
  } },
}

families["hashes"] = {
  { "HSET, HGET, HMGET, HDEL, HLEN, HGETALL, HEXISTS", {
    { "HSET", "h", "f1", "v1", "f2", "v2" }, { "HSET", "h", "f1", "v9" }, { "HSET", "h", "f" },
    { "HGET", "h", "f1" }, { "HGET", "h", "none" }, { "HMGET", "h", "f1", "none", "f2" },
    { "HLEN", "h" }, sorted { "HGETALL", "h" }, { "HEXISTS", "h", "f1" }, { "HEXISTS", "h", "x" },
    { "HDEL", "h", "f1", "none" }, { "HMSET", "h", "a", "1" }, { "HDEL", "h", "f2", "a" }, { "EXISTS", "h" },
  } },
  { "a missing key", {
    { "HMGET", "none", "a", "b" }, { "HGET", "none", "a" }, { "HLEN", "none" }, { "HGETALL", "none" },
    { "HEXISTS", "none", "a" }, { "HDEL", "none", "a" },
  } },
  { "wrong types", {
    { "SET", "s", "x" }, { "HMGET", "s", "a" }, { "HGET", "s", "a" }, { "HSET", "s", "a", "b" },
    { "HGETALL", "s" }, { "HLEN", "s" }, { "HDEL", "s", "a" }, { "HEXISTS", "s", "a" },
  } },
}

families["sets"] = {
  { "SADD, SREM, SISMEMBER, SMISMEMBER, SCARD, SMEMBERS", {
    { "SADD", "s", "a", "b", "c", "a" }, { "SADD", "s", "a" }, { "SREM", "s", "a", "x" },
    { "SISMEMBER", "s", "b" }, { "SISMEMBER", "s", "a" }, { "SMISMEMBER", "s", "a", "b", "none" },
    { "SCARD", "s" }, sorted { "SMEMBERS", "s" }, { "SREM", "s", "b", "c" }, { "EXISTS", "s" },
    { "SCARD", "none" }, { "SMEMBERS", "none" }, { "SISMEMBER", "none", "a" }, { "SMISMEMBER", "none", "a" },
  } },
  { "SINTER, SUNION, SDIFF and their STORE forms", {
    { "SADD", "a", "1", "2", "3" }, { "SADD", "b", "2", "3", "4" }, sorted { "SINTER", "a", "b" },
    sorted { "SUNION", "a", "b", "none" }, sorted { "SDIFF", "a", "b" }, { "SINTER", "a", "none" },
    { "SINTERSTORE", "d", "a", "b" }, sorted { "SMEMBERS", "d" }, { "SUNIONSTORE", "d", "a", "b" },
    { "SDIFFSTORE", "d", "a", "a" }, { "EXISTS", "d" }, { "SINTERCARD", "2", "a", "b" },
    { "SINTERCARD", "2", "a", "b", "LIMIT", "1" }, { "SINTERCARD", "0", "a" }, { "SINTERCARD", "3", "a" },
    { "SMOVE", "a", "b", "1" }, { "SMOVE", "a", "b", "9" }, sorted { "SMEMBERS", "b" },
    { "SET", "str", "x" }, { "SINTER", "a", "str" }, { "SUNIONSTORE", "d", "str" }, { "SMOVE", "str", "a", "1" },
  } },
  { "SPOP, SRANDMEMBER and SSCAN", {
    { "SADD", "s", "a" }, { "SRANDMEMBER", "s" }, { "SRANDMEMBER", "s", "-3" }, { "SRANDMEMBER", "s", "5" },
    { "SRANDMEMBER", "none" }, { "SRANDMEMBER", "none", "2" }, { "SRANDMEMBER", "s", "x" },
    { "SSCAN", "s", "0" }, { "SSCAN", "s", "0", "MATCH", "b*" }, { "SSCAN", "s", "x" },
    { "SPOP", "s", "0" }, { "SPOP", "s", "-1" }, { "SPOP", "s" }, { "SPOP", "s" }, { "SPOP", "s", "2" },
    { "SET", "str", "x" }, { "SADD", "str", "a" }, { "SPOP", "str" }, { "SCARD", "str" },
  } },
}

families["sorted sets"] = {
  { "ZADD and its options", {
    { "ZADD", "z", "1", "a", "2", "b" }, { "ZADD", "z", "NX", "5", "a", "3", "c" },
    { "ZADD", "z", "XX", "CH", "5", "a", "9", "none" }, { "ZADD", "z", "GT", "CH", "1", "a", "6", "b" },
    { "ZADD", "z", "LT", "CH", "0", "a" }, { "ZADD", "z", "INCR", "1.5", "a" },
    { "ZADD", "z", "XX", "NX", "1", "a" }, { "ZADD", "z", "GT", "LT", "1", "a" },
    { "ZADD", "z", "INCR", "1", "a", "2", "b" }, { "ZADD", "z", "1" }, { "ZADD", "z", "x", "a" },
    { "ZADD", "z", "nan", "a" }, { "ZADD", "z", "inf", "top", "-inf", "bottom" },
    { "ZADD", "z", "NX", "INCR", "1", "a" }, { "ZADD", "none", "XX", "1", "a" },
    { "ZADD", "none", "XX", "INCR", "1", "a" }, { "ZRANGE", "z", "0", "-1", "WITHSCORES" },
  } },
  { "ZSCORE, ZMSCORE, ZINCRBY, ZCARD, ZRANK, ZREVRANK, ZREM", {
    { "ZADD", "z", "1.1", "a", "2", "b", "3", "c" }, { "ZSCORE", "z", "a" }, { "ZSCORE", "z", "x" },
    { "ZMSCORE", "z", "a", "x", "c" }, { "ZINCRBY", "z", "0.1", "a" }, { "ZINCRBY", "z", "x", "a" },
    { "ZINCRBY", "z", "5", "new" }, { "ZCARD", "z" }, { "ZRANK", "z", "b" }, { "ZREVRANK", "z", "b" },
    { "ZRANK", "z", "x" }, { "ZREM", "z", "a", "x" }, { "ZCARD", "none" }, { "ZSCORE", "none", "a" },
    { "ZREM", "z", "b", "c", "new" }, { "EXISTS", "z" },
  } },
  { "ZRANGE by rank, score and lex, reversed and limited", {
    { "ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e" },
    { "ZRANGE", "z", "0", "-1" }, { "ZRANGE", "z", "-2", "100", "WITHSCORES" }, { "ZRANGE", "z", "3", "1" },
    { "ZRANGE", "z", "0", "1", "REV" }, { "ZREVRANGE", "z", "0", "1", "WITHSCORES" },
    { "ZRANGE", "z", "(1", "3", "BYSCORE" }, { "ZRANGE", "z", "3", "(1", "BYSCORE", "REV" },
    { "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "2" },
    { "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "-1", "2" },
    { "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "3", "-1", "WITHSCORES" },
    { "ZRANGE", "z", "0", "-1", "LIMIT", "0", "1" }, { "ZRANGE", "z", "x", "1", "BYSCORE" },
    { "ZRANGE", "z", "[b", "(d", "BYLEX" }, { "ZRANGE", "z", "+", "-", "BYLEX", "REV", "LIMIT", "0", "2" },
    { "ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES" }, { "ZRANGE", "z", "a", "b", "BYLEX" },
    { "ZRANGEBYSCORE", "z", "2", "4", "WITHSCORES", "LIMIT", "1", "1" }, { "ZREVRANGEBYSCORE", "z", "4", "2" },
    { "ZRANGEBYLEX", "z", "-", "[c" }, { "ZREVRANGEBYLEX", "z", "[c", "-" }, { "ZRANGE", "z", "0", "1", "BOGUS" },
    { "ZCOUNT", "z", "(1", "4" }, { "ZCOUNT", "z", "10", "20" }, { "ZLEXCOUNT", "z", "[b", "+" },
    { "ZRANGE", "none", "0", "-1" }, { "ZRANGE", "z", "0", "x" },
  } },
  { "pops and range removals", {
    { "ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f" },
    { "ZPOPMIN", "z" }, { "ZPOPMAX", "z", "2" }, { "ZPOPMIN", "z", "-1" }, { "ZPOPMIN", "z", "0" },
    { "ZPOPMIN", "none" }, { "ZREMRANGEBYRANK", "z", "0", "0" }, { "ZREMRANGEBYSCORE", "z", "(3", "+inf" },
    { "ZRANGE", "z", "0", "-1" }, { "ZREMRANGEBYLEX", "z", "-", "+" }, { "EXISTS", "z" },
    { "ZADD", "z", "1", "a" }, { "BZPOPMIN", "none", "z", "0" }, { "BZPOPMAX", "z", "x" },
    { "ZADD", "z", "1", "a", "2", "b" }, { "ZSCAN", "z", "0" }, { "ZSCAN", "z", "0", "MATCH", "a" },
  } },
  { "wrong types", {
    { "SET", "s", "x" }, { "ZADD", "s", "1", "a" }, { "ZSCORE", "s", "a" }, { "ZRANGE", "s", "0", "1" },
    { "ZRANGE", "s", "0", "1", "BYSCORE" }, { "ZCARD", "s" }, { "ZPOPMIN", "s" }, { "ZREM", "s", "a" },
    { "ZRANK", "s", "a" }, { "BZPOPMIN", "s", "0" }, { "ZCOUNT", "s", "0", "1" },
    { "ZADD", "z", "1", "a" }, { "SADD", "z", "a" }, { "LPUSH", "z", "a" }, { "GET", "z" }, { "TYPE", "z" },
    { "SADD", "set", "a" }, { "TYPE", "set" }, { "ZADD", "set", "1", "a" }, { "HGET", "set", "a" },
  } },
}

families["transactions"] = {
  { "MULTI and EXEC", {
    { "MULTI" }, { "SET", "a", "1" }, { "INCR", "a" }, { "LPUSH", "a", "x" }, { "GET", "a" }, { "EXEC" },
  } },
  { "EXECABORT after a queued error", {
    { "MULTI" }, { "SET", "a" }, { "SET", "b", "1" }, { "NOPE" }, { "EXEC" }, { "GET", "b" },
  } },
  { "errors outside and inside", {
    { "EXEC" }, { "DISCARD" }, { "MULTI" }, { "MULTI" }, { "WATCH", "x" }, { "SET", "c", "1" },
    { "DISCARD" }, { "GET", "c" },
  } },
  { "WATCH on an unchanged key", {
    { "SET", "w", "1" }, { "WATCH", "w" }, { "GET", "w" }, { "MULTI" }, { "INCR", "w" }, { "EXEC" },
  } },
  { "WATCH on a key the client changed itself", {
    { "SET", "w", "1" }, { "WATCH", "w" }, { "SET", "w", "2" }, { "MULTI" }, { "INCR", "w" },
    { "EXEC" }, { "GET", "w" },
  } },
  { "UNWATCH", {
    { "SET", "w", "1" }, { "WATCH", "w" }, { "SET", "w", "2" }, { "UNWATCH" }, { "MULTI" },
    { "INCR", "w" }, { "EXEC" },
  } },
  { "a blocking pop inside MULTI", {
    { "MULTI" }, { "BLPOP", "none", "0" }, { "RPUSH", "q", "a" }, { "BLPOP", "q", "0" }, { "EXEC" },
  } },
}

families["server"] = {
  { "CONFIG GET and SET", {
    { "CONFIG", "SET", "appendfsync", "bogus" }, { "CONFIG", "SET", "maxclients", "x" },
    { "CONFIG", "SET", "timeout", "-1" }, { "CONFIG", "SET", "notify-keyspace-events", "Q" },
    { "CONFIG", "SET", "notify-keyspace-events", "KEA" }, { "CONFIG", "GET", "notify-keyspace-events" },
    { "CONFIG", "SET", "notify-keyspace-events", "Kl" }, { "CONFIG", "GET", "notify-keyspace-events" },
    { "CONFIG", "SET", "notify-keyspace-events", "" }, { "CONFIG", "GET", "notify-keyspace-events" },
    { "CONFIG", "SET", "foo", "1" }, { "CONFIG", "SET", "timeout" },
    { "CONFIG", "SET", "timeout", "5", "maxclients", "100" }, { "CONFIG", "GET", "timeout" },
    { "CONFIG", "GET", "maxclients" }, { "CONFIG", "SET", "timeout", "0", "maxclients", "10000" },
  } },
  { "CLIENT, HELLO, RESET, PUBSUB", {
    { "CLIENT", "SETNAME", "a b" }, { "CLIENT", "SETNAME", "worker-1" }, { "CLIENT", "GETNAME" },
    { "CLIENT", "SETNAME", "" }, { "CLIENT", "GETNAME" }, { "CLIENT", "KILL", "1.2.3.4:5" },
    { "CLIENT", "KILL", "ID", "999999" }, { "CLIENT", "BOGUS" }, { "CLIENT", "GETNAME", "x" },
    { "HELLO", "2", "SETNAME", "a b" }, { "HELLO", "x" }, { "PUBSUB", "BOGUS" },
    { "PUBSUB", "NUMSUB", "a", "b" }, { "PUBSUB", "CHANNELS" }, { "PUBSUB", "NUMPAT" },
    { "CLIENT", "SETNAME", "n" }, { "RESET" }, { "CLIENT", "GETNAME" },
  } },
  { "PING, ECHO, SELECT", {
    { "PING" }, { "PING", "hi" }, { "PING", "a", "b" }, { "ECHO", "x" }, { "SELECT", "0" },
    { "SELECT", "x" }, { "NOPE", "a" },
  } },
}

local MIN = "-9223372036854775808"   -- INT64_MIN: its negation does not fit

families["counts and ranges at the int64 limits"] = {
  { "set and hash counts", {
    { "SADD", "s", "a" }, { "SRANDMEMBER", "s", MIN }, { "SRANDMEMBER", "s", BIG },
    { "SRANDMEMBER", "s", "-3" }, { "SPOP", "s", MIN }, { "HSET", "h", "f", "v" },
    { "HRANDFIELD", "h", MIN }, { "HRANDFIELD", "h", MIN, "WITHVALUES" },
    { "HRANDFIELD", "h", BIG, "WITHVALUES" }, { "HRANDFIELD", "h", "4611686018427387904", "WITHVALUES" },
    { "HRANDFIELD", "h", "4611686018427387903" }, { "HRANDFIELD", "h", "-2", "WITHVALUES" },
    { "SINTERCARD", "1", "s", "LIMIT", MIN }, { "SINTERCARD", MIN, "s" }, { "SPOP", "s", BIG },
    { "SMEMBERS", "s" },
  } },
  { "list counts, ranges and ranks", {
    { "LPOS", "l", "a", "RANK", MIN }, { "RPUSH", "l", "a", "b", "a" }, { "LPOS", "l", "a", "RANK", MIN },
    { "LPOS", "l", "a", "RANK", BIG }, { "LPOS", "l", "a", "COUNT", BIG }, { "LPOS", "l", "a", "COUNT", MIN },
    { "LPOS", "l", "a", "MAXLEN", MIN }, { "LRANGE", "l", MIN, BIG }, { "LINDEX", "l", MIN },
    { "LSET", "l", MIN, "x" }, { "LREM", "l", MIN, "a" }, { "LTRIM", "l", MIN, BIG },
    { "LMPOP", "1", "l", "LEFT", "COUNT", MIN }, { "LMPOP", MIN, "l", "LEFT" },
    { "LMPOP", BIG, "l", "LEFT" }, { "LPOP", "l", MIN }, { "LPOP", "l", BIG }, { "EXISTS", "l" },
  } },
  { "sorted set ranges and counts", {
    { "ZADD", "z", "1", "a", "2", "b" }, { "ZRANGE", "z", MIN, BIG },
    { "ZRANGE", "z", "0", "-1", "BYSCORE", "LIMIT", MIN, BIG },
    { "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "0", MIN },
    { "ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", BIG, "1" }, { "ZPOPMIN", "z", MIN },
    { "ZREMRANGEBYRANK", "z", MIN, "0" }, { "ZPOPMAX", "z", BIG },
  } },
  { "timeouts, cursors, offsets", {
    { "BLPOP", "l", MIN }, { "BLPOP", "l", BIG }, { "BLPOP", "l", "1e30" }, { "BLPOP", "l", "inf" },
    { "BLPOP", "l", "nan" }, { "BLPOP", "l", "1e19" }, { "BLPOP", "l", "1e-10" },
    { "SCAN", "0", "COUNT", MIN }, { "SCAN", "0", "COUNT", BIG }, { "SCAN", "18446744073709551616" },
    { "SSCAN", "s", "0", "COUNT", MIN }, { "SSCAN", "s", "18446744073709551616" },
    { "SETRANGE", "k", BIG, "a" }, { "SETRANGE", "k", "536870912", "a" }, { "SET", "k", "hello" },
    { "SETRANGE", "k", BIG, "a" }, { "GET", "k" }, { "GETRANGE", "k", MIN, BIG },
    { "EXPIRE", "k", MIN }, { "INCRBY", "k", MIN }, { "HSET", "h", "f", "x" }, { "HINCRBY", "h", "f", MIN },
  } },
  { "float increments that are not finite", {
    { "HINCRBYFLOAT", "h", "f", "+inf" }, { "HINCRBYFLOAT", "h", "f", "-inf" },
    { "HINCRBYFLOAT", "h", "f", "inf" }, { "HINCRBYFLOAT", "h", "f", "nan" }, { "EXISTS", "h" },
    { "INCRBYFLOAT", "k", "+inf" },
  } },
}

families["introspection"] = {
  { "COMMAND GETKEYS and GETKEYSANDFLAGS", {
    { "COMMAND", "GETKEYS", "SET", "a", "b" }, { "COMMAND", "GETKEYSANDFLAGS", "SET", "a", "b" },
    { "COMMAND", "GETKEYSANDFLAGS", "SET", "a", "b", "GET" }, { "COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2" },
    { "COMMAND", "GETKEYS", "BLPOP", "a", "b", "0" }, { "COMMAND", "GETKEYSANDFLAGS", "LMOVE", "a", "b", "LEFT", "RIGHT" },
    { "COMMAND", "GETKEYS", "LMPOP", "2", "a", "b", "LEFT" }, { "COMMAND", "GETKEYS", "BLMPOP", "0", "1", "a", "LEFT" },
    { "COMMAND", "GETKEYS", "SINTERCARD", "2", "a", "b" }, { "COMMAND", "GETKEYSANDFLAGS", "SINTERSTORE", "d", "a", "b" },
    { "COMMAND", "GETKEYSANDFLAGS", "SMOVE", "a", "b", "m" }, { "COMMAND", "GETKEYS", "DEL", "a", "b", "c" },
    { "COMMAND", "GETKEYSANDFLAGS", "RENAME", "a", "b" }, { "COMMAND", "GETKEYS", "BZPOPMIN", "a", "b", "1" },
    { "COMMAND", "GETKEYSANDFLAGS", "COPY", "a", "b" }, { "COMMAND", "GETKEYS", "ZADD", "z", "1", "m" },
    { "COMMAND", "GETKEYS", "nope", "x" }, { "COMMAND", "GETKEYS", "PING", "x" }, { "COMMAND", "GETKEYS", "GET" },
    { "COMMAND", "GETKEYS", "GET", "a", "b" }, { "COMMAND", "GETKEYS", "LMPOP", "0", "a", "LEFT" },
    { "COMMAND", "GETKEYS", "SINTERCARD", "2", "a" }, { "COMMAND", "GETKEYS", "CONFIG", "GET", "x" },
    { "COMMAND", "GETKEYS", "LMPOP", "x", "a", "LEFT" },
  } },
  { "COMMAND's errors and HELP", {
    { "COMMAND", "INFO", "nope", "get" }, { "COMMAND", "DOCS", "nope" }, { "COMMAND", "COUNT", "x" },
    { "COMMAND", "LIST", "FILTERBY", "foo", "x" }, { "COMMAND", "LIST", "FILTERBY" }, { "COMMAND", "LIST", "x" },
    { "COMMAND", "LIST", "FILTERBY", "MODULE", "x" }, { "COMMAND", "FOO" }, { "COMMAND", "HELP" },
    { "COMMAND", "INFO", "config|get", "CONFIG|SET" },
  } },
  { "SLOWLOG and LATENCY without samples", {
    { "SLOWLOG", "RESET" }, { "SLOWLOG", "LEN" }, { "SLOWLOG", "GET", "x" }, { "SLOWLOG", "GET", "-2" },
    { "SLOWLOG", "HELP" }, { "SLOWLOG", "FOO" }, { "SLOWLOG" }, { "LATENCY", "RESET" }, { "LATENCY", "LATEST" },
    { "LATENCY", "HISTORY", "command" }, { "LATENCY", "HISTORY" }, { "LATENCY", "HISTOGRAM", "nope" },
    { "LATENCY", "FOO" },
  } },
  { "CONFIG GET and SET of every parameter kv has", (function()
    local cmds = {}
    local function add(...) cmds[#cmds + 1] = { ... } end
    -- name, a good value, the default (restored), bad values.
    local params = {
      { "appendfsync", "always", "everysec", "bogus" }, { "maxclients", "100", "10000", "0", "x" },
      { "timeout", "5", "0", "-1" }, { "save", "3600 1 300 100", "", "1", "a b", "  3600 1" },
      { "notify-keyspace-events", "KEn", "", "Q" }, { "maxmemory", "10mb", "0", "1.5mb", "-1", "foo" },
      { "maxmemory-policy", "allkeys-lru", "noeviction", "foo" }, { "maxmemory-samples", "10", "5", "0" },
      { "maxmemory-eviction-tenacity", "50", "10", "101" }, { "lfu-log-factor", "5", "10", "-1" },
      { "lfu-decay-time", "5", "1", "-1" }, { "slowlog-log-slower-than", "-1", "10000", "x" },
      { "slowlog-max-len", "10", "128", "-1" }, { "latency-monitor-threshold", "100", "0", "-1" },
      { "latency-tracking", "no", "yes", "maybe" },
      { "latency-tracking-info-percentiles", "50 99.5", "50 99 99.9", "50 x", "101" },
      { "busy-reply-threshold", "100", "5000", "x" }, { "lua-time-limit", "200", "5000", "-1" },
      { "hz", "0", "10", "x" }, { "hash-max-listpack-entries", "1", "512", "-1" },
      { "hash-max-ziplist-entries", "2", "512" }, { "hash-max-listpack-value", "1", "64", "x" },
      { "hash-max-ziplist-value", "2", "64" }, { "zset-max-listpack-entries", "1", "128", "-1" },
      { "zset-max-ziplist-entries", "2", "128" }, { "zset-max-listpack-value", "1", "64" },
      { "zset-max-ziplist-value", "2", "64" }, { "set-max-intset-entries", "1", "512", "-1" },
      { "list-max-listpack-size", "-5", "-2", "x" }, { "list-max-ziplist-size", "10", "-2" },
      { "list-compress-depth", "1", "0", "x" }, { "proto-max-bulk-len", "2mb", "536870912", "1" },
      { "auto-aof-rewrite-min-size", "1gb", "67108864", "x" },
      { "auto-aof-rewrite-percentage", "50", "100", "-1" },
    }
    for _, p in ipairs(params) do
      add("CONFIG", "GET", p[1])
      add("CONFIG", "SET", p[1], p[2])
      add("CONFIG", "GET", p[1])
      for i = 4, #p do add("CONFIG", "SET", p[1], p[i]) end
      add("CONFIG", "SET", p[1], p[3])
    end
    -- (databases: kv has one, and says so.)
    for _, nm in ipairs { "appendonly", "appendfilename", "io-threads", "cluster-enabled" } do
      add("CONFIG", "GET", nm)
    end
    add("CONFIG", "SET", "appendfilename", "x")
    add("CONFIG", "SET", "databases", "16")
    add("CONFIG", "SET", "appendonly", "maybe")
    add("CONFIG", "SET", "timeout", "1", "timeout", "2")
    add("CONFIG", "SET", "timeout", "1", "maxclients", "0")
    add("CONFIG", "GET", "timeout")
    add("CONFIG", "SET", "nope", "1")
    add("CONFIG", "GET", "nope")
    add("CONFIG", "REWRITE")
    add("CONFIG", "FOO")
    return cmds
  end)() },
  { "CONFIG GET with patterns", {
    { "CONFIG", "GET", "maxmemory-[pse]*" }, { "CONFIG", "GET", "*max-*-entries*" }, { "CONFIG", "GET", "lfu*" },
    { "CONFIG", "GET", "slowlog*", "latency*" }, { "CONFIG", "GET", "hash-max-*", "zset-max-*" },
  }, resp3_only = true },
}

-- -- Running them --------------------------------------------------------------

local run, show = kv.run_cmds, kv.show_replies

describe("kv against redis-server", function()
  local redis_pid, redis_log, redis_port, kv_proc
  local stops = {}

  setup(function()
    redis_port = h.free_port()
    redis_pid, redis_log = h.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no")
      :format(redis_port))
    h.wait_port(redis_port, redis_log)
    -- No log, so no directory of its own (h.tmpdir is per test).
    kv_proc = kv.start(function(fn) stops[#stops + 1] = fn end, { args = "--appendonly no", dir = "/tmp" })
  end)

  teardown(function()
    h.stop_pid(redis_pid)
    if redis_log then os.remove(redis_log) end
    for _, fn in ipairs(stops) do fn() end
  end)

  -- COMMAND: kv's table against redis-server's for every command kv has
  -- (a container lists only the subcommands kv has).
  local function command_names()
    local names = kv.client(kv_proc.port):call("COMMAND", "LIST")
    local set = {}
    for _, nm in ipairs(names) do set[nm] = true end
    return names, set
  end

  -- Keeps in a typed COMMAND INFO or DOCS reply only the subcommands in
  -- have, and sorts them.
  local function only_subs(reply, have)
    if type(reply) ~= "table" then return reply end
    if reply.t == "*" and #reply == 10 and type(reply[1]) == "string" and type(reply[10]) == "table" then
      local keep = { t = reply[10].t }
      for _, sub in ipairs(reply[10]) do
        if have[sub[1]:sub(2)] then keep[#keep + 1] = sub end
      end
      table.sort(keep, function(a, b) return a[1] < b[1] end)
      reply[10] = keep
    end
    if reply.t == "%" then
      for i = 1, #reply, 2 do
        if reply[i] == "$subcommands" then
          local m, kept = reply[i + 1], { t = "%" }
          for j = 1, #m, 2 do
            if have[m[j]:sub(2)] then kept[#kept + 1], kept[#kept + 1] = m[j], m[j + 1] end
          end
          reply[i + 1] = kept
        end
      end
    end
    for i = 1, #reply do reply[i] = only_subs(reply[i], have) end
    return reply
  end

  it("lists in COMMAND LIST only commands redis-server has, and counts them in COMMAND COUNT", function()
    local names = command_names()
    local _, theirs = nil, {}
    for _, nm in ipairs(kv.client(redis_port):call("COMMAND", "LIST")) do theirs[nm] = true end
    local top = 0
    for _, nm in ipairs(names) do
      assert(theirs[nm], nm .. " is not a Redis command")
      if not nm:find("|", 1, true) then top = top + 1 end
    end
    assert.equal(top, kv.client(kv_proc.port):call("COMMAND", "COUNT"))
    assert.is_true(top > 140)
  end)

  for _, proto in ipairs { 2, 3 } do
    it(("answers COMMAND INFO and DOCS for every command as redis-server does (RESP%d)"):format(proto),
       function()
      local names, have = command_names()
      local r, k = kv.client(redis_port), kv.client(kv_proc.port)
      if proto == 3 then
        r:typed("HELLO", "3")
        k:typed("HELLO", "3")
      end
      for _, sub in ipairs { "INFO", "DOCS" } do
        -- DOCS in RESP2 is a flat list of pairs in dict order: RESP3 only.
        if sub == "INFO" or proto == 3 then
          for _, nm in ipairs(names) do
            local want = kv.typed_string(only_subs(r:typed("COMMAND", sub, nm), have))
            local got = kv.typed_string(only_subs(k:typed("COMMAND", sub, nm), have))
            assert.equal(want, got, "COMMAND " .. sub .. " " .. nm)
          end
        end
      end
    end)
  end

  local names = {}
  for name in pairs(families) do names[#names + 1] = name end
  table.sort(names)
  for _, proto in ipairs { 2, 3 } do
    for _, family in ipairs(names) do
      for _, case in ipairs(families[family]) do
        if not (proto == 3 and case.resp2_only) and not (proto == 2 and case.resp3_only) then
          it(("%s: %s (RESP%d)"):format(family, case[1], proto), function()
            local cmds = case[2]
            local want = run(kv.client(redis_port), cmds, proto)
            local got = run(kv.client(kv_proc.port), cmds, proto)
            assert.same(want, got, "\n" .. show(cmds, want, got))
          end)
        end
      end
    end
  end
end)
