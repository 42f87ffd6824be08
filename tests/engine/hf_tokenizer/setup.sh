#!/usr/bin/env bash
# The hf tokenizer tests' fixture: writes the tokenizer folders (make_files.py, Debian's python3)
# into OUT/files and installs the reference, tokenizers.js from the npm registry, into OUT/npm when
# it is not there yet (a test dependency only: the product never runs node).
# Usage: setup.sh OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$1
version=0.2.0  # @huggingface/tokenizers, pinned: the reference must not move under the tests
rm -rf "$out/files"
/usr/bin/python3 "$here/make_files.py" "$out/files"
installed="$out/npm/node_modules/@huggingface/tokenizers/package.json"
if [ ! -f "$installed" ] || ! grep -q "\"version\": \"$version\"" "$installed"; then
  command -v npm > /dev/null || { echo "npm is missing: apt-get install nodejs npm (scripts/run.sh installs it)"; exit 1; }
  mkdir -p "$out/npm"
  npm install --prefix "$out/npm" --no-audit --no-fund "@huggingface/tokenizers@$version"
fi
