#!/usr/bin/env bash
# make bench: runs every benchmark in one go and prints one table of figures
# and ratios. The binaries come from build/bench/ (the Makefile builds them
# from scripts/bench/*.c and *.cpp before calling this script).
#
# How it measures (see /work/shared/PEERS.md): servers run pinned to CPU 0
# and the load generator to CPU 1; on two cores the generator saturates
# before a fast server does, so servers are compared per server CPU-second
# (messages / (utime + stime) of the server over the measured window, which
# loadgen reads from /proc/PID/stat itself). Every figure is the median of
# several runs; each run waits for the machine to go quiet first, and an
# echo or HTTP run during which other processes took over 10% of a CPU is
# repeated (a bounded number of times; the table says how many stayed
# disturbed).
#
# Files: this script holds the settings and what the sections share (peer
# start-up, interleaved runs, ratios); scripts/bench/lib.sh the helpers of
# every bench script (processes, ports, waits, /proc readings, numbers,
# table output); scripts/bench/sections/NAME.sh one section each:
#   switch.sh     context switch: ch_ctx_switch, boost, swapcontext (switch)
#   spawn.sh      coroutine spawn, yield and timers (spawn)
#   echo.sh       echo peers and the echo section (echo)
#   http.sh       HTTP peers, wrk runs and the http section (http)
#   http2.sh      HTTP/2 with h2load, h2c and TLS, against nginx+lua (http2)
#   idle.sh       idle connections, raw echo and HTTP keep-alive (idle,
#                 idle_http), which share the code holding the connections
#   prio.sh       scheduling and affinity: runs prio_bench.sh (prio)
#   grpc.sh       gRPC unary echo against C++ grpc++ and Python grpcio with
#                 h2load (grpc), and cohost.protobuf's codec against
#                 python3-protobuf's (protobuf)
#   kv.sh         examples/kv against redis-server (kv)
#   techempower.sh  TechEmpower's six tests against nginx+lua+pgmoon, on
#                 a PostgreSQL of its own (techempower; PGMOON_DIR names
#                 pgmoon, else the peer rows say "peer absent")
#
# Peers (section echo and idle): the C servers in build/bench/, cohost's
# Lua echo (build/cohost examples/echo.lua), nginx with OpenResty's Lua
# module as a raw socket echo (scripts/bench/nginx_echo.conf, Debian nginx
# + libnginx-mod-http-lua) and Tarantool's socket echo
# (scripts/bench/tarantool_echo.lua). A peer that is not installed is
# skipped with a note. Generated configs go under build/bench/; every
# server is killed on exit, nginx's worker included.
#
# Peers (section http and idle_http): examples/hello.lua served by
# build/cohost with one worker, nginx + OpenResty's Lua module answering
# from content_by_lua (scripts/bench/nginx_http_lua.conf) and plain nginx
# answering from its config (nginx_http_plain.conf), loaded by wrk (Debian)
# with one thread pinned to the other CPU; req/CPU-s as for echo, with the
# server's CPU time read around each wrk run.
#
# Environment:
#   BENCH_QUICK=1        about two minutes instead of about fifteen (http:
#                        3 x 3 s at 50 connections instead of 3 x 10 s at 50,
#                        1000 and 10000)
#   BENCH_SECTIONS="..." sections to run, in order, separated by spaces or
#                        commas (default: switch spawn echo idle http
#                        idle_http http2 grpc protobuf prio kv techempower)
#   BENCH_ECHO_CONNS     connection counts for echo (default "50 1000 10000")
#   BENCH_ECHO_SECS, BENCH_ECHO_REPS   seconds per echo run, runs per peer
#   BENCH_ECHO_PEERS     echo servers, in table order (default "lua lua_uring
#                        ch epoll uring nginx tarantool"; also lua_copy,
#                        ch_copy)
#   BENCH_IDLE_CONNS     idle connections per server (default 15000 for
#                        idle, 10000 for idle_http)
#   BENCH_IDLE_PEERS     idle servers, in table order (default "lua lua_copy
#                        ch ch_copy nginx tarantool"; *_copy: --stack-mode
#                        copy / CH_STACK_MODE=copy)
#   BENCH_IDLE_REPS      idle runs per server (default 3, quick 1)
#   BENCH_IDLE_HTTP_PEERS  idle_http servers (default "cohost cohost_copy
#                        nginxlua")
#   BENCH_IDLE_HTTP_WARM requests on one connection before idle_http's first
#                        reading (default 2000)
#   BENCH_HTTP_CONNS, BENCH_HTTP_SECS, BENCH_HTTP_REPS   wrk connection
#                        counts (default "50 1000 10000"), seconds, runs per server
#   BENCH_HTTP_PEERS     HTTP servers, in table order (default "cohost
#                        cohost_uring nginxlua nginx")
#   BENCH_HTTP_SCRIPT    cohost's HTTP server (default examples/hello.lua;
#                        takes its port as arg[1], GET / answers "hello")
#   BENCH_BASE_COHOST    another cohost binary (absolute, or relative to the
#                        directory make bench runs in), e.g. a clone's
#                        build/cohost, which finds its own lua/ beside it:
#                        every peer run by build/cohost (echo and idle: lua,
#                        lua_copy; http and idle_http: cohost) gets a twin
#                        NAME_base run by that binary with the same script,
#                        measured in the same interleaved runs, printed as
#                        a row "... (base)" below it with a note of the
#                        ratios new/base; results NAME_base.* and
#                        NAME.vs_NAME_base.* (prio_bench.sh does the same
#                        for its rows, http_profile.sh for its instruction
#                        count per request)
#
# Adding a section: write scripts/bench/sections/NAME.sh with a function
# section_NAME that calls title once and row (or its own printf) per line
# of the table, and add NAME to SECTIONS; lib.sh's helpers and the ones
# below are at hand. Adding an echo peer (Lua echo, nginx+lua, tarantool):
# write echo_start_NAME PORT in sections/echo.sh, which starts the server
# with start_server and sets PEER_LABEL, and if needed PEER_INIT (bytes
# loadgen sends once per connection first) and PEER_MEASURE
# (comma-separated pids whose CPU time counts, e.g. the nginx worker;
# default the started pid), then add NAME to ECHO_PEERS; a peer that runs
# $COHOST also goes in COHOST_PEERS to get its base twin. Figures also go
# to build/bench/results.txt as key=value lines.

