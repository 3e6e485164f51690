#!/usr/bin/env bash
# Runs every C test binary (build/spec/test_*) and every Lua spec
# (spec/*_spec.lua, with busted inside build/cohost), prints their output
# and sums their counts. The last line printed is exactly "N passed, N failed".
# Exits non-zero if anything failed. `make test` builds the binaries first.
#
# A binary that crashes, hangs past its timeout or exits non-zero without a
# summary counts as at least 1 failed: its tests that never reported are
# failed, since they did not pass.
set -u

cd "$(dirname "$0")/.."

TIMEOUT=${TIMEOUT:-300}   # seconds per binary; the slowest takes a few

passed=0
failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# The number in the first match of an extended regex ending in [0-9]+, or
# empty. Not anchored: stdout and stderr lines may share a line.
count() { grep -oE "$1" "$out" | head -1 | grep -oE '[0-9]+$'; }

# Says why a runner gave no summary: its timeout, or a crash.
abnormal() {
  if [ "$2" -eq 124 ]; then
    echo "test.sh: $1 timed out after ${TIMEOUT}s" >&2
  else
    echo "test.sh: $1 ended abnormally (status $2)" >&2
  fi
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
  CMOCKA_MESSAGE_OUTPUT=stdout timeout "$TIMEOUT" "$bin" >"$out" 2>&1
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
      echo "test.sh: $bin exited $rc after a clean summary" >&2
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
  passed=$(( passed + p ))
  failed=$(( failed + f ))
done

# The LuaJIT VM-state probe prints "=> PASS" or "=> FAIL" per scenario.
if [ -x build/spec/ljvm_probe ]; then
  echo "== build/spec/ljvm_probe"
  timeout "$TIMEOUT" build/spec/ljvm_probe >"$out" 2>&1
  rc=$?
  cat "$out"
  p=$(grep -c '=> PASS' "$out")
  f=$(grep -c '=> FAIL' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "test.sh: ljvm_probe ended abnormally (status $rc)" >&2
    f=1
  fi
  passed=$(( passed + p ))
  failed=$(( failed + f ))
fi

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
  timeout "$TIMEOUT" build/cohost /usr/bin/busted -o plainTerminal "$spec" >"$out" 2>&1
  rc=$?
  cat "$out"
  line=$(grep -E '^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' "$out" | tail -1)
  if [ -n "$line" ]; then
    nums=($(echo "$line" | grep -oE '[0-9]+' | head -3))
    p=${nums[0]}
    f=$(( nums[1] + nums[2] ))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      echo "test.sh: $spec exited $rc after a clean summary" >&2
      f=1
    fi
  else
    p=0
    f=1
    abnormal "$spec" "$rc"
  fi
  passed=$(( passed + p ))
  failed=$(( failed + f ))
done

# The HTTP parser's libFuzzer harness (ASan + UBSan), FUZZ_SECONDS long
# (default 60; 0 skips), seeded with the framing corpus and the kept
# reproducers: one test, passed when no input fails.
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
if [ "$FUZZ_SECONDS" -gt 0 ]; then
  echo "== scripts/fuzz.sh $FUZZ_SECONDS"
  if timeout $(( FUZZ_SECONDS + 240 )) bash scripts/fuzz.sh "$FUZZ_SECONDS" >"$out" 2>&1; then
    passed=$(( passed + 1 ))
  else
    failed=$(( failed + 1 ))
  fi
  tail -5 "$out"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
