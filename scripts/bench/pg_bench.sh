#!/usr/bin/env bash
# PostgreSQL from cohost (docs/benchmarks.md#postgresql): a /db handler
# (scripts/bench/pg_db.lua: one random row of a 10,000-row table as JSON)
# under wrk, on this build's cohost.postgres and, with
# BENCH_BASE_COHOST=path/to/another/build/cohost, on that build's (a build
# from before issue 28 runs its cohost.postgres over LuaSQL). Per server:
# requests/s, requests per server CPU-second, p99, and system calls per
# request from `strace -c -f -p PID` under the same load; then a COPY of
# BENCH_PG_COPY_ROWS rows in and out (scripts/bench/pg_copy.lua). cohost
# runs on CPU 0, PostgreSQL and wrk on CPU 1, as run.sh pins servers and
# generators. A throwaway cluster (initdb, fsync off) on a free port.
#
#   scripts/bench/pg_bench.sh
#   BENCH_BASE_COHOST=/tmp/base/build/cohost scripts/bench/pg_bench.sh
#
# Environment: BENCH_PG_SECS (seconds per wrk run, 10), BENCH_PG_REPS (runs
# per server, the median kept, 3), BENCH_PG_CONNS (wrk connections, 64),
# BENCH_PG_POOL (pool size, 16), BENCH_PG_COPY_ROWS (1000000; 0 skips),
# BENCH_PG_PERF=1 (perf record -g of each server under load: its CPU by
# object, build/bench/logs/pg_perf_*.txt).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/bench/lib.sh
BENCH_TAG=pg

SECS=${BENCH_PG_SECS:-10}
REPS=${BENCH_PG_REPS:-3}
CONNS=${BENCH_PG_CONNS:-64}
POOL=${BENCH_PG_POOL:-16}
COPY_ROWS=${BENCH_PG_COPY_ROWS:-1000000}
PGBIN=/usr/lib/postgresql/15/bin
mkdir -p "$LOGS"

# PostgreSQL refuses to run as root: as the postgres user then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups "$@"; else "$@"; fi
}

dir=$(mktemp -d /tmp/cohost-pgbench.XXXXXX)
CLEANUP_DIRS+=("$dir")
[ "$(id -u)" = 0 ] && chown postgres: "$dir"
as_pg "$PGBIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 > "$LOGS/pg_initdb.log" 2>&1 ||
  { log "initdb failed: $LOGS/pg_initdb.log"; exit 1; }
PGPORT=$(free_port)
as_pg taskset -c "$CLI_CPU" "$PGBIN/postgres" -D "$dir/data" -p "$PGPORT" -k "$dir" \
  -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100 > "$LOGS/pg_server.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do
  grep -q "ready to accept connections" "$LOGS/pg_server.log" 2>/dev/null && break
  sleep 0.05
done
psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres \
  -c "CREATE TABLE world (id int PRIMARY KEY, randomnumber int NOT NULL)" \
  -c "INSERT INTO world SELECT i, (random() * 10000)::int FROM generate_series(1, 10000) i" \
  -c "VACUUM ANALYZE world" > /dev/null || { log "psql failed"; exit 1; }
log "PostgreSQL 15 on port $PGPORT; wrk -c $CONNS, ${SECS} s x $REPS per server, pool $POOL"

