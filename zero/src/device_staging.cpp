#include "device_staging.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#ifdef DSTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ds::zero {
namespace {

// Elements per window coming down: 16 MB of pinned memory, enough for the link's full bandwidth
// and small beside a host's memory (the shard itself may not fit there twice).
constexpr int64_t kHostWindow = int64_t{1} << 22;

at::Tensor pinned_floats(int64_t numel) {
  return at::empty({numel}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
}

}  // namespace

#ifdef DSTRAIN_WITH_CUDA
struct DeviceStaging::SideStream {
  explicit SideStream(at::Device device) : stream(c10::cuda::getStreamFromPool(false, device.index())) {}
  c10::cuda::CUDAStream stream;
};
#else
struct DeviceStaging::SideStream {};
#endif

DeviceStaging::DeviceStaging(at::Device device) : device_(device) {
#ifdef DSTRAIN_WITH_CUDA
  if (device_.is_cuda()) side_ = std::make_unique<SideStream>(device_);
#endif
}

DeviceStaging::~DeviceStaging() = default;

at::Tensor DeviceStaging::to_device(const float* host, int64_t numel) {
  // Freed on return, the pinned block is handed out again only once its copy has run: LibTorch's
  // host allocator records an event on the copying stream for every non-blocking copy.
  at::Tensor pinned = pinned_floats(numel);
  std::memcpy(pinned.data_ptr<float>(), host, numel * sizeof(float));
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device_);
#ifdef DSTRAIN_WITH_CUDA
  if (side_) {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    at::Tensor chunk;
    {
      // Allocated on the side stream: a block freed by the computation, which may still be read by
      // kernels queued before this copy, is never reused for it.
      c10::cuda::CUDAStreamGuard guard(side_->stream);
      chunk = at::empty({numel}, options);
      chunk.copy_(pinned, /*non_blocking=*/true);
    }
    at::cuda::CUDAEvent copied;
    copied.record(side_->stream);
    copied.block(compute);
    // Read on the current stream (the all-gather): its block is not reused before that is done.
    c10::cuda::CUDACachingAllocator::recordStream(chunk.storage().data_ptr(), compute);
    return chunk;
  }
#endif
  at::Tensor chunk = at::empty({numel}, options);
  chunk.copy_(pinned, /*non_blocking=*/true);
  return chunk;
}

void DeviceStaging::to_host(const at::Tensor& values,
                            const std::function<void(const float*, int64_t, int64_t)>& take) {
  const at::Tensor flat = values.reshape({-1});
  const int64_t numel = flat.numel();
  const at::Tensor pinned = pinned_floats(std::min(numel, kHostWindow));
  for (int64_t begin = 0; begin < numel; begin += kHostWindow) {
    const int64_t count = std::min(kHostWindow, numel - begin);
    at::Tensor window = pinned.narrow(0, 0, count);
    window.copy_(flat.narrow(0, begin, count));  // waits for the copy: `take` reads the window next
    take(window.data_ptr<float>(), begin, count);
  }
}

}  // namespace ds::zero
