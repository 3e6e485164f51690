# Sections idle and idle_http (sourced by run.sh): server memory per idle
# connection, for raw echo servers (section echo's peers) with every
# handler parked in a read, and for HTTP servers (section http's) with
# every connection kept alive after one GET /. Both open the connections
# with idle_run, which uses build/bench/idle_clients (several processes,
# on CLI_CPU) and reads the server's memory before and after. Kernel
# socket buffers are in none of the figures.

# idle_count CONNS: IDLE_N, CONNS cut to the open-files limit (the server
# holds them all plus its own few), IDLE_LIMITED, a title's remark if it
# was cut, and IDLE_K, the client processes, none holding more than
# IDLE_PER_CLIENT descriptors; false (logged) if that takes over 250
# source addresses.
idle_count() {
  IDLE_N=$1; IDLE_LIMITED=""
  if [ "$FILES" -lt $(( IDLE_N + 64 )) ]; then
    IDLE_N=$(( FILES - 64 )); IDLE_LIMITED=" (open-files limit $FILES)"
  fi
  IDLE_K=$(( (IDLE_N + IDLE_PER_CLIENT - 1) / IDLE_PER_CLIENT ))
  [ "$IDLE_K" -le 250 ] || { log "idle: too many client processes"; return 1; }
}

# status_json PORT: saved_bytes=N saved_alloc=N lua_bytes=N from the
# totals of cohost's GET /status (docs/stats.md), empty fields if it does
# not answer.
status_json() {
  curl -s -m 5 "http://127.0.0.1:$1/status" 2>/dev/null | python3 -c '
import json, sys
try:
    t = json.load(sys.stdin)["totals"]
    print("saved_bytes=%d saved_alloc=%d lua_bytes=%d" % (t["saved_bytes"], t["saved_alloc"], t["lua_bytes"]))
except Exception:
    pass' 2>/dev/null
}

