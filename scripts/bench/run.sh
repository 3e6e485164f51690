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
# echo run during which other processes took over 10% of a CPU is repeated
# (a bounded number of times; the table says how many stayed disturbed).
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
#   BENCH_QUICK=1        about two minutes instead of about eleven (http:
#                        3 x 3 s at 50 connections instead of 3 x 10 s at 50
#                        and 1000)
#   BENCH_SECTIONS="..." sections to run, in order, separated by spaces or
#                        commas (default: switch spawn echo idle http idle_http)
#   BENCH_ECHO_CONNS     connection counts for echo (default "50 1000")
#   BENCH_ECHO_SECS, BENCH_ECHO_REPS   seconds per echo run, runs per peer
#   BENCH_ECHO_PEERS     echo servers, in table order (default: all)
#   BENCH_IDLE_CONNS     idle connections per server (default 15000 for
#                        idle, 10000 for idle_http)
#   BENCH_IDLE_PEERS     idle servers, in table order (default "lua lua_copy
#                        ch ch_copy nginx tarantool"; *_copy: --stack-mode
#                        copy / CH_STACK_MODE=copy)
#   BENCH_IDLE_REPS      idle runs per server (default 3, quick 1)
#   BENCH_HTTP_CONNS, BENCH_HTTP_SECS, BENCH_HTTP_REPS   wrk connection
#                        counts (default "50 1000"), seconds, runs per server
#   BENCH_HTTP_SCRIPT    cohost's HTTP server (default examples/hello.lua;
#                        takes its port as arg[1], GET / answers "hello")
#
# Adding a section: write a function section_NAME that calls title once and
# row (or its own printf) per line of the table, and add NAME to SECTIONS;
# start_server, free_port, wait_port, wait_quiet, median and ratio are the
# helpers. Adding an echo peer (Lua echo, nginx+lua, tarantool): write
# echo_start_NAME PORT, which starts the server with start_server and sets
# PEER_LABEL, and if needed PEER_INIT (bytes loadgen sends once per
# connection first) and PEER_MEASURE (comma-separated pids whose CPU time
# counts, e.g. the nginx worker; default the started pid), then add NAME to
# ECHO_PEERS. Figures also go to build/bench/results.txt as key=value lines.

set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1

B=build/bench
LOGS=$B/logs
RESULTS=$B/results.txt
TABLE=$B/table.txt
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log
: > "$RESULTS"
: > "$TABLE"

QUICK=${BENCH_QUICK:-0}
SECTIONS=${BENCH_SECTIONS:-"switch spawn echo idle http idle_http prio"}
ECHO_PEERS=${BENCH_ECHO_PEERS:-"lua ch epoll nginx tarantool"}  # table order
ECHO_BASE=epoll                 # the one the others are divided by
ECHO_SUBJECT=lua                # compared with each of ECHO_VS below
ECHO_VS="epoll ch nginx tarantool"
IDLE_PEERS=${BENCH_IDLE_PEERS:-"lua lua_copy ch ch_copy nginx tarantool"}  # table order
IDLE_CONNS=${BENCH_IDLE_CONNS:-15000}
IDLE_HTTP_CONNS=${BENCH_IDLE_CONNS:-10000}
IDLE_PER_CLIENT=2500            # connections per idle_clients process
HTTP_PEERS="cohost nginxlua nginx"  # table order and order of the runs
IDLE_HTTP_PEERS="cohost nginxlua"
HTTP_SCRIPT=${BENCH_HTTP_SCRIPT:-examples/hello.lua}
HZ=$(getconf CLK_TCK)           # /proc/PID/stat's unit of CPU time
SRV_CPU=0                       # servers and micro-benchmarks
CLI_CPU=1                       # load generators
if [ "$(nproc)" -lt 2 ]; then CLI_CPU=0; fi

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
  ECHO_CONNS=${BENCH_ECHO_CONNS:-"50 1000"}; ECHO_SECS=${BENCH_ECHO_SECS:-3}
  ECHO_WARM=1; ECHO_REPS=${BENCH_ECHO_REPS:-5}
  # Three interleaved rounds of cohost, nginx+lua, nginx (issue 4).
  HTTP_CONNS=${BENCH_HTTP_CONNS:-"50 1000"}; HTTP_SECS=${BENCH_HTTP_SECS:-10}
  HTTP_REPS=${BENCH_HTTP_REPS:-3}; HTTP_WARM=2s
  IDLE_REPS=${BENCH_IDLE_REPS:-3}
  QUIET_MAX=5
fi
CG_N1=100000; CG_N2=200000      # callgrind round trips; the difference counts

# 1000 connections take 1000 descriptors in each of server and generator,
# and the idle section's 15,000 take as many in the server: raise the soft
# open-files limit to the hard one. Servers inherit it.
ulimit -n "$(ulimit -Hn)" 2>/dev/null
FILES=$(ulimit -n)
[ "$FILES" = unlimited ] && FILES=1048576

# -- Processes ---------------------------------------------------------------

PIDS=()                         # every server started; killed on exit

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$p" 2>/dev/null
  done
  PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server NAME CMD...: runs CMD pinned to SRV_CPU in the background,
# output in $LOGS/NAME.log (LOG_PREFIX before NAME if set); sets SRV_PID
# (taskset execs, so it is CMD's pid).
LOG_PREFIX=""
start_server() {
  local name=$1; shift
  taskset -c "$SRV_CPU" "$@" > "$LOGS/$LOG_PREFIX$name.log" 2>&1 &
  SRV_PID=$!
  PIDS+=("$SRV_PID")
}

stop_server() {
  local p=$1 keep=() q
  kill -TERM "$p" 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$p" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  for q in "${PIDS[@]}"; do [ "$q" = "$p" ] || keep+=("$q"); done
  PIDS=("${keep[@]}")
}

# A loopback port nobody listens on, below the ephemeral range so that it
# never collides with the generator's own connections.
free_port() {
  local low p
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
  while :; do
    p=$(( 20000 + RANDOM % (low - 20000) ))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# wait_port PORT PID: until something accepts on PORT (5 s at most), or
# PID dies. The probe connection is closed at once; echo servers shrug.
wait_port() {
  for _ in $(seq 100); do
    kill -0 "$2" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# Waits until both CPUs are nearly idle (under 10% busy over 0.3 s), at
# most QUIET_MAX seconds; remembers the worst load seen for the footer.
BUSIEST=0
wait_quiet() {
  local end=$(( SECONDS + QUIET_MAX )) a b busy
  while :; do
    a=$(head -1 /proc/stat); sleep 0.3; b=$(head -1 /proc/stat)
    busy=$(awk -v a="$a" -v b="$b" 'BEGIN {
      split(a, x); split(b, y); t = 0
      for (i = 2; i <= 9; i++) t += y[i] - x[i]
      idle = (y[5] - x[5]) + (y[6] - x[6])
      print (t > 0 ? int(100 * (t - idle) / t) : 0) }')
    [ "$busy" -lt 10 ] && return 0
    if [ $SECONDS -ge $end ]; then
      [ "$busy" -gt "$BUSIEST" ] && BUSIEST=$busy
      return 0
    fi
  done
}

# disturbed LOADGEN_LINE: true if other processes used more than 10% of a
# CPU during the measured window (loadgen's other_cpu_s).
disturbed() {
  awk -v o="$(kv other_cpu_s "$1")" -v s="$(kv secs "$1")" \
    'BEGIN { exit !(o != "" && s > 0 && o > 0.1 * s) }'
}

# -- Numbers -----------------------------------------------------------------

# kv KEY LINE: the value of KEY=value in a line of key=value words.
kv() { tr ' ' '\n' <<< "$2" | sed -n "s/^$1=//p" | head -1; }

# median V...: the middle value (the mean of the two middle ones if even);
# empty arguments (failed runs) are skipped; "-" if nothing is left.
median() {
  printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' | sort -g |
    awk '{ v[NR] = $1 } END {
      if (NR == 0) { print "-"; exit }
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      print m }'
}

# ratio A B [DIGITS]: A/B, or "-" if either is missing.
ratio() {
  awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
    if (a !~ /^-?[0-9.]+$/ || b !~ /^-?[0-9.]+$/ || b + 0 == 0) print "-"
    else printf "%.*f\n", d, a / b }'
}

