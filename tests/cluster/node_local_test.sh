#!/usr/bin/env bash
# Args: STAGE DSTRAIN SOURCE_DIR
# checkpoint.use_node_local_storage on two simulated nodes of scripts/cluster.sh (2 ranks each),
# each with its own folder at the save path (--node-local: a node cannot see the other's files), at
# ZeRO stage STAGE. Exit 77 (skipped) where this process cannot create network namespaces.
#   - a run saving every 4 steps is killed (SIGKILL to node2's ranks) once step 6 is logged; each
#     node's folder holds its own ranks' shards and no other's, and the same index.json and latest
#     (global_step4, or global_step8 where the run got there before the kill: a loaded machine);
#   - --resume continues from there to step 12 with the losses of an uninterrupted run, to the last
#     digit;
#   - a resume with the ranks placed otherwise (--map-by node) stops within 30 s naming rank 1, host
#     node2 and rank1.bin;
#   - the two folders copied into one make a checkpoint that `dstrain export` reads and that resumes
#     at another world size on one machine;
#   - with node2's folder emptied, a resume stops naming host node2.
# At stages 1-3 every run but the last keeps the optimizer on NVMe with nvme_path at the same path:
# each node's folder holds the swap folders of its own ranks only.
set -euo pipefail
stage=$1 dstrain=$2 source=$3

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
probe=dsprobe$$
ip netns add "$probe" 2> /dev/null || skip "this process cannot create network namespaces"
ip netns del "$probe"

name=nl$stage
cluster() { "$source/scripts/cluster.sh" --name "$name" "$@"; }
work=$(mktemp -d)
ckpt=$work/ckpt  # the save path every node sees, each its own folder
state=/run/dstrain-cluster/$name
launcher=""
cleanup() {
  [ -z "$launcher" ] || kill -KILL "$launcher" 2> /dev/null || true
  cluster down
  rm -rf "$work"
}
trap cleanup EXIT
cluster down
cluster up 2 --rate 1gbit --node-local "$ckpt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

offload=()
[ "$stage" -eq 0 ] || offload=(--set zero_optimization.offload_optimizer.device=nvme
                               --set zero_optimization.offload_optimizer.nvme_path="$ckpt")
