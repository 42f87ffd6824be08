#!/usr/bin/env bash
# Bigger than the box: a ~1B-parameter GPT trained at -np 2 under a 2 GB memory cgroup, its
# optimizer state and parameters on NVMe, from a config that sets only the ZeRO stage, the two
# offload devices and nvme_path: the memory planner chooses every other knob from the cap.
#
#   bench/offload/bigger_than_box.sh [BUILD] [FOLDER]
#
# The model: 20 layers x 2048 wide, 16 heads, context 64, vocabulary 4096, biases on:
# 1,015,689,216 parameters. The vocabulary is the first run's (configs/first_run.json): GPT-2's
# 50257 would put 103M parameters in the embedding alone, a table that is gathered whole for the
# first and the last module of every step and is not what "1B" measures; at 4096 it is 8.4M, no
# larger than one MLP matrix (2048 x 8192), so the working set is a block's, as in a real 1B model.
#
# First the disk: the swap files of both ranks, counted here from the shape (per rank: the
# optimizer's master, two Adam moments and gradient, 16 bytes per shard element; the parameter
# file, 4; and while the model is built, Init's build file, 4 more), each padded as the swappers
# pad; the run does not start when FOLDER's file system has less free. Then, under the cap (cgroup
# v1 memory.limit_in_bytes + memsw, or v2 memory.max + swap.max 0), STEPS optimizer steps. Then
# ds_io in the same folder at the same aio settings, one request the size of a swap_in (4 files x
# the sub-group the planner chose), two processes at once as the two ranks are, 3 times (medians).
# Then, when MemAvailable holds twice the in-memory run's predicted peak per rank (`dstrain plan`)
# with 3 GB to spare, the same model and steps in memory at ZeRO-3 without the 2 GB cap (in a
# group of its own 2 GB short of MemAvailable), for samples/s. Last, the disk's share of a step: rank
# 0's bytes at ds_io's rates, and against the in-memory step the ratio no schedule could beat here.
#
# Environment: CAP_MB (default 2048), STEPS (default 3: a 1B step takes minutes on 2 shared
# cores; the first step is dropped from the medians), LAYERS/WIDTH/HEADS/VOCAB/CONTEXT (default
# 20/2048/16/4096/64), IN_RAM (no | auto | yes; default no: on a machine shared with other work,
# MemAvailable at the start says little about the 5 minutes after it; auto runs it when
# MemAvailable holds the plan with 3 GB to spare, yes always), PIPELINE (no | yes: also
# offload_optimizer.pipeline_read and pipeline_write, as DeepSpeed's tutorials set them),
# STEP_IN_BACKWARD=no (dstrain.step_in_backward false: the step after backward, as before it),
# KEEP_WORK=DIR (the configs, logs and metrics go there and stay, instead of a temporary folder).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
nvme=${2:-$build/bigger_than_box_nvme}
cap_mb=${CAP_MB:-2048}
steps=${STEPS:-3}
layers=${LAYERS:-20} width=${WIDTH:-2048} heads=${HEADS:-16} vocab=${VOCAB:-4096} context=${CONTEXT:-64}
trainer="$build/apps/dstrain/dstrain"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
ulimit -l unlimited 2>/dev/null || true  # locked swap buffers, as ds_io's
mkdir -p "$nvme"
work=${KEEP_WORK:-$(mktemp -d)}; mkdir -p "$work"
cg="" memory_cg=""
cleanup() {
  for g in "$cg" "${memory_cg:-}"; do
    [ -n "$g" ] && [ -d "$g" ] && { rmdir "$g" 2>/dev/null || { sleep 1; rmdir "$g" 2>/dev/null; } || true; }
  done
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# The config: the model and its batch, and of zero_optimization only what issue 22 allows.
write_config() {  # file offload(yes|no)
  python3 - "$1" "$2" "$nvme" "$layers" "$width" "$heads" "$vocab" "$context" "${PIPELINE:-no}" "${STEP_IN_BACKWARD:-}" <<'PY'
import json, sys
path, offload, nvme, layers, width, heads, vocab, context, pipeline, step_in_backward = sys.argv[1:]
zero = {"stage": 3}
if offload == "yes":
    zero["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme}
    if pipeline == "yes":
        zero["offload_optimizer"].update({"pipeline_read": True, "pipeline_write": True})
    zero["offload_param"] = {"device": "nvme", "nvme_path": nvme}
json.dump({
    "train_micro_batch_size_per_gpu": 1,
    "steps_per_print": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": zero,
    "dstrain": {"model": {"type": "gpt", "n_layer": int(layers), "n_head": int(heads), "n_embd": int(width),
                          "block_size": int(context), "vocab_size": int(vocab), "dropout": 0.0},
                "data": {"type": "synthetic"},
                **({"step_in_backward": False} if step_in_backward == "no" else {})},
}, open(path, "w"), indent=1)
PY
}
write_config "$work/offload.json" yes
write_config "$work/memory.json" no

# Disk: what both ranks' swap files take at their largest, against what the folder's file system has.
read -r parameters needed free < <(python3 - "$nvme" "$layers" "$width" "$vocab" "$context" <<'PY'
import os, sys
nvme, L, C, V, T = sys.argv[1], *map(int, sys.argv[2:])
ranks = 2
numels = [V * C, T * C]
for _ in range(L):
    numels += [C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C]
numels += [C, C]
ceil = lambda a, b: -(-a // b)
pad = lambda n, m: ceil(n, m) * m
chunks = [ceil(n, ranks) for n in numels]
shard = sum(chunks)
optimizer = 4 * pad(shard, 1024) * 4          # master, exp_avg, exp_avg_sq, gradients
params = sum(pad(c, 1024) * 4 for c in chunks)  # params.swp: every chunk (max_in_cpu 0)
# Init's partition.swp: the chunks of parameters over the persistence threshold Init builds with (1e5).
build = sum(pad(c * 4, 4096) for n, c in zip(numels, chunks) if n > 100000)
fs = os.statvfs(nvme)
print(sum(numels), ranks * (optimizer + params + build), fs.f_bavail * fs.f_frsize)
PY
)
echo "## bigger than the box: GPT $layers x $width, $heads heads, context $context, vocabulary $vocab ($parameters parameters)"
echo "disk: the swap files of 2 ranks need $needed bytes at most (while the model is built), $nvme has $free free"
if (( free < needed )); then
  echo "not enough disk in $nvme: give a FOLDER on a file system with $needed bytes free" >&2
  exit 1
fi

# A memory cgroup limited to BYTES, with no swap to escape to: a child of this shell's group under
# v1; under v2 a child of the hierarchy's root (a v2 group with processes of its own cannot hand the
# memory controller down). Prints its path; its peak is in "$1/$(peak_name)".
make_group() {  # NAME BYTES
  local group
  if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    group="/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)"
    group="${group%/}/$1_$$"
    mkdir "$group"
    echo "$2" > "$group/memory.limit_in_bytes"
    echo "$2" > "$group/memory.memsw.limit_in_bytes" 2>/dev/null || true
  else
    local v2=/sys/fs/cgroup
    [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && v2=/sys/fs/cgroup/unified
    grep -qw memory "$v2/cgroup.controllers" || { echo "no cgroup memory controller (v1 or v2)" >&2; return 1; }
    grep -qw memory "$v2/cgroup.subtree_control" || echo +memory > "$v2/cgroup.subtree_control"
    group="$v2/$1_$$"
    mkdir "$group"
    echo "$2" > "$group/memory.max"
    echo 0 > "$group/memory.swap.max" 2>/dev/null || true
  fi
  echo "$group"
}
peak_name() { [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] && echo memory.max_usage_in_bytes || echo memory.peak; }
cg=$(make_group dstrain_bigger_than_box $((cap_mb * 1024 * 1024)))
peak_file="$cg/$(peak_name)"

# Medians over steps 2.. of a metrics file.
median() {  # expr file
  python3 - "$@" <<'PY'
import json, statistics, sys
expr, f = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(f)]
lines = lines[1:] or lines
print(f"{statistics.median(eval(expr, {}, {'m': m}) for m in lines):.3f}")
PY
}

echo "running $steps steps under a ${cap_mb} MB cap ($cg)"
set +e
start=$(date +%s)
bash -c "echo \$\$ > $cg/cgroup.procs && exec mpirun --oversubscribe --bind-to none -np 2 $trainer \
  --config $work/offload.json --steps $steps --metrics $work/capped.jsonl --progress off" > "$work/capped.log" 2>&1
rc=$?
set -e
wall=$(( $(date +%s) - start ))
peak=$(cat "$peak_file")
grep -m1 "memory plan:" "$work/capped.log" | cut -c1-1200 || true
if [ "$rc" != 0 ] || [ ! -s "$work/capped.jsonl" ]; then
  echo "the capped run failed (exit $rc) after $wall s, peak $peak bytes; its log's end:"
  tail -15 "$work/capped.log" | cut -c1-400
  exit 1
fi
sub_group=$(grep -m1 -o 'sub_group_size [0-9]*' "$work/capped.log" | awk '{print $2}')
step_s=$(median '2 / m["samples_per_sec"]' "$work/capped.jsonl")
capped_sps=$(median 'm["samples_per_sec"]' "$work/capped.jsonl")
swap_r=$(median 'm["nvme_read_bytes"] / m["nvme_read_seconds"] / 1e9' "$work/capped.jsonl")
swap_w=$(median 'm["nvme_write_bytes"] / m["nvme_write_seconds"] / 1e9' "$work/capped.jsonl")
swap_gb=$(median '(m["nvme_read_bytes"] + m["nvme_write_bytes"]) / 1e9' "$work/capped.jsonl")
waited=$(median 'm["nvme_wait_seconds"]' "$work/capped.jsonl")
rss=$(tail -1 "$work/capped.jsonl" | python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["peak_rss_mb"])')

# ds_io at the swappers' aio settings (the config's defaults), one swap_in's bytes per request.
request=$(( 4 * 4 * ${sub_group:-1048576} ))
# Two processes at once, as the two ranks share the disk; the rate per process.
io=("$build/apps/ds_io/ds_io" --folder "$nvme" --io_size "$request" --block_size 1M --queue_depth 8 --io_parallel 1
    --handle --loops 5 --multi_process 2)
# Three times, the median of each: one ds_io run alone read 0.91 to 1.41 GB/s here on a quiet
# machine, which moved a run's ratio more than the swap did.
writes=() reads=()
for _ in 1 2 3; do
  writes+=("$("${io[@]}" | awk '/^aggregate write/ {printf "%.3f", $3 / 2}')")
  reads+=("$("${io[@]}" --read | awk '/^aggregate read/ {printf "%.3f", $3 / 2}')")
done
ds_w=$(printf '%s\n' "${writes[@]}" | sort -n | sed -n 2p)
ds_r=$(printf '%s\n' "${reads[@]}" | sort -n | sed -n 2p)
rm -f "$nvme"/ds_io_*.dat

# In memory, without the cap, when this machine has the room.
in_ram=${IN_RAM:-no} memory_sps="" memory_note=""
predicted=$("$trainer" plan --config "$work/memory.json" --world 2 | python3 -c '
import sys
print(next(int(float(l.split()[2]) * 1e6) for l in sys.stdin if "predicted peak" in l))')
available=$(python3 -c 'print(next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable")))')
if [ "$in_ram" = auto ]; then
  if (( 2 * predicted + 3000000000 <= available )); then in_ram=yes; else in_ram=no; fi
fi
if [ "$in_ram" = yes ]; then
  # Its own group, 2 GB short of what is available: if it outgrows the prediction, it is the one
  # the kernel stops, not whatever else runs on the machine.
  memory_cg=$(make_group dstrain_bigger_than_box_memory $((available - 2000000000)))
  bash -c "echo \$\$ > $memory_cg/cgroup.procs && exec mpirun --oversubscribe --bind-to none -np 2 $trainer \
    --config $work/memory.json --steps $steps --metrics $work/memory.jsonl --progress off" > "$work/memory.log" 2>&1 || true
  memory_peak=$(( $(cat "$memory_cg/$(peak_name)") / 1000000 ))
  [ -s "$work/memory.jsonl" ] && memory_sps=$(median 'm["samples_per_sec"]' "$work/memory.jsonl")
  memory_note="in memory: predicted $((predicted / 1000000)) MB per rank (dstrain plan), cgroup peak $memory_peak MB"
  [ -z "$memory_sps" ] && memory_note="in-memory run failed (cgroup peak $memory_peak MB): $(grep -m1 -iE "error|killed" "$work/memory.log" | cut -c1-200)"
else
  memory_note="in memory not run (IN_RAM=$in_ram): 2 ranks x $((predicted / 1000000)) MB predicted (dstrain plan), MemAvailable $((available / 1000000)) MB"
fi

echo
echo "| cap MB | peak MB (cgroup) | peak RSS MB (largest rank) | s/step | waited on swap s | swap GB/step (rank 0) | swap read / write GB/s (rank 0) | ds_io read / write GB/s per process (2 at once) | samples/s | in memory samples/s | ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
ratio="-"
[ -n "$memory_sps" ] && ratio=$(python3 -c "print(f'{$capped_sps / $memory_sps:.3f}')")
echo "| $cap_mb | $((peak / 1000000)) | $rss | $step_s | $waited | $swap_gb | $swap_r / $swap_w | $ds_r / $ds_w | $capped_sps | ${memory_sps:--} | $ratio |"
echo "steps: $steps (medians over steps 2-$steps), wall $wall s including start; sub_group_size $sub_group; ds_io request $request bytes"
[ -n "$memory_note" ] && echo "$memory_note"
# The disk's share of a step: rank 0's bytes at ds_io's rates (each measured alone, both processes
# at once), reads then writes. A step can be no shorter, so against the in-memory step it bounds
# the ratio any schedule could reach on this disk.
read_gb=$(median 'm["nvme_read_bytes"] / 1e9' "$work/capped.jsonl")
write_gb=$(median 'm["nvme_write_bytes"] / 1e9' "$work/capped.jsonl")
python3 - "$read_gb" "$write_gb" "$ds_r" "$ds_w" "$step_s" "${memory_sps:-0}" <<'PY2'
import sys
read_gb, write_gb, ds_r, ds_w, step_s, memory_sps = map(float, sys.argv[1:])
disk_s = read_gb / ds_r + write_gb / ds_w
line = (f"the disk alone: {read_gb:.2f} GB read at {ds_r:.3f} GB/s + {write_gb:.2f} GB written at {ds_w:.3f} GB/s = "
        f"{disk_s:.1f} s a step (rank 0), against {step_s:.1f} s")
if memory_sps > 0:
    memory_s = 2 / memory_sps
    line += f"; in memory {memory_s:.1f} s a step, so at most {min(1.0, memory_s / disk_s):.2f}x on this disk"
print(line)
PY2
exit 0