# idle_run KIND PEER N K: one measurement of section idle (KIND echo) or
# idle_http (KIND http). Starts PEER (peer_start) and takes the first
# connection's one-time allocations (Lua state warm-up, nginx's request
# pools) out of the count: echo, one echo on a connection of its own, held
# a second and let go; http, one GET / (http_check), then IDLE_HTTP_WARM
# more on one keep-alive connection, so that a garbage-collected heap has
# grown to its steady size (cohost's Lua heap rose by ~250 KiB over the
# first few hundred requests, a one-time cost that was 0.25 KiB "per
# connection" at 1,000). Then opens N
# connections from K idle_clients processes (source addresses 127.0.0.2,
# .3, ...): echo, each with one echo round trip behind it (after
# PEER_INIT), so every handler is parked in its next read; http (-R), each
# sends one "GET / HTTP/1.1" and reads the whole response before the next
# connection opens, so the server has answered and the connection waits
# for a next request. Reads the memory of the measured process (nginx: the
# worker) before and after. Sets IR_LABEL, IR_HELD, IR_SECS (the slowest
# client's), IR_RSS0/1 (VmRSS), IR_ANON0/1 (RssAnon), IR_PSS0/1 (Pss),
# IR_FDS (descriptors gained), IR_SPLIT (1 if the started process is not
# the measured one, nginx's master) and IR_MASTER0/1 (the started
# process's VmRSS then, else empty); for cohost's Lua echo peers
# (lua*), which serve their figures on a status port, IR_SAVED0/1 (heap
# held by saved stack images, saved_alloc, copy mode) and IR_LUA0/1 (Lua heap, garbage not yet
# collected included), else those are empty. False if the server did not
# start.
idle_run() {
  local kind=$1 peer=$2 n=$3 k=$4 tag=idle_ port pid measure mpid i per out t line
  local fd0 sport="" args=() cpids=()
  [ "$kind" = http ] && tag=idle_http_
  port=$(free_port)
  IR_SAVED0=""; IR_SAVED1=""; IR_LUA0=""; IR_LUA1=""
  IR_SPLIT=""; IR_MASTER0=""; IR_MASTER1=""
  case $kind.$peer in echo.lua*) sport=$(free_port); STATUS_ADDR=127.0.0.1:$sport ;; esac
  if ! peer_start "$kind" "$peer" "$port"; then
    STATUS_ADDR=""
    return 1
  fi
  STATUS_ADDR=""
  IR_LABEL=$PEER_LABEL
  pid=$SRV_PID; measure=$PEER_MEASURE; mpid=${measure%%,*}
  [ "$mpid" != "$pid" ] && IR_SPLIT=1
  if [ "$kind" = echo ]; then
    # The warm-up client holds its connection for a second, then exits
    # (SIGALRM, which bash would report outside the braces), resetting it.
    { taskset -c "$CLI_CPU" "$B/idle_clients" -p "$port" -n 1 -t 1 \
        ${PEER_INIT:+-i "$PEER_INIT"} > /dev/null 2>> "$LOGS/idle_clients.log"; } 2>/dev/null
    [ -n "$PEER_INIT" ] && args=(-i "$PEER_INIT")
  else
    http_check "$port" || note "  $peer: GET / did not answer \"hello\""
    curl -s -m 60 "http://127.0.0.1:$port/?[1-$IDLE_HTTP_WARM]" > /dev/null 2>&1
    args=(-R)
  fi
  # The status request comes before the first reading and after the
  # second, so its own allocations are in neither difference.
  if [ -n "$sport" ]; then
    line=$(status_json "$sport"); IR_SAVED0=$(kv saved_alloc "$line"); IR_LUA0=$(kv lua_bytes "$line")
  fi
  sleep 0.5                      # let start-up allocations settle
  IR_RSS0=$(rss_kib "$mpid"); IR_ANON0=$(status_kib "$mpid" RssAnon); IR_PSS0=$(pss_kib "$mpid")
  [ -n "$IR_SPLIT" ] && IR_MASTER0=$(rss_kib "$pid")
  fd0=$(fd_count "$mpid")
  rm -f "$LOGS/$tag$peer".*.out
  for i in $(seq 0 $(( k - 1 ))); do
    per=$(( n / k + (i < n % k ? 1 : 0) ))
    taskset -c "$CLI_CPU" "$B/idle_clients" -p "$port" -n "$per" \
      -B "127.0.0.$(( i + 2 ))" -t 120 "${args[@]}" \
      > "$LOGS/$tag$peer.$i.out" 2>> "$LOGS/idle_clients.log" &
    cpids+=($!); PIDS+=($!)
  done
  # Every client prints its line once its connections are open (or it
  # gave up); 60 s at most.
  t=$SECONDS
  while [ $(( SECONDS - t )) -lt 60 ]; do
    out=0
    for i in $(seq 0 $(( k - 1 ))); do
      if [ -s "$LOGS/$tag$peer.$i.out" ] || ! kill -0 "${cpids[$i]}" 2>/dev/null; then
        out=$(( out + 1 ))
      fi
    done
    [ "$out" = "$k" ] && break
    sleep 0.1
  done
  sleep 1                        # "wait a moment": let the server go idle
  IR_RSS1=$(rss_kib "$mpid"); IR_ANON1=$(status_kib "$mpid" RssAnon); IR_PSS1=$(pss_kib "$mpid")
  [ -n "$IR_SPLIT" ] && IR_MASTER1=$(rss_kib "$pid")
  IR_FDS=$(( $(fd_count "$mpid") - fd0 ))
  if [ -n "$sport" ]; then
    line=$(status_json "$sport"); IR_SAVED1=$(kv saved_alloc "$line"); IR_LUA1=$(kv lua_bytes "$line")
  fi
  IR_HELD=0; IR_SECS=0
  for i in $(seq 0 $(( k - 1 ))); do
    line=$(head -1 "$LOGS/$tag$peer.$i.out" 2>/dev/null)
    IR_HELD=$(( IR_HELD + $(kv conns "$line" | grep -E '^[0-9]+$' || echo 0) ))
    IR_SECS=$(awk -v a="$IR_SECS" -v b="$(kv secs "$line")" 'BEGIN { print (b + 0 > a) ? b + 0 : a }')
  done
  for i in "${cpids[@]}"; do kill -TERM "$i" 2>/dev/null; done
  for i in "${cpids[@]}"; do stop_server "$i"; done
  stop_peer "$pid" "$measure"
  return 0
}