# The servers run side by side (both on CPU 0, one loaded at a time) and
# their wrk runs interleave, so a machine that drifts moves both alike.
NAMES=() BINS=() PORTS=() SPIDS=()
declare -A RPS P99 PERCPU
for entry in "new:$COHOST" ${BASE_COHOST:+"base:$BASE_COHOST"}; do
  name=${entry%%:*} bin=${entry#*:}
  port=$(free_port)
  start_server "pg_$name" "$bin" scripts/bench/pg_db.lua "$port" "$PGPORT" "$POOL"
  wait_http "$port" "$SRV_PID" || { log "$name did not start: $LOGS/pg_$name.log"; exit 1; }
  taskset -c "$CLI_CPU" wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port/" > /dev/null   # warm-up
  NAMES+=("$name") BINS+=("$bin") PORTS+=("$port") SPIDS+=("$SRV_PID")
done

# run I: one wrk run against server I; appends to RPS, PERCPU, P99.
run() {
  local i=$1 name=${NAMES[$1]} out t0 t1 reqs
  t0=$(cpu_ticks "${SPIDS[$i]}")
  out=$(taskset -c "$CLI_CPU" wrk -t1 -c"$CONNS" -d"${SECS}s" --latency "http://127.0.0.1:${PORTS[$i]}/")
  t1=$(cpu_ticks "${SPIDS[$i]}")
  reqs=$(awk '/requests in/ { print $1 }' <<< "$out")
  RPS[$name]+=" $(awk '/^Requests\/sec/ { print $2 }' <<< "$out")"
  PERCPU[$name]+=" $(awk -v n="$reqs" -v t=$(( t1 - t0 )) -v hz="$HZ" 'BEGIN { printf "%.0f", t ? n / (t / hz) : 0 }')"
  P99[$name]+=" $(wrk_us "$(awk '$1 == "99%" { print $2 }' <<< "$out")")"
  grep -q "Non-2xx" <<< "$out" && log "$name: $(grep Non-2xx <<< "$out")"
  return 0
}

# trace I: strace -c of server I under a 5 s wrk run: system calls per
# request, in total and for the calls that carry the I/O; then, with
# BENCH_PG_PERF, its CPU by object from perf record.
trace() {
  local i=$1 name=${NAMES[$1]} out reqs spid
  local strace_out="$LOGS/pg_strace_$name.txt"
  strace -c -f -p "${SPIDS[$i]}" -o "$strace_out" 2> /dev/null &
  spid=$!
  sleep 1
  out=$(taskset -c "$CLI_CPU" wrk -t1 -c"$CONNS" -d5s "http://127.0.0.1:${PORTS[$i]}/")
  kill -INT "$spid"
  wait "$spid" 2> /dev/null
  reqs=$(awk '/requests in/ { print $1 }' <<< "$out")
  # strace -c's columns: % time, seconds, usecs/call, calls, [errors,] syscall.
  SYSCALLS=$(awk -v n="$reqs" '$NF == "total" { printf "%.2f", $4 / n }
    $NF ~ /^(sendto|recvfrom|poll|ppoll|epoll_wait|writev|write|read|sendmsg|recvmsg)$/ { c[$NF] = $4 }
    END { for (k in c) printf " %s=%.2f", k, c[k] / n }' "$strace_out")
  rm -f "$LOGS/pg_perf_$name.txt"
  if [ -n "${BENCH_PG_PERF:-}" ]; then
    perf record -q -e cpu-clock -g -o "$LOGS/pg_perf_$name.data" -p "${SPIDS[$i]}" 2> /dev/null &
    local ppid=$!
    sleep 0.5
    taskset -c "$CLI_CPU" wrk -t1 -c"$CONNS" -d5s "http://127.0.0.1:${PORTS[$i]}/" > /dev/null
    kill -INT "$ppid"
    wait "$ppid" 2> /dev/null
    perf report -q -i "$LOGS/pg_perf_$name.data" --no-children --sort dso 2> /dev/null |
      awk 'NF >= 2 && $1 ~ /%$/ { printf "    %s %s\n", $1, $2 }' | head -8 > "$LOGS/pg_perf_$name.txt"
  fi
  return 0
}

echo "== PostgreSQL /db (one random row of 10,000), wrk -c $CONNS, pool $POOL, medians of $REPS interleaved runs"
for _ in $(seq "$REPS"); do
  for i in "${!NAMES[@]}"; do run "$i"; done
done
for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]}
  trace "$i"
  # shellcheck disable=SC2086
  printf '  %-6s %9s req/s %9s req/CPU-s  p99 %8s us  syscalls/req %s\n' "$name" \
    "$(median ${RPS[$name]})" "$(median ${PERCPU[$name]})" "$(median ${P99[$name]})" "$SYSCALLS"
  [ -s "$LOGS/pg_perf_$name.txt" ] && cat "$LOGS/pg_perf_$name.txt"
done
for p in "${SPIDS[@]}"; do stop_server "$p"; done

if [ "$COPY_ROWS" -gt 0 ]; then
  echo "== COPY of $COPY_ROWS rows through cohost.postgres (seconds)"
  echo "  $(taskset -c "$SRV_CPU" "$COHOST" scripts/bench/pg_copy.lua "$PGPORT" "$COPY_ROWS")"
fi
