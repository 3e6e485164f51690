# Section echo (sourced by run.sh): 64-byte messages from build/bench/loadgen
# (on CLI_CPU) to every ECHO_PEERS server (on SRV_CPU) at each ECHO_CONNS,
# ECHO_REPS interleaved rounds; messages per second and per server
# CPU-second, p99, and cohost's Lua echo against each other server. The
# echo_start_* functions here are section idle's peers too.

# -- Echo peers --------------------------------------------------------------

echo_start_ch() {
  PEER_LABEL="cohost C (echo_ch)"
  start_server echo_ch "$B/echo_ch" "$1"
}

echo_start_epoll() {
  PEER_LABEL="plain epoll (echo_epoll)"
  start_server echo_epoll "$B/echo_epoll" "$1"
}

# The io_uring ceiling (issue 15): multishot recv into provided buffers,
# one io_uring_enter per loop turn; what a completion backend could reach.
echo_start_uring() {
  PEER_LABEL="plain io_uring (echo_uring)"
  start_server echo_uring "$B/echo_uring" "$1"
}

# STATUS_ADDR (section idle): cohost's --status-addr, for the breakdown.
STATUS_ADDR=""
echo_start_lua() {
  PEER_LABEL="cohost Lua (echo.lua)"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server echo_lua "$COHOST" ${STATUS_ADDR:+--status-addr "$STATUS_ADDR"} \
    examples/echo.lua "$1"
}

# cohost's Lua echo on the io_uring backend (docs/runtime.md#io-backends).
echo_start_lua_uring() {
  PEER_LABEL="cohost Lua, io_uring"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server echo_lua_uring "$COHOST" --io-backend uring examples/echo.lua "$1"
}

# The same two servers in copy-stack mode (docs/stacks.md): parked
# coroutines keep only the used part of their stack, on the heap.
echo_start_lua_copy() {
  PEER_LABEL="cohost Lua, copy stacks"
  [ -x "$COHOST" ] || { log "$COHOST is missing (make all)"; return 1; }
  start_server echo_lua_copy "$COHOST" --stack-mode copy \
    ${STATUS_ADDR:+--status-addr "$STATUS_ADDR"} examples/echo.lua "$1"
}

echo_start_ch_copy() {
  PEER_LABEL="cohost C, copy stacks"
  CH_STACK_MODE=copy start_server echo_ch_copy "$B/echo_ch" "$1"
}

# nginx + lua: the request line the Lua handler answers, sent once per
# connection before any message; after it the connection is a raw echo.
echo_start_nginx() {
  PEER_LABEL="nginx+lua (ngx.req.socket)"
  nginx_start nginx nginx_echo.conf "$1" || return 1
  PEER_INIT=$'GET /echo HTTP/1.1\r\nHost: bench\r\n\r\n'
}

echo_start_tarantool() {
  PEER_LABEL="tarantool (socket.tcp_server)"
  command -v tarantool > /dev/null || { log "tarantool is missing (scripts/deps.sh bench)"; return 1; }
  start_server tarantool tarantool scripts/bench/tarantool_echo.lua "$1"
}

# -- Section -----------------------------------------------------------------

# echo_once PEER CONNS REP: one pinned loadgen run against a peer of
# section_echo (its PORT, MEASURE and INIT); prints loadgen's line.
echo_once() {
  local line
  line=$(taskset -c "$CLI_CPU" timeout -k 2 "$(( ${ECHO_SECS%.*} + 30 ))" \
    "$B/loadgen" -p "${PORT[$1]}" -c "$2" -d "$ECHO_SECS" \
    -w "$ECHO_WARM" -S "${MEASURE[$1]}" ${INIT[$1]:+-i "${INIT[$1]}"} \
    2>> "$LOGS/loadgen.log")
  echo "$1 $line" >> "$LOGS/loadgen.log"
  echo "$line"
}

section_echo() {
  title "Echo, 64-byte messages: server on CPU $SRV_CPU, loadgen on CPU $CLI_CPU, median of $ECHO_REPS x ${ECHO_SECS} s"
  need loadgen || return
  local peer c r base=$ECHO_BASE LINE
  local -A PORT PID MEASURE LABEL INIT RATE P99 PERCPU CPU FAILED DISTURBED RUN RUNRATE
  local RETRIES=$(( 2 * ECHO_REPS ))
  # shellcheck disable=SC2086
  peers_start echo $ECHO_PEERS
  for r in $(seq "$ECHO_REPS"); do
    for c in $ECHO_CONNS; do
      for peer in $ECHO_PEERS; do
        [ -n "${PORT[$peer]:-}" ] || continue
        log "echo $peer c=$c run $r/$ECHO_REPS"
        measure echo "$peer" "$c" "$r"
        if [ "$(kv errors "$LINE")" != 0 ]; then
          log "echo $peer c=$c: failed run: ${LINE:-no output} (see $LOGS)"
          FAILED[$peer.$c]=$(( ${FAILED[$peer.$c]:-0} + 1 ))
          continue
        fi
        record "$peer" "$c" "$r" msgs_s msgs_per_cpu_s
      done
    done
  done
  # shellcheck disable=SC2086
  peers_stop $ECHO_PEERS

  printf "  %-32s %6s %10s %8s %7s %12s %s\n" server conns msgs/s p99_us srv_cpu \
    msgs/CPU-s "vs $base" >> "$TABLE"
  # The ratio to the baseline is the median of per-run ratios (run_ratio).
  local rate p99 percpu cpu vs
  for c in $ECHO_CONNS; do
    for peer in $ECHO_PEERS; do
      [ -n "${PORT[$peer]:-}" ] || continue
      rate=$(median ${RATE[$peer.$c]:-}); p99=$(median ${P99[$peer.$c]:-})
      percpu=$(median ${PERCPU[$peer.$c]:-}); cpu=$(median ${CPU[$peer.$c]:-})
      vs=$(fmt "$(run_ratio RUN "$peer" "$base" "$c" "$ECHO_REPS")" 2)
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
      vs_base echo "$peer" "$c" "$ECHO_REPS" msgs
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
      pc=$(fmt "$(run_ratio RUN "$subj" "$other" "$c" "$ECHO_REPS")" 2)
      ms=$(fmt "$(run_ratio RUNRATE "$subj" "$other" "$c" "$ECHO_REPS")" 2)
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