fmt() { awk -v v="$1" -v d="${2:-1}" 'BEGIN {
  if (v ~ /^-?[0-9.]+$/) printf "%.*f\n", d, v; else print "-" }'; }

result() { echo "$1=$2" >> "$RESULTS"; }

# title TITLE: a section title in the table. row COLUMNS...: one table line.
title() { printf '\n== %s\n' "$1" >> "$TABLE"; }
row() { printf "  %-32s %10s %-14s %s\n" "$@" >> "$TABLE"; }
note() { printf '  %s\n' "$*" >> "$TABLE"; }

log() { printf 'bench: %s\n' "$*" >&2; }

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

# -- Context switch ------------------------------------------------------------

# callgrind_ir CMD...: instructions executed by CMD under callgrind.
callgrind_ir() {
  timeout -k 2 120 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$@" 2>&1 >/dev/null | sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}

# insn_per_switch CMD...: CMD takes ROUND_TRIPS 0 as its last two words.
insn_per_switch() {
  local i1 i2
  i1=$(callgrind_ir "$@" "$CG_N1" 0)
  i2=$(callgrind_ir "$@" "$CG_N2" 0)
  [ -n "$i1" ] && [ -n "$i2" ] || { echo "-"; return; }
  awk -v a="$i1" -v b="$i2" -v n=$(( 2 * (CG_N2 - CG_N1) )) \
    'BEGIN { printf "%.1f\n", (b - a) / n }'
}

section_switch() {
  title "Context switch: ns per switch, median of $SW_RUNS runs (round trip / 2)"
  need switch switch_boost || return
  log "switch"
  local ch bo uc chd bod line
  wait_quiet
  line=$(pinned "$B/switch" ch "$SW_N" "$SW_RUNS"); ch=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch_boost" "$SW_N" "$SW_RUNS"); bo=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch" ucontext "$SW_SLOW_N" "$SW_RUNS"); uc=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch" ch "$SW_SLOW_N" "$SW_RUNS" dirty); chd=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch_boost" "$SW_SLOW_N" "$SW_RUNS" dirty); bod=$(kv ns_per_switch "$line")
  row "cohost ch_ctx_switch" "$(fmt "$ch" 2)" "ns" "$SW_N round trips per run"
  row "boost jump_fcontext" "$(fmt "$bo" 2)" "ns" "cohost/boost $(ratio "$ch" "$bo")x"
  row "glibc swapcontext" "$(fmt "$uc" 1)" "ns" "swapcontext/cohost $(ratio "$uc" "$ch" 1)x"
  row "cohost, MXCSR flags differ" "$(fmt "$chd" 1)" "ns" "one side did floating point (see switch.c)"
  row "boost, MXCSR flags differ" "$(fmt "$bod" 1)" "ns" "cohost/boost $(ratio "$chd" "$bod")x"
  result switch.cohost.ns "$ch"; result switch.boost.ns "$bo"
  result switch.swapcontext.ns "$uc"; result switch.cohost_mxcsr_differ.ns "$chd"
  result switch.boost_mxcsr_differ.ns "$bod"

  if command -v valgrind > /dev/null; then
    log "switch: callgrind"
    local ich ibo
    ich=$(insn_per_switch "$B/switch" ch)
    ibo=$(insn_per_switch "$B/switch_boost")
    row "cohost instructions" "$ich" "insn/switch" "callgrind, $CG_N2 minus $CG_N1 round trips, loop included"
    row "boost instructions" "$ibo" "insn/switch" "cohost/boost $(ratio "$ich" "$ibo")x"
    result switch.cohost.insn "$ich"; result switch.boost.insn "$ibo"
  else
    note "skipped instruction counts: valgrind is missing"
  fi
}

# -- Coroutines and timers -------------------------------------------------------

section_spawn() {
  title "Runtime: median of runs on one core"
  need spawn || return
  local line v
  log "spawn"
  wait_quiet
  line=$(pinned "$B/spawn" spawn "$SPAWN_N" 100 "$MICRO_RUNS"); v=$(kv ns_per_coro "$line")
  row "spawn + run + exit" "$(fmt "$v")" "ns/coroutine" "batches of 100, $SPAWN_N coroutines, stack pool ($(kv stacks_free "$line") stacks kept)"
  result spawn.ns "$v"
  line=$(pinned "$B/spawn" spawn "$SPAWN_N" 1 "$MICRO_RUNS"); v=$(kv ns_per_coro "$line")
  row "spawn + run + exit, one by one" "$(fmt "$v")" "ns/coroutine" "one ch_run per coroutine"
  result spawn.one_by_one.ns "$v"
  line=$(pinned "$B/spawn" yield "$YIELD_N" "$MICRO_RUNS"); v=$(kv ns_per_yield "$line")
  row "ch_yield, two coroutines" "$(fmt "$v")" "ns/yield" "through the ready queue"
  result yield.ns "$v"
  log "timers"
  wait_quiet
  line=$(pinned "$B/spawn" timers "$TIMER_N" "$TIMER_RUNS")
  v=$(kv ns_per_timer "$line")
  row "timers: start + expire" "$(fmt "$v")" "ns/timer" "$TIMER_N timers, random deadlines in 0-50 ms, CPU time"
  row "  of which start" "$(fmt "$(kv insert_ns "$line")")" "ns/timer" ""
  row "  of which expiry" "$(fmt "$(kv expire_ns "$line")")" "ns/timer" "wall $(kv wall_ms "$line") ms per run"
  result timers.ns "$v"; result timers.start.ns "$(kv insert_ns "$line")"
  result timers.expire.ns "$(kv expire_ns "$line")"
}

# -- Echo ------------------------------------------------------------------------

PEER_LABEL=""; PEER_INIT=""; PEER_MEASURE=""

echo_start_ch() {
  PEER_LABEL="cohost C (echo_ch)"
  start_server echo_ch "$B/echo_ch" "$1"
}

echo_start_epoll() {
  PEER_LABEL="plain epoll (echo_epoll)"
  start_server echo_epoll "$B/echo_epoll" "$1"
}

echo_start_lua() {
  PEER_LABEL="cohost Lua (echo.lua)"
  [ -x build/cohost ] || { log "build/cohost is missing (make all)"; return 1; }
  start_server echo_lua build/cohost ${STATUS_ADDR:+--status-addr "$STATUS_ADDR"} \
    examples/echo.lua "$1"
}

# The same two servers in copy-stack mode (docs/stacks.md): parked
# coroutines keep only the used part of their stack, on the heap.
# STATUS_ADDR (section idle): cohost's --status-addr, for the breakdown.
STATUS_ADDR=""
echo_start_lua_copy() {
  PEER_LABEL="cohost Lua, copy stacks"
  [ -x build/cohost ] || { log "build/cohost is missing (make all)"; return 1; }
  start_server echo_lua_copy build/cohost --stack-mode copy \
    ${STATUS_ADDR:+--status-addr "$STATUS_ADDR"} examples/echo.lua "$1"
}

