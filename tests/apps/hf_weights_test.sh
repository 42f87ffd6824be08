#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# Hugging Face weights out of the trainer's checkpoints and back into a run:
#   - `dstrain export --format safetensors` from a stage 0 checkpoint (-np 1), a stage 3 one (-np 2)
#     and a 2-stage pipeline's (-np 2): every tensor equals the checkpoint's weights read with NumPy
#     as docs/checkpoints.md reads them (Conv1D weights transposed), config.json is GPT-2's;
#   - the pipeline's checkpoint with --max-shard-size 100KB, read with struct and NumPy alone: files
#     cut at the limit as transformers cuts them, the index's total_size and weight_map, every tensor;
#     and with --format torch, read by PyTorch (torch.jit.load): every tensor; its progress bar;
#   - dstrain.model.init_from: the first logged loss of a run started from the export (-np 1
#     stage 0, and -np 2 stage 3 from the sharded export with the sizes left to config.json) equals the
#     loss that a PyTorch GPT-2 (hf_gpt2_reference.py) gives the export on that step's batch, within
#     1e-4 relative;
#   - estimate and plan of a config whose model block is init_from alone count the export's parameters;
#   - a Llama (LlamaForCausalLM's names, 1:1) exported: init_from's first loss at -np 1 is a PyTorch
#     LlamaForCausalLM's (hf_llama_reference.py) within 1e-4; init_from at -np 2 stage 3 with lr 0:
#     its held-out loss is `dstrain eval`'s of the exported checkpoint;
#   - errors name their key or file: a size that disagrees with config.json, one stage's folder of
#     a pipeline, a config.json whose sizes the tensors do not have (the tensor and the file).
set -euo pipefail
dstrain=$1 source=$2
python=${DSTRAIN_PYTHON:-/usr/bin/python3}  # the Python with torch (tests/support/python.hpp)
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reference="$python $source/tests/apps/hf_gpt2_reference.py"
text="$source/docs/architecture.md"
model=(--set dstrain.model.n_embd=64 --set dstrain.model.n_layer=2 --set dstrain.model.n_head=4
       --set dstrain.model.vocab_size=256 --set dstrain.model.block_size=32)
common=(--config "$source/configs/default.json" "${model[@]}" --set dstrain.data.type=text
        --set "dstrain.data.path=$text" --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1
        --set train_batch_size=null --set scheduler=null --set optimizer.params.lr=0.003 --progress off)
export DSTRAIN_LOG_LEVEL=warn

"$@" -np 1 "$dstrain" "${common[@]}" --steps 3 --save-dir "$work/ckpt0" > "$work/train0.log"
"$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=3 --steps 3 --save-dir "$work/ckpt3" > "$work/train3.log"
"$@" -np 2 "$dstrain" --config "$source/configs/pipeline.json" "${model[@]}" --set gradient_accumulation_steps=2 \
  --set scheduler=null --progress off --steps 3 --save-dir "$work/ckptp" > "$work/trainp.log"
for run in 0 3 p; do
  "$dstrain" export --checkpoint "$work/ckpt$run" --format safetensors --out "$work/hf$run" > "$work/export$run.log"
done
grep -q "and 1 more stages" "$work/exportp.log" || { echo "the pipeline export names one stage:"; cat "$work/exportp.log"; exit 1; }
# The pipeline's checkpoint again, cut into files of at most 100 kB (the model holds 474 kB), and
# as a LibTorch file.
"$dstrain" export --checkpoint "$work/ckptp" --format safetensors --max-shard-size 100KB --out "$work/hfs" \
  --progress off > "$work/exports.log"
"$dstrain" export --checkpoint "$work/ckptp" --out "$work/pipeline.pt" --progress on > "$work/exportt.log"
# --progress on: the bar, redrawn in place, ends at all of the shards' and weights' megabytes.
last_bar=$(tr '\r' '\n' < "$work/exportt.log" | grep ' MB | ' | tail -1)
[[ "$last_bar" =~ \]\ ([0-9.]+)/([0-9.]+)\ MB ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] ||
  { echo "no finished progress bar:"; cat "$work/exportt.log"; exit 1; }
