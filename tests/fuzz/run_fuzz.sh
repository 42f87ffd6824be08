#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/targets, clang) into WORK and runs each for SECONDS on a
# seed corpus: the shipped configs/ for the config and --set targets, a real index.json (a one-step
# checkpoint of the trainer DSTRAIN) for the index target, that checkpoint's safetensors export for
# the safetensors header target, the hf tokenizer tests' tokenizer.json files for the tokenizer.json
# reader, tests/engine/chat_template/templates/ for the chat template interpreter. First every file of
# tests/fuzz/regressions/<target>/ is replayed: what the fuzzer once found stays fixed. A finding
# fails the test and leaves its input in WORK/findings/<target>/ (add it to regressions/ once fixed).
# Usage: run_fuzz.sh SOURCE_DIR WORK DSTRAIN SECONDS. Exits 77 (skipped) without clang's libFuzzer.
set -euo pipefail
src=$1 work=$2 dstrain=$3 seconds=$4
command -v clang++ >/dev/null || { echo "SKIP: clang++ is not installed (apt-get install clang)"; exit 77; }
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > "$work.probe.cpp" 2>/dev/null ||
  { mkdir -p "$(dirname "$work")"; echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > "$work.probe.cpp"; }
if ! clang++ -fsanitize=fuzzer "$work.probe.cpp" -o "$work.probe" 2>/dev/null; then
  rm -f "$work.probe.cpp"; echo "SKIP: clang++ has no libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
fi
rm -f "$work.probe.cpp" "$work.probe"

mkdir -p "$work"
CXX=clang++ cmake -S "$src/tests/fuzz/targets" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$work/build" -j "$(nproc)" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }

# Seeds: the shipped configs (the --set target's seeds are "KEY=VALUE\n" + config).
rm -rf "$work/corpus"; mkdir -p "$work/corpus"/{config,override,index,safetensors,tokenizer_json}
cp "$src"/configs/*.json "$work/corpus/config/"
i=0
for config in "$src"/configs/*.json; do
  for assignment in zero_optimization.stage=3 optimizer.params.lr=1e-3 train_batch_size=auto fp16.enabled=true; do
    { echo "$assignment"; cat "$config"; } > "$work/corpus/override/seed$((i++))"
  done
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 DSTRAIN_LOG_LEVEL=error
"$dstrain" --config "$src/configs/default.json" --steps 1 --save-dir "$work/ckpt" --progress off \
  --set dstrain.model.n_layer=1 > "$work/seed_run.log" 2>&1 || { cat "$work/seed_run.log"; exit 1; }
cp "$work"/ckpt/global_step1/index.json "$work/corpus/index/"
# The safetensors seed: that checkpoint exported, as the target reads it (data size, then the header).
"$dstrain" export --checkpoint "$work/ckpt" --format safetensors --out "$work/hf" > /dev/null
python3 - "$work/hf/model.safetensors" "$work/corpus/safetensors/export" <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
open(sys.argv[2], "wb").write(struct.pack("<Q", len(raw) - 8 - n) + raw[8:8 + n])
PY

# The tokenizer.json seeds: the hf tokenizer tests' folders (GPT-2, Llama 3, Qwen2, Llama 2, Mistral
# layouts), each followed by a NUL and a text to encode.
/usr/bin/python3 "$src/tests/engine/hf_tokenizer/make_files.py" "$work/hf_tokenizers"
for dir in "$work"/hf_tokenizers/*/; do
  { cat "$dir/tokenizer.json"; printf '\0Hello <s>world 123 \xe6\x97\xa5 <|endoftext|>'; } > "$work/corpus/tokenizer_json/$(basename "$dir")"
done

# The chat template seeds: the test suite's templates in the families' manner.
mkdir -p "$work/corpus/chat_template"
cp "$src"/tests/engine/chat_template/templates/*.jinja "$work/corpus/chat_template/"

status=0
for target in config override index safetensors tokenizer_json chat_template; do
  binary="$work/build/fuzz_$target"
  regressions=("$src/tests/fuzz/regressions/$target"/*)
  if [ -e "${regressions[0]}" ]; then
    "$binary" "${regressions[@]}" > "$work/$target.replay.log" 2>&1 ||
      { echo "fuzz_$target: a regression input fails again"; tail -30 "$work/$target.replay.log"; status=1; continue; }
  fi
  mkdir -p "$work/findings/$target"
  if "$binary" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$work/findings/$target/" \
      "$work/corpus/$target" > "$work/$target.log" 2>&1; then
    echo "fuzz_$target: $(grep -o 'Done [0-9]* runs' "$work/$target.log" | tail -1) in ${seconds} s, nothing found"
  else
    echo "fuzz_$target: FOUND a failing input: $(ls "$work/findings/$target")"
    grep -B2 -A25 "ERROR\|escaped\|runtime error" "$work/$target.log" | head -60
    status=1
  fi
done
exit $status
