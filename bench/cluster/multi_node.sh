#!/usr/bin/env bash
# dstrain through simulated nodes' links (scripts/cluster.sh, root): samples/s and the bytes each
# node's link moves per step, for 2 nodes x 2 ranks and 4 nodes x 1 rank, against the same 4 ranks
# on one node (shared memory).
#   bench/cluster/multi_node.sh [--build DIR] [--rate 1gbit] [--steps 8] [--shared-cores]
#                               [--row MODEL:LAYOUT ...]
#     MODEL   default (configs/default.json, 0.44M parameters) or 25M (8 layers, 512 wide, ctx 64,
#             micro 2: the 25M GPT of docs/performance.md)
#     LAYOUT  2x2, 4x1 (nodes x ranks per node) or local (-np 4 without the cluster)
# Each node gets its share of this machine's cores as a cpuset (cores / nodes, at least one), as
# real nodes own theirs; --shared-cores lets every node use every core instead (each rank then sizes
# its threads for cores its node does not own).
# samples/s: median of dstrain --metrics over steps 3..N. Bytes: each node's eth0 tx+rx counters
# (/sys/class/net/eth0/statistics) from the moment step 2 is logged to the end, per step: the link's
# two directions together; the table gives the mean over the nodes and the largest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build rate=1gbit steps=8 rows=() shared_cores=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --shared-cores) shared_cores=yes; shift ;;
    --row) rows+=("$2"); shift 2 ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done
[ ${#rows[@]} -eq 0 ] && rows=(default:local default:2x2 default:4x1 25M:local 25M:2x2 25M:4x1)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
name=bench
cluster() { "$root/scripts/cluster.sh" --name "$name" "$@"; }
work=$(mktemp -d)
trap 'cluster down; rm -rf "$work"' EXIT

model_sets() {
  case $1 in
    default) ;;
    25M) echo "--set dstrain.model.n_layer=8 --set dstrain.model.n_embd=512 --set dstrain.model.block_size=64" \
              "--set train_micro_batch_size_per_gpu=2 --set train_batch_size=null" ;;
    *) echo "multi_node.sh: unknown model $1" >&2; exit 2 ;;
  esac
}
# Sum of tx+rx over the cluster's nodes, one line per node.
node_bytes() {
  while read -r node; do
    # shellcheck disable=SC2016
    ip netns exec "$name-$node" sh -c 'echo $(( $(cat /sys/class/net/eth0/statistics/tx_bytes) + $(cat /sys/class/net/eth0/statistics/rx_bytes) ))'
  done < "/run/dstrain-cluster/$name/nodes"
}

printf "| model | layout | samples/s | bytes/step per node link (mean / max) | gradient bytes |\n|---|---|---|---|---|\n"
for row in "${rows[@]}"; do
  model=${row%%:*} layout=${row##*:}
  read -r -a sets <<< "$(model_sets "$model")"
  args=(--config "$root/configs/default.json" "${sets[@]}" --set steps_per_print=1000
        --steps "$steps" --metrics "$work/metrics.jsonl")
  rm -f "$work/metrics.jsonl"
  case $layout in
    local)
      mpirun --oversubscribe --bind-to none -np 4 "$build/apps/dstrain/dstrain" "${args[@]}" > "$work/out.log" 2>&1 &
      ;;
    *x*)
      nodes=${layout%x*} per_node=${layout#*x}
      cluster down
      cpus=()
      [ -n "$shared_cores" ] || cpus=(--cpus-per-node $(( $(nproc) / nodes > 1 ? $(nproc) / nodes : 1 )))
      cluster up "$nodes" --slots "$per_node" --rate "$rate" "${cpus[@]}" > /dev/null
      cluster run -- mpirun -np 4 --bind-to none "$build/apps/dstrain/dstrain" "${args[@]}" > "$work/out.log" 2>&1 &
      ;;
    *) echo "multi_node.sh: unknown layout $layout" >&2; exit 2 ;;
  esac
  job=$!
  before=""
  until grep -q '"step":2[,}]' "$work/metrics.jsonl" 2> /dev/null; do
    kill -0 "$job" 2> /dev/null || break
    sleep 0.02
  done
  [ "$layout" = local ] || before=$(node_bytes)
  wait "$job" || { cat "$work/out.log" >&2; exit 1; }
  after=$([ "$layout" = local ] || node_bytes)
  python3 - "$work/metrics.jsonl" "$model" "$layout" "$steps" "$before" "$after" <<'PY'
import json, statistics, sys
path, model, layout, steps, before, after = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
sps = statistics.median(r["samples_per_sec"] for r in runs if r["step"] >= 3)
if before:
    moved = [(int(a) - int(b)) / (int(steps) - 2) for a, b in zip(after.split(), before.split())]
    traffic = f"{statistics.mean(moved) / 1e6:.1f} / {max(moved) / 1e6:.1f} MB"
else:
    traffic = "(shared memory)"
print(f"| {model} | {layout} | {sps:.2f} | {traffic} | {runs[0]['grad_bytes'] / 1e6:.1f} MB |")
PY
  cluster down
done
echo "links: $rate (tbf, both directions); cores ${shared_cores:+shared by all nodes}${shared_cores:-divided among the nodes}; $steps steps, samples/s median of steps 3..$steps; bytes from step 2 to the end"
