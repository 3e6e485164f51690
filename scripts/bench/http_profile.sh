#!/usr/bin/env bash
# Where cohost's HTTP server spends its time: build/cohost SCRIPT (default
# examples/hello.lua, one worker, pinned to CPU 0) loaded by wrk -t1 -cCONNS
# with keep-alive GET / (pinned to CPU 1), seen three ways:
#   1. callgrind: user-space instructions per request (the difference
#      between runs of N1 and N2 requests, so start-up and shutdown cancel
#      out) and the top functions by self instructions of the larger run.
#      Kernel work (system calls, loopback TCP) is not in it. The same
#      difference for nginx+lua and plain nginx (the bench's configs with
#      master_process off, so that callgrind sees the one process) puts
#      the figure beside theirs.
#   2. strace -c: system calls per request, by name (one run of N1).
#   3. perf record -e cpu-clock (a software clock: these VMs have no
#      hardware counters, so `perf stat -e instructions` is "not
#      supported") for SECS seconds at full speed: the share of samples per
#      shared object (kernel, cohost, LuaJIT, libc, JIT code) and the top
#      symbols, kernel included.
# A part whose tool is missing is skipped. Output in build/bench/profile/.
#
#   bash scripts/bench/http_profile.sh [SCRIPT [N1 N2 [TOP [SECS]]]]
#   (defaults: examples/hello.lua 20000 40000 15 5; HTTP_PROFILE_CONNS=50
#   sets the wrk connections; HTTP_PROFILE_QUICK=1 runs cohost's callgrind
#   figure alone, for the edit-measure loop; BENCH_BASE_COHOST=another
#   cohost binary, as for run.sh, puts that binary's callgrind figure, run
#   in turn with build/cohost's on the same SCRIPT, and new/base beside it)
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/bench/lib.sh

BENCH_TAG=http_profile
SCRIPT=${1:-examples/hello.lua}
CONNS=${HTTP_PROFILE_CONNS:-50}   # wrk connections
QUICK=${HTTP_PROFILE_QUICK:-}
N1=${2:-20000}; N2=${3:-40000}; TOP=${4:-15}; SECS=${5:-5}
OUT=build/bench/profile
LOGS=$OUT                         # start_server's logs
mkdir -p "$OUT"
command -v wrk > /dev/null || { log "wrk is missing"; exit 1; }
[ -x build/cohost ] || { log "build/cohost is missing (make)"; exit 1; }
base_check || exit 1

# serve NAME BIN WRAPPER...: starts WRAPPER BIN -w 1 SCRIPT PORT on CPU 0,
# output in $OUT/NAME.log, and waits (30 s at most: valgrind starts
# slowly) until it accepts; sets SRV (the wrapper's pid) and PORT.
serve() {
  local name=$1 bin=$2
  shift 2
  PORT=$(free_port)
  start_server "$name" "$@" "$bin" -w 1 "$SCRIPT" "$PORT"
  SRV=$SRV_PID
  wait_port "$PORT" "$SRV" 30 && return 0
  log "server did not start (see $OUT/$name.log)"
  return 1
}

# unserve: SIGTERM to cohost (strace's child; valgrind runs it in its own
# process), and up to 30 s for the wrapper to write its output.
unserve() {
  local kid
  kid=$(cat "/proc/$SRV/task/$SRV/children" 2>/dev/null)
  [ -n "$kid" ] && kill -TERM "${kid%% *}" 2>/dev/null
  stop_server "$SRV" 30
}

# load N LOG: wrk until N answers (scripts/bench/http_count.lua); fails
# unless all N were 200.
load() {
  HTTP_COUNT=$1 taskset -c "$CLI_CPU" timeout 310 wrk -t1 -c"$CONNS" -d300s --timeout 30s \
    -s scripts/bench/http_count.lua "http://127.0.0.1:$PORT/" > "$2" 2>&1
  grep -q "^requests=$1 non200=0" "$2" && return 0
  log "wrk did not get $1 answers 200 (see $2)"
  return 1
}

# callgrind_run N [BIN SUFFIX]: Ir total of one callgrind run of BIN
# (default build/cohost) serving N requests; its files are named with
# SUFFIX after "callgrind" or "valgrind".
callgrind_run() {
  local n=$1 bin=${2:-build/cohost} sfx=${3:-}
  serve "valgrind$sfx.$n" "$bin" valgrind --tool=callgrind \
    --callgrind-out-file="$OUT/callgrind$sfx.$n" || return 1
  load "$n" "$OUT/wrk.callgrind$sfx.$n.log" || { unserve; return 1; }
  unserve
  collected "$OUT/valgrind$sfx.$n.log"
}

# per_request A B: (B - A) / (N2 - N1), rounded, or nothing if either
# total is missing.
per_request() {
  awk -v a="$1" -v b="$2" -v n=$(( N2 - N1 )) 'BEGIN {
    if (a > 0 && b > 0) printf "%.0f\n", (b - a) / n }'
}

