#!/usr/bin/env bash
# Fuzzes host/http_parse.c (ch_http_head_parse, ch_http_body_parse) with
# libFuzzer for the given seconds (default 60). Usage:
#   scripts/fuzz.sh [seconds] [libFuzzer options...]
#
# Builds build/fuzz/fuzz_http_parse (spec/fuzz/fuzz_http_parse.c) with
# Debian's clang and -fsanitize=fuzzer,address,undefined; libFuzzer comes
# from libclang-rt-14-dev, which the clang package pulls in. Runs it on a
# scratch corpus (build/fuzz/corpus) seeded from spec/fuzz/corpus/http_parse
# (regenerate with build/cohost spec/fuzz/make_corpus.lua), so the seeds
# stay as committed. The run keeps going after a crash (one fork job at a
# time) so it reports every distinct failure, then exits 1 if anything
# crashed: a sanitizer report, a broken invariant (abort), a timeout or an
# out-of-memory. Each input is kept as build/fuzz/crash-* (or timeout-*,
# oom-*); replay one with build/fuzz/fuzz_http_parse FILE, and
# FUZZ_DEBUG=1 for the verdicts of each request in it.
set -euo pipefail

cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
CLANG=${CLANG:-clang}
out=build/fuzz
bin=$out/fuzz_http_parse

command -v "$CLANG" >/dev/null || {
  echo "fuzz.sh: $CLANG not found (apt-get install clang)" >&2
  exit 2
}
mkdir -p "$out/corpus"
rm -f "$out"/crash-* "$out"/timeout-* "$out"/oom-* "$out"/leak-*

# http-parser itself is Debian's libhttp_parser, not instrumented: the
# sanitizers and the coverage see host/http_parse.c and the harness.
"$CLANG" -g -O1 -std=gnu11 -D_GNU_SOURCE \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -iquote host spec/fuzz/fuzz_http_parse.c host/http_parse.c \
  -lhttp_parser -o "$bin"

# -max_len: room for the 414/431 seeds; -timeout: a hang is a failure too.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
log=$out/fuzz.log
set +e
"$bin" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
  -max_total_time="$secs" -max_len=16384 -timeout=10 \
  -dict=spec/fuzz/http.dict -artifact_prefix="$out/" -print_final_stats=1 \
  "$@" "$out/corpus" spec/fuzz/corpus/http_parse spec/fuzz/crashes >"$log" 2>&1 &
pid=$!
# Progress every 10 s: fork mode prints a status line per job.
tail -n +1 -f --pid=$pid "$log" 2>/dev/null | awk '
  /^#[0-9]+: cov/ { for (i = 1; i <= NF; i++) if ($i == "time:") t = $(i + 1) + 0
                    last = $0; if (t >= next_t) { print; fflush(); next_t = t + 10 } }
  /^INFO: (fuzzed|exiting)/ { print; fflush() }
  END { if (last) print last }'
wait $pid
rc=$?
set -e
# Executions per second over the run, from the last status line.
awk '/^#[0-9]+: cov/ { n = substr($1, 2) + 0; for (i = 1; i <= NF; i++) if ($i == "time:") t = $(i + 1) + 0 }
     END { if (t > 0) printf "fuzz.sh: %d executions in %d s, %d exec/s\n", n, t, n / t }' "$log"

shopt -s nullglob
found=("$out"/crash-* "$out"/timeout-* "$out"/oom-* "$out"/leak-*)
if [ ${#found[@]} -eq 0 ] && [ "$rc" -eq 0 ]; then
  echo "fuzz.sh: no crash in ${secs}s"
  exit 0
fi
# One line per distinct failure (the first 200 inputs replayed), with an
# example input for each.
echo "fuzz.sh: ${#found[@]} failing inputs (libFuzzer exit $rc); distinct failures:"
for f in "${found[@]:0:200}"; do
  why=$("$bin" "$f" 2>&1 | grep -m1 -oE 'invariant failed: .*|ERROR: AddressSanitizer: [a-z-]+|runtime error: .*|ERROR: libFuzzer: [a-z-]+' || true)
  echo "${why:-no longer fails on replay}|$f"
done | sort -t'|' -k1,1 -u | sed 's/|/   e.g. /'
exit 1
