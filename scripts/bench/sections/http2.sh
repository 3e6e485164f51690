# Section http2 (sourced by run.sh): h2load -c 50 -m 10 (50 connections,
# 10 streams each in flight) GET / against cohost (HTTP_SCRIPT over h2c
# with prior knowledge; scripts/bench/hello_tls.lua over TLS, h2 by ALPN)
# and nginx + OpenResty's Lua module (nginx_http_lua.conf with "http2"
# on its listen line, and "ssl http2" with the same certificate), one
# worker each, all running for the whole section and measured in turn;
# requests per second and per server CPU-second, h2load's mean time per
# request (it reports no percentiles), and cohost against nginx+lua.
# BENCH_H2_REQS requests per run (default 1000000; quick 300000: runs of
# a second or more, so that the server's CPU ticks count).

H2_PEERS="cohost nginxlua cohost_tls nginxlua_tls"   # table and run order
# nginx ends an HTTP/2 connection after keepalive_requests streams and
# h2load does not reconnect; cohost sets no such limit on HTTP/2.
H2_NGINX_REQS='s|keepalive_requests 1000;|keepalive_requests 10000000;|'

h2_cert() {
  local d=$PWD/$B/h2tls
  [ -f "$d/cert.pem" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$d/key.pem" -out "$d/cert.pem" -days 2 -subj /CN=localhost \
    > "$LOGS/h2tls.log" 2>&1
}

http2_start_cohost() {
  PEER_LABEL="cohost h2c ($HTTP_SCRIPT)"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server http2_cohost "$COHOST" -w 1 "$HTTP_SCRIPT" "$1"
}

http2_start_cohost_tls() {
  PEER_LABEL="cohost h2 TLS (hello_tls.lua)"
  h2_cert || return 1
  start_server http2_cohost_tls "$COHOST" -w 1 scripts/bench/hello_tls.lua "$1" \
    "$PWD/$B/h2tls/cert.pem" "$PWD/$B/h2tls/key.pem"
}

http2_start_nginxlua() {
  PEER_LABEL="nginx+lua h2c (content_by_lua)"
  nginx_start nginx_http2_lua nginx_http_lua.conf "$1" -e 's|backlog=4096;|backlog=4096 http2;|' \
    -e "$H2_NGINX_REQS"
}

http2_start_nginxlua_tls() {
  PEER_LABEL="nginx+lua h2 TLS (content_by_lua)"
  h2_cert || return 1
  nginx_start nginx_http2_lua_tls nginx_http_lua.conf "$1" -e "$H2_NGINX_REQS" \
    -e "s|backlog=4096;|backlog=4096 ssl http2; ssl_certificate $PWD/$B/h2tls/cert.pem; ssl_certificate_key $PWD/$B/h2tls/key.pem;|"
}

# h2_url PEER PORT
h2_url() {
  case $1 in *_tls*) echo "https://127.0.0.1:$2/" ;; *) echo "http://127.0.0.1:$2/" ;; esac
}

# http2_ready PEER PORT: answers over HTTP/2, then a warm-up run.
http2_ready() {
  local flag=--http2-prior-knowledge
  case $1 in *_tls*) flag="--http2 -k" ;; esac
  # shellcheck disable=SC2086
  if ! curl -sf --max-time 5 $flag -o /dev/null "$(h2_url "$1" "$2")"; then
    note "skipped $1: GET / over HTTP/2 did not answer 200"
    return 1
  fi
  log "http2 $1: warm-up"
  taskset -c "$CLI_CPU" timeout -k 2 60 h2load -n 20000 -c 50 -m 10 "$(h2_url "$1" "$2")" \
    >> "$LOGS/h2load.log" 2>&1
  return 0
}

# http2_once PEER CONNS REP: one pinned h2load run; prints key=value words
# as http_run does (mean_us in place of p99_us).
http2_once() {
  local peer=$1 c=$2 out s0 s1 b0 b1 wcpu measure=${MEASURE[$1]//,/ }
  echo "== $peer c=$c run $3" >> "$LOGS/h2load.log"
  s0=$(cpu_ticks $measure); b0=$(busy_ticks)
  out=$( { taskset -c "$CLI_CPU" timeout -k 2 120 h2load -n "$H2_REQS" -c "$c" -m 10 \
           "$(h2_url "$peer" "${PORT[$peer]}")" 2>&1; times; } )
  s1=$(cpu_ticks $measure); b1=$(busy_ticks)
  echo "$out" >> "$LOGS/h2load.log"
  wcpu=$(tail -1 <<< "$out" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
    print t }')
  awk -v out="$out" -v s0="$s0" -v s1="$s1" -v b0="$b0" -v b1="$b1" -v w="$wcpu" -v hz="$HZ" 'BEGIN {
    n = split(out, l, "\n"); ok = ""; failed = 0
    for (i = 1; i <= n; i++) {
      if (l[i] ~ /^finished in/) {
        split(l[i], f, " "); secs = f[3]; rate = f[4]
        if (secs ~ /ms,$/) { sub(/ms,$/, "", secs); secs /= 1000 } else sub(/s,$/, "", secs)
      }
      if (l[i] ~ /^requests:/) { split(l[i], f, " "); ok = f[8]; failed = f[10] + f[12] }
      if (l[i] ~ /^time for request:/) {
        split(l[i], f, " "); mean = f[6]
        if (mean ~ /ms$/) { sub(/ms$/, "", mean); mean *= 1000 }
        else if (mean ~ /us$/) { sub(/us$/, "", mean) }
        else if (mean ~ /s$/) { sub(/s$/, "", mean); mean *= 1000000 }
      }
    }
    if (ok == "") { print "errors=1 failed=1"; exit }
    srv = (s1 - s0) / hz; other = (b1 - b0) / hz - srv - w
    if (other < 0) other = 0
    per = srv > 0 ? sprintf("%.0f", ok / srv) : ""
    printf "reqs=%s secs=%s req_s=%s p99_us=%s srv_cpu_s=%.2f other_cpu_s=%.2f", ok, secs, rate, mean, srv, other
    printf " req_per_cpu_s=%s errors=%d non2xx=0\n", per, failed }'
}

