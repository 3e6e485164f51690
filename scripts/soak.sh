#!/usr/bin/env bash
# scripts/soak.sh [minutes]: drives mixed load at one cohost server for the
# given time (default 10 minutes, fractions allowed), samples it every
# second and fails if its memory, descriptors, coroutines or processes
# trend upward after the warm-up, or if any well-behaved request failed.
# docs/soak.md says what runs, what is measured and the trend rule.
#
# The server is build/cohost examples/soak.lua (HTTP and TCP echo) with
# --status-addr; with --processes (when build/cohost has it) it runs as a
# master and workers and gets a SIGHUP reload every SOAK_RELOAD_EVERY
# seconds. The loads, each a background loop that ends at the deadline:
#   wrk       keep-alive HTTP clients (scripts/soak/wrk.lua)     well-behaved
#   echo      rounds of build/bench/loadgen on the echo port     well-behaved
#   slowloris slowhttptest -H: heads sent a line a second        bad on purpose
#   slowread  slowhttptest -X: GET /big read a few bytes a second bad on purpose
#   reset     scripts/soak/reset_clients.py: RST mid-request     bad on purpose
#   reload    SIGHUP to the master (only with --processes)
# The sampler (scripts/soak/sample.lua) writes the CSV; the trend check
# (scripts/soak/check.lua) and gnuplot (scripts/soak/plot.gp) read it.
#
# Output in SOAK_DIR (default build/soak): soak.csv, soak.png, summary.txt
# (what is printed at the end), trend.txt and logs/ (server and load logs).
# Exit status: 0 passed, 1 failed, 2 could not run.
#
# Environment:
#   SOAK_SECONDS         run time in seconds; overrides the minutes argument
#   SOAK_COHOST, SOAK_LOADGEN  binaries to use as they are (default: make
#                        build/cohost and build/bench/loadgen first)
#   SOAK_DIR             output directory (default build/soak)
#   SOAK_LOADS           loads to run (default "wrk echo slowloris slowread
#                        reset reload")
#   SOAK_WARM            warm-up fraction of the run (default 0.2)
#   SOAK_LEAK            passed to examples/soak.lua: mem, coro, fd (a list)
#                        make the server leak on purpose, to see a soak fail
#   SOAK_PROCESSES       worker processes with --processes (default 2)
#   SOAK_RELOAD_EVERY    seconds between SIGHUP reloads (default 30)
#   SOAK_SHUTDOWN_TIMEOUT  the server's --shutdown-timeout (default 10)
#   SOAK_WRK_CONNS, SOAK_ECHO_CONNS, SOAK_SLOW_CONNS, SOAK_RESET_RATE
#                        wrk connections (50), echo connections (20), each
#                        slowhttptest's connections (40), resets a second (50)

set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

MINUTES=${1:-10}
SECS=${SOAK_SECONDS:-$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 + 0.5 }')}
DIR=${SOAK_DIR:-build/soak}
LOADS=${SOAK_LOADS:-"wrk echo slowloris slowread reset reload"}
WARM=${SOAK_WARM:-0.2}
NPROC=${SOAK_PROCESSES:-2}
RELOAD_EVERY=${SOAK_RELOAD_EVERY:-30}
WRK_CONNS=${SOAK_WRK_CONNS:-50}
ECHO_CONNS=${SOAK_ECHO_CONNS:-20}
SLOW_CONNS=${SOAK_SLOW_CONNS:-40}
RESET_RATE=${SOAK_RESET_RATE:-50}
COHOST=${SOAK_COHOST:-build/cohost}
LOADGEN=${SOAK_LOADGEN:-build/bench/loadgen}
LOGS=$DIR/logs
CSV=$DIR/soak.csv
PNG=$DIR/soak.png
SUMMARY=$DIR/summary.txt

if ! [[ "$SECS" =~ ^[0-9]+$ ]] || [ "$SECS" -lt 5 ]; then
  echo "soak: the run must last at least 5 seconds (got '$SECS')" >&2
  exit 2
fi

has() { [[ " $LOADS " == *" $1 "* ]]; }
note() { echo "soak: $*" | tee -a "$SUMMARY"; }

