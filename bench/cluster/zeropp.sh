#!/usr/bin/env bash
# ZeRO++ through simulated nodes' links (scripts/cluster.sh, root; cluster name zq): 2 nodes x 2
# ranks at 1 Gbit/s, samples/s and the bytes each node's link moves per step for plain ZeRO stage 3
# and stage 3 with each of qwZ, hpZ and qgZ and all three, and 1-bit Adam at ZeRO-2 (onebit2,
# compressed from step 3 on) (docs/performance.md, "ZeRO++").
#   bench/cluster/zeropp.sh [--build DIR] [--rate 1gbit] [--steps 8] [--reps 2] [--models "25M 100M"]
#                           [--variants "stage3 qwZ hpZ qgZ all onebit2"]
#   bench/cluster/zeropp.sh --loss [--steps 300]    the loss on real text (the first-run corpus,
#                           configs/first_run.json's GPT at stage 3), plain against all three
# Models: 25M (8 layers x 512, ctx 64, vocab 256) and 100M (8 x 1024), micro-batch 2 per rank.
# Variants run alternated, rep by rep, so that drift in the machine's load spreads over all of them;
# each cell is the median over reps of (samples/s: median of steps 3..N; bytes: each node's eth0
# tx+rx from the moment step 2 is logged to the end, per step, mean over the two nodes).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build rate=1gbit steps=8 reps=2 models="25M 100M" variants="stage3 qwZ hpZ qgZ all onebit2" loss=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --loss) loss=yes; shift ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
name=zq
cluster() { "$root/scripts/cluster.sh" --name "$name" "$@"; }
work=$(mktemp -d)
trap 'cluster down; rm -rf "$work"' EXIT

model_sets() {
  case $1 in
    25M) echo "--set dstrain.model.n_layer=8 --set dstrain.model.n_embd=512" ;;
    100M) echo "--set dstrain.model.n_layer=8 --set dstrain.model.n_embd=1024" ;;
    *) echo "zeropp.sh: unknown model $1" >&2; exit 2 ;;
  esac
}
variant_sets() {
  local z=zero_optimization
  case $1 in
    stage3) echo "--set $z.stage=3" ;;
    qwZ) echo "--set $z.stage=3 --set $z.zero_quantized_weights=true" ;;
    hpZ) echo "--set $z.stage=3 --set $z.zero_hpz_partition_size=2" ;;
    qgZ) echo "--set $z.stage=3 --set $z.zero_quantized_gradients=true" ;;
    all) echo "--set $z.stage=3 --set $z.zero_quantized_weights=true --set $z.zero_hpz_partition_size=2" \
              "--set $z.zero_quantized_gradients=true" ;;
    onebit2) echo "--set $z.stage=2 --set optimizer.type=OneBitAdam --set optimizer.params.freeze_step=2" ;;
    *) echo "zeropp.sh: unknown variant $1" >&2; exit 2 ;;
  esac
}
node_bytes() {
  while read -r node; do
    # shellcheck disable=SC2016
    ip netns exec "$name-$node" sh -c 'echo $(( $(cat /sys/class/net/eth0/statistics/tx_bytes) + $(cat /sys/class/net/eth0/statistics/rx_bytes) ))'
  done < "/run/dstrain-cluster/$name/nodes"
}

cluster down
cluster up 2 --slots 2 --rate "$rate" --cpus-per-node $(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 )) > /dev/null

# One run: dstrain with the given arguments on the 4 ranks; appends "samples/s bytes/step" to $2.
run() {
  local args=("${@:3}") result=$2 metrics=$work/$1.jsonl
  rm -f "$metrics"
  cluster run -- mpirun -np 4 --bind-to none "$build/apps/dstrain/dstrain" "${args[@]}" --metrics "$metrics" \
    > "$work/out.log" 2>&1 &
  local job=$! before
  until grep -q '"step":2[,}]' "$metrics" 2> /dev/null; do
    kill -0 "$job" 2> /dev/null || break
    sleep 0.02
  done
  before=$(node_bytes)
  wait "$job" || { cat "$work/out.log" >&2; exit 1; }
  python3 - "$metrics" "$before" "$(node_bytes)" >> "$result" <<'PY'
import json, statistics, sys
path, before, after = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
last = max(r["step"] for r in runs)
sps = statistics.median(r["samples_per_sec"] for r in runs if r["step"] >= 3)
moved = [(int(a) - int(b)) / (last - 2) for a, b in zip(after.split(), before.split())]
print(sps, statistics.mean(moved))
PY
}

if [ -n "$loss" ]; then
  printf "| run | train loss, mean of the last 20 of %s steps | last val_loss |\n|---|---|---|\n" "$steps"
  for variant in stage3 all; do
    read -r -a sets <<< "$(variant_sets "$variant")"
    rm -f "$work/loss.jsonl"
    cluster run -- mpirun -np 4 --bind-to none "$build/apps/dstrain/dstrain" --config "$root/configs/first_run.json" \
      --set "dstrain.data.path=$root/build/data/first_run_train.bin" --set "dstrain.data.valid=$root/build/data/first_run_val.bin" \
      --set train_micro_batch_size_per_gpu=4 --set train_batch_size=null --set dstrain.eval_interval=100 \
      "${sets[@]}" --steps "$steps" --metrics "$work/loss.jsonl" > "$work/out.log" 2>&1 || { cat "$work/out.log" >&2; exit 1; }
    python3 - "$work/loss.jsonl" "$variant" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
tail = sorted(runs, key=lambda r: r["step"])[-20:]
evals = [r["val_loss"] for r in runs if r.get("val_loss") is not None]
print(f"| {sys.argv[2]} | {sum(r['loss'] for r in tail) / len(tail):.4f} | {evals[-1] if evals else float('nan'):.4f} |")
PY
  done
  exit 0
fi

printf "| model | run | samples/s | x stage 3 | MB/step per node link | stage 3 / this |\n|---|---|---|---|---|---|\n"
for model in $models; do
  read -r -a msets <<< "$(model_sets "$model")"
  for rep in $(seq "$reps"); do
    for variant in $variants; do
      read -r -a vsets <<< "$(variant_sets "$variant")"
      run "$model-$variant" "$work/$model-$variant.txt" --config "$root/configs/default.json" "${msets[@]}" \
        --set train_micro_batch_size_per_gpu=2 --set train_batch_size=null --set steps_per_print=1000 "${vsets[@]}" \
        --steps "$steps"
    done
  done
  python3 - "$work" "$model" $variants <<'PY'
import statistics, sys
work, model, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
cells = {}
for v in variants:
    rows = [list(map(float, l.split())) for l in open(f"{work}/{model}-{v}.txt")]
    cells[v] = (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows), len(rows))
base = cells.get("stage3")
for v in variants:
    sps, moved, n = cells[v]
    speed = f"{sps / base[0]:.2f}x" if base else "-"
    fewer = f"{base[1] / moved:.2f}x" if base else "-"
    print(f"| {model} | {v} | {sps:.2f} | {speed} | {moved / 1e6:.1f} | {fewer} |")
PY
done
echo "2 nodes x 2 ranks, links $rate (tbf, both directions), $(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 )) core(s) per node; $steps steps, $reps alternated reps, medians"
