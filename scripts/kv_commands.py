#!/usr/bin/python3
"""Prints examples/kv/commands.lua entries from a running redis-server.

    python3 scripts/kv_commands.py PORT name [name ...]

Asks the server (Debian's redis-server 7.0, the reference kv is checked
against) for COMMAND INFO and COMMAND DOCS of each name ("zadd", or
"config|get" for a subcommand) over RESP3, and prints each command as one
c(...) entry in the notation described at the top of commands.lua, to be
pasted there in name order. Rendering the entries already in the table
gives them back unchanged, which is how this script is checked.
"""
import socket
import sys


def conn(port):
    """A function that sends one command and returns its decoded reply."""
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")

    def call(*args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        return read(f)
    return call


def read(f):
    """One RESP3 reply: maps as dicts (their key order in "__order")."""
    line = f.readline()[:-2]
    kind, rest = chr(line[0]), line[1:]
    if kind == "+":
        return rest.decode()
    if kind == "-":
        raise RuntimeError(rest.decode())
    if kind == ":":
        return int(rest)
    if kind == "_":
        return None
    if kind in "$=":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2].decode()
        return data[4:] if kind == "=" else data   # verbatim: "txt:" first
    if kind in "*~>":
        return [read(f) for _ in range(int(rest))]
    if kind == "%":
        d, order = {}, []
        for _ in range(int(rest)):
            key = read(f)
            d[key] = read(f)
            order.append(key)
        d["__order"] = order
        return d
    if kind == ",":
        return float(rest)
    if kind == "#":
        return rest == b"t"
    raise RuntimeError("bad reply line " + repr(line))


def q(s):
    """s as a Lua string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spec_str(sp):
    """A key spec as "flags|begin search|find keys[|notes]"."""
    flags = " ".join(sp["flags"])
    bs = sp["begin_search"]
    if bs["type"] == "index":
        b = "index %d" % bs["spec"]["index"]
    elif bs["type"] == "keyword":
        b = "keyword %s %d" % (bs["spec"]["keyword"], bs["spec"]["startfrom"])
    else:
        b = bs["type"]
    fk = sp["find_keys"]
    if fk["type"] == "range":
        k = "range %d %d %d" % (fk["spec"]["lastkey"], fk["spec"]["keystep"], fk["spec"]["limit"])
    elif fk["type"] == "keynum":
        k = "keynum %d %d %d" % (fk["spec"]["keynumidx"], fk["spec"]["firstkey"], fk["spec"]["keystep"])
    else:
        k = fk["type"]
    s = "%s|%s|%s" % (flags, b, k)
    if "notes" in sp:
        s += "|" + sp["notes"]
    return s


def arg_str(a):
    """An argument tree in the args notation of commands.lua."""
    flags = a.get("flags", [])
    t = a["type"]
    if t == "pure-token":
        s = a["name"]
    else:
        s = a["name"] + ":" + t
    if "token" in a:
        s += "=" + a["token"]
    if "key_spec_index" in a:
        s += "#%d" % a["key_spec_index"]
    if "arguments" in a:
        s += "{" + " ".join(arg_str(x) for x in a["arguments"]) + "}"
    if "since" in a:
        s += "@" + a["since"]
    if "deprecated_since" in a:
        s += "!" + a["deprecated_since"]
    if "multiple" in flags:
        s += "..."
    if "multiple_token" in flags:
        s += "+"
    if "optional" in flags:
        s = "[" + s + "]"
    extra = set(a) - {"name", "type", "token", "key_spec_index", "arguments", "since",
                      "deprecated_since", "flags", "__order"}
    if extra:
        raise RuntimeError("a field the notation has no place for: %s" % extra)
    return s


def render(call, name):
    """The c(...) entry of command name."""
    info = call("COMMAND", "INFO", name)[0]
    docs = call("COMMAND", "DOCS", name)
    d = docs[name]
    nm, arity, flags, first, last, step, acl, tips, specs, subs = info
    opt = []
    if tips:
        opt.append("tips = " + q(" ".join(tips)))
    if specs:
        opt.append("keys = { " + ", ".join(q(spec_str(s)) for s in specs) + " }")
    if d.get("arguments"):
        opt.append("args = " + q(" ".join(arg_str(a) for a in d["arguments"])))
    if d.get("history"):
        opt.append("history = { " + ", ".join(q("%s %s" % (v, t)) for v, t in d["history"]) + " }")
    if "deprecated" in d.get("doc_flags", []):
        opt.append("deprecated = " + q("%s %s" % (d["deprecated_since"], d["replaced_by"])))
    extra = set(d) - {"summary", "since", "group", "complexity", "arguments", "history", "doc_flags",
                      "deprecated_since", "replaced_by", "subcommands", "__order"}
    if extra:
        raise RuntimeError("a field the notation has no place for: %s in %s" % (extra, name))
    out = "c(%s, %d, %s, %s, %s,\n  %s, %s,\n  %s" % (
        q(nm), arity, q(" ".join(flags)), q("%d %d %d" % (first, last, step)), q(" ".join(acl)),
        q(d["group"] + " " + d["since"]), q(d["complexity"]), q(d["summary"]))
    if opt:
        out += ",\n  { " + ",\n    ".join(opt) + " })"
    else:
        out += ")"
    return out

def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    call = conn(int(sys.argv[1]))
    call("HELLO", "3")
    for name in sys.argv[2:]:
        print(render(call, name))


if __name__ == "__main__":
    main()
