-- Redis 7.0's command table for the commands kv serves: what COMMAND
-- INFO, DOCS, LIST, COUNT and GETKEYS answer, and where the dispatcher
-- takes each command's arity, its write flag and the keys it changes.
-- The facts are Redis's (its src/commands/*.json, BSD-3-Clause), checked
-- against redis-server 7.0.15 by spec/kv_compat_spec.lua; a command kv
-- adds gets its line here before it can be registered (registry.lua).
--
-- c(name, arity, flags, "first last step", ACL categories, "group since",
--   complexity, summary, { tips, keys, args, history, deprecated })
--
-- keys: one key spec a string, "flags|begin search|find keys[|notes]":
--   begin search "index I" or "keyword WORD FROM" (or "unknown"), find
--   keys "range LAST STEP LIMIT" or "keynum INDEX FIRST STEP" (as Redis's
--   key specs).
-- args: the arguments, space-separated; one is name:type, or name=TOKEN
--   for a pure token, then =TOKEN (its token, up to the next of these
--   marks: "=" "~" "*" are tokens too), #I (key spec index),
--   {...} (the arguments of a oneof or block), @VERSION (since),
--   !VERSION (deprecated since), ... (multiple), + (multiple_token);
--   [...] around it makes it optional. A name may hold ":" (ip:port):
--   the type follows the last one.
local T = {}

local function c(name, arity, flags, range, acl, doc, complexity, summary, opt)
  T[#T + 1] = { name = name, arity = arity, flags = flags, range = range, acl = acl, doc = doc,
                complexity = complexity, summary = summary, opt = opt or {} }
end

c("append", 3, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 2.0.0", "O(1). The amortized time complexity is O(1) assuming the appended value is small and the already present value is of any size, since the dynamic string library used by Redis will double the free space available on every reallocation.",
  "Append a value to a key",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 value:string" })
c("bgrewriteaof", 1, "admin noscript no_async_loading", "0 0 0", "@admin @slow @dangerous",
  "server 1.0.0", "O(1)",
  "Asynchronously rewrite the append-only file")
c("bitcount", -2, "readonly", "1 1 1", "@read @bitmap @slow",
  "bitmap 2.6.0", "O(N)",
  "Count set bits in a string",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 [index:block{start:integer end:integer [index_unit:oneof{byte=BYTE bit=BIT}@7.0.0]}]",
    history = { "7.0.0 Added the `BYTE|BIT` option." } })
c("bitfield", -2, "write denyoom", "1 1 1", "@write @bitmap @slow",
  "bitmap 3.2.0", "O(1) for each subcommand specified",
  "Perform arbitrary bitfield integer operations on strings",
  { keys = { "RW access update variable_flags|index 1|range 0 1 0|This command allows both access and modification of the key" },
    args = "key:key#0 [operation:oneof{encoding_offset:block=GET{encoding:string offset:integer} write:block{[wrap_sat_fail:oneof=OVERFLOW{wrap=WRAP sat=SAT fail=FAIL}] write_operation:oneof{encoding_offset_value:block=SET{encoding:string offset:integer value:integer} encoding_offset_increment:block=INCRBY{encoding:string offset:integer increment:integer}}}}...]" })
c("bitfield_ro", -2, "readonly fast", "1 1 1", "@read @bitmap @fast",
  "bitmap 6.0.0", "O(1) for each subcommand specified",
  "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 [encoding_offset:block=GET{encoding:string offset:integer}...+]" })
c("bitop", -4, "write denyoom", "2 -1 1", "@write @bitmap @slow",
  "bitmap 2.6.0", "O(N)",
  "Perform bitwise operations between strings",
  { keys = { "OW update|index 2|range 0 1 0", "RO access|index 3|range -1 1 0" },
    args = "operation:string destkey:key#0 key:key#1..." })
c("bitpos", -3, "readonly", "1 1 1", "@read @bitmap @slow",
  "bitmap 2.8.7", "O(N)",
  "Find first bit set or clear in a string",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 bit:integer [index:block{start:integer [end_index:block{end:integer [index_unit:oneof{byte=BYTE bit=BIT}@7.0.0]}]}]",
    history = { "7.0.0 Added the `BYTE|BIT` option." } })
c("blmove", 6, "write denyoom noscript blocking", "1 2 1", "@write @list @slow @blocking",
  "list 6.2.0", "O(1)",
  "Pop an element from a list, push it to another list and return it; or block until one is available",
  { keys = { "RW access delete|index 1|range 0 1 0", "RW insert|index 2|range 0 1 0" },
    args = "source:key#0 destination:key#1 wherefrom:oneof{left=LEFT right=RIGHT} whereto:oneof{left=LEFT right=RIGHT} timeout:double" })
c("blmpop", -5, "write blocking movablekeys", "0 0 0", "@write @list @slow @blocking",
  "list 7.0.0", "O(N+M) where N is the number of provided keys and M is the number of elements returned.",
  "Pop elements from a list, or block until one is available",
  { keys = { "RW access delete|index 2|keynum 0 1 1" },
    args = "timeout:double numkeys:integer key:key#0... where:oneof{left=LEFT right=RIGHT} [count:integer=COUNT]" })
c("blpop", -3, "write noscript blocking", "1 -2 1", "@write @list @slow @blocking",
  "list 2.0.0", "O(N) where N is the number of provided keys.",
  "Remove and get the first element in a list, or block until one is available",
  { keys = { "RW access delete|index 1|range -2 1 0" },
    args = "key:key#0... timeout:double",
    history = { "6.0.0 `timeout` is interpreted as a double instead of an integer." } })
c("brpop", -3, "write noscript blocking", "1 -2 1", "@write @list @slow @blocking",
  "list 2.0.0", "O(N) where N is the number of provided keys.",
  "Remove and get the last element in a list, or block until one is available",
  { keys = { "RW access delete|index 1|range -2 1 0" },
    args = "key:key#0... timeout:double",
    history = { "6.0.0 `timeout` is interpreted as a double instead of an integer." } })
c("brpoplpush", 4, "write denyoom noscript blocking", "1 2 1", "@write @list @slow @blocking",
  "list 2.2.0", "O(1)",
  "Pop an element from a list, push it to another list and return it; or block until one is available",
  { keys = { "RW access delete|index 1|range 0 1 0", "RW insert|index 2|range 0 1 0" },
    args = "source:key#0 destination:key#1 timeout:double",
    history = { "6.0.0 `timeout` is interpreted as a double instead of an integer." },
    deprecated = "6.2.0 `BLMOVE` with the `RIGHT` and `LEFT` arguments" })
c("bzmpop", -5, "write blocking movablekeys", "0 0 0", "@write @sortedset @slow @blocking",
  "sorted-set 7.0.0", "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.",
  "Remove and return members with scores in a sorted set or block until one is available",
  { keys = { "RW access delete|index 2|keynum 0 1 1" },
    args = "timeout:double numkeys:integer key:key#0... where:oneof{min=MIN max=MAX} [count:integer=COUNT]" })
c("bzpopmax", -3, "write noscript blocking fast", "1 -2 1", "@write @sortedset @fast @blocking",
  "sorted-set 5.0.0", "O(log(N)) with N being the number of elements in the sorted set.",
  "Remove and return the member with the highest score from one or more sorted sets, or block until one is available",
  { keys = { "RW access delete|index 1|range -2 1 0" },
    args = "key:key#0... timeout:double",
    history = { "6.0.0 `timeout` is interpreted as a double instead of an integer." } })
c("bzpopmin", -3, "write noscript blocking fast", "1 -2 1", "@write @sortedset @fast @blocking",
  "sorted-set 5.0.0", "O(log(N)) with N being the number of elements in the sorted set.",
  "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available",
  { keys = { "RW access delete|index 1|range -2 1 0" },
    args = "key:key#0... timeout:double",
    history = { "6.0.0 `timeout` is interpreted as a double instead of an integer." } })
c("client", -2, "", "0 0 0", "@slow",
  "connection 2.4.0", "Depends on subcommand.",
  "A container for client connection commands")
c("client|getname", 2, "noscript loading stale", "0 0 0", "@slow @connection",
  "connection 2.6.9", "O(1)",
  "Get the current connection name")
c("client|help", 2, "loading stale", "0 0 0", "@slow @connection",
  "connection 5.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("client|id", 2, "noscript loading stale", "0 0 0", "@slow @connection",
  "connection 5.0.0", "O(1)",
  "Returns the client ID for the current connection")
c("client|info", 2, "noscript loading stale", "0 0 0", "@slow @connection",
  "connection 6.2.0", "O(1)",
  "Returns information about the current client connection.",
  { tips = "nondeterministic_output" })
c("client|kill", -3, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous @connection",
  "connection 2.4.0", "O(N) where N is the number of client connections",
  "Kill the connection of a client",
  { args = "filter:oneof{ip:port:string!2.8.12 new-format:oneof{[client-id:integer=ID@2.8.12] [normal_master_slave_pubsub:oneof=TYPE{normal=NORMAL master=MASTER@3.2.0 slave=SLAVE replica=REPLICA@5.0.0 pubsub=PUBSUB}@2.8.12] [username:string=USER] [ip:port:string=ADDR] [ip:port:string=LADDR@6.2.0] [yes/no:string=SKIPME]}...}",
    history = { "2.8.12 Added new filter format.", "2.8.12 `ID` option.", "3.2.0 Added `master` type in for `TYPE` option.", "5.0.0 Replaced `slave` `TYPE` with `replica`. `slave` still supported for backward compatibility.", "6.2.0 `LADDR` option." } })
