#!/usr/bin/env python3
"""Clients of scripts/soak.sh that reset their connection mid-request.

    reset_clients.py PORT SECONDS [RATE]

For SECONDS, about RATE times a second (default 50), opens a connection to
127.0.0.1:PORT, sends part of a request and closes with SO_LINGER 0, so the
server sees a TCP RST instead of a FIN. The steps cycle through:

  head   half of a request head
  body   a whole head announcing 4000 bytes of body, then 1000 of them
  reply  a whole GET /big, then the reset while the 256 KiB answer is
         being written (after reading a few bytes of it, or none)

Nothing about the server's answers is checked: these clients misbehave on
purpose, and only the well-behaved clients' failures fail a soak. Prints
one line at the end:  reset attempts=N refused=N
"""
import socket
import struct
import sys
import time

LINGER0 = struct.pack("ii", 1, 0)  # l_onoff=1, l_linger=0: close sends RST

STEPS = [
    b"GET /json HTTP/1.1\r\nHost: soak\r\nUser-Ag",
    b"POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: 4000\r\n\r\n" + b"b" * 1000,
    b"GET /big HTTP/1.1\r\nHost: soak\r\n\r\n",
]


def one(port, i):
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
        step = i % len(STEPS)
        s.sendall(STEPS[step])
        if step == 2 and i % 2:
            s.recv(100)
        else:
            # Give the server time to start on what it got.
            time.sleep(0.002)
    finally:
        s.close()


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 50.0
    end = time.monotonic() + seconds
    attempts = refused = 0
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            one(port, attempts)
        except OSError:
            refused += 1
        attempts += 1
        pause = 1.0 / rate - (time.monotonic() - t)
        if pause > 0:
            time.sleep(pause)
    print(f"reset attempts={attempts} refused={refused}", flush=True)


if __name__ == "__main__":
    main()