set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/bench/lib.sh

RESULTS=$B/results.txt
TABLE=$B/table.txt
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log
: > "$RESULTS"
: > "$TABLE"
base_check || exit 1

QUICK=${BENCH_QUICK:-0}
SECTIONS=${BENCH_SECTIONS:-"switch spawn echo idle http idle_http http2 grpc protobuf prio kv techempower"}
COHOST_PEERS="lua lua_copy cohost cohost_copy"  # peers that run $COHOST: base twins
# shellcheck disable=SC2086  # word lists
ECHO_PEERS=$(with_base "$COHOST_PEERS" ${BENCH_ECHO_PEERS:-lua lua_uring ch epoll uring nginx tarantool})  # table order
ECHO_BASE=epoll                 # the one the others are divided by
ECHO_SUBJECT=lua                # compared with each of ECHO_VS below
ECHO_VS="epoll uring ch nginx tarantool"
# shellcheck disable=SC2086
IDLE_PEERS=$(with_base "$COHOST_PEERS" ${BENCH_IDLE_PEERS:-lua lua_copy ch ch_copy nginx tarantool})  # table order
IDLE_CONNS=${BENCH_IDLE_CONNS:-15000}
IDLE_HTTP_CONNS=${BENCH_IDLE_CONNS:-10000}
IDLE_PER_CLIENT=2500            # connections per idle_clients process
HTTP_PEERS=$(with_base "$COHOST_PEERS" ${BENCH_HTTP_PEERS:-cohost cohost_uring nginxlua nginx})  # table and run order
# shellcheck disable=SC2086
IDLE_HTTP_PEERS=$(with_base "$COHOST_PEERS" ${BENCH_IDLE_HTTP_PEERS:-cohost cohost_copy nginxlua})
IDLE_HTTP_WARM=${BENCH_IDLE_HTTP_WARM:-2000}   # requests before the first reading
HTTP_SCRIPT=${BENCH_HTTP_SCRIPT:-examples/hello.lua}

