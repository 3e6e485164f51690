# Helpers shared by the bench scripts: run.sh and its sections/*.sh,
# http_profile.sh, imagehost_bench.sh, kv_bench.sh and prio_bench.sh. A
# script cds to the repository root and then sources this file:
#
#   cd "$(dirname "$0")/../.." || exit 1
#   . scripts/bench/lib.sh
#
# Sourcing it only defines functions and variables, and:
#   - raises the open-files soft limit to the hard one (1000 connections
#     take 1000 descriptors in each of server and generator; servers
#     inherit the limit) and sets FILES, that limit as a number;
#   - sets B (build/bench), LOGS (build/bench/logs, not created here), HZ
#     (/proc/PID/stat's unit of CPU time), SRV_CPU=0 for servers and
#     micro-benchmarks, CLI_CPU=1 for load generators (0 on one CPU);
#   - sets COHOST (build/cohost) and BASE_COHOST (BENCH_BASE_COHOST made
#     absolute, empty if unset; see with_base);
#   - traps EXIT to stop every process in PIDS (start_server adds to it)
#     and then remove every directory in CLEANUP_DIRS; INT and TERM exit
#     with 130 through that trap.
# A script may change after sourcing: BENCH_TAG (prefix of log lines,
# "bench"), TABLE (the file title, row and note append to; empty:
# stdout), RESULTS (where result appends, /dev/null), QUIET_MAX (seconds
# wait_quiet waits at most, 5), LOG_PREFIX and LOG_SUFFIX (around
# start_server's NAME in its log file's name, empty), LOGS, SRV_CPU and
# CLI_CPU.
#
# Groups below: processes (start_server, stop_server, stop_peer, forget),
# ports and waiting (free_port, wait_port, wait_http, wait_quiet,
# disturbed), readings from /proc (cpu_ticks, busy_ticks, rss_kib,
# status_kib, pss_kib, fd_count, collected), numbers (kv, median, ratio,
# fmt, per_conn, wrk_us), output (log, result, title, row, note) and peers
# (nginx_start, with_base, base_label, base_check, describe).
#
# Nothing here sets shell options: run.sh and prio_bench.sh run under
# set -u -o pipefail, kv_bench.sh and imagehost_bench.sh under set -e too,
# so a helper succeeds unless its comment says when it is false (the
# waits, disturbed, base_check); the number helpers print "-" for a missing
# value.

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
FILES=$(ulimit -n)
[ "$FILES" = unlimited ] && FILES=1048576

B=build/bench
LOGS=$B/logs
HZ=$(getconf CLK_TCK)
SRV_CPU=0
CLI_CPU=1
[ "$(nproc)" -lt 2 ] && CLI_CPU=0

BENCH_TAG=bench
TABLE=""
RESULTS=/dev/null
QUIET_MAX=5
LOG_PREFIX=""
LOG_SUFFIX=""

