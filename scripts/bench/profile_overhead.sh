#!/usr/bin/env bash
# What the profiler costs at its default rate: requests per second of
# examples/hello.lua (one worker, pinned to CPU 0) under wrk -t1 -c50
# (pinned to CPU 1) for SECS seconds, without profiling and with every
# worker sampled at PROFILE_HZ (scripts/bench/hello_profiled.lua), in
# ROUNDS interleaved rounds (off, on, off, on, ...), so that a change in
# the machine's load hits both sides alike. Prints each round and the
# medians with on/off, of the rate and of the requests per CPU-second of
# the server. The machine is shared: read the rounds' spread
# before the median; the callgrind figures (http_profile.sh on both
# scripts) do not depend on load.
#
#   bash scripts/bench/profile_overhead.sh [ROUNDS [SECS]]   (default 5 5)
#   PROFILE_HZ=99 (default) sets the rate; HTTP_CONNS=50 the connections.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/bench/lib.sh

BENCH_TAG=profile_overhead
ROUNDS=${1:-5}; SECS=${2:-5}
CONNS=${HTTP_CONNS:-50}
export PROFILE_HZ=${PROFILE_HZ:-99}
LOGS=$B/profile_overhead; mkdir -p "$LOGS"
command -v wrk > /dev/null || { log "wrk is missing"; exit 1; }

# round SCRIPT NAME: one round's requests per second and requests per
# CPU-second of the server ("RPS PER_CPU_S"): wrk's count over the ticks
# the server used meanwhile, which a busy machine slows less than the
# rate (the server waits for a CPU, not in it).
round() {
  local port out t0 t1 reqs
  port=$(free_port)
  start_server "$2" "$COHOST" -w 1 "$1" "$port"
  if ! wait_port "$port" "$SRV_PID" 30; then
    log "$2 did not start"; stop_server "$SRV_PID"; forget "$SRV_PID"; echo "- -"; return
  fi
  t0=$(cpu_ticks "$SRV_PID")
  out=$(taskset -c "$CLI_CPU" wrk -t1 -c"$CONNS" -d"${SECS}s" "http://127.0.0.1:$port/" 2>&1)
  t1=$(cpu_ticks "$SRV_PID")
  stop_server "$SRV_PID"; forget "$SRV_PID"
  reqs=$(awk '/requests in/ { print $1 }' <<< "$out")
  echo "$(awk '/^Requests\/sec:/ { print $2 }' <<< "$out")" \
       "$(awk -v r="$reqs" -v t=$(( t1 - t0 )) -v hz="$HZ" 'BEGIN { if (t > 0 && r > 0) printf "%.0f", r / (t / hz); else print "-" }')"
}

off=() on=() offc=() onc=()
for r in $(seq "$ROUNDS"); do
  read -r a ac <<< "$(round examples/hello.lua off)"
  read -r b bc <<< "$(round scripts/bench/hello_profiled.lua on)"
  off+=("$a"); on+=("$b"); offc+=("$ac"); onc+=("$bc")
  echo "round $r: off $a req/s ($ac per CPU-s), on $b req/s ($bc per CPU-s); on/off $(ratio "$b" "$a" 3) ($(ratio "$bc" "$ac" 3) per CPU-s)"
done
mo=$(median "${off[@]}"); mn=$(median "${on[@]}")
co=$(median "${offc[@]}"); cn=$(median "${onc[@]}")
echo "medians of $ROUNDS rounds of ${SECS}s at $PROFILE_HZ Hz: off $mo req/s, on $mn req/s: on/off $(ratio "$mn" "$mo" 3);" \
     "per CPU-second off $co, on $cn: on/off $(ratio "$cn" "$co" 3)"