mkdir -p "$LOGS"
rm -f "$LOGS"/*.log "$CSV" "$PNG" "$DIR/trend.txt"
: > "$SUMMARY"

# Built unless given: a soak of a stale binary would say nothing.
[ -n "${SOAK_COHOST:-}" ] || make -s "$COHOST" || exit 2
if has echo && [ -z "${SOAK_LOADGEN:-}" ]; then make -s "$LOADGEN" || exit 2; fi
for tool in curl python3; do
  command -v "$tool" > /dev/null || { echo "soak: $tool is missing (scripts/deps.sh)" >&2; exit 2; }
done
# A load whose tool is missing is skipped and said so, not counted as run.
skip() { note "$1 skipped: $2"; LOADS=" $LOADS "; LOADS=${LOADS/ $1 / }; }
has wrk && ! command -v wrk > /dev/null && skip wrk "wrk is missing"
for l in slowloris slowread; do
  has $l && ! command -v slowhttptest > /dev/null && skip $l "slowhttptest is missing"
done
PROC_OPTS=()
if has reload; then
  if "$COHOST" --help 2>&1 | grep -q -- '--processes'; then
    PROC_OPTS=(--processes "$NPROC")
  else
    skip reload "$COHOST has no --processes yet"
  fi
fi

# Every connection takes a descriptor in the server and one in a client.
ulimit -n "$(ulimit -Hn)" 2>/dev/null

# -- Processes ---------------------------------------------------------------

PIDS=()        # background loads and the sampler, stopped on exit
SRV=           # the server (the master with --processes)

# stop PID: TERM to PID and its direct children (a load loop's current
# tool), KILL to those left after a second (slowhttptest may linger).
stop() {
  local p=$1 kids k left_alive
  kids=$(ps -o pid= --ppid "$p" 2>/dev/null)
  kill -TERM "$p" $kids 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    left_alive=
    for k in "$p" $kids; do kill -0 "$k" 2>/dev/null && left_alive=1; done
    [ -z "$left_alive" ] && return 0
    sleep 0.1
  done
  kill -KILL "$p" $kids 2>/dev/null
}

cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop "$p"; done
  PIDS=()
  [ -n "$SRV" ] && stop "$SRV"   # a master's workers are its children
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() {
  python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'
}
read -r HP EP SP <<< "$(free_ports)"

# -- The server --------------------------------------------------------------

# The drain time outlasts an echo round (7 s): a reload lets a
# well-behaved session finish on the old worker, as nginx's
# worker_shutdown_timeout would; a shorter one cuts sessions by design.
SOAK_LEAK=${SOAK_LEAK:-} "$COHOST" "${PROC_OPTS[@]}" --status-addr "127.0.0.1:$SP" \
  --shutdown-timeout "${SOAK_SHUTDOWN_TIMEOUT:-10}" examples/soak.lua "$HP" "$EP" > "$LOGS/server.log" 2>&1 &
SRV=$!
up=0
for _ in $(seq 100); do
  if curl -sf -o /dev/null "http://127.0.0.1:$HP/" &&
     curl -sf -o /dev/null "http://127.0.0.1:$SP/status"; then up=1; break; fi
  kill -0 "$SRV" 2>/dev/null || break
  sleep 0.1
done
if [ "$up" != 1 ]; then
  echo "soak: the server did not start; $LOGS/server.log:" >&2
  tail -20 "$LOGS/server.log" >&2
  exit 2
fi

note "$SECS s against pid $SRV (http $HP, echo $EP, status $SP${PROC_OPTS[*]:+, ${PROC_OPTS[*]}})${SOAK_LEAK:+, SOAK_LEAK=$SOAK_LEAK}; loads:$LOADS"

# -- Loads -------------------------------------------------------------------

T0=$(date +%s)
END=$((T0 + SECS + 1))   # the loads outlast the sampler by a second
left() { echo $((END - $(date +%s))); }

if has wrk; then
  wrk -t1 -c"$WRK_CONNS" -d"$((SECS + 1))s" --timeout 5s -s scripts/soak/wrk.lua \
    "http://127.0.0.1:$HP/" > "$LOGS/wrk.log" 2>&1 &
  PIDS+=($!)
fi

# Rounds of at most 7 s, each with new connections: connects and closes
# run all along, not only at the start. 7 s and not a divisor of the
# reload period, so that reloads do not always fall between two rounds.
if has echo; then
  (
    while [ "$(left)" -gt 0 ]; do
      d=$(left); [ "$d" -gt 7 ] && d=7
      "$LOADGEN" -p "$EP" -c "$ECHO_CONNS" -d "$d" -w 0 >> "$LOGS/echo.log" 2>&1
      echo "round rc=$?" >> "$LOGS/echo.log"
    done
  ) &
  PIDS+=($!)
fi

# slowhttptest ends when the server has closed all its connections (the
# target's 5 s header timeout); it is started again until the deadline.
slow() {
  local name=$1; shift
  while [ "$(left)" -gt 1 ]; do
    slowhttptest "$@" -c "$SLOW_CONNS" -r "$SLOW_CONNS" -l "$(left)" -p 3 \
      >> "$LOGS/$name.log" 2>&1 < /dev/null
    echo "round rc=$?" >> "$LOGS/$name.log"
    sleep 0.5
  done
}
if has slowloris; then
  slow slowloris -H -i 1 -u "http://127.0.0.1:$HP/" &
  PIDS+=($!)
fi
if has slowread; then
  slow slowread -X -k 4 -n 1 -w 512 -y 1024 -z 512 -u "http://127.0.0.1:$HP/big" &
  PIDS+=($!)
fi

if has reset; then
  python3 scripts/soak/reset_clients.py "$HP" "$((SECS + 1))" "$RESET_RATE" \
    > "$LOGS/reset.log" 2>&1 &
  PIDS+=($!)
fi

if has reload; then
  (
    while sleep "$RELOAD_EVERY" && [ "$(left)" -gt 2 ]; do
      kill -HUP "$SRV" && echo "reload at $(( $(date +%s) - T0 )) s" >> "$LOGS/reload.log"
    done
  ) &
  PIDS+=($!)
fi

# -- Sampling ----------------------------------------------------------------

# In the background so that a signal to this script is handled at once
# (bash runs traps only between foreground commands).
"$COHOST" scripts/soak/sample.lua "$CSV" "$SECS" "$SRV" "$SP" 2> "$LOGS/sample.log" &
SAMPLER=$!
PIDS+=("$SAMPLER")
wait "$SAMPLER"
for p in "${PIDS[@]}"; do
  [ "$p" = "$SAMPLER" ] && continue
  # The loads end at the deadline on their own; a few seconds of grace.
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  stop "$p"
done
PIDS=()

# -- Verdict -----------------------------------------------------------------

FAIL=0
fail() { note "FAIL: $*"; FAIL=1; }

alive=1
kill -0 "$SRV" 2>/dev/null || { alive=0; fail "the server died during the run (see $LOGS/server.log)"; }

# The figures at the first sample, the end of the warm-up and the last.
awk -F, -v warm="$WARM" '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
  { n++; t[n] = $col["t"]; for (k in col) v[n, k] = $col[k] }
  END {
    if (n == 0) { print "soak: no samples"; exit }
    for (w = 1; w < n && t[w] < t[1] + warm * (t[n] - t[1]); w++) {}
    printf "soak: %d samples; %-9s %10s %10s %10s\n", n, "", "first", "warm-up", "last"
    split("rss_kb fds procs coros connections requests lua_kb", keys, " ")
    for (j = 1; j <= 7; j++) {
      k = keys[j]
      printf "soak:   %-20s %10s %10s %10s\n", k, v[1, k], v[w, k], v[n, k]
    }
  }' "$CSV" | tee -a "$SUMMARY"

if has wrk; then
  line=$(grep '^wrk requests=' "$LOGS/wrk.log")
  if [ -z "$line" ]; then
    fail "wrk gave no summary (see $LOGS/wrk.log)"
  else
    note "$line"
    bad=$(awk '{ s = 0; for (i = 3; i <= NF; i++) { split($i, kv, "="); s += kv[2] } print s }' <<< "$line")
    [ "$bad" -eq 0 ] || fail "wrk: $bad well-behaved requests failed"
  fi
fi

if has echo; then
  read -r rounds msgs errs rcs <<< "$(awk '
    /^loadgen / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "msgs") m += kv[2]; if (kv[1] == "errors") e += kv[2] } }
    /^round rc=/ { r++; if ($2 != "rc=0") bad++ }
    END { print r + 0, m + 0, e + 0, bad + 0 }' "$LOGS/echo.log")"
  note "echo rounds=$rounds msgs=$msgs errors=$errs failed_rounds=$rcs"
  [ "$errs" -eq 0 ] && [ "$rcs" -eq 0 ] ||
    fail "echo: $errs connection errors, $rcs failed rounds (see $LOGS/echo.log)"
fi

for l in slowloris slowread; do
  has $l && note "$l rounds=$(grep -c 'round rc=' "$LOGS/$l.log")"
done
has reset && note "$(grep '^reset ' "$LOGS/reset.log" || echo "reset: no summary")"
has reload && note "reloads=$(grep -c '^reload at' "$LOGS/reload.log" 2>/dev/null || echo 0)"

# Stop the server; it should shut down cleanly (status 0).
if [ "$alive" = 1 ]; then
  kill -TERM "$SRV"
  for _ in $(seq 100); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SRV" 2>/dev/null; then
    fail "the server did not stop within 10 s of SIGTERM"
  else
    wait "$SRV"; rc=$?
    [ "$rc" -eq 0 ] || fail "the server exited with status $rc on SIGTERM"
  fi
fi
SRV=
errors=$(grep -c '\[error\]' "$LOGS/server.log")
note "server log: $errors lines at error level ($LOGS/server.log)"
[ "$errors" -eq 0 ] || fail "the server logged errors: $(grep -m1 '\[error\]' "$LOGS/server.log")"

# The trend check reads the CSV the sampler wrote.
if "$COHOST" scripts/soak/check.lua "$CSV" "$WARM" > "$DIR/trend.txt" 2>&1; then
  sed 's/^/soak: trend /' "$DIR/trend.txt" | tee -a "$SUMMARY"
else
  sed 's/^/soak: trend /' "$DIR/trend.txt" | tee -a "$SUMMARY"
  fail "a series trends upward after the warm-up (rule: docs/soak.md)"
fi

if command -v gnuplot > /dev/null; then
  warm_t=$(awk -v s="$SECS" -v w="$WARM" 'BEGIN { print s * w }')
  gnuplot -e "csv='$CSV'; png='$PNG'; warm=$warm_t" scripts/soak/plot.gp 2> "$LOGS/gnuplot.log" ||
    note "gnuplot failed (see $LOGS/gnuplot.log)"
  [ -s "$PNG" ] && note "plot: $PNG"
else
  note "plot skipped: gnuplot is missing (Debian gnuplot-nox)"
fi

if [ "$FAIL" = 0 ]; then note "PASSED"; else note "FAILED"; fi
exit "$FAIL"
