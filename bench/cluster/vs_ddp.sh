#!/usr/bin/env bash
# dstrain against PyTorch DDP (gloo) through simulated nodes' links (scripts/cluster.sh, root): the
# same GPT (bench/engine/ddp_peer.py, op for op dstrain's), AdamW, fp32, stage 0, no clipping, random
# tokens, on the same cluster layout, the two run alternately REPEATS times.
#   bench/cluster/vs_ddp.sh [--build DIR] [--rate 1gbit] [--steps 8] [--repeats 3] [--row SIZE:LAYOUT]...
#                           [--set KEY=VALUE]... [--env VAR=VALUE]... [--ours-only] [--name CLUSTER]
#     SIZE    25M (8 layers, 512 wide, ctx 64, micro 2) or L<layers>-E<width>-T<ctx>-B<micro>
#     LAYOUT  NxR: N nodes of R ranks (rows 25M:2x2 and 25M:4x1 by default)
#     --set   passed to dstrain (e.g. zero_optimization.stage=2: DDP's math, the all-gather under the
#             next forward, docs/multi-node.md); --env exported to dstrain's mpirun only (e.g. OMPI_MCA_btl_tcp_links=2)
#     --name  the cluster's name (scripts/cluster.sh --name; default vsddp), so that runs can coexist
# Each node runs on its share of the cores (a cpuset of cores / nodes, at least one), as
# multi_node.sh does; DDP gets threads = node's cores / ranks per node (at least 1); dstrain sizes its
# own. gloo rendezvous: env:// at node1's address (198.18.0.1), over eth0.
# samples/s: median over all runs of steps 3..N (rank 0's per-step figures). Bytes: each node's eth0
# tx and rx counters (/sys/class/net/eth0/statistics) from step 2 to the end, per step; "link MB" is
# the busiest direction of the busiest node, against the least any all-reduce over N nodes must put
# on one node's link in one direction: 2(N-1)/N x the gradient's bytes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build rate=1gbit steps=8 repeats=3 rows=() sets=() envs=() ours_only="" name=vsddp
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --row) rows+=("$2"); shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --ours-only) ours_only=yes; shift ;;
    --name) name=$2; shift 2 ;;
    *) sed -n '2,18p' "$0" >&2; exit 2 ;;
  esac
done
[ ${#rows[@]} -eq 0 ] && rows=(25M:2x2 25M:4x1)
peer_python=${PEER_PYTHON:-/usr/bin/python3}
"$peer_python" -c "import torch" 2>/dev/null || { echo "vs_ddp.sh: the peer needs python3-torch" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cluster() { "$root/scripts/cluster.sh" --name "$name" "$@"; }
work=$(mktemp -d)
trap 'cluster down > /dev/null 2>&1; rm -rf "$work"' EXIT

shape_of() {  # SIZE -> "layers width ctx micro"
  case "$1" in
    25M) echo "8 512 64 2" ;;
    L*-E*-T*-B*) echo "$1" | sed -E 's/L([0-9]+)-E([0-9]+)-T([0-9]+)-B([0-9]+)/\1 \2 \3 \4/' ;;
    *) echo "vs_ddp.sh: unknown size '$1'" >&2; exit 2 ;;
  esac
}
# "tx rx" of each node's eth0, one node a line.
node_bytes() {
  while read -r node; do
    ip netns exec "$name-$node" cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/rx_bytes | paste -sd' '
  done < "/run/dstrain-cluster/$name/nodes"
}
# Runs "$@" in the background on the cluster, samples the links once LOG shows step 2 and at the end.
measure() {
  local log=$1 out=$2 tag=$3; shift 3
  rm -f "$log"
  "$@" > "$out" 2>&1 &
  local job=$!
  until grep -qE '"step": ?2[,}]' "$log" 2> /dev/null; do
    kill -0 "$job" 2> /dev/null || break
    sleep 0.02
  done
  node_bytes > "$work/$tag.before"
  wait "$job" || { cat "$out" >&2; exit 1; }
  node_bytes > "$work/$tag.after"
}

