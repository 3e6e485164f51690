#!/usr/bin/python3
"""Checks a server's answers to TechEmpower's six tests before any figure
is taken from it (scripts/bench/sections/techempower.sh, and
spec/techempower_spec.lua against cohost's app.lua).

    verify.py URL PG_PORT [--pipeline]

URL is the server's base (http://127.0.0.1:8080); PG_PORT the port of the
hello_world database it serves from (db.sh), read through psql to compare
rows and to see that updates were written. --pipeline also checks
/pipeline/queries and /pipeline/updates (app.lua's db:pipeline routes).

Checked, as TechEmpower's rules have it: status, Content-Type, Server and
Date headers, a Content-Length or chunked body on every answer; the exact
JSON shapes; every row read equal to the database's; queries clamped to
1..500 (missing, empty, a non-number or 0: 1; 501: 500); the fortunes
table: the 12 rows and the one added at request time, sorted by message,
HTML-escaped; updates persisted (each row's last new number is in the
database after the answer). Prints one line per check; exits 1 if any
failed. Python's http.client, so no part of cohost checks cohost.
"""
import html
import http.client
import json
import os
import re
import subprocess
import sys
import urllib.parse

FAILS = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        FAILS.append(name)
    return ok


class Server:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.conn = None

    def get(self, path):
        """(status, headers as a lower-case dict, body bytes); one
        keep-alive connection, opened again after a close."""
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            try:
                self.conn.request("GET", path)
                r = self.conn.getresponse()
                body = r.read()
                headers = {k.lower(): v for k, v in r.getheaders()}
                if r.will_close:
                    self.conn.close()
                    self.conn = None
                return r.status, headers, body
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise


class Database:
    def __init__(self, port):
        self.port = port

    def rows(self, sql):
        env = dict(os.environ, PGPASSWORD="benchmarkdbpass")
        out = subprocess.run(
            ["psql", "-X", "-At", "-F", "\t", "-h", "127.0.0.1", "-p", str(self.port),
             "-U", "benchmarkdbuser", "-d", "hello_world", "-c", sql],
            env=env, check=True, capture_output=True, text=True).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def worlds(self, ids):
        if not ids:
            return {}
        got = self.rows("SELECT id, randomnumber FROM world WHERE id IN (%s)"
                        % ",".join(str(int(i)) for i in set(ids)))
        return {int(i): int(n) for i, n in got}


def common(name, status, headers, ctype):
    """The checks every answer gets; False if one failed."""
    ok = check(name + ": status 200", status == 200, "got %s" % status)
    got = headers.get("content-type", "")
    ok &= check(name + ": Content-Type " + ctype, got.lower().replace(" ", "") ==
                ctype.lower().replace(" ", ""), "got %r" % got)
    ok &= check(name + ": Server and Date headers", "server" in headers and "date" in headers,
                "headers %s" % sorted(headers))
    ok &= check(name + ": Content-Length or chunked",
                "content-length" in headers or
                headers.get("transfer-encoding", "").lower() == "chunked",
                "headers %s" % sorted(headers))
    return ok


def is_world(v):
    return (isinstance(v, dict) and set(v) == {"id", "randomNumber"} and
            all(isinstance(v[k], int) and not isinstance(v[k], bool) for k in v) and
            1 <= v["id"] <= 10000 and 1 <= v["randomNumber"] <= 10000)


def decode(name, body):
    try:
        return json.loads(body)
    except ValueError as e:
        check(name + ": JSON", False, "%s in %r" % (e, body[:200]))
        return None


