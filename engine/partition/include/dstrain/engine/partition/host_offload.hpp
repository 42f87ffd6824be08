// HostOffload: the host side of ZeRO-Offload for a model on a GPU (offload_optimizer.device "cpu").
//
// This rank's fp32 gradient shard lives in host memory (pinned when offload_optimizer.pin_memory),
// filled as each reduced bucket is copied device-to-host on a side stream while backward goes on;
// the optimizer's new weights go back host-to-device on the same stream, a piece at a time, while
// the CPU steps the next piece. On CPU tensors every copy is a plain copy_ (the device-independent
// part, which a CPU test exercises); the stream handling is CUDA-only (DSTRAIN_WITH_CUDA).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ds {

class HostOffload {
 public:
  // shard_numel: this rank's shard; device: the model's. Pins host buffers only when asked and the
  // model is on a GPU (pinning needs a CUDA LibTorch, and a CPU model has nothing to copy).
  HostOffload(int64_t shard_numel, at::Device device, bool pin_memory);
  ~HostOffload();
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;

  // A host tensor of `numel` elements, pinned where this offload pins.
  at::Tensor host_empty(int64_t numel, at::ScalarType dtype) const;

  // The reducer's shard sink: this rank's reduced values of shard elements
  // [shard_offset, + values.numel()) on the model's device replace (overwrite) or add to the host
  // shard's range. Returns at once on a GPU: the copy runs on the side stream, after the work that
  // produced `values`, and their memory is kept from reuse until it is done.
  void take_gradients(const at::Tensor& values, int64_t shard_offset, bool overwrite);
  // Waits for every device-to-host copy, adds what was staged, and returns the host shard.
  const at::Tensor& gradients();

  // dst (on the device) = src (on the host, pinned where this offload pins), on the side stream
  // after the device's queued work (which may still read dst); src may be freed at once.
  void copy_to_device(const at::Tensor& dst, const at::Tensor& src);
  // The device's compute stream waits for the copies to the device (the next forward reads them).
  void finish_copies_to_device();

  // Host bytes held: the gradient shard and the staged additions.
  int64_t bytes() const;

 private:
  struct Staged {
    at::Tensor values;  // host copy of a reduction that adds to the shard
    int64_t shard_offset;
  };
  struct Streams;  // the side stream and its events (CUDA only)

  void wait_side_stream();

  at::Device device_;
  bool pinned_;
  at::Tensor grads_;            // fp32 host gradient shard
  std::vector<Staged> staged_;  // additions waiting for their copies
  bool copies_to_device_started_ = false;
  std::unique_ptr<Streams> streams_;
};

}  // namespace ds
