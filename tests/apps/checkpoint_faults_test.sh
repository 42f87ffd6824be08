#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# The trainer's checkpoint faults, each a non-zero exit with a message that names the cause:
# a --save-dir that is a file (before step 1), a changed model or optimizer on --resume, a
# non-finite loss (which must not become `latest`), a full disk (where a small tmpfs can be
# mounted), and `dstrain export` from the sharded checkpoint (and onto a full disk). An index.json
# edited by hand (its checksum left, or recomputed as docs/checkpoints.md says: a shard_offset + 7,
# exp_avg's and exp_avg_sq's offsets swapped, global_steps -5) names the file and the field. A
# second job on a save folder in use names the holder. A pipeline killed between its stages' saves
# resumes from the newest step every stage has, or from --tag.
set -uo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
mounted=""
trap '[ -n "$mounted" ] && umount "$mounted"; rm -rf "$work"' EXIT
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set train_micro_batch_size_per_gpu=4
        --set zero_optimization.stage=1 --set scheduler=null)
failed=0
# expect_failure NAME PATTERN ARGS...: the run must exit non-zero and print PATTERN.
expect_failure() {
  local name=$1 pattern=$2
  shift 2
  if "$@" > "$work/out.log" 2>&1; then
    echo "FAIL $name: exited 0"; failed=1
  elif ! grep -q -- "$pattern" "$work/out.log"; then
    echo "FAIL $name: no '$pattern' in:"; tail -5 "$work/out.log"; failed=1
  else
    echo "ok   $name: $(grep -m1 -o -- "$pattern.*" "$work/out.log" | cut -c1-160)"
  fi
}
launch=("$@")
run() { "${launch[@]}" -np 2 "$dstrain" "${common[@]}" "$@"; }

touch "$work/a-file"
expect_failure "save-dir is a file" "not a directory.*$work/a-file" \
  run --steps 3 --save-dir "$work/a-file" --metrics "$work/never.jsonl"
[ ! -s "$work/never.jsonl" ] || { echo "FAIL save-dir: training ran before the check"; failed=1; }

run --steps 2 --save-dir "$work/ckpt" > /dev/null 2>&1 || { echo "FAIL the first save"; exit 1; }
expect_failure "fewer layers" "n_layer 2 -> 1" run --steps 4 --save-dir "$work/ckpt" --resume --set dstrain.model.n_layer=1
expect_failure "other heads" "n_head 4 -> 2" run --steps 4 --save-dir "$work/ckpt" --resume --set dstrain.model.n_head=2
expect_failure "other optimizer" "optimizer AdamW, this run configures SGD" \
  run --steps 4 --save-dir "$work/ckpt" --resume --set 'optimizer={"type":"SGD","params":{"lr":0.1}}'
# Saving every step while diverging: the state that made the loss non-finite is never saved.
expect_failure "diverged" "not finite" \
  run --steps 8 --save-dir "$work/ckpt" --save-interval 1 --resume --set optimizer.params.lr=1e30 \
  --set gradient_clipping=0
bad_step=$(grep -m1 "not finite" "$work/out.log" | grep -o "at step [0-9]*" | head -n 1 | grep -o "[0-9]*$")
latest=$(cat "$work/ckpt/latest")
if [ -z "$bad_step" ] || [ "${latest#global_step}" -ge "$bad_step" ]; then
  echo "FAIL diverged: latest is $latest, the loss or weights went non-finite at step '$bad_step'"; failed=1
fi

if "$@" -np 1 "$dstrain" export --checkpoint "$work/ckpt" --out "$work/model.pt" > "$work/out.log" 2>&1 \
   && [ -s "$work/model.pt" ]; then
  echo "ok   export: $(head -c 160 "$work/out.log")"
else
  echo "FAIL export:"; cat "$work/out.log"; failed=1
fi

