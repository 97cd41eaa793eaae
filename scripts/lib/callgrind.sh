# Shared by scripts/scale-instructions and scripts/curves (sourced, not run): a cost per
# operation counted by callgrind, as the difference of two runs of LOW and HIGH operations
# divided by HIGH-LOW, so that everything done once (start, world build) drops out.
# The caller sets `cg_dir` (a scratch directory) and `scale_bench` (the `scale` bench binary).

# callgrind_total FILE -> the run's total instructions
callgrind_total() {
  callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

# per_decision WORLD LOW HIGH -> instructions of one routing decision in WORLD (the scale bench)
per_decision() {
  valgrind --tool=callgrind --callgrind-out-file="$cg_dir/d.a" "$scale_bench" "$1" "$2" >/dev/null 2>&1
  valgrind --tool=callgrind --callgrind-out-file="$cg_dir/d.b" "$scale_bench" "$1" "$3" >/dev/null 2>&1
  echo $((($(callgrind_total "$cg_dir/d.b") - $(callgrind_total "$cg_dir/d.a")) / ($3 - $2)))
}

# per_target TARGET LOW HIGH [requests args...] -> instructions of one request of
# `target/release/requests --target TARGET`
per_target() {
  local target=$1 low=$2 high=$3
  shift 3
  valgrind --tool=callgrind --callgrind-out-file="$cg_dir/r.a" target/release/requests --target "$target" "$@" --count "$low" >/dev/null 2>&1
  valgrind --tool=callgrind --callgrind-out-file="$cg_dir/r.b" target/release/requests --target "$target" "$@" --count "$high" >/dev/null 2>&1
  echo $((($(callgrind_total "$cg_dir/r.b") - $(callgrind_total "$cg_dir/r.a")) / (high - low)))
}

# per_request LOW HIGH [requests args...] -> instructions of one proxied JSON request
# (`target/release/requests --target same`)
per_request() {
  per_target same "$@"
}
