#!/usr/bin/env bash
# The fused CUDA AdamW (dstrain_adam_bench) against torch.optim.AdamW(fused=True) (adam_torch.py) on
# cuda:0, the same tensors for both: one flat tensor of 16M, 64M and 256M elements, and the
# parameter list of the GPT of bench/gpu/gpt.json's family at 12 x 768 and 24 x 2048 (vocab 8192),
# ours as ranges in one call, torch's as its list. Each side's step is the median of 20 steps after
# 5, timed with CUDA events; the two programs alternate ROUNDS times and each keeps its lowest
# median. Prints a markdown table. Run on a CUDA machine after `scripts/gpu.sh build` (docs/gpu.md).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
BENCH=${BENCH:-$BUILD/bench/gpu/dstrain_adam_bench}
ROUNDS=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The element counts of a GPT's parameters (GPTImpl: wte, wpe, per block ln_1, c_attn, c_proj,
# ln_2, c_fc, c_proj with biases, then ln_f): n_layer n_embd vocab_size block_size.
gpt_numels() {
  local L=$1 C=$2 V=$3 T=$4 out="$(($3 * $2)) $(($4 * $2))"
  for ((l = 0; l < L; ++l)); do
    out+=" $C $C $((3 * C * C)) $((3 * C)) $((C * C)) $C $C $C $((4 * C * C)) $((4 * C)) $((4 * C * C)) $C"
  done
  echo "$out $C $C"
}

{
  echo "flat-16M $((16 << 20))"
  echo "flat-64M $((64 << 20))"
  echo "flat-256M $((256 << 20))"
  echo "gpt-12x768 $(gpt_numels 12 768 8192 256)"
  echo "gpt-24x2048 $(gpt_numels 24 2048 8192 1024)"
} >"$work/cases"

for ((r = 0; r < ROUNDS; ++r)); do
  if ((r % 2 == 0)); then order="ours torch"; else order="torch ours"; fi
  for side in $order; do
    echo "round $((r + 1)) of $ROUNDS: $side" >&2  # a run cut off by a time limit shows how far it got
    if [ "$side" = ours ]; then
      "$BENCH" "$work/cases" >>"$work/ours"
    else
      python3 "$ROOT/bench/gpu/adam_torch.py" "$work/cases" >>"$work/torch"
    fi
  done
done

echo "| case | elements | dstrain ms | torch fused ms | ratio (torch/dstrain) |"
echo "|---|---|---|---|---|"
awk 'FNR == NR { if (!($1 in ours) || $3 < ours[$1]) ours[$1] = $3; next }
     { if (!($1 in torch) || $3 < torch[$1]) torch[$1] = $3; elements[$1] = $2; if (!seen[$1]++) order[++n] = $1 }
     END { for (i = 1; i <= n; ++i) { c = order[i]
             printf "| %s | %d | %.3f | %.3f | %.2f |\n", c, elements[c], ours[c], torch[c], torch[c] / ours[c] } }' \
  "$work/ours" "$work/torch"
