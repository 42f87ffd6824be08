#include "gpu_memory_limit.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

#ifdef DSTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace ds::app {

void apply_gpu_memory_limit(const nlohmann::json& dstrain_block, c10::Device device) {
  const auto it = dstrain_block.find("gpu_memory_limit");
  if (it == dstrain_block.end() || it->is_null()) return;
  [[maybe_unused]] const int64_t limit = parse_memory_size(*it, "dstrain.gpu_memory_limit");  // used in CUDA builds
  if (!device.is_cuda()) {
    log::info("dstrain.gpu_memory_limit ignored: the model runs on the CPU");
    return;
  }
#ifdef DSTRAIN_WITH_CUDA
  // LibTorch sets up its CUDA allocator at the first CUDA tensor; before that it has no device to cap.
  at::empty({1}, at::device(device));
  size_t free_bytes = 0, total_bytes = 0;
  {
    c10::cuda::CUDAGuard on_device(device.index());
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
      throw Error("cannot read the memory of " + device.str()).with_key("dstrain.gpu_memory_limit");
  }
  const auto total = static_cast<int64_t>(total_bytes);
  const double fraction = std::min(1.0, static_cast<double>(limit) / static_cast<double>(total));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
  log::info("dstrain.gpu_memory_limit: ", limit, " bytes of ", total, " on ", device.str(), " (fraction ", fraction,
            ")");
#else
  throw Error("this build has no CUDA allocator to cap (DSTRAIN_WITH_CUDA is off)").with_key("dstrain.gpu_memory_limit");
#endif
}

std::optional<int64_t> gpu_max_allocated(c10::Device device) {
  if (!device.is_cuda()) return std::nullopt;
#ifdef DSTRAIN_WITH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;  // [0]: aggregate
#else
  return std::nullopt;
#endif
}

}  // namespace ds::app
