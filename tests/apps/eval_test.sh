#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# Held-out evaluation on text data (two different files: train and dstrain.data.valid):
#   - with eval_interval 2 over 5 steps, exactly steps 2, 4 and 5 (the last) carry val_loss, and
#     val_ppl = exp(val_loss);
#   - `dstrain eval` on the final checkpoint prints the last val_loss, at -np 1 and at -np 2 (where
#     the ranks' batches together are one batch of 2 x micro);
#   - the held-out loss of a trained model is below that of the untrained one (step 2's > step 5's
#     is not guaranteed, so the reference is ln(256), the loss of a uniform guess, minus a margin);
#   - errors name their key: eval_interval without data.valid, eval on data with no valid file.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set dstrain.model.n_layer=2
        --set dstrain.model.vocab_size=256 --set dstrain.model.block_size=32
        --set dstrain.data.type=text --set "dstrain.data.path=$source/docs/architecture.md"
        --set "dstrain.data.valid=$source/README.md" --set dstrain.eval_interval=2 --set dstrain.eval_iters=3
        --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null
        --set scheduler=null --set optimizer.params.lr=0.003 --steps 5)
"$@" -np 1 "$dstrain" "${common[@]}" --save-dir "$work/one" --metrics "$work/one.jsonl" > "$work/one.log"
"$@" -np 2 "$dstrain" "${common[@]}" --save-dir "$work/two" --metrics "$work/two.jsonl" > "$work/two.log"
eval_one=$("$dstrain" eval --checkpoint "$work/one")
eval_two=$("$dstrain" eval --checkpoint "$work/two" --batch-size 4)
python3 - "$work" "$eval_one" "$eval_two" <<'PY'
import json, math, sys
work, eval_one, eval_two = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
for run, printed in (("one", eval_one), ("two", eval_two)):
    lines = [json.loads(l) for l in open(f"{work}/{run}.jsonl")]
    evaluated = [l["step"] for l in lines if "val_loss" in l]
    assert evaluated == [2, 4, 5], f"{run}: val_loss at steps {evaluated}, expected [2, 4, 5]"
    assert all(("val_ppl" in l) == ("val_loss" in l) for l in lines), f"{run}: val_ppl without val_loss"
    for l in lines:
        if "val_loss" in l:
            assert math.isclose(l["val_ppl"], math.exp(l["val_loss"]), rel_tol=1e-12), l
    last = lines[-1]["val_loss"]
    assert abs(printed - last) <= 2e-6 * abs(last) + 1e-6, f"{run}: dstrain eval printed {printed}, training logged {last}"
    assert last < math.log(256) - 0.5, f"{run}: held-out loss {last} is no better than a uniform guess"
    log = open(f"{work}/{run}.log").read()
    assert f"step 5 | val loss {last:.4f}" in log, f"{run}: no val loss log line for step 5"
print(f"eval OK: -np 1 {eval_one}, -np 2 {eval_two}")
PY
expect_error() {  # expect_error TEXT COMMAND...: the command fails and says TEXT
  local text=$1; shift
  if "$@" > "$work/err.log" 2>&1; then echo "succeeded: $*"; exit 1; fi
  grep -qF -- "$text" "$work/err.log" || { echo "no '$text' in:"; cat "$work/err.log"; exit 1; }
}
expect_error "dstrain.eval_interval" "$dstrain" --config "$source/configs/default.json" --set dstrain.eval_interval=2 --steps 1
expect_error "dstrain.data.valid" "$dstrain" eval --checkpoint "$work/one" --config "$source/configs/default.json"
echo "errors OK"
