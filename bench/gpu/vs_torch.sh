#!/usr/bin/env bash
# The dstrain trainer on one GPU, one rank, at each ZeRO stage in STAGES, against PyTorch's own
# training loop (bench/gpu/torch_peer.py) on the identical GPT, eager and under torch.compile.
# Prints a markdown table: tokens/s (the median over REPS runs of each run's per-step median), the
# ratios, and dstrain's MFU. Run on a CUDA machine after `scripts/gpu.sh build` (docs/gpu.md):
#   bench/gpu/vs_torch.sh                                         the default rows, stages 0-3
#   STAGES="0 1 2 3" REPS=1 ROWS="12 12 768 512 8192 8" bench/gpu/vs_torch.sh   (device_check.sh)
#   ROWS: one "n_layer n_head n_embd ctx vocab micro" per line. COMPILE=0 leaves torch.compile out.
#   DTYPES: "fp32 bf16" (default) or either.
#   DEVICE=cpu DSTRAIN=build/apps/dstrain/dstrain PEER_PYTHON=/usr/bin/python3 ...   the script itself
#   on a CPU (tiny ROWS; no MFU there).
# At one rank stages 1-3 partition over a single rank, so their rows measure the machinery each stage
# adds (flat buffers, reduce-scatter, gather and release of parameters), not a memory saving.
# Runs alternate: per rep, dstrain at every stage, then the eager peer; the compiled peer runs once per
# row and dtype (its first compile takes 30-60 s, spent in its COMPILE_WARMUP steps), bounded by
# COMPILE_TIMEOUT; a compile that fails or times out puts its reason in the cell, the script goes on.
# The eager and compiled cells do not depend on the stage: each stage's row repeats them.
#
# MFU = dstrain's tokens/s x FLOPs per token / the GPU's bf16 dense peak (PaLM appendix B, Chinchilla):
#   FLOPs per token = 6 N + 12 n_layer ctx n_embd   (forward and backward; the second term is
#   attention's QK^T and AV at full ctx, causal mask not discounted)
#   N = n_layer (12 n_embd^2 + 13 n_embd) + 2 n_embd + vocab n_embd: every parameter counted once
#   except the learned position table, which is only added (nanoGPT's estimate_mfu); the token
#   embedding stays in N because the tied head multiplies by it (6 vocab n_embd FLOPs per token).
# The peak comes from nvidia-smi's GPU name: H100 SXM (HBM3) and H200 989.4e12, H100 PCIe 756e12,
# anything else "n/a". fp32 rows are measured against the same bf16 peak, on purpose: the column then
# says what fraction of the GPU's best the model gets, and fp32's low figure is the price of fp32.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEVICE=${DEVICE:-cuda}
[ "$DEVICE" = cuda ] && eval "$("$ROOT/scripts/gpu.sh" env)"
DSTRAIN=${DSTRAIN:-$ROOT/build-gpu/apps/dstrain/dstrain}
PEER_PYTHON=${PEER_PYTHON:-python3}
REPS=${REPS:-3} STEPS=${STEPS:-20} WARMUP=${WARMUP:-3}
COMPILE=${COMPILE:-1} COMPILE_WARMUP=${COMPILE_WARMUP:-3} COMPILE_TIMEOUT=${COMPILE_TIMEOUT:-90}
ROWS=${ROWS:-"8 8 512 256 8192 16
12 12 768 512 8192 8"}
STAGES=${STAGES:-0 1 2 3}
work=$(mktemp -d)  # mpirun and the peers read stdin from /dev/null: the rows come on the loop's stdin
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

bf16_peak() {
  [ "$DEVICE" = cuda ] || { echo n/a; return; }
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)" in
    *NVL*) echo n/a ;;  # H100 NVL / H200 NVL run at a lower power limit: not the SXM figure
    *H100*PCIe*) echo 756e12 ;;
    *H100* | *H200*) echo 989.4e12 ;;
    *) echo n/a ;;
  esac
}

dstrain_tokens() {  # layer head embd ctx vocab micro dtype stage
  local metrics=$work/metrics.jsonl start; rm -f "$metrics"; start=$(now)
  mpirun -np 1 "$DSTRAIN" --config "$ROOT/bench/gpu/gpt.json" --steps $((STEPS + WARMUP)) --metrics "$metrics" \
    --set dstrain.model.n_layer=$1 --set dstrain.model.n_head=$2 --set dstrain.model.n_embd=$3 \
    --set dstrain.model.block_size=$4 --set dstrain.model.vocab_size=$5 --set train_micro_batch_size_per_gpu=$6 \
    $([ "$7" = bf16 ] && echo --set bf16.enabled=true) --set zero_optimization.stage=$8 \
    --set dstrain.device="$DEVICE" </dev/null >"$work/log" 2>&1 \
    || { echo "dstrain failed:" >&2; tail -5 "$work/log" >&2; echo nan; return; }
  echo "dstrain $7 ZeRO $8: $(took "$start") s" >&2
  tail -n +$((WARMUP + 1)) "$metrics" | sed 's/.*"tokens_per_sec":\([0-9.e+]*\).*/\1/' | median
}

