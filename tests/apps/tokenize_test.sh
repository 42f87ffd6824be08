#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR
# `dstrain tokenize` end to end against tests/data/tokenizer's references (made in Python, README.md
# there): each document opens with the end-of-text id, the last quarter of its ids goes to
# PREFIX_val.bin and the rest to PREFIX_train.bin, in llm.c's format; bad input is named with its
# file and offset; the progress bar appears on a terminal only.
set -uo pipefail
dstrain=$1 source=$2
data=$source/tests/data/tokenizer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }
# int32 number INDEX of FILE's header; uint16 token INDEX of FILE.
header() { od -An -t d4 -j $((4 * $2)) -N 4 "$1" | tr -d ' '; }
token() { od -An -t u2 -j $((1024 + 2 * $2)) -N 2 "$1" | tr -d ' '; }

# check_split NAME EXPECTED.bin PREFIX END_OF_TEXT
check_split() {
  local name=$1 expected=$2 prefix=$3 eot=$4
  local n n_val n_train
  n=$(header "$expected" 2)
  n_val=$((n / 4)) n_train=$((n - n / 4))
  if [ "$(header "${prefix}_train.bin" 0)" = 20240520 ] && [ "$(header "${prefix}_train.bin" 2)" = $((1 + n_train)) ] &&
     [ "$(header "${prefix}_val.bin" 2)" = $((1 + n_val)) ] &&
     [ "$(token "${prefix}_train.bin" 0)" = "$eot" ] && [ "$(token "${prefix}_val.bin" 0)" = "$eot" ] &&
     cmp -s -n $((2 * n_train)) -i 1026:1024 "${prefix}_train.bin" "$expected" &&
     cmp -s -n $((2 * n_val)) -i 1026:$((1024 + 2 * n_train)) "${prefix}_val.bin" "$expected"; then
    ok "$name: $n_train + $n_val ids as the reference's"
  else
    fail "$name: the token files differ from $expected split 3:1"
  fi
}

gpt2_eot=$(grep -o '"<|endoftext|>": [0-9]*' "$data/gpt2/vocab.json" | grep -o '[0-9]*$')
"$dstrain" tokenize --tokenizer "gpt2:$data/gpt2" --input "$data/corpus.txt" --out "$work/gpt2/corpus" \
  --valid-fraction 0.25 > "$work/log" 2>&1 || { fail "gpt2 tokenize:"; cat "$work/log"; }
check_split "gpt2" "$data/expected_gpt2.bin" "$work/gpt2/corpus" "$gpt2_eot"
if grep -q $'\r' "$work/log"; then fail "progress bar written to a file"; else ok "no progress bar off a terminal"; fi

"$dstrain" tokenize --tokenizer "spm:$data/spm.model" --input "$data/corpus.txt" --out "$work/spm" \
  --valid-fraction 0.25 > "$work/log" 2>&1 || { fail "spm tokenize:"; cat "$work/log"; }
# SentencePiece's end-of-text is the model's </s>: whatever it is, both files open with it.
check_split "spm" "$data/expected_spm.bin" "$work/spm" "$(token "$work/spm_train.bin" 0)"

# Two documents: each opens with end-of-text and is split on its own.
"$dstrain" tokenize --tokenizer "gpt2:$data/gpt2" --input "$data/corpus.txt" "$data/corpus.txt" --out "$work/two" \
  --valid-fraction 0.25 > "$work/log" 2>&1
n=$(header "$data/expected_gpt2.bin" 2)
if [ "$(header "$work/two_train.bin" 2)" = $((2 * (1 + n - n / 4))) ] &&
   [ "$(token "$work/two_train.bin" $((1 + n - n / 4)))" = "$gpt2_eot" ]; then
  ok "two documents"
else
  fail "two documents:"; cat "$work/log"
fi

# expect_failure NAME MESSAGE... -- COMMAND...: the command exits non-zero and prints every MESSAGE.
expect_failure() {
  local name=$1 messages=()
  shift
  while [ "$1" != -- ]; do messages+=("$1"); shift; done
  shift
  if "$@" > "$work/out" 2>&1; then fail "$name: exited 0"; return; fi
  for message in "${messages[@]}"; do
    if ! grep -qF -- "$message" "$work/out"; then fail "$name: no '$message' in:"; cat "$work/out"; return; fi
  done
  ok "$name"
}
mkdir -p "$work/broken"
head -c 4000 "$data/gpt2/vocab.json" > "$work/broken/vocab.json"
cp "$data/gpt2/merges.txt" "$work/broken/"
expect_failure "corrupt vocab.json" "not valid JSON" "path=$work/broken/vocab.json" -- \
  "$dstrain" tokenize --tokenizer "gpt2:$work/broken" --input "$data/corpus.txt" --out "$work/x"
head -c 3000 "$data/spm.model" > "$work/broken/spm.model"
expect_failure "corrupt SentencePiece model" "not a SentencePiece model" "path=$work/broken/spm.model" -- \
  "$dstrain" tokenize --tokenizer "spm:$work/broken/spm.model" --input "$data/corpus.txt" --out "$work/x"
printf 'fine text, then \xc3\x28 a broken sequence\n' > "$work/latin1.txt"
expect_failure "bytes that are not UTF-8" "not UTF-8" "path=$work/latin1.txt" "offset=16" -- \
  "$dstrain" tokenize --tokenizer "gpt2:$data/gpt2" --input "$data/corpus.txt" "$work/latin1.txt" --out "$work/x"
printf 'the schedule \xca\x98 runs\n' > "$work/rare.txt"
expect_failure "a character the model cannot encode" "<unk>" "path=$work/rare.txt" "offset=13" -- \
  "$dstrain" tokenize --tokenizer "spm:$data/spm_no_fallback.model" --input "$work/rare.txt" --out "$work/x"
expect_failure "a missing input" "cannot read input" "path=$work/missing.txt" -- \
  "$dstrain" tokenize --tokenizer "gpt2:$data/gpt2" --input "$work/missing.txt" --out "$work/x"
expect_failure "--valid-fraction 1" "--valid-fraction must be in [0, 1)" -- \
  "$dstrain" tokenize --tokenizer "gpt2:$data/gpt2" --input "$data/corpus.txt" --out "$work/x" --valid-fraction 1

# On a terminal (script(1) gives one; -onlcr keeps the terminal from adding its own \r): the bar,
# with its rate and ETA; not with --progress off, NO_COLOR or TERM=dumb.
tokenize="$dstrain tokenize --tokenizer gpt2:$data/gpt2 --input $data/corpus.txt --out $work/tty"
on_terminal() { script -qec "stty -onlcr; $*" /dev/null > "$work/tty.log" 2>&1; }
if on_terminal "TERM=xterm $tokenize" && grep -q $'\r\\[#' "$work/tty.log" && grep -q "MB/s | ETA" "$work/tty.log"; then
  ok "progress bar on a terminal"
else
  fail "no progress bar on a terminal:"; cat -A "$work/tty.log"
fi
for quiet in "TERM=xterm $tokenize --progress off" "TERM=xterm NO_COLOR=1 $tokenize" "TERM=dumb $tokenize"; do
  if on_terminal "$quiet" && ! grep -q $'\r' "$work/tty.log"; then ok "no bar: ${quiet/"$tokenize"/tokenize}"; else fail "a bar: ${quiet/"$tokenize"/tokenize}"; fi
done
exit $((failures > 0))
