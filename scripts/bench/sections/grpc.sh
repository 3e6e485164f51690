# Sections grpc and protobuf (sourced by run.sh).
#
# grpc: unary echo of scripts/bench/grpc/echo.proto's EchoMsg (four
# scalar fields and a string, 40 bytes) against three servers made from
# that one file, each pinned to CPU $SRV_CPU: cohost (grpc/echo.lua, one
# worker: the Lua handler gets the request decoded and returns a new
# table, which cohost encodes), a C++ server on Debian's libgrpc++
# (grpc/echo_server.cpp, built here from grpc_cpp_plugin's generated
# service: the callback API, and the synchronous one with one completion
# queue and one polling thread; gRPC-core adds threads of its own, all on
# the one CPU, all counted) and Python's grpcio (grpc/echo_server.py, a
# pool of one worker thread). Load: h2load on CPU $CLI_CPU, -c 50 -m 10
# for BENCH_GRPC_SECS seconds (default 5, quick 2) per run, POSTing one
# pre-encoded request frame (-d, content-type: application/grpc, te:
# trailers); h2load checks no grpc-status, so a run counts only if the
# response bodies add up to one echoed frame per request (an error answer
# is trailers-only, with no body). Figures: requests per second and per
# server CPU-second (utime + stime of every thread of the server), and
# the p99 of h2load's per-request times (--log-file). Medians of
# $HTTP_REPS interleaved runs.
#
# protobuf: pb.encode + pb.decode round trips of grpc/record.proto's
# Record (20 fields) per second of CPU time (grpc/codec.lua), against
# python3-protobuf's SerializeToString + ParseFromString (grpc/codec.py,
# which names its backend), pinned to CPU $SRV_CPU; medians of
# $MICRO_RUNS runs. And a lower bound for a decoder in C: the same table
# built through the Lua C API with nothing parsed (grpc/capi_bound.c).

GRPC_PEERS="cohost cpp_cb cpp_sync python"   # table and run order
GRPC_DIR=$B/grpc                             # stubs, the C++ server, the frame

# grpc_build: the Python stubs, the C++ server and the request frame,
# once; false (with a note) if a tool is missing.
grpc_build() {
  [ -n "${GRPC_BUILT:-}" ] && return 0
  local t
  for t in protoc grpc_python_plugin grpc_cpp_plugin g++ pkg-config; do
    command -v "$t" > /dev/null || { note "skipped: $t is missing (scripts/deps.sh bench)"; return 1; }
  done
  mkdir -p "$GRPC_DIR"
  protoc -Iscripts/bench/grpc --python_out="$GRPC_DIR" --grpc_out="$GRPC_DIR" \
    --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" echo.proto record.proto \
    >> "$LOGS/grpc_build.log" 2>&1 &&
  protoc -Iscripts/bench/grpc --cpp_out="$GRPC_DIR" --grpc_out="$GRPC_DIR" \
    --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" echo.proto >> "$LOGS/grpc_build.log" 2>&1 || {
    note "skipped: protoc failed (see $LOGS/grpc_build.log)"; return 1; }
  if [ ! -x "$GRPC_DIR/echo_server" ] || [ scripts/bench/grpc/echo_server.cpp -nt "$GRPC_DIR/echo_server" ]; then
    log "grpc: building the C++ server"
    # shellcheck disable=SC2046  # pkg-config's words
    g++ -O2 -std=c++17 -I"$GRPC_DIR" scripts/bench/grpc/echo_server.cpp "$GRPC_DIR/echo.pb.cc" \
      "$GRPC_DIR/echo.grpc.pb.cc" -o "$GRPC_DIR/echo_server" $(pkg-config --cflags --libs grpc++ protobuf) \
      >> "$LOGS/grpc_build.log" 2>&1 || {
      note "skipped the C++ server: it did not build (libgrpc++-dev; see $LOGS/grpc_build.log)"
      rm -f "$GRPC_DIR/echo_server"
    }
  fi
  gcc -O2 -shared -fPIC $(pkg-config --cflags luajit) scripts/bench/grpc/capi_bound.c \
    -o "$GRPC_DIR/capi_bound.so" >> "$LOGS/grpc_build.log" 2>&1 || rm -f "$GRPC_DIR/capi_bound.so"
  GRPC_FRAME_LEN=$("$COHOST" scripts/bench/grpc/frame.lua "$GRPC_DIR/frame.bin" 2>> "$LOGS/grpc_build.log") || {
    note "skipped: the request frame could not be made (see $LOGS/grpc_build.log)"; return 1; }
  GRPC_BUILT=1
}

