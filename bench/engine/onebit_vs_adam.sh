#!/usr/bin/env bash
# OneBitAdam against Adam on the GPT trainer: configs/default.json (AdamW) and configs/onebit_adam.json
# (the same with OneBitAdam) trained for the same steps at -np 2 and -np 4, the LR schedule stretched
# to those steps. Prints each run's final loss and the mean of its last 10 steps, and OneBitAdam's
# ratio to Adam (the target: within 5 %). Both runs see the same batches at every step.
#
# Usage: bench/engine/onebit_vs_adam.sh [build-dir] [steps] [--set KEY=VALUE ...]
#   extra --set arguments go to both runs, e.g. --set dstrain.model.n_embd=64;
#   FREEZE_STEP=N overrides OneBitAdam's freeze_step, RANKS="2 4" the world sizes; OUT_DIR=dir keeps
#   each run's log and --metrics file there.
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
onebit=()
[[ -n ${FREEZE_STEP:-} ]] && onebit=(--set "optimizer.params.freeze_step=$FREEZE_STEP")

# final loss and mean of the last 10 steps, from a --metrics file
losses() { jq -s '"\(.[-1].loss) \([.[-10:][].loss] | add / length)"' -r "$1"; }

echo "| ranks | steps | Adam final | OneBitAdam final | ratio | Adam last-10 mean | OneBitAdam last-10 mean | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for ranks in ${RANKS:-2 4}; do
  "${mpirun[@]}" -np "$ranks" "$dstrain" --config "$root/configs/default.json" "${common[@]}" \
    --metrics "$out/adam_$ranks.jsonl" > "$out/adam_$ranks.log" 2>&1
  "${mpirun[@]}" -np "$ranks" "$dstrain" --config "$root/configs/onebit_adam.json" "${common[@]}" "${onebit[@]}" \
    --metrics "$out/onebit_$ranks.jsonl" > "$out/onebit_$ranks.log" 2>&1
  read -r adam_final adam_mean < <(losses "$out/adam_$ranks.jsonl")
  read -r onebit_final onebit_mean < <(losses "$out/onebit_$ranks.jsonl")
  awk -v r="$ranks" -v s="$steps" -v af="$adam_final" -v of="$onebit_final" -v am="$adam_mean" -v om="$onebit_mean" \
    'BEGIN { printf "| %d | %d | %.4f | %.4f | %.3f | %.4f | %.4f | %.3f |\n", r, s, af, of, of / af, am, om, om / am }'
done