echo_start_ch_copy() {
  PEER_LABEL="cohost C, copy stacks"
  CH_STACK_MODE=copy start_server echo_ch_copy "$B/echo_ch" "$1"
}

# nginx + lua: the request line the Lua handler answers, sent once per
# connection before any message; after it the connection is a raw echo.
NGINX_INIT=$'GET /echo HTTP/1.1\r\nHost: bench\r\n\r\n'
NGINX_MODS=/usr/lib/nginx/modules

echo_start_nginx() {
  PEER_LABEL="nginx+lua (ngx.req.socket)"
  if ! command -v nginx > /dev/null || [ ! -f "$NGINX_MODS/ngx_http_lua_module.so" ]; then
    log "nginx or libnginx-mod-http-lua is missing (scripts/deps.sh bench)"
    return 1
  fi
  # The prefix holds the generated config, the pid file and temp files.
  local dir=$PWD/$B/nginx worker=""
  mkdir -p "$dir"
  sed -e "s|@PORT@|$1|g" -e "s|@PREFIX@|$dir|g" -e "s|@FILES@|$FILES|g" \
    scripts/bench/nginx_echo.conf > "$dir/nginx.conf" || return 1
  start_server nginx nginx -p "$dir/" -c nginx.conf -e stderr
  # The master forks the worker, which inherits the CPU pin; its CPU time
  # is the server's. It also joins PIDS, should the master die first.
  for _ in $(seq 100); do
    kill -0 "$SRV_PID" 2>/dev/null || return 1
    worker=$(cat "/proc/$SRV_PID/task/$SRV_PID/children" 2>/dev/null)
    worker=${worker%% *}
    [ -n "$worker" ] && break
    sleep 0.05
  done
  [ -n "$worker" ] || return 1
  PIDS+=("$worker")
  PEER_INIT=$NGINX_INIT
  PEER_MEASURE=$worker
}

echo_start_tarantool() {
  PEER_LABEL="tarantool (socket.tcp_server)"
  command -v tarantool > /dev/null || { log "tarantool is missing (scripts/deps.sh bench)"; return 1; }
  start_server tarantool tarantool scripts/bench/tarantool_echo.lua "$1"
}

# stop_peer PID MEASURE: stops a server started by echo_start_*, and the
# processes measured for it (nginx's worker) should they outlive it.
stop_peer() {
  local p
  stop_server "$1"
  for p in ${2//,/ }; do
    [ "$p" = "$1" ] || stop_server "$p"
  done
}

# run_ratio ARRAY A B CONNS: the median over repetitions of ARRAY[A.CONNS.r]
# / ARRAY[B.CONNS.r] (ARRAY is section_echo's RUN or RUNRATE, seen here
# through bash's dynamic scope).
run_ratio() {
  local -n arr=$1
  local r ratios=""
  for r in $(seq "$ECHO_REPS"); do
    ratios+=" $(ratio "${arr[$2.$4.$r]:-}" "${arr[$3.$4.$r]:-}" 3)"
  done
  median $ratios
}

section_echo() {
  title "Echo, 64-byte messages: server on CPU $SRV_CPU, loadgen on CPU $CLI_CPU, median of $ECHO_REPS x ${ECHO_SECS} s"
  need loadgen || return
  local peer port c r line base=$ECHO_BASE
  local -A PORT PID MEASURE LABEL INIT RATE P99 PERCPU CPU FAILED DISTURBED RUN RUNRATE
  local attempt RETRIES=$(( 2 * ECHO_REPS ))  # bounds the time lost to others
  # Every peer runs for the whole section, idle (no CPU) while another is
  # measured, so the repetitions can interleave peers: drift in the machine
  # then hits all peers alike.
  for peer in $ECHO_PEERS; do
    port=$(free_port)
    PEER_LABEL=$peer; PEER_INIT=""; PEER_MEASURE=""
    if ! declare -F "echo_start_$peer" > /dev/null; then
      log "unknown echo peer $peer"; continue
    fi
    SRV_PID=""
    if ! "echo_start_$peer" "$port" || ! wait_port "$port" "$SRV_PID"; then
      note "skipped $peer: server did not start (see $LOGS)"
      [ -n "$SRV_PID" ] && stop_peer "$SRV_PID" "$PEER_MEASURE"
      continue
    fi
    PORT[$peer]=$port; PID[$peer]=$SRV_PID; MEASURE[$peer]=${PEER_MEASURE:-$SRV_PID}
    LABEL[$peer]=$PEER_LABEL; INIT[$peer]=$PEER_INIT
  done
  for r in $(seq "$ECHO_REPS"); do
    for c in $ECHO_CONNS; do
      for peer in $ECHO_PEERS; do
        [ -n "${PORT[$peer]:-}" ] || continue
        log "echo $peer c=$c run $r/$ECHO_REPS"
        for attempt in 1 2 3; do
          wait_quiet
          line=$(taskset -c "$CLI_CPU" timeout -k 2 "$(( ${ECHO_SECS%.*} + 30 ))" \
            "$B/loadgen" -p "${PORT[$peer]}" -c "$c" -d "$ECHO_SECS" \
            -w "$ECHO_WARM" -S "${MEASURE[$peer]}" ${INIT[$peer]:+-i "${INIT[$peer]}"} \
            2>> "$LOGS/loadgen.log")
          echo "$peer $line" >> "$LOGS/loadgen.log"
          disturbed "$line" || break
          if [ "$attempt" = 3 ] || [ "$RETRIES" -le 0 ]; then
            DISTURBED[$peer.$c]=$(( ${DISTURBED[$peer.$c]:-0} + 1 ))
            break
          fi
          RETRIES=$(( RETRIES - 1 ))
          log "echo $peer c=$c: $(kv other_cpu_s "$line") CPU-s used by other processes; again"
        done
        if [ "$(kv errors "$line")" != 0 ]; then
          log "echo $peer c=$c: failed run: ${line:-no output} (see $LOGS)"
          FAILED[$peer.$c]=$(( ${FAILED[$peer.$c]:-0} + 1 ))
          continue
        fi
        RATE[$peer.$c]+=" $(kv msgs_s "$line")"
        P99[$peer.$c]+=" $(kv p99_us "$line")"
        PERCPU[$peer.$c]+=" $(kv msgs_per_cpu_s "$line")"
        RUN[$peer.$c.$r]=$(kv msgs_per_cpu_s "$line")
        RUNRATE[$peer.$c.$r]=$(kv msgs_s "$line")
        CPU[$peer.$c]+=" $(awk -v c="$(kv srv_cpu_s "$line")" -v s="$(kv secs "$line")" \
          'BEGIN { if (s > 0) printf "%.0f", 100 * c / s }')"
      done
    done
  done
  for peer in $ECHO_PEERS; do
    [ -n "${PID[$peer]:-}" ] && stop_peer "${PID[$peer]}" "${MEASURE[$peer]}"
  done

  printf "  %-32s %6s %10s %8s %7s %12s %s\n" server conns msgs/s p99_us srv_cpu \
    msgs/CPU-s "vs $base" >> "$TABLE"
  # The ratio to the baseline is the median of per-run ratios: the runs of
  # one repetition follow each other within seconds, while the speed of
  # this VM drifts by up to 30% over minutes, so pairs compare better than
  # medians taken over the whole section.
  local rate p99 percpu cpu vs ratios
  for c in $ECHO_CONNS; do
    for peer in $ECHO_PEERS; do
      [ -n "${PORT[$peer]:-}" ] || continue
      rate=$(median ${RATE[$peer.$c]:-}); p99=$(median ${P99[$peer.$c]:-})
      percpu=$(median ${PERCPU[$peer.$c]:-}); cpu=$(median ${CPU[$peer.$c]:-})
      vs=$(fmt "$(run_ratio RUN "$peer" "$base" "$c")" 2)
      printf "  %-32s %6s %10s %8s %6s%% %12s %sx\n" "${LABEL[$peer]}" "$c" \
        "$(fmt "$rate" 0)" "$(fmt "$p99" 0)" "$(fmt "$cpu" 0)" "$(fmt "$percpu" 0)" \
        "$vs" >> "$TABLE"
      result "echo.$peer.c$c.msgs_s" "$rate"; result "echo.$peer.c$c.p99_us" "$p99"
      result "echo.$peer.c$c.msgs_per_cpu_s" "$percpu"
      result "echo.$peer.c$c.vs_$base" "$vs"
      [ -n "${FAILED[$peer.$c]:-}" ] &&
        note "  ^ ${FAILED[$peer.$c]} of $ECHO_REPS runs failed (see $LOGS/loadgen.log)"
      [ -n "${DISTURBED[$peer.$c]:-}" ] &&
        note "  ^ ${DISTURBED[$peer.$c]} of $ECHO_REPS runs shared the machine with other load"
    done
  done
  note "msgs/CPU-s = messages / server utime+stime over the window (/proc/PID/stat);"
  note "srv_cpu = share of CPU $SRV_CPU the server used; vs $base = median of per-run"
  note "ratios of msgs/CPU-s (runs of all servers interleave); runs per server: $ECHO_REPS"

  # The subject (cohost's Lua echo) against each other server, from the
  # same interleaved runs: per-run ratios again, medians of them.
  local subj=$ECHO_SUBJECT other pc ms p9
  [ -n "${PORT[$subj]:-}" ] || return 0
  printf "\n  %-32s %6s %12s %10s %8s\n" "${LABEL[$subj]} vs" conns msgs/CPU-s \
    msgs/s p99 >> "$TABLE"
  for c in $ECHO_CONNS; do
    for other in $ECHO_VS; do
      [ -n "${PORT[$other]:-}" ] && [ "$other" != "$subj" ] || continue
      pc=$(fmt "$(run_ratio RUN "$subj" "$other" "$c")" 2)
      ms=$(fmt "$(run_ratio RUNRATE "$subj" "$other" "$c")" 2)
      p9=$(ratio "$(median ${P99[$subj.$c]:-})" "$(median ${P99[$other.$c]:-})")
      printf "  %-32s %6s %11sx %9sx %7sx\n" "${LABEL[$other]}" "$c" "$pc" "$ms" \
        "$p9" >> "$TABLE"
      result "echo.$subj.c$c.vs_$other.msgs_per_cpu_s" "$pc"
      result "echo.$subj.c$c.vs_$other.msgs_s" "$ms"
      result "echo.$subj.c$c.vs_$other.p99" "$p9"
    done
  done
  note "higher is better for the $subj echo in msgs/CPU-s and msgs/s, lower in p99;"
  note "msgs/CPU-s and msgs/s: median of per-run ratios; p99: ratio of medians"
}

# -- Idle connections ------------------------------------------------------------

# rss_kib PID: VmRSS of PID in KiB, empty if it is gone.
rss_kib() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2>/dev/null; }

