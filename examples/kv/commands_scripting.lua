-- Redis 7.0's facts about the scripting commands kv serves (EVAL and its
-- kin, SCRIPT, FUNCTION, FCALL; scripting.lua and functions.lua), in the
-- format and with the sources of commands.lua (its header has the
-- grammar), kept apart from that table so the scripting work touches it
-- in one line; registry.lua reads both. Checked against redis-server
-- 7.0.15 by spec/kv_compat_spec.lua (COMMAND INFO and DOCS).
local T = {}

local function c(name, arity, flags, range, acl, doc, complexity, summary, opt)
  T[#T + 1] = { name = name, arity = arity, flags = flags, range = range, acl = acl, doc = doc,
                complexity = complexity, summary = summary, opt = opt or {} }
end

local ASYNC = "[async:oneof{async=ASYNC sync=SYNC}]"

c("eval", -3, "noscript stale skip_monitor no_mandatory_keys movablekeys", "0 0 0", "@slow @scripting",
  "scripting 2.6.0", "Depends on the script that is executed.",
  "Execute a Lua script server side",
  { keys = { "RW access update|index 2|keynum 0 1 1|We cannot tell how the keys will be used so we assume the worst, RW and UPDATE" },
    args = "script:string numkeys:integer [key:key#0...] [arg:string...]" })
c("eval_ro", -3, "readonly noscript stale skip_monitor no_mandatory_keys movablekeys", "0 0 0",
  "@slow @scripting",
  "scripting 7.0.0", "Depends on the script that is executed.",
  "Execute a read-only Lua script server side",
  { keys = { "RO access|index 2|keynum 0 1 1|We cannot tell how the keys will be used so we assume the worst, RO and ACCESS" },
    args = "script:string numkeys:integer [key:key#0...] [arg:string...]" })
c("evalsha", -3, "noscript stale skip_monitor no_mandatory_keys movablekeys", "0 0 0", "@slow @scripting",
  "scripting 2.6.0", "Depends on the script that is executed.",
  "Execute a Lua script server side",
  { keys = { "RW access update|index 2|keynum 0 1 1" },
    args = "sha1:string numkeys:integer [key:key#0...] [arg:string...]" })
c("evalsha_ro", -3, "readonly noscript stale skip_monitor no_mandatory_keys movablekeys", "0 0 0",
  "@slow @scripting",
  "scripting 7.0.0", "Depends on the script that is executed.",
  "Execute a read-only Lua script server side",
  { keys = { "RO access|index 2|keynum 0 1 1" },
    args = "sha1:string numkeys:integer [key:key#0...] [arg:string...]" })
c("fcall", -3, "noscript stale skip_monitor no_mandatory_keys movablekeys", "0 0 0", "@slow @scripting",
  "scripting 7.0.0", "Depends on the function that is executed.",
  "Invoke a function",
  { keys = { "RW access update|index 2|keynum 0 1 1|We cannot tell how the keys will be used so we assume the worst, RW and UPDATE" },
    args = "function:string numkeys:integer [key:key#0...] [arg:string...]" })
c("fcall_ro", -3, "readonly noscript stale skip_monitor no_mandatory_keys movablekeys", "0 0 0",
  "@slow @scripting",
  "scripting 7.0.0", "Depends on the function that is executed.",
  "Invoke a read-only function",
  { keys = { "RO access|index 2|keynum 0 1 1|We cannot tell how the keys will be used so we assume the worst, RO and ACCESS" },
    args = "function:string numkeys:integer [key:key#0...] [arg:string...]" })
c("function", -2, "", "0 0 0", "@slow",
  "scripting 7.0.0", "Depends on subcommand.",
  "A container for function commands")
c("function|delete", 3, "write noscript", "0 0 0", "@write @slow @scripting",
  "scripting 7.0.0", "O(1)",
  "Delete a function by name",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = "library-name:string" })
c("function|dump", 2, "noscript", "0 0 0", "@slow @scripting",
  "scripting 7.0.0", "O(N) where N is the number of functions",
  "Dump all functions into a serialized binary payload")
c("function|flush", -2, "write noscript", "0 0 0", "@write @slow @scripting",
  "scripting 7.0.0", "O(N) where N is the number of functions deleted",
  "Deleting all functions",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = ASYNC })
c("function|help", 2, "loading stale", "0 0 0", "@slow @scripting",
  "scripting 7.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("function|kill", 2, "noscript allow_busy", "0 0 0", "@slow @scripting",
  "scripting 7.0.0", "O(1)",
  "Kill the function currently in execution.",
  { tips = "request_policy:all_shards response_policy:one_succeeded" })
c("function|list", -2, "noscript", "0 0 0", "@slow @scripting",
  "scripting 7.0.0", "O(N) where N is the number of functions",
  "List information about all the functions",
  { tips = "nondeterministic_output_order",
    args = "[library-name-pattern:string=LIBRARYNAME] [withcode=WITHCODE]" })
c("function|load", -3, "write denyoom noscript", "0 0 0", "@write @slow @scripting",
  "scripting 7.0.0", "O(1) (considering compilation time is redundant)",
  "Create a function with the given arguments (name, code, description)",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = "[replace=REPLACE] function-code:string" })
c("function|restore", -3, "write denyoom noscript", "0 0 0", "@write @slow @scripting",
  "scripting 7.0.0", "O(N) where N is the number of functions on the payload",
  "Restore all the functions on the given payload",
  { tips = "request_policy:all_shards response_policy:all_succeeded",
    args = "serialized-value:string [policy:oneof{flush=FLUSH append=APPEND replace=REPLACE}]" })
c("function|stats", 2, "noscript allow_busy", "0 0 0", "@slow @scripting",
  "scripting 7.0.0", "O(1)",
  "Return information about the function currently running (name, description, duration)",
  { tips = "nondeterministic_output request_policy:all_shards response_policy:special" })
c("script", -2, "", "0 0 0", "@slow",
  "scripting 2.6.0", "Depends on subcommand.",
  "A container for Lua scripts management commands")
c("script|exists", -3, "noscript", "0 0 0", "@slow @scripting",
  "scripting 2.6.0", "O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).",
  "Check existence of scripts in the script cache.",
  { tips = "request_policy:all_shards response_policy:agg_logical_and",
    args = "sha1:string..." })
c("script|flush", -2, "noscript", "0 0 0", "@slow @scripting",
  "scripting 2.6.0", "O(N) with N being the number of scripts in cache",
  "Remove all the scripts from the script cache.",
  { tips = "request_policy:all_nodes response_policy:all_succeeded",
    args = "[async:oneof{async=ASYNC sync=SYNC}@6.2.0]",
    history = { "6.2.0 Added the `ASYNC` and `SYNC` flushing mode modifiers." } })
c("script|help", 2, "loading stale", "0 0 0", "@slow @scripting",
  "scripting 5.0.0", "O(1)",
  "Show helpful text about the different subcommands")
c("script|kill", 2, "noscript allow_busy", "0 0 0", "@slow @scripting",
  "scripting 2.6.0", "O(1)",
  "Kill the script currently in execution.",
  { tips = "request_policy:all_shards response_policy:one_succeeded" })
c("script|load", 3, "noscript stale", "0 0 0", "@slow @scripting",
  "scripting 2.6.0", "O(N) with N being the length in bytes of the script body.",
  "Load the specified Lua script into the script cache.",
  { tips = "request_policy:all_nodes response_policy:all_succeeded",
    args = "script:string" })

return T