# A relative BENCH_BASE_COHOST is taken from the directory the script was
# started in: the script's cd left it in OLDPWD.
COHOST=build/cohost
BASE_COHOST=${BENCH_BASE_COHOST:-}
case $BASE_COHOST in
  "" | /*) ;;
  *) BASE_COHOST=$(realpath -m -- "${OLDPWD:-$PWD}/$BASE_COHOST") ;;
esac

# -- Processes ---------------------------------------------------------------

PIDS=()                         # every server and client started
CLEANUP_DIRS=()                 # removed on exit, after the processes

# stop_all: stop_server for every pid in PIDS (the EXIT trap).
stop_all() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do stop_server "$p"; done
  PIDS=()
  [ ${#CLEANUP_DIRS[@]} -eq 0 ] || rm -rf "${CLEANUP_DIRS[@]}"
  return 0
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# start_server NAME CMD...: runs CMD pinned to SRV_CPU in the background,
# output in $LOGS/$LOG_PREFIX$NAME$LOG_SUFFIX.log; sets SRV_PID (taskset
# execs, so it is CMD's pid) and adds it to PIDS.
start_server() {
  local name=$1; shift
  taskset -c "$SRV_CPU" "$@" > "$LOGS/$LOG_PREFIX$name$LOG_SUFFIX.log" 2>&1 &
  SRV_PID=$!
  PIDS+=("$SRV_PID")
}

# forget PID: PID no longer in PIDS (it was stopped otherwise).
forget() {
  local keep=() q
  for q in "${PIDS[@]}"; do [ "$q" = "$1" ] || keep+=("$q"); done
  PIDS=("${keep[@]}")
}

# stop_server PID [SECS]: SIGTERM, up to SECS (default 2) for it to exit,
# then SIGKILL; reaps it if it is our child and forgets it.
stop_server() {
  local p=$1 n=$(( ${2:-2} * 10 ))
  kill -TERM "$p" 2>/dev/null || true
  while [ "$n" -gt 0 ] && kill -0 "$p" 2>/dev/null; do
    sleep 0.1; n=$(( n - 1 ))
  done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  forget "$p"
}

# stop_peer PID MEASURE: stops a server and the processes measured for it
# (comma-separated; nginx's worker) should they outlive it.
stop_peer() {
  local p
  stop_server "$1"
  for p in ${2//,/ }; do
    [ "$p" = "$1" ] || stop_server "$p"
  done
}

# -- Ports and waiting -------------------------------------------------------

# free_port: a loopback port nobody listens on, below the ephemeral range so
# that it never collides with the generator's own connections.
free_port() {
  local low p
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
  while :; do
    p=$(( 20000 + RANDOM % (low - 20000) ))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
}

# wait_port PORT PID [SECS]: until something accepts on PORT (SECS, default
# 5, at most; valgrind starts slowly); false if it does not or PID dies. The
# probe connection is closed at once; echo servers shrug.
wait_port() {
  local n=$(( ${3:-5} * 20 ))
  while [ "$n" -gt 0 ]; do
    kill -0 "$2" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05; n=$(( n - 1 ))
  done
  return 1
}

# wait_http PORT PID: until GET / on PORT answers 2xx (5 s at most); false
# if it does not or PID dies.
wait_http() {
  local _
  for _ in $(seq 100); do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf --max-time 1 "http://127.0.0.1:$1/" > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 1
}

# wait_quiet: waits until both CPUs are nearly idle (under 10% busy over
# 0.3 s), at most QUIET_MAX seconds. False if it gave up; then QUIET_BUSY
# is the load it saw, and BUSIEST the worst such load so far (for a
# footer).
BUSIEST=0
QUIET_BUSY=0
wait_quiet() {
  local end=$(( SECONDS + QUIET_MAX )) a b
  while :; do
    a=$(head -1 /proc/stat); sleep 0.3; b=$(head -1 /proc/stat)
    QUIET_BUSY=$(awk -v a="$a" -v b="$b" 'BEGIN {
      split(a, x); split(b, y); t = 0
      for (i = 2; i <= 9; i++) t += y[i] - x[i]
      idle = (y[5] - x[5]) + (y[6] - x[6])
      print (t > 0 ? int(100 * (t - idle) / t) : 0) }')
    [ "$QUIET_BUSY" -lt 10 ] && return 0
    if [ $SECONDS -ge $end ]; then
      [ "$QUIET_BUSY" -gt "$BUSIEST" ] && BUSIEST=$QUIET_BUSY
      return 1
    fi
  done
}

# disturbed LINE: true if other processes used more than 10% of a CPU
# during a measured window (the other_cpu_s and secs words of LINE, as
# loadgen and run.sh's http_run print them).
disturbed() {
  awk -v o="$(kv other_cpu_s "$1")" -v s="$(kv secs "$1")" \
    'BEGIN { exit !(o != "" && s > 0 && o > 0.1 * s) }'
}

# -- Readings from /proc -----------------------------------------------------

# cpu_ticks PID...: utime + stime of the PIDs in clock ticks (fields 14 and
# 15 of /proc/PID/stat, counted after the ")" that ends the command name);
# a pid that is gone counts 0.
cpu_ticks() {
  local p t=0 f
  for p in "$@"; do
    f=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    [ -n "$f" ] || continue
    t=$(( t + $(awk '{ print $12 + $13 }' <<< "$f") ))
  done
  echo "$t"
}

# busy_ticks: ticks all CPUs spent outside idle and iowait (/proc/stat).
busy_ticks() { awk 'NR == 1 { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# rss_kib PID: VmRSS in KiB; status_kib PID FIELD: a "FIELD: N kB" line of
# /proc/PID/status (RssAnon...); pss_kib PID: Pss of smaps_rollup;
# fd_count PID: open descriptors. Empty (fd_count: 0) if PID is gone.
rss_kib() { status_kib "$1" VmRSS; }
status_kib() { sed -n "s/^$2:[[:space:]]*\([0-9]*\) kB/\1/p" "/proc/$1/status" 2>/dev/null || true; }
pss_kib() { sed -n 's/^Pss:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/smaps_rollup" 2>/dev/null || true; }
fd_count() { { ls "/proc/$1/fd" 2>/dev/null || true; } | wc -l; }

# collected [FILE]: the instruction total of a callgrind run from its log
# (FILE, else stdin).
collected() { sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' ${1:+"$1"}; }

# -- Numbers -----------------------------------------------------------------

# kv KEY LINE: the value of KEY=value in a line of key=value words.
kv() { tr ' ' '\n' <<< "$2" | sed -n "s/^$1=//p" | head -1; }

# median V...: the middle value (the mean of the two middle ones if even);
# arguments that are not numbers (failed runs) are skipped; "-" if nothing
# is left.
median() {
  printf '%s\n' "$@" | awk '/^-?[0-9.]+$/' | sort -g |
    awk '{ v[NR] = $1 } END {
      if (NR == 0) { print "-"; exit }
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      print m }'
}

# ratio A B [DIGITS]: A/B with DIGITS (default 2) decimals, or "-" if either
# is missing or B is 0.
ratio() {
  awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
    if (a !~ /^-?[0-9.]+$/ || b !~ /^-?[0-9.]+$/ || b + 0 == 0) print "-"
    else printf "%.*f\n", d, a / b }'
}

# fmt V [DIGITS]: V with DIGITS (default 1) decimals, or "-".
fmt() { awk -v v="$1" -v d="${2:-1}" 'BEGIN {
  if (v ~ /^-?[0-9.]+$/) printf "%.*f\n", d, v; else print "-" }'; }

# per_conn BEFORE AFTER N: (AFTER - BEFORE) / N with two decimals, or "-".
per_conn() {
  awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN {
    if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && n > 0) printf "%.2f", (b - a) / n
    else print "-" }'
}

# wrk_us VALUE: a wrk latency ("745.00us", "1.23ms", "2.01s"; wrk pads the
# unit) in us, empty if it is none.
wrk_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u); gsub(/[ \t]/, "", u)
    if (u == "us") print n; else if (u == "ms") print n * 1000
    else if (u == "s") print n * 1000000; else if (u == "m") print n * 60000000
    else print "" }'
}

# -- Output ------------------------------------------------------------------

log() { printf '%s: %s\n' "$BENCH_TAG" "$*" >&2; }
result() { echo "$1=$2" >> "$RESULTS"; }

# title TITLE: a section title in the table. row COLUMNS...: one table line.
# note TEXT: an indented line of text. All append to TABLE, or write to
# stdout if it is empty (not to /dev/stdout, whose new file offset would
# overwrite what the script writes to stdout itself).
title() { table printf '\n== %s\n' "$1"; }
row() { table printf "  %-32s %10s %-14s %s\n" "$@"; }
note() { table printf '  %s\n' "$*"; }
table() { if [ -n "$TABLE" ]; then "$@" >> "$TABLE"; else "$@"; fi; }

# -- Peers -------------------------------------------------------------------

# nginx_start NAME CONF PORT [SED...]: nginx from scripts/bench/CONF with its
# own prefix (config, pid file, temp directories) in build/bench/NAME/, its
# @PORT@, @PREFIX@ and @FILES@ filled in and the SED expressions applied;
# sets SRV_PID (the master) and PEER_MEASURE (the worker, whose CPU time and
# memory are the server's; the master forks it, so it inherits the CPU pin,
# and it joins PIDS should the master die first). False if nginx or its
# Lua module is missing or it did not start.
NGINX_MODS=/usr/lib/nginx/modules
nginx_start() {
  local name=$1 conf=$2 port=$3 dir=$PWD/$B/$1 worker="" _
  shift 3
  if ! command -v nginx > /dev/null; then
    log "nginx is missing (scripts/deps.sh bench)"; return 1
  fi
  if grep -q '^load_module' "scripts/bench/$conf" &&
     [ ! -f "$NGINX_MODS/ngx_http_lua_module.so" ]; then
    log "libnginx-mod-http-lua is missing (scripts/deps.sh bench)"; return 1
  fi
  mkdir -p "$dir"
  sed -e "s|@PORT@|$port|g" -e "s|@PREFIX@|$dir|g" -e "s|@FILES@|$FILES|g" "$@" \
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

# with_base COHOST_PEERS PEER...: the PEERs, one a word, and after each one
# that is in COHOST_PEERS (the peers run by $COHOST) its twin NAME_base when
# BENCH_BASE_COHOST is set. A section starts NAME_base as it starts NAME,
# with COHOST=$BASE_COHOST and LOG_SUFFIX=_base (run.sh's peer_start), so
# both are measured in the same interleaved runs.
with_base() {
  local cohost=" $1 " p out=""
  shift
  for p in "$@"; do
    out+=" $p"
    [ -n "$BASE_COHOST" ] && [ "${cohost/ $p /}" != "$cohost" ] && out+=" ${p}_base"
  done
  echo "${out# }"
}

# base_label LABEL: the label of a base twin: LABEL without a trailing
# " (...)", then " (base)" ("cohost Lua (echo.lua)" -> "cohost Lua (base)").
base_label() { echo "${1% (*)} (base)"; }

# base_check: false, with a log line, if BENCH_BASE_COHOST is set but is not
# an executable.
base_check() {
  [ -z "$BASE_COHOST" ] || [ -x "$BASE_COHOST" ] && return 0
  log "BENCH_BASE_COHOST=$BASE_COHOST is not an executable"
  return 1
}

# describe BIN: BIN and, if it sits in a git work tree's build/, that
# tree's commit, "-dirty" if it has changes ("build/cohost (be3d9c4)").
describe() {
  local c
  c=$(git -C "$(dirname "$1")/.." describe --always --dirty 2>/dev/null) || c=""
  echo "$1${c:+ ($c)}"
}
