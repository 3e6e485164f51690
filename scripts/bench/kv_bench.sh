#!/usr/bin/env bash
# examples/kv against a real redis-server with redis-benchmark, side by side.
#
#   bash scripts/bench/kv_bench.sh            (N=200000 ROUNDS=3 by default)
#   N=50000 ROUNDS=1 bash scripts/bench/kv_bench.sh
#
# Both servers run one thread pinned to CPU 0 (taskset), redis-benchmark runs
# on CPU 1, so the client never steals the server's core. Two set-ups:
#   - no log: kv --appendonly no, redis-server --save "" --appendonly no
#   - everysec: both keep an append-only log fsynced once a second
# Each is measured without pipelining and with -P 16, 50 connections,
# ROUNDS times with kv and redis interleaved (so drift in the machine hits
# both); the table shows the median ops/s of each, kv/redis, the server
# CPU time per request (utime + stime from /proc, which a busy machine
# disturbs less than ops/s), and redis's CPU per request over kv's ("per
# CPU": the ratio per server CPU-second, which the goals are set in).
#
# Then one more set-up, without a log: 100,000 "SET key:i v" and "GET key:i"
# pairs written at once with redis-cli --pipe, as inline commands (plain
# text lines) and as RESP, ROUNDS times each, interleaved; the table shows
# the median ops/s and server CPU per request, as above.
#
# Then scripting, without a log: EVALSHA of a script loaded with SCRIPT
# LOAD (SCRIPT_BODY, default one SET of its key), through redis-benchmark,
# without pipelining and with -P 16, as above (and, as the tests above,
# always the one key: redis-benchmark without -r).
#
# Last, issue 35's data types, without a log: ZUNIONSTORE of two sorted
# sets of 100 members (50 shared) and SETBIT of bit 8191 of 10,000
# bitmaps (random keys) with redis-benchmark, without pipelining and with
# -P 16 (5 N requests: N take a tenth of a second); SETBIT at BITS_N random offsets below 2^23 into one bitmap
# through redis-cli --pipe (redis-benchmark's random numbers are
# zero-padded, which no bit offset may be); then BITCOUNT of that 1 MiB
# bitmap, whole and a 64 KiB range, with redis-benchmark. Same table.
#
# Environment: N, ROUNDS, TESTS (default set,get,incr,lpush,lpop,sadd,zadd,hset),
# PIPE_N (the pairs per --pipe run, default 100000), SCRIPT_BODY, BITS_N
# (SETBITs per --pipe run, default 200000), SECTIONS (default
# "tests,everysec,pipe,evalsha,types": which set-ups run), SERVER_CPU and
# CLIENT_CPU (default 0 and 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh

BENCH_TAG=kv_bench
N=${N:-200000}
ROUNDS=${ROUNDS:-3}
TESTS=${TESTS:-set,get,incr,lpush,lpop,sadd,zadd,hset}
PIPE_N=${PIPE_N:-100000}
SCRIPT_BODY=${SCRIPT_BODY:-"return redis.call('set', KEYS[1], ARGV[1])"}
BITS_N=${BITS_N:-200000}
SECTIONS=${SECTIONS:-tests,everysec,pipe,evalsha,types}
SRV_CPU=${SERVER_CPU:-0}
CLI_CPU=${CLIENT_CPU:-1}

for p in redis-server redis-benchmark redis-cli taskset; do
  command -v "$p" >/dev/null || { echo "kv_bench: $p is missing (apt-get install redis-server util-linux)" >&2; exit 1; }
done
[ -x build/cohost ] || make -s all

work=$(mktemp -d)
CLEANUP_DIRS+=("$work")
LOGS=$work                        # the servers' logs

wait_ready() {
  for _ in $(seq 1 100); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "kv_bench: nothing answers on port $1" >&2
  exit 1
}

