#!/usr/bin/env bash
# Runs zeropp_bench over the table of docs/comm.md: quantized vs plain all-gather and reduce-scatter,
# int8 and int4, 2 and 4 ranks (4 as 2 nodes of 2), over shared memory and over TCP loopback.
# Usage: bench/comm/run_zeropp_bench.sh [build-dir] [reps] [elements]
set -euo pipefail
build=${1:-build}
reps=${2:-5}
elements=${3:-16777216}
bench=$build/comm/bench/zeropp_bench
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)

echo "| op | transport | ranks | nodes | elements | bits | plain ms | quantized ms | plain GB/s | quantized GB/s | speed-up | plain MB sent/rank | quantized MB sent/rank |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for op in all_gather reduce_scatter; do
  for ranks in 2 4; do
    for bits in 8 4; do
      for transport in shm tcp; do
        btl=$([ "$transport" = shm ] && echo vader,self || echo tcp,self)
        "${mpirun[@]}" --mca btl "$btl" -np "$ranks" "$bench" --op "$op" --elements "$elements" --bits "$bits" \
          --reps "$reps" --transport "$transport" --per-node 2
      done
    done
  done
done