section_http2() {
  H2_REQS=${BENCH_H2_REQS:-$([ "$QUICK" = 1 ] && echo 300000 || echo 1000000)}
  title "HTTP/2 GET / (\"hello\"), h2load -c 50 -m 10 -n $H2_REQS: server on CPU $SRV_CPU, h2load on CPU $CLI_CPU, median of $HTTP_REPS"
  command -v h2load > /dev/null || { note "skipped: h2load is missing (scripts/deps.sh test: nghttp2-client)"; return; }
  local peer c=50 r LINE RETRIES=$(( 2 * HTTP_REPS ))
  local -A PORT PID MEASURE LABEL INIT RATE P99 PERCPU CPU FAILED DISTURBED RUN RUNRATE
  # shellcheck disable=SC2086
  peers_start http2 $H2_PEERS
  for r in $(seq "$HTTP_REPS"); do
    for peer in $H2_PEERS; do
      [ -n "${PORT[$peer]:-}" ] || continue
      log "http2 $peer run $r/$HTTP_REPS"
      measure http2 "$peer" "$c" "$r"
      if [ -n "$(kv failed "$LINE")" ] || [ "$(kv errors "$LINE")" != 0 ]; then
        log "http2 $peer: failed run: $LINE (see $LOGS/h2load.log)"
        FAILED[$peer.$c]=$(( ${FAILED[$peer.$c]:-0} + 1 ))
        continue
      fi
      record "$peer" "$c" "$r" req_s req_per_cpu_s
    done
  done
  # shellcheck disable=SC2086
  peers_stop $H2_PEERS

  printf "  %-34s %10s %8s %7s %12s\n" server req/s mean_ms srv_cpu req/CPU-s >> "$TABLE"
  local rate mean percpu cpu
  for peer in $H2_PEERS; do
    [ -n "${PORT[$peer]:-}" ] || continue
    rate=$(median ${RATE[$peer.$c]:-}); mean=$(median ${P99[$peer.$c]:-})
    percpu=$(median ${PERCPU[$peer.$c]:-}); cpu=$(median ${CPU[$peer.$c]:-})
    printf "  %-34s %10s %8s %6s%% %12s\n" "${LABEL[$peer]}" "$(fmt "$rate" 0)" \
      "$(fmt "$(ratio "$mean" 1000 6)" 2)" "$(fmt "$cpu" 0)" "$(fmt "$percpu" 0)" >> "$TABLE"
    result "http2.$peer.req_s" "$rate"; result "http2.$peer.mean_us" "$mean"
    result "http2.$peer.req_per_cpu_s" "$percpu"; result "http2.$peer.srv_cpu_pct" "$cpu"
    [ -n "${FAILED[$peer.$c]:-}" ] &&
      note "  ^ ${FAILED[$peer.$c]} of $HTTP_REPS runs failed (see $LOGS/h2load.log)"
    [ -n "${DISTURBED[$peer.$c]:-}" ] &&
      note "  ^ ${DISTURBED[$peer.$c]} of $HTTP_REPS runs shared the machine with other load"
  done
  local pair pc ms
  for pair in cohost:nginxlua cohost_tls:nginxlua_tls; do
    [ -n "${PORT[${pair%:*}]:-}" ] && [ -n "${PORT[${pair#*:}]:-}" ] || continue
    pc=$(fmt "$(run_ratio RUN "${pair%:*}" "${pair#*:}" "$c" "$HTTP_REPS")" 2)
    ms=$(fmt "$(run_ratio RUNRATE "${pair%:*}" "${pair#*:}" "$c" "$HTTP_REPS")" 2)
    note "${LABEL[${pair%:*}]} vs ${LABEL[${pair#*:}]}: ${pc}x req/CPU-s, ${ms}x req/s"
    result "http2.${pair%:*}.vs_${pair#*:}.req_per_cpu_s" "$pc"
    result "http2.${pair%:*}.vs_${pair#*:}.req_s" "$ms"
  done
  note "req/CPU-s = requests / server utime+stime (nginx: its worker); bodies:"
  note "cohost \"hello\", nginx+lua \"hello\\n\" (ngx.say); mean_ms: h2load's"
  note "mean time per request (it reports no percentiles)"
}
