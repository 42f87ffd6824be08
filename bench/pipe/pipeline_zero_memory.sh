#!/usr/bin/env bash
# Peak RSS per rank of the pipeline trainer at ZeRO 1, 2 and 3 (docs/pipeline.md, "ZeRO 2 and 3:
# memory"): a GPT of 8 blocks (width 512: 25M parameters, or 1024: 100M), context 64, vocabulary
# 256, micro-batch 2, 4 micro-batches, AdamW in fp32, 2 pipeline stages x RANKS/2 replicas.
# Stage 3 runs twice: as the planner chooses (the stage's parameters held whole through each batch)
# and gathered per module (stage3_max_live_parameters at 3 of the largest matrices); and once with
# offload_optimizer on NVMe. Each rank's peak RSS is its own process's maximum resident set, as GNU
# time reports it (not the trainer's figure, which is the largest rank's).
#   Usage: bench/pipe/pipeline_zero_memory.sh [BUILD_DIR] [STEPS]
#   Narrow it with the environment: WIDTH=1024 RANKS="4" NVME_DIR=/path/on/disk
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-3}
width=${WIDTH:-512}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
nvme=${NVME_DIR:-$work/nvme}
mkdir -p "$nvme"

# run NAME RANKS [--set ...]: the trainer under GNU time, one file of peak KB per rank.
run() {
  local name=$1 ranks=$2
  shift 2
  mpirun --oversubscribe --bind-to none -np "$ranks" sh -c 'exec /usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' \
    "$work/$name" "$build/apps/dstrain/dstrain" --config "$root/configs/pipeline.json" \
    --set dstrain.model.n_layer=8 --set dstrain.model.n_embd="$width" --set dstrain.model.n_head=8 \
    --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256 --set train_micro_batch_size_per_gpu=2 \
    --set gradient_accumulation_steps=4 --set train_batch_size=null --set pipeline.stages=2 \
    --set pipeline.partition=parameters --steps "$steps" "$@" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
}

for ranks in ${RANKS:-2 4}; do
  header="| ZeRO | gathers |"; rule="|---|---|"
  for ((r = 0; r < ranks; r++)); do
    header+=" rank $r (stage $((r / (ranks / 2)))) MB |"; rule+="---|"
  done
  echo "2 stages x $((ranks / 2)) replicas (-np $ranks), width $width:"
  echo "$header largest vs ZeRO 1 |"; echo "$rule---|"
  largest1=""
  for row in "1|" "2|" "3|held" "3|per module" "3 + NVMe optimizer|held"; do
    stage=${row%%|*}; mode=${row#*|}
    name="np${ranks}_$(echo "$row" | tr -c 'a-zA-Z0-9' _)"
    sets=(--set zero_optimization.stage="${stage%% *}")
    [ "$mode" = "per module" ] && sets+=(--set zero_optimization.stage3_max_live_parameters=$((3 * 4 * width * width)))
    [[ "$stage" == *NVMe* ]] && sets+=(--set zero_optimization.offload_optimizer.device=nvme
                                       --set zero_optimization.offload_optimizer.nvme_path="$nvme")
    run "$name" "$ranks" "${sets[@]}"
    if [ -n "$mode" ] && ! grep -q "gathered $( [ "$mode" = held ] && echo once || echo per)" "$work/$name.log"; then
      echo "stage 3 did not gather $mode" >&2; exit 1
    fi
    line="| $stage | ${mode:--} |"; largest=0
    for ((r = 0; r < ranks; r++)); do
      mb=$(( $(cat "$work/$name.$r") * 1024 / 1000000 ))  # GNU time's KiB
      line+=" $mb |"; (( mb > largest )) && largest=$mb
    done
    [ -z "$largest1" ] && largest1=$largest
    echo "$line $(awk -v a="$largest" -v b="$largest1" 'BEGIN { printf "%.3f", a / b }') |"
  done
  echo
done
