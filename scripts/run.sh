#!/usr/bin/env bash
# dstrain's one entry point for a fresh Debian 12 machine (as root, or with sudo):
#   scripts/run.sh train   install what is missing, build, keep and tokenize the prose of the Python and
#                          Linux docs once (build/data/), train a small GPT on it (mpirun -np 2
#                          dstrain, configs/first_run.json);
#                          with --config FILE, that config instead (e.g. configs/hf_zero3_auto.json)
#   scripts/run.sh test    install what is missing, build, run the whole test suite
#   scripts/run.sh build   install what is missing and build everything (train builds the trainer alone)
# BUILD_DIR (default build/) and JOBS (default: number of cores) may be set in the environment.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}
PACKAGES=(build-essential cmake ninja-build pkg-config libtorch-dev libopenblas0-pthread
          libopenmpi-dev openmpi-bin liburing-dev libcli11-dev nlohmann-json3-dev catch2 fio iproute2
          libpcre2-dev libicu-dev libsentencepiece-dev sentencepiece clang libclang-rt-14-dev
          chromium python3-torch python3-numpy python3-jinja2)
# chromium: the headless browser that renders `dstrain plot` pages in the tests; python3-torch and
# python3-numpy: the tests' Python references (a PyTorch GPT-2 that loads exported weights, ...);
# python3-jinja2: the chat template tests' reference (jinja2 set up as Hugging Face sets it up).
# The first run's corpus, installed by `train` only: the running English (12.9 MB once its markup
# and code are gone) of the reStructuredText sources of the Python 3.11 and the Linux 6.1
# documentation (PSF licence, GPL-2.0; docs/getting-started.md says why these).
CORPUS_PACKAGES=(python3.11-doc linux-doc-6.1)
# nodejs and npm: the hf tokenizer tests' reference, tokenizers.js, which the test fixture installs
# from the npm registry into the build folder. A nodejs that brings its own npm (NodeSource's) stays.
command -v npm > /dev/null || PACKAGES+=(nodejs npm)
CORPORA=(/usr/share/doc/python3.11/html/_sources /usr/share/doc/linux-doc-6.1/html/_sources)

# The packages named, or PACKAGES.
install_missing() {
  local missing=() wanted=("$@")
  [ $# -eq 0 ] && wanted=("${PACKAGES[@]}")
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "setup: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Configures $BUILD_DIR once and builds the targets named (the trainer needs only `dstrain`, which
# brings dstrain-tokenize and dstrain-codec), or everything: tests, benchmarks, sanitizer builds.
build() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  local start=$SECONDS targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
  echo "setup: build finished in $((SECONDS - start)) s"
}

# mpirun refuses root unless told; these make the quick start work in containers too.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Large messages between ranks on a node go by single copy (CMA, process_vm_readv), which needs
# ptrace rights between the ranks. Where a container filters system calls (seccomp) or yama
# restricts ptrace for a non-root user, fall back to OpenMPI's copy-in/copy-out, which works
# everywhere but is several times slower (docs/performance.md).
if grep -q '^Seccomp:[[:space:]]*[12]' /proc/self/status 2>/dev/null ||
   { [ "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)" != 0 ] && [ "$(id -u)" -ne 0 ]; }; then
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
fi

# The first run's data, made once and kept in $BUILD_DIR/data: the corpus's prose, one paragraph a
# line, one file per source file (scripts/first_run_prose.awk; translations left out); a 4096-piece
# SentencePiece model learned by spm_train on it (no dummy prefix: a paragraph's first word carries no
# word-start mark, so generated text after a newline starts without a space); then the prose as
# llm.c token files (the last 5% of each file for validation). The validation file is written last:
# its presence means all is there.
prepare_first_run_data() {
  local data=$BUILD_DIR/data
  local prose=$data/first_run_prose
  [ -f "$data/first_run_val.bin" ] && return
  install_missing "${CORPUS_PACKAGES[@]}"
  echo "setup: keeping the prose of the Python and Linux documentation (once; about half a minute)"
  rm -rf "$prose"
  mkdir -p "$prose"
  local corpus name doc
  for corpus in "${CORPORA[@]}"; do
    name=$(basename "$(dirname "$(dirname "$corpus")")")   # python3.11, linux-doc-6.1
    while IFS= read -r doc; do
      awk -f "$ROOT/scripts/first_run_prose.awk" "$corpus/$doc" > "$prose/$name-${doc//\//_}"
    done < <(cd "$corpus" && find . -name '*.rst.txt' -not -path './translations/*' -printf '%P\n' | LC_ALL=C sort)
  done
  find "$prose" -type f -empty -delete
  local inputs
  mapfile -t inputs < <(find "$prose" -type f | LC_ALL=C sort)
  cat "${inputs[@]}" > "$data/first_run_prose.txt"
  echo "setup: learning a SentencePiece vocabulary on it ($(du -sh "$data/first_run_prose.txt" | cut -f1), ${#inputs[@]} files)"
  spm_train --input="$data/first_run_prose.txt" --model_prefix="$data/first_run" --vocab_size=4096 \
    --model_type=unigram --normalization_rule_name=identity --byte_fallback=true --add_dummy_prefix=false \
    --input_sentence_size=200000 --shuffle_input_sentence=true --num_threads="$JOBS" --minloglevel=1
  rm "$data/first_run_prose.txt"
  "$BUILD_DIR/apps/dstrain/dstrain" tokenize --tokenizer "spm:$data/first_run.model" --input "${inputs[@]}" \
    --out "$data/first_run" --valid-fraction 0.05
}

case "${1:-}" in
  build)
    install_missing; build ;;
  train)
    install_missing; build dstrain
    shift
    # A --config of the caller's (e.g. configs/hf_zero3_auto.json) replaces the first run's config and data.
    first_run=(--config "$ROOT/configs/first_run.json" --set dstrain.data.path="$BUILD_DIR/data/first_run_train.bin"
               --set dstrain.data.valid="$BUILD_DIR/data/first_run_val.bin")
    for arg in "$@"; do
      case $arg in -c|--config|--config=*) first_run=() ;; esac
    done
    [ ${#first_run[@]} -gt 0 ] && prepare_first_run_data
    mpirun --oversubscribe --bind-to none -np 2 "$BUILD_DIR/apps/dstrain/dstrain" "${first_run[@]}" "$@" ;;
  test)
    install_missing; build
    start=$SECONDS
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    echo "setup: test suite finished in $((SECONDS - start)) s" ;;
  *)
    sed -n '2,8p' "$0" >&2; exit 2 ;;
esac