# base_ratios PEER REPS ARRAY...: for a base twin PEER (NAME_base) whose
# NAME ran too (the caller's LABEL), NAME/PEER of each ARRAY's figures of
# runs 1..REPS (ARRAY[NAME.r] / ARRAY[PEER.r], the median of these
# per-run ratios, as run_ratio's), one a word; nothing otherwise.
base_ratios() {
  local peer=$1 new=${1%_base} reps=$2 a r rs
  [ "$peer" != "$new" ] && [ -n "${LABEL[$new]:-}" ] || return 0
  shift 2
  for a in "$@"; do
    local -n arr=$a
    rs=""
    for r in $(seq "$reps"); do
      rs+=" $(ratio "${arr[$new.$r]:-}" "${arr[$peer.$r]:-}" 3)"
    done
    printf '%s ' "$(fmt "$(median $rs)" 2)"
  done
}

# -- Section idle --------------------------------------------------------------

# Memory per idle connection (issue 7): IDLE_CONNS connections to every
# IDLE_PEERS server, IDLE_REPS rounds in which the servers take turns (a
# fresh server each time), so drift hits all alike; medians per server.
section_idle() {
  idle_count "$IDLE_CONNS" || return
  local n=$IDLE_N k=$IDLE_K
  title "Idle connections: server RSS growth with $n connections parked in a read, median of $IDLE_REPS$IDLE_LIMITED"
  need idle_clients || return
  local peer r kib anon saved lua pk pa
  local -A LABEL KIB ANON HELD SECS RSS0 RSS1 SHORT LOST SKIP SAVED LUA RUNKIB RUNANON
  LOG_PREFIX=idle_              # server logs beside those of section echo
  for r in $(seq "$IDLE_REPS"); do
    for peer in $IDLE_PEERS; do
      [ -z "${SKIP[$peer]:-}" ] || continue
      if ! peer_known echo "$peer"; then
        log "unknown idle peer $peer"; SKIP[$peer]=1; continue
      fi
      log "idle $peer: $n connections, run $r/$IDLE_REPS"
      if ! idle_run echo "$peer" "$n" "$k"; then
        note "skipped $peer: server did not start (see $LOGS)"
        SKIP[$peer]=1; continue
      fi
      LABEL[$peer]=$IR_LABEL
      RUNKIB[$peer.$r]=$(per_conn "$IR_RSS0" "$IR_RSS1" "$IR_HELD")
      RUNANON[$peer.$r]=$(per_conn "$IR_ANON0" "$IR_ANON1" "$IR_HELD")
      KIB[$peer]+=" ${RUNKIB[$peer.$r]}"
      ANON[$peer]+=" ${RUNANON[$peer.$r]}"
      HELD[$peer]=$IR_HELD; SECS[$peer]=$IR_SECS
      RSS0[$peer]=$IR_RSS0; RSS1[$peer]=$IR_RSS1
      [ "$IR_HELD" -lt "$n" ] && SHORT[$peer]=$(( ${SHORT[$peer]:-0} + 1 ))
      [ "$IR_FDS" -lt "$IR_HELD" ] && LOST[$peer]=$(( ${LOST[$peer]:-0} + 1 ))
      result "idle.$peer.run$r.kib_per_conn" "${RUNKIB[$peer.$r]}"
      if [ -n "$IR_SAVED1" ] && [ -n "$IR_LUA1" ]; then
        SAVED[$peer]+=" $(per_conn "$IR_SAVED0" "$IR_SAVED1" "$IR_HELD")"
        LUA[$peer]+=" $(per_conn "$IR_LUA0" "$IR_LUA1" "$IR_HELD")"
      fi
    done
  done
  LOG_PREFIX=""

  printf "  %-32s %7s %10s %10s %9s %9s  %-22s %s\n" server conns rss_before \
    rss_after KiB/conn anon/conn runs "open time" >> "$TABLE"
  for peer in $IDLE_PEERS; do
    [ -n "${LABEL[$peer]:-}" ] || continue
    kib=$(median ${KIB[$peer]}); anon=$(median ${ANON[$peer]})
    printf "  %-32s %7s %10s %10s %9s %9s  %-22s %s\n" "${LABEL[$peer]}" \
      "${HELD[$peer]}" "${RSS0[$peer]:--} KiB" "${RSS1[$peer]:--} KiB" \
      "$(fmt "$kib" 2)" "$(fmt "$anon" 2)" "$(echo ${KIB[$peer]} | tr ' ' /)" \
      "${SECS[$peer]} s, $k clients" >> "$TABLE"
    [ -n "${SHORT[$peer]:-}" ] &&
      note "  ^ in ${SHORT[$peer]} runs fewer than $n connections opened (see $LOGS/idle_clients.log)"
    [ -n "${LOST[$peer]:-}" ] &&
      note "  ^ in ${LOST[$peer]} runs the server gained fewer descriptors than connections"
    result "idle.$peer.conns" "${HELD[$peer]}"; result "idle.$peer.kib_per_conn" "$kib"
    result "idle.$peer.anon_kib_per_conn" "$anon"
    result "idle.$peer.rss_before_kib" "${RSS0[$peer]}"
    result "idle.$peer.rss_after_kib" "${RSS1[$peer]}"
    read -r pk pa <<< "$(base_ratios "$peer" "$IDLE_REPS" RUNKIB RUNANON)"
    if [ -n "${pk:-}" ]; then
      note "  ^ new/base: ${pk}x KiB/conn, ${pa}x anon/conn (median of per-run ratios)"
      result "idle.${peer%_base}.vs_$peer.kib_per_conn" "$pk"
      result "idle.${peer%_base}.vs_$peer.anon_kib_per_conn" "$pa"
    fi
  done
  note "KiB/conn = median of (VmRSS after - VmRSS before) / connections (runs: each"
  note "run's figure), of the nginx worker for nginx; anon = RssAnon only;"
  note "rss_before/after and conns of the last run; each connection did one 64-byte"
  note "echo first (nginx: after its request line); open time = slowest client;"
  note "no kernel socket buffers. Servers took turns, a fresh start every run."
  # Where cohost's bytes go, from its status endpoint (medians, bytes).
  for peer in $IDLE_PEERS; do
    [ -n "${LABEL[$peer]:-}" ] && [ -n "${LUA[$peer]:-}" ] || continue
    kib=$(median ${KIB[$peer]}); saved=$(median ${SAVED[$peer]}); lua=$(median ${LUA[$peer]})
    note "${LABEL[$peer]}: $(fmt "$(awk -v k="$kib" 'BEGIN { print k * 1024 }')" 0) B/conn ="\
" saved C stack $(fmt "$saved" 0) + Lua heap $(fmt "$lua" 0) + other $(awk -v k="$kib" \
      -v s="$saved" -v l="$lua" 'BEGIN { printf "%.0f", k * 1024 - s - l }')"
    result "idle.$peer.saved_bytes_per_conn" "$saved"; result "idle.$peer.lua_bytes_per_conn" "$lua"
  done
  note "(saved C stack: heap held by copy mode's stack images, saved_alloc; Lua heap: lua_bytes, some garbage"
  note "included; other: coroutine, task, malloc headers, fd table, stack pages)"
  # Targets for a raw TCP handler parked in receive: issue 7 (separate
  # stacks, under 10 KiB) and issue 15 (copy stacks, under 1.5 KiB).
  local v want
  for peer in lua_copy:1.5 lua:10; do
    v=$(median ${KIB[${peer%%:*}]:-}); want=${peer#*:}
    [ "$v" = - ] && continue
    note "target ${LABEL[${peer%%:*}]}: under $want KiB/conn: $(awk -v v="$v" -v w="$want" \
      'BEGIN { print (v < w) ? "met" : "NOT met" }') ($(fmt "$v" 2))"
  done
}

# -- Section idle_http -----------------------------------------------------------

# IDLE_HTTP_CONNS keep-alive connections to every IDLE_HTTP_PEERS server,
# one run each. Compares VmRSS (what the issue's target is about), RssAnon
# (the same without file pages) and Pss; the server's descriptor count
# says it still holds the connections.
section_idle_http() {
  idle_count "$IDLE_HTTP_CONNS" || return
  local n=$IDLE_N k=$IDLE_K
  title "Idle HTTP keep-alive: server memory growth with $n connections after one GET / each$IDLE_LIMITED"
  need idle_clients || return
  printf "  %-32s %7s %10s %10s %9s %9s %9s %s\n" server conns rss_before rss_after \
    KiB/conn anon/conn pss/conn "open time" >> "$TABLE"
  local peer kib anon pss what new
  local -A LABEL RUNKIB RUNANON RUNPSS
  LOG_PREFIX=idle_
  for peer in $IDLE_HTTP_PEERS; do
    log "idle_http $peer: $n connections"
    if ! idle_run http "$peer" "$n" "$k"; then
      note "skipped $peer: server did not start (see $LOGS)"
      continue
    fi
    kib=$(per_conn "$IR_RSS0" "$IR_RSS1" "$IR_HELD")
    anon=$(per_conn "$IR_ANON0" "$IR_ANON1" "$IR_HELD")
    pss=$(per_conn "$IR_PSS0" "$IR_PSS1" "$IR_HELD")
    LABEL[$peer]=$IR_LABEL; RUNKIB[$peer.1]=$kib; RUNANON[$peer.1]=$anon; RUNPSS[$peer.1]=$pss
    printf "  %-32s %7s %10s %10s %9s %9s %9s %s\n" "$IR_LABEL" "$IR_HELD" \
      "${IR_RSS0:--} KiB" "${IR_RSS1:--} KiB" "$kib" "$anon" "$pss" \
      "${IR_SECS} s, $k clients" >> "$TABLE"
    [ "$IR_HELD" -lt "$n" ] && note "  ^ only $IR_HELD of $n connections opened (see $LOGS/idle_clients.log)"
    [ "$IR_FDS" -lt "$IR_HELD" ] &&
      note "  ^ the server gained only $IR_FDS descriptors: it closed some connections"
    if [ -n "$IR_SPLIT" ]; then
      what=$(per_conn "$IR_MASTER0" "$IR_MASTER1" "$IR_HELD")
      note "  ^ figures of the worker; the master went from ${IR_MASTER0:--} to ${IR_MASTER1:--} KiB ($what KiB/conn)"
      result "idle_http.$peer.master_kib_per_conn" "$what"
    fi
    result "idle_http.$peer.conns" "$IR_HELD"; result "idle_http.$peer.kib_per_conn" "$kib"
    result "idle_http.$peer.anon_kib_per_conn" "$anon"
    result "idle_http.$peer.pss_kib_per_conn" "$pss"
    result "idle_http.$peer.rss_before_kib" "$IR_RSS0"; result "idle_http.$peer.rss_after_kib" "$IR_RSS1"
    result "idle_http.$peer.fds_gained" "$IR_FDS"
    read -r kib anon pss <<< "$(base_ratios "$peer" 1 RUNKIB RUNANON RUNPSS)"
    if [ -n "${kib:-}" ]; then
      new=${peer%_base}
      note "  ^ new/base: ${kib}x KiB/conn, ${anon}x anon/conn, ${pss}x pss/conn"
      result "idle_http.$new.vs_$peer.kib_per_conn" "$kib"
      result "idle_http.$new.vs_$peer.anon_kib_per_conn" "$anon"
      result "idle_http.$new.vs_$peer.pss_kib_per_conn" "$pss"
    fi
  done
  note "KiB/conn = (VmRSS after - before) / connections; anon = RssAnon only;"
  note "pss = Pss (smaps_rollup); kernel socket buffers are in none of them;"
  note "every server had $IDLE_HTTP_WARM requests on one connection first."
  LOG_PREFIX=""
}