c("client|list", -2, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous @connection",
  "connection 2.4.0", "O(N) where N is the number of client connections",
  "Get the list of client connections",
  { tips = "nondeterministic_output",
    args = "[normal_master_replica_pubsub:oneof=TYPE{normal=NORMAL master=MASTER replica=REPLICA pubsub=PUBSUB}@5.0.0] [id:block=ID{client-id:integer...}@6.2.0]",
    history = { "2.8.12 Added unique client `id` field.", "5.0.0 Added optional `TYPE` filter.", "6.0.0 Added `user` field.", "6.2.0 Added `argv-mem`, `tot-mem`, `laddr` and `redir` fields and the optional `ID` filter.", "7.0.0 Added `resp`, `multi-mem`, `rbs` and `rbp` fields.", "7.0.3 Added `ssub` field." } })
c("client|reply", 3, "noscript loading stale", "0 0 0", "@slow @connection",
  "connection 3.2.0", "O(1)",
  "Instruct the server whether to reply to commands",
  { args = "on_off_skip:oneof{on=ON off=OFF skip=SKIP}" })
c("client|setname", 3, "noscript loading stale", "0 0 0", "@slow @connection",
  "connection 2.6.9", "O(1)",
  "Set the current connection name",
  { args = "connection-name:string" })
c("client|unblock", -3, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous @connection",
  "connection 5.0.0", "O(log N) where N is the number of client connections",
  "Unblock a client blocked in a blocking command from a different connection",
  { args = "client-id:integer [timeout_error:oneof{timeout=TIMEOUT error=ERROR}]" })
c("command", -1, "loading stale", "0 0 0", "@slow @connection",
  "server 2.8.13", "O(N) where N is the total number of Redis commands",
  "Get array of Redis command details",
  { tips = "nondeterministic_output_order" })
c("command|count", 2, "loading stale", "0 0 0", "@slow @connection",
  "server 2.8.13", "O(1)",
  "Get total number of Redis commands")
c("command|docs", -2, "loading stale", "0 0 0", "@slow @connection",
  "server 7.0.0", "O(N) where N is the number of commands to look up",
  "Get array of specific Redis command documentation",
  { tips = "nondeterministic_output_order",
    args = "[command-name:string...]" })
c("command|getkeys", -4, "loading stale", "0 0 0", "@slow @connection",
  "server 2.8.13", "O(N) where N is the number of arguments to the command",
  "Extract keys given a full Redis command")
c("command|getkeysandflags", -4, "loading stale", "0 0 0", "@slow @connection",
  "server 7.0.0", "O(N) where N is the number of arguments to the command",
  "Extract keys and access flags given a full Redis command")
c("command|help", 2, "loading stale", "0 0 0", "@slow @connection",
  "server 5.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("command|info", -2, "loading stale", "0 0 0", "@slow @connection",
  "server 2.8.13", "O(N) where N is the number of commands to look up",
  "Get array of specific Redis command details, or all when no argument is given.",
  { tips = "nondeterministic_output_order",
    args = "[command-name:string...]",
    history = { "7.0.0 Allowed to be called with no argument to get info on all commands." } })
c("command|list", -2, "loading stale", "0 0 0", "@slow @connection",
  "server 7.0.0", "O(N) where N is the total number of Redis commands",
  "Get an array of Redis command names",
  { tips = "nondeterministic_output_order",
    args = "[filterby:oneof=FILTERBY{module-name:string=MODULE category:string=ACLCAT pattern:pattern=PATTERN}]" })
c("config", -2, "", "0 0 0", "@slow",
  "server 2.0.0", "Depends on subcommand.",
  "A container for server configuration commands")
c("config|get", -3, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.0.0", "O(N) when N is the number of configuration parameters provided",
  "Get the values of configuration parameters",
  { args = "parameter:block{parameter:string}...",
    history = { "7.0.0 Added the ability to pass multiple pattern parameters in one call" } })
c("config|help", 2, "loading stale", "0 0 0", "@slow",
  "server 5.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("config|resetstat", 2, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.0.0", "O(1)",
  "Reset the stats returned by INFO")
c("config|rewrite", 2, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.8.0", "O(1)",
  "Rewrite the configuration file with the in memory configuration")
c("config|set", -4, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.0.0", "O(N) when N is the number of configuration parameters provided",
  "Set configuration parameters to the given values",
  { tips = "request_policy:all_nodes response_policy:all_succeeded",
    args = "parameter_value:block{parameter:string value:string}...",
    history = { "7.0.0 Added the ability to set multiple parameters in one call." } })
c("copy", -3, "write denyoom", "1 2 1", "@keyspace @write @slow",
  "generic 6.2.0", "O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
  "Copy a key",
  { keys = { "RO access|index 1|range 0 1 0", "OW update|index 2|range 0 1 0" },
    args = "source:key#0 destination:key#1 [destination-db:integer=DB] [replace=REPLACE]" })
c("dbsize", 1, "readonly fast", "0 0 0", "@keyspace @read @fast",
  "server 1.0.0", "O(1)",
  "Return the number of keys in the selected database",
  { tips = "request_policy:all_shards response_policy:agg_sum" })
c("decr", 2, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 1.0.0", "O(1)",
  "Decrement the integer value of a key by one",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0" })
c("decrby", 3, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 1.0.0", "O(1)",
  "Decrement the integer value of a key by the given number",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 decrement:integer" })
c("del", -2, "write", "1 -1 1", "@keyspace @write @slow",
  "generic 1.0.0", "O(N) where N is the number of keys that will be removed. When a key to remove holds a value other than a string, the individual complexity for this key is O(M) where M is the number of elements in the list, set, sorted set or hash. Removing a single key that holds a string value is O(1).",
  "Delete a key",
  { tips = "request_policy:multi_shard response_policy:agg_sum",
    keys = { "RM delete|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("discard", 1, "noscript loading stale fast allow_busy", "0 0 0", "@fast @transaction",
  "transactions 2.0.0", "O(N), when N is the number of queued commands",
  "Discard all commands issued after MULTI")
c("echo", 2, "loading stale fast", "0 0 0", "@fast @connection",
  "connection 1.0.0", "O(1)",
  "Echo the given string",
  { args = "message:string" })
c("exec", 1, "noscript loading stale skip_slowlog", "0 0 0", "@slow @transaction",
  "transactions 1.2.0", "Depends on commands in the transaction",
  "Execute all commands issued after MULTI")
c("exists", -2, "readonly fast", "1 -1 1", "@keyspace @read @fast",
  "generic 1.0.0", "O(N) where N is the number of keys to check.",
  "Determine if a key exists",
  { tips = "request_policy:multi_shard response_policy:agg_sum",
    keys = { "RO|index 1|range -1 1 0" },
    args = "key:key#0...",
    history = { "3.0.3 Accepts multiple `key` arguments." } })
c("expire", -3, "write fast", "1 1 1", "@keyspace @write @fast",
  "generic 1.0.0", "O(1)",
  "Set a key's time to live in seconds",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 seconds:integer [condition:oneof{nx=NX xx=XX gt=GT lt=LT}@7.0.0]",
    history = { "7.0.0 Added options: `NX`, `XX`, `GT` and `LT`." } })
c("expireat", -3, "write fast", "1 1 1", "@keyspace @write @fast",
  "generic 1.2.0", "O(1)",
  "Set the expiration for a key as a UNIX timestamp",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 unix-time-seconds:unix-time [condition:oneof{nx=NX xx=XX gt=GT lt=LT}@7.0.0]",
    history = { "7.0.0 Added options: `NX`, `XX`, `GT` and `LT`." } })
c("expiretime", 2, "readonly fast", "1 1 1", "@keyspace @read @fast",
  "generic 7.0.0", "O(1)",
  "Get the expiration Unix timestamp for a key",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("flushall", -1, "write", "0 0 0", "@keyspace @write @slow @dangerous",
  "server 1.0.0", "O(N) where N is the total number of keys in all databases",
  "Remove all keys from all databases",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = "[async:oneof{async=ASYNC@4.0.0 sync=SYNC@6.2.0}]",
    history = { "4.0.0 Added the `ASYNC` flushing mode modifier.", "6.2.0 Added the `SYNC` flushing mode modifier." } })
c("flushdb", -1, "write", "0 0 0", "@keyspace @write @slow @dangerous",
  "server 1.0.0", "O(N) where N is the number of keys in the selected database",
  "Remove all keys from the current database",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = "[async:oneof{async=ASYNC@4.0.0 sync=SYNC@6.2.0}]",
    history = { "4.0.0 Added the `ASYNC` flushing mode modifier.", "6.2.0 Added the `SYNC` flushing mode modifier." } })
c("geoadd", -5, "write denyoom", "1 1 1", "@write @geo @slow",
  "geo 3.2.0", "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
  "Add one or more geospatial items in the geospatial index represented using a sorted set",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 [condition:oneof{nx=NX xx=XX}@6.2.0] [change=CH@6.2.0] longitude_latitude_member:block{longitude:double latitude:double member:string}...",
    history = { "6.2.0 Added the `CH`, `NX` and `XX` options." } })
