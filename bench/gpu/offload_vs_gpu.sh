#!/usr/bin/env bash
# ZeRO-Offload (offload_optimizer.device cpu) against the optimizer in GPU memory, one rank on
# cuda:0, the trainer's bf16 GPT (bench/gpu/gpt.json). Prints two markdown tables:
#  (a) samples/s on a GPT that fits both ways (12 x 768, stage 2), REPS alternated runs, medians of
#      the per-step figures after 3 warm-up steps, with wall_clock_breakdown's step and backward;
#      the goal is offload >= 0.6x in-GPU. Once per gradient accumulation in ACCUMS: the CPU step
#      moves about 28 bytes of host memory per parameter whatever the batch, so only the
#      micro-batches of a step amortize it (on 2026-11-26, 12 x 768 at accumulation 1: the in-GPU
#      step took 20 ms in all, the CPU step 216 ms).
#  (b) under dstrain.gpu_memory_limit (LIMIT bytes, default 2 GiB): the largest of SIZES that trains
#      with the optimizer in GPU memory, and the first at least 4x its parameters, with and
#      without offload (CUDA out-of-memory caught from the log), peak GPU memory and samples/s.
# Run on a CUDA machine after `scripts/gpu.sh build` (docs/gpu.md); well under 60 s on an H200.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
eval "$("$ROOT/scripts/gpu.sh" env)"
DSTRAIN=${DSTRAIN:-$ROOT/build-gpu/apps/dstrain/dstrain}
REPS=${REPS:-2}
STEPS=${STEPS:-12}
LIMIT=${LIMIT:-2147483648}
SIZES=${SIZES:-"8x512 12x768 16x1024 20x1280 32x1280"}
ACCUMS=${ACCUMS:-"1 16"}
PYTHON=${DSTRAIN_PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME STEPS EXTRA...: the trainer; prints "ok" or "oom" or "failed" and leaves $work/NAME.jsonl.
run() {
  local name=$1 steps=$2
  shift 2
  rm -f "$work/$name.jsonl"
  if mpirun -np 1 "$DSTRAIN" --config "$ROOT/bench/gpu/gpt.json" --steps "$steps" --metrics "$work/$name.jsonl" \
      --set bf16.enabled=true --set zero_optimization.stage=2 --set wall_clock_breakdown=true "$@" \
      >"$work/$name.log" 2>&1; then
    echo ok
  elif grep -qi "out of memory" "$work/$name.log"; then
    echo oom
  else
    tail -3 "$work/$name.log" >&2
    echo failed
  fi
}

# figures NAME: median samples/s, step ms, backward ms after 3 warm-up steps; the last peak GPU MB.
figures() {
  "$PYTHON" - "$work/$1.jsonl" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lines = [l for l in lines if "samples_per_sec" in l]
tail = lines[3:] or lines
med = lambda xs: statistics.median(xs) if xs else float("nan")
b = lambda k: med([l.get("breakdown_ms", {}).get(k, float("nan")) for l in tail])
print(f'{med([l["samples_per_sec"] for l in tail]):.2f} {b("step"):.1f} {b("backward"):.1f} '
      f'{lines[-1].get("gpu_max_allocated_mb", float("nan")):.0f} '
      f'{b("gradients_to_host"):.1f}/{b("step_on_host"):.1f}/{b("weights_to_device"):.1f}')
PY
}

params() {  # LAYERSxWIDTH -> the GPT's parameters (vocab 8192, block 256, tied head), closed form
  local l=${1%x*} d=${1#*x}
  echo $((12 * l * d * d + 13 * l * d + 8192 * d + 256 * d + 2 * d))
}

model_set() {  # LAYERSxWIDTH -> --set arguments
  local l=${1%x*} d=${1#*x}
  echo "--set dstrain.model.n_layer=$l --set dstrain.model.n_embd=$d --set dstrain.model.n_head=$((d / 64))"
}

cpu_offload=(--set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_optimizer.pin_memory=true)

median() { printf "%s\n" "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
for accum in $ACCUMS; do
  echo "### (a) 12 x 768 GPT, bf16, ZeRO 2, micro 16 x 256 tokens, accumulation $accum: $REPS alternated runs, medians"
  printf "| run | samples/s | step ms | backward ms | peak GPU MB | of the step: to host / CPU step / to device ms |\n|---|---|---|---|---|---|\n"
  gpu_rates=() off_rates=()
  for rep in $(seq "$REPS"); do
    for mode in gpu offload; do
      extra=(--set gradient_accumulation_steps="$accum")
      [ "$mode" = offload ] && extra+=("${cpu_offload[@]}")
      # shellcheck disable=SC2046
      status=$(run "a_$mode" "$STEPS" $(model_set 12x768) "${extra[@]}")
      if [ "$status" != ok ]; then printf "| %s %s | %s | | | | |\n" "$mode" "$rep" "$status"; continue; fi
      read -r rate step backward peak parts < <(figures "a_$mode")
      printf "| %s %s | %s | %s | %s | %s | %s |\n" "$mode" "$rep" "$rate" "$step" "$backward" "$peak" "$parts"
      if [ "$mode" = gpu ]; then gpu_rates+=("$rate"); else off_rates+=("$rate"); fi
    done
  done
  if [ ${#gpu_rates[@]} -gt 0 ] && [ ${#off_rates[@]} -gt 0 ]; then
    g=$(median "${gpu_rates[@]}") o=$(median "${off_rates[@]}")
    echo
    echo "accumulation $accum: offload / in-GPU samples/s: $o / $g = $(awk -v a="$o" -v b="$g" 'BEGIN {printf "%.2f", a / b}') (goal >= 0.6)"
  fi
  echo
done

echo "### (b) under dstrain.gpu_memory_limit = $LIMIT bytes: micro 4 x 256 tokens, $((STEPS / 2)) steps"
printf "| model | params | optimizer | result | samples/s | peak GPU MB |\n|---|---|---|---|---|---|\n"
limit=(--set dstrain.gpu_memory_limit="$LIMIT" --set train_micro_batch_size_per_gpu=4)
row() {  # size mode status
  local rate="" peak=""
  [ "$3" = ok ] && read -r rate _ _ peak _ < <(figures "b_$1_$2")
  printf "| %s | %s | %s | %s | %s | %s |\n" "$1" "$(params "$1")" "$2" "$3" "$rate" "$peak"
}
largest=""
for size in $SIZES; do
  # shellcheck disable=SC2046
  status=$(run "b_${size}_gpu" $((STEPS / 2)) $(model_set "$size") "${limit[@]}")
  row "$size" gpu "$status"
  [ "$status" = ok ] || break
  largest=$size
done
if [ -n "$largest" ]; then
  want=$((4 * $(params "$largest")))
  for size in $SIZES; do
    [ "$(params "$size")" -ge "$want" ] || continue
    for mode in offload gpu; do
      extra=()
      [ "$mode" = offload ] && extra=("${cpu_offload[@]}")
      # shellcheck disable=SC2046
      status=$(run "b_${size}_$mode" $((STEPS / 2)) $(model_set "$size") "${limit[@]}" "${extra[@]}")
      row "$size" "$mode" "$status"
    done
    break
  done
fi
