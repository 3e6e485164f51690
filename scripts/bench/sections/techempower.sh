# Section techempower (sourced by run.sh): TechEmpower's six tests
# (scripts/bench/techempower/) on cohost (app.lua: router, res:json,
# cohost.postgres), on nginx + OpenResty's Lua module + pgmoon
# (ngx_app.lua under nginx.conf) and on cohost running that same pgmoon
# code through cohost.ngx (ngx_cohost.lua); cohost also answers
# queries and updates with db:pipeline (/pipeline/...). A PostgreSQL 15
# cluster of the section's own (db.sh: hello_world, md5 auth), unpinned;
# one worker per server on SRV_CPU with a pool of BENCH_TFB_POOL
# connections; wrk -t1 on CLI_CPU, -c 64 (plaintext -c 256 with 16
# requests pipelined). Every server is checked by verify.py before any
# figure is taken (a server that fails is left out, with a note). All
# servers run for the whole section (max_connections holds every pool)
# and are measured in turn per test and round, so the machine's drift
# hits all alike; medians of BENCH_TFB_REPS rounds: requests per second
# and per server CPU-second, p99 (over the samples wrk kept: its own
# pipelined p99 can print 0), PostgreSQL's CPU per request (postmaster and
# every backend, from /proc), and cohost against the peer.
#
# pgmoon is in no package registry: BENCH_PGMOON_DIR or PGMOON_DIR names a
# checkout of github.com/leafo/pgmoon (pgmoon.lua and pgmoon/ in it);
# without it the peer rows say "peer absent" and cohost's rows still run.
#
# Environment: BENCH_TFB_SECS (seconds per run; 10, quick 3),
# BENCH_TFB_REPS (rounds, 3), BENCH_TFB_CONNS (64), BENCH_TFB_POOL
# (connections per server, 64), BENCH_TFB_QUERIES (N of queries and
# updates, 20), BENCH_TFB_TESTS (rows, in order; default below),
# BENCH_TFB_PEERS (cohost nginx cohost_ngx; a base twin with
# BENCH_BASE_COHOST), BENCH_TFB_PERF=1 (perf record -g of each server
# under each test after the rounds: its CPU by object and by symbol in
# build/bench/logs/tfb_perf_PEER_TEST.txt).

TFB=scripts/bench/techempower
TFB_SECS=${BENCH_TFB_SECS:-$([ "$QUICK" = 1 ] && echo 3 || echo 10)}
TFB_REPS=${BENCH_TFB_REPS:-3}
TFB_CONNS=${BENCH_TFB_CONNS:-64}
TFB_POOL=${BENCH_TFB_POOL:-64}
TFB_QUERIES=${BENCH_TFB_QUERIES:-20}
TFB_TESTS=${BENCH_TFB_TESTS:-"plaintext json db queries pipeline_queries fortunes updates pipeline_updates"}
TFB_PGMOON=${BENCH_PGMOON_DIR:-${PGMOON_DIR:-}}

# tfb_path TEST: the request path of a test.
tfb_path() {
  case $1 in
    queries | updates) echo "/$1?queries=$TFB_QUERIES" ;;
    pipeline_*) echo "/pipeline/${1#pipeline_}?queries=$TFB_QUERIES" ;;
    *) echo "/$1" ;;
  esac
}

# tfb_label TEST: its name in the table.
tfb_label() {
  case $1 in
    queries | updates) echo "$1 ($TFB_QUERIES)" ;;
    pipeline_*) echo "${1#pipeline_} ($TFB_QUERIES), db:pipeline" ;;
    *) echo "$1" ;;
  esac
}

# tfb_serves PEER TEST: true if PEER has TEST (only app.lua has the
# pipelined routes).
tfb_serves() {
  case $2 in pipeline_*) [ "${1%_base}" = cohost ] ;; *) return 0 ;; esac
}

# tfb_peer_of TEST: the peer's test a cohost test is compared with.
tfb_peer_of() { echo "${1#pipeline_}"; }

# -- Servers -------------------------------------------------------------------

