#!/usr/bin/env bash
# The engine (-np 1, ZeRO 0) against a hand-written LibTorch loop on the same GPT, batch, data and
# thread count; then the engine at -np 2 for scaling. Medians of samples/s over steps 3..N of each
# of REPEATS alternating runs.   Usage: bench/engine/engine_vs_plain.sh [BUILD_DIR] [STEPS] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-20}
repeats=${3:-3}
config=$root/configs/default.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A constant lr and no clipping difference: both loops use the config's AdamW and clipping.
sets=(--set scheduler=null --set train_micro_batch_size_per_gpu=16)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
jq_median() { python3 -c "
import json,sys,statistics
v=[json.loads(l)['samples_per_sec'] for f in sys.argv[1:] for l in list(open(f))[2:]]
print(f'{statistics.median(v):.2f}')" "$@"; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for r in $(seq "$repeats"); do
  "$build/bench/engine/plain_loop" --config <(python3 - "$config" <<'PY'
import json,sys; c=json.load(open(sys.argv[1])); c.pop('scheduler',None); c['train_micro_batch_size_per_gpu']=16; print(json.dumps(c))
PY
) --steps "$steps" > "$work/plain.$r"
  mpirun --oversubscribe --bind-to none -np 1 "$build/apps/dstrain/dstrain" --config "$config" "${sets[@]}" \
    --steps "$steps" --metrics "$work/engine1.$r" > /dev/null
  mpirun --oversubscribe --bind-to none -np 2 "$build/apps/dstrain/dstrain" --config "$config" "${sets[@]}" \
    --set train_micro_batch_size_per_gpu=8 --steps "$steps" --metrics "$work/engine2.$r" > /dev/null
done
plain=$(jq_median "$work"/plain.*)
engine1=$(jq_median "$work"/engine1.*)
engine2=$(jq_median "$work"/engine2.*)
echo "threads per process: $OMP_NUM_THREADS; global batch 16; $repeats runs x $steps steps, medians"
printf "%-28s %12s %8s\n" "run" "samples/s" "ratio"
printf "%-28s %12s %8s\n" "plain LibTorch loop" "$plain" "1.000"
printf "%-28s %12s %8s\n" "engine -np 1 (ZeRO 0)" "$engine1" "$(python3 -c "print(f'{$engine1/$plain:.3f}')")"
printf "%-28s %12s %8s\n" "engine -np 2 (ZeRO 0)" "$engine2" "$(python3 -c "print(f'{$engine2/$plain:.3f}')")"
