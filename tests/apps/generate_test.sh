#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR
# `dstrain generate` end to end on checkpoints trained for a few steps:
#   - byte tokens (data type text): the prompt echoed first, one seed gives one text twice, another
#     seed another text; --temperature 0 and --top-k 1 (both greedy) give the same text; the rate on
#     stderr;
#   - a SentencePiece model (tests/data/tokenizer/spm.model, tokens made by dstrain tokenize) through
#     dstrain-codec: the same, one seed one text;
#   - errors naming what is wrong: --max-new-tokens past block_size (the value and the limit), a
#     prompt the tokenizer cannot encode.
set -euo pipefail
dstrain=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
spm=$source/tests/data/tokenizer/spm.model
base=(--config "$source/configs/default.json" --set dstrain.model.n_embd=64 --set dstrain.model.block_size=32
      --set scheduler=null --set optimizer.params.lr=0.003 --steps 8)
"$dstrain" "${base[@]}" --set dstrain.data.type=text --set "dstrain.data.path=$source/docs/architecture.md" \
  --save-dir "$work/bytes" > /dev/null
"$dstrain" tokenize --tokenizer "spm:$spm" --input "$source/tests/data/tokenizer/corpus.txt" --out "$work/spm" \
  > "$work/tokenize.log" 2>&1
vocab=$(grep -o '([0-9]* pieces)' "$work/tokenize.log" | tr -dc 0-9)  # the model's size, as tokenize says it
"$dstrain" "${base[@]}" --set dstrain.data.type=tokens --set "dstrain.data.path=$work/spm_train.bin" \
  --set "dstrain.model.vocab_size=$vocab" --save-dir "$work/spm" > /dev/null

fail() { echo "$*"; exit 1; }
gen() { "$dstrain" generate "$@" 2> "$work/stderr"; }
a=$(gen --checkpoint "$work/bytes" --prompt "The engine" --max-new-tokens 20 --seed 1 --top-k 20)
b=$(gen --checkpoint "$work/bytes" --prompt "The engine" --max-new-tokens 20 --seed 1 --top-k 20)
c=$(gen --checkpoint "$work/bytes" --prompt "The engine" --max-new-tokens 20 --seed 2 --top-k 20)
[[ $a == "$b" ]] || fail "seed 1 twice: '$a' vs '$b'"
[[ $a != "$c" ]] || fail "seeds 1 and 2 gave the same text '$a'"
[[ $a == "The engine"* ]] || fail "prompt not echoed first: '$a'"
grep -qE '^generated 20 tokens in [0-9.]+ s: [0-9.]+ tokens/s$' "$work/stderr" || fail "no rate: $(cat "$work/stderr")"
# Without --max-new-tokens: as many as fit, up to 100 (block_size 32, a prompt of 10 bytes: 23).
d=$(gen --checkpoint "$work/bytes" --prompt "The engine")
grep -q '^generated 23 tokens' "$work/stderr" || fail "default length: $(cat "$work/stderr")"
g1=$(gen --checkpoint "$work/bytes" --prompt "The engine" --max-new-tokens 20 --temperature 0)
g2=$(gen --checkpoint "$work/bytes" --prompt "The engine" --max-new-tokens 20 --top-k 1 --seed 9)
[[ $g1 == "$g2" ]] || fail "greedy twice: '$g1' vs '$g2'"

s1=$(gen --checkpoint "$work/spm" --tokenizer "spm:$spm" --prompt "The tokenizer" --max-new-tokens 12 --seed 4)
s2=$(gen --checkpoint "$work/spm" --tokenizer "spm:$spm" --prompt "The tokenizer" --max-new-tokens 12 --seed 4)
[[ $s1 == "$s2" && $s1 == "The tokenizer"* && ${#s1} -gt 14 ]] || fail "spm: '$s1' vs '$s2'"
grep -q '^generated 12 tokens' "$work/stderr" || fail "spm: no rate: $(cat "$work/stderr")"

expect_error() {  # expect_error TEXT COMMAND...: the command fails and says TEXT
  local text=$1; shift
  if "$@" > "$work/err.log" 2>&1; then fail "succeeded: $*"; fi
  grep -qF -- "$text" "$work/err.log" || fail "no '$text' in: $(cat "$work/err.log")"
}
expect_error "--max-new-tokens 30 with a prompt of 4 tokens passes the model's block_size 32: at most 29 new tokens" \
  "$dstrain" generate --checkpoint "$work/bytes" --prompt "abcd" --max-new-tokens 30
expect_error "cannot encode the prompt" "$dstrain" generate --checkpoint "$work/spm" --prompt "漢字" \
  --tokenizer "spm:$source/tests/data/tokenizer/spm_no_fallback.model"
echo "generate OK: '$a' / '$s1'"
