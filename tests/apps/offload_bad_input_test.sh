#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# A run bigger than its box, refused at start: a GPT (2 x 256, vocabulary 256) at ZeRO-3 with the
# optimizer and the parameters on NVMe, -np 2, resuming a checkpoint of its own, given in turn
#   - a memory budget too small: for a micro-batch's activations (dstrain.memory_limit), and for one
#     4096-wide layer's parameters gathered whole (a memory cgroup of 2 GB, where one can be made:
#     1 GB a rank, a third of what that layer needs; in 400 MB the two ranks of the CUDA build, with
#     pip's LibTorch, were killed before the planner spoke),
#   - a file system one page smaller than the swap files of both ranks (tmpfs size=N-4096), and
#     one exactly as large (tmpfs size=N: past the space check, refused as tmpfs, memory),
#   - ramfs (no O_DIRECT), a read-only bind of a disk folder (root ignores mode bits),
# must fail before the model is built (no "zero.Init" or "model:" line), naming the key, the path,
# the bytes needed (N: the swap files as docs/offload.md counts them, computed here from the shape)
# and the bytes available, leave nothing in the path, and leave every checkpoint file as it was
# (bytes and mtimes); the checkpoint then resumes. The file systems are mounted in a private mount
# namespace (unshare); without one those cases are skipped, saying so.
set -uo pipefail
dstrain=$1 source=$2
shift 2
mpi=("$@")
if [ -z "${DSTRAIN_PRIVATE_MOUNTS:-}" ] && [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  exec env DSTRAIN_PRIVATE_MOUNTS=1 unshare --mount --propagation private "$0" "$dstrain" "$source" "${mpi[@]}"
fi
. "$(dirname "$0")/memory_plan_cgroups.sh"
work=$(mktemp -d -p "$(dirname "$dstrain")")  # on the build's disk: O_DIRECT
groups=()
cleanup() {
  for m in "$work"/mnt/*; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
  for g in "${groups[@]}"; do cgroup_remove "$g"; done
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
mkdir -p "$work/nvme" "$work/mnt"
offload=(--config "$source/configs/default.json" --set dstrain.model.n_layer=2 --set dstrain.model.n_embd=256
         --set dstrain.model.vocab_size=256 --set dstrain.model.block_size=64 --set zero_optimization.stage=3
         --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_param.device=nvme
         --save-dir "$work/ckpt" --progress off)
at() { echo --set zero_optimization.offload_optimizer.nvme_path="$1" --set zero_optimization.offload_param.nvme_path="$1"; }

"${mpi[@]}" -np 2 "$dstrain" "${offload[@]}" $(at "$work/nvme") --steps 2 > "$work/first.log" 2>&1 ||
  { cat "$work/first.log"; echo "FAIL the offloaded run"; exit 1; }
# The checkpoints: every file but the save folder's lock (which each run opens), bytes and mtimes.
snapshot() {
  (cd "$work/ckpt" && find . -type f ! -name .dstrain.lock -printf '%p %s %T@\n' | sort &&
   find . -type f ! -name .dstrain.lock | sort | xargs sha256sum)
}
snapshot > "$work/before"

# Each rank's swap files, padded as the swappers pad them: the optimizer's master, two AdamW moments
# and the gradient (the shard, to 1024 elements), the parameters (each chunk to 1024 elements), and
# Init's build file (each chunk of a parameter over the persistence threshold, 1e5, to 4 KiB).
needed=$(python3 - <<'PY'
L, C, V, T, ranks = 2, 256, 256, 64, 2
numels = [V * C, T * C]
for _ in range(L):
    numels += [C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C]
numels += [C, C]
ceil = lambda a, b: -(-a // b)
pad = lambda n, m: ceil(n, m) * m
chunks = [ceil(n, ranks) for n in numels]
optimizer = 4 * pad(sum(chunks), 1024) * 4
params = sum(pad(c, 1024) * 4 for c in chunks)
build = sum(pad(c * 4, 4096) for n, c in zip(numels, chunks) if n > 100000)
print(ranks * (optimizer + params + build), optimizer, build)
PY
)
read -r needed optimizer build <<< "$needed"
echo "the swap files of 2 ranks: $needed bytes"
# The count against what the first run wrote: Init's build file, and the optimizer's shard.
grep -q "zero.Init: this rank's partition ($build bytes" "$work/first.log" ||
  { echo "FAIL the build file is not $build bytes"; failures=$((failures + 1)); }
shard=$(grep -o "the gradient of [0-9]* fp32 elements" "$work/first.log" | head -1 | awk '{print $4}')
[ "$(( (shard + 1023) / 1024 * 1024 * 4 * 4 ))" = "$optimizer" ] ||
  { echo "FAIL the optimizer's 4 files of a $shard-element shard are not $optimizer bytes"; failures=$((failures + 1)); }

# refused NAME PATH ARGS... -- MESSAGES...: the resumed run fails with every MESSAGE, builds no model,
# leaves PATH without dstrain folders and the checkpoints as they were.
refused() {
  local name=$1 path=$2 args=() messages=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  messages=("$@")
  if "${mpi[@]}" -np 2 "$dstrain" "${offload[@]}" "${args[@]}" --resume --steps 4 > "$work/out" 2>&1; then
    echo "FAIL $name: exited 0"; failures=$((failures + 1)); return
  fi
  local ok=1
  for m in "${messages[@]}"; do
    grep -qF -- "$m" "$work/out" || { echo "FAIL $name: no '$m'"; ok=0; }
  done
  grep -qE "zero.Init|\] model: GPT" "$work/out" && { echo "FAIL $name: the model was built"; ok=0; }
  [ -n "$path" ] && ls "$path" | grep -q '^dstrain-' && { echo "FAIL $name: left $(ls "$path")"; ok=0; }
  snapshot | cmp -s - "$work/before" || { echo "FAIL $name: the checkpoints changed"; ok=0; }
  if [ $ok = 1 ]; then echo "ok   $name"; else grep "error" "$work/out" | head -2; failures=$((failures + 1)); fi
}
key="config key 'zero_optimization.offload_optimizer.nvme_path'"

big_batch=(--set train_micro_batch_size_per_gpu=256)
wide=(--set dstrain.model.n_embd=4096)  # one block's MLP: 2 x 67M parameters, gathered and reduced whole
refused "a memory budget too small" "" $(at "$work/nvme") "${big_batch[@]}" --set dstrain.memory_limit=400MB -- \
  "cannot fit: the predicted peak" "bytes with every knob left unset as small as helps" "200000000 are available"
if cgroup_init; then
  group=$(cgroup_create dstrain_bad_input 2000000000)
  groups+=("$group")
  limit_file=$group/memory.limit_in_bytes; [ "$cgroup_version" = 2 ] && limit_file=$group/memory.max
  # The subshell joins the group, then runs the case; the kernel rounds the limit down to pages.
  (cgroup_enter "$group"; refused "a memory cgroup too small for one layer" "" $(at "$work/nvme") "${wide[@]}" -- \
     "cannot fit: the predicted peak" "$(( $(cat "$limit_file") / 2 )) are available" "path=$limit_file"
   exit $failures) ||
    failures=$((failures + 1))
else
  echo "skip a memory cgroup too small: no writable cgroup memory controller"
fi

mounted() {  # NAME TYPE OPTIONS: mounts $work/mnt/NAME; false (the case skipped) where it cannot
  mkdir -p "$work/mnt/$1"
  [ -n "${DSTRAIN_PRIVATE_MOUNTS:-}" ] && mount -t "$2" -o "$3" "$2" "$work/mnt/$1" 2>/dev/null && return 0
  echo "skip $1: cannot mount $2 here (not root, or no private mount namespace)"
  return 1
}
if mounted small tmpfs "size=$((needed - 4096))"; then
  refused "a disk one page too small" "$work/mnt/small" $(at "$work/mnt/small") -- "$key" "is too small" \
    "needs $needed bytes" "has $((needed - 4096)) free" "path=$work/mnt/small"
fi
if mounted exact tmpfs "size=$needed"; then
  refused "tmpfs with the room" "$work/mnt/exact" $(at "$work/mnt/exact") -- "$key" "is on tmpfs" \
    "needs $needed bytes" "has $needed free" "path=$work/mnt/exact"
fi
if mounted ram ramfs "mode=755"; then
  refused "ramfs (no O_DIRECT)" "$work/mnt/ram" $(at "$work/mnt/ram") -- "$key" "does not take O_DIRECT" \
    "needs $needed bytes" "path=$work/mnt/ram"
fi
mkdir -p "$work/mnt/readonly"
if [ -n "${DSTRAIN_PRIVATE_MOUNTS:-}" ] && mount --bind "$work/nvme" "$work/mnt/readonly" 2>/dev/null &&
   mount -o remount,ro,bind "$work/mnt/readonly" 2>/dev/null; then
  refused "a read-only folder" "$work/mnt/readonly" $(at "$work/mnt/readonly") -- "$key" "is not writable" \
    "needs $needed bytes" "path=$work/mnt/readonly" "errno=30"
else
  echo "skip a read-only folder: cannot bind-mount here"
fi

# Nothing lost: the checkpoint resumes.
"${mpi[@]}" -np 2 "$dstrain" "${offload[@]}" $(at "$work/nvme") --resume --steps 3 > "$work/resume.log" 2>&1 &&
  grep -q "checkpoint: loaded .*global_step2 at step 2" "$work/resume.log" && echo "ok   the checkpoint resumes" ||
  { cat "$work/resume.log"; echo "FAIL the checkpoint does not resume"; failures=$((failures + 1)); }
[ "$failures" = 0 ] || { echo "$failures failure(s)"; exit 1; }
