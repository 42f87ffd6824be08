#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# The trainer with the optimizer state on NVMe (a folder under the build tree: /tmp may be tmpfs):
#   A: -np 2, ZeRO 2, in memory, 6 steps.
#   B: -np 2, ZeRO 2, offloaded and pipelined, 6 steps: the same losses, bit for bit (as printed);
#      nvme_* metrics on every line (A's are 0; B's reads and writes > 0 on every step: more
#      sub-groups than the 3 kept in memory between steps); the swap folder removed at exit.
#   C: -np 2, ZeRO 3, offloaded, 3 steps and a checkpoint; then -np 1, ZeRO 1, offloaded, resumed
#      to step 6: steps 4-6 match A's within 1e-5 relative (resharded from 2 ranks to 1).
#   D: -np 2, ZeRO 3, no clipping, the optimizer and the parameters on NVMe with pipelining unset:
#      the planner turns it on and the step begins in backward (dstrain.step_in_backward, the
#      trainer's default; both said in the log); the losses equal the in-memory ZeRO 3 run's bit for
#      bit; 3 steps, a checkpoint, resumed to 6: the uninterrupted run's losses, bit for bit.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d -p "$(dirname "$dstrain")")
trap 'rm -rf "$work"' EXIT
mkdir "$work/nvme"
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set train_batch_size=8
        --set train_micro_batch_size_per_gpu=null --set gradient_accumulation_steps=1 --set scheduler=null
        --set optimizer.params.lr=0.003 --set zero_optimization.stage3_param_persistence_threshold=0)
offload=(--set zero_optimization.offload_optimizer.device=nvme --set "zero_optimization.offload_optimizer.nvme_path=$work/nvme"
         --set zero_optimization.offload_optimizer.buffer_count=12 --set zero_optimization.sub_group_size=5000
         --set aio.block_size=65536)
"$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=2 --steps 6 --metrics "$work/a.jsonl" > /dev/null
"$@" -np 2 "$dstrain" "${common[@]}" "${offload[@]}" --set zero_optimization.stage=2 \
  --set zero_optimization.offload_optimizer.pipeline_read=true --set zero_optimization.offload_optimizer.pipeline_write=true \
  --set steps_per_print=3 --steps 6 --metrics "$work/b.jsonl" > "$work/b.log" 2>&1
"$@" -np 2 "$dstrain" "${common[@]}" "${offload[@]}" --set zero_optimization.stage=3 --steps 3 \
  --save-dir "$work/ckpt" > /dev/null 2>&1
"$@" -np 1 "$dstrain" "${common[@]}" "${offload[@]}" --set zero_optimization.stage=1 --steps 6 \
  --save-dir "$work/ckpt" --resume --metrics "$work/c.jsonl" > /dev/null 2>&1
eager=(--set zero_optimization.stage=3 --set gradient_clipping=0 --set zero_optimization.offload_param.device=nvme
       --set "zero_optimization.offload_param.nvme_path=$work/nvme")
"$@" -np 2 "$dstrain" "${common[@]}" "${eager[@]:0:4}" --steps 6 --metrics "$work/d-memory.jsonl" > /dev/null 2>&1
"$@" -np 2 "$dstrain" "${common[@]}" "${offload[@]}" --set zero_optimization.offload_optimizer.buffer_count=null "${eager[@]}" \
  --steps 6 --metrics "$work/d.jsonl" > "$work/d.log" 2>&1
"$@" -np 2 "$dstrain" "${common[@]}" "${offload[@]}" --set zero_optimization.offload_optimizer.buffer_count=null "${eager[@]}" \
  --steps 3 --save-dir "$work/ckpt-d" > /dev/null 2>&1
"$@" -np 2 "$dstrain" "${common[@]}" "${offload[@]}" --set zero_optimization.offload_optimizer.buffer_count=null "${eager[@]}" \
  --steps 6 --save-dir "$work/ckpt-d" --resume --metrics "$work/d-resumed.jsonl" > /dev/null 2>&1
grep -q 'pipeline_read 1 (the step begun in backward' "$work/d.log" || { echo "the planner did not turn pipeline_read on:"; cat "$work/d.log"; exit 1; }
grep -q 'step_in_backward: each sub-group is stepped' "$work/d.log" || { echo "the step did not begin in backward:"; cat "$work/d.log"; exit 1; }
grep -q 'swap read .* GB/s, write .* GB/s' "$work/b.log" || { echo "no swap figures in the step log:"; cat "$work/b.log"; exit 1; }
if [ -n "$(ls -A "$work/nvme")" ]; then echo "swap folders left behind: $(ls "$work/nvme")"; exit 1; fi
python3 - "$work/a.jsonl" "$work/b.jsonl" "$work/c.jsonl" "$work/d-memory.jsonl" "$work/d.jsonl" "$work/d-resumed.jsonl" <<'PY'
import json, sys
a, b, c, dm, d, dr = ([json.loads(line) for line in open(path)] for path in sys.argv[1:])
assert len(d) == 6 and [m["loss"] for m in dm] == [m["loss"] for m in d], ("stepped in backward: losses differ", dm, d)
assert [m["step"] for m in dr] == [4, 5, 6] and [m["loss"] for m in dr] == [m["loss"] for m in d[3:]], ("resumed", d, dr)
assert [m["loss"] for m in a] == [m["loss"] for m in b], ("offloaded losses differ", a, b)
for m in a:
    assert all(m[k] == 0 for k in ("nvme_read_bytes", "nvme_write_bytes", "nvme_wait_seconds")), m
for m in b:
    assert m["nvme_read_bytes"] > 0 and m["nvme_write_bytes"] > 0, m
    assert m["nvme_read_seconds"] > 0 and m["nvme_write_seconds"] > 0 and m["nvme_wait_seconds"] >= 0, m
assert [m["step"] for m in c] == [4, 5, 6], [m["step"] for m in c]
for m in c:
    ref = a[m["step"] - 1]["loss"]
    assert abs(m["loss"] - ref) <= 1e-5 * abs(ref), (m["step"], m["loss"], ref)
print("offload OK: losses equal in memory; resumed 2 -> 1 ranks, stage 3 -> 1, steps 4-6 match; "
      "stepped in backward: losses equal in memory, resumed bit for bit")
PY