# idle_run PEER N K: one measurement of section idle. Starts PEER, does
# one echo on a connection of its own and lets it go (the first
# connection's one-time allocations are no per-connection cost), then opens
# N connections from K idle_clients processes (source addresses 127.0.0.2,
# .3, ...), each with one echo round trip behind it, so every handler is
# parked in its next read; reads the server's memory before and after.
# Sets IR_LABEL, IR_HELD, IR_SECS, IR_RSS0/1, IR_ANON0/1, IR_FDS (gained);
# for cohost's Lua peers (lua*), which serve their figures on a status
# port, IR_SAVED0/1 (saved stack images, copy mode) and IR_LUA0/1 (Lua
# heap, garbage not yet collected included), else those are empty; false
# if the server did not start.
idle_run() {
  local peer=$1 n=$2 k=$3 port pid mpid i per out t cpids line fd0 sport=""
  port=$(free_port)
  PEER_LABEL=$peer; PEER_INIT=""; PEER_MEASURE=""; SRV_PID=""
  IR_SAVED0=""; IR_SAVED1=""; IR_LUA0=""; IR_LUA1=""
  case $peer in lua*) sport=$(free_port); STATUS_ADDR=127.0.0.1:$sport ;; esac
  if ! "echo_start_$peer" "$port" || ! wait_port "$port" "$SRV_PID"; then
    STATUS_ADDR=""
    [ -n "$SRV_PID" ] && stop_peer "$SRV_PID" "$PEER_MEASURE"
    return 1
  fi
  STATUS_ADDR=""
  IR_LABEL=$PEER_LABEL
  pid=$SRV_PID; mpid=${PEER_MEASURE:-$SRV_PID}; mpid=${mpid%%,*}
  # The warm-up client holds its connection for a second, then exits
  # (SIGALRM, which bash would report outside the braces), resetting it.
  { taskset -c "$CLI_CPU" "$B/idle_clients" -p "$port" -n 1 -t 1 \
      ${PEER_INIT:+-i "$PEER_INIT"} > /dev/null 2>> "$LOGS/idle_clients.log"; } 2>/dev/null
  # The status request comes before the first RSS reading and after the
  # second, so its own allocations are in neither difference.
  if [ -n "$sport" ]; then
    line=$(status_json "$sport"); IR_SAVED0=$(kv saved_bytes "$line"); IR_LUA0=$(kv lua_bytes "$line")
  fi
  sleep 0.5                      # let start-up allocations settle
  IR_RSS0=$(rss_kib "$mpid"); IR_ANON0=$(status_kib "$mpid" RssAnon)
  fd0=$(fd_count "$mpid")
  cpids=()
  rm -f "$LOGS/idle_$peer".*.out
  for i in $(seq 0 $(( k - 1 ))); do
    per=$(( n / k + (i < n % k ? 1 : 0) ))
    taskset -c "$CLI_CPU" "$B/idle_clients" -p "$port" -n "$per" \
      -B "127.0.0.$(( i + 2 ))" -t 120 ${PEER_INIT:+-i "$PEER_INIT"} \
      > "$LOGS/idle_$peer.$i.out" 2>> "$LOGS/idle_clients.log" &
    cpids+=($!); PIDS+=($!)
  done
  # Every client prints its line once its connections are open (or it
  # gave up); 60 s at most.
  t=$SECONDS
  while [ $(( SECONDS - t )) -lt 60 ]; do
    out=0
    for i in $(seq 0 $(( k - 1 ))); do
      if [ -s "$LOGS/idle_$peer.$i.out" ] || ! kill -0 "${cpids[$i]}" 2>/dev/null; then
        out=$(( out + 1 ))
      fi
    done
    [ "$out" = "$k" ] && break
    sleep 0.1
  done
  sleep 1                        # "wait a moment": let the server go idle
  IR_RSS1=$(rss_kib "$mpid"); IR_ANON1=$(status_kib "$mpid" RssAnon)
  IR_FDS=$(( $(fd_count "$mpid") - fd0 ))
  if [ -n "$sport" ]; then
    line=$(status_json "$sport"); IR_SAVED1=$(kv saved_bytes "$line"); IR_LUA1=$(kv lua_bytes "$line")
  fi
  IR_HELD=0; IR_SECS=0
  for i in $(seq 0 $(( k - 1 ))); do
    line=$(head -1 "$LOGS/idle_$peer.$i.out" 2>/dev/null)
    IR_HELD=$(( IR_HELD + $(kv conns "$line" | grep -E '^[0-9]+$' || echo 0) ))
    IR_SECS=$(awk -v a="$IR_SECS" -v b="$(kv secs "$line")" 'BEGIN { print (b + 0 > a) ? b + 0 : a }')
  done
  for i in "${cpids[@]}"; do kill -TERM "$i" 2>/dev/null; done
  for i in "${cpids[@]}"; do stop_server "$i"; done
  stop_peer "$pid" "${PEER_MEASURE:-$pid}"
  return 0
}

