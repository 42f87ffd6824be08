#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# `dstrain eval` and `dstrain generate` on a pipeline's checkpoint (-np 2, 2 stages, saved as
# stage0/ and stage1/), for a GPT and a Llama. The reference is a data-parallel run holding the same
# weights: the pipeline's checkpoint exported to safetensors, read back by dstrain.model.init_from
# with lr 0 and no weight decay (one step leaves the weights as they are), evaluated by the
# trainer itself at that step:
#   - `dstrain eval` on the pipeline prints the data-parallel trainer's val_loss (to its 6 places)
#     and the same line as `dstrain eval` on the data-parallel checkpoint;
#   - `dstrain generate` with a seed gives the same bytes from both checkpoints, for two seeds;
#   - errors naming the folder: a stage folder missing, one stage's folder passed alone, a tag whose
#     stages were saved at different steps.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=(--set dstrain.data.type=text --set "dstrain.data.path=$source/docs/architecture.md"
      --set "dstrain.data.valid=$source/README.md" --set dstrain.eval_iters=3 --set train_micro_batch_size_per_gpu=4
      --set train_batch_size=null --set scheduler=null --progress off)
gpt=(--config "$source/configs/pipeline.json" --set dstrain.model.n_embd=64 --set dstrain.model.n_layer=2
     --set dstrain.model.block_size=32 --set dstrain.model.vocab_size=256)
llama=(--config "$source/configs/llama_tiny.json" --set pipeline.stages=2 --set dstrain.model.vocab_size=256
       --set dstrain.model.hidden_size=64 --set dstrain.model.intermediate_size=96
       --set dstrain.model.num_hidden_layers=2 --set dstrain.model.max_position_embeddings=32)
fail() { echo "$*"; exit 1; }
close() {  # close A B: equal within the 6 places `dstrain eval` prints
  python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 2e-6 * abs(b) + 1e-6)" "$1" "$2"
}

for model in gpt llama; do
  declare -n flags=$model
  "$@" -np 2 "$dstrain" "${flags[@]}" "${data[@]}" --set gradient_accumulation_steps=2 --set optimizer.params.lr=0.003 \
    --steps 4 --save-interval 2 --save-dir "$work/$model-pipe" > "$work/$model-pipe.log" 2>&1 ||
    { cat "$work/$model-pipe.log"; exit 1; }
  [[ -d $work/$model-pipe/stage1/global_step4 ]] || fail "$model: no stage1/global_step4 in $(ls -R "$work/$model-pipe")"
  "$dstrain" export --checkpoint "$work/$model-pipe" --format safetensors --out "$work/$model-hf" > /dev/null
  "$@" -np 1 "$dstrain" "${flags[@]}" "${data[@]}" --set pipeline=null --set "dstrain.model.init_from=$work/$model-hf" \
    --set gradient_accumulation_steps=1 --set optimizer.params.lr=0 --set optimizer.params.weight_decay=0 \
    --set dstrain.eval_interval=1 --steps 1 --save-dir "$work/$model-dp" --metrics "$work/$model-dp.jsonl" \
    > "$work/$model-dp.log" 2>&1 || { cat "$work/$model-dp.log"; exit 1; }
  trained=$(python3 -c "import json, sys; print(json.loads(open(sys.argv[1]).readline())['val_loss'])" "$work/$model-dp.jsonl")
  pipe=$("$dstrain" eval --checkpoint "$work/$model-pipe")
  dp=$("$dstrain" eval --checkpoint "$work/$model-dp")
  close "$pipe" "$trained" || fail "$model: dstrain eval on the pipeline printed $pipe, the data-parallel trainer logged $trained"
  [[ $pipe == "$dp" ]] || fail "$model: dstrain eval printed $pipe on the pipeline, $dp on the data-parallel checkpoint"
  for seed in 1 2; do
    "$dstrain" generate --checkpoint "$work/$model-pipe" --prompt "The engine" --max-new-tokens 16 --seed $seed \
      --top-k 20 > "$work/$model-pipe.$seed.txt" 2> /dev/null
    "$dstrain" generate --checkpoint "$work/$model-dp" --prompt "The engine" --max-new-tokens 16 --seed $seed \
      --top-k 20 > "$work/$model-dp.$seed.txt" 2> /dev/null
    cmp -s "$work/$model-pipe.$seed.txt" "$work/$model-dp.$seed.txt" ||
      fail "$model seed $seed: the pipeline's text '$(cat "$work/$model-pipe.$seed.txt")', the data-parallel one's '$(cat "$work/$model-dp.$seed.txt")'"
  done
  cmp -s "$work/$model-pipe.1.txt" "$work/$model-pipe.2.txt" && fail "$model: seeds 1 and 2 gave the same text"
  echo "$model OK: eval $pipe (trainer $trained)"
done

expect_error() {  # expect_error TEXT COMMAND...: the command fails and says TEXT
  local text=$1; shift
  if "$@" > "$work/err.log" 2>&1; then fail "succeeded: $*"; fi
  grep -qF -- "$text" "$work/err.log" || fail "no '$text' in: $(cat "$work/err.log")"
}
cp -r "$work/gpt-pipe" "$work/missing"
rm -r "$work/missing/stage1"
expect_error "stage 1 is missing [path=$work/missing/stage1" "$dstrain" eval --checkpoint "$work/missing"
expect_error "stage 1 is missing [path=$work/missing/stage1" "$dstrain" generate --checkpoint "$work/missing" --prompt ab
expect_error "one stage of a 2-stage pipeline's checkpoint" "$dstrain" eval --checkpoint "$work/gpt-pipe/stage0"
# Stage 1's global_step2 replaced by its step 4: one tag, two steps.
cp -r "$work/gpt-pipe" "$work/skewed"
rm -r "$work/skewed/stage1/global_step2"
cp -r "$work/skewed/stage1/global_step4" "$work/skewed/stage1/global_step2"
expect_error "stage 1 was saved at step 4, stage 0 ($work/skewed/stage0/global_step2) at step 2" \
  "$dstrain" eval --checkpoint "$work/skewed" --tag global_step2
expect_error "[path=$work/skewed/stage1/global_step2]" "$dstrain" generate --checkpoint "$work/skewed" --tag global_step2 --prompt ab
echo "errors OK"
