#!/usr/bin/env bash
# Memory while the model is built and handed to the engine, with both offloads on NVMe: the ~300M
# GPT (24 layers x 1024, ctx 64, vocab 256, ~300M parameters), ZeRO-3, fp32, AdamW, -np 2, one step,
# the memcap configuration of offload_bench.sh without the cgroup.
#
#   bench/offload/build_rss.sh FOLDER TRAINER [TRAINER...]    # e.g. an old and a new build's dstrain
#
# Each trainer runs RUNS times (default 3), alternated. Every 0.1 s the VmRSS/VmHWM of both ranks is
# sampled (/proc/<pid>/status); the trainer's log lines are stamped as they come. Per run it prints,
# for the largest rank: the RSS before the model (the trainer's baseline_rss_mb); the high-water mark
# (VmHWM) in the last sample before rank 0 logs "offload_optimizer:" (the engine's first line: the
# model is built) and before "engine: ZeRO stage" (the engine has taken the model over); the peak
# after step 1 (the trainer's peak_rss_mb); then the medians per trainer. KEEP=DIR keeps the logs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
folder=$1; shift
runs=${RUNS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$folder"
work=${KEEP:-$(mktemp -d)}; [ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT; mkdir -p "$work"
sets="--set dstrain.model.n_layer=24 --set dstrain.model.n_embd=1024 --set dstrain.model.n_head=8
  --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256
  --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=1
  --set zero_optimization.stage=3 --set zero_optimization.overlap_comm=false
  --set zero_optimization.reduce_bucket_size=1048576 --set zero_optimization.stage3_prefetch_bucket_size=943718
  --set zero_optimization.stage3_param_persistence_threshold=10240
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=$folder
  --set zero_optimization.offload_optimizer.buffer_count=9 --set zero_optimization.sub_group_size=10000000
  --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path=$folder
  --set zero_optimization.offload_param.buffer_count=5 --set zero_optimization.offload_param.max_in_cpu=0"

for r in $(seq "$runs"); do
  for t in $(seq $#); do
    trainer=${!t}
    out="$work/t$t-r$r"
    mpirun --oversubscribe --bind-to none -np 2 "$trainer" --config "$root/configs/default.json" $sets --steps 1 \
      --metrics "$out.jsonl" 2>&1 | while IFS= read -r line; do echo "$(date +%s.%N) $line"; done > "$out.log" &
    job=$!
    while kill -0 "$job" 2>/dev/null; do
      for pid in $(pgrep -f -x "$trainer .*--metrics $out.jsonl" || true); do
        awk -v t="$(date +%s.%N)" -v p="$pid" '/^VmRSS|^VmHWM/ {v[$1] = $2} END {print t, p, v["VmRSS:"] * 1024 / 1e6, v["VmHWM:"] * 1024 / 1e6}' \
          "/proc/$pid/status" 2>/dev/null || true
      done
      sleep 0.1
    done > "$out.rss"
    wait "$job"
    python3 - "$out" "$trainer" <<'PY'
import json, sys
out, trainer = sys.argv[1], sys.argv[2]
def logged(text):
    return min(float(l.split()[0]) for l in open(out + ".log") if text in l)
def high_water_before(when):
    hwm = {}
    for line in open(out + ".rss"):
        t, pid, rss, peak = line.split()
        if float(t) < when:
            hwm[pid] = max(hwm.get(pid, 0.0), float(peak))
    return max(hwm.values())
built = high_water_before(logged("offload_optimizer:"))
ready = high_water_before(logged("engine: ZeRO stage"))
m = json.loads(open(out + ".jsonl").readline())
print(f"{trainer}: before the model {m['baseline_rss_mb']:.0f} MB, model built {built:.0f} MB, "
      f"engine ready {ready:.0f} MB, after step 1 {m['peak_rss_mb']:.0f} MB")
with open(out + ".sum", "w") as f:
    f.write(f"{m['baseline_rss_mb']} {built} {ready} {m['peak_rss_mb']}\n")
PY
  done
done
echo "| trainer | before the model MB | model built MB (peak) | engine ready MB (peak) | after step 1 MB (peak) |"
echo "|---|---:|---:|---:|---:|"
for t in $(seq $#); do
  python3 - "${!t}" "$work"/t$t-r*.sum <<'PY'
import statistics, sys
rows = [list(map(float, open(f).read().split())) for f in sys.argv[2:]]
cols = [statistics.median(c) for c in zip(*rows)]
print("| " + sys.argv[1] + " | " + " | ".join(f"{c:.0f}" for c in cols) + " |")
PY
done
