# Every third-party dependency is found here, once. All come from Debian 12 packages
# (see scripts/setup.sh); nothing is downloaded.

find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)

# Debian's TorchConfig prints a warning per missing static helper library; keep it quiet.
find_package(Torch REQUIRED QUIET)

if(DSTRAIN_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# GPU: built only when CUDA, NCCL and a CUDA-enabled LibTorch are all present. Never required.
set(DSTRAIN_WITH_NCCL OFF)
find_package(CUDAToolkit QUIET)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TARGET torch_cuda)
  set(DSTRAIN_WITH_NCCL ON)
endif()
message(STATUS "dstrain: NCCL backend ${DSTRAIN_WITH_NCCL} (CUDA ${CUDAToolkit_FOUND}, nccl.h ${NCCL_INCLUDE_DIR})")

# MPI launcher used by the multi-rank tests and the quick start.
find_program(DSTRAIN_MPIEXEC NAMES mpirun mpiexec REQUIRED)
set(DSTRAIN_MPIEXEC_FLAGS --allow-run-as-root --oversubscribe --bind-to none
    --mca btl_vader_single_copy_mechanism none)