def verify_worlds(name, srv, db, path, want):
    """GET path (queries or updates) answers an array of want rows."""
    status, headers, body = srv.get(path)
    if not common(name, status, headers, "application/json"):
        return None
    v = decode(name, body)
    if v is None:
        return None
    if not check(name + ": an array of %d rows" % want,
                 isinstance(v, list) and len(v) == want and all(is_world(w) for w in v),
                 "got %r" % (body[:200],)):
        return None
    return v


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    srv, db = Server(args[0]), Database(args[1])
    pipeline = "--pipeline" in sys.argv

    status, headers, body = srv.get("/plaintext")
    if common("plaintext", status, headers, "text/plain"):
        check("plaintext: body", body == b"Hello, World!", "got %r" % body)

    status, headers, body = srv.get("/json")
    if common("json", status, headers, "application/json"):
        v = decode("json", body)
        check("json: {\"message\":\"Hello, World!\"}", v == {"message": "Hello, World!"},
              "got %r" % body)

    status, headers, body = srv.get("/db")
    if common("db", status, headers, "application/json"):
        v = decode("db", body)
        if check("db: one row {id, randomNumber}", is_world(v), "got %r" % body):
            check("db: the row as stored", db.worlds([v["id"]]).get(v["id"]) == v["randomNumber"],
                  "got %r" % v)

    # Clamping: TechEmpower's verifier asks these too.
    prefixes = ["/queries"] + (["/pipeline/queries"] if pipeline else [])
    for prefix in prefixes:
        for q, want in (("", 1), ("?queries=", 1), ("?queries=foo", 1), ("?queries=0", 1),
                        ("?queries=1", 1), ("?queries=20", 20), ("?queries=501", 500)):
            name = "%s%s" % (prefix, q)
            rows = verify_worlds(name, srv, db, prefix + q, want)
            if rows is not None:
                stored = db.worlds([w["id"] for w in rows])
                check(name + ": rows as stored",
                      all(stored.get(w["id"]) == w["randomNumber"] for w in rows),
                      "got %r" % rows[:3])

    status, headers, body = srv.get("/fortunes")
    if common("fortunes", status, headers, "text/html; charset=utf-8"):
        text = body.decode("utf-8", "replace")
        stored = [(int(i), m) for i, m in db.rows("SELECT id, message FROM fortune")]
        stored.append((0, "Additional fortune added at request time."))
        stored.sort(key=lambda f: f[1].encode("utf-8"))
        got = [(int(i), html.unescape(m)) for i, m in
               re.findall(r"<tr>\s*<td>\s*(\d+)\s*</td>\s*<td>(.*?)</td>\s*</tr>", text, re.S)]
        check("fortunes: page shape", re.match(
            r"\s*<!DOCTYPE html>\s*<html>\s*<head>\s*<title>Fortunes</title>\s*</head>\s*<body>\s*"
            r"<table>\s*<tr>\s*<th>id</th>\s*<th>message</th>\s*</tr>.*</table>\s*</body>\s*</html>\s*$",
            text, re.S | re.I) is not None, "got %r" % text[:200])
        check("fortunes: the 13 rows, sorted by message", got == stored,
              "got %r" % got)
        check("fortunes: HTML-escaped",
              "<script>" not in text and "&lt;script&gt;" in text and
              "aren't" not in text and ("aren&#39;t" in text or "aren&#x27;t" in text or
                                       "aren&apos;t" in text),
              "got %r" % text[:400])
        check("fortunes: UTF-8 kept", "フレームワークのベンチマーク" in text, "got %r" % text[-200:])

    prefixes = ["/updates"] + (["/pipeline/updates"] if pipeline else [])
    for prefix in prefixes:
        for q, want in (("?queries=1", 1), ("?queries=foo", 1), ("?queries=20", 20),
                        ("?queries=501", 500)):
            name = "%s%s" % (prefix, q)
            rows = verify_worlds(name, srv, db, prefix + q, want)
            if rows is not None:
                last = {w["id"]: w["randomNumber"] for w in rows}   # the last number a row got
                stored = db.worlds(list(last))
                bad = [(i, n, stored.get(i)) for i, n in last.items() if stored.get(i) != n]
                check(name + ": new numbers persisted", not bad,
                      "%d of %d rows differ (id, answered, stored): %r" % (len(bad), len(last), bad[:3]))

    print("%d failed" % len(FAILS) if FAILS else "all passed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
