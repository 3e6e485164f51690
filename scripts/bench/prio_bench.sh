#!/usr/bin/env bash
# Scheduling-policy benchmarks (issue 8), one table section on stdout in
# run.sh's format; progress on stderr, wrk output in build/bench/logs/.
#
# 1. Health check under load: one worker (pinned to CPU 0) serves a cheap
#    GET / on one listener and a CPU-heavier GET / (PRIO_WORK_US of work
#    around a yield, scripts/bench/prio_server.lua) on another; wrk -c100
#    loads the heavy one while wrk -c2 measures the cheap one, both wrk on
#    CPU 1. Once with the cheap listener "normal", once "high": the p99 of
#    the health check is what the priority class buys.
# 2. Affinity: examples/hello.lua on --workers 2, unpinned and with
#    --cpu-affinity auto, under wrk -t2 -c100 (nothing pinned but the
#    workers: on two CPUs wrk shares them); requests per server CPU-second
#    (utime + stime of the server over the run) and p99; against nginx +
#    OpenResty's Lua module with 2 workers, unpinned and with
#    worker_cpu_affinity auto, in the same rounds (issue 15).
#
# Every figure is the median of PRIO_REPS runs; the two variants of each
# benchmark alternate, so drift hits both alike.
#
# Usage: bash scripts/bench/prio_bench.sh        (after make all)
# Environment:
#   BENCH_QUICK=1     2 s runs instead of 5
#   PRIO_REPS         runs per variant (default 3)
#   PRIO_SECS         seconds per measured run (default 5; quick 2)
#   PRIO_WORK_US      CPU work per heavy request, us (default 200)
#   BENCH_RESULTS     file to append key=value figures to (run.sh's)
#   BENCH_BASE_COHOST another cohost binary (run.sh's): every run is done
#                     with it too, in turn, and each row gets a twin
#                     "... (base)" below it with a note of new/base
#                     (results: the key with _base after the class or
#                     mode)
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/bench/lib.sh

mkdir -p "$LOGS"
BENCH_TAG=prio_bench
QUICK=${BENCH_QUICK:-0}
REPS=${PRIO_REPS:-3}
if [ "$QUICK" = 1 ]; then SECS=${PRIO_SECS:-2}; else SECS=${PRIO_SECS:-5}; fi
WORK_US=${PRIO_WORK_US:-200}
RESULTS=${BENCH_RESULTS:-/dev/null}
QUIET_MAX=5
# The binaries measured, one suffix each after a dot (so that the empty
# one is a word too): "" for build/cohost, "_base" for BENCH_BASE_COHOST,
# which runs in turn with it.
VARIANTS=.
[ -n "$BASE_COHOST" ] && VARIANTS=". ._base"

for tool in wrk curl taskset; do
  command -v "$tool" > /dev/null || { printf '\n== Scheduling\n  skipped: %s is missing\n' "$tool"; exit 0; }
done
[ -x build/cohost ] || { printf '\n== Scheduling\n  skipped: build/cohost is missing (make all)\n'; exit 0; }
base_check || exit 1

# bin SUFFIX: the binary of a variant.
bin() { if [ -n "$1" ]; then echo "$BASE_COHOST"; else echo build/cohost; fi; }

# From wrk --latency output on stdin: "p99_us req_s p50_us".
wrk_figures() {
  awk '$1 == "50%" { m = $2 } $1 == "99%" { p = $2 } $1 == "Requests/sec:" { r = $2 }
       END { print p, r, m }' |
    { read -r p r m; echo "$(wrk_us "${p:-x}") ${r:-} $(wrk_us "${m:-x}")"; }
}

# quiet: wait_quiet, saying so if the machine stayed busy: other work on
# the machine shows in tails first.
quiet() {
  wait_quiet || log "the machine is busy ($QUIET_BUSY% of the CPUs): figures may be noisy"
}

# base_note SUFFIX WHAT NEW BASE: under a base row, NEW/BASE.
base_note() {
  [ -n "$1" ] && note "  ^ new/base: $(ratio "$3" "$4")x $2"
}

# -- 1. Health check under load ------------------------------------------------

health_run() {   # CLASS SUFFIX -> "p99_us req_s p50_us load_req_s" or nothing
  local class=$1 ph pl pid load_out line
  ph=$(free_port); pl=$(free_port)
  quiet
  taskset -c "$SRV_CPU" "$(bin "$2")" -w 1 scripts/bench/prio_server.lua "$ph" "$pl" "$class" "$WORK_US" \
    >> "$LOGS/prio_server$2.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  if ! wait_http "$ph" "$pid" || ! wait_http "$pl" "$pid"; then
    log "server did not start (see $LOGS/prio_server$2.log)"; stop_server "$pid"; return
  fi
  taskset -c "$CLI_CPU" wrk -t1 -c100 -d1s "http://127.0.0.1:$pl/" > /dev/null 2>&1   # warm-up
  load_out=$(mktemp)
  taskset -c "$CLI_CPU" wrk -t1 -c100 -d"$(( SECS + 2 ))s" --latency "http://127.0.0.1:$pl/" > "$load_out" 2>&1 &
  local wpid=$!
  sleep 1
  line=$(taskset -c "$CLI_CPU" wrk -t1 -c2 -d"${SECS}s" --latency "http://127.0.0.1:$ph/" 2>&1 |
    tee -a "$LOGS/prio_wrk.log" | wrk_figures)
  wait "$wpid"
  cat "$load_out" >> "$LOGS/prio_wrk.log"
  echo "$line $(wrk_figures < "$load_out" | cut -d' ' -f2)"
  rm -f "$load_out"
  stop_server "$pid"
}

