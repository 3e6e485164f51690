# Section http (sourced by run.sh): wrk -t1 keep-alive GET / against
# cohost (HTTP_SCRIPT, one worker), nginx + OpenResty's Lua module and
# plain nginx, all running for the whole section and measured in turn
# (cohost, nginx+lua, nginx, repeated), so that the machine's drift hits
# all three alike; requests per second and per server CPU-second, p99, and
# cohost against the other two. The http_start_* functions and http_check
# here are section idle_http's too.

# -- HTTP peers --------------------------------------------------------------

http_start_cohost() {
  PEER_LABEL="cohost ($HTTP_SCRIPT)"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  [ -f "$HTTP_SCRIPT" ] || { log "$HTTP_SCRIPT is missing"; return 1; }
  start_server http_cohost "$COHOST" -w 1 "$HTTP_SCRIPT" "$1"
}

# The same on the io_uring backend (docs/runtime.md#io-backends).
http_start_cohost_uring() {
  PEER_LABEL="cohost, io_uring"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server http_cohost_uring "$COHOST" -w 1 --io-backend uring "$HTTP_SCRIPT" "$1"
}

# The same in copy-stack mode (docs/stacks.md), for section idle_http.
http_start_cohost_copy() {
  PEER_LABEL="cohost, copy stacks"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server http_cohost_copy "$COHOST" -w 1 --stack-mode copy "$HTTP_SCRIPT" "$1"
}

http_start_nginxlua() {
  PEER_LABEL="nginx+lua (content_by_lua)"
  nginx_start nginx_http_lua nginx_http_lua.conf "$1"
}

http_start_nginx() {
  PEER_LABEL="nginx (return 200)"
  nginx_start nginx_http_plain nginx_http_plain.conf "$1"
}

# http_check PORT: true if GET / answers 200 with the body "hello".
http_check() {
  local body
  body=$(curl -sf --max-time 5 "http://127.0.0.1:$1/" 2>/dev/null) || return 1
  [ "$body" = hello ]
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

# -- Section -----------------------------------------------------------------

# http_ready PEER PORT: a peer of section_http answers GET / with "hello"
# (else a note, and peers_start leaves it out), then gets a warm-up run:
# LuaJIT traces, nginx's and cohost's pools and caches.
http_ready() {
  if ! http_check "$2"; then
    note "skipped $1: GET / did not answer 200 \"hello\""
    return 1
  fi
  log "http $1: warm-up"
  taskset -c "$CLI_CPU" timeout -k 2 30 wrk -t1 -c50 -d"$HTTP_WARM" \
    "http://127.0.0.1:$2/" >> "$LOGS/wrk.log" 2>&1
  return 0
}

# http_once PEER CONNS REP: one http_run against a peer of section_http;
# prints its line.
http_once() {
  local line
  echo "== $1 c=$2 run $3" >> "$LOGS/wrk.log"
  line=$(http_run "${PORT[$1]}" "$2" "$HTTP_SECS" "${MEASURE[$1]}")
  echo "$1 c=$2 $line" >> "$LOGS/wrk.log"
  echo "$line"
}

section_http() {
  title "HTTP GET / (\"hello\"), wrk -t1 keep-alive: server on CPU $SRV_CPU, wrk on CPU $CLI_CPU, median of $HTTP_REPS x ${HTTP_SECS} s"
  command -v wrk > /dev/null || { note "skipped: wrk is missing (scripts/deps.sh bench)"; return; }
  local peer c r LINE RETRIES=$(( 2 * HTTP_REPS ))
  local -A PORT PID MEASURE LABEL INIT RATE P99 PERCPU CPU FAILED DISTURBED ERRS RUN RUNRATE
  # shellcheck disable=SC2086
  peers_start http $HTTP_PEERS
  for r in $(seq "$HTTP_REPS"); do
    for c in $HTTP_CONNS; do
      for peer in $HTTP_PEERS; do
        [ -n "${PORT[$peer]:-}" ] || continue
        log "http $peer c=$c run $r/$HTTP_REPS"
        measure http "$peer" "$c" "$r"
        # A server that answers errors fast must not look fast.
        if [ -n "$(kv failed "$LINE")" ] || [ "$(kv non2xx "$LINE")" != 0 ]; then
          log "http $peer c=$c: failed run: $LINE (see $LOGS/wrk.log)"
          FAILED[$peer.$c]=$(( ${FAILED[$peer.$c]:-0} + 1 ))
          continue
        fi
        [ "$(kv errors "$LINE")" != 0 ] &&
          ERRS[$peer.$c]=$(( ${ERRS[$peer.$c]:-0} + $(kv errors "$LINE") ))
        record "$peer" "$c" "$r" req_s req_per_cpu_s
      done
    done
  done
  # shellcheck disable=SC2086
  peers_stop $HTTP_PEERS

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
      vs_base http "$peer" "$c" "$HTTP_REPS" req
    done
  done
  note "req/CPU-s = requests / server utime+stime over the run (/proc/PID/stat;"
  note "nginx: its worker); srv_cpu = share of CPU $SRV_CPU the server used;"
  note "p99 from wrk --latency; 1000 requests per connection everywhere; bodies:"
  note "cohost \"hello\" (Content-Length), nginx+lua \"hello\\n\" (chunked:"
  note "ngx.say), nginx \"hello\\n\" (Content-Length)"

  # Each backend of cohost against the others, from the same runs.
  local subj other pc ms p9
  for subj in cohost cohost_uring; do
    [ -n "${PORT[$subj]:-}" ] || continue
    printf "\n  %-32s %6s %12s %10s %8s\n" "${LABEL[$subj]} vs" conns req/CPU-s req/s p99 \
      >> "$TABLE"
    for c in $HTTP_CONNS; do
      for other in nginxlua nginx; do
        [ -n "${PORT[$other]:-}" ] || continue
        pc=$(fmt "$(run_ratio RUN "$subj" "$other" "$c" "$HTTP_REPS")" 2)
        ms=$(fmt "$(run_ratio RUNRATE "$subj" "$other" "$c" "$HTTP_REPS")" 2)
        p9=$(ratio "$(median ${P99[$subj.$c]:-})" "$(median ${P99[$other.$c]:-})")
        printf "  %-32s %6s %11sx %9sx %7sx\n" "${LABEL[$other]}" "$c" "$pc" "$ms" \
          "$p9" >> "$TABLE"
        result "http.$subj.c$c.vs_$other.req_per_cpu_s" "$pc"
        result "http.$subj.c$c.vs_$other.req_s" "$ms"
        result "http.$subj.c$c.vs_$other.p99" "$p9"
      done
    done
  done
  note "higher is better for cohost in req/CPU-s and req/s, lower in p99;"
  note "req/CPU-s and req/s: median of per-run ratios; p99: ratio of medians"
}
