# Section prio (sourced by run.sh): priority classes and CPU affinity
# (issue 8), a high health-check listener next to a loaded normal endpoint
# and hello on -w 2 pinned and unpinned, measured by
# scripts/bench/prio_bench.sh, which prints its part of the table and
# appends its figures to RESULTS (and runs BENCH_BASE_COHOST too if set).
section_prio() {
  BENCH_RESULTS=$RESULTS BENCH_BASE_COHOST=$BASE_COHOST bash scripts/bench/prio_bench.sh >> "$TABLE"
}
