#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# The trainer with a Hugging Face config (configs/hf_zero3_auto.json, "auto" wherever HF allows) on
# 2 ranks: it trains, logs each "auto" with its value, --steps and --set reach the "auto" keys, and
# the checkpoint's recorded config holds the resolved values. And the config errors the trainer
# names: fp16 on a CPU model, --set through a non-object or with a value of the wrong type, a number
# that overflows.
set -uo pipefail
dstrain=$1 source=$2
shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $1"; [ -f "$work/out" ] && cat "$work/out"; failures=$((failures + 1)); }
# expect_failure NAME MESSAGE COMMAND...: the command exits non-zero and prints MESSAGE.
expect_failure() {
  local name=$1 message=$2
  shift 2
  if "$@" > "$work/out" 2>&1; then fail "$name: exited 0"
  elif ! grep -qF -- "$message" "$work/out"; then fail "$name: no '$message'"
  else echo "ok   $name"; fi
}
# expect_line NAME LINE: the last run's output has LINE.
expect_line() {
  if grep -qF -- "$2" "$work/out"; then echo "ok   $1"; else fail "$1: no '$2'"; fi
}

hf=(--config "$source/configs/hf_zero3_auto.json" --set dstrain.model.n_layer=1)
# Independent of dstrain: the example's settings and HF's rules, computed here.
micro=$(python3 -c "import json; print(json.load(open('$source/configs/hf_zero3_auto.json'))['dstrain']['per_device_train_batch_size'])")
gas=$(python3 -c "import json; print(json.load(open('$source/configs/hf_zero3_auto.json'))['dstrain']['gradient_accumulation_steps'])")
ratio=$(python3 -c "import json; print(json.load(open('$source/configs/hf_zero3_auto.json'))['dstrain']['warmup_ratio'])")
steps=7
warmup=$(python3 -c "import math; print(math.ceil($steps * $ratio))")
if "${mpiexec[@]}" -np 2 "$dstrain" "${hf[@]}" --steps $steps --save-dir "$work/ckpt" \
     --set dstrain.learning_rate=0.0005 > "$work/out" 2>&1; then
  echo "ok   hf_zero3_auto.json trains on 2 ranks"
  expect_line "train_batch_size logged" \
    "config: train_batch_size \"auto\" -> $((micro * gas * 2)) (micro $micro x accumulation $gas x 2 ranks)"
  expect_line "--steps reaches total_num_steps" "config: scheduler.params.total_num_steps \"auto\" -> $steps (dstrain.steps)"
  expect_line "warmup as HF" "config: scheduler.params.warmup_num_steps \"auto\" -> $warmup"
  expect_line "--set reaches lr" "config: optimizer.params.lr \"auto\" -> 0.0005 (dstrain.learning_rate)"
  if python3 - "$work/ckpt/global_step$steps/index.json" $((micro * gas * 2)) $steps $warmup <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))["config"]
assert config["train_batch_size"] == int(sys.argv[2]), config["train_batch_size"]
assert config["optimizer"]["params"]["lr"] == 0.0005, config["optimizer"]["params"]
assert config["scheduler"]["params"]["total_num_steps"] == int(sys.argv[3])
assert config["scheduler"]["params"]["warmup_num_steps"] == int(sys.argv[4])
assert config["fp16"]["enabled"] is False and config["bf16"]["enabled"] is False
PY
  then echo "ok   the checkpoint records the resolved values"; else fail "recorded config"; fi
else
  fail "hf_zero3_auto.json on 2 ranks"
fi

small=(--config "$source/configs/default.json" --set dstrain.model.n_embd=32 --set dstrain.model.n_layer=1 --steps 1)
expect_failure "fp16 on a CPU model" "config key 'fp16.enabled': fp16 needs a GPU" \
  "$dstrain" "${small[@]}" --set fp16.enabled=true
expect_failure "--set through a number" \
  "config key 'zero_optimization.stage.x': --set cannot write 'x' inside 'zero_optimization.stage': that is 0, not an object" \
  "$dstrain" "${small[@]}" --set zero_optimization.stage.x=1
expect_failure "--set of the wrong type" "config key 'zero_optimization.stage': expected an integer in [0, 3], got \"two\"" \
  "$dstrain" "${small[@]}" --set zero_optimization.stage=two
expect_failure "--set of a number that overflows" "config key 'gradient_clipping'" \
  "$dstrain" "${small[@]}" --set gradient_clipping=1e999
python3 -c "
import json; c = json.load(open('$source/configs/default.json')); c['optimizer']['params']['lr'] = 0
print(json.dumps(c).replace('\"lr\": 0', '\"lr\": 1e999'))" > "$work/overflow.json"
expect_failure "a file with 1e999" "config key 'optimizer.params.lr'" "$dstrain" --config "$work/overflow.json" --steps 1
expect_line "  ... and its path" "path=$work/overflow.json"
expect_failure "total_num_steps \"auto\" without steps" "config key 'scheduler.params.total_num_steps'" \
  "$dstrain" --config "$source/tests/runtime/configs/hf_tests_ds_config_zero2.json" --set dstrain.per_device_train_batch_size=2 \
  --set scheduler.type=WarmupDecayLR --set scheduler.params.total_num_steps=auto
exit $((failures > 0))
