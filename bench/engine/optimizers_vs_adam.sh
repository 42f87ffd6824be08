#!/usr/bin/env bash
# Lamb, OneBitLamb and ZeroOneAdam (or any shipped configs) against Adam on the GPT trainer:
# configs/default.json (AdamW) and configs/<name>.json for each name in OPTIMIZERS, trained for the
# same steps at each world size in RANKS, the LR schedule stretched to those steps. Prints each run's
# final loss and the mean of its last 10 steps, and the ratio to Adam's (the target: within 5 %).
# Every run sees the same batches at every step.
#
# Usage: bench/engine/optimizers_vs_adam.sh [build-dir] [steps] [--set KEY=VALUE ...]
#   extra --set arguments go to every run; OPTIMIZERS="lamb onebit_lamb zero_one_adam" (config names),
#   RANKS="2 4"; OUT_DIR=dir keeps each run's log and --metrics file there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-300}
shift $(($# < 2 ? $# : 2))
extra=("$@")
dstrain=$build/apps/dstrain/dstrain
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
if [[ -n ${OUT_DIR:-} ]]; then
  out=$OUT_DIR && mkdir -p "$out" && rm -f "$out"/*.jsonl
else
  out=$(mktemp -d) && trap 'rm -rf "$out"' EXIT
fi
common=(--steps "$steps" --set "scheduler.params.total_num_steps=$steps" "${extra[@]}")

# final loss and mean of the last 10 steps, from a --metrics file
losses() { jq -s '"\(.[-1].loss) \([.[-10:][].loss] | add / length)"' -r "$1"; }
run() {  # ranks config-name
  "${mpirun[@]}" -np "$1" "$dstrain" --config "$root/configs/$2.json" "${common[@]}" \
    --metrics "$out/$2_$1.jsonl" > "$out/$2_$1.log" 2>&1
  losses "$out/$2_$1.jsonl"
}

echo "| ranks | steps | optimizer | final | Adam final | ratio | last-10 mean | Adam last-10 mean | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for ranks in ${RANKS:-2 4}; do
  read -r adam_final adam_mean < <(run "$ranks" default)
  for name in ${OPTIMIZERS:-lamb onebit_lamb zero_one_adam}; do
    read -r final mean < <(run "$ranks" "$name")
    awk -v r="$ranks" -v s="$steps" -v n="$name" -v f="$final" -v af="$adam_final" -v m="$mean" -v am="$adam_mean" \
      'BEGIN { printf "| %d | %d | %s | %.4f | %.4f | %.3f | %.4f | %.4f | %.3f |\n", r, s, n, f, af, f / af, m, am, m / am }'
  done
done
