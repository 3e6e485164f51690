-- The data types of kv's third round (issue 35) against a real
-- redis-server (Debian's 7.0): the sorted-set algebra, bitmaps, SORT,
-- GEO, HyperLogLog, LPUSHX/RPUSHX, TOUCH, LCS, SAVE and streams. Three
-- kinds of test, one kv and one redis-server for the whole file:
--   - cases: a list of commands run on both from an empty database, once
--     in RESP2 and once after HELLO 3; the replies must be equal, errors
--     and RESP3 types included (as spec/kv_compat_spec.lua);
--   - scenarios: a function(port) run on both at once (blocked clients
--     woken, served after EXEC, CLIENT UNBLOCK and KILL); what each
--     returns must be equal;
--   - restarts: kv keeps an always-synced log; a family's keys are read,
--     kv is killed with -9 and started again on its log (and once more
--     after a rewrite of it) and the keys must read the same.
local cohost = require "cohost"
local h = require "spec.helper"
local kv = require "spec.kv_util"
h.cleanups(after_each)

local NULL = kv.NULL

local sorted = kv.sorted

local MIN, MAX = "-9223372036854775808", "9223372036854775807"

-- -- The cases -----------------------------------------------------------------

local families = {}

families["sorted-set algebra"] = {
  { "ZUNION, ZINTER, ZDIFF with weights and aggregates", {
    { "ZADD", "a", "1", "x", "2", "y", "3", "z" }, { "ZADD", "b", "10", "y", "20", "z", "30", "w" },
    { "SADD", "s", "x", "w", "v" },
    { "ZUNION", "2", "a", "b" }, { "ZUNION", "2", "a", "b", "WITHSCORES" },
    { "ZUNION", "3", "a", "b", "s", "WEIGHTS", "2", "0.5", "-1", "WITHSCORES" },
    { "ZUNION", "2", "a", "b", "AGGREGATE", "MIN", "WITHSCORES" },
    { "ZUNION", "2", "a", "b", "AGGREGATE", "max", "WITHSCORES", "WEIGHTS", "1", "-1" },
    { "ZINTER", "2", "a", "b", "WITHSCORES" }, { "ZINTER", "3", "a", "b", "s" },
    { "ZINTER", "2", "a", "s", "WITHSCORES", "AGGREGATE", "MAX" },
    { "ZINTER", "2", "a", "a", "WEIGHTS", "1", "2", "WITHSCORES" },
    { "ZDIFF", "2", "a", "b", "WITHSCORES" }, { "ZDIFF", "3", "b", "a", "s" }, { "ZDIFF", "2", "a", "a" },
    { "ZDIFF", "1", "none" }, { "ZINTER", "2", "a", "none" }, { "ZUNION", "2", "none", "a" },
    { "ZDIFF", "2", "a", "b", "WEIGHTS", "1", "1" }, { "ZDIFF", "2", "a", "b", "AGGREGATE", "SUM" },
  } },
  { "infinities, NaN sums and zero weights", {
    { "ZADD", "p", "inf", "x", "-inf", "y", "1", "z" }, { "ZADD", "q", "-inf", "x", "inf", "y", "2", "z" },
    { "ZUNION", "2", "p", "q", "WITHSCORES" }, { "ZINTER", "2", "p", "q", "WITHSCORES" },
    { "ZUNION", "2", "p", "q", "WEIGHTS", "0", "0", "WITHSCORES" },
    { "ZINTER", "2", "p", "q", "WEIGHTS", "0", "1", "AGGREGATE", "MIN", "WITHSCORES" },
    { "ZINTER", "2", "p", "q", "WEIGHTS", "0", "1", "AGGREGATE", "MAX", "WITHSCORES" },
    { "ZUNION", "1", "p", "WEIGHTS", "inf", "WITHSCORES" }, { "ZUNION", "1", "p", "WEIGHTS", "-0", "WITHSCORES" },
    { "ZADD", "r", "0.1", "m", "0.2", "n" }, { "ZADD", "t", "0.2", "m", "0.1", "n" },
    { "ZUNION", "3", "r", "t", "r", "WITHSCORES" },
  } },
  { "argument errors, in Redis's order", {
    { "SET", "str", "x" }, { "ZADD", "a", "1", "x" },
    { "ZUNION", "0", "a" }, { "ZUNION", "-1", "a" }, { "ZUNION", "x", "a" }, { "ZUNION", "3", "a" },
    { "ZUNION", MAX, "a" }, { "ZINTER", "2", "a", "str" }, { "ZUNION", "1", "str", "WEIGHTS", "x" },
    { "ZUNION", "2", "a", "b", "WEIGHTS", "1" }, { "ZUNION", "2", "a", "b", "WEIGHTS", "1", "x" },
    { "ZUNION", "1", "a", "WEIGHTS", "nan" }, { "ZUNION", "1", "a", "WEIGHTS", "1e400" },
    { "ZUNION", "1", "a", "AGGREGATE", "avg" }, { "ZUNION", "1", "a", "AGGREGATE" },
    { "ZUNION", "1", "a", "WITHSCORES", "WITHSCORES" }, { "ZUNION", "1", "a", "BOGUS" },
    { "ZUNIONSTORE", "d", "1", "a", "WITHSCORES" }, { "ZINTERSTORE", "d", "0", "a" },
    { "ZDIFFSTORE", "d", "2", "a" }, { "ZUNION", "1" }, { "ZUNIONSTORE", "d", "1" },
  } },
  { "the STORE forms", {
    { "ZADD", "a", "1", "x", "2", "y" }, { "ZADD", "b", "3", "y", "4", "z" }, { "SET", "d", "string" },
    { "EXPIRE", "d", "100" }, { "ZUNIONSTORE", "d", "2", "a", "b" }, { "TYPE", "d" }, { "TTL", "d" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZINTERSTORE", "d", "2", "a", "b", "WEIGHTS", "2", "3" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZDIFFSTORE", "d", "2", "a", "b" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZINTERSTORE", "d", "2", "a", "none" }, { "EXISTS", "d" },
    { "ZINTERSTORE", "d", "2", "a", "none" }, { "ZUNIONSTORE", "a", "2", "a", "b", "AGGREGATE", "MAX" },
    { "ZRANGE", "a", "0", "-1", "WITHSCORES" }, { "ZCARD", "a" }, { "ZRANK", "a", "z" }, { "ZREVRANK", "a", "x" },
    { "ZADD", "a", "2.5", "new" }, { "ZRANGE", "a", "0", "-1", "WITHSCORES" }, { "ZREM", "a", "y" },
    { "ZRANGEBYSCORE", "a", "(1", "+inf" },
  } },
  { "ZINTERCARD", {
    { "ZADD", "a", "1", "x", "2", "y", "3", "z" }, { "ZADD", "b", "1", "y", "1", "z", "1", "w" },
    { "SADD", "s", "z", "y" }, { "ZINTERCARD", "2", "a", "b" }, { "ZINTERCARD", "3", "a", "b", "s" },
    { "ZINTERCARD", "2", "a", "b", "LIMIT", "1" }, { "ZINTERCARD", "2", "a", "b", "LIMIT", "0" },
    { "ZINTERCARD", "2", "a", "b", "LIMIT", "-1" }, { "ZINTERCARD", "2", "a", "b", "LIMIT", "x" },
    { "ZINTERCARD", "2", "a", "b", "LIMIT", MIN }, { "ZINTERCARD", "0", "a" }, { "ZINTERCARD", "3", "a", "b" },
    { "ZINTERCARD", "2", "a", "b", "WEIGHTS", "1", "1" }, { "ZINTERCARD", "1", "none" },
    { "ZINTERCARD", "2", "a", "b", "LIMIT" },
  } },
  { "ZRANGESTORE", {
    { "ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d" }, { "ZRANGESTORE", "d", "z", "0", "1" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZRANGESTORE", "d", "z", "(1", "+inf", "BYSCORE", "LIMIT", "1", "2" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZRANGESTORE", "d", "z", "+inf", "-inf", "BYSCORE", "REV" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZRANGESTORE", "d", "z", "[b", "(d", "BYLEX" },
    { "ZRANGE", "d", "0", "-1" }, { "ZRANGESTORE", "d", "z", "0", "-1", "REV" }, { "ZRANGE", "d", "0", "-1" },
    { "ZRANGESTORE", "d", "z", "5", "10" }, { "EXISTS", "d" }, { "ZRANGESTORE", "d", "none", "0", "-1" },
    { "ZRANGESTORE", "d", "z", "0", "-1", "WITHSCORES" }, { "ZRANGESTORE", "d", "z", "0", "-1", "LIMIT", "0", "1" },
    { "ZRANGESTORE", "d", "z", "0", "-1", "BYSCORE", "BYLEX" }, { "ZRANGESTORE", "d", "z", "0", "-1", "REV", "REV" },
    { "ZRANGESTORE", "d", "z", "x", "1" }, { "SET", "str", "x" }, { "ZRANGESTORE", "d", "str", "0", "1" },
    { "ZRANGESTORE", "str", "z", "0", "0" }, { "TYPE", "str" }, { "ZRANGESTORE", "d", "z", "0" },
  } },
  { "ZRANGE's options, once each", {
    { "ZADD", "z", "1", "a", "2", "b", "3", "c" }, { "ZRANGE", "z", "0", "1", "BYSCORE", "BYLEX" },
    { "ZRANGE", "z", "0", "1", "REV", "REV" }, { "ZRANGE", "z", "0", "-1", "LIMIT", "0", "-1" },
    { "ZRANGE", "z", "0", "-1", "LIMIT", "1", "-1" }, { "ZRANGE", "z", "0", "-1", "LIMIT", "1", "1" },
    { "ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "-1", "2" },
    { "ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "-1", "-1" }, { "ZRANGE", "z", "0", "-1", "BYSCORE", "BYSCORE" },
  } },
  { "ZRANDMEMBER", {
    { "ZRANDMEMBER", "none" }, { "ZRANDMEMBER", "none", "3" }, { "ZADD", "z", "1", "a", "2.5", "b", "3", "c" },
    sorted { "ZRANDMEMBER", "z", "3" }, sorted { "ZRANDMEMBER", "z", "10" }, { "ZRANDMEMBER", "z", "0" },
    { "ZRANDMEMBER", "z", "0", "WITHSCORES" }, { "ZADD", "one", "7", "m" }, { "ZRANDMEMBER", "one" },
    { "ZRANDMEMBER", "one", "-3" }, { "ZRANDMEMBER", "one", "-2", "WITHSCORES" },
    { "ZRANDMEMBER", "one", "1", "WITHSCORES" }, { "ZRANDMEMBER", "z", "1", "BOGUS" },
    { "ZRANDMEMBER", "z", "1", "WITHSCORES", "x" }, { "ZRANDMEMBER", "z", "x" },
    { "ZRANDMEMBER", "z", MIN }, { "ZRANDMEMBER", "z", "-4611686018427387905", "WITHSCORES" },
    { "ZRANDMEMBER", "z", "4611686018427387904", "WITHSCORES" }, { "SET", "s", "x" }, { "ZRANDMEMBER", "s" },
  } },
  { "ZMPOP and BZMPOP that find members", {
    { "ZADD", "a", "1", "x", "2", "y", "3", "z" }, { "ZMPOP", "2", "none", "a", "MIN" },
    { "ZMPOP", "1", "a", "MAX", "COUNT", "10" }, { "EXISTS", "a" }, { "ZMPOP", "1", "a", "MIN" },
    { "ZADD", "b", "5", "p", "6", "q" }, { "BZMPOP", "0", "2", "a", "b", "MAX", "COUNT", "1" },
    { "BZMPOP", "0.01", "1", "none", "MIN" }, { "ZMPOP", "0", "a", "MIN" }, { "ZMPOP", "x", "a", "MIN" },
    { "ZMPOP", "3", "a", "MIN" }, { "ZMPOP", "1", "a", "UP" }, { "ZMPOP", "1", "a", "MIN", "COUNT", "0" },
    { "ZMPOP", "1", "a", "MIN", "COUNT", "1", "COUNT", "2" }, { "ZMPOP", "1", "a", "MIN", "COUNT" },
    { "ZMPOP", "1", "a", "MIN", "COUNT", MIN }, { "SET", "s", "x" }, { "ZMPOP", "2", "s", "b", "MIN" },
    { "ZMPOP", "2", "b", "s", "MIN" }, { "BZMPOP", "x", "1", "b", "MIN" }, { "BZMPOP", "-1", "1", "b", "MIN" },
    { "BZMPOP", "0", "0", "b", "MIN" }, { "BZMPOP", "0", "1", "s", "MAX" },
  } },
}

-- ZADD key of n members m<i> (i = from..from + n - 1), score i * step.
local function zadd_many(key, from, n, step)
  local cmd = { "ZADD", key }
  for i = from, from + n - 1 do
    cmd[#cmd + 1] = tostring(i * step)
    cmd[#cmd + 1] = "m" .. i
  end
  return cmd
end

-- The algebra reuses its arrays from call to call for results of up to
-- 1,024 members (zsetops.lua): results after a larger one, after one of
-- the other kind and after a store must hold their own members only.
table.insert(families["sorted-set algebra"], { "results one after another, small and past 1,024 members", {
  zadd_many("big1", 1, 900, 1), zadd_many("big2", 600, 900, 2), { "ZADD", "a", "1", "x", "2", "y" },
  { "ZADD", "b", "3", "y", "4", "z" }, { "ZUNIONSTORE", "u", "2", "big1", "big2" }, { "ZCARD", "u" },
  { "ZRANGE", "u", "0", "4", "WITHSCORES" }, { "ZRANGE", "u", "-3", "-1", "WITHSCORES" },
  { "ZUNION", "2", "a", "b", "WITHSCORES" }, { "ZUNIONSTORE", "v", "2", "a", "b" },
  { "ZRANGE", "v", "0", "-1", "WITHSCORES" }, { "ZINTER", "2", "big1", "big2", "WITHSCORES", "AGGREGATE", "MAX" },
  { "ZUNION", "1", "a" }, { "ZDIFF", "2", "big2", "big1" }, { "ZUNIONSTORE", "w", "2", "a", "big1" },
  { "ZCARD", "w" }, { "ZRANGE", "w", "0", "2", "WITHSCORES" }, { "ZUNION", "2", "b", "none", "WITHSCORES" },
  { "ZUNIONSTORE", "v", "2", "none", "none2" }, { "EXISTS", "v" }, { "ZUNION", "2", "a", "a", "WITHSCORES" },
} })


families["bitmaps"] = {
  { "SETBIT and GETBIT", {
    { "SETBIT", "b", "7", "1" }, { "GET", "b" }, { "SETBIT", "b", "7", "0" }, { "SETBIT", "b", "100", "1" },
    { "STRLEN", "b" }, { "GETBIT", "b", "100" }, { "GETBIT", "b", "99" }, { "GETBIT", "b", "100000" },
    { "GETBIT", "none", "5" }, { "SETBIT", "b", "-1", "1" }, { "SETBIT", "b", "x", "1" },
    { "SETBIT", "b", "4294967296", "1" }, { "SETBIT", "b", "1", "2" }, { "SETBIT", "b", "1", "-1" },
    { "SETBIT", "b", "1", "x" }, { "SETBIT", "b", "x", "2" }, { "GETBIT", "b", "-1" }, { "GETBIT", "b", "#1" },
    { "SET", "s", "A" }, { "SETBIT", "s", "6", "1" }, { "GET", "s" }, { "GETBIT", "s", "1" },
    { "SET", "n", "12" }, { "INCR", "n" }, { "GETBIT", "n", "2" }, { "SETBIT", "n", "15", "0" }, { "GET", "n" },
    { "INCR", "n" }, { "RPUSH", "l", "x" }, { "SETBIT", "l", "0", "1" }, { "GETBIT", "l", "0" },
    { "SETBIT", "e", "0", "0" }, { "GET", "e" }, { "EXPIRE", "e", "100" }, { "SETBIT", "e", "9", "1" }, { "TTL", "e" },
  } },
  { "string commands on a bitmap", {
    { "SETBIT", "b", "1", "1" }, { "SETBIT", "b", "17", "1" }, { "GET", "b" }, { "STRLEN", "b" },
    { "APPEND", "b", "xyz" }, { "GET", "b" }, { "SETBIT", "b", "60", "1" }, { "SETRANGE", "b", "10", "tail" },
    { "GET", "b" }, { "GETRANGE", "b", "2", "5" }, { "GETRANGE", "b", "-4", "-1" }, { "BITCOUNT", "b" },
    { "MGET", "b", "none" }, { "GETSET", "b", "new" }, { "SETBIT", "c", "3", "1" }, { "GETDEL", "c" },
    { "SETBIT", "d", "2", "1" }, { "GETEX", "d", "PX", "100000" }, { "SET", "d", "v", "GET" },
    { "SETBIT", "i", "2", "1" }, { "SETBIT", "i", "3", "1" }, { "SETBIT", "i", "7", "1" }, { "INCR", "i" },
    { "SETBIT", "f", "2", "1" }, { "SETBIT", "f", "3", "1" }, { "INCRBYFLOAT", "f", "0.5" },
    { "SETBIT", "t", "0", "1" }, { "TYPE", "t" }, { "COPY", "t", "t2" }, { "SETBIT", "t2", "1", "1" },
    { "GET", "t" }, { "GET", "t2" }, { "LPUSH", "t", "x" }, { "SETBIT", "r", "1", "1" }, { "RENAME", "r", "r2" },
    { "GET", "r2" }, { "SETBIT", "x", "100", "1" }, { "SETRANGE", "x", "2", "" }, { "APPEND", "x", "" },
  } },
  { "BITCOUNT", {
    { "SET", "s", "foobar" }, { "BITCOUNT", "s" }, { "BITCOUNT", "s", "0", "0" }, { "BITCOUNT", "s", "1", "1" },
    { "BITCOUNT", "s", "1", "-2" }, { "BITCOUNT", "s", "-3", "-1" }, { "BITCOUNT", "s", "-1", "-3" },
    { "BITCOUNT", "s", "5", "30" }, { "BITCOUNT", "s", "-100", "100" }, { "BITCOUNT", "s", "1", "5", "BIT" },
    { "BITCOUNT", "s", "5", "30", "bit" }, { "BITCOUNT", "s", "-7", "-2", "BIT" }, { "BITCOUNT", "s", "0", "0", "BYTE" },
    { "BITCOUNT", "s", "0", "0", "WORD" }, { "BITCOUNT", "s", "0" }, { "BITCOUNT", "s", "x", "1" },
    { "BITCOUNT", "s", "0", "1", "BIT", "x" }, { "BITCOUNT", "none" }, { "BITCOUNT", "none", "x", "y" },
    { "BITCOUNT", "none", "1" }, { "SETBIT", "b", "5", "1" }, { "SETBIT", "b", "1000", "1" }, { "BITCOUNT", "b" },
    { "SETBIT", "b", "1000", "0" }, { "SETBIT", "b", "6", "1" }, { "SETBIT", "b", "6", "1" }, { "BITCOUNT", "b" },
    { "SETRANGE", "b", "0", "\255\255" }, { "BITCOUNT", "b" }, { "APPEND", "b", "\15" }, { "BITCOUNT", "b" },
    { "BITFIELD", "b", "SET", "u8", "8", "255" }, { "BITCOUNT", "b" }, { "BITCOUNT", "b", "1", "-1" },
    { "SET", "n", "255" }, { "INCR", "n" }, { "BITCOUNT", "n" }, { "HSET", "h", "f", "v" }, { "BITCOUNT", "h" },
    { "SET", "long", string.rep("\170\85\255\0\1", 97) }, { "BITCOUNT", "long" }, { "BITCOUNT", "long", "3", "400" },
    { "BITCOUNT", "long", "13", "3000", "BIT" }, { "BITCOUNT", "s", MIN, MAX }, { "BITCOUNT", "s", "0", MAX, "BIT" },
  } },
  { "BITPOS", {
    { "SET", "s", "\255\240\0" }, { "BITPOS", "s", "0" }, { "BITPOS", "s", "1" }, { "BITPOS", "s", "1", "2" },
    { "BITPOS", "s", "0", "2" }, { "BITPOS", "s", "1", "0", "-1" }, { "BITPOS", "s", "0", "1", "1" },
    { "BITPOS", "s", "1", "7", "15", "BIT" }, { "BITPOS", "s", "0", "7", "11", "BIT" },
    { "BITPOS", "s", "0", "0", "11", "bit" }, { "BITPOS", "s", "0", "12", "-1", "BIT" }, { "BITPOS", "s", "1", "12", "BIT" },
    { "BITPOS", "s", "0", "2", "-1", "BYTE" }, { "BITPOS", "s", "1", "5", "3" }, { "BITPOS", "s", "1", "-1" },
    { "SET", "ones", "\255\255" }, { "BITPOS", "ones", "0" }, { "BITPOS", "ones", "0", "0", "-1" },
    { "BITPOS", "ones", "0", "1" }, { "BITPOS", "ones", "0", "3", "15", "BIT" }, { "BITPOS", "ones", "0", "3", "BIT" },
    { "SET", "zeros", "\0\0" }, { "BITPOS", "zeros", "1" }, { "BITPOS", "zeros", "0" }, { "BITPOS", "zeros", "1", "0", "-1", "BIT" },
    { "BITPOS", "none", "1" }, { "BITPOS", "none", "0" }, { "BITPOS", "none", "0", "x" }, { "BITPOS", "s", "2" },
    { "BITPOS", "s", "x" }, { "BITPOS", "s", "1", "x" }, { "BITPOS", "s", "1", "0", "x" },
    { "BITPOS", "s", "1", "0", "1", "WORD" }, { "BITPOS", "s", "1", "0", "1", "BIT", "x" }, { "SET", "e", "" },
    { "BITPOS", "e", "0" }, { "BITPOS", "e", "1" }, { "LPUSH", "l", "x" }, { "BITPOS", "l", "1" },
    { "SETBIT", "b", "1000", "1" }, { "BITPOS", "b", "1" }, { "BITPOS", "b", "1", "-1" }, { "BITPOS", "b", "1", "1", "124" },
    { "SET", "long", string.rep("\0", 300) .. "\2" .. string.rep("\255", 40) .. "\127" }, { "BITPOS", "long", "1" },
    { "BITPOS", "long", "0", "301" }, { "BITPOS", "long", "1", "10", "299" }, { "BITPOS", "s", "1", MIN, MAX },
  } },
  { "BITOP", {
    { "SET", "a", "\255\15\1" }, { "SET", "b", "\240\240" }, { "BITOP", "AND", "d", "a", "b" }, { "GET", "d" },
    { "BITOP", "or", "d", "a", "b" }, { "GET", "d" }, { "BITOP", "XOR", "d", "a", "b", "none" }, { "GET", "d" },
    { "BITOP", "NOT", "d", "a" }, { "GET", "d" }, { "BITOP", "NOT", "d", "a", "b" }, { "BITOP", "NAND", "d", "a" },
    { "BITOP", "AND", "d", "none", "none2" }, { "EXISTS", "d" }, { "BITOP", "AND", "d", "a", "none" }, { "GET", "d" },
    { "RPUSH", "l", "x" }, { "BITOP", "OR", "d", "a", "l" }, { "SET", "n", "7" }, { "INCR", "n" },
    { "BITOP", "AND", "d", "n", "n" }, { "GET", "d" }, { "SETBIT", "bm", "20", "1" }, { "BITOP", "OR", "d", "bm", "a" },
    { "GET", "d" }, { "SET", "ttl", "x", "EX", "100" }, { "BITOP", "NOT", "ttl", "a" }, { "TTL", "ttl" },
    { "SETBIT", "d", "100", "1" }, { "STRLEN", "d" }, { "BITOP", "AND", "a", "a", "b" }, { "GET", "a" },
  } },
  { "BITFIELD", {
    { "BITFIELD", "k", "SET", "i8", "0", "100", "GET", "i8", "0", "INCRBY", "i8", "0", "100" },
    { "BITFIELD", "k", "OVERFLOW", "SAT", "INCRBY", "i8", "0", "100", "INCRBY", "i8", "0", "-300" },
    { "BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "i8", "0", "-1", "INCRBY", "i8", "0", "200" },
    { "BITFIELD", "k", "SET", "u4", "#2", "15", "GET", "u4", "8", "GET", "u4", "#2", "INCRBY", "u4", "#2", "3" },
    { "BITFIELD", "k", "OVERFLOW", "SAT", "INCRBY", "u4", "#2", "100", "INCRBY", "u4", "#2", "-100" },
    { "BITFIELD", "k", "OVERFLOW", "FAIL", "SET", "u4", "#2", "16", "SET", "u4", "#2", "-1", "SET", "i4", "0", "8" },
    { "BITFIELD", "k", "OVERFLOW", "WRAP", "SET", "u4", "#2", "17", "SET", "i4", "0", "8", "SET", "u8", "0", "-1" },
    { "BITFIELD", "k", "OVERFLOW", "SAT", "SET", "u4", "#2", "17", "SET", "i4", "0", "8", "SET", "i4", "0", "-9" },
    { "GET", "k" }, { "BITFIELD", "k", "GET", "i64", "0", "GET", "u63", "1", "GET", "u1", "3", "GET", "i5", "5" },
    { "BITFIELD", "w", "SET", "i64", "0", MAX, "INCRBY", "i64", "0", "1", "GET", "i64", "0" },
    { "BITFIELD", "w", "OVERFLOW", "SAT", "INCRBY", "i64", "0", MAX, "INCRBY", "i64", "0", MIN, "INCRBY", "i64", "0", MIN },
    { "BITFIELD", "w", "OVERFLOW", "FAIL", "INCRBY", "i64", "0", "-1", "INCRBY", "i64", "0", MIN },
    { "BITFIELD", "w", "SET", "u63", "1", MAX, "INCRBY", "u63", "1", "5", "OVERFLOW", "SAT", "INCRBY", "u63", "1", MAX },
    { "BITFIELD", "w", "SET", "i3", "13", "-4", "INCRBY", "i3", "13", "-1", "GET", "u3", "13", "GET", "i3", "13" },
    { "GET", "w" }, { "BITFIELD", "f", "SET", "u8", "100", "1", "GET", "u8", "100" }, { "STRLEN", "f" },
    { "BITFIELD", "f", "GET", "u8", "1000000" }, { "BITFIELD", "none", "GET", "i8", "0" }, { "EXISTS", "none" },
    { "BITFIELD", "f" }, { "BITFIELD", "f", "GET", "u64", "0" }, { "BITFIELD", "f", "GET", "i65", "0" },
    { "BITFIELD", "f", "GET", "x8", "0" }, { "BITFIELD", "f", "GET", "I8", "0" }, { "BITFIELD", "f", "GET", "u0", "0" },
    { "BITFIELD", "f", "GET", "u8", "-1" }, { "BITFIELD", "f", "GET", "u8", "#-1" }, { "BITFIELD", "f", "GET", "u8", "x" },
    { "BITFIELD", "f", "SET", "u8", "0", "x" }, { "BITFIELD", "f", "OVERFLOW", "MAYBE" }, { "BITFIELD", "f", "GET", "u8" },
    { "BITFIELD", "f", "FOO", "u8", "0" }, { "BITFIELD", "f", "OVERFLOW" }, { "BITFIELD", "f", "GET", "u8", "4294967295" },
    { "BITFIELD", "f", "GET", "u8", "4294967296" }, { "BITFIELD", "f", "GET", "u8", "#536870912" },
    { "BITFIELD", "f", "GET", "u8", "#536870911" }, { "BITFIELD", "f", "GET", "i64", "#1152921504606846976" },
    { "RPUSH", "l", "x" }, { "BITFIELD", "l", "GET", "u8", "0" }, { "BITFIELD", "l" }, { "BITFIELD", "l", "SET", "u8", "0", "1" },
    { "BITFIELD_RO", "f", "GET", "u8", "100", "GET", "i4", "#25" }, { "BITFIELD_RO", "f", "SET", "u8", "0", "1" },
    { "BITFIELD_RO", "none", "GET", "u8", "0" }, { "BITFIELD_RO", "f", "INCRBY", "u8", "0", "x" },
    { "BITFIELD_RO", "f", "OVERFLOW", "SAT", "GET", "u8", "0" }, { "BITFIELD_RO", "l", "GET", "u8", "0" },
    { "BITFIELD", "n", "OVERFLOW", "FAIL", "INCRBY", "u2", "0", "5" }, { "EXISTS", "n" }, { "GET", "n" },
    { "COMMAND", "GETKEYSANDFLAGS", "BITFIELD", "k", "GET", "u8", "0" },
    { "COMMAND", "GETKEYSANDFLAGS", "BITFIELD", "k", "GET", "u8", "0", "OVERFLOW", "SAT", "INCRBY", "u8", "0", "1" },
    { "COMMAND", "GETKEYSANDFLAGS", "BITFIELD", "k", "GET", "u8" },
    { "COMMAND", "GETKEYSANDFLAGS", "BITFIELD_RO", "k", "GET", "u8", "0" },
  } },
}

-- A bitmap's bytes are held in the same allocation as its length while
-- it is small; grown past them they move apart (bytes.lua): the string
-- commands, COPY and the remembered count must see one value either way.
table.insert(families["bitmaps"], { "a bitmap grown past the bytes it was made with", {
  { "SETBIT", "g", "3", "1" }, { "BITCOUNT", "g" }, { "SETBIT", "g", "70000", "1" }, { "BITCOUNT", "g" },
  { "STRLEN", "g" }, { "GETRANGE", "g", "0", "1" }, { "GETRANGE", "g", "-2", "-1" }, { "COPY", "g", "h" },
  { "SETBIT", "h", "3", "0" }, { "BITCOUNT", "g" }, { "BITCOUNT", "h" }, { "APPEND", "g", "end" },
  { "STRLEN", "g" }, { "BITCOUNT", "g" }, { "SETRANGE", "g", "200000", "far" }, { "STRLEN", "g" },
  { "BITCOUNT", "g" }, { "GETRANGE", "g", "199999", "-1" }, { "SETBIT", "g", "1600020", "1" },
  { "BITCOUNT", "g", "-4", "-1" }, { "BITPOS", "g", "1", "-8", "-1" }, { "STRLEN", "h" },
  { "BITOP", "AND", "i", "g", "h" }, { "BITCOUNT", "i" }, { "SET", "s", "x" }, { "SETBIT", "s", "9000", "1" },
  { "APPEND", "s", "y" }, { "STRLEN", "s" }, { "GETRANGE", "s", "0", "0" }, { "BITCOUNT", "s" },
} })

families["SORT"] = {
  { "numbers, ALPHA, DESC, LIMIT", {
    { "RPUSH", "l", "3", "1", "2", "10", "-1.5", "1e2", "0x10", " 7", "" }, { "SORT", "l" }, { "SORT", "l", "DESC" },
    { "SORT", "l", "LIMIT", "1", "3" }, { "SORT", "l", "LIMIT", "-5", "2" }, { "SORT", "l", "LIMIT", "2", "-1" },
    { "SORT", "l", "LIMIT", "20", "5" }, { "SORT", "l", "LIMIT", "0", "0" }, { "SORT", "l", "ALPHA" },
    { "SORT", "l", "ALPHA", "DESC", "LIMIT", "0", "4" }, { "SORT", "l", "DESC", "ASC" },
    { "RPUSH", "bad", "1", "x" }, { "SORT", "bad" }, { "SORT", "bad", "ALPHA" }, { "SORT", "bad", "LIMIT", "0", "1" },
    { "RPUSH", "w", "1", "nan", "inf" }, { "SORT", "w", "BY", "nosort" }, { "SORT", "w", "ALPHA" }, { "SORT", "w" },
    { "RPUSH", "w2", "-inf", "inf", "+Infinity", "1.5", "0x1p3", ".5", "5.", "1e1", "-0", "0", "1.0" },
    { "SORT", "w2" }, { "SORT", "w2", "DESC" },
    -- (Not "1e400" and the like: Redis 7.0 reads strtod's ERANGE without
    -- clearing errno first, so after one such value its SORTs of good
    -- numbers fail too until some call resets errno.)
    { "RPUSH", "w3", "1 " }, { "SORT", "w3" }, { "RPUSH", "w4", "0b1" }, { "SORT", "w4" },
    { "RPUSH", "w5", "1_0" }, { "SORT", "w5" }, { "RPUSH", "w6", "-nan" }, { "SORT", "w6" },
    { "RPUSH", "w7", "  " }, { "SORT", "w7" }, { "RPUSH", "w8", "\t-2" }, { "SORT", "w8" },
    { "SADD", "s", "5", "3", "9", "a1" }, { "SORT", "s", "ALPHA" }, { "SORT", "s", "ALPHA", "DESC", "LIMIT", "1", "2" },
    { "SORT", "s" }, { "ZADD", "z", "1", "c", "2", "b", "3", "a" }, { "SORT", "z", "ALPHA" }, { "SORT", "z", "BY", "nosort" },
    { "SORT", "z", "BY", "nosort", "DESC" }, { "SORT", "z", "BY", "nosort", "LIMIT", "1", "5" },
    { "SORT", "z", "BY", "nosort", "DESC", "LIMIT", "1", "1" }, { "SORT", "none" }, { "SORT", "none", "LIMIT", "0", "1" },
    { "SET", "str", "x" }, { "SORT", "str" }, { "HSET", "h", "f", "v" }, { "SORT", "h" },
  } },
  { "BY and GET patterns", {
    { "RPUSH", "ids", "1", "2", "3", "4" }, { "MSET", "w_1", "30", "w_2", "10", "w_3", "20", "n_1", "one", "n_3", "three" },
    { "HSET", "h_1", "age", "40", "name", "ann" }, { "HSET", "h_2", "age", "20" }, { "HSET", "h_4", "age", "30", "name", "dan" },
    { "SORT", "ids", "BY", "w_*" }, { "SORT", "ids", "BY", "w_*", "DESC" }, { "SORT", "ids", "BY", "w_*", "GET", "n_*" },
    { "SORT", "ids", "BY", "w_*", "GET", "#", "GET", "n_*", "GET", "h_*->name" },
    { "SORT", "ids", "BY", "h_*->age" }, { "SORT", "ids", "BY", "h_*->age", "DESC", "GET", "h_*->name" },
    { "SORT", "ids", "BY", "n_*", "ALPHA" }, { "SORT", "ids", "BY", "nosort", "GET", "n_*" },
    { "SORT", "ids", "BY", "nosort", "DESC", "LIMIT", "1", "2", "GET", "#", "GET", "w_*" },
    { "SORT", "ids", "BY", "w_*", "LIMIT", "1", "2", "GET", "#" }, { "SORT", "ids", "GET", "nostar" },
    { "SORT", "ids", "GET", "h_*->" }, { "SORT", "ids", "GET", "h_*->nofield" }, { "SORT", "ids", "BY", "h_*->name", "ALPHA" },
    { "SORT", "ids", "BY", "n_*" }, { "SORT", "ids", "GET" }, { "SORT", "ids", "BY" }, { "SORT", "ids", "LIMIT", "1" },
    { "SORT", "ids", "LIMIT", "x", "1" }, { "SORT", "ids", "BOGUS" }, { "SET", "x_1", "2" }, { "INCR", "x_1" },
    { "RPUSH", "x_2", "l" }, { "SORT", "ids", "BY", "x_*", "GET", "x_*" }, { "SETBIT", "b_1", "6", "1" },
    { "SORT", "ids", "GET", "b_*" }, { "SET", "e_1", "", "EX", "100" }, { "SORT", "ids", "BY", "e_*", "GET", "e_*" },
    { "SORT", "ids", "BY", "*", "GET", "*" }, { "SORT", "ids", "BY", "w_*->", "GET", "w_*->" },
  } },
  { "STORE and SORT_RO", {
    { "RPUSH", "l", "3", "1", "2" }, { "SORT", "l", "STORE", "d" }, { "LRANGE", "d", "0", "-1" }, { "TYPE", "d" },
    { "MSET", "k_1", "a", "k_3", "c" }, { "SORT", "l", "GET", "k_*", "GET", "#", "STORE", "d" },
    { "LRANGE", "d", "0", "-1" }, { "SORT", "l", "LIMIT", "5", "1", "STORE", "d" }, { "EXISTS", "d" },
    { "SORT", "l", "LIMIT", "5", "1", "STORE", "d" }, { "SET", "d", "string", "EX", "100" }, { "SORT", "l", "STORE", "d" },
    { "TTL", "d" }, { "SADD", "s", "b", "c", "a" }, { "SORT", "s", "BY", "nosort", "STORE", "d" }, { "LRANGE", "d", "0", "-1" },
    { "SORT", "s", "STORE", "d", "STORE", "e" }, { "EXISTS", "d" }, { "LRANGE", "e", "0", "-1" },
    { "SORT", "l", "STORE" }, { "SORT", "l", "DESC", "STORE", "l" }, { "LRANGE", "l", "0", "-1" },
    { "SORT_RO", "l" }, { "SORT_RO", "l", "BY", "nosort", "DESC", "GET", "k_*" }, { "SORT_RO", "l", "STORE", "d" },
    { "SORT", "none", "STORE", "d" }, { "EXISTS", "d" },
    { "COMMAND", "GETKEYS", "SORT", "l", "STORE", "d" }, { "COMMAND", "GETKEYSANDFLAGS", "SORT", "l", "GET", "store", "STORE", "d" },
    { "COMMAND", "GETKEYS", "SORT", "l", "LIMIT", "0", "1", "BY", "x", "STORE", "d", "STORE", "e" },
    { "COMMAND", "GETKEYS", "SORT", "l" }, { "COMMAND", "GETKEYS", "SORT_RO", "l", "BY", "x" },
    { "COMMAND", "GETKEYS", "SORT", "l", "STORE" },
  } },
}

families["LPUSHX, RPUSHX, TOUCH, LCS, SAVE"] = {
  { "LPUSHX and RPUSHX", {
    { "LPUSHX", "l", "a" }, { "EXISTS", "l" }, { "RPUSH", "l", "x" }, { "LPUSHX", "l", "a", "b" },
    { "RPUSHX", "l", "c", "d" }, { "LRANGE", "l", "0", "-1" }, { "RPUSHX", "none", "a" }, { "SET", "s", "x" },
    { "LPUSHX", "s", "a" }, { "RPUSHX", "s", "a" }, { "LPUSHX", "l" },
  } },
  { "TOUCH", {
    { "MSET", "a", "1", "b", "2" }, { "TOUCH", "a", "b", "none", "a" }, { "TOUCH", "none" }, { "TOUCH" },
    { "SET", "gone", "x", "PX", "1" }, { "RPUSH", "l", "x" }, { "TOUCH", "l" },
  } },
  { "LCS", {
    { "MSET", "a", "ohmytext", "b", "mynewtext" }, { "LCS", "a", "b" }, { "LCS", "a", "b", "LEN" },
    { "LCS", "a", "b", "IDX" }, { "LCS", "a", "b", "IDX", "MINMATCHLEN", "4" }, { "LCS", "a", "b", "IDX", "WITHMATCHLEN" },
    { "LCS", "a", "b", "IDX", "MINMATCHLEN", "-5", "WITHMATCHLEN" }, { "LCS", "a", "b", "LEN", "IDX" },
    { "LCS", "a", "b", "MINMATCHLEN" }, { "LCS", "a", "b", "MINMATCHLEN", "x" }, { "LCS", "a", "b", "BOGUS" },
    { "LCS", "a", "none" }, { "LCS", "none", "none2", "IDX" }, { "RPUSH", "l", "x" }, { "LCS", "a", "l" },
    { "LCS", "l", "none", "BOGUS" }, { "SET", "n", "12345" }, { "INCR", "n" }, { "SET", "m", "2340" }, { "LCS", "n", "m", "IDX" },
    { "SET", "x", "abcabcabcxyz" }, { "SET", "y", "xyzabcabcab" }, { "LCS", "x", "y" }, { "LCS", "x", "y", "IDX", "WITHMATCHLEN" },
    { "LCS", "a", "a", "IDX" }, { "SETBIT", "bm", "1", "1" }, { "SET", "c", "@" }, { "LCS", "bm", "c" },
    { "SET", "long1", string.rep("ab", 150) }, { "SET", "long2", string.rep("ba", 120) .. "x" }, { "LCS", "long1", "long2", "LEN" },
  } },
  { "SAVE", {
    { "SET", "k", "v" }, { "SAVE" }, { "SAVE", "x" }, { "MULTI" }, { "SAVE" }, { "SET", "a", "b" }, { "EXEC" },
    { "EXISTS", "a" },
  } },
}

-- PFADD of count elements "<prefix><i>", in commands of 200.
local function pfadds(key, prefix, count)
  local cmds = {}
  for i = 1, count, 200 do
    local cmd = { "PFADD", key }
    for j = i, math.min(i + 199, count) do cmd[#cmd + 1] = prefix .. j end
    cmds[#cmds + 1] = cmd
  end
  return cmds
end

-- The commands of several lists, in order, as one list.
local function join(...)
  local t = {}
  for _, list in ipairs { ... } do
    for _, cmd in ipairs(list) do t[#t + 1] = cmd end
  end
  return t
end

families["HyperLogLog"] = {
  { "PFADD and PFCOUNT, sparse, in Redis's bytes", {
    { "PFADD", "h", "a", "b", "c" }, { "PFADD", "h", "a" }, { "PFADD", "h" }, { "PFADD", "new" }, { "GET", "new" },
    { "PFCOUNT", "h" }, { "GET", "h" }, { "PFCOUNT", "h" }, { "PFCOUNT", "none" }, { "PFADD", "h", "d", "e", "f", "g", "h" },
    { "GET", "h" }, { "PFCOUNT", "h" }, { "PFADD", "x", "" }, { "PFADD", "x", "a much longer element than eight bytes" },
    { "GET", "x" }, { "PFCOUNT", "h", "x" }, { "PFCOUNT", "h", "x", "none" }, { "GET", "h" }, { "TYPE", "h" },
    { "STRLEN", "h" }, { "SET", "s", "plain" }, { "PFADD", "s", "a" }, { "PFCOUNT", "s" }, { "PFCOUNT", "h", "s" },
    { "SET", "n", "1" }, { "INCR", "n" }, { "PFADD", "n", "a" }, { "RPUSH", "l", "x" }, { "PFADD", "l", "a" },
    { "PFCOUNT", "l" }, { "PFMERGE", "l", "h" }, { "PFMERGE", "h", "l" }, { "SET", "short", "HYLL" }, { "PFCOUNT", "short" },
  } },
  { "a thousand elements, sparse", join(pfadds("h", "e", 1000), {
    { "GET", "h" }, { "PFCOUNT", "h" }, { "GET", "h" }, { "STRLEN", "h" },
  }) },
  { "ten thousand, turned dense", join(pfadds("h", "item:", 10000), {
    { "STRLEN", "h" }, { "PFCOUNT", "h" }, { "GET", "h" }, { "PFADD", "h", "item:1" }, { "PFCOUNT", "h" },
    { "PFADD", "h", "another" }, { "GET", "h" },
  }) },
  { "PFMERGE and PFCOUNT of several keys", join(pfadds("a", "x", 600), pfadds("b", "x", 300), pfadds("c", "y", 3000), {
    { "PFCOUNT", "a", "b" }, { "PFCOUNT", "a", "b", "c" }, { "PFMERGE", "d", "a", "b" }, { "GET", "d" }, { "PFCOUNT", "d" },
    { "PFMERGE", "d", "c" }, { "PFCOUNT", "d" }, { "GET", "d" }, { "PFMERGE", "e" }, { "GET", "e" }, { "PFMERGE", "a" },
    { "GET", "a" }, { "PFMERGE", "f", "none" }, { "PFCOUNT", "f" }, { "SET", "s", "x" }, { "PFMERGE", "f", "s" },
    { "PFMERGE", "g", "a", "c" }, { "PFCOUNT", "g" }, { "PFCOUNT", "a", "c" },
  }) },
  { "hll-sparse-max-bytes", join({ { "CONFIG", "SET", "hll-sparse-max-bytes", "200" } }, pfadds("h", "z", 150), {
    { "STRLEN", "h" }, { "GET", "h" }, { "CONFIG", "GET", "hll-sparse-max-bytes" },
    { "CONFIG", "SET", "hll-sparse-max-bytes", "-1" }, { "CONFIG", "SET", "hll-sparse-max-bytes", "3000" },
    { "PFADD", "k", "a" }, { "GET", "k" },
  }) },
  { "a HyperLogLog made by SET from Redis's bytes", {
    { "SET", "h", "HYLL\1\0\0\0\0\0\0\0\0\0\0\128\127\255" }, { "PFCOUNT", "h" }, { "PFADD", "h", "a" }, { "GET", "h" },
    { "SET", "d", "HYLL\0\0\0\0\0\0\0\0\0\0\0\128" .. string.rep("\0", 12288) }, { "PFADD", "d", "q" }, { "PFCOUNT", "d" },
    { "SET", "bad", "HYLL\0\0\0\0\0\0\0\0\0\0\0\128" .. string.rep("\0", 100) }, { "PFCOUNT", "bad" },
    { "SET", "enc", "HYLL\2\0\0\0\0\0\0\0\0\0\0\128" }, { "PFADD", "enc", "a" },
  } },
}

-- GEOADD of n points spread over the map by a fixed rule (a ring of
-- cities' worth of points, near the poles and the antimeridian too).
local function geo_points(key, n)
  local cmd = { "GEOADD", key }
  for i = 1, n do
    local lon = ((i * 37) % 360) - 180 + (i % 7) * 0.013
    local lat = ((i * 23) % 170) - 85 + (i % 5) * 0.011
    cmd[#cmd + 1] = ("%.6f"):format(lon)
    cmd[#cmd + 1] = ("%.6f"):format(lat)
    cmd[#cmd + 1] = "p" .. i
  end
  return cmd
end

families["GEO"] = {
  { "GEOADD, GEODIST, GEOPOS, GEOHASH", {
    { "GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania" },
    { "GEODIST", "Sicily", "Palermo", "Catania" }, { "GEODIST", "Sicily", "Palermo", "Catania", "km" },
    { "GEODIST", "Sicily", "Palermo", "Catania", "MI" }, { "GEODIST", "Sicily", "Palermo", "Catania", "ft" },
    { "GEODIST", "Sicily", "Palermo", "nope" }, { "GEODIST", "none", "a", "b" }, { "GEODIST", "Sicily", "a", "b", "yd" },
    { "GEODIST", "Sicily", "a", "b", "m", "x" }, { "GEOPOS", "Sicily", "Palermo", "nope", "Catania" },
    { "GEOPOS", "none", "a" }, { "GEOHASH", "Sicily", "Palermo", "Catania", "nope" }, { "GEOHASH", "none", "a" },
    { "ZRANGE", "Sicily", "0", "-1", "WITHSCORES" }, { "TYPE", "Sicily" },
    { "GEOADD", "Sicily", "XX", "CH", "13.4", "38.2", "Palermo", "1", "1", "Nowhere" }, { "ZCARD", "Sicily" },
    { "GEOADD", "Sicily", "NX", "0", "0", "Palermo", "1", "1", "Zero" }, { "GEOPOS", "Sicily", "Palermo", "Zero" },
    { "GEOADD", "Sicily", "NX", "XX", "0", "0", "a" }, { "GEOADD", "Sicily", "GT", "0", "0", "a" },
    { "GEOADD", "Sicily", "181", "0", "a" }, { "GEOADD", "Sicily", "0", "85.06", "a" }, { "GEOADD", "Sicily", "x", "0", "a" },
    { "GEOADD", "Sicily", "0", "0", "a", "1" }, { "GEOADD", "Sicily", "0", "0" }, { "SET", "s", "x" },
    { "GEOADD", "s", "0", "0", "a" }, { "GEOPOS", "s", "a" }, { "GEODIST", "s", "a", "b" },
    { "GEOADD", "edge", "-180", "-85.05112878", "sw", "180", "85.05112878", "ne", "0", "0", "origin", "-0.0001", "0.0001", "near" },
    { "GEOPOS", "edge", "sw", "ne", "origin", "near" }, { "GEOHASH", "edge", "sw", "ne", "origin", "near" },
    { "GEODIST", "edge", "sw", "ne" }, { "GEODIST", "edge", "origin", "near", "m" }, { "ZADD", "edge", "1.9", "odd" },
    { "GEOPOS", "edge", "odd" }, { "GEOHASH", "edge", "odd" },
  } },
  { "GEORADIUS and GEORADIUSBYMEMBER", {
    geo_points("g", 300), { "GEORADIUS", "g", "10", "20", "2000", "km" },
    { "GEORADIUS", "g", "10", "20", "2000", "km", "ASC", "WITHDIST" }, { "GEORADIUS", "g", "10", "20", "3000", "mi", "DESC", "COUNT", "3" },
    { "GEORADIUS", "g", "10", "20", "3000", "km", "COUNT", "2", "WITHCOORD", "WITHHASH" },
    { "GEORADIUS", "g", "10", "20", "3000", "km", "COUNT", "2", "ANY" },
    { "GEORADIUS", "g", "170", "80", "1500", "km", "WITHDIST" }, { "GEORADIUS", "g", "-179.9", "-60", "900", "km" },
    { "GEORADIUS", "g", "0", "0", "6000", "km" }, { "GEORADIUS", "g", "0", "0", "20000", "km", "COUNT", "4", "ASC" },
    { "GEORADIUS", "g", "0", "0", "0", "m" }, { "GEORADIUSBYMEMBER", "g", "p7", "2500", "km", "WITHDIST", "ASC" },
    { "GEORADIUSBYMEMBER", "g", "p7", "0", "km" }, { "GEORADIUSBYMEMBER", "g", "nope", "10", "km" },
    { "GEORADIUSBYMEMBER", "none", "nope", "x", "y", "WITHDIST" }, { "GEORADIUS", "none", "0", "0", "1", "km" },
    { "GEORADIUS", "g", "0", "0", "-1", "km" }, { "GEORADIUS", "g", "0", "0", "x", "km" }, { "GEORADIUS", "g", "0", "0", "1", "yd" },
    { "GEORADIUS", "g", "0", "0", "1", "km", "COUNT", "0" }, { "GEORADIUS", "g", "0", "0", "1", "km", "COUNT", "x" },
    { "GEORADIUS", "g", "0", "0", "1", "km", "ANY" }, { "GEORADIUS", "g", "0", "0", "1", "km", "BOGUS" },
    { "GEORADIUS", "g", "0", "0", "1", "km", "COUNT" }, { "GEORADIUS", "g", "200", "0", "1", "km" },
    { "GEORADIUS", "g", "10", "20", "2000", "km", "STORE", "d" }, { "ZRANGE", "d", "0", "-1", "WITHSCORES" },
    { "GEORADIUS", "g", "10", "20", "2000", "km", "STOREDIST", "d", "COUNT", "3" }, { "ZRANGE", "d", "0", "-1", "WITHSCORES" },
    { "GEORADIUS", "g", "10", "20", "1", "m", "STORE", "d" }, { "EXISTS", "d" }, { "GEORADIUS", "g", "0", "0", "1", "km", "STORE", "d", "WITHDIST" },
    { "GEORADIUS_RO", "g", "10", "20", "2000", "km", "ASC" }, { "GEORADIUS_RO", "g", "10", "20", "2000", "km", "STORE", "d" },
    { "GEORADIUSBYMEMBER_RO", "g", "p7", "2500", "km", "ASC" }, { "GEORADIUSBYMEMBER", "none", "a", "1", "km", "STORE", "d" },
    { "SET", "s", "x" }, { "GEORADIUS", "s", "0", "0", "1", "km" }, { "GEORADIUS", "g", "0", "0", "1", "km", "STORE", "s" },
  } },
  { "GEOSEARCH and GEOSEARCHSTORE", {
    geo_points("g", 300), { "GEOSEARCH", "g", "FROMLONLAT", "10", "20", "BYRADIUS", "2000", "km" },
    { "GEOSEARCH", "g", "FROMMEMBER", "p9", "BYBOX", "4000", "3000", "km", "ASC", "WITHDIST", "WITHCOORD" },
    { "GEOSEARCH", "g", "FROMLONLAT", "-170", "-75", "BYBOX", "3000", "900", "km" },
    { "GEOSEARCH", "g", "FROMLONLAT", "100", "70", "BYBOX", "6000", "2000", "km", "DESC", "COUNT", "5" },
    { "GEOSEARCH", "g", "FROMLONLAT", "100", "-70", "BYBOX", "6000", "2000", "km", "COUNT", "5", "ANY" },
    { "GEOSEARCH", "g", "FROMMEMBER", "p9", "BYRADIUS", "10", "km" }, { "GEOSEARCH", "g", "FROMMEMBER", "nope", "BYRADIUS", "10", "km" },
    { "GEOSEARCH", "none", "FROMMEMBER", "nope", "BYRADIUS", "10", "km" }, { "GEOSEARCH", "g", "BYRADIUS", "10", "km" },
    { "geosearch", "g", "FROMLONLAT", "0", "0" }, { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "FROMMEMBER", "p1", "BYRADIUS", "1", "m" },
    { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "m", "BYBOX", "1", "1", "m" },
    { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYBOX", "-1", "1", "m" }, { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYBOX", "x", "1", "m" },
    { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYBOX", "1", "x", "m" }, { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYBOX", "1", "1", "yd" },
    { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "m", "STORE", "d" },
    { "GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "m", "STOREDIST" },
    { "GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "10", "20", "BYRADIUS", "2000", "km" }, { "ZRANGE", "d", "0", "-1", "WITHSCORES" },
    { "GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "10", "20", "BYRADIUS", "2000", "km", "STOREDIST", "COUNT", "2", "DESC" },
    { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "10", "20", "BYRADIUS", "1", "m" },
    { "EXISTS", "d" }, { "GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "10", "20", "BYRADIUS", "1", "m", "WITHDIST" },
    { "GEOSEARCHSTORE", "d", "none", "FROMLONLAT", "10", "20", "BYRADIUS", "1", "m" },
    { "COMMAND", "GETKEYS", "GEORADIUS", "g", "0", "0", "1", "km", "STORE", "d" },
    { "COMMAND", "GETKEYS", "GEORADIUS", "g", "0", "0", "1", "km", "STOREDIST", "d", "STORE", "e" },
  } },
}

-- XADD of count entries ms-1.. with a field each.
local function xadds(key, from, count, field)
  local cmds = {}
  for i = from, from + count - 1 do cmds[#cmds + 1] = { "XADD", key, i .. "-1", field or "f", "v" .. i } end
  return cmds
end

families["streams"] = {
  { "XADD, XRANGE, XREVRANGE, XLEN", {
    { "XADD", "s", "1-1", "a", "1", "b", "2" }, { "XADD", "s", "1-2", "a", "3" }, { "XADD", "s", "2-*", "c", "4" },
    { "XADD", "s", "2-*", "d", "5" }, { "XADD", "s", "5", "e", "6" }, { "XLEN", "s" }, { "XRANGE", "s", "-", "+" },
    { "XRANGE", "s", "1", "2" }, { "XRANGE", "s", "(1-1", "(5-0" }, { "XRANGE", "s", "1-2", "+", "COUNT", "2" },
    { "XRANGE", "s", "-", "+", "COUNT", "0" }, { "XRANGE", "s", "-", "+", "COUNT", "-5" }, { "XREVRANGE", "s", "+", "-" },
    { "XREVRANGE", "s", "+", "-", "COUNT", "2" }, { "XREVRANGE", "s", "2", "1-2" }, { "XRANGE", "s", "5", "1" },
    { "XRANGE", "none", "-", "+" }, { "XLEN", "none" }, { "XADD", "s", "1-1", "x", "y" }, { "XADD", "s", "5-0", "x", "y" },
    { "XADD", "s", "4-*", "x", "y" }, { "XADD", "s", "0-0", "x", "y" }, { "XADD", "t", "0-0", "x", "y" }, { "EXISTS", "t" },
    { "XADD", "s", "6-1", "x" }, { "XADD", "s", "6-1" }, { "XADD", "s", "6-1", "x", "y", "z" }, { "XADD", "s", "-", "x", "y" },
    { "XADD", "s", "+", "x", "y" }, { "XADD", "s", "abc", "x", "y" }, { "XADD", "s", "NOMKSTREAM", "7-1", "x", "y" },
    { "XADD", "none", "NOMKSTREAM", "7-1", "x", "y" }, { "EXISTS", "none" }, { "SET", "str", "x" },
    { "XADD", "str", "1-1", "x", "y" }, { "XRANGE", "str", "-", "+" }, { "XLEN", "str" }, { "TYPE", "s" },
    { "XRANGE", "s", "(-", "+" }, { "XRANGE", "s", "-", "(+" }, { "XRANGE", "s", "x", "+" }, { "XRANGE", "s", "-", "+", "BOGUS" },
    { "XRANGE", "s", "-", "+", "COUNT" }, { "XRANGE", "s", "-", "+", "COUNT", "x" },
    { "XADD", "m", "18446744073709551615-18446744073709551614", "a", "b" }, { "XADD", "m", "18446744073709551615-*", "a", "b" },
    { "XADD", "m", "*", "a", "b" }, { "XRANGE", "m", "(18446744073709551615-18446744073709551615", "+" },
    { "XRANGE", "m", "-", "(0-0" }, { "XRANGE", "m", "18446744073709551615", "+" },
  } },
  { "IDs as string2ull reads them", {
    { "XADD", "s", "007-1", "a", "b" }, { "XADD", "s", "+8-1", "a", "b" }, { "XADD", "s", " 9-1", "a", "b" },
    { "XADD", "s", "10-+2", "a", "b" }, { "XADD", "s", "11-02", "a", "b" }, { "XADD", "s", "12--1", "a", "b" },
    { "XADD", "s", "-13-1", "a", "b" }, { "XADD", "s", "18446744073709551616-1", "a", "b" }, { "XADD", "s", "14-1x", "a", "b" },
    { "XADD", "s", "15-", "a", "b" }, { "XADD", "s", "-0", "a", "b" }, { "XADD", "s", "16-*x", "a", "b" },
    { "XRANGE", "s", "-", "+" }, { "XRANGE", "s", "9", "10" }, { "XRANGE", "s", "((9", "+" }, { "XRANGE", "s", "(", "+" },
  } },
  { "XDEL, XTRIM and the counters XINFO STREAM shows", join(xadds("s", 1, 250), {
    { "XDEL", "s", "5-1", "6-1", "999-1", "5-1" }, { "XDEL", "s", "x" }, { "XDEL", "none", "x" }, { "XLEN", "s" },
    { "XINFO", "STREAM", "s" }, { "XDEL", "s", "1-1" }, { "XINFO", "STREAM", "s" },
    { "XTRIM", "s", "MAXLEN", "~", "200" }, { "XINFO", "STREAM", "s" }, { "XTRIM", "s", "MAXLEN", "=", "200" },
    { "XLEN", "s" }, { "XINFO", "STREAM", "s" }, { "XTRIM", "s", "MINID", "~", "120" }, { "XINFO", "STREAM", "s" },
    { "XTRIM", "s", "MINID", "130" }, { "XRANGE", "s", "-", "+", "COUNT", "2" }, { "XTRIM", "s", "MAXLEN", "~", "10", "LIMIT", "50" },
    { "XLEN", "s" }, { "XTRIM", "s", "MAXLEN", "~", "10", "LIMIT", "0" }, { "XLEN", "s" }, { "XINFO", "STREAM", "s" },
    { "XTRIM", "s", "MAXLEN", "10", "LIMIT", "5" }, { "XTRIM", "s", "LIMIT", "5" }, { "XTRIM", "s", "MAXLEN", "-1" },
    { "XTRIM", "s", "MAXLEN", "1", "MINID", "1" }, { "XTRIM", "s", "MINID", "x" }, { "XTRIM", "s", "BOGUS" },
    { "XTRIM", "none", "BOGUS" }, { "XTRIM", "s", "MAXLEN", "0" }, { "XINFO", "STREAM", "s" }, { "XADD", "s", "290-*", "a", "b" },
    { "XADD", "s", "300-1", "a", "b" }, { "XDEL", "s", "300-1" }, { "XINFO", "STREAM", "s" },
    { "XINFO", "STREAM", "none" }, { "XINFO", "STREAM", "s", "x" }, { "XINFO", "HELP" }, { "XINFO", "BOGUS" },
  }) },
  { "XADD with MAXLEN and MINID", join(xadds("s", 1, 120), {
    { "XADD", "s", "MAXLEN", "~", "50", "200-1", "a", "b" }, { "XINFO", "STREAM", "s" },
    { "XADD", "s", "MAXLEN", "50", "201-1", "a", "b" }, { "XLEN", "s" }, { "XRANGE", "s", "-", "+", "COUNT", "1" },
    { "XADD", "s", "MINID", "=", "190", "202-1", "a", "b" }, { "XRANGE", "s", "-", "+" },
    { "XADD", "s", "MAXLEN", "~", "1", "LIMIT", "2", "203-1", "a", "b" }, { "XLEN", "s" },
    { "XADD", "s", "MAXLEN", "1", "LIMIT", "2", "204-1", "a", "b" }, { "XADD", "s", "LIMIT", "2", "204-1", "a", "b" },
    { "XADD", "s", "MAXLEN", "0", "205-1", "a", "b" }, { "XINFO", "STREAM", "s" }, { "XADD", "s", "MAXLEN", "x", "206-1", "a", "b" },
  }) },
  { "XREAD", join(xadds("a", 1, 5), xadds("b", 3, 3), {
    { "XREAD", "STREAMS", "a", "b", "0", "0" }, { "XREAD", "COUNT", "2", "STREAMS", "a", "b", "2-1", "0-0" },
    { "XREAD", "STREAMS", "a", "b", "$", "$" }, { "XREAD", "STREAMS", "a", "none", "4", "0" }, { "XREAD", "STREAMS", "a", "5-1" },
    { "XREAD", "COUNT", "-1", "STREAMS", "a", "0" }, { "XREAD", "BLOCK", "10", "STREAMS", "a", "3-1" },
    { "XREAD", "STREAMS", "a", "b", "0" }, { "XREAD", "STREAMS", "a", ">" }, { "XREAD", "STREAMS", "a", "x" },
    { "XREAD", "a", "0" }, { "XREAD", "NOACK", "STREAMS", "a", "0" }, { "XREAD", "GROUP", "g", "c", "STREAMS", "a", "0" },
    { "XREAD", "COUNT", "x", "STREAMS", "a", "0" }, { "XREAD", "BLOCK", "x", "STREAMS", "a", "0" },
    { "XREAD", "BLOCK", "-1", "STREAMS", "a", "0" }, { "SET", "str", "x" }, { "XREAD", "STREAMS", "str", "0" },
    { "XREAD", "STREAMS", "a", "str", "0", "0" }, { "XREAD", "STREAMS", "a", "a", "1-1", "3-1" },
    { "COMMAND", "GETKEYS", "XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0" },
    { "MULTI" }, { "XREAD", "BLOCK", "0", "STREAMS", "a", "$" }, { "EXEC" },
  }) },
  { "XSETID", join(xadds("s", 1, 3), {
    { "XSETID", "s", "2-1" }, { "XSETID", "s", "10-1" }, { "XINFO", "STREAM", "s" }, { "XADD", "s", "5-1", "a", "b" },
    { "XADD", "s", "30-*", "a", "b" }, { "XSETID", "s", "20-1", "ENTRIESADDED", "2" }, { "XSETID", "s", "20-1", "ENTRIESADDED", "100", "MAXDELETEDID", "15-1" },
    { "XINFO", "STREAM", "s" }, { "XSETID", "s", "21-1", "MAXDELETEDID", "30-1" }, { "XSETID", "s", "21-1", "MAXDELETEDID", "10-1" },
    { "XSETID", "s", "20-1", "ENTRIESADDED", "-1" }, { "XSETID", "s", "x" }, { "XSETID", "s", "+" }, { "XSETID", "none", "1-1" },
    { "XSETID", "s", "22-1", "BOGUS" }, { "XDEL", "s", "1-1" }, { "XSETID", "s", "22-1" }, { "XINFO", "STREAM", "s" },
  }) },
}

-- A command whose reply holds times (idle, seen-time, delivery times):
-- they are masked, the rest compared.
local function timeless(cmd)
  local function is_id(x) return type(x) == "string" and x:find("^%d+%-%d+$") ~= nil end
  local function walk(t)
    if type(t) ~= "table" then return t end
    if #t == 4 and is_id(t[1]) and type(t[2]) == "string" and type(t[3]) == "number" then t[3] = "?" end
    if #t == 3 and is_id(t[1]) and type(t[2]) == "number" and type(t[3]) == "number" then t[2] = "?" end
    for i = 1, #t do
      if (t[i] == "idle" or t[i] == "seen-time") and t[i + 1] ~= nil then t[i + 1] = "?" end
      t[i] = walk(t[i])
    end
    return t
  end
  cmd.norm = function(r)
    if type(r) == "string" then
      r = r:gsub("%$idle, :%d+", "$idle, :?"):gsub("%$seen%-time, :%d+", "$seen-time, :?")
      r = r:gsub("%*%[(%$%d+%-%d+), (%$[^,%]]*), :%d+, (:%d+)%]", "*[%1, %2, :?, %3]")
      r = r:gsub("%*%[(%$%d+%-%d+), :%d+, (:%d+)%]", "*[%1, :?, %2]")
      return r
    end
    return walk(r)
  end
  return cmd
end

families["stream consumer groups"] = {
  { "XGROUP", join(xadds("s", 1, 3), {
    { "XGROUP", "CREATE", "s", "g", "0" }, { "XGROUP", "CREATE", "s", "g", "0" }, { "XGROUP", "CREATE", "s", "h", "$" },
    { "XGROUP", "CREATE", "none", "g", "0" }, { "XGROUP", "CREATE", "new", "g", "$", "MKSTREAM" }, { "TYPE", "new" },
    { "XGROUP", "CREATE", "s", "e", "2-1", "ENTRIESREAD", "2" }, { "XGROUP", "CREATE", "s", "f", "0", "ENTRIESREAD", "-2" },
    { "XGROUP", "CREATE", "s", "f", "0", "ENTRIESREAD", "x" }, { "XGROUP", "CREATE", "s", "f", "0", "BOGUS" },
    { "XGROUP", "CREATE", "s", "f", "x" }, { "XGROUP", "CREATE", "s" }, { "XINFO", "GROUPS", "s" },
    { "XGROUP", "SETID", "s", "g", "2-1" }, { "XGROUP", "SETID", "s", "g", "$", "ENTRIESREAD", "3" },
    { "XGROUP", "SETID", "s", "nog", "0" }, { "XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD" },
    { "XGROUP", "SETID", "s", "g", "0", "BOGUS", "1" }, { "XGROUP", "SETID", "none", "g", "0" },
    { "XGROUP", "SETID", "s", "g", "-" }, { "XINFO", "GROUPS", "s" }, { "XGROUP", "CREATECONSUMER", "s", "g", "c1" },
    { "XGROUP", "CREATECONSUMER", "s", "g", "c1" }, { "XGROUP", "CREATECONSUMER", "s", "nog", "c1" },
    timeless { "XINFO", "CONSUMERS", "s", "g" }, { "XGROUP", "DELCONSUMER", "s", "g", "c1" },
    { "XGROUP", "DELCONSUMER", "s", "g", "c9" }, { "XGROUP", "DESTROY", "s", "h" }, { "XGROUP", "DESTROY", "s", "h" },
    { "XGROUP", "DESTROY", "none", "h" }, { "XINFO", "STREAM", "s" }, { "XGROUP", "HELP" }, { "XGROUP", "BOGUS" },
    { "SET", "str", "x" }, { "XGROUP", "CREATE", "str", "g", "0" }, { "XINFO", "GROUPS", "none" }, { "XINFO", "GROUPS", "str" },
    { "XINFO", "CONSUMERS", "s", "nog" },
  }) },
  { "XREADGROUP, XACK, XPENDING", join(xadds("s", 1, 6), xadds("t", 1, 2), {
    { "XGROUP", "CREATE", "s", "g", "0" }, { "XGROUP", "CREATE", "t", "g", "$" },
    { "XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">" },
    { "XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", "t", ">", ">" },
    { "XREADGROUP", "GROUP", "g", "bob", "NOACK", "COUNT", "1", "STREAMS", "s", ">" },
    { "XPENDING", "s", "g" }, timeless { "XPENDING", "s", "g", "-", "+", "10" },
    timeless { "XPENDING", "s", "g", "-", "+", "10", "bob" }, timeless { "XPENDING", "s", "g", "(1-1", "3-1", "1" },
    { "XPENDING", "s", "g", "-", "+", "10", "nobody" }, { "XPENDING", "s", "g", "IDLE", "100000", "-", "+", "10" },
    { "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0" }, { "XPENDING", "s", "g" },
    timeless { "XPENDING", "s", "g", "-", "+", "10" }, { "XACK", "s", "g", "1-1", "9-9", "1-1" }, { "XACK", "s", "g", "x" },
    { "XACK", "s", "nog", "2-1" }, { "XACK", "none", "g", "2-1" }, { "XDEL", "s", "2-1" },
    { "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0" }, { "XINFO", "GROUPS", "s" },
    timeless { "XINFO", "CONSUMERS", "s", "g" }, { "XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", ">" },
    { "XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", ">" }, { "XREADGROUP", "GROUP", "g", "carol", "BLOCK", "10", "STREAMS", "s", ">" },
    { "XINFO", "GROUPS", "s" }, { "XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">" },
    { "XREADGROUP", "GROUP", "g", "c", "STREAMS", "none", ">" }, { "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$" },
    { "XREADGROUP", "STREAMS", "s", ">" }, { "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s" },
    { "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "x" }, { "XPENDING", "none", "g" }, { "XPENDING", "s", "nog" },
    { "XPENDING", "s", "g", "-", "+" }, { "XPENDING", "s", "g", "-", "+", "x" }, { "XPENDING", "s", "g", "x", "+", "1" },
    { "XADD", "s", "7-1", "f", "v7" }, { "XADD", "s", "8-1", "f", "v8" }, { "XINFO", "GROUPS", "s" },
    timeless { "XINFO", "STREAM", "s", "FULL" }, timeless { "XINFO", "STREAM", "s", "FULL", "COUNT", "1" },
    { "XINFO", "STREAM", "s", "FULL", "COUNT", "x" }, { "XINFO", "STREAM", "s", "FULL", "BOGUS", "1" },
  }) },
  { "XCLAIM and XAUTOCLAIM", join(xadds("s", 1, 6), {
    { "XGROUP", "CREATE", "s", "g", "0" }, { "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">" },
    { "XCLAIM", "s", "g", "bob", "0", "1-1", "2-1" }, { "XPENDING", "s", "g" },
    { "XCLAIM", "s", "g", "bob", "0", "3-1", "JUSTID" }, { "XCLAIM", "s", "g", "bob", "3600000", "4-1" },
    { "XCLAIM", "s", "g", "carol", "0", "5-1", "RETRYCOUNT", "7", "JUSTID" }, timeless { "XPENDING", "s", "g", "-", "+", "10" },
    { "XCLAIM", "s", "g", "carol", "0", "9-9" }, { "XCLAIM", "s", "g", "carol", "0", "6-1", "FORCE", "JUSTID" },
    { "XACK", "s", "g", "6-1" }, { "XCLAIM", "s", "g", "carol", "0", "6-1", "FORCE", "JUSTID" },
    { "XACK", "s", "g", "4-1" }, { "XCLAIM", "s", "g", "carol", "0", "4-1", "FORCE" },
    { "XCLAIM", "s", "g", "dave", "0", "1-1", "LASTID", "100-1", "JUSTID" }, { "XINFO", "GROUPS", "s" },
    { "XDEL", "s", "2-1" }, { "XCLAIM", "s", "g", "dave", "0", "2-1", "3-1", "JUSTID" }, { "XPENDING", "s", "g" },
    { "XCLAIM", "s", "g", "dave", "0", "3-1", "BOGUS" }, { "XCLAIM", "s", "g", "dave", "x", "3-1" },
    { "XCLAIM", "s", "g", "dave", "0", "3-1", "IDLE", "x" }, { "XCLAIM", "s", "nog", "dave", "0", "3-1" },
    { "XCLAIM", "none", "g", "dave", "0", "3-1" }, { "XDEL", "s", "4-1" },
    { "XAUTOCLAIM", "s", "g", "erin", "0", "0", "COUNT", "2" }, { "XAUTOCLAIM", "s", "g", "erin", "0", "0", "COUNT", "10", "JUSTID" },
    { "XAUTOCLAIM", "s", "g", "erin", "3600000", "0" }, timeless { "XPENDING", "s", "g", "-", "+", "10" },
    { "XAUTOCLAIM", "s", "g", "erin", "0", "(1-1" }, { "XAUTOCLAIM", "s", "g", "erin", "0", "0", "COUNT", "0" },
    { "XAUTOCLAIM", "s", "g", "erin", "0", "0", "BOGUS" }, { "XAUTOCLAIM", "s", "g", "erin", "x", "0" },
    { "XAUTOCLAIM", "s", "g", "erin", "0", "x" }, { "XAUTOCLAIM", "s", "nog", "erin", "0", "0" },
    { "XAUTOCLAIM", "none", "g", "erin", "x", "0" }, { "XAUTOCLAIM", "str", "g", "erin", "0", "(-" },
    { "XAUTOCLAIM", "s", "g", "erin", "0", "(18446744073709551615-18446744073709551615" },
    timeless { "XINFO", "CONSUMERS", "s", "g" },
  }) },
  { "XREADGROUP makes its consumer only when it has an entry to serve", {
    { "XADD", "s", "1-1", "f", "v" }, { "XGROUP", "CREATE", "s", "g", "$" },
    { "XREADGROUP", "GROUP", "g", "a", "BLOCK", "10", "STREAMS", "s", ">" },
    { "XREADGROUP", "GROUP", "g", "b", "STREAMS", "s", ">" }, { "XREADGROUP", "GROUP", "g", "h", "STREAMS", "s", "0" },
    timeless { "XINFO", "CONSUMERS", "s", "g" }, { "XDEL", "s", "1-1" }, { "XGROUP", "SETID", "s", "g", "0" },
    { "XREADGROUP", "GROUP", "g", "d", "STREAMS", "s", ">" }, { "XADD", "s", "2-1", "f", "v" },
    { "XREADGROUP", "GROUP", "g", "e", "COUNT", "0", "STREAMS", "s", ">" }, timeless { "XINFO", "CONSUMERS", "s", "g" },
    { "XINFO", "GROUPS", "s" },
  } },
  { "groups copied, renamed, deleted with their stream", join(xadds("s", 1, 4), {
    { "XGROUP", "CREATE", "s", "g", "0" }, { "XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">" },
    { "XDEL", "s", "1-1" }, { "COPY", "s", "d" }, { "XACK", "s", "g", "2-1" }, { "XINFO", "GROUPS", "d" },
    { "XPENDING", "d", "g" }, { "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "d", "0" }, { "RENAME", "d", "r" },
    { "XINFO", "GROUPS", "r" }, { "XPENDING", "r", "g" }, { "DEL", "r" }, { "XADD", "r", "1-1", "f", "v" },
    { "XINFO", "GROUPS", "r" }, { "XGROUP", "CREATE", "e", "g", "$", "MKSTREAM" }, { "XLEN", "e" },
    { "XINFO", "STREAM", "e" }, { "XINFO", "STREAM", "e", "FULL" }, { "XREADGROUP", "GROUP", "g", "c", "STREAMS", "e", ">" },
    { "MULTI" }, { "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "e", ">" }, { "EXEC" },
  }) },
}

-- -- Running cases -------------------------------------------------------------

local run, show = kv.run_cmds, kv.show_replies

-- -- Scenarios -------------------------------------------------------------------

local info, blocked = kv.info, kv.blocked

-- A client blocked in cmd: the thread that waits for its reply, and its
-- connection (for CLIENT ID).
local function block(port, ...)
  local args = { ... }
  local w = kv.client(port, 5000)
  local id = w:call("CLIENT", "ID")
  return cohost.spawn(function() return w:call(unpack(args)) end), id
end

local function result(thread)
  local ok, r = cohost.wait(thread)
  assert(ok, r)
  return r == nil and "<no reply>" or r
end

describe("kv's data types against redis-server", function()
  local ports, redis_pid, redis_log = {}, nil, nil
  local kv_proc, kv_dir
  local stops = {}

  local function start_kv()
    kv_proc = kv.start(function(fn) stops[#stops + 1] = fn end,
                       { args = "--appendfsync always", dir = kv_dir })
    ports.kv = kv_proc.port
  end

  setup(function()
    -- Its own directory for the whole file (h.tmpdir's goes after each
    -- test), for kv's log and redis-server's dump.rdb (SAVE writes one).
    kv_dir = os.tmpname()
    os.remove(kv_dir)
    assert(os.execute("mkdir " .. h.shell_quote(kv_dir)) == 0)
    ports.redis = h.free_port()
    redis_pid, redis_log = h.spawn(("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no --dir %s")
      :format(ports.redis, h.shell_quote(kv_dir)))
    h.wait_port(ports.redis, redis_log)
    start_kv()
  end)

  teardown(function()
    h.stop_pid(redis_pid)
    if redis_log then os.remove(redis_log) end
    for _, fn in ipairs(stops) do fn() end
    if kv_dir then os.execute("rm -rf " .. h.shell_quote(kv_dir)) end
  end)

  local names = {}
  for name in pairs(families) do names[#names + 1] = name end
  table.sort(names)
  for _, proto in ipairs { 2, 3 } do
    for _, family in ipairs(names) do
      for _, case in ipairs(families[family]) do
        it(("%s: %s (RESP%d)"):format(family, case[1], proto), function()
          local cmds = case[2]
          local want = run(kv.client(ports.redis), cmds, proto)
          local got = run(kv.client(ports.kv), cmds, proto)
          assert.same(want, got, "\n" .. show(cmds, want, got))
        end)
      end
    end
  end

  -- Runs scenario(port) on both servers at once (after FLUSHALL); asserts
  -- the results are the same and returns kv's.
  local function both(scenario)
    for _, port in pairs(ports) do assert.equal("OK", kv.client(port):call("FLUSHALL")) end
    local r = cohost.spawn(scenario, ports.redis)
    local k = cohost.spawn(scenario, ports.kv)
    local ok_r, want = cohost.wait(r)
    local ok_k, got = cohost.wait(k)
    assert(ok_r, want)
    assert(ok_k, got)
    assert.same(want, got)
    return got
  end

  it("wakes BZMPOP on ZADD, on a key ZUNIONSTORE or ZRANGESTORE creates, and after EXEC", function()
    local got = both(function(port)
      local c = kv.client(port)
      local out = {}
      local w = block(port, "BZMPOP", "0", "2", "z1", "z2", "MAX", "COUNT", "2")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("ZADD", "z2", "1", "a", "2", "b", "3", "c")
      out[#out + 1] = result(w)
      c:call("ZADD", "src", "5", "x", "6", "y")
      w = block(port, "BZMPOP", "0", "1", "u", "MIN")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("ZUNIONSTORE", "u", "2", "src", "z2")
      out[#out + 1] = result(w)
      w = block(port, "BZMPOP", "0", "1", "r", "MIN", "COUNT", "5")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("ZRANGESTORE", "r", "src", "0", "0")
      out[#out + 1] = result(w)
      -- Added and deleted in one transaction: nobody is woken.
      w = block(port, "BZMPOP", "0.3", "1", "t", "MIN")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      c:call("ZADD", "t", "1", "a")
      c:call("DEL", "t")
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w)
      w = block(port, "BZMPOP", "0", "1", "t", "MIN")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      c:call("ZADD", "t", "1", "a", "2", "b")
      c:call("ZREM", "t", "a")
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w)
      out[#out + 1] = c:call("EXISTS", "t")
      -- Inside MULTI it does not block.
      c:call("MULTI")
      c:call("BZMPOP", "0", "1", "none", "MIN")
      out[#out + 1] = c:call("EXEC")
      return out
    end)
    assert.same({ "z2", { { "c", "3" }, { "b", "2" } } }, got[3])
  end)

  it("ends a BZMPOP wait on CLIENT UNBLOCK and CLIENT KILL", function()
    both(function(port)
      local c = kv.client(port)
      local out = {}
      local w, id = block(port, "BZMPOP", "0", "1", "z", "MIN")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", tostring(id))
      out[#out + 1] = result(w)
      w, id = block(port, "BZMPOP", "0", "1", "z", "MIN")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", tostring(id), "ERROR")
      out[#out + 1] = result(w)
      w, id = block(port, "BZMPOP", "0", "1", "z", "MIN")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("CLIENT", "KILL", "ID", tostring(id))
      out[#out + 1] = blocked(c, 0)
      out[#out + 1] = c:call("ZADD", "z", "1", "a")
      out[#out + 1] = c:call("ZCARD", "z")
      return out
    end)
  end)

  it("wakes XREAD BLOCK on XADD, each reader after its own ID, after EXEC, and ends it on CLIENT UNBLOCK", function()
    both(function(port)
      local c = kv.client(port)
      local out = {}
      c:call("XADD", "s", "1-1", "a", "1")
      local w1 = block(port, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
      local w2 = block(port, "XREAD", "BLOCK", "0", "COUNT", "1", "STREAMS", "other", "s", "0", "5-0")
      out[#out + 1] = blocked(c, 2)
      out[#out + 1] = c:call("XADD", "s", "2-1", "b", "2")
      out[#out + 1] = result(w1)
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("XADD", "s", "6-1", "c", "3")
      out[#out + 1] = result(w2)
      -- A new key: woken by the XADD that makes it.
      w1 = block(port, "XREAD", "BLOCK", "0", "STREAMS", "new", "0")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      c:call("XADD", "new", "1-1", "x", "y")
      c:call("XADD", "new", "2-1", "x", "z")
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w1)
      -- Timeouts and CLIENT UNBLOCK.
      w1 = block(port, "XREAD", "BLOCK", "50", "STREAMS", "s", "$")
      out[#out + 1] = result(w1)
      local w3, id = block(port, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("CLIENT", "UNBLOCK", tostring(id))
      out[#out + 1] = result(w3)
      return out
    end)
  end)

  it("wakes XREADGROUP BLOCK on XADD, one reader per entry, with NOACK, and ends it when its group goes", function()
    both(function(port)
      local c = kv.client(port)
      local out = {}
      c:call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
      local w1 = block(port, "XREADGROUP", "GROUP", "g", "c1", "BLOCK", "0", "STREAMS", "s", ">")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("XADD", "s", "1-1", "a", "1")
      out[#out + 1] = result(w1)
      out[#out + 1] = c:call("XPENDING", "s", "g")
      -- Two readers of one group: one entry wakes the first only.
      w1 = block(port, "XREADGROUP", "GROUP", "g", "c1", "BLOCK", "0", "STREAMS", "s", ">")
      out[#out + 1] = blocked(c, 1)
      local w2 = block(port, "XREADGROUP", "GROUP", "g", "c2", "BLOCK", "0", "NOACK", "STREAMS", "s", ">")
      out[#out + 1] = blocked(c, 2)
      out[#out + 1] = c:call("XADD", "s", "2-1", "b", "2")
      out[#out + 1] = result(w1)
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("XADD", "s", "3-1", "c", "3")
      out[#out + 1] = result(w2)
      out[#out + 1] = c:call("XPENDING", "s", "g")
      out[#out + 1] = c:call("XINFO", "GROUPS", "s")
      -- After EXEC, against its final state.
      w1 = block(port, "XREADGROUP", "GROUP", "g", "c3", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", ">")
      out[#out + 1] = blocked(c, 1)
      c:call("MULTI")
      c:call("XADD", "s", "4-1", "d", "4")
      c:call("XADD", "s", "5-1", "e", "5")
      out[#out + 1] = c:call("EXEC")
      out[#out + 1] = result(w1)
      -- Timing out, and a group destroyed under its reader.
      w1 = block(port, "XREADGROUP", "GROUP", "g", "c1", "BLOCK", "50", "STREAMS", "s", ">")
      out[#out + 1] = result(w1)
      c:call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")
      w1 = block(port, "XREADGROUP", "GROUP", "g", "c1", "BLOCK", "0", "STREAMS", "s", ">")
      out[#out + 1] = blocked(c, 1)
      out[#out + 1] = c:call("XGROUP", "DESTROY", "s", "g")
      out[#out + 1] = result(w1)
      out[#out + 1] = blocked(c, 0)
      return out
    end)
  end)

  it("touches no WATCH with group commands but XGROUP CREATE MKSTREAM, and sends Redis's xgroup events", function()
    both(function(port)
      local c, w, sub = kv.client(port), kv.client(port), kv.client(port)
      local out = {}
      assert.equal("OK", c:call("CONFIG", "SET", "notify-keyspace-events", "KEA"))
      sub:call("PSUBSCRIBE", "__keyevent@0__:*")
      for i = 1, 3 do c:call("XADD", "s", i .. "-1", "f", "v") end
      for _, cmd in ipairs {
        { "XGROUP", "CREATE", "s", "g", "0" }, { "XGROUP", "CREATE", "n", "g", "$", "MKSTREAM" },
        { "XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", "s", ">" }, { "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0" },
        { "XREADGROUP", "GROUP", "g", "new", "STREAMS", "s", ">" }, { "XREADGROUP", "GROUP", "g", "none", "STREAMS", "s", ">" },
        { "XACK", "s", "g", "1-1" }, { "XCLAIM", "s", "g", "d", "0", "2-1" }, { "XAUTOCLAIM", "s", "g", "e", "0", "0" },
        { "XCLAIM", "s", "g", "f", "0", "9-1" }, { "XGROUP", "CREATECONSUMER", "s", "g", "z" },
        { "XGROUP", "DELCONSUMER", "s", "g", "z" }, { "XGROUP", "SETID", "s", "g", "0" }, { "XGROUP", "DESTROY", "s", "g" },
      } do
        local key = cmd[1] == "XGROUP" and cmd[3] or cmd[1] == "XREADGROUP" and "s" or cmd[2]
        assert.equal("OK", w:call("WATCH", key))
        c:call(unpack(cmd))
        w:call("MULTI")
        w:call("PING")
        local events = { table.concat(cmd, " "), w:call("EXEC") == NULL and "aborted" or "kept" }
        -- A message of its own after the command's events marks their end.
        c:call("PUBLISH", "__keyevent@0__:end", "x")
        while true do
          local m = sub:read()
          if m[3] == "__keyevent@0__:end" then break end
          events[#events + 1] = m[3]:match("[^:]*$") .. " " .. m[4]
        end
        out[#out + 1] = events
      end
      assert.equal("OK", c:call("CONFIG", "SET", "notify-keyspace-events", ""))
      return out
    end)
  end)

  -- -- Restarts ---------------------------------------------------------------------

  -- Reads keys with their readers (command lists with "$k" for the key).
  local function read_all(c, readers)
    local t = {}
    for i, cmd in ipairs(readers) do
      local args = {}
      for j, a in ipairs(cmd) do args[j] = a end
      t[i] = c:call(unpack(args))
      if cmd.norm then t[i] = cmd.norm(t[i]) end
    end
    return t
  end

  -- Runs writes, reads the readers, restarts kv on its log (kill -9), and
  -- reads them again; then a rewrite of the log and once more.
  local function survives_restart(writes, readers)
    local c = kv.client(ports.kv)
    assert.equal("OK", c:call("FLUSHALL"))
    for _, cmd in ipairs(writes) do
      local r = c:call(unpack(cmd))
      local failed = type(r) == "table" and r.err
      if failed and not cmd.fails then error(table.concat(cmd, " ") .. ": " .. r.err) end
      if cmd.fails then assert(failed, table.concat(cmd, " ") .. " should have failed") end
    end
    local before = read_all(c, readers)
    kv_proc.signal("KILL")
    kv_proc.wait(5)
    start_kv()
    c = kv.client(ports.kv)
    assert.same(before, read_all(c, readers), "after a replay of the log")
    assert.equal("Background append only file rewriting started", c:call("BGREWRITEAOF"))
    kv.wait_rewrites(c, 1)
    kv_proc.signal("KILL")
    kv_proc.wait(5)
    start_kv()
    c = kv.client(ports.kv)
    assert.same(before, read_all(c, readers), "after a rewrite of the log")
  end

  it("keeps bitmaps across restarts, as the strings they are", function()
    survives_restart({
      { "SETBIT", "b", "7", "1" }, { "SETBIT", "b", "100000", "1" }, { "SETBIT", "b", "7", "0" },
      { "SET", "s", "abc" }, { "SETBIT", "s", "100", "1" }, { "EXPIRE", "s", "1000" },
      { "BITFIELD", "f", "SET", "i16", "#3", "-300", "INCRBY", "u5", "1", "40", "OVERFLOW", "FAIL",
        "INCRBY", "u2", "100", "9" },
      { "BITOP", "XOR", "x", "s", "f" }, { "SETBIT", "a", "3", "1" }, { "APPEND", "a", "tail" },
      { "SETRANGE", "a", "20", "far" },
    }, {
      { "GET", "b" }, { "BITCOUNT", "b" }, { "GET", "s" }, { "TTL", "s" }, { "GET", "f" }, { "GET", "x" },
      { "GET", "a" }, { "BITCOUNT", "a" }, { "DBSIZE" },
    })
  end)

  it("keeps lists SORT stored across restarts", function()
    survives_restart({
      { "RPUSH", "l", "3", "1", "2", "20" }, { "SADD", "s", "b", "a", "c" }, { "MSET", "w_1", "9", "w_2", "1" },
      { "SORT", "l", "STORE", "d1" }, { "SORT", "s", "ALPHA", "STORE", "d2" }, { "SORT", "l", "BY", "w_*", "GET", "#", "GET", "w_*", "STORE", "d3" },
      { "SORT", "l", "DESC", "LIMIT", "1", "2", "STORE", "l" },
    }, {
      { "LRANGE", "d1", "0", "-1" }, { "LRANGE", "d2", "0", "-1" }, { "LRANGE", "d3", "0", "-1" },
      { "LRANGE", "l", "0", "-1" }, { "DBSIZE" },
    })
  end)

  it("keeps what LPUSHX and RPUSHX pushed across restarts", function()
    survives_restart({
      { "RPUSH", "l", "m" }, { "LPUSHX", "l", "a", "b" }, { "RPUSHX", "l", "c" }, { "LPUSHX", "none", "x" },
    }, {
      { "LRANGE", "l", "0", "-1" }, { "DBSIZE" },
    })
  end)

  it("answers SAVE once the log is rewritten, which a restart loads", function()
    local c = kv.client(ports.kv)
    assert.equal("OK", c:call("FLUSHALL"))
    local function rewrites()
      return tonumber(c:call("INFO", "persistence"):match("aof_rewrites:(%d+)"))
    end
    local before = rewrites()
    kv.fill(c, 2000, "save:")
    assert.equal("OK", c:call("SAVE"))
    assert.equal(before + 1, rewrites())
    assert.equal("0", c:call("INFO", "persistence"):match("aof_rewrite_in_progress:(%d+)"))
    -- A SAVE while a rewrite runs waits for it, then takes its own.
    assert.equal("Background append only file rewriting started", c:call("BGREWRITEAOF"))
    assert.equal("OK", c:call("SAVE"))
    assert.equal(before + 3, rewrites())
    assert.equal(h.slurp(kv_dir .. "/appendonly.aof"):match("save:2000"), "save:2000")
    kv_proc.signal("KILL")
    kv_proc.wait(5)
    start_kv()
    c = kv.client(ports.kv)
    assert.equal(2000, c:call("DBSIZE"))
    assert.equal("OK", c:call("CONFIG", "SET", "appendonly", "no"))
    assert.equal("ERR kv's snapshot is its append-only log, which is off (CONFIG SET appendonly yes to keep one)",
                 c:call("SAVE").err)
    assert.equal("OK", c:call("CONFIG", "SET", "appendonly", "yes"))
    kv.wait_rewrites(c, 1)
  end)

  it("keeps HyperLogLogs across restarts, byte for byte", function()
    local writes = pfadds("big", "e", 5000)
    for _, cmd in ipairs {
      { "PFADD", "small", "a", "b" }, { "PFCOUNT", "small" }, { "PFADD", "small", "c" }, { "PFMERGE", "m", "small", "big" },
      { "PFCOUNT", "big" }, { "PFCOUNT", "m" },
      -- A sparse HLL corrupted by BITFIELD: PFADD sets the elements before
      -- the one that finds the damage, then fails (as in Redis); those
      -- changes are logged too.
      { "PFADD", "bad", "e389", "e738", "e1551", "e1121", "e1111", "e1991", "e2328", "e84", "e2485", "e1266",
        "e1499", "e1154", "e1962", "e685", "e863", "e2877", "e2411", "e367", "e30" },
      { "EXPIRE", "bad", "1000" }, { "BITFIELD", "bad", "OVERFLOW", "WRAP", "SET", "u63", "#4", "-9223372036854775808" },
      { "PFADD", "bad", "e92", "e1628", "e174", "e1664", "e1612", "e265", "e2587", "e233", "e1589", "e2322", "e2475",
        "e2270", "e768", "e2197", fails = true },
    } do writes[#writes + 1] = cmd end
    -- (No PFCOUNT among the readers: one that finds the cached count stale
    -- writes it into the value.)
    survives_restart(writes, { { "GET", "small" }, { "GET", "big" }, { "GET", "m" }, { "GET", "bad" }, { "PEXPIRETIME", "bad" },
                               { "DBSIZE" } })
  end)

  it("counts within HyperLogLog's error, as redis-server does", function()
    local c, r = kv.client(ports.kv), kv.client(ports.redis)
    for _, x in ipairs { c, r } do assert.equal("OK", x:call("FLUSHALL")) end
    for _, count in ipairs { 100, 20000, 100000 } do
      for i = 1, count, 1000 do
        local cmd = { "PFADD", "card" .. count }
        for j = i, math.min(i + 999, count) do cmd[#cmd + 1] = "v" .. j end
        assert.equal(r:call(unpack(cmd)), c:call(unpack(cmd)))
      end
      local got = c:call("PFCOUNT", "card" .. count)
      assert.equal(r:call("PFCOUNT", "card" .. count), got)
      assert(math.abs(got - count) / count < 0.0081 * 3, ("%d counted as %d"):format(count, got))
    end
  end)

  it("keeps GEO points and the searches it stored across restarts", function()
    survives_restart({
      geo_points("g", 100), { "GEORADIUS", "g", "10", "20", "3000", "km", "STORE", "r" },
      { "GEOSEARCHSTORE", "s", "g", "FROMMEMBER", "p3", "BYBOX", "5000", "5000", "km", "STOREDIST" },
    }, {
      { "GEOPOS", "g", "p1", "p50" }, { "ZRANGE", "r", "0", "-1", "WITHSCORES" }, { "ZRANGE", "s", "0", "-1", "WITHSCORES" },
      { "DBSIZE" },
    })
  end)

  it("keeps streams across restarts, their counters too", function()
    local writes = xadds("s", 1, 250)
    for _, cmd in ipairs {
      { "XDEL", "s", "3-1", "150-1" }, { "XTRIM", "s", "MAXLEN", "~", "200" }, { "XADD", "s", "MAXLEN", "~", "100", "300-1", "a", "b" },
      { "XADD", "e", "1-1", "a", "b" }, { "XDEL", "e", "1-1" }, { "XSETID", "e", "7-7", "ENTRIESADDED", "9", "MAXDELETEDID", "5-5" },
      { "XADD", "t", "1-1", "f", "v" }, { "EXPIRE", "t", "1000" },
      -- Approximate trims that empty a stream: logged as exact ones to
      -- the highest ID (Redis's streamGetEdgeID of an empty stream), not
      -- to the last ID, which would trim nothing when replayed.
      { "XADD", "m", "1-*", "f", "v" }, { "XTRIM", "m", "MINID", "~", "29" },
      { "XADD", "a", "MINID", "~", "1000", "5-1", "f", "v" },
    } do writes[#writes + 1] = cmd end
    local readers = { { "XRANGE", "s", "-", "+" }, { "XRANGE", "e", "-", "+" }, { "TTL", "t" }, { "DBSIZE" } }
    for _, k in ipairs { "s", "e", "t", "m", "a" } do readers[#readers + 1] = { "XINFO", "STREAM", k } end
    survives_restart(writes, readers)
  end)

  it("keeps consumer groups across restarts: pending entries with their times and counts, consumers, counters", function()
    local writes = xadds("s", 1, 8)
    for _, cmd in ipairs {
      { "XGROUP", "CREATE", "s", "g", "0" }, { "XGROUP", "CREATE", "s", "h", "$" },
      { "XGROUP", "CREATE", "s", "e", "3-1", "ENTRIESREAD", "3" }, { "XGROUP", "CREATE", "new", "g", "$", "MKSTREAM" },
      { "XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">" },
      { "XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">" },
      { "XREADGROUP", "GROUP", "g", "bob", "NOACK", "COUNT", "1", "STREAMS", "s", ">" },
      { "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0" }, { "XACK", "s", "g", "2-1" },
      { "XCLAIM", "s", "g", "carol", "0", "3-1", "RETRYCOUNT", "5" }, { "XAUTOCLAIM", "s", "g", "dave", "0", "0", "COUNT", "1" },
      { "XGROUP", "CREATECONSUMER", "s", "g", "spare" }, { "XGROUP", "CREATECONSUMER", "s", "g", "gone" },
      { "XGROUP", "DELCONSUMER", "s", "g", "gone" }, { "XREADGROUP", "GROUP", "h", "x", "STREAMS", "s", ">" },
      { "XADD", "s", "9-1", "f", "v" }, { "XREADGROUP", "GROUP", "e", "y", "NOACK", "COUNT", "2", "STREAMS", "s", ">" },
      { "XGROUP", "SETID", "s", "h", "4-1", "ENTRIESREAD", "4" }, { "XDEL", "s", "5-1" },
      { "XCLAIM", "s", "g", "carol", "0", "7-1", "FORCE", "JUSTID", "TIME", "1000" },
      { "XADD", "new", "1-1", "f", "v" }, { "XREADGROUP", "GROUP", "g", "r", "STREAMS", "new", ">" },
    } do writes[#writes + 1] = cmd end
    -- The consumers' seen-times are when the log is replayed (as Redis's
    -- AOF does); the delivery times are kept.
    local function unseen(r)
      local function walk(t)
        if type(t) ~= "table" then return t end
        for i = 1, #t do
          if t[i] == "seen-time" or t[i] == "idle" then t[i + 1] = "?" end
          walk(t[i])
        end
        return t
      end
      return walk(r)
    end
    survives_restart(writes, {
      { "XINFO", "GROUPS", "s" }, { "XPENDING", "s", "g" }, { "XINFO", "GROUPS", "new" },
      { "XINFO", "STREAM", "s", "FULL", norm = unseen }, { "XINFO", "CONSUMERS", "s", "g", norm = unseen },
      { "XINFO", "CONSUMERS", "s", "h", norm = unseen }, { "DBSIZE" },
    })
  end)

  it("keeps sorted sets the algebra stored across restarts", function()
    survives_restart({
      { "ZADD", "a", "1.5", "x", "2", "y", "-inf", "n" }, { "ZADD", "b", "3", "y", "4", "z" },
      { "SADD", "s", "x", "q" }, { "ZUNIONSTORE", "u", "3", "a", "b", "s", "WEIGHTS", "1", "2", "3" },
      { "ZINTERSTORE", "i", "2", "a", "b", "AGGREGATE", "MAX" }, { "ZDIFFSTORE", "d", "2", "a", "s" },
      { "ZRANGESTORE", "r", "a", "(1", "+inf", "BYSCORE" }, { "ZMPOP", "1", "b", "MIN" },
      { "EXPIRE", "u", "1000" },
    }, {
      { "ZRANGE", "u", "0", "-1", "WITHSCORES" }, { "ZRANGE", "i", "0", "-1", "WITHSCORES" },
      { "ZRANGE", "d", "0", "-1", "WITHSCORES" }, { "ZRANGE", "r", "0", "-1", "WITHSCORES" },
      { "ZRANGE", "b", "0", "-1", "WITHSCORES" }, { "TTL", "u" }, { "DBSIZE" },
    })
  end)
end)