c("geodist", -4, "readonly", "1 1 1", "@read @geo @slow",
  "geo 3.2.0", "O(log(N))",
  "Returns the distance between two members of a geospatial index",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member1:string member2:string [unit:oneof{m=M km=KM ft=FT mi=MI}]" })
c("geohash", -2, "readonly", "1 1 1", "@read @geo @slow",
  "geo 3.2.0", "O(log(N)) for each member requested, where N is the number of elements in the sorted set.",
  "Returns members of a geospatial index as standard geohash strings",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string..." })
c("geopos", -2, "readonly", "1 1 1", "@read @geo @slow",
  "geo 3.2.0", "O(N) where N is the number of members requested.",
  "Returns longitude and latitude of members of a geospatial index",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string..." })
c("georadius", -6, "write denyoom movablekeys", "1 1 1", "@write @geo @slow",
  "geo 3.2.0", "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
  "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point",
  { keys = { "RO access|index 1|range 0 1 0", "OW update|keyword STORE 6|range 0 1 0", "OW update|keyword STOREDIST 6|range 0 1 0" },
    args = "key:key#0 longitude:double latitude:double radius:double unit:oneof{m=M km=KM ft=FT mi=MI} [withcoord=WITHCOORD] [withdist=WITHDIST] [withhash=WITHHASH] [count:block{count:integer=COUNT [any=ANY@6.2.0]}] [order:oneof{asc=ASC desc=DESC}] [key:key=STORE#1] [key:key=STOREDIST#2]",
    history = { "6.2.0 Added the `ANY` option for `COUNT`.", "7.0.0 Added support for uppercase unit names." },
    deprecated = "6.2.0 `GEOSEARCH` and `GEOSEARCHSTORE` with the `BYRADIUS` argument" })
c("georadius_ro", -6, "readonly", "1 1 1", "@read @geo @slow",
  "geo 3.2.10", "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
  "A read-only variant for GEORADIUS",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 longitude:double latitude:double radius:double unit:oneof{m=M km=KM ft=FT mi=MI} [withcoord=WITHCOORD] [withdist=WITHDIST] [withhash=WITHHASH] [count:block{count:integer=COUNT [any=ANY@6.2.0]}] [order:oneof{asc=ASC desc=DESC}]",
    history = { "6.2.0 Added the `ANY` option for `COUNT`." },
    deprecated = "6.2.0 `GEOSEARCH` with the `BYRADIUS` argument" })
c("georadiusbymember", -5, "write denyoom movablekeys", "1 1 1", "@write @geo @slow",
  "geo 3.2.0", "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
  "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member",
  { keys = { "RO access|index 1|range 0 1 0", "OW update|keyword STORE 5|range 0 1 0", "OW update|keyword STOREDIST 5|range 0 1 0" },
    args = "key:key#0 member:string radius:double unit:oneof{m=M km=KM ft=FT mi=MI} [withcoord=WITHCOORD] [withdist=WITHDIST] [withhash=WITHHASH] [count:block{count:integer=COUNT [any=ANY]}] [order:oneof{asc=ASC desc=DESC}] [key:key=STORE#1] [key:key=STOREDIST#2]",
    history = { "7.0.0 Added support for uppercase unit names." },
    deprecated = "6.2.0 `GEOSEARCH` and `GEOSEARCHSTORE` with the `BYRADIUS` and `FROMMEMBER` arguments" })
c("georadiusbymember_ro", -5, "readonly", "1 1 1", "@read @geo @slow",
  "geo 3.2.10", "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
  "A read-only variant for GEORADIUSBYMEMBER",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string radius:double unit:oneof{m=M km=KM ft=FT mi=MI} [withcoord=WITHCOORD] [withdist=WITHDIST] [withhash=WITHHASH] [count:block{count:integer=COUNT [any=ANY]}] [order:oneof{asc=ASC desc=DESC}]",
    deprecated = "6.2.0 `GEOSEARCH` with the `BYRADIUS` and `FROMMEMBER` arguments" })
c("geosearch", -7, "readonly", "1 1 1", "@read @geo @slow",
  "geo 6.2.0", "O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around the shape provided as the filter and M is the number of items inside the shape",
  "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 from:oneof{member:string=FROMMEMBER longitude_latitude:block=FROMLONLAT{longitude:double latitude:double}} by:oneof{circle:block{radius:double=BYRADIUS unit:oneof{m=M km=KM ft=FT mi=MI}} box:block{width:double=BYBOX height:double unit:oneof{m=M km=KM ft=FT mi=MI}}} [order:oneof{asc=ASC desc=DESC}] [count:block{count:integer=COUNT [any=ANY]}] [withcoord=WITHCOORD] [withdist=WITHDIST] [withhash=WITHHASH]",
    history = { "7.0.0 Added support for uppercase unit names." } })
c("geosearchstore", -8, "write denyoom", "1 2 1", "@write @geo @slow",
  "geo 6.2.0", "O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around the shape provided as the filter and M is the number of items inside the shape",
  "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|range 0 1 0" },
    args = "destination:key#0 source:key#1 from:oneof{member:string=FROMMEMBER longitude_latitude:block=FROMLONLAT{longitude:double latitude:double}} by:oneof{circle:block{radius:double=BYRADIUS unit:oneof{m=M km=KM ft=FT mi=MI}} box:block{width:double=BYBOX height:double unit:oneof{m=M km=KM ft=FT mi=MI}}} [order:oneof{asc=ASC desc=DESC}] [count:block{count:integer=COUNT [any=ANY]}] [storedist=STOREDIST]",
    history = { "7.0.0 Added support for uppercase unit names." } })