tfb_start_cohost() {
  PEER_LABEL="cohost (app.lua)"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server tfb_cohost "$COHOST" -w 1 "$TFB/app.lua" "$1" "$TFB_PGPORT" "$TFB_POOL"
}

tfb_start_nginx() {
  PEER_LABEL="nginx+lua+pgmoon"
  [ -n "$TFB_PGMOON" ] && [ -f "$TFB_PGMOON/pgmoon/init.lua" ] || return 1
  nginx_start tfb_nginx techempower/nginx.conf "$1" -e "s|@APPDIR@|$PWD/$TFB|g" \
    -e "s|@PGMOON@|$TFB_PGMOON|g" -e "s|@PGPORT@|$TFB_PGPORT|g" -e "s|@POOL@|$TFB_POOL|g"
}

tfb_start_cohost_ngx() {
  PEER_LABEL="cohost.ngx+pgmoon"
  [ -n "$TFB_PGMOON" ] && [ -f "$TFB_PGMOON/pgmoon/init.lua" ] || return 1
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  PGMOON_DIR=$TFB_PGMOON start_server tfb_cohost_ngx "$COHOST" -w 1 "$TFB/ngx_cohost.lua" \
    "$1" "$TFB_PGPORT" "$TFB_POOL"
}

# tfb_ready PEER PORT: verify.py passes (its output in the log), then a
# warm-up of every test the peer serves: LuaJIT's traces, the pools.
tfb_ready() {
  local flag="" t
  [ "${1%_base}" = cohost ] && flag=--pipeline
  if ! wait_http_path "$2" /plaintext; then
    note "skipped $1: /plaintext did not answer"
    return 1
  fi
  # shellcheck disable=SC2086
  if ! timeout 120 /usr/bin/python3 "$TFB/verify.py" "http://127.0.0.1:$2" "$TFB_PGPORT" $flag \
       > "$LOGS/tfb_verify_$1.log" 2>&1; then
    note "skipped $1: verify.py failed ($(grep -c '^FAIL' "$LOGS/tfb_verify_$1.log") checks; $LOGS/tfb_verify_$1.log)"
    return 1
  fi
  log "techempower $1: verified; warm-up"
  for t in $TFB_TESTS; do
    tfb_serves "$1" "$t" || continue
    tfb_wrk "$2" "$t" 1 > /dev/null 2>&1
  done
  return 0
}

# wait_http_path PORT PATH: until GET PATH answers 2xx (10 s at most).
wait_http_path() {
  local _
  for _ in $(seq 200); do
    curl -sf --max-time 1 -o /dev/null "http://127.0.0.1:$1$2" && return 0
    sleep 0.05
  done
  return 1
}

# tfb_wrk PORT TEST SECS: one pinned wrk run of TEST; wrk's output and
# wrk.lua's p99_us= line, then times' line (wrk's CPU) last.
tfb_wrk() {
  local c=$TFB_CONNS depth=1
  [ "$2" = plaintext ] && { c=256; depth=16; }
  { TFB_PIPELINE=$depth taskset -c "$CLI_CPU" timeout -k 2 "$(( $3 + 30 ))" \
      wrk -t1 -c"$c" -d"${3}s" --timeout 10s -s "$TFB/wrk.lua" \
      "http://127.0.0.1:$1$(tfb_path "$2")" 2>&1; times; }
}

# pg_ticks: CPU ticks of the postmaster and all its children (backends,
# checkpointer, walwriter, autovacuum).
pg_ticks() {
  # shellcheck disable=SC2046
  cpu_ticks "$TFB_PGPID" $(cat "/proc/$TFB_PGPID/task/$TFB_PGPID/children" 2>/dev/null)
}

