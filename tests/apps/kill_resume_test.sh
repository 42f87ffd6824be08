#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# A run that loses a rank to SIGKILL between two periodic saves resumes from the newest complete
# checkpoint with exactly the losses of an uninterrupted run.
#   A: -np 2, ZeRO 2, 16 steps uninterrupted.
#   B: the same with --save-interval 3 --keep-last 2; once it has logged step 4 one rank gets SIGKILL.
#   C: --resume to step 16: it must start right after B's latest checkpoint and log A's losses bit
#      for bit (same world size and stage: the same arithmetic).
# Also: B kept the newest 2 checkpoints (3 when the kill came between a save and the pruning that
# follows it), and resuming with --steps at or below the checkpoint's step
# is an error.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set train_micro_batch_size_per_gpu=4
        --set zero_optimization.stage=2 --set scheduler=null --set optimizer.params.lr=0.003)
"$@" -np 2 "$dstrain" "${common[@]}" --steps 16 --metrics "$work/a.jsonl" > /dev/null

"$@" -np 2 "$dstrain" "${common[@]}" --steps 16 --save-dir "$work/ckpt" --save-interval 3 --keep-last 2 \
  --metrics "$work/b.jsonl" > "$work/b.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  grep -q '"step":4[,}]' "$work/b.jsonl" 2> /dev/null && break
  sleep 0.05
done
victim=$(pgrep -P "$launcher" | tail -n 1)
[ -n "$victim" ] || { echo "no rank process under the launcher"; cat "$work/b.log"; exit 1; }
kill -KILL "$victim"
if wait "$launcher"; then echo "the run survived SIGKILL of a rank"; exit 1; fi
if grep -q '"step":16[,}]' "$work/b.jsonl"; then echo "the run finished before the kill; nothing tested"; exit 1; fi

latest=$(cat "$work/ckpt/latest")
saved=${latest#global_step}
kept=$(find "$work/ckpt" -maxdepth 2 -name index.json | wc -l)
echo "killed after step $(grep -c . "$work/b.jsonl") logged; latest $latest; $kept complete checkpoint(s) kept"
# The oldest goes only once the newest is complete, so a kill between the two leaves 3. Whatever
# is kept is the newest saves: every 3 steps down from the newest, which is latest or (a kill
# before latest was rewritten) the one after it.
[ "$kept" -le 3 ] || { echo "--keep-last 2 kept $kept"; exit 1; }
steps=$(find "$work/ckpt" -maxdepth 2 -name index.json | sed -E 's|.*/global_step([0-9]+)/index.json|\1|' | sort -rn | paste -sd' ')
top=${steps%% *}
newest=""
for ((i = 0; i < kept; i++)); do newest+="${newest:+ }$((top - 3 * i))"; done
[ "$steps" = "$newest" ] && { [ "$top" -eq "$saved" ] || [ "$top" -eq $((saved + 3)) ]; } ||
  { echo "kept the checkpoints of steps $steps, latest $latest: not the newest saves"; exit 1; }

if "$@" -np 2 "$dstrain" "${common[@]}" --steps "$saved" --save-dir "$work/ckpt" --resume > "$work/early.log" 2>&1; then
  echo "--resume with --steps $saved (the checkpoint's step) succeeded"; exit 1
fi
grep -q "nothing to train" "$work/early.log" || { cat "$work/early.log"; exit 1; }

"$@" -np 2 "$dstrain" "${common[@]}" --steps 16 --save-dir "$work/ckpt" --save-interval 3 --resume \
  --metrics "$work/c.jsonl" > /dev/null
fields() { sed -E 's/.*"loss":([^,}]*).*"step":([0-9]+).*/\2 \1/' "$1"; }
fields "$work/a.jsonl" > "$work/a.txt"
fields "$work/c.jsonl" > "$work/c.txt"
awk -v first=$((saved + 1)) 'NR == FNR { a[$1] = $2; next }
     { if (FNR == 1 && $1 != first) { printf "resumed at step %d, expected %d\n", $1, first; bad = 1 }
       if ($2 != a[$1]) { printf "step %d: resumed %s vs uninterrupted %s\n", $1, $2, a[$1]; bad = 1 }
       last = $1 }
     END { if (last != 16) { print "resumed run ended at step " last; bad = 1 }
           if (bad) exit 1
           printf "kill and resume OK: steps %d-16 equal the uninterrupted run bit for bit\n", first }' \
  "$work/a.txt" "$work/c.txt"
