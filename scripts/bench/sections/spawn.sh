# Section spawn (sourced by run.sh): ns per coroutine spawned, run and
# exited (in batches and one by one), per ch_yield and per timer started
# and expired (build/bench/spawn, pinned to SRV_CPU).

section_spawn() {
  title "Runtime: median of runs on one core"
  need spawn || return
  local line v
  log "spawn"
  wait_quiet
  line=$(pinned "$B/spawn" spawn "$SPAWN_N" 100 "$MICRO_RUNS"); v=$(kv ns_per_coro "$line")
  row "spawn + run + exit" "$(fmt "$v")" "ns/coroutine" "batches of 100, $SPAWN_N coroutines, stack pool ($(kv stacks_free "$line") stacks kept)"
  result spawn.ns "$v"
  line=$(pinned "$B/spawn" spawn "$SPAWN_N" 1 "$MICRO_RUNS"); v=$(kv ns_per_coro "$line")
  row "spawn + run + exit, one by one" "$(fmt "$v")" "ns/coroutine" "one ch_run per coroutine"
  result spawn.one_by_one.ns "$v"
  line=$(pinned "$B/spawn" yield "$YIELD_N" "$MICRO_RUNS"); v=$(kv ns_per_yield "$line")
  row "ch_yield, two coroutines" "$(fmt "$v")" "ns/yield" "through the ready queue"
  result yield.ns "$v"
  log "timers"
  wait_quiet
  line=$(pinned "$B/spawn" timers "$TIMER_N" "$TIMER_RUNS")
  v=$(kv ns_per_timer "$line")
  row "timers: start + expire" "$(fmt "$v")" "ns/timer" "$TIMER_N timers, random deadlines in 0-50 ms, CPU time"
  row "  of which start" "$(fmt "$(kv insert_ns "$line")")" "ns/timer" ""
  row "  of which expiry" "$(fmt "$(kv expire_ns "$line")")" "ns/timer" "wall $(kv wall_ms "$line") ms per run"
  result timers.ns "$v"; result timers.start.ns "$(kv insert_ns "$line")"
  result timers.expire.ns "$(kv expire_ns "$line")"
}