section_health() {
  printf '\n== Scheduling: health check (wrk -c2, GET / "ok") while wrk -c100 loads a %d us endpoint on the same worker; server on CPU %d, wrk on CPU %d, median of %d x %d s\n' \
    "$WORK_US" "$SRV_CPU" "$CLI_CPU" "$REPS" "$SECS"
  local r class line p q m l v k label
  local -A P99 P50 RATE LOAD
  for r in $(seq "$REPS"); do
    for class in normal high; do
      for v in $VARIANTS; do
        v=${v#.}
        log "health check, listener $class$v, run $r/$REPS"
        line=$(health_run "$class" "$v")
        [ -n "$line" ] || continue
        k=$class$v
        read -r p q m l <<< "$line"
        P99[$k]+=" $p"; RATE[$k]+=" $q"; P50[$k]+=" $m"; LOAD[$k]+=" $l"
      done
    done
  done
  for class in normal high; do
    for v in $VARIANTS; do
      v=${v#.}
      k=$class$v
      label="health p99, listener $class"; [ -n "$v" ] && label="health p99, $class (base)"
      row "$label" "$(fmt "$(median ${P99[$k]:-})" 0)" "us" \
        "p50 $(fmt "$(median ${P50[$k]:-})" 0) us, $(fmt "$(median ${RATE[$k]:-})" 0) req/s; load $(fmt "$(median ${LOAD[$k]:-})" 0) req/s"
      base_note "$v" "p99" "$(median ${P99[$class]:-})" "$(median ${P99[$k]:-})"
      result "prio.health_p50_us.$k" "$(median ${P50[$k]:-})"
    done
  done
  for v in $VARIANTS; do
    v=${v#.}
    row "normal/high${v:+ (base)}" "$(ratio "$(median ${P99[normal$v]:-})" "$(median ${P99[high$v]:-})" 1)" "x" "p99 of the health check"
    for class in normal high; do
      result "prio.health_p99_us.$class$v" "$(median ${P99[$class$v]:-})"
    done
    for class in normal high; do
      result "prio.load_req_s.$class$v" "$(median ${LOAD[$class$v]:-})"
    done
  done
}

# -- 2. Affinity -------------------------------------------------------------------

# affinity_measure PORT PID...: warm-up, then one wrk run against PORT; prints
# "p99_us req_s req_per_cpu_s", the CPU time being the PIDs' (utime + stime).
affinity_measure() {
  local port=$1 t0 t1 out line p q
  shift
  wrk -t2 -c100 -d1s "http://127.0.0.1:$port/" > /dev/null 2>&1   # warm-up
  t0=$(cpu_ticks "$@")
  out=$(wrk -t2 -c100 -d"${SECS}s" --latency "http://127.0.0.1:$port/" 2>&1)
  t1=$(cpu_ticks "$@")
  echo "$out" >> "$LOGS/prio_wrk.log"
  line=$(wrk_figures <<< "$out")
  read -r p q _ <<< "$line"
  echo "$p $q $(awk -v q="$q" -v s="$SECS" -v t=$(( t1 - t0 )) -v hz="$HZ" \
    'BEGIN { if (t > 0) printf "%.0f", q * s / (t / hz) }')"
}

affinity_run() {   # MODE SUFFIX -> "p99_us req_s req_per_cpu_s" or nothing
  local mode=$1 port pid opts=""
  [ "$mode" = pinned ] && opts="--cpu-affinity auto"
  port=$(free_port)
  quiet
  # shellcheck disable=SC2086
  "$(bin "$2")" -w 2 $opts examples/hello.lua "$port" >> "$LOGS/prio_hello$2.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  if ! wait_http "$port" "$pid"; then
    log "hello server did not start (see $LOGS/prio_hello$2.log)"; stop_server "$pid"; return
  fi
  affinity_measure "$port" "$pid"
  stop_server "$pid"
}

# The peer of issue 15: nginx + OpenResty's Lua module with 2 workers
# (nginx_http_lua.conf, worker_processes 2), started on every CPU; pinned
# means worker_cpu_affinity auto, as --cpu-affinity auto pins cohost's.
# Both workers' CPU time counts.
affinity_nginx_run() {   # MODE -> "p99_us req_s req_per_cpu_s" or nothing
  local mode=$1 port workers="" _ aff=""
  [ "$mode" = pinned ] && aff=" worker_cpu_affinity auto;"
  port=$(free_port)
  quiet
  if ! SRV_CPU=0-$(( $(nproc) - 1 )) nginx_start nginx_w2 nginx_http_lua.conf "$port" \
       -e "s|^worker_processes 1;|worker_processes 2;$aff|"; then
    log "nginx+lua did not start (see $LOGS/nginx_w2.log)"; return
  fi
  for _ in $(seq 100); do
    workers=$(cat "/proc/$SRV_PID/task/$SRV_PID/children" 2>/dev/null)
    [ "$(wc -w <<< "$workers")" -ge 2 ] && break
    sleep 0.05
  done
  # shellcheck disable=SC2086
  if wait_http "$port" "$SRV_PID"; then affinity_measure "$port" $workers; fi
  stop_peer "$SRV_PID" "$(tr ' ' , <<< "$workers")"
}

section_affinity() {
  printf '\n== Affinity: examples/hello.lua on --workers 2, wrk -t2 -c100 (unpinned), median of %d x %d s\n' "$REPS" "$SECS"
  local r mode line p q c v k
  local -A P99 RATE PERCPU
  for r in $(seq "$REPS"); do
    for mode in unpinned pinned; do
      for v in $VARIANTS; do
        v=${v#.}
        log "affinity $mode$v, run $r/$REPS"
        line=$(affinity_run "$mode" "$v")
        [ -n "$line" ] || continue
        k=$mode$v
        read -r p q c <<< "$line"
        P99[$k]+=" $p"; RATE[$k]+=" $q"; PERCPU[$k]+=" $c"
      done
      command -v nginx > /dev/null || continue
      log "affinity nginx+lua $mode, run $r/$REPS"
      line=$(affinity_nginx_run "$mode")
      [ -n "$line" ] || continue
      read -r p q c <<< "$line"
      P99[nginx_$mode]+=" $p"; RATE[nginx_$mode]+=" $q"; PERCPU[nginx_$mode]+=" $c"
    done
  done
  local mode_label
  for mode in unpinned pinned; do
    for v in $VARIANTS; do
      v=${v#.}
      k=$mode$v
      mode_label=$mode; [ "$mode" = pinned ] && mode_label="pinned (--cpu-affinity auto)"
      [ -n "$v" ] && mode_label="$mode (base)"
      row "$mode_label" "$(fmt "$(median ${PERCPU[$k]:-})" 0)" "req/CPU-s" \
        "p99 $(fmt "$(median ${P99[$k]:-})" 0) us, $(fmt "$(median ${RATE[$k]:-})" 0) req/s"
      base_note "$v" "req/CPU-s" "$(median ${PERCPU[$mode]:-})" "$(median ${PERCPU[$k]:-})"
      result "prio.affinity.$k.req_per_cpu_s" "$(median ${PERCPU[$k]:-})"
      result "prio.affinity.$k.p99_us" "$(median ${P99[$k]:-})"
      result "prio.affinity.$k.req_s" "$(median ${RATE[$k]:-})"
    done
  done
  for v in $VARIANTS; do
    v=${v#.}
    row "pinned/unpinned${v:+ (base)}" "$(ratio "$(median ${PERCPU[pinned$v]:-})" "$(median ${PERCPU[unpinned$v]:-})" 1)" "x" "per server CPU-second"
  done
  [ -n "${PERCPU[nginx_unpinned]:-}${PERCPU[nginx_pinned]:-}" ] || return 0
  for mode in unpinned pinned; do
    k=nginx_$mode
    mode_label="nginx+lua, 2 workers, $mode"
    [ "$mode" = pinned ] && mode_label="nginx+lua, 2 workers, pinned (auto)"
    row "$mode_label" "$(fmt "$(median ${PERCPU[$k]:-})" 0)" "req/CPU-s" \
      "p99 $(fmt "$(median ${P99[$k]:-})" 0) us, $(fmt "$(median ${RATE[$k]:-})" 0) req/s"
    result "prio.affinity.$k.req_per_cpu_s" "$(median ${PERCPU[$k]:-})"
    result "prio.affinity.$k.p99_us" "$(median ${P99[$k]:-})"
    result "prio.affinity.$k.req_s" "$(median ${RATE[$k]:-})"
    row "cohost/nginx+lua, $mode" "$(ratio "$(median ${PERCPU[$mode]:-})" "$(median ${PERCPU[$k]:-})" 2)" "x" \
      "per CPU-s; $(ratio "$(median ${RATE[$mode]:-})" "$(median ${RATE[$k]:-})" 2)x req/s, $(ratio "$(median ${P99[$mode]:-})" "$(median ${P99[$k]:-})" 2)x p99 (ratios of medians)"
  done
}

section_health
section_affinity
