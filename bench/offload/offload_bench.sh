#!/usr/bin/env bash
# ZeRO-Infinity optimizer and parameter offload (docs/offload.md): three measurements with the trainer.
#   Usage: bench/offload/offload_bench.sh [BUILD_DIR] [NVME_FOLDER] [what...]
#   what: bandwidth | checksum | overhead | memcap | user | phases (default: the first four)
#
# bandwidth  swap GB/s inside the step (pipelining off, so each transfer's queue-to-completion
#            time is the transfer itself) against ds_io at the same aio settings, same folder,
#            moving one swap_in's bytes (4 files x one sub-group: 3 optimizer shards and the
#            gradient) as one request; then the same for the parameters (ZeRO-3, one buffer,
#            ds_io moving one buffer); RUNS alternations.
# checksum   the swappers' CRC-32C (computed on the handle's workers) against the swap bandwidth:
#            ds_io at the same aio settings moving CHECKSUM_BYTES (default 128M) with and without
#            --checksum, alternating RUNS times, write then read; medians and their ratio.
# overhead   median step seconds in memory vs offloaded with pipelining off / read+write on, and the
#            median seconds the step waited on I/O (nvme_wait_seconds); RUNS alternations.
# memcap     the ~300M GPT of docs/offload.md (24 layers x 1024, ctx 64, micro 1, fp32, AdamW, ZeRO-3, -np 2)
#            under cgroup v1 memory limits (CAPS, default "1536 6144" MB), in memory ("memory"),
#            with the optimizer on NVMe ("nvme", pipelining off) and with the optimizer and the
#            parameters on NVMe ("both"; MEMCAP_MODES picks): killed or not, peak usage
#            (memory.max_usage_in_bytes), the trainer's peak RSS of the largest rank and its RSS
#            before the model was built, samples/s.
# user       the config a user writes: ZeRO-3, the optimizer and the parameters on NVMe, nvme_path,
#            pipeline_read/write on, nothing else (the memory planner sizes the rest), against the
#            same model in memory (also only stage 3), USER_NP ranks (default 2), alternated RUNS
#            times, wall_clock_breakdown on for both: median step s, samples/s and their ratio, the
#            nvme wait per step, the swap's read and write GB/s (rank 0, bytes over the process's
#            time with reads, writes, in flight) against ds_io at the planner's aio settings moving one optimizer swap_in's bytes
#            in the same folder with USER_NP processes at once (per process: aggregate / USER_NP),
#            and the forward / backward / step milliseconds of each side. Also ds_io's read rate
#            while USER_NP other ds_io processes write the same bytes in the same folder (the step
#            reads while it writes; docs/offload.md, "Write-behind"), beside the reads alone.
#            USER_LAYERS x USER_WIDTH (default 8 x 1024, ~100M; 24 x 1024 is the ~300M GPT).
#            USER_ACCUM micro-batches a step (default 1): the swap's bytes per step do not grow with
#            it, the compute does. USER_SETS: more --set options for every side (e.g. "--set
#            gradient_clipping=0": configs/default.json clips at 1.0, which keeps the step after
#            backward; DeepSpeed's default is 0).
#            BEFORE=<another build dir>: its trainer's offloaded run too, in the same alternation
#            (side "nvme-before"), to compare a change with the tree before it in one sitting.
#            KEPT=yes: also the offloaded run with dstrain.step_in_backward false (side "nvme-kept":
#            the step after backward, the last sub-groups kept in memory between steps).
# phases     the user config offloaded, RUNS times, under disk_phases.py: the whole device's GB read
#            and written, GB/s and busy share in forward, backward and the optimizer step.
# Environment: RUNS (default 5), STEPS (default 6; the first step is dropped from medians),
#   AIO ("block_size queue_depth thread_count", default "1048576 8 1"), SUB_GROUP (elements,
#   default 1e8), WIDTH/LAYERS of the bandwidth and overhead model (default 1024 x 8: ~100M params),
#   CAPS, MEMCAP_STEPS (default 3), MEMCAP_MODES (default "memory nvme both").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
nvme=${2:-$build/offload_bench_nvme}
shift $(( $# > 2 ? 2 : $# ))
what=${*:-bandwidth checksum overhead memcap}
user_np=${USER_NP:-2}
user_accum=${USER_ACCUM:-1}
runs=${RUNS:-5}
steps=${STEPS:-6}
read -r block queue threads <<< "${AIO:-1048576 8 1}"
sub_group=${SUB_GROUP:-100000000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
ulimit -l unlimited 2>/dev/null || true  # locked swap buffers, as ds_io's
mkdir -p "$nvme"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
trainer="$build/apps/dstrain/dstrain"

model_sets() {  # layers width
  echo --set dstrain.model.n_layer=$1 --set dstrain.model.n_embd=$2 --set dstrain.model.n_head=8 \
       --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256 \
       --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=1 \
       --set zero_optimization.reduce_bucket_size=$(($2 * $2)) \
       --set zero_optimization.stage3_prefetch_bucket_size=$(($2 * $2 * 9 / 10)) \
       --set zero_optimization.stage3_param_persistence_threshold=$(($2 * 10)) \
       --set steps_per_print=1000
}
offload_sets() {  # pipeline_read pipeline_write
  echo --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=$nvme \
       --set zero_optimization.offload_optimizer.pipeline_read=$1 --set zero_optimization.offload_optimizer.pipeline_write=$2 \
       --set zero_optimization.offload_optimizer.buffer_count=12 --set zero_optimization.sub_group_size=$sub_group \
       --set aio.block_size=$block --set aio.queue_depth=$queue --set aio.intra_op_parallelism=$threads
}
param_offload_sets() {  # every chunk on NVMe (max_in_cpu 0), DeepSpeed's 5 buffers
  echo --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path=$nvme \
       --set zero_optimization.offload_param.buffer_count=5 --set zero_optimization.offload_param.max_in_cpu=0
}
# Median over the runs' metrics files of a per-run value (the median over steps 2.. of FIELD, or
# bytes/seconds of a pair of fields).
median() {  # expr files...
  python3 - "$@" <<'PY'
import json, statistics, sys
expr, files = sys.argv[1], sys.argv[2:]
per_run = []
for f in files:
    lines = [json.loads(l) for l in open(f)][1:]
    per_run.append(statistics.median(eval(expr, {}, {"m": m}) for m in lines))
print(f"{statistics.median(per_run):.4f}")
PY
}

# ds_io at the same aio settings in the same folder, one request of BYTES, written then read.
ds_io_runs() {  # bytes prefix run
  local io=("$build/apps/ds_io/ds_io" --folder "$nvme" --io_size "$1" --block_size "$block" --queue_depth "$queue"
            --io_parallel "$threads" --handle --loops 3)
  "${io[@]}" > "$2w$3.txt"
  "${io[@]}" --read > "$2r$3.txt"
  rm -f "$nvme"/ds_io_*.dat
}
# The swap GB/s in the step (medians over the runs' metrics PREFIX*.jsonl) against ds_io's
# (medians over DS_PREFIX{r,w}*.txt).
bandwidth_table() {  # prefix ds_prefix
  local swap_r swap_w ds_r ds_w
  swap_r=$(median 'm["nvme_read_bytes"] / m["nvme_read_seconds"] / 1e9' "$1"*.jsonl)
  swap_w=$(median 'm["nvme_write_bytes"] / m["nvme_write_seconds"] / 1e9' "$1"*.jsonl)
  ds_r=$(grep -h '^aggregate read' "$2"r*.txt | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  ds_w=$(grep -h '^aggregate write' "$2"w*.txt | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| op | swap in step GB/s | ds_io GB/s | ratio |"
  echo "|---|---:|---:|---:|"
  echo "| read | $swap_r | $ds_r | $(python3 -c "print(f'{$swap_r / $ds_r:.3f}')") |"
  echo "| write | $swap_w | $ds_w | $(python3 -c "print(f'{$swap_w / $ds_w:.3f}')") |"
}

layers=${LAYERS:-8}
width=${WIDTH:-1024}
if [[ " $what " == *" bandwidth "* ]]; then
  echo "## bandwidth: $layers x $width GPT, ZeRO-1, -np 1, aio block $block qd $queue threads $threads, sub_group_size $sub_group"
  for r in $(seq "$runs"); do
    "$trainer" --config "$root/configs/default.json" $(model_sets "$layers" "$width") --set zero_optimization.stage=1 \
      $(offload_sets false false) --steps "$steps" --metrics "$work/bw$r.jsonl" > "$work/bw$r.log" 2>&1
    group_bytes=$(grep -o 'sub-group(s) of [0-9]*' "$work/bw$r.log" | awk '{print $3 * 4 * 4}')
    ds_io_runs "$group_bytes" "$work/ds" "$r"
  done
  echo "request bytes (one swap_in): $group_bytes"
  bandwidth_table "$work/bw" "$work/ds"

  # Parameters: ZeRO-3 on one rank, only the parameters on NVMe, one buffer; ds_io moves one buffer
  # (the largest chunk) per request, at least the step's mean request. The swapper's seconds are
  # the time its transfers were in flight (RawAioHandle::busy_seconds), so a read queued ahead
  # while the previous module computes counts only its transfer time.
  echo "## parameter swap bandwidth: same GPT, ZeRO-3, -np 1, offload_param nvme, buffer_count 1, max_in_cpu 0"
  for r in $(seq "$runs"); do
    "$trainer" --config "$root/configs/default.json" $(model_sets "$layers" "$width") --set zero_optimization.stage=3 \
      $(param_offload_sets) --set zero_optimization.offload_param.buffer_count=1 \
      --set aio.block_size=$block --set aio.queue_depth=$queue --set aio.intra_op_parallelism=$threads \
      --steps "$steps" --metrics "$work/pbw$r.jsonl" > "$work/pbw$r.log" 2>&1
    chunk_bytes=$(grep -o 'buffers of [0-9]* elements' "$work/pbw$r.log" | head -1 | awk '{print $3 * 4}')
    ds_io_runs "$chunk_bytes" "$work/pds" "$r"
  done
  echo "request bytes (one buffer): $chunk_bytes"
  bandwidth_table "$work/pbw" "$work/pds"
fi

if [[ " $what " == *" checksum "* ]]; then
  bytes=${CHECKSUM_BYTES:-128M}
  echo "## checksum cost: ds_io $bytes, aio block $block qd $queue threads $threads, $runs alternations, medians"
  io=("$build/apps/ds_io/ds_io" --folder "$nvme" --io_size "$bytes" --block_size "$block" --queue_depth "$queue"
      --io_parallel "$threads" --handle --loops 3)
  for r in $(seq "$runs"); do
    for c in plain crc; do
      flag=(); [ $c = crc ] && flag=(--checksum)
      "${io[@]}" "${flag[@]}" > "$work/ck-$c-w$r.txt"
      "${io[@]}" "${flag[@]}" --read > "$work/ck-$c-r$r.txt"
    done
  done
  rm -f "$nvme"/ds_io_*.dat
  med() { grep -h "^aggregate $1" $2 | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  echo "| op | GB/s without | GB/s with CRC-32C | with / without |"
  echo "|---|---:|---:|---:|"
  for op in write read; do
    without=$(med $op "$work/ck-plain-${op:0:1}*.txt") with=$(med $op "$work/ck-crc-${op:0:1}*.txt")
    echo "| $op | $without | $with | $(python3 -c "print(f'{$with / $without:.3f}')") |"
  done
fi

if [[ " $what " == *" overhead "* ]]; then
  echo "## overhead: $layers x $width GPT, ZeRO-2, -np 2, medians of $runs alternated runs (steps 2-$steps)"
  modes=("memory" "nvme:false:false" "nvme:true:true")
  for r in $(seq "$runs"); do
    for mode in "${modes[@]}"; do
      sets=$(model_sets "$layers" "$width")
      [[ $mode == nvme:* ]] && IFS=: read -r _ pr pw <<< "$mode" && sets="$sets $(offload_sets "$pr" "$pw")"
      mpirun --oversubscribe --bind-to none -np 2 "$trainer" --config "$root/configs/default.json" $sets \
        --set zero_optimization.stage=2 --steps "$steps" --metrics "$work/ov-${mode//:/_}-$r.jsonl" > /dev/null 2>&1
    done
  done
  echo "| run | step s | nvme_wait_seconds | read GB | write GB |"
  echo "|---|---:|---:|---:|---:|"
  for mode in "${modes[@]}"; do
    files=("$work"/ov-${mode//:/_}-*.jsonl)
    echo "| $mode | $(median '1 / m["samples_per_sec"] * 2' "${files[@]}") | $(median 'm["nvme_wait_seconds"]' "${files[@]}") |" \
         "$(median 'm["nvme_read_bytes"] / 1e9' "${files[@]}") | $(median 'm["nvme_write_bytes"] / 1e9' "${files[@]}") |"
  done
fi

if [[ " $what " == *" memcap "* ]]; then
  cg=/sys/fs/cgroup/memory/dstrain_offload_bench_$$
  echo "## memory cap: 24 x 1024 GPT (~300M parameters), ZeRO-3, fp32, AdamW, -np 2, ${MEMCAP_STEPS:-3} steps"
  echo "| cap MB | run | exit | peak MB (cgroup) | peak RSS MB (largest rank) | RSS before the model MB | samples/s (last step) |"
  echo "|---:|---|---:|---:|---:|---:|---:|"
  for cap_mb in ${CAPS:-1536 6144}; do
  for mode in ${MEMCAP_MODES:-memory nvme both}; do
    mkdir "$cg"
    echo $((cap_mb * 1024 * 1024)) > "$cg/memory.limit_in_bytes"
    # No swap to escape to, where the kernel lets us say so.
    echo $((cap_mb * 1024 * 1024)) > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
    # overlap_comm off: with it the stage-3 reducer keeps a whole fp32 gradient alive through
    # backward (docs/zero.md), 1.2 GB per rank here.
    sets="$(model_sets 24 1024) --set zero_optimization.stage=3 --set zero_optimization.overlap_comm=false"
    # Pipelining off: one sub-group of buffers in memory.
    [ "$mode" != memory ] && sets="$sets $(offload_sets false false)"
    [ "$mode" = both ] && sets="$sets $(param_offload_sets)"
    rm -f "$work/cap-$mode.jsonl"  # the metrics file appends: a killed run must show no figures
    set +e
    bash -c "echo \$\$ > $cg/cgroup.procs && exec mpirun --oversubscribe --bind-to none -np 2 $trainer \
      --config $root/configs/default.json $sets --steps ${MEMCAP_STEPS:-3} --metrics $work/cap-$mode.jsonl" \
      > "$work/cap-$mode.log" 2>&1
    rc=$?
    set -e
    peak=$(( $(cat "$cg/memory.max_usage_in_bytes") / 1000000 ))
    figures=$( [ -s "$work/cap-$mode.jsonl" ] && tail -1 "$work/cap-$mode.jsonl" | python3 -c 'import json,sys; m = json.load(sys.stdin); print("| %.0f | %.0f | %.3f" % (m["peak_rss_mb"], m["baseline_rss_mb"], m["samples_per_sec"]))' || echo "| - | - | -")
    echo "| $cap_mb | $mode | $rc | $peak $figures |"
    [ "$rc" != 0 ] && tail -2 "$work/cap-$mode.log" | cut -c1-200 | sed 's/^/    /'
    rmdir "$cg" 2>/dev/null || { sleep 1; rmdir "$cg"; }
  done
  done
fi

# The user config (docs/offload.md, "Swap speed"): only the stage, the offload devices, nvme_path and
# pipelining set.
ulayers=${USER_LAYERS:-8} uwidth=${USER_WIDTH:-1024}
user_model=(--set dstrain.model.n_layer=$ulayers --set dstrain.model.n_embd=$uwidth --set dstrain.model.n_head=8
            --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256 --set train_micro_batch_size_per_gpu=1
            --set gradient_accumulation_steps=$user_accum --set steps_per_print=1000 --set wall_clock_breakdown=true
            --set zero_optimization.stage=3 ${USER_SETS:-})
user_nvme=(--set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=$nvme
           --set zero_optimization.offload_optimizer.pipeline_read=true --set zero_optimization.offload_optimizer.pipeline_write=true
           --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path=$nvme)

if [[ " $what " == *" user "* ]]; then
  echo "## user config: $ulayers x $uwidth GPT, ZeRO-3, -np $user_np, micro 1 x accumulation $user_accum, planner's sizes, medians of $runs alternated runs (steps 2-$steps)"
  sides="memory nvme${KEPT:+ nvme-kept}${BEFORE:+ nvme-before}"
  for r in $(seq "$runs"); do
    for side in $sides; do
      sets=("${user_model[@]}"); [ $side != memory ] && sets+=("${user_nvme[@]}")
      [ $side = nvme-kept ] && sets+=(--set dstrain.step_in_backward=false)
      side_trainer=$trainer; [ $side = nvme-before ] && side_trainer="$BEFORE/apps/dstrain/dstrain"
      mpirun --oversubscribe --bind-to none -np "$user_np" "$side_trainer" --config "$root/configs/default.json" "${sets[@]}" \
        --steps "$steps" --metrics "$work/user-$side-run$r.jsonl" > "$work/user-$side-run$r.log" 2>&1
    done
    # ds_io at the aio block the trainer used (the planner leaves it at DeepSpeed's defaults unless set),
    # one swap_in's bytes per process, as many processes as ranks.
    group_bytes=$(grep -o 'sub-group(s) of [0-9]*' "$work/user-nvme-run$r.log" | head -1 | awk '{print $3 * 4 * 4}')
    io=("$build/apps/ds_io/ds_io" --folder "$nvme" --io_size "$group_bytes" --handle --loops 3 --multi_process "$user_np")
    "${io[@]}" > "$work/uds-w$r.txt"
    "${io[@]}" --read > "$work/uds-r$r.txt"
    # The same reads while as many other processes write (in a folder of their own, their files
    # named as the readers'), three times as many loops so that they outlast the reads.
    mkdir -p "$nvme/writers"
    "$build/apps/ds_io/ds_io" --folder "$nvme/writers" --io_size "$group_bytes" --handle --loops 9 --multi_process "$user_np" \
      > "$work/uds-mixed-w$r.txt" & writers=$!
    "${io[@]}" --read > "$work/uds-mixed-r$r.txt"
    wait $writers
    rm -rf "$nvme"/ds_io_*.dat "$nvme/writers"
  done
  mem=("$work"/user-memory-run*.jsonl) off=("$work"/user-nvme-run*.jsonl)
  step_mem=$(median "1 / m['samples_per_sec'] * $user_np * $user_accum" "${mem[@]}")
  step_off=$(median "1 / m['samples_per_sec'] * $user_np * $user_accum" "${off[@]}")
  echo "request bytes (one swap_in): $group_bytes"
  echo "| side | step s | samples/s | forward ms | backward ms | step ms | nvme wait s / step | read GB/s | write GB/s | read GB / step | write GB / step |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for side in $sides; do
    files=("$work"/user-$side-run*.jsonl)
    rates="- | - | - | -"
    [ $side != memory ] && rates="$(median 'm["nvme_read_bytes"] / m["nvme_read_seconds"] / 1e9' "${files[@]}") | $(median 'm["nvme_write_bytes"] / m["nvme_write_seconds"] / 1e9' "${files[@]}") | $(median 'm["nvme_read_bytes"] / 1e9' "${files[@]}") | $(median 'm["nvme_write_bytes"] / 1e9' "${files[@]}")"
    echo "| $side | $(median "1 / m['samples_per_sec'] * $user_np * $user_accum" "${files[@]}") | $(median 'm["samples_per_sec"]' "${files[@]}") |" \
         "$(median 'm["breakdown_ms"]["forward"]' "${files[@]}") | $(median 'm["breakdown_ms"]["backward"]' "${files[@]}") |" \
         "$(median 'm["breakdown_ms"]["step"]' "${files[@]}") | $(median 'm["nvme_wait_seconds"]' "${files[@]}") | $rates |"
  done
  ds_r=$(grep -h '^aggregate read' "$work"/uds-r*.txt | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  ds_w=$(grep -h '^aggregate write' "$work"/uds-w*.txt | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  swap_r=$(median 'm["nvme_read_bytes"] / m["nvme_read_seconds"] / 1e9' "${off[@]}")
  swap_w=$(median 'm["nvme_write_bytes"] / m["nvme_write_seconds"] / 1e9' "${off[@]}")
  echo "offloaded / in memory samples/s: $(python3 -c "print(f'{$step_mem / $step_off:.3f}')")"
  echo "| op | swap GB/s (rank 0) | ds_io GB/s per process ($user_np at once) | ratio |"
  echo "|---|---:|---:|---:|"
  echo "| read | $swap_r | $(python3 -c "print(f'{$ds_r / $user_np:.3f}')") | $(python3 -c "print(f'{$swap_r * $user_np / $ds_r:.3f}')") |"
  echo "| write | $swap_w | $(python3 -c "print(f'{$ds_w / $user_np:.3f}')") | $(python3 -c "print(f'{$swap_w * $user_np / $ds_w:.3f}')") |"
  ds_mixed=$(grep -h '^aggregate read' "$work"/uds-mixed-r*.txt | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| read, ds_io reading while $user_np others write | $swap_r | $(python3 -c "print(f'{$ds_mixed / $user_np:.3f}')") | $(python3 -c "print(f'{$swap_r * $user_np / $ds_mixed:.3f}')") |"
  for side in $sides; do
    [ $side = memory ] || [ $side = nvme ] && continue
    other=("$work"/user-$side-run*.jsonl)
    step_other=$(median "1 / m['samples_per_sec'] * $user_np * $user_accum" "${other[@]}")
    swap_r=$(median 'm["nvme_read_bytes"] / m["nvme_read_seconds"] / 1e9' "${other[@]}")
    swap_w=$(median 'm["nvme_write_bytes"] / m["nvme_write_seconds"] / 1e9' "${other[@]}")
    echo "$side: offloaded / in memory samples/s: $(python3 -c "print(f'{$step_mem / $step_other:.3f}')")," \
         "read $(python3 -c "print(f'{$swap_r * $user_np / $ds_r:.3f}')") x ds_io, write $(python3 -c "print(f'{$swap_w * $user_np / $ds_w:.3f}')") x ds_io"
  done
fi

if [[ " $what " == *" phases "* ]]; then
  device=$(basename "$(findmnt -no SOURCE -T "$nvme")")
  grep -qw "$device" /proc/diskstats || { echo "phases: $nvme is on $device, which /proc/diskstats does not list" >&2; exit 1; }
  echo "## disk phases: user config offloaded ($ulayers x $uwidth GPT, -np $user_np), device $device, $runs runs of $steps steps"
  for r in $(seq "$runs"); do
    echo "### run $r (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 "$root/bench/offload/disk_phases.py" "$device" "$work/phases$r.jsonl" -- \
      mpirun --oversubscribe --bind-to none -np "$user_np" "$trainer" --config "$root/configs/default.json" \
      "${user_model[@]}" "${user_nvme[@]}" --steps "$steps" --metrics "$work/phases$r.jsonl" > "$work/phases$r.txt" 2> "$work/phases$r.err" \
      || { tail -5 "$work/phases$r.err" >&2; exit 1; }
    sed -n '/^| steps 2/,$p' "$work/phases$r.txt"
  done
fi