grpc_start_cohost() {
  PEER_LABEL="cohost (Lua handler, -w 1)"
  start_server grpc_cohost "$COHOST" -w 1 scripts/bench/grpc/echo.lua "$1"
}

grpc_start_cpp_cb() {
  PEER_LABEL="C++ grpc++ callback API"
  [ -x "$GRPC_DIR/echo_server" ] || return 1
  start_server grpc_cpp_cb "$GRPC_DIR/echo_server" "$1" callback
}

grpc_start_cpp_sync() {
  PEER_LABEL="C++ grpc++ sync API, 1 poller"
  [ -x "$GRPC_DIR/echo_server" ] || return 1
  start_server grpc_cpp_sync "$GRPC_DIR/echo_server" "$1" sync
}

grpc_start_python() {
  PEER_LABEL="Python grpcio, 1 worker"
  start_server grpc_python /usr/bin/python3 scripts/bench/grpc/echo_server.py "$GRPC_DIR" "$1"
}

grpc_url() { echo "http://127.0.0.1:$1/benchpb.Echo/Echo"; }

# grpc_h2load PORT ARGS...: h2load with the request frame on CPU $CLI_CPU.
grpc_h2load() {
  local port=$1
  shift
  taskset -c "$CLI_CPU" timeout -k 2 120 h2load -c 50 -m 10 -d "$GRPC_DIR/frame.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' "$@" "$(grpc_url "$port")" 2>&1
}

# grpc_ready PEER PORT: answers with whole echoes, then a warm-up run.
grpc_ready() {
  local out
  out=$(grpc_h2load "$2" -n 100)
  echo "$out" >> "$LOGS/grpc_h2load.log"
  if ! grep -q "($(( 100 * GRPC_FRAME_LEN ))) data" <<< "$out"; then
    note "skipped $1: 100 calls did not come back as 100 echoes (see $LOGS/grpc_h2load.log)"
    return 1
  fi
  log "grpc $1: warm-up"
  grpc_h2load "$2" -D 2 >> "$LOGS/grpc_h2load.log"
  return 0
}

# grpc_once PEER CONNS REP: one run; prints key=value words as http2_once.
grpc_once() {
  local peer=$1 out s0 s1 b0 b1 wcpu p99 tlog=$GRPC_DIR/times.log measure=${MEASURE[$1]//,/ }
  echo "== $peer run $3" >> "$LOGS/grpc_h2load.log"
  s0=$(cpu_ticks $measure); b0=$(busy_ticks)
  out=$( { grpc_h2load "${PORT[$peer]}" -D "$GRPC_SECS" --log-file="$tlog"; times; } )
  s1=$(cpu_ticks $measure); b1=$(busy_ticks)
  echo "$out" >> "$LOGS/grpc_h2load.log"
  # The p99 of the requests' times (microseconds, the third column).
  p99=$(cut -f3 "$tlog" | sort -n | awk '{ v[NR] = $1 } END { if (NR) { i = int(NR * 0.99); if (i < 1) i = 1; print v[i] } }')
  rm -f "$tlog"
  wcpu=$(tail -1 <<< "$out" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
    print t }')
  awk -v out="$out" -v s0="$s0" -v s1="$s1" -v b0="$b0" -v b1="$b1" -v w="$wcpu" -v hz="$HZ" \
      -v p99="$p99" -v flen="$GRPC_FRAME_LEN" 'BEGIN {
    n = split(out, l, "\n"); ok = ""; failed = 0; data = -1
    for (i = 1; i <= n; i++) {
      if (l[i] ~ /^finished in/) {
        split(l[i], f, " "); secs = f[3]; rate = f[4]
        if (secs ~ /ms,$/) { sub(/ms,$/, "", secs); secs /= 1000 } else sub(/s,$/, "", secs)
      }
      if (l[i] ~ /^requests:/) { split(l[i], f, " "); ok = f[8]; failed = f[10] + f[12] }
      if (l[i] ~ /^traffic:/) { d = l[i]; sub(/\) data.*/, "", d); sub(/.*\(/, "", d); data = d + 0 }
    }
    if (ok == "") { print "errors=1 failed=1"; exit }
    if (data != ok * flen) failed += ok - int(data / flen)   # answers that were no echo
    srv = (s1 - s0) / hz; other = (b1 - b0) / hz - srv - w
    if (other < 0) other = 0
    per = srv > 0 ? sprintf("%.0f", ok / srv) : ""
    printf "reqs=%s secs=%s req_s=%s p99_us=%s srv_cpu_s=%.2f other_cpu_s=%.2f", ok, secs, rate, p99, srv, other
    printf " req_per_cpu_s=%s errors=%d non2xx=0\n", per, failed }'
}