grep -q "and 1 more stages" "$work/exportt.log" || { echo "the torch export names one stage:"; cat "$work/exportt.log"; exit 1; }

$python - "$work" "$source/tests/apps" <<'PY'
import json, os, sys
import numpy as np
work = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from hf_gpt2_reference import read_weights

def checkpoint_weights(folder):
    """docs/checkpoints.md's recipe: each parameter's fp32 master from the shards that hold it."""
    idx = json.load(open(folder + "/index.json"))
    weights = {}
    for p in idx["params"]:
        parts = []
        for k in range(idx["partitions"]):
            shard = idx["shards"][k]
            sec = next(s for s in shard["sections"] if s["name"] == "master")
            parts.append(np.fromfile(folder + "/" + shard["file"], dtype="<f4", count=p["chunk"],
                                     offset=sec["offset"] + 4 * p["shard_offset"]))
        weights[p["name"]] = np.concatenate(parts)[:p["numel"]].reshape(p["shape"])
    return weights

def latest(folder):
    return folder + "/" + open(folder + "/latest").read().strip()

for run, folders in (("0", [latest(work + "/ckpt0")]), ("3", [latest(work + "/ckpt3")]),
                     ("p", [latest(work + "/ckptp/stage0"), latest(work + "/ckptp/stage1")])):
    expected = {}
    for folder in folders:
        for name, array in checkpoint_weights(folder).items():
            conv1d = name.endswith(".weight") and (".attn.c_" in name or ".mlp.c_" in name)
            expected.setdefault("transformer." + name, array.T if conv1d else array)
    exported = read_weights(f"{work}/hf{run}")
    assert sorted(exported) == sorted(expected), (run, sorted(set(exported) ^ set(expected)))
    assert len(exported) == 4 + 12 * 2, len(exported)
    for name, array in expected.items():
        assert exported[name].shape == array.shape, (run, name, exported[name].shape, array.shape)
        assert np.array_equal(exported[name], array), (run, name)
    config = json.load(open(f"{work}/hf{run}/config.json"))
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["model_type"] == "gpt2", config
    assert (config["n_embd"], config["n_layer"], config["n_head"], config["n_positions"], config["vocab_size"]) == \
        (64, 2, 4, 32, 256), config
    print(f"export {run}: {len(exported)} tensors equal the checkpoint's")

# The sharded export, read with struct and NumPy alone, against the pipeline's checkpoint (`expected`
# is the loop's last).
import re, struct
def read_file(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    assert entries[-1][1]["data_offsets"][1] == len(data), path
    return [(name, np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], dtype="<f4").reshape(e["shape"]), e)
            for name, e in entries]

limit = 100_000
hfs = work + "/hfs"
index = json.load(open(hfs + "/model.safetensors.index.json"))
files = sorted(f for f in os.listdir(hfs) if f.endswith(".safetensors"))
assert len(files) > 2 and not os.path.exists(hfs + "/model.safetensors"), files
assert all(re.fullmatch(r"model-%05d-of-%05d\.safetensors" % (k + 1, len(files)), f) for k, f in enumerate(files)), files
seen, total, previous = {}, 0, None
for file in files:
    tensors = read_file(hfs + "/" + file)
    data = sum(array.nbytes for _, array, _ in tensors)
    assert data <= limit or len(tensors) == 1, (file, data)
    # A file ends only where the next tensor would take it past the limit.
    assert previous is None or previous + tensors[0][1].nbytes > limit, (file, previous)
    previous = data
    for name, array, entry in tensors:
        assert entry["dtype"] == "F32" and index["weight_map"][name] == file, (name, file)
        seen[name] = array
        total += array.nbytes
