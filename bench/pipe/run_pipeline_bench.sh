#!/usr/bin/env bash
# The pipeline measurements of docs/pipeline.md, from the dstrain trainer's own metrics
# (wall_clock_breakdown: every stage's milliseconds per pipeline instruction, per step):
#   1. per stage, compute (LoadMicroBatch + ForwardPass + BackwardPass) against waiting on the
#      neighbours (Recv*, Send*) and the end of the batch (ReduceTiedGrads, ReduceGrads and
#      OptimizerStep, which include waiting for the slowest stage), for 2 and 4 stages x 4, 8, 16
#      micro-batches; idle = 1 - compute / total, next to the bubble (p - 1) / (m + p - 1);
#   2. the trainer's samples/s, pipeline against pure data parallelism at the same world size and
#      global batch.
# One rank per stage and one thread per rank (OMP_NUM_THREADS=1). Medians over the steps after
# the first `warmup`. Needs jq. Usage: bench/pipe/run_pipeline_bench.sh [build-dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-12}
warmup=2
micro=4
dstrain=$build/apps/dstrain/dstrain
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/pipeline.json
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
# A small GPT whose four blocks dominate the compute; "parameters" puts one block on each of 4 stages.
model=(--set dstrain.model.n_layer=4 --set dstrain.model.n_embd=96 --set dstrain.model.n_head=4
       --set dstrain.model.block_size=32 --set dstrain.model.vocab_size=256 --set pipeline.partition=parameters)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# train NP METRICS [--set ...]: a short run of the trainer, its metrics in METRICS.
train() {
  local np=$1 metrics=$2
  shift 2
  if ! "${mpirun[@]}" -np "$np" "$dstrain" --config "$config" --steps "$steps" --metrics "$metrics" \
      --set train_micro_batch_size_per_gpu=$micro "${model[@]}" "$@" > "$work/log" 2>&1; then
    cat "$work/log" >&2
    exit 1
  fi
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "| stages p | micro-batches m | stage | compute ms | recv wait ms | send ms | end of batch ms | total ms | idle | bubble (p-1)/(m+p-1) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for p in 2 4; do
  for m in 4 8 16; do
    metrics=$work/pipe_p${p}_m${m}.jsonl
    train "$p" "$metrics" --set pipeline.stages=$p --set gradient_accumulation_steps=$m --set wall_clock_breakdown=true
    for ((s = 0; s < p; s++)); do
      ms() {  # median over the measured steps of the sum of this stage's ops $@
        jq -r --argjson w "$warmup" --arg s "stage$s" \
          'select(.step > $w) | .breakdown_ms as $b | [$ARGS.positional[] | $b[$s + "." + .]] | add' \
          --args "$@" < "$metrics" | median
      }
      compute=$(ms LoadMicroBatch ForwardPass BackwardPass)
      recv=$(ms RecvActivation RecvGrad)
      send=$(ms SendActivation SendGrad)
      tail_ms=$(ms ReduceTiedGrads ReduceGrads OptimizerStep)
      awk -v p="$p" -v m="$m" -v s="$s" -v c="$compute" -v r="$recv" -v x="$send" -v t="$tail_ms" 'BEGIN {
        total = c + r + x + t
        printf "| %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% |\n",
               p, m, s, c, r, x, t, total, 100 * (1 - c / total), 100 * (p - 1) / (m + p - 1) }'
    done
  done
done

echo
echo "| world | layout | global batch | samples/s |"
echo "|---|---|---|---|"
samples_per_sec() { jq -r --argjson w "$warmup" 'select(.step > $w) | .samples_per_sec' "$1" | median; }
row() { printf "| %d | %s | %d | %.1f |\n" "$1" "$2" "$3" "$(samples_per_sec "$4")"; }
global=$((micro * 8))
train 1 "$work/dp1.jsonl" --set pipeline.stages=1 --set gradient_accumulation_steps=8
row 1 "1 process, 8 micro-batches" $global "$work/dp1.jsonl"
for world in 2 4; do
  train "$world" "$work/dp$world.jsonl" --set pipeline.stages=1 --set gradient_accumulation_steps=$((8 / world))
  row "$world" "data parallel, $((8 / world)) micro-batches per rank" $global "$work/dp$world.jsonl"
  train "$world" "$work/pp$world.jsonl" --set pipeline.stages=$world --set gradient_accumulation_steps=8
  row "$world" "$world stages, 8 micro-batches" $global "$work/pp$world.jsonl"
done
train 4 "$work/pp2x2.jsonl" --set pipeline.stages=2 --set gradient_accumulation_steps=4
row 4 "2 stages x 2 replicas, 4 micro-batches" $global "$work/pp2x2.jsonl"
