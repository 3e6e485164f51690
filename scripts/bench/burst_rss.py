#!/usr/bin/env python3
# A server's RSS before, during and after one burst of connections, with
# no traffic after it (docs/benchmarks.md#memory-after-a-burst-issue-26):
#   burst_rss.py COHOST KIND N HOLD [cohost options...]
# starts COHOST -w 1 [options] on an app of its own (plain and TLS
# listeners on 127.0.0.1, a WebSocket echo at /ws, 1 MiB at /big), serves
# one request, then makes the burst from this process:
#   h1   N connections, each sending a request head that never ends
#   tls  N TLS handshakes completed, nothing sent after (the server's
#        header timeout, HOLD s, ends them; this waits for its closes)
#   h2   N streams asking for /big on h2c connections of 100, with a
#        flow-control window of 0 (python3-h2)
#   ws   N WebSocket connections, upgraded and silent
# holds it HOLD s after the last one opened, closes everything, and
# prints the start, the peak and VmRSS each second for 12 s after the
# last close. Needs a nofile limit above N (it raises its own soft limit).
import base64, os, resource, socket, ssl, subprocess, sys, tempfile, time

cohost, kind, n, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
opts = sys.argv[5:]
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

tmp = tempfile.mkdtemp(prefix="burst_rss.")
cert, key = tmp + "/cert.pem", tmp + "/key.pem"
subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost"],
               check=True, capture_output=True)
APP = """
local http = require "cohost.http"
local websocket = require "cohost.websocket"
local function handler(req, res)
  if req.path == "/ws" then
    local ws = websocket.upgrade(req, res)
    if not ws then return end
    while true do
      local data, typ = ws:recv()
      if not data or typ == "close" then break end
    end
    return ws:close()
  end
  if req.path == "/big" then return res:send(string.rep("x", 1048576)) end
  res:send("ok")
end
local plain = http.listen("127.0.0.1:0", handler, { header_timeout = %d })
local tls = http.listen("127.0.0.1:0", handler, { header_timeout = %d, ssl_cert = "%s", ssl_key = "%s" })
io.write(select(2, plain:addr()) .. " " .. select(2, tls:addr()) .. "\\n")
io.stdout:flush()
""" % (60, max(1, round(hold)) if kind == "tls" else 60, cert, key)
with open(tmp + "/app.lua", "w") as f:
    f.write(APP)
p = subprocess.Popen([cohost, "-w", "1"] + opts + [tmp + "/app.lua"], stdout=subprocess.PIPE)
port, tport = map(int, p.stdout.readline().split())

def rss():
    for line in open("/proc/%d/status" % p.pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

def get():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()

get()
time.sleep(1.5)   # past the trim of its own start-up
start = rss()
socks = []
if kind == "h1":
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-A: b")
        socks.append(s)
elif kind == "ws":
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
                  + base64.b64encode(os.urandom(16)) + b"\r\n\r\n")
        socks.append(s)
    for s in socks:
        d = b""
        while b"\r\n\r\n" not in d:
            d += s.recv(4096)
        assert d.startswith(b"HTTP/1.1 101"), d
elif kind == "tls":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    pending = []
    for _ in range(n):
        raw = socket.create_connection(("127.0.0.1", tport))
        raw.setblocking(False)
        pending.append(ctx.wrap_socket(raw, do_handshake_on_connect=False))
    while pending:
        waiting = []
        for s in pending:
            try:
                s.do_handshake()
                socks.append(s)
            except ssl.SSLWantReadError:
                waiting.append(s)
            except (ssl.SSLError, OSError):
                pass
        pending = waiting
        time.sleep(0.01)
elif kind == "h2":
    import h2.config, h2.connection, h2.settings
    for c in range((n + 99) // 100):
        s = socket.create_connection(("127.0.0.1", port))
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        for i in range(min(100, n - c * 100)):
            conn.send_headers(1 + 2 * i, [(":method", "GET"), (":path", "/big"), (":scheme", "http"),
                                          (":authority", "x")], end_stream=True)
        s.sendall(conn.data_to_send())
        socks.append(s)
else:
    sys.exit("unknown kind " + kind)
peak, t0 = rss(), time.time()
while time.time() < t0 + hold:
    time.sleep(0.25)
    peak = max(peak, rss())
for s in socks:
    if kind == "tls":   # the server's header timeout ends them
        s.setblocking(True)
        s.settimeout(60)
        try:
            while s.recv(4096):
                pass
        except (ssl.SSLError, OSError):
            pass
    s.close()
closed, after = time.time(), []
for i in range(1, 13):
    time.sleep(max(0, closed + i - time.time()))
    after.append("%.1f" % rss())
print("%s N=%d hold=%gs %s: start %.1f MB, peak %.1f MB, after the last close (1..12 s): %s"
      % (kind, n if kind == "h2" else len(socks), hold, " ".join(opts), start, peak, " ".join(after)))
p.kill()
p.wait()
for f in ("app.lua", "cert.pem", "key.pem"):
    os.remove(tmp + "/" + f)
os.rmdir(tmp)