placement=(--map-by slot)  # mpirun's default: ranks 0-1 on node1, 2-3 on node2
# 4 x 256 rather than the config's 2 x 128: about 0.3 s a step here rather than 0.05, so that the
# kill once step 6 is logged lands before the save of step 8 (or, on a loaded machine, of step 12).
model=(--set dstrain.model.n_layer=4 --set dstrain.model.n_embd=256)
train() {  # train LOG STEPS [dstrain options...]: 2 x 2 on the cluster, node-local storage
  local log=$1 steps=$2
  shift 2
  cluster run -- mpirun -np 4 --bind-to none "${placement[@]}" "$dstrain" --config "$source/configs/default.json" "${model[@]}" \
    --steps "$steps" --set zero_optimization.stage="$stage" --set checkpoint.use_node_local_storage=true "${offload[@]}" "$@" > "$log" 2>&1
}
losses() { sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' "$1"; }

train "$work/reference.log" 12 --metrics "$work/reference.jsonl" || { cat "$work/reference.log"; echo "the reference run failed"; exit 1; }

train "$work/killed.log" 100000 --save-dir "$ckpt" --save-interval 4 --metrics "$work/killed.jsonl" &
launcher=$!
for _ in $(seq 600); do
  grep -q '"step":6[,}]' "$work/killed.jsonl" 2> /dev/null && break
  kill -0 "$launcher" 2> /dev/null || { cat "$work/killed.log"; echo "the run ended before step 6"; exit 1; }
  sleep 0.1
done
cluster kill node2
wait "$launcher" && { echo "the killed run exited 0"; exit 1; }
launcher=""

saved=$(cat "$state/local/node1/latest")
fail=0
for node in node1 node2; do
  first=$(( ${node#node} * 2 - 2 ))
  folder=$state/local/$node
  shards=$(cd "$folder/$saved" && ls rank*.bin | paste -sd' ')
  echo "$node's folder: latest $(cat "$folder/latest"), $saved: $shards index.json"
  [ "$shards" = "rank$first.bin rank$((first + 1)).bin" ] || { echo "$node holds $shards, expected its own ranks' only"; fail=1; }
  [ "$(cat "$folder/latest")" = "$saved" ] || { echo "$node's latest is not $saved (node1's)"; fail=1; }
done
[[ $saved =~ ^global_step(4|8)$ ]] || { echo "latest is $saved, not a save of steps 4 or 8"; fail=1; }
for node in node1 node2; do
  [ ${#offload[@]} -gt 0 ] || break
  # A killed rank's swap folder stays until the next run on its host: dstrain-optimizer-rank<r>-<host>-<pid>-XXXXXX.
  swaps=$(cd "$state/local/$node" && ls -d dstrain-optimizer-rank* | sed -E 's/-[0-9]+-[^-]+$//' | sort | paste -sd' ')
  first=$(( ${node#node} * 2 - 2 ))
  echo "$node's swap folders: $swaps"
  [ "$swaps" = "dstrain-optimizer-rank$first-$node dstrain-optimizer-rank$((first + 1))-$node" ] || { echo "$node holds other swap folders"; fail=1; }
done
cmp "$state/local/node1/$saved/index.json" "$state/local/node2/$saved/index.json" || { echo "the nodes' indexes differ"; fail=1; }
[ $fail -eq 0 ] || exit 1

train "$work/resumed.log" 12 --save-dir "$ckpt" --resume --metrics "$work/resumed.jsonl" || { cat "$work/resumed.log"; echo "the resume failed"; exit 1; }
expected=$(losses "$work/reference.jsonl" | sed -n "$(( ${saved#global_step} + 1 )),\$p")
got=$(losses "$work/resumed.jsonl")
echo "uninterrupted, steps $(( ${saved#global_step} + 1 ))-12: $(echo $expected)"
echo "resumed,       steps $(( ${saved#global_step} + 1 ))-12: $(echo $got)"
[ "$expected" = "$got" ] || { echo "the resumed losses differ from the uninterrupted run's"; exit 1; }

start=$(date +%s)
placement=(--map-by node)  # ranks 0 and 2 on node1, 1 and 3 on node2
if train "$work/moved.log" 8 --save-dir "$ckpt" --resume --tag global_step4; then
  echo "a resume with the ranks on other nodes succeeded"; exit 1
fi
seconds=$(( $(date +%s) - start ))
line=$(grep -m1 'rank 1 on host node2 reads rank1.bin' "$work/moved.log") || { cat "$work/moved.log"; echo "no line names rank 1, node2 and rank1.bin"; exit 1; }
echo "ranks placed by node: stopped in $seconds s: $line"
[ "$seconds" -le 30 ] || { echo "it took more than 30 s"; exit 1; }

mkdir "$work/gathered"
cp -a "$state/local/node1/." "$state/local/node2/." "$work/gathered/"
"$dstrain" export --checkpoint "$work/gathered" --tag global_step4 --out "$work/model.pt" > "$work/export.log" 2>&1 || { cat "$work/export.log"; echo "export of the gathered folder failed"; exit 1; }
[ -s "$work/model.pt" ] || { echo "export wrote no model.pt"; exit 1; }
mpirun -np 2 --oversubscribe --bind-to none "$dstrain" --config "$source/configs/default.json" "${model[@]}" --steps 6 \
  --set zero_optimization.stage="$stage" --save-dir "$work/gathered" --resume --tag global_step4 > "$work/gathered.log" 2>&1 || { cat "$work/gathered.log"; echo "the gathered folder does not resume at -np 2"; exit 1; }
grep -q 'loaded .*global_step4 at step 4' "$work/gathered.log" || { cat "$work/gathered.log"; echo "no load logged"; exit 1; }
echo "gathered folder: exported ($(stat -c %s "$work/model.pt") B) and resumed at -np 2 on one machine"

rm -rf "${state:?}/local/node2/"*
placement=(--map-by slot)
if train "$work/empty.log" 12 --save-dir "$ckpt" --resume; then echo "a resume with node2's folder empty succeeded"; exit 1; fi
line=$(grep -m1 'on host node2: with checkpoint.use_node_local_storage every node reads its own folder' "$work/empty.log") ||
  { cat "$work/empty.log"; echo "no line names node2 with its folder empty"; exit 1; }
echo "node2's folder emptied: $line"
echo "node_local stage $stage OK"
