#!/usr/bin/env bash
# Runs cohost's libFuzzer harnesses, each for the given seconds (default
# 60), at most FUZZ_JOBS (default 2) at a time. Usage:
#   scripts/fuzz.sh [seconds] [harness...] [libFuzzer options...]
# Harnesses (all when none is named; spec/fuzz/README.md describes each):
#   http_parse  host/http/parse.c            spec/fuzz/fuzz_http_parse.c
#   ws_frame    lua/cohost/websocket.lua     spec/fuzz/fuzz_ws_frame.lua
#   resp        examples/kv/resp.lua         spec/fuzz/fuzz_resp.lua
#   http_conn   a whole cohost.http connection, the real host in-process
#                                            spec/fuzz/fuzz_http_conn.c
#   h2_conn     the same, HTTP/2 allowed     fuzz_http_conn.c -DFUZZ_H2
#
# Builds build/fuzz/fuzz_<harness> with Debian's clang and
# -fsanitize=fuzzer,address,undefined (libFuzzer comes from
# libclang-rt-14-dev, which the clang package pulls in); http_conn's
# objects are kept in build/fuzz/obj and rebuilt when a source or header
# they depend on changes. Each harness runs on a scratch corpus
# (build/fuzz/<harness>/corpus) seeded from spec/fuzz/corpus/<harness> and
# the kept reproducers spec/fuzz/crashes/<harness>, so the seeds stay as
# committed. A run keeps going after a crash (one fork job at a time) so it
# reports every distinct failure; the script exits 1 if any harness found
# one: a sanitizer report, a broken invariant (abort), a timeout, an
# out-of-memory or a leak. Each failing input is kept as
# build/fuzz/<harness>/crash-* (or timeout-*, oom-*, leak-*); replay one
# with build/fuzz/fuzz_<harness> FILE, and FUZZ_DEBUG=1 for the harness's
# details (http_parse, http_conn).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

ALL=(http_parse ws_frame resp http_conn h2_conn)
secs=60
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then secs=$1; shift; fi
harnesses=()
while [ $# -gt 0 ] && [[ $1 != -* ]]; do
  case " ${ALL[*]} " in
    *" $1 "*) harnesses+=("$1") ;;
    *) echo "fuzz.sh: no harness '$1' (${ALL[*]})" >&2; exit 2 ;;
  esac
  shift
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${ALL[@]}")
opts=("$@")
jobs=${FUZZ_JOBS:-2}
CLANG=${CLANG:-clang}
out=build/fuzz

command -v "$CLANG" >/dev/null || {
  echo "fuzz.sh: $CLANG not found (apt-get install clang)" >&2
  exit 2
}
mkdir -p "$out"

SANFLAGS=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
LUAJIT_CFLAGS=$(pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
LUAJIT_LIBS=$(pkg-config --libs luajit 2>/dev/null || echo -lluajit-5.1)
# libpq's headers, for the host's cohost.postgres files (as the Makefile).
PQ_CFLAGS=$(pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)

# -- Building --------------------------------------------------------------

build_http_parse() {
  # http-parser itself is Debian's libhttp_parser, not instrumented: the
  # sanitizers and the coverage see host/http/parse.c and the harness.
  "$CLANG" -g -O1 -std=gnu11 -D_GNU_SOURCE "${SANFLAGS[@]}" \
    -iquote host spec/fuzz/fuzz_http_parse.c host/http/parse.c \
    -lhttp_parser -o "$out/fuzz_http_parse"
}

# One harness per Lua driver, over the same C file.
build_lua() {
  "$CLANG" -g -O1 -std=gnu11 -D_GNU_SOURCE "${SANFLAGS[@]}" $LUAJIT_CFLAGS \
    -DFUZZ_ROOT="\"$root\"" -DFUZZ_DRIVER="\"spec/fuzz/fuzz_$1.lua\"" \
    spec/fuzz/fuzz_lua.c $LUAJIT_LIBS -o "$out/fuzz_$1"
}
build_ws_frame() { build_lua ws_frame; }
build_resp() { build_lua resp; }

# True when $1 (an object) is missing or older than a file its .d names.
stale() {
  [ -f "$1" ] && [ -f "${1%.o}.d" ] || return 0
  local f
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "${1%.o}.d"); do
    [ "$f" -nt "$1" ] && return 0
  done
  return 1
}

