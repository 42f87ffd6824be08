#!/usr/bin/env bash
# Runs onebit_bench over the table of docs/comm.md: compressed_allreduce vs MPI_Allreduce at 16M and
# 100M float32 elements, 2 and 4 ranks, over shared memory and over TCP loopback; then the kernels
# vs memcpy. Usage: bench/comm/run_onebit_bench.sh [build-dir] [reps]
set -euo pipefail
build=${1:-build}
reps=${2:-3}
bench=$build/comm/bench/onebit_bench
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)

echo "| transport | ranks | elements | MPI_Allreduce ms | compressed ms | speed-up | MPI_Allreduce MB sent/rank | compressed MB sent/rank | bytes ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for elements in 16777216 104857600; do
  for ranks in 2 4; do
    "${mpirun[@]}" --mca btl vader,self -np "$ranks" "$bench" allreduce --elements "$elements" --reps "$reps" --transport shm
    "${mpirun[@]}" --mca btl tcp,self -np "$ranks" "$bench" allreduce --elements "$elements" --reps "$reps" --transport tcp
  done
done
echo
echo "| kernel | elements | median ms | GB/s | memcpy GB/s |"
echo "|---|---|---|---|---|"
"$bench" kernels --elements 33554432 --reps "$reps"
