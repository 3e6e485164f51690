#!/usr/bin/env bash
# Runs every C test binary (build/spec/test_*), the LuaJIT probe, the docs
# check (scripts/check_docs.py) and every Lua spec (spec/*_spec.lua, with
# busted inside build/cohost), prints their output and sums their counts. The last line printed is exactly "N passed, N failed".
# Exits non-zero if anything failed. `make test` builds the binaries first.
#
# A binary that crashes, hangs past its timeout or exits non-zero without a
# summary counts as at least 1 failed: its tests that never reported are
# failed, since they did not pass.
set -u

cd "$(dirname "$0")/.."

TIMEOUT=${TIMEOUT:-300}   # seconds per binary; the slowest takes a few

# SAN=address,undefined (set by make test SAN=...): the binaries are
# sanitizer builds. Reports go to files, not stderr (specs read their
# children's stderr), and any report fails the runner that produced it,
# its children included; they are kept in build/san-reports. Leaks and
# UBSan findings that are not ours are suppressed in spec/san (see
# docs/sanitizers.md). VALGRIND=1 (make valgrind): only the C test
# binaries, each under valgrind memcheck.
SAN=${SAN:-}
VALGRIND=${VALGRIND:-0}
san_tmp=
vg=()
if [ -n "$SAN" ]; then
  san_tmp=$(mktemp -d)
  rm -rf build/san-reports
  mkdir -p build/san-reports
  # halt_on_error: a UBSan finding ends the process like an ASan one, so
  # no finding passes unnoticed behind a green spec.
  export ASAN_OPTIONS="log_path=$san_tmp/asan:detect_leaks=1:detect_stack_use_after_return=0:handle_segv=1:allow_user_segv_handler=1:strict_string_checks=0:detect_odr_violation=0"
  export LSAN_OPTIONS="suppressions=$PWD/spec/san/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="log_path=$san_tmp/ubsan:print_stacktrace=1:halt_on_error=1:suppressions=$PWD/spec/san/ubsan.supp"
  TIMEOUT=$(( TIMEOUT * 2 ))
fi
if [ "$VALGRIND" = 1 ]; then
  command -v valgrind >/dev/null || { echo "test.sh: valgrind is not installed" >&2; exit 1; }
  vg=(valgrind -q --error-exitcode=1 --leak-check=full --track-origins=yes
      --suppressions=spec/san/valgrind.supp)
fi

passed=0
failed=0
# One line per failed test, printed again just above the summary: CI shows
# only the tail of this output, and the tail must say what failed.
failures=()
out=$(mktemp)
trap 'rm -f "$out"; [ -z "$san_tmp" ] || rm -rf "$san_tmp"' EXIT

# The number in the first match of an extended regex ending in [0-9]+, or
# empty. Not anchored: stdout and stderr lines may share a line.
count() { grep -oE "$1" "$out" | head -1 | grep -oE '[0-9]+$'; }

# Why the current runner failed beyond its own failure lines (a timeout,
# a crash, a sanitizer report), for the closing list; reset per runner.
why=

# SAN only: prints the sanitizer reports written while runner $1 ran,
# keeps them in build/san-reports and adds 1 to f if there were any.
san_reports() {
  [ -n "$san_tmp" ] || return 0
  local r n=0 name kept=
  name=$(basename "$1")
  for r in "$san_tmp"/*; do
    [ -e "$r" ] || continue
    n=$(( n + 1 ))
    echo "test.sh: sanitizer report from $1 (build/san-reports/$name.${r##*/}):" >&2
    head -40 "$r" >&2
    mv "$r" "build/san-reports/$name.${r##*/}"
    kept="$kept build/san-reports/$name.${r##*/}"
  done
  [ "$n" -eq 0 ] || { f=$(( f + 1 )); why="${why:+$why; }sanitizer report:$kept"; }
}

