#!/usr/bin/env bash
# Image host throughput (examples/imagehost, one worker): downloads/s and
# uploads/s of a 100 KiB PNG at 50 connections, with the server's RSS.
#
#   scripts/bench/imagehost_bench.sh
#
# wrk (Debian) runs pinned to CPU 1 and the server to CPU 0, as in
# scripts/bench/run.sh; each figure is the median of REPS runs, with the
# server's CPU time over the run (utime + stime from /proc/PID/stat).
#   download  GET /i/<id>: res:sendfile with ETag (no conditional header,
#             so every answer is a 200 with the 100 KiB body)
#   upload    POST /images, raw body, each request different bytes (a
#             counter after the PNG's end): streamed to tmp/, hashed, two
#             fsyncs on the thread pool (file, directory), renamed, a row
#             inserted; so this is bounded by the disk's fsync rate
#   dedup     POST /images of the same bytes every time: streamed, hashed,
#             found in the database, the temp file dropped (no fsync)
#
# Environment: SECS (default 10; uploads run at most 5 s, since every new
# upload stays on disk), REPS (default 3), CONNS (default 50).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
BENCH_TAG=imagehost_bench

SECS=${SECS:-10}
UP_SECS=$(( SECS < 5 ? SECS : 5 ))
REPS=${REPS:-3}
CONNS=${CONNS:-50}

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
[ -x build/cohost ] || { echo "build/cohost is missing: run make" >&2; exit 1; }

work=$(mktemp -d)
CLEANUP_DIRS+=("$work")
LOGS=$work                        # server.log

# A 100 KiB PNG of random pixels (incompressible, so it stays that size).
python3 - "$work/img.png" <<'EOF'
import os, struct, sys, zlib
w, h = 160, 213      # 160 * 3 + 1 bytes per row, 213 rows: about 100 KiB
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
rows = b"".join(b"\0" + os.urandom(w * 3) for _ in range(h))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b""))
open(sys.argv[1], "wb").write(png)
EOF

port=$(free_port)
start_server server build/cohost examples/imagehost/main.lua --port "$port" --dir "$work/data"
pid=$SRV_PID
wait_port "$port" "$pid" || { log "the server did not start:"; cat "$work/server.log" >&2; exit 1; }
rss_start=$(rss_kib "$pid")

id=$(curl -s --data-binary @"$work/img.png" -H 'Content-Type: image/png' \
       "http://127.0.0.1:$port/images" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
size=$(stat -c %s "$work/img.png")

# wrk scripts: the same body every time, or the body plus a counter.
cat >"$work/dedup.lua" <<EOF
local f = io.open("$work/img.png", "rb"); local body = f:read("*a"); f:close()
wrk.method, wrk.body = "POST", body
wrk.headers["Content-Type"] = "image/png"
EOF
cat >"$work/upload.lua" <<EOF
local f = io.open("$work/img.png", "rb"); local body = f:read("*a"); f:close()
local threads, n = 0, 0   -- tid is set per thread by setup
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
function request()
  n = n + 1
  return wrk.format("POST", "/images", { ["Content-Type"] = "image/png" },
                    body .. tid .. "-" .. n)
end
EOF

# run NAME SECONDS wrk-args...: one line with the medians of req/s, MiB/s,
# p99 and requests per server CPU-second.
run() {
  local name=$1 secs=$2; shift 2
  local rates=() cpus=() p99s=() non2xx=0
  for _ in $(seq "$REPS"); do
    local t0 out t1 rate bad
    t0=$(cpu_ticks "$pid")
    out=$(taskset -c "$CLI_CPU" wrk -t1 -c"$CONNS" -d"${secs}s" --latency "$@")
    t1=$(cpu_ticks "$pid")
    rate=$(awk '/^Requests\/sec/ { print $2 }' <<<"$out")
    bad=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
    non2xx=$(( non2xx + ${bad:-0} ))
    rates+=("$rate")
    p99s+=("$(fmt "$(ratio "$(wrk_us "$(awk '$1 == "99%" { print $2 }' <<<"$out")")" 1000 6)" 2)")
    cpus+=("$(awk -v r="$rate" -v s="$secs" -v d=$(( t1 - t0 )) -v hz="$HZ" \
               'BEGIN { if (d > 0) printf "%.0f", r * s / (d / hz); else print 0 }')")
  done
  local rate
  rate=$(median "${rates[@]}")
  printf "%-9s %9.0f req/s %8.1f MiB/s   p99 %8s ms %9s req/CPU-s   non-2xx %d\n" "$name" "$rate" \
    "$(awk -v r="$rate" -v b="$size" 'BEGIN { print r * b / 1048576 }')" \
    "$(median "${p99s[@]}")" "$(median "${cpus[@]}")" "$non2xx"
}

echo "imagehost: $size-byte PNG, $CONNS connections, median of $REPS runs; server on CPU 0, wrk on CPU 1"
run download "$SECS" "http://127.0.0.1:$port/i/$id"
run dedup "$UP_SECS" -s "$work/dedup.lua" "http://127.0.0.1:$port/images"
run upload "$UP_SECS" -s "$work/upload.lua" "http://127.0.0.1:$port/images"
stored=$(ls "$work/data/images" | wc -l)
echo "RSS: $rss_start KiB at start, $(rss_kib "$pid") KiB at the end ($stored images stored)"