# techempower_once PEER TEST REP: one run; prints key=value words: reqs,
# secs, req_s, p99_us, srv_cpu_s, pg_cpu_s, other_cpu_s (busy time of the
# machine less server, PostgreSQL and wrk), req_per_cpu_s, pg_us_per_req,
# errors, non2xx.
techempower_once() {
  local peer=$1 t=$2 out s0 s1 p0 p1 b0 b1 wcpu measure=${MEASURE[$1]//,/ }
  echo "== $peer $t run $3" >> "$LOGS/tfb_wrk.log"
  # shellcheck disable=SC2086
  s0=$(cpu_ticks $measure); p0=$(pg_ticks); b0=$(busy_ticks)
  out=$(tfb_wrk "${PORT[$peer]}" "$t" "$TFB_SECS")
  # shellcheck disable=SC2086
  s1=$(cpu_ticks $measure); p1=$(pg_ticks); b1=$(busy_ticks)
  echo "$out" >> "$LOGS/tfb_wrk.log"
  wcpu=$(tail -1 <<< "$out" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
    print t }')
  awk -v out="$out" -v s0="$s0" -v s1="$s1" -v p0="$p0" -v p1="$p1" -v b0="$b0" -v b1="$b1" \
      -v w="$wcpu" -v hz="$HZ" 'BEGIN {
    n = split(out, l, "\n"); reqs = ""; errs = 0; non = 0; p99 = ""
    for (i = 1; i <= n; i++) {
      if (l[i] ~ /requests in/) {
        split(l[i], f, " "); reqs = f[1]; secs = f[4]; sub(/s,$/, "", secs)
      }
      if (l[i] ~ /^Requests\/sec:/) { split(l[i], f, " "); rate = f[2] }
      if (l[i] ~ /^p99_us=/) { p99 = substr(l[i], 8) }
      if (l[i] ~ /Socket errors:/) {
        m = l[i]; gsub(/[^0-9 ]/, "", m); split(m, f, " ")
        errs = f[1] + f[2] + f[3] + f[4]
      }
      if (l[i] ~ /Non-2xx/) { split(l[i], f, ":"); non = f[2] + 0 }
    }
    if (reqs == "" || reqs == 0) { print "errors=1 failed=1"; exit }
    srv = (s1 - s0) / hz; pg = (p1 - p0) / hz; other = (b1 - b0) / hz - srv - pg - w
    if (other < 0) other = 0
    per = srv > 0 ? sprintf("%.0f", reqs / srv) : ""
    printf "reqs=%s secs=%s req_s=%s p99_us=%s srv_cpu_s=%.2f pg_cpu_s=%.2f other_cpu_s=%.2f", reqs, secs, rate, p99, srv, pg, other
    printf " req_per_cpu_s=%s pg_us_per_req=%.1f errors=%d non2xx=%d\n", per, 1e6 * pg / reqs, errs, non }'
}

# tfb_perf PEER TEST: perf record of the server under a 5 s run of TEST;
# its CPU by object and by symbol (top 25) in the log directory.
tfb_perf() {
  local peer=$1 t=$2 f="$LOGS/tfb_perf_$1_$2" pid=${MEASURE[$1]%%,*} ppid
  command -v perf > /dev/null || { log "perf is missing"; return 0; }
  perf record -q -e cpu-clock -F 2000 -g -o "$f.data" -p "$pid" 2> /dev/null &
  ppid=$!
  sleep 0.5
  tfb_wrk "${PORT[$peer]}" "$t" 5 > /dev/null 2>&1
  kill -INT "$ppid"; wait "$ppid" 2> /dev/null
  { echo "# perf record -e cpu-clock -g -p $pid ($peer, $t)"
    perf report -q -i "$f.data" --no-children --sort dso 2> /dev/null | awk 'NF >= 2 && $1 ~ /%$/' | head -10
    echo
    perf report -q -i "$f.data" --no-children --sort dso,sym 2> /dev/null | awk 'NF >= 2 && $1 ~ /%$/' | head -25
  } > "$f.txt"
  rm -f "$f.data"
}

# -- Section -------------------------------------------------------------------

