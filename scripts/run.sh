#!/usr/bin/env bash
# dstrain's one entry point for a fresh Debian 12 machine (as root, or with sudo):
#   scripts/run.sh train   install what is missing, build, run the main job (mpirun -np 2 dstrain)
#   scripts/run.sh test    install what is missing, build, run the whole test suite
#   scripts/run.sh build   install what is missing and build
# BUILD_DIR (default build/) and JOBS (default: number of cores) may be set in the environment.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}
PACKAGES=(build-essential cmake ninja-build pkg-config libtorch-dev libopenblas0-pthread
          libopenmpi-dev openmpi-bin liburing-dev libcli11-dev nlohmann-json3-dev catch2 fio iproute2)

install_missing() {
  local missing=()
  for pkg in "${PACKAGES[@]}"; do
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

build() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  local start=$SECONDS
  cmake --build "$BUILD_DIR" -j "$JOBS"
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

case "${1:-}" in
  build)
    install_missing; build ;;
  train)
    install_missing; build
    shift
    mpirun --oversubscribe --bind-to none -np 2 "$BUILD_DIR/apps/dstrain/dstrain" \
      --config "$ROOT/configs/default.json" "$@" ;;
  test)
    install_missing; build
    start=$SECONDS
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    echo "setup: test suite finished in $((SECONDS - start)) s" ;;
  *)
    sed -n '2,6p' "$0" >&2; exit 2 ;;
esac