# peer_tokens layer head embd ctx vocab micro dtype [--compile]: tokens/s, or the peer's reason as text.
peer_tokens() {
  local what=eager warmup=$WARMUP limit=() start line rc=0; start=$(now)
  if [ "${8:-}" = --compile ]; then what=compiled warmup=$COMPILE_WARMUP limit=(timeout --kill-after=10 "$COMPILE_TIMEOUT"); fi
  line=$("${limit[@]}" "$PEER_PYTHON" "$ROOT/bench/gpu/torch_peer.py" --n_layer $1 --n_head $2 --n_embd $3 \
    --block_size $4 --vocab_size $5 --micro $6 --dtype $7 --device "$DEVICE" --steps $STEPS --warmup $warmup \
    ${8:-} </dev/null 2>"$work/peer.log" | tail -1) || rc=$?
  echo "torch $what $7: $(took "$start") s" >&2
  case "$line" in
    "tokens_per_sec "*) echo "${line#tokens_per_sec }" ;;
    *) if [ "$what" = compiled ] && [ "$rc" = 124 ]; then line="compile timed out after $COMPILE_TIMEOUT s"; fi
       echo "torch_peer.py $what: no tokens/s (rc $rc) ${line:+($line)}" >&2; tail -5 "$work/peer.log" >&2
       if [ "$what" = compiled ] && [ -n "$line" ]; then echo "${line//|//}"; else echo nan; fi ;;
  esac
}

peak=$(bf16_peak)
echo "GPU: $( ([ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1) || echo "$DEVICE"), bf16 dense peak $peak FLOP/s; $STEPS timed steps after $WARMUP warm-up ($COMPILE_WARMUP compiled), medians of $REPS runs"
echo
printf "| model (layers x width, ctx, vocab, micro) | dtype | ZeRO | dstrain tokens/s | eager tokens/s | compiled tokens/s | vs eager | vs compiled | MFU (of bf16 peak) |\n"
printf "|---|---|---|---|---|---|---|---|---|\n"
script_start=$(now)
while read -r layers heads embd ctx vocab micro; do
  for dtype in ${DTYPES:-fp32 bf16}; do
    declare -A ours=()
    eager=() compiled="not run"
    for ((r = 0; r < REPS; r++)); do
      for stage in $STAGES; do
        ours[$stage]+="$(dstrain_tokens $layers $heads $embd $ctx $vocab $micro $dtype $stage) "
      done
      eager+=("$(peer_tokens $layers $heads $embd $ctx $vocab $micro $dtype)")
      if ((r == 0 && COMPILE)); then compiled=$(peer_tokens $layers $heads $embd $ctx $vocab $micro $dtype --compile); fi
    done
    b=$(printf "%s\n" "${eager[@]}" | median)
    for stage in $STAGES; do
      a=$(printf "%s\n" ${ours[$stage]} | median)
      awk -v L=$layers -v d=$embd -v T=$ctx -v V=$vocab -v m=$micro -v dt=$dtype -v z=$stage \
          -v a="$a" -v b="$b" -v c="$compiled" -v peak="$peak" 'BEGIN {
        num = "^[0-9.]+([eE][+-]?[0-9]+)?$"
        n = L * (12 * d * d + 13 * d) + 2 * d + V * d
        flops = 6 * n + 12 * L * T * d
        ok_a = a ~ num && a > 0; ok_b = b ~ num && b > 0; ok_c = c ~ num && c > 0
        printf "| %d x %d, %d, %d, %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", L, d, T, V, m, dt, z,
          ok_a ? sprintf("%.0f", a) : "failed", ok_b ? sprintf("%.0f", b) : "failed", ok_c ? sprintf("%.0f", c) : c,
          ok_a && ok_b ? sprintf("%.2f", a / b) : "n/a", ok_a && ok_c ? sprintf("%.2f", a / c) : "n/a",
          ok_a && peak ~ num ? sprintf("%.1f%%", 100 * a * flops / peak) : "n/a"
      }'
    done
    unset ours
  done
done <<< "$ROWS"
echo "vs_torch.sh: $(took "$script_start") s" >&2
