#!/usr/bin/env bash
# Args: DSTRAIN DS_IO SOURCE_DIR
# The CLI's answers to bad input (flags out of range, --tag without --resume, a signal that cannot
# be caught, the dstrain block's unknown keys, steps and model type, sizes that cannot fit): each case must fail
# (non-zero, with its message) or, for the progress bar, leave no carriage return in a redirected
# stdout; and a key accepted but not acted on draws exactly one warning.
set -uo pipefail
dstrain=$1 ds_io=$2 source=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
# expect_failure NAME MESSAGE COMMAND...: the command exits non-zero and prints MESSAGE.
expect_failure() {
  local name=$1 message=$2
  shift 2
  if "$@" > "$work/out" 2>&1; then
    echo "FAIL $name: exited 0"; failures=$((failures + 1))
  elif ! grep -qF -- "$message" "$work/out"; then
    echo "FAIL $name: no '$message' in:"; cat "$work/out"; failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}
small=(--config "$source/configs/default.json" --set dstrain.model.n_embd=32 --set dstrain.model.n_layer=1)

expect_failure "--steps -5" "--steps" "$dstrain" "${small[@]}" --steps -5
expect_failure "--steps 0" "--steps" "$dstrain" "${small[@]}" --steps 0
expect_failure "--steps 0 says the bound" "--steps: must be >= 1, got 0" "$dstrain" "${small[@]}" --steps 0
expect_failure "--comm-timeout -3" "--comm-timeout: must be > 0, got -3" "$dstrain" "${small[@]}" --comm-timeout -3
expect_failure "--keep-last -1" "--keep-last: must be >= 0, got -1" "$dstrain" "${small[@]}" --keep-last -1
expect_failure "--tag without --resume" "--tag picks the checkpoint to resume: it needs --resume" \
  "$dstrain" "${small[@]}" --save-dir "$work/ckpt" --tag global_step1
expect_failure "--preempt-signals KILL" "'KILL' is not a signal the trainer can catch" \
  "$dstrain" "${small[@]}" --preempt-signals TERM,KILL
# The config's dstrain block: a misspelt key, steps <= 0, a model type that is not built in.
expect_failure "dstrain.stpes" "config key 'dstrain.stpes': unknown key (did you mean 'dstrain.steps'?)" \
  "$dstrain" "${small[@]}" --set dstrain.stpes=5
expect_failure "dstrain.steps -5" "config key 'dstrain.steps': must be a positive integer, got -5" \
  "$dstrain" "${small[@]}" --set dstrain.steps=-5
expect_failure "dstrain.steps 0" "config key 'dstrain.steps': must be a positive integer, got 0" \
  "$dstrain" "${small[@]}" --set dstrain.steps=0
expect_failure "dstrain.model.type mamba" "config key 'dstrain.model.type': model type \"mamba\" is not built in; supported: gpt, llama" \
  "$dstrain" "${small[@]}" --set dstrain.model.type=mamba
# Sizes past any model, or that cannot fit, are refused before the model is built (each in a second
# or two, with a 30 s bound that building a billion layers would hit): the key and the bytes.
expect_failure "n_layer 1e9" "config key 'dstrain.model.n_layer': 1000000000 is past the largest this build takes, 65536" \
  timeout 30 "$dstrain" "${small[@]}" --set dstrain.model.n_layer=1000000000
expect_failure "n_embd 1e6" "config key 'dstrain.model': cannot fit: the predicted peak" \
  timeout 30 "$dstrain" "${small[@]}" --set dstrain.model.n_embd=1000000
expect_failure "block_size 1e9" "config key 'dstrain.model.block_size': 1000000000 is past the largest this build takes" \
  timeout 30 "$dstrain" "${small[@]}" --set dstrain.model.block_size=1000000000
expect_failure "micro-batch 1e9" "config key 'train_micro_batch_size_per_gpu, dstrain.model.block_size': cannot fit: the predicted peak" \
  timeout 30 "$dstrain" "${small[@]}" --set train_micro_batch_size_per_gpu=1000000000
expect_failure "metrics on a full disk" "cannot write the metrics line" \
  "$dstrain" "${small[@]}" --steps 2 --metrics /dev/full
expect_failure "ds_io --io_size 0" "--io_size must be positive" "$ds_io" --folder "$work" --io_size 0
expect_failure "ds_io --read of a missing file" "no file to read" "$ds_io" --folder "$work" --io_size 1M --read --loops 1
if "$ds_io" --folder "$work" --io_size 1M --read --create --loops 1 --validate > "$work/out" 2>&1 &&
   grep -q "validation passed" "$work/out"; then
  echo "ok   ds_io --read --create"
else
  echo "FAIL ds_io --read --create:"; cat "$work/out"; failures=$((failures + 1))
fi

# stdout is a file here: the log lines only, no progress bar.
if "$dstrain" "${small[@]}" --steps 3 > "$work/log" 2>&1 && grep -q "step 3" "$work/log"; then
  if grep -q $'\r' "$work/log"; then echo "FAIL progress bar written to a file"; failures=$((failures + 1));
  else echo "ok   no progress bar off a terminal"; fi
else
  echo "FAIL training 3 steps:"; cat "$work/log"; failures=$((failures + 1))
fi
# A key accepted but not acted on: exactly one warning at engine start, naming it; one at its
# default: none.
"$dstrain" "${small[@]}" --steps 1 --set zero_optimization.contiguous_gradients=false \
  --set zero_optimization.reduce_scatter=true > "$work/log" 2>&1
if [ "$(grep -c "not acted on" "$work/log")" = 1 ] &&
   grep -q "'zero_optimization.contiguous_gradients' is accepted but not acted on" "$work/log"; then
  echo "ok   one warning for a key not acted on"
else
  echo "FAIL warnings for keys not acted on:"; cat "$work/log"; failures=$((failures + 1))
fi
exit $((failures > 0))
