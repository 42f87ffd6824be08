#!/usr/bin/env bash
# Memory per rank of OneBitAdam at ZeRO stages 0-2 beside Adam's (docs/optimizers.md, "ZeRO-1 and
# ZeRO-2"): the 25M GPT of memory_plan_table.sh (8 x 512, vocab 256, ctx 64, micro-batch 2, fp32),
# freeze_step 3, run past the freeze so the local gradients and the kept momentum bits are live.
# Per run: the engine's model-state bytes at the last step (model_state_bytes(), the trainer's
# line), GNU time's maximum resident set of each rank (the largest), and the memory plan's predicted
# peak (the engine's logged plan).
#   Usage: bench/engine/onebit_memory_plan.sh [BUILD_DIR] [STEPS]
#          (RANKS="2", RUNS="OneBitAdam:0 OneBitAdam:2": optimizer:stage pairs)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-6}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "| np | optimizer | stage | model state MB (params, grads, optim) | predicted peak MB | measured peak MB (GNU time) | measured / predicted |"
echo "|---|---|---|---|---|---|---|"
for ranks in ${RANKS:-2}; do
  for pair in ${RUNS:-OneBitAdam:0 OneBitAdam:2}; do
    optimizer=${pair%:*} stage=${pair#*:}
    onebit=()
    [[ $optimizer == Adam ]] ||
      onebit=(--set optimizer.params.freeze_step=3 --set optimizer.params.comm_backend_name=mpi)
    run="$work/$ranks-$optimizer-$stage"
    mpirun --oversubscribe --bind-to none -np "$ranks" /usr/bin/time -v -o "$run.time.%q{OMPI_COMM_WORLD_RANK}" \
      "$build/apps/dstrain/dstrain" \
      --config "$root/configs/default.json" --set dstrain.model.n_layer=8 --set dstrain.model.n_embd=512 \
      --set dstrain.model.n_head=8 --set dstrain.model.block_size=64 --set dstrain.model.vocab_size=256 \
      --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null \
      --set optimizer.type="$optimizer" "${onebit[@]}" \
      --set zero_optimization.stage=$stage --steps "$steps" > "$run.log" 2>&1
    python3 - "$run" <<'PY'
import glob, re, sys
run = sys.argv[1]
log = open(run + ".log").read()
predicted = float(re.search(r"memory plan: predicted peak ([\d.]+) MB", log).group(1))
state = re.findall(r"model state ([\d.]+) MB \(params ([\d.]+), grads ([\d.]+), optim ([\d.]+)\)", log)[-1]
measured = max(int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f).read()).group(1))
               for f in glob.glob(run + ".time.*")) * 1024 / 1e6
np, optimizer, stage = run.rsplit("/", 1)[1].split("-")
print(f"| {np} | {optimizer} | {stage} | {state[0]} ({state[1]}, {state[2]}, {state[3]}) | {predicted:.0f} | {measured:.0f} | "
      f"{measured / predicted:.3f} |")
PY
  done
done