# The host as build/cohost is made (the Makefile's source lists), with
# coverage and ASan (CH_ASAN: the runtime's fiber annotations) but
# libFuzzer's main: host/main.c's main becomes ch_fuzz_host_main.
# $1: the harness's name, then extra flags for the harness's own file.
build_conn() {
  local name=$1 vars src flags o objs=() todo=()
  # The Makefile's lists, without touching its SAN stamp.
  vars=$(make -s --no-print-directory SAN="$(cat build/.san 2>/dev/null || true)" \
           -f Makefile -f - print-RUNTIME_SRC print-ASM_SRC print-HOST_SRC <<'EOF'
print-%: ; @echo '$($*)'
EOF
)
  flags=(-g -O1 -std=gnu11 -D_GNU_SOURCE -fno-omit-frame-pointer -DCH_ASAN
         -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
         -I runtime/include -iquote runtime -iquote host $LUAJIT_CFLAGS $PQ_CFLAGS -fexceptions
         -DCOHOST_LUA_DIR="\"$root/lua\"" -MMD -MP)
  for src in $vars; do
    o=$out/obj/${src%.*}.o
    objs+=("$o")
    stale "$o" && todo+=("$src")
  done
  if [ ${#todo[@]} -gt 0 ]; then
    for src in "${todo[@]}"; do mkdir -p "$out/obj/$(dirname "$src")"; done
    printf '%s\n' "${todo[@]}" | xargs -P "$jobs" -I{} sh -c '
      src={}; o='"$out"'/obj/${src%.*}.o
      extra=; [ "$src" = host/main.c ] && extra=-Dmain=ch_fuzz_host_main
      exec "$0" "$@" $extra -c "$src" -o "$o"' "$CLANG" "${flags[@]}"
  fi
  # The Lua heaps' allocator (host/vm/heap.c), made by the Makefile.
  make -s --no-print-directory SAN="$(cat build/.san 2>/dev/null || true)" build/jemalloc_lua.a
  "$CLANG" -g -O1 -std=gnu11 -D_GNU_SOURCE "${SANFLAGS[@]}" $LUAJIT_CFLAGS -rdynamic \
    -DFUZZ_ROOT="\"$root\"" "${@:2}" spec/fuzz/fuzz_http_conn.c "${objs[@]}" build/jemalloc_lua.a \
    -Wl,--wrap=lua_newstate $LUAJIT_LIBS -lhttp_parser -lnghttp2 -lpq -lssl -lcrypto -lpcre2-8 \
    -ldl -lpthread -lm -o "$out/fuzz_$name"
}
build_http_conn() { build_conn http_conn; }
build_h2_conn() { build_conn h2_conn -DFUZZ_H2; }

for h in "${harnesses[@]}"; do
  echo "fuzz.sh: building fuzz_$h"
  "build_$h"
done

# -- Running -----------------------------------------------------------------

# libFuzzer options per harness. -max_len: room for the 414/431 seeds;
# -timeout: a hang is a failure too. http_conn: its server keeps memory
# reachable only from parked coroutine stacks, which LeakSanitizer does
# not scan, so leaks are checked by the harness (fds, coroutines) instead.
run_opts() {
  case $1 in
    http_parse) echo -max_len=16384 -timeout=10 -dict=spec/fuzz/http.dict ;;
    ws_frame)   echo -max_len=4096 -timeout=10 -dict=spec/fuzz/ws.dict ;;
    resp)       echo -max_len=4096 -timeout=10 -dict=spec/fuzz/resp.dict ;;
    http_conn)  echo -max_len=4096 -timeout=20 -dict=spec/fuzz/http.dict -detect_leaks=0 -print_funcs=0 ;;
    h2_conn)    echo -max_len=4096 -timeout=20 -dict=spec/fuzz/h2.dict -detect_leaks=0 -print_funcs=0 ;;
  esac
}

# http_conn's input is an HTTP stream with the same markers: the parser's
# seeds (every framing case) are its seeds too.
extra_corpus() {
  case $1 in
    http_conn) echo spec/fuzz/corpus/http_parse ;;
  esac
}

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Echoes the status lines of a libFuzzer log on stdin, one per 10 s, and
# its last words, prefixed with $1. A read loop, not awk: mawk reads a
# pipe in blocks, so a slow log would show nothing for minutes.
progress() {
  local line t next_t=0
  while IFS= read -r line; do
    case $line in
      "#"*": cov"*"time: "*)
        t=${line#* time: }
        t=${t%%s*}
        if [ "$t" -ge "$next_t" ] 2>/dev/null; then
          echo "$1: $line"
          next_t=$((t + 10))
        fi ;;
      "#"*$'\t'pulse*|"#"*$'\t'DONE*|"INFO: fuzzed"*|"INFO: exiting"*)
        echo "$1: $line" ;;
    esac
  done
}

