#!/usr/bin/env python3
# RSS per idle HTTP/2 connection (docs/http2.md#costs): opens N h2c
# connections (prior knowledge) to 127.0.0.1:PORT from this process, each
# after one whole GET / (preface, SETTINGS, HEADERS; the answer read to
# its END_STREAM), then compares the server PID's VmRSS before and after.
# Kernel socket buffers are not in VmRSS. Usage:
#   h2_idle_rss.py PORT N PID   ->  "h2 idle: N conns, X KiB per connection"
import socket, struct, sys, time

port, n, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def rss_kib():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

def frame(ty, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ty, flags]) + struct.pack(">I", sid) + payload

def lit(name, value):   # HPACK literal without indexing, new name, no Huffman
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value

hdrs = lit(b":method", b"GET") + lit(b":scheme", b"http") + lit(b":path", b"/") + lit(b":authority", b"x")
hello = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 5, 1, hdrs))

def one():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(hello)
    buf = b""
    while True:   # frames until stream 1 ends
        while len(buf) >= 9:
            ln = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + ln:
                break
            ty, fl, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff
            buf = buf[9 + ln:]
            if ty == 4 and not fl & 1:
                s.sendall(frame(4, 1, 0, b""))   # ACK the server's SETTINGS
            if sid == 1 and ty in (0, 1) and fl & 1:
                return s
        d = s.recv(65536)
        if not d:
            raise SystemExit("closed before the answer")
        buf += d

before = rss_kib()
conns = [one() for _ in range(n)]
time.sleep(1)   # the last answers' buffers settle (no state to wait for)
after = rss_kib()
print("h2 idle: %d conns, %.2f KiB per connection (VmRSS %d -> %d KiB)" % (n, (after - before) / n, before, after))
for c in conns:
    c.close()
