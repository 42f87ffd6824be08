#!/usr/bin/env bash
# The trainer on cuda:0 in the two ways that were CPU-only before: 2 pipeline stages (-np 2, both on
# the one GPU, MPI between them) against data parallelism on one rank, and ZeRO 3 with offload_param
# on NVMe against ZeRO 3 in GPU memory; the same GPT (bench/gpu/gpt.json), micro-batch 4 x 4
# accumulated, STEPS steps. Prints the median samples/s after 3 warm-up steps and the last loss (the
# pipeline's equals data parallelism's up to summation order; the offloaded run's equals stage 3's).
# Run on a CUDA machine after `scripts/gpu.sh build` (docs/gpu.md); NVME_DIR must be on a disk that
# takes O_DIRECT (not tmpfs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
eval "$("$ROOT/scripts/gpu.sh" env)"
DSTRAIN=${DSTRAIN:-$ROOT/build-gpu/apps/dstrain/dstrain}
STEPS=${STEPS:-12}
NVME_DIR=${NVME_DIR:-$ROOT/build-gpu/nvme-bench}
work=$(mktemp -d)
mkdir -p "$NVME_DIR"
trap 'rm -rf "$work" "$NVME_DIR"' EXIT

run() {  # name ranks overrides...
  local name=$1 ranks=$2; shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  if ! mpirun -np "$ranks" --oversubscribe "$DSTRAIN" --config "$ROOT/bench/gpu/gpt.json" --steps "$STEPS" \
      --metrics "$work/$name.jsonl" --set train_micro_batch_size_per_gpu=4 --set gradient_accumulation_steps=4 \
      --set dstrain.backend=mpi "${sets[@]}" >"$work/$name.log" 2>&1; then
    tail -5 "$work/$name.log" >&2
    printf "| %s | %s | failed | |\n" "$name" "$ranks"
    return
  fi
  python3 - "$work/$name.jsonl" "$name" "$ranks" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rates = [l["samples_per_sec"] for l in lines if l["step"] > 3]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {statistics.median(rates):.1f} | {lines[-1]['loss']:.6f} |")
PY
}

printf "| run | ranks | samples/s (median) | loss at step %s |\n|---|---|---|---|\n" "$STEPS"
run data_parallel_zero0 1
run pipeline_2_stages_zero0 2 pipeline.stages=2
run data_parallel_zero3 1 zero_optimization.stage=3
run zero3_offload_param_nvme 1 zero_optimization.stage=3 zero_optimization.offload_param.device=nvme \
  "zero_optimization.offload_param.nvme_path=$NVME_DIR" zero_optimization.offload_param.max_in_cpu=0