assert index["metadata"]["total_size"] == total, (index["metadata"], total)
assert sorted(index["weight_map"]) == sorted(seen) == sorted(expected), sorted(set(seen) ^ set(expected))
for name, array in expected.items():
    assert np.array_equal(seen[name], array), name
print(f"sharded export: {len(files)} files of at most {limit} bytes, {len(seen)} tensors equal the checkpoint's")

# The pipeline's checkpoint as a LibTorch file, read by PyTorch.
import torch
module = torch.jit.load(work + "/pipeline.pt")
saved = {name: p.detach().numpy() for name, p in module.named_parameters()}
assert sorted("transformer." + name for name in saved) == sorted(expected), sorted(saved)
for name, array in saved.items():
    conv1d = name.endswith(".weight") and (".attn.c_" in name or ".mlp.c_" in name)
    assert np.array_equal(array.T if conv1d else array, expected["transformer." + name]), name
print(f"torch export of the pipeline: {len(saved)} tensors equal the checkpoint's")
PY

# The first step's batch: samples 0.. of step 0 (the trainer's default data seed 1337).
first_loss() { $python -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readline())["loss"]))' "$1"; }
close() {  # close NAME GOT WANT: within 1e-4 relative
  $python -c 'import sys; got, want = float(sys.argv[2]), float(sys.argv[3]); ok = abs(got - want) <= 1e-4 * abs(want)
print(("ok  " if ok else "FAIL") + f" {sys.argv[1]}: dstrain {got}, PyTorch {want}"); sys.exit(0 if ok else 1)' "$@"
}
"$@" -np 1 "$dstrain" "${common[@]}" --set "dstrain.model.init_from=$work/hf0" --steps 1 --metrics "$work/init0.jsonl" \
  > "$work/init0.log"
close "init_from at -np 1" "$(first_loss "$work/init0.jsonl")" "$($reference loss "$work/hf0" --text "$text" --batch 2)"
# Sizes from config.json alone, from the sharded export, at stage 3 on two ranks: the global batch is
# samples 0..3.
"$@" -np 2 "$dstrain" "${common[@]}" --set "dstrain.model.init_from=$work/hfs" --set dstrain.model.n_layer=null \
  --set dstrain.model.n_embd=null --set zero_optimization.stage=3 --steps 1 --metrics "$work/initp.jsonl" > "$work/initp.log"
close "init_from of the sharded export at -np 2, stage 3" "$(first_loss "$work/initp.jsonl")" \
  "$($reference loss "$work/hfs" --text "$text" --batch 4)"

