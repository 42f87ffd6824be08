#!/usr/bin/env bash
# The trainer on cuda:0 (NCCL) against the trainer on the CPU (MPI), same config, same seed: the
# loss after STEPS steps for each ZeRO stage and precision (fp16 only on the GPU: the CPU has no
# fp16 kernels, so its row compares with the CPU's fp32). Run on a CUDA machine after
# `scripts/gpu.sh build` (docs/gpu.md).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
eval "$("$ROOT/scripts/gpu.sh" env)"
DSTRAIN=${DSTRAIN:-$ROOT/build-gpu/apps/dstrain/dstrain}
STEPS=${STEPS:-100}
work=$(mktemp -d)

final_loss() {  # device stage precision
  local extra=()
  [ "$3" != fp32 ] && extra=(--set "$3.enabled=true")
  mpirun -np 1 "$DSTRAIN" --config "$ROOT/configs/default.json" --steps "$STEPS" --metrics "$work/m.jsonl" \
    --set dstrain.device="$1" --set zero_optimization.stage="$2" "${extra[@]}" >"$work/log" 2>&1 \
    || { tail -5 "$work/log" >&2; echo failed; return; }
  tail -1 "$work/m.jsonl" | sed 's/.*"loss":\([-0-9.e+]*\).*/\1/'
  rm -f "$work/m.jsonl"
}

printf "| ZeRO | precision | CPU loss at step %s | GPU loss | relative difference |\n|---|---|---|---|---|\n" "$STEPS"
for stage in 0 1 2 3; do
  cpu_fp32=$(final_loss cpu "$stage" fp32)
  for precision in fp32 bf16 fp16; do
    cpu=$cpu_fp32
    [ "$precision" = bf16 ] && cpu=$(final_loss cpu "$stage" bf16)
    gpu=$(final_loss cuda "$stage" "$precision")
    printf "| %s | %s | %s | %s | %s |\n" "$stage" "$precision" "$cpu" "$gpu" \
      "$(awk -v a="$cpu" -v b="$gpu" 'BEGIN {d = (a - b) / a; print (d < 0 ? -d : d)}')"
  done
done
rm -rf "$work"
