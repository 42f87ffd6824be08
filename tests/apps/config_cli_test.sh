#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR
# How the trainer, `dstrain plan` and `dstrain estimate` read a config (docs/config.md): a file that
# is not a JSON object is said to be one, naming the file; dstrain.model of the wrong type names the
# key; plan and estimate take the trainer's --set and --steps; "auto" pipeline stages are logged as
# what they become; the resolved batch is logged once; WarmupCosineLR trains with DeepSpeed's rates
# (tests/engine/lr_schedules_reference.py, under Debian's Python).
set -uo pipefail
dstrain=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $1"; [ -f "$work/out" ] && cat "$work/out"; failures=$((failures + 1)); }
expect_failure() {
  local name=$1 message=$2
  shift 2
  if "$@" > "$work/out" 2>&1; then fail "$name: exited 0"
  elif ! grep -qF -- "$message" "$work/out"; then fail "$name: no '$message'"
  else echo "ok   $name"; fi
}
expect_success() {
  local name=$1
  shift
  if "$@" > "$work/out" 2>&1; then echo "ok   $name"; else fail "$name: exited non-zero"; fi
}
expect_line() { if grep -qF -- "$2" "$work/out"; then echo "ok   $1"; else fail "$1: no '$2'"; fi; }
expect_no_line() { if grep -qF -- "$2" "$work/out"; then fail "$1: '$2'"; else echo "ok   $1"; fi; }

# Files that hold no object: said so, with the path, and not blamed on --set or dstrain.steps.
echo '[]' > "$work/array.json"
echo 'null' > "$work/null.json"
for kind in array null; do
  for command in "" plan estimate; do
    expect_failure "a $kind file ($command)" "the file holds a JSON $kind; a DeepSpeed config is a JSON object" \
      "$dstrain" $command --config "$work/$kind.json" --steps 1 --set dstrain.model.n_layer=1
    expect_line "  ... naming it" "path=$work/$kind.json"
    expect_no_line "  ... not blamed on --set" "--set cannot write"
  done
done

small=(--config "$source/configs/default.json" --set dstrain.model.n_embd=32 --set dstrain.model.n_layer=1)
# dstrain.model (and dstrain.data) of the wrong type: the key, never nlohmann's bare type_error.
for command in "" plan estimate; do
  expect_failure "dstrain.model an array ($command)" "config key 'dstrain.model': must be a JSON object, got [1]" \
    "$dstrain" $command "${small[@]}" --set 'dstrain.model=[1]' --steps 1
  expect_no_line "  ... no type_error" "type_error"
done
expect_failure "dstrain.data a string" "config key 'dstrain.data'" "$dstrain" "${small[@]}" --set dstrain.data=x --steps 1

# plan and estimate take the trainer's overrides: what they print follows --set.
expect_success "plan --set" "$dstrain" plan "${small[@]}" --set zero_optimization.stage=3 --steps 5 --world 2
expect_line "  ... the stage set" "ZeRO stage 3"
"$dstrain" estimate "${small[@]}" --world 2 > "$work/one_layer" 2>&1
expect_success "estimate --set" "$dstrain" estimate "${small[@]}" --set dstrain.model.n_layer=3 --world 2
one=$(grep -o '^model: [^,]*, [0-9]* parameters' "$work/one_layer")
three=$(grep -o '^model: [^,]*, [0-9]* parameters' "$work/out")
if [ -n "$one" ] && [ -n "$three" ] && [ "$one" != "$three" ]; then echo "ok   ... the layers set ($three)"
else fail "estimate --set: '$one' vs '$three'"; fi
expect_failure "plan --steps 0" "--steps: must be >= 1, got 0" "$dstrain" plan "${small[@]}" --steps 0

# "auto" pipeline stages: what they became. A Hugging Face config: the batch line once.
expect_success "pipeline.stages auto trains" "$dstrain" "${small[@]}" --set pipeline.stages=auto --steps 1
expect_line "  ... and says what it became" 'config: pipeline.stages "auto" -> 1'
expect_success "hf_zero3_auto.json trains a step" "$dstrain" --config "$source/configs/hf_zero3_auto.json" \
  --set dstrain.model.n_layer=1 --steps 1
count=$(grep -c 'config: train_batch_size "auto" ->' "$work/out")
if [ "$count" = 1 ]; then echo "ok   ... the batch line once"; else fail "the batch line $count times"; fi
expect_line "  ... the arguments used" "config: Hugging Face's mode, with TrainingArguments per_device_train_batch_size=4"

# WarmupCosineLR as DeepSpeed's, total == warm-up included: the metrics' lr against the reference.
python3 - "$source/configs/default.json" "$work/cosine.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["scheduler"] = {"type": "WarmupCosineLR",
                       "params": {"total_num_steps": 4, "warmup_num_steps": 4, "cos_min_ratio": 0.1}}
config["dstrain"]["model"].update(n_layer=1, n_embd=32)
json.dump(config, open(sys.argv[2], "w"))
PY
if "$dstrain" --config "$work/cosine.json" --steps 7 --metrics "$work/cosine.jsonl" > "$work/out" 2>&1; then
  reference=$(/usr/bin/python3 "$source/tests/engine/lr_schedules_reference.py" WarmupCosineLR \
                '{"total_num_steps": 4, "warmup_num_steps": 4, "cos_min_ratio": 0.1}' 0.001 7)
  if /usr/bin/python3 - "$work/cosine.jsonl" "$reference" <<'PY'
import json, sys
lrs = [json.loads(line)["lr"] for line in open(sys.argv[1]) if '"lr"' in line]
expected = [float(x) for x in sys.argv[2].split()]
assert len(lrs) == len(expected), (lrs, expected)
assert all(abs(a - b) <= 1e-12 + 1e-9 * abs(b) for a, b in zip(lrs, expected)), (lrs, expected)
PY
  then echo "ok   WarmupCosineLR trains with DeepSpeed's rates"; else fail "WarmupCosineLR's rates"; fi
else
  fail "WarmupCosineLR trains"
fi
exit $((failures > 0))
