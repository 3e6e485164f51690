#!/usr/bin/env python3
"""The client of spec/hardening_memory_spec.lua: one burst of connections
that the server must forget once they are gone, from a process of its own
(its fds count against neither the server nor the spec runner).

    burst.py half-open PORT N HOLD
        opens N connections, each sending a request head that never ends,
        prints "open COUNT", holds them HOLD seconds, closes them all and
        prints "closed".
    burst.py tls PORT N
        completes N TLS handshakes and sends nothing, prints "open COUNT",
        then reads each until the server closes it (its header timeout)
        and prints "closed".
    burst.py ws PORT N HOLD
        opens N WebSocket connections to /ws, waits for each one's 101,
        prints "open COUNT", holds them HOLD seconds, closes them all (no
        close frame: the TCP connection goes) and prints "closed".

Only socket and ssl from Python's standard library: a plain client, as a
scanner or a crowd of stalled browsers would be.
"""
import base64
import os
import resource
import socket
import ssl
import sys
import time

kind, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

HEAD = (b"GET /some/path?q=1 HTTP/1.1\r\nHost: example\r\nUser-Agent: burst\r\n"
        + b"X-Pad: " + b"p" * 300 + b"\r\n")

socks = []
if kind == "half-open":
    hold = float(sys.argv[4])
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            s.sendall(HEAD)
            socks.append(s)
        except OSError:
            pass
    print("open", len(socks), flush=True)
    time.sleep(hold)
    for s in socks:
        s.close()
elif kind == "tls":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    pending = []
    for _ in range(n):
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=20)
        except OSError:
            continue
        raw.setblocking(False)
        pending.append(ctx.wrap_socket(raw, do_handshake_on_connect=False))
    # Every ClientHello first, then the rest of each handshake as answers
    # come: the server works on all of them at once.
    deadline = time.time() + 60
    while pending and time.time() < deadline:
        waiting = []
        for s in pending:
            try:
                s.do_handshake()
                socks.append(s)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                waiting.append(s)
            except (ssl.SSLError, OSError):
                s.close()
        pending = waiting
        if pending:
            time.sleep(0.01)
    print("open", len(socks), flush=True)
    for s in socks:
        s.setblocking(True)
        s.settimeout(60)
        try:
            while s.recv(4096):
                pass
        except (ssl.SSLError, OSError):
            pass
        s.close()
elif kind == "ws":
    hold = float(sys.argv[4])
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            s.sendall(b"GET /ws HTTP/1.1\r\nHost: example\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                      b"Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)) + b"\r\n\r\n")
            socks.append(s)
        except OSError:
            pass
    # Every request first, then the answers: the server upgrades them all
    # at once.
    upgraded = []
    for s in socks:
        d = b""
        try:
            while b"\r\n\r\n" not in d:
                more = s.recv(4096)
                if not more:
                    break
                d += more
        except OSError:
            pass
        if d.startswith(b"HTTP/1.1 101"):
            upgraded.append(s)
    print("open", len(upgraded), flush=True)
    time.sleep(hold)
    for s in socks:
        s.close()
else:
    sys.exit("unknown kind " + kind)
print("closed", flush=True)
