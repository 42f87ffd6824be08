#!/usr/bin/env bash
# Two builds of the trainer against each other on the same runs, alternated A B A B ...: whether a
# change (a refactor, a new layer) costs speed. Rows (each PAIRS pairs, -np 2, steps 3..STEPS timed):
#   memory   vs_ddp.sh's 25M row: GPT 8 x 512, ctx 64, micro 2, fp32, AdamW, ZeRO 0 (and 2 and 3)
#   nvme     offload_bench.sh's user config at 25M: ZeRO 3, optimizer and parameters on NVMe in
#            NVME_FOLDER, pipeline_read/write on, the rest left to the memory planner
# Prints each pair's samples/s (the median over its steps) and the median of the pairs' ratios B/A.
#
#   bench/engine/builds_ab.sh BUILD_A BUILD_B [NVME_FOLDER]
#   PAIRS (default 5), STEPS (default 8), ROWS (default "memory:0 memory:2 memory:3 nvme:3")
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { sed -n '2,11p' "$0" >&2; exit 2; }
build_a=$1 build_b=$2 nvme=${3:-${TMPDIR:-/tmp}}
pairs=${PAIRS:-5} steps=${STEPS:-8}
rows=(${ROWS:-memory:0 memory:2 memory:3 nvme:3})
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

run() {  # BUILD KIND STAGE OUT: one training run, its metrics in OUT
  local sets=(--set zero_optimization.stage="$3")
  if [ "$2" = nvme ]; then
    sets+=(--set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$nvme"
           --set zero_optimization.offload_optimizer.pipeline_read=true
           --set zero_optimization.offload_optimizer.pipeline_write=true
           --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path="$nvme")
  fi
  mpirun --oversubscribe --bind-to none -np 2 "$1/apps/dstrain/dstrain" --config "$root/configs/default.json" \
    --set scheduler=null --set gradient_clipping=0 --set optimizer.params.lr=0.001 \
    --set optimizer.params.weight_decay=0.01 --set steps_per_print=1000 --set dstrain.model.n_layer=8 \
    --set dstrain.model.n_embd=512 --set dstrain.model.n_head=4 --set dstrain.model.block_size=64 \
    --set dstrain.model.vocab_size=256 --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 \
    --set train_batch_size=null "${sets[@]}" --steps "$steps" --metrics "$4" > "$4.out" 2>&1 ||
    { cat "$4.out" >&2; exit 1; }
}

printf "%-10s %4s | %9s %9s %6s\n" row pair A B B/A
for row in "${rows[@]}"; do
  kind=${row%%:*} stage=${row##*:}
  for p in $(seq "$pairs"); do
    run "$build_a" "$kind" "$stage" "$work/a.$p"
    run "$build_b" "$kind" "$stage" "$work/b.$p"
  done
  python3 - "$work" "$pairs" "$row" <<'PY'
import json, statistics, sys
work, pairs, row = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rate(name): return statistics.median(json.loads(l)["samples_per_sec"] for l in list(open(f"{work}/{name}"))[2:])
ratios = []
for p in range(1, pairs + 1):
    a, b = rate(f"a.{p}"), rate(f"b.{p}")
    ratios.append(b / a)
    print(f"{row:10} {p:4} | {a:9.2f} {b:9.2f} {b / a:6.3f}")
print(f"{row:10} median B/A {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
  rm -f "$work"/*
done
