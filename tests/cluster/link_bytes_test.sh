#!/usr/bin/env bash
# Args: LAYOUT DSTRAIN SOURCE_DIR
# The bytes a data-parallel step puts on each node's link (scripts/cluster.sh, 1 Gbit/s links),
# against the least any all-reduce over N nodes can: 2(N-1)/N x the gradient's bytes in each
# direction (a node must send out what the others lack of its sum, and receive theirs).
#   LAYOUT 2x2 (2 nodes x 2 ranks): dstrain, left to its multi-node defaults, prints the Open MPI
#          settings it applied and the planner's overlap_comm and link-sized buckets, and stays
#          within 1.1x of that least in every direction of every node's link; then, with the user's own OMPI_MCA_coll_libnbc_iallreduce_algorithm=2 (the
#          binomial tree: two gradients each way on the root's link, twice the least at 2 nodes),
#          it applies nothing, says nothing, and the busiest direction carries at least 1.5x the
#          least: the user's setting is the one in force.
# Exit 77 (skipped) where this process cannot create network namespaces.
set -euo pipefail
layout=$1 dstrain=$2 source=$3
nodes=${layout%x*} per_node=${layout#*x}
steps=12

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
probe=dsprobe$$
ip netns add "$probe" 2> /dev/null || skip "this process cannot create network namespaces"
ip netns del "$probe"

name=lb$layout
cluster() { "$source/scripts/cluster.sh" --name "$name" "$@"; }
work=$(mktemp -d)
trap 'cluster down; rm -rf "$work"' EXIT
cluster down
cores=$(( $(nproc) / nodes > 1 ? $(nproc) / nodes : 1 ))
cluster up "$nodes" --slots "$per_node" --rate 1gbit --cpus-per-node "$cores" > /dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# "tx rx" of every node's eth0, one node a line.
link_bytes() {
  while read -r node; do
    ip netns exec "$name-$node" cat /sys/class/net/eth0/statistics/{tx,rx}_bytes | paste -sd' '
  done < "/run/dstrain-cluster/$name/nodes"
}

# Runs dstrain (env's options in "$@") and prints "least busiest": the least per direction and
# the busiest direction of any node, bytes per step from step 2 to the end.
run() {
  rm -f "$work/metrics.jsonl"
  env "$@" "$source/scripts/cluster.sh" --name "$name" run -- mpirun -np $((nodes * per_node)) --bind-to none \
    "$dstrain" --config "$source/configs/default.json" --steps "$steps" --metrics "$work/metrics.jsonl" \
    > "$work/out.log" 2>&1 &
  local job=$!
  until grep -q '"step":2[,}]' "$work/metrics.jsonl" 2> /dev/null; do
    kill -0 "$job" 2> /dev/null || break
    sleep 0.02
  done
  link_bytes > "$work/before"
  wait "$job" || { cat "$work/out.log"; echo "mpirun failed"; exit 1; }
  link_bytes > "$work/after"
  local grad
  grad=$(sed -n 's/.*"grad_bytes":\([0-9]*\).*/\1/p' "$work/metrics.jsonl" | head -n 1)
  paste -d' ' "$work/before" "$work/after" | awk -v g="$grad" -v n="$nodes" -v s=$((steps - 2)) '
    { for (i = 1; i <= 2; ++i) { d = ($(i + 2) - $i) / s; if (d > most) most = d } }
    END { printf "%.0f %.0f\n", 2 * (n - 1) / n * g, most }'
}

read -r least busiest <<< "$(run -u OMPI_MCA_coll_libnbc_iallreduce_algorithm)"
echo "defaults: busiest direction $busiest B/step, least $least B/step"
grep -q "spans several nodes: Open MPI's coll_libnbc_iallreduce_algorithm = 3" "$work/out.log" ||
  { cat "$work/out.log"; echo "no line about the multi-node defaults"; exit 1; }
# The planner's multi-node defaults: overlap_comm on, buckets of a quarter of this small model.
grad=$(sed -n 's/.*"grad_bytes":\([0-9]*\).*/\1/p' "$work/metrics.jsonl" | head -n 1)
bucket=$(( (grad / 4 + 3) / 4 ))
grep -q "spans several nodes: zero_optimization.overlap_comm = true, zero_optimization.reduce_bucket_size = $bucket " \
  "$work/out.log" || { cat "$work/out.log"; echo "no line choosing overlap_comm and $bucket-element buckets"; exit 1; }
awk -v b="$busiest" -v l="$least" 'BEGIN { exit !(b <= 1.1 * l) }' ||
  { echo "a link direction carried $busiest B/step, more than 1.1 x $least"; exit 1; }

read -r least busiest <<< "$(run OMPI_MCA_coll_libnbc_iallreduce_algorithm=2)"
echo "user's binomial tree: busiest direction $busiest B/step, least $least B/step"
! grep -q "spans several nodes: Open MPI" "$work/out.log" || { echo "dstrain overrode the user's setting"; exit 1; }
awk -v b="$busiest" -v l="$least" 'BEGIN { exit !(b >= 1.5 * l) }' ||
  { echo "the binomial tree carried $busiest B/step, under 1.5 x $least: not in force?"; exit 1; }
echo "link bytes OK"