# Records runner $1's failed tests (count $2) for the closing list: the
# lines of $out matching extended regex $3 (cmocka's "[  FAILED  ] name"),
# or busted's "Failure -> file @ line" blocks (the test's name and its
# message); then why the runner failed beyond those, if it did (a
# timeout, a crash, a sanitizer report: $why); or just the runner when
# there is neither.
note_failures() {
  [ "$2" -gt 0 ] || { why=; return 0; }
  local lines
  if [ -n "$3" ]; then
    lines=$(grep -E "$3" "$out" | sed 's/^\[  FAILED  \] //' | sort -u)
  else
    # The test's name, then its message (up to 5 lines, e.g. busted's
    # "Expected ... Passed in: ... Expected: ...") joined with " | ".
    lines=$(awk '/^(Failure|Error) -> / { n = 6; msg = ""; next }
                 n > 0 && /^$/ { if (msg != "") print msg; n = 0; next }
                 n > 0 { msg = msg == "" ? $0 : msg " | " $0; if (--n == 0) print msg }
                 END { if (n > 0 && msg != "") print msg }' "$out")
  fi
  if [ -n "$lines" ]; then
    while IFS= read -r l; do failures+=("$1: ${l:0:400}"); done <<<"$lines"
  fi
  if [ -n "$why" ]; then
    failures+=("$1: ${why:0:400}")
  elif [ -z "$lines" ]; then
    failures+=("$1: $2 failed (no summary)")
  fi
  why=
}

# Says why a runner gave no summary: its timeout, or a crash.
abnormal() {
  if [ "$2" -eq 124 ]; then
    why="timed out after ${TIMEOUT}s"
  elif [ "$2" -eq 137 ]; then
    why="killed (SIGKILL: still running ${TIMEOUT}s + 10s after its timeout, or the OOM killer)"
  elif [ "$2" -gt 128 ]; then
    why="ended abnormally (status $2: SIG$(kill -l $(( $2 - 128 )) 2>/dev/null || echo '?'))"
  else
    why="ended abnormally (status $2)"
  fi
  echo "test.sh: $1 $why" >&2
}

shopt -s nullglob
bins=(build/spec/test_*)
if [ ${#bins[@]} -eq 0 ]; then
  echo "test.sh: no test binaries in build/spec (run make test)" >&2
  failed=1
fi

for bin in "${bins[@]}"; do
  [ -x "$bin" ] || continue
  echo "== $bin"
  # cmocka prints progress on stdout and its summary on stderr: merge them.
  # test_stack checks that a fault outside any guard goes on to the
  # default action (death by SIGSEGV): ASan's own SEGV handler, which the
  # runtime's passes faults on to, must stay out of that one binary.
  segv=
  [ "${bin##*/}" != test_stack ] || segv=:handle_segv=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-}$segv CMOCKA_MESSAGE_OUTPUT=stdout \
    timeout -k 10 "$TIMEOUT" "${vg[@]}" "$bin" >"$out" 2>&1
  rc=$?
  cat "$out"

  total=$(count '\[==========\] Running [0-9]+')
  p=$(count '\[  PASSED  \] [0-9]+')
  f=$(count '\[  FAILED  \] [0-9]+')
  if grep -qE '\[==========\] [0-9]+ test\(s\) run' "$out"; then
    # cmocka finished: trust its summary (no FAILED line means none).
    p=${p:-0}
    f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      why="exited $rc after a clean summary"
      echo "test.sh: $bin $why" >&2
      f=1
    fi
  else
    # Crashed or timed out mid-run: count what reported, fail the rest.
    p=$(grep -cE '^\[       OK \] ' "$out")
    skipped=$(grep -cE '^\[  SKIPPED \] [^0-9]' "$out")
    total=${total:-0}
    f=$(( total - p - skipped ))
    [ "$f" -ge 1 ] || f=1
    abnormal "$bin" "$rc"
  fi
  san_reports "$bin"
  note_failures "$bin" "$f" '^\[  FAILED  \] [^0-9]'
  passed=$(( passed + p ))
  failed=$(( failed + f ))
done

# Under valgrind the C test binaries are all that runs.
if [ "$VALGRIND" = 1 ]; then
  [ ${#failures[@]} -eq 0 ] || printf 'failed: %s\n' "${failures[@]}"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi

# The LuaJIT VM-state probe prints "=> PASS" or "=> FAIL" per scenario.
if [ -x build/spec/ljvm_probe ]; then
  echo "== build/spec/ljvm_probe"
  timeout -k 10 "$TIMEOUT" build/spec/ljvm_probe >"$out" 2>&1
  rc=$?
  cat "$out"
  p=$(grep -c '=> PASS' "$out")
  f=$(grep -c '=> FAIL' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    why="ended abnormally (status $rc)"
    echo "test.sh: ljvm_probe $why" >&2
    f=1
  fi
  san_reports build/spec/ljvm_probe
  note_failures build/spec/ljvm_probe "$f" '=> FAIL'
  passed=$(( passed + p ))
  failed=$(( failed + f ))
fi

# The docs check (scripts/check_docs.py, docs/testing.md): every path and
# ch_ name that docs/ and the source comments cite exists, and no comment
# holds an instruction count. One test for the whole tree: its findings
# are lines of one report, not behaviours, and each is listed below.
echo "== scripts/check_docs.py"
timeout -k 10 "$TIMEOUT" /usr/bin/python3 scripts/check_docs.py >"$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -eq 0 ]; then p=1 f=0; else p=0 f=1; fi
grep -qE '^check_docs: [0-9]+ files' "$out" || abnormal scripts/check_docs.py "$rc"
note_failures scripts/check_docs.py "$f" '^check_docs: [^0-9]'
passed=$(( passed + p ))
failed=$(( failed + f ))

# Lua specs: busted runs inside build/cohost, one process per spec file so
# a crash costs one file, not the suite. Errors count as failures.
specs=(spec/*_spec.lua)
if [ ${#specs[@]} -gt 0 ] && [ ! -x build/cohost ]; then
  echo "test.sh: build/cohost is missing: Lua specs not run" >&2
  failed=$(( failed + 1 ))
fi
for spec in "${specs[@]}"; do
  [ -x build/cohost ] || break
  echo "== $spec"
  timeout -k 10 "$TIMEOUT" build/cohost /usr/bin/busted -o plainTerminal "$spec" >"$out" 2>&1
  rc=$?
  cat "$out"
  line=$(grep -E '^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' "$out" | tail -1)
  if [ -n "$line" ]; then
    nums=($(echo "$line" | grep -oE '[0-9]+' | head -3))
    p=${nums[0]}
    f=$(( nums[1] + nums[2] ))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      why="exited $rc after a clean summary"
      echo "test.sh: $spec $why" >&2
      f=1
    fi
  else
    p=0
    f=1
    abnormal "$spec" "$rc"
  fi
  san_reports "$spec"
  note_failures "$spec" "$f" ''
  passed=$(( passed + p ))
  failed=$(( failed + f ))
done

# The libFuzzer harnesses (spec/fuzz/README.md; ASan + UBSan), each
# FUZZ_SECONDS long (default 40; 0 skips), two at a time, seeded with their
# corpora and the kept reproducers. One test per harness: fuzz.sh says
# "fuzz.sh: <harness>: ..., no crash" or "..., FAILED (...)" for each; a
# run that ends without those lines (a build failure) counts as 1 failed.
FUZZ_SECONDS=${FUZZ_SECONDS:-40}
if [ "$FUZZ_SECONDS" -gt 0 ]; then
  echo "== scripts/fuzz.sh $FUZZ_SECONDS"
  # (fuzz.sh builds its own sanitizer build: SAN's settings stay out)
  env -u ASAN_OPTIONS -u LSAN_OPTIONS -u UBSAN_OPTIONS \
    timeout -k 10 $(( FUZZ_SECONDS * 3 + 240 )) bash scripts/fuzz.sh "$FUZZ_SECONDS" >"$out" 2>&1
  rc=$?
  p=$(grep -cE '^fuzz\.sh: [a-z0-9_]+: .*, no crash$' "$out")
  f=$(grep -cE '^fuzz\.sh: [a-z0-9_]+: .*, FAILED ' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    abnormal scripts/fuzz.sh "$rc"
  fi
  while IFS= read -r l; do
    failures+=("scripts/fuzz.sh: ${l:0:160}")
  done < <(grep -E '^fuzz\.sh: [a-z0-9_]+: .*, FAILED ' "$out" | sed 's/^fuzz\.sh: //')
  if [ "$rc" -ne 0 ] && ! grep -qE ', FAILED ' "$out"; then
    failures+=("scripts/fuzz.sh: no verdict (exit $rc; see above)")
  fi
  passed=$(( passed + p ))
  failed=$(( failed + f ))
  tail -8 "$out"
fi

if [ ${#failures[@]} -gt 0 ]; then
  echo "== failed:"
  printf '  %s\n' "${failures[@]}"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