# start_kv PORT DIR ARGS... / start_redis PORT DIR ARGS... (the last one
# started is in $spid).
start_kv() {
  local port=$1 dir=$2; shift 2
  start_server "kv.$port" build/cohost examples/kv/main.lua --port "$port" --dir "$dir" "$@"
  spid=$SRV_PID
  wait_ready "$port"
}
start_redis() {
  local port=$1 dir=$2; shift 2
  start_server "redis.$port" redis-server --port "$port" --dir "$dir" --save "" "$@"
  spid=$SRV_PID
  wait_ready "$port"
}

# bench PORT PID PIPELINE -> "TEST rps cpu_us_per_request" lines, one
# redis-benchmark run per test, in the order given (lpop pops what lpush
# pushed).
bench() {
  redis-cli -p "$1" flushall >/dev/null
  local t a b rps
  for t in ${TESTS//,/ }; do
    a=$(cpu_ticks "$2")
    rps=$(taskset -c "$CLI_CPU" redis-benchmark -p "$1" -t "$t" -n "$N" -c 50 -P "$3" --csv 2>/dev/null |
      awk -F'"' 'NR > 1 && $2 != "" { print $4 }')
    b=$(cpu_ticks "$2")
    awk -v t="$t" -v r="$rps" -v c=$((b - a)) -v hz="$HZ" -v n="$N" \
      'BEGIN { printf "%s %s %.3f\n", toupper(t), r, c * 1e6 / hz / n }'
  done
}

# run LABEL KV_PORT KV_PID REDIS_PORT REDIS_PID: interleaved rounds, then
# the table.
# shellcheck disable=SC2046  # median takes one value a word
run() {
  local label=$1 kvp=$2 kvpid=$3 rp=$4 rpid=$5
  for P in 1 16; do
    : >"$work/kv.res"; : >"$work/redis.res"
    for _ in $(seq 1 "$ROUNDS"); do
      bench "$kvp" "$kvpid" "$P" >>"$work/kv.res"
      bench "$rp" "$rpid" "$P" >>"$work/redis.res"
    done
    printf '%-9s %-6s %-6s %11s %11s %6s %9s %9s %7s\n' "$label" "-P $P" test "kv ops/s" "redis ops/s" \
      ratio "kv us/op" "redis us/op" "per CPU"
    for t in ${TESTS//,/ }; do
      t=$(echo "$t" | tr a-z A-Z)
      k=$(median $(awk -v t="$t" '$1 == t { print $2 }' "$work/kv.res"))
      r=$(median $(awk -v t="$t" '$1 == t { print $2 }' "$work/redis.res"))
      kc=$(median $(awk -v t="$t" '$1 == t { print $3 }' "$work/kv.res"))
      rc=$(median $(awk -v t="$t" '$1 == t { print $3 }' "$work/redis.res"))
      awk -v l="$label" -v p="-P $P" -v t="$t" -v k="$k" -v r="$r" -v kc="$kc" -v rc="$rc" \
        'BEGIN { printf "%-9s %-6s %-6s %11.0f %11.0f %6.2f %9.2f %9.2f %7.2f\n", l, p, t, k, r, k / r, kc, rc, (kc > 0 ? rc / kc : 0) }'
    done
  done
}

echo "kv_bench: redis-benchmark -t $TESTS -n $N -c 50 [-P 16], servers on CPU $SRV_CPU," \
     "client on CPU $CLI_CPU, median of $ROUNDS"
echo "kv_bench: $(redis-server --version | cut -d' ' -f1-3), cohost $(build/cohost -v 2>&1 | head -1)"

section() { [[ ",$SECTIONS," == *",$1,"* ]]; }

if section tests; then
kvp=$(free_port); rp=$(free_port)
mkdir -p "$work/kv0" "$work/redis0"
start_kv "$kvp" "$work/kv0" --appendonly no; kvpid=$spid
start_redis "$rp" "$work/redis0" --appendonly no; rpid=$spid
run "no-log" "$kvp" "$kvpid" "$rp" "$rpid"
fi

if section everysec; then
kvp=$(free_port); rp=$(free_port)
mkdir -p "$work/kv1" "$work/redis1"
start_kv "$kvp" "$work/kv1" --appendonly yes --appendfsync everysec; kvpid=$spid
start_redis "$rp" "$work/redis1" --appendonly yes --appendfsync everysec; rpid=$spid
run "everysec" "$kvp" "$kvpid" "$rp" "$rpid"
fi

# pipe PORT PID FILE -> "rps cpu_us_per_request": FILE through redis-cli
# --pipe (2 * PIPE_N requests), on the client's CPU.
pipe() {
  local a b t0 t1
  redis-cli -p "$1" flushall >/dev/null
  a=$(cpu_ticks "$2")
  t0=$(date +%s.%N)
  taskset -c "$CLI_CPU" redis-cli -p "$1" --pipe <"$3" >/dev/null
  t1=$(date +%s.%N)
  b=$(cpu_ticks "$2")
  awk -v n=$((2 * PIPE_N)) -v t0="$t0" -v t1="$t1" -v c=$((b - a)) -v hz="$HZ" \
    'BEGIN { printf "%.0f %.3f\n", n / (t1 - t0), c * 1e6 / hz / n }'
}

if section pipe; then
awk -v n="$PIPE_N" 'BEGIN { for (i = 0; i < n; i++) printf "SET key:%d v\r\nGET key:%d\r\n", i, i }' \
  >"$work/inline.txt"
awk -v n="$PIPE_N" 'BEGIN { for (i = 0; i < n; i++) { k = "key:" i
  printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", length(k), k, length(k), k } }' \
  >"$work/resp.txt"

kvp=$(free_port); rp=$(free_port)
mkdir -p "$work/kv2" "$work/redis2"
start_kv "$kvp" "$work/kv2" --appendonly no; kvpid=$spid
start_redis "$rp" "$work/redis2" --appendonly no; rpid=$spid
printf '%-9s %-6s %-6s %11s %11s %6s %9s %9s %7s\n' "pipe" "$PIPE_N" format "kv ops/s" "redis ops/s" \
  ratio "kv us/op" "redis us/op" "per CPU"
for f in inline resp; do
  : >"$work/kv.res"; : >"$work/redis.res"
  for _ in $(seq 1 "$ROUNDS"); do
    pipe "$kvp" "$kvpid" "$work/$f.txt" >>"$work/kv.res"
    pipe "$rp" "$rpid" "$work/$f.txt" >>"$work/redis.res"
  done
  # shellcheck disable=SC2046  # median takes one value a word
  k=$(median $(awk '{ print $1 }' "$work/kv.res")); r=$(median $(awk '{ print $1 }' "$work/redis.res"))
  # shellcheck disable=SC2046
  kc=$(median $(awk '{ print $2 }' "$work/kv.res")); rc=$(median $(awk '{ print $2 }' "$work/redis.res"))
  awk -v f="$f" -v n="$PIPE_N" -v k="$k" -v r="$r" -v kc="$kc" -v rc="$rc" \
    'BEGIN { printf "%-9s %-6s %-6s %11.0f %11.0f %6.2f %9.2f %9.2f %7.2f\n", "pipe", n, f, k, r, k / r, kc, rc, (kc > 0 ? rc / kc : 0) }'
done
fi

# evalsha PORT PID PIPELINE -> "EVALSHA rps cpu_us_per_request": the
# script loaded, then called with a key and a value.
evalsha() {
  local sha a b rps
  redis-cli -p "$1" flushall >/dev/null
  sha=$(redis-cli -p "$1" script load "$SCRIPT_BODY")
  a=$(cpu_ticks "$2")
  rps=$(taskset -c "$CLI_CPU" redis-benchmark -p "$1" -n "$N" -c 50 -P "$3" --csv \
    evalsha "$sha" 1 key:__rand_int__ v 2>/dev/null | awk -F'"' 'NR > 1 && $2 != "" { print $4 }')
  b=$(cpu_ticks "$2")
  awk -v r="$rps" -v c=$((b - a)) -v hz="$HZ" -v n="$N" 'BEGIN { printf "EVALSHA %s %.3f\n", r, c * 1e6 / hz / n }'
}

if section evalsha; then
kvp=$(free_port); rp=$(free_port)
mkdir -p "$work/kv3" "$work/redis3"
start_kv "$kvp" "$work/kv3" --appendonly no; kvpid=$spid
start_redis "$rp" "$work/redis3" --appendonly no; rpid=$spid
echo "kv_bench: EVALSHA of: $SCRIPT_BODY"
for P in 1 16; do
  : >"$work/kv.res"; : >"$work/redis.res"
  for _ in $(seq 1 "$ROUNDS"); do
    evalsha "$kvp" "$kvpid" "$P" >>"$work/kv.res"
    evalsha "$rp" "$rpid" "$P" >>"$work/redis.res"
  done
  printf '%-9s %-6s %-7s %11s %11s %6s %9s %9s %7s\n' "no-log" "-P $P" test "kv ops/s" "redis ops/s" \
    ratio "kv us/op" "redis us/op" "per CPU"
  # shellcheck disable=SC2046  # median takes one value a word
  k=$(median $(awk '{ print $2 }' "$work/kv.res")); r=$(median $(awk '{ print $2 }' "$work/redis.res"))
  # shellcheck disable=SC2046
  kc=$(median $(awk '{ print $3 }' "$work/kv.res")); rc=$(median $(awk '{ print $3 }' "$work/redis.res"))
  awk -v p="-P $P" -v k="$k" -v r="$r" -v kc="$kc" -v rc="$rc" \
    'BEGIN { printf "%-9s %-6s %-7s %11.0f %11.0f %6.2f %9.2f %9.2f %7.2f\n", "no-log", p, "EVALSHA", k, r, k / r, kc, rc, (kc > 0 ? rc / kc : 0) }'
done
fi

# -- Issue 35's data types -----------------------------------------------------

# types_data PORT: the sorted sets za and zb (100 members each, 50 shared)
# and an empty keyspace besides.
# shellcheck disable=SC2046  # the score-member pairs are words
types_data() {
  redis-cli -p "$1" flushall >/dev/null
  redis-cli -p "$1" zadd za $(awk 'BEGIN { for (i = 1; i <= 100; i++) printf "%d m%d ", i, i }') >/dev/null
  redis-cli -p "$1" zadd zb $(awk 'BEGIN { for (i = 51; i <= 150; i++) printf "%d m%d ", 2 * i, i }') >/dev/null
}

# one_bench PORT PID PIPELINE COMMAND... -> "rps cpu_us_per_request": one
# redis-benchmark run of the command.
one_bench() {
  local port=$1 pid=$2 pipeline=$3 a b rps; shift 3
  a=$(cpu_ticks "$pid")
  rps=$(taskset -c "$CLI_CPU" redis-benchmark -p "$port" -n "$N" -c 50 -P "$pipeline" --csv "$@" 2>/dev/null |
    awk -F'"' 'NR > 1 && $2 != "" { print $4 }')
  b=$(cpu_ticks "$pid")
  awk -v r="$rps" -v c=$((b - a)) -v hz="$HZ" -v n="$N" 'BEGIN { printf "%s %.3f\n", r, c * 1e6 / hz / n }'
}

# bits_pipe PORT PID -> "rps cpu_us_per_request": the SETBIT file through
# redis-cli --pipe, onto a fresh bitmap.
bits_pipe() {
  local a b t0 t1
  redis-cli -p "$1" del bits >/dev/null
  a=$(cpu_ticks "$2")
  t0=$(date +%s.%N)
  taskset -c "$CLI_CPU" redis-cli -p "$1" --pipe <"$work/setbit.txt" >/dev/null
  t1=$(date +%s.%N)
  b=$(cpu_ticks "$2")
  awk -v n="$BITS_N" -v t0="$t0" -v t1="$t1" -v c=$((b - a)) -v hz="$HZ" \
    'BEGIN { printf "%.0f %.3f\n", n / (t1 - t0), c * 1e6 / hz / n }'
}

# types_row LABEL: the medians of kv.res and redis.res ("rps cpu" lines) as
# one table row.
# shellcheck disable=SC2046  # median takes one value a word
types_row() {
  local k r kc rc
  k=$(median $(awk '{ print $1 }' "$work/kv.res")); r=$(median $(awk '{ print $1 }' "$work/redis.res"))
  kc=$(median $(awk '{ print $2 }' "$work/kv.res")); rc=$(median $(awk '{ print $2 }' "$work/redis.res"))
  awk -v l="$1" -v k="$k" -v r="$r" -v kc="$kc" -v rc="$rc" \
    'BEGIN { printf "%-23s %11.0f %11.0f %6.2f %9.2f %9.2f %7.2f\n", l, k, r, k / r, kc, rc, (kc > 0 ? rc / kc : 0) }'
}

if section types; then
  awk -v n="$BITS_N" 'BEGIN { srand(35); for (i = 0; i < n; i++) { o = int(rand() * 8388608)
    printf "*4\r\n$6\r\nSETBIT\r\n$4\r\nbits\r\n$%d\r\n%d\r\n$1\r\n1\r\n", length(o ""), o } }' >"$work/setbit.txt"
  kvp=$(free_port); rp=$(free_port)
  mkdir -p "$work/kv4" "$work/redis4"
  start_kv "$kvp" "$work/kv4" --appendonly no; kvpid=$spid
  start_redis "$rp" "$work/redis4" --appendonly no; rpid=$spid
  types_data "$kvp"; types_data "$rp"
  printf '%-23s %11s %11s %6s %9s %9s %7s\n' "types (no log)" "kv ops/s" "redis ops/s" ratio "kv us/op" "redis us/op" "per CPU"
  for P in 1 16; do
    : >"$work/kv.res"; : >"$work/redis.res"
    for _ in $(seq 1 "$ROUNDS"); do
      one_bench "$kvp" "$kvpid" "$P" zunionstore zdst 2 za zb >>"$work/kv.res"
      one_bench "$rp" "$rpid" "$P" zunionstore zdst 2 za zb >>"$work/redis.res"
    done
    types_row "ZUNIONSTORE 100+100 -P $P"
  done
  for P in 1 16; do
    : >"$work/kv.res"; : >"$work/redis.res"
    for _ in $(seq 1 "$ROUNDS"); do
      # Pipelined, N requests take a tenth of a second, a few ticks of
      # CPU time (10 ms each): five times as many.
      N=$((P > 1 ? N * 5 : N)) one_bench "$kvp" "$kvpid" "$P" -r 10000 setbit bm:__rand_int__ 8191 1 >>"$work/kv.res"
      N=$((P > 1 ? N * 5 : N)) one_bench "$rp" "$rpid" "$P" -r 10000 setbit bm:__rand_int__ 8191 1 >>"$work/redis.res"
    done
    types_row "SETBIT 10k keys -P $P"
  done
  : >"$work/kv.res"; : >"$work/redis.res"
  for _ in $(seq 1 "$ROUNDS"); do
    bits_pipe "$kvp" "$kvpid" >>"$work/kv.res"
    bits_pipe "$rp" "$rpid" >>"$work/redis.res"
  done
  types_row "SETBIT --pipe $BITS_N"
  for range in "" "0 65535"; do
    : >"$work/kv.res"; : >"$work/redis.res"
    for _ in $(seq 1 "$ROUNDS"); do
      # shellcheck disable=SC2086  # the range is two words or none
      one_bench "$kvp" "$kvpid" 1 bitcount bits $range >>"$work/kv.res"
      # shellcheck disable=SC2086
      one_bench "$rp" "$rpid" 1 bitcount bits $range >>"$work/redis.res"
    done
    types_row "BITCOUNT 1MiB ${range:-whole}"
  done
fi
