#!/usr/bin/env bash
# Installs the dstrain build tree into a fresh prefix, builds examples/embed against it with
# find_package(dstrain), and runs it under mpirun -np 2. Args: BUILD_DIR SOURCE_DIR MPIEXEC FLAGS...
set -euo pipefail
build=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
cmake -S "$source/examples/embed" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/build"
"$@" -np 2 "$work/build/embed" "$source/configs/default.json"
