#!/usr/bin/env bash
# Peak RSS per rank against the RSS before the model exists (the baseline), for ZeRO stages 0-3 on
# the GPTs of docs/zero.md's memory table: "25M" (8 layers x 512) and "100M" (8 layers x 1024), vocab 256, ctx 64,
# micro-batch 2, AdamW, fp32 and bf16, with and without activation checkpointing (every block), at
# -np 1, 2 and 4. Bucket sizes are HuggingFace's "auto" values for DeepSpeed (reduce_bucket_size
# hidden^2, stage3_prefetch_bucket_size 0.9 hidden^2, stage3_param_persistence_threshold 10 hidden).
# Figures are the largest over the ranks, in MB, after STEPS steps (the peak is reached in step 1).
#   Usage: bench/engine/memory_table.sh [BUILD_DIR] [STEPS]
#   Narrow it with the environment: RANKS="4" MODELS="100M" DTYPES="fp32" CKPT="0 1" STAGES="0 3";
#   CTX=512 for a long-context run (default 64).
# Prints one markdown row per run: model dtype ckpt np stage | baseline peak peak-baseline |
# model state | activation (the forward's rise in allocated bytes) | peak / stage 0's peak.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "| model | dtype | ckpt | np | stage | baseline MB | peak MB | peak - baseline MB | model state MB | activation MB | peak vs stage 0 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for model in ${MODELS:-25M 100M}; do
  case $model in 25M) width=512;; 100M) width=1024;; *) echo "unknown model $model" >&2; exit 1;; esac
  for dtype in ${DTYPES:-fp32 bf16}; do
    for ckpt in ${CKPT:-0 1}; do
      for ranks in ${RANKS:-1 2 4}; do
        stage0_peak=""
        for stage in ${STAGES:-0 1 2 3}; do
          sets=(--set dstrain.model.n_layer=8 --set dstrain.model.n_embd=$width --set dstrain.model.n_head=8
                --set dstrain.model.block_size=${CTX:-64} --set dstrain.model.vocab_size=256
                --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1
                --set zero_optimization.stage=$stage
                --set zero_optimization.reduce_bucket_size=$((width * width))
                --set zero_optimization.stage3_prefetch_bucket_size=$((width * width * 9 / 10))
                --set zero_optimization.stage3_param_persistence_threshold=$((width * 10)))
          [ "$dtype" = bf16 ] && sets+=(--set bf16.enabled=true)
          [ "$ckpt" = 1 ] && sets+=(--set 'activation_checkpointing={}')
          metrics="$work/$model-$dtype-$ckpt-$ranks-$stage"
          mpirun --oversubscribe --bind-to none -np "$ranks" "$build/apps/dstrain/dstrain" \
            --config "$root/configs/default.json" "${sets[@]}" --steps "$steps" --metrics "$metrics" > /dev/null
          row=$(python3 - "$metrics" "${stage0_peak:-0}" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1])][-1]
state = (last["param_bytes"] + last["grad_bytes"] + last["optimizer_bytes"]) / 1e6
peak, base, act = last["peak_rss_mb"], last["baseline_rss_mb"], last["activation_mb"]
ref = float(sys.argv[2]) or peak
print(f"{base:.0f} | {peak:.0f} | {peak - base:.0f} | {state:.0f} | {act:.1f} | {peak / ref:.3f} |{peak}")
PY
)
          [ "$stage" = 0 ] && stage0_peak=${row##*|}
          echo "| $model | $dtype | $ckpt | $ranks | $stage | ${row%|*}"
        done
      done
    done
  done
done
