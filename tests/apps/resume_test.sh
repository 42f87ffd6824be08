#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
#   A: -np 1, ZeRO 0, 12 steps uninterrupted.
#   B: -np 2, ZeRO 1, 6 steps, checkpoint; then -np 1, ZeRO 3, resume to step 12.
# B's steps 7-12 must match A's within 1e-5 relative, and A's loss must fall.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set train_micro_batch_size_per_gpu=4
        --set gradient_accumulation_steps=null --set scheduler=null --set optimizer.params.lr=0.003
        --set zero_optimization.stage3_param_persistence_threshold=0)
"$@" -np 1 "$dstrain" "${common[@]}" --set train_batch_size=8 --steps 12 --metrics "$work/a.jsonl" > /dev/null
"$@" -np 2 "$dstrain" "${common[@]}" --set train_batch_size=8 --set zero_optimization.stage=1 --steps 6 \
  --save-dir "$work/ckpt" > /dev/null
"$@" -np 1 "$dstrain" "${common[@]}" --set train_batch_size=8 --set zero_optimization.stage=3 --steps 12 \
  --save-dir "$work/ckpt" --resume --metrics "$work/b.jsonl" > /dev/null
python3 - "$work/a.jsonl" "$work/b.jsonl" <<'PY'
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(b) == list(range(7, 13)), f"resumed run logged steps {sorted(b)}"
for step, loss in b.items():
    assert abs(loss - a[step]) <= 1e-5 * abs(a[step]), f"step {step}: resumed {loss} vs uninterrupted {a[step]}"
assert a[12] < a[1] - 0.2, f"loss did not fall: {a[1]} -> {a[12]}"
print(f"resume OK: steps 7-12 match; loss {a[1]:.4f} -> {a[12]:.4f}")
PY
