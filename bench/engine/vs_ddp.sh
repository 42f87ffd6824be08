#!/usr/bin/env bash
# dstrain against PyTorch DistributedDataParallel (bench/engine/ddp_peer.py: gloo, Debian's
# python3-torch) on the same GPT, AdamW, fp32, no clipping, random tokens. For every row the two run
# alternately REPEATS times; samples/s is the median over all runs of the steps after the first two.
# Threads: dstrain picks its own (cores / ranks on the node, see docs/performance.md); DDP is given
# the same count through OMP_NUM_THREADS and torch.set_num_threads. Nothing else is tuned: dstrain runs
# the config below with the environment as it is.
#
#   bench/engine/vs_ddp.sh [--build DIR] [--steps N] [--repeats R] [--row SIZE:NP]... [--set KEY=VALUE]...
#     SIZE   3.3M (4 layers, 256 wide, ctx 128, micro 8), 25M (8, 512, ctx 64, micro 2),
#            100M (8, 1024, ctx 64, micro 2), or L<layers>-E<width>-T<ctx>-B<micro>
#     NP     ranks (mpirun -np)
#     --set  passed to dstrain as is (e.g. --set zero_optimization.stage=1)
#   Default rows: 3.3M and 25M at -np 1, 2, 4, and 100M at -np 1, 2.
#   Needs: apt-get install python3-torch (the peer only; PEER_PYTHON names another interpreter).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
steps=8
repeats=3
rows=()
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --row) rows+=("$2"); shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done
[ ${#rows[@]} -eq 0 ] && rows=(3.3M:1 3.3M:2 3.3M:4 25M:1 25M:2 25M:4 100M:1 100M:2)
# Debian's interpreter, where python3-torch installs (a pyenv or venv python3 on PATH lacks it).
peer_python=${PEER_PYTHON:-/usr/bin/python3}
"$peer_python" -c "import torch" 2>/dev/null || { echo "vs_ddp.sh: the peer needs python3-torch (apt-get install python3-torch)" >&2; exit 2; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cores=$(nproc)

shape_of() {  # SIZE -> "layers width ctx micro"
  case "$1" in
    3.3M) echo "4 256 128 8" ;;
    25M) echo "8 512 64 2" ;;
    100M) echo "8 1024 64 2" ;;
    L*-E*-T*-B*) echo "$1" | sed -E 's/L([0-9]+)-E([0-9]+)-T([0-9]+)-B([0-9]+)/\1 \2 \3 \4/' ;;
    *) echo "vs_ddp.sh: unknown size '$1'" >&2; exit 2 ;;
  esac
}

printf "%-6s %3s %4s | %9s %9s %6s | %8s %8s %8s %8s | %7s %7s\n" size np thr dstrain DDP ratio fwd_ms bwd_ms \
  reduce_ms step_ms sys/usr ddp_s/u
for row in "${rows[@]}"; do
  size=${row%%:*}; np=${row##*:}
  read -r layers width ctx micro <<< "$(shape_of "$size")"
  threads=$(( cores / np )); [ "$threads" -lt 1 ] && threads=1
  ours=(mpirun --oversubscribe --bind-to none -np "$np" "$build/apps/dstrain/dstrain" --config "$root/configs/default.json"
        --set scheduler=null --set gradient_clipping=0 --set optimizer.params.lr=0.001
        --set optimizer.params.weight_decay=0.01 --set zero_optimization.stage=0 --set wall_clock_breakdown=true
        --set steps_per_print=1000 --set dstrain.model.n_layer="$layers" --set dstrain.model.n_embd="$width"
        --set dstrain.model.n_head=4 --set dstrain.model.block_size="$ctx" --set dstrain.model.vocab_size=256
        --set train_micro_batch_size_per_gpu="$micro" --set gradient_accumulation_steps=1 --set train_batch_size=null
        "${sets[@]}" --steps "$steps")
  peer=(mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS="$threads" -x MASTER_ADDR=127.0.0.1
        -x MASTER_PORT=$(( 29500 + RANDOM % 1000 )) "$peer_python" "$root/bench/engine/ddp_peer.py" --n-layer "$layers"
        --n-embd "$width" --block-size "$ctx" --micro "$micro" --steps "$steps" --threads "$threads")
  for r in $(seq "$repeats"); do
    "${peer[@]}" > "$work/ddp.$r" 2> "$work/ddp.$r.err" || { cat "$work/ddp.$r.err" >&2; exit 1; }
    "${ours[@]}" --metrics "$work/ours.$r" > "$work/ours.$r.out" 2>&1 || { cat "$work/ours.$r.out" >&2; exit 1; }
  done
  python3 - "$work" "$repeats" "$size" "$np" "$threads" <<'PY'
import json, statistics, sys
work, repeats, size, np_, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def lines(name): return [json.loads(l) for r in range(1, repeats + 1) for l in list(open(f"{work}/{name}.{r}"))[2:]]
ours, ddp = lines("ours"), lines("ddp")
# System over user CPU time of rank 0 over the timed steps (start-up, which faults in the model, is left out).
cpu = lambda runs: sum(l["cpu_system_seconds"] for l in runs) / sum(l["cpu_user_seconds"] for l in runs)
o = statistics.median(l["samples_per_sec"] for l in ours)
d = statistics.median(l["samples_per_sec"] for l in ddp)
bd = lambda k: statistics.median(l["breakdown_ms"].get(k, 0.0) for l in ours)
print(f"{size:6} {np_:>3} {threads:>4} | {o:9.2f} {d:9.2f} {o/d:6.2f} | {bd('forward'):8.1f} {bd('backward'):8.1f} "
      f"{bd('reduce_wait'):8.1f} {bd('step'):8.1f} | {cpu(ours):7.2f} {cpu(ddp):7.2f}")
PY
  rm -f "$work"/*
done
echo "samples/s: medians over $repeats alternated runs x steps 3..$steps; breakdown: dstrain's wall_clock_breakdown" \
  "medians (reduce_ms is inside bwd_ms); sys/usr: system over user CPU time of rank 0 in those steps"
