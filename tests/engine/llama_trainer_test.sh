#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# `dstrain` with dstrain.model.type "llama" (configs/llama_tiny.json, made small, on text data):
#   - -np 2 at ZeRO stages 0, 1, 2 and 3, and at stage 3 with the optimizer on NVMe: every step's
#     loss within 1e-5 (relative) of stage 0's, and the loss falls;
#   - `dstrain eval` on stage 3's checkpoint prints its last val_loss (--batch-size = 2 ranks x micro);
#   - `dstrain generate` echoes the prompt and streams as many tokens as asked, the same text for the
#     same seed; too many new tokens is an error naming max_position_embeddings;
#   - the pipeline trainer at 2 stages (-np 2, twice the micro-batches: the same global batch) with
#     stage 0's losses; with tie_word_embeddings (the first and last stage summing the tied
#     embedding's gradient), the losses of the data-parallel run with it.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d -p "$(dirname "$dstrain")")
trap 'rm -rf "$work"' EXIT
mkdir "$work/nvme"
common=(--config "$source/configs/llama_tiny.json" --set dstrain.model.hidden_size=64
        --set dstrain.model.intermediate_size=128 --set dstrain.model.num_hidden_layers=2
        --set dstrain.model.vocab_size=256 --set dstrain.model.max_position_embeddings=32
        --set dstrain.data.type=text --set "dstrain.data.path=$source/docs/architecture.md"
        --set "dstrain.data.valid=$source/README.md" --set dstrain.eval_interval=0 --set dstrain.eval_iters=3
        --set train_micro_batch_size_per_gpu=4 --set scheduler=null --set optimizer.params.lr=0.003
        --set zero_optimization.stage3_param_persistence_threshold=0 --steps 6)
for stage in 0 1 2 3; do
  "$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=$stage --metrics "$work/s$stage.jsonl" \
    --save-dir "$work/ckpt$stage" > "$work/s$stage.log" 2>&1 || { cat "$work/s$stage.log"; exit 1; }
done
"$@" -np 2 "$dstrain" "${common[@]}" --set zero_optimization.stage=3 \
  --set zero_optimization.offload_optimizer.device=nvme --set "zero_optimization.offload_optimizer.nvme_path=$work/nvme" \
  --set zero_optimization.offload_optimizer.buffer_count=12 --set zero_optimization.sub_group_size=20000 \
  --set aio.block_size=65536 --metrics "$work/nvme.jsonl" > "$work/nvme.log" 2>&1 || { cat "$work/nvme.log"; exit 1; }
grep -q "model: Llama with 2 layers, 64 wide" "$work/s0.log" || { echo "no Llama in the log:"; cat "$work/s0.log"; exit 1; }
printed=$("$dstrain" eval --checkpoint "$work/ckpt3" --batch-size 8)
python3 - "$work" "$printed" <<'PY'
import json, sys
work, printed = sys.argv[1], float(sys.argv[2])
runs = {name: [json.loads(l) for l in open(f"{work}/{name}.jsonl")] for name in ("s0", "s1", "s2", "s3", "nvme")}
reference = [m["loss"] for m in runs["s0"]]
assert len(reference) == 6 and reference[-1] < reference[0], reference
for name, lines in runs.items():
    for m, ref in zip(lines, reference):
        assert abs(m["loss"] - ref) <= 1e-5 * abs(ref), (name, m["step"], m["loss"], ref)
assert runs["nvme"][-1]["nvme_read_bytes"] > 0, runs["nvme"][-1]
last = runs["s3"][-1]["val_loss"]
assert abs(printed - last) <= 2e-6 * abs(last) + 1e-6, f"dstrain eval printed {printed}, training logged {last}"
print("stages 0-3 and NVMe offload: the same losses", reference, "; eval", printed)
PY
one=$("$dstrain" generate --checkpoint "$work/ckpt3" --prompt "The " --max-new-tokens 12 --temperature 0.8 --seed 5 2>/dev/null)
two=$("$dstrain" generate --checkpoint "$work/ckpt3" --prompt "The " --max-new-tokens 12 --temperature 0.8 --seed 5 2>/dev/null)
[ "$one" = "$two" ] || { echo "one seed, two texts: '$one' vs '$two'"; exit 1; }
python3 - "$work/ckpt3" "$dstrain" <<'PY'
import subprocess, sys
out = subprocess.run([sys.argv[2], "generate", "--checkpoint", sys.argv[1], "--prompt", "The ", "--max-new-tokens", "12",
                      "--temperature", "0"], capture_output=True, check=True).stdout
assert out.startswith(b"The ") and len(out) == 4 + 12 + 1, out  # prompt, 12 byte tokens, newline
PY
expect_error() {  # expect_error TEXT COMMAND...: the command fails and says TEXT
  local text=$1; shift
  if "$@" > "$work/err.log" 2>&1; then echo "succeeded: $*"; exit 1; fi
  grep -qF -- "$text" "$work/err.log" || { echo "no '$text' in:"; cat "$work/err.log"; exit 1; }
}
expect_error "passes the model's max_position_embeddings 32" \
  "$dstrain" generate --checkpoint "$work/ckpt3" --prompt "The " --max-new-tokens 40
pipeline=(--set pipeline.stages=2 --set gradient_accumulation_steps=2)
tied=(--set dstrain.model.tie_word_embeddings=true)
launcher=("$@")  # the MPI launcher
run() {  # run NAME ARGS...: the trainer at -np 2 with its metrics in NAME.jsonl
  local name=$1; shift
  "${launcher[@]}" -np 2 "$dstrain" "${common[@]}" "$@" --metrics "$work/$name.jsonl" > "$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; exit 1; }
}
run pipe "${pipeline[@]}"
run tied "${tied[@]}"
run tied_pipe "${tied[@]}" "${pipeline[@]}"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    return [json.loads(l)["loss"] for l in open(f"{work}/{name}.jsonl")]
for piped_name, reference_name in (("pipe", "s0"), ("tied_pipe", "tied")):
    piped, reference = losses(piped_name), losses(reference_name)
    assert len(piped) == len(reference) == 6, (piped_name, piped, reference)
    for step, (loss, ref) in enumerate(zip(piped, reference)):
        assert abs(loss - ref) <= 1e-5 * abs(ref), (piped_name, step + 1, loss, ref)
    print(piped_name, "at 2 pipeline stages: the same losses as", reference_name, piped)
assert losses("tied") != losses("s0"), "tie_word_embeddings changed nothing"
PY
echo "llama trainer OK"
