#!/usr/bin/env bash
# One device session's checks as one command (device time is short and a fresh machine is bare):
# build, the GPU tests, the GPU benches, then the rest of the suite, in that order, each started
# only while BUDGET seconds (counted from the start) leave it room. Logs and tables go to $OUT
# (the device tool's return folder, which takes 8 files: one log per check; ./gpu-out elsewhere).
#   bench/gpu/device_check.sh                      every check
#   CHECKS="build gpu suite" BUDGET=420 bench/gpu/device_check.sh
# Needs .gpu/debs (scripts/gpu.sh fetch, run here on Debian 12) carried along (docs/gpu.md).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
CHECKS=${CHECKS:-build gpu adam offload vs_torch pipeline_nvme suite}
BUDGET=${BUDGET:-540}
mkdir -p "$OUT"
start=$SECONDS

left() { echo $((BUDGET - (SECONDS - start))); }
# step NAME MIN_SECONDS COMMAND...: runs COMMAND with what is left of the budget, logging to $OUT/NAME.log.
step() {
  local name=$1 need=$2; shift 2
  [[ " $CHECKS " == *" $name "* ]] || return 0
  if (($(left) < need)); then echo "== $name: skipped, $(left) s left (needs $need)"; return 0; fi
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=10 "$(left)" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc $rc in $((SECONDS - t0)) s"
  tail -n "${TAIL:-15}" "$OUT/$name.log"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nproc
} 2>&1

step build 120 "$ROOT/scripts/gpu.sh" build
grep -E "error|FAILED" "$OUT/build.log" | head -40
eval "$("$ROOT/scripts/gpu.sh" env)"
export BUILD=$ROOT/build-gpu
# One at a time: on 2026-11-26 the CPU suite beside the GPU tests (-j 12 + -j 4 on 16 cores) made the
# GPU engine test take 214 s and the kernel bench miss its budget. The CPU suite goes last: CI runs
# it on every push, the device adds only the CUDA build's view of it.
step gpu 30 ctest --test-dir "$BUILD" --output-on-failure -j 4 -R "gpu" --timeout 120
step adam 20 "$ROOT/bench/gpu/adam_vs_torch.sh"
step offload 30 "$ROOT/bench/gpu/offload_vs_gpu.sh"
STAGES=${STAGES:-0 1 2 3} REPS=${REPS:-1} ROWS=${ROWS:-"12 12 768 512 8192 8"} step vs_torch 60 "$ROOT/bench/gpu/vs_torch.sh"
step pipeline_nvme 30 "$ROOT/bench/gpu/pipeline_nvme.sh"
# Two threads a process: each test's ranks otherwise take every core (LibTorch's default, and the
# engine's cores / ranks), and 16 tests at once ran 256 spinning OpenMP threads on 16 cores: on
# 2026-11-26 six CPU tests that take 10-60 s on a 2-core CI machine hit the 300 s timeout.
OMP_NUM_THREADS=2 step suite 60 ctest --test-dir "$BUILD" --output-on-failure -j 8 -E "gpu" \
  -LE "${SKIP_LABELS:-cluster|fuzz}" --timeout 240
echo "== done in $((SECONDS - start)) s"
