#!/usr/bin/env bash
# The dstrain trainer on one GPU against PyTorch's own training loop (bench/gpu/torch_peer.py) on the
# identical GPT, alternating runs, medians of REPS runs of the per-step median tokens/s.
# Run on a CUDA machine after `scripts/gpu.sh build` (docs/gpu.md):
#   bench/gpu/vs_torch.sh                 the default rows
#   ROWS="12 12 768 512 8192 8" bench/gpu/vs_torch.sh   n_layer n_head n_embd ctx vocab micro
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
eval "$("$ROOT/scripts/gpu.sh" env)"
DSTRAIN=${DSTRAIN:-$ROOT/build-gpu/apps/dstrain/dstrain}
REPS=${REPS:-3} STEPS=${STEPS:-30} WARMUP=5
ROWS=${ROWS:-"8 8 512 256 8192 16
12 12 768 512 8192 8"}
STAGES=${STAGES:-0}
work=$(mktemp -d)

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

dstrain_tokens() {  # layer head embd ctx vocab micro dtype stage
  local metrics=$work/metrics.jsonl; rm -f "$metrics"
  mpirun -np 1 "$DSTRAIN" --config "$ROOT/bench/gpu/gpt.json" --steps $((STEPS + WARMUP)) --metrics "$metrics" \
    --set dstrain.model.n_layer=$1 --set dstrain.model.n_head=$2 --set dstrain.model.n_embd=$3 \
    --set dstrain.model.block_size=$4 --set dstrain.model.vocab_size=$5 --set train_micro_batch_size_per_gpu=$6 \
    $([ "$7" = bf16 ] && echo --set bf16.enabled=true) --set zero_optimization.stage=$8 >"$work/log" 2>&1 \
    || { echo "dstrain failed:" >&2; tail -5 "$work/log" >&2; echo nan; return; }
  tail -n +$((WARMUP + 1)) "$metrics" | sed 's/.*"tokens_per_sec":\([0-9.e+]*\).*/\1/' | median
}

peer_tokens() {
  python3 "$ROOT/bench/gpu/torch_peer.py" --n_layer $1 --n_head $2 --n_embd $3 --block_size $4 --vocab_size $5 \
    --micro $6 --dtype $7 --steps $STEPS --warmup $WARMUP 2>"$work/peer.log" | awk '{print $2}' | grep . \
    || { echo "torch_peer.py failed:" >&2; tail -5 "$work/peer.log" >&2; echo nan; }
}

printf "| model (layers x width, ctx, vocab, micro) | dtype | ZeRO | dstrain tokens/s | PyTorch tokens/s | ratio |\n"
printf "|---|---|---|---|---|---|\n"
while read -r layers heads embd ctx vocab micro; do
  for dtype in fp32 bf16; do
    for stage in $STAGES; do
      ours=() theirs=()
      for ((r = 0; r < REPS; r++)); do
        ours+=("$(dstrain_tokens $layers $heads $embd $ctx $vocab $micro $dtype $stage)")
        theirs+=("$(peer_tokens $layers $heads $embd $ctx $vocab $micro $dtype)")
      done
      a=$(printf "%s\n" "${ours[@]}" | median); b=$(printf "%s\n" "${theirs[@]}" | median)
      printf "| %s x %s, %s, %s, %s | %s | %s | %.0f | %.0f | %.2f |\n" $layers $embd $ctx $vocab $micro $dtype $stage \
        "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print a / b}')"
    done
  done
done <<< "$ROWS"
rm -rf "$work"