# status_json PORT: saved_bytes=N lua_bytes=N from the totals of cohost's
# GET /status (docs/stats.md), empty fields if it does not answer.
status_json() {
  curl -s -m 5 "http://127.0.0.1:$1/status" 2>/dev/null | python3 -c '
import json, sys
try:
    t = json.load(sys.stdin)["totals"]
    print("saved_bytes=%d lua_bytes=%d" % (t["saved_bytes"], t["lua_bytes"]))
except Exception:
    pass' 2>/dev/null
}

# Memory per idle connection (issue 7): IDLE_CONNS connections to every
# IDLE_PEERS server, IDLE_REPS rounds in which the servers take turns (a
# fresh server each time), so drift hits all alike; medians per server.
# No client process holds more than IDLE_PER_CLIENT descriptors, and the
# server holds IDLE_CONNS plus its own few, under the open-files limit.
# Kernel socket buffers are not in VmRSS.
section_idle() {
  local n=$IDLE_CONNS limited=""
  if [ "$FILES" -lt $(( n + 64 )) ]; then
    n=$(( FILES - 64 )); limited=" (open-files limit $FILES)"
  fi
  title "Idle connections: server RSS growth with $n connections parked in a read, median of $IDLE_REPS$limited"
  need idle_clients || return
  local k=$(( (n + IDLE_PER_CLIENT - 1) / IDLE_PER_CLIENT ))
  if [ "$k" -gt 250 ]; then log "idle: too many client processes"; return; fi
  local peer r kib anon saved lua
  local -A LABEL KIB ANON HELD SECS RSS0 RSS1 SHORT LOST SKIP SAVED LUA
  LOG_PREFIX=idle_              # server logs beside those of section echo
  for r in $(seq "$IDLE_REPS"); do
    for peer in $IDLE_PEERS; do
      [ -z "${SKIP[$peer]:-}" ] || continue
      if ! declare -F "echo_start_$peer" > /dev/null; then
        log "unknown idle peer $peer"; SKIP[$peer]=1; continue
      fi
      log "idle $peer: $n connections, run $r/$IDLE_REPS"
      if ! idle_run "$peer" "$n" "$k"; then
        note "skipped $peer: server did not start (see $LOGS)"
        SKIP[$peer]=1; continue
      fi
      LABEL[$peer]=$IR_LABEL
      KIB[$peer]+=" $(per_conn "$IR_RSS0" "$IR_RSS1" "$IR_HELD")"
      ANON[$peer]+=" $(per_conn "$IR_ANON0" "$IR_ANON1" "$IR_HELD")"
      HELD[$peer]=$IR_HELD; SECS[$peer]=$IR_SECS
      RSS0[$peer]=$IR_RSS0; RSS1[$peer]=$IR_RSS1
      [ "$IR_HELD" -lt "$n" ] && SHORT[$peer]=$(( ${SHORT[$peer]:-0} + 1 ))
      [ "$IR_FDS" -lt "$IR_HELD" ] && LOST[$peer]=$(( ${LOST[$peer]:-0} + 1 ))
      result "idle.$peer.run$r.kib_per_conn" "$(per_conn "$IR_RSS0" "$IR_RSS1" "$IR_HELD")"
      if [ -n "$IR_SAVED1" ] && [ -n "$IR_LUA1" ]; then
        SAVED[$peer]+=" $(per_conn "$IR_SAVED0" "$IR_SAVED1" "$IR_HELD")"
        LUA[$peer]+=" $(per_conn "$IR_LUA0" "$IR_LUA1" "$IR_HELD")"
      fi
    done
  done
  LOG_PREFIX=""

  printf "  %-32s %7s %10s %10s %9s %9s  %-22s %s\n" server conns rss_before \
    rss_after KiB/conn anon/conn runs "open time" >> "$TABLE"
  for peer in $IDLE_PEERS; do
    [ -n "${LABEL[$peer]:-}" ] || continue
    kib=$(median ${KIB[$peer]}); anon=$(median ${ANON[$peer]})
    printf "  %-32s %7s %10s %10s %9s %9s  %-22s %s\n" "${LABEL[$peer]}" \
      "${HELD[$peer]}" "${RSS0[$peer]:--} KiB" "${RSS1[$peer]:--} KiB" \
      "$(fmt "$kib" 2)" "$(fmt "$anon" 2)" "$(echo ${KIB[$peer]} | tr ' ' /)" \
      "${SECS[$peer]} s, $k clients" >> "$TABLE"
    [ -n "${SHORT[$peer]:-}" ] &&
      note "  ^ in ${SHORT[$peer]} runs fewer than $n connections opened (see $LOGS/idle_clients.log)"
    [ -n "${LOST[$peer]:-}" ] &&
      note "  ^ in ${LOST[$peer]} runs the server gained fewer descriptors than connections"
    result "idle.$peer.conns" "${HELD[$peer]}"; result "idle.$peer.kib_per_conn" "$kib"
    result "idle.$peer.anon_kib_per_conn" "$anon"
    result "idle.$peer.rss_before_kib" "${RSS0[$peer]}"
    result "idle.$peer.rss_after_kib" "${RSS1[$peer]}"
  done
  note "KiB/conn = median of (VmRSS after - VmRSS before) / connections (runs: each"
  note "run's figure), of the nginx worker for nginx; anon = RssAnon only;"
  note "rss_before/after and conns of the last run; each connection did one 64-byte"
  note "echo first (nginx: after its request line); open time = slowest client;"
  note "no kernel socket buffers. Servers took turns, a fresh start every run."
  # Where cohost's bytes go, from its status endpoint (medians, bytes).
  for peer in $IDLE_PEERS; do
    [ -n "${LABEL[$peer]:-}" ] && [ -n "${LUA[$peer]:-}" ] || continue
    kib=$(median ${KIB[$peer]}); saved=$(median ${SAVED[$peer]}); lua=$(median ${LUA[$peer]})
    note "${LABEL[$peer]}: $(fmt "$(awk -v k="$kib" 'BEGIN { print k * 1024 }')" 0) B/conn ="\
" saved C stack $(fmt "$saved" 0) + Lua heap $(fmt "$lua" 0) + other $(awk -v k="$kib" \
      -v s="$saved" -v l="$lua" 'BEGIN { printf "%.0f", k * 1024 - s - l }')"
    result "idle.$peer.saved_bytes_per_conn" "$saved"; result "idle.$peer.lua_bytes_per_conn" "$lua"
  done
  note "(saved C stack: copy mode's stack images; Lua heap: lua_bytes, some garbage"
  note "included; other: coroutine, task, malloc headers, fd table, stack pages)"
  # Issue 7's targets for a raw TCP handler parked in receive.
  local v want
  for peer in lua_copy:2 lua:10; do
    v=$(median ${KIB[${peer%%:*}]:-}); want=${peer#*:}
    [ "$v" = - ] && continue
    note "target ${LABEL[${peer%%:*}]}: under $want KiB/conn: $(awk -v v="$v" -v w="$want" \
      'BEGIN { print (v < w) ? "met" : "NOT met" }') ($(fmt "$v" 2))"
  done
}

# -- HTTP ------------------------------------------------------------------------

# cpu_ticks PID...: utime + stime of the PIDs in clock ticks (fields 14 and
# 15 of /proc/PID/stat, counted after the ")" that ends the command name).
cpu_ticks() {
  local p t=0 f
  for p in "$@"; do
    f=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    t=$(( t + $(awk '{ print $12 + $13 }' <<< "$f") ))
  done
  echo "$t"
}

# busy_ticks: ticks all CPUs spent outside idle and iowait (/proc/stat).
busy_ticks() { awk 'NR == 1 { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# http_nginx_start NAME CONF PORT: nginx from scripts/bench/CONF with its
# own prefix (config, pid file, temp directories) in build/bench/NAME/;
# sets SRV_PID (the master) and PEER_MEASURE (the worker, whose CPU time
# and memory are the server's; it joins PIDS should the master die first).
http_nginx_start() {
  local name=$1 conf=$2 port=$3 dir=$PWD/$B/$1 worker=""
  if ! command -v nginx > /dev/null; then
    log "nginx is missing (scripts/deps.sh bench)"; return 1
  fi
  if grep -q '^load_module' "scripts/bench/$conf" &&
     [ ! -f "$NGINX_MODS/ngx_http_lua_module.so" ]; then
    log "libnginx-mod-http-lua is missing (scripts/deps.sh bench)"; return 1
  fi
  mkdir -p "$dir"
  sed -e "s|@PORT@|$port|g" -e "s|@PREFIX@|$dir|g" -e "s|@FILES@|$FILES|g" \
    "scripts/bench/$conf" > "$dir/nginx.conf" || return 1
  start_server "$name" nginx -p "$dir/" -c nginx.conf -e stderr
  for _ in $(seq 100); do
    kill -0 "$SRV_PID" 2>/dev/null || return 1
    worker=$(cat "/proc/$SRV_PID/task/$SRV_PID/children" 2>/dev/null)
    worker=${worker%% *}
    [ -n "$worker" ] && break
    sleep 0.05
  done
  [ -n "$worker" ] || return 1
  PIDS+=("$worker")
  PEER_MEASURE=$worker
}

http_start_cohost() {
  PEER_LABEL="cohost ($HTTP_SCRIPT)"
  [ -x build/cohost ] || { log "build/cohost is missing (make all)"; return 1; }
  [ -f "$HTTP_SCRIPT" ] || { log "$HTTP_SCRIPT is missing"; return 1; }
  start_server http_cohost build/cohost -w 1 "$HTTP_SCRIPT" "$1"
}

http_start_nginxlua() {
  PEER_LABEL="nginx+lua (content_by_lua)"
  http_nginx_start nginx_http_lua nginx_http_lua.conf "$1"
}

http_start_nginx() {
  PEER_LABEL="nginx (return 200)"
  http_nginx_start nginx_http_plain nginx_http_plain.conf "$1"
}

# http_check PORT: true if GET / answers 200 with the body "hello".
http_check() {
  local body
  body=$(curl -sf --max-time 5 "http://127.0.0.1:$1/" 2>/dev/null) || return 1
  [ "$body" = hello ]
}

# wrk_us VALUE: a wrk latency ("745.00us", "1.23ms", "2.01s") in us.
wrk_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u); gsub(/[ \t]/, "", u)
    if (u == "us") print n; else if (u == "ms") print n * 1000
    else if (u == "s") print n * 1000000; else if (u == "m") print n * 60000000 }'
}

