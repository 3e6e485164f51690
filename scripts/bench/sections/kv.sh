# Section kv (sourced by run.sh): examples/kv against redis-server with
# redis-benchmark -t set,get,incr,lpush,lpop,sadd,zadd,hset, 50
# connections, without pipelining and with -P 16; both servers without a
# log, pinned to SRV_CPU, redis-benchmark on CLI_CPU, BENCH_KV_REPS
# interleaved rounds (kv, redis, kv, ...), medians; ops/s, kv/redis, and
# the servers' CPU time per request (less disturbed by a busy machine).
# scripts/bench/kv_bench.sh is the longer stand-alone run (with a log too).

KV_TESTS=${BENCH_KV_TESTS:-set,get,incr,lpush,lpop,sadd,zadd,hset}
KV_N=${BENCH_KV_N:-$([ "$QUICK" = 1 ] && echo 50000 || echo 200000)}
KV_REPS=${BENCH_KV_REPS:-$([ "$QUICK" = 1 ] && echo 1 || echo 3)}

# kv_bench_once PORT PID PIPELINE: "TEST ops/s us/op" per test, in order
# (lpop pops what lpush pushed).
kv_bench_once() {
  redis-cli -p "$1" flushall > /dev/null
  local t a b rps
  for t in ${KV_TESTS//,/ }; do
    a=$(cpu_ticks "$2")
    rps=$(taskset -c "$CLI_CPU" redis-benchmark -p "$1" -t "$t" -n "$KV_N" -c 50 -P "$3" --csv 2>/dev/null |
      awk -F'"' 'NR > 1 && $2 != "" { print $4 }')
    b=$(cpu_ticks "$2")
    awk -v t="$t" -v r="$rps" -v c=$((b - a)) -v hz="$HZ" -v n="$KV_N" \
      'BEGIN { printf "%s %s %.3f\n", t, r, c * 1e6 / hz / n }'
  done
}

section_kv() {
  title "kv (examples/kv) against redis-server: redis-benchmark -c 50 -n $KV_N, median of $KV_REPS"
  local p tool
  for tool in redis-server redis-benchmark redis-cli; do
    command -v "$tool" > /dev/null || { note "$tool is missing (scripts/deps.sh test)"; return; }
  done
  local dir kvp rp kvpid rpid
  dir=$(mktemp -d); CLEANUP_DIRS+=("$dir")
  kvp=$(free_port)
  start_server kv "$COHOST" examples/kv/main.lua --port "$kvp" --dir "$dir" --appendonly no
  kvpid=$SRV_PID
  rp=$(free_port)
  start_server redis redis-server --port "$rp" --dir "$dir" --save "" --appendonly no
  rpid=$SRV_PID
  if ! wait_port "$kvp" "$kvpid" || ! wait_port "$rp" "$rpid"; then
    note "a server did not start (logs in $LOGS)"
    stop_server "$kvpid"; stop_server "$rpid"
    return
  fi
  for p in 1 16; do
    log "kv -P $p"
    wait_quiet
    local kres="" rres="" r t k rv kc rc
    for r in $(seq 1 "$KV_REPS"); do
      kres+=$(kv_bench_once "$kvp" "$kvpid" "$p")$'\n'
      rres+=$(kv_bench_once "$rp" "$rpid" "$p")$'\n'
    done
    for t in ${KV_TESTS//,/ }; do
      # shellcheck disable=SC2046  # median takes one value a word
      k=$(median $(awk -v t="$t" '$1 == t { print $2 }' <<< "$kres"))
      # shellcheck disable=SC2046
      rv=$(median $(awk -v t="$t" '$1 == t { print $2 }' <<< "$rres"))
      # shellcheck disable=SC2046
      kc=$(median $(awk -v t="$t" '$1 == t { print $3 }' <<< "$kres"))
      # shellcheck disable=SC2046
      rc=$(median $(awk -v t="$t" '$1 == t { print $3 }' <<< "$rres"))
      row "${t^^} -P $p" "$(ratio "$k" "$rv")" "x redis ops/s" \
        "kv $(fmt "$k" 0) ops/s, redis $(fmt "$rv" 0); CPU/op kv $(fmt "$kc" 2) us, redis $(fmt "$rc" 2) us"
      result "kv.$t.p$p.ops_s" "$k"; result "kv.$t.p$p.redis_ops_s" "$rv"
      result "kv.$t.p$p.vs_redis" "$(ratio "$k" "$rv")"
    done
  done
  stop_server "$kvpid"; stop_server "$rpid"
}
