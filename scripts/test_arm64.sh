#!/usr/bin/env bash
# Cross-builds the C runtime for AArch64 (asm/switch_aarch64_aapcs.S) and
# runs its tests under QEMU user mode: spec/c/arm64/smoke.c (the switch
# itself, no cmocka needed) and the arch-neutral cmocka tests listed in
# CMOCKA_TESTS when an arm64 cmocka is installed (Debian multiarch). The last
# line printed is exactly "N passed, N failed"; exits non-zero on failure.
#
# Installs what it needs with apt-get (root, as on every cohost machine):
#   gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user, and, with
#   ARM64_CMOCKA=1 (the default), libcmocka-dev:arm64 after
#   `dpkg --add-architecture arm64` (one more apt-get update, ~1 MiB of
#   packages). ARM64_CMOCKA=0 runs the smoke test only.
#
# QEMU timings are emulation timings: the ns per switch printed by the smoke
# test is a sanity number, not a performance figure.
set -u

cd "$(dirname "$0")/.."

B=build/aarch64
CC=aarch64-linux-gnu-gcc
SYSROOT=/usr/aarch64-linux-gnu
TIMEOUT=${TIMEOUT:-180}          # seconds per binary, then SIGKILL (QEMU
                                 # does not always act on SIGTERM)
ARM64_CMOCKA=${ARM64_CMOCKA:-1}

# The cmocka tests that are arch-neutral and run under QEMU 7.2; all but:
#   test_ctx     x86-64 assembly; smoke.c is its AArch64 counterpart
#   test_hook    includes OpenSSL headers: needs libssl-dev:arm64
#   test_hiredis needs libhiredis-dev:arm64 and a redis server
#   test_stream  links host/net/ and OpenSSL (libssl-dev:arm64)
#   test_tlsf    links host/shdict/ (no runtime code to test there)
# test_stack's fault tests re-exec the binary, which a QEMU guest can only
# do through the emulator itself (no binfmt_misc here): TH_EXEC_WRAPPER.
CMOCKA_TESTS=${CMOCKA_TESTS:-"test_coro test_io test_timer test_prio test_poll test_stack test_pool test_ring"}

say() { echo "test_arm64.sh: $*" >&2; }

