#!/usr/bin/env bash
# The memory plan's predicted peak per rank against the measured one (VmHWM, the largest rank), for
# the GPTs of bench/engine/memory_table.sh ("25M": 8 x 512, "100M": 8 x 1024; vocab 256, ctx 64,
# micro-batch 2, AdamW, fp32) with no ZeRO size in the config: the planner chooses them.
#   Usage: bench/engine/memory_plan_table.sh [BUILD_DIR] [STEPS]
#   Narrow it with the environment: MODELS="100M" RANKS="4" STAGES="0 3".
# Prints one markdown row per run: model np stage | predicted MB | measured MB | measured / predicted |
# peak vs stage 0's (the same model and ranks).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "| model | np | stage | predicted peak MB | measured peak MB | measured / predicted | peak vs stage 0 |"
echo "|---|---|---|---|---|---|---|"
for model in ${MODELS:-25M 100M}; do
  case $model in 25M) width=512;; 100M) width=1024;; *) echo "unknown model $model" >&2; exit 1;; esac
  for ranks in ${RANKS:-2 4}; do
    stage0=""
    for stage in ${STAGES:-0 1 2 3}; do
      run="$work/$model-$ranks-$stage"
      mpirun --oversubscribe --bind-to none -np "$ranks" "$build/apps/dstrain/dstrain" \
        --config "$root/configs/default.json" --set dstrain.model.n_layer=8 --set dstrain.model.n_embd=$width \
        --set dstrain.model.n_head=8 --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256 \
        --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null \
        --set zero_optimization.stage=$stage --steps "$steps" --metrics "$run.jsonl" > "$run.log" 2>&1
      row=$(python3 - "$run" "${stage0:-0}" <<'PY'
import json, re, sys
run, stage0 = sys.argv[1], float(sys.argv[2])
predicted = float(re.search(r"memory plan: predicted peak ([\d.]+) MB", open(run + ".log").read()).group(1))
measured = [json.loads(l) for l in open(run + ".jsonl")][-1]["peak_rss_mb"]
print(f"{predicted:.0f} | {measured:.0f} | {measured / predicted:.3f} | {measured / (stage0 or measured):.3f} |{measured}")
PY
)
      [ "$stage" = 0 ] && stage0=${row##*|}
      echo "| $model | $ranks | $stage | ${row%|*}|"
    done
  done
done
