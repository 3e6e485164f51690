# Section switch (sourced by run.sh): ns per context switch of cohost's
# ch_ctx_switch, boost.context's jump_fcontext and glibc's swapcontext
# (build/bench/switch and switch_boost, pinned to SRV_CPU), also with the
# two sides' MXCSR flags differing, and instructions per switch under
# callgrind.

# callgrind_ir CMD...: instructions executed by CMD under callgrind.
callgrind_ir() {
  timeout -k 2 120 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$@" 2>&1 >/dev/null | collected
}

# insn_per_switch CMD...: CMD takes ROUND_TRIPS 0 as its last two words.
insn_per_switch() {
  local i1 i2
  i1=$(callgrind_ir "$@" "$CG_N1" 0)
  i2=$(callgrind_ir "$@" "$CG_N2" 0)
  [ -n "$i1" ] && [ -n "$i2" ] || { echo "-"; return; }
  awk -v a="$i1" -v b="$i2" -v n=$(( 2 * (CG_N2 - CG_N1) )) \
    'BEGIN { printf "%.1f\n", (b - a) / n }'
}

section_switch() {
  title "Context switch: ns per switch, median of $SW_RUNS runs (round trip / 2)"
  need switch switch_boost || return
  log "switch"
  local ch bo uc chd bod line
  wait_quiet
  line=$(pinned "$B/switch" ch "$SW_N" "$SW_RUNS"); ch=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch_boost" "$SW_N" "$SW_RUNS"); bo=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch" ucontext "$SW_SLOW_N" "$SW_RUNS"); uc=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch" ch "$SW_SLOW_N" "$SW_RUNS" dirty); chd=$(kv ns_per_switch "$line")
  line=$(pinned "$B/switch_boost" "$SW_SLOW_N" "$SW_RUNS" dirty); bod=$(kv ns_per_switch "$line")
  row "cohost ch_ctx_switch" "$(fmt "$ch" 2)" "ns" "$SW_N round trips per run"
  row "boost jump_fcontext" "$(fmt "$bo" 2)" "ns" "cohost/boost $(ratio "$ch" "$bo")x"
  row "glibc swapcontext" "$(fmt "$uc" 1)" "ns" "swapcontext/cohost $(ratio "$uc" "$ch" 1)x"
  row "cohost, MXCSR flags differ" "$(fmt "$chd" 1)" "ns" "one side did floating point (see switch.c)"
  row "boost, MXCSR flags differ" "$(fmt "$bod" 1)" "ns" "cohost/boost $(ratio "$chd" "$bod")x"
  result switch.cohost.ns "$ch"; result switch.boost.ns "$bo"
  result switch.swapcontext.ns "$uc"; result switch.cohost_mxcsr_differ.ns "$chd"
  result switch.boost_mxcsr_differ.ns "$bod"

  if command -v valgrind > /dev/null; then
    log "switch: callgrind"
    local ich ibo
    ich=$(insn_per_switch "$B/switch" ch)
    ibo=$(insn_per_switch "$B/switch_boost")
    row "cohost instructions" "$ich" "insn/switch" "callgrind, $CG_N2 minus $CG_N1 round trips, loop included"
    row "boost instructions" "$ibo" "insn/switch" "cohost/boost $(ratio "$ich" "$ibo")x"
    result switch.cohost.insn "$ich"; result switch.boost.insn "$ibo"
  else
    note "skipped instruction counts: valgrind is missing"
  fi
}

