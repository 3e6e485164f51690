#!/usr/bin/env python3
"""Clients of spec/hardening_spec.lua that reset their connection in the
middle of an upload.

    reset_upload.py PORT TOTAL BATCH

TOTAL clients, BATCH at a time: each connects, sends a POST /upload head
announcing 1000000 bytes and 10000 of them; once the whole batch is in,
the server's figures are read from GET /stats (the peak is reported, so
the spec knows the uploads were being served at once), then every socket
of the batch closes with SO_LINGER 0, so the server sees a TCP RST. Prints:
attempts=N errors=N peak_coros=N peak_conns=N
"""
import socket
import struct
import sys
import time

LINGER0 = struct.pack("ii", 1, 0)  # l_onoff=1, l_linger=0: close sends RST
HEAD = (b"POST /upload HTTP/1.1\r\nHost: hardening\r\n"
        b"Content-Length: 1000000\r\n\r\n")
PART = b"u" * 10000


def stats(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /stats HTTP/1.1\r\nHost: hardening\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
    s.close()
    coros, conns = data.split(b"\r\n\r\n", 1)[1].split()
    return int(coros), int(conns)


def main():
    port, total, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    attempts = errors = peak_coros = peak_conns = 0
    while attempts < total:
        socks = []
        for _ in range(min(batch, total - attempts)):
            attempts += 1
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
                s.sendall(HEAD + PART)
                socks.append(s)
            except OSError:
                errors += 1
        time.sleep(0.05)  # the server reads what came
        c, n = stats(port)
        peak_coros, peak_conns = max(peak_coros, c), max(peak_conns, n)
        for s in socks:
            s.close()
    print("attempts=%d errors=%d peak_coros=%d peak_conns=%d"
          % (attempts, errors, peak_coros, peak_conns), flush=True)


main()