# nginx_ir CONF N: Ir total of nginx (scripts/bench/CONF, one process)
# under callgrind serving N requests.
nginx_ir() {
  local conf=$1 n=$2 dir=$PWD/$OUT/nginx_${1%.conf} ok=""
  mkdir -p "$dir"
  PORT=$(free_port)
  sed -e "s|@PORT@|$PORT|g" -e "s|@PREFIX@|$dir|g" -e "s|@FILES@|1024|g" \
    -e "s|^master_process on;.*|master_process off;|" \
    "scripts/bench/$conf" > "$dir/nginx.conf" || return 1
  start_server "nginx_${conf%.conf}/valgrind.$n" valgrind --tool=callgrind \
    --callgrind-out-file="$dir/callgrind.$n" nginx -p "$dir/" -c nginx.conf -e stderr
  SRV=$SRV_PID
  wait_port "$PORT" "$SRV" 30 && load "$n" "$dir/wrk.$n.log" && ok=1
  kill -QUIT "$SRV" 2>/dev/null   # nginx's graceful stop
  wait "$SRV" 2>/dev/null
  forget "$SRV"
  [ -n "$ok" ] && collected "$dir/valgrind.$n.log"
}

echo "cohost $SCRIPT, 1 worker on CPU 0; wrk -t1 -c$CONNS keep-alive GET / on CPU 1"

if command -v valgrind > /dev/null && command -v callgrind_annotate > /dev/null; then
  echo; echo "== callgrind: user-space instructions ($N1 and $N2 requests)"
  # The base binary's runs come in turn with build/cohost's.
  b1=""; b2=""
  if i1=$(callgrind_run "$N1") && { [ -z "$BASE_COHOST" ] || b1=$(callgrind_run "$N1" "$BASE_COHOST" _base); } &&
     i2=$(callgrind_run "$N2") && { [ -z "$BASE_COHOST" ] || b2=$(callgrind_run "$N2" "$BASE_COHOST" _base); }; then
    n=$(per_request "$i1" "$i2")
    [ -n "$n" ] && echo "instructions per request: $n ($i2 - $i1 over $(( N2 - N1 )) requests)"
    if [ -n "$BASE_COHOST" ]; then
      b=$(per_request "$b1" "$b2")
      echo "base $(describe "$BASE_COHOST"): ${b:--} instructions per request ($b2 - $b1); new/base $(ratio "$n" "$b")x"
    fi
    echo "top $TOP by self instructions, run of $N2 (start-up included):"
    callgrind_annotate "$OUT/callgrind.$N2" 2>/dev/null |
      awk '/file:function/ { on = 1; getline; next } on && NF { print } on && !NF && n++ { exit }' |
      head -n "$TOP"
    echo "(callgrind_annotate $OUT/callgrind.$N2 for all; --inclusive=yes for callers)"
    if [ -z "$QUICK" ] && command -v nginx > /dev/null; then
      for conf in nginx_http_lua.conf nginx_http_plain.conf; do
        if i1=$(nginx_ir "$conf" "$N1") && i2=$(nginx_ir "$conf" "$N2"); then
          n=$(per_request "$i1" "$i2")
          [ -n "$n" ] && echo "$conf: $n instructions per request"
        fi
      done
    fi
  fi
else
  echo "skipped callgrind: valgrind is missing"
fi

[ -n "$QUICK" ] && exit 0

if command -v strace > /dev/null; then
  echo; echo "== strace -c: system calls per request ($N1 requests, start-up included)"
  if serve strace build/cohost strace -f -c -o "$OUT/strace.txt"; then
    if load "$N1" "$OUT/wrk.strace.log"; then
      unserve
      awk -v n="$N1" '$1 ~ /^[0-9.]+$/ && NF >= 5 {
          calls = $4; name = $NF; if (name == "total") next
          printf "  %-16s %8.3f per request (%s calls)\n", name, calls / n, calls }' \
        "$OUT/strace.txt" | sort -k2 -g -r | head -n 10
    else
      unserve
    fi
  fi
else
  echo "skipped strace: strace is missing"
fi

if command -v perf > /dev/null; then
  echo; echo "== perf record -e cpu-clock: ${SECS} s at full speed, samples of the server"
  if serve perf build/cohost; then
    taskset -c "$CLI_CPU" perf record -q -e cpu-clock -p "$SRV" -o "$OUT/perf.data" -- \
      wrk -t1 -c"$CONNS" -d"${SECS}s" "http://127.0.0.1:$PORT/" > "$OUT/wrk.perf.log" 2>&1
    unserve
    grep -E "Requests/sec" "$OUT/wrk.perf.log"
    echo "by shared object:"
    perf report -i "$OUT/perf.data" --stdio --sort dso 2>/dev/null |
      grep -E '^ +[0-9.]+%' | head -n 8
    echo "top $TOP symbols:"
    perf report -i "$OUT/perf.data" --stdio --sort dso,sym 2>/dev/null |
      grep -E '^ +[0-9.]+%' | head -n "$TOP"
  fi
else
  echo "skipped perf: perf is missing"
fi
exit 0