# http_run PORT CONNS SECS MEASURE: one pinned wrk run; prints key=value
# words: reqs, secs, req_s, p99_us, srv_cpu_s, other_cpu_s (CPU time of
# processes other than server and wrk over the window: the machine's busy
# time from /proc/stat less both), errors (socket errors), non2xx.
http_run() {
  local port=$1 c=$2 secs=$3 measure=${4//,/ } out s0 s1 b0 b1 wcpu
  s0=$(cpu_ticks $measure); b0=$(busy_ticks)
  # times, after wrk, prints the subshell's children's user and system
  # time (wrk's: taskset execs it) on its second line.
  out=$( { taskset -c "$CLI_CPU" timeout -k 2 "$(( ${secs%.*} + 30 ))" \
           wrk -t1 -c"$c" -d"${secs}s" --timeout 5s --latency \
           "http://127.0.0.1:$port/" 2>&1; times; } )
  s1=$(cpu_ticks $measure); b1=$(busy_ticks)
  echo "$out" >> "$LOGS/wrk.log"
  wcpu=$(tail -1 <<< "$out" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
    print t }')
  awk -v out="$out" -v s0="$s0" -v s1="$s1" -v b0="$b0" -v b1="$b1" \
      -v w="$wcpu" -v hz="$HZ" -v p99="$(wrk_us "$(sed -n 's/^ *99% *//p' <<< "$out")")" 'BEGIN {
    n = split(out, l, "\n"); reqs = ""; errs = 0; non = 0
    for (i = 1; i <= n; i++) {
      if (l[i] ~ /requests in/) {
        split(l[i], f, " "); reqs = f[1]; secs = f[4]; sub(/s,$/, "", secs)
      }
      if (l[i] ~ /^Requests\/sec:/) { split(l[i], f, " "); rate = f[2] }
      if (l[i] ~ /Socket errors:/) {
        m = l[i]; gsub(/[^0-9 ]/, "", m); split(m, f, " ")
        errs = f[1] + f[2] + f[3] + f[4]
      }
      if (l[i] ~ /Non-2xx/) { split(l[i], f, ":"); non = f[2] + 0 }
    }
    if (reqs == "") { print "errors=1 failed=1"; exit }
    srv = (s1 - s0) / hz; other = (b1 - b0) / hz - srv - w
    if (other < 0) other = 0
    per = srv > 0 ? sprintf("%.0f", reqs / srv) : ""
    printf "reqs=%s secs=%s req_s=%s p99_us=%s srv_cpu_s=%.2f other_cpu_s=%.2f", reqs, secs, rate, p99, srv, other
    printf " req_per_cpu_s=%s errors=%d non2xx=%d\n", per, errs, non }'
}

# http_ratio ARRAY A B CONNS: the median over repetitions of
# ARRAY[A.CONNS.r] / ARRAY[B.CONNS.r] (section_http's arrays, seen through
# bash's dynamic scope).
http_ratio() {
  local -n arr=$1
  local r ratios=""
  for r in $(seq "$HTTP_REPS"); do
    ratios+=" $(ratio "${arr[$2.$4.$r]:-}" "${arr[$3.$4.$r]:-}" 3)"
  done
  median $ratios
}

