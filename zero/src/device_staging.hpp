// DeviceStaging: carries swapped parameter chunks between host memory (the ParamSwapper's buffers)
// and a model on a GPU, through pinned memory, for offload_param on NVMe.
//
//   at::Tensor chunk = staging.to_device(swapper.acquire(i), numel);  // the all-gather's input
//   swapper.release(i);                                              // free at once: copied out
//   staging.to_host(device_values, [&](const float* host, int64_t offset, int64_t count) {...});
//
// A chunk goes up through a pinned buffer of LibTorch's host allocator with a non-blocking copy, on
// a side stream (with DSTRAIN_WITH_CUDA) so that a prefetched chunk's copy runs beside the
// computation already queued; the current stream waits for the copy before anything queued after
// it (the all-gather) reads the chunk. New values come down a window at a time into pinned memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace ds::zero {

class DeviceStaging {
 public:
  // device: the model's (a GPU); chunks are fp32.
  explicit DeviceStaging(at::Device device);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // A new device tensor of `numel` fp32 values copied from `host`, which may be reused as soon as
  // this returns.
  at::Tensor to_device(const float* host, int64_t numel);
  // Calls take(host values, offset into `values`, count) for consecutive windows of `values` (a
  // device tensor, any floating dtype), each converted to fp32 and copied to pinned host memory.
  void to_host(const at::Tensor& values, const std::function<void(const float*, int64_t, int64_t)>& take);

 private:
  struct SideStream;
  at::Device device_;
  std::unique_ptr<SideStream> side_;  // null without DSTRAIN_WITH_CUDA: the current stream copies
};

}  // namespace ds::zero
