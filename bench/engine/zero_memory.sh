#!/usr/bin/env bash
# Per-rank model-state bytes, peak RSS and step time of ZeRO stages 0-3 on the same GPT at -np N,
# next to `dstrain estimate`. Medians over steps 3..STEPS.
#   Usage: bench/engine/zero_memory.sh [BUILD_DIR] [RANKS] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
ranks=${2:-4}
steps=${3:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
sets=(--set dstrain.model.n_layer=4 --set dstrain.model.n_embd=256 --set dstrain.model.vocab_size=512
      --set zero_optimization.stage3_param_persistence_threshold=1000
      --set zero_optimization.reduce_bucket_size=2000000 --set train_micro_batch_size_per_gpu=4)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for stage in 0 1 2 3; do
  mpirun --oversubscribe --bind-to none -np "$ranks" "$build/apps/dstrain/dstrain" --config "$root/configs/default.json" \
    "${sets[@]}" --set zero_optimization.stage=$stage --steps "$steps" --metrics "$work/stage$stage" > /dev/null
done
python3 - "$work" <<'PY'
import json, statistics, sys
rows = []
for stage in range(4):
    lines = [json.loads(l) for l in open(f"{sys.argv[1]}/stage{stage}")]
    last = lines[-1]
    total = last["param_bytes"] + last["grad_bytes"] + last["optimizer_bytes"]
    step_s = statistics.median(16 / l["samples_per_sec"] for l in lines[2:])  # batch = 4 x ranks
    rows.append((stage, last["param_bytes"], last["grad_bytes"], last["optimizer_bytes"], total, last["peak_rss_mb"], step_s))
base = rows[0]
print(f"{'stage':>5} {'params MB':>10} {'grads MB':>9} {'optim MB':>9} {'total MB':>9} {'vs 0':>6} {'peak RSS MB':>12} {'vs 0':>6} {'step s':>8} {'vs 0':>6}")
for s, p, g, o, t, rss, step in rows:
    print(f"{s:>5} {p/1e6:>10.2f} {g/1e6:>9.2f} {o/1e6:>9.2f} {t/1e6:>9.2f} {t/base[4]:>6.3f} {rss:>12.0f} {rss/base[5]:>6.3f} {step:>8.3f} {step/base[6]:>6.3f}")
PY
echo
"$build/apps/dstrain/dstrain" estimate --config <(python3 - "$root/configs/default.json" <<'PY'
import json,sys; c=json.load(open(sys.argv[1])); m=c['dstrain']['model']; m.update(n_layer=4,n_embd=256,vocab_size=512)
c['zero_optimization']['stage3_param_persistence_threshold']=1000; print(json.dumps(c))
PY
) --world "$ranks"