# -- Packages ----------------------------------------------------------------
need=()
command -v "$CC" >/dev/null || need+=(gcc-aarch64-linux-gnu)
[ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || { say "apt-get install failed"; echo "0 passed, 1 failed"; exit 1; }
fi
have_cmocka=0
if [ "$ARM64_CMOCKA" = 1 ]; then
  if ! [ -e /usr/lib/aarch64-linux-gnu/libcmocka.so ]; then
    say "installing libcmocka-dev:arm64 (multiarch)"
    { dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64; } &&
      apt-get update -qq && apt-get install -y -qq --no-install-recommends libcmocka-dev:arm64 >/dev/null \
      || say "no arm64 cmocka: running the smoke test only"
  fi
  [ -e /usr/lib/aarch64-linux-gnu/libcmocka.so ] && have_cmocka=1
fi

# -- Build -------------------------------------------------------------------
# The Makefile's own rules with the cross compiler; B keeps the objects away
# from the native build. CTEST_LIBS drops hiredis and libcrypto, which these
# tests do not use. IO_URING=0: the cross sysroot has no liburing, and
# qemu-user has no io_uring to run it on (the ring's requests say ENOSYS).
MK=(make --no-print-directory ARCH=aarch64 CC="$CC" B="$B" CTEST_LIBS=-lcmocka IO_URING=0)
passed=0
failed=0
if ! "${MK[@]}" "$B/libcohost.a"; then
  say "cross-build of the runtime failed"
  echo "0 passed, 1 failed"
  exit 1
fi
mkdir -p "$B/spec"
if ! $CC -O2 -g -std=gnu11 -D_GNU_SOURCE -fno-omit-frame-pointer -Wall -Wextra \
     -Wshadow -Wmissing-prototypes -Wstrict-prototypes -I runtime/include -iquote runtime \
     spec/c/arm64/smoke.c -o "$B/spec/smoke" "$B/libcohost.a" -ldl -lpthread; then
  say "smoke.c does not build"
  failed=$((failed + 1))
fi
bins=()
if [ "$have_cmocka" = 1 ]; then
  for t in $CMOCKA_TESTS; do
    if "${MK[@]}" "$B/spec/$t"; then bins+=("$B/spec/$t")
    else say "$t does not build"; failed=$((failed + 1)); fi
  done
fi

# -- Run ---------------------------------------------------------------------
# -L makes QEMU find the arm64 loader, ld-linux-aarch64.so.1, in the cross
# sysroot (libc6-arm64-cross). The loader and libc.so.6 must come from the
# same glibc build: they share private structures (_rtld_global). Left to
# itself, the loader finds /lib/aarch64-linux-gnu/libc.so.6 through the
# host's ld.so.cache, i.e. the multiarch libc6:arm64 that libcmocka:arm64
# pulled in, a different Debian revision (2.36-9+deb12u14 against
# 2.36-8cross1 here); with that pair pthread_create and a forked child's
# first steps spin forever in guest code. So the sysroot's lib comes first
# in LD_LIBRARY_PATH, then the multiarch directory for libcmocka.
LIBPATH="$SYSROOT/lib:/usr/lib/aarch64-linux-gnu"
QEMU=(qemu-aarch64 -L "$SYSROOT" -E LD_LIBRARY_PATH="$LIBPATH")
run() {
  CMOCKA_MESSAGE_OUTPUT=stdout TH_EXEC_WRAPPER="$(command -v qemu-aarch64) -L $SYSROOT" \
    timeout -s KILL "$TIMEOUT" "${QEMU[@]}" "$1" >"$out" 2>&1
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Tests that skipped (cmocka's "[  SKIPPED ] name", smoke's "skip name: why"),
# listed above the summary: a skip is neither passed nor failed.
skips=()
note_skips() {
  local l
  while IFS= read -r l; do [ -z "$l" ] || skips+=("$1: $l"); done <<<"$(
    grep -E '^\[  SKIPPED \] [^0-9]|^skip ' "$out" | sed -E 's/^\[  SKIPPED \] //; s/^skip //' | sort -u)"
}
count() { grep -oE "$1" "$out" | head -1 | grep -oE '[0-9]+$'; }

if [ -x "$B/spec/smoke" ]; then
  echo "== $B/spec/smoke"
  run "$B/spec/smoke"; rc=$?
  cat "$out"
  note_skips "$B/spec/smoke"
  p=$(grep -oE '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
  if [ -n "$p" ]; then
    passed=$((passed + ${p%% *}))
    f=${p##*, }; f=${f%% *}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    failed=$((failed + f))
  else
    say "smoke ended abnormally (status $rc)"
    failed=$((failed + 1))
  fi
fi

for bin in "${bins[@]}"; do
  echo "== $bin"
  run "$bin"; rc=$?
  cat "$out"
  note_skips "$bin"
  total=$(count '\[==========\] Running [0-9]+')
  p=$(count '\[  PASSED  \] [0-9]+')
  f=$(count '\[  FAILED  \] [0-9]+')
  if grep -qE '\[==========\] [0-9]+ test\(s\) run' "$out"; then
    p=${p:-0}; f=${f:-0}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  else
    # Crashed or killed: the tests that never reported did not pass.
    say "$bin ended abnormally (status $rc)"
    p=$(grep -c '^\[       OK \]' "$out")
    f=$(( ${total:-1} - p )); [ "$f" -lt 1 ] && f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f))
done

[ ${#skips[@]} -eq 0 ] || printf 'skipped: %s\n' "${skips[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
