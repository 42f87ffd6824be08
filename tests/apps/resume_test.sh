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
# Each metrics line is one JSON object; pull out "step" and "loss".
fields() { sed -E 's/.*"loss":([^,}]*).*"step":([0-9]+).*/\2 \1/' "$1"; }
fields "$work/a.jsonl" > "$work/a.txt"
fields "$work/b.jsonl" > "$work/b.txt"
awk 'NR == FNR { a[$1] = $2; next }
     { seen = seen " " $1
       d = $2 - a[$1]; if (d < 0) d = -d; m = a[$1] < 0 ? -a[$1] : a[$1]
       if (d > 1e-5 * m) { printf "step %d: resumed %s vs uninterrupted %s\n", $1, $2, a[$1]; bad = 1 } }
     END {
       if (seen != " 7 8 9 10 11 12") { print "resumed run logged steps" seen; exit 1 }
       if (bad) exit 1
       if (!(a[12] < a[1] - 0.2)) { printf "loss did not fall: %s -> %s\n", a[1], a[12]; exit 1 }
       printf "resume OK: steps 7-12 match; loss %s -> %s\n", a[1], a[12] }' "$work/a.txt" "$work/b.txt"