if [ "$QUICK" = 1 ]; then
  SW_N=2000000; SW_SLOW_N=200000; SW_RUNS=3     # round trips per run
  SPAWN_N=200000; TIMER_N=1000000; TIMER_RUNS=1; YIELD_N=1000000; MICRO_RUNS=3
  ECHO_CONNS=${BENCH_ECHO_CONNS:-"50"}; ECHO_SECS=${BENCH_ECHO_SECS:-2}
  ECHO_WARM=0.5; ECHO_REPS=${BENCH_ECHO_REPS:-3}
  HTTP_CONNS=${BENCH_HTTP_CONNS:-"50"}; HTTP_SECS=${BENCH_HTTP_SECS:-3}
  HTTP_REPS=${BENCH_HTTP_REPS:-3}; HTTP_WARM=1s
  IDLE_REPS=${BENCH_IDLE_REPS:-1}
  QUIET_MAX=2
else
  SW_N=10000000; SW_SLOW_N=1000000; SW_RUNS=5
  SPAWN_N=1000000; TIMER_N=1000000; TIMER_RUNS=3; YIELD_N=5000000; MICRO_RUNS=5
  # Five short runs rather than three long ones: run-to-run spread here is
  # about +-8%, and a median of five is steadier for the same total time.
  # 1,000 and 10,000 connections: issue 15's rows (the fairness batches
  # show at scale; 10,000 needs the 20,000-file limit lib.sh raises to).
  ECHO_CONNS=${BENCH_ECHO_CONNS:-"50 1000 10000"}; ECHO_SECS=${BENCH_ECHO_SECS:-3}
  ECHO_WARM=1; ECHO_REPS=${BENCH_ECHO_REPS:-5}
  # Three interleaved rounds of cohost, nginx+lua, nginx (issue 4).
  HTTP_CONNS=${BENCH_HTTP_CONNS:-"50 1000 10000"}; HTTP_SECS=${BENCH_HTTP_SECS:-10}
  HTTP_REPS=${BENCH_HTTP_REPS:-3}; HTTP_WARM=2s
  IDLE_REPS=${BENCH_IDLE_REPS:-3}
  QUIET_MAX=5
fi
CG_N1=100000; CG_N2=200000      # callgrind round trips; the difference counts

# need BIN...: all present in build/bench, or a "skipped" line.
need() {
  local b
  for b in "$@"; do
    if [ ! -x "$B/$b" ]; then
      note "skipped: $B/$b is missing (make build/bench/$b)"
      return 1
    fi
  done
}

# pinned CMD...: a micro-benchmark on SRV_CPU, killed after 120 s.
pinned() { taskset -c "$SRV_CPU" timeout -k 2 120 "$@" 2>> "$LOGS/micro.log"; }

# -- Peers -------------------------------------------------------------------

# A peer of section KIND (echo: also idle's; http: also idle_http's) is
# started by KIND_start_NAME PORT, which sets PEER_LABEL, and if needed
# PEER_INIT and PEER_MEASURE; NAME_base is NAME run by BASE_COHOST.
PEER_LABEL=""; PEER_INIT=""; PEER_MEASURE=""

# peer_known KIND PEER: true if there is a start function for PEER.
peer_known() { declare -F "${1}_start_${2%_base}" > /dev/null; }

