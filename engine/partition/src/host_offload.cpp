#include "dstrain/engine/partition/host_offload.hpp"

#include <ATen/ATen.h>

#ifdef DSTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ds {

#ifdef DSTRAIN_WITH_CUDA
// One side stream carries both directions, so each step's copies to the device are ordered after
// the previous backward's copies to the host, and one synchronize waits for all of them.
struct HostOffload::Streams {
  explicit Streams(at::Device device)
      : side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())), index(device.index()) {}
  c10::cuda::CUDAStream compute() const { return c10::cuda::getCurrentCUDAStream(index); }
  // The side stream goes on only after what the compute stream has queued so far.
  void side_after_compute() const {
    at::cuda::CUDAEvent queued;
    queued.record(compute());
    queued.block(side);
  }
  c10::cuda::CUDAStream side;
  c10::DeviceIndex index;
};
#else
struct HostOffload::Streams {};
#endif

HostOffload::HostOffload(int64_t shard_numel, at::Device device, bool pin_memory)
    : device_(device), pinned_(pin_memory && device.is_cuda()) {
#ifdef DSTRAIN_WITH_CUDA
  if (device.is_cuda()) streams_ = std::make_unique<Streams>(device);
#endif
  grads_ = host_empty(shard_numel, at::kFloat);
}

HostOffload::~HostOffload() = default;

at::Tensor HostOffload::host_empty(int64_t numel, at::ScalarType dtype) const {
  return at::empty({numel}, at::dtype(dtype).pinned_memory(pinned_));
}

void HostOffload::take_gradients(const at::Tensor& values, int64_t shard_offset, bool overwrite) {
  at::Tensor range = grads_.narrow(0, shard_offset, values.numel());
  // An overwrite lands in the shard itself; an addition waits in a staging copy until gradients().
  at::Tensor dst = overwrite ? range : host_empty(values.numel(), at::kFloat);
  if (!overwrite) staged_.push_back({dst, shard_offset});
#ifdef DSTRAIN_WITH_CUDA
  if (streams_ && values.is_cuda()) {
    streams_->side_after_compute();
    {
      c10::cuda::CUDAStreamGuard guard(streams_->side);
      // Asynchronous into pinned memory only: LibTorch's asynchronous copy records the copy on the
      // host block, which pageable memory is not.
      dst.copy_(values, /*non_blocking=*/pinned_);
    }
    // The reducer frees (or, on one partition, hands the allocator back) the bucket once this
    // returns: the allocator then keeps it until the side stream's copy is done.
    c10::cuda::CUDACachingAllocator::recordStream(values.storage().data_ptr(), streams_->side);
    return;
  }
#endif
  dst.copy_(values);
}

void HostOffload::wait_side_stream() {
#ifdef DSTRAIN_WITH_CUDA
  if (streams_) streams_->side.synchronize();
#endif
}

const at::Tensor& HostOffload::gradients() {
  wait_side_stream();
  for (const Staged& add : staged_) grads_.narrow(0, add.shard_offset, add.values.numel()).add_(add.values);
  staged_.clear();
  return grads_;
}

void HostOffload::copy_to_device(const at::Tensor& dst, const at::Tensor& src) {
#ifdef DSTRAIN_WITH_CUDA
  if (streams_ && dst.is_cuda()) {
    // Once per step: the compute stream's queued work (the backward's last kernels) may still read
    // the parameters these copies overwrite.
    if (!copies_to_device_started_) streams_->side_after_compute();
    copies_to_device_started_ = true;
    c10::cuda::CUDAStreamGuard guard(streams_->side);
    // From pinned memory asynchronous; LibTorch records the copy on the pinned block, so the
    // caller may free src at once. From pageable memory the copy is synchronous.
    dst.copy_(src, /*non_blocking=*/pinned_);
    return;
  }
#endif
  dst.copy_(src);
}

void HostOffload::finish_copies_to_device() {
  copies_to_device_started_ = false;
#ifdef DSTRAIN_WITH_CUDA
  if (!streams_) return;
  at::cuda::CUDAEvent copied;
  copied.record(streams_->side);
  copied.block(streams_->compute());
#endif
}

int64_t HostOffload::bytes() const {
  int64_t total = grads_.nbytes();
  for (const Staged& add : staged_) total += add.values.nbytes();
  return total;
}

}  // namespace ds
