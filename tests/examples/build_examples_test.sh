#!/usr/bin/env bash
# Installs the dstrain build tree into a fresh prefix, builds examples/embed and
# examples/custom_trainer against it with find_package(dstrain), and runs both under mpirun -np 2.
# Args: BUILD_DIR SOURCE_DIR MPIEXEC FLAGS...
set -euo pipefail
build=$1 source=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
for example in embed custom_trainer; do
  cmake -S "$source/examples/$example" -B "$work/$example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
  cmake --build "$work/$example" > /dev/null
done
"$@" -np 2 "$work/embed/embed" "$source/configs/default.json"
"$@" -np 2 "$work/custom_trainer/custom_trainer" "$source/examples/custom_trainer/config.json"