section_grpc() {
  GRPC_SECS=${BENCH_GRPC_SECS:-$([ "$QUICK" = 1 ] && echo 2 || echo 5)}
  title "gRPC unary echo (EchoMsg, 40 bytes), h2load -c 50 -m 10 -D $GRPC_SECS: server on CPU $SRV_CPU, h2load on CPU $CLI_CPU, median of $HTTP_REPS"
  command -v h2load > /dev/null || { note "skipped: h2load is missing (scripts/deps.sh test: nghttp2-client)"; return; }
  grpc_build || return
  local peer c=50 r LINE RETRIES=$(( 2 * HTTP_REPS ))
  local -A PORT PID MEASURE LABEL INIT RATE P99 PERCPU CPU FAILED DISTURBED RUN RUNRATE
  # shellcheck disable=SC2086
  peers_start grpc $GRPC_PEERS
  for r in $(seq "$HTTP_REPS"); do
    for peer in $GRPC_PEERS; do
      [ -n "${PORT[$peer]:-}" ] || continue
      log "grpc $peer run $r/$HTTP_REPS"
      measure grpc "$peer" "$c" "$r"
      if [ -n "$(kv failed "$LINE")" ] || [ "$(kv errors "$LINE")" != 0 ]; then
        log "grpc $peer: failed run: $LINE (see $LOGS/grpc_h2load.log)"
        FAILED[$peer.$c]=$(( ${FAILED[$peer.$c]:-0} + 1 ))
        continue
      fi
      record "$peer" "$c" "$r" req_s req_per_cpu_s
    done
  done
  # shellcheck disable=SC2086
  peers_stop $GRPC_PEERS

  printf "  %-34s %10s %8s %7s %12s\n" server req/s p99_ms srv_cpu req/CPU-s >> "$TABLE"
  local rate p99 percpu cpu
  for peer in $GRPC_PEERS; do
    [ -n "${PORT[$peer]:-}" ] || continue
    rate=$(median ${RATE[$peer.$c]:-}); p99=$(median ${P99[$peer.$c]:-})
    percpu=$(median ${PERCPU[$peer.$c]:-}); cpu=$(median ${CPU[$peer.$c]:-})
    printf "  %-34s %10s %8s %6s%% %12s\n" "${LABEL[$peer]}" "$(fmt "$rate" 0)" \
      "$(fmt "$(ratio "$p99" 1000 6)" 2)" "$(fmt "$cpu" 0)" "$(fmt "$percpu" 0)" >> "$TABLE"
    result "grpc.$peer.req_s" "$rate"; result "grpc.$peer.p99_us" "$p99"
    result "grpc.$peer.req_per_cpu_s" "$percpu"; result "grpc.$peer.srv_cpu_pct" "$cpu"
    [ -n "${FAILED[$peer.$c]:-}" ] &&
      note "  ^ ${FAILED[$peer.$c]} of $HTTP_REPS runs failed (see $LOGS/grpc_h2load.log)"
    [ -n "${DISTURBED[$peer.$c]:-}" ] &&
      note "  ^ ${DISTURBED[$peer.$c]} of $HTTP_REPS runs shared the machine with other load"
  done
  local other pc ms
  for other in cpp_cb cpp_sync python; do
    [ -n "${PORT[cohost]:-}" ] && [ -n "${PORT[$other]:-}" ] || continue
    pc=$(fmt "$(run_ratio RUN cohost "$other" "$c" "$HTTP_REPS")" 2)
    ms=$(fmt "$(run_ratio RUNRATE cohost "$other" "$c" "$HTTP_REPS")" 2)
    note "cohost vs ${LABEL[$other]}: ${pc}x req/CPU-s, ${ms}x req/s"
    result "grpc.cohost.vs_$other.req_per_cpu_s" "$pc"
    result "grpc.cohost.vs_$other.req_s" "$ms"
  done
  note "req/CPU-s = calls / server utime+stime (all its threads); p99: h2load's per-request"
  note "times (--log-file); a run counts only if every call came back as the echoed frame"
}

