# Every third-party dependency is found here, once. All come from Debian 12 packages
# (see scripts/setup.sh); nothing is downloaded.

find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)

# dstrain's CUDA kernels target Hopper unless the user names architectures (-D or CUDAARCHS). Set
# before LibTorch's config, which enables the CUDA language itself when LibTorch was built with CUDA.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of dstrain's kernels")
endif()

# Debian's TorchConfig prints a warning per missing static helper library; keep it quiet.
find_package(Torch REQUIRED QUIET)

if(DSTRAIN_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# GPU: the CUDA kernels (DSTRAIN_WITH_CUDA) are built when the CUDA toolkit with nvcc and a
# CUDA-enabled LibTorch are present; the NCCL backend when NCCL is present too (nvcc not needed:
# it only calls the library). Never required.
# DSTRAIN_WITH_CUDA is a definition of every target, so that shared sources can hold CUDA-only code
# under #ifdef and the precompiled torch header sees the same definitions as its users.
set(DSTRAIN_WITH_CUDA OFF)
set(DSTRAIN_WITH_NCCL OFF)
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND AND TARGET torch_cuda)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(DSTRAIN_WITH_CUDA ON)
    add_compile_definitions(DSTRAIN_WITH_CUDA)
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TARGET torch_cuda)
  set(DSTRAIN_WITH_NCCL ON)
endif()
message(STATUS "dstrain: CUDA kernels ${DSTRAIN_WITH_CUDA} (arch ${CMAKE_CUDA_ARCHITECTURES}), NCCL backend ${DSTRAIN_WITH_NCCL} (CUDA toolkit ${CUDAToolkit_FOUND}, nccl.h ${NCCL_INCLUDE_DIR})")

# MPI launcher used by the multi-rank tests and the quick start.
find_program(DSTRAIN_MPIEXEC NAMES mpirun mpiexec REQUIRED)
set(DSTRAIN_MPIEXEC_FLAGS --allow-run-as-root --oversubscribe --bind-to none
    --mca btl_vader_single_copy_mechanism none)
