#!/usr/bin/env bash
# dstrain's TCP ring against Open MPI's all-reduce on simulated nodes (scripts/cluster.sh, root), one
# rank per node, 1 Gbit/s links, each node a cpuset of cores / nodes: the reducer's buckets alone,
# then beside compute. The two transports alternate REPS times (DSTRAIN_ALLREDUCE=ring / mpi).
#   bench/comm/run_allreduce_bench.sh [build-dir] [nodes] [rounds]
# Table: docs/multi-node.md, "A TCP ring of dstrain's own".
set -euo pipefail
build=${1:-build}
nodes=${2:-4}
rounds=${3:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=$(cd "$build" && pwd)/comm/bench/allreduce_bench
name=arb
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cluster() { "$root/scripts/cluster.sh" --name "$name" "$@"; }
trap 'cluster down > /dev/null 2>&1' EXIT
cores=$(( $(nproc) / nodes > 1 ? $(nproc) / nodes : 1 ))
cluster up "$nodes" --slots 1 --rate 1gbit --cpus-per-node "$cores" > /dev/null
echo "| transport | ranks | buckets x MB | compute ms | median s | GB/s per link | wait after compute ms |"
echo "|---|---|---|---|---|---|---|"
for compute in 0 300; do
  for _ in $(seq "$rounds"); do
    for transport in ring mpi; do
      DSTRAIN_ALLREDUCE=$transport cluster run -- mpirun -np "$nodes" --bind-to none -x DSTRAIN_ALLREDUCE \
        "$bench" --mb 20 --buckets 5 --reps 3 --compute-ms "$compute" 2>&1 | grep '^|'
    done
  done
done