# edit_index FOLDER RECOMPUTE PYTHON: applies the Python statement to `idx` (the parsed index.json)
# and writes it back, with index_crc32c recomputed (RECOMPUTE=1) as docs/checkpoints.md describes.
edit_index() {
  python3 - "$1/index.json" "$2" "$3" <<'PY'
import json, sys
path, recompute, edit = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
table = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
idx = json.load(open(path))
exec(edit)
if recompute:
    idx.pop("index_crc32c")
    idx["index_crc32c"] = crc32c(json.dumps(idx, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
json.dump(idx, open(path, "w"), indent=1)
PY
}
run --steps 2 --save-dir "$work/clean" > /dev/null 2>&1 || { echo "FAIL a clean save"; exit 1; }
resume_from() { cp -r "$work/clean" "$work/edited"; edit_index "$work/edited/global_step2" "$@"; }
edited_run() { run --steps 3 --save-dir "$work/edited" --resume; }
index="$work/edited/global_step2/index.json"
resume_from 1 "pass"
if edited_run > "$work/out.log" 2>&1; then echo "ok   an index rewritten with the recipe's checksum loads"
else echo "FAIL the checksum recipe of docs/checkpoints.md:"; tail -3 "$work/out.log"; failed=1; fi
rm -rf "$work/edited"
resume_from 0 "idx['params'][3]['shard_offset'] += 7"
expect_failure "index edited, checksum left" "index is corrupted or was edited.*$index" edited_run
rm -rf "$work/edited"
resume_from 1 "idx['params'][3]['shard_offset'] += 7"
expect_failure "shard_offset + 7" "params\[3\] ('[^']*').shard_offset: [0-9]*, expected.*$index" edited_run
rm -rf "$work/edited"
resume_from 1 "s = idx['shards'][0]['sections']; s[1]['offset'], s[2]['offset'] = s[2]['offset'], s[1]['offset']"
expect_failure "swapped state offsets" "shards\[0\].sections\[1\] ('optim/exp_avg').offset: .*$index" edited_run
rm -rf "$work/edited"
resume_from 1 "idx['counters']['global_steps'] = -5"
expect_failure "negative step" "counters.global_steps: -5 is below 0.*$index" edited_run
rm -rf "$work/edited"

# A second job on a folder in use: refused at start, naming the first job's host and pid; the first
# one goes on (SIGUSR1 then stops it with a checkpoint: its own .partial was never touched). Steps
# enough that it is still running then on any machine (400 took 0.5 s on a 16-core one).
"${launch[@]}" -np 2 "$dstrain" "${common[@]}" --steps 1000000 --save-dir "$work/shared" --metrics "$work/first.jsonl" \
  > "$work/first.log" 2>&1 &
first=$!
for _ in $(seq 600); do [ -s "$work/first.jsonl" ] && break; sleep 0.05; done
holder=$(cat "$work/shared/.dstrain.lock")
holder_pid=${holder##* }
if [ "$holder" = "host $(hostname) pid $holder_pid" ] && pgrep -P "$first" | grep -qx "$holder_pid"; then
  expect_failure "folder in use" "in use by another dstrain job ($holder).*$work/shared/.dstrain.lock" \
    run --steps 3 --save-dir "$work/shared"
else
  echo "FAIL the lock file says '$holder', not one of the first job's ranks: $(pgrep -P "$first" | xargs)"; failed=1
fi
kill -USR1 "$first"
wait "$first"; rc=$?
if [ "$rc" = 75 ] && [ -s "$work/shared/latest" ]; then echo "ok   the first job saved and stopped (exit 75)"
else echo "FAIL the first job: exit $rc"; tail -5 "$work/first.log"; failed=1; fi

# A pipeline (2 stages) whose stage 1 died before its step-3 save completed.
pipeline=(--config "$source/configs/pipeline.json" --set dstrain.model.n_embd=64 --set gradient_accumulation_steps=2
          --set scheduler=null)
"${launch[@]}" -np 2 "$dstrain" "${pipeline[@]}" --steps 5 --metrics "$work/pipe-a.jsonl" > /dev/null 2>&1
"${launch[@]}" -np 2 "$dstrain" "${pipeline[@]}" --steps 3 --save-dir "$work/pipe" --save-interval 1 > /dev/null 2>&1
rm "$work/pipe/stage1/global_step3/index.json"
echo global_step2 > "$work/pipe/stage1/latest"
for pick in "" "global_step1"; do
  rm -rf "$work/pipe-case" "$work/pipe-b.jsonl" && cp -r "$work/pipe" "$work/pipe-case"
  expected=${pick:-global_step2}
  if "${launch[@]}" -np 2 "$dstrain" "${pipeline[@]}" --steps 5 --save-dir "$work/pipe-case" --resume ${pick:+--tag $pick} \
       --metrics "$work/pipe-b.jsonl" > "$work/out.log" 2>&1 &&
     grep -q "resuming every stage from $expected" "$work/out.log" &&
     python3 - "$work/pipe-a.jsonl" "$work/pipe-b.jsonl" "${expected#global_step}" <<'PY'
import json, sys
a = {m["step"]: m["loss"] for m in map(json.loads, open(sys.argv[1]))}
b = [json.loads(line) for line in open(sys.argv[2])]
assert [m["step"] for m in b] == list(range(int(sys.argv[3]) + 1, 6)), [m["step"] for m in b]
assert all(a[m["step"]] == m["loss"] for m in b), (a, b)
PY
  then
    echo "ok   pipeline resume${pick:+ --tag $pick}: from $expected, the uninterrupted run's losses"
  else
    echo "FAIL pipeline resume${pick:+ --tag $pick} (expected $expected):"; tail -5 "$work/out.log"; failed=1
  fi
done

mkdir "$work/small"
if mount -t tmpfs -o size=512k tmpfs "$work/small" 2> /dev/null; then
  mounted="$work/small"
  expect_failure "full disk" "no space left on device writing checkpoint shard.*$work/small/.global_step1.partial" \
    run --steps 1 --save-dir "$work/small"
  leftover=$(ls -A "$work/small" | grep -v '^\.dstrain\.lock$')  # the folder's lock file stays, by design
  [ -z "$leftover" ] || { echo "FAIL full disk: left $leftover"; failed=1; }
  # The exported weights (~500 KB) do not fit in 512 KiB less a 300 KiB file.
  head -c 300k /dev/zero > "$work/small/filler"
  expect_failure "export to a full disk" "cannot write the exported weights: .*path=$work/small/model.pt.*No space left" \
    "${launch[@]}" -np 1 "$dstrain" export --checkpoint "$work/ckpt" --out "$work/small/model.pt"
  leftover=$(ls -A "$work/small" | grep -v '^filler$\|^\.dstrain\.lock$')
  [ -z "$leftover" ] || { echo "FAIL export to a full disk: left $leftover"; failed=1; }
else
  echo "skip full disk: cannot mount a tmpfs here"
  expect_failure "export into a file" "cannot write the exported weights: .*path=$work/a-file/model.pt" \
    "${launch[@]}" -np 1 "$dstrain" export --checkpoint "$work/ckpt" --out "$work/a-file/model.pt"
fi
exit $failed
