#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# ZeRO-3 saves the memory its formula says, measured by the kernel: a 25M GPT (8 x 512, ctx 64,
# micro 2, AdamW, fp32, HuggingFace "auto" bucket sizes) trains 3 steps at -np 2, stage 0 and then
# stage 3, each job in a memory cgroup of its own (v1 or v2: memory_plan_cgroups.sh).
#   - The stage-3 job's peak (memory.max_usage_in_bytes, v2's memory.peak) is below the stage-0
#     job's by at least 70% of the model-state bytes the ranks no longer hold (the trainer's own
#     per-rank count, which tests/engine checks against the closed form).
#   - Every rank's peak RSS above its pre-model baseline is within 1.5x of its model state plus
#     activations, at both stages (the bound docs/zero.md states).
# Needs root and a writable cgroup memory controller; exits 77 (skipped) without them.
set -euo pipefail
dstrain=$1 source=$2
shift 2
. "$(dirname "$0")/memory_plan_cgroups.sh"
cgroup_init || { echo "no writable cgroup memory controller (v1 or v2): skipped"; exit 77; }
work=$(mktemp -d -p "$(dirname "$dstrain")")
made=()
cleanup() { rm -rf "$work"; for g in "${made[@]}"; do cgroup_remove "$g"; done; }
trap cleanup EXIT
# A limit that limits nothing: the jobs are measured, not capped.
unlimited=$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)
width=512
sets=(--config "$source/configs/default.json" --set dstrain.model.n_layer=8 --set dstrain.model.n_embd=$width
      --set dstrain.model.n_head=8 --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256
      --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null
      --set zero_optimization.reduce_bucket_size=$((width * width))
      --set zero_optimization.stage3_prefetch_bucket_size=$((width * width * 9 / 10))
      --set zero_optimization.stage3_param_persistence_threshold=$((width * 10)) --steps 3)
for stage in 0 3; do
  group=$(cgroup_create "dstrain_memory_test_$stage" "$unlimited")
  made+=("$group")
  # The subshell moves itself into the group, so mpirun and every rank are charged there.
  ( cgroup_enter "$group"
    exec "$@" -np 2 "$dstrain" "${sets[@]}" --set zero_optimization.stage=$stage --metrics "$work/$stage.jsonl" ) \
    > "$work/$stage.log" 2>&1 || { cat "$work/$stage.log"; exit 1; }
  cgroup_peak "$group" > "$work/$stage.cgroup"
done
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
last = {s: [json.loads(l) for l in open(f"{work}/{s}.jsonl")][-1] for s in (0, 3)}
peak = {s: int(open(f"{work}/{s}.cgroup").read()) / 1e6 for s in (0, 3)}
state = {s: (last[s]["param_bytes"] + last[s]["grad_bytes"] + last[s]["optimizer_bytes"]) / 1e6 for s in (0, 3)}
saved_by_formula = 2 * (state[0] - state[3])
saved = peak[0] - peak[3]
print(f"job peaks (cgroup): stage 0 {peak[0]:.0f} MB, stage 3 {peak[3]:.0f} MB; saved {saved:.0f} MB of the "
      f"{saved_by_formula:.0f} MB of model state the ranks no longer hold")
# 70%: since stage 0 in fp32 keeps no second copy of the weights (the master is the model's storage),
# the model state stage 3 sheds is 6 bytes per parameter, not 10, and stage 3's gather buffers, which
# the model-state count leaves out, are a larger share of it (measured 0.75-0.78 after that change).
assert saved >= 0.70 * saved_by_formula, "ZeRO-3 saved less than 70% of the model-state bytes"
for s in (0, 3):
    m = last[s]
    above = m["peak_rss_mb"] - m["baseline_rss_mb"]
    bound = 1.5 * (state[s] + m["activation_mb"])
    print(f"stage {s}: peak RSS {m['peak_rss_mb']:.0f} MB, {above:.0f} MB above the baseline; bound {bound:.0f} MB")
    assert above <= bound, f"stage {s}: peak RSS above the baseline exceeds 1.5x model state + activations"
PY