# wrk against examples/hello.lua, nginx+lua and plain nginx, all running
# for the whole section and measured in turn (cohost, nginx+lua, nginx,
# repeated), so that the machine's drift hits all three alike.
section_http() {
  title "HTTP GET / (\"hello\"), wrk -t1 keep-alive: server on CPU $SRV_CPU, wrk on CPU $CLI_CPU, median of $HTTP_REPS x ${HTTP_SECS} s"
  command -v wrk > /dev/null || { note "skipped: wrk is missing (scripts/deps.sh bench)"; return; }
  local peer port c r line attempt RETRIES=$(( 2 * HTTP_REPS ))
  local -A PORT PID MEASURE LABEL RATE P99 PERCPU CPU FAILED DISTURBED ERRS RUN RUNRATE
  for peer in $HTTP_PEERS; do
    port=$(free_port)
    PEER_LABEL=$peer; PEER_MEASURE=""; SRV_PID=""
    if ! "http_start_$peer" "$port" || ! wait_port "$port" "$SRV_PID"; then
      note "skipped $peer: server did not start (see $LOGS)"
      [ -n "$SRV_PID" ] && stop_peer "$SRV_PID" "${PEER_MEASURE:-$SRV_PID}"
      continue
    fi
    if ! http_check "$port"; then
      note "skipped $peer: GET / did not answer 200 \"hello\""
      stop_peer "$SRV_PID" "${PEER_MEASURE:-$SRV_PID}"
      continue
    fi
    PORT[$peer]=$port; PID[$peer]=$SRV_PID; MEASURE[$peer]=${PEER_MEASURE:-$SRV_PID}
    LABEL[$peer]=$PEER_LABEL
    # Warm-up: LuaJIT traces, nginx's and cohost's pools and caches.
    log "http $peer: warm-up"
    taskset -c "$CLI_CPU" timeout -k 2 30 wrk -t1 -c50 -d"$HTTP_WARM" \
      "http://127.0.0.1:$port/" >> "$LOGS/wrk.log" 2>&1
  done
  for r in $(seq "$HTTP_REPS"); do
    for c in $HTTP_CONNS; do
      for peer in $HTTP_PEERS; do
        [ -n "${PORT[$peer]:-}" ] || continue
        log "http $peer c=$c run $r/$HTTP_REPS"
        for attempt in 1 2 3; do
          wait_quiet
          echo "== $peer c=$c run $r" >> "$LOGS/wrk.log"
          line=$(http_run "${PORT[$peer]}" "$c" "$HTTP_SECS" "${MEASURE[$peer]}")
          echo "$peer c=$c $line" >> "$LOGS/wrk.log"
          disturbed "$line" || break
          if [ "$attempt" = 3 ] || [ "$RETRIES" -le 0 ]; then
            DISTURBED[$peer.$c]=$(( ${DISTURBED[$peer.$c]:-0} + 1 ))
            break
          fi
          RETRIES=$(( RETRIES - 1 ))
          log "http $peer c=$c: $(kv other_cpu_s "$line") CPU-s used by other processes; again"
        done
        # A server that answers errors fast must not look fast.
        if [ -n "$(kv failed "$line")" ] || [ "$(kv non2xx "$line")" != 0 ]; then
          log "http $peer c=$c: failed run: $line (see $LOGS/wrk.log)"
          FAILED[$peer.$c]=$(( ${FAILED[$peer.$c]:-0} + 1 ))
          continue
        fi
        [ "$(kv errors "$line")" != 0 ] &&
          ERRS[$peer.$c]=$(( ${ERRS[$peer.$c]:-0} + $(kv errors "$line") ))
        RATE[$peer.$c]+=" $(kv req_s "$line")"
        P99[$peer.$c]+=" $(kv p99_us "$line")"
        PERCPU[$peer.$c]+=" $(kv req_per_cpu_s "$line")"
        RUN[$peer.$c.$r]=$(kv req_per_cpu_s "$line")
        RUNRATE[$peer.$c.$r]=$(kv req_s "$line")
        CPU[$peer.$c]+=" $(awk -v c="$(kv srv_cpu_s "$line")" -v s="$(kv secs "$line")" \
          'BEGIN { if (s > 0) printf "%.0f", 100 * c / s }')"
      done
    done
  done
  for peer in $HTTP_PEERS; do
    [ -n "${PID[$peer]:-}" ] && stop_peer "${PID[$peer]}" "${MEASURE[$peer]}"
  done

  printf "  %-32s %6s %10s %8s %7s %12s\n" server conns req/s p99_ms srv_cpu \
    req/CPU-s >> "$TABLE"
  local rate p99 percpu cpu
  for c in $HTTP_CONNS; do
    for peer in $HTTP_PEERS; do
      [ -n "${PORT[$peer]:-}" ] || continue
      rate=$(median ${RATE[$peer.$c]:-}); p99=$(median ${P99[$peer.$c]:-})
      percpu=$(median ${PERCPU[$peer.$c]:-}); cpu=$(median ${CPU[$peer.$c]:-})
      printf "  %-32s %6s %10s %8s %6s%% %12s\n" "${LABEL[$peer]}" "$c" \
        "$(fmt "$rate" 0)" "$(fmt "$(ratio "$p99" 1000 6)" 2)" "$(fmt "$cpu" 0)" \
        "$(fmt "$percpu" 0)" >> "$TABLE"
      result "http.$peer.c$c.req_s" "$rate"; result "http.$peer.c$c.p99_us" "$p99"
      result "http.$peer.c$c.req_per_cpu_s" "$percpu"; result "http.$peer.c$c.srv_cpu_pct" "$cpu"
      [ -n "${FAILED[$peer.$c]:-}" ] &&
        note "  ^ ${FAILED[$peer.$c]} of $HTTP_REPS runs failed or got non-2xx answers (see $LOGS/wrk.log)"
      [ -n "${ERRS[$peer.$c]:-}" ] &&
        note "  ^ wrk counted ${ERRS[$peer.$c]} socket errors over the runs (see $LOGS/wrk.log)"
      [ -n "${DISTURBED[$peer.$c]:-}" ] &&
        note "  ^ ${DISTURBED[$peer.$c]} of $HTTP_REPS runs shared the machine with other load"
    done
  done
  note "req/CPU-s = requests / server utime+stime over the run (/proc/PID/stat;"
  note "nginx: its worker); srv_cpu = share of CPU $SRV_CPU the server used;"
  note "p99 from wrk --latency; 1000 requests per connection everywhere; bodies:"
  note "cohost \"hello\" (Content-Length), nginx+lua \"hello\\n\" (chunked:"
  note "ngx.say), nginx \"hello\\n\" (Content-Length)"

  local subj=cohost other pc ms p9
  [ -n "${PORT[$subj]:-}" ] || return 0
  printf "\n  %-32s %6s %12s %10s %8s\n" "cohost vs" conns req/CPU-s req/s p99 >> "$TABLE"
  for c in $HTTP_CONNS; do
    for other in nginxlua nginx; do
      [ -n "${PORT[$other]:-}" ] || continue
      pc=$(fmt "$(http_ratio RUN "$subj" "$other" "$c")" 2)
      ms=$(fmt "$(http_ratio RUNRATE "$subj" "$other" "$c")" 2)
      p9=$(ratio "$(median ${P99[$subj.$c]:-})" "$(median ${P99[$other.$c]:-})")
      printf "  %-32s %6s %11sx %9sx %7sx\n" "${LABEL[$other]}" "$c" "$pc" "$ms" \
        "$p9" >> "$TABLE"
      result "http.$subj.c$c.vs_$other.req_per_cpu_s" "$pc"
      result "http.$subj.c$c.vs_$other.req_s" "$ms"
      result "http.$subj.c$c.vs_$other.p99" "$p9"
    done
  done
  note "higher is better for cohost in req/CPU-s and req/s, lower in p99;"
  note "req/CPU-s and req/s: median of per-run ratios; p99: ratio of medians"
}