# peer_start KIND PEER PORT: starts PEER and waits until it accepts on
# PORT; sets SRV_PID, PEER_LABEL, PEER_INIT and PEER_MEASURE (default
# SRV_PID). False, with what it started stopped, if it did not start.
peer_start() {
  local kind=$1 name=${2%_base} port=$3 ok=1 base=""
  PEER_LABEL=$2; PEER_INIT=""; PEER_MEASURE=""; SRV_PID=""
  if [ "$name" != "$2" ]; then
    base=1; COHOST=$BASE_COHOST; LOG_SUFFIX=_base
  fi
  "${kind}_start_$name" "$port" && wait_port "$port" "$SRV_PID" || ok=""
  if [ -n "$base" ]; then
    COHOST=build/cohost; LOG_SUFFIX=""
    PEER_LABEL=$(base_label "$PEER_LABEL")
  fi
  PEER_MEASURE=${PEER_MEASURE:-$SRV_PID}
  [ -n "$ok" ] && return 0
  [ -n "$SRV_PID" ] && stop_peer "$SRV_PID" "$PEER_MEASURE"
  return 1
}

# peers_start KIND PEER...: starts every PEER for a section in which all
# servers run for the whole section, idle (no CPU) while another is
# measured, so that the repetitions can interleave peers and drift in the
# machine hits all alike. Fills the caller's PORT, PID, MEASURE, LABEL and
# INIT arrays (bash's dynamic scope), notes the peers that did not start,
# and runs KIND_ready PEER PORT, if defined, on those that did (false:
# the peer is stopped and left out).
peers_start() {
  local kind=$1 peer port
  shift
  for peer in "$@"; do
    if ! peer_known "$kind" "$peer"; then
      log "unknown $kind peer $peer"; continue
    fi
    port=$(free_port)
    if ! peer_start "$kind" "$peer" "$port"; then
      note "skipped $peer: server did not start (see $LOGS)"
      continue
    fi
    if declare -F "${kind}_ready" > /dev/null && ! "${kind}_ready" "$peer" "$port"; then
      stop_peer "$SRV_PID" "$PEER_MEASURE"
      continue
    fi
    PORT[$peer]=$port; PID[$peer]=$SRV_PID; MEASURE[$peer]=$PEER_MEASURE
    LABEL[$peer]=$PEER_LABEL; INIT[$peer]=$PEER_INIT
  done
}

# peers_stop PEER...: stops the peers peers_start started.
peers_stop() {
  local peer
  for peer in "$@"; do
    [ -n "${PID[$peer]:-}" ] && stop_peer "${PID[$peer]}" "${MEASURE[$peer]}"
  done
  return 0
}

# -- Interleaved runs ----------------------------------------------------------

# measure KIND PEER CONNS REP: one run, KIND_once PEER CONNS REP, which
# prints a line of key=value words with other_cpu_s and secs; a run that
# shared the machine with other load is repeated, up to 3 attempts and
# RETRIES in all (the caller's budget of repeats, which bounds the time
# lost to others); if all stayed disturbed, DISTURBED[PEER.CONNS] counts
# one more. Sets LINE (not a subshell: the counts must stick).
measure() {
  local kind=$1 peer=$2 c=$3 r=$4 attempt
  for attempt in 1 2 3; do
    wait_quiet
    LINE=$("${kind}_once" "$peer" "$c" "$r")
    disturbed "$LINE" || break
    if [ "$attempt" = 3 ] || [ "$RETRIES" -le 0 ]; then
      DISTURBED[$peer.$c]=$(( ${DISTURBED[$peer.$c]:-0} + 1 ))
      break
    fi
    RETRIES=$(( RETRIES - 1 ))
    log "$kind $peer c=$c: $(kv other_cpu_s "$LINE") CPU-s used by other processes; again"
  done
}