c("get", 2, "readonly fast", "1 1 1", "@read @string @fast",
  "string 1.0.0", "O(1)",
  "Get the value of a key",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("getbit", 3, "readonly fast", "1 1 1", "@read @bitmap @fast",
  "bitmap 2.2.0", "O(1)",
  "Returns the bit value at offset in the string value stored at key",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 offset:integer" })
c("getdel", 2, "write fast", "1 1 1", "@write @string @fast",
  "string 6.2.0", "O(1)",
  "Get the value of a key and delete the key",
  { keys = { "RW access delete|index 1|range 0 1 0" },
    args = "key:key#0" })
c("getex", -2, "write fast", "1 1 1", "@write @string @fast",
  "string 6.2.0", "O(1)",
  "Get the value of a key and optionally set its expiration",
  { keys = { "RW access update|index 1|range 0 1 0|RW and UPDATE because it changes the TTL" },
    args = "key:key#0 [expiration:oneof{seconds:integer=EX milliseconds:integer=PX unix-time-seconds:unix-time=EXAT unix-time-milliseconds:unix-time=PXAT persist=PERSIST}]" })
c("getrange", 4, "readonly", "1 1 1", "@read @string @slow",
  "string 2.4.0", "O(N) where N is the length of the returned string. The complexity is ultimately determined by the returned length, but because creating a substring from an existing string is very cheap, it can be considered O(1) for small strings.",
  "Get a substring of the string stored at a key",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 start:integer end:integer" })
c("getset", 3, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 1.0.0", "O(1)",
  "Set the string value of a key and return its old value",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 value:string",
    deprecated = "6.2.0 `SET` with the `!GET` argument" })
c("hdel", -3, "write fast", "1 1 1", "@write @hash @fast",
  "hash 2.0.0", "O(N) where N is the number of fields to be removed.",
  "Delete one or more hash fields",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 field:string...",
    history = { "2.4.0 Accepts multiple `field` arguments." } })
c("hello", -1, "noscript loading stale fast no_auth allow_busy", "0 0 0", "@fast @connection",
  "connection 6.0.0", "O(1)",
  "Handshake with Redis",
  { args = "[arguments:block{protover:integer [username_password:block=AUTH{username:string password:string}] [clientname:string=SETNAME]}]",
    history = { "6.2.0 `protover` made optional; when called without arguments the command reports the current connection's context." } })
c("hexists", 3, "readonly fast", "1 1 1", "@read @hash @fast",
  "hash 2.0.0", "O(1)",
  "Determine if a hash field exists",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0 field:string" })
c("hget", 3, "readonly fast", "1 1 1", "@read @hash @fast",
  "hash 2.0.0", "O(1)",
  "Get the value of a hash field",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 field:string" })
c("hgetall", 2, "readonly", "1 1 1", "@read @hash @slow",
  "hash 2.0.0", "O(N) where N is the size of the hash.",
  "Get all the fields and values in a hash",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("hincrby", 4, "write denyoom fast", "1 1 1", "@write @hash @fast",
  "hash 2.0.0", "O(1)",
  "Increment the integer value of a hash field by the given number",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 field:string increment:integer" })
c("hincrbyfloat", 4, "write denyoom fast", "1 1 1", "@write @hash @fast",
  "hash 2.6.0", "O(1)",
  "Increment the float value of a hash field by the given amount",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 field:string increment:double" })
c("hkeys", 2, "readonly", "1 1 1", "@read @hash @slow",
  "hash 2.0.0", "O(N) where N is the size of the hash.",
  "Get all the fields in a hash",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("hlen", 2, "readonly fast", "1 1 1", "@read @hash @fast",
  "hash 2.0.0", "O(1)",
  "Get the number of fields in a hash",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("hmget", -3, "readonly fast", "1 1 1", "@read @hash @fast",
  "hash 2.0.0", "O(N) where N is the number of fields being requested.",
  "Get the values of all the given hash fields",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 field:string..." })
c("hmset", -4, "write denyoom fast", "1 1 1", "@write @hash @fast",
  "hash 2.0.0", "O(N) where N is the number of fields being set.",
  "Set multiple hash fields to multiple values",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 field_value:block{field:string value:string}...",
    deprecated = "4.0.0 `HSET` with multiple field-value pairs" })
c("hrandfield", -2, "readonly", "1 1 1", "@read @hash @slow",
  "hash 6.2.0", "O(N) where N is the number of fields returned",
  "Get one or multiple random fields from a hash",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 [options:block{count:integer [withvalues=WITHVALUES]}]" })
c("hscan", -3, "readonly", "1 1 1", "@read @hash @slow",
  "hash 2.8.0", "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection..",
  "Incrementally iterate hash fields and associated values",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 cursor:integer [pattern:pattern=MATCH] [count:integer=COUNT]" })
c("hset", -4, "write denyoom fast", "1 1 1", "@write @hash @fast",
  "hash 2.0.0", "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.",
  "Set the string value of a hash field",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 field_value:block{field:string value:string}...",
    history = { "4.0.0 Accepts multiple `field` and `value` arguments." } })
c("hsetnx", 4, "write denyoom fast", "1 1 1", "@write @hash @fast",
  "hash 2.0.0", "O(1)",
  "Set the value of a hash field, only if the field does not exist",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 field:string value:string" })
c("hstrlen", 3, "readonly fast", "1 1 1", "@read @hash @fast",
  "hash 3.2.0", "O(1)",
  "Get the length of the value of a hash field",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0 field:string" })
c("hvals", 2, "readonly", "1 1 1", "@read @hash @slow",
  "hash 2.0.0", "O(N) where N is the size of the hash.",
  "Get all the values in a hash",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("incr", 2, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 1.0.0", "O(1)",
  "Increment the integer value of a key by one",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0" })
c("incrby", 3, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 1.0.0", "O(1)",
  "Increment the integer value of a key by the given amount",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 increment:integer" })
c("incrbyfloat", 3, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 2.6.0", "O(1)",
  "Increment the float value of a key by the given amount",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 increment:double" })
c("info", -1, "loading stale", "0 0 0", "@slow @dangerous",
  "server 1.0.0", "O(1)",
  "Get information and statistics about the server",
  { tips = "nondeterministic_output request_policy:all_shards response_policy:special",
    args = "[section:string...]",
    history = { "7.0.0 Added support for taking multiple section arguments." } })
c("keys", 2, "readonly", "0 0 0", "@keyspace @read @slow @dangerous",
  "generic 1.0.0", "O(N) with N being the number of keys in the database, under the assumption that the key names in the database and the given pattern have limited length.",
  "Find all keys matching the given pattern",
  { tips = "request_policy:all_shards nondeterministic_output_order",
    args = "pattern:pattern" })
c("latency", -2, "", "0 0 0", "@slow",
  "server 2.8.13", "Depends on subcommand.",
  "A container for latency diagnostics commands")
c("latency|help", 2, "loading stale", "0 0 0", "@slow",
  "server 2.8.13", "O(1)",
  "Show helpful text about the different subcommands.")
c("latency|histogram", -2, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 7.0.0", "O(N) where N is the number of commands with latency information being retrieved.",
  "Return the cumulative distribution of latencies of a subset of commands or all.",
  { tips = "nondeterministic_output request_policy:all_nodes response_policy:special",
    args = "[command:string...]" })
c("latency|history", 3, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.8.13", "O(1)",
  "Return timestamp-latency samples for the event.",
  { tips = "nondeterministic_output request_policy:all_nodes response_policy:special",
    args = "event:string" })
c("latency|latest", 2, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.8.13", "O(1)",
  "Return the latest latency samples for all events.",
  { tips = "nondeterministic_output request_policy:all_nodes response_policy:special" })
c("latency|reset", -2, "admin noscript loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.8.13", "O(1)",
  "Reset latency data for one or more events.",
  { tips = "request_policy:all_nodes response_policy:all_succeeded",
    args = "[event:string...]" })
c("lcs", -3, "readonly", "1 2 1", "@read @string @slow",
  "string 7.0.0", "O(N*M) where N and M are the lengths of s1 and s2, respectively",
  "Find longest common substring",
  { keys = { "RO access|index 1|range 1 1 0" },
    args = "key1:key#0 key2:key#0 [len=LEN] [idx=IDX] [len:integer=MINMATCHLEN] [withmatchlen=WITHMATCHLEN]" })
c("lindex", 3, "readonly", "1 1 1", "@read @list @slow",
  "list 1.0.0", "O(N) where N is the number of elements to traverse to get to the element at index. This makes asking for the first or the last element of the list O(1).",
  "Get an element from a list by its index",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 index:integer" })
c("linsert", 5, "write denyoom", "1 1 1", "@write @list @slow",
  "list 2.2.0", "O(N) where N is the number of elements to traverse before seeing the value pivot. This means that inserting somewhere on the left end on the list (head) can be considered O(1) and inserting somewhere on the right end (tail) is O(N).",
  "Insert an element before or after another element in a list",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 where:oneof{before=BEFORE after=AFTER} pivot:string element:string" })
c("llen", 2, "readonly fast", "1 1 1", "@read @list @fast",
  "list 1.0.0", "O(1)",
  "Get the length of a list",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("lmove", 5, "write denyoom", "1 2 1", "@write @list @slow",
  "list 6.2.0", "O(1)",
  "Pop an element from a list, push it to another list and return it",
  { keys = { "RW access delete|index 1|range 0 1 0", "RW insert|index 2|range 0 1 0" },
    args = "source:key#0 destination:key#1 wherefrom:oneof{left=LEFT right=RIGHT} whereto:oneof{left=LEFT right=RIGHT}" })
c("lmpop", -4, "write movablekeys", "0 0 0", "@write @list @slow",
  "list 7.0.0", "O(N+M) where N is the number of provided keys and M is the number of elements returned.",
  "Pop elements from a list",
  { keys = { "RW access delete|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... where:oneof{left=LEFT right=RIGHT} [count:integer=COUNT]" })
c("lpop", -2, "write fast", "1 1 1", "@write @list @fast",
  "list 1.0.0", "O(N) where N is the number of elements returned",
  "Remove and get the first elements in a list",
  { keys = { "RW access delete|index 1|range 0 1 0" },
    args = "key:key#0 [count:integer@6.2.0]",
    history = { "6.2.0 Added the `count` argument." } })
c("lpos", -3, "readonly", "1 1 1", "@read @list @slow",
  "list 6.0.6", "O(N) where N is the number of elements in the list, for the average case. When searching for elements near the head or the tail of the list, or when the MAXLEN option is provided, the command may run in constant time.",
  "Return the index of matching elements on a list",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 element:string [rank:integer=RANK] [num-matches:integer=COUNT] [len:integer=MAXLEN]" })
c("lpush", -3, "write denyoom fast", "1 1 1", "@write @list @fast",
  "list 1.0.0", "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
  "Prepend one or multiple elements to a list",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 element:string...",
    history = { "2.4.0 Accepts multiple `element` arguments." } })
c("lpushx", -3, "write denyoom fast", "1 1 1", "@write @list @fast",
  "list 2.2.0", "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
  "Prepend an element to a list, only if the list exists",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 element:string...",
    history = { "4.0.0 Accepts multiple `element` arguments." } })
c("lrange", 4, "readonly", "1 1 1", "@read @list @slow",
  "list 1.0.0", "O(S+N) where S is the distance of start offset from HEAD for small lists, from nearest end (HEAD or TAIL) for large lists; and N is the number of elements in the specified range.",
  "Get a range of elements from a list",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 start:integer stop:integer" })
c("lrem", 4, "write", "1 1 1", "@write @list @slow",
  "list 1.0.0", "O(N+M) where N is the length of the list and M is the number of elements removed.",
  "Remove elements from a list",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 count:integer element:string" })
c("lset", 4, "write denyoom", "1 1 1", "@write @list @slow",
  "list 1.0.0", "O(N) where N is the length of the list. Setting either the first or the last element of the list is O(1).",
  "Set the value of an element in a list by its index",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 index:integer element:string" })
c("ltrim", 4, "write", "1 1 1", "@write @list @slow",
  "list 1.0.0", "O(N) where N is the number of elements to be removed by the operation.",
  "Trim a list to the specified range",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 start:integer stop:integer" })
c("mget", -2, "readonly fast", "1 -1 1", "@read @string @fast",
  "string 1.0.0", "O(N) where N is the number of keys to retrieve.",
  "Get the values of all the given keys",
  { tips = "request_policy:multi_shard",
    keys = { "RO access|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("mset", -3, "write denyoom", "1 -1 2", "@write @string @slow",
  "string 1.0.1", "O(N) where N is the number of keys to set.",
  "Set multiple keys to multiple values",
  { tips = "request_policy:multi_shard response_policy:all_succeeded",
    keys = { "OW update|index 1|range -1 2 0" },
    args = "key_value:block{key:key#0 value:string}..." })
c("msetnx", -3, "write denyoom", "1 -1 2", "@write @string @slow",
  "string 1.0.1", "O(N) where N is the number of keys to set.",
  "Set multiple keys to multiple values, only if none of the keys exist",
  { tips = "request_policy:multi_shard response_policy:agg_min",
    keys = { "OW insert|index 1|range -1 2 0" },
    args = "key_value:block{key:key#0 value:string}..." })
c("multi", 1, "noscript loading stale fast allow_busy", "0 0 0", "@fast @transaction",
  "transactions 1.2.0", "O(1)",
  "Mark the start of a transaction block")
c("persist", 2, "write fast", "1 1 1", "@keyspace @write @fast",
  "generic 2.2.0", "O(1)",
  "Remove the expiration from a key",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0" })
c("pexpire", -3, "write fast", "1 1 1", "@keyspace @write @fast",
  "generic 2.6.0", "O(1)",
  "Set a key's time to live in milliseconds",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 milliseconds:integer [condition:oneof{nx=NX xx=XX gt=GT lt=LT}@7.0.0]",
    history = { "7.0.0 Added options: `NX`, `XX`, `GT` and `LT`." } })
c("pexpireat", -3, "write fast", "1 1 1", "@keyspace @write @fast",
  "generic 2.6.0", "O(1)",
  "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 unix-time-milliseconds:unix-time [condition:oneof{nx=NX xx=XX gt=GT lt=LT}@7.0.0]",
    history = { "7.0.0 Added options: `NX`, `XX`, `GT` and `LT`." } })
c("pexpiretime", 2, "readonly fast", "1 1 1", "@keyspace @read @fast",
  "generic 7.0.0", "O(1)",
  "Get the expiration Unix timestamp for a key in milliseconds",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("pfadd", -2, "write denyoom fast", "1 1 1", "@write @hyperloglog @fast",
  "hyperloglog 2.8.9", "O(1) to add every element.",
  "Adds the specified elements to the specified HyperLogLog.",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 [element:string...]" })
c("pfcount", -2, "readonly", "1 -1 1", "@read @hyperloglog @slow",
  "hyperloglog 2.8.9", "O(1) with a very small average constant time when called with a single key. O(N) with N being the number of keys, and much bigger constant times, when called with multiple keys.",
  "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).",
  { keys = { "RW access|index 1|range -1 1 0|RW because it may change the internal representation of the key, and propagate to replicas" },
    args = "key:key#0..." })
c("pfmerge", -2, "write denyoom", "1 -1 1", "@write @hyperloglog @slow",
  "hyperloglog 2.8.9", "O(N) to merge N HyperLogLogs, but with high constant times.",
  "Merge N different HyperLogLogs into a single one.",
  { keys = { "RW access insert|index 1|range 0 1 0", "RO access|index 2|range -1 1 0" },
    args = "destkey:key#0 sourcekey:key#1..." })
c("ping", -1, "fast", "0 0 0", "@fast @connection",
  "connection 1.0.0", "O(1)",
  "Ping the server",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = "[message:string]" })
c("psetex", 4, "write denyoom", "1 1 1", "@write @string @slow",
  "string 2.6.0", "O(1)",
  "Set the value and expiration in milliseconds of a key",
  { keys = { "OW update|index 1|range 0 1 0" },
    args = "key:key#0 milliseconds:integer value:string" })
c("psubscribe", -2, "pubsub noscript loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.0.0", "O(N) where N is the number of patterns the client is already subscribed to.",
  "Listen for messages published to channels matching the given patterns",
  { args = "pattern:block{pattern:pattern}..." })
c("pttl", 2, "readonly fast", "1 1 1", "@keyspace @read @fast",
  "generic 2.6.0", "O(1)",
  "Get the time to live for a key in milliseconds",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0",
    history = { "2.8.0 Added the -2 reply." } })
c("publish", 3, "pubsub loading stale fast", "0 0 0", "@pubsub @fast",
  "pubsub 2.0.0", "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).",
  "Post a message to a channel",
  { args = "channel:string message:string" })
c("pubsub", -2, "", "0 0 0", "@slow",
  "pubsub 2.8.0", "Depends on subcommand.",
  "A container for Pub/Sub commands")
c("pubsub|channels", -2, "pubsub loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.8.0", "O(N) where N is the number of active channels, and assuming constant time pattern matching (relatively short channels and patterns)",
  "List active channels",
  { args = "[pattern:pattern]" })
c("pubsub|help", 2, "loading stale", "0 0 0", "@slow",
  "pubsub 6.2.0", "O(1)",
  "Show helpful text about the different subcommands")
c("pubsub|numpat", 2, "pubsub loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.8.0", "O(1)",
  "Get the count of unique patterns pattern subscriptions")
c("pubsub|numsub", -2, "pubsub loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.8.0", "O(N) for the NUMSUB subcommand, where N is the number of requested channels",
  "Get the count of subscribers for channels",
  { args = "[channel:string...]" })
c("punsubscribe", -1, "pubsub noscript loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.0.0", "O(N+M) where N is the number of patterns the client is already subscribed and M is the number of total patterns subscribed in the system (by any client).",
  "Stop listening for messages posted to channels matching the given patterns",
  { args = "[pattern:pattern...]" })
c("quit", -1, "noscript loading stale fast no_auth allow_busy", "0 0 0", "@fast @connection",
  "connection 1.0.0", "O(1)",
  "Close the connection")
c("randomkey", 1, "readonly", "0 0 0", "@keyspace @read @slow",
  "generic 1.0.0", "O(1)",
  "Return a random key from the keyspace",
  { tips = "request_policy:all_shards nondeterministic_output" })
c("rename", 3, "write", "1 2 1", "@keyspace @write @slow",
  "generic 1.0.0", "O(1)",
  "Rename a key",
  { keys = { "RW access delete|index 1|range 0 1 0", "OW update|index 2|range 0 1 0" },
    args = "key:key#0 newkey:key#1" })
c("renamenx", 3, "write fast", "1 2 1", "@keyspace @write @fast",
  "generic 1.0.0", "O(1)",
  "Rename a key, only if the new key does not exist",
  { keys = { "RW access delete|index 1|range 0 1 0", "OW insert|index 2|range 0 1 0" },
    args = "key:key#0 newkey:key#1",
    history = { "3.2.0 The command no longer returns an error when source and destination names are the same." } })
c("reset", 1, "noscript loading stale fast no_auth allow_busy", "0 0 0", "@fast @connection",
  "connection 6.2.0", "O(1)",
  "Reset the connection")
c("rpop", -2, "write fast", "1 1 1", "@write @list @fast",
  "list 1.0.0", "O(N) where N is the number of elements returned",
  "Remove and get the last elements in a list",
  { keys = { "RW access delete|index 1|range 0 1 0" },
    args = "key:key#0 [count:integer@6.2.0]",
    history = { "6.2.0 Added the `count` argument." } })
c("rpoplpush", 3, "write denyoom", "1 2 1", "@write @list @slow",
  "list 1.2.0", "O(1)",
  "Remove the last element in a list, prepend it to another list and return it",
  { keys = { "RW access delete|index 1|range 0 1 0", "RW insert|index 2|range 0 1 0" },
    args = "source:key#0 destination:key#1",
    deprecated = "6.2.0 `LMOVE` with the `RIGHT` and `LEFT` arguments" })
c("rpush", -3, "write denyoom fast", "1 1 1", "@write @list @fast",
  "list 1.0.0", "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
  "Append one or multiple elements to a list",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 element:string...",
    history = { "2.4.0 Accepts multiple `element` arguments." } })
c("rpushx", -3, "write denyoom fast", "1 1 1", "@write @list @fast",
  "list 2.2.0", "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
  "Append an element to a list, only if the list exists",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 element:string...",
    history = { "4.0.0 Accepts multiple `element` arguments." } })
c("sadd", -3, "write denyoom fast", "1 1 1", "@write @set @fast",
  "set 1.0.0", "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
  "Add one or more members to a set",
  { keys = { "RW insert|index 1|range 0 1 0" },
    args = "key:key#0 member:string...",
    history = { "2.4.0 Accepts multiple `member` arguments." } })
c("save", 1, "admin noscript no_async_loading no_multi", "0 0 0", "@admin @slow @dangerous",
  "server 1.0.0", "O(N) where N is the total number of keys in all databases",
  "Synchronously save the dataset to disk")
c("scan", -2, "readonly", "0 0 0", "@keyspace @read @slow",
  "generic 2.8.0", "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.",
  "Incrementally iterate the keys space",
  { tips = "nondeterministic_output request_policy:special",
    args = "cursor:integer [pattern:pattern=MATCH] [count:integer=COUNT] [type:string=TYPE@6.0.0]",
    history = { "6.0.0 Added the `TYPE` subcommand." } })
c("scard", 2, "readonly fast", "1 1 1", "@read @set @fast",
  "set 1.0.0", "O(1)",
  "Get the number of members in a set",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("sdiff", -2, "readonly", "1 -1 1", "@read @set @slow",
  "set 1.0.0", "O(N) where N is the total number of elements in all given sets.",
  "Subtract multiple sets",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("sdiffstore", -3, "write denyoom", "1 -1 1", "@write @set @slow",
  "set 1.0.0", "O(N) where N is the total number of elements in all given sets.",
  "Subtract multiple sets and store the resulting set in a key",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|range -1 1 0" },
    args = "destination:key#0 key:key#1..." })
c("select", 2, "loading stale fast", "0 0 0", "@fast @connection",
  "connection 1.0.0", "O(1)",
  "Change the selected database for the current connection",
  { args = "index:integer" })
c("set", -3, "write denyoom", "1 1 1", "@write @string @slow",
  "string 1.0.0", "O(1)",
  "Set the string value of a key",
  { keys = { "RW access update variable_flags|index 1|range 0 1 0|RW and ACCESS due to the optional `GET` argument" },
    args = "key:key#0 value:string [condition:oneof{nx=NX xx=XX}@2.6.12] [get=GET@6.2.0] [expiration:oneof{seconds:integer=EX@2.6.12 milliseconds:integer=PX@2.6.12 unix-time-seconds:unix-time=EXAT@6.2.0 unix-time-milliseconds:unix-time=PXAT@6.2.0 keepttl=KEEPTTL@6.0.0}]",
    history = { "2.6.12 Added the `EX`, `PX`, `NX` and `XX` options.", "6.0.0 Added the `KEEPTTL` option.", "6.2.0 Added the `GET`, `EXAT` and `PXAT` option.", "7.0.0 Allowed the `NX` and `GET` options to be used together." } })
c("setbit", 4, "write denyoom", "1 1 1", "@write @bitmap @slow",
  "bitmap 2.2.0", "O(1)",
  "Sets or clears the bit at offset in the string value stored at key",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 offset:integer value:integer" })
c("setex", 4, "write denyoom", "1 1 1", "@write @string @slow",
  "string 2.0.0", "O(1)",
  "Set the value and expiration of a key",
  { keys = { "OW update|index 1|range 0 1 0" },
    args = "key:key#0 seconds:integer value:string" })
c("setnx", 3, "write denyoom fast", "1 1 1", "@write @string @fast",
  "string 1.0.0", "O(1)",
  "Set the value of a key, only if the key does not exist",
  { keys = { "OW insert|index 1|range 0 1 0" },
    args = "key:key#0 value:string" })
c("setrange", 4, "write denyoom", "1 1 1", "@write @string @slow",
  "string 2.2.0", "O(1), not counting the time taken to copy the new string in place. Usually, this string is very small so the amortized complexity is O(1). Otherwise, complexity is O(M) with M being the length of the value argument.",
  "Overwrite part of a string at key starting at the specified offset",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 offset:integer value:string" })
c("sinter", -2, "readonly", "1 -1 1", "@read @set @slow",
  "set 1.0.0", "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
  "Intersect multiple sets",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("sintercard", -3, "readonly movablekeys", "0 0 0", "@read @set @slow",
  "set 7.0.0", "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
  "Intersect multiple sets and return the cardinality of the result",
  { keys = { "RO access|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... [limit:integer=LIMIT]" })
c("sinterstore", -3, "write denyoom", "1 -1 1", "@write @set @slow",
  "set 1.0.0", "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
  "Intersect multiple sets and store the resulting set in a key",
  { keys = { "RW update|index 1|range 0 1 0", "RO access|index 2|range -1 1 0" },
    args = "destination:key#0 key:key#1..." })
c("sismember", 3, "readonly fast", "1 1 1", "@read @set @fast",
  "set 1.0.0", "O(1)",
  "Determine if a given value is a member of a set",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0 member:string" })
c("slowlog", -2, "", "0 0 0", "@slow",
  "server 2.2.12", "Depends on subcommand.",
  "A container for slow log commands")
c("slowlog|get", -2, "admin loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.2.12", "O(N) where N is the number of entries returned",
  "Get the slow log's entries",
  { tips = "request_policy:all_nodes nondeterministic_output",
    args = "[count:integer]",
    history = { "4.0.0 Added client IP address, port and name to the reply." } })
c("slowlog|help", 2, "loading stale", "0 0 0", "@slow",
  "server 6.2.0", "O(1)",
  "Show helpful text about the different subcommands")
c("slowlog|len", 2, "admin loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.2.12", "O(1)",
  "Get the slow log's length",
  { tips = "request_policy:all_nodes response_policy:agg_sum nondeterministic_output" })
c("slowlog|reset", 2, "admin loading stale", "0 0 0", "@admin @slow @dangerous",
  "server 2.2.12", "O(N) where N is the number of entries in the slowlog",
  "Clear all entries from the slow log",
  { tips = "request_policy:all_nodes response_policy:all_succeeded" })
c("smembers", 2, "readonly", "1 1 1", "@read @set @slow",
  "set 1.0.0", "O(N) where N is the set cardinality.",
  "Get all the members in a set",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0" })
c("smismember", -3, "readonly fast", "1 1 1", "@read @set @fast",
  "set 6.2.0", "O(N) where N is the number of elements being checked for membership",
  "Returns the membership associated with the given elements for a set",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string..." })
c("smove", 4, "write fast", "1 2 1", "@write @set @fast",
  "set 1.0.0", "O(1)",
  "Move a member from one set to another",
  { keys = { "RW access delete|index 1|range 0 1 0", "RW insert|index 2|range 0 1 0" },
    args = "source:key#0 destination:key#1 member:string" })
c("sort", -2, "write denyoom movablekeys", "1 1 1", "@write @set @sortedset @list @slow @dangerous",
  "generic 1.0.0", "O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of returned elements. When the elements are not sorted, complexity is O(N).",
  "Sort the elements in a list, set or sorted set",
  { keys = { "RO access|index 1|range 0 1 0", "RO access|unknown|unknown|For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of the key we sort", "OW update|unknown|unknown|For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhere in the argument array" },
    args = "key:key#0 [pattern:pattern=BY#1] [offset_count:block=LIMIT{offset:integer count:integer}] [pattern:pattern=GET#1...+] [order:oneof{asc=ASC desc=DESC}] [sorting=ALPHA] [destination:key=STORE#2]" })
c("sort_ro", -2, "readonly movablekeys", "1 1 1", "@read @set @sortedset @list @slow @dangerous",
  "generic 7.0.0", "O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of returned elements. When the elements are not sorted, complexity is O(N).",
  "Sort the elements in a list, set or sorted set. Read-only variant of SORT.",
  { keys = { "RO access|index 1|range 0 1 0", "RO access|unknown|unknown|For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of the key we sort" },
    args = "key:key#0 [pattern:pattern=BY#1] [offset_count:block=LIMIT{offset:integer count:integer}] [pattern:pattern=GET#1...+] [order:oneof{asc=ASC desc=DESC}] [sorting=ALPHA]" })
c("spop", -2, "write fast", "1 1 1", "@write @set @fast",
  "set 1.0.0", "Without the count argument O(1), otherwise O(N) where N is the value of the passed count.",
  "Remove and return one or multiple random members from a set",
  { tips = "nondeterministic_output",
    keys = { "RW access delete|index 1|range 0 1 0" },
    args = "key:key#0 [count:integer@3.2.0]",
    history = { "3.2.0 Added the `count` argument." } })
c("srandmember", -2, "readonly", "1 1 1", "@read @set @slow",
  "set 1.0.0", "Without the count argument O(1), otherwise O(N) where N is the absolute value of the passed count.",
  "Get one or multiple random members from a set",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 [count:integer@2.6.0]",
    history = { "2.6.0 Added the optional `count` argument." } })
c("srem", -3, "write fast", "1 1 1", "@write @set @fast",
  "set 1.0.0", "O(N) where N is the number of members to be removed.",
  "Remove one or more members from a set",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 member:string...",
    history = { "2.4.0 Accepts multiple `member` arguments." } })
c("sscan", -3, "readonly", "1 1 1", "@read @set @slow",
  "set 2.8.0", "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection..",
  "Incrementally iterate Set elements",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 cursor:integer [pattern:pattern=MATCH] [count:integer=COUNT]" })
c("strlen", 2, "readonly fast", "1 1 1", "@read @string @fast",
  "string 2.2.0", "O(1)",
  "Get the length of the value stored in a key",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("subscribe", -2, "pubsub noscript loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.0.0", "O(N) where N is the number of channels to subscribe to.",
  "Listen for messages published to the given channels",
  { args = "channel:string..." })
c("sunion", -2, "readonly", "1 -1 1", "@read @set @slow",
  "set 1.0.0", "O(N) where N is the total number of elements in all given sets.",
  "Add multiple sets",
  { tips = "nondeterministic_output_order",
    keys = { "RO access|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("sunionstore", -3, "write denyoom", "1 -1 1", "@write @set @slow",
  "set 1.0.0", "O(N) where N is the total number of elements in all given sets.",
  "Add multiple sets and store the resulting set in a key",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|range -1 1 0" },
    args = "destination:key#0 key:key#1..." })
c("time", 1, "loading stale fast", "0 0 0", "@fast",
  "server 2.6.0", "O(1)",
  "Return the current server time",
  { tips = "nondeterministic_output" })
c("touch", -2, "readonly fast", "1 -1 1", "@keyspace @read @fast",
  "generic 3.2.1", "O(N) where N is the number of keys that will be touched.",
  "Alters the last access time of a key(s). Returns the number of existing keys specified.",
  { tips = "request_policy:multi_shard response_policy:agg_sum",
    keys = { "RO|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("ttl", 2, "readonly fast", "1 1 1", "@keyspace @read @fast",
  "generic 1.0.0", "O(1)",
  "Get the time to live for a key in seconds",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0",
    history = { "2.8.0 Added the -2 reply." } })
c("type", 2, "readonly fast", "1 1 1", "@keyspace @read @fast",
  "generic 1.0.0", "O(1)",
  "Determine the type stored at key",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("unlink", -2, "write fast", "1 -1 1", "@keyspace @write @fast",
  "generic 4.0.0", "O(1) for each key removed regardless of its size. Then the command does O(N) work in a different thread in order to reclaim memory, where N is the number of allocations the deleted objects where composed of.",
  "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.",
  { tips = "request_policy:multi_shard response_policy:agg_sum",
    keys = { "RM delete|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("unsubscribe", -1, "pubsub noscript loading stale", "0 0 0", "@pubsub @slow",
  "pubsub 2.0.0", "O(N) where N is the number of clients already subscribed to a channel.",
  "Stop listening for messages posted to the given channels",
  { args = "[channel:string...]" })
c("unwatch", 1, "noscript loading stale fast allow_busy", "0 0 0", "@fast @transaction",
  "transactions 2.2.0", "O(1)",
  "Forget about all watched keys")
c("watch", -2, "noscript loading stale fast allow_busy", "1 -1 1", "@fast @transaction",
  "transactions 2.2.0", "O(1) for every key.",
  "Watch the given keys to determine execution of the MULTI/EXEC block",
  { keys = { "RO|index 1|range -1 1 0" },
    args = "key:key#0..." })
c("xack", -4, "write fast", "1 1 1", "@write @stream @fast",
  "stream 5.0.0", "O(1) for each message ID processed.",
  "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 group:string id:string..." })
c("xadd", -5, "write denyoom fast", "1 1 1", "@write @stream @fast",
  "stream 5.0.0", "O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.",
  "Appends a new entry to a stream",
  { tips = "nondeterministic_output",
    keys = { "RW update|index 1|range 0 1 0|UPDATE instead of INSERT because of the optional trimming feature" },
    args = "key:key#0 [nomkstream=NOMKSTREAM@6.2.0] [trim:block{strategy:oneof{maxlen=MAXLEN minid=MINID@6.2.0} [operator:oneof{equal== approximately=~}] threshold:string [count:integer=LIMIT@6.2.0]}] id_or_auto:oneof{auto_id=* id:string} field_value:block{field:string value:string}...",
    history = { "6.2.0 Added the `NOMKSTREAM` option, `MINID` trimming strategy and the `LIMIT` option.", "7.0.0 Added support for the `<ms>-*` explicit ID form." } })
c("xautoclaim", -6, "write fast", "1 1 1", "@write @stream @fast",
  "stream 6.2.0", "O(1) if COUNT is small.",
  "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.",
  { tips = "nondeterministic_output",
    keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 group:string consumer:string min-idle-time:string start:string [count:integer=COUNT] [justid=JUSTID]",
    history = { "7.0.0 Added an element to the reply array, containing deleted entries the command cleared from the PEL" } })
c("xclaim", -6, "write fast", "1 1 1", "@write @stream @fast",
  "stream 5.0.0", "O(log N) with N being the number of messages in the PEL of the consumer group.",
  "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.",
  { tips = "nondeterministic_output",
    keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 group:string consumer:string min-idle-time:string id:string... [ms:integer=IDLE] [unix-time-milliseconds:unix-time=TIME] [count:integer=RETRYCOUNT] [force=FORCE] [justid=JUSTID] [id:string=LASTID]" })
c("xdel", -3, "write fast", "1 1 1", "@write @stream @fast",
  "stream 5.0.0", "O(1) for each single item to delete in the stream, regardless of the stream size.",
  "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 id:string..." })
c("xgroup", -2, "", "0 0 0", "@slow",
  "stream 5.0.0", "Depends on subcommand.",
  "A container for consumer groups commands")
c("xgroup|create", -5, "write denyoom", "2 2 1", "@write @stream @slow",
  "stream 5.0.0", "O(1)",
  "Create a consumer group.",
  { keys = { "RW insert|index 2|range 0 1 0" },
    args = "key:key#0 groupname:string id:oneof{id:string new_id=$} [mkstream=MKSTREAM] [entries_read:integer=ENTRIESREAD]",
    history = { "7.0.0 Added the `entries_read` named argument." } })
c("xgroup|createconsumer", 5, "write denyoom", "2 2 1", "@write @stream @slow",
  "stream 6.2.0", "O(1)",
  "Create a consumer in a consumer group.",
  { keys = { "RW insert|index 2|range 0 1 0" },
    args = "key:key#0 groupname:string consumername:string" })
c("xgroup|delconsumer", 5, "write", "2 2 1", "@write @stream @slow",
  "stream 5.0.0", "O(1)",
  "Delete a consumer from a consumer group.",
  { keys = { "RW delete|index 2|range 0 1 0" },
    args = "key:key#0 groupname:string consumername:string" })
c("xgroup|destroy", 4, "write", "2 2 1", "@write @stream @slow",
  "stream 5.0.0", "O(N) where N is the number of entries in the group's pending entries list (PEL).",
  "Destroy a consumer group.",
  { keys = { "RW delete|index 2|range 0 1 0" },
    args = "key:key#0 groupname:string" })
c("xgroup|help", 2, "loading stale", "0 0 0", "@stream @slow",
  "stream 5.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("xgroup|setid", -5, "write", "2 2 1", "@write @stream @slow",
  "stream 5.0.0", "O(1)",
  "Set a consumer group to an arbitrary last delivered ID value.",
  { keys = { "RW update|index 2|range 0 1 0" },
    args = "key:key#0 groupname:string id:oneof{id:string new_id=$} [entries_read:integer=ENTRIESREAD]",
    history = { "7.0.0 Added the optional `entries_read` argument." } })
c("xinfo", -2, "", "0 0 0", "@slow",
  "stream 5.0.0", "Depends on subcommand.",
  "A container for stream introspection commands")
c("xinfo|consumers", 4, "readonly", "2 2 1", "@read @stream @slow",
  "stream 5.0.0", "O(1)",
  "List the consumers in a consumer group",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 2|range 0 1 0" },
    args = "key:key#0 groupname:string" })
c("xinfo|groups", 3, "readonly", "2 2 1", "@read @stream @slow",
  "stream 5.0.0", "O(1)",
  "List the consumer groups of a stream",
  { keys = { "RO access|index 2|range 0 1 0" },
    args = "key:key#0",
    history = { "7.0.0 Added the `entries-read` and `lag` fields" } })
c("xinfo|help", 2, "loading stale", "0 0 0", "@stream @slow",
  "stream 5.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("xinfo|stream", -3, "readonly", "2 2 1", "@read @stream @slow",
  "stream 5.0.0", "O(1)",
  "Get information about a stream",
  { keys = { "RO access|index 2|range 0 1 0" },
    args = "key:key#0 [full:block=FULL{[count:integer=COUNT]}]",
    history = { "6.0.0 Added the `FULL` modifier.", "7.0.0 Added the `max-deleted-entry-id`, `entries-added`, `recorded-first-entry-id`, `entries-read` and `lag` fields" } })
c("xlen", 2, "readonly fast", "1 1 1", "@read @stream @fast",
  "stream 5.0.0", "O(1)",
  "Return the number of entries in a stream",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("xpending", -3, "readonly", "1 1 1", "@read @stream @slow",
  "stream 5.0.0", "O(N) with N being the number of elements returned, so asking for a small fixed number of entries per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE filter. When the command returns just the summary and the list of consumers is small, it runs in O(1) time; otherwise, an additional O(N) time for iterating every consumer.",
  "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 group:string [filters:block{[min-idle-time:integer=IDLE@6.2.0] start:string end:string count:integer [consumer:string]}]",
    history = { "6.2.0 Added the `IDLE` option and exclusive range intervals." } })
c("xrange", -4, "readonly", "1 1 1", "@read @stream @slow",
  "stream 5.0.0", "O(N) with N being the number of elements being returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).",
  "Return a range of elements in a stream, with IDs matching the specified IDs interval",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 start:string end:string [count:integer=COUNT]",
    history = { "6.2.0 Added exclusive ranges." } })
c("xread", -4, "readonly blocking movablekeys", "0 0 0", "@read @stream @slow @blocking",
  "stream 5.0.0", "For each stream mentioned: O(N) with N being the number of elements being returned, it means that XREAD-ing with a fixed COUNT is O(1). Note that when the BLOCK option is used, XADD will pay O(M) time in order to serve the M clients blocked on the stream getting new data.",
  "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.",
  { keys = { "RO access|keyword STREAMS 1|range -1 1 2" },
    args = "[count:integer=COUNT] [milliseconds:integer=BLOCK] streams:block=STREAMS{key:key#0... id:string...}" })
c("xreadgroup", -7, "write blocking movablekeys", "0 0 0", "@write @stream @slow @blocking",
  "stream 5.0.0", "For each stream mentioned: O(M) with M being the number of elements returned. If M is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked on the stream getting new data.",
  "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.",
  { keys = { "RO access|keyword STREAMS 4|range -1 1 2" },
    args = "group_consumer:block=GROUP{group:string consumer:string} [count:integer=COUNT] [milliseconds:integer=BLOCK] [noack=NOACK] streams:block=STREAMS{key:key#0... id:string...}" })
c("xrevrange", -4, "readonly", "1 1 1", "@read @stream @slow",
  "stream 5.0.0", "O(N) with N being the number of elements returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).",
  "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 end:string start:string [count:integer=COUNT]",
    history = { "6.2.0 Added exclusive ranges." } })
c("xsetid", -3, "write denyoom fast", "1 1 1", "@write @stream @fast",
  "stream 5.0.0", "O(1)",
  "An internal command for replicating stream values",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 last-id:string [entries_added:integer=ENTRIESADDED@7.0.0] [max_deleted_entry_id:string=MAXDELETEDID@7.0.0]",
    history = { "7.0.0 Added the `entries_added` and `max_deleted_entry_id` arguments." } })
c("xtrim", -4, "write", "1 1 1", "@write @stream @slow",
  "stream 5.0.0", "O(N), with N being the number of evicted entries. Constant times are very small however, since entries are organized in macro nodes containing multiple entries that can be released with a single deallocation.",
  "Trims the stream to (approximately if '~' is passed) a certain size",
  { tips = "nondeterministic_output",
    keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 trim:block{strategy:oneof{maxlen=MAXLEN minid=MINID@6.2.0} [operator:oneof{equal== approximately=~}] threshold:string [count:integer=LIMIT@6.2.0]}",
    history = { "6.2.0 Added the `MINID` trimming strategy and the `LIMIT` option." } })
c("zadd", -4, "write denyoom fast", "1 1 1", "@write @sortedset @fast",
  "sorted-set 1.2.0", "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
  "Add one or more members to a sorted set, or update its score if it already exists",
  { keys = { "RW update|index 1|range 0 1 0" },
    args = "key:key#0 [condition:oneof{nx=NX xx=XX}@3.0.2] [comparison:oneof{gt=GT lt=LT}@6.2.0] [change=CH@3.0.2] [increment=INCR@3.0.2] score_member:block{score:double member:string}...",
    history = { "2.4.0 Accepts multiple elements.", "3.0.2 Added the `XX`, `NX`, `CH` and `INCR` options.", "6.2.0 Added the `GT` and `LT` options." } })
c("zcard", 2, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 1.2.0", "O(1)",
  "Get the number of members in a sorted set",
  { keys = { "RO|index 1|range 0 1 0" },
    args = "key:key#0" })
c("zcount", 4, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 2.0.0", "O(log(N)) with N being the number of elements in the sorted set.",
  "Count the members in a sorted set with scores within the given values",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 min:double max:double" })
c("zdiff", -3, "readonly movablekeys", "0 0 0", "@read @sortedset @slow",
  "sorted-set 6.2.0", "O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is the size of the first set, and K is the size of the result set.",
  "Subtract multiple sorted sets",
  { keys = { "RO access|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... [withscores=WITHSCORES]" })
c("zdiffstore", -4, "write denyoom movablekeys", "1 1 1", "@write @sortedset @slow",
  "sorted-set 6.2.0", "O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is the size of the first set, and K is the size of the result set.",
  "Subtract multiple sorted sets and store the resulting sorted set in a new key",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|keynum 0 1 1" },
    args = "destination:key#0 numkeys:integer key:key#1..." })
c("zincrby", 4, "write denyoom fast", "1 1 1", "@write @sortedset @fast",
  "sorted-set 1.2.0", "O(log(N)) where N is the number of elements in the sorted set.",
  "Increment the score of a member in a sorted set",
  { keys = { "RW access update|index 1|range 0 1 0" },
    args = "key:key#0 increment:integer member:string" })
c("zinter", -3, "readonly movablekeys", "0 0 0", "@read @sortedset @slow",
  "sorted-set 6.2.0", "O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number of input sorted sets and M being the number of elements in the resulting sorted set.",
  "Intersect multiple sorted sets",
  { keys = { "RO access|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... [weight:integer=WEIGHTS...] [aggregate:oneof=AGGREGATE{sum=SUM min=MIN max=MAX}] [withscores=WITHSCORES]" })
c("zintercard", -3, "readonly movablekeys", "0 0 0", "@read @sortedset @slow",
  "sorted-set 7.0.0", "O(N*K) worst case with N being the smallest input sorted set, K being the number of input sorted sets.",
  "Intersect multiple sorted sets and return the cardinality of the result",
  { keys = { "RO access|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... [limit:integer=LIMIT]" })
c("zinterstore", -4, "write denyoom movablekeys", "1 1 1", "@write @sortedset @slow",
  "sorted-set 2.0.0", "O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number of input sorted sets and M being the number of elements in the resulting sorted set.",
  "Intersect multiple sorted sets and store the resulting sorted set in a new key",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|keynum 0 1 1" },
    args = "destination:key#0 numkeys:integer key:key#1... [weight:integer=WEIGHTS...] [aggregate:oneof=AGGREGATE{sum=SUM min=MIN max=MAX}]" })
c("zlexcount", 4, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 2.8.9", "O(log(N)) with N being the number of elements in the sorted set.",
  "Count the number of members in a sorted set between a given lexicographical range",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 min:string max:string" })
c("zmpop", -4, "write movablekeys", "0 0 0", "@write @sortedset @slow",
  "sorted-set 7.0.0", "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.",
  "Remove and return members with scores in a sorted set",
  { keys = { "RW access delete|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... where:oneof{min=MIN max=MAX} [count:integer=COUNT]" })
c("zmscore", -3, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 6.2.0", "O(N) where N is the number of members being requested.",
  "Get the score associated with the given members in a sorted set",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string..." })
c("zpopmax", -2, "write fast", "1 1 1", "@write @sortedset @fast",
  "sorted-set 5.0.0", "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.",
  "Remove and return members with the highest scores in a sorted set",
  { keys = { "RW access delete|index 1|range 0 1 0" },
    args = "key:key#0 [count:integer]" })
c("zpopmin", -2, "write fast", "1 1 1", "@write @sortedset @fast",
  "sorted-set 5.0.0", "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.",
  "Remove and return members with the lowest scores in a sorted set",
  { keys = { "RW access delete|index 1|range 0 1 0" },
    args = "key:key#0 [count:integer]" })
c("zrandmember", -2, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 6.2.0", "O(N) where N is the number of elements returned",
  "Get one or multiple random elements from a sorted set",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 [options:block{count:integer [withscores=WITHSCORES]}]" })
c("zrange", -4, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 1.2.0", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
  "Return a range of members in a sorted set",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 start:string stop:string [sortby:oneof{byscore=BYSCORE bylex=BYLEX}@6.2.0] [rev=REV@6.2.0] [offset_count:block=LIMIT{offset:integer count:integer}@6.2.0] [withscores=WITHSCORES]",
    history = { "6.2.0 Added the `REV`, `BYSCORE`, `BYLEX` and `LIMIT` options." } })
c("zrangebylex", -4, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 2.8.9", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
  "Return a range of members in a sorted set, by lexicographical range",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 min:string max:string [offset_count:block=LIMIT{offset:integer count:integer}]",
    deprecated = "6.2.0 `ZRANGE` with the `BYLEX` argument" })
c("zrangebyscore", -4, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 1.0.5", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
  "Return a range of members in a sorted set, by score",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 min:double max:double [withscores=WITHSCORES@2.0.0] [offset_count:block=LIMIT{offset:integer count:integer}]",
    history = { "2.0.0 Added the `WITHSCORES` modifier." },
    deprecated = "6.2.0 `ZRANGE` with the `BYSCORE` argument" })
c("zrangestore", -5, "write denyoom", "1 2 1", "@write @sortedset @slow",
  "sorted-set 6.2.0", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements stored into the destination key.",
  "Store a range of members from sorted set into another key",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|range 0 1 0" },
    args = "dst:key#0 src:key#1 min:string max:string [sortby:oneof{byscore=BYSCORE bylex=BYLEX}] [rev=REV] [offset_count:block=LIMIT{offset:integer count:integer}]" })
c("zrank", 3, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 2.0.0", "O(log(N))",
  "Determine the index of a member in a sorted set",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string" })
c("zrem", -3, "write fast", "1 1 1", "@write @sortedset @fast",
  "sorted-set 1.2.0", "O(M*log(N)) with N being the number of elements in the sorted set and M the number of elements to be removed.",
  "Remove one or more members from a sorted set",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 member:string...",
    history = { "2.4.0 Accepts multiple elements." } })
c("zremrangebylex", 4, "write", "1 1 1", "@write @sortedset @slow",
  "sorted-set 2.8.9", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
  "Remove all members in a sorted set between the given lexicographical range",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 min:string max:string" })
c("zremrangebyrank", 4, "write", "1 1 1", "@write @sortedset @slow",
  "sorted-set 2.0.0", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
  "Remove all members in a sorted set within the given indexes",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 start:integer stop:integer" })
c("zremrangebyscore", 4, "write", "1 1 1", "@write @sortedset @slow",
  "sorted-set 1.2.0", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
  "Remove all members in a sorted set within the given scores",
  { keys = { "RW delete|index 1|range 0 1 0" },
    args = "key:key#0 min:double max:double" })
c("zrevrange", -4, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 1.2.0", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
  "Return a range of members in a sorted set, by index, with scores ordered from high to low",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 start:integer stop:integer [withscores=WITHSCORES]",
    deprecated = "6.2.0 `ZRANGE` with the `REV` argument" })
c("zrevrangebylex", -4, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 2.8.9", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
  "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 max:string min:string [offset_count:block=LIMIT{offset:integer count:integer}]",
    deprecated = "6.2.0 `ZRANGE` with the `REV` and `BYLEX` arguments" })
c("zrevrangebyscore", -4, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 2.2.0", "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
  "Return a range of members in a sorted set, by score, with scores ordered from high to low",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 max:double min:double [withscores=WITHSCORES] [offset_count:block=LIMIT{offset:integer count:integer}]",
    history = { "2.1.6 `min` and `max` can be exclusive." },
    deprecated = "6.2.0 `ZRANGE` with the `REV` and `BYSCORE` arguments" })
c("zrevrank", 3, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 2.0.0", "O(log(N))",
  "Determine the index of a member in a sorted set, with scores ordered from high to low",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string" })
c("zscan", -3, "readonly", "1 1 1", "@read @sortedset @slow",
  "sorted-set 2.8.0", "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection..",
  "Incrementally iterate sorted sets elements and associated scores",
  { tips = "nondeterministic_output",
    keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 cursor:integer [pattern:pattern=MATCH] [count:integer=COUNT]" })
c("zscore", 3, "readonly fast", "1 1 1", "@read @sortedset @fast",
  "sorted-set 1.2.0", "O(1)",
  "Get the score associated with the given member in a sorted set",
  { keys = { "RO access|index 1|range 0 1 0" },
    args = "key:key#0 member:string" })
c("zunion", -3, "readonly movablekeys", "0 0 0", "@read @sortedset @slow",
  "sorted-set 6.2.0", "O(N)+O(M*log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.",
  "Add multiple sorted sets",
  { keys = { "RO access|index 1|keynum 0 1 1" },
    args = "numkeys:integer key:key#0... [weight:integer=WEIGHTS...] [aggregate:oneof=AGGREGATE{sum=SUM min=MIN max=MAX}] [withscores=WITHSCORES]" })
c("zunionstore", -4, "write denyoom movablekeys", "1 1 1", "@write @sortedset @slow",
  "sorted-set 2.0.0", "O(N)+O(M log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.",
  "Add multiple sorted sets and store the resulting sorted set in a new key",
  { keys = { "OW update|index 1|range 0 1 0", "RO access|index 2|keynum 0 1 1" },
    args = "destination:key#0 numkeys:integer key:key#1... [weight:integer=WEIGHTS...] [aggregate:oneof=AGGREGATE{sum=SUM min=MIN max=MAX}]" })

return T