section_techempower() {
  title "TechEmpower's tests (scripts/bench/techempower/): one worker on CPU $SRV_CPU, PostgreSQL 15 unpinned, wrk -t1 -c $TFB_CONNS on CPU $CLI_CPU (plaintext -c 256, 16 pipelined), pool $TFB_POOL, median of $TFB_REPS x ${TFB_SECS} s"
  local tool
  for tool in wrk psql curl /usr/lib/postgresql/15/bin/initdb /usr/bin/python3; do
    command -v "$tool" > /dev/null || { note "skipped: $tool is missing (scripts/deps.sh bench)"; return; }
  done
  local peers
  # shellcheck disable=SC2086  # word lists
  peers=$(with_base "$COHOST_PEERS" ${BENCH_TFB_PEERS:-cohost nginx cohost_ngx})
  local npeers
  npeers=$(wc -w <<< "$peers")
  local TFB_DIR TFB_PGPORT TFB_PGPID
  TFB_DIR=$(mktemp -d /tmp/cohost-tfb.XXXXXX)
  CLEANUP_DIRS+=("$TFB_DIR")
  TFB_PGPORT=$(free_port)
  if ! TFB_PGPID=$(bash "$TFB/db.sh" start "$TFB_DIR" "$TFB_PGPORT" $(( npeers * TFB_POOL + 20 )) 2> "$LOGS/tfb_db.log"); then
    note "skipped: PostgreSQL did not start ($LOGS/tfb_db.log)"
    bash "$TFB/db.sh" stop "$TFB_DIR"
    return
  fi
  PIDS+=("$TFB_PGPID")   # stopped (SIGTERM: once its clients are gone) if the bench is cut short
  log "techempower: PostgreSQL on port $TFB_PGPORT (pid $TFB_PGPID)"

  local peer t r LINE RETRIES=$(( 4 * TFB_REPS ))
  local -A PORT PID MEASURE LABEL INIT RATE P99 PERCPU CPU FAILED DISTURBED ERRS RUN RUNRATE PGUS
  local started=""
  for peer in $peers; do
    case ${peer%_base} in
      nginx | cohost_ngx)
        if [ -z "$TFB_PGMOON" ] || [ ! -f "$TFB_PGMOON/pgmoon/init.lua" ]; then
          note "$peer: peer absent (set PGMOON_DIR to a checkout of github.com/leafo/pgmoon)"
          continue
        fi ;;
    esac
    started+=" $peer"
  done
  # shellcheck disable=SC2086
  peers_start tfb $started

  for r in $(seq "$TFB_REPS"); do
    for t in $TFB_TESTS; do
      for peer in $started; do
        [ -n "${PORT[$peer]:-}" ] && tfb_serves "$peer" "$t" || continue
        log "techempower $peer $t run $r/$TFB_REPS"
        measure techempower "$peer" "$t" "$r"
        if [ -n "$(kv failed "$LINE")" ] || [ "$(kv non2xx "$LINE")" != 0 ]; then
          log "techempower $peer $t: failed run: $LINE (see $LOGS/tfb_wrk.log)"
          FAILED[$peer.$t]=$(( ${FAILED[$peer.$t]:-0} + 1 ))
          continue
        fi
        [ "$(kv errors "$LINE")" != 0 ] &&
          ERRS[$peer.$t]=$(( ${ERRS[$peer.$t]:-0} + $(kv errors "$LINE") ))
        record "$peer" "$t" "$r" req_s req_per_cpu_s
        PGUS[$peer.$t]+=" $(kv pg_us_per_req "$LINE")"
      done
    done
  done
  if [ -n "${BENCH_TFB_PERF:-}" ]; then
    for t in $TFB_TESTS; do
      for peer in $started; do
        [ -n "${PORT[$peer]:-}" ] && tfb_serves "$peer" "$t" && tfb_perf "$peer" "$t"
      done
    done
  fi
  # shellcheck disable=SC2086
  peers_stop $started
  bash "$TFB/db.sh" stop "$TFB_DIR"
  forget "$TFB_PGPID"

  printf "  %-22s %-20s %9s %9s %10s %11s\n" test server req/s p99_ms req/CPU-s pg_us/req >> "$TABLE"
  local rate p99 percpu pgus
  for t in $TFB_TESTS; do
    for peer in $started; do
      [ -n "${PORT[$peer]:-}" ] && tfb_serves "$peer" "$t" || continue
      rate=$(median ${RATE[$peer.$t]:-}); p99=$(median ${P99[$peer.$t]:-})
      percpu=$(median ${PERCPU[$peer.$t]:-}); pgus=$(median ${PGUS[$peer.$t]:-})
      printf "  %-22s %-20s %9s %9s %10s %11s\n" "$(tfb_label "$t")" "${LABEL[$peer]}" \
        "$(fmt "$rate" 0)" "$(fmt "$(ratio "$p99" 1000 6)" 2)" "$(fmt "$percpu" 0)" \
        "$(fmt "$pgus" 1)" >> "$TABLE"
      result "techempower.$peer.$t.req_s" "$rate"; result "techempower.$peer.$t.p99_us" "$p99"
      result "techempower.$peer.$t.req_per_cpu_s" "$percpu"
      result "techempower.$peer.$t.pg_us_per_req" "$pgus"
      [ -n "${FAILED[$peer.$t]:-}" ] &&
        note "  ^ ${FAILED[$peer.$t]} of $TFB_REPS runs failed or got non-2xx answers (see $LOGS/tfb_wrk.log)"
      [ -n "${ERRS[$peer.$t]:-}" ] &&
        note "  ^ wrk counted ${ERRS[$peer.$t]} socket errors over the runs (see $LOGS/tfb_wrk.log)"
      [ -n "${DISTURBED[$peer.$t]:-}" ] &&
        note "  ^ ${DISTURBED[$peer.$t]} of $TFB_REPS runs shared the machine with other load"
      vs_base techempower "$peer" "$t" "$TFB_REPS" req
    done
  done

  # cohost (and cohost.ngx) against nginx, per test: per-run ratios.
  local subj pt pc ms p9 pgr
  for subj in cohost cohost_ngx; do
    [ -n "${PORT[$subj]:-}" ] && [ -n "${PORT[nginx]:-}" ] || continue
    printf "\n  %-34s %12s %10s %8s %11s\n" "${LABEL[$subj]} vs ${LABEL[nginx]}" req/CPU-s req/s \
      p99 pg_us/req >> "$TABLE"
    for t in $TFB_TESTS; do
      tfb_serves "$subj" "$t" || continue
      pt=$(tfb_peer_of "$t")
      pc=$(fmt "$(run_ratio RUN "$subj" nginx "$t" "$TFB_REPS" 2>/dev/null)" 2)
      if [ "$pt" != "$t" ]; then
        # A pipelined test against the peer's plain one: pair the runs of
        # each round by hand (run_ratio pairs equal tests).
        local i ratios="" rates=""
        for i in $(seq "$TFB_REPS"); do
          ratios+=" $(ratio "${RUN[$subj.$t.$i]:-}" "${RUN[nginx.$pt.$i]:-}" 3)"
          rates+=" $(ratio "${RUNRATE[$subj.$t.$i]:-}" "${RUNRATE[nginx.$pt.$i]:-}" 3)"
        done
        pc=$(fmt "$(median $ratios)" 2); ms=$(fmt "$(median $rates)" 2)
      else
        ms=$(fmt "$(run_ratio RUNRATE "$subj" nginx "$t" "$TFB_REPS")" 2)
      fi
      p9=$(ratio "$(median ${P99[$subj.$t]:-})" "$(median ${P99[nginx.$pt]:-})")
      pgr=$(ratio "$(median ${PGUS[$subj.$t]:-})" "$(median ${PGUS[nginx.$pt]:-})")
      printf "  %-34s %11sx %9sx %7sx %10sx\n" "$(tfb_label "$t")" "$pc" "$ms" "$p9" "$pgr" >> "$TABLE"
      result "techempower.$subj.$t.vs_nginx.req_per_cpu_s" "$pc"
      result "techempower.$subj.$t.vs_nginx.req_s" "$ms"
      result "techempower.$subj.$t.vs_nginx.p99" "$p9"
      result "techempower.$subj.$t.vs_nginx.pg_us_per_req" "$pgr"
    done
  done
  note "req/CPU-s = requests / server utime+stime (/proc/PID/stat; nginx: its worker);"
  note "pg_us/req = CPU of the postmaster and its children per request; p99 over"
  note "the latency samples wrk kept; ratios: req/CPU-s and req/s medians of"
  note "per-round ratios (higher is better for cohost), p99 and pg_us/req ratios"
  note "of medians (lower is better); db:pipeline rows against the peer's plain test"
}
