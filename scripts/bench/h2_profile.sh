#!/usr/bin/env bash
# User-space instructions per HTTP/2 request of cohost's server: callgrind
# runs of build/cohost -w 1 SCRIPT (default examples/hello.lua; h2c with
# prior knowledge) serving N1 and N2 requests of h2load -c 50 -m 10 (50
# connections, 10 streams each in flight), and the difference over
# N2 - N1, so start-up, the connections and shutdown cancel out. No clock
# is involved: the figure does not depend on machine load, but it moves by
# about 1% from run to run (how h2load's streams fall into batches), so
# compare the means of a few runs. http_profile.sh does the same for
# HTTP/1.1 with wrk.
#
# glibc's heap trimming is off in these runs (GLIBC_TUNABLES=
# glibc.malloc.trim_threshold=1 GiB): under callgrind's slow clock a heap
# whose top ends past the trim threshold can be trimmed and grown again
# around every request (systrim and sbrk, a cost docs/benchmarks.md gives),
# depending on where a build's allocations happen to fall; a native run
# makes about 300 brk calls in 30,000 requests either way.
#
#   bash scripts/bench/h2_profile.sh [SCRIPT [N1 N2 [RUNS]]]
#   (defaults: examples/hello.lua 10000 30000 1; BENCH_BASE_COHOST=another
#   cohost binary, as for run.sh, measures it too, in turn with
#   build/cohost's runs, and prints new/base of the means)
# Output in build/bench/h2profile/.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/bench/lib.sh

BENCH_TAG=h2_profile
SCRIPT=${1:-examples/hello.lua}
N1=${2:-10000}; N2=${3:-30000}; RUNS=${4:-1}
OUT=$B/h2profile
LOGS=$OUT                         # start_server's logs
mkdir -p "$OUT"
for t in h2load valgrind; do command -v $t > /dev/null || { log "$t is missing"; exit 1; }; done
[ -x build/cohost ] || { log "build/cohost is missing (make)"; exit 1; }
base_check || exit 1
export GLIBC_TUNABLES=glibc.malloc.trim_threshold=1073741824

# ir BIN N SFX: Ir total of one callgrind run of BIN serving N requests;
# fails unless h2load saw all N succeed.
ir() {
  local bin=$1 n=$2 sfx=$3 port srv ok=""
  port=$(free_port)
  start_server "valgrind$sfx.$n" valgrind --tool=callgrind \
    --callgrind-out-file="$OUT/callgrind$sfx.$n" "$bin" -w 1 "$SCRIPT" "$port"
  srv=$SRV_PID
  if wait_port "$port" "$srv" 30; then
    taskset -c "$CLI_CPU" timeout 600 h2load -n "$n" -c 50 -m 10 "http://127.0.0.1:$port/" \
      > "$OUT/h2load$sfx.$n.log" 2>&1
    grep -q " $n succeeded, 0 failed" "$OUT/h2load$sfx.$n.log" && ok=1
  fi
  stop_server "$srv" 30   # valgrind writes its totals on the way out
  [ -n "$ok" ] || { log "h2load did not get $n answers (see $OUT/h2load$sfx.$n.log)"; return 1; }
  collected "$OUT/valgrind$sfx.$n.log"
}

# per_request BIN SFX: (Ir of N2 - Ir of N1) / (N2 - N1), rounded.
per_request() {
  local a b
  a=$(ir "$1" "$N1" "$2") && b=$(ir "$1" "$N2" "$2") || return 1
  awk -v a="$a" -v b="$b" -v n=$(( N2 - N1 )) 'BEGIN { printf "%.0f\n", (b - a) / n }'
}

echo "cohost $SCRIPT, 1 worker on CPU $SRV_CPU; h2load -c 50 -m 10 (h2c) on CPU $CLI_CPU;" \
  "instructions per request ($N2 - $N1 requests), $RUNS run(s)"
new=(); base=()
for r in $(seq "$RUNS"); do
  n=$(per_request build/cohost "") || exit 1
  new+=("$n")
  if [ -n "$BASE_COHOST" ]; then
    b=$(per_request "$BASE_COHOST" _base) || exit 1
    base+=("$b")
  fi
  echo "run $r: $(describe build/cohost) $n${b:+; base $b}"
done
mean() { tr ' ' '\n' <<< "$*" | awk '{ s += $1 } END { printf "%.0f\n", s / NR }'; }
m=$(mean "${new[@]}")
echo "instructions per request: mean $m (${new[*]})"
if [ -n "$BASE_COHOST" ]; then
  mb=$(mean "${base[@]}")
  echo "base $(describe "$BASE_COHOST"): mean $mb (${base[*]}); new/base $(ratio "$m" "$mb")x"
fi
