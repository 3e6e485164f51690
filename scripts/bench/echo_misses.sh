#!/usr/bin/env bash
# Simulated cache misses and instructions of an echo server per message,
# from two fixed runs of scripts/bench/echo_rounds.c that differ only in
# rounds, so start-up, accepts and closes cancel out. Cachegrind's caches:
# I1/D1 32 KiB 8-way (this VM's L1); LL 1 MiB 256-way for its L2, which is
# 8-way but physically indexed: only the 6 set bits inside a page follow
# from the virtual address, the other 5 from wherever the kernel put the
# page, so 64 sets of 256 ways stand for it better than cachegrind's
# virtually indexed 2,048 sets of 8 (those make slab-aligned stacks clash
# on bits that real hardware randomises). No clock is involved: the
# figures do not depend on machine load.
#
#   scripts/bench/echo_misses.sh NAME CONNS R1 R2 -- SERVER ARGS...   (PORT in ARGS is replaced)
#   e.g. scripts/bench/echo_misses.sh cohost 1000 5 25 -- build/cohost examples/echo.lua PORT
# On the io_uring backend run scripts/bench/echo_exit.lua PORT CONNS instead
# of examples/echo.lua, with CH_IO_BACKEND=uring: it exits by itself once
# the connections are closed (valgrind does not get SIGTERM's shutdown
# through to a worker waiting in io_uring_enter).
# Writes build/miss/NAME-CONNS-R.out (cachegrind; cg_diff the two, then
# cg_annotate, for the cost by function) and prints one line of
# per-message figures (CG_OPTS=--cache-sim=no: instructions only, faster). Needs make build/bench/echo_rounds build/bench/echo_epoll.
set -euo pipefail
name=$1 conns=$2 r1=$3 r2=$4; shift 4; [ "$1" = -- ] && shift
out=build/miss; mkdir -p $out
CG_OPTS=${CG_OPTS:---cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=1048576,256,64}
run() {   # rounds -> cachegrind out file
  local r=$1 f=$out/$name-$conns-$1.out port; shift
  while :; do port=$((10000 + RANDOM % 20000)); ss -ltn | grep -q ":$port " || break; done
  local args=(); for a in "$@"; do args+=("${a//PORT/$port}"); done
  valgrind --tool=cachegrind $CG_OPTS --cachegrind-out-file=$f "${args[@]}" \
    >$out/$name-$conns-$r.log 2>&1 &
  local pid=$!
  for _ in $(seq 600); do ss -ltn | grep -q ":$port " && break
    kill -0 $pid 2>/dev/null || { cat $out/$name-$conns-$r.log >&2; exit 1; }; sleep 0.1; done
  build/bench/echo_rounds -p $port -c $conns -r $r >/dev/null
  kill -TERM $pid 2>/dev/null || true   # scripts/bench/echo_exit.lua ends by itself
  wait $pid || true
  echo $f
}
f1=$(run $r1 "$@"); f2=$(run $r2 "$@")
sum() { grep '^summary:' $1 | cut -d' ' -f2-; }
python3 - "$name" "$conns" $(( conns * (r2 - r1) )) "$(grep ^events: $f1)" "$(sum $f1)" "$(sum $f2)" <<'PY'
import sys
name, conns, msgs, ev, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()[1:], sys.argv[5].split(), sys.argv[6].split()
d = {e: (int(y) - int(x)) / msgs for e, x, y in zip(ev, a, b)}
if 'D1mr' not in d:   # CG_OPTS without --cache-sim=yes: instructions only
    print(f"{name} conns={conns} msgs={msgs} Ir={d['Ir']:.0f}"); sys.exit()
print(f"{name} conns={conns} msgs={msgs} Ir={d['Ir']:.0f} I1mr={d['I1mr']:.1f} "
      f"D1mr={d['D1mr']:.1f} D1mw={d['D1mw']:.1f} D1m={d['D1mr']+d['D1mw']:.1f} "
      f"LLm={d['DLmr']+d['DLmw']+d['ILmr']:.1f} (DLmr={d['DLmr']:.1f} DLmw={d['DLmw']:.1f} ILmr={d['ILmr']:.1f})")
PY