# Runs harness $1 for $secs seconds in build/fuzz/$1; progress lines
# (every 10 s) are prefixed with its name.
run_one() {
  local h=$1 dir=$out/$1 bin=$out/fuzz_$1 rc
  mkdir -p "$dir/corpus" "spec/fuzz/crashes/$h"
  rm -f "$dir"/crash-* "$dir"/timeout-* "$dir"/oom-* "$dir"/leak-* "$dir/rc"
  : >"$dir/fuzz.log"   # before tail opens it, which races the fuzzer's start
  # Fork mode keeps going after a crash, but its first step, a merge of
  # every seed in child processes, is not bounded by -max_total_time and
  # restarts after each crash: far too slow for http_conn's inputs (each
  # one a connection, and milliseconds of waits), which runs in-process
  # and stops at its first failure.
  local mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  case $h in http_conn|h2_conn) mode=() ;; esac
  # shellcheck disable=SC2046
  "$bin" ${mode[@]+"${mode[@]}"} -max_total_time="$secs" $(run_opts "$h") \
    -artifact_prefix="$dir/" -print_final_stats=1 ${opts[@]+"${opts[@]}"} \
    "$dir/corpus" "spec/fuzz/corpus/$h" "spec/fuzz/crashes/$h" $(extra_corpus "$h") >"$dir/fuzz.log" 2>&1 &
  local pid=$!
  tail -n +1 -f --pid=$pid "$dir/fuzz.log" 2>/dev/null | progress "$h" || true
  set +e
  wait $pid
  rc=$?
  set -e
  echo "$rc" >"$dir/rc"
}

# At most $jobs at a time: 2 cores, so 4 harnesses of 60 s take 2 minutes.
running=0
for h in "${harnesses[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$h" &
  running=$((running + 1))
done
wait

# -- Verdict ---------------------------------------------------------------

shopt -s nullglob
status=0
summary=()
for h in "${harnesses[@]}"; do
  dir=$out/$h bin=$out/fuzz_$h
  rc=$(cat "$dir/rc" 2>/dev/null || echo 1)
  # Executions per second over the run, from the last status line.
  # (In-process runs print "#N DONE ... exec/s: R" and "Done N runs in T second(s)".)
  rate=$(awk '/^#[0-9]+: cov/ { n = substr($1, 2) + 0; for (i = 1; i <= NF; i++) if ($i == "time:") t = $(i + 1) + 0 }
     /^Done [0-9]+ runs in/ { n = $2 + 0; t = $5 + 0 }
     END { if (t > 0) printf "%d executions in %d s, %d exec/s", n, t, n / t; else printf "no status line" }' "$dir/fuzz.log")
  found=("$dir"/crash-* "$dir"/timeout-* "$dir"/oom-* "$dir"/leak-*)
  if [ ${#found[@]} -eq 0 ] && [ "$rc" -eq 0 ]; then
    summary+=("fuzz.sh: $h: $rate, no crash")
    continue
  fi
  status=1
  # One line per distinct failure (the first 200 inputs replayed), with an
  # example input for each.
  echo "fuzz.sh: $h: ${#found[@]} failing inputs (libFuzzer exit $rc; log $dir/fuzz.log); distinct failures:"
  for f in "${found[@]:0:200}"; do
    why=$(timeout 60 "$bin" "$f" 2>&1 | grep -m1 -oE 'invariant failed: .*|lua error: .*|ERROR: AddressSanitizer: [a-z-]+|runtime error: .*|ERROR: libFuzzer: [a-z-]+' || true)
    echo "${why:-no longer fails on replay}|$f"
  done | sort -t'|' -k1,1 -u | sed 's/|/   reproducer: /'
  summary+=("fuzz.sh: $h: $rate, FAILED (${#found[@]} failing inputs in $dir/)")
done
printf '%s\n' "${summary[@]}"
if [ "$status" -eq 0 ]; then
  echo "fuzz.sh: no crash in ${secs}s (${harnesses[*]})"
else
  echo "fuzz.sh: failures in ${secs}s; reproducers listed above"
fi
exit "$status"
