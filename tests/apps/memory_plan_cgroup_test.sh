#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# The memory plan's prediction against the kernel's count. A 25M GPT (8 x 512, ctx 64, vocab 256,
# micro 2, AdamW, fp32) trains 3 steps at ZeRO-3, -np 2, with no ZeRO size in its config, in a
# memory cgroup limited to 1.5 GB:
#   - the planner's budget is the cgroup's limit over the 2 ranks, and it names the cgroup;
#   - the job's peak (memory.max_usage_in_bytes, or v2's memory.peak) is within 15% of the
#     prediction: 2 x the plan's bytes above the process before the model, plus what the same job
#     costs the group with the default 2 x 128 GPT (measured first, its own plan subtracted).
# Needs root and a writable memory controller (v1 or v2); exits 77 (skipped) without them.
set -euo pipefail
dstrain=$1 source=$2
shift 2
. "$(dirname "$0")/memory_plan_cgroups.sh"
cgroup_init || { echo "no writable cgroup memory controller: skipped"; exit 77; }
work=$(mktemp -d -p "$(dirname "$dstrain")")
groups=()
cleanup() { for g in "${groups[@]}"; do cgroup_remove "$g"; done; rm -rf "$work"; }
trap cleanup EXIT
limit=1500000000
common=(--config "$source/configs/default.json" --set zero_optimization.stage=3
        --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null)
big=(--set dstrain.model.n_layer=8 --set dstrain.model.n_embd=512 --set dstrain.model.n_head=8
     --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256)

# run NAME ARGS...: the job in a group of its own; its log in $work/NAME.log, its peak in $work/NAME.peak.
run() {
  local name=$1; shift
  local group
  group=$(cgroup_create "dstrain_memory_plan_$name" "$limit")
  groups+=("$group")
  ( cgroup_enter "$group"; exec "$@" ) > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  cgroup_peak "$group" > "$work/$name.peak"
  cgroup_remove "$group"
}
run small "$@" -np 2 "$dstrain" "${common[@]}" --steps 1
run big "$@" -np 2 "$dstrain" "${common[@]}" "${big[@]}" --steps 3
python3 - "$work" "$limit" <<'PY'
import re, sys
work, limit = sys.argv[1], int(sys.argv[2])
def plan(name):
    text = open(f"{work}/{name}.log").read()
    m = re.search(r"memory plan: predicted peak ([\d.]+) MB per rank \(([\d.]+) MB before the model \+ ([\d.]+) MB\)"
                  r" of a budget of ([\d.]+) MB \(([^)]*)", text)
    assert m, f"no memory plan line in the {name} run's log"
    print(f"{name}: {m.group(0)}")
    return float(m.group(3)), float(m.group(4)), m.group(5)
def peak(name):
    return int(open(f"{work}/{name}.peak").read()) / 1e6
small_above, _, _ = plan("small")
big_above, budget, source = plan("big")
assert "cgroup" in source, f"the budget came from {source}, not the cgroup"
assert abs(budget - limit / 2 / 1e6) < 1, f"budget {budget} MB per rank, the cgroup allows {limit / 2e6} MB"
job_before = peak("small") - 2 * small_above
predicted = job_before + 2 * big_above
measured = peak("big")
print(f"job before the model {job_before:.0f} MB (small run {peak('small'):.0f} MB less 2 x {small_above:.1f} MB planned)")
print(f"25M at ZeRO-3, -np 2: predicted {predicted:.0f} MB, measured {measured:.0f} MB (cgroup), "
      f"ratio {measured / predicted:.3f}")
assert abs(measured - predicted) <= 0.15 * predicted, "the prediction is off by more than 15%"
PY
