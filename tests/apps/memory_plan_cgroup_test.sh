#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# The memory plan's prediction against the kernel's count. A 25M GPT (8 x 512, ctx 64, vocab 256,
# micro 2, AdamW, fp32) trains 3 steps at ZeRO-3 and at ZeRO-0, -np 2, with no ZeRO size in its
# config, each in a memory cgroup of its own (1.5 GB at stage 3; 2 GB at stage 0, which holds more,
# so that the planner keeps stage 0's default bucket: one of the whole model, all-reduced with a
# temporary as large):
#   - the planner's budget is the cgroup's limit over the 2 ranks, and it names the cgroup;
#   - each job's peak (memory.max_usage_in_bytes, or v2's memory.peak) is within 15% of the
#     prediction: 2 x the plan's bytes above the process and the engine, plus what the same job
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
common=(--config "$source/configs/default.json"
        --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null)
big=(--set dstrain.model.n_layer=8 --set dstrain.model.n_embd=512 --set dstrain.model.n_head=8
     --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256)

# run NAME LIMIT ARGS...: the job in a group of its own limited to LIMIT bytes; its log in
# $work/NAME.log, its peak in $work/NAME.peak.
run() {
  local name=$1 limit=$2; shift 2
  local group
  group=$(cgroup_create "dstrain_memory_plan_$name" "$limit")
  echo "$limit" > "$work/$name.limit"
  groups+=("$group")
  ( cgroup_enter "$group"; exec "$@" ) > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  cgroup_peak "$group" > "$work/$name.peak"
  cgroup_remove "$group"
}
run small 1500000000 "$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=3 --steps 1
run stage3 1500000000 "$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=3 "${big[@]}" --steps 3
run stage0 2000000000 "$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=0 "${big[@]}" --steps 3
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
def plan(name):
    text = open(f"{work}/{name}.log").read()
    m = re.search(r"memory plan: predicted peak ([\d.]+) MB per rank \(([\d.]+) MB for the process and the engine \+ ([\d.]+) MB\)"
                  r" of a budget of ([\d.]+) MB \(([^)]*)", text)
    assert m, f"no memory plan line in the {name} run's log"
    print(f"{name}: {m.group(0)}")
    return float(m.group(3)), float(m.group(4)), m.group(5)
def peak(name):
    return int(open(f"{work}/{name}.peak").read()) / 1e6
small_above, _, _ = plan("small")
job_before = peak("small") - 2 * small_above
print(f"job before the model {job_before:.0f} MB (small run {peak('small'):.0f} MB less 2 x {small_above:.1f} MB planned)")
off = []
for stage in (3, 0):
    name = f"stage{stage}"
    above, budget, source = plan(name)
    limit = int(open(f"{work}/{name}.limit").read())
    assert "cgroup" in source, f"{name}: the budget came from {source}, not the cgroup"
    assert abs(budget - limit / 2 / 1e6) < 1, f"{name}: budget {budget} MB per rank, the cgroup allows {limit / 2e6} MB"
    predicted = job_before + 2 * above
    measured = peak(name)
    print(f"25M at ZeRO-{stage}, -np 2: predicted {predicted:.0f} MB, measured {measured:.0f} MB (cgroup), "
          f"ratio {measured / predicted:.3f}")
    if abs(measured - predicted) > 0.15 * predicted: off.append(name)
assert not off, f"the prediction is off by more than 15% at {off}"
PY
