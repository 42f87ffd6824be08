#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# The trainer with tensorboard and csv_monitor on, at -np 2, with held-out evaluation and
# wall_clock_breakdown:
#   - the event file, read by read_tfevents.py (its own CRC-32C and protobuf decoding), holds one
#     record per step at x = step x train_batch_size whose train_loss, lr and grad_norm are the
#     --metrics file's as floats, val_loss on the evaluated steps only, and the breakdown timers;
#   - the CSV files hold the same figures exactly, under DeepSpeed's headers;
#   - a run resumed from a checkpoint appends to the CSV files (one header) and adds an event file;
#   - the pipeline trainer writes them too;
#   - a folder that cannot be created ends the run naming tensorboard.output_path.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set dstrain.model.n_layer=2
        --set dstrain.model.vocab_size=256 --set dstrain.model.block_size=32
        --set dstrain.data.type=text --set "dstrain.data.path=$source/docs/architecture.md"
        --set "dstrain.data.valid=$source/README.md" --set dstrain.eval_interval=2 --set dstrain.eval_iters=2
        --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null
        --set wall_clock_breakdown=true
        --set "tensorboard={\"enabled\": true, \"output_path\": \"$work/runs/\", \"job_name\": \"gpt\"}"
        --set "csv_monitor={\"enabled\": true, \"output_path\": \"$work/runs\", \"job_name\": \"gpt\"}")
"$@" -np 2 "$dstrain" "${common[@]}" --steps 3 --save-dir "$work/ckpt" --metrics "$work/metrics.jsonl" \
  > "$work/first.log"
grep -q "monitor: csv files in $work/runs/gpt" "$work/first.log"
"$@" -np 2 "$dstrain" "${common[@]}" --steps 5 --save-dir "$work/ckpt" --resume --metrics "$work/metrics.jsonl" \
  > "$work/resumed.log"

python3 - "$work" "$source/tests/monitor" <<'PY'
import csv, glob, json, os, struct, sys
work, reader_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, reader_dir)
import read_tfevents

def as_float(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

metrics = [json.loads(l) for l in open(f"{work}/metrics.jsonl")]
assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5], [m["step"] for m in metrics]
batch = 4  # micro 2 x accumulation 1 x 2 ranks
files = sorted(glob.glob(f"{work}/runs/gpt/events.out.tfevents.*"))
assert len(files) == 2, f"one event file per run, got {files}"
events = []
for path in files:
    with open(path, "rb") as f:
        records = [read_tfevents.event(r) for r in read_tfevents.records(f.read())]
    assert records[0]["file_version"] == "brain.Event:2", records[0]
    events += records[1:]
assert [e["step"] for e in events] == [m["step"] * batch for m in metrics], [e["step"] for e in events]
for e, m in zip(events, metrics):
    values = dict(e["values"])
    for name, key in (("train_loss", "loss"), ("lr", "lr"), ("grad_norm", "grad_norm")):
        assert values[f"Train/Samples/{name}"] == as_float(m[key]), (name, values, m)
    assert ("Eval/Samples/val_loss" in values) == ("val_loss" in m), (values, m)
    if "val_loss" in m:
        assert values["Eval/Samples/val_loss"] == as_float(m["val_loss"])
    for timer, ms in m["breakdown_ms"].items():
        assert values[f"Train/Samples/elapsed_time_ms_{timer}"] == as_float(ms), (timer, values)
assert [m["step"] for m in metrics if "val_loss" in m] == [2, 3, 4, 5]  # every 2 and each run's last

def csv_rows(name):
    with open(f"{work}/runs/gpt/{name}.csv") as f:
        rows = list(csv.reader(f))
    return rows[0], [(int(x), float(v)) for x, v in rows[1:]]

header, rows = csv_rows("Train_Samples_train_loss")
assert header == ["step", "train_loss"], header
assert rows == [(m["step"] * batch, m["loss"]) for m in metrics], rows
header, rows = csv_rows("Eval_Samples_val_loss")
assert header == ["step", "val_loss"], header
assert rows == [(m["step"] * batch, m["val_loss"]) for m in metrics if "val_loss" in m], rows
print(f"monitors OK: {len(events)} steps in {len(files)} event files, {len(os.listdir(work + '/runs/gpt'))} files")
PY

# The pipeline trainer: its losses in the CSV file.
"$@" -np 2 "$dstrain" --config "$source/configs/pipeline.json" --steps 2 --metrics "$work/pipe.jsonl" \
  --set "csv_monitor={\"enabled\": true, \"output_path\": \"$work/pipe\"}" > "$work/pipe.log"
python3 - "$work" <<'PY'
import csv, json, sys
work = sys.argv[1]
metrics = [json.loads(l) for l in open(f"{work}/pipe.jsonl")]
rows = list(csv.reader(open(f"{work}/pipe/DeepSpeedJobName/Train_Samples_train_loss.csv")))
assert rows[0] == ["step", "train_loss"], rows[0]
batch = 32  # micro 4 x 8 micro-batches x 1 replica (2 stages on 2 ranks)
assert [(int(x), float(v)) for x, v in rows[1:]] == [(m["step"] * batch, m["loss"]) for m in metrics], rows
assert len(metrics) == 2, metrics
print("pipeline monitors OK")
PY

touch "$work/file"
if "$dstrain" "${common[@]}" --steps 1 --set "tensorboard.output_path=$work/file" > "$work/err.log" 2>&1; then
  echo "a tensorboard folder under a file did not fail"; exit 1
fi
grep -q "tensorboard.output_path" "$work/err.log" || { cat "$work/err.log"; exit 1; }
grep -qF "$work/file/gpt" "$work/err.log" || { cat "$work/err.log"; exit 1; }
echo "errors OK"