# estimate and plan read init_from's sizes as the trainer does: a model block of init_from alone.
$python - "$source/configs/default.json" "$work/hf0" "$work/init_only.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["dstrain"]["model"] = {"init_from": sys.argv[2]}
json.dump(config, open(sys.argv[3], "w"))
PY
parameters=$($python -c 'import sys; sys.path.insert(0, sys.argv[1]); from hf_gpt2_reference import read_weights
print(sum(a.size for a in read_weights(sys.argv[2]).values()))' "$source/tests/apps" "$work/hf0")
for command in estimate plan; do
  "$dstrain" $command -c "$work/init_only.json" > "$work/$command.log"
  grep -q "model: GPT, $parameters parameters in 28 tensors" "$work/$command.log" ||
    { echo "$command does not count init_from's $parameters parameters:"; head -3 "$work/$command.log"; exit 1; }
done
echo "ok   estimate and plan: init_from's $parameters parameters"

# A Llama through the export and init_from: with lr 0 the run's weights stay the export's, so its
# held-out loss equals `dstrain eval` of the checkpoint that was exported (2e-6: printed to 6 places).
llama=(--config "$source/configs/llama_tiny.json" --set dstrain.model.vocab_size=256 --set dstrain.model.hidden_size=64
       --set dstrain.model.intermediate_size=96 --set dstrain.model.num_hidden_layers=2
       --set dstrain.model.max_position_embeddings=32 --set dstrain.data.type=text --set "dstrain.data.path=$text"
       --set "dstrain.data.valid=$source/README.md" --set dstrain.eval_iters=2 --set dstrain.eval_interval=0
       --set train_micro_batch_size_per_gpu=2 --set scheduler=null --progress off)
"$@" -np 1 "$dstrain" "${llama[@]}" --steps 2 --save-dir "$work/llama" > "$work/llama.log"
"$dstrain" export --checkpoint "$work/llama" --format safetensors --out "$work/hf-llama" > /dev/null
grep -q '"architectures": \[\s*"LlamaForCausalLM"' <(tr -d '\n' < "$work/hf-llama/config.json") ||
  { echo "not a LlamaForCausalLM config:"; cat "$work/hf-llama/config.json"; exit 1; }
# The trainer's first loss from the export is what a PyTorch LlamaForCausalLM gives it on that batch.
"$@" -np 1 "$dstrain" "${llama[@]}" --set "dstrain.model.init_from=$work/hf-llama" --steps 1 \
  --metrics "$work/init-llama1.jsonl" > "$work/init-llama1.log"
close "Llama init_from at -np 1" "$(first_loss "$work/init-llama1.jsonl")" \
  "$($python "$source/tests/apps/hf_llama_reference.py" loss "$work/hf-llama" --text "$text" --batch 2)"
"$@" -np 2 "$dstrain" "${llama[@]}" --set "dstrain.model.init_from=$work/hf-llama" --set zero_optimization.stage=3 \
  --set optimizer.params.lr=0 --set dstrain.model.hidden_size=null --steps 1 --metrics "$work/init-llama.jsonl" \
  > "$work/init-llama.log"
$python - "$(tail -1 "$work/init-llama.jsonl")" "$("$dstrain" eval --checkpoint "$work/llama" --batch-size 4)" <<'PY'
import json, sys
got, want = json.loads(sys.argv[1])["val_loss"], float(sys.argv[2])
assert abs(got - want) <= 2e-6 + 1e-6 * abs(want), (got, want)
print(f"ok   Llama init_from at -np 2, stage 3: held-out loss {got}, dstrain eval of the exported checkpoint {want}")
PY

expect_error() {  # expect_error TEXT COMMAND...: the command fails and says TEXT
  local text=$1; shift
  if "$@" > "$work/err.log" 2>&1; then echo "succeeded: $*"; exit 1; fi
  grep -qF -- "$text" "$work/err.log" || { echo "no '$text' in:"; cat "$work/err.log"; exit 1; }
  echo "ok   error: $text"
}
expect_error "dstrain.model.n_layer is 3, init_from's config.json says 2" \
  "$dstrain" "${common[@]}" --set "dstrain.model.init_from=$work/hf0" --set dstrain.model.n_layer=3 --steps 1
expect_error "config key 'dstrain.model.init_from': init_from names no folder" "$dstrain" "${common[@]}" --set "dstrain.model.init_from=$work/nothing" --steps 1
expect_error "of the model's 28 parameters (one stage of a pipeline?" \
  "$dstrain" export --checkpoint "$work/ckptp/stage0" --format safetensors --out "$work/stage0-only"
# A config.json whose sizes the tensors do not have: n_embd 64 -> 128.
cp -r "$work/hf0" "$work/hf-wide"
sed -i 's/"n_embd": 64/"n_embd": 128/' "$work/hf-wide/config.json"
expect_error "tensor 'transformer.wte.weight' has shape [256, 64], the model's 'wte.weight' needs [256, 128] [path=$work/hf-wide/model.safetensors]" \
  "$dstrain" "${common[@]}" --set "dstrain.model.init_from=$work/hf-wide" --set dstrain.model.n_embd=null --steps 1
echo "hf weights OK"
