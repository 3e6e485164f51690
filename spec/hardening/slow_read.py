#!/usr/bin/env python3
"""A client of spec/hardening_spec.lua that asks for a big answer and does
not read it.

    slow_read.py PORT HOLD [close]

Shrinks its receive buffer before connecting (so the kernel cannot take
the answer off the server's hands), sends GET /big (with Connection: close
when asked), prints "sent", reads nothing for HOLD seconds, then reads
what is there until EOF, reset or 5 s of silence and prints:
got=BYTES end=eof|reset|timeout
"""
import socket
import sys
import time

port, hold = int(sys.argv[1]), float(sys.argv[2])
close = len(sys.argv) > 3 and sys.argv[3] == "close"
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", port))
s.sendall(b"GET /big HTTP/1.1\r\nHost: hardening\r\n"
          + (b"Connection: close\r\n" if close else b"") + b"\r\n")
print("sent", flush=True)
time.sleep(hold)
s.settimeout(5)
got, end = 0, "eof"
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += len(d)
except ConnectionResetError:
    end = "reset"
except socket.timeout:
    end = "timeout"
print("got=%d end=%s" % (got, end), flush=True)
