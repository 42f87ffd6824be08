#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# The trainer's checkpoint faults, each a non-zero exit with a message that names the cause:
# a --save-dir that is a file (before step 1), a changed model or optimizer on --resume, a
# non-finite loss (which must not become `latest`), a full disk (where a small tmpfs can be
# mounted), and `dstrain export` from the sharded checkpoint.
set -uo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
mounted=""
trap '[ -n "$mounted" ] && umount "$mounted"; rm -rf "$work"' EXIT
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set train_micro_batch_size_per_gpu=4
        --set zero_optimization.stage=1 --set scheduler=null)
failed=0
# expect_failure NAME PATTERN ARGS...: the run must exit non-zero and print PATTERN.
expect_failure() {
  local name=$1 pattern=$2
  shift 2
  if "$@" > "$work/out.log" 2>&1; then
    echo "FAIL $name: exited 0"; failed=1
  elif ! grep -q -- "$pattern" "$work/out.log"; then
    echo "FAIL $name: no '$pattern' in:"; tail -5 "$work/out.log"; failed=1
  else
    echo "ok   $name: $(grep -m1 -o -- "$pattern.*" "$work/out.log" | cut -c1-160)"
  fi
}
launch=("$@")
run() { "${launch[@]}" -np 2 "$dstrain" "${common[@]}" "$@"; }

touch "$work/a-file"
expect_failure "save-dir is a file" "not a directory.*$work/a-file" \
  run --steps 3 --save-dir "$work/a-file" --metrics "$work/never.jsonl"
[ ! -s "$work/never.jsonl" ] || { echo "FAIL save-dir: training ran before the check"; failed=1; }

run --steps 2 --save-dir "$work/ckpt" > /dev/null 2>&1 || { echo "FAIL the first save"; exit 1; }
expect_failure "fewer layers" "n_layer 2 -> 1" run --steps 4 --save-dir "$work/ckpt" --resume --set dstrain.model.n_layer=1
expect_failure "other heads" "n_head 4 -> 2" run --steps 4 --save-dir "$work/ckpt" --resume --set dstrain.model.n_head=2
expect_failure "other optimizer" "optimizer AdamW, this run configures SGD" \
  run --steps 4 --save-dir "$work/ckpt" --resume --set 'optimizer={"type":"SGD","params":{"lr":0.1}}'
# Saving every step while diverging: the state that made the loss non-finite is never saved.
expect_failure "diverged" "not finite" \
  run --steps 8 --save-dir "$work/ckpt" --save-interval 1 --resume --set optimizer.params.lr=1e30 \
  --set gradient_clipping=0
bad_step=$(grep -m1 "not finite" "$work/out.log" | grep -o "at step [0-9]*" | head -n 1 | grep -o "[0-9]*$")
latest=$(cat "$work/ckpt/latest")
if [ -z "$bad_step" ] || [ "${latest#global_step}" -ge "$bad_step" ]; then
  echo "FAIL diverged: latest is $latest, the loss or weights went non-finite at step '$bad_step'"; failed=1
fi

if "$@" -np 1 "$dstrain" export --checkpoint "$work/ckpt" --out "$work/model.pt" > "$work/out.log" 2>&1 \
   && [ -s "$work/model.pt" ]; then
  echo "ok   export: $(head -c 160 "$work/out.log")"
else
  echo "FAIL export:"; cat "$work/out.log"; failed=1
fi

mkdir "$work/small"
if mount -t tmpfs -o size=512k tmpfs "$work/small" 2> /dev/null; then
  mounted="$work/small"
  expect_failure "full disk" "no space left on device writing checkpoint shard.*$work/small/.global_step1.partial" \
    run --steps 1 --save-dir "$work/small"
  leftover=$(ls -A "$work/small")
  [ -z "$leftover" ] || { echo "FAIL full disk: left $leftover"; failed=1; }
else
  echo "skip full disk: cannot mount a tmpfs here"
fi
exit $failed