section_protobuf() {
  title "protobuf: pb.encode + pb.decode round trips of a 20-field message (179 bytes), per CPU-second, pinned to CPU $SRV_CPU, median of $MICRO_RUNS"
  grpc_build || return
  local n=$([ "$QUICK" = 1 ] && echo 100000 || echo 300000) lua py lrt prt
  log "protobuf: cohost"
  wait_quiet
  local so=""
  [ -f "$GRPC_DIR/capi_bound.so" ] && so=$GRPC_DIR/capi_bound.so
  lua=$(pinned "$COHOST" scripts/bench/grpc/codec.lua "$n" "$MICRO_RUNS" "$GRPC_DIR/record.bin" $so)
  log "protobuf: python3-protobuf"
  wait_quiet
  py=$(pinned /usr/bin/python3 scripts/bench/grpc/codec.py "$GRPC_DIR" $(( n / 3 )) "$MICRO_RUNS" "$GRPC_DIR/record.bin")
  lrt=$(kv roundtrip_s "$lua"); prt=$(kv roundtrip_s "$py")
  row "cohost.protobuf round trip" "$(fmt "$lrt" 0)" "/s" "encode $(fmt "$(kv encode_s "$lua")" 0)/s, decode $(fmt "$(kv decode_s "$lua")" 0)/s"
  row "python3-protobuf round trip" "$(fmt "$prt" 0)" "/s" "encode $(fmt "$(kv encode_s "$py")" 0)/s, decode $(fmt "$(kv decode_s "$py")" 0)/s ($(kv backend "$py") backend)"
  note "cohost/python3-protobuf: $(ratio "$lrt" "$prt")x round trips per CPU-second"
  if [ -n "$(kv capi_bound_s "$lua")" ]; then
    row "C API table build, no parsing" "$(fmt "$(kv capi_bound_s "$lua")" 0)" "/s" "a C decoder's best case (capi_bound.c): cohost's decode is $(ratio "$(kv decode_s "$lua")" "$(kv capi_bound_s "$lua")")x it"
    result protobuf.capi_bound.decode_s "$(kv capi_bound_s "$lua")"
  fi
  result protobuf.cohost.roundtrip_s "$lrt"; result protobuf.python.roundtrip_s "$prt"
  result protobuf.cohost.encode_s "$(kv encode_s "$lua")"; result protobuf.cohost.decode_s "$(kv decode_s "$lua")"
  result protobuf.python.encode_s "$(kv encode_s "$py")"; result protobuf.python.decode_s "$(kv decode_s "$py")"
  result protobuf.python.backend "$(kv backend "$py")"
  result protobuf.cohost.vs_python.roundtrip "$(ratio "$lrt" "$prt")"
}