# -- Idle HTTP connections -----------------------------------------------------------

# status_kib PID FIELD: a "FIELD: N kB" line of /proc/PID/status (VmRSS,
# RssAnon...); pss_kib PID: Pss of /proc/PID/smaps_rollup. Empty if gone.
status_kib() { sed -n "s/^$2:[[:space:]]*\([0-9]*\) kB/\1/p" "/proc/$1/status" 2>/dev/null; }
pss_kib() { sed -n 's/^Pss:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/smaps_rollup" 2>/dev/null; }
fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

# per_conn BEFORE AFTER N: (AFTER - BEFORE) / N with two decimals, or "-".
per_conn() {
  awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN {
    if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && n > 0) printf "%.2f", (b - a) / n
    else print "-" }'
}

# Opens IDLE_HTTP_CONNS keep-alive connections to examples/hello.lua and to
# nginx+lua from several idle_clients -R processes; each sends one
# "GET / HTTP/1.1" and reads the whole response before the next connection
# opens, so the server has answered and the connection waits for a next
# request. Compares the server's memory before and after: VmRSS (what the
# issue's target is about), RssAnon (the same without file pages) and Pss;
# the server's descriptor count says it still holds the connections.
section_idle_http() {
  local n=$IDLE_HTTP_CONNS limited=""
  if [ "$FILES" -lt $(( n + 64 )) ]; then
    n=$(( FILES - 64 )); limited=" (open-files limit $FILES)"
  fi
  title "Idle HTTP keep-alive: server memory growth with $n connections after one GET / each$limited"
  need idle_clients || return
  local k=$(( (n + IDLE_PER_CLIENT - 1) / IDLE_PER_CLIENT ))
  if [ "$k" -gt 250 ]; then log "idle_http: too many client processes"; return; fi
  printf "  %-32s %7s %10s %10s %9s %9s %9s %s\n" server conns rss_before rss_after \
    KiB/conn anon/conn pss/conn "open time" >> "$TABLE"
  local peer port pid mpid i per out held secs t cpids line fd0 fd1 what
  local rss0 rss1 anon0 anon1 pss0 pss1 m0 m1 kib
  LOG_PREFIX=idle_
  for peer in $IDLE_HTTP_PEERS; do
    port=$(free_port)
    PEER_LABEL=$peer; PEER_MEASURE=""; SRV_PID=""
    log "idle_http $peer: $n connections"
    if ! "http_start_$peer" "$port" || ! wait_port "$port" "$SRV_PID"; then
      note "skipped $peer: server did not start (see $LOGS)"
      [ -n "$SRV_PID" ] && stop_peer "$SRV_PID" "${PEER_MEASURE:-$SRV_PID}"
      continue
    fi
    pid=$SRV_PID; mpid=${PEER_MEASURE:-$SRV_PID}
    # One request first, outside the count: the first request's one-time
    # allocations (Lua state warm-up, nginx's request pools) are not
    # per-connection costs.
    http_check "$port" || note "  $peer: GET / did not answer \"hello\""
    sleep 0.5
    rss0=$(rss_kib "$mpid"); anon0=$(status_kib "$mpid" RssAnon); pss0=$(pss_kib "$mpid")
    m0=$(rss_kib "$pid"); fd0=$(fd_count "$mpid")
    cpids=()
    for i in $(seq 0 $(( k - 1 ))); do
      per=$(( n / k + (i < n % k ? 1 : 0) ))
      taskset -c "$CLI_CPU" "$B/idle_clients" -R -p "$port" -n "$per" \
        -B "127.0.0.$(( i + 2 ))" -t 120 \
        > "$LOGS/idle_http_$peer.$i.out" 2>> "$LOGS/idle_clients.log" &
      cpids+=($!); PIDS+=($!)
    done
    t=$SECONDS
    while [ $(( SECONDS - t )) -lt 60 ]; do
      out=0
      for i in $(seq 0 $(( k - 1 ))); do
        if [ -s "$LOGS/idle_http_$peer.$i.out" ] || ! kill -0 "${cpids[$i]}" 2>/dev/null; then
          out=$(( out + 1 ))
        fi
      done
      [ "$out" = "$k" ] && break
      sleep 0.1
    done
    sleep 1                      # let the server go idle
    rss1=$(rss_kib "$mpid"); anon1=$(status_kib "$mpid" RssAnon); pss1=$(pss_kib "$mpid")
    m1=$(rss_kib "$pid"); fd1=$(fd_count "$mpid")
    held=0; secs=0
    for i in $(seq 0 $(( k - 1 ))); do
      line=$(head -1 "$LOGS/idle_http_$peer.$i.out" 2>/dev/null)
      held=$(( held + $(kv conns "$line" | grep -E '^[0-9]+$' || echo 0) ))
      secs=$(awk -v a="$secs" -v b="$(kv secs "$line")" 'BEGIN { print (b + 0 > a) ? b + 0 : a }')
    done
    for i in "${cpids[@]}"; do kill -TERM "$i" 2>/dev/null; done
    for i in "${cpids[@]}"; do stop_server "$i"; done
    stop_peer "$pid" "$mpid"
    kib=$(per_conn "$rss0" "$rss1" "$held")
    printf "  %-32s %7s %10s %10s %9s %9s %9s %s\n" "$PEER_LABEL" "$held" \
      "${rss0:--} KiB" "${rss1:--} KiB" "$kib" "$(per_conn "$anon0" "$anon1" "$held")" \
      "$(per_conn "$pss0" "$pss1" "$held")" "${secs} s, $k clients" >> "$TABLE"
    [ "$held" -lt "$n" ] && note "  ^ only $held of $n connections opened (see $LOGS/idle_clients.log)"
    [ $(( fd1 - fd0 )) -lt "$held" ] &&
      note "  ^ the server gained only $(( fd1 - fd0 )) descriptors: it closed some connections"
    if [ "$mpid" != "$pid" ]; then
      what=$(per_conn "$m0" "$m1" "$held")
      note "  ^ figures of the worker; the master went from ${m0:--} to ${m1:--} KiB ($what KiB/conn)"
      result "idle_http.$peer.master_kib_per_conn" "$what"
    fi
    result "idle_http.$peer.conns" "$held"; result "idle_http.$peer.kib_per_conn" "$kib"
    result "idle_http.$peer.anon_kib_per_conn" "$(per_conn "$anon0" "$anon1" "$held")"
    result "idle_http.$peer.pss_kib_per_conn" "$(per_conn "$pss0" "$pss1" "$held")"
    result "idle_http.$peer.rss_before_kib" "$rss0"; result "idle_http.$peer.rss_after_kib" "$rss1"
    result "idle_http.$peer.fds_gained" "$(( fd1 - fd0 ))"
  done
  note "KiB/conn = (VmRSS after - before) / connections; anon = RssAnon only;"
  note "pss = Pss (smaps_rollup); kernel socket buffers are in none of them."
  LOG_PREFIX=""
}

# Priority classes and CPU affinity (issue 8): a high health-check listener
# next to a loaded normal endpoint, and hello on -w 2 pinned and unpinned.
section_prio() {
  BENCH_RESULTS=$RESULTS bash scripts/bench/prio_bench.sh >> "$TABLE"
}

# -- Main --------------------------------------------------------------------------

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
  cat "$TABLE"
  echo
  [ "$BUSIEST" -gt 0 ] && echo "warning: the machine was up to $BUSIEST% busy before some runs"
  echo "($(( SECONDS - start )) s; figures as key=value in $RESULTS, logs in $LOGS)"
}
