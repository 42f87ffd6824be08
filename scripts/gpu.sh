#!/usr/bin/env bash
# dstrain on a CUDA machine that has PyTorch (with its LibTorch) and NCCL from pip but none of our
# Debian dependencies and no network (the device recipe in docs/gpu.md):
#   scripts/gpu.sh fetch    here, on Debian 12: download the Debian packages into .gpu/debs
#   scripts/gpu.sh build    there: unpack .gpu/debs into a prefix of their own, build into build-gpu/
#   scripts/gpu.sh test     there: the whole CTest suite of build-gpu/ (CPU tests and tests/gpu)
#   scripts/gpu.sh env      print the environment (source it: eval "$(scripts/gpu.sh env)")
# The packages are unpacked with dpkg -x under $GPU_PREFIX (default /tmp/dstrain-deps), never over /.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEBS=$ROOT/.gpu/debs
PREFIX=${GPU_PREFIX:-/tmp/dstrain-deps}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
PACKAGES=(openmpi-bin libopenmpi-dev libopenmpi3 openmpi-common libevent-core-2.1-7 libevent-pthreads-2.1-7
          libevent-2.1-7 libfabric1 libhwloc15 libhwloc-plugins libibverbs1 ibverbs-providers libmunge2
          libnl-3-200 libnl-route-3-200 libnuma1 libpciaccess0 libpmix2 libpsm-infinipath1 libpsm2-2
          librdmacm1 libucx0 libltdl7 libxnvctrl0 libgfortran5 liburing-dev liburing2 libcli11-dev
          nlohmann-json3-dev catch2 pkgconf pkgconf-bin libpkgconf3 pkg-config
          libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
          libsentencepiece0 libsentencepiece-dev sentencepiece)

environment() {
  local multiarch=$PREFIX/usr/lib/x86_64-linux-gnu
  # Debian's Open MPI is relocatable through OPAL_PREFIX (wrappers, orted and plugins follow it).
  echo "export OPAL_PREFIX=$PREFIX/usr"
  echo "export PATH=$PREFIX/usr/bin:/usr/local/cuda/bin:\$PATH"
  echo "export LD_LIBRARY_PATH=$multiarch:$multiarch/openmpi/lib:\${LD_LIBRARY_PATH:-}"
  echo "export PKG_CONFIG_PATH=$multiarch/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PREFIX"
  # The tests' Python references need torch and numpy: there that is PATH's python3, not /usr/bin's.
  echo "export DSTRAIN_PYTHON=$(command -v python3)"
  echo "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_pcompress_base_silence_warning=1"
  # For CMake runs of outside projects too (the installed-package test builds examples/ with it).
  echo "export CMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'):$PREFIX/usr"
}

nccl_dir() {
  python3 - <<'PY'
import glob, os, nvidia
for root in nvidia.__path__:
    for header in glob.glob(os.path.join(root, "**", "nccl.h"), recursive=True):
        print(os.path.dirname(os.path.dirname(header)))
        raise SystemExit
PY
}

case "${1:-}" in
  fetch)
    mkdir -p "$DEBS" && cd "$DEBS" && apt-get download "${PACKAGES[@]}" ;;
  env)
    environment ;;
  build)
    mkdir -p "$PREFIX"
    for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$PREFIX"; done
    # The names Debian's alternatives would give, so that CMake's FindMPI (ours and an outside
    # project's) and mpirun users find them on PATH.
    for tool in mpirun mpiexec mpicc mpicxx; do ln -sf "$tool.openmpi" "$PREFIX/usr/bin/$tool"; done
    eval "$(environment)"
    nccl=$(nccl_dir)
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DNCCL_INCLUDE_DIR="$nccl/include" -DNCCL_LIBRARY="$(ls "$nccl"/lib/libnccl.so* | head -1)"
    cmake --build "$BUILD_DIR" -- -k 0 ;;
  test)
    eval "$(environment)"
    # Two threads a test process, half as many tests as cores: bench/gpu/device_check.sh says why.
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(($(nproc) / 2))" ;;
  *)
    sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