printf "| layout | dstrain samples/s | DDP samples/s | ratio | link MB/step, busiest direction (dstrain / DDP) | ring minimum | dstrain reduce_wait ms |\n|---|---|---|---|---|---|---|\n"
for row in "${rows[@]}"; do
  size=${row%%:*} layout=${row##*:}
  nodes=${layout%x*} per_node=${layout#*x}
  read -r layers width ctx micro <<< "$(shape_of "$size")"
  np=$(( nodes * per_node ))
  node_cores=$(( $(nproc) / nodes > 1 ? $(nproc) / nodes : 1 ))
  threads=$(( node_cores / per_node > 1 ? node_cores / per_node : 1 ))
  cluster down > /dev/null 2>&1 || true
  cluster up "$nodes" --slots "$per_node" --rate "$rate" --cpus-per-node "$node_cores" > /dev/null
  ours=(env "${envs[@]}" "$root/scripts/cluster.sh" --name "$name" run -- mpirun -np "$np" --bind-to none
        "$build/apps/dstrain/dstrain" --config "$root/configs/default.json"
        --set scheduler=null --set gradient_clipping=0 --set optimizer.params.lr=0.001
        --set optimizer.params.weight_decay=0.01 --set zero_optimization.stage=0 --set wall_clock_breakdown=true
        --set steps_per_print=1000 --set dstrain.model.n_layer="$layers" --set dstrain.model.n_embd="$width"
        --set dstrain.model.n_head=4 --set dstrain.model.block_size="$ctx" --set dstrain.model.vocab_size=256
        --set train_micro_batch_size_per_gpu="$micro" --set gradient_accumulation_steps=1 --set train_batch_size=null
        "${sets[@]}" --steps "$steps")
  peer=("$root/scripts/cluster.sh" --name "$name" run -- mpirun -np "$np" --bind-to none -x OMP_NUM_THREADS="$threads"
        -x MASTER_ADDR=198.18.0.1 -x MASTER_PORT=$(( 29500 + RANDOM % 1000 )) -x GLOO_SOCKET_IFNAME=eth0
        "$peer_python" "$root/bench/engine/ddp_peer.py" --n-layer "$layers" --n-embd "$width" --block-size "$ctx"
        --micro "$micro" --steps "$steps" --threads "$threads")
  for r in $(seq "$repeats"); do
    [ -n "$ours_only" ] || measure "$work/ddp.$r" "$work/ddp.$r" "ddp.$r" "${peer[@]}"
    measure "$work/ours.$r" "$work/ours.$r.out" "ours.$r" "${ours[@]}" --metrics "$work/ours.$r"
  done
  cluster down > /dev/null
  python3 - "$work" "$repeats" "$layout" "$nodes" "$steps" "$ours_only" <<'PY'
import json, statistics, sys
work, repeats, layout, nodes, steps, ours_only = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
def steps_of(name, r):
    return [json.loads(l) for l in open(f"{work}/{name}.{r}") if l.startswith("{")]
def runs(name): return [s for r in range(1, repeats + 1) for s in steps_of(name, r) if s["step"] >= 3]
def link_mb(name):  # busiest direction of the busiest node per step, median over runs
    per_run = []
    for r in range(1, repeats + 1):
        before = [list(map(int, l.split())) for l in open(f"{work}/{name}.{r}.before")]
        after = [list(map(int, l.split())) for l in open(f"{work}/{name}.{r}.after")]
        per_run.append(max(a - b for na, nb in zip(after, before) for a, b in zip(na, nb)) / (steps - 2) / 1e6)
    return statistics.median(per_run)
ours = runs("ours")
# The whole gradient's bytes: at stages 1-2 grad_bytes is this rank's shard, the fp32 weights are whole.
first = steps_of("ours", 1)[0]
grad = max(first["grad_bytes"], first["param_bytes"])
o = statistics.median(s["samples_per_sec"] for s in ours)
wait = statistics.median(s["breakdown_ms"].get("reduce_wait", 0.0) for s in ours)
ring = 2 * (nodes - 1) / nodes * grad / 1e6
if ours_only:
    print(f"| {layout} | {o:.2f} | - | - | {link_mb('ours'):.0f} / - | {ring:.0f} | {wait:.0f} |")
else:
    d = statistics.median(s["samples_per_sec"] for s in runs("ddp"))
    print(f"| {layout} | {o:.2f} | {d:.2f} | {o / d:.2f} | {link_mb('ours'):.0f} / {link_mb('ddp'):.0f} | {ring:.0f} | {wait:.0f} |")
PY
done
echo "links: $rate (tbf); cpuset per node: cores / nodes; $repeats alternated runs, samples/s median of steps 3..$steps;" \
  "link MB from step 2 to the end; ring minimum 2(N-1)/N x gradient bytes per direction"