# record PEER CONNS REP RATE_KEY PERCPU_KEY: LINE's figures into the
# caller's arrays: RATE, P99, PERCPU and CPU (srv_cpu_s as a share of the
# run, in %) per PEER.CONNS, RUN (per CPU-second) and RUNRATE per
# PEER.CONNS.REP for the per-run ratios.
record() {
  local k=$1.$2 rate percpu
  rate=$(kv "$4" "$LINE"); percpu=$(kv "$5" "$LINE")
  RATE[$k]+=" $rate"
  P99[$k]+=" $(kv p99_us "$LINE")"
  PERCPU[$k]+=" $percpu"
  RUN[$k.$3]=$percpu
  RUNRATE[$k.$3]=$rate
  CPU[$k]+=" $(awk -v c="$(kv srv_cpu_s "$LINE")" -v s="$(kv secs "$LINE")" \
    'BEGIN { if (s > 0) printf "%.0f", 100 * c / s }')"
}

# run_ratio ARRAY A B CONNS REPS: the median over repetitions 1..REPS of
# ARRAY[A.CONNS.r] / ARRAY[B.CONNS.r] (ARRAY is the section's RUN or
# RUNRATE, seen here through bash's dynamic scope). The runs of one
# repetition follow each other within seconds, while the speed of this VM
# drifts by up to 30% over minutes, so pairs compare better than medians
# taken over the whole section.
run_ratio() {
  local -n arr=$1
  local r ratios=""
  for r in $(seq "$5"); do
    ratios+=" $(ratio "${arr[$2.$4.$r]:-}" "${arr[$3.$4.$r]:-}" 3)"
  done
  median $ratios
}

# vs_base SECTION PEER CONNS REPS UNIT: under the row of a base twin PEER
# (NAME_base), if NAME ran too, a note with NAME/PEER per server
# CPU-second and per second (medians of per-run ratios) and of the p99
# (ratio of medians); the same as SECTION.NAME.cCONNS.vs_PEER.{UNIT_per_cpu_s,
# UNIT_s,p99} results.
vs_base() {
  local sec=$1 peer=$2 c=$3 reps=$4 unit=$5 new=${2%_base} pc ms p9
  [ "$peer" != "$new" ] && [ -n "${PORT[$new]:-}" ] || return 0
  pc=$(fmt "$(run_ratio RUN "$new" "$peer" "$c" "$reps")" 2)
  ms=$(fmt "$(run_ratio RUNRATE "$new" "$peer" "$c" "$reps")" 2)
  p9=$(ratio "$(median ${P99[$new.$c]:-})" "$(median ${P99[$peer.$c]:-})")
  note "  ^ new/base: ${pc}x $unit/CPU-s, ${ms}x $unit/s, ${p9}x p99"
  result "$sec.$new.c$c.vs_$peer.${unit}_per_cpu_s" "$pc"
  result "$sec.$new.c$c.vs_$peer.${unit}_s" "$ms"
  result "$sec.$new.c$c.vs_$peer.p99" "$p9"
}

for f in scripts/bench/sections/*.sh; do
  # shellcheck source=/dev/null
  . "$f"
done

# -- Main ----------------------------------------------------------------------

start=$SECONDS
for s in ${SECTIONS//,/ }; do
  if ! declare -F "section_$s" > /dev/null; then
    log "unknown section $s"; continue
  fi
  "section_$s"
done

{
  printf 'cohost bench (%s): %s, %s CPUs, Linux %s, %s\n' \
    "$([ "$QUICK" = 1 ] && echo quick || echo full)" \
    "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)" "$(nproc)" \
    "$(uname -r)" "$(date -u +%Y-%m-%dT%H:%MZ)"
  [ -n "$BASE_COHOST" ] &&
    echo "new: $(describe build/cohost); base: $(describe "$BASE_COHOST")"
  cat "$TABLE"
  echo
  [ "$BUSIEST" -gt 0 ] && echo "warning: the machine was up to $BUSIEST% busy before some runs"
  echo "($(( SECONDS - start )) s; figures as key=value in $RESULTS, logs in $LOGS)"
}
